/*
 * train_service.c: the training service, one background worker that keeps
 * a CUDA context (and the kernels and cuBLAS set-up it has loaded) between
 * trainings, so that a session's first GPU training does not pay a
 * process's GPU start-up (the driver's initialisation, the context, the
 * lazily loaded kernels: 0.3-0.6 s on an H100).
 *
 * A backend that trains on the GPU (gpumf.training_service = 'gpu', the
 * default) starts the worker when none runs (a dynamic background worker, no
 * shared_preload_libraries needed), copies the CSR/CSC it built into a
 * dynamic shared memory segment, and waits on its latch while the worker
 * trains with the core's gm_mf_train_eval and writes the factors into the
 * same segment; the backend forwards the per-iteration progress as NOTICEs,
 * turns a cancel or statement_timeout into a stop request the worker polls
 * between slices of work (milliseconds), and stores the factors from the
 * segment.  One training at a time: while the worker is busy, another
 * session trains in its own process as before.  The worker exits after
 * gpumf.training_service_idle_timeout seconds without work.  With gpumf in
 * shared_preload_libraries it also starts with the server.
 * gpumf.training_service = 'always' sends CPU trainings through it too
 * (tests use it on machines without a GPU); 'off' never uses it.
 *
 * Shared state: a small struct in the main shared memory (found by name,
 * like the model registry); the job, its progress and its results live in
 * the requester's segment.  The worker calls nothing of PostgreSQL's while
 * the core trains but SetLatch.
 */
#include "gpumf_train.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "miscadmin.h"
#include "access/xact.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procsignal.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#define SERVICE_NAME "gpumf training service"

typedef enum
{
	SVC_NONE = 0,				/* no worker */
	SVC_STARTING,				/* registered, not ready yet */
	SVC_READY,					/* waiting for a job */
	SVC_BUSY					/* a job is claimed or running */
} SvcState;

typedef struct SvcShared
{
	slock_t		mutex;
	int			state;			/* SvcState */
	pid_t		pid;			/* the worker's, once it runs */
	Latch	   *latch;			/* the worker's */
	TimestampTz since;			/* when state last changed */
	int			probe_rc;		/* the worker's CUDA probe (GM_OK: a GPU) */
	char		device[128];
	char		why[GM_ERRLEN];
	dsm_handle	job;			/* the claimed job's segment (0: none) */
} SvcShared;

/* one entry of a job's progress: an iteration or a held-out evaluation */
typedef struct SvcProgress
{
	int			is_eval;
	int			iteration;
	double		loss;
	double		rmse;
	double		seconds;
	gm_rank_result r;
} SvcProgress;

/* the head of a job's segment; arrays follow at the offsets given */
typedef struct SvcJob
{
	/* in */
	gm_mf_params p;
	int64		memory_cap;		/* device memory cap, bytes (-1: none) */
	Latch	   *requester;
	int32		n_users;
	int32		n_items;
	int64		nnz;
	int64		test_nnz;		/* held-out entries (0: no evaluation) */
	int			metric,
				K,
				every,
				patience,
				keep_best;
	Size		off_rp,
				off_ri,
				off_rv,
				off_tp,
				off_ti,
				off_tv,
				off_hp,
				off_hi,
				off_hv;
	Size		off_x,
				off_y,
				off_ub,
				off_ib,
				off_prog;
	int			max_progress;
	/* control */
	pg_atomic_uint32 cancel;
	pg_atomic_uint32 n_progress;	/* entries published */
	pg_atomic_uint32 done;
	/* out */
	int			rc;
	char		err[GM_ERRLEN];
	gm_mf_result res;
	double		global_mean;
	double		best;
	int			best_iteration;
	gm_rank_result best_result;
	double		eval_seconds;
} SvcJob;

static SvcShared *svc = NULL;

/* the job the worker runs now (for its exit callback) */
static SvcJob *running_job = NULL;

PGDLLEXPORT void gpumf_training_service_main(Datum arg);

static SvcShared *
svc_get(void)
{
	if (svc == NULL)
		svc = gpumf_shmem_struct(SERVICE_NAME, sizeof(SvcShared), offsetof(SvcShared, mutex));
	return svc;
}

