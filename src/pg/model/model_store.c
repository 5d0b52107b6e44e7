/*
 * model_store.c: the factor tables of a model version.
 *
 * Each version has two tables in schema gpumf, owned by the extension's
 * owner: m<id>_v<version>_users (key, factors, seen, bias) and
 * m<id>_v<version>_items (idx, key, factors, bias).  A retraining writes a
 * new pair in the training transaction and retires the old pair (listed in
 * gpumf.retired_tables); a later training drops retired tables once no
 * reader holds them, so a retraining never waits for readers.
 *
 * Privileges: the model's owning role gets SELECT WITH GRANT OPTION on new
 * tables; on a retraining the new tables get the old tables' ACL as it is,
 * grantors included, so what the owner granted it can still revoke.  The
 * grants belong to the current version only: a replaced version's tables
 * keep the owner's SELECT alone, and take the current ACL again when
 * gpumf_use_version makes them current (gpumf_store_swap_grants).
 */
#include "gpumf_model.h"

#include <math.h>

#include "access/heapam.h"
#include "access/hio.h"
#include "access/heaptoast.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/catalog.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "optimizer/paths.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"

GpumfFactorTables
gpumf_store_names(int64 id, int32 version)
{
	GpumfFactorTables t;
	const char *schema = quote_identifier(get_namespace_name(gpumf_schema()));

	t.users = psprintf("%s.m" INT64_FORMAT "_v%d_users", schema, id, version);
	t.items = psprintf("%s.m" INT64_FORMAT "_v%d_items", schema, id, version);
	return t;
}

static Oid
table_oid(const char *qname, bool missing_ok)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							NoLock, missing_ok);
}

/*
 * Rows a table_multi_insert takes at most (COPY buffers 1000 rows too), and
 * the bytes of formed rows held before one.
 */
#define STORE_BATCH_ROWS	1000
#define STORE_BATCH_BYTES	(2 * 1024 * 1024)

/*
 * A one-dimensional array of n fixed-width elements copied from data, built
 * in *buf (grown as needed): the datum lives until the next call with the
 * same buffer, long enough for heap_form_tuple to copy it.
 */
typedef struct ArrayBuf
{
	ArrayType  *a;
	Size		size;
} ArrayBuf;

/* such an array of n elements from data followed by n2 from data2 (flat_array: n2 = 0) */
static Datum
flat_array2(ArrayBuf *buf, const void *data, int n, const void *data2, int n2, Oid elemtype,
			int elemsize)
{
	Size		nbytes;
	ArrayType  *a;

	if (n + n2 == 0)
		return PointerGetDatum(construct_empty_array(elemtype));
	nbytes = ARR_OVERHEAD_NONULLS(1) + (Size) (n + n2) * elemsize;
	if (nbytes > buf->size)
	{
		Size		size = Max(nbytes, 2 * buf->size);

		if (buf->a)
			pfree(buf->a);
		buf->a = MemoryContextAlloc(TopTransactionContext, size);
		buf->size = size;
	}
	a = buf->a;
	SET_VARSIZE(a, nbytes);
	a->ndim = 1;
	a->dataoffset = 0;
	a->elemtype = elemtype;
	ARR_DIMS(a)[0] = n + n2;
	ARR_LBOUND(a)[0] = 1;
	memcpy(ARR_DATA_PTR(a), data, (Size) n * elemsize);
	if (n2 > 0)
		memcpy(ARR_DATA_PTR(a) + (Size) n * elemsize, data2, (Size) n2 * elemsize);
	return PointerGetDatum(a);
}

static Datum
flat_array(ArrayBuf *buf, const void *data, int n, Oid elemtype, int elemsize)
{
	return flat_array2(buf, data, n, NULL, 0, elemtype, elemsize);
}

/* The values of row r of a factor table (arrays in buf[0], buf[1]). */
typedef void (*RowFormer) (const GpumfStoreInput *in, int32 r, ArrayBuf *buf,
						   Datum *values, bool *nulls);

