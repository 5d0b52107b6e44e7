/*
 * wal_ahead.c: the WAL segment files a training's store will fill, made by
 * background workers while the training reads, builds and trains.
 *
 * A logged store on a wal_level replica (or logical) server writes about as
 * much WAL as the factor tables' heap: 8 GB for 8M users and 2M items at
 * factors 128.  Where pg_wal holds no recycled segment files for it (a new
 * server, or one whose WAL stayed below min_wal_size since), the WAL writer
 * makes each 16 MB file when it reaches it: with wal_init_zero (the default)
 * it writes the file full of zeros and fsyncs it first, so the disk takes the
 * store's WAL twice, inside the store.  The read, the build and the training
 * before it hardly use the disk.
 *
 * So, as soon as a training can estimate its WAL (from the source's
 * statistics before the read, exactly once the matrix is built), it starts
 * gpumf.wal_ahead_workers dynamic background workers.  Each makes every
 * n-th segment file from the one after the WAL written so far up to the
 * estimate's end, through PostgreSQL's own XLogFileInit: a temporary file
 * zero-filled (or not, as wal_init_zero says) and fsynced, then installed
 * under ControlFileLock.  A file that is already there (recycled, or made by
 * the WAL writer first) is left alone, and one that XLogFileInit finds taken
 * meanwhile goes to the next free name, as for the WAL writer's own
 * preallocation: these are the files the server would have made, made
 * earlier.  The estimate is capped at max_wal_size.
 *
 * The workers stop when the training's transaction ends (commit, abort,
 * prepare) or after 30 s with nothing to make.  A file made that the store
 * does not reach (an estimate too high, a training that failed) is used by
 * the WAL that follows.  No worker slot, or gpumf.wal_ahead_workers = 0,
 * changes nothing but the time.
 */
#include "gpumf_model.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/resowner.h"

#define AHEAD_MIN_SEGMENTS	4		/* fewer files to make than this: no worker */
#define AHEAD_IDLE_MS		30000	/* a worker with nothing to make for this long exits */
#define AHEAD_POLL_MS		20
#define AHEAD_MAX_WORKERS	8

typedef struct WalAheadShared
{
	pg_atomic_uint64 last;		/* the last segment to make (the backend moves it) */
	pg_atomic_uint32 stop;		/* set when the training's transaction ends */
	pg_atomic_uint32 made;		/* files made by the workers */
	pg_atomic_uint32 found;		/* files that were there already */
	TimeLineID	tli;
	int			nworkers;
} WalAheadShared;

typedef struct WalAheadArg		/* a worker's bgw_extra */
{
	int			index;			/* it makes the segments equal to index modulo nworkers */
} WalAheadArg;

static dsm_segment *ahead_seg = NULL;
static WalAheadShared *ahead = NULL;
static bool ahead_callback_set = false;

PGDLLEXPORT void gpumf_wal_ahead_main(Datum arg);

double
gpumf_store_wal_bytes(double users, double items, double nnz, int k)
{
	/*
	 * A row: tuple header and line pointer 28, a key 8 (more for text), the
	 * factors' array header 24 and 4 a factor, the bias 4; a user's row also
	 * holds the seen items (an array header and 4 an item); about 24 bytes a
	 * row of each index.  Pages are full-page images in the WAL.
	 */
	double		row = 28 + 8 + 24 + 4.0 * k + 4 + 24;

	return 1.02 * (users * (row + 24) + items * row + nnz * 4.0);
}

static void
ahead_xact_callback(XactEvent event, void *arg)
{
	if (ahead == NULL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		pg_atomic_write_u32(&ahead->stop, 1);
		elog(DEBUG1, "gpumf: WAL segment files made ahead of the store: %u made, %u there already",
			 pg_atomic_read_u32(&ahead->made), pg_atomic_read_u32(&ahead->found));
		ahead = NULL;
		dsm_detach(ahead_seg);	/* a worker still attached keeps the segment */
		ahead_seg = NULL;
	}
}

/*
 * The store to come will write about bytes of WAL: have the segment files
 * for it made ahead (the first call of a transaction starts the workers, a
 * later one moves their end).
 */
