/*
 * als_implicit.cu: implicit-feedback ALS on the GPU (the model of
 * src/core/train/als_implicit.c: confidences c = 1 + alpha v on the observed
 * pairs, alpha0 on the others, ridges regularization (n + alpha0 m)^nu), the
 * CUDA table of operations gm_cuda_als_implicit_ops (gm_algo.h) that the
 * core's training loop drives like the CPU table.
 *
 * How it works (see test/bench/gpu/README.md for the measurements):
 *
 *  - create uploads R and Rt (device_csr.cuh) with the values as read; the
 *    kernels form each confidence c = 1 + alpha v where they use it
 *    (gm_confidence, rounded as the CPU rounds it), so one copy of the
 *    values serves every alpha; the sum of the confidences (for the loss)
 *    is taken on the host.  16 bytes an interaction for CG; the block
 *    solver adds its per-entry predictions (8) and a permutation (4).
 *  - The solvers' work arrays hold one slice of rows (gm_als_work_rows,
 *    about 512 MB; the core's slices never have more rows, gm_sweep
 *    max_rows), indexed from the slice's first row.
 *  - Several GPUs (gm_mf_params.gpus): als_top, below the solvers.
 *  - Factors live on the device row-major with the row length padded to kp
 *    (gm_padded_k); padded columns stay exactly zero.
 *  - G = alpha0 F^T F of the other side (cuBLAS sgemm, FP32), plus the
 *    ridge on its first k diagonal entries when nu = 0; with nu > 0 each
 *    row adds its own ridge (reg arrays, computed on the host).
 *  - CG (GM_SOLVER_CG): two sweeps (users, items).  One CG pass (the
 *    initial residual, then each of the cg_steps steps) is
 *      1. a cuBLAS sgemm over all rows of the slice: AP = V G   (V = X or P;
 *         the initial pass uses alpha = -1), i.e. the dense part of A v for
 *         every row at once at sgemm speed instead of k^2 scalar reads per row;
 *      2. one fused kernel, a warp per "chunk" (up to GM_CHUNK nonzeros of one
 *         row): lanes form groups of LG lanes, each group takes one nonzero at
 *         a time and holds its k-vector as V float4 per lane (16-byte loads,
 *         coalesced); the dot y_i . v is a log2(LG)-step shuffle reduction
 *         inside the group, so NG = 32/LG nonzeros are in flight per warp
 *         (twice that with the unroll) and no __syncthreads is ever needed.
 *         The groups' partial sums are combined once per chunk.  A row with a
 *         single chunk then does its CG update straight from registers; a
 *         row split over several chunks (popular items, heavy users) adds its
 *         partial sums into AP with float4 atomics (atomic_add4: one vector
 *         atomic on 9.0 and newer, four float atomics before) and the last
 *         chunk to finish (a per-row counter, threadfence reduction) does the
 *         update.
 *    The update is the CPU core's (src/core/train/als_implicit.c cg_solve_row):
 *      init:  r = sum_i (c_i - (c_i-alpha0) y_i.x) y_i - G x - reg x;  p = r;
 *             rs = r.r
 *      step:  if rs < 1e-20 skip;  Ap = G p + reg p + sum_i (c_i-alpha0)(y_i.p) y_i;
 *             a = rs / p.Ap;  x += a p;  r -= a Ap;  rsn = r.r;
 *             p = r + (rsn/rs) p;  rs = rsn    (rsn < 1e-20 stops the row)
 *  - Block coordinate descent (GM_SOLVER_BLOCK; GM_SOLVER_EXACT up to 64
 *    padded factors, as one block): als_block.cuh.  A sweep of the loop is
 *    one block of one side (2 ceil(k/b) block_sweeps sweeps an iteration): begin
 *    builds G at a side's first block and brings the per-entry predictions
 *    s = x . y up to date (the other side's, permuted, which its own sweep
 *    kept exact; recomputed from the factors every GM_REFRESH sides); run
 *    is an sgemm H = X G(:, B) for the slice, the accumulate-and-solve
 *    kernel and the prediction update.
 *  - evaluate: the loss accumulates in float64 (the core's definition).
 *
 * Every CUDA and cuBLAS call goes through GM_CHECK, which writes the call,
 * the error, the file and the line into err and returns GM_EDEVICE.
 */
#include "common.cuh"
#include "device_csr.cuh"
#include "als_block.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define WARPS			8		/* warps per block in the CG kernels */
#define GM_REFRESH		8		/* sides between exact recomputations of the predictions */

typedef struct als_gpu
{
	/* the data (create) */
	int			dev;			/* the CUDA device */
	int			multi;			/* one of several devices: owns rows own0 .. own1 of
								 * each side, holds only their entries (a row view),
								 * and keeps no entry permutation */
	int32_t		own0[2],
				own1[2];
	int32_t		n[2];			/* rows of side 0 (users) and 1 (items) */
	int64_t		nnz;			/* R's entries here (with multi: the owned users') */
	int64_t		nnzs[2];		/* each side's entries here */
	gm_dcsr		m[2];			/* R and Rt, values as read (gm_confidence) */
	gm_dchunks	ch[2];
	const int64_t *indptr_h[2]; /* the caller's row pointers of R and Rt */
	int32_t    *slot[2];		/* per row: scratch slot of a row of several chunks, or -1 */
	int32_t    *slots_before[2];	/* host, n + 1: the slots of the rows before a row */
	int32_t		nslots[2];
	int32_t		nslot_max;		/* block: scratch slots, the most a slice needs */
	void	   *perm;			/* position in R -> position in Rt (block solver; built
								 * at its first use), int32 when nnz fits, else int64 */
	int			perm64;			/* perm holds int64 */
	int32_t		wrows;			/* rows of the work arrays: a slice's at most */
	int		   *counter;		/* max(n), zero between passes */
	int		   *queue;			/* 2 after counter: the chunk queue (device_csr.cuh) */
	double	   *acc;			/* loss sums */
	cublasHandle_t blas;
	cudaStream_t stream;
	int			have_blas;
	int			have_stream;

	/* the parameters (create, reset) */
	gm_mf_params p;
	int			k;
	int			kp;
	int			block;			/* 0: CG; else the block width b (32 or 64) */
	int			nblocks;		/* ceil(k / block) */
	int			sweeps;			/* block passes per side */
	double		sum_c;
	float	   *F[2];			/* X, Y: n x kp */
	float	   *G;				/* kp x kp */
	float	   *reg[2];			/* per-row ridges (nu > 0), else NULL */
	float	   *R,
			   *P,
			   *AP;				/* CG: wrows x kp work, a slice's rows from its first */
	float	   *rs;				/* CG: wrows */
	float	   *S[2];			/* block: per-entry predictions of each side */
	float	   *H,
			   *D;				/* block: wrows x b */
	float	   *scratch;		/* block: max(nslots) x (b^2 + b) */
	float	   *work;			/* evaluate: wrows x kp (block solver; CG uses AP) */
	int			cache_side;		/* block: the side whose S is current, -1 none */
	int			since_exact;	/* block: sides since S was computed from the factors */
	int			prepared;		/* sweep begun, -1 none */
} als_gpu;

/* ------------------------------------------------------------ kernels */

struct pass_args
{
	const int64_t *indptr;
	const int32_t *indices;
	const float *data;			/* values as read (gm_confidence) */
	const int2 *chunks;
	int32_t		nchunks;
	const float *Y;				/* the other side's factors */
	float	   *X;				/* this side's factors */
	float	   *R;				/* R, P, AP, rs: the slice's rows, row r at r - row0 */
	float	   *P;
	float	   *AP;
	float	   *rs;
	int32_t		row0;
	int		   *counter;
	int		   *queue;			/* the chunk queue (device_csr.cuh), or NULL */
	const float *reg;			/* per-row ridge, or NULL (then in G) */
	float		alpha;
	float		alpha0;
};

/*
 * One CG pass.  INIT: r = AP - reg x + sum_i (c_i - (c_i - alpha0) y_i.x) y_i
 * with AP = -XG.  Otherwise: Ap = AP + reg p + sum_i (c_i - alpha0)(y_i.p) y_i
 * with AP = PG, then the update.
 * kp = 4 * LG * V; lane (g = lane / LG, q = lane % LG) holds float4 number
 * q + LG * t (t < V) of every row vector.
 */