/*
 * The factors a user row stores: k, graph_filter's iALS part's (xk), or none
 * (graph_filter alone: serving forms them from the seen items).
 */
static inline int
user_row_factors(const GpumfStoreInput *in)
{
	return in->X == NULL ? 0 : in->xk > 0 ? in->xk : in->k;
}

/* users: key, factors, seen item indices (sorted), bias */
static void
user_row(const GpumfStoreInput *in, int32 u, ArrayBuf *buf, Datum *values, bool *nulls)
{
	int64		b = in->R->indptr[u];
	int			xk = user_row_factors(in);

	values[0] = gpumf_key_datum(in->users, in->ukind, in->utype, u);
	/*
	 * graph_filter: no user factors for its filter (serving forms them from
	 * the seen items), its iALS part's when it has one
	 */
	values[1] = in->X == NULL ? PointerGetDatum(construct_empty_array(FLOAT4OID)) :
		flat_array(&buf[0], in->X + (size_t) u * xk, xk, FLOAT4OID, sizeof(float4));
	values[2] = flat_array(&buf[1], in->R->indices + b, (int) (in->R->indptr[u + 1] - b),
						   INT4OID, sizeof(int32));
	nulls[3] = in->user_bias == NULL;
	values[3] = in->user_bias ? Float4GetDatum(in->user_bias[u]) : (Datum) 0;
}

/* items: idx, key, factors, bias */
static void
item_row(const GpumfStoreInput *in, int32 i, ArrayBuf *buf, Datum *values, bool *nulls)
{
	/* graph_filter with an iALS part: the filter's k - k2 factors, then Y2's k2 */
	int			k1 = in->Y2 ? in->k - in->k2 : in->k;

	values[0] = Int32GetDatum(i);
	values[1] = gpumf_key_datum(in->items, in->ikind, in->itype, i);
	values[2] = flat_array2(&buf[0], in->Y + (size_t) i * k1, k1,
							in->Y2 ? in->Y2 + (size_t) i * in->k2 : NULL, in->Y2 ? in->k2 : 0,
							FLOAT4OID, sizeof(float4));
	nulls[3] = in->item_bias == NULL;
	values[3] = in->item_bias ? Float4GetDatum(in->item_bias[i]) : (Datum) 0;
}

/* A row formed as fill_table forms it, for store_direct.c's comparison. */
typedef struct UsualRow
{
	const GpumfStoreInput *in;
	RowFormer	form;
	TupleDesc	desc;
	ArrayBuf	buf[2];
} UsualRow;

static HeapTuple
usual_row(void *arg, int32 r)
{
	UsualRow   *u = arg;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	u->form(u->in, r, u->buf, values, nulls);
	return heap_form_tuple(u->desc, values, nulls);
}

/*
 * Fill a factor table created in this transaction, as COPY FREEZE does:
 * with gpumf.store_writes = direct, whole pages formed by threads and
 * written to the table's files (store_direct.c); the rows it leaves (those
 * TOAST moves), or every row with the other settings, formed in batches and
 * written with table_multi_insert through a BulkInsertState (whole pages
 * per WAL record).  Frozen either way (the table is new: no snapshot of
 * this transaction can have seen it, and readers find it through the
 * catalog row that commits with it), without looking at the free space
 * map.  WAL is skipped by PostgreSQL itself when wal_level = minimal (a
 * relation created in this transaction is synced at commit instead), and
 * not written at all for unlogged tables.  Indexes are built afterwards.
 */
