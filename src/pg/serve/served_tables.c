/*
 * served_tables.c: reading a served model version's factor tables directly
 * (heap and index scans, the key type's own btree equality, columns by
 * name), not through SQL, so that nothing of the caller's search_path or
 * temp schema is ever consulted: the item rows into arrays (the backend's
 * own, or a shared segment's: shared_models.c), the users table's primary
 * key for one user's row, and the snapshot serving reads with.
 */
#include "gpumf_serve.h"

#include <sys/mman.h>
#include <unistd.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "parser/parse_relation.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "funcapi.h"
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
#include "utils/uuid.h"

/* this call retried after its tables were dropped: read with the latest snapshot */
bool		gpumf_served_latest = false;

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
	if (gpumf_served_latest)
		return GetLatestSnapshot();
	return ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
}

static void
damaged(const char *table, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("gpumf: factor table %s is damaged: %s", table, what)));
}

/* repalloc an array of oldcap elements to newcap, the new ones zeroed */
static void *
grow_array(void *p, Size elem, int64 oldcap, int64 newcap)
{
	char	   *q = repalloc_huge(p, elem * newcap);

	memset(q + elem * oldcap, 0, elem * (newcap - oldcap));
	return q;
}

/* Set by gpumf_served_warm_now for its warming: the items as the training has them */
const GpumfItemsAtHand *gpumf_served_at_hand = NULL;

/*
 * When gpumf_served_at_hand holds this version's n items of m->k factors:
 * them into d's fixed arrays, as gpumf_served_scan_items would read them
 * from the table the training wrote from the same arrays (the factors
 * copied by gpumf.threads threads, a missing bias 0, the keys as the table holds them),
 * and true.  Else false: nothing copied.
 */
bool
gpumf_served_copy_at_hand(const GpumfServed *m, const GpumfModel *cat, int64 n, GpumfItemArrays *d)
{
	const GpumfItemsAtHand *h = gpumf_served_at_hand;

	if (h == NULL || h->model_id != cat->id || h->version != cat->version ||
		cat->item_table == NULL || strcmp(h->item_table, cat->item_table) != 0 ||
		(int64) h->n != n || h->k != m->k || h->Y == NULL || h->key == NULL ||
		!d->fixed || d->keys != NULL)
		return false;
	gm_copy_threads(d->Y, h->Y, sizeof(float) * (size_t) h->n * h->k, gpumf_threads);
	if (d->bias)
		for (int32 i = 0; i < h->n; i++)
			d->bias[i] = h->bias ? h->bias[i] : 0.0f;
	for (int32 i = 0; i < h->n; i++)
	{
		Datum		key = h->key(h->key_arg, i);

		if (d->ukeys)
			memcpy(d->ukeys + (size_t) i * UUID_LEN, DatumGetUUIDP(key)->data, UUID_LEN);
		else
			d->ikeys[i] = m->item_type == INT2OID ? DatumGetInt16(key) :
				m->item_type == INT4OID ? DatumGetInt32(key) : DatumGetInt64(key);
		if ((i & 65535) == 65535)
			CHECK_FOR_INTERRUPTS();
	}
	return true;
}

/*
 * Read the item table's rows, each straight to its place (rows are stored
 * in idx order); the number of rows, or -1 when fixed arrays are too small.
 * ERRORs for a damaged table, and for an empty unlogged one (a crash
 * emptied it).
 */