template <int LG, int V, bool INIT>
__device__ __forceinline__ void
cg_chunk(const pass_args &a, int32_t task)
{
	constexpr int NG = 32 / LG;
	constexpr int KP4 = LG * V;
	const int	lane = threadIdx.x & 31;
	const int	g = lane / LG;
	const int	q = lane % LG;
	const gm_chunk_span sp = gm_chunk_at(a.chunks, a.indptr, task);
	const int32_t row = sp.row;
	const int	nch = sp.nch;
	const int64_t b = sp.b;
	const int64_t e = sp.e;
	const size_t wrow = (size_t) (row - a.row0);	/* the row in the work arrays */
	float		rsold = 0.0f;

	if (!INIT)
	{
		rsold = a.rs[wrow];
		if (rsold < 1e-20f)
			return;				/* converged: the CPU's "break" */
	}

	const float4 *vrow = reinterpret_cast<const float4 *>(
		INIT ? a.X + (size_t) row * (KP4 * 4) : a.P + wrow * (KP4 * 4));
	float4		v[V],
				acc[V];

#pragma unroll
	for (int t = 0; t < V; t++)
	{
		v[t] = vrow[q + LG * t];
		acc[t] = make_float4(0.f, 0.f, 0.f, 0.f);
	}

	/*
	 * Two nonzeros per group per round (2 NG per warp), the next round's ids
	 * prefetched.  The loop bound is uniform across the warp so that every
	 * lane reaches every shuffle; missing nonzeros count as zero rows.
	 */
	int32_t		id0 = 0,
				id1 = 0;
	float		c0 = 1.0f,
				c1 = 1.0f;

	if (b + g < e)
	{
		id0 = __ldg(a.indices + b + g);
		c0 = gm_confidence(a.alpha, __ldg(a.data + b + g));
	}
	if (b + g + NG < e)
	{
		id1 = __ldg(a.indices + b + g + NG);
		c1 = gm_confidence(a.alpha, __ldg(a.data + b + g + NG));
	}
	for (int64_t base = b; base < e; base += 2 * NG)
	{
		const bool	has0 = base + g < e;
		const bool	has1 = base + g + NG < e;
		const float4 *y0p = reinterpret_cast<const float4 *>(a.Y + (size_t) id0 * (KP4 * 4));
		const float4 *y1p = reinterpret_cast<const float4 *>(a.Y + (size_t) id1 * (KP4 * 4));
		const float cc0 = c0,
					cc1 = c1;
		float4		y0[V],
					y1[V];

#pragma unroll
		for (int t = 0; t < V; t++)
		{
			y0[t] = has0 ? __ldg(y0p + q + LG * t) : make_float4(0.f, 0.f, 0.f, 0.f);
			y1[t] = has1 ? __ldg(y1p + q + LG * t) : make_float4(0.f, 0.f, 0.f, 0.f);
		}
		{
			const int64_t n0 = base + 2 * NG + g,
						n1 = base + 3 * NG + g;

			if (n0 < e)
			{
				id0 = __ldg(a.indices + n0);
				c0 = gm_confidence(a.alpha, __ldg(a.data + n0));
			}
			if (n1 < e)
			{
				id1 = __ldg(a.indices + n1);
				c1 = gm_confidence(a.alpha, __ldg(a.data + n1));
			}
		}
		float		s0 = 0.f,
					s1 = 0.f;

#pragma unroll
		for (int t = 0; t < V; t++)
		{
			s0 += dot4(y0[t], v[t]);
			s1 += dot4(y1[t], v[t]);
		}
		s0 = group_sum<LG>(s0);
		s1 = group_sum<LG>(s1);

		float		w0,
					w1;

		if (INIT)
		{
			w0 = has0 ? cc0 - (cc0 - a.alpha0) * s0 : 0.0f;
			w1 = has1 ? cc1 - (cc1 - a.alpha0) * s1 : 0.0f;
		}
		else
		{
			w0 = has0 ? (cc0 - a.alpha0) * s0 : 0.0f;
			w1 = has1 ? (cc1 - a.alpha0) * s1 : 0.0f;
		}
#pragma unroll
		for (int t = 0; t < V; t++)
		{
			fma4(acc[t], w0, y0[t]);
			fma4(acc[t], w1, y1[t]);
		}
	}

	/* combine the NG groups: afterwards every group holds the chunk's sum */
#pragma unroll
	for (int o = LG; o < 32; o <<= 1)
	{
#pragma unroll
		for (int t = 0; t < V; t++)
		{
			acc[t].x += __shfl_xor_sync(0xffffffffu, acc[t].x, o);
			acc[t].y += __shfl_xor_sync(0xffffffffu, acc[t].y, o);
			acc[t].z += __shfl_xor_sync(0xffffffffu, acc[t].z, o);
			acc[t].w += __shfl_xor_sync(0xffffffffu, acc[t].w, o);
		}
	}

	float4	   *aprow = reinterpret_cast<float4 *>(a.AP + wrow * (KP4 * 4));
	float4		ap[V];

	if (nch == 1)
	{
#pragma unroll
		for (int t = 0; t < V; t++)
			ap[t] = add4(aprow[q + LG * t], acc[t]);
	}
	else
	{
		/* several chunks: publish, and the last one to arrive updates */
		int			last = 0;

		if (g == 0)
		{
#pragma unroll
			for (int t = 0; t < V; t++)
				atomic_add4(aprow + q + LG * t, acc[t]);
		}
		__threadfence();
		__syncwarp();
		if (lane == 0)
		{
			int			old = atomicAdd(a.counter + row, 1);

			last = old == nch - 1;
		}
		last = __shfl_sync(0xffffffffu, last, 0);
		if (!last)
			return;
		__threadfence();
#pragma unroll
		for (int t = 0; t < V; t++)
			ap[t] = __ldcg(aprow + q + LG * t);
		if (lane == 0)
			a.counter[row] = 0;
	}

	if (a.reg)
	{
		/* the row's own ridge (nu > 0): -reg x into r, +reg p into Ap */
		const float rg = INIT ? -a.reg[row] : a.reg[row];

#pragma unroll
		for (int t = 0; t < V; t++)
			fma4(ap[t], rg, v[t]);
	}

	float4	   *rrow = reinterpret_cast<float4 *>(a.R + wrow * (KP4 * 4));
	float4	   *prow = reinterpret_cast<float4 *>(a.P + wrow * (KP4 * 4));

	if (INIT)
	{
		/* ap holds r */
		float		s = 0.f;

#pragma unroll
		for (int t = 0; t < V; t++)
			s += dot4(ap[t], ap[t]);
		s = group_sum<LG>(s);
		if (g == 0)
		{
#pragma unroll
			for (int t = 0; t < V; t++)
			{
				rrow[q + LG * t] = ap[t];
				prow[q + LG * t] = ap[t];
			}
			if (q == 0)
				a.rs[wrow] = s;
		}
		return;
	}

	/* the CG step; v holds p */
	float		pap = 0.f;

#pragma unroll
	for (int t = 0; t < V; t++)
		pap += dot4(v[t], ap[t]);
	pap = group_sum<LG>(pap);

	const float alpha = rsold / pap;
	float4	   *xrow = reinterpret_cast<float4 *>(a.X + (size_t) row * (KP4 * 4));
	float4		r[V];
	float		rsn = 0.f;

#pragma unroll
	for (int t = 0; t < V; t++)
	{
		float4		x = xrow[q + LG * t];
		float4		rr = rrow[q + LG * t];

		x.x += alpha * v[t].x;
		x.y += alpha * v[t].y;
		x.z += alpha * v[t].z;
		x.w += alpha * v[t].w;
		rr.x -= alpha * ap[t].x;
		rr.y -= alpha * ap[t].y;
		rr.z -= alpha * ap[t].z;
		rr.w -= alpha * ap[t].w;
		r[t] = rr;
		rsn += dot4(rr, rr);
		if (g == 0)
			xrow[q + LG * t] = x;
	}
	rsn = group_sum<LG>(rsn);
	if (g == 0)
	{
		const float beta = rsn / rsold;

#pragma unroll
		for (int t = 0; t < V; t++)
		{
			float4		pp;

			rrow[q + LG * t] = r[t];
			pp.x = r[t].x + beta * v[t].x;
			pp.y = r[t].y + beta * v[t].y;
			pp.z = r[t].z + beta * v[t].z;
			pp.w = r[t].w + beta * v[t].w;
			prow[q + LG * t] = pp;
		}
		if (q == 0)
			a.rs[wrow] = rsn;	/* < 1e-20 stops the row */
	}
}

/* One CG pass over the chunks (cg_chunk), a warp at a time. */
template <int LG, int V, bool INIT>
__global__ void
__launch_bounds__(WARPS * 32)
cg_pass(pass_args a)
{
	for (int32_t task = gm_chunk_first(a.queue, WARPS); task < a.nchunks;
		 task = gm_chunk_next(a.queue, a.nchunks))
		cg_chunk<LG, V, INIT>(a, task);
	gm_chunk_done(a.queue, WARPS);
}

/*
 * Per stored entry, s = x_row . y_col (MODE 0: into out[entry]) or the
 * loss's sparse part c (1 - s)^2 - alpha0 s^2 summed into *sum (MODE 1).
 */
template <int LG, int V, int MODE>
__global__ void
__launch_bounds__(WARPS * 32)
entry_dots(const int64_t *indptr, const int32_t *indices, const float *data,
		   const int2 *chunks, int32_t nchunks, const float *X, const float *Y,
		   float alpha, float alpha0, float *out, double *sum)
{
	constexpr int NG = 32 / LG;
	constexpr int KP4 = LG * V;
	__shared__ double part[WARPS];
	const int	lane = threadIdx.x & 31;
	const int	g = lane / LG;
	const int	q = lane % LG;
	const int32_t task = blockIdx.x * WARPS + (threadIdx.x >> 5);
	double		acc = 0.0;

	if (task < nchunks)
	{
		const int2	ch = chunks[task];
		const int64_t rb = indptr[ch.x];
		const int64_t re = indptr[ch.x + 1];
		const int64_t b = rb + (int64_t) ch.y * GM_CHUNK;
		const int64_t e = b + GM_CHUNK < re ? b + GM_CHUNK : re;
		const float4 *xr = reinterpret_cast<const float4 *>(X + (size_t) ch.x * (KP4 * 4));
		float4		x[V];

#pragma unroll
		for (int t = 0; t < V; t++)
			x[t] = xr[q + LG * t];
		/* the loop bound is uniform per group; the shuffles stay in-group */
		for (int64_t base = b; base < e; base += NG)
		{
			int64_t		i = base + g;
			float		s = 0.f;
			float		c = 0.f;

			if (i < e)
			{
				const float4 *yr = reinterpret_cast<const float4 *>(
					Y + (size_t) __ldg(indices + i) * (KP4 * 4));

				c = gm_confidence(alpha, __ldg(data + i));
#pragma unroll
				for (int t = 0; t < V; t++)
					s += dot4(__ldg(yr + q + LG * t), x[t]);
			}
			s = group_sum<LG>(s);
			if (i < e && q == 0)
			{
				if (MODE == 0)
					out[i] = s;
				else
				{
					double		ds = s;

					acc += c * (1.0 - ds) * (1.0 - ds) - alpha0 * ds * ds;
				}
			}
		}
	}
	if (MODE == 1)
	{
		for (int o = 16; o > 0; o >>= 1)
			acc += __shfl_xor_sync(0xffffffffu, acc, o);
		if (lane == 0)
			part[threadIdx.x >> 5] = acc;
		__syncthreads();
		if (threadIdx.x == 0)
		{
			double		s = 0.0;

			for (int w = 0; w < WARPS; w++)
				s += part[w];
			atomicAdd(sum, s);
		}
	}
}