static void
fill_table(const char *qname, const GpumfStoreInput *in, int32 nrows, RowFormer form,
		   double est_bytes)
{
	Relation	rel = table_open(table_oid(qname, false), RowExclusiveLock);
	TupleDesc	desc = RelationGetDescr(rel);
	BulkInsertState bis = GetBulkInsertState();
	CommandId	cid = GetCurrentCommandId(true);
	int			options = TABLE_INSERT_SKIP_FSM | TABLE_INSERT_FROZEN;
	TupleTableSlot *slots[STORE_BATCH_ROWS];
	ArrayBuf	buf[2] = {{NULL, 0}, {NULL, 0}};
	MemoryContext batch,
				old;
	int			n = 0;
	Size		bytes = 0;
	bool		flush_ahead;
	int32	   *list = NULL;	/* the rows left to this loop (NULL: all nrows) */
	int32		nlist = nrows;

	/* frozen rows are safe only in a table created by this (sub)transaction */
	if (rel->rd_createSubid != GetCurrentSubTransactionId())
		elog(ERROR, "gpumf: factor table %s was not created by this transaction", qname);
	if (gpumf_store_writes == GPUMF_STORE_DIRECT)
	{
		UsualRow	u = {in, form, desc, {{NULL, 0}, {NULL, 0}}};

		if (gpumf_store_fill_direct(rel, in, form == user_row, nrows, usual_row, &u, &list, &nlist))
		{
			if (nlist == 0)
			{
				FreeBulkInsertState(bis);
				table_close(rel, NoLock);
				return;
			}
		}
		else
		{
			list = NULL;
			nlist = nrows;
		}
		for (int b = 0; b < 2; b++)
			if (u.buf[b].a)
				pfree(u.buf[b].a);
	}
	/*
	 * The bulk-write ring (16 MB) keeps a large COPY from evicting the rest of
	 * shared_buffers, at the price of writing each page out as the ring comes
	 * round (after flushing WAL up to it) and of reading it back from the
	 * kernel for each index built next.  A table that takes at most an
	 * eighth of shared_buffers is written through the buffer pool instead:
	 * its index builds find it there, and its pages go out once, at commit or
	 * by the checkpointer.
	 */
	if (est_bytes <= (double) NBuffers * BLCKSZ / 8 || gpumf_store_writes == GPUMF_STORE_SHARED)
	{
		FreeAccessStrategy(bis->strategy);
		bis->strategy = NULL;
	}
	/*
	 * A page leaves the ring 16 MB after it was filled, and only once the WAL
	 * up to it is on disk: left to itself, the ring makes this backend wait
	 * for an fsync of the last 16 MB of WAL every 16 MB of table, one write
	 * after the other.  After each batch the WAL writer is asked to flush what
	 * is complete (XLogSetAsyncXactLSN, as an asynchronous commit does), so the
	 * WAL goes to disk while the next batches are formed and a page's WAL is
	 * flushed when the ring reaches it.  Nothing is flushed that would not be
	 * at commit, and nothing commits earlier.
	 */
	flush_ahead = RelationNeedsWAL(rel) && gpumf_store_writes != GPUMF_STORE_RING;
	/*
	 * One block that a reset keeps, large enough for a batch of rows in
	 * palloc's power-of-two chunks: each batch reuses the memory of the last
	 * (fresh blocks would be fresh pages from the kernel, faulted in again).
	 */
	batch = AllocSetContextCreate(CurrentMemoryContext, "gpumf store batch",
								  4 * STORE_BATCH_BYTES, 4 * STORE_BATCH_BYTES,
								  4 * STORE_BATCH_BYTES);
	for (int s = 0; s < STORE_BATCH_ROWS; s++)
		slots[s] = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
	old = MemoryContextSwitchTo(batch);
	for (int32 j = 0; j < nlist; j++)
	{
		int32		r = list ? list[j] : j;
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};
		HeapTuple	tup;

		form(in, r, buf, values, nulls);
		tup = heap_form_tuple(desc, values, nulls);
		bytes += tup->t_len;
		/* the slot owns the tuple: table_multi_insert takes it without a copy */
		ExecStoreHeapTuple(tup, slots[n++], true);
		if (n == STORE_BATCH_ROWS || bytes >= STORE_BATCH_BYTES || j == nlist - 1)
		{
			table_multi_insert(rel, slots, n, cid, options, bis);
			if (flush_ahead)
				XLogSetAsyncXactLSN(GetXLogInsertRecPtr());
			for (int s = 0; s < n; s++)
				ExecClearTuple(slots[s]);
			MemoryContextReset(batch);
			n = 0;
			bytes = 0;
			CHECK_FOR_INTERRUPTS();
		}
	}
	MemoryContextSwitchTo(old);
	for (int s = 0; s < STORE_BATCH_ROWS; s++)
		ExecDropSingleTupleTableSlot(slots[s]);
	for (int b = 0; b < 2; b++)
		if (buf[b].a)
			pfree(buf[b].a);
	MemoryContextDelete(batch);
	FreeBulkInsertState(bis);
	table_finish_bulk_insert(rel, options);
	table_close(rel, NoLock);
}

