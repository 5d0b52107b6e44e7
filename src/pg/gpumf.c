/*
 * gpumf.c: the module's entry point, above every product line: _PG_init
 * defines the GUCs (their variables live in common/guc.c, where every file
 * can reach them) and registers the training service's worker and the
 * start-up warm-up.  Nothing calls into this file.
 *
 * _PG_init only defines GUCs (and, in shared_preload_libraries, registers
 * the training service's worker and the worker that reads the models into
 * shared memory at start): CUDA does not survive fork(), so nothing
 * here (which may run in the postmaster) touches the GPU; the CUDA module is
 * loaded lazily by the process that trains.
 */
#include "gpumf_train.h"
#include "gpumf_linalg.h"

#include <limits.h>
#include <unistd.h>

#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

/* gpumf.threads as set (gpumf_threads, in guc.c, is it capped by gpumf.max_threads) */
static int	gpumf_threads_setting = 0;

static const struct config_enum_entry service_options[] = {
	{"off", GPUMF_SERVICE_OFF, false},
	{"gpu", GPUMF_SERVICE_GPU, false},
	{"always", GPUMF_SERVICE_ALWAYS, false},
	{NULL, 0, false}
};

static const struct config_enum_entry device_options[] = {
	{"auto", GPUMF_DEVICE_AUTO, false},
	{"cpu", GPUMF_DEVICE_CPU, false},
	{"gpu", GPUMF_DEVICE_GPU, false},
	{NULL, 0, false}
};

static const struct config_enum_entry store_writes_options[] = {
	{"ring", GPUMF_STORE_RING, false},
	{"ring_ahead", GPUMF_STORE_RING_AHEAD, false},
	{"shared_buffers", GPUMF_STORE_SHARED, false},
	{"direct", GPUMF_STORE_DIRECT, false},
	{NULL, 0, false}
};

static const struct config_enum_entry spmv_options[] = {
	{"auto", GM_SPMV_AUTO, false},
	{"own", GM_SPMV_OWN, false},
	{"cusparse", GM_SPMV_CUSPARSE, false},
	{NULL, 0, false}
};

void		_PG_init(void);

/* the machine's cores (at most gpumf.threads' maximum) */
static int
machine_cores(void)
{
	long		n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int) Min(n, 1024) : 1;
}

/*
 * The thread count gpumf uses: gpumf.threads (0: one per core), at most
 * gpumf.max_threads (0: the machine's cores).  gpumf.threads is a user's
 * setting; the cap is a superuser's, since every thread's scratch (and
 * OpenMP's and OpenBLAS's per-thread buffers) is memory of the server's.
 */
static void
threads_update(int setting, int cap)
{
	int			cores = machine_cores(),
				limit = cap > 0 ? cap : cores;

	if (setting == 0)
		gpumf_threads = cores <= limit ? 0 : limit;
	else
		gpumf_threads = Min(setting, limit);
}

static void
assign_threads(int newval, void *extra)
{
	threads_update(newval, gpumf_max_threads);
}

static void
assign_max_threads(int newval, void *extra)
{
	threads_update(gpumf_threads_setting, newval);
}

/* gpumf.gpu_memory_limit's assign hook: hand the cap to the core (bytes) */
static void
assign_gpu_memory_limit(int newval, void *extra)
{
	gm_cuda_memory_cap(newval < 0 ? -1 : (int64_t) newval * 1024 * 1024);
}

