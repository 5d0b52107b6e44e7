/*
 * score.c: the top n of every user at once (gm_score_topk).
 *
 * CPU: users in blocks; a block's scores S = X_b Y^T come from one sgemm
 * (OpenBLAS, single-threaded per call: the threads split the blocks), then a
 * heap per user (gm_topk) picks the n best, leaving out the user's seen
 * items.  A block's scores stay small enough for the caches (about 4 MB).
 * CUDA: the module's gm_cuda_score_topk (cuda/score.cu), found by name.
 */
#include "gm_core.h"
#include "gm_score.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifndef GM_NO_CBLAS
#include <cblas.h>
#endif

/* bytes of scores per block (and thread) */
#define CPU_BLOCK_BYTES (4 << 20)
#define CPU_BLOCK_MAX 64

/* S (nb x ni) = X_b Y^T */
static void
block_scores(const float *Xb, int nb, const float *Y, int32_t ni, int k, float *S)
{
#ifndef GM_NO_CBLAS
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ni, k, 1.0f,
				Xb, k, Y, k, 0.0f, S, ni);
#else
	for (int j = 0; j < nb; j++)
		for (int32_t i = 0; i < ni; i++)
			S[(size_t) j * ni + i] = gm_dot(Xb + (size_t) j * k, Y + (size_t) i * k, k);
#endif
}

static int
check_problem(const gm_score_problem *p, const gm_score_result *r, char *err, size_t errlen)
{
	if (p->n_users < 0 || p->n_items < 0 || p->k < 1 || p->n < 1)
	{
		snprintf(err, errlen, "invalid scoring problem: %d users, %d items, k %d, n %d",
				 p->n_users, p->n_items, p->k, p->n);
		return GM_EINVAL;
	}
	if ((p->n_users > 0 && (!p->X || !r->idx || !r->score || !r->count)) ||
		(p->n_items > 0 && !p->Y) || (p->seen_ptr && !p->seen_idx && p->seen_ptr[p->n_users] > 0))
	{
		snprintf(err, errlen, "invalid scoring problem: an array is missing");
		return GM_EINVAL;
	}
	return GM_OK;
}

