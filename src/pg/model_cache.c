/*
 * model_cache.c: models served from backend memory.
 *
 * A model's item factors (and an int8 copy for the first scoring pass) are
 * read once per backend and model version.  Each call looks the model up in
 * the catalog as of the statement's snapshot (to notice a retraining, and so
 * that one statement sees one version), locks its factor tables, checks the
 * caller's SELECT privilege on them, and reads the user's row through the
 * users table's primary key.  Everything is read directly (heap and index
 * scans, the key type's own btree equality), not through SQL, so nothing of
 * the caller's search_path or temp schema is ever consulted.
 *
 * Entries whose tables were dropped (a dropped model, a replaced version
 * whose retired tables were dropped) are freed: a relcache invalidation
 * marks the cache for a sweep on the next call.
 */
#include "gpumf_pg.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "parser/parse_relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

static HTAB *served = NULL;
static bool sweep_pending = false;
/* this call retried after its tables were dropped: read with the latest snapshot */
static bool served_latest = false;

static void
relcache_changed(Datum arg, Oid relid)
{
	sweep_pending = true;
}

static void
served_release(GpumfServed *m)
{
	gpumf_serving_free(m);
	if (m->cxt)
		MemoryContextDelete(m->cxt);
	gm_qmat_free(&m->Q);
	m->cxt = NULL;
	m->Y = NULL;
	m->item_bias = NULL;
	m->item_keys = NULL;
	m->scratch = NULL;
	m->id = -1;
	m->user_rel = m->item_rel = InvalidOid;
}

static bool
rel_exists(Oid relid)
{
	return OidIsValid(relid) && SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid));
}

/* Free the entries whose factor tables no longer exist. */
static void
sweep(void)
{
	HASH_SEQ_STATUS st;
	GpumfServed *m;

	sweep_pending = false;
	hash_seq_init(&st, served);
	while ((m = hash_seq_search(&st)) != NULL)
	{
		if (m->id >= 0 && rel_exists(m->item_rel) && rel_exists(m->user_rel))
			continue;
		served_release(m);
		hash_search(served, m->name, HASH_REMOVE, NULL);
	}
}

static Oid
table_oid(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(qname)),
							NoLock, true);
}

/* Lock a factor table for reading; false when it was dropped meanwhile. */
static bool
lock_table(Oid relid)
{
	if (!OidIsValid(relid))
		return false;
	LockRelationOid(relid, AccessShareLock);
	if (!rel_exists(relid))
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

static void
damaged(const char *table, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("gpumf: factor table %s is damaged: %s", table, what)));
}