/*
 * out[0] += sum a.b, out[1] += sum w_row b.b over n elements (rows of kp;
 * w NULL: weight 1)
 */
__global__ void
dense_sums(const float *A, const float *B, size_t n, const float *w, int kp, double *out)
{
	__shared__ double p0[32],
				p1[32];
	double		s0 = 0.0,
				s1 = 0.0;

	for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
		 i += (size_t) gridDim.x * blockDim.x)
	{
		double		bv = B[i];

		if (A)
			s0 += (double) A[i] * bv;
		s1 += (w ? (double) w[i / kp] : 1.0) * bv * bv;
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		s0 += __shfl_xor_sync(0xffffffffu, s0, o);
		s1 += __shfl_xor_sync(0xffffffffu, s1, o);
	}
	if ((threadIdx.x & 31) == 0)
	{
		p0[threadIdx.x >> 5] = s0;
		p1[threadIdx.x >> 5] = s1;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		a0 = 0.0,
					a1 = 0.0;

		for (int w = 0; w < (int) (blockDim.x >> 5); w++)
		{
			a0 += p0[w];
			a1 += p1[w];
		}
		atomicAdd(out, a0);
		atomicAdd(out + 1, a1);
	}
}

/* G[i][i] += reg for the first k diagonal entries (the padded ones stay 0) */
__global__ void
add_diag(float *G, int k, int kp, float reg)
{
	int			i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < k)
		G[(size_t) i * kp + i] += reg;
}

/* users <- items: dst[e] = src[perm[e]]; items <- users: dst[perm[e]] = src[e] */
template <typename I>
__global__ void
permute_entries(const float *src, float *dst, const I *perm, int64_t n, int gather)
{
	for (int64_t e = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; e < n;
		 e += (int64_t) gridDim.x * blockDim.x)
	{
		if (gather)
			dst[e] = src[perm[e]];
		else
			dst[perm[e]] = src[e];
	}
}

/* ----------------------------------------------------- shape dispatch */

