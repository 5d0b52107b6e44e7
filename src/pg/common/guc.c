/*
 * guc.c: the variables behind gpumf's GUCs (defined, with their
 * descriptions, in gpumf.c's _PG_init) and what gpumf.max_memory means.
 */
#include "gpumf_pg.h"

#include <unistd.h>

int			gpumf_device = GPUMF_DEVICE_AUTO;
int			gpumf_threads = 0;	/* gpumf.threads capped by gpumf.max_threads */
int			gpumf_max_threads = 0;
bool		gpumf_progress = true;
bool		gpumf_autotune = true;
double		gpumf_autotune_seconds = 60;
int			gpumf_autotune_max_factors = 1024;
int			gpumf_max_memory_mb = -1;
int			gpumf_shared_models_memory_mb = -1;
bool		gpumf_unlogged_models = false;
int			gpumf_wal_ahead_workers = 2;
bool		gpumf_lean_training = true;
int			gpumf_read_workers = -1;
int			gpumf_gpu_build_rows = 1 << 24;
int			gpumf_store_writes = GPUMF_STORE_DIRECT;
bool		gpumf_shared_models = true;
bool		gpumf_warm_new_models = true;
bool		gpumf_warm_at_start = true;
int			gpumf_gpu_memory_limit_mb = -1;
int			gpumf_gpus = 1;
int			gpumf_keep_versions = 2;
bool		gpumf_fold_in = true;
int			gpumf_training_service = GPUMF_SERVICE_GPU;
int			gpumf_training_service_idle_s = 600;

/* Bytes one operation may allocate: gpumf.max_memory, or half the machine's memory. */
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

/*
 * gpumf_check_memory for a need that includes threads x per_thread bytes of
 * scratch: when the threads are a good part of it, the ERROR says so.
 */
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

/* ERROR naming what when need_bytes exceeds gpumf_memory_limit(). */
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