/* Read the item factors, keys and biases of the model's current version. */
static void
load_items(GpumfServed *m, const GpumfModel *cat)
{
	Relation	rel = table_open(m->item_rel, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	a_idx = attnameAttNum(rel, "idx", false),
				a_key = attnameAttNum(rel, "key", false),
				a_fac = attnameAttNum(rel, "factors", false),
				a_bias = attnameAttNum(rel, "bias", false);
	Snapshot	snap = RegisterSnapshot(gpumf_served_snapshot());
	TableScanDesc scan;
	HeapTuple	tup;
	int16		typlen;
	bool		typbyval;
	int64		n = 0;
	bool	   *filled;
	MemoryContext old;

	if (a_idx <= 0 || a_key <= 0 || a_fac <= 0)
		damaged(cat->item_table, "a column is missing");
	m->cxt = AllocSetContextCreate(TopMemoryContext, "gpumf served model",
								   ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(m->cxt);
	get_typlenbyval(m->item_type, &typlen, &typbyval);

	/* one pass over the heap: collect the rows, then place each at its idx */
	{
		int64		cap = 1024;
		float	   *Y = MemoryContextAllocHuge(m->cxt, sizeof(float) * cap * m->k);
		float	   *bias = MemoryContextAllocHuge(m->cxt, sizeof(float) * cap);
		Datum	   *keys = MemoryContextAllocHuge(m->cxt, sizeof(Datum) * cap);
		int32	   *idx = MemoryContextAllocHuge(m->cxt, sizeof(int32) * cap);
		bool		any_bias = false;

		scan = table_beginscan(rel, snap, 0, NULL);
		while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			bool		isnull;
			Datum		d;
			ArrayType  *arr;

			if (n == cap)
			{
				cap *= 2;
				Y = repalloc_huge(Y, sizeof(float) * cap * m->k);
				bias = repalloc_huge(bias, sizeof(float) * cap);
				keys = repalloc_huge(keys, sizeof(Datum) * cap);
				idx = repalloc_huge(idx, sizeof(int32) * cap);
			}
			idx[n] = DatumGetInt32(heap_getattr(tup, a_idx, desc, &isnull));
			d = heap_getattr(tup, a_key, desc, &isnull);
			keys[n] = datumCopy(d, typbyval, typlen);
			arr = DatumGetArrayTypeP(heap_getattr(tup, a_fac, desc, &isnull));
			if (ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != m->k || ARR_HASNULL(arr))
				damaged(cat->item_table, "factors of the wrong length");
			memcpy(Y + n * m->k, ARR_DATA_PTR(arr), sizeof(float) * m->k);
			bias[n] = 0.0f;
			if (a_bias != InvalidAttrNumber)
			{
				d = heap_getattr(tup, a_bias, desc, &isnull);
				if (!isnull)
				{
					bias[n] = DatumGetFloat4(d);
					any_bias = true;
				}
			}
			n++;
			if ((n & 4095) == 0)
				CHECK_FOR_INTERRUPTS();
		}
		table_endscan(scan);

		/* place row r at its idx: idx must be a permutation of 0 .. n-1 */
		m->n_items = (int32) n;
		m->Y = MemoryContextAllocHuge(m->cxt, sizeof(float) * Max(n, 1) * m->k);
		m->item_keys = MemoryContextAllocHuge(m->cxt, sizeof(Datum) * Max(n, 1));
		m->item_bias = any_bias ? MemoryContextAllocHuge(m->cxt, sizeof(float) * Max(n, 1)) : NULL;
		filled = palloc0(sizeof(bool) * Max(n, 1));
		for (int64 r = 0; r < n; r++)
		{
			int32		i = idx[r];

			if (i < 0 || i >= n || filled[i])
				damaged(cat->item_table, "item indexes are not 0 .. n-1");
			filled[i] = true;
			memcpy(m->Y + (size_t) i * m->k, Y + r * m->k, sizeof(float) * m->k);
			m->item_keys[i] = keys[r];
			if (m->item_bias)
				m->item_bias[i] = bias[r];
		}
		pfree(filled);
		pfree(Y);
		pfree(bias);
		pfree(idx);
		pfree(keys);
	}
	MemoryContextSwitchTo(old);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	if (gm_qmat_build(m->Y, m->n_items, m->k, &m->Q) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory loading model")));
	m->scratch = MemoryContextAllocHuge(m->cxt, sizeof(float) * gm_topk_dot_scratch(&m->Q));
}

/* The users table's unique index on key, and the key type's equality. */
static void
prepare_user_lookup(GpumfServed *m, const GpumfModel *cat)
{
	Relation	rel = table_open(m->user_rel, NoLock);
	AttrNumber	a_key = attnameAttNum(rel, "key", false);
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	m->user_index = InvalidOid;
	foreach(lc, indexes)
	{
		Relation	i = index_open(lfirst_oid(lc), AccessShareLock);

		if (i->rd_index->indisunique && i->rd_index->indnatts == 1 &&
			i->rd_index->indkey.values[0] == a_key && i->rd_rel->relam == BTREE_AM_OID)
		{
			Oid			opfamily = i->rd_opfamily[0];
			Oid			eqop = get_opfamily_member(opfamily, m->user_type, m->user_type,
												   BTEqualStrategyNumber);

			if (OidIsValid(eqop))
			{
				m->user_index = RelationGetRelid(i);
				fmgr_info_cxt(get_opcode(eqop), &m->key_eq, m->cxt);
			}
		}
		index_close(i, AccessShareLock);
		if (OidIsValid(m->user_index))
			break;
	}
	list_free(indexes);
	if (!OidIsValid(m->user_index))
		damaged(cat->user_table, "no primary key on key");
	m->user_att_factors = attnameAttNum(rel, "factors", false);
	m->user_att_seen = attnameAttNum(rel, "seen", false);
	m->user_att_bias = attnameAttNum(rel, "bias", false);
	if (m->user_att_factors <= 0 || m->user_att_seen <= 0)
		damaged(cat->user_table, "a column is missing");
	table_close(rel, NoLock);
}

/*
 * Serving reads as of the statement's snapshot (the active one), so that
 * all rows of a statement, in parallel workers too, see one model version,
 * as a STABLE function must.  A call whose version's tables were dropped
 * meanwhile (two retrainings since the statement began) reads the latest
 * committed version instead, outside parallel mode.
 */
Snapshot
gpumf_served_snapshot(void)
{
	if (served_latest)
		return GetLatestSnapshot();
	return ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
}

GpumfServed *
gpumf_served_get(const char *name)
{
	GpumfServed *m = NULL;

	if (served == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = GPUMF_MODEL_NAME_MAX + 1;
		ctl.entrysize = sizeof(GpumfServed);
		served = hash_create("gpumf served models", 16, &ctl, HASH_ELEM | HASH_STRINGS);
		CacheRegisterRelcacheCallback(relcache_changed, (Datum) 0);
	}
	if (sweep_pending)
		sweep();
	gpumf_check_model_name(name);

	/* a retraining that commits between our catalog read and the lock: retry */
	for (int attempt = 0;; attempt++)
	{
		GpumfModel	cat;
		Oid			urel,
					irel;
		bool		found;

		if (attempt > 10 || (attempt > 0 && IsInParallelMode()))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("model \"%s\" kept changing while being read", name),
					 errhint("The statement might succeed if retried.")));
		served_latest = attempt > 0;
		if (!gpumf_model_lookup_as_of(name, &cat, gpumf_served_snapshot()))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("model \"%s\" does not exist", name),
					 errhint("SELECT name FROM gpumf.models lists the models.")));
		urel = table_oid(cat.user_table);
		irel = table_oid(cat.item_table);
		if (!lock_table(urel) || !lock_table(irel))
			continue;
		check_read(urel, name);
		check_read(irel, name);
		m = hash_search(served, cat.name, HASH_ENTER, &found);
		if (!found)
		{
			memset(((char *) m) + sizeof(m->name), 0, sizeof(GpumfServed) - sizeof(m->name));
			m->id = -1;
		}
		if (m->id != cat.id || m->version != cat.version || m->user_rel != urel ||
			m->item_rel != irel)
		{
			served_release(m);
			m->k = cat.factors;
			m->user_type = cat.user_type;
			m->item_type = cat.item_type;
			m->user_rel = urel;
			m->item_rel = irel;
			m->has_bias = cat.has_bias;
			m->global_mean = cat.has_bias ? cat.global_mean : 0.0;
			PG_TRY();
			{
				load_items(m, &cat);
				prepare_user_lookup(m, &cat);
				gpumf_serving_reset(m, &cat);
			}
			PG_CATCH();
			{
				served_release(m);
				hash_search(served, cat.name, HASH_REMOVE, NULL);
				PG_RE_THROW();
			}
			PG_END_TRY();
			m->id = cat.id;
			m->version = cat.version;
		}
		return m;
	}
}