/* Launch one CG pass over a slice's chunks with the kernel shape of kp. */
static cudaError_t
launch_pass(int kp, bool init, const pass_args &a, cudaStream_t st)
{
	/* per kernel and kp / 32 (gm_chunk_grid) */
	static int	resident[2][GM_MAXK / 32];
	int		   *res = &resident[init][(kp / 32 - 1) & (GM_MAXK / 32 - 1)];

	if (a.nchunks == 0)
		return cudaSuccess;
	switch (kp)
	{
#define CASE(KP, LG, V) \
		case KP: \
			if (init) \
				cg_pass<LG, V, true><<<gm_chunk_grid(cg_pass<LG, V, true>, res, WARPS, 0, \
													 a.nchunks, a.queue), WARPS * 32, 0, st>>>(a); \
			else \
				cg_pass<LG, V, false><<<gm_chunk_grid(cg_pass<LG, V, false>, res, WARPS, 0, \
													  a.nchunks, a.queue), WARPS * 32, 0, st>>>(a); \
			break;
			GM_SHAPES(CASE)
#undef CASE
		default:
			return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/*
 * The per-entry dots over all of side's rows: into out (MODE 0, the
 * predictions) or the loss's sparse part into *sum (MODE 1).
 */
static cudaError_t
launch_dots(const als_gpu *h, int side, bool loss, float *out, double *sum)
{
	int32_t		nchunks = h->ch[side].ptr[h->n[side]];
	dim3		grid((nchunks + WARPS - 1) / WARPS);
	const gm_dcsr *m = &h->m[side];
	const float *X = h->F[side],
			   *Y = h->F[1 - side];
	float		al = h->p.alpha,
				a0 = h->p.alpha0;

	if (nchunks == 0)
		return cudaSuccess;
	switch (h->kp)
	{
#define CASE(KP, LG, V) \
		case KP: \
			if (loss) \
				entry_dots<LG, V, 1><<<grid, WARPS * 32, 0, h->stream>>>( \
					m->indptr, m->indices, m->data, h->ch[side].chunks, nchunks, X, Y, al, a0, out, sum); \
			else \
				entry_dots<LG, V, 0><<<grid, WARPS * 32, 0, h->stream>>>( \
					m->indptr, m->indices, m->data, h->ch[side].chunks, nchunks, X, Y, al, a0, out, sum); \
			break;
			GM_SHAPES(CASE)
#undef CASE
		default:
			return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* --------------------------------------------------------- operations */

/* Free what depends on the parameters (reset frees and rebuilds it). */
static void
free_params(als_gpu *h)
{
	for (int s = 0; s < 2; s++)
	{
		gm_dev_free(h->F[s]);
		gm_dev_free(h->reg[s]);
		gm_dev_free(h->S[s]);
		h->F[s] = h->reg[s] = h->S[s] = NULL;
	}
	gm_dev_free(h->G);
	gm_dev_free(h->R);
	gm_dev_free(h->P);
	gm_dev_free(h->AP);
	gm_dev_free(h->rs);
	gm_dev_free(h->H);
	gm_dev_free(h->D);
	gm_dev_free(h->scratch);
	gm_dev_free(h->work);
	h->G = h->R = h->P = h->AP = h->rs = h->H = h->D = h->scratch = h->work = NULL;
}

/* Free all device memory and handles; safe on NULL and after errors. */
static void
dev_destroy(void *p)
{
	als_gpu    *h = (als_gpu *) p;

	if (h == NULL)
		return;
	(void) cudaSetDevice(h->dev);
	if (h->have_stream)
		cudaStreamSynchronize(h->stream);
	free_params(h);
	for (int s = 0; s < 2; s++)
	{
		gm_dcsr_free(&h->m[s]);
		gm_dchunks_free(&h->ch[s]);
		gm_dev_free(h->slot[s]);
		free(h->slots_before[s]);
	}
	gm_dev_free(h->perm);
	gm_dev_free(h->counter);
	gm_dev_free(h->acc);
	if (h->have_blas)
		cublasDestroy(h->blas);
	if (h->have_stream)
		cudaStreamDestroy(h->stream);
	(void) cudaGetLastError();
	free(h);
}

/* Rows longer than one chunk get scratch slots (block solver); host side. */
static int
build_slots(als_gpu *h, int side, char *err, size_t errlen)
{
	int32_t		n = h->n[side];
	int32_t    *slot = (int32_t *) malloc(sizeof(int32_t) * (size_t) (n > 0 ? n : 1));
	int32_t		ns = 0;
	cudaError_t e;

	if (!slot)
	{
		snprintf(err, errlen, "out of host memory for the block solver's slots");
		return GM_ENOMEM;
	}
	h->slots_before[side] = (int32_t *) malloc(sizeof(int32_t) * ((size_t) n + 1));
	if (!h->slots_before[side])
	{
		free(slot);
		snprintf(err, errlen, "out of host memory for the block solver's slots");
		return GM_ENOMEM;
	}
	for (int32_t r = 0; r < n; r++)
	{
		h->slots_before[side][r] = ns;
		slot[r] = h->indptr_h[side][r + 1] - h->indptr_h[side][r] > GM_CHUNK ? ns++ : -1;
	}
	h->slots_before[side][n] = ns;
	e = gm_dev_malloc((void **) &h->slot[side], sizeof(int32_t) * (size_t) (n > 0 ? n : 1));
	if (e == cudaSuccess)
		e = cudaMemcpy(h->slot[side], slot, sizeof(int32_t) * (size_t) n, cudaMemcpyHostToDevice);
	free(slot);
	GM_CHECK(e);
	h->nslots[side] = ns;
	return GM_OK;
}

/* perm[e] = position in Rt of R's entry e (next: Rt's row starts, advanced) */
template <typename I>
static void
fill_perm(I *perm, const gm_csr *R, int64_t *next)
{
	/* Rt's rows list users in order, so the t-th visit of item i is Rt.indptr[i] + t */
	for (int32_t u = 0; u < R->n_rows; u++)
		for (int64_t e2 = R->indptr[u]; e2 < R->indptr[u + 1]; e2++)
			perm[e2] = (I) next[R->indices[e2]]++;
}

/*
 * position in R -> position in Rt, on the host, uploaded: the block solver's
 * (built at its first use), in int32 when every position fits.
 */
static int
build_perm(als_gpu *h, const gm_csr *R, const gm_csr *Rt, char *err, size_t errlen)
{
	size_t		isz = h->nnz > INT32_MAX ? sizeof(int64_t) : sizeof(int32_t);
	size_t		bytes = isz * (size_t) (h->nnz > 0 ? h->nnz : 1);
	void	   *perm = malloc(bytes);
	int64_t    *next = (int64_t *) malloc(sizeof(int64_t) * (size_t) (R->n_cols > 0 ? R->n_cols : 1));
	cudaError_t e;

	if (!perm || !next)
	{
		free(perm);
		free(next);
		snprintf(err, errlen, "out of host memory for the entry permutation");
		return GM_ENOMEM;
	}
	memcpy(next, Rt->indptr, sizeof(int64_t) * (size_t) R->n_cols);
	h->perm64 = isz == sizeof(int64_t);
	if (h->perm64)
		fill_perm((int64_t *) perm, R, next);
	else
		fill_perm((int32_t *) perm, R, next);
	free(next);
	e = gm_dev_malloc(&h->perm, bytes);
	if (e == cudaSuccess && h->nnz > 0)
		e = cudaMemcpy(h->perm, perm, isz * (size_t) h->nnz, cudaMemcpyHostToDevice);
	free(perm);
	GM_CHECK(e);
	return GM_OK;
}

/* The data side of create: stream, handles, uploads, chunk lists. */
static int
create_data(als_gpu *h, const gm_mf_data *d, char *err, size_t errlen)
{
	const gm_csr *A[2] = {d->R, d->Rt};
	size_t		nmax;
	int			rc;

	GM_CHECK(cudaSetDevice(h->dev));
	/* a blocking stream: events on the legacy default stream bracket it */
	GM_CHECK(cudaStreamCreate(&h->stream));
	h->have_stream = 1;
	GM_CHECK(cublasCreate(&h->blas));
	h->have_blas = 1;
	GM_CHECK(cublasSetStream(h->blas, h->stream));
	GM_CHECK(cublasSetMathMode(h->blas, CUBLAS_PEDANTIC_MATH));	/* FP32, no TF32 */
	GM_CHECK(gm_block_prepare());

	for (int s = 0; s < 2; s++)
	{
		/* the values as read: the kernels form the confidences (gm_confidence) */
		/* a transpose not formed of R, whole on this GPU or a share's rows: transposed here */
		if ((rc = s == 0 ? gm_dcsr_upload(&h->m[s], A[s], err, errlen) :
			 gm_dcsr_upload_of(&h->m[s], A[s], A[0], &h->m[0], err, errlen)) != GM_OK)
			return rc;
		if ((rc = gm_dchunks_build(&h->ch[s], A[s]->indptr, h->n[s], err, errlen)) != GM_OK)
			return rc;
		if ((rc = build_slots(h, s, err, errlen)) != GM_OK)
			return rc;
	}
	nmax = (size_t) (h->n[0] > h->n[1] ? h->n[0] : h->n[1]);
	GM_CHECK(gm_dev_malloc((void **) &h->counter, sizeof(int) * (nmax + 2)));
	GM_CHECK(gm_dev_malloc((void **) &h->acc, sizeof(double) * 4));
	GM_CHECK(cudaMemset(h->counter, 0, sizeof(int) * (nmax + 2)));
	h->queue = h->counter + nmax;
	return GM_OK;
}

/*
 * F (n rows of k factors, leading dimension ld) = gm_factors_init(F, n, k,
 * seed, side): gm_algo.h's gm_factor_start, the host's own definition (a
 * product and a rounding, no sum for the compiler to fuse), so that a
 * training drawn here starts where the host's would, bit for bit.
 */
__global__ void
factors_init(float *F, int ld, int32_t n, int k, uint64_t seed, int side)
{
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t) n * k;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		int64_t		r = i / k;
		int			f = (int) (i - r * k);

		F[r * ld + f] = gm_factor_start(gm_factor_row_base(seed, side, r), f);
	}
}

/*
 * The loss's denominator: the confidences 1 + alpha r summed in double, by
 * chunks of a fixed size (each in order, then the chunks' sums in order),
 * so that the sum is the same whatever the threads; it runs while the
 * device draws the factors.  In order on one thread it took 0.5 s at 500M.
 * threads: gpumf.threads resolved (> 0).
 */
static double
confidence_sum(const float *v, int64_t n, float alpha, int threads)
{
	const int64_t chunk = (int64_t) 1 << 20;
	int64_t		nchunks = (n + chunk - 1) / chunk;
	double	   *part,
				sum = 0.0;

	if (n <= 0)
		return 0.0;
	part = (double *) malloc(sizeof(double) * (size_t) nchunks);
	if (part == NULL)
	{
		/* no room for the chunks' sums: in order, on this thread */
		for (int64_t i = 0; i < n; i++)
			sum += (double) (1.0f + alpha * v[i]);
		return sum;
	}
#pragma omp parallel for schedule(static) num_threads(threads) if (nchunks > 1)
	for (int64_t c = 0; c < nchunks; c++)
	{
		int64_t		e = (c + 1) * chunk < n ? (c + 1) * chunk : n;
		double		s = 0.0;

		for (int64_t i = c * chunk; i < e; i++)
			s += (double) (1.0f + alpha * v[i]);
		part[c] = s;
	}
	for (int64_t c = 0; c < nchunks; c++)
		sum += part[c];
	free(part);
	return sum;
}

/*
 * The parameter side of create and reset: confidences for p->alpha,
 * factors from d (padded), G, the ridges, and the solver's work arrays,
 * poisoned with NaN (0xff..) so that reading what no pass wrote shows.
 */
static int
setup_params(als_gpu *h, const gm_mf_data *d, const gm_mf_params *p, char *err,
			 size_t errlen)
{
	const float *Fh[2] = {d->X, d->Y};
	size_t		nmax = (size_t) (h->n[0] > h->n[1] ? h->n[0] : h->n[1]),
				w;
	int			kp = gm_padded_k(p->factors),
				k = p->factors,
				bw = gm_gpu_block_width(p, kp);

	if (kp == 0)
	{
		snprintf(err, errlen, "the CUDA module supports 1 to %d factors, not %d",
				 GM_MAXK, p->factors);
		return GM_EINVAL;
	}
	if (bw == 0)
	{
		snprintf(err, errlen,
				 "the exact solver runs on the GPU up to %d factors, not %d: use the block solver",
				 GM_BLOCK_MAX, p->factors);
		return GM_ENOTSUP;
	}
	free_params(h);
	h->p = *p;
	h->k = k;
	h->kp = kp;
	h->block = bw > 0 ? bw : 0;
	h->nblocks = bw > 0 ? (k + bw - 1) / bw : 0;	/* blocks of padding alone are skipped */
	h->sweeps = p->solver == GM_SOLVER_BLOCK ? p->block_sweeps : 1;
	h->prepared = -1;
	h->cache_side = -1;
	h->since_exact = 0;

	for (int s = 0; s < 2; s++)
	{
		int32_t		n = h->n[s];

		GM_CHECK(gm_dev_malloc((void **) &h->F[s], sizeof(float) * (size_t) n * kp));
		GM_CHECK(cudaMemsetAsync(h->F[s], 0, sizeof(float) * (size_t) n * kp, h->stream));
		if (d->start_on_device)
		{
			/* gm_factors_init's values, drawn here (the host's X and Y stay untouched) */
			if (n > 0)
				factors_init<<<(unsigned) (((int64_t) n * k + 255) / 256 < 65536 ?
										   ((int64_t) n * k + 255) / 256 : 65536), 256, 0,
					h->stream>>>(h->F[s], kp, n, k, p->seed, s);
			GM_CHECK(cudaGetLastError());
		}
		else
			GM_CHECK(cudaMemcpy2DAsync(h->F[s], sizeof(float) * kp, Fh[s], sizeof(float) * k,
									   sizeof(float) * k, n, cudaMemcpyHostToDevice, h->stream));
		if (p->nu != 0.0f)
		{
			/* regularization (n_r + alpha0 n_other)^nu, as gm_als_row_reg */
			float	   *r = (float *) malloc(sizeof(float) * (size_t) (n > 0 ? n : 1));
			double		other = (double) p->alpha0 * h->n[1 - s];
			cudaError_t e;

			if (!r)
			{
				snprintf(err, errlen, "out of host memory for the ridges");
				return GM_ENOMEM;
			}
			for (int32_t i = 0; i < n; i++)
				r[i] = (float) (p->regularization *
								pow((double) (h->indptr_h[s][i + 1] - h->indptr_h[s][i]) + other,
									p->nu));
			e = gm_dev_malloc((void **) &h->reg[s], sizeof(float) * (size_t) (n > 0 ? n : 1));
			if (e == cudaSuccess)
				e = cudaMemcpy(h->reg[s], r, sizeof(float) * (size_t) n, cudaMemcpyHostToDevice);
			free(r);
			GM_CHECK(e);
		}
	}
	GM_CHECK(gm_dev_malloc((void **) &h->G, sizeof(float) * (size_t) kp * kp));
	h->wrows = gm_als_work_rows((int64_t) nmax, kp, h->block);
	{
		/* GM_ALS_WORK_ROWS (tests): fewer work rows, so that small problems run in many slices */
		const char *env = getenv("GM_ALS_WORK_ROWS");

		if (env && atoi(env) > 0 && atoi(env) < h->wrows)
			h->wrows = atoi(env);
	}
	w = (size_t) h->wrows;
	if (h->block == 0)
	{
		GM_CHECK(gm_dev_malloc((void **) &h->R, sizeof(float) * w * kp));
		GM_CHECK(gm_dev_malloc((void **) &h->P, sizeof(float) * w * kp));
		GM_CHECK(gm_dev_malloc((void **) &h->AP, sizeof(float) * w * kp));
		GM_CHECK(gm_dev_malloc((void **) &h->rs, sizeof(float) * w));
		GM_CHECK(cudaMemsetAsync(h->R, 0xff, sizeof(float) * w * kp, h->stream));
		GM_CHECK(cudaMemsetAsync(h->P, 0xff, sizeof(float) * w * kp, h->stream));
		GM_CHECK(cudaMemsetAsync(h->AP, 0xff, sizeof(float) * w * kp, h->stream));
		GM_CHECK(cudaMemsetAsync(h->rs, 0xff, sizeof(float) * w, h->stream));
	}
	else
	{
		size_t		b = (size_t) h->block,
					ns = 0;
		int			rc;

		/* scratch for the most long rows a slice of wrows rows can hold */
		for (int s = 0; s < 2; s++)
			for (int32_t r = 0; r < h->n[s]; r++)
			{
				int32_t		e = h->n[s] - r > h->wrows ? r + h->wrows : h->n[s];
				size_t		c = (size_t) (h->slots_before[s][e] - h->slots_before[s][r]);

				if (c > ns)
					ns = c;
				if (e == h->n[s])
					break;
			}
		h->nslot_max = (int32_t) ns;
		if (!h->multi && h->perm == NULL && (rc = build_perm(h, d->R, d->Rt, err, errlen)) != GM_OK)
			return rc;
		for (int s = 0; s < 2; s++)
		{
			GM_CHECK(gm_dev_malloc((void **) &h->S[s], sizeof(float) * (size_t) (h->nnzs[s] > 0 ? h->nnzs[s] : 1)));
			GM_CHECK(cudaMemsetAsync(h->S[s], 0xff, sizeof(float) * (size_t) (h->nnzs[s] > 0 ? h->nnzs[s] : 1),
									 h->stream));
		}
		GM_CHECK(gm_dev_malloc((void **) &h->H, sizeof(float) * w * b));
		GM_CHECK(gm_dev_malloc((void **) &h->D, sizeof(float) * w * b));
		GM_CHECK(gm_dev_malloc((void **) &h->scratch, sizeof(float) * (ns > 0 ? ns : 1) * (b * b + b)));
		GM_CHECK(cudaMemsetAsync(h->H, 0xff, sizeof(float) * w * b, h->stream));
		GM_CHECK(cudaMemsetAsync(h->D, 0xff, sizeof(float) * w * b, h->stream));
		GM_CHECK(cudaMemsetAsync(h->scratch, 0, sizeof(float) * (ns > 0 ? ns : 1) * (b * b + b),
								 h->stream));
	}

	{
		long		cores = sysconf(_SC_NPROCESSORS_ONLN);

		h->sum_c = confidence_sum(d->R->data, h->nnz, p->alpha,
								  p->threads > 0 ? p->threads : cores > 0 ? (int) cores : 1);
	}
	GM_CHECK(cudaStreamSynchronize(h->stream));
	return GM_OK;
}

/*
 * Take the problem onto device dev: upload it (see the file's comment).
 * own0 / own1: the rows of each side it solves (all, unless multi, when d
 * holds row views with those rows' entries only).
 */
static int
dev_create(als_gpu **out, const gm_mf_data *d, const gm_mf_params *p, int dev, int multi,
		   const int32_t *own0, const int32_t *own1, char *err, size_t errlen)
{
	als_gpu    *h;
	int			rc;

	*out = NULL;
	if (!d || !p || !d->R || !d->Rt || !d->X || !d->Y || !d->R->indptr || !d->Rt->indptr ||
		d->R->n_rows < 1 || d->R->n_cols < 1 || d->R->nnz < 0 || d->Rt->nnz < 0 ||
		d->Rt->n_rows != d->R->n_cols || (!multi && d->Rt->nnz != d->R->nnz) || p->cg_steps < 0 ||
		(d->R->nnz > 0 && (!d->R->indices || !d->R->data ||
						   (!d->Rt->of && (!d->Rt->indices || !d->Rt->data)))))
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS create");
		return GM_EINVAL;
	}
	if (gm_padded_k(p->factors) == 0)
	{
		snprintf(err, errlen, "the CUDA module supports 1 to %d factors, not %d",
				 GM_MAXK, p->factors);
		return GM_EINVAL;
	}
	if (gm_gpu_block_width(p, gm_padded_k(p->factors)) == 0)
	{
		snprintf(err, errlen,
				 "the exact solver runs on the GPU up to %d factors, not %d: use the block solver",
				 GM_BLOCK_MAX, p->factors);
		return GM_ENOTSUP;
	}
	h = (als_gpu *) calloc(1, sizeof(als_gpu));
	if (!h)
	{
		snprintf(err, errlen, "out of host memory");
		return GM_ENOMEM;
	}
	h->dev = dev;
	h->multi = multi;
	h->n[0] = d->R->n_rows;
	h->n[1] = d->R->n_cols;
	h->nnz = d->R->nnz;
	h->nnzs[0] = d->R->nnz;
	h->nnzs[1] = d->Rt->nnz;
	h->indptr_h[0] = d->R->indptr;
	h->indptr_h[1] = d->Rt->indptr;
	for (int s = 0; s < 2; s++)
	{
		h->own0[s] = own0[s];
		h->own1[s] = own1[s];
	}
	rc = create_data(h, d, err, errlen);
	if (rc == GM_OK)
		rc = setup_params(h, d, p, err, errlen);
	if (rc != GM_OK)
	{
		dev_destroy(h);
		return rc;
	}
	*out = h;
	return GM_OK;
}

/* Start over with parameters p on the uploaded data (gm_algo_ops.reset). */
static int
dev_reset(void *ph, const gm_mf_data *d, const gm_mf_params *p, char *err,
		  size_t errlen)
{
	als_gpu    *h = (als_gpu *) ph;

	if (!h || !d || !p || !d->R || !d->Rt || !d->X || !d->Y || d->R->n_rows != h->n[0] ||
		d->R->n_cols != h->n[1] || d->R->nnz != h->nnz)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS reset");
		return GM_EINVAL;
	}
	GM_CHECK(cudaSetDevice(h->dev));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	return setup_params(h, d, p, err, errlen);
}

