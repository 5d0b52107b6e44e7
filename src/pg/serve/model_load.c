/*
 * model_load.c: what batch scoring and evaluation share.
 *
 * - A served model's users in memory: factors, seen items as a CSR, biases,
 *   and a map from key to row, read directly from the users table (heap scan,
 *   columns by name) of the version gpumf_served_get locked and checked.
 * - Keys of a table column mapped through a model's key maps.
 * - The scoring device under gpumf.device, and cancellation while scoring.
 * - Names of tables the caller creates (gpumf_recommend_all's target,
 *   gpumf_split's outputs), parsed and checked with the caller's search_path.
 */
#include "gpumf_serve.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "parser/scansup.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

static void
users_free(void *arg)
{
	GpumfUsers *u = arg;

	free(u->X);
	free(u->bias);
	free(u->seen_ptr);
	free(u->seen_idx);
	gm_keymap_free(u->keys);
	u->X = u->bias = NULL;
	u->seen_ptr = NULL;
	u->seen_idx = NULL;
	u->keys = NULL;
}

static void
damaged(GpumfServed *m, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("gpumf: the users table of model \"%s\" is damaged: %s", m->name, what)));
}

static void *
grow_array(void *p, size_t bytes)
{
	void	   *q = realloc(p, bytes > 0 ? bytes : 1);

	if (q == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading a model's users (%zu bytes)", bytes)));
	return q;
}

/* A user row's seen items (in the current memory context), checked for NULLs. */
static const int32 *
seen_list(GpumfServed *m, HeapTuple tup, TupleDesc desc, int32 *n)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, m->user_att_seen, desc, &isnull);
	ArrayType  *seen;

	if (isnull)
		damaged(m, "a seen list is NULL");
	seen = DatumGetArrayTypeP(d);
	if (ARR_HASNULL(seen) || ARR_NDIM(seen) > 1)
		damaged(m, "a seen list has NULLs");
	*n = ArrayGetNItems(ARR_NDIM(seen), ARR_DIMS(seen));
	return (const int32 *) ARR_DATA_PTR(seen);
}

/*
 * A graph_filter version stores no user factors for its filter: form X
 * (n x k) from the users' seen lists (ptr/idx), the items' factors and the
 * filter in params, as the trainer did (gm_gf_user_vectors); with an iALS
 * part, X's last k - d columns hold its stored factors and the two parts are
 * scaled by the blend.  all: every row was a graph_filter row.
 */
void
gpumf_gf_form_users(GpumfServed *m, bool all, const int64 *ptr, const int32 *idx, int32 n,
					float *X)
{
	GpumfServing *sv = m->serving;
	float	   *w;

	if (!all || sv == NULL || sv->foldin.algorithm != GM_ALG_GRAPH_FILTER)
		damaged(m, "user factors are missing");
	if (sv->gf_filter == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("model \"%s\" lacks the filter of its %d factors in gpumf.models.params", m->name,
						sv->foldin.gf_columns),
				 errhint("Retrain the model.")));
	w = palloc(sizeof(float) * Max(m->n_items, 1));
	if (gm_gf_item_weights(ptr, idx, n, m->n_items, w) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory forming a model's users")));
	gm_gf_user_vectors(ptr, idx, n, m->Y, m->k, sv->foldin.gf_columns, w, sv->gf_filter,
					   sv->foldin.blend, X, gpumf_threads);
	pfree(w);
}

/*
 * How many factors a stored user row of m has: k, or for graph_filter the
 * iALS part's k - d (0: none).
 */
int
gpumf_stored_user_factors(GpumfServed *m)
{
	GpumfServing *sv = m->serving;

	if (sv != NULL && sv->foldin.algorithm == GM_ALG_GRAPH_FILTER)
		return m->k - sv->foldin.gf_columns;
	return m->k;
}