/*
 * Factor columns hold random floats: pglz cannot shrink them, so trying is
 * wasted time on every row, and moving them out of line (TOAST) costs a
 * second heap and an index insert per 2 kB.  They are stored PLAIN, inline
 * in the row, and the table's toast_tuple_target is a whole page so that the
 * toaster leaves rows alone until they would not fit (a row holds at most
 * 1024 factors, 4 kB; keys and seen lists longer than the rest of the page
 * still go to TOAST).  Above 1024 factors (graph_filter, up to 8192: 32 kB)
 * a row may not fit a page: the column is EXTERNAL then, out of line when
 * the row would not fit, never compressed.  The layout stays "factors
 * real[]", as serving, pg_dump and models of 0.1 have it.
 */
static void
create_table(const char *qname, const char *columns, int k)
{
	gpumf_spi_exec(psprintf("CREATE %sTABLE %s (%s) WITH (toast_tuple_target = %d)",
							gpumf_unlogged_models ? "UNLOGGED " : "", qname, columns,
							(int) TOAST_TUPLE_TARGET_MAIN), SPI_OK_UTILITY);
	gpumf_spi_exec(psprintf("ALTER TABLE %s ALTER COLUMN factors SET STORAGE %s", qname,
							k > 1024 ? "EXTERNAL" : "PLAIN"),
				   SPI_OK_UTILITY);
}

/*
 * The settings the factor tables' index builds run with (inside the guard:
 * undone at its exit).  Each build sorts one key a row: with the default
 * maintenance_work_mem (64 MB) a table of millions of rows spills its sort to
 * temporary files, so maintenance_work_mem is raised to what an in-memory
 * sort of the larger table's keys takes (about 96 bytes a row, at most 2 GB
 * and half of gpumf.max_memory, and at least 32 MB a participant of a build
 * with as many workers as the read had; never lowered), and a build may use
 * as many parallel workers as the read did (or max_parallel_maintenance_workers,
 * if more; max_parallel_workers still caps them).  The training's own arrays
 * are gone by then (GpumfStoreInput.filled).
 */
