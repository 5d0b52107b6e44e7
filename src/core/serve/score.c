/*
 * score.c: the top n of every user at once (gm_score_topk).
 *
 * CPU: users in blocks; a block's scores S = X_b Y^T come from one sgemm
 * (OpenBLAS with all threads), then in parallel over the block's users the
 * seen items are overwritten with NaN and a heap picks the n best with
 * gm_topk's ranking (topk_row: a compare per score once the heap is full).
 * A block's scores take about 16 MB.
 * CUDA: the module's gm_cuda_score_topk (cuda/serve/score.cu), found by name.
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

/* bytes of scores per block of users */
#define CPU_BLOCK_BYTES (16 << 20)
#define CPU_BLOCK_MAX 1024

/* S (nb x ni) = X_b Y^T, with nt threads */
static void
block_scores(const float *Xb, int nb, const float *Y, int32_t ni, int k, float *S, int nt)
{
#ifndef GM_NO_CBLAS
	(void) nt;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ni, k, 1.0f,
				Xb, k, Y, k, 0.0f, S, ni);
#else
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int j = 0; j < nb; j++)
		for (int32_t i = 0; i < ni; i++)
			S[(size_t) j * ni + i] = gm_dot(Xb + (size_t) j * k, Y + (size_t) i * k, k);
#endif
}

/*
 * The n best of s[0 .. m), best first, ties to the lower index, NaN never
 * ranking: gm_topk without a skip list (the caller writes NaN over the
 * items to leave out), with a fast path.  Once the heap holds n entries a
 * score can only enter by beating the root's: the scan goes in index order,
 * so an equal score always has the higher index.  Almost no score does, and
 * the loop is a compare per score.
 */
