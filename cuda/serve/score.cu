/*
 * score.cu: the top n of every user on the GPU (gm_cuda_score_topk, the
 * batch-scoring ABI group of gm_score.h, looked up by name by the core).
 *
 * How it works:
 *
 *  - X (all users), Y, the item biases and the CSR of seen items are
 *    uploaded once.  Users go in batches of B (the scores of a batch take at
 *    most batch_bytes, 1 GiB by default, and fit the free memory).
 *  - Per batch, one cuBLAS sgemm (FP32) writes S = X_b Y^T, B rows of ld
 *    floats (ld = n_items rounded up to 32: 128-byte aligned rows for float4
 *    loads).
 *  - Then select_topk, one block of 256 threads per user row: the block
 *    walks the row in tiles of 1024 scores (one float4 per thread,
 *    coalesced) and keeps a candidate list in shared memory.  A score enters
 *    the list only if it beats the current threshold -- the n-th best of the
 *    candidates so far, compared as (score desc, item asc), the order
 *    gm_topk ranks by -- and is not a seen item (a binary search in the
 *    user's sorted seen list, done only for the few scores that pass the
 *    threshold).  When the list cannot take another tile it is sorted
 *    (bitonic, in shared memory) and cut to n, which raises the threshold.
 *    For n <= 256 the threshold starts at the n-th best of the threads' best
 *    items of the first tile (a sort of 256, not of 2048): then almost no
 *    score passes after the first tile, and the kernel reads S once at
 *    memory speed.  A final sort gives the n best, best first;
 *    entries past the count get item -1 and a NaN score.  NaN scores never
 *    rank; a user with fewer than n unseen items gets fewer.
 *  - The host keeps one batch in flight and polls should_stop between
 *    batches.  The compute time is the device time from the first sgemm to
 *    the last selection (CUDA events).
 *
 * Every CUDA and cuBLAS call goes through GM_CHECK; every exit frees what
 * was allocated.
 */
#include "common.cuh"
#include "gm_score.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEL_THREADS		256
#define SEL_VEC			4
#define SEL_TILE		(SEL_THREADS * SEL_VEC)		/* scores per tile */
#define SEL_CAP			2048	/* candidates: n (<= 1024) + a tile */
#define DEFAULT_BATCH_BYTES	((int64_t) 1 << 30)

#if GM_SCORE_GPU_MAX_N + SEL_TILE > SEL_CAP
#error "the candidate list must hold n plus a tile"
#endif

extern "C" int gm_cuda_score_abi_version(void);
extern "C" int gm_cuda_score_topk(const gm_score_problem *p, const gm_callbacks *cb,
								  gm_score_result *r, char *err, size_t errlen);

/* ------------------------------------------------------------ kernels */

/* (sa, ia) ranks above (sb, ib): higher score, then lower item */
__device__ __forceinline__ bool
better(float sa, int ia, float sb, int ib)
{
	return sa > sb || (sa == sb && ia < ib);
}

