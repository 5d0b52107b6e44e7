/*
 * gpu_memory.c: whether a training fits the GPU, checked before anything is
 * uploaded: gm_mf_device_memory's prediction (core/train/mf_loop.c) and a
 * margin for the libraries, against the cards' free memory or what
 * gpumf.gpu_memory_limit leaves.  A backend raises the ERROR
 * (gpumf_check_gpu_memory); the training service's worker reports it as its
 * job's message (gpumf_gpu_memory_short).
 */
#include "gpumf_train.h"

/*
 * What the libraries allocate beside gm_mf_device_memory's arrays (cuBLAS's
 * and cuSOLVER's workspaces, the allocator's rounding): a fixed part and a
 * share of the rest.
 */
#define GPU_SLACK_BYTES		(128.0 * 1048576)
#define GPU_SLACK_SHARE		0.02

typedef struct GpuRoom
{
	gm_device_need need;
	double		want;			/* need and the libraries' share */
	double		avail;			/* free, or what the cap leaves when less */
	int64_t		free_b;
	int64_t		total_b;
	bool		capped;			/* avail is the cap's */
} GpuRoom;

/* false when there is nothing to check (the CPU, or no module loaded here) */
static bool
gpu_room(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt, GpuRoom *g)
{
	int64_t		cap,
				kept;

	if (p->backend != GM_BACKEND_CUDA ||
		gm_cuda_device_memory(p->gpus > 1 ? p->gpus : 1, &g->free_b, &g->total_b, &cap) != GM_OK)
		return false;			/* the training service's worker checks its own allocations */
	gm_mf_device_memory(p, R, Rt, &g->need);
	g->want = g->need.total * (1 + GPU_SLACK_SHARE) + GPU_SLACK_BYTES;
	/* the copy of R the GPU built and kept for this upload is counted in need */
	kept = gm_csr_device_kept_bytes();
	g->avail = (double) (g->free_b + kept);
	g->capped = cap >= 0 && (double) (cap - gm_cuda_memory_held() + kept) < g->avail;
	if (g->capped)
		g->avail = (double) (cap - gm_cuda_memory_held() + kept);
	return true;
}

bool
gpumf_gpu_memory_fits(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt)
{
	GpuRoom		g;

	return !gpu_room(p, R, Rt, &g) || g.want <= g.avail;
}

bool
gpumf_gpu_memory_short(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
					   const char *what, char *msg, size_t len)
{
	GpuRoom		g;

	if (!gpu_room(p, R, Rt, &g) || g.want <= g.avail)
		return false;
	snprintf(msg, len,
			 "%s needs about %.0f MB of GPU memory, more than the %.0f MB available%s "
			 "(%s %.0f MB free of %.0f MB; %lld interactions at %d factors: matrices %.0f MB, "
			 "factors %.0f MB, solver %.0f MB); nothing was uploaded",
			 what, g.want / 1048576.0, Max(g.avail, 0) / 1048576.0,
			 g.capped ? " (what gpumf.gpu_memory_limit leaves gpumf)" : "",
			 p->gpus > 1 ? "each GPU has at least" : "the card has", g.free_b / 1048576.0, g.total_b / 1048576.0, (long long) R->nnz, p->factors,
			 g.need.matrices / 1048576.0, g.need.factors / 1048576.0, g.need.solver / 1048576.0);
	return true;
}

void
gpumf_check_gpu_memory(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
					   const char *what)
{
	GpuRoom		g;
	char		limit_note[160] = "";

	if (!gpu_room(p, R, Rt, &g))
		return;
	elog(DEBUG1, "gpumf: %s needs about %.0f MB of GPU memory (matrices %.0f, factors %.0f, solver %.0f); "
		 "%.0f MB free of %.0f MB, %.0f MB available",
		 what, g.want / 1048576.0, g.need.matrices / 1048576.0, g.need.factors / 1048576.0,
		 g.need.solver / 1048576.0, g.free_b / 1048576.0, g.total_b / 1048576.0, g.avail / 1048576.0);
	if (g.want <= g.avail)
		return;
	if (g.capped)
		snprintf(limit_note, sizeof(limit_note), " (what gpumf.gpu_memory_limit leaves gpumf)");
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("%s needs about %.0f MB of GPU memory, more than the %.0f MB available%s",
					what, g.want / 1048576.0, Max(g.avail, 0) / 1048576.0, limit_note),
			 errdetail("%s %.0f MB free of %.0f MB. For " INT64_FORMAT " interactions of %d users and %d items "
					   "at %d factors: the matrices take %.0f MB, the factors %.0f MB, the solver %.0f MB, "
					   "the libraries' workspaces about %.0f MB%s. Nothing was uploaded.",
					   p->gpus > 1 ? "Each GPU has at least" : "The card has", g.free_b / 1048576.0, g.total_b / 1048576.0, R->nnz, R->n_rows, R->n_cols,
					   p->factors, g.need.matrices / 1048576.0, g.need.factors / 1048576.0,
					   g.need.solver / 1048576.0, (g.want - g.need.total) / 1048576.0,
					   p->gpus > 1 ? psprintf(", on each of the %d GPUs", p->gpus) : ""),
			 errhint("Train on the CPU (SET gpumf.device = 'cpu'), with fewer factors%s, on more GPUs (gpumf.gpus; ALS and CCD++), "
					 "or on a sample of the rows; or free the GPU of other work first.",
					 p->algorithm == GM_ALG_ALS_IMPLICIT && p->solver != GM_SOLVER_CG ?
					 ", with solver 'cg' (the block solver keeps two predictions and a permutation an interaction)" : "")));
}
