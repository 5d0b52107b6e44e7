/*
 * predict.c: predictions and RMSE of a model.
 *
 * gpumf_predict(model, user, item) is the model's prediction for one pair:
 * mu + b_u + c_i + x_u . y_i for explicit models (ratings), x_u . y_i (the
 * ranking score) for implicit ones; NULL for an unknown user or item.
 * gpumf_rmse(model, test, ...) reads a table of ratings with the caller's
 * rights and compares the predictions with them.  Both read the model's
 * factor tables directly, after checking the caller's SELECT privilege.
 */
#include "gpumf_serve.h"

#include <float.h>
#include <math.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "storage/lmgr.h"
#include "tcop/dest.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"


PG_FUNCTION_INFO_V1(gpumf_predict);
PG_FUNCTION_INFO_V1(gpumf_rmse);

/* One side of a model (users or items) in memory: keys -> rows of F. */
typedef struct ModelSide
{
	gm_keymap  *keys;
	int32		n;
	float	   *F;				/* n x k */
	float	   *bias;			/* n, or NULL */
} ModelSide;

/* A whole model in memory, for scoring many pairs. */
typedef struct LoadedModel
{
	GpumfModel	cat;
	int			k;
	ModelSide	users;
	ModelSide	items;
	MemoryContextCallback cb;
} LoadedModel;

static void
loaded_free(void *arg)
{
	LoadedModel *lm = arg;

	gm_keymap_free(lm->users.keys);
	gm_keymap_free(lm->items.keys);
	lm->users.keys = lm->items.keys = NULL;
}

static Oid
factor_table(const char *qname, const char *model)
{
	Oid			relid = RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
										 AccessShareLock, true);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the factor tables of model \"%s\" are missing", model)));
	return relid;
}

/* Map a key Datum of type keytype; returns its index (new ones get the next). */
static int32
key_index(gm_keymap *m, Oid keytype, Datum d)
{
	switch (keytype)
	{
		case INT2OID:
			return gm_keymap_int(m, DatumGetInt16(d));
		case INT4OID:
			return gm_keymap_int(m, DatumGetInt32(d));
		case INT8OID:
			return gm_keymap_int(m, DatumGetInt64(d));
		case UUIDOID:
			return gm_keymap_bytes(m, DatumGetUUIDP(d)->data, UUID_LEN);
		default:
			{
				text	   *t = DatumGetTextPP(d);
				int			len = VARSIZE_ANY_EXHDR(t);
				int32		i;

				if (keytype == BPCHAROID)
					len = bpchartruelen(VARDATA_ANY(t), len);
				i = gm_keymap_bytes(m, VARDATA_ANY(t), (uint32) len);
				if ((Pointer) t != DatumGetPointer(d))
					pfree(t);
				return i;
			}
	}
}

