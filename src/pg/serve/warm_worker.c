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

			memset(&w, 0, sizeof(w));
			w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
			w.bgw_start_time = BgWorkerStart_RecoveryFinished;
			w.bgw_restart_time = BGW_NEVER_RESTART;
			snprintf(w.bgw_library_name, BGW_MAXLEN, "gpumf");
			snprintf(w.bgw_function_name, BGW_MAXLEN, "gpumf_warm_main");
			snprintf(w.bgw_name, BGW_MAXLEN, "gpumf warm model " INT64_FORMAT " version %d",
					 r->model_id, r->version);
			snprintf(w.bgw_type, BGW_MAXLEN, "gpumf warm model");
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

	/* the training's transaction ends right after it starts us */
	StartTransactionCommand();
	if (TransactionIdIsInProgress(r.xid))
		XactLockTableWait(r.xid, NULL, NULL, XLTW_None);
	CommitTransactionCommand();
	if (!TransactionIdDidCommit(r.xid))
		proc_exit(0);

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
