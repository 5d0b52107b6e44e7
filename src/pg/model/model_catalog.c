/*
 * model_catalog.c: the model catalog gpumf.models.
 *
 * Lookups read the catalog directly (an index scan on its name), columns by
 * name; writes go through SQL that names its columns, run as the extension's
 * owner under a pinned search_path.  A model belongs to the role that first
 * trained it (stored as the role's OID, so renaming the role keeps it and a
 * new role with the old name gets nothing); that role, its members and
 * superusers may retrain and drop it.
 */
#include "gpumf_model.h"

#include <math.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "catalog/index.h"
#include "parser/parse_relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/regproc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

/* the second key of a model's advisory lock (class GPUMF_LOCK_CLASS) */
int32
gpumf_model_lock_key(const char *name)
{
	return DatumGetInt32(hash_any((const unsigned char *) name, strlen(name)));
}

void
gpumf_model_lock(const char *name)
{
	DirectFunctionCall2(pg_advisory_xact_lock_int4, Int32GetDatum(GPUMF_LOCK_CLASS),
						Int32GetDatum(gpumf_model_lock_key(name)));
}

/* the catalog and its unique index on name */
static void
catalog_open(Relation *rel, Relation *idx)
{
	Oid			relid;
	List	   *indexes;
	ListCell   *lc;
	AttrNumber	name_att;

	/* a function that forgot to check still stops here, before reading a stranger's layout */
	gpumf_check_catalog_version();
	relid = get_relname_relid("models", gpumf_schema());
	if (!OidIsValid(relid))
		elog(ERROR, "gpumf: the model catalog gpumf.models is missing");
	*rel = table_open(relid, AccessShareLock);
	name_att = attnameAttNum(*rel, "name", false);
	*idx = NULL;
	indexes = RelationGetIndexList(*rel);
	foreach(lc, indexes)
	{
		Relation	i = index_open(lfirst_oid(lc), AccessShareLock);

		if (i->rd_index->indisunique && i->rd_index->indnatts == 1 &&
			i->rd_index->indkey.values[0] == name_att)
		{
			*idx = i;
			break;
		}
		index_close(i, AccessShareLock);
	}
	list_free(indexes);
	if (*idx == NULL)
		elog(ERROR, "gpumf: the model catalog has no unique index on name");
}

static Datum
col(Relation rel, HeapTuple tup, const char *name, bool *isnull)
{
	int			att = attnameAttNum(rel, name, false);

	if (att == InvalidAttrNumber)
	{
		*isnull = true;
		return (Datum) 0;
	}
	return heap_getattr(tup, att, RelationGetDescr(rel), isnull);
}

