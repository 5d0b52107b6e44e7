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
 * model's owner may switch versions.
 */
#include "gpumf_pg.h"

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

PG_FUNCTION_INFO_V1(gpumf_model_versions);
PG_FUNCTION_INFO_V1(gpumf_use_version);

static Oid
table_oid(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(qname)),
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
	if (SPI_execute_with_args("INSERT INTO gpumf.model_versions "
							  "(model_id, version, created_at, replaced_at, user_table, item_table, catalog) "
							  "SELECT m.id, m.version, m.created_at, pg_catalog.clock_timestamp(), m.user_table, "
							  "m.item_table, pg_catalog.to_jsonb(m) FROM gpumf.models m "
							  "WHERE m.id OPERATOR(pg_catalog.=) $1",
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

/* ------------------------------------------------------- SQL functions */

/* gpumf_model_versions(model): the current version and the kept ones, newest first */
Datum
gpumf_model_versions(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GpumfModel	cat;
	GpumfGuard	g;
	Oid			types[1] = {INT8OID};
	Datum		args[1];

	gpumf_check_model_name(model);
	InitMaterializedSRF(fcinfo, 0);
	if (!gpumf_model_lookup(model, &cat))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", model),
				 errhint("SELECT name FROM gpumf.models lists the models.")));
	args[0] = Int64GetDatum(cat.id);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	gpumf_guard_enter(&g, false);
	if (SPI_execute_with_args("SELECT m.version, true, m.created_at, NULL::pg_catalog.timestamptz, "
							  "m.user_table, m.item_table, pg_catalog.to_jsonb(m) FROM gpumf.models m "
							  "WHERE m.id OPERATOR(pg_catalog.=) $1 "
							  "UNION ALL SELECT v.version, false, v.created_at, v.replaced_at, "
							  "v.user_table, v.item_table, v.catalog FROM gpumf.model_versions v "
							  "WHERE v.model_id OPERATOR(pg_catalog.=) $1 ORDER BY 1 DESC",
							  1, types, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "gpumf: listing the versions of model \"%s\" failed", model);
	gpumf_guard_exit(&g);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		Datum		values[8];
		bool		nulls[8];
		char	   *ut,
				   *it;

		for (int c = 0; c < 7; c++)
			values[c] = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, c + 1, &nulls[c]);
		ut = TextDatumGetCString(values[4]);
		it = TextDatumGetCString(values[5]);
		/* copy what lives in SPI's memory into the result's */
		values[2] = nulls[2] ? (Datum) 0 : values[2];
		values[4] = CStringGetTextDatum(ut);
		values[5] = CStringGetTextDatum(it);
		values[7] = BoolGetDatum(OidIsValid(table_oid(ut)) && OidIsValid(table_oid(it)));
		nulls[7] = false;
		/* tuplestore_putvalues copies the values */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/* the kept versions of model id, as text ("3, 1"), for messages */
static char *
kept_list(int64 id, int32 current)
{
	Oid			types[1] = {INT8OID};
	Datum		args[1] = {Int64GetDatum(id)};
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfo(&s, "%d (current)", current);
	if (SPI_execute_with_args("SELECT version FROM gpumf.model_versions WHERE model_id OPERATOR(pg_catalog.=) $1 "
							  "ORDER BY version DESC", 1, types, args, NULL, false, 0) == SPI_OK_SELECT)
		for (uint64 r = 0; r < SPI_processed; r++)
			appendStringInfo(&s, ", %s", SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1));
	return s.data;
}