/* Read every user of m's version: one pass over the heap. */
GpumfUsers *
gpumf_users_read(GpumfServed *m)
{
	GpumfUsers *u = palloc0(sizeof(GpumfUsers));
	Relation	rel = table_open(m->user_rel, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	a_key = attnameAttNum(rel, "key", false);
	Snapshot	snap = RegisterSnapshot(GetTransactionSnapshot());
	TableScanDesc scan;
	HeapTuple	tup;
	int64		cap = 0,
				seen_cap = 0,
				nseen = 0;
	bool		any_bias = false;
	int64		derived = 0;
	int			nstored = gpumf_stored_user_factors(m);
	MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "gpumf users",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old;

	if (a_key <= 0)
		damaged(m, "the key column is missing");
	u->k = m->k;
	u->type = m->user_type;
	u->kind = gpumf_key_kind(m->user_type);
	u->cb.func = users_free;
	u->cb.arg = u;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &u->cb);
	u->keys = gm_keymap_create(u->kind != GPUMF_KEY_INT);
	u->seen_ptr = grow_array(NULL, sizeof(int64));
	u->seen_ptr[0] = 0;
	if (!u->keys)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));

	scan = table_beginscan(rel, snap, 0, NULL);
	old = MemoryContextSwitchTo(tmp);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		d;
		ArrayType  *fac;
		int32		ns;
		const int32 *sv;

		if (u->n == cap)
		{
			cap = cap ? cap * 2 : 4096;
			gpumf_check_memory((double) cap * (m->k + 3) * sizeof(float), "reading the users");
			u->X = grow_array(u->X, sizeof(float) * cap * m->k);
			u->bias = grow_array(u->bias, sizeof(float) * cap);
			u->seen_ptr = grow_array(u->seen_ptr, sizeof(int64) * (cap + 1));
		}
		d = heap_getattr(tup, a_key, desc, &isnull);
		if (isnull || gpumf_key_add(u->keys, m->user_type, d) != u->n)
			damaged(m, "a key is NULL or repeated");
		d = heap_getattr(tup, m->user_att_factors, desc, &isnull);
		if (isnull)
			damaged(m, "factors are NULL");
		fac = DatumGetArrayTypeP(d);
		if (nstored < m->k)
		{
			/* graph_filter: formed below from the seen items, after its iALS part */
			if (nstored == 0 ? ARR_NDIM(fac) != 0 :
				(ARR_NDIM(fac) != 1 || ARR_DIMS(fac)[0] != nstored || ARR_HASNULL(fac)))
				damaged(m, "factors of the wrong length");
			if (nstored > 0)
				memcpy(u->X + (size_t) u->n * m->k + (m->k - nstored), ARR_DATA_PTR(fac),
					   sizeof(float) * nstored);
			derived++;
		}
		else if (ARR_NDIM(fac) != 1 || ARR_DIMS(fac)[0] != m->k || ARR_HASNULL(fac))
			damaged(m, "factors of the wrong length");
		else
			memcpy(u->X + (size_t) u->n * m->k, ARR_DATA_PTR(fac), sizeof(float) * m->k);
		sv = seen_list(m, tup, desc, &ns);
		if (nseen + ns > seen_cap)
		{
			seen_cap = Max(seen_cap * 2, nseen + ns + 65536);
			gpumf_check_memory((double) seen_cap * sizeof(int32) + (double) cap * (m->k + 3) * sizeof(float),
							   "reading the users");
			u->seen_idx = grow_array(u->seen_idx, sizeof(int32) * seen_cap);
		}
		for (int32 e = 0; e < ns; e++)
		{
			if (sv[e] < 0 || sv[e] >= m->n_items || (e > 0 && sv[e] <= sv[e - 1]))
				damaged(m, "a seen list is not sorted item indexes");
			u->seen_idx[nseen + e] = sv[e];
		}
		nseen += ns;
		u->bias[u->n] = 0.0f;
		if (m->user_att_bias != InvalidAttrNumber)
		{
			d = heap_getattr(tup, m->user_att_bias, desc, &isnull);
			if (!isnull)
			{
				u->bias[u->n] = DatumGetFloat4(d);
				any_bias = true;
			}
		}
		u->n++;
		u->seen_ptr[u->n] = nseen;
		MemoryContextReset(tmp);
		if ((u->n & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	MemoryContextSwitchTo(old);
	table_endscan(scan);
	MemoryContextDelete(tmp);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	if (!any_bias)
	{
		free(u->bias);
		u->bias = NULL;
	}
	if (derived > 0)
		gpumf_gf_form_users(m, derived == u->n, u->seen_ptr, u->seen_idx, (int32) u->n, u->X);
	return u;
}

/*
 * Each item's number of users in m's version, from the users' seen lists
 * (one pass over the heap, the seen column only): deg has n_items slots.
 */
void
gpumf_served_item_degrees(GpumfServed *m, int64 *deg)
{
	Relation	rel = table_open(m->user_rel, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	Snapshot	snap = RegisterSnapshot(GetTransactionSnapshot());
	TableScanDesc scan;
	HeapTuple	tup;
	int64		n = 0;
	MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "gpumf degrees",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old;

	memset(deg, 0, sizeof(int64) * m->n_items);
	scan = table_beginscan(rel, snap, 0, NULL);
	old = MemoryContextSwitchTo(tmp);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		int32		ns;
		const int32 *sv = seen_list(m, tup, desc, &ns);

		for (int32 e = 0; e < ns; e++)
		{
			if (sv[e] < 0 || sv[e] >= m->n_items)
				damaged(m, "a seen list is not item indexes");
			deg[sv[e]]++;
		}
		MemoryContextReset(tmp);
		if ((++n & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	MemoryContextSwitchTo(old);
	table_endscan(scan);
	MemoryContextDelete(tmp);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
}

/* item key -> idx, in idx order */
gm_keymap *
gpumf_items_keymap(GpumfServed *m)
{
	gm_keymap  *map = gm_keymap_create(gpumf_key_kind(m->item_type) != GPUMF_KEY_INT);
	MemoryContextCallback *cb;

	if (!map)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	cb = palloc0(sizeof(MemoryContextCallback));
	cb->func = (MemoryContextCallbackFunction) gm_keymap_free;
	cb->arg = map;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	for (int32 i = 0; i < m->n_items; i++)
		if (gpumf_key_add(map, m->item_type, m->item_keys[i]) != i)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: the items table of model \"%s\" has a repeated key", m->name)));
	return map;
}

/*
 * A key value of a column type as the key maps hold it: integers as int64,
 * text (varchar; char without trailing blanks, as ::text gives it) and uuid
 * as bytes.  Returns true for an integer (*iv), false for bytes (*p, *len).
 */
static bool
key_parts(Oid coltype, Datum d, int64 *iv, const char **p, uint32 *len)
{
	switch (coltype)
	{
		case INT2OID:
			*iv = DatumGetInt16(d);
			return true;
		case INT4OID:
			*iv = DatumGetInt32(d);
			return true;
		case INT8OID:
			*iv = DatumGetInt64(d);
			return true;
		case UUIDOID:
			*p = (const char *) DatumGetUUIDP(d)->data;
			*len = UUID_LEN;
			return false;
		default:
			{
				text	   *t = DatumGetTextPP(d);
				int			l = VARSIZE_ANY_EXHDR(t);

				if (coltype == BPCHAROID)
					l = bpchartruelen(VARDATA_ANY(t), l);
				*p = VARDATA_ANY(t);
				*len = (uint32) l;
				return false;
			}
	}
}

int32
gpumf_key_add(gm_keymap *map, Oid coltype, Datum d)
{
	int64		iv;
	const char *p;
	uint32		len;
	int32		idx;

	if (key_parts(coltype, d, &iv, &p, &len))
		idx = gm_keymap_int(map, iv);
	else
		idx = gm_keymap_bytes(map, p, len);
	if (idx < 0)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory mapping keys")));
	return idx;
}

int32
gpumf_key_find(gm_keymap *map, Oid coltype, Datum d)
{
	int64		iv;
	const char *p;
	uint32		len;

	if (key_parts(coltype, d, &iv, &p, &len))
		return gm_keymap_find_int(map, iv);
	return gm_keymap_find_bytes(map, p, len);
}

/*
 * Integer columns go with integer keys (any width), text-like columns with
 * text keys, uuid with uuid.
 */
void
gpumf_check_key_column(Oid coltype, Oid keytype, const char *col, const char *what,
					   const char *model)
{
	Oid			stored = gpumf_key_store_type(coltype, col, what);

	if (gpumf_key_kind(stored) != gpumf_key_kind(keytype))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s column \"%s\" has type %s, but model \"%s\" has %s %s keys",
						what, col, format_type_be(coltype), model, format_type_be(keytype), what),
				 errhint("Name a column of the model's %s key type, or cast it in a view.", what)));
}