static char *
col_text(Relation rel, HeapTuple tup, const char *name)
{
	bool		isnull;
	Datum		d = col(rel, tup, name, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

static char *
col_name(Relation rel, HeapTuple tup, const char *name)
{
	bool		isnull;
	Datum		d = col(rel, tup, name, &isnull);

	return isnull ? NULL : pstrdup(NameStr(*DatumGetName(d)));
}

static double
col_float8(Relation rel, HeapTuple tup, const char *name)
{
	bool		isnull;
	Datum		d = col(rel, tup, name, &isnull);

	return isnull ? NAN : DatumGetFloat8(d);
}

static double
col_float4(Relation rel, HeapTuple tup, const char *name)
{
	bool		isnull;
	Datum		d = col(rel, tup, name, &isnull);

	return isnull ? NAN : DatumGetFloat4(d);
}

/*
 * The model's row under snap; false when there is none.  *copy (when not
 * NULL) gets the catalog tuple as a composite Datum of gpumf.models' row type.
 */
static bool
lookup(const char *name, GpumfModel *m, Snapshot snap, Datum *copy)
{
	Relation	rel,
				idx;
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		found = false;

	catalog_open(&rel, &idx);
	/* the index's own collation, which its btree order follows */
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ, CStringGetTextDatum(name));
	slot = table_slot_create(rel, NULL);
	scan = gm_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		shouldfree;
		HeapTuple	tup = ExecFetchSlotHeapTuple(slot, false, &shouldfree);
		bool		isnull;

		found = true;
		memset(m, 0, sizeof(*m));
		m->id = DatumGetInt64(col(rel, tup, "id", &isnull));
		m->name = pstrdup(name);
		m->version = DatumGetInt32(col(rel, tup, "version", &isnull));
		m->algorithm = col_text(rel, tup, "algorithm");
		m->factors = DatumGetInt32(col(rel, tup, "factors", &isnull));
		m->user_type = DatumGetObjectId(col(rel, tup, "user_type", &isnull));
		m->item_type = DatumGetObjectId(col(rel, tup, "item_type", &isnull));
		m->user_table = col_text(rel, tup, "user_table");
		m->item_table = col_text(rel, tup, "item_table");
		m->owner = DatumGetObjectId(col(rel, tup, "owner", &isnull));
		if (isnull)
			m->owner = InvalidOid;
		m->global_mean = col_float8(rel, tup, "global_mean");
		m->has_bias = !isnan(m->global_mean);
		m->value_min = col_float4(rel, tup, "value_min");
		m->value_max = col_float4(rel, tup, "value_max");
		m->explicit_values = strcmp(m->algorithm, "als") != 0 &&
			strcmp(m->algorithm, "graph_filter") != 0;
		m->source = col_text(rel, tup, "source");
		m->source_relid = DatumGetObjectId(col(rel, tup, "source_relid", &isnull));
		if (isnull)
			m->source_relid = InvalidOid;
		m->user_col = col_name(rel, tup, "user_col");
		m->item_col = col_name(rel, tup, "item_col");
		m->value_col = col_name(rel, tup, "value_col");
		{
			Datum		d = col(rel, tup, "params", &isnull);

			m->params = isnull ? NULL : DatumGetJsonbPCopy(d);
		}
		if (copy)
			*copy = heap_copy_tuple_as_datum(tup, RelationGetDescr(rel));
		if (shouldfree)
			heap_freetuple(tup);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

bool
gpumf_model_lookup(const char *name, GpumfModel *m)
{
	/* READ COMMITTED: a fresh snapshot (a just-committed retraining shows) */
	Snapshot	snap = RegisterSnapshot(GetTransactionSnapshot());
	bool		found;

	if (strlen(name) > GPUMF_MODEL_NAME_MAX)
		found = false;			/* no model can have that name */
	else
		found = lookup(name, m, snap, NULL);
	UnregisterSnapshot(snap);
	return found;
}

bool
gpumf_model_lookup_as_of(const char *name, GpumfModel *m, Snapshot snap)
{
	if (strlen(name) > GPUMF_MODEL_NAME_MAX)
		return false;			/* no model can have that name */
	return lookup(name, m, snap, NULL);
}

/*
 * Under REPEATABLE READ or SERIALIZABLE the transaction's snapshot may
 * predate a retraining that committed while we waited for the model's lock:
 * training on would end in a unique violation (a new model) or overwrite a
 * version we never saw.  Fail now, as PostgreSQL does for a concurrent
 * update, before any work is done.
 */
void
gpumf_model_check_current(const char *name, bool exists, int32 version)
{
	GpumfModel	latest;
	bool		found;

	if (!IsolationUsesXactSnapshot())
		return;
	found = lookup(name, &latest, GetLatestSnapshot(), NULL);
	if (found != exists || (found && latest.version != version))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to a concurrent training of model \"%s\"", name),
				 errhint("The transaction might succeed if retried.")));
}

void
gpumf_model_check_owner(const GpumfModel *m, const char *action)
{
	if (superuser() ||
		(OidIsValid(m->owner) && has_privs_of_role(GetUserId(), m->owner)))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s model \"%s\"", action, m->name),
			 OidIsValid(m->owner) && SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(m->owner)) ?
			 errdetail("The model belongs to role \"%s\".", GetUserNameFromId(m->owner, false)) :
			 errdetail("The model's owning role no longer exists."),
			 errhint("Choose another model name, or ask its owner (or a superuser) to %s it.", action)));
}

/* may the current user SELECT from relation relid? */
static bool
may_read(Oid relid)
{
	return OidIsValid(relid) &&
		pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
}

/* a factor table named qname, if it exists */
static Oid
factor_table_oid(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							NoLock, true);
}

/*
 * Access to a model follows its current version: the current version's
 * factor tables carry the model's grants, and a kept version's carry only
 * the owner's (model_store.c).  So a caller whose statement (or REPEATABLE
 * READ) snapshot still sees a version that a retraining or a version switch
 * has since replaced is checked against the version current now, as of a
 * fresh snapshot: a role that lost access is refused, a role that has it is
 * served the version its snapshot sees.  (In a parallel worker, where
 * GetLatestSnapshot is not allowed, a catalog snapshot taken now stands in:
 * for a user table it is taken afresh at each call.)
 */