static void
index_build_settings(const GpumfStoreInput *in)
{
	double		rows = Max((double) in->R->n_rows, (double) in->R->n_cols);
	double		want_kb = Min(Max(rows * 96.0, 32.0 * 1024 * 1024 * (in->read_workers + 1)) / 1024.0,
							  2.0 * 1024 * 1024);

	want_kb = Min(want_kb, (double) gpumf_memory_limit() / 2 / 1024);
	want_kb = Min(want_kb, (double) MAX_KILOBYTES);	/* the parameter's own range */
	if (want_kb > maintenance_work_mem)
		(void) set_config_option("maintenance_work_mem", psprintf("%.0f", want_kb), PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (in->read_workers > max_parallel_maintenance_workers)
		(void) set_config_option("max_parallel_maintenance_workers",
								 psprintf("%d", in->read_workers),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/*
 * Before a factor table's index build (inside the guard): its planner gives
 * a table of P pages one worker, then one more each time P is three times
 * larger than min_parallel_table_scan_size (8 MB) again: 7 workers for the
 * 7 GB of 8 million users of 128 factors.  Lowered (never raised) so that a
 * table of a million rows or more asks for as many workers as the read had:
 * the build's heap scan is most of its time, and the store's threads are
 * done by then.  bytes: the table's size, as its fill estimated it.
 */
static void
index_build_workers(const GpumfStoreInput *in, double rows, double bytes)
{
	double		pages = bytes / BLCKSZ,
				threshold = pages;

	if (in->read_workers < 2 || rows < 1e6)
		return;
	for (int w = 1; w < in->read_workers && threshold > 1; w++)
		threshold /= 3;
	threshold = Max(1.0, floor(threshold));
	if (threshold < min_parallel_table_scan_size)
		(void) set_config_option("min_parallel_table_scan_size", psprintf("%.0f", threshold),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* Create, fill and index a version's two factor tables, as the extension's owner. */
GpumfFactorTables
gpumf_store_write(const GpumfStoreInput *in)
{
	GpumfFactorTables t = gpumf_store_names(in->id, in->version);
	GpumfGuard	g;
	double		t0 = gm_now(),
				t1,
				tu,
				t2,
				t3,
				ubytes,
				ibytes;

	gpumf_guard_enter(&g, true);
	/* key types by OID, printed schema-qualified (or as SQL keywords) */
	create_table(t.users, psprintf("key %s NOT NULL, factors pg_catalog.float4[] NOT NULL, "
								   "seen pg_catalog.int4[] NOT NULL, bias pg_catalog.float4",
								   format_type_be_qualified(in->utype)),
				 user_row_factors(in) > 0 ? user_row_factors(in) : in->k);
	/*
	 * A seen list too long for the row (a few thousand items) goes out of
	 * line uncompressed: sorted item indices spread over the items gain
	 * little from pglz, which took five times the time of the rest of the
	 * store for such rows (1.5 billion rows: 9 s for 36,000 users).
	 */
	gpumf_spi_exec(psprintf("ALTER TABLE %s ALTER COLUMN seen SET STORAGE EXTERNAL", t.users),
				   SPI_OK_UTILITY);
	create_table(t.items, psprintf("idx pg_catalog.int4 NOT NULL, key %s NOT NULL, "
								   "factors pg_catalog.float4[] NOT NULL, bias pg_catalog.float4",
								   format_type_be_qualified(in->itype)), in->k);
	t1 = gm_now();
	/* row sizes: the header and key, the factor array, the seen items */
	ubytes = (double) in->R->n_rows * (64 + 4.0 * user_row_factors(in)) + 4.0 * (double) in->R->nnz;
	ibytes = (double) in->R->n_cols * (64 + 4.0 * in->k);
	fill_table(t.users, in, in->R->n_rows, user_row, ubytes);
	tu = gm_now();
	fill_table(t.items, in, in->R->n_cols, item_row, ibytes);
	CommandCounterIncrement();
	t2 = gm_now();
	if (in->filled)
		in->filled(in->filled_arg);
	index_build_settings(in);
	index_build_workers(in, in->R->n_rows, ubytes);
	gpumf_spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (key)", t.users), SPI_OK_UTILITY);
	t3 = gm_now();
	index_build_workers(in, in->R->n_cols, ibytes);
	gpumf_spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (idx), ADD UNIQUE (key)", t.items),
				   SPI_OK_UTILITY);
	gpumf_guard_exit(&g);
	elog(DEBUG1, "gpumf: factor tables created in %.3f s, filled in %.3f s (users %.3f s, items %.3f s), indexed in %.3f s (users %.3f s, items %.3f s)",
		 t1 - t0, t2 - t1, tu - t1, t2 - tu, gm_now() - t2, t3 - t2, gm_now() - t3);
	return t;
}

/* The ACL of relid (NULL: the default) and its owner; false when relid is gone. */
static bool
table_acl(Oid relid, Acl **acl, Oid *owner)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Datum		d;
	bool		isnull;

	if (!HeapTupleIsValid(tup))
		return false;
	*owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	d = SysCacheGetAttr(RELOID, tup, Anum_pg_class_relacl, &isnull);
	*acl = isnull ? NULL : DatumGetAclPCopy(d);
	ReleaseSysCache(tup);
	return true;
}

/*
 * Set the ACL of relid (attnum 0) or of its column attnum to acl (NULL: the
 * default), with the dependencies GRANT and REVOKE would record.
 */
static void
set_acl(Oid relid, AttrNumber attnum, Acl *acl)
{
	bool		is_rel = attnum == 0;
	Relation	cat = table_open(is_rel ? RelationRelationId : AttributeRelationId,
								 RowExclusiveLock);
	HeapTuple	tup = is_rel ? SearchSysCache1(RELOID, ObjectIdGetDatum(relid)) :
		SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid), Int16GetDatum(attnum));
	int			acl_att = is_rel ? Anum_pg_class_relacl : Anum_pg_attribute_attacl;
	Datum	   *values;
	bool	   *nulls,
			   *replace;
	Datum		old;
	bool		isnull;
	Oid			owner,
			   *oldm = NULL,
			   *newm = NULL;
	int			noldm = 0,
				nnewm = 0;
	HeapTuple	newtup;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "gpumf: cache lookup failed for relation %u", relid);
	if (is_rel)
		owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	else
	{
		Acl		   *dummy;

		if (!table_acl(relid, &dummy, &owner))
			elog(ERROR, "gpumf: cache lookup failed for relation %u", relid);
	}
	old = SysCacheGetAttr(is_rel ? RELOID : ATTNUM, tup, acl_att, &isnull);
	if (!isnull)
		noldm = aclmembers(DatumGetAclP(old), &oldm);
	if (acl)
		nnewm = aclmembers(acl, &newm);
	values = palloc0(sizeof(Datum) * RelationGetDescr(cat)->natts);
	nulls = palloc0(sizeof(bool) * RelationGetDescr(cat)->natts);
	replace = palloc0(sizeof(bool) * RelationGetDescr(cat)->natts);
	values[acl_att - 1] = PointerGetDatum(acl);
	nulls[acl_att - 1] = acl == NULL;
	replace[acl_att - 1] = true;
	newtup = heap_modify_tuple(tup, RelationGetDescr(cat), values, nulls, replace);
	CatalogTupleUpdate(cat, &newtup->t_self, newtup);
	ReleaseSysCache(tup);
	table_close(cat, RowExclusiveLock);
	updateAclDependencies(RelationRelationId, relid, attnum, owner,
						  noldm, oldm, nnewm, newm);
	CommandCounterIncrement();
}

