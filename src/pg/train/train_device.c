/*
 * train_device.c: the device a training runs on under gpumf.device, and
 * getting the GPU ready while the training reads its source (a probe and
 * warm-up thread, or the training service's worker).  The rules are
 * common/device.c's: auto falls back to the CPU with one NOTICE per
 * session, gpu without a usable GPU is an ERROR.
 */
#include "gpumf_train.h"

#include <pthread.h>
#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"

/* A training found no GPU (rc, err: the probe's): gpu is an ERROR, auto a NOTICE */
static void
training_without_gpu(int rc, const char *err)
{
	if (gpumf_device == GPUMF_DEVICE_GPU)
		gpumf_no_gpu_error(err, "train");
	if (rc != GM_ENOMODULE)
		gpumf_gpu_fallback_notice(err, "training");
}

/*
 * Loading the CUDA module and asking the driver for a device takes a fresh
 * backend a noticeable time (the driver's initialisation, a 95 MB module),
 * and so does a process's first training on the GPU (the context, kernels
 * loaded at their first launch, cuBLAS's set-up).  gpumf_device_prefetch
 * starts both on a thread of their own while the training reads its source:
 * the probe, then a warm-up training of the same algorithm, solver and
 * factors on a small problem (gm_mf_warmup; once per such combination in a
 * process).  Every call of gm_cuda_available here takes probe_lock
 * (common/device.c), which the thread holds throughout, so the training's
 * own call waits for the thread instead of competing with it.  The thread
 * blocks every signal (they stay the backend's), calls nothing of
 * PostgreSQL's (its parameters are a malloc'd copy), and the backend does
 * not exit while it runs.
 */
static bool exit_hook = false;
static bool warmed_any = false;
static gm_mf_params warmed;		/* the last combination warmed up */
static double probe_seconds = 0;	/* the thread's last probe and warm-up */
static double warm_seconds = 0;
static int	warm_rc = GM_OK;

typedef struct PrefetchArg
{
	const char *path;
	bool		warm;
	gm_mf_params p;
} PrefetchArg;

static void *
probe_thread(void *arg)
{
	PrefetchArg *a = (PrefetchArg *) arg;
	char		name[128],
				err[GM_ERRLEN];

	double		t0,
				t1;

	gpumf_probe_lock();
	t0 = gm_now();
	warm_seconds = 0;
	warm_rc = GM_OK;
	if (gm_cuda_available(a->path, name, sizeof(name), err, sizeof(err)) == GM_OK && a->warm)
	{
		t1 = gm_now();
		/* the training reports its own errors */
		warm_rc = gm_mf_warmup(&a->p, err, sizeof(err));
		warm_seconds = gm_now() - t1;
	}
	probe_seconds = gm_now() - t0 - warm_seconds;
	gpumf_probe_unlock();
	free(a);
	return NULL;
}

/* at exit: wait for a probe still running (no exit in the middle of a dlopen) */
static void
wait_for_probe(int code, Datum arg)
{
	gpumf_probe_lock();
	gpumf_probe_unlock();
}

/* Do p and q train with the same kernels (the same warm-up)? */
static bool
same_kernels(const gm_mf_params *p, const gm_mf_params *q)
{
	return p->algorithm == q->algorithm && p->factors == q->factors &&
		p->solver == q->solver && gm_block_size(p) == gm_block_size(q) &&
		gm_use_tf32(p) == gm_use_tf32(q) && p->biases == q->biases;
}

/*
 * Above this many rows the service's copies (16 bytes a rating into shared
 * memory and out of it again, about 16 ns a rating on the H100 host) cost
 * more than what a process's own GPU start-up, overlapped with the read
 * (about 37 ns a row), leaves to pay: 0.55 s - 37 ns n = 0.08 s + 16 ns n
 * at n = 9M.
 */
#define SERVICE_MAX_ROWS 8e6

bool
gpumf_device_prefetch(const gm_mf_params *p, double est_rows)
{
	pthread_t	t;
	pthread_attr_t attr;
	sigset_t	all,
				old;
	PrefetchArg *a;
	bool		warm = p != NULL && !(warmed_any && same_kernels(p, &warmed));
	bool		service;

	/*
	 * The training service's worker (train_service.c), already set up,
	 * instead of this process: unless this process is set up for these
	 * kernels itself, or the source is large enough to hide its start-up
	 * (gpumf.training_service = always: every training).
	 */
	if (gpumf_training_service == GPUMF_SERVICE_ALWAYS)
		service = true;
	else
		service = gpumf_training_service == GPUMF_SERVICE_GPU && p != NULL &&
			gpumf_device != GPUMF_DEVICE_CPU && warm && est_rows <= SERVICE_MAX_ROWS;
	if (service && gpumf_service_prefetch(gpumf_device != GPUMF_DEVICE_CPU))
		return true;
	if (gpumf_device == GPUMF_DEVICE_CPU || (exit_hook && !warm))
		return false;
	a = malloc(sizeof(PrefetchArg));
	if (a == NULL)
		return false;			/* probed (and not warmed) by the training itself */
	/* the path is computed here: the thread calls nothing of PostgreSQL's */
	a->path = gpumf_cuda_module_path();
	a->warm = warm;
	if (warm)
	{
		a->p = *p;
		a->p.backend = GM_BACKEND_CUDA;
		warmed = a->p;
		warmed_any = true;
	}
	if (!exit_hook)
	{
		before_shmem_exit(wait_for_probe, (Datum) 0);
		exit_hook = true;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);	/* the thread inherits the mask */
	if (pthread_attr_init(&attr) != 0)
		free(a);
	else
	{
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, probe_thread, (void *) a) != 0)
			free(a);			/* probed later */
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return false;
}

