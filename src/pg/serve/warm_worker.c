/*
 * warm_worker.c: a model version read into shared memory as soon as the
 * training (or gpumf_use_version) that made it current commits.
 *
 * A training (or gpumf_use_version) makes a version current when its
 * transaction commits.  Reading it into shared memory then is the first
 * serving call's work unless someone does it first.  For a model that is
 * being served (a version of it is listed), at pre-commit the backend starts
 * a dynamic background worker, which waits for the transaction to end and,
 * if it committed and the version is still current, lets the model's other
 * versions go and serves the model once (gpumf_served_get: attach or read
 * and list), then exits.  With gpumf.warm_new_models (the default) every
 * committed training is warmed, so that even a new model's first call in
 * any session attaches; with it off, models nobody serves are left alone
 * (no shared memory is spent on them).  A worker that cannot be had (no
 * free slot) changes nothing: the first call reads the version as before.
 *
 * At server start (gpumf in shared_preload_libraries, gpumf.warm_at_start),
 * what was in shared memory is gone, so a worker registered by _PG_init
 * reads it back: connected to no database, it lists the databases and, one
 * after the other, starts a worker in each (gpumf_warm_db_main) that reads
 * every model's current version, most recently trained first, each in a
 * worker of its own as after a commit, until gpumf.shared_models_memory is
 * reached (a version that cannot be shared is logged and skipped).  That is
 * the state gpumf.warm_new_models keeps while the server runs.
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
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
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

typedef struct WarmRequest
{
	Oid			dbid;
	Oid			userid;			/* the extension's owner, who can read every factor table */
	TransactionId xid;			/* the transaction that makes the version current */
	int64		model_id;
	int32		version;
} WarmRequest;

static List *warm_pending = NIL;	/* WarmRequest *, in TopTransactionContext */
static bool warm_callback_set = false;

PGDLLEXPORT void gpumf_warm_main(Datum arg);
PGDLLEXPORT void gpumf_warm_start_main(Datum arg);
PGDLLEXPORT void gpumf_warm_db_main(Datum arg);

/* a warm-up worker's registration: no restart, after recovery, a database connection */
static void
warm_worker_spec(BackgroundWorker *w, const char *function, const char *type)
{
	memset(w, 0, sizeof(*w));
	w->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w->bgw_start_time = BgWorkerStart_RecoveryFinished;
	w->bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(w->bgw_library_name, BGW_MAXLEN, "gpumf");
	snprintf(w->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(w->bgw_name, BGW_MAXLEN, "%s", type);
	snprintf(w->bgw_type, BGW_MAXLEN, "%s", type);
}

static void
warm_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT)
	{
		foreach(lc, warm_pending)
		{
			WarmRequest *r = lfirst(lc);
			BackgroundWorker w;
			BackgroundWorkerHandle *h;

			warm_worker_spec(&w, "gpumf_warm_main", "gpumf warm model");
			snprintf(w.bgw_name, BGW_MAXLEN, "gpumf warm model " INT64_FORMAT " version %d",
					 r->model_id, r->version);
			StaticAssertStmt(sizeof(WarmRequest) <= BGW_EXTRALEN, "WarmRequest too large");
			memcpy(w.bgw_extra, r, sizeof(WarmRequest));
			if (!RegisterDynamicBackgroundWorker(&w, &h))
				elog(DEBUG1, "gpumf: no background worker to warm model " INT64_FORMAT
					 " version %d: its first call will read it", r->model_id, r->version);
		}
	}
	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		warm_pending = NIL;		/* the list lived in TopTransactionContext */
}

void
gpumf_served_warm_on_commit(int64 model_id, int32 version)
{
	WarmRequest *r;

	if (!gpumf_shared_models || !IsUnderPostmaster || max_worker_processes < 1 ||
		(!gpumf_warm_new_models && !gpumf_served_model_is_shared(model_id)))
		return;
	if (!warm_callback_set)
	{
		RegisterXactCallback(warm_xact_callback, NULL);
		warm_callback_set = true;
	}
	r = MemoryContextAllocZero(TopTransactionContext, sizeof(WarmRequest));
	r->dbid = MyDatabaseId;
	r->userid = gpumf_owner();
	r->xid = GetTopTransactionId();
	r->model_id = model_id;
	r->version = version;
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		warm_pending = lappend(warm_pending, r);
		MemoryContextSwitchTo(old);
	}
}

/*
 * In the training's own transaction, once it has written the new version:
 * read it into shared memory now, so that the first call after the commit
 * attaches (the worker that the commit starts then finds it listed, and only
 * lets the replaced version go).  Listing a version before its commit is
 * harmless: a reader finds a version through the catalog, which shows it
 * only once it commits; the versions it replaces stay listed until the
 * commit's worker lets them go; if the training aborts, its tables are gone
 * and the next sweep takes the entry out.  Failing here (no room under
 * gpumf.shared_models_memory, say) fails nothing: the worker tries again
 * after the commit, as before.  at_hand (or NULL): the items as the training
 * still has them, copied rather than read back from the table it wrote.
 */
