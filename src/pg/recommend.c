/*
 * recommend.c: gpumf_recommend and its variants.
 *
 * Item factors are read once per backend and model version and kept in
 * memory; each call reads the model's catalog row (to notice retraining),
 * the user's row by primary key, and scores every item: an int8 first pass
 * with error bounds, then float32 rescoring of the few items that can reach
 * the top n (gm_topk_dot), so the result is the exact float32 top n.
 */
#include "gpumf_pg.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/uuid.h"
#include "utils/varlena.h"
#include "utils/regproc.h"
#include "utils/datum.h"
#include "parser/parse_type.h"


PG_FUNCTION_INFO_V1(gpumf_recommend);

#define MODEL_NAME_LEN 256

/* One served model version, in backend memory. */
typedef struct ServedModel
{
	char		name[MODEL_NAME_LEN];	/* hash key */
	int64		id;
	int32		version;
	int			k;
	int32		n_items;
	Oid			user_type;
	Oid			item_type;
	Oid			user_rel;
	Oid			item_rel;
	MemoryContext cxt;
	float	   *Y;				/* n_items x k */
	Datum	   *item_keys;		/* in item_type */
	gm_qmat		Q;				/* int8 copy of Y for the first pass */
	float	   *scratch;		/* 2 * n_items */
	SPIPlanPtr	user_plan;		/* SELECT factors, seen FROM users WHERE key = $1 */
} ServedModel;

static HTAB *served = NULL;
static SPIPlanPtr catalog_plan = NULL;

static Oid
type_from_name(const char *name)
{
	return typenameTypeId(NULL, typeStringToTypeName(name));
}

static Oid
rel_from_name(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(qname)),
							NoLock, true);
}

static void
served_release(ServedModel *m)
{
	if (m->cxt)
		MemoryContextDelete(m->cxt);
	gm_qmat_free(&m->Q);
	if (m->user_plan)
		SPI_freeplan(m->user_plan);
	m->cxt = NULL;
	m->user_plan = NULL;
	m->id = -1;
}

/* Lock a factor table for reading; false when it was dropped meanwhile. */
static bool
lock_table(Oid relid)
{
	if (!OidIsValid(relid))
		return false;
	LockRelationOid(relid, AccessShareLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		UnlockRelationOid(relid, AccessShareLock);
		return false;
	}
	return true;
}

static void
check_read(Oid relid, const char *model)
{
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for model \"%s\"", model),
				 errhint("The role that trained the model can grant SELECT on its factor tables (gpumf.models.user_table, item_table).")));
}

/* Load item factors and keys of the model's current version. */
static void
load_items(ServedModel *m, const char *item_table, const char *user_table)
{
	StringInfoData q;
	int			rc;
	MemoryContext old;
	Oid			ptype[1];

	served_release(m);
	m->cxt = AllocSetContextCreate(TopMemoryContext, "gpumf served model",
								   ALLOCSET_DEFAULT_SIZES);
	initStringInfo(&q);
	appendStringInfo(&q, "SELECT idx, key, factors FROM %s ORDER BY idx", item_table);
	rc = SPI_execute(q.data, false, 0);	/* a fresh snapshot: see a just-committed version */
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading %s failed", item_table);
	old = MemoryContextSwitchTo(m->cxt);
	m->n_items = (int32) SPI_processed;
	m->Y = MemoryContextAllocHuge(m->cxt, sizeof(float) * (size_t) m->n_items * m->k);
	m->scratch = MemoryContextAllocHuge(m->cxt, sizeof(float) * 2 * (size_t) (m->n_items > 0 ? m->n_items : 1));
	m->item_keys = MemoryContextAllocHuge(m->cxt, sizeof(Datum) * (size_t) (m->n_items > 0 ? m->n_items : 1));
	{
		int16		typlen;
		bool		typbyval;

		get_typlenbyval(m->item_type, &typlen, &typbyval);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			HeapTuple	tup = SPI_tuptable->vals[r];
			bool		isnull;
			Datum		key = SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull);
			ArrayType  *arr = DatumGetArrayTypeP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull));

			if (DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)) != (int32) r ||
				ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != m->k || ARR_HASNULL(arr))
				elog(ERROR, "gpumf: factor table %s is damaged at row " UINT64_FORMAT, item_table, r);
			memcpy(m->Y + r * m->k, ARR_DATA_PTR(arr), sizeof(float) * m->k);
			m->item_keys[r] = datumCopy(key, typbyval, typlen);
		}
	}
	MemoryContextSwitchTo(old);
	if (gm_qmat_build(m->Y, m->n_items, m->k, &m->Q) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory loading model")));
	resetStringInfo(&q);
	appendStringInfo(&q, "SELECT factors, seen FROM %s WHERE key = $1", user_table);
	ptype[0] = m->user_type;
	m->user_plan = SPI_prepare(q.data, 1, ptype);
	if (m->user_plan == NULL || SPI_keepplan(m->user_plan) != 0)
		elog(ERROR, "gpumf: preparing the user lookup failed");
}