void
_PG_init(void)
{
	DefineCustomEnumVariable("gpumf.device",
							 "Where gpumf trains: auto (GPU if one works, else CPU), cpu or gpu.",
							 NULL, &gpumf_device, GPUMF_DEVICE_AUTO, device_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.threads",
							"CPU threads gpumf trains (and scores a user over a large catalog) with; 0 means one per core.",
							"At most gpumf.max_threads are used.",
							&gpumf_threads_setting, 0, 0, 1024,
							PGC_USERSET, 0, NULL, assign_threads, NULL);
	DefineCustomIntVariable("gpumf.max_threads",
							"Most CPU threads one gpumf call uses, whatever gpumf.threads says; 0 means the machine's cores.",
							"Each thread has scratch memory of its own (counted against gpumf.max_memory): a superuser's cap.",
							&gpumf_max_threads, 0, 0, 1024,
							PGC_SUSET, 0, NULL, assign_max_threads, NULL);
	DefineCustomBoolVariable("gpumf.progress",
							 "Report each training iteration's loss and time in a NOTICE.",
							 NULL, &gpumf_progress, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.autotune",
							 "A gpumf_train that gives no hyper-parameter searches them on a validation split of its source.",
							 "Off: such a call trains with the fixed defaults (those of gpumf 0.3). autotune => true or false in the call wins over this setting.",
							 &gpumf_autotune, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("gpumf.autotune_seconds",
							 "Time budget of gpumf_train's automatic search of hyper-parameters, in seconds.",
							 "No trial starts that is expected to end after it, and one running at the end is cut (the first trial always runs to its end); the final training on every row comes on top.",
							 &gpumf_autotune_seconds, 60, 1, 86400,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.autotune_max_factors",
							"Largest number of factors gpumf_train's automatic search tries.",
							"The search doubles the factors from 64 while the held-out metric improves and the time budget allows.",
							&gpumf_autotune_max_factors, 1024, 1, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.gpus",
							"GPUs of this host an implicit ALS, explicit ALS or CCD++ training spreads its rows over.",
							"1: one GPU (the default). More: the first N visible GPUs, each solving a share of the users and of the items, holding every factor and its share of the interactions, the updated rows exchanged after each pass; the model is the one-GPU model within float rounding. graph_filter trains on one GPU.",
							&gpumf_gpus, 1, 1, GM_MAX_GPUS,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.gpu_memory_limit",
							"Largest amount of GPU memory gpumf's own allocations may hold on each GPU in one session.",
							"-1: no cap (the card's memory). An allocation over the cap fails like one on a full card: the call stops with an out-of-GPU-memory ERROR and changes nothing. The CUDA context and cuBLAS/cuSOLVER workspaces are not counted.",
							&gpumf_gpu_memory_limit_mb, -1, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_MB, NULL, assign_gpu_memory_limit, NULL);
	DefineCustomIntVariable("gpumf.max_memory",
							"Memory one gpumf operation may allocate in a backend, beyond work_mem; -1 means half the machine's memory.",
							"A training or a generator that would need more stops with an ERROR before allocating it.",
							&gpumf_max_memory_mb, -1, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.unlogged_models",
							 "Create the factor tables of new model versions UNLOGGED (no WAL).",
							 "Faster to store, but after a crash (not a clean shutdown) PostgreSQL empties unlogged tables: such a model must be retrained before it serves again. Unlogged tables are not replicated to standbys.",
							 &gpumf_unlogged_models, false,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.wal_ahead_workers",
							"Background workers that make the WAL segment files a training's store will fill while it reads and trains; 0 means none.",
							"A logged store on a wal_level replica server writes about as much WAL as the factor tables. Where pg_wal has no recycled segment files for it (a new server, or one whose WAL stayed small), the server makes each file when the WAL reaches it, zero-filled and fsynced (wal_init_zero) inside the store. These workers make those files, through the server's own routine, during the training's read, build and training instead; they stop when the transaction ends. Each takes a background worker slot.",
							&gpumf_wal_ahead_workers, 2, 0, 8,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.lean_training",
							 "Hold less memory in the backend during a GPU training of implicit ALS.",
							 "The transpose of the matrix is built in slabs as it is uploaded, the starting factors are drawn on the GPU and the values are freed once uploaded: at most about 16 bytes an interaction instead of 26. Off: the host forms all of them, as the CPU path does (the same model from the same start).",
							 &gpumf_lean_training, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.read_workers",
							"Parallel workers that read a training's source table; -1 means as many as a parallel SELECT of it would get.",
							"Used for plain tables and materialized views read with the caller's privileges and no row-level security; views and other sources are read through the executor. At most max_parallel_workers are started.",
							&gpumf_read_workers, -1, -1, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.gpu_build_rows",
							"Rows from which a training on the GPU in this backend builds its matrix there; -1 means never.",
							"The rows read are uploaded and sorted on the GPU into the same CSR the host builds, which is downloaded; a lean training's upload then takes the GPU's copy. Only where the build takes no more GPU memory than 20 bytes a row, the factors and 256 MB; otherwise, and without the room, the host builds it.",
							&gpumf_gpu_build_rows, 1 << 24, -1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("gpumf.store_writes",
							 "How a training writes its factor tables: direct, ring_ahead, ring or shared_buffers.",
							 "direct (the default): whole pages formed by gpumf.threads threads and written to the tables' files, WAL-logged as full-page images, as an index build writes a new index. ring_ahead: rows inserted through a 16 MB ring of buffers, as COPY writes, with the WAL writer flushing the WAL behind each batch of rows. ring: the same without asking the WAL writer (the ring waits for an fsync every 16 MB). shared_buffers: rows inserted through the whole buffer pool (the tables push other pages out of it). With ring_ahead and ring, tables smaller than an eighth of shared_buffers go through the buffer pool.",
							 &gpumf_store_writes, GPUMF_STORE_DIRECT, store_writes_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.shared_models",
							 "Serve each model version from one copy in dynamic shared memory that every backend attaches to.",
							 "The first backend that serves a version loads it and shares it; others map it instead of reading the factor tables. Off: every backend loads its own copy.",
							 &gpumf_shared_models, true,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.shared_models_memory",
							"Total size of the model versions served from shared memory; -1 means a quarter of the machine's memory.",
							"A version whose segment would take the total past it is not shared: serving it is an ERROR with a hint.",
							&gpumf_shared_models_memory_mb, -1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.warm_new_models",
							 "Read a model version into shared memory when its training commits, also for a model nobody serves yet.",
							 "A background worker reads the committed version into shared memory, so that the first gpumf_recommend of every session attaches to it. Off: only versions of models already served are read at commit; a new model is read by its first call.",
							 &gpumf_warm_new_models, true,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.warm_at_start",
							 "With gpumf in shared_preload_libraries: read every model's current version into shared memory when the server starts.",
							 "A background worker goes through the databases that have gpumf and reads their models, most recently trained first, within gpumf.shared_models_memory, so that the first gpumf_recommend after a restart attaches instead of reading the factor tables. Only its value at server start counts (a custom variable that only shared_preload_libraries can use, defined as sighup so that a library loaded later can still define it).",
							 &gpumf_warm_at_start, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.keep_versions",
							"Versions of each model kept, the current one included; a retraining retires the older ones.",
							"Kept versions are listed by gpumf_model_versions() and can be made current again with gpumf_use_version(); 1 keeps only the current version.",
							&gpumf_keep_versions, 2, 1, 1000,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("gpumf.fold_in",
							 "Serving may fold a user the model lacks (or any user, with recompute) in from the model's source, read as the source's owner.",
							 "Off: serving reads no source, so no code of a source's owner runs in this session; a user the model lacks gives no rows, recompute => true is an ERROR.",
							 &gpumf_fold_in, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("gpumf.spmv",
							 "The GPU's sparse matrix-vector product: auto (the faster on each matrix, timed once), own (gpumf's kernel) or cusparse.",
							 NULL, &gpumf_spmv_choice, GM_SPMV_AUTO, spmv_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("gpumf.training_service",
							 "Which trainings run on the training service's worker, which keeps the GPU set up between trainings: gpu (GPU trainings), always (CPU ones too) or off (each session's own process).",
							 NULL, &gpumf_training_service, GPUMF_SERVICE_GPU, service_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("gpumf.training_service_idle_timeout",
							"Seconds the training service's worker waits for work before it exits and gives its GPU memory back (-1: it stays).",
							NULL, &gpumf_training_service_idle_s, 600, -1, 7 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	MarkGUCPrefixReserved("gpumf");

	/* preloaded: the training service's worker starts with the server (train_service.c) */
	if (process_shared_preload_libraries_in_progress &&
		gpumf_training_service != GPUMF_SERVICE_OFF)
		gpumf_service_register_at_start();
	/* preloaded: the models are read into shared memory at start (warm_worker.c) */
	if (process_shared_preload_libraries_in_progress && gpumf_warm_at_start && gpumf_shared_models)
		gpumf_warm_register_at_start();
}
