/*
 * versions.c: the SQL functions of a model's kept versions (their
 * bookkeeping is src/pg/model/model_history.c's):
 *
 *   gpumf_model_versions(model)  the current version and the kept ones
 *   gpumf_use_version(model, version)  a kept version made current again
 *
 * gpumf_use_version makes a kept version current again: in one transaction
 * the current row goes to the kept versions and the kept row comes back into
 * gpumf.models, so readers (which look the model up by name and lock the
 * tables it names) switch at commit and never see a mix or a missing table;
 * the version then served is read into shared memory when it commits
 * (model_cache.c).  Only the model's owner may switch versions.  The
 * model's grants follow its current version: the version made current takes
 * the current tables' ACL, and the version it replaces keeps only the
 * owner's SELECT (model_store.c).
 */
#include "gpumf_serve.h"

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
	return RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							NoLock, true);
}

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

	gpumf_check_catalog_version();
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

	gpumf_check_catalog_version();
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

	/*
	 * every catalog column but the model's identity and owner comes from the
	 * kept row; the source's OID from its own column
	 */
	models = relation_open(get_relname_relid("models", gpumf_schema()), AccessShareLock);
	desc = RelationGetDescr(models);
	initStringInfo(&cols);
	initStringInfo(&rcols);
	for (int a = 0; a < desc->natts; a++)
	{
		const char *name = NameStr(TupleDescAttr(desc, a)->attname);

		if (TupleDescAttr(desc, a)->attisdropped || strcmp(name, "id") == 0 ||
			strcmp(name, "name") == 0 || strcmp(name, "owner") == 0 ||
			strcmp(name, "source_relid") == 0)
			continue;
		appendStringInfo(&cols, "%s%s", cols.len ? ", " : "", quote_identifier(name));
		appendStringInfo(&rcols, "%sr.%s", rcols.len ? ", " : "", quote_identifier(name));
	}
	relation_close(models, AccessShareLock);
	initStringInfo(&q);
	/* jsonb_populate_record with the current row as base: columns the kept row lacks stay */
	appendStringInfo(&q, "UPDATE gpumf.models m SET (%s) = (SELECT %s FROM pg_catalog.jsonb_populate_record(m, "
					 "v.catalog OPERATOR(pg_catalog.-) 'owner'::pg_catalog.text) r), "
					 "source_relid = v.source_relid "
					 "FROM gpumf.model_versions v WHERE m.id OPERATOR(pg_catalog.=) $1 "
					 "AND v.model_id OPERATOR(pg_catalog.=) $1 AND v.version OPERATOR(pg_catalog.=) $2",
					 cols.data, rcols.data);

	/* the grants follow: the version made current takes the current ACL */
	{
		GpumfFactorTables made = {ut, it},
					cur = {cat.user_table, cat.item_table};

		gpumf_store_swap_grants(&made, &cur, cat.owner);
	}
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
