/*
 * serving.c: what serving builds on a served model version.
 *
 * - Keys: arguments converted to the model's key types, arrays of item keys
 *   mapped to item indices (through a hash map built once per version) with
 *   their element type checked, and keys converted to the type a caller asks
 *   for (item_type / user_type).
 * - Fold-in (fold_in.c): the factors of a user the model lacks, or of a
 *   basket of items, are kept here per version (the Gram matrix, the work
 *   space); the solve and the reading of the model's source are fold_in.c's.
 * - Similarity: the norms of the item factors, and the users' factors
 *   (loaded on the first gpumf_similar_users call).
 *
 * Everything lives in a memory context of its own, freed with the served
 * version (model_cache.c calls gpumf_serving_free).  Nothing here writes:
 * the source is read through SPI in read-only mode, as of the statement's
 * snapshot, so it runs in parallel workers too.
 */
#include "serving_int.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <math.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "catalog/pg_namespace.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

/* ------------------------------------------------------------ lifetime */

/* a number in a params object (NULL: none), or def when absent */
static double
param_number_in(JsonbContainer *c, const char *key, double def)
{
	JsonbValue	v;

	if (c == NULL || getKeyJsonValueFromContainer(c, key, strlen(key), &v) == NULL)
		return def;
	if (v.type == jbvNumeric)
		return DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
												  NumericGetDatum(v.val.numeric)));
	if (v.type == jbvBool)
		return v.val.boolean ? 1.0 : 0.0;
	return def;
}

/* a number in the params jsonb, or def when absent */
static double
param_number(Jsonb *params, const char *key, double def)
{
	return param_number_in(params ? &params->root : NULL, key, def);
}

/* params' object key (NULL when absent or not an object) */
static JsonbContainer *
param_object(Jsonb *params, const char *key)
{
	JsonbValue	v;

	if (params == NULL ||
		getKeyJsonValueFromContainer(&params->root, key, strlen(key), &v) == NULL ||
		v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
		return NULL;
	return v.val.binary.data;
}

/*
 * The numbers of params' array key, n of them, into a new float array in
 * cxt; NULL when the key is missing or is not an array of n numbers.
 */
static float *
param_floats(Jsonb *params, const char *key, int n, MemoryContext cxt)
{
	JsonbValue	v;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	float	   *out;
	int			got = 0;

	if (params == NULL ||
		getKeyJsonValueFromContainer(&params->root, key, strlen(key), &v) == NULL ||
		v.type != jbvBinary)
		return NULL;
	out = MemoryContextAlloc(cxt, sizeof(float) * Max(n, 1));
	it = JsonbIteratorInit(v.val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (v.type != jbvNumeric || got >= n)
		{
			pfree(out);
			return NULL;
		}
		out[got++] = (float) DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
															  NumericGetDatum(v.val.numeric)));
	}
	if (got != n)
	{
		pfree(out);
		return NULL;
	}
	return out;
}