static int
score_cpu(const gm_score_problem *p, const gm_callbacks *cb, gm_score_result *r,
		  char *err, size_t errlen)
{
	int			nt = gm_resolve_threads(p->threads);
	int32_t		nu = p->n_users,
				ni = p->n_items;
	int			n = p->n;
	int64_t		per = (int64_t) CPU_BLOCK_BYTES / ((int64_t) (ni > 0 ? ni : 1) * (int64_t) sizeof(float));
	int			B = (int) (per < 1 ? 1 : per > CPU_BLOCK_MAX ? CPU_BLOCK_MAX : per);
	int32_t		nblocks = (nu + B - 1) / B;
	float	  **bufs;
	volatile int stop = 0;
	int			oom = 0;
	double		t0 = gm_now();

	if (nt > nblocks)
		nt = nblocks > 0 ? nblocks : 1;
	bufs = calloc(nt, sizeof(float *));
	if (!bufs)
	{
		snprintf(err, errlen, "out of memory for scoring");
		return GM_ENOMEM;
	}
	for (int t = 0; t < nt; t++)
		if ((bufs[t] = malloc(sizeof(float) * (size_t) B * (ni > 0 ? ni : 1))) == NULL)
			oom = 1;
	if (oom)
	{
		for (int t = 0; t < nt; t++)
			free(bufs[t]);
		free(bufs);
		snprintf(err, errlen, "out of memory for scoring (%d threads x %zu bytes)", nt,
				 sizeof(float) * (size_t) B * ni);
		return GM_ENOMEM;
	}
#ifndef GM_NO_CBLAS
	/* each thread runs its own single-threaded sgemm */
	openblas_set_num_threads(1);
#endif

#pragma omp parallel num_threads(nt)
	{
#ifdef _OPENMP
		int			tid = omp_get_thread_num();
#else
		int			tid = 0;
#endif
		float	   *S = bufs[tid];

#pragma omp for schedule(dynamic, 1)
		for (int32_t blk = 0; blk < nblocks; blk++)
		{
			int32_t		u0 = blk * B;
			int			nb = (int) (nu - u0 < B ? nu - u0 : B);

			if (stop)
				continue;
			/* only the calling thread may ask the caller (PostgreSQL is single-threaded) */
			if (tid == 0 && cb && cb->should_stop && cb->should_stop(cb->arg))
			{
				stop = 1;
				continue;
			}
			if (ni > 0)
				block_scores(p->X + (size_t) u0 * p->k, nb, p->Y, ni, p->k, S);
			for (int j = 0; j < nb; j++)
			{
				int32_t		u = u0 + j;
				float	   *s = S + (size_t) j * ni;
				const int32_t *skip = NULL;
				int32_t		nskip = 0;
				int32_t    *oi = r->idx + (size_t) u * n;
				float	   *os = r->score + (size_t) u * n;
				int			got;

				if (p->item_bias)
					for (int32_t i = 0; i < ni; i++)
						s[i] += p->item_bias[i];
				if (p->seen_ptr)
				{
					skip = p->seen_idx + p->seen_ptr[u];
					nskip = (int32_t) (p->seen_ptr[u + 1] - p->seen_ptr[u]);
				}
				got = gm_topk(s, ni, n, skip, nskip, oi, os);
				r->count[u] = got;
				for (int e = got; e < n; e++)
				{
					oi[e] = -1;
					os[e] = NAN;
				}
			}
		}
	}
	for (int t = 0; t < nt; t++)
		free(bufs[t]);
	free(bufs);
	r->compute_seconds = gm_now() - t0;
	r->transfer_seconds = 0;
	r->batches = nblocks;
	snprintf(r->device, sizeof(r->device), "cpu (%d threads)", nt);
	if (stop)
	{
		snprintf(err, errlen, "scoring canceled");
		return GM_ECANCELED;
	}
	return GM_OK;
}

/* The top n of every user (see gm_score.h). */
int
gm_score_topk(const gm_score_problem *p, gm_backend_kind b, const gm_callbacks *cb,
			  gm_score_result *r, char *err, size_t errlen)
{
	int			rc = check_problem(p, r, err, errlen);

	if (rc != GM_OK)
		return rc;
	r->compute_seconds = r->transfer_seconds = 0;
	r->batches = 0;
	r->device[0] = '\0';
	if (b == GM_BACKEND_CPU)
		return score_cpu(p, cb, r, err, errlen);
	if (b == GM_BACKEND_CUDA)
	{
		gm_cuda_score_abi_fn abi;
		gm_cuda_score_topk_fn fn;

		*(void **) &abi = gm_cuda_symbol("gm_cuda_score_abi_version");
		*(void **) &fn = gm_cuda_symbol("gm_cuda_score_topk");
		if (abi == NULL || fn == NULL)
		{
			snprintf(err, errlen, "the CUDA module is not loaded or has no batch scorer");
			return GM_ENODEVICE;
		}
		if (abi() != GM_SCORE_ABI_VERSION)
		{
			snprintf(err, errlen, "the CUDA module's batch scorer is ABI version %d, this gpumf needs %d: reinstall gpumf",
					 abi(), GM_SCORE_ABI_VERSION);
			return GM_ENODEVICE;
		}
		if (p->n > GM_SCORE_GPU_MAX_N)
		{
			snprintf(err, errlen, "the GPU scorer takes n <= %d, got %d", GM_SCORE_GPU_MAX_N, p->n);
			return GM_ENOTSUP;
		}
		return fn(p, cb, r, err, errlen);
	}
	snprintf(err, errlen, "unknown backend %d", (int) b);
	return GM_EINVAL;
}