/* Read a factor table (users or items) into side; the key column is "key". */
static void
load_side(ModelSide *side, Oid relid, Oid keytype, int k, const char *table)
{
	Relation	rel = table_open(relid, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	a_key = attnameAttNum(rel, "key", false),
				a_fac = attnameAttNum(rel, "factors", false),
				a_bias = attnameAttNum(rel, "bias", false);
	Snapshot	snap = RegisterSnapshot(GetTransactionSnapshot());
	TableScanDesc scan;
	HeapTuple	tup;
	int64		cap = 1024;
	bool		any_bias = false;

	if (a_key <= 0 || a_fac <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("gpumf: factor table %s is damaged: a column is missing", table)));
	side->keys = gm_keymap_create(keytype == TEXTOID || keytype == UUIDOID);
	if (!side->keys)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	side->F = palloc_extended(sizeof(float) * cap * k, MCXT_ALLOC_HUGE);
	side->bias = palloc_extended(sizeof(float) * cap, MCXT_ALLOC_HUGE);
	side->n = 0;
	scan = table_beginscan(rel, snap, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		ArrayType  *arr;
		int32		r;
		Datum		d;

		r = key_index(side->keys, keytype, heap_getattr(tup, a_key, desc, &isnull));
		if (r != side->n)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: factor table %s is damaged: duplicate keys", table)));
		if (side->n == cap)
		{
			cap *= 2;
			side->F = repalloc_huge(side->F, sizeof(float) * cap * k);
			side->bias = repalloc_huge(side->bias, sizeof(float) * cap);
		}
		arr = DatumGetArrayTypeP(heap_getattr(tup, a_fac, desc, &isnull));
		if (ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != k || ARR_HASNULL(arr))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: factor table %s is damaged: factors of the wrong length", table)));
		memcpy(side->F + (size_t) r * k, ARR_DATA_PTR(arr), sizeof(float) * k);
		side->bias[r] = 0.0f;
		if (a_bias > 0)
		{
			d = heap_getattr(tup, a_bias, desc, &isnull);
			if (!isnull)
			{
				side->bias[r] = DatumGetFloat4(d);
				any_bias = true;
			}
		}
		side->n++;
		if ((side->n & 4095) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	if (!any_bias)
		side->bias = NULL;
}

static LoadedModel *
load_model(const char *name)
{
	LoadedModel *lm = palloc0(sizeof(LoadedModel));
	Oid			urel,
				irel;

	gpumf_check_model_name(name);
	if (!gpumf_model_lookup(name, &lm->cat))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", name),
				 errhint("SELECT name FROM gpumf.models lists the models.")));
	urel = factor_table(lm->cat.user_table, name);
	irel = factor_table(lm->cat.item_table, name);
	gpumf_model_check_read(name, lm->cat.id, urel, irel);
	lm->k = lm->cat.factors;
	lm->cb.func = loaded_free;
	lm->cb.arg = lm;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &lm->cb);
	load_side(&lm->users, urel, lm->cat.user_type, lm->k, lm->cat.user_table);
	load_side(&lm->items, irel, lm->cat.item_type, lm->k, lm->cat.item_table);
	return lm;
}

/* The model's prediction for rows u, i (explicit models clipped on request). */
static double
predict(const LoadedModel *lm, int32 u, int32 i, bool clip)
{
	const float *x = lm->users.F + (size_t) u * lm->k;
	const float *y = lm->items.F + (size_t) i * lm->k;
	double		p = 0.0;

	for (int f = 0; f < lm->k; f++)
		p += (double) x[f] * y[f];
	if (lm->cat.has_bias)
	{
		p += lm->cat.global_mean;
		if (lm->users.bias)
			p += lm->users.bias[u];
		if (lm->items.bias)
			p += lm->items.bias[i];
	}
	if (clip && lm->cat.explicit_values)
	{
		if (p < lm->cat.value_min)
			p = lm->cat.value_min;
		if (p > lm->cat.value_max)
			p = lm->cat.value_max;
	}
	return p;
}

/*
 * The key kind a column type maps to (what key_index accepts for it), and a
 * check that it can name keys of the model's key type.
 */
static Oid
key_arg_type(Oid argtype, Oid keytype, const char *what, const char *side,
			 const char *model)
{
	bool		arg_int = argtype == INT2OID || argtype == INT4OID || argtype == INT8OID;
	bool		key_int = keytype == INT2OID || keytype == INT4OID || keytype == INT8OID;
	bool		arg_text = argtype == TEXTOID || argtype == VARCHAROID || argtype == BPCHAROID;

	if ((arg_int && key_int) || (arg_text && keytype == TEXTOID) ||
		(argtype == UUIDOID && keytype == UUIDOID))
		return argtype;
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("%s has type %s, but model \"%s\" has %s %s keys", what,
					format_type_be(argtype), model, format_type_be(keytype), side),
			 errhint("Cast the keys to the model's key type.")));
	return InvalidOid;
}

/* Index of key d (of type argtype, checked by key_arg_type) in side, or -1. */
static int32
find_key(ModelSide *side, Oid argtype, Datum d)
{
	int32		i = key_index(side->keys, argtype, d);

	/* a key the model does not have is added past its rows: unknown */
	return i >= 0 && i < side->n ? i : -1;
}