/* The serving state of a newly loaded version: what its catalog row says. */
void
gpumf_serving_reset(GpumfServed *m, const GpumfModel *cat)
{
	GpumfServing *sv;
	MemoryContext cxt;
	gm_algorithm alg;

	gpumf_serving_free(m);
	cxt = AllocSetContextCreate(TopMemoryContext, "gpumf serving",
								ALLOCSET_SMALL_SIZES);
	sv = MemoryContextAllocZero(cxt, sizeof(GpumfServing));
	sv->cxt = cxt;
	if (gm_algorithm_from_name(cat->algorithm, &alg) != GM_OK)
		alg = GM_ALG_COUNT;		/* unknown: fold-in refuses it */
	sv->foldin.algorithm = alg;
	/*
	 * The trainer's regularization (the algorithm's default when params lack
	 * it); als_explicit and ccd both weigh it by the user's number of ratings
	 * (gm_foldin), as they did in training.
	 */
	{
		gm_mf_params dp;

		gm_mf_params_defaults(&dp, alg == GM_ALG_COUNT ? GM_ALG_ALS_IMPLICIT : alg);
		sv->foldin.regularization = (float) param_number(cat->params, "regularization",
														 dp.regularization);
	}
	sv->foldin.alpha = (float) param_number(cat->params, "alpha", 1.0);
	sv->foldin.alpha0 = (float) param_number(cat->params, "alpha0", 1.0);
	sv->foldin.nu = (float) param_number(cat->params, "nu", 0.0);
	sv->foldin.biases = cat->has_bias;
	sv->foldin.global_mean = cat->has_bias ? cat->global_mean : 0.0;
	if (alg == GM_ALG_GRAPH_FILTER)
	{
		/*
		 * With an iALS part ("ials" in params): its factors are the last
		 * ones, fold-in solves them as an als row with its own
		 * hyper-parameters, and the filter has the first d = k - f.
		 */
		JsonbContainer *ials = param_object(cat->params, "ials");
		int			f = (int) param_number_in(ials, "factors", 0);

		sv->foldin.gf_columns = cat->factors;
		if (ials != NULL)
		{
			if (f < 1 || f >= cat->factors)
				f = 0;			/* damaged: fold-in and loading refuse it (no filter) */
			sv->foldin.gf_columns = cat->factors - f;
			sv->foldin.blend = (float) param_number_in(ials, "blend", 0.5);
			sv->foldin.regularization = (float) param_number_in(ials, "regularization", 0.0);
			sv->foldin.alpha = (float) param_number_in(ials, "alpha", 1.0);
			sv->foldin.alpha0 = (float) param_number_in(ials, "alpha0", 1.0);
			sv->foldin.nu = (float) param_number_in(ials, "nu", 0.0);
		}
		if (ials == NULL || f > 0)
			sv->gf_filter = param_floats(cat->params, "filter", sv->foldin.gf_columns, cxt);
	}
	sv->source = cat->source ? MemoryContextStrdup(cxt, cat->source) : NULL;
	sv->source_relid = cat->source_relid;
	sv->user_col = cat->user_col ? MemoryContextStrdup(cxt, cat->user_col) : NULL;
	sv->item_col = cat->item_col ? MemoryContextStrdup(cxt, cat->item_col) : NULL;
	sv->value_col = cat->value_col ? MemoryContextStrdup(cxt, cat->value_col) : NULL;
	m->serving = sv;
}

/* Free the serving state of a served version (its key maps and memory). */
void
gpumf_serving_free(GpumfServed *m)
{
	GpumfServing *sv = m->serving;

	if (sv == NULL)
		return;
	m->serving = NULL;
	gm_keymap_free(sv->item_map);
	gm_keymap_free(sv->user_map);
	MemoryContextDelete(sv->cxt);
}

/* The served version's serving state (set by every load). */
GpumfServing *
gpumf_serving(GpumfServed *m)
{
	if (m->serving == NULL)
		elog(ERROR, "gpumf: model \"%s\" is loaded without its serving state", m->name);
	return m->serving;
}

/* ------------------------------------------------------------ key maps */

/* The key of type type (a key type or a column type) added to, or found in, map. */
int32
gpumf_serving_map_key(gm_keymap *map, Datum d, Oid type, bool add)
{
	switch (type)
	{
		case INT2OID:
			return add ? gm_keymap_int(map, DatumGetInt16(d)) :
				gm_keymap_find_int(map, DatumGetInt16(d));
		case INT4OID:
			return add ? gm_keymap_int(map, DatumGetInt32(d)) :
				gm_keymap_find_int(map, DatumGetInt32(d));
		case INT8OID:
			return add ? gm_keymap_int(map, DatumGetInt64(d)) :
				gm_keymap_find_int(map, DatumGetInt64(d));
		case UUIDOID:
			return add ? gm_keymap_bytes(map, DatumGetUUIDP(d)->data, UUID_LEN) :
				gm_keymap_find_bytes(map, DatumGetUUIDP(d)->data, UUID_LEN);
		default:
			{
				/* text, varchar; char(n) without its trailing blanks, as training stored it */
				text	   *t = DatumGetTextPP(d);
				int			len = VARSIZE_ANY_EXHDR(t);
				int32		i;

				if (type == BPCHAROID)
					len = bpchartruelen(VARDATA_ANY(t), len);
				i = add ? gm_keymap_bytes(map, VARDATA_ANY(t), (uint32) len) :
					gm_keymap_find_bytes(map, VARDATA_ANY(t), (uint32) len);
				if ((Pointer) t != DatumGetPointer(d))
					pfree(t);
				return i;
			}
	}
}