/* CG: two sweeps an iteration; block: one per block, pass and side. */
static int
dev_n_sweeps(void *ph)
{
	als_gpu    *h = (als_gpu *) ph;

	return h->block ? 2 * h->nblocks * h->sweeps : 2;
}

/* G = alpha0 F^T F (+ reg on the first k diagonal entries), F = factors of a side */
static int
gram(als_gpu *h, const float *F, int32_t n, float scale, float reg, float *G,
	 char *err, size_t errlen)
{
	const float zero = 0.0f;
	int			kp = h->kp;

	/* column-major view: F is kp x n (ld kp); G = F F^T */
	GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_T, kp, kp, n, &scale,
						 F, kp, F, kp, &zero, G, kp));
	if (reg != 0.0f)
	{
		add_diag<<<(h->k + 255) / 256, 256, 0, h->stream>>>(G, h->k, kp, reg);
		GM_CHECK_LAUNCH();
	}
	return GM_OK;
}

/* The side and block of sweep s. */
static void
sweep_of(const als_gpu *h, int s, int *side, int *blk, int *first, int *last)
{
	int			per = h->block ? h->nblocks * h->sweeps : 1,
				j = s % per;

	*side = s / per;
	*blk = h->block ? j % h->nblocks : 0;
	*first = j == 0;
	*last = j == per - 1;
}

/*
 * The block solver's predictions s = x . y for side's entries: the other
 * side's (kept exact by its sweep), permuted, or computed afresh when there
 * are none or GM_REFRESH sides have passed.
 */
static int
prepare_predictions(als_gpu *h, int side, char *err, size_t errlen)
{
	if (!h->multi && h->cache_side == 1 - side && h->since_exact < GM_REFRESH)
	{
		if (h->perm64)
			permute_entries<<<1024, 256, 0, h->stream>>>(h->S[1 - side], h->S[side],
														 (const int64_t *) h->perm, h->nnz, side == 0);
		else
			permute_entries<<<1024, 256, 0, h->stream>>>(h->S[1 - side], h->S[side],
														 (const int32_t *) h->perm, h->nnz, side == 0);
		GM_CHECK_LAUNCH();
		h->since_exact++;
	}
	else if (h->cache_side != side)
	{
		GM_CHECK(launch_dots(h, side, false, h->S[side], NULL));
		h->since_exact = 0;
	}
	return GM_OK;
}

/*
 * Begin sweep s.  A side's first sweep builds G = alpha0 F^T F (+ reg I
 * when nu = 0) of the other side (and the block solver's predictions).
 * What a row costs, in multiply-adds: CG (len + k) k per pass, as on the
 * CPU; a block b (2 kp + b^2 / 3) + len b (b + 2).
 */
