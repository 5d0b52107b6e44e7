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
#include "gpumf_pg.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
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
	return RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(qname)),
							NoLock, missing_ok);
}

static Datum
float_array(const float *v, int k)
{
	Datum	   *d = palloc(sizeof(Datum) * k);

	for (int i = 0; i < k; i++)
		d[i] = Float4GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, k, FLOAT4OID, sizeof(float4),
										   true, TYPALIGN_INT));
}

static Datum
int_array(const int32 *v, int64 n)
{
	Datum	   *d = palloc(sizeof(Datum) * (n > 0 ? n : 1));

	for (int64 i = 0; i < n; i++)
		d[i] = Int32GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, (int) n, INT4OID, sizeof(int32),
										   true, TYPALIGN_INT));
}

/* The values of row r of a factor table. */
typedef void (*RowFormer) (const GpumfStoreInput *in, int32 r, Datum *values, bool *nulls);

static void
user_row(const GpumfStoreInput *in, int32 u, Datum *values, bool *nulls)
{
	int64		b = in->R->indptr[u];

	values[0] = gpumf_key_datum(in->users, in->ukind, in->utype, u);
	values[1] = float_array(in->X + (size_t) u * in->k, in->k);
	values[2] = int_array(in->R->indices + b, in->R->indptr[u + 1] - b);
	nulls[3] = in->user_bias == NULL;
	values[3] = in->user_bias ? Float4GetDatum(in->user_bias[u]) : (Datum) 0;
}

static void
item_row(const GpumfStoreInput *in, int32 i, Datum *values, bool *nulls)
{
	values[0] = Int32GetDatum(i);
	values[1] = gpumf_key_datum(in->items, in->ikind, in->itype, i);
	values[2] = float_array(in->Y + (size_t) i * in->k, in->k);
	nulls[3] = in->item_bias == NULL;
	values[3] = in->item_bias ? Float4GetDatum(in->item_bias[i]) : (Datum) 0;
}

/* Fill a new factor table with heap inserts (indexes are built afterwards). */
static void
fill_table(const char *qname, const GpumfStoreInput *in, int32 nrows, RowFormer form)
{
	Relation	rel = table_open(table_oid(qname, false), RowExclusiveLock);
	BulkInsertState bis = GetBulkInsertState();
	CommandId	cid = GetCurrentCommandId(true);
	MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "gpumf store",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(tmp);

	for (int32 r = 0; r < nrows; r++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		form(in, r, values, nulls);
		heap_insert(rel, heap_form_tuple(RelationGetDescr(rel), values, nulls),
					cid, 0, bis);
		MemoryContextReset(tmp);
		if ((r & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(tmp);
	FreeBulkInsertState(bis);
	table_close(rel, RowExclusiveLock);
}

GpumfFactorTables
gpumf_store_write(const GpumfStoreInput *in)
{
	GpumfFactorTables t = gpumf_store_names(in->id, in->version);
	GpumfGuard	g;

	gpumf_guard_enter(&g, true);
	/* key types by OID, printed schema-qualified (or as SQL keywords) */
	gpumf_spi_exec(psprintf("CREATE TABLE %s (key %s NOT NULL, factors pg_catalog.float4[] NOT NULL, "
							"seen pg_catalog.int4[] NOT NULL, bias pg_catalog.float4)",
							t.users, format_type_be_qualified(in->utype)), SPI_OK_UTILITY);
	gpumf_spi_exec(psprintf("CREATE TABLE %s (idx pg_catalog.int4 NOT NULL, key %s NOT NULL, "
							"factors pg_catalog.float4[] NOT NULL, bias pg_catalog.float4)",
							t.items, format_type_be_qualified(in->itype)), SPI_OK_UTILITY);
	fill_table(t.users, in, in->R->n_rows, user_row);
	fill_table(t.items, in, in->R->n_cols, item_row);
	CommandCounterIncrement();
	gpumf_spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (key)", t.users), SPI_OK_UTILITY);
	gpumf_spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (idx), ADD UNIQUE (key)", t.items),
				   SPI_OK_UTILITY);
	gpumf_guard_exit(&g);
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
