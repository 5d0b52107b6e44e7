/*
 * gpumf.c: module entry point, GUCs and helpers shared by the SQL functions.
 *
 * _PG_init only defines GUCs (and, in shared_preload_libraries, registers
 * the training service's worker): CUDA does not survive fork(), so nothing
 * here (which may run in the postmaster) touches the GPU; the CUDA module is
 * loaded lazily by the process that trains.
 */
#include "gpumf_pg.h"

#include <ctype.h>
#include <errno.h>
#include <unistd.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/sinval.h"
#include "storage/spin.h"
#include "utils/fmgroids.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"

PG_MODULE_MAGIC;

int			gpumf_device = GPUMF_DEVICE_AUTO;
int			gpumf_threads = 0;	/* gpumf.threads capped by gpumf.max_threads */
static int	gpumf_threads_setting = 0;	/* gpumf.threads as set */
int			gpumf_max_threads = 0;
bool		gpumf_progress = true;
int			gpumf_max_memory_mb = -1;
int			gpumf_shared_models_memory_mb = -1;
bool		gpumf_unlogged_models = false;
int			gpumf_read_workers = -1;
bool		gpumf_shared_models = true;
bool		gpumf_warm_new_models = true;
int			gpumf_gpu_memory_limit_mb = -1;
int			gpumf_keep_versions = 2;
bool		gpumf_fold_in = true;
int			gpumf_spmv_choice = GM_SPMV_AUTO;
int			gpumf_training_service = GPUMF_SERVICE_GPU;
int			gpumf_training_service_idle_s = 600;

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
							"CPU threads gpumf trains with; 0 means one per core.",
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
	DefineCustomIntVariable("gpumf.gpu_memory_limit",
							"Largest amount of GPU memory gpumf's own allocations may hold in one session.",
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
	DefineCustomIntVariable("gpumf.read_workers",
							"Parallel workers that read a training's source table; -1 means as many as a parallel SELECT of it would get.",
							"Used for plain tables and materialized views read with the caller's privileges and no row-level security; views and other sources are read through the executor. At most max_parallel_workers are started.",
							&gpumf_read_workers, -1, -1, 1024,
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
}

Oid
gpumf_schema(void)
{
	/* gpumf.control fixes the schema (the extension is not relocatable) */
	return get_namespace_oid("gpumf", false);
}

/* the current top-level transaction's local id (a field renamed in 17) */
#if PG_VERSION_NUM >= 170000
#define MY_LXID (MyProc->vxid.lxid)
#else
#define MY_LXID (MyProc->lxid)
#endif

/*
 * The last successful catalog-version check.  It stays good while this
 * backend has processed no shared invalidation message since (another
 * session's ALTER, DROP or CREATE EXTENSION changes catalog entries that
 * other backends cache, and their invalidations reach us before our next
 * statement reads anything) and, within the transaction that made the
 * check, while the command counter has not moved (this transaction's own
 * DDL).  A failed check is never cached.
 */
static struct
{
	bool		valid;
	uint64		inval_count;
	LocalTransactionId lxid;
	CommandId	cid;
} catalog_checked;

#define VERSION_PARTS 8

/* "0.2" as {0, 2, 0, ...}; false unless dotted non-negative integers */
static bool
version_parse(const char *v, long parts[VERSION_PARTS])
{
	memset(parts, 0, sizeof(long) * VERSION_PARTS);
	for (int i = 0; i < VERSION_PARTS; i++)
	{
		char	   *end;

		if (!isdigit((unsigned char) *v))
			return false;
		errno = 0;
		parts[i] = strtol(v, &end, 10);
		if (errno != 0)
			return false;
		if (*end == '\0')
			return true;
		if (*end != '.')
			return false;
		v = end + 1;
	}
	return false;
}

/* a's order to b ("0.2" < "0.10" = "0.10.0"): -1, 0, 1; 2 when either is not a version */
static int
version_cmp(const char *a, const char *b)
{
	long		pa[VERSION_PARTS],
				pb[VERSION_PARTS];

	if (!version_parse(a, pa) || !version_parse(b, pb))
		return 2;
	for (int i = 0; i < VERSION_PARTS; i++)
		if (pa[i] != pb[i])
			return pa[i] < pb[i] ? -1 : 1;
	return 0;
}

/* pg_extension.extversion of gpumf in this database (palloc'd); NULL: not installed */
static char *
installed_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("gpumf"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

void
gpumf_check_catalog_version(void)
{
	char	   *installed;
	int			cmp;

	if (catalog_checked.valid &&
		catalog_checked.inval_count == SharedInvalidMessageCounter &&
		(catalog_checked.lxid != MY_LXID ||
		 catalog_checked.cid == GetCurrentCommandId(false)))
		return;
	catalog_checked.valid = false;

	installed = installed_version();
	if (installed == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"gpumf\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION gpumf.")));
	cmp = version_cmp(installed, GPUMF_CATALOG_VERSION);
	if (cmp < 0 || cmp == 2)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"gpumf\" is installed at version %s, but the gpumf library needs version %s",
						installed, GPUMF_CATALOG_VERSION),
				 errdetail("The model catalog and the functions of version %s differ from what this library reads and writes.",
						   installed),
				 errhint("Run ALTER EXTENSION gpumf UPDATE in this database (as the extension's owner or a superuser): it converts the model catalog in place and keeps every model.")));
	if (cmp > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"gpumf\" is installed at version %s, newer than version %s that the gpumf library loaded by this session serves",
						installed, GPUMF_CATALOG_VERSION),
				 errhint("Reconnect: this session loaded the library before the extension was updated.  If a new session fails too, install the gpumf library that came with version %s.",
						 installed)));
	pfree(installed);

	catalog_checked.valid = true;
	catalog_checked.inval_count = SharedInvalidMessageCounter;
	catalog_checked.lxid = MY_LXID;
	catalog_checked.cid = GetCurrentCommandId(false);
}