static int
topk_row(const float *s, int32_t m, int n, int32_t *hi, float *hs)
{
	int			size = 0;
	int32_t		i = 0;
	float		thr;

	/* fill: the first n scores that are not NaN */
	for (; i < m && size < n; i++)
	{
		float		sc = s[i];
		int			j;

		if (sc != sc)
			continue;
		/* sift up in a min-heap by (score, then higher index is worse) */
		j = size++;
		while (j > 0)
		{
			int			parent = (j - 1) / 2;

			if (hs[parent] < sc || (hs[parent] == sc && hi[parent] > i))
				break;
			hs[j] = hs[parent];
			hi[j] = hi[parent];
			j = parent;
		}
		hs[j] = sc;
		hi[j] = i;
	}
	if (size < n)
		goto sort;
	thr = hs[0];
	for (; i < m; i++)
	{
		float		sc = s[i];
		int			j = 0;

		if (!(sc > thr))
			continue;
		/* replace the root, sift down */
		for (;;)
		{
			int			l = 2 * j + 1,
						r = l + 1,
						w = j;
			float		ws = sc;
			int32_t		wi = i;

			/* the worse child moves up if it is worse than (sc, i) */
			if (l < size && (hs[l] < ws || (hs[l] == ws && hi[l] > wi)))
			{
				w = l;
				ws = hs[l];
				wi = hi[l];
			}
			if (r < size && (hs[r] < ws || (hs[r] == ws && hi[r] > wi)))
				w = r;
			if (w == j)
				break;
			hs[j] = hs[w];
			hi[j] = hi[w];
			j = w;
		}
		hs[j] = sc;
		hi[j] = i;
		thr = hs[0];
	}
sort:
	/* heap-sort: the worst goes to the end */
	for (int end = size - 1; end > 0; end--)
	{
		float		ts = hs[end];
		int32_t		ti = hi[end];
		int			j = 0;

		hs[end] = hs[0];
		hi[end] = hi[0];
		for (;;)
		{
			int			l = 2 * j + 1,
						r = l + 1,
						w = j;
			float		ws = ts;
			int32_t		wi = ti;

			if (l < end && (hs[l] < ws || (hs[l] == ws && hi[l] > wi)))
			{
				w = l;
				ws = hs[l];
				wi = hi[l];
			}
			if (r < end && (hs[r] < ws || (hs[r] == ws && hi[r] > wi)))
				w = r;
			if (w == j)
				break;
			hs[j] = hs[w];
			hi[j] = hi[w];
			j = w;
		}
		hs[j] = ts;
		hi[j] = ti;
	}
	return size;
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

/* the n best of row j of S (user u), seen items masked, padded past the count */
static void
finish_row(const gm_score_problem *p, float *s, int32_t u, gm_score_result *r)
{
	int32_t		ni = p->n_items;
	int			n = p->n;
	int32_t    *oi = r->idx + (size_t) u * n;
	float	   *os = r->score + (size_t) u * n;
	int			got;

	if (p->item_bias)
		for (int32_t i = 0; i < ni; i++)
			s[i] += p->item_bias[i];
	if (p->seen_ptr)
		for (int64_t e = p->seen_ptr[u]; e < p->seen_ptr[u + 1]; e++)
			if (p->seen_idx[e] >= 0 && p->seen_idx[e] < ni)
				s[p->seen_idx[e]] = NAN;	/* never ranks */
	got = topk_row(s, ni, n, oi, os);
	r->count[u] = got;
	for (int e = got; e < n; e++)
	{
		oi[e] = -1;
		os[e] = NAN;
	}
}

/* Users per block of scores: a block of about CPU_BLOCK_BYTES, at least two per thread. */
static int
cpu_block_users(int32_t ni, int nt)
{
	int64_t		per = (int64_t) CPU_BLOCK_BYTES / ((int64_t) (ni > 0 ? ni : 1) * (int64_t) sizeof(float));

	return (int) (per < 2 * nt ? 2 * nt : per > CPU_BLOCK_MAX ? CPU_BLOCK_MAX : per);
}

double
gm_score_cpu_memory(int32_t n_items, int threads)
{
	return (double) cpu_block_users(n_items, gm_resolve_threads(threads)) *
		(double) (n_items > 0 ? n_items : 1) * sizeof(float);
}

/*
 * Blocks of users, one after the other: the block's product with every
 * thread (OpenBLAS's own threads: concurrent single-threaded calls do not
 * scale, measured), then the rows' selections.  The caller is asked between
 * blocks.
 */
static int
score_cpu(const gm_score_problem *p, const gm_callbacks *cb, gm_score_result *r,
		  char *err, size_t errlen)
{
	int			nt = gm_resolve_threads(p->threads);
	int32_t		nu = p->n_users,
				ni = p->n_items;
	int			B = cpu_block_users(ni, nt);
	int32_t		nblocks = (nu + B - 1) / B;
	/*
	 * OpenBLAS's threads spin for a while after each product and take the
	 * cores from the selection's threads (and theirs from the product): on
	 * two cores one selecting thread is fastest (measured: the selection
	 * then adds 15% to the product, against 100% with two).
	 */
	int			nt_rows = nt / 2 > 1 ? nt / 2 : 1;
	float	   *S;
	int			stop = 0;
	double		t0 = gm_now();

	S = malloc(sizeof(float) * (size_t) B * (ni > 0 ? ni : 1));
	if (!S)
	{
		snprintf(err, errlen, "out of memory for scoring (%zu bytes)", sizeof(float) * (size_t) B * ni);
		return GM_ENOMEM;
	}
#ifndef GM_NO_CBLAS
	openblas_set_num_threads(nt);
#endif
	for (int32_t blk = 0; blk < nblocks && !stop; blk++)
	{
		int32_t		u0 = blk * B;
		int			nb = (int) (nu - u0 < B ? nu - u0 : B);

		if (cb && cb->should_stop && cb->should_stop(cb->arg))
		{
			stop = 1;
			break;
		}
		if (ni > 0)
			block_scores(p->X + (size_t) u0 * p->k, nb, p->Y, ni, p->k, S, nt);
#pragma omp parallel for num_threads(nt_rows) schedule(dynamic, 1) if (nt_rows > 1)
		for (int j = 0; j < nb; j++)
			finish_row(p, S + (size_t) j * ni, u0 + j, r);
	}
	free(S);
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