/* Has column attnum of relid an ACL of its own? */
static bool
has_column_acl(Oid relid, AttrNumber attnum)
{
	HeapTuple	tup = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid), Int16GetDatum(attnum));
	bool		isnull = true;

	if (HeapTupleIsValid(tup))
	{
		(void) SysCacheGetAttr(ATTNUM, tup, Anum_pg_attribute_attacl, &isnull);
		ReleaseSysCache(tup);
	}
	return !isnull;
}

/*
 * Give table `to` the ACL of table `from` as it is (grantors included), its
 * columns the ACLs of from's columns of the same names, with the
 * dependencies GRANT would record.  false (nothing changed) when from is
 * gone, has no ACL (the default) or is not the extension owner's.
 */
static bool
copy_acl(Oid from, Oid to)
{
	Acl		   *acl;
	Oid			owner;
	Relation	rel;
	TupleDesc	desc;

	if (!table_acl(from, &acl, &owner) || acl == NULL || owner != gpumf_owner())
		return false;
	set_acl(to, 0, acl);
	rel = relation_open(to, NoLock);
	desc = RelationGetDescr(rel);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		AttrNumber	fatt;
		HeapTuple	ftup;
		Datum		d;
		bool		isnull;

		if (att->attisdropped)
			continue;
		fatt = get_attnum(from, NameStr(att->attname));
		ftup = fatt > 0 ? SearchSysCache2(ATTNUM, ObjectIdGetDatum(from), Int16GetDatum(fatt)) : NULL;
		d = HeapTupleIsValid(ftup) ? SysCacheGetAttr(ATTNUM, ftup, Anum_pg_attribute_attacl, &isnull) : (Datum) 0;
		if (!HeapTupleIsValid(ftup))
			isnull = true;
		if (!isnull || has_column_acl(to, att->attnum))
			set_acl(to, att->attnum, isnull ? NULL : DatumGetAclPCopy(d));
		if (HeapTupleIsValid(ftup))
			ReleaseSysCache(ftup);
	}
	relation_close(rel, NoLock);
	return true;
}