/* A literal ('42', 'alice') arrives as unknown: read it as the key type. */
static Datum
literal_key(Datum d, Oid *argtype, Oid keytype)
{
	Oid			infunc,
				ioparam;

	if (*argtype != UNKNOWNOID)
		return d;
	getTypeInputInfo(keytype, &infunc, &ioparam);
	*argtype = keytype;
	return OidInputFunctionCall(infunc, DatumGetCString(d), ioparam, -1);
}

Datum
gpumf_predict(PG_FUNCTION_ARGS)
{
	char	   *model;
	LoadedModel *lm;
	Oid			utype,
				itype;
	Datum		ud,
				id;
	int32		u,
				i;
	bool		clip = PG_NARGS() > 3 && !PG_ARGISNULL(3) && PG_GETARG_BOOL(3);

	gpumf_check_catalog_version();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_NULL();
	model = text_to_cstring(PG_GETARG_TEXT_PP(0));

	/* one model load per call site and query: kept in fn_extra */
	lm = fcinfo->flinfo->fn_extra;
	if (lm == NULL || strcmp(lm->cat.name, model) != 0)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		lm = load_model(model);
		MemoryContextSwitchTo(old);
		fcinfo->flinfo->fn_extra = lm;
	}
	utype = get_fn_expr_argtype(fcinfo->flinfo, 1);
	itype = get_fn_expr_argtype(fcinfo->flinfo, 2);
	ud = literal_key(PG_GETARG_DATUM(1), &utype, lm->cat.user_type);
	id = literal_key(PG_GETARG_DATUM(2), &itype, lm->cat.item_type);
	key_arg_type(utype, lm->cat.user_type, "user", "user", model);
	key_arg_type(itype, lm->cat.item_type, "item", "item", model);
	u = find_key(&lm->users, utype, ud);
	i = find_key(&lm->items, itype, id);
	if (u < 0 || i < 0)
		PG_RETURN_NULL();
	PG_RETURN_FLOAT4((float4) predict(lm, u, i, clip));
}

/* ------------------------------------------------------------ RMSE */

typedef struct RmseReceiver
{
	DestReceiver pub;
	LoadedModel *lm;
	Oid			utype;
	Oid			itype;
	Oid			vtype;
	bool		clip;
	double		se;
	double		sscale;			/* se = sscale^2 * sssq, kept beyond double's range too */
	double		sssq;
	double		ae;
	int64		n;
	int64		unknown;
	int64		nulls;
	int64		rows;
} RmseReceiver;

static bool
rmse_receive(TupleTableSlot *slot, DestReceiver *self)
{
	RmseReceiver *r = (RmseReceiver *) self;
	int32		u,
				i;
	double		v,
				e;

	slot_getallattrs(slot);
	r->rows++;
	if (slot->tts_isnull[0] || slot->tts_isnull[1] || slot->tts_isnull[2])
	{
		r->nulls++;
		return true;
	}
	v = gpumf_datum_double(r->vtype, slot->tts_values[2]);
	if (isnan(v) || isinf(v))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("non-finite rating %g in the test table", v)));
	u = find_key(&r->lm->users, r->utype, slot->tts_values[0]);
	i = find_key(&r->lm->items, r->itype, slot->tts_values[1]);
	if (u < 0 || i < 0)
	{
		r->unknown++;
		return true;
	}
	e = predict(r->lm, u, i, r->clip) - v;
	r->se += e * e;
	if (fabs(e) > r->sscale)
	{
		r->sssq = 1.0 + r->sssq * (r->sscale / fabs(e)) * (r->sscale / fabs(e));
		r->sscale = fabs(e);
	}
	else if (e != 0.0)
		r->sssq += (fabs(e) / r->sscale) * (fabs(e) / r->sscale);
	r->ae += fabs(e);
	r->n++;
	if ((r->n & 65535) == 0)
		CHECK_FOR_INTERRUPTS();
	return true;
}