/* ------------------------------------------------------- scoring device */

static bool scoring_fallback_noticed = false;

gm_backend_kind
gpumf_scoring_backend(char *name, size_t namelen)
{
	char		err[GM_ERRLEN];
	int			rc;

	if (gpumf_device == GPUMF_DEVICE_CPU)
		return GM_BACKEND_CPU;
	rc = gm_cuda_available(gpumf_cuda_module_path(), name, namelen, err, sizeof(err));
	if (rc == GM_OK)
		return GM_BACKEND_CUDA;
	if (gpumf_device == GPUMF_DEVICE_GPU)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("gpumf.device is \"gpu\" but no usable GPU was found"),
				 errdetail("%s", err),
				 errhint("Set gpumf.device to 'auto' or 'cpu' to score on the CPU.")));
	if (rc != GM_ENOMODULE && !scoring_fallback_noticed)
	{
		ereport(NOTICE,
				(errmsg("no usable GPU, scoring on the CPU"),
				 errdetail("%s", err),
				 errhint("This NOTICE is shown once per session; gpumf.device = 'cpu' silences it.")));
		scoring_fallback_noticed = true;
	}
	return GM_BACKEND_CPU;
}

static int
score_should_stop(void *arg)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

/*
 * Score p on *backend; under gpumf.device = auto a GPU that cannot take the
 * problem (n too large, not enough memory) hands it to the CPU with a NOTICE,
 * and *backend says where it ran.
 */