static int
dev_begin_sweep(void *ph, int s, gm_sweep *sw, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) ph;
	int			side,
				blk,
				first,
				last,
				rc;

	if (!h || s < 0 || s >= dev_n_sweeps(h) || !sw)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS begin_sweep");
		return GM_EINVAL;
	}
	GM_CHECK(cudaSetDevice(h->dev));
	sweep_of(h, s, &side, &blk, &first, &last);
	if (first)
	{
		rc = gram(h, h->F[1 - side], h->n[1 - side], h->p.alpha0,
				  h->p.nu == 0.0f ? h->p.regularization : 0.0f, h->G, err, errlen);
		if (rc == GM_OK && h->block)
			rc = prepare_predictions(h, side, err, errlen);
		if (rc != GM_OK)
			return rc;
	}
	else if (h->prepared != s - 1)
	{
		snprintf(err, errlen, "CUDA implicit ALS: sweep %d begun after %d", s, h->prepared);
		return GM_EINVAL;
	}
	h->prepared = s;
	sw->n_rows = h->n[side];
	sw->max_rows = h->wrows;
	sw->indptr = h->indptr_h[side];
	if (h->block)
	{
		double		b = h->block;

		sw->row_work = b * (2.0 * h->kp + b * b / 3.0);
		sw->nnz_work = b * (b + 2.0);
	}
	else
	{
		sw->row_work = (double) h->k * h->k * h->p.cg_steps;
		sw->nnz_work = (double) h->k * h->p.cg_steps;
	}
	return GM_OK;
}

/* The CG solve of rows [begin, end) of side. */
static int
run_cg(als_gpu *h, int side, int32_t begin, int32_t end, char *err, size_t errlen)
{
	const int	kp = h->kp;
	const float one = 1.0f,
				minus = -1.0f,
				zero = 0.0f;
	int32_t		n = end - begin;
	pass_args	a;

	if (n > h->wrows)
	{
		snprintf(err, errlen, "CUDA implicit ALS: a slice of %d rows, more than the %d its work arrays hold",
				 n, h->wrows);
		return GM_EINVAL;
	}
	a.indptr = h->m[side].indptr;
	a.indices = h->m[side].indices;
	a.data = h->m[side].data;
	a.chunks = h->ch[side].chunks + h->ch[side].ptr[begin];
	a.nchunks = h->ch[side].ptr[end] - h->ch[side].ptr[begin];
	a.Y = h->F[1 - side];
	a.X = h->F[side];
	a.R = h->R;
	a.P = h->P;
	a.AP = h->AP;
	a.rs = h->rs;
	a.row0 = begin;
	a.counter = h->counter;
	a.queue = gm_chunk_queue_enabled ? h->queue : NULL;
	a.reg = h->reg[side];
	a.alpha = h->p.alpha;
	a.alpha0 = h->p.alpha0;

	/* tf32: the dense products V G on tensor cores (TF32 inputs, FP32 accumulation) */
	if (gm_use_tf32(&h->p))
		GM_CHECK(cublasSetMathMode(h->blas, CUBLAS_TF32_TENSOR_OP_MATH));
	/* AP = -X G for the slice (column-major: AP^T = G^T X^T, G symmetric) */
	GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, n, kp, &minus,
						 h->G, kp, h->F[side] + (size_t) begin * kp, kp, &zero, h->AP, kp));
	GM_CHECK(launch_pass(kp, true, a, h->stream));
	for (int s = 0; s < h->p.cg_steps; s++)
	{
		GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, n, kp, &one,
							 h->G, kp, h->P, kp, &zero, h->AP, kp));
		GM_CHECK(launch_pass(kp, false, a, h->stream));
	}
	if (gm_use_tf32(&h->p))
		GM_CHECK(cublasSetMathMode(h->blas, CUBLAS_PEDANTIC_MATH));
	return GM_OK;
}

/* One block of rows [begin, end) of side (als_block.cuh). */
static int
run_block(als_gpu *h, int side, int blk, int32_t begin, int32_t end, char *err,
		  size_t errlen)
{
	const int	kp = h->kp,
				b = h->block,
				b0 = blk * b;
	const float one = 1.0f,
				zero = 0.0f;
	int32_t		n = end - begin;
	gm_block_args a;

	if (n > h->wrows)
	{
		snprintf(err, errlen, "CUDA implicit ALS: a slice of %d rows, more than the %d its work arrays hold",
				 n, h->wrows);
		return GM_EINVAL;
	}
	a.indptr = h->m[side].indptr;
	a.indices = h->m[side].indices;
	a.data = h->m[side].data;
	a.chunks = h->ch[side].chunks + h->ch[side].ptr[begin];
	a.nchunks = h->ch[side].ptr[end] - h->ch[side].ptr[begin];
	a.Y = h->F[1 - side];
	a.X = h->F[side];
	a.S = h->S[side];
	a.G = h->G;
	a.H = h->H;
	a.D = h->D;
	a.reg = h->reg[side];
	a.slot = h->slot[side];
	a.slot0 = h->slots_before[side][begin];
	a.scratch = h->scratch;
	a.counter = h->counter;
	a.queue = gm_chunk_queue_enabled ? h->queue : NULL;
	a.kp = kp;
	a.k = h->k;
	a.b0 = b0;
	a.row0 = begin;
	a.alpha = h->p.alpha;
	a.alpha0 = h->p.alpha0;

	/* H = X G(:, B) for the slice (column-major: H^T (b x n) = G(B, :) X^T) */
	GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, b, n, kp, &one,
						 h->G + b0, kp, h->F[side] + (size_t) begin * kp, kp, &zero, h->H, b));
	GM_CHECK(gm_block_pass(b, gm_use_tf32(&h->p), a, h->stream));
	GM_CHECK(gm_block_apply(b, a, h->stream));
	return GM_OK;
}

/* Launch the solve of rows [begin, end) of sweep s (after begin_sweep).  Asynchronous. */
static int
dev_run(void *ph, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) ph;
	int			side,
				blk,
				first,
				last;

	if (!h || s < 0 || s >= dev_n_sweeps(h))
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS run");
		return GM_EINVAL;
	}
	sweep_of(h, s, &side, &blk, &first, &last);
	if (begin < 0 || end > h->n[side] || begin > end)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS run");
		return GM_EINVAL;
	}
	if (h->prepared != s)
	{
		snprintf(err, errlen, "CUDA implicit ALS run: sweep %d was not begun", s);
		return GM_EINVAL;
	}
	if (end == begin || (!h->block && h->p.cg_steps == 0))
		return GM_OK;
	GM_CHECK(cudaSetDevice(h->dev));
	return h->block ? run_block(h, side, blk, begin, end, err, errlen) :
		run_cg(h, side, begin, end, err, errlen);
}

/* A side's last block leaves its predictions current. */
static int
dev_end_sweep(void *ph, int s, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) ph;
	int			side,
				blk,
				first,
				last;

	(void) err;
	(void) errlen;
	sweep_of(h, s, &side, &blk, &first, &last);
	if (h->block && last)
		h->cache_side = side;
	return GM_OK;
}

/* Wait for queued work; reports asynchronous kernel errors. */
static int
dev_sync(void *ph, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) ph;

	if (!h)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS sync");
		return GM_EINVAL;
	}
	GM_CHECK(cudaSetDevice(h->dev));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	GM_CHECK(cudaGetLastError());
	return GM_OK;
}

/*
 * Queue the implicit-ALS loss's sums over what this device owns, in
 * float64, into h->acc: [0] x'Gx and [1] the (weighted) |x|^2 of its users,
 * [2] the sparse part of its users' entries, [3] the (weighted) |y|^2 of its
 * items (dev_partial_sums reads them).
 */
static int
dev_partial(als_gpu *h, char *err, size_t errlen)
{
	const float one = 1.0f,
				zero = 0.0f;
	const int	kp = h->kp;
	const int32_t u0 = h->own0[0],
				u1 = h->own1[0],
				i0 = h->own0[1],
				i1 = h->own1[1];
	int			rc;
	float	   *tmp;

	GM_CHECK(cudaSetDevice(h->dev));
	/* G is rebuilt by the next begin_sweep */
	h->prepared = -1;
	rc = gram(h, h->F[1], h->n[1], 1.0f, 0.0f, h->G, err, errlen);
	if (rc != GM_OK)
		return rc;
	/* X (Y^T Y) into a work array of wrows x kp, a slice of users at a time */
	if (h->block && h->work == NULL)
		GM_CHECK(gm_dev_malloc((void **) &h->work, sizeof(float) * (size_t) h->wrows * kp));
	tmp = h->block ? h->work : h->AP;
	GM_CHECK(cudaMemsetAsync(h->acc, 0, sizeof(double) * 4, h->stream));
	for (int32_t b = u0; b < u1; b += h->wrows)
	{
		int32_t		n = u1 - b < h->wrows ? u1 - b : h->wrows;

		GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, n, kp, &one,
							 h->G, kp, h->F[0] + (size_t) b * kp, kp, &zero, tmp, kp));
		dense_sums<<<1024, 256, 0, h->stream>>>(tmp, h->F[0] + (size_t) b * kp, (size_t) n * kp,
												h->reg[0] ? h->reg[0] + b : NULL, kp, h->acc);
		GM_CHECK_LAUNCH();
	}
	if (i1 > i0)
	{
		dense_sums<<<256, 256, 0, h->stream>>>(NULL, h->F[1] + (size_t) i0 * kp, (size_t) (i1 - i0) * kp,
											   h->reg[1] ? h->reg[1] + i0 : NULL, kp, h->acc + 2);
		GM_CHECK_LAUNCH();
	}
	GM_CHECK(launch_dots(h, 0, true, NULL, h->acc + 2));	/* acc[2] is unused by dense_sums */
	return GM_OK;
}

