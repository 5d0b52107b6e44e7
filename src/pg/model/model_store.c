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
 * grantors included, so what the owner granted it can still revoke.
 */
#include "gpumf_model.h"

#include "access/heapam.h"
#include "access/hio.h"
#include "access/heaptoast.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
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

static Datum
flat_array(ArrayBuf *buf, const void *data, int n, Oid elemtype, int elemsize)
{
	Size		nbytes = ARR_OVERHEAD_NONULLS(1) + (Size) n * elemsize;
	ArrayType  *a;

	if (n == 0)
		return PointerGetDatum(construct_empty_array(elemtype));
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
	ARR_DIMS(a)[0] = n;
	ARR_LBOUND(a)[0] = 1;
	memcpy(ARR_DATA_PTR(a), data, (Size) n * elemsize);
	return PointerGetDatum(a);
}

/* The values of row r of a factor table (arrays in buf[0], buf[1]). */
typedef void (*RowFormer) (const GpumfStoreInput *in, int32 r, ArrayBuf *buf,
						   Datum *values, bool *nulls);

/* users: key, factors, seen item indices (sorted), bias */
static void
user_row(const GpumfStoreInput *in, int32 u, ArrayBuf *buf, Datum *values, bool *nulls)
{
	int64		b = in->R->indptr[u];

	values[0] = gpumf_key_datum(in->users, in->ukind, in->utype, u);
	values[1] = flat_array(&buf[0], in->X + (size_t) u * in->k, in->k, FLOAT4OID,
						   sizeof(float4));
	values[2] = flat_array(&buf[1], in->R->indices + b, (int) (in->R->indptr[u + 1] - b),
						   INT4OID, sizeof(int32));
	nulls[3] = in->user_bias == NULL;
	values[3] = in->user_bias ? Float4GetDatum(in->user_bias[u]) : (Datum) 0;
}

/* items: idx, key, factors, bias */
static void
item_row(const GpumfStoreInput *in, int32 i, ArrayBuf *buf, Datum *values, bool *nulls)
{
	values[0] = Int32GetDatum(i);
	values[1] = gpumf_key_datum(in->items, in->ikind, in->itype, i);
	values[2] = flat_array(&buf[0], in->Y + (size_t) i * in->k, in->k, FLOAT4OID,
						   sizeof(float4));
	nulls[3] = in->item_bias == NULL;
	values[3] = in->item_bias ? Float4GetDatum(in->item_bias[i]) : (Datum) 0;
}

/*
 * Fill a factor table created in this transaction, as COPY FREEZE does:
 * rows formed in batches and written with table_multi_insert through a
 * BulkInsertState (whole pages per WAL record), frozen
 * (the table is new: no snapshot of this transaction can have seen it, and
 * readers find it through the catalog row that commits with it), without
 * looking at the free space map.  WAL is skipped by PostgreSQL itself when
 * wal_level = minimal (a relation created in this transaction is synced at
 * commit instead), and not written at all for unlogged tables.  Indexes are
 * built afterwards.
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

	/* frozen rows are safe only in a table created by this (sub)transaction */
	if (rel->rd_createSubid != GetCurrentSubTransactionId())
		elog(ERROR, "gpumf: factor table %s was not created by this transaction", qname);
	/*
	 * The bulk-write ring (16 MB) keeps a large COPY from evicting the rest of
	 * shared_buffers, at the price of writing each page out as the ring comes
	 * round (after flushing WAL up to it) and of reading it back from the
	 * kernel for each index built next.  A table that takes at most an
	 * eighth of shared_buffers is written through the buffer pool instead:
	 * its index builds find it there, and its pages go out once, at commit or
	 * by the checkpointer.
	 */
	if (est_bytes <= (double) NBuffers * BLCKSZ / 8)
	{
		FreeAccessStrategy(bis->strategy);
		bis->strategy = NULL;
	}
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
	for (int32 r = 0; r < nrows; r++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};
		HeapTuple	tup;

		form(in, r, buf, values, nulls);
		tup = heap_form_tuple(desc, values, nulls);
		bytes += tup->t_len;
		/* the slot owns the tuple: table_multi_insert takes it without a copy */
		ExecStoreHeapTuple(tup, slots[n++], true);
		if (n == STORE_BATCH_ROWS || bytes >= STORE_BATCH_BYTES || r == nrows - 1)
		{
			table_multi_insert(rel, slots, n, cid, options, bis);
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
 * still go to TOAST).  The layout stays "factors real[]", as serving, pg_dump
 * and models of 0.1 have it.
 */