static void
warm_now_in(void *arg)
{
	/* the shared segment is what counts: the training's own session keeps nothing */
	(void) gpumf_served_get((const char *) arg);
	gpumf_served_forget_local((const char *) arg);
}

/* whether gpumf_served_warm_now reads the model's new version into shared memory */
bool
gpumf_served_warms(int64 model_id)
{
	return gpumf_shared_models && IsUnderPostmaster && !IsInParallelMode() &&
		(gpumf_warm_new_models || gpumf_served_model_is_shared(model_id));
}

void
gpumf_served_warm_now(const char *name, int64 model_id, const GpumfItemsAtHand *at_hand)
{
	ErrorData  *e;

	if (!gpumf_served_warms(model_id))
		return;
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	gpumf_served_warming = true;
	gpumf_served_at_hand = at_hand;
	e = gpumf_try_subxact(warm_now_in, (void *) name);
	gpumf_served_at_hand = NULL;
	gpumf_served_warming = false;
	PopActiveSnapshot();
	if (e && e->sqlerrcode == ERRCODE_QUERY_CANCELED)
		ReThrowError(e);		/* a cancel or statement_timeout stops the training */
	if (e)
	{
		elog(DEBUG1, "gpumf: model \"%s\" not read into shared memory before its commit: %s",
			 name, e->message);
		FreeErrorData(e);
	}
}

/*
 * After warming: the versions other than the model's current one are no
 * longer shared (readers keep their mapping).  The current version is read
 * afresh under the model's lock, which every training, switch and drop holds
 * until it commits: a worker that was slow to start must not take out the
 * version a later training made current (it read the catalog before that
 * training committed).  If the lock is held, a version change is under way
 * and the worker its commit starts does this instead.
 */
static void
warm_forget_replaced(int64 model_id, const char *name)
{
	StartTransactionCommand();
	if (DatumGetBool(DirectFunctionCall2(pg_try_advisory_xact_lock_int4,
										 Int32GetDatum(GPUMF_LOCK_CLASS),
										 Int32GetDatum(gpumf_model_lock_key(name)))))
	{
		int32		version = -1;

		PushActiveSnapshot(GetTransactionSnapshot());
		if (SPI_connect() == SPI_OK_CONNECT)
		{
			GpumfGuard	g;
			Oid			types[1] = {INT8OID};
			Datum		values[1] = {Int64GetDatum(model_id)};
			bool		isnull = true;

			gpumf_guard_enter(&g, false);
			if (SPI_execute_with_args("SELECT version FROM gpumf.models WHERE id OPERATOR(pg_catalog.=) $1",
									  1, types, values, NULL, true, 1) == SPI_OK_SELECT &&
				SPI_processed == 1)
				version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc, 1, &isnull));
			gpumf_guard_exit(&g);
			SPI_finish();
			if (!isnull)
				gpumf_served_forget_other_versions(model_id, version);
		}
		PopActiveSnapshot();
	}
	CommitTransactionCommand();
}

/*
 * The worker: wait for the transaction, then serve the version once if it
 * is current.  Errors end the worker (logged); nothing is left half done,
 * since a segment is listed only when complete.
 */
void
gpumf_warm_main(Datum arg)
{
	WarmRequest r;
	char	   *name = NULL;
	int32		current = -1;
	double		t0;

	memcpy(&r, MyBgworkerEntry->bgw_extra, sizeof(r));
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(r.dbid, r.userid, 0);
	pgstat_report_appname("gpumf warm model");

	/* the training's transaction ends right after it starts us (none at server start) */
	if (TransactionIdIsValid(r.xid))
	{
		StartTransactionCommand();
		if (TransactionIdIsInProgress(r.xid))
			XactLockTableWait(r.xid, NULL, NULL, XLTW_None);
		CommitTransactionCommand();
		if (!TransactionIdDidCommit(r.xid))
			proc_exit(0);
	}

	t0 = gm_now();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() == SPI_OK_CONNECT)
	{
		GpumfGuard	g;
		Oid			types[1] = {INT8OID};
		Datum		values[1] = {Int64GetDatum(r.model_id)};

		gpumf_guard_enter(&g, false);
		if (SPI_execute_with_args("SELECT name, version FROM gpumf.models WHERE id OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 1) == SPI_OK_SELECT &&
			SPI_processed == 1)
		{
			bool		isnull;

			name = MemoryContextStrdup(TopTransactionContext,
									   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
			current = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
												  &isnull));
		}
		gpumf_guard_exit(&g);
		SPI_finish();
	}
	/* a later training or switch made another version current: its own worker warms it */
	if (name && current == r.version)
	{
		GpumfServed *m = gpumf_served_get(name);

		elog(DEBUG1, "gpumf: model \"%s\" version %d warmed in %.3f s (%s)", name, m->version,
			 gm_now() - t0, m->seg ? "shared" : "not shared");
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	if (name)
		warm_forget_replaced(r.model_id, name);
	proc_exit(0);
}