/* gpumf_use_version(model, version): make a kept version current */
Datum
gpumf_use_version(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int32		version = PG_GETARG_INT32(1);
	GpumfModel	cat;
	GpumfGuard	g;
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		args[2];
	char	   *ut,
			   *it;
	Relation	models;
	TupleDesc	desc;
	StringInfoData cols,
				rcols,
				q;
	Datum		result;

	gpumf_check_model_name(model);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* serialised with trainings and drops of the model */
	gpumf_model_lock(model);
	if (!gpumf_model_lookup(model, &cat))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", model),
				 errhint("SELECT name FROM gpumf.models lists the models.")));
	gpumf_model_check_current(model, true, cat.version);
	gpumf_model_check_owner(&cat, "change the version of");
	if (version == cat.version)
	{
		ereport(NOTICE,
				(errmsg("version %d of model \"%s\" is already the current version", version, model)));
		SPI_finish();
		/* after SPI_finish, which frees what was allocated since SPI_connect */
		result = gpumf_model_row_datum(model);
		PG_RETURN_DATUM(result);
	}

	args[0] = Int64GetDatum(cat.id);
	args[1] = Int32GetDatum(version);
	if (SPI_execute_with_args("SELECT user_table, item_table FROM gpumf.model_versions "
							  "WHERE model_id OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $2",
							  2, types, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading the kept versions failed");
	if (SPI_processed != 1)
	{
		char	   *kept = kept_list(cat.id, cat.version);

		if (version < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("version must be positive, got %d", version)));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("version %d of model \"%s\" %s", version, model,
						version > cat.version ? "does not exist or is no longer kept" :
						"is no longer kept"),
				 errdetail("The kept versions are %s.", kept),
				 errhint("gpumf.keep_versions (now %d) sets how many versions a retraining keeps; gpumf_model_versions('%s') lists them.",
						 gpumf_keep_versions, model)));
	}
	ut = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	it = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	if (!OidIsValid(table_oid(ut)) || !OidIsValid(table_oid(it)))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the factor tables of version %d of model \"%s\" are missing", version, model),
				 errdetail("%s or %s was dropped.", ut, it)));

	/* every catalog column but the model's identity and owner comes from the kept row */
	models = relation_open(get_relname_relid("models", gpumf_schema()), AccessShareLock);
	desc = RelationGetDescr(models);
	initStringInfo(&cols);
	initStringInfo(&rcols);
	for (int a = 0; a < desc->natts; a++)
	{
		const char *name = NameStr(TupleDescAttr(desc, a)->attname);

		if (TupleDescAttr(desc, a)->attisdropped || strcmp(name, "id") == 0 ||
			strcmp(name, "name") == 0 || strcmp(name, "owner") == 0)
			continue;
		appendStringInfo(&cols, "%s%s", cols.len ? ", " : "", quote_identifier(name));
		appendStringInfo(&rcols, "%sr.%s", rcols.len ? ", " : "", quote_identifier(name));
	}
	relation_close(models, AccessShareLock);
	initStringInfo(&q);
	/* jsonb_populate_record with the current row as base: columns the kept row lacks stay */
	appendStringInfo(&q, "UPDATE gpumf.models m SET (%s) = (SELECT %s FROM pg_catalog.jsonb_populate_record(m, "
					 "v.catalog OPERATOR(pg_catalog.-) 'owner'::pg_catalog.text) r) "
					 "FROM gpumf.model_versions v WHERE m.id OPERATOR(pg_catalog.=) $1 "
					 "AND v.model_id OPERATOR(pg_catalog.=) $1 AND v.version OPERATOR(pg_catalog.=) $2",
					 cols.data, rcols.data);

	gpumf_history_save(cat.id);
	gpumf_guard_enter(&g, true);
	if (SPI_execute_with_args(q.data, 2, types, args, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != 1)
		elog(ERROR, "gpumf: switching model \"%s\" to version %d failed", model, version);
	if (SPI_execute_with_args("DELETE FROM gpumf.model_versions WHERE model_id OPERATOR(pg_catalog.=) $1 "
							  "AND version OPERATOR(pg_catalog.=) $2",
							  2, types, args, NULL, false, 0) != SPI_OK_DELETE || SPI_processed != 1)
		elog(ERROR, "gpumf: switching model \"%s\" to version %d failed", model, version);
	gpumf_guard_exit(&g);
	/* once this commits: the version shared, the one that was current let go */
	gpumf_served_warm_on_commit(cat.id, version);

	SPI_finish();
	/* after SPI_finish, which frees what was allocated since SPI_connect */
	result = gpumf_model_row_datum(model);
	PG_RETURN_DATUM(result);
}