/* A map from keys[0 .. n) (of type type, distinct) to their positions. */
static gm_keymap *
build_map(const Datum *keys, int32 n, Oid type, const char *model)
{
	gm_keymap  *map = gm_keymap_create(gpumf_key_kind(type) != GPUMF_KEY_INT);

	if (map == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	for (int32 i = 0; i < n; i++)
	{
		int32		got = gpumf_serving_map_key(map, keys[i], type, true);

		if (got != i)
		{
			gm_keymap_free(map);
			if (got < 0)
				ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: model \"%s\" has a key twice", model)));
		}
		if ((i & 65535) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	return map;
}

/* The item key map of the served version, built on first use. */
gm_keymap *
gpumf_serving_item_map(GpumfServed *m)
{
	GpumfServing *sv = gpumf_serving(m);

	if (sv->item_map == NULL)
		sv->item_map = build_map(m->item_keys, m->n_items, m->item_type, m->name);
	return sv->item_map;
}

/* The item index of a key, or -1 when the model lacks it. */
int32
gpumf_item_index(GpumfServed *m, Datum key, Oid keytype)
{
	return gpumf_serving_map_key(gpumf_serving_item_map(m), key, keytype, false);
}

/* ------------------------------------------------------- key arguments */

/*
 * Parse an integer written as text; false when it is outside [lo, hi] (no
 * such key), ERROR when it is no integer at all.
 */
static bool
parse_int_key(const char *s, int64 lo, int64 hi, int64 *out, Oid keytype)
{
	const char *p = s;
	bool		neg = false;
	uint64		v = 0;
	bool		overflow = false;
	bool		digits = false;

	while (isspace((unsigned char) *p))
		p++;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	while (isdigit((unsigned char) *p))
	{
		digits = true;
		if (v > (UINT64_MAX - 9) / 10)
			overflow = true;
		else
			v = v * 10 + (uint64) (*p - '0');
		p++;
	}
	while (isspace((unsigned char) *p))
		p++;
	if (!digits || *p != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid input syntax for type %s: \"%s\"", format_type_be(keytype), s)));
	if (overflow || v > (uint64) INT64_MAX + (neg ? 1 : 0))
		return false;
	*out = neg ? (int64) (0 - v) : (int64) v;
	return *out >= lo && *out <= hi;
}

/* Is t one of the integer key types? */
bool
gpumf_is_int_type(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID;
}

/* An integer key Datum of type t as int64. */
int64
gpumf_int_value(Datum d, Oid t)
{
	return t == INT2OID ? DatumGetInt16(d) : t == INT4OID ? DatumGetInt32(d) : DatumGetInt64(d);
}

/* The range of the integer type t. */
void
gpumf_int_range(Oid t, int64 *lo, int64 *hi)
{
	*lo = t == INT2OID ? PG_INT16_MIN : t == INT4OID ? PG_INT32_MIN : PG_INT64_MIN;
	*hi = t == INT2OID ? PG_INT16_MAX : t == INT4OID ? PG_INT32_MAX : PG_INT64_MAX;
}

/* v as a Datum of the integer type t (in range). */
Datum
gpumf_int_datum(int64 v, Oid t)
{
	return t == INT8OID ? Int64GetDatum(v) : t == INT4OID ? Int32GetDatum((int32) v) :
		Int16GetDatum((int16) v);
}