bool
gpumf_served_user(GpumfServed *m, Datum key, const float **x, const int32 **seen,
				  int32 *nseen, float *bias)
{
	Relation	rel = table_open(m->user_rel, NoLock);
	Relation	idx = index_open(m->user_index, AccessShareLock);
	Snapshot	snap = RegisterSnapshot(gpumf_served_snapshot());
	IndexScanDesc scan;
	ScanKeyData skey;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	bool		found = false;

	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], m->key_eq.fn_oid, key);
	scan = index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		ArrayType  *xf,
				   *sa;
		Datum		d;

		slot_getallattrs(slot);
		xf = DatumGetArrayTypePCopy(slot->tts_values[m->user_att_factors - 1]);
		if (ARR_NDIM(xf) != 1 || ARR_DIMS(xf)[0] != m->k || ARR_HASNULL(xf))
			elog(ERROR, "gpumf: user factors of model \"%s\" are damaged", m->name);
		*x = (const float *) ARR_DATA_PTR(xf);
		sa = DatumGetArrayTypePCopy(slot->tts_values[m->user_att_seen - 1]);
		*nseen = ArrayGetNItems(ARR_NDIM(sa), ARR_DIMS(sa));
		*seen = (const int32 *) ARR_DATA_PTR(sa);
		*bias = 0.0f;
		if (m->user_att_bias != InvalidAttrNumber)
		{
			d = slot_getattr(slot, m->user_att_bias, &isnull);
			if (!isnull)
				*bias = DatumGetFloat4(d);
		}
		found = true;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, AccessShareLock);
	table_close(rel, NoLock);
	return found;
}