static void
create_table(const char *qname, const char *columns)
{
	gpumf_spi_exec(psprintf("CREATE %sTABLE %s (%s) WITH (toast_tuple_target = %d)",
							gpumf_unlogged_models ? "UNLOGGED " : "", qname, columns,
							(int) TOAST_TUPLE_TARGET_MAIN), SPI_OK_UTILITY);
	gpumf_spi_exec(psprintf("ALTER TABLE %s ALTER COLUMN factors SET STORAGE PLAIN", qname),
				   SPI_OK_UTILITY);
}

/* Create, fill and index a version's two factor tables, as the extension's owner. */
GpumfFactorTables
gpumf_store_write(const GpumfStoreInput *in)
{
	GpumfFactorTables t = gpumf_store_names(in->id, in->version);
	GpumfGuard	g;
	double		t0 = gm_now(),
				t1,
				t2;

	gpumf_guard_enter(&g, true);
	/* key types by OID, printed schema-qualified (or as SQL keywords) */
	create_table(t.users, psprintf("key %s NOT NULL, factors pg_catalog.float4[] NOT NULL, "
								   "seen pg_catalog.int4[] NOT NULL, bias pg_catalog.float4",
								   format_type_be_qualified(in->utype)));
	create_table(t.items, psprintf("idx pg_catalog.int4 NOT NULL, key %s NOT NULL, "
								   "factors pg_catalog.float4[] NOT NULL, bias pg_catalog.float4",
								   format_type_be_qualified(in->itype)));
	t1 = gm_now();
	/* row sizes: the header and key, the factor array, the seen items */
	fill_table(t.users, in, in->R->n_rows, user_row,
			   (double) in->R->n_rows * (64 + 4.0 * in->k) + 4.0 * (double) in->R->nnz);
	fill_table(t.items, in, in->R->n_cols, item_row,
			   (double) in->R->n_cols * (64 + 4.0 * in->k));
	CommandCounterIncrement();
	t2 = gm_now();
	gpumf_spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (key)", t.users), SPI_OK_UTILITY);
	gpumf_spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (idx), ADD UNIQUE (key)", t.items),
				   SPI_OK_UTILITY);
	gpumf_guard_exit(&g);
	elog(DEBUG1, "gpumf: factor tables created in %.3f s, filled in %.3f s, indexed in %.3f s",
		 t1 - t0, t2 - t1, gm_now() - t2);
	return t;
}

/*
 * Give table `to` the ACL of table `from` as it is (grantors included), with
 * the dependencies GRANT would record.  `to` is new (default ACL).
 */
static bool
copy_acl(Oid from, Oid to)
{
	HeapTuple	ftup = SearchSysCache1(RELOID, ObjectIdGetDatum(from));
	HeapTuple	ttup;
	Relation	pg_class;
	Datum		acl;
	bool		isnull;
	Oid			owner;
	Datum		values[Natts_pg_class] = {0};
	bool		nulls[Natts_pg_class] = {0};
	bool		replace[Natts_pg_class] = {0};
	HeapTuple	newtup;
	Acl		   *newacl;
	Oid		   *members;
	int			nmembers;

	if (!HeapTupleIsValid(ftup))
		return false;
	owner = ((Form_pg_class) GETSTRUCT(ftup))->relowner;
	acl = SysCacheGetAttr(RELOID, ftup, Anum_pg_class_relacl, &isnull);
	if (isnull || owner != gpumf_owner())
	{
		ReleaseSysCache(ftup);
		return false;
	}
	newacl = DatumGetAclPCopy(acl);
	ReleaseSysCache(ftup);

	pg_class = table_open(RelationRelationId, RowExclusiveLock);
	ttup = SearchSysCache1(RELOID, ObjectIdGetDatum(to));
	if (!HeapTupleIsValid(ttup))
		elog(ERROR, "gpumf: cache lookup failed for relation %u", to);
	values[Anum_pg_class_relacl - 1] = PointerGetDatum(newacl);
	replace[Anum_pg_class_relacl - 1] = true;
	newtup = heap_modify_tuple(ttup, RelationGetDescr(pg_class), values, nulls, replace);
	CatalogTupleUpdate(pg_class, &newtup->t_self, newtup);
	ReleaseSysCache(ttup);
	table_close(pg_class, RowExclusiveLock);

	nmembers = aclmembers(newacl, &members);
	updateAclDependencies(RelationRelationId, to, 0, owner, 0, NULL, nmembers, members);
	CommandCounterIncrement();
	return true;
}

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

		if (OidIsValid(from) && copy_acl(from, table_oid(tables[i], false)))
			continue;
		/* a new model (or an old table without grants): the owner may read and share */
		if (model_owner != gpumf_owner())
			gpumf_spi_exec(psprintf("GRANT SELECT ON %s TO %s WITH GRANT OPTION", tables[i],
									quote_identifier(GetUserNameFromId(model_owner, false))),
						   SPI_OK_UTILITY);
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