/* The sums dev_partial queued, once they are done. */
static int
dev_partial_sums(als_gpu *h, double *acc, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(h->dev));
	GM_CHECK(cudaMemcpyAsync(acc, h->acc, sizeof(double) * 4, cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	return GM_OK;
}

/* Copy the factors of the rows this device owns back into d->X and d->Y (a NULL array is skipped). */
static int
dev_download(als_gpu *h, gm_mf_data *d, char *err, size_t errlen)
{
	float	   *out[2];

	out[0] = d->X;
	out[1] = d->Y;
	GM_CHECK(cudaSetDevice(h->dev));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	for (int s = 0; s < 2; s++)
		if (out[s] && h->own1[s] > h->own0[s] && h->kp == h->k)
			GM_CHECK(gm_copy_staged(out[s] + (size_t) h->own0[s] * h->k, h->F[s] + (size_t) h->own0[s] * h->kp,
									sizeof(float) * h->k * (size_t) (h->own1[s] - h->own0[s]), 0));
		else if (out[s] && h->own1[s] > h->own0[s])
			GM_CHECK(cudaMemcpy2D(out[s] + (size_t) h->own0[s] * h->k, sizeof(float) * h->k,
								  h->F[s] + (size_t) h->own0[s] * h->kp, sizeof(float) * h->kp,
								  sizeof(float) * h->k, h->own1[s] - h->own0[s],
								  cudaMemcpyDeviceToHost));
	return GM_OK;
}

/* ------------------------------------------------------ the devices */

/*
 * The handle the core drives: one device, or several (p->gpus), each
 * solving a share of each side's rows.  With several, the rows of a side
 * are cut where the entries are shared evenly; a device holds the full
 * factors of both sides and only its rows' entries (a row view of R and of
 * Rt: every row pointer, the owned rows' indices and values), so the
 * matrices are split and the factors copied.  A sweep's slice runs on
 * every device over the owned part of it, at once (a stream each); after
 * a side's last sweep each device sends the rows it solved to the others
 * (peer copies, over NVLink where the devices reach each other), which is
 * the all-gather of the factors; every device then builds the same Gram
 * matrix from the same factors.  The loss adds the devices' sums.  The
 * arithmetic of a row is the one-device arithmetic, so the CG solver's
 * factors are the same bit for bit; the block solver recomputes its
 * per-entry predictions from the factors at each side (a device holds no
 * permutation between the two orders of entries it does not hold).
 * The sending overlaps the sweep: after each slice of a side's last sweep
 * a device's copy stream sends the slice's rows (gm_share_push), and at
 * the side's end every device waits for every copy (gm_share_join), with
 * no host wait; GM_SHARE_PUSH=0 sends them all after the side instead.
 */
typedef struct als_top
{
	int			ndev;
	als_gpu    *g[GM_MAX_GPUS];
	int32_t		n[2];
	int64_t		nnz;
	double		sum_c;			/* the devices' confidence sums, added */
	const int64_t *indptr_h[2]; /* the caller's row pointers (slicing) */

	/*
	 * Several devices: the shares' row views, and the "virtual" rows the
	 * core slices (row r of a side being row own0 + r of every device at
	 * once, so that every slice keeps every device busy)
	 */
	gm_shares	sh;
	gm_share_links links;		/* the copy streams (several devices, pushing) */
	int			push;
	const gm_mf_params *p;		/* create's (while it makes the shares) */

	/*
	 * The early download (als_final_iteration): in the last iteration,
	 * once the users' side is solved, a thread copies it to the host while
	 * the devices solve the items and the loss; the download then copies
	 * the items alone.  armed: the iteration under way is the last; ev: a
	 * device's users solved; bufs: the pinned buffers, allocated by the
	 * backend's thread.
	 */
	struct
	{
		int			armed;
		int			started;
		float	   *out;
		float	   *out_y;		/* prefaulted after the users' copy */
		int64_t		ny;
		char	  **bufs;
		cudaEvent_t ev[GM_MAX_GPUS];
		cudaError_t e;
		pthread_t	tid;
	}			early;
} als_top;

static void early_join(als_top *t);
static void early_start(als_top *t);

static void
als_destroy(void *ph)
{
	als_top    *t = (als_top *) ph;

	if (t == NULL)
		return;
	early_join(t);
	gm_share_links_free(&t->links);
	for (int i = 0; i < t->ndev; i++)
		dev_destroy(t->g[i]);
	gm_shares_free(&t->sh);
	(void) cudaSetDevice(0);
	free(t);
}

/* The devices' factors of side, as the exchanges see them. */
static void
shares_of(const als_top *t, int side, gm_share *sh)
{
	for (int i = 0; i < t->ndev; i++)
	{
		sh[i].dev = t->g[i]->dev;
		sh[i].stream = t->g[i]->stream;
		sh[i].F = t->g[i]->F[side];
		sh[i].own0 = t->g[i]->own0[side];
		sh[i].own1 = t->g[i]->own1[side];
	}
}

/*
 * The end of a side: every device's rows of side sent to the others, or
 * (pushed after each slice) waited for.
 */
static int
exchange(als_top *t, int side, char *err, size_t errlen)
{
	gm_share	sh[GM_MAX_GPUS];

	shares_of(t, side, sh);
	if (t->push)
		return gm_share_join(&t->links, sh, t->ndev, err, errlen);
	return gm_share_allgather(sh, t->ndev, (size_t) t->g[0]->kp, err, errlen);
}

/* Share i's device state (gm_shares_make_all); the devices' confidence sums added. */
static int
make_share(void *top, int i, const gm_mf_data *dv, int dev, const int32_t *own0,
		   const int32_t *own1, char *err, size_t errlen)
{
	als_top    *t = (als_top *) top;
	int			rc = dev_create(&t->g[i], dv, t->p, dev, t->sh.ndev > 1, own0, own1, err, errlen);

	if (rc == GM_OK)
		t->sum_c = i == 0 ? t->g[i]->sum_c : t->sum_c + t->g[i]->sum_c;
	return rc;
}

static int
als_create(void **out, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_top    *t;
	int			rc;

	(void) cb;					/* the core polls between slices */
	*out = NULL;
	if (!d || !p || !d->R || !d->Rt || !d->R->indptr || !d->Rt->indptr)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS create");
		return GM_EINVAL;
	}
	t = (als_top *) calloc(1, sizeof(als_top));
	if (!t)
	{
		snprintf(err, errlen, "out of host memory");
		return GM_ENOMEM;
	}
	t->n[0] = d->R->n_rows;
	t->n[1] = d->R->n_cols;
	t->nnz = d->R->nnz;
	t->indptr_h[0] = d->R->indptr;
	t->indptr_h[1] = d->Rt->indptr;
	t->p = p;
	rc = gm_shares_make_all(&t->sh, d, p->gpus > 1 ? p->gpus : 1, gm_gpu_share_row_weight(p),
							make_share, t, &t->ndev, err, errlen);
	if (rc == GM_OK)
		rc = gm_share_links_open(&t->links, &t->sh, &t->push, err, errlen);
	if (rc != GM_OK)
	{
		als_destroy(t);
		return rc;
	}
	gm_shares_device_name(&t->sh, device, devlen);
	*out = t;
	return GM_OK;
}

static int
als_reset(void *ph, const gm_mf_data *d, const gm_mf_params *p, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;

	if (!t || !d || !p || !d->R || !d->Rt || (p->gpus > 1 ? p->gpus : 1) != t->ndev)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS reset");
		return GM_EINVAL;
	}
	early_join(t);				/* an earlier training stopped in its last iteration */
	t->sum_c = 0;
	for (int i = 0; i < t->links.n; i++)
	{
		/* an earlier training stopped mid-side: its pushes end first */
		GM_CHECK(cudaSetDevice(t->links.dev[i]));
		GM_CHECK(cudaStreamSynchronize(t->links.copy[i]));
	}
	for (int i = 0; i < t->ndev; i++)
	{
		gm_mf_data	dv = *d;
		gm_csr		v[2];
		int			rc;

		if (t->ndev > 1)
		{
			/* the same views as create's, on d's arrays */
			als_gpu    *h = t->g[i];

			v[0] = *d->R;
			v[0].indptr = t->sh.vptr[i][0];
			v[0].indices = d->R->indices ? d->R->indices + d->R->indptr[h->own0[0]] : NULL;
			v[0].data = d->R->data ? d->R->data + d->R->indptr[h->own0[0]] : NULL;
			v[0].nnz = h->nnzs[0];
			v[1] = *d->Rt;
			v[1].indptr = t->sh.vptr[i][1];
			v[1].indices = d->Rt->indices ? d->Rt->indices + d->Rt->indptr[h->own0[1]] : NULL;
			v[1].data = d->Rt->data ? d->Rt->data + d->Rt->indptr[h->own0[1]] : NULL;
			v[1].nnz = h->nnzs[1];
			v[1].of_r0 = h->own0[1];
			v[1].of_r1 = h->own1[1];
			dv.R = &v[0];
			dv.Rt = &v[1];
		}
		if ((rc = dev_reset(t->g[i], &dv, p, err, errlen)) != GM_OK)
			return rc;
		t->sum_c += t->g[i]->sum_c;
	}
	return GM_OK;
}

static int
als_n_sweeps(void *ph)
{
	return dev_n_sweeps(((als_top *) ph)->g[0]);
}

/* The side of sweep s (last: whether it is the side's last sweep). */
static int
sweep_side(const als_gpu *h, int s, int *last)
{
	int			side,
				blk,
				first,
				l;

	sweep_of(h, s, &side, &blk, &first, &l);
	if (last)
		*last = l;
	return side;
}