/* is item in the sorted list seen[0 .. n)? */
__device__ __forceinline__ bool
is_seen(const int32_t *__restrict__ seen, int32_t n, int32_t item)
{
	int32_t		lo = 0,
				hi = n;

	while (lo < hi)
	{
		int32_t		mid = (lo + hi) >> 1;

		if (__ldg(seen + mid) < item)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && __ldg(seen + lo) == item;
}

/*
 * Sort the first cnt candidates best first (bitonic over the next power of
 * two, padded with entries worse than any candidate).  Every thread of the
 * block calls it; it ends with a barrier.
 */
__device__ void
sort_candidates(float *cs, int *ci, int cnt)
{
	int			size = 2;

	while (size < cnt)
		size <<= 1;
	for (int t = cnt + threadIdx.x; t < size; t += blockDim.x)
	{
		cs[t] = -INFINITY;
		ci[t] = INT_MAX;
	}
	__syncthreads();
	for (int k2 = 2; k2 <= size; k2 <<= 1)
		for (int j = k2 >> 1; j > 0; j >>= 1)
		{
			for (int t = threadIdx.x; t < size; t += blockDim.x)
			{
				int			p = t ^ j;

				if (p > t)
				{
					float		st = cs[t],
								sp = cs[p];
					int			it = ci[t],
								ip = ci[p];
					/* ascending blocks put the better entry first */
					bool		swap = (t & k2) == 0 ? better(sp, ip, st, it) : better(st, it, sp, ip);

					if (swap)
					{
						cs[t] = sp;
						cs[p] = st;
						ci[t] = ip;
						ci[p] = it;
					}
				}
			}
			__syncthreads();
		}
}

/*
 * One block per row of the batch: the n best items of user u0 + row among
 * S[row][0 .. ni) + bias, seen items left out.  Writes n entries and the
 * count of user u0 + row.
 */
__global__ void __launch_bounds__(SEL_THREADS)
select_topk(const float *__restrict__ S, int64_t ld, int32_t ni, int32_t u0,
			const float *__restrict__ bias, const int64_t *__restrict__ seen_ptr,
			const int32_t *__restrict__ seen_idx, int n, int32_t *__restrict__ out_idx,
			float *__restrict__ out_score, int32_t *__restrict__ out_count)
{
	__shared__ float cs[SEL_CAP];
	__shared__ int ci[SEL_CAP];
	__shared__ int cnt;
	__shared__ float thr;
	__shared__ int thr_i;
	int			row = blockIdx.x;
	int32_t		u = u0 + row;
	const float *s = S + (size_t) row * ld;
	const int32_t *seen = NULL;
	int32_t		nseen = 0;
	int			got;

	if (seen_ptr)
	{
		seen = seen_idx + seen_ptr[u];
		nseen = (int32_t) (seen_ptr[u + 1] - seen_ptr[u]);
	}
	if (threadIdx.x == 0)
	{
		cnt = 0;
		thr = -INFINITY;		/* below every score: all but NaN enter */
		thr_i = INT_MAX;
	}
	__syncthreads();

	if (n <= SEL_THREADS)
	{
		/*
		 * Warm-up: each thread's best unseen item among its first four; the
		 * n-th best of those is reached by n distinct eligible items, so no
		 * item below it can make the top n.  It starts the threshold high
		 * without sorting a full candidate list (inclusive: thr_i one past it).
		 */
		int32_t		i0 = threadIdx.x * SEL_VEC;
		float		bs = -INFINITY;
		int			bi = INT_MAX;

#pragma unroll
		for (int q = 0; q < SEL_VEC; q++)
		{
			int32_t		i = i0 + q;
			float		x;

			if (i >= ni)
				break;
			x = s[i] + (bias ? __ldg(bias + i) : 0.0f);
			if (better(x, i, bs, bi) && !(nseen > 0 && is_seen(seen, nseen, i)))
			{
				bs = x;
				bi = i;
			}
		}
		cs[threadIdx.x] = bs;
		ci[threadIdx.x] = bi;
		sort_candidates(cs, ci, SEL_THREADS);
		if (threadIdx.x == 0 && ci[n - 1] != INT_MAX)
		{
			thr = cs[n - 1];
			thr_i = ci[n - 1] + 1;
		}
		__syncthreads();
	}

	for (int32_t base = 0; base < ni; base += SEL_TILE)
	{
		float		T = thr;
		int			Ti = thr_i;
		int32_t		i0 = base + threadIdx.x * SEL_VEC;
		float		v[SEL_VEC];

		if (i0 + SEL_VEC <= ni)
		{
			float4		f = __ldg((const float4 *) (s + i0));

			v[0] = f.x;
			v[1] = f.y;
			v[2] = f.z;
			v[3] = f.w;
		}
		else
		{
#pragma unroll
			for (int q = 0; q < SEL_VEC; q++)
				v[q] = i0 + q < ni ? s[i0 + q] : NAN;
		}
#pragma unroll
		for (int q = 0; q < SEL_VEC; q++)
		{
			int32_t		i = i0 + q;
			float		x = v[q];

			if (i >= ni)
				break;
			if (bias)
				x += __ldg(bias + i);
			if (better(x, i, T, Ti) && !(nseen > 0 && is_seen(seen, nseen, i)))
			{
				int			pos = atomicAdd(&cnt, 1);

				cs[pos] = x;
				ci[pos] = i;
			}
		}
		__syncthreads();
		if (cnt > SEL_CAP - SEL_TILE)
		{
			/* no room for another tile: keep the n best, raise the threshold */
			int			c = cnt;

			sort_candidates(cs, ci, c);
			if (threadIdx.x == 0)
			{
				cnt = c < n ? c : n;
				if (c >= n)
				{
					thr = cs[n - 1];
					thr_i = ci[n - 1];
				}
			}
			__syncthreads();
		}
	}
	{
		int			c = cnt;

		sort_candidates(cs, ci, c);
		got = c < n ? c : n;
	}
	for (int e = threadIdx.x; e < n; e += blockDim.x)
	{
		out_idx[(size_t) u * n + e] = e < got ? ci[e] : -1;
		out_score[(size_t) u * n + e] = e < got ? cs[e] : NAN;
	}
	if (threadIdx.x == 0)
		out_count[u] = got;
}

/* ------------------------------------------------------------ host */

typedef struct score_gpu
{
	float	   *X,
			   *Y,
			   *bias,
			   *S,
			   *out_score;
	int64_t    *seen_ptr;
	int32_t    *seen_idx,
			   *out_idx,
			   *out_count;
	cublasHandle_t blas;
	cudaStream_t stream;
	cudaEvent_t start,
				stop,
				done[2];
	int			have_blas,
				have_stream,
				have_events;
} score_gpu;

static void
score_gpu_free(score_gpu *g)
{
	void	   *ptrs[] = {g->X, g->Y, g->bias, g->S, g->out_score, g->seen_ptr,
	g->seen_idx, g->out_idx, g->out_count};

	for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
		if (ptrs[i])
			gm_dev_free(ptrs[i]);
	if (g->have_blas)
		cublasDestroy(g->blas);
	if (g->have_events)
	{
		cudaEventDestroy(g->start);
		cudaEventDestroy(g->stop);
		cudaEventDestroy(g->done[0]);
		cudaEventDestroy(g->done[1]);
	}
	if (g->have_stream)
		cudaStreamDestroy(g->stream);
	(void) cudaGetLastError();
	memset(g, 0, sizeof(*g));
}

/* cudaMalloc that reports GM_ENOMEM (not GM_EDEVICE) when memory runs out */
static int
dev_alloc(void **p, size_t bytes, const char *what, char *err, size_t errlen)
{
	cudaError_t e = gm_dev_malloc(p, bytes > 0 ? bytes : 4);

	if (e == cudaSuccess)
		return GM_OK;
	(void) cudaGetLastError();
	*p = NULL;
	snprintf(err, errlen, "cannot allocate %zu bytes of GPU memory for %s: %s", bytes, what,
			 cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? GM_ENOMEM : GM_EDEVICE;
}

#define ALLOC(ptr, bytes, what) \
	do { \
		int rc_ = dev_alloc((void **) &(ptr), (bytes), (what), err, errlen); \
		if (rc_ != GM_OK) \
			return rc_; \
	} while (0)

static int
score_run(score_gpu *g, const gm_score_problem *p, const gm_callbacks *cb,
		  gm_score_result *r, char *err, size_t errlen)
{
	int32_t		nu = p->n_users,
				ni = p->n_items;
	int			k = p->k,
				n = p->n;
	int64_t		ld = ((int64_t) ni + 31) / 32 * 32;
	int64_t		nseen = p->seen_ptr ? p->seen_ptr[nu] : 0;
	int64_t		budget = p->batch_bytes > 0 ? p->batch_bytes : DEFAULT_BATCH_BYTES;
	int64_t		B;
	size_t		free_b = 0,
				total_b = 0;
	size_t		fixed;
	double		t0 = gm_wall_seconds();
	float		ms = 0;
	const float one = 1.0f,
				zero = 0.0f;
	int			nbatches;

	/* device memory: the fixed arrays, then as many users per batch as fit */
	fixed = sizeof(float) * ((size_t) nu * k + (size_t) ni * k + (p->item_bias ? ni : 0)) +
		sizeof(int64_t) * (p->seen_ptr ? (size_t) nu + 1 : 0) + sizeof(int32_t) * (size_t) nseen +
		(sizeof(int32_t) + sizeof(float)) * (size_t) nu * n + sizeof(int32_t) * (size_t) nu;
	GM_CHECK(cudaMemGetInfo(&free_b, &total_b));
	if (fixed + (size_t) ld * 4 > free_b)
	{
		snprintf(err, errlen, "the problem needs %zu MB of GPU memory, %zu MB are free",
				 (fixed + (size_t) ld * 4) >> 20, free_b >> 20);
		return GM_ENOMEM;
	}
	if ((int64_t) (free_b - fixed) * 3 / 4 < budget)
		budget = (int64_t) (free_b - fixed) * 3 / 4;
	B = budget / (ld * (int64_t) sizeof(float));
	if (B < 1)
		B = 1;
	if (B > nu)
		B = nu > 0 ? nu : 1;
	nbatches = (int) ((nu + B - 1) / B);

	GM_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
	g->have_stream = 1;
	GM_CHECK(cudaEventCreate(&g->start));
	GM_CHECK(cudaEventCreate(&g->stop));
	GM_CHECK(cudaEventCreateWithFlags(&g->done[0], cudaEventDisableTiming));
	GM_CHECK(cudaEventCreateWithFlags(&g->done[1], cudaEventDisableTiming));
	g->have_events = 1;
	GM_CHECK(cublasCreate(&g->blas));
	g->have_blas = 1;
	GM_CHECK(cublasSetStream(g->blas, g->stream));
	/* FP32 products, never TF32: the lists must match the CPU's */
	GM_CHECK(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH));

	ALLOC(g->X, sizeof(float) * (size_t) nu * k, "user factors");
	ALLOC(g->Y, sizeof(float) * (size_t) ni * k, "item factors");
	if (p->item_bias)
		ALLOC(g->bias, sizeof(float) * (size_t) ni, "item biases");
	if (p->seen_ptr)
	{
		ALLOC(g->seen_ptr, sizeof(int64_t) * ((size_t) nu + 1), "seen items");
		ALLOC(g->seen_idx, sizeof(int32_t) * (size_t) nseen, "seen items");
	}
	ALLOC(g->out_idx, sizeof(int32_t) * (size_t) nu * n, "the lists");
	ALLOC(g->out_score, sizeof(float) * (size_t) nu * n, "the lists");
	ALLOC(g->out_count, sizeof(int32_t) * (size_t) nu, "the lists");
	ALLOC(g->S, sizeof(float) * (size_t) B * ld, "a batch of scores");

	GM_CHECK(cudaMemcpyAsync(g->X, p->X, sizeof(float) * (size_t) nu * k,
							 cudaMemcpyHostToDevice, g->stream));
	GM_CHECK(cudaMemcpyAsync(g->Y, p->Y, sizeof(float) * (size_t) ni * k,
							 cudaMemcpyHostToDevice, g->stream));
	if (p->item_bias)
		GM_CHECK(cudaMemcpyAsync(g->bias, p->item_bias, sizeof(float) * (size_t) ni,
								 cudaMemcpyHostToDevice, g->stream));
	if (p->seen_ptr)
	{
		GM_CHECK(cudaMemcpyAsync(g->seen_ptr, p->seen_ptr, sizeof(int64_t) * ((size_t) nu + 1),
								 cudaMemcpyHostToDevice, g->stream));
		if (nseen > 0)
			GM_CHECK(cudaMemcpyAsync(g->seen_idx, p->seen_idx, sizeof(int32_t) * (size_t) nseen,
									 cudaMemcpyHostToDevice, g->stream));
	}
	/* the padding columns of S are never read, but keep them defined */
	GM_CHECK(cudaMemsetAsync(g->S, 0, sizeof(float) * (size_t) B * ld, g->stream));
	GM_CHECK(cudaStreamSynchronize(g->stream));

	GM_CHECK(cudaEventRecord(g->start, g->stream));
	for (int b = 0; b < nbatches; b++)
	{
		int32_t		u0 = (int32_t) (b * B);
		int			nb = (int) (nu - u0 < B ? nu - u0 : B);

		/* S^T (ni x nb, column-major, ld) = Y (k x ni col-major)^T X_b (k x nb col-major) */
		if (ni > 0)
			GM_CHECK(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, ni, nb, k, &one,
								 g->Y, k, g->X + (size_t) u0 * k, k, &zero, g->S, (int) ld));
		select_topk<<<nb, SEL_THREADS, 0, g->stream>>>(g->S, ld, ni, u0, g->bias, g->seen_ptr,
													   g->seen_idx, n, g->out_idx,
													   g->out_score, g->out_count);
		GM_CHECK_LAUNCH();
		GM_CHECK(cudaEventRecord(g->done[b & 1], g->stream));
		/* one batch in flight: wait for the previous one, then ask the caller */
		if (b > 0)
			GM_CHECK(cudaEventSynchronize(g->done[(b - 1) & 1]));
		if (cb && cb->should_stop && cb->should_stop(cb->arg))
		{
			(void) cudaStreamSynchronize(g->stream);
			snprintf(err, errlen, "scoring canceled");
			return GM_ECANCELED;
		}
	}
	GM_CHECK(cudaEventRecord(g->stop, g->stream));
	GM_CHECK(cudaEventSynchronize(g->stop));
	GM_CHECK(cudaEventElapsedTime(&ms, g->start, g->stop));

	GM_CHECK(cudaMemcpy(r->idx, g->out_idx, sizeof(int32_t) * (size_t) nu * n,
						cudaMemcpyDeviceToHost));
	GM_CHECK(cudaMemcpy(r->score, g->out_score, sizeof(float) * (size_t) nu * n,
						cudaMemcpyDeviceToHost));
	GM_CHECK(cudaMemcpy(r->count, g->out_count, sizeof(int32_t) * (size_t) nu,
						cudaMemcpyDeviceToHost));
	r->compute_seconds = ms / 1000.0;
	r->transfer_seconds = gm_wall_seconds() - t0 - r->compute_seconds;
	r->batches = nbatches;
	gm_device_name(r->device, sizeof(r->device));
	return GM_OK;
}

/* The batch-scoring ABI version this module was built with. */
extern "C" int
gm_cuda_score_abi_version(void)
{
	return GM_SCORE_ABI_VERSION;
}

/* The top n of every user (gm_score.h); frees everything on every path. */
extern "C" int
gm_cuda_score_topk(const gm_score_problem *p, const gm_callbacks *cb, gm_score_result *r,
				   char *err, size_t errlen)
{
	score_gpu	g;
	int			rc;

	if (p->n < 1 || p->n > GM_SCORE_GPU_MAX_N || p->k < 1 || p->n_users < 0 || p->n_items < 0)
	{
		snprintf(err, errlen, "the GPU scorer takes 1 <= n <= %d and k >= 1 (n %d, k %d)",
				 GM_SCORE_GPU_MAX_N, p->n, p->k);
		return GM_ENOTSUP;
	}
	if (p->n_users == 0)
	{
		r->compute_seconds = r->transfer_seconds = 0;
		r->batches = 0;
		gm_device_name(r->device, sizeof(r->device));
		return GM_OK;
	}
	memset(&g, 0, sizeof(g));
	rc = score_run(&g, p, cb, r, err, errlen);
	score_gpu_free(&g);
	return rc;
}
