/*
 * model_history.c: the versions of a model that are kept.
 *
 * A model's current version is its row in gpumf.models.  When a retraining
 * (or gpumf_use_version) replaces it, its catalog row is copied, whole, into
 * gpumf.model_versions (as jsonb: later catalog columns need no change here)
 * and its factor tables stay.  A retraining then keeps the current version
 * and the gpumf.keep_versions - 1 versions replaced most recently; the
 * tables of older ones are retired (gpumf.retired_tables) and dropped by a
 * later training once no reader holds them, as before: nothing waits for
 * readers.  gpumf.keep_versions = 1 keeps only the current version.
 *
 * gpumf_use_version makes a kept version current again: in one transaction
 * the current row goes to the kept versions and the kept row comes back into
 * gpumf.models, so readers (which look the model up by name and lock the
 * tables it names) switch at commit and never see a mix or a missing table.
 * Writes run as the extension's owner under a pinned search_path; only the
 * model's owner may switch versions.  The model's grants follow its current
 * version: the version made current takes the current tables' ACL, and the
 * version it replaces keeps only the owner's SELECT (model_store.c).  The
 * SQL functions (gpumf_model_versions, gpumf_use_version) are
 * src/pg/serve/versions.c's.
 */
#include "gpumf_model.h"

#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"

static Oid
table_oid(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							NoLock, true);
}

int32
gpumf_history_next_version(int64 id, int32 current)
{
	GpumfGuard	g;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};
	bool		isnull;
	Datum		d;
	int32		v = current;

	gpumf_guard_enter(&g, false);
	if (SPI_execute_with_args("SELECT pg_catalog.max(version) FROM gpumf.model_versions "
							  "WHERE model_id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "gpumf: reading the kept versions failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull && DatumGetInt32(d) > v)
		v = DatumGetInt32(d);
	gpumf_guard_exit(&g);
	if (v == PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("model " INT64_FORMAT " has reached the largest version number", id)));
	return v + 1;
}

void
gpumf_history_save(int64 id)
{
	GpumfGuard	g;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};

	gpumf_guard_enter(&g, true);
	/*
	 * the source's OID in a column of its own (a regclass, which pg_dump
	 * writes as a name and a restore resolves), not in the jsonb, where it
	 * would be text and looked up by name again when the version comes back
	 */
	if (SPI_execute_with_args("INSERT INTO gpumf.model_versions "
							  "(model_id, version, created_at, replaced_at, user_table, item_table, source_relid, catalog) "
							  "SELECT m.id, m.version, m.created_at, pg_catalog.clock_timestamp(), m.user_table, "
							  "m.item_table, m.source_relid, "
							  "pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.-) 'source_relid'::pg_catalog.text "
							  "FROM gpumf.models m WHERE m.id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_INSERT ||
		SPI_processed != 1)
		elog(ERROR, "gpumf: keeping the replaced version of model " INT64_FORMAT " failed", id);
	gpumf_guard_exit(&g);
}

/*
 * Retire the versions of model id beyond gpumf.keep_versions (the current
 * one counts): the ones replaced longest ago go first.
 */
void
gpumf_history_prune(int64 id)
{
	GpumfGuard	g;
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(id), Int32GetDatum(gpumf_keep_versions - 1)};

	gpumf_guard_enter(&g, true);
	if (SPI_execute_with_args("WITH old AS (DELETE FROM gpumf.model_versions v "
							  "WHERE v.model_id OPERATOR(pg_catalog.=) $1 AND v.version OPERATOR(pg_catalog.<>) ALL ("
							  "SELECT k.version FROM gpumf.model_versions k WHERE k.model_id OPERATOR(pg_catalog.=) $1 "
							  "ORDER BY k.replaced_at DESC, k.version DESC LIMIT $2) "
							  "RETURNING v.user_table, v.item_table) "
							  "INSERT INTO gpumf.retired_tables (name) "
							  "SELECT old.user_table FROM old UNION ALL SELECT old.item_table FROM old "
							  "ON CONFLICT DO NOTHING",
							  2, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "gpumf: retiring old versions of model " INT64_FORMAT " failed", id);
	gpumf_guard_exit(&g);
}

void
gpumf_history_forget(int64 id)
{
	GpumfGuard	g;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};
	uint64		n;
	char	  **names;

	gpumf_guard_enter(&g, true);
	if (SPI_execute_with_args("DELETE FROM gpumf.model_versions WHERE model_id OPERATOR(pg_catalog.=) $1 "
							  "RETURNING user_table, item_table",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "gpumf: forgetting the versions of model " INT64_FORMAT " failed", id);
	n = SPI_processed;
	names = palloc(sizeof(char *) * (2 * n + 1));
	for (uint64 i = 0; i < n; i++)
	{
		names[2 * i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		names[2 * i + 1] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	/* as gpumf_drop_model drops the current tables: at once (waiting for readers) */
	for (uint64 i = 0; i < 2 * n; i++)
		if (OidIsValid(table_oid(names[i])))
			gpumf_spi_exec(psprintf("DROP TABLE %s", names[i]), SPI_OK_UTILITY);
	gpumf_guard_exit(&g);
}