/*
 * The ACL a table owned by relowner gets when only the model's owner may
 * read it (with the grant option: it may share it): NULL (the default) when
 * the model's owner owns the table or no longer exists.
 */
static Acl *
owner_only_acl(Oid relowner, Oid model_owner, bool grant_option)
{
	AclItem		item;

	if (!OidIsValid(model_owner) || model_owner == relowner ||
		!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(model_owner)))
		return NULL;
	item.ai_grantee = model_owner;
	item.ai_grantor = relowner;
	ACLITEM_SET_PRIVS_GOPTIONS(item, ACL_SELECT, grant_option ? ACL_SELECT : ACL_NO_RIGHTS);
	return aclupdate(acldefault(OBJECT_TABLE, relowner), &item, ACL_MODECHG_ADD,
					 relowner, DROP_RESTRICT);
}

/* Table relid (the extension owner's) readable by the model's owner only; no column grants. */
static void
set_owner_only(Oid relid, Oid model_owner, bool grant_option)
{
	Acl		   *acl;
	Oid			owner;
	Relation	rel;
	TupleDesc	desc;

	if (!table_acl(relid, &acl, &owner) || owner != gpumf_owner())
		return;
	set_acl(relid, 0, owner_only_acl(owner, model_owner, grant_option));
	rel = relation_open(relid, NoLock);
	desc = RelationGetDescr(rel);
	for (int a = 0; a < desc->natts; a++)
		if (!TupleDescAttr(desc, a)->attisdropped &&
			has_column_acl(relid, TupleDescAttr(desc, a)->attnum))
			set_acl(relid, TupleDescAttr(desc, a)->attnum, NULL);
	relation_close(rel, NoLock);
}

/*
 * Table `to` becomes a current version's: the ACL of the current (or just
 * replaced) version's table `from`, or, without one (a new model, a table
 * without grants), the model owner's SELECT with the grant option.
 */
static void
make_current_acl(Oid to, Oid from, Oid model_owner)
{
	if (OidIsValid(from) && copy_acl(from, to))
		return;
	set_owner_only(to, model_owner, true);
}

/*
 * Grants follow the model, not a version: the current version's tables
 * carry them; kept (and retired) versions' tables carry no grants of their
 * own, only the model owner's SELECT, so that a REVOKE on the current
 * version reaches every version (a revoked role can read no kept version
 * directly, and gpumf_use_version gives a kept version the current ACL
 * before it is served again).
 */
void
gpumf_store_grant(const GpumfFactorTables *t, const GpumfFactorTables *old, Oid model_owner)
{
	const char *tables[2] = {t->users, t->items};
	const char *olds[2] = {old ? old->users : NULL, old ? old->items : NULL};
	GpumfGuard	g;

	gpumf_guard_enter(&g, true);
	for (int i = 0; i < 2; i++)
	{
		Oid			from = olds[i] ? table_oid(olds[i], true) : InvalidOid;

		make_current_acl(table_oid(tables[i], false), from, model_owner);
		if (OidIsValid(from))
			set_owner_only(from, model_owner, false);
	}
	gpumf_guard_exit(&g);
}