/* A key argument converted to the key type (see gpumf_serve.h). */
bool
gpumf_key_from_arg(Datum d, Oid argtype, Oid keytype, Datum *out)
{
	int64		lo,
				hi,
				v;

	argtype = getBaseType(argtype);
	if (argtype == keytype)
	{
		*out = d;
		return true;
	}
	gpumf_int_range(keytype, &lo, &hi);
	if (gpumf_is_int_type(keytype) && gpumf_is_int_type(argtype))
		v = gpumf_int_value(d, argtype);
	else if (keytype == TEXTOID && (argtype == VARCHAROID || argtype == BPCHAROID))
	{
		/* the same bytes; char(n) without its trailing blanks */
		text	   *t = DatumGetTextPP(d);
		int			len = VARSIZE_ANY_EXHDR(t);

		if (argtype == BPCHAROID)
			len = bpchartruelen(VARDATA_ANY(t), len);
		*out = PointerGetDatum(cstring_to_text_with_len(VARDATA_ANY(t), len));
		return true;
	}
	else
	{
		/* through text: '42' for an integer key, a uuid as text, ... */
		Oid			outfunc,
					infunc,
					ioparam;
		bool		varlena;
		char	   *s;

		getTypeOutputInfo(argtype, &outfunc, &varlena);
		s = OidOutputFunctionCall(outfunc, d);
		if (!gpumf_is_int_type(keytype))
		{
			getTypeInputInfo(keytype, &infunc, &ioparam);
			*out = OidInputFunctionCall(infunc, s, ioparam, -1);
			return true;
		}
		if (!parse_int_key(s, lo, hi, &v, keytype))
			return false;
	}
	if (v < lo || v > hi)
		return false;			/* out of the key type's range: no such key */
	*out = gpumf_int_datum(v, keytype);
	return true;
}

/* Can elements of type elem name keys of type keytype? */
bool
gpumf_elements_match(Oid elem, Oid keytype)
{
	switch (gpumf_key_kind(keytype))
	{
		case GPUMF_KEY_INT:
			return gpumf_is_int_type(elem);
		case GPUMF_KEY_TEXT:
			return elem == TEXTOID || elem == VARCHAROID || elem == BPCHAROID;
		case GPUMF_KEY_UUID:
			return elem == UUIDOID;
	}
	return false;
}

/* the SQL type a user would write for the key type */
static const char *
key_type_name(Oid keytype)
{
	return gpumf_is_int_type(keytype) ? "bigint" : format_type_be(keytype);
}

/* The item indices of an array argument's elements, in order (-1: none). */
int32
gpumf_item_indices(GpumfServed *m, Datum arr, Oid argtype, const char *argname,
				   const char *model, int32 **idx)
{
	Oid			elem;
	ArrayType  *a;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int16		typlen;
	bool		typbyval;
	char		typalign;

	argtype = getBaseType(argtype);
	if (argtype == UNKNOWNOID)
	{
		/* a literal such as '{1,2,3}': an array of the model's key type */
		arr = OidInputFunctionCall(F_ARRAY_IN, DatumGetCString(arr), m->item_type, -1);
		argtype = get_array_type(m->item_type);
	}
	elem = get_element_type(argtype);
	if (!OidIsValid(elem))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s must be an array of item keys, not %s", argname,
						format_type_be(argtype)),
				 errhint("Pass an array such as ARRAY[...]::%s[].", key_type_name(m->item_type))));
	elem = getBaseType(elem);
	if (!gpumf_elements_match(elem, m->item_type))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s has type %s, but model \"%s\" has %s item keys", argname,
						format_type_be(argtype), model, format_type_be(m->item_type)),
				 errhint("Pass %s as %s[].", argname, key_type_name(m->item_type))));
	a = DatumGetArrayTypeP(arr);
	gpumf_check_array_1d(a, argname);
	get_typlenbyvalalign(ARR_ELEMTYPE(a), &typlen, &typbyval, &typalign);
	deconstruct_array(a, ARR_ELEMTYPE(a), typlen, typbyval, typalign, &elems, &nulls, &n);
	*idx = palloc(sizeof(int32) * Max(n, 1));
	for (int e = 0; e < n; e++)
		(*idx)[e] = nulls[e] ? -1 : gpumf_serving_map_key(gpumf_serving_item_map(m), elems[e], elem, false);
	return n;
}