#define ALIGN64(x) (((x) + 63) & ~((Size) 63))

/* ---------------------------------------------------------------- worker */

static pthread_t worker_main_thread;

static int
worker_should_stop(void *arg)
{
	SvcJob	   *job = arg;

	/*
	 * Absorb a barrier (DROP DATABASE waits for every process to) between
	 * slices of a long training too; only on the main thread, which it may
	 * use as a backend's.
	 */
	if (ProcSignalBarrierPending && pthread_equal(pthread_self(), worker_main_thread))
		ProcessProcSignalBarrier();
	return pg_atomic_read_u32(&job->cancel) != 0 || ShutdownRequestPending;
}

static void
publish(SvcJob *job, const SvcProgress *e)
{
	uint32		n = pg_atomic_read_u32(&job->n_progress);

	if ((int) n < job->max_progress)
	{
		((SvcProgress *) ((char *) job + job->off_prog))[n] = *e;
		pg_write_barrier();
		pg_atomic_write_u32(&job->n_progress, n + 1);
	}
	SetLatch(job->requester);
}

static void
worker_on_iteration(void *arg, int it, double loss, double rmse, double seconds)
{
	SvcProgress e;

	memset(&e, 0, sizeof(e));
	e.iteration = it;
	e.loss = loss;
	e.rmse = rmse;
	e.seconds = seconds;
	publish((SvcJob *) arg, &e);
}

static void
worker_on_eval(void *arg, int it, const gm_rank_result *r)
{
	SvcProgress e;

	memset(&e, 0, sizeof(e));
	e.is_eval = 1;
	e.iteration = it;
	e.r = *r;
	publish((SvcJob *) arg, &e);
}

static gm_csr
csr_at(SvcJob *job, int32 rows, int32 cols, int64 nnz, Size p, Size i, Size v)
{
	gm_csr		c;

	c.n_rows = rows;
	c.n_cols = cols;
	c.nnz = nnz;
	c.indptr = (int64_t *) ((char *) job + p);
	c.indices = (int32_t *) ((char *) job + i);
	c.data = (float *) ((char *) job + v);
	return c;
}

/* Train the job in seg (the worker). */
static void
run_job(SvcJob *job)
{
	gm_csr		R = csr_at(job, job->n_users, job->n_items, job->nnz,
						   job->off_rp, job->off_ri, job->off_rv),
				Rt = csr_at(job, job->n_items, job->n_users, job->nnz,
							job->off_tp, job->off_ti, job->off_tv),
				H;
	gm_mf_data	d;
	gm_mf_eval	ev;
	gm_callbacks cbs;

	memset(&d, 0, sizeof(d));
	d.R = &R;
	d.Rt = &Rt;
	d.X = (float *) ((char *) job + job->off_x);
	d.Y = (float *) ((char *) job + job->off_y);
	d.user_bias = job->off_ub ? (float *) ((char *) job + job->off_ub) : NULL;
	d.item_bias = job->off_ib ? (float *) ((char *) job + job->off_ib) : NULL;
	memset(&ev, 0, sizeof(ev));
	if (job->test_nnz > 0)
	{
		H = csr_at(job, job->n_users, job->n_items, job->test_nnz,
				   job->off_hp, job->off_hi, job->off_hv);
		ev.test = &H;
		ev.metric = (gm_rank_metric) job->metric;
		ev.K = job->K;
		ev.every = job->every;
		ev.patience = job->patience;
		ev.keep_best = job->keep_best;
		ev.on_eval = worker_on_eval;
		ev.arg = job;
	}
	cbs.should_stop = worker_should_stop;
	cbs.on_iteration = worker_on_iteration;
	cbs.arg = job;
	if (job->p.backend == GM_BACKEND_CUDA)
		gm_cuda_memory_cap(job->memory_cap);
	job->err[0] = '\0';
	/* refused before the upload when the card cannot hold it, as in a backend */
	if (gpumf_gpu_memory_short(&job->p, &R, &Rt, "training", job->err, sizeof(job->err)))
		job->rc = GM_ENOMEM;
	else
		job->rc = gm_mf_train_eval(&job->p, &d, &cbs, job->test_nnz > 0 ? &ev : NULL,
								   &job->res, job->err, sizeof(job->err));
	if (job->rc == GM_ECANCELED && pg_atomic_read_u32(&job->cancel) == 0)
	{
		/* stopped by the worker's own shutdown, not by the requester */
		job->rc = GM_EDEVICE;
		snprintf(job->err, sizeof(job->err),
				 "the training service was shut down during the training");
	}
	job->global_mean = d.global_mean;
	if (job->test_nnz > 0)
	{
		job->best = ev.best;
		job->best_iteration = ev.best_iteration;
		job->best_result = ev.best_result;
		job->eval_seconds = ev.eval_seconds;
	}
}