void
gpumf_wal_ahead(double bytes)
{
	XLogSegNo	written,
				last;
	double		nseg,
				cap;
	int			i,
				started = 0;
	ResourceOwner owner;
	WalAheadShared *sh;

	if (gpumf_wal_ahead_workers <= 0 || gpumf_unlogged_models || !XLogIsNeeded() ||
		!IsUnderPostmaster || RecoveryInProgress() || !(bytes > 0) || max_worker_processes < 1)
		return;
	XLByteToSeg(GetXLogWriteRecPtr(), written, wal_segment_size);
	nseg = ceil(bytes / wal_segment_size) + 1;
	cap = (double) max_wal_size_mb * 1024.0 * 1024.0 / wal_segment_size;
	nseg = Min(nseg, cap);
	last = written + (XLogSegNo) nseg;
	if (ahead)
	{
		pg_atomic_write_u64(&ahead->last, last);
		return;
	}
	if (nseg < AHEAD_MIN_SEGMENTS)
		return;
	if (!ahead_callback_set)
	{
		RegisterXactCallback(ahead_xact_callback, NULL);
		ahead_callback_set = true;
	}
	/* the transaction's, not a subtransaction's: the workers run until it ends */
	owner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	ahead_seg = dsm_create(sizeof(WalAheadShared), 0);
	CurrentResourceOwner = owner;
	sh = dsm_segment_address(ahead_seg);
	pg_atomic_init_u64(&sh->last, last);
	pg_atomic_init_u32(&sh->stop, 0);
	pg_atomic_init_u32(&sh->made, 0);
	pg_atomic_init_u32(&sh->found, 0);
	sh->tli = GetWALInsertionTimeLine();
	sh->nworkers = Min(gpumf_wal_ahead_workers, AHEAD_MAX_WORKERS);
	ahead = sh;
	for (i = 0; i < sh->nworkers; i++)
	{
		BackgroundWorker w;
		BackgroundWorkerHandle *h;
		WalAheadArg wa = {i};

		memset(&w, 0, sizeof(w));
		w.bgw_flags = BGWORKER_SHMEM_ACCESS;
		w.bgw_start_time = BgWorkerStart_RecoveryFinished;
		w.bgw_restart_time = BGW_NEVER_RESTART;
		snprintf(w.bgw_library_name, BGW_MAXLEN, "gpumf");
		snprintf(w.bgw_function_name, BGW_MAXLEN, "gpumf_wal_ahead_main");
		snprintf(w.bgw_name, BGW_MAXLEN, "gpumf WAL ahead %d of %d for PID %d", i + 1, sh->nworkers,
				 MyProcPid);
		snprintf(w.bgw_type, BGW_MAXLEN, "gpumf WAL ahead");
		w.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(ahead_seg));
		memcpy(w.bgw_extra, &wa, sizeof(wa));
		if (RegisterDynamicBackgroundWorker(&w, &h))
			started++;
	}
	/* a worker that did not start leaves its segments to the WAL writer */
	elog(DEBUG1, "gpumf: %d of %d workers to make up to %.0f WAL segment files ahead of the store",
		 started, sh->nworkers, nseg);
}

void
gpumf_wal_ahead_main(Datum arg)
{
	dsm_segment *seg;
	WalAheadShared *sh;
	WalAheadArg wa;
	XLogSegNo	next = 0;
	int			idle_ms = 0;

	BackgroundWorkerUnblockSignals();
	memcpy(&wa, MyBgworkerEntry->bgw_extra, sizeof(wa));
	seg = dsm_attach(DatumGetUInt32(arg));
	if (seg == NULL)
		proc_exit(0);			/* the training's transaction ended first */
	sh = dsm_segment_address(seg);
	while (!pg_atomic_read_u32(&sh->stop))
	{
		XLogSegNo	written;
		char		path[MAXPGPATH];
		struct stat st;

		CHECK_FOR_INTERRUPTS();
		XLByteToSeg(GetXLogWriteRecPtr(), written, wal_segment_size);
		if (next <= written)
		{
			/* the first of ours after the segment being written */
			next = written + 1;
			next += (wa.index - next % sh->nworkers + sh->nworkers) % sh->nworkers;
		}
		if (next > pg_atomic_read_u64(&sh->last))
		{
			if (idle_ms >= AHEAD_IDLE_MS)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 AHEAD_POLL_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			idle_ms += AHEAD_POLL_MS;
			continue;
		}
		idle_ms = 0;
		XLogFilePath(path, sh->tli, next, wal_segment_size);
		if (stat(path, &st) == 0)
			pg_atomic_fetch_add_u32(&sh->found, 1);
		else
		{
			close(XLogFileInit(next, sh->tli));
			pg_atomic_fetch_add_u32(&sh->made, 1);
		}
		next += sh->nworkers;
	}
	dsm_detach(seg);
	proc_exit(0);
}