/* The user argument converted to the model's user key type. */
static Datum
user_key(Datum d, Oid argtype, Oid keytype, bool *ok)
{
	Oid			infunc,
				outfunc,
				ioparam;
	bool		varlena;
	char	   *s;

	*ok = true;
	if (argtype == keytype)
		return d;
	if ((argtype == INT2OID || argtype == INT4OID || argtype == INT8OID) &&
		(keytype == INT2OID || keytype == INT4OID || keytype == INT8OID))
	{
		int64		v = argtype == INT2OID ? DatumGetInt16(d) :
			argtype == INT4OID ? DatumGetInt32(d) : DatumGetInt64(d);

		if (keytype == INT8OID)
			return Int64GetDatum(v);
		if (keytype == INT4OID && v >= PG_INT32_MIN && v <= PG_INT32_MAX)
			return Int32GetDatum((int32) v);
		if (keytype == INT2OID && v >= PG_INT16_MIN && v <= PG_INT16_MAX)
			return Int16GetDatum((int16) v);
		*ok = false;			/* out of the key type's range: no such user */
		return (Datum) 0;
	}
	/* otherwise through text: '42' for an integer key, a uuid as text, ... */
	getTypeOutputInfo(argtype, &outfunc, &varlena);
	s = OidOutputFunctionCall(outfunc, d);
	getTypeInputInfo(keytype, &infunc, &ioparam);
	return OidInputFunctionCall(infunc, s, ioparam, -1);
}

static Datum
item_out(ServedModel *m, int32 idx, Oid outtype, const char *model)
{
	Datum		d = m->item_keys[idx];

	if (outtype == INT8OID)
	{
		if (m->item_type == INT8OID)
			return d;
		if (m->item_type == INT4OID)
			return Int64GetDatum(DatumGetInt32(d));
		if (m->item_type == INT2OID)
			return Int64GetDatum(DatumGetInt16(d));
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("model \"%s\" has %s item keys", model, format_type_be(m->item_type)),
				 errhint("Use gpumf_recommend_%s().", m->item_type == UUIDOID ? "uuid" : "text")));
	}
	if (outtype == UUIDOID)
	{
		if (m->item_type == UUIDOID)
			return d;
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("model \"%s\" has %s item keys", model, format_type_be(m->item_type)),
				 errhint("Use gpumf_recommend() for integer keys, gpumf_recommend_text() for others.")));
	}
	if (m->item_type == TEXTOID)
		return d;
	{
		Oid			outfunc;
		bool		varlena;

		getTypeOutputInfo(m->item_type, &outfunc, &varlena);
		return CStringGetTextDatum(OidOutputFunctionCall(outfunc, d));
	}
}