void
gpumf_score(gm_score_problem *p, gm_backend_kind *backend, gm_score_result *r)
{
	gm_callbacks cb;
	char		err[GM_ERRLEN];
	int			rc;

	memset(&cb, 0, sizeof(cb));
	cb.should_stop = score_should_stop;
	p->threads = gpumf_threads;
	rc = gm_score_topk(p, *backend, &cb, r, err, sizeof(err));
	if (*backend == GM_BACKEND_CUDA && (rc == GM_ENOTSUP || rc == GM_ENOMEM) &&
		gpumf_device != GPUMF_DEVICE_GPU)
	{
		ereport(NOTICE,
				(errmsg("scoring on the CPU: %s", err),
				 errhint("gpumf.device = 'gpu' makes this an ERROR.")));
		*backend = GM_BACKEND_CPU;
		rc = gm_score_topk(p, *backend, &cb, r, err, sizeof(err));
	}
	if (rc == GM_ECANCELED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("scoring canceled")));
	}
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY :
						 rc == GM_ENOTSUP ? ERRCODE_FEATURE_NOT_SUPPORTED :
						 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("scoring failed: %s", err)));
}

/* ----------------------------------------------------------- new tables */

/*
 * The longest part, in bytes, of a dotted name SplitIdentifierString has
 * accepted ("a"".b".c: quoted parts with "" for a quote, unquoted parts up
 * to a dot or a blank).
 */
static size_t
longest_identifier(const char *s)
{
	const char *p = s;
	size_t		longest = 0;

	for (;;)
	{
		size_t		len = 0;

		while (scanner_isspace(*p))
			p++;
		if (*p == '"')
		{
			for (p++; *p; p++, len++)
				if (*p == '"')
				{
					if (p[1] != '"')
						break;
					p++;
				}
			if (*p == '"')
				p++;
		}
		else
			for (; *p && *p != '.' && !scanner_isspace(*p); p++)
				len++;
		longest = Max(longest, len);
		while (scanner_isspace(*p))
			p++;
		if (*p != '.')
			return longest;
		p++;
	}
}

char *
gpumf_new_table_name(const char *name, const char *argname)
{
	List	   *names;
	ListCell   *lc;
	RangeVar   *rv;
	Oid			nsp,
				existing = InvalidOid;
	char	   *copy = pstrdup(name);
	List	   *parts = NIL;

	/* the identifier syntax SQL has: "Mixed Case".x, schema.table */
	if (!SplitIdentifierString(copy, '.', &parts) || parts == NIL || list_length(parts) > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid %s \"%s\"", argname, name),
				 errhint("Give a table name, optionally schema-qualified, as in SQL: my_table, my_schema.my_table, \"My Table\".")));
	foreach(lc, parts)
	{
		const char *part = lfirst(lc);

		if (part[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid %s \"%s\": an empty name", argname, name)));
	}
	/* SplitIdentifierString truncates long names silently: measure them before */
	if (longest_identifier(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s \"%s\" is too long: a name has at most %d bytes", argname, name,
						NAMEDATALEN - 1)));
	names = gm_qualified_name_list(name);
	rv = makeRangeVarFromNameList(names);
	nsp = RangeVarGetAndCheckCreationNamespace(rv, NoLock, &existing);
	if (OidIsValid(existing))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("%s \"%s\" already exists", argname, name),
				 errhint("Drop it first or give another name.")));
	return quote_qualified_identifier(get_namespace_name(nsp), rv->relname);
}