/* The owner of the extension: model tables belong to it. */
Oid
gpumf_owner(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			owner = InvalidOid;
	Oid			ext = get_extension_oid("gpumf", false);

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(owner))
		elog(ERROR, "could not find the owner of extension gpumf");
	return owner;
}

const char *
gpumf_cuda_module_path(void)
{
	static char path[MAXPGPATH];

	if (path[0] == '\0')
		snprintf(path, sizeof(path), "%s/gpumf_cuda.so", pkglib_path);
	return path;
}

/* what shmem_struct_init sets up: gm_named_shmem calls it back at once */
static Size shmem_init_size;
static Size shmem_init_mutex_offset;

static void
shmem_struct_init(void *p)
{
	memset(p, 0, shmem_init_size);
	SpinLockInit((slock_t *) ((char *) p + shmem_init_mutex_offset));
}

void *
gpumf_shmem_struct(const char *name, Size size, Size mutex_offset)
{
	bool		found;

	shmem_init_size = size;
	shmem_init_mutex_offset = mutex_offset;
	return gm_named_shmem(name, size, shmem_struct_init, &found);
}

ErrorData *
gpumf_try_subxact(void (*fn) (void *), void *arg)
{
	MemoryContext mcx = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile e = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(mcx);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(mcx);
	CurrentResourceOwner = owner;
	return e;
}

Size
gpumf_memory_limit(void)
{
	if (gpumf_max_memory_mb >= 0)
		return (Size) gpumf_max_memory_mb * 1024 * 1024;
	{
		long		pages = sysconf(_SC_PHYS_PAGES);
		long		page = sysconf(_SC_PAGESIZE);

		if (pages <= 0 || page <= 0)
			return (Size) 1 << 40;
		return (Size) pages * (Size) page / 2;
	}
}

void
gpumf_check_memory_threads(double need_bytes, double per_thread, int threads, const char *what)
{
	Size		limit = gpumf_memory_limit();

	if (need_bytes <= (double) limit)
		return;
	if (threads > 1 && per_thread * threads >= need_bytes / 4)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s needs about %.0f MB, more than gpumf.max_memory allows (%.0f MB)",
						what, need_bytes / 1048576.0, (double) limit / 1048576.0),
				 errdetail("%d threads with %.1f MB of scratch each are %.0f MB of it.",
						   threads, per_thread / 1048576.0, per_thread * threads / 1048576.0),
				 errhint("Use fewer threads (SET gpumf.threads), fewer factors or solver 'cg'; a superuser can raise gpumf.max_memory.")));
	gpumf_check_memory(need_bytes, what);
}

void
gpumf_check_memory(double need_bytes, const char *what)
{
	Size		limit = gpumf_memory_limit();

	if (need_bytes > (double) limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s needs about %.0f MB, more than gpumf.max_memory allows (%.0f MB)",
						what, need_bytes / 1048576.0, (double) limit / 1048576.0),
				 errhint("A superuser can raise gpumf.max_memory (default: half the machine's memory).")));
}