int64
gpumf_served_scan_items(Relation rel, const GpumfModel *cat, GpumfServed *m,
						GpumfItemArrays *d)
{
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
	int64		n = 0,
				top = -1;
	bool	   *filled;
	Datum	   *values = palloc(sizeof(Datum) * desc->natts);
	bool	   *isnull = palloc(sizeof(bool) * desc->natts);

	if (a_idx <= 0 || a_key <= 0 || a_fac <= 0)
		damaged(cat->item_table, "a column is missing");
	get_typlenbyval(m->item_type, &typlen, &typbyval);
	filled = palloc0(sizeof(bool) * Max(d->cap, 1));
	d->any_bias = false;

	scan = table_beginscan(rel, snap, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		int32		i;
		ArrayType  *arr;
		Datum		key;

		heap_deform_tuple(tup, desc, values, isnull);
		if (isnull[a_idx - 1] || isnull[a_key - 1] || isnull[a_fac - 1])
			damaged(cat->item_table, "a NULL index, key or factors");
		i = DatumGetInt32(values[a_idx - 1]);
		if (i < 0)
			damaged(cat->item_table, "item indexes are not 0 .. n-1");
		if (i >= d->cap)
		{
			int64		ncap = Max(d->cap * 2, (int64) i + 1);

			if (d->fixed)
			{
				n = -1;
				break;
			}
			d->Y = grow_array(d->Y, sizeof(float) * m->k, d->cap, ncap);
			d->bias = grow_array(d->bias, sizeof(float), d->cap, ncap);
			d->keys = grow_array(d->keys, sizeof(Datum), d->cap, ncap);
			filled = grow_array(filled, sizeof(bool), d->cap, ncap);
			d->cap = ncap;
		}
		if (filled[i])
			damaged(cat->item_table, "item indexes are not 0 .. n-1");
		filled[i] = true;
		arr = DatumGetArrayTypeP(values[a_fac - 1]);
		if (ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != m->k || ARR_HASNULL(arr))
			damaged(cat->item_table, "factors of the wrong length");
		memcpy(d->Y + (size_t) i * m->k, ARR_DATA_PTR(arr), sizeof(float) * m->k);
		if ((Pointer) arr != DatumGetPointer(values[a_fac - 1]))
			pfree(arr);			/* detoasted (a short or toasted array) */
		key = values[a_key - 1];
		if (d->keys)
			d->keys[i] = datumCopy(key, typbyval, typlen);
		else if (d->ukeys)
			memcpy(d->ukeys + (size_t) i * UUID_LEN, DatumGetUUIDP(key)->data, UUID_LEN);
		else
			d->ikeys[i] = m->item_type == INT2OID ? DatumGetInt16(key) :
				m->item_type == INT4OID ? DatumGetInt32(key) : DatumGetInt64(key);
		if (a_bias != InvalidAttrNumber && !isnull[a_bias - 1])
		{
			if (d->bias == NULL)
				damaged(cat->item_table, "item biases in an implicit model");
			d->bias[i] = DatumGetFloat4(values[a_bias - 1]);
			d->any_bias = true;
		}
		else if (d->bias)
			d->bias[i] = 0.0f;
		n++;
		top = Max(top, i);
		if ((n & 4095) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	pfree(filled);
	pfree(values);
	pfree(isnull);
	if (n < 0)
		return -1;
	/* distinct indexes, all below n: a permutation of 0 .. n-1 */
	if (top != n - 1)
		damaged(cat->item_table, "item indexes are not 0 .. n-1");
	if (n == 0)
	{
		if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("model \"%s\" lost its factors in a crash", cat->name),
					 errdetail("Its factor tables are unlogged (gpumf.unlogged_models was on when it was trained), and PostgreSQL empties unlogged tables when it recovers from a crash."),
					 errhint("Train the model again.")));
		damaged(cat->item_table, "it has no rows");
	}
	if (d->fixed && n != d->cap)
		return -1;
	return n;
}

/*
 * The model's items in backend memory, sized by the table's row count
 * (exact since its index was built: usually no array grows).
 */
void
gpumf_served_load_private(GpumfServed *m, const GpumfModel *cat, Relation rel)
{
	MemoryContext old = MemoryContextSwitchTo(m->cxt);
	GpumfItemArrays d;

	memset(&d, 0, sizeof(d));
	d.cap = rel->rd_rel->reltuples > 0 ? (int64) rel->rd_rel->reltuples : 1024;
	d.cap = Min(d.cap, (int64) PG_INT32_MAX);
	d.Y = MemoryContextAllocHuge(m->cxt, sizeof(float) * d.cap * m->k);
	d.bias = MemoryContextAllocHuge(m->cxt, sizeof(float) * d.cap);
	d.keys = MemoryContextAllocHuge(m->cxt, sizeof(Datum) * d.cap);
	m->n_items = (int32) gpumf_served_scan_items(rel, cat, m, &d);
	m->Y = d.Y;
	m->item_keys = d.keys;
	m->item_bias = d.any_bias ? d.bias : NULL;
	if (!d.any_bias)
		pfree(d.bias);
	MemoryContextSwitchTo(old);
}

/* The users table's unique index on key, and the key type's equality. */
void
gpumf_served_prepare_user_lookup(GpumfServed *m, const GpumfModel *cat)
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

/* The user's row through the users table's primary key (see gpumf_serve.h). */
bool
gpumf_served_user(GpumfServed *m, Datum key, const float **x, int32 *nx, const int32 **seen,
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
	scan = gm_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		ArrayType  *xf,
				   *sa;
		Datum		d;

		slot_getallattrs(slot);
		xf = DatumGetArrayTypePCopy(slot->tts_values[m->user_att_factors - 1]);
		/* graph_filter: none, or its iALS part's (fold_in.c forms the rest) */
		if (ARR_NDIM(xf) == 0)
		{
			*x = NULL;
			*nx = 0;
		}
		else if (ARR_NDIM(xf) != 1 || ARR_DIMS(xf)[0] < 1 || ARR_DIMS(xf)[0] > m->k ||
				 ARR_HASNULL(xf))
			elog(ERROR, "gpumf: user factors of model \"%s\" are damaged", m->name);
		else
		{
			*x = (const float *) ARR_DATA_PTR(xf);
			*nx = ARR_DIMS(xf)[0];
		}
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