/* The worker's exit (normal or FATAL): a running job fails, the slot is freed. */
static void
worker_exit(int code, Datum arg)
{
	SvcShared  *s = svc_get();

	if (running_job)
	{
		running_job->rc = GM_EDEVICE;
		snprintf(running_job->err, sizeof(running_job->err),
				 "the training service exited during the training");
		pg_atomic_write_u32(&running_job->done, 1);
		SetLatch(running_job->requester);
		running_job = NULL;
	}
	SpinLockAcquire(&s->mutex);
	if (s->pid == MyProcPid)
	{
		s->state = SVC_NONE;
		s->pid = 0;
		s->latch = NULL;
		s->job = 0;
		s->since = GetCurrentTimestamp();
	}
	SpinLockRelease(&s->mutex);
}

void
gpumf_training_service_main(Datum arg)
{
	SvcShared  *s;
	char		name[128] = "",
				why[GM_ERRLEN] = "";
	int			rc;
	double		t0 = gm_now();
	TimestampTz idle_since;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	/* no database: only so that pg_stat_activity lists the worker */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_activity(STATE_IDLE, NULL);
	s = svc_get();
	SpinLockAcquire(&s->mutex);
	if (s->pid != 0)
	{
		/* one runs already (started with the server, and a backend's at once) */
		SpinLockRelease(&s->mutex);
		proc_exit(0);
	}
	s->pid = MyProcPid;
	s->latch = MyLatch;
	if (s->state == SVC_NONE)
	{
		/* started with the server (shared_preload_libraries), not by a backend */
		s->state = SVC_STARTING;
		s->since = GetCurrentTimestamp();
	}
	SpinLockRelease(&s->mutex);
	before_shmem_exit(worker_exit, (Datum) 0);
	worker_main_thread = pthread_self();

	/* the GPU's start-up, paid once: the probe, then a training of each common shape */
	rc = gm_cuda_available(gpumf_cuda_module_path(), name, sizeof(name), why, sizeof(why));
	if (rc == GM_OK)
	{
		static const int warm_factors[] = {64, 512};

		for (int i = 0; i < (int) lengthof(warm_factors); i++)
		{
			gm_mf_params p;
			char		err[GM_ERRLEN];

			gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
			p.backend = GM_BACKEND_CUDA;
			p.factors = warm_factors[i];
			if (gm_mf_warmup(&p, err, sizeof(err)) != GM_OK)
				elog(LOG, "%s: warm-up at factors %d failed: %s", SERVICE_NAME, p.factors, err);
		}
	}
	SpinLockAcquire(&s->mutex);
	s->probe_rc = rc;
	strlcpy(s->device, rc == GM_OK ? name : "", sizeof(s->device));
	strlcpy(s->why, rc == GM_OK ? "" : why, sizeof(s->why));
	if (s->state == SVC_STARTING)
		s->state = SVC_READY;
	s->since = GetCurrentTimestamp();
	SpinLockRelease(&s->mutex);
	elog(DEBUG1, "%s: ready in %.3f s (%s)", SERVICE_NAME, gm_now() - t0,
		 rc == GM_OK ? name : why);
	idle_since = GetCurrentTimestamp();

	for (;;)
	{
		dsm_handle h = 0;
		/* at least once a minute (a claim to take back), else at the idle timeout */
		long		timeout = gpumf_training_service_idle_s < 0 ? 60000L :
			Min(Max(1000L * gpumf_training_service_idle_s, 10L), 60000L);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();	/* procsignal barriers */
		if (ShutdownRequestPending)
			break;
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		SpinLockAcquire(&s->mutex);
		/* a claim never handed over (its session died at that moment): taken back */
		if (s->state == SVC_BUSY && s->job == 0 &&
			TimestampDifferenceExceeds(s->since, GetCurrentTimestamp(), 60000))
		{
			s->state = SVC_READY;
			s->since = GetCurrentTimestamp();
		}
		if (s->state == SVC_BUSY)
			h = s->job;
		else if (gpumf_training_service_idle_s >= 0 &&
				 TimestampDifferenceExceeds(idle_since, GetCurrentTimestamp(),
											1000 * gpumf_training_service_idle_s))
		{
			/* idle long enough: no claim can come in while the state says NONE */
			s->state = SVC_NONE;
			s->pid = 0;
			s->latch = NULL;
			s->since = GetCurrentTimestamp();
			SpinLockRelease(&s->mutex);
			elog(DEBUG1, "%s: idle for %d s, exiting", SERVICE_NAME,
				 gpumf_training_service_idle_s);
			proc_exit(0);
		}
		SpinLockRelease(&s->mutex);
		if (h != 0)
		{
			dsm_segment *seg = dsm_attach(h);

			if (seg != NULL)
			{
				SvcJob	   *job = dsm_segment_address(seg);

				running_job = job;
				pgstat_report_activity(STATE_RUNNING, "training");
				run_job(job);
				pgstat_report_activity(STATE_IDLE, NULL);
				running_job = NULL;
				pg_atomic_write_u32(&job->done, 1);
				SetLatch(job->requester);
				dsm_detach(seg);
			}
			SpinLockAcquire(&s->mutex);
			s->job = 0;
			if (s->state == SVC_BUSY)
				s->state = SVC_READY;
			s->since = GetCurrentTimestamp();
			SpinLockRelease(&s->mutex);
			idle_since = GetCurrentTimestamp();
		}
	}
	proc_exit(0);
}