Datum
gpumf_recommend(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Datum		user = PG_GETARG_DATUM(1);
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, 1);
	int32		n = PG_GETARG_INT32(2);
	bool		exclude_seen = PG_GETARG_BOOL(3);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ServedModel *m = NULL;
	Oid			outtype;
	bool		found,
				ok;
	int			attempt;

	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be positive, got %d", n)));
	if (strlen(model) >= MODEL_NAME_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", model)));
	InitMaterializedSRF(fcinfo, 0);
	outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;

	if (served == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = MODEL_NAME_LEN;
		ctl.entrysize = sizeof(ServedModel);
		served = hash_create("gpumf served models", 16, &ctl, HASH_ELEM | HASH_STRINGS);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (catalog_plan == NULL)
	{
		Oid			t[1] = {TEXTOID};
		SPIPlanPtr	p = SPI_prepare("SELECT id, version, factors, user_type, item_type, user_table, item_table FROM gpumf.models WHERE name = $1",
									1, t);

		if (p == NULL || SPI_keepplan(p) != 0)
			elog(ERROR, "gpumf: preparing the catalog lookup failed");
		catalog_plan = p;
	}

	/* a retraining that commits between our catalog read and the lock: retry */
	for (attempt = 0;; attempt++)
	{
		Datum		arg[1] = {CStringGetTextDatum(model)};
		HeapTuple	tup;
		TupleDesc	desc;
		bool		isnull;
		int64		id;
		int32		version;
		char	   *user_table,
				   *item_table;
		Oid			urel,
					irel;

		if (attempt > 10)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("model \"%s\" kept changing while being read", model)));
		if (SPI_execute_plan(catalog_plan, arg, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "gpumf: reading the model catalog failed");
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("model \"%s\" does not exist", model),
					 errhint("SELECT name FROM gpumf.models lists the models.")));
		tup = SPI_tuptable->vals[0];
		desc = SPI_tuptable->tupdesc;
		id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		version = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		user_table = SPI_getvalue(tup, desc, 6);
		item_table = SPI_getvalue(tup, desc, 7);
		m = hash_search(served, model, HASH_ENTER, &found);
		if (!found)
		{
			memset(&m->Q, 0, sizeof(m->Q));
			m->cxt = NULL;
			m->user_plan = NULL;
			m->id = -1;
		}
		urel = rel_from_name(user_table);
		irel = rel_from_name(item_table);
		if (!lock_table(urel))
			continue;
		if (!lock_table(irel))
			continue;
		check_read(urel, model);
		check_read(irel, model);
		if (m->id != id || m->version != version || m->user_rel != urel || m->item_rel != irel)
		{
			char	   *ut = SPI_getvalue(tup, desc, 4);
			char	   *it = SPI_getvalue(tup, desc, 5);

			served_release(m);
			m->k = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
			m->user_type = type_from_name(ut);
			m->item_type = type_from_name(it);
			m->user_rel = urel;
			m->item_rel = irel;
			load_items(m, item_table, user_table);
			m->id = id;
			m->version = version;
		}
		break;
	}

	/* the user's row */
	{
		Datum		key = user_key(user, argtype, m->user_type, &ok);
		HeapTuple	tup;
		bool		isnull;
		ArrayType  *xf,
				   *seen = NULL;
		const int32 *skip = NULL;
		int32		nskip = 0;
		int32	   *idx;
		float	   *sc;
		int			got;
		int32		rescored = 0;

		if (!ok || SPI_execute_plan(m->user_plan, &key, NULL, false, 1) != SPI_OK_SELECT)
		{
			SPI_finish();
			return (Datum) 0;
		}
		if (SPI_processed == 0)
		{
			SPI_finish();
			return (Datum) 0;	/* unknown user: no rows */
		}
		tup = SPI_tuptable->vals[0];
		xf = DatumGetArrayTypeP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
		if (ARR_NDIM(xf) != 1 || ARR_DIMS(xf)[0] != m->k || ARR_HASNULL(xf))
			elog(ERROR, "gpumf: user factors of model \"%s\" are damaged", model);
		if (exclude_seen)
		{
			seen = DatumGetArrayTypeP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));
			nskip = ArrayGetNItems(ARR_NDIM(seen), ARR_DIMS(seen));
			skip = (const int32 *) ARR_DATA_PTR(seen);
		}
		if (n > m->n_items)
			n = m->n_items;
		idx = palloc(sizeof(int32) * (n > 0 ? n : 1));
		sc = palloc(sizeof(float) * (n > 0 ? n : 1));
		got = gm_topk_dot(m->Y, &m->Q, (const float *) ARR_DATA_PTR(xf), n, skip, nskip,
						  m->scratch, idx, sc, &rescored);
		elog(DEBUG1, "gpumf: scored %d items, rescored %d exactly", m->n_items,
			 rescored);
		for (int r = 0; r < got; r++)
		{
			Datum		values[2];
			bool		nulls[2] = {false, false};

			values[0] = item_out(m, idx[r], outtype, model);
			values[1] = Float4GetDatum(sc[r]);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	SPI_finish();
	return (Datum) 0;
}