static int
als_begin_sweep(void *ph, int s, gm_sweep *sw, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			side,
				rc;

	if (!t || !sw)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS begin_sweep");
		return GM_EINVAL;
	}
	for (int i = 0; i < t->ndev; i++)
	{
		gm_sweep	one;

		memset(&one, 0, sizeof(one));
		if ((rc = dev_begin_sweep(t->g[i], s, i == 0 ? sw : &one, err, errlen)) != GM_OK)
			return rc;
		if (i > 0 && one.max_rows < sw->max_rows)
			sw->max_rows = one.max_rows;
	}
	side = sweep_side(t->g[0], s, NULL);
	if (t->ndev > 1)
	{
		/*
		 * the virtual rows: a slice runs on every device at once, and is
		 * sized as one device's slice (a virtual row's entries are every
		 * device's): smaller slices would underfill each GPU
		 */
		sw->n_rows = t->sh.vn[side];
		sw->indptr = t->sh.vrow[side];
		sw->nnz_work /= t->ndev;
	}
	return GM_OK;
}

static int
als_run(void *ph, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	gm_share	sh[GM_MAX_GPUS];
	int			side,
				last,
				rc;

	if (!t || s < 0 || s >= dev_n_sweeps(t->g[0]))
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS run");
		return GM_EINVAL;
	}
	if (t->ndev == 1)
		return dev_run(t->g[0], s, begin, end, err, errlen);
	side = sweep_side(t->g[0], s, NULL);
	if (begin < 0 || end > t->sh.vn[side] || begin > end)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS run");
		return GM_EINVAL;
	}
	/* virtual rows begin .. end: the same rows of every device's share */
	sweep_side(t->g[0], s, &last);
	if (t->push && last)
		shares_of(t, side, sh);
	for (int i = 0; i < t->ndev; i++)
	{
		int32_t		b,
					e;

		gm_shares_rows(&t->sh, side, i, begin, end, &b, &e);
		if (b < e && (rc = dev_run(t->g[i], s, b, e, err, errlen)) != GM_OK)
			return rc;
		/* the side's last sweep: these rows are final, on their way to the others */
		if (b < e && t->push && last &&
			(rc = gm_share_push(&t->links, sh, t->ndev, i, b, e, (size_t) t->g[0]->kp, err, errlen)) != GM_OK)
			return rc;
	}
	return GM_OK;
}

static int
als_end_sweep(void *ph, int s, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			side,
				last,
				rc;

	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_end_sweep(t->g[i], s, err, errlen)) != GM_OK)
			return rc;
	side = sweep_side(t->g[0], s, &last);
	if (t->ndev > 1 && last && (rc = exchange(t, side, err, errlen)) != GM_OK)
		return rc;
	if (side == 0 && last && t->early.armed && !t->early.started)
		early_start(t);
	return GM_OK;
}

static int
als_sync(void *ph, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			rc;

	if (!t)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS sync");
		return GM_EINVAL;
	}
	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_sync(t->g[i], err, errlen)) != GM_OK)
			return rc;
	return GM_OK;
}

/* The implicit-ALS loss (the core's definition), in float64, the devices' sums added; no RMSE. */
static int
als_evaluate(void *ph, gm_mf_metrics *m, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	double		acc[4] = {0, 0, 0, 0},
				ridge;
	const gm_mf_params *p;

	if (!t || !m)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS evaluate");
		return GM_EINVAL;
	}
	/* every device's sums queued first, so that the devices compute them at once */
	for (int i = 0; i < t->ndev; i++)
	{
		int			rc = dev_partial(t->g[i], err, errlen);

		if (rc != GM_OK)
			return rc;
	}
	for (int i = 0; i < t->ndev; i++)
	{
		double		a[4];
		int			rc = dev_partial_sums(t->g[i], a, err, errlen);

		if (rc != GM_OK)
			return rc;
		for (int j = 0; j < 4; j++)
			acc[j] += a[j];
	}
	p = &t->g[0]->p;
	/* acc: [0] x'Gx  [1] (weighted) |X|^2  [2] sparse  [3] (weighted) |Y|^2 */
	ridge = p->nu == 0.0f ? p->regularization * (acc[1] + acc[3]) : acc[1] + acc[3];
	m->loss = (p->alpha0 * acc[0] + acc[2] + ridge) /
		(t->sum_c + p->alpha0 * ((double) t->n[0] * t->n[1] - (double) t->nnz));
	m->rmse = NAN;
	return GM_OK;
}

static int
als_download(void *ph, gm_mf_data *d, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			rc;

	if (!t || !d)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS download");
		return GM_EINVAL;
	}
	if (t->early.started)
	{
		gm_mf_data	rest = *d;
		cudaError_t e;

		early_join(t);
		e = t->early.e;
		if (e != cudaSuccess)
		{
			snprintf(err, errlen, "CUDA error copying the users' factors back: %s", cudaGetErrorString(e));
			return GM_EDEVICE;
		}
		rest.X = NULL;			/* copied */
		for (int i = 0; i < t->ndev; i++)
			if ((rc = dev_download(t->g[i], &rest, err, errlen)) != GM_OK)
				return rc;
		return GM_OK;
	}
	early_join(t);
	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_download(t->g[i], d, err, errlen)) != GM_OK)
			return rc;
	return GM_OK;
}

/* Early downloads that copied every device's users (the GPU checks read it) */
static std::atomic<long long> early_done(0);

extern "C" long long
gm_cuda_early_downloads(void)
{
	return early_done.load();
}

/* The early download's thread: each device's users, once solved. */
static void *
early_main(void *arg)
{
	als_top    *t = (als_top *) arg;
	cudaError_t e = cudaSuccess;

	for (int i = 0; i < t->ndev && e == cudaSuccess; i++)
	{
		als_gpu    *h = t->g[i];

		if ((e = cudaSetDevice(h->dev)) == cudaSuccess &&
			(e = cudaEventSynchronize(t->early.ev[i])) == cudaSuccess &&
			h->own1[0] > h->own0[0])
			e = gm_copy_staged_in(t->early.out + (size_t) h->own0[0] * h->k,
								  h->F[0] + (size_t) h->own0[0] * h->kp,
								  sizeof(float) * h->k * (size_t) (h->own1[0] - h->own0[0]), 0,
								  t->early.bufs);
	}
	/*
	 * the items' pages touched (zeroed) for the download: the first write
	 * to a fresh page faults, which the download's copy would take alone
	 */
	if (e == cudaSuccess)
	{
		const int64_t step = (int64_t) 1 << 20; /* floats: 4 MB */
		float	   *y = t->early.out_y;
		int64_t		ny = t->early.ny;

#pragma omp parallel for schedule(dynamic, 1)
		for (int64_t b = 0; b < ny; b += step)
			memset(y + b, 0, sizeof(float) * (size_t) (ny - b < step ? ny - b : step));
	}
	t->early.e = e;
	if (e == cudaSuccess)
		early_done++;
	return NULL;
}

/*
 * After the users' last sweep of the last iteration (als_end_sweep): mark
 * each device's stream and start the copying thread (every signal blocked
 * in it: the server's handlers run on its own thread).  Where anything
 * fails, nothing starts and the download copies the users as usual.
 */
static void
early_start(als_top *t)
{
	sigset_t	all,
				old;
	int			ok = 1;

	for (int i = 0; i < t->ndev && ok; i++)
		ok = cudaSetDevice(t->g[i]->dev) == cudaSuccess &&
			cudaEventCreateWithFlags(&t->early.ev[i], cudaEventDisableTiming) == cudaSuccess &&
			cudaEventRecord(t->early.ev[i], t->g[i]->stream) == cudaSuccess;
	if (ok)
	{
		t->early.e = cudaSuccess;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		t->early.started = pthread_create(&t->early.tid, NULL, early_main, t) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (!t->early.started)
	{
		(void) cudaGetLastError();
		early_join(t);
	}
}

/* Wait for the copying thread, free what the early download holds. */
static void
early_join(als_top *t)
{
	if (t->early.started)
		pthread_join(t->early.tid, NULL);
	t->early.started = 0;
	t->early.armed = 0;
	for (int i = 0; i < GM_MAX_GPUS; i++)
		if (t->early.ev[i])
		{
			cudaEventDestroy(t->early.ev[i]);
			t->early.ev[i] = NULL;
		}
	gm_stage_buffers_free(t->early.bufs);
	t->early.bufs = NULL;
}

/*
 * The coming iteration is the training's last, and nothing reads d->X
 * before the download (gm_algo_ops): arm the early download where every
 * device's users are copied in one piece (no padding of the factors).
 */
static int
als_final_iteration(void *ph, gm_mf_data *d)
{
	als_top    *t = (als_top *) ph;

	if (t == NULL || d == NULL || d->X == NULL || d->Y == NULL || t->early.started ||
		getenv("GM_EARLY_DOWNLOAD_OFF") != NULL)
		return 0;
	for (int i = 0; i < t->ndev; i++)
		if (t->g[i]->kp != t->g[i]->k)
			return 0;
	early_join(t);
	t->early.bufs = gm_stage_buffers_alloc();
	if (t->early.bufs == NULL)
		return 0;
	t->early.out = d->X;
	t->early.out_y = d->Y;
	t->early.ny = (int64_t) t->n[1] * t->g[0]->k;
	t->early.armed = 1;
	return 1;
}

extern const gm_algo_ops gm_cuda_als_implicit_ops = {
	"cuda",
	als_create,
	als_n_sweeps,
	als_begin_sweep,
	als_run,
	als_end_sweep,
	als_sync,
	als_evaluate,
	als_download,
	als_destroy,
	als_reset,
	als_final_iteration,
};