/* --------------------------------------------------------------- backend */

/*
 * Can this machine have the service train on the GPU?  The module is
 * installed and the driver's library loads (cheap: no cuInit); the
 * worker's probe says the rest.
 */
static bool
gpu_possible(void)
{
	static int	answer = -1;

	if (answer < 0)
	{
		void	   *drv = NULL;

		answer = access(gpumf_cuda_module_path(), F_OK) == 0 &&
			(drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) != NULL;
		if (drv)
			dlclose(drv);
	}
	return answer == 1;
}

/* The worker's registration (a backend's, or the server's at start). */
static void
worker_spec(BackgroundWorker *w)
{
	memset(w, 0, sizeof(*w));
	w->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w->bgw_start_time = BgWorkerStart_RecoveryFinished;
	w->bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(w->bgw_library_name, BGW_MAXLEN, "gpumf");
	snprintf(w->bgw_function_name, BGW_MAXLEN, "gpumf_training_service_main");
	snprintf(w->bgw_name, BGW_MAXLEN, SERVICE_NAME);
	snprintf(w->bgw_type, BGW_MAXLEN, SERVICE_NAME);
}

void
gpumf_service_register_at_start(void)
{
	BackgroundWorker w;

	worker_spec(&w);
	RegisterBackgroundWorker(&w);
}

/* Register the worker if none runs (no wait); false when it cannot be. */
static bool
start_worker(void)
{
	SvcShared  *s = svc_get();
	BackgroundWorker w;
	BackgroundWorkerHandle *h;
	bool		start = false;

	SpinLockAcquire(&s->mutex);
	/* a registration that never came up (no fork): try again after 30 s */
	if (s->state == SVC_STARTING && s->pid == 0 &&
		TimestampDifferenceExceeds(s->since, GetCurrentTimestamp(), 30000))
		s->state = SVC_NONE;
	if (s->state == SVC_NONE)
	{
		s->state = SVC_STARTING;
		s->since = GetCurrentTimestamp();
		s->probe_rc = GM_OK;
		start = true;
	}
	SpinLockRelease(&s->mutex);
	if (!start)
		return true;

	worker_spec(&w);
	if (!RegisterDynamicBackgroundWorker(&w, &h))
	{
		SpinLockAcquire(&s->mutex);
		s->state = SVC_NONE;
		SpinLockRelease(&s->mutex);
		elog(DEBUG1, "gpumf: no background worker slot for the training service: training in this session");
		return false;
	}
	return true;
}