/* qsort order of int32. */
static int
cmp_int32(const void *a, const void *b)
{
	int32		x = *(const int32 *) a,
				y = *(const int32 *) b;

	return (x > y) - (x < y);
}

/* idx as a sorted set of valid indices. */
int32
gpumf_index_set(int32 *idx, int32 n)
{
	int32		out = 0;

	qsort(idx, n, sizeof(int32), cmp_int32);
	for (int32 e = 0; e < n; e++)
		if (idx[e] >= 0 && (out == 0 || idx[out - 1] != idx[e]))
			idx[out++] = idx[e];
	return out;
}

/* ERROR unless outtype can hold the keys of keytype. */
void
gpumf_check_key_output(Oid keytype, Oid outtype, const char *what, const char *model,
					   bool carrier)
{
	if (outtype == keytype || outtype == TEXTOID ||
		(gpumf_is_int_type(keytype) && gpumf_is_int_type(outtype)))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("model \"%s\" has %s %s keys, which %s cannot hold", model,
					format_type_be(keytype), what, format_type_be(outtype)),
			 errhint("%s %s_type => NULL::%s%s%s", carrier ? "Pass" : "Add", what,
					 format_type_be(keytype), keytype == TEXTOID ? "" : " (or NULL::text)",
					 carrier ? "." : " to the call.")));
}

/* A key as a Datum of the requested output type. */
Datum
gpumf_key_output(Datum key, Oid keytype, Oid outtype, const char *what)
{
	if (outtype == keytype)
		return key;
	if (gpumf_is_int_type(outtype))
	{
		int64		v = gpumf_int_value(key, keytype),
					lo,
					hi;

		gpumf_int_range(outtype, &lo, &hi);
		if (v < lo || v > hi)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("%s key " INT64_FORMAT " is out of range for type %s", what, v,
							format_type_be(outtype)),
					 errhint("Pass %s_type => NULL::bigint.", what)));
		return gpumf_int_datum(v, outtype);
	}
	{
		Oid			outfunc;
		bool		varlena;

		getTypeOutputInfo(keytype, &outfunc, &varlena);
		return CStringGetTextDatum(OidOutputFunctionCall(outfunc, key));
	}
}

/* ------------------------------------------------------------ similarity */

/* The norms of the item factors, computed once per version. */
const float *
gpumf_item_norms(GpumfServed *m)
{
	GpumfServing *sv = gpumf_serving(m);

	if (sv->item_norms == NULL)
	{
		float	   *nrm = MemoryContextAllocHuge(sv->cxt, sizeof(float) * Max(m->n_items, 1));

		gm_row_norms(m->Y, m->n_items, m->k, nrm);
		sv->item_norms = nrm;
	}
	return sv->item_norms;
}