/* gpumf_use_version: the kept version's tables t take cur's ACL; cur keeps the owner's SELECT */
void
gpumf_store_swap_grants(const GpumfFactorTables *t, const GpumfFactorTables *cur, Oid model_owner)
{
	const char *tables[2] = {t->users, t->items};
	const char *curs[2] = {cur->users, cur->items};
	GpumfGuard	g;

	gpumf_guard_enter(&g, true);
	for (int i = 0; i < 2; i++)
	{
		Oid			from = table_oid(curs[i], true);

		make_current_acl(table_oid(tables[i], false), from, model_owner);
		if (OidIsValid(from))
			set_owner_only(from, model_owner, false);
	}
	gpumf_guard_exit(&g);
}

/*
 * A retraining replaced the version whose tables are old.  When that version
 * was kept (gpumf_model_write copied its catalog row into
 * gpumf.model_versions), the model's versions beyond gpumf.keep_versions are
 * retired instead (model_history.c); otherwise old's tables are retired.
 */
void
gpumf_store_retire(const GpumfFactorTables *old)
{
	GpumfGuard	g;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(old->users), CStringGetTextDatum(old->items)};
	int64		model_id = -1;

	gpumf_guard_enter(&g, true);
	if (SPI_execute_with_args("SELECT model_id FROM gpumf.model_versions WHERE user_table OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading the kept versions failed");
	if (SPI_processed == 1)
	{
		bool		isnull;

		model_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	else if (SPI_execute_with_args("INSERT INTO gpumf.retired_tables (name) VALUES ($1), ($2) ON CONFLICT DO NOTHING",
								   2, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "gpumf: retiring the old factor tables failed");
	gpumf_guard_exit(&g);
	if (model_id >= 0)
		gpumf_history_prune(model_id);
}

/*
 * Drop factor tables retired by earlier, committed transactions that no
 * reader holds now (the rest wait for a later training).  Runs as the owner.
 */
void
gpumf_store_drop_retired(void)
{
	GpumfGuard	g;
	uint64		n;
	char	  **names;

	gpumf_guard_enter(&g, true);
	if (SPI_execute("SELECT name FROM gpumf.retired_tables "
					"WHERE retired_by OPERATOR(pg_catalog.<>) pg_catalog.pg_current_xact_id() ORDER BY name",
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading retired tables failed");
	n = SPI_processed;
	names = palloc(sizeof(char *) * (n + 1));
	for (uint64 i = 0; i < n; i++)
		names[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
	for (uint64 i = 0; i < n; i++)
	{
		Oid			relid = table_oid(names[i], true);
		Oid			t1[1] = {TEXTOID};
		Datum		a1[1] = {CStringGetTextDatum(names[i])};

		if (OidIsValid(relid))
		{
			if (!ConditionalLockRelationOid(relid, AccessExclusiveLock))
				continue;		/* a reader still has it */
			gpumf_spi_exec(psprintf("DROP TABLE IF EXISTS %s", names[i]), SPI_OK_UTILITY);
		}
		if (SPI_execute_with_args("DELETE FROM gpumf.retired_tables WHERE name OPERATOR(pg_catalog.=) $1",
								  1, t1, a1, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "gpumf: forgetting a retired table failed");
	}
	gpumf_guard_exit(&g);
}

void
gpumf_store_drop(const GpumfFactorTables *t)
{
	GpumfGuard	g;

	gpumf_guard_enter(&g, true);
	gpumf_spi_exec(psprintf("DROP TABLE IF EXISTS %s, %s", t->users, t->items), SPI_OK_UTILITY);
	gpumf_guard_exit(&g);
}