void
gpumf_model_check_read(const char *name, int64 id, Oid urel, Oid irel)
{
	GpumfModel	now;
	Snapshot	snap;
	bool		found;

	/*
	 * ACLs as committed now, even where this transaction holds the tables'
	 * locks already (which took no invalidations since): a REVOKE takes
	 * effect at the caller's next call, inside a transaction too
	 */
	AcceptInvalidationMessages();
	if (may_read(urel) && may_read(irel))
		return;
	snap = RegisterSnapshot(IsInParallelMode() ?
							GetCatalogSnapshot(get_relname_relid("models", gpumf_schema())) :
							GetLatestSnapshot());
	found = lookup(name, &now, snap, NULL);
	UnregisterSnapshot(snap);
	if (found && now.id == id)
	{
		Oid			nu = factor_table_oid(now.user_table),
					ni = factor_table_oid(now.item_table);

		if ((nu != urel || ni != irel) && may_read(nu) && may_read(ni))
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for model \"%s\"", name),
			 errhint("The role that trained the model can grant SELECT on its factor tables (gpumf.models.user_table, item_table).")));
}

int64
gpumf_model_next_id(void)
{
	GpumfGuard	g;
	bool		isnull;
	int64		id;

	gpumf_guard_enter(&g, true);
	if (SPI_execute("SELECT pg_catalog.nextval('gpumf.models_id_seq'::pg_catalog.regclass)",
					false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "gpumf: allocating a model id failed");
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	gpumf_guard_exit(&g);
	return id;
}

/* one named column of the catalog row being written */
typedef struct CatalogValue
{
	const char *column;
	Oid			type;
	Datum		value;
	bool		isnull;
} CatalogValue;

#define CV(c, t, v)		{c, t, v, false}
#define CV_NULLABLE(c, t, v, n)	{c, t, v, n}

void
gpumf_model_write(const GpumfModelRow *row, bool exists)
{
	const GpumfModel *m = &row->m;
	CatalogValue v[] = {
		CV("id", INT8OID, Int64GetDatum(m->id)),
		CV("name", TEXTOID, CStringGetTextDatum(m->name)),
		CV("version", INT4OID, Int32GetDatum(m->version)),
		CV("algorithm", TEXTOID, CStringGetTextDatum(m->algorithm)),
		CV("factors", INT4OID, Int32GetDatum(m->factors)),
		CV("params", JSONBOID, JsonbPGetDatum(row->params)),
		CV("source", TEXTOID, CStringGetTextDatum(m->source)),
		CV_NULLABLE("source_relid", REGCLASSOID, ObjectIdGetDatum(row->source_relid),
					!OidIsValid(row->source_relid)),
		CV("user_col", NAMEOID, CStringGetDatum(m->user_col)),
		CV("item_col", NAMEOID, CStringGetDatum(m->item_col)),
		CV_NULLABLE("value_col", NAMEOID, m->value_col ? CStringGetDatum(m->value_col) : (Datum) 0,
					m->value_col == NULL),
		CV("user_type", REGTYPEOID, ObjectIdGetDatum(m->user_type)),
		CV("item_type", REGTYPEOID, ObjectIdGetDatum(m->item_type)),
		CV("n_users", INT4OID, Int32GetDatum(row->n_users)),
		CV("n_items", INT4OID, Int32GetDatum(row->n_items)),
		CV("n_rows", INT8OID, Int64GetDatum(row->n_rows)),
		CV("nnz", INT8OID, Int64GetDatum(row->nnz)),
		CV("backend", TEXTOID, CStringGetTextDatum(row->backend)),
		CV("device", TEXTOID, CStringGetTextDatum(row->device)),
		CV("iterations_run", INT4OID, Int32GetDatum(row->iterations_run)),
		CV("final_loss", FLOAT8OID, Float8GetDatum(row->final_loss)),
		CV_NULLABLE("train_rmse", FLOAT8OID, Float8GetDatum(row->train_rmse), isnan(row->train_rmse)),
		CV_NULLABLE("global_mean", FLOAT8OID, Float8GetDatum(m->global_mean), !m->has_bias),
		CV_NULLABLE("value_min", FLOAT4OID, Float4GetDatum((float4) m->value_min), !m->explicit_values),
		CV_NULLABLE("value_max", FLOAT4OID, Float4GetDatum((float4) m->value_max), !m->explicit_values),
		CV("read_seconds", FLOAT8OID, Float8GetDatum(row->read_seconds)),
		CV("build_seconds", FLOAT8OID, Float8GetDatum(row->build_seconds)),
		CV("transfer_seconds", FLOAT8OID, Float8GetDatum(row->transfer_seconds)),
		CV("train_seconds", FLOAT8OID, Float8GetDatum(row->train_seconds)),
		CV("store_seconds", FLOAT8OID, Float8GetDatum(row->store_seconds)),
		CV("loss_seconds", FLOAT8OID, Float8GetDatum(row->loss_seconds)),
		CV("user_table", TEXTOID, CStringGetTextDatum(m->user_table)),
		CV("item_table", TEXTOID, CStringGetTextDatum(m->item_table)),
		CV("owner", REGROLEOID, ObjectIdGetDatum(m->owner)),
		CV_NULLABLE("metrics", JSONBOID, row->metrics ? JsonbPGetDatum(row->metrics) : (Datum) 0,
					row->metrics == NULL),
	};
	int			n = lengthof(v);
	Oid			types[lengthof(v)];
	Datum		values[lengthof(v)];
	char		nulls[lengthof(v) + 1];
	StringInfoData q;
	GpumfGuard	g;
	int			rc;

	initStringInfo(&q);
	for (int i = 0; i < n; i++)
	{
		types[i] = v[i].type;
		values[i] = v[i].value;
		nulls[i] = v[i].isnull ? 'n' : ' ';
	}
	nulls[n] = '\0';
	if (exists)
	{
		/* $1 is the id, $2 the name: the row is found by both */
		appendStringInfoString(&q, "UPDATE gpumf.models SET ");
		for (int i = 2; i < n; i++)
			appendStringInfo(&q, "%s%s = $%d", i > 2 ? ", " : "", v[i].column, i + 1);
		appendStringInfoString(&q, ", created_at = pg_catalog.now()"
							   " WHERE id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2");
	}
	else
	{
		appendStringInfoString(&q, "INSERT INTO gpumf.models (");
		for (int i = 0; i < n; i++)
			appendStringInfo(&q, "%s%s", i ? ", " : "", v[i].column);
		appendStringInfoString(&q, ") VALUES (");
		for (int i = 0; i < n; i++)
			appendStringInfo(&q, "%s$%d", i ? ", " : "", i + 1);
		appendStringInfoChar(&q, ')');
	}
	/* the version being replaced is kept (model_history.c prunes beyond gpumf.keep_versions) */
	if (exists)
		gpumf_history_save(m->id);
	gpumf_guard_enter(&g, true);
	rc = SPI_execute_with_args(q.data, n, types, values, nulls, false, 0);
	if (rc != (exists ? SPI_OK_UPDATE : SPI_OK_INSERT) || SPI_processed != 1)
		elog(ERROR, "gpumf: writing the model catalog failed: %s", SPI_result_code_string(rc));
	gpumf_guard_exit(&g);
}

void
gpumf_model_delete(int64 id)
{
	GpumfGuard	g;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};

	/* the kept versions go with it */
	gpumf_history_forget(id);
	gpumf_guard_enter(&g, true);
	if (SPI_execute_with_args("DELETE FROM gpumf.models WHERE id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "gpumf: deleting the model failed");
	gpumf_guard_exit(&g);
}

/*
 * Record an evaluation's results in the catalog row of the version that was
 * evaluated, merged into what the row holds (a training's "holdout" record
 * stays; an earlier evaluation's keys are replaced).  Only the model's
 * owner may; the row is written as the
 * extension's owner.  A version replaced meanwhile is a serialization
 * failure: the results belong to a version that is no longer current.
 */
void
gpumf_model_record_metrics(const char *name, int64 id, int32 version, Jsonb *metrics)
{
	GpumfModel	m;
	GpumfGuard	g;
	Oid			types[3] = {INT8OID, INT4OID, JSONBOID};
	Datum		values[3] = {Int64GetDatum(id), Int32GetDatum(version), JsonbPGetDatum(metrics)};

	gpumf_model_lock(name);
	if (!gpumf_model_lookup(name, &m) || m.id != id)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("model \"%s\" was dropped while it was being evaluated", name)));
	gpumf_model_check_owner(&m, "record metrics of");
	if (m.version != version)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("model \"%s\" changed from version %d to %d while it was being evaluated",
						name, version, m.version),
				 errhint("Evaluate again to record metrics of the current version.")));
	gpumf_guard_enter(&g, true);
	if (SPI_execute_with_args("UPDATE gpumf.models SET metrics = "
							  "COALESCE(metrics, '{}'::pg_catalog.jsonb) OPERATOR(pg_catalog.||) $3 "
							  "WHERE id OPERATOR(pg_catalog.=) $1 "
							  "AND version OPERATOR(pg_catalog.=) $2",
							  3, types, values, NULL, false, 0) != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "gpumf: recording metrics failed");
	gpumf_guard_exit(&g);
}

Datum
gpumf_model_row_datum(const char *name)
{
	Snapshot	snap;
	GpumfModel	m;
	Datum		d = (Datum) 0;

	CommandCounterIncrement();	/* see what this transaction just wrote */
	snap = RegisterSnapshot(GetTransactionSnapshot());
	if (!lookup(name, &m, snap, &d))
		elog(ERROR, "gpumf: reading back model \"%s\" failed", name);
	UnregisterSnapshot(snap);
	return d;
}