/* Load the users' keys, factors and norms of the served version, once. */
void
gpumf_load_users(GpumfServed *m)
{
	GpumfServing *sv = gpumf_serving(m);
	Relation	rel;
	TupleDesc	desc;
	AttrNumber	a_key,
				a_fac;
	Snapshot	snap;
	TableScanDesc scan;
	HeapTuple	tup;
	int64		cap = 1024,
				n = 0;
	float	   *X;
	Datum	   *keys;
	int16		typlen;
	bool		typbyval;
	MemoryContext old;
	int64	   *sptr = NULL;	/* graph_filter: the seen lists, to form X */
	int32	   *sidx = NULL;
	int64		scap = 0,
				derived = 0;
	int			nstored = gpumf_stored_user_factors(m);

	if (sv->X != NULL)
		return;
	rel = table_open(m->user_rel, NoLock);	/* locked by gpumf_served_get */
	desc = RelationGetDescr(rel);
	a_key = attnameAttNum(rel, "key", false);
	a_fac = m->user_att_factors;
	get_typlenbyval(m->user_type, &typlen, &typbyval);
	gpumf_check_memory((double) RelationGetNumberOfBlocks(rel) * BLCKSZ,
					   "loading the users of a model");
	old = MemoryContextSwitchTo(sv->cxt);
	X = MemoryContextAllocHuge(sv->cxt, sizeof(float) * cap * m->k);
	keys = MemoryContextAllocHuge(sv->cxt, sizeof(Datum) * cap);
	snap = RegisterSnapshot(gpumf_served_snapshot());
	scan = table_beginscan(rel, snap, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		ArrayType  *arr;

		if (n == cap)
		{
			cap *= 2;
			X = repalloc_huge(X, sizeof(float) * cap * m->k);
			keys = repalloc_huge(keys, sizeof(Datum) * cap);
			if (sptr)
				sptr = repalloc_huge(sptr, sizeof(int64) * (cap + 1));
		}
		keys[n] = datumCopy(heap_getattr(tup, a_key, desc, &isnull), typbyval, typlen);
		arr = DatumGetArrayTypeP(heap_getattr(tup, a_fac, desc, &isnull));
		if (!isnull && nstored < m->k &&
			(nstored == 0 ? ARR_NDIM(arr) == 0 :
			 ARR_NDIM(arr) == 1 && ARR_DIMS(arr)[0] == nstored && !ARR_HASNULL(arr)))
		{
			/*
			 * graph_filter: no stored factors for the filter (its iALS
			 * part's go last); keep the seen items to form them
			 */
			ArrayType  *sa = DatumGetArrayTypeP(heap_getattr(tup, m->user_att_seen, desc, &isnull));
			int32		ns = isnull ? 0 : ArrayGetNItems(ARR_NDIM(sa), ARR_DIMS(sa));

			if (sptr == NULL)
			{
				sptr = MemoryContextAllocHuge(sv->cxt, sizeof(int64) * (cap + 1));
				sptr[0] = 0;
			}
			if (sptr[derived] + ns > scap)
			{
				scap = Max(scap * 2, sptr[derived] + ns + 65536);
				sidx = sidx ? repalloc_huge(sidx, sizeof(int32) * scap) :
					MemoryContextAllocHuge(sv->cxt, sizeof(int32) * scap);
			}
			if (ns > 0)
				memcpy(sidx + sptr[derived], ARR_DATA_PTR(sa), sizeof(int32) * ns);
			for (int32 e = 0; e < ns; e++)
				if (sidx[sptr[derived] + e] < 0 || sidx[sptr[derived] + e] >= m->n_items)
					ereport(ERROR,
							(errcode(ERRCODE_DATA_CORRUPTED),
							 errmsg("gpumf: the seen items of a user of model \"%s\" are damaged", m->name)));
			if (nstored > 0)
				memcpy(X + n * m->k + (m->k - nstored), ARR_DATA_PTR(arr), sizeof(float) * nstored);
			sptr[derived + 1] = sptr[derived] + ns;
			derived++;
		}
		else if (isnull || nstored < m->k || ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != m->k ||
				 ARR_HASNULL(arr))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: user factors of model \"%s\" are damaged", m->name)));
		else
			memcpy(X + n * m->k, ARR_DATA_PTR(arr), sizeof(float) * m->k);
		n++;
		if ((n & 4095) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	MemoryContextSwitchTo(old);
	if (derived > 0)
	{
		gpumf_gf_form_users(m, derived == n, sptr, sidx, (int32) n, X);
		pfree(sptr);
		if (sidx)
			pfree(sidx);
	}
	sv->user_map = build_map(keys, (int32) n, m->user_type, m->name);
	sv->user_norms = MemoryContextAllocHuge(sv->cxt, sizeof(float) * Max(n, 1));
	gm_row_norms(X, n, m->k, sv->user_norms);
	sv->user_scratch = MemoryContextAllocHuge(sv->cxt, sizeof(float) * Max(n, 1));
	sv->user_keys = keys;
	sv->n_users = (int32) n;
	sv->X = X;
}

/* The position of a user among the loaded users, or -1. */
int32
gpumf_user_index(GpumfServed *m, Datum key)
{
	GpumfServing *sv = gpumf_serving(m);

	return sv->user_map ? gpumf_serving_map_key(sv->user_map, key, m->user_type, false) : -1;
}