/* ------------------------------------------------------ at server start */

/* _PG_init, in shared_preload_libraries */
void
gpumf_warm_register_at_start(void)
{
	BackgroundWorker w;

	warm_worker_spec(&w, "gpumf_warm_start_main", "gpumf warm at start");
	RegisterBackgroundWorker(&w);
}

/*
 * The start-up worker: no database, so only the shared catalogs; one
 * database's worker at a time, so that the reads do not compete.
 */
void
gpumf_warm_start_main(Datum arg)
{
	List	   *dbs = NIL;
	ListCell   *lc;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	double		t0 = gm_now();

	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("gpumf warm at start");

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (db->datallowconn && !db->datistemplate)
			dbs = lappend_oid(dbs, db->oid);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		dbs = list_copy(dbs);
		MemoryContextSwitchTo(old);
	}
	CommitTransactionCommand();

	foreach(lc, dbs)
	{
		BackgroundWorker w;
		BackgroundWorkerHandle *h;
		Oid			dbid = lfirst_oid(lc);
		pid_t		pid;

		CHECK_FOR_INTERRUPTS();
		warm_worker_spec(&w, "gpumf_warm_db_main", "gpumf warm at start (database)");
		w.bgw_main_arg = ObjectIdGetDatum(dbid);
		w.bgw_notify_pid = MyProcPid;
		if (!RegisterDynamicBackgroundWorker(&w, &h))
		{
			elog(LOG, "gpumf: no background worker to read the models of database %u into shared memory: their first calls will read them",
				 dbid);
			continue;
		}
		if (WaitForBackgroundWorkerStartup(h, &pid) == BGWH_STARTED)
			(void) WaitForBackgroundWorkerShutdown(h);
	}
	elog(DEBUG1, "gpumf: models of %d databases read into shared memory in %.3f s",
		 list_length(dbs), gm_now() - t0);
	proc_exit(0);
}

/*
 * One database: if gpumf is installed, every model's current version into
 * shared memory, most recently trained first, each by a worker of its own
 * (gpumf_warm_main, as after a training's commit, with no transaction to
 * wait for), one after the other.  A version that cannot be shared (the
 * total past gpumf.shared_models_memory, say) ends its worker with the
 * ERROR in the log, and the next one is tried.
 */
void
gpumf_warm_db_main(Datum arg)
{
	List	   *reqs = NIL;
	ListCell   *lc;
	int			warmed = 0;
	double		t0;
	Oid			owner;
	char	   *dbname;

	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(arg), InvalidOid, 0);
	pgstat_report_appname("gpumf warm at start");

	StartTransactionCommand();
	if (!OidIsValid(get_extension_oid("gpumf", true)))
	{
		CommitTransactionCommand();
		proc_exit(0);
	}
	owner = gpumf_owner();
	dbname = MemoryContextStrdup(TopMemoryContext, get_database_name(MyDatabaseId));
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() == SPI_OK_CONNECT)
	{
		GpumfGuard	g;

		gpumf_guard_enter(&g, false);
		if (SPI_execute("SELECT id, version FROM gpumf.models ORDER BY created_at DESC, id DESC",
						true, 0) == SPI_OK_SELECT)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			for (uint64 i = 0; i < SPI_processed; i++)
			{
				WarmRequest *r = palloc0(sizeof(WarmRequest));
				bool		n1,
							n2;

				r->dbid = MyDatabaseId;
				r->userid = owner;
				r->xid = InvalidTransactionId;
				r->model_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &n1));
				r->version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &n2));
				if (!n1 && !n2)
					reqs = lappend(reqs, r);
			}
			MemoryContextSwitchTo(old);
		}
		gpumf_guard_exit(&g);
		SPI_finish();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();

	t0 = gm_now();
	foreach(lc, reqs)
	{
		WarmRequest *r = lfirst(lc);
		BackgroundWorker w;
		BackgroundWorkerHandle *h;
		pid_t		pid;

		CHECK_FOR_INTERRUPTS();
		warm_worker_spec(&w, "gpumf_warm_main", "gpumf warm at start (model)");
		memcpy(w.bgw_extra, r, sizeof(WarmRequest));
		w.bgw_notify_pid = MyProcPid;
		if (!RegisterDynamicBackgroundWorker(&w, &h))
			break;				/* no slot: the rest are read by their first calls */
		if (WaitForBackgroundWorkerStartup(h, &pid) == BGWH_STARTED)
			(void) WaitForBackgroundWorkerShutdown(h);
		StartTransactionCommand();
		if (gpumf_served_model_is_shared(r->model_id))
			warmed++;
		CommitTransactionCommand();
	}
	if (reqs != NIL)
		elog(LOG, "gpumf: %d of %d models of database \"%s\" read into shared memory at start in %.3f s%s",
			 warmed, list_length(reqs), dbname, gm_now() - t0,
			 warmed < list_length(reqs) ? " (the others: see above, or their first calls read them)" : "");
	proc_exit(0);
}