/*
 * The backend training should use now; *name gets the device's name when it
 * is the GPU.
 */
gm_backend_kind
gpumf_training_backend(char *name, size_t namelen)
{
	char		err[GM_ERRLEN];
	int			rc;

	double		t0;

	if (gpumf_device == GPUMF_DEVICE_CPU)
		return GM_BACKEND_CPU;
	t0 = gm_now();
	rc = gpumf_cuda_available(name, namelen, err, sizeof(err));
	if (warmed_any)
		elog(DEBUG1, "gpumf: waited %.3f s for the GPU (last probe %.3f s, warm-up %.3f s, rc %d)",
			 gm_now() - t0, probe_seconds, warm_seconds, warm_rc);
	if (rc == GM_OK)
		return GM_BACKEND_CUDA;
	training_without_gpu(rc, err);
	return GM_BACKEND_CPU;
}

gm_backend_kind
gpumf_train_backend(char *name, size_t namelen, bool try_service, bool *service)
{
	char		err[GM_ERRLEN];
	int			rc;

	*service = false;
	if (gpumf_device == GPUMF_DEVICE_CPU)
	{
		*service = try_service && gpumf_training_service == GPUMF_SERVICE_ALWAYS;
		return GM_BACKEND_CPU;
	}
	if (!try_service)
		return gpumf_training_backend(name, namelen);
	rc = gpumf_service_device(name, namelen, err, sizeof(err));
	if (rc < 0)
		return gpumf_training_backend(name, namelen);	/* no service: this process */
	if (rc == GM_OK)
	{
		*service = true;
		return GM_BACKEND_CUDA;
	}
	/* the worker found no GPU: the same rules as this process's own probe */
	training_without_gpu(rc, err);
	*service = gpumf_training_service == GPUMF_SERVICE_ALWAYS;
	return GM_BACKEND_CPU;
}

void
gpumf_apply_gpus(gm_mf_params *p)
{
	p->gpus = 1;
	if (p->backend != GM_BACKEND_CUDA || gpumf_gpus <= 1)
		return;
	if (gm_algorithm_multi_gpu(p->algorithm))
		p->gpus = gpumf_gpus;
	else
		ereport(NOTICE,
				(errmsg("gpumf.gpus is %d, but %s trains on one GPU", gpumf_gpus,
						gm_algorithm_name(p->algorithm)),
				 errdetail("Several GPUs train implicit ALS, explicit ALS and CCD++ (als, als_explicit, ccd) only.")));
}

void
gpumf_train_check_rc(int rc, ErrorData *pending, const char *what, const char *err,
					 const char *oom_hint)
{
	if (pending)
		ReThrowError(pending);
	if (rc == GM_ECANCELED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("%s canceled", what)));
	}
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY :
						 rc == GM_ENOTSUP ? ERRCODE_FEATURE_NOT_SUPPORTED :
						 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("%s failed: %s", what, err),
				 rc == GM_ENOMEM && oom_hint ? errhint("%s", oom_hint) : 0));
}

bool
gpumf_choose_backend(TrainArgs *a, bool try_service, char *name, size_t namelen, bool *service)
{
	a->p.backend = gpumf_train_backend(name, namelen, try_service, service);
	if (a->p.algorithm == GM_ALG_GRAPH_FILTER && *service)
	{
		/* graph_filter returns its filter beside the factors: it trains in this process */
		*service = false;
		a->p.backend = gpumf_training_backend(name, namelen);
	}
	gpumf_apply_gpus(&a->p);
	return gpumf_lean_training && a->p.backend == GM_BACKEND_CUDA && !*service &&
		a->p.algorithm == GM_ALG_ALS_IMPLICIT && a->holdout <= 0 && !a->autotune;
}

/*
 * On the GPU when the training runs there in this process and reads
 * gpumf.gpu_build_rows rows or more (the GPU is then idle until the
 * upload); a lean training on one GPU uploads exactly that CSR, so the GPU
 * keeps its copy for it.
 */
int
gpumf_csr_build_where(const TrainArgs *a, bool service, bool lean, int64 rows)
{
	if (a->p.backend != GM_BACKEND_CUDA || service || gpumf_gpu_build_rows < 0 ||
		rows < gpumf_gpu_build_rows)
		return GPUMF_CSR_HOST;
	return lean && a->p.gpus <= 1 ? GPUMF_CSR_GPU_KEEP : GPUMF_CSR_GPU;
}