static void
rmse_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
rmse_nothing(DestReceiver *self)
{
}

static Oid
test_column(Oid relid, const char *col)
{
	AttrNumber	att = get_attnum(relid, col);

	if (att == InvalidAttrNumber || att < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						col, get_rel_name(relid))));
	return getBaseType(get_atttype(relid, att));
}

Datum
gpumf_rmse(PG_FUNCTION_ARGS)
{
	char	   *model;
	Oid			relid;
	char	   *ucol,
			   *icol,
			   *vcol;
	RmseReceiver r;
	StringInfoData q;
	SPIExecuteOptions opts;
	GpumfGuard	g;
	int			rc;

	gpumf_check_catalog_version();
	for (int a = 0; a < 5; a++)
		if (PG_ARGISNULL(a))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be NULL",
							((const char *[]) {"model", "test", "user_col", "item_col", "value_col"})[a])));
	model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	relid = PG_GETARG_OID(1);
	ucol = NameStr(*PG_GETARG_NAME(2));
	icol = NameStr(*PG_GETARG_NAME(3));
	vcol = NameStr(*PG_GETARG_NAME(4));

	memset(&r, 0, sizeof(r));
	r.clip = PG_NARGS() > 5 && !PG_ARGISNULL(5) && PG_GETARG_BOOL(5);
	r.lm = load_model(model);
	if (get_rel_relkind(relid) == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	LockRelationOid(relid, AccessShareLock);
	r.utype = key_arg_type(test_column(relid, ucol), r.lm->cat.user_type,
						   psprintf("user column \"%s\"", ucol), "user", model);
	r.itype = key_arg_type(test_column(relid, icol), r.lm->cat.item_type,
						   psprintf("item column \"%s\"", icol), "item", model);
	r.vtype = test_column(relid, vcol);
	if (r.vtype != INT2OID && r.vtype != INT4OID && r.vtype != INT8OID &&
		r.vtype != FLOAT4OID && r.vtype != FLOAT8OID && r.vtype != NUMERICOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("value column \"%s\" has unsupported type %s", vcol,
						format_type_be(r.vtype)),
				 errhint("The value column must be numeric.")));

	initStringInfo(&q);
	appendStringInfo(&q, "SELECT %s, %s, %s FROM %s", quote_identifier(ucol),
					 quote_identifier(icol), quote_identifier(vcol),
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
												get_rel_name(relid)));
	r.pub.receiveSlot = rmse_receive;
	r.pub.rStartup = rmse_startup;
	r.pub.rShutdown = rmse_nothing;
	r.pub.rDestroy = rmse_nothing;
	r.pub.mydest = DestNone;
	memset(&opts, 0, sizeof(opts));
	opts.read_only = true;
	opts.dest = (DestReceiver *) &r;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* as the caller (its rights), under a pinned search_path */
	gpumf_guard_enter(&g, false);
	rc = SPI_execute_extended(q.data, &opts);
	gpumf_guard_exit(&g);
	SPI_finish();
	if (rc < 0)
		elog(ERROR, "reading the test table failed: %s", SPI_result_code_string(rc));
	if (r.unknown > 0 || r.nulls > 0)
		ereport(NOTICE,
				(errmsg("skipped " INT64_FORMAT " of " INT64_FORMAT " rows: " INT64_FORMAT
						" with a user or item the model does not know, " INT64_FORMAT " with a NULL",
						r.unknown + r.nulls, r.rows, r.unknown, r.nulls)));
	if (r.n == 0)
		PG_RETURN_NULL();
	/* ratings beyond about 1e154 (or errors below 1e-150): squares out of double's range */
	if (!isfinite(r.se) || (r.se < 0x1p-900 && r.sscale > 0))
		PG_RETURN_FLOAT8(r.sscale * sqrt(r.sssq / (double) r.n));
	PG_RETURN_FLOAT8(sqrt(r.se / (double) r.n));
}