/* Does gpumf.training_service send this training to the worker? */
static bool
wanted(gm_backend_kind b)
{
	if (gpumf_training_service == GPUMF_SERVICE_OFF || !IsUnderPostmaster)
		return false;
	if (gpumf_training_service == GPUMF_SERVICE_ALWAYS)
		return true;
	return b == GM_BACKEND_CUDA && gpu_possible();
}

bool
gpumf_service_prefetch(bool gpu)
{
	SvcShared  *s;
	bool		busy;

	if (!wanted(gpu ? GM_BACKEND_CUDA : GM_BACKEND_CPU) || !start_worker())
		return false;
	s = svc_get();
	SpinLockAcquire(&s->mutex);
	busy = s->state == SVC_BUSY;
	SpinLockRelease(&s->mutex);
	return !busy;
}

/*
 * Start the worker if none runs and wait (up to a minute) for it to be
 * past its start-up: true when it is (ready or busy), with its probe's
 * result in *rc, name and why.
 */
static bool
wait_started(int *rc, char *name, size_t namelen, char *why, size_t whylen)
{
	SvcShared  *s = svc_get();
	double		t0 = gm_now();

	if (!start_worker())
		return false;
	for (;;)
	{
		int			state;

		SpinLockAcquire(&s->mutex);
		state = s->state;
		if (state == SVC_READY || state == SVC_BUSY)
		{
			*rc = s->probe_rc;
			if (name)
				strlcpy(name, s->device, namelen);
			if (why)
				strlcpy(why, s->why, whylen);
			SpinLockRelease(&s->mutex);
			return true;
		}
		SpinLockRelease(&s->mutex);
		if (state == SVC_NONE || gm_now() - t0 > 60)
			return false;		/* it exited, or never came up */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 5, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

int
gpumf_service_device(char *name, size_t namelen, char *why, size_t whylen)
{
	int			rc;

	if (!wanted(GM_BACKEND_CUDA) || !wait_started(&rc, name, namelen, why, whylen))
		return -1;
	return rc;
}

/* Copy a CSR's arrays to base + offsets; the offsets are returned. */
static Size
csr_place(Size off, const gm_csr *c, Size *p, Size *i, Size *v)
{
	*p = off;
	off = ALIGN64(off + sizeof(int64) * ((Size) c->n_rows + 1));
	*i = off;
	off = ALIGN64(off + sizeof(int32) * (Size) c->nnz);
	*v = off;
	return ALIGN64(off + sizeof(float) * (Size) c->nnz);
}

static void
csr_copy(char *base, const gm_csr *c, Size p, Size i, Size v)
{
	memcpy(base + p, c->indptr, sizeof(int64) * ((Size) c->n_rows + 1));
	memcpy(base + i, c->indices, sizeof(int32) * (Size) c->nnz);
	memcpy(base + v, c->data, sizeof(float) * (Size) c->nnz);
}

/* Give back a claim whose job was never handed over. */
static void
release_claim(void)
{
	SvcShared  *s = svc_get();

	SpinLockAcquire(&s->mutex);
	if (s->state == SVC_BUSY && s->job == 0)
		s->state = SVC_READY;
	SpinLockRelease(&s->mutex);
}

typedef struct CreateArgs
{
	Size		size;
	dsm_segment *seg;
} CreateArgs;

static void
create_in_subxact(void *arg)
{
	CreateArgs *c = arg;

	c->seg = dsm_create(c->size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	/* kept past the subtransaction's resource owner, then given to the caller's */
	if (c->seg)
		dsm_pin_mapping(c->seg);
}

/* dsm_create in a subtransaction: NULL instead of an ERROR (no room in /dev/shm) */
static dsm_segment *
create_quietly(Size size)
{
	CreateArgs	c = {size, NULL};
	ErrorData  *e;

	if (IsInParallelMode())
		return NULL;
	e = gpumf_try_subxact(create_in_subxact, &c);
	if (e != NULL)
	{
		/* no room (/dev/shm full): train in this session; anything else (a cancel) goes on */
		if (e->sqlerrcode != ERRCODE_OUT_OF_MEMORY && e->sqlerrcode != ERRCODE_DISK_FULL)
		{
			release_claim();
			ReThrowError(e);
		}
		elog(DEBUG1, "gpumf: no shared memory for the training service (%s): training in this session",
			 e->message);
		FreeErrorData(e);
		return NULL;
	}
	if (c.seg)
		dsm_unpin_mapping(c.seg);
	return c.seg;
}

void *
gpumf_service_train(const gm_mf_params *p, gm_mf_data *d, const gm_callbacks *cb,
					gm_mf_eval *ev, gm_mf_result *res, int *rc, char *err, size_t errlen)
{
	SvcShared  *s = svc_get();
	const gm_csr *R = d->R,
			   *Rt = d->Rt,
			   *H = ev ? ev->test : NULL;
	int32		nu = R->n_rows,
				ni = R->n_cols;
	int			k = p->factors;
	Size		off;
	SvcJob		head,
			   *job;
	dsm_segment *seg;
	bool		claimed = false;
	uint32		seen = 0;
	bool		asked_stop = false;
	int			probe;
	double		t0,
				t0c,
				t1,
				t_stop = 0;

	if (!wanted(p->backend))
		return NULL;

	/* the layout */
	memset(&head, 0, sizeof(head));
	off = ALIGN64(sizeof(SvcJob));
	off = csr_place(off, R, &head.off_rp, &head.off_ri, &head.off_rv);
	off = csr_place(off, Rt, &head.off_tp, &head.off_ti, &head.off_tv);
	if (H)
		off = csr_place(off, H, &head.off_hp, &head.off_hi, &head.off_hv);
	head.off_x = off;
	off = ALIGN64(off + sizeof(float) * (Size) nu * k);
	head.off_y = off;
	off = ALIGN64(off + sizeof(float) * (Size) ni * k);
	if (p->biases)
	{
		head.off_ub = off;
		off = ALIGN64(off + sizeof(float) * (Size) Max(nu, 1));
		head.off_ib = off;
		off = ALIGN64(off + sizeof(float) * (Size) Max(ni, 1));
	}
	head.max_progress = 2 * Max(p->iterations, 1) + 4;
	head.off_prog = off;
	off += sizeof(SvcProgress) * (Size) head.max_progress;

	/* a worker ready for it? */
	if (!wait_started(&probe, NULL, 0, NULL, 0))
		return NULL;
	SpinLockAcquire(&s->mutex);
	claimed = s->state == SVC_READY && s->latch != NULL &&
		(p->backend != GM_BACKEND_CUDA || s->probe_rc == GM_OK);
	if (claimed)
	{
		s->state = SVC_BUSY;	/* no job yet: the worker waits for its handle */
		s->since = GetCurrentTimestamp();
	}
	SpinLockRelease(&s->mutex);
	if (!claimed)
		return NULL;

	t0 = gm_now();
	seg = create_quietly(off);
	if (seg == NULL)
	{
		release_claim();
		return NULL;
	}
	job = dsm_segment_address(seg);
	t0c = gm_now();
	head.p = *p;
	head.memory_cap = gpumf_gpu_memory_limit_mb < 0 ? -1 :
		(int64) gpumf_gpu_memory_limit_mb * 1024 * 1024;
	head.requester = MyLatch;
	head.n_users = nu;
	head.n_items = ni;
	head.nnz = R->nnz;
	if (H)
	{
		head.test_nnz = H->nnz > 0 ? H->nnz : 0;
		head.metric = (int) ev->metric;
		head.K = ev->K;
		head.every = ev->every;
		head.patience = ev->patience;
		head.keep_best = ev->keep_best;
	}
	memcpy(job, &head, sizeof(SvcJob));
	pg_atomic_init_u32(&job->cancel, 0);
	pg_atomic_init_u32(&job->n_progress, 0);
	pg_atomic_init_u32(&job->done, 0);
	csr_copy((char *) job, R, job->off_rp, job->off_ri, job->off_rv);
	csr_copy((char *) job, Rt, job->off_tp, job->off_ti, job->off_tv);
	if (H)
		csr_copy((char *) job, H, job->off_hp, job->off_hi, job->off_hv);

	t1 = gm_now();

	/* hand it over, unless the claim was taken back (see the worker's loop) */
	SpinLockAcquire(&s->mutex);
	claimed = s->state == SVC_BUSY && s->job == 0 && s->latch != NULL;
	if (claimed)
	{
		s->job = dsm_segment_handle(seg);
		SetLatch(s->latch);
	}
	SpinLockRelease(&s->mutex);
	if (!claimed)
	{
		dsm_detach(seg);
		return NULL;
	}

	/*
	 * Wait, forwarding progress.  Nothing here may throw while the worker
	 * uses the segment's arrays (they are the segment's own, so a throw would
	 * only leave the worker writing into a segment nobody reads; still, a
	 * cancel is turned into a stop request and waited for, so that the
	 * service is free when the ERROR reaches the client).
	 */
	for (;;)
	{
		uint32		n;
		bool		done = pg_atomic_read_u32(&job->done) != 0;

		pg_read_barrier();
		n = pg_atomic_read_u32(&job->n_progress);
		pg_read_barrier();
		for (; seen < n; seen++)
		{
			SvcProgress *e = &((SvcProgress *) ((char *) job + job->off_prog))[seen];

			if (e->is_eval)
			{
				if (ev && ev->on_eval)
					ev->on_eval(ev->arg, e->iteration, &e->r);
			}
			else if (cb->on_iteration)
				cb->on_iteration(cb->arg, e->iteration, e->loss, e->rmse, e->seconds);
		}
		if (done)
			break;
		if (!asked_stop && cb->should_stop && cb->should_stop(cb->arg))
		{
			pg_atomic_write_u32(&job->cancel, 1);
			asked_stop = true;
			t_stop = gm_now();
		}
		else if (asked_stop && gm_now() - t_stop > 5.0)
		{
			/*
			 * The worker does not stop (stuck in the driver?): give up on it
			 * rather than keep a canceled session waiting.  It keeps its own
			 * mapping of the segment, and the service stays busy until it
			 * returns.
			 */
			job->rc = GM_ECANCELED;
			snprintf(job->err, sizeof(job->err), "the training service did not stop within 5 s");
			break;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		/* a barrier (DROP DATABASE waits for it) is absorbed; other interrupts wait */
		if (ProcSignalBarrierPending)
			ProcessProcSignalBarrier();
		/* the worker gone without finishing (it marks the job done when it can) */
		SpinLockAcquire(&s->mutex);
		if (s->pid == 0 && s->state == SVC_NONE && pg_atomic_read_u32(&job->done) == 0)
		{
			SpinLockRelease(&s->mutex);
			job->rc = GM_EDEVICE;
			snprintf(job->err, sizeof(job->err), "the training service exited during the training");
			break;
		}
		SpinLockRelease(&s->mutex);
	}
	pg_read_barrier();
	elog(DEBUG1, "gpumf: training service: a %.0f MB segment created in %.3f s, filled in %.3f s; "
		 "waited %.3f s for a training of %.3f s",
		 off / 1048576.0, t1 - t0 - (t1 - t0c), t1 - t0c, gm_now() - t1,
		 job->res.train_seconds + job->res.transfer_seconds);
	*rc = job->rc;
	strlcpy(err, job->err, errlen);
	*res = job->res;
	d->global_mean = job->global_mean;
	d->X = (float *) ((char *) job + job->off_x);
	d->Y = (float *) ((char *) job + job->off_y);
	d->user_bias = job->off_ub ? (float *) ((char *) job + job->off_ub) : NULL;
	d->item_bias = job->off_ib ? (float *) ((char *) job + job->off_ib) : NULL;
	if (ev)
	{
		ev->best = job->best;
		ev->best_iteration = job->best_iteration;
		ev->best_result = job->best_result;
		ev->eval_seconds = job->eval_seconds;
	}
	return seg;
}

void
gpumf_service_release(void *seg)
{
	if (seg)
		dsm_detach((dsm_segment *) seg);
}
