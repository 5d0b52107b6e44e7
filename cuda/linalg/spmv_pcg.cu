/*
 * spmv_pcg.cu: sparse matrix-vector products and the Jacobi-preconditioned
 * conjugate gradient on the GPU (the sparse half of gm_linalg_ops).
 *
 * SpMV (gpumf's own, "row blocks"): the rows are cut, in order, into blocks
 * of at most BLOCK_NNZ nonzeros and MAX_ROWS rows; a row longer than
 * BLOCK_NNZ is cut into chunks of its own.  One thread block takes one row
 * block at a time (a persistent grid):
 *
 *   1. load: the block's nonzeros as 16-byte vectors (4 column indices, 4
 *      values a thread, two groups in flight), gather x[col] through the
 *      read-only path, and store the products in shared memory, aligned so
 *      the stores are vectors too;
 *   2. reduce: each row's products summed by L lanes (1 to 32, chosen per
 *      block from its rows' lengths by a small cost model: passes over the
 *      rows times the longest row's steps), or by the whole block when the
 *      block is one row; chunks of a long row write partial sums and the
 *      last chunk to finish adds them in order (deterministic).
 *
 * so every load of the matrix is coalesced and vectorised whatever the row
 * lengths, and no row-length distribution leaves warps idle for long.  The
 * same kernel, in CG mode, also forms p.q, r.q and q.q for the iteration.
 * cuSPARSE's cusparseSpMV sits behind the same calls (gm_spmv_impl).
 *
 * SpMV (gpumf's own, "diagonal layout"): a banded matrix (find_diagonals:
 * at most DIA_MAX distinct offsets j - i, and no more bytes than the CSR)
 * is stored by diagonals, ndiag x n values with zeros where an entry is
 * missing: no column indices or row pointers to read, and the x of a
 * diagonal's consecutive rows are consecutive (spmv_dia).  GM_SPMV_OWN takes
 * it where it exists; GM_SPMV_OWN_CSR keeps the row blocks (comparisons).
 *
 * CG: the scaled system Â ŷ = b̂ (Â = S A S, S = D^-1/2 for Jacobi), two
 * kernels per iteration, no host round trip (pcg_impl.h has the algebra):
 *
 *   K1  q = Â p and the dots; the last block computes alpha, beta on the device
 *   K2  y += alpha p; r -= alpha q; p = r + beta p; r.r (and every m-th
 *       iteration |S^-1 r|^2, setting a "done" flag below the tolerance)
 *
 * In the diagonal layout the iteration is one fused kernel instead
 * (cg_fused_dia): K2 of iteration k and K1 of k + 1 in one pass, the
 * neighbours' new p formed on the fly, r, p, q double-buffered, 8 vector
 * words a row instead of 10; with Jacobi, Â's diagonal (all ones) is not
 * stored.  A first product (fused_first) follows each (re)start.
 *
 * A batch of m iterations is one CUDA graph; two batches are in flight while
 * the host reads the status of the older one (pinned memory), so the host
 * never waits on an iteration.  Once done, later kernels return at once.
 * The host then checks the true residual b - A x in float64 (float64 x, the
 * original values) and restarts from it if it is not below the tolerance.
 *
 * Every CUDA and cuSPARSE call goes through GM_CHECK (common.cuh).
 */
#include "linalg_cuda.h"

#include <cusparse.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

namespace
{

constexpr int TPB = 256;			/* threads per block, every kernel */
constexpr int BLOCK_NNZ = 2048;		/* nonzeros per row block */
constexpr int MAX_ROWS = 2048;		/* rows per row block */
constexpr int LANES_BLOCK = 8;		/* RowBlock.lanes: the whole block reduces one row */
constexpr int PAD = 8;				/* padding of the nonzero arrays (vector loads) */
constexpr int DIA_MAX = 32;			/* most diagonals the diagonal layout takes */
constexpr int DIA_GROUP = 8;		/* loads of values a thread has in flight together */
/*
 * rows per thread of the diagonal layout's SpMV, float32 and float64: on an
 * H100, Poisson 2048^2, float32 SpMV 0.0715 / 0.0505 / 0.0486 ms with 1 / 2 /
 * 4 rows and Jacobi-PCG 0.101 / 0.100 / 0.084 ms an iteration; float64 SpMV
 * 0.0869 / 0.0874 / 0.0888 ms and PCG 0.214 / 0.206 / 0.201 ms
 */
constexpr int DIA_ROWS_SINGLE = 4;
constexpr int DIA_ROWS_DOUBLE = 2;

/*
 * rows per thread of the fused CG iteration (cg_fused_dia), both
 * precisions: Poisson 2048^2 on an H100, float32 0.098 / 0.088 / 0.099 ms an
 * iteration with 1 / 2 / 4 rows, float64 0.158 / 0.151 / 0.167 ms (unfused,
 * spmv_dia + cg_update: 0.098 and 0.208 ms)
 */
constexpr int FUSED_ROWS = 2;
constexpr int DEFAULT_CHECK_EVERY = 8;
constexpr int STALL_LIMIT = 3;
constexpr unsigned FULL = 0xffffffffu;

/* nrows > 0: rows [row, row + nrows), lanes = log2 L or LANES_BLOCK;
 * nrows == 0: chunk `lanes` of the long row `row`, longid its LongInfo */
struct RowBlock
{
	int			row;
	int			nrows;
	int			lanes;
	int			longid;
};

struct LongInfo
{
	int			nchunks;
	int			base;			/* its chunks' partial sums: longpart[base ..] */
};

/* The CG scalars, on the device; the host reads a copy. */
struct CgState
{
	double		rr;				/* r.r (fresh) */
	double		alpha,
				beta;
	double		rru;			/* |S^-1 r|^2 at the last check */
	double		target2;		/* (tolerance |b|)^2 */
	double		pq;				/* last p.Âp */
	double		tmp;			/* a norm for the host */
	int			done;			/* later iteration kernels return at once */
	int			reason;			/* 1 recurrence below the tolerance, 2 iterations, 3 breakdown */
	int			iter;
	int			max_iter;
	unsigned	ticket;			/* last-block counter, reset by the last block */
	unsigned	pad;
};

enum
{
	REASON_CONVERGED = 1, REASON_ITERATIONS = 2, REASON_BREAKDOWN = 3
};

/* ------------------------------------------------------------ device helpers */

__device__ __forceinline__ double
warp_sum(double v)
{
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_down_sync(FULL, v, off);
	return v;
}

__device__ __forceinline__ float
warp_sum(float v)
{
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_down_sync(FULL, v, off);
	return v;
}

/* sum over groups of L lanes (L a power of two <= 32); lane 0 of each has it */
template <typename T>
__device__ __forceinline__ T
group_sum(T v, int L)
{
	for (int off = L >> 1; off > 0; off >>= 1)
		v += __shfl_down_sync(FULL, v, off, L);
	return v;
}

/* block-wide sum (red: TPB/32 doubles of shared memory); thread 0 has it */
template <typename T>
__device__ __forceinline__ T
block_sum(T v, double *red)
{
	v = warp_sum(v);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = (double) v;
	__syncthreads();
	if (threadIdx.x < 32)
	{
		T			w = threadIdx.x < TPB / 32 ? (T) red[threadIdx.x] : (T) 0;

		v = warp_sum(w);
	}
	__syncthreads();
	return v;
}

/*
 * Grid-wide sums of NV doubles, deterministic: each block writes its sums,
 * the last block to arrive (a ticket) adds them up in a fixed order.
 * Returns true in every thread of the last block; out[] is valid in its
 * thread 0.  red: NV * TPB/32 doubles of shared memory.
 */
template <int NV>
__device__ bool
grid_sum(double (&v)[NV], double *partials, unsigned *ticket, double (&out)[NV],
		 double *red, bool *am_last)
{
	const int	warp = threadIdx.x >> 5,
				lane = threadIdx.x & 31;

#pragma unroll
	for (int k = 0; k < NV; k++)
	{
		double		s = warp_sum(v[k]);

		if (lane == 0)
			red[k * (TPB / 32) + warp] = s;
	}
	__syncthreads();
	if (threadIdx.x < 32)
	{
#pragma unroll
		for (int k = 0; k < NV; k++)
		{
			double		s = lane < TPB / 32 ? red[k * (TPB / 32) + lane] : 0.0;

			s = warp_sum(s);
			if (lane == 0)
				partials[(size_t) k * gridDim.x + blockIdx.x] = s;
		}
	}
	if (threadIdx.x == 0)
	{
		__threadfence();
		*am_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
	}
	__syncthreads();
	if (!*am_last)
		return false;
#pragma unroll
	for (int k = 0; k < NV; k++)
	{
		double		s = 0.0;

		for (int b = threadIdx.x; b < (int) gridDim.x; b += TPB)
			s += __ldcg(&partials[(size_t) k * gridDim.x + b]);
		s = warp_sum(s);
		if (lane == 0)
			red[k * (TPB / 32) + warp] = s;
	}
	__syncthreads();
	if (threadIdx.x < 32)
	{
#pragma unroll
		for (int k = 0; k < NV; k++)
		{
			double		s = lane < TPB / 32 ? red[k * (TPB / 32) + lane] : 0.0;

			out[k] = warp_sum(s);
		}
	}
	if (threadIdx.x == 0)
		*ticket = 0;
	return true;
}

/* four consecutive values (16-byte aligned for float, 32 for double) */
__device__ __forceinline__ void
load4(const float *p, float (&v)[4])
{
	float4		a = __ldg(reinterpret_cast<const float4 *>(p));

	v[0] = a.x;
	v[1] = a.y;
	v[2] = a.z;
	v[3] = a.w;
}

__device__ __forceinline__ void
load4(const double *p, double (&v)[4])
{
	double2		a = __ldg(reinterpret_cast<const double2 *>(p)),
				b = __ldg(reinterpret_cast<const double2 *>(p) + 1);

	v[0] = a.x;
	v[1] = a.y;
	v[2] = b.x;
	v[3] = b.y;
}

__device__ __forceinline__ void
store4(float *p, const float (&v)[4])
{
	*reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void
store4(double *p, const double (&v)[4])
{
	reinterpret_cast<double2 *>(p)[0] = make_double2(v[0], v[1]);
	reinterpret_cast<double2 *>(p)[1] = make_double2(v[2], v[3]);
}

/*
 * prod[e - a0] = vals[e] * x[indices[e]] for e in [a0, e1 rounded up to 4),
 * a0 = e0 rounded down to 4: whole 16-byte vectors, two groups in flight per
 * thread; entries outside [e0, e1) are computed and never read (every
 * index is a valid column, the arrays are padded).
 */
template <typename T, typename OT>
__device__ __forceinline__ void
load_products(const int *__restrict__ indices, const T *__restrict__ vals,
			  const T *__restrict__ x, OT a0, OT e1, T *prod)
{
	const int	ng = (int) ((e1 - a0 + 3) >> 2);

	for (int g = threadIdx.x; g < ng; g += 2 * TPB)
	{
		const int	g2 = g + TPB;
		const OT	b1 = a0 + 4 * (OT) g,
					b2 = a0 + 4 * (OT) g2;
		int4		c1 = __ldg(reinterpret_cast<const int4 *>(indices + b1)),
					c2 = make_int4(0, 0, 0, 0);
		T			v1[4],
					v2[4] = {0, 0, 0, 0};

		load4(vals + b1, v1);
		if (g2 < ng)
		{
			c2 = __ldg(reinterpret_cast<const int4 *>(indices + b2));
			load4(vals + b2, v2);
		}
		v1[0] *= __ldg(x + c1.x);
		v1[1] *= __ldg(x + c1.y);
		v1[2] *= __ldg(x + c1.z);
		v1[3] *= __ldg(x + c1.w);
		store4(prod + 4 * g, v1);
		if (g2 < ng)
		{
			v2[0] *= __ldg(x + c2.x);
			v2[1] *= __ldg(x + c2.y);
			v2[2] *= __ldg(x + c2.z);
			v2[3] *= __ldg(x + c2.w);
			store4(prod + 4 * g2, v2);
		}
	}
}

/* alpha and beta from the dots (CG mode's last block, thread 0) */
__device__ __forceinline__ void
cg_scalars(CgState *st, double pq, double rq, double qq)
{
	double		rr = st->rr,
				alpha,
				rrn;

	st->pq = pq;
	if (rr == 0.0 || pq == 0.0)
	{
		/* r (or p) underflowed: let the host look at the true residual */
		st->done = 1;
		st->reason = REASON_CONVERGED;
		return;
	}
	if (!(pq > 0.0) || !isfinite(pq))
	{
		st->done = 1;
		st->reason = REASON_BREAKDOWN;
		return;
	}
	alpha = rr / pq;
	rrn = rr - 2.0 * alpha * rq + alpha * alpha * qq;
	st->alpha = alpha;
	st->beta = (rrn > 0.0 && rr > 0.0) ? rrn / rr : 0.0;
}

/* one row's terms of p.q, r.q, q.q (the dots the CG's product kernels form) */
__device__ __forceinline__ void
dots_add(double (&d)[3], double p, double r, double q)
{
	d[0] += p * q;
	d[1] += r * q;
	d[2] += q * q;
}

/*
 * The close of a CG product kernel: the grid's p.q, r.q, q.q, and alpha and
 * beta set by the last block (red: 3 x TPB/32 doubles of shared memory)
 */
__device__ __forceinline__ void
dots_close(double (&d)[3], CgState *st, double *partials, double *red, bool *am_last)
{
	double		out[3];

	if (grid_sum<3>(d, partials, &st->ticket, out, red, am_last) && threadIdx.x == 0)
		cg_scalars(st, out[0], out[1], out[2]);
}

/*
 * The end of an iteration (the last block of cg_update or cg_fused_dia,
 * thread 0): rr = r.r, count it, and set done when the check (|S^-1 r|^2 =
 * rru below the tolerance) passes, r is 0 or not finite, or the iterations
 * are spent.
 */
template <bool CHECK>
__device__ __forceinline__ void
end_iteration(CgState *st, double rr, double rru)
{
	st->rr = rr;
	st->iter++;
	if (CHECK)
	{
		st->rru = rru;
		if (rru <= st->target2)
		{
			st->done = 1;
			st->reason = REASON_CONVERGED;
		}
	}
	if (!st->done && rr == 0.0)
	{
		st->done = 1;
		st->reason = REASON_CONVERGED;
	}
	if (!st->done && !isfinite(rr))
	{
		st->done = 1;
		st->reason = REASON_BREAKDOWN;
	}
	if (!st->done && st->iter >= st->max_iter)
	{
		st->done = 1;
		st->reason = REASON_ITERATIONS;
	}
}

/* ------------------------------------------------------------ kernels */

/*
 * y = A x over row blocks (see the top of the file).  CG: x is p, y is q,
 * r the residual; p.q, r.q, q.q are summed and the last block sets alpha
 * and beta.  A persistent grid: block b takes row blocks b, b + grid, ...
 */
template <typename T, typename OT, bool CG>
__global__ void __launch_bounds__(TPB, 8)
spmv_rowblocks(int nblocks, const RowBlock *__restrict__ blocks,
			   const LongInfo *__restrict__ longinfo,
			   const OT *__restrict__ indptr, const int *__restrict__ indices,
			   const T *__restrict__ vals, const T *__restrict__ x,
			   T *__restrict__ y, T *longpart, unsigned *longcnt,
			   const T *__restrict__ r, CgState *st, double *partials)
{
	__shared__ __align__(16) T prod[BLOCK_NNZ + 8];
	__shared__ int roff[MAX_ROWS + 1];
	__shared__ double red[3 * (TPB / 32)];
	__shared__ bool am_last;
	double		dots[3] = {0, 0, 0};	/* CG: p.q, r.q, q.q */

	if (CG && st->done)
		return;
	for (int bi = blockIdx.x; bi < nblocks; bi += gridDim.x)
	{
		const RowBlock rb = blocks[bi];
		const int	row = rb.row;
		OT			e0,
					e1;

		if (rb.nrows > 0)
		{
			e0 = indptr[row];
			e1 = indptr[row + rb.nrows];
			for (int i = threadIdx.x; i <= rb.nrows; i += TPB)
				roff[i] = (int) (indptr[row + i] - e0);
		}
		else
		{
			e0 = indptr[row] + (OT) rb.lanes * BLOCK_NNZ;
			e1 = min(e0 + (OT) BLOCK_NNZ, indptr[row + 1]);
		}
		const OT	a0 = e0 & ~(OT) 3;
		const int	sh = (int) (e0 - a0);	/* prod[k + sh] is entry e0 + k */

		load_products<T, OT>(indices, vals, x, a0, e1, prod);
		__syncthreads();

		if (rb.nrows > 0 && rb.lanes != LANES_BLOCK)
		{
			/* groups of L lanes, one row each per pass; passes uniform per warp */
			const int	L = 1 << rb.lanes,
						G = TPB / L,
						grp = threadIdx.x / L,
						lane = threadIdx.x & (L - 1);

			for (int r0 = 0; r0 < rb.nrows; r0 += G)
			{
				const int	ri = r0 + grp;
				T			s = 0;

				if (ri < rb.nrows)
					for (int k = roff[ri] + lane; k < roff[ri + 1]; k += L)
						s += prod[k + sh];
				s = group_sum(s, L);
				if (lane == 0 && ri < rb.nrows)
				{
					y[row + ri] = s;
					if (CG)
						dots_add(dots, (double) x[row + ri], (double) r[row + ri], (double) s);
				}
			}
		}
		else
		{
			/* one row, or a chunk of a long row: the whole block sums */
			T			s = 0;
			const int	len = (int) (e1 - e0);

			for (int k = threadIdx.x; k < len; k += TPB)
				s += prod[k + sh];
			s = block_sum(s, red);
			if (threadIdx.x == 0)
			{
				bool		finished = true;

				if (rb.nrows == 0)
				{
					const LongInfo li = longinfo[rb.longid];

					longpart[li.base + rb.lanes] = s;
					__threadfence();
					finished = atomicAdd(&longcnt[rb.longid], 1u) == (unsigned) li.nchunks - 1;
					if (finished)
					{
						s = 0;
						for (int c = 0; c < li.nchunks; c++)
							s += __ldcg(&longpart[li.base + c]);
						longcnt[rb.longid] = 0;
					}
				}
				if (finished)
				{
					y[row] = s;
					if (CG)
						dots_add(dots, (double) x[row], (double) r[row], (double) s);
				}
			}
		}
		__syncthreads();
	}
	if (CG)
		dots_close(dots, st, partials, red, &am_last);
}

/*
 * s[u] += vals[d][i] * nb(j, in) over the stored diagonals d, for the R rows
 * i = base + u TPB (j = i + off[d]; in: the entry lies inside the matrix,
 * else its value is taken as 0 and nb must not read); the loads of G
 * diagonals are issued before any is used.  spmv_dia's neighbour value is
 * x[j], cg_fused_dia's the neighbour's new p.
 */
template <typename T, int R, int G, typename NB>
__device__ __forceinline__ void
dia_accumulate(int64_t base, int n, int64_t npad, int ndiag, const int *soff,
			   const T *__restrict__ vals, T (&s)[R], NB nb)
{
	for (int d0 = 0; d0 < ndiag; d0 += G)
	{
		T			v[G][R],
					w[G][R];

#pragma unroll
		for (int k = 0; k < G; k++)
		{
			const int	o = soff[min(d0 + k, ndiag - 1)];
			const bool	dk = d0 + k < ndiag;

#pragma unroll
			for (int u = 0; u < R; u++)
			{
				const int64_t i = base + u * TPB,
							j = i + o;
				const bool	in = dk && i < n && j >= 0 && j < n;

				v[k][u] = in ? __ldg(vals + (int64_t) (d0 + k) * npad + i) : (T) 0;
				w[k][u] = nb(j, in);
			}
		}
#pragma unroll
		for (int k = 0; k < G; k++)
#pragma unroll
			for (int u = 0; u < R; u++)
				s[u] += v[k][u] * w[k][u];
	}
}

/*
 * y = A x in the diagonal layout: vals[d * npad + i] = A(i, i + off[d]), 0
 * where the matrix has no entry or the column falls outside it.  A thread
 * takes R rows TPB apart (a block R x TPB consecutive rows); a row's
 * neighbours along a diagonal are the next threads' rows, so the loads of
 * the values and of x are coalesced and x is mostly read from the caches.
 * The loads of DIA_GROUP / R diagonals of the R rows are issued before any
 * is used.  UNIT: the matrix's diagonal is 1 and not stored (the
 * Jacobi-scaled matrix), y_i = x_i + the stored diagonals.  CG as in
 * spmv_rowblocks: x is p, y is q, and the last block sets alpha and beta.
 * A persistent grid.
 */
template <typename T, bool CG, bool UNIT, int R>
__global__ void __launch_bounds__(TPB)
spmv_dia(int n, int64_t npad, int ndiag, const int *__restrict__ off,
		 const T *__restrict__ vals, const T *__restrict__ x, T *__restrict__ y,
		 const T *__restrict__ r, CgState *st, double *partials)
{
	constexpr int G = DIA_GROUP / R;
	__shared__ int soff[DIA_MAX];
	__shared__ double red[3 * (TPB / 32)];
	__shared__ bool am_last;
	double		dots[3] = {0, 0, 0};	/* CG: p.q, r.q, q.q */

	if (CG && st->done)
		return;
	if (threadIdx.x < ndiag)
		soff[threadIdx.x] = off[threadIdx.x];
	__syncthreads();
	for (int64_t base = blockIdx.x * (int64_t) (R * TPB) + threadIdx.x; base < n;
		 base += (int64_t) gridDim.x * (R * TPB))
	{
		T			s[R];

#pragma unroll
		for (int u = 0; u < R; u++)
		{
			const int64_t i = base + u * TPB;

			s[u] = UNIT && i < n ? __ldg(x + i) : (T) 0;
		}
		dia_accumulate<T, R, G>(base, n, npad, ndiag, soff, vals, s,
								[&](int64_t j, bool in) {
									return in ? __ldg(x + j) : (T) 0;
								});
#pragma unroll
		for (int u = 0; u < R; u++)
		{
			const int64_t i = base + u * TPB;

			if (i >= n)
				break;
			y[i] = s[u];
			if (CG)
				dots_add(dots, (double) __ldg(x + i), (double) r[i], (double) s[u]);
		}
	}
	if (CG)
		dots_close(dots, st, partials, red, &am_last);
}

/* r' = r - alpha q, p' = r' + beta p: one expression wherever it is formed */
template <typename T>
__device__ __forceinline__ void
cg_step(T r, T q, T p, T a, T b, T &rn, T &pn)
{
	rn = fma(-a, q, r);
	pn = fma(b, p, rn);
}

/*
 * One fused CG iteration in the diagonal layout (the update of iteration k
 * and the product of iteration k + 1 in one pass; pcg_impl.h's algebra):
 *
 *   y += alpha p; r' = r - alpha q; p' = r' + beta p      (own rows)
 *   q' = Â p', p' of the neighbours formed on the fly from their r, q, p
 *   p'.q', r'.q', q'.q', r'.r' (and |S^-1 r'|^2 with CHECK)
 *
 * r, p, q are double-buffered (index st->iter & 1 read, the other written),
 * because a block forms its neighbours' p' from their old values while
 * their own block writes the new ones; cg_step makes both bit-identical.
 * The last block counts the iteration, checks as cg_update does, and sets
 * alpha and beta for the next.  Eight vector words a row instead of ten,
 * and one grid-wide sum an iteration instead of two.
 */
template <typename T, bool UNIT, bool CHECK, int R>
__global__ void __launch_bounds__(TPB)
cg_fused_dia(int n, int64_t npad, int ndiag, const int *__restrict__ off,
			 const T *__restrict__ vals, T *__restrict__ y, T *r0, T *r1, T *p0, T *p1,
			 T *q0, T *q1, const double *__restrict__ dsq, CgState *st, double *partials)
{
	/* four loads a neighbour (value, r, q, p): half spmv_dia's diagonals in flight */
	constexpr int G = DIA_GROUP / R / 2 > 0 ? DIA_GROUP / R / 2 : 1;
	__shared__ int soff[DIA_MAX];
	__shared__ double red[5 * (TPB / 32)];
	__shared__ bool am_last;
	double		acc[5] = {0, 0, 0, 0, 0},
				out[5];

	if (st->done)
		return;

	const int	par = st->iter & 1;
	const T    *__restrict__ ro = par ? r1 : r0;
	const T    *__restrict__ po = par ? p1 : p0;
	const T    *__restrict__ qo = par ? q1 : q0;
	T		   *__restrict__ rn = par ? r0 : r1;
	T		   *__restrict__ pn = par ? p0 : p1;
	T		   *__restrict__ qn = par ? q0 : q1;
	const T		a = (T) st->alpha,
				b = (T) st->beta;

	if (threadIdx.x < ndiag)
		soff[threadIdx.x] = off[threadIdx.x];
	__syncthreads();
	for (int64_t base = blockIdx.x * (int64_t) (R * TPB) + threadIdx.x; base < n;
		 base += (int64_t) gridDim.x * (R * TPB))
	{
		T			s[R],
					rni[R],
					pni[R];

#pragma unroll
		for (int u = 0; u < R; u++)
		{
			const int64_t i = base + u * TPB;

			rni[u] = pni[u] = s[u] = 0;
			if (i < n)
			{
				const T		pi = po[i];

				cg_step(ro[i], qo[i], pi, a, b, rni[u], pni[u]);
				y[i] = fma(a, pi, y[i]);
				rn[i] = rni[u];
				pn[i] = pni[u];
				if (UNIT)
					s[u] = pni[u];
			}
		}
		dia_accumulate<T, R, G>(base, n, npad, ndiag, soff, vals, s,
								[&](int64_t j, bool in) {
									T			rj = 0,
												qj = 0,
												pjo = 0,
												rnj,
												pnj;

									if (in)
									{
										rj = ro[j];
										qj = qo[j];
										pjo = po[j];
									}
									cg_step(rj, qj, pjo, a, b, rnj, pnj);
									return pnj;
								});
#pragma unroll
		for (int u = 0; u < R; u++)
		{
			const int64_t i = base + u * TPB;

			if (i >= n)
				break;

			const double qi = (double) s[u],
						ri = (double) rni[u];

			qn[i] = s[u];
			acc[0] += (double) pni[u] * qi;
			acc[1] += ri * qi;
			acc[2] += qi * qi;
			acc[3] += ri * ri;
			if (CHECK)
			{
				const double w = dsq[i] * ri;

				acc[4] += w * w;
			}
		}
	}
	if (grid_sum<5>(acc, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
	{
		end_iteration<CHECK>(st, out[3], out[4]);
		if (!st->done)
			cg_scalars(st, out[0], out[1], out[2]);
	}
}

/*
 * The diagonal layout's values from the CSR (rows sorted, no duplicate
 * columns): out[d * npad + i] = s_i v_ij s_j (v_ij when s is null), d the
 * position of j - i in off (ndiag sorted offsets; the offset 0 is left out
 * when it is not in off).  out is zeroed before.  A warp per row.
 */
template <typename T, typename OT>
__global__ void __launch_bounds__(TPB)
dia_fill(int n, int64_t npad, const OT *__restrict__ indptr, const int *__restrict__ indices,
		 const double *__restrict__ vals, const double *__restrict__ s, int ndiag,
		 const int *__restrict__ off, T *out)
{
	__shared__ int soff[DIA_MAX];
	const int	lane = threadIdx.x & 31;

	if (threadIdx.x < ndiag)
		soff[threadIdx.x] = off[threadIdx.x];
	__syncthreads();
	for (int64_t i = (blockIdx.x * (int64_t) TPB + threadIdx.x) >> 5; i < n;
		 i += ((int64_t) gridDim.x * TPB) >> 5)
	{
		for (OT e = indptr[i] + lane; e < indptr[i + 1]; e += 32)
		{
			const int	j = indices[e],
						o = j - (int) i;
			int			lo = 0,
						hi = ndiag - 1;

			while (lo < hi)
			{
				int			mid = (lo + hi) >> 1;

				if (soff[mid] < o)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (ndiag == 0 || soff[lo] != o)
				continue;		/* the unit diagonal, left out */
			out[(int64_t) lo * npad + i] = (T) (s ? vals[e] * s[i] * s[j] : vals[e]);
		}
	}
}

/* p.q, r.q, q.q and the scalars: the CG step after cuSPARSE's SpMV */
template <typename T>
__global__ void __launch_bounds__(TPB)
cg_dots(int64_t n, const T *__restrict__ p, const T *__restrict__ r,
		const T *__restrict__ q, CgState *st, double *partials)
{
	__shared__ double red[3 * (TPB / 32)];
	__shared__ bool am_last;
	double		dots[3] = {0, 0, 0};

	if (st->done)
		return;
	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
		dots_add(dots, (double) p[i], (double) r[i], (double) q[i]);
	dots_close(dots, st, partials, red, &am_last);
}

/*
 * K2: y += alpha p; r -= alpha q; p = r + beta p; r.r; with CHECK also
 * |S^-1 r|^2 (dsq = 1/s).  n4: vectors of 4 (the arrays are padded to a
 * multiple of 4 with zeros).  The last block counts the iteration and sets
 * done when the check passes, r is 0, or the iterations are spent.
 */
template <typename T, bool CHECK>
__global__ void __launch_bounds__(TPB, 6)
cg_update(int64_t n4, T *__restrict__ y, T *__restrict__ r, T *__restrict__ p,
		  const T *__restrict__ q, const double *__restrict__ dsq, CgState *st,
		  double *partials)
{
	__shared__ double red[2 * (TPB / 32)];
	__shared__ bool am_last;
	double		v[2] = {0, 0},
				out[2];

	if (st->done)
		return;

	const T		a = (T) st->alpha,
				b = (T) st->beta;

	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n4;
		 i += (int64_t) gridDim.x * TPB)
	{
		T			pv[4],
					rv[4],
					qv[4],
					yv[4];

		load4(p + 4 * i, pv);
		load4(r + 4 * i, rv);
		load4(q + 4 * i, qv);
		load4(y + 4 * i, yv);
#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			yv[u] += a * pv[u];
			rv[u] -= a * qv[u];
			pv[u] = rv[u] + b * pv[u];
			v[0] += (double) rv[u] * (double) rv[u];
		}
		if (CHECK)
		{
			double		dv[4];

			load4(dsq + 4 * i, dv);
#pragma unroll
			for (int u = 0; u < 4; u++)
			{
				double		w = dv[u] * (double) rv[u];

				v[1] += w * w;
			}
		}
		store4(y + 4 * i, yv);
		store4(r + 4 * i, rv);
		store4(p + 4 * i, pv);
	}
	if (grid_sum<2>(v, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
		end_iteration<CHECK>(st, out[0], out[1]);
}

/* s = 1/sqrt(A_ii) (Jacobi) or 1, dsq = 1/s; a warp per row */
template <typename OT>
__global__ void __launch_bounds__(TPB)
jacobi_scaling(int n, int jacobi, const OT *__restrict__ indptr,
			   const int *__restrict__ indices, const double *__restrict__ vals,
			   double *s, double *dsq)
{
	const int	lane = threadIdx.x & 31;

	for (int64_t i = (blockIdx.x * (int64_t) TPB + threadIdx.x) >> 5; i < n;
		 i += ((int64_t) gridDim.x * TPB) >> 5)
	{
		double		d = 0.0;

		if (jacobi)
		{
			for (OT e = indptr[i] + lane; e < indptr[i + 1]; e += 32)
				if (indices[e] == i)
					d += vals[e];
			d = warp_sum(d);
		}
		if (lane == 0)
		{
			double		sq = jacobi ? sqrt(d) : 1.0;

			s[i] = 1.0 / sq;	/* d <= 0 gives NaN or Inf: a breakdown later */
			dsq[i] = sq;
		}
	}
}

/* vh = s_i v_ij s_j in the working precision; a warp per row */
template <typename T, typename OT>
__global__ void __launch_bounds__(TPB)
scale_values(int n, const OT *__restrict__ indptr, const int *__restrict__ indices,
			 const double *__restrict__ vals, const double *__restrict__ s, T *vh)
{
	const int	lane = threadIdx.x & 31;

	for (int64_t i = (blockIdx.x * (int64_t) TPB + threadIdx.x) >> 5; i < n;
		 i += ((int64_t) gridDim.x * TPB) >> 5)
	{
		const double si = s[i];

		for (OT e = indptr[i] + lane; e < indptr[i + 1]; e += 32)
			vh[e] = (T) (vals[e] * si * s[indices[e]]);
	}
}

/* rt = b - rt (rt held A x); st->tmp = |rt|^2 */
__global__ void __launch_bounds__(TPB)
residual_from_ax(int64_t n, const double *__restrict__ b, double *rt, CgState *st,
				 double *partials)
{
	__shared__ double red[TPB / 32];
	__shared__ bool am_last;
	double		v[1] = {0},
				out[1];

	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
	{
		double		ri = b[i] - rt[i];

		rt[i] = ri;
		v[0] += ri * ri;
	}
	if (grid_sum<1>(v, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
		st->tmp = out[0];
}

/* (re)start: r = S rt in the working precision, p = r, y = 0, rr = r.r, done = 0 */
template <typename T>
__global__ void __launch_bounds__(TPB)
cg_restart(int64_t n, const double *__restrict__ s, const double *__restrict__ rt,
		   T *r, T *p, T *y, CgState *st, double *partials)
{
	__shared__ double red[TPB / 32];
	__shared__ bool am_last;
	double		v[1] = {0},
				out[1];

	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
	{
		T			ri = (T) (s[i] * rt[i]);

		r[i] = ri;
		p[i] = ri;
		y[i] = 0;
		v[0] += (double) ri * (double) ri;
	}
	if (grid_sum<1>(v, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
	{
		st->rr = out[0];
		st->done = 0;
		st->reason = 0;
	}
}

/* x += S y; y = 0 */
template <typename T>
__global__ void __launch_bounds__(TPB)
cg_fold(int64_t n, const double *__restrict__ s, T *y, double *x)
{
	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
	{
		x[i] += s[i] * (double) y[i];
		y[i] = 0;
	}
}

template <typename A, typename B>
__global__ void __launch_bounds__(TPB)
convert(int64_t n, const A *__restrict__ a, B *b)
{
	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
		b[i] = (B) a[i];
}

/* ------------------------------------------------------------ host side */

/* The row blocks of a CSR matrix (see the top of the file). */
void
build_row_blocks(const int64_t *indptr, int n, std::vector<RowBlock> &blocks,
				 std::vector<LongInfo> &longs, int *nlongpart)
{
	int			part = 0;

	blocks.clear();
	longs.clear();
	for (int r = 0; r < n;)
	{
		int64_t		len = indptr[r + 1] - indptr[r];

		if (len > BLOCK_NNZ)
		{
			int			nch = (int) ((len + BLOCK_NNZ - 1) / BLOCK_NNZ);
			int			id = (int) longs.size();

			longs.push_back({nch, part});
			part += nch;
			for (int c = 0; c < nch; c++)
				blocks.push_back({r, 0, c, id});
			r++;
			continue;
		}

		int			start = r;
		int64_t		nnz = 0,
					maxlen = 0;

		while (r < n && r - start < MAX_ROWS)
		{
			int64_t		l = indptr[r + 1] - indptr[r];

			if (l > BLOCK_NNZ || nnz + l > BLOCK_NNZ)
				break;
			nnz += l;
			maxlen = std::max(maxlen, l);
			r++;
		}

		int			nr = r - start,
					best = 0;

		if (nr == 1)
			best = LANES_BLOCK;
		else
		{
			/* cost: passes over the rows x (steps of the longest row + shuffles) */
			double		best_cost = 1e300;

			for (int lg = 0; lg <= 5; lg++)
			{
				int			L = 1 << lg;
				double		passes = std::ceil((double) nr * L / TPB),
							cost = passes * (std::ceil((double) maxlen / L) + lg);

				if (cost < best_cost)
				{
					best_cost = cost;
					best = lg;
				}
			}
		}
		blocks.push_back({start, nr, best, 0});
	}
	*nlongpart = part;
}

struct CgWork;

struct SparseHandle
{
	int			n;
	int64_t		nnz;
	int64_t		n4;				/* vectors of 4 */
	int64_t		npad;			/* n rounded up to 4 */
	gm_precision prec;
	bool		idx64;
	int			nsm;
	cudaStream_t stream;
	void	   *indptr;			/* int32 or int64 */
	int		   *indices;		/* nnz + PAD */
	double	   *vals64;			/* original values, nnz + PAD */
	float	   *vals32;			/* single: the values as float */
	RowBlock   *blocks;
	LongInfo   *longinfo;
	int			nblocks;
	/* the diagonal layout (ndiag > 0; find_diagonals) */
	int			ndiag;
	int			ndiag_nz;		/* the offsets other than 0 */
	int			dia_rows;		/* rows per thread of spmv_dia: 1, 2 or 4 */
	int			fused_rows;		/* and of cg_fused_dia */
	int		   *dia_off;		/* ndiag sorted offsets */
	int		   *dia_off_nz;		/* the same without 0 */
	void	   *dia_vals;		/* ndiag x npad values of the handle's precision */
	int			nlongpart;
	void	   *longpart;		/* partial sums, double (serves float too) */
	unsigned   *longcnt;
	double	   *partials;		/* 5 x max grid */
	CgState    *st;
	int			max_grid;
	/* cuSPARSE */
	cusparseHandle_t sp;
	cusparseSpMatDescr_t mat;	/* the values of the handle's precision */
	cusparseDnVecDescr_t vx,
				vy;
	void	   *spbuf;
	size_t		spbuf_size;
	cusparseSpMatDescr_t sp_for;	/* the matrix the buffer was preprocessed for */
	int			sp_alg;			/* and the algorithm (+1; 0: none) */
	/* host vectors for sparse_spmv */
	void	   *dx,
			   *dy;
	double	   *dx64;
	struct CgWork *cgw;			/* CG buffers, kept between solves */
	char		devname[128];
	gm_spmv_impl auto_impl;		/* GM_SPMV_AUTO resolved by timing, once */
};

int
grid_for(int64_t work, const SparseHandle *h)
{
	int64_t		g = (work + TPB - 1) / TPB;

	return (int) std::max<int64_t>(1, std::min<int64_t>(g, h->max_grid));
}

/* grid of the persistent SpMV: all row blocks, at most what fits at once */
template <typename T, typename OT, bool CG>
int
spmv_grid(const SparseHandle *h)
{
	static int	per_sm = 0;	/* per instantiation, asked once */

	if (per_sm == 0 &&
		(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spmv_rowblocks<T, OT, CG>,
													   TPB, 0) != cudaSuccess || per_sm < 1))
		per_sm = 1;
	return std::max(1, std::min(h->nblocks, per_sm * h->nsm));
}

/*
 * grid of the update kernel: one wave of resident blocks (each block's
 * closing reduction is paid once, not once per wave)
 */
template <typename T>
int
update_grid(const SparseHandle *h)
{
	static int	per_sm = 0;

	if (per_sm == 0 &&
		(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cg_update<T, true>, TPB, 0)
		 != cudaSuccess || per_sm < 1))
		per_sm = 1;
	return (int) std::max<int64_t>(1, std::min<int64_t>((h->n4 + TPB - 1) / TPB,
														  (int64_t) per_sm * h->nsm));
}

template <typename T>
const T *
hvals(const SparseHandle *h)
{
	return std::is_same<T, double>::value ? (const T *) h->vals64 : (const T *) h->vals32;
}

/* y = A x with gpumf's kernel on device vectors (queued on h's stream) */
template <typename T, typename OT>
int
own_spmv(SparseHandle *h, const T *vals, const T *x, T *y, char *err, size_t errlen)
{
	spmv_rowblocks<T, OT, false><<<spmv_grid<T, OT, false>(h), TPB, 0, h->stream>>>(
		h->nblocks, h->blocks, h->longinfo, (const OT *) h->indptr, h->indices, vals, x, y,
		(T *) h->longpart, h->longcnt, nullptr, nullptr, nullptr);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/* grid of the diagonal-layout SpMV: one wave of resident blocks */
template <typename T, bool CG, bool UNIT, int R>
int
dia_grid(const SparseHandle *h)
{
	static int	per_sm = 0;

	if (per_sm == 0 &&
		(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spmv_dia<T, CG, UNIT, R>, TPB, 0)
		 != cudaSuccess || per_sm < 1))
		per_sm = 1;
	return (int) std::max<int64_t>(1, std::min<int64_t>((h->n + R * TPB - 1) / (R * TPB),
														  (int64_t) per_sm * h->nsm));
}

/*
 * One launch of the diagonal-layout SpMV with h's rows per thread (CG: x is
 * p, y is q; unit: offsets and values without the unit diagonal)
 */
template <typename T, bool CG, bool UNIT, int R>
void
launch_dia_r(SparseHandle *h, int ndiag, const int *off, const T *vals, const T *x, T *y,
			 const T *r)
{
	spmv_dia<T, CG, UNIT, R><<<dia_grid<T, CG, UNIT, R>(h), TPB, 0, h->stream>>>(
		h->n, h->npad, ndiag, off, vals, x, y, r, h->st, h->partials);
}

template <typename T, bool CG, bool UNIT>
void
launch_dia(SparseHandle *h, int ndiag, const int *off, const T *vals, const T *x, T *y,
		   const T *r)
{
	if (h->dia_rows == 4)
		launch_dia_r<T, CG, UNIT, 4>(h, ndiag, off, vals, x, y, r);
	else if (h->dia_rows == 2)
		launch_dia_r<T, CG, UNIT, 2>(h, ndiag, off, vals, x, y, r);
	else
		launch_dia_r<T, CG, UNIT, 1>(h, ndiag, off, vals, x, y, r);
}

/* y = A x in the diagonal layout on device vectors (queued on h's stream) */
template <typename T>
int
dia_spmv(SparseHandle *h, const T *x, T *y, char *err, size_t errlen)
{
	launch_dia<T, false, false>(h, h->ndiag, h->dia_off, (const T *) h->dia_vals, x, y,
								nullptr);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/*
 * The diagonals of A when the diagonal layout pays: at most DIA_MAX distinct
 * offsets j - i, every row strictly sorted by column, and the layout's
 * values (ndiag x n of ts bytes) no more bytes than the CSR's values and
 * indices.  Returns ndiag (0: keep the row blocks) and the sorted offsets.
 * A banded matrix (a stencil's, a tridiagonal one) takes it; a scattered one
 * is left within a few rows.  One pass over the indices (about 60 ms for
 * the 21M nonzeros of a 2048^2 Poisson matrix on one core).
 */
int
find_diagonals(const gm_spmat *A, size_t ts, int *off)
{
	int			nd = 0,
				last = 0;

	for (int64_t i = 0; i < A->n; i++)
		for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++)
		{
			const int	o = (int) ((int64_t) A->indices[e] - i);
			int			k,
						at = last;

			if (e > A->indptr[i] && A->indices[e] <= A->indices[e - 1])
				return 0;
			/* rows repeat their pattern: try the offset after the last one first */
			for (k = 0; k < nd; k++)
			{
				if (++at >= nd)
					at = 0;
				if (off[at] == o)
					break;
			}
			if (k < nd)
			{
				last = at;
				continue;
			}
			if (nd == DIA_MAX)
				return 0;
			off[nd] = o;
			last = nd++;
		}
	if (nd == 0 ||
		(double) nd * (double) ((A->n + 3) / 4 * 4) * (double) ts >
		(double) A->nnz * (double) (ts + 4) + 4.0 * (double) (A->n + 1))
		return 0;
	std::sort(off, off + nd);
	return nd;
}

cudaDataType
cuda_type(gm_precision p)
{
	return p == GM_PRECISION_SINGLE ? CUDA_R_32F : CUDA_R_64F;
}

/*
 * y = A x with cusparseSpMV on device vectors, matrix descriptor mat (values
 * of h's precision).  The buffer is sized and the matrix preprocessed once
 * per matrix and algorithm (not during a graph capture: the caller runs one
 * call before capturing).
 */
int
cusparse_spmv(SparseHandle *h, cusparseSpMatDescr_t mat, cusparseSpMVAlg_t alg,
			  const void *x, void *y, char *err, size_t errlen)
{
	double		one64 = 1.0,
				zero64 = 0.0;
	float		one32 = 1.0f,
				zero32 = 0.0f;
	const void *one = h->prec == GM_PRECISION_SINGLE ? (const void *) &one32 : &one64;
	const void *zero = h->prec == GM_PRECISION_SINGLE ? (const void *) &zero32 : &zero64;
	cudaDataType ct = cuda_type(h->prec);

	if (h->idx64 || mat == nullptr)
	{
		snprintf(err, errlen, "cuSPARSE SpMV is used here with 32-bit indices only, and the "
				 "matrix has %lld nonzeros: set gpumf.spmv = 'own'", (long long) h->nnz);
		return GM_ENOTSUP;
	}
	GM_CHECK(cusparseDnVecSetValues(h->vx, (void *) x));
	GM_CHECK(cusparseDnVecSetValues(h->vy, y));
	if (h->sp_for != mat || h->sp_alg != (int) alg + 1)
	{
		size_t		need = 0;

		GM_CHECK(cusparseSpMV_bufferSize(h->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, one, mat,
										 h->vx, zero, h->vy, ct, alg, &need));
		if (need > h->spbuf_size)
		{
			if (h->spbuf)
				gm_dev_free(h->spbuf);
			h->spbuf = nullptr;
			h->spbuf_size = 0;
			GM_CHECK(gm_dev_malloc(&h->spbuf, std::max<size_t>(need, 256)));
			h->spbuf_size = std::max<size_t>(need, 256);
		}
		/* an optimisation only: a cuSPARSE that cannot preprocess this runs without */
		(void) cusparseSpMV_preprocess(h->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, one, mat,
									   h->vx, zero, h->vy, ct, alg, h->spbuf);
		h->sp_for = mat;
		h->sp_alg = (int) alg + 1;
	}
	GM_CHECK(cusparseSpMV(h->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, one, mat, h->vx, zero,
						  h->vy, ct, alg, h->spbuf));
	return GM_OK;
}

cusparseSpMVAlg_t
cusparse_alg(gm_spmv_impl impl)
{
	return impl == GM_SPMV_CUSPARSE_ALG2 ? CUSPARSE_SPMV_CSR_ALG2 : CUSPARSE_SPMV_ALG_DEFAULT;
}

template <typename T>
int			spmv_device_t(SparseHandle *h, gm_spmv_impl impl, const T *x, T *y, char *err,
						  size_t errlen);

/*
 * GM_SPMV_AUTO: the faster of the two on this matrix, timed once per handle
 * (a warm-up and three products each; cuSPARSE must win by 3% to be taken,
 * gpumf's kernel also fuses the CG's dot products)
 */
gm_spmv_impl
resolve_impl(SparseHandle *h, gm_spmv_impl impl)
{
	cudaEvent_t e0 = nullptr,
				e1 = nullptr;
	float		t[2] = {0, 0};
	char		err[GM_ERRLEN];
	size_t		errlen = sizeof(err);
	const size_t ts = h->prec == GM_PRECISION_SINGLE ? sizeof(float) : sizeof(double);

	if (impl != GM_SPMV_AUTO)
		return impl;
	if (h->auto_impl != GM_SPMV_AUTO)
		return h->auto_impl;
	h->auto_impl = GM_SPMV_OWN;
	if (h->idx64 || h->mat == nullptr)
		return h->auto_impl;
	if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess ||
		cudaMemsetAsync(h->dx, 0x3c, ts * (size_t) h->n, h->stream) != cudaSuccess)
		goto out;
	for (int k = 0; k < 2; k++)
	{
		gm_spmv_impl which = k ? GM_SPMV_CUSPARSE : GM_SPMV_OWN;

		for (int rep = 0; rep < 4; rep++)
		{
			int			rc;

			if (rep == 1 && cudaEventRecord(e0, h->stream) != cudaSuccess)
				goto out;
			rc = h->prec == GM_PRECISION_SINGLE
				? spmv_device_t<float>(h, which, (const float *) h->dx, (float *) h->dy, err, errlen)
				: spmv_device_t<double>(h, which, (const double *) h->dx, (double *) h->dy, err, errlen);
			if (rc != GM_OK)
				goto out;
		}
		if (cudaEventRecord(e1, h->stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
			cudaEventElapsedTime(&t[k], e0, e1) != cudaSuccess)
			goto out;
	}
	if (t[1] < 0.97f * t[0])
		h->auto_impl = GM_SPMV_CUSPARSE;
out:
	(void) cudaGetLastError();
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	return h->auto_impl;
}

template <typename T>
int
spmv_device_t(SparseHandle *h, gm_spmv_impl impl, const T *x, T *y, char *err, size_t errlen)
{
	impl = resolve_impl(h, impl);
	if (impl == GM_SPMV_CUSPARSE || impl == GM_SPMV_CUSPARSE_ALG2)
		return cusparse_spmv(h, h->mat, cusparse_alg(impl), x, y, err, errlen);
	if (impl == GM_SPMV_OWN && h->ndiag > 0)
		return dia_spmv<T>(h, x, y, err, errlen);
	if (h->idx64)
		return own_spmv<T, long long>(h, hvals<T>(h), x, y, err, errlen);
	return own_spmv<T, int>(h, hvals<T>(h), x, y, err, errlen);
}

/* ------------------------------------------------------------ CG on the device */

/*
 * The CG's device memory.  The vectors, Â's values, the pinned status and
 * the events are kept in the handle and reused by later solves (a solve of
 * a small system is otherwise mostly allocation); the graph and the
 * cuSPARSE descriptor belong to one solve (CgSolveGuard releases them).
 */
struct CgWork
{
	double	   *b = nullptr,
			   *x = nullptr,
			   *s = nullptr,
			   *dsq = nullptr,
			   *rt = nullptr;
	void	   *y = nullptr,
			   *r = nullptr,
			   *p = nullptr,
			   *q = nullptr,
			   *vh = nullptr,	/* Â's values: CSR (nnz + PAD) */
			   *vdia = nullptr,	/* or the diagonal layout (ndiag x npad) */
			   *r2 = nullptr,	/* the fused iteration's second r, p, q */
			   *p2 = nullptr,
			   *q2 = nullptr;
	CgState    *status = nullptr;	/* pinned, 2 slots */
	cudaEvent_t ev[2] = {nullptr, nullptr};
	cudaGraph_t graph = nullptr;
	cudaGraphExec_t exec = nullptr;
	cusparseSpMatDescr_t mat = nullptr;
	cudaStream_t stream = nullptr;

	bool		ready = false;	/* allocated and zeroed */

	void		release_solve()
	{
		if (stream)
			cudaStreamSynchronize(stream);
		if (exec)
			cudaGraphExecDestroy(exec);
		if (graph)
			cudaGraphDestroy(graph);
		if (mat)
			cusparseDestroySpMat(mat);
		exec = nullptr;
		graph = nullptr;
		mat = nullptr;
	}

	~CgWork()
	{
		release_solve();
		for (auto &e : ev)
			if (e)
				cudaEventDestroy(e);
		if (status)
			cudaFreeHost(status);
		for (void *ptr : {(void *) b, (void *) x, (void *) s, (void *) dsq, (void *) rt, y, r, p, q, vh, vdia, r2, p2, q2})
			if (ptr)
				gm_dev_free(ptr);
	}
};

/* releases one solve's graph and descriptor on every way out */
struct CgSolveGuard
{
	CgWork	   *w;

	~CgSolveGuard()
	{
		w->release_solve();
	}
};

/* grid of the fused iteration: one wave of resident blocks */
template <typename T, bool UNIT, bool CHECK, int R>
int
fused_grid(const SparseHandle *h)
{
	static int	per_sm = 0;

	if (per_sm == 0 &&
		(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cg_fused_dia<T, UNIT, CHECK, R>,
													   TPB, 0) != cudaSuccess || per_sm < 1))
		per_sm = 1;
	return (int) std::max<int64_t>(1, std::min<int64_t>((h->n + R * TPB - 1) / (R * TPB),
														  (int64_t) per_sm * h->nsm));
}

template <typename T, bool UNIT, bool CHECK, int R>
void
launch_fused_r(SparseHandle *h, CgWork &w)
{
	cg_fused_dia<T, UNIT, CHECK, R><<<fused_grid<T, UNIT, CHECK, R>(h), TPB, 0, h->stream>>>(
		h->n, h->npad, UNIT ? h->ndiag_nz : h->ndiag, UNIT ? h->dia_off_nz : h->dia_off,
		(const T *) w.vdia, (T *) w.y, (T *) w.r, (T *) w.r2, (T *) w.p, (T *) w.p2,
		(T *) w.q, (T *) w.q2, w.dsq, h->st, h->partials);
}

template <typename T, bool UNIT, bool CHECK>
void
launch_fused(SparseHandle *h, CgWork &w)
{
	if (h->fused_rows == 4)
		launch_fused_r<T, UNIT, CHECK, 4>(h, w);
	else if (h->fused_rows == 2)
		launch_fused_r<T, UNIT, CHECK, 2>(h, w);
	else
		launch_fused_r<T, UNIT, CHECK, 1>(h, w);
}

/* the launch shapes of the fused iteration, asked for outside a graph capture */
template <typename T>
void
fused_grids(const SparseHandle *h)
{
	(void) fused_grid<T, true, true, 1>(h);
	(void) fused_grid<T, true, true, 2>(h);
	(void) fused_grid<T, true, true, 4>(h);
	(void) fused_grid<T, true, false, 1>(h);
	(void) fused_grid<T, true, false, 2>(h);
	(void) fused_grid<T, true, false, 4>(h);
	(void) fused_grid<T, false, true, 1>(h);
	(void) fused_grid<T, false, true, 2>(h);
	(void) fused_grid<T, false, true, 4>(h);
	(void) fused_grid<T, false, false, 1>(h);
	(void) fused_grid<T, false, false, 2>(h);
	(void) fused_grid<T, false, false, 4>(h);
}

/*
 * The fused iteration's start (after cg_restart): q = Â p and the scalars,
 * on the buffers of index cur = st.iter & 1
 */
template <typename T>
int
fused_first(SparseHandle *h, CgWork &w, int dia, int cur, char *err, size_t errlen)
{
	const T    *p = (const T *) (cur ? w.p2 : w.p),
			   *r = (const T *) (cur ? w.r2 : w.r);
	T		   *q = (T *) (cur ? w.q2 : w.q);

	if (dia == 2)
		launch_dia<T, true, true>(h, h->ndiag_nz, h->dia_off_nz, (const T *) w.vdia, p, q, r);
	else
		launch_dia<T, true, false>(h, h->ndiag, h->dia_off, (const T *) w.vdia, p, q, r);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/*
 * The iterations of one batch (m of them, the last with the check), queued
 * on the stream.  fused: m fused iterations (cg_fused_dia; the diagonal
 * layout, after fused_first); else an SpMV with its dots and cg_update each.
 */
template <typename T, typename OT>
int
enqueue_batch(SparseHandle *h, CgWork &w, int m, bool use_cusparse, cusparseSpMVAlg_t alg,
			  int dia, bool fused, char *err, size_t errlen)
{
	const int	g1 = spmv_grid<T, OT, true>(h),
				g2 = update_grid<T>(h);

	if (fused)
	{
		for (int it = 0; it < m; it++)
		{
			if (dia == 2 && it == m - 1)
				launch_fused<T, true, true>(h, w);
			else if (dia == 2)
				launch_fused<T, true, false>(h, w);
			else if (it == m - 1)
				launch_fused<T, false, true>(h, w);
			else
				launch_fused<T, false, false>(h, w);
			GM_CHECK_LAUNCH();
		}
		return GM_OK;
	}
	for (int it = 0; it < m; it++)
	{
		if (dia == 2)
			launch_dia<T, true, true>(h, h->ndiag_nz, h->dia_off_nz, (const T *) w.vdia,
									  (const T *) w.p, (T *) w.q, (const T *) w.r);
		else if (dia == 1)
			launch_dia<T, true, false>(h, h->ndiag, h->dia_off, (const T *) w.vdia,
									   (const T *) w.p, (T *) w.q, (const T *) w.r);
		else if (use_cusparse)
		{
			int			rc = cusparse_spmv(h, w.mat, alg, w.p, w.q, err, errlen);

			if (rc != GM_OK)
				return rc;
			cg_dots<T><<<grid_for(h->n, h), TPB, 0, h->stream>>>(
				h->n, (const T *) w.p, (const T *) w.r, (const T *) w.q, h->st, h->partials);
		}
		else
			spmv_rowblocks<T, OT, true><<<g1, TPB, 0, h->stream>>>(
				h->nblocks, h->blocks, h->longinfo, (const OT *) h->indptr, h->indices,
				(const T *) w.vh, (const T *) w.p, (T *) w.q, (T *) h->longpart, h->longcnt,
				(const T *) w.r, h->st, h->partials);
		GM_CHECK_LAUNCH();
		if (it == m - 1)
			cg_update<T, true><<<g2, TPB, 0, h->stream>>>(
				h->n4, (T *) w.y, (T *) w.r, (T *) w.p, (const T *) w.q, w.dsq, h->st,
				h->partials);
		else
			cg_update<T, false><<<g2, TPB, 0, h->stream>>>(
				h->n4, (T *) w.y, (T *) w.r, (T *) w.p, (const T *) w.q, w.dsq, h->st,
				h->partials);
		GM_CHECK_LAUNCH();
	}
	return GM_OK;
}

/* rt = b - A x in float64 with the original values; returns |rt| */
template <typename OT>
int
true_residual(SparseHandle *h, CgWork &w, double *norm, char *err, size_t errlen)
{
	CgState		st;
	int			rc = own_spmv<double, OT>(h, h->vals64, w.x, w.rt, err, errlen);

	if (rc != GM_OK)
		return rc;
	residual_from_ax<<<grid_for(h->n, h), TPB, 0, h->stream>>>(h->n, w.b, w.rt, h->st,
																  h->partials);
	GM_CHECK_LAUNCH();
	GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	*norm = sqrt(st.tmp);
	return GM_OK;
}

/* the error of a breakdown (p.Âp <= 0 or not finite) */
int
breakdown_error(const CgState &st, char *err, size_t errlen)
{
	snprintf(err, errlen,
			 "the matrix is not positive definite: p'Ap = %.6g at iteration %d of the "
			 "conjugate gradient", st.pq, st.iter + 1);
	return GM_EINVAL;
}

template <typename T, typename OT>
int
cg_solve_t(SparseHandle *h, const double *b, double *x, const gm_cg_params *prm,
		   const gm_callbacks *cb, gm_cg_result *res, char *err, size_t errlen)
{
	if (h->cgw == nullptr && (h->cgw = new(std::nothrow) CgWork()) == nullptr)
	{
		snprintf(err, errlen, "out of memory");
		return GM_ENOMEM;
	}

	CgWork	   &w = *h->cgw;
	CgSolveGuard guard = {&w};
	const int64_t n = h->n;
	const size_t vb = sizeof(double) * (size_t) h->npad,
				tb = sizeof(T) * (size_t) h->npad;
	const int	m = prm->check_every > 0 ? prm->check_every : DEFAULT_CHECK_EVERY;
	const gm_spmv_impl impl = resolve_impl(h, prm->spmv);
	const bool	use_cusparse = impl == GM_SPMV_CUSPARSE || impl == GM_SPMV_CUSPARSE_ALG2;
	const cusparseSpMVAlg_t alg = cusparse_alg(impl);
	/*
	 * the diagonal layout where the matrix has one (gpumf.spmv = 'own' or
	 * 'auto' resolved to it); 2: with Jacobi, Â's diagonal is 1 and not stored
	 */
	const int	dia = impl != GM_SPMV_OWN || h->ndiag == 0 ? 0
		: prm->preconditioner == GM_PRECOND_JACOBI && h->ndiag_nz < h->ndiag ? 2 : 1;
	/* the diagonal layout iterates fused (cg_fused_dia); GPUMF_CG_FUSED=0 for comparisons */
	const char *fv = getenv("GPUMF_CG_FUSED");
	const bool	fused = dia && !(fv && atoi(fv) == 0);
	bool		use_graph = true;
	double		bn = 0.0,
				target,
				nr,
				last_true;
	int			stall = 0,
				rc;
	CgState		st;

	w.stream = h->stream;
	snprintf(res->device, sizeof(res->device), "%s, %s", h->devname,
			 use_cusparse ? "cuSPARSE SpMV" : dia ? "gpumf's SpMV (diagonal layout)"
			 : "gpumf's SpMV");
	for (int64_t i = 0; i < n; i++)
		bn += b[i] * b[i];
	bn = sqrt(bn);
	target = prm->tolerance * bn;

	if (!w.ready)
	{
		GM_CHECK(gm_dev_malloc(&w.b, vb));
		GM_CHECK(gm_dev_malloc(&w.x, vb));
		GM_CHECK(gm_dev_malloc(&w.s, vb));
		GM_CHECK(gm_dev_malloc(&w.dsq, vb));
		GM_CHECK(gm_dev_malloc(&w.rt, vb));
		GM_CHECK(gm_dev_malloc(&w.y, tb));
		GM_CHECK(gm_dev_malloc(&w.r, tb));
		GM_CHECK(gm_dev_malloc(&w.p, tb));
		GM_CHECK(gm_dev_malloc(&w.q, tb));
		GM_CHECK(cudaHostAlloc((void **) &w.status, 2 * sizeof(CgState), cudaHostAllocDefault));
		GM_CHECK(cudaEventCreateWithFlags(&w.ev[0], cudaEventDisableTiming));
		GM_CHECK(cudaEventCreateWithFlags(&w.ev[1], cudaEventDisableTiming));

		/*
		 * padding zero once: no kernel writes a pad but the 4-wide update,
		 * which keeps it zero (0 + alpha 0)
		 */
		for (void *ptr : {(void *) w.b, (void *) w.x, (void *) w.s, (void *) w.dsq, (void *) w.rt})
			GM_CHECK(cudaMemsetAsync(ptr, 0, vb, h->stream));
		for (void *ptr : {w.y, w.r, w.p, w.q})
			GM_CHECK(cudaMemsetAsync(ptr, 0, tb, h->stream));
		w.ready = true;
	}
	/* Â's values, in the layout this solve uses (allocated on first use) */
	if (!dia && w.vh == nullptr)
	{
		GM_CHECK(gm_dev_malloc(&w.vh, sizeof(T) * (size_t) (h->nnz + PAD)));
		GM_CHECK(cudaMemsetAsync(w.vh, 0, sizeof(T) * (size_t) (h->nnz + PAD), h->stream));
	}
	if (dia && w.vdia == nullptr)
		GM_CHECK(gm_dev_malloc(&w.vdia, sizeof(T) * (size_t) h->ndiag * (size_t) h->npad));
	if (fused && w.r2 == nullptr)
	{
		GM_CHECK(gm_dev_malloc(&w.r2, tb));
		GM_CHECK(gm_dev_malloc(&w.p2, tb));
		GM_CHECK(gm_dev_malloc(&w.q2, tb));
		for (void *ptr : {w.r2, w.p2, w.q2})
			GM_CHECK(cudaMemsetAsync(ptr, 0, tb, h->stream));
	}
	GM_CHECK(cudaMemcpyAsync(w.b, b, sizeof(double) * n, cudaMemcpyHostToDevice, h->stream));
	GM_CHECK(cudaMemcpyAsync(w.x, x, sizeof(double) * n, cudaMemcpyHostToDevice, h->stream));

	/* S and Â */
	jacobi_scaling<OT><<<grid_for(32 * n, h), TPB, 0, h->stream>>>(
		h->n, prm->preconditioner == GM_PRECOND_JACOBI, (const OT *) h->indptr, h->indices,
		h->vals64, w.s, w.dsq);
	GM_CHECK_LAUNCH();
	if (dia)
	{
		GM_CHECK(cudaMemsetAsync(w.vdia, 0, sizeof(T) * (size_t) h->ndiag * (size_t) h->npad,
								 h->stream));
		dia_fill<T, OT><<<grid_for(32 * n, h), TPB, 0, h->stream>>>(
			h->n, h->npad, (const OT *) h->indptr, h->indices, h->vals64, w.s,
			dia == 2 ? h->ndiag_nz : h->ndiag, dia == 2 ? h->dia_off_nz : h->dia_off,
			(T *) w.vdia);
	}
	else
		scale_values<T, OT><<<grid_for(32 * n, h), TPB, 0, h->stream>>>(
			h->n, (const OT *) h->indptr, h->indices, h->vals64, w.s, (T *) w.vh);
	GM_CHECK_LAUNCH();
	if (use_cusparse)
	{
		if (h->idx64)
		{
			snprintf(err, errlen, "cuSPARSE SpMV is used here with 32-bit indices only: set "
					 "gpumf.spmv = 'own' for %lld nonzeros", (long long) h->nnz);
			return GM_ENOTSUP;
		}
		GM_CHECK(cusparseCreateCsr(&w.mat, n, n, h->nnz, h->indptr, h->indices, w.vh,
								   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
								   CUSPARSE_INDEX_BASE_ZERO, cuda_type(h->prec)));
		h->sp_for = nullptr;	/* a new descriptor may reuse a freed one's address */
	}

	/* the initial residual */
	if ((rc = true_residual<OT>(h, w, &nr, err, errlen)) != GM_OK)
		return rc;
	last_true = nr;
	res->converged = nr <= target;
	res->replacements = 0;
	res->stagnated = 0;
	st = CgState();
	st.target2 = target * target;
	st.max_iter = prm->max_iterations;
	st.done = 1;				/* cg_restart clears it */
	GM_CHECK(cudaMemcpyAsync(h->st, &st, sizeof(st), cudaMemcpyHostToDevice, h->stream));
	cg_restart<T><<<grid_for(n, h), TPB, 0, h->stream>>>(n, w.s, w.rt, (T *) w.r, (T *) w.p,
														  (T *) w.y, h->st, h->partials);
	GM_CHECK_LAUNCH();
	if (fused && (rc = fused_first<T>(h, w, dia, 0, err, errlen)) != GM_OK)
		return rc;
	GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	/* the fused iteration's first product may already have met p.Âp <= 0 */
	if (st.done && st.reason == REASON_BREAKDOWN && prm->max_iterations > 0)
		return breakdown_error(st, err, errlen);

	/* one batch as a graph (the first one, with cuSPARSE, is run directly: it preprocesses) */
	if (use_cusparse)
	{
		if ((rc = enqueue_batch<T, OT>(h, w, m, true, alg, 0, false, err, errlen)) != GM_OK)
			return rc;
		GM_CHECK(cudaStreamSynchronize(h->stream));
		GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
		GM_CHECK(cudaStreamSynchronize(h->stream));
		if (st.done && st.reason == REASON_BREAKDOWN)
			return breakdown_error(st, err, errlen);
	}
	/* launch shapes are asked for outside the capture */
	(void) spmv_grid<T, OT, true>(h);
	(void) dia_grid<T, true, true, 1>(h);
	(void) dia_grid<T, true, true, 2>(h);
	(void) dia_grid<T, true, true, 4>(h);
	(void) dia_grid<T, true, false, 1>(h);
	(void) dia_grid<T, true, false, 2>(h);
	(void) dia_grid<T, true, false, 4>(h);
	fused_grids<T>(h);
	(void) update_grid<T>(h);
	(void) spmv_grid<double, OT, false>(h);
	if (cudaStreamBeginCapture(h->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess)
	{
		rc = enqueue_batch<T, OT>(h, w, m, use_cusparse, alg, dia, fused, err, errlen);
		if (cudaStreamEndCapture(h->stream, &w.graph) != cudaSuccess || rc != GM_OK ||
			cudaGraphInstantiate(&w.exec, w.graph, 0) != cudaSuccess)
		{
			use_graph = false;
			(void) cudaGetLastError();	/* capture failures are not errors here */
		}
	}
	else
	{
		use_graph = false;
		(void) cudaGetLastError();
	}

	while (!res->converged && !st.done && prm->max_iterations > 0)
	{
		int			slot = 0;

		/* two batches in flight; read the older one's status */
		for (int k = 0; k < 2; k++)
		{
			if (use_graph)
				GM_CHECK(cudaGraphLaunch(w.exec, h->stream));
			else if ((rc = enqueue_batch<T, OT>(h, w, m, use_cusparse, alg, dia,
												fused, err, errlen)) != GM_OK)
				return rc;
			GM_CHECK(cudaMemcpyAsync(&w.status[k], h->st, sizeof(CgState),
									 cudaMemcpyDeviceToHost, h->stream));
			GM_CHECK(cudaEventRecord(w.ev[k], h->stream));
		}
		for (;;)
		{
			GM_CHECK(cudaEventSynchronize(w.ev[slot]));
			st = w.status[slot];
			if (st.done)
				break;
			if (cb && cb->should_stop && cb->should_stop(cb->arg))
			{
				snprintf(err, errlen, "the conjugate-gradient solve was canceled");
				return GM_ECANCELED;
			}
			if (use_graph)
				GM_CHECK(cudaGraphLaunch(w.exec, h->stream));
			else if ((rc = enqueue_batch<T, OT>(h, w, m, use_cusparse, alg, dia,
												fused, err, errlen)) != GM_OK)
				return rc;
			GM_CHECK(cudaMemcpyAsync(&w.status[slot], h->st, sizeof(CgState),
									 cudaMemcpyDeviceToHost, h->stream));
			GM_CHECK(cudaEventRecord(w.ev[slot], h->stream));
			slot ^= 1;
		}
		/* done: the batch still queued returns at once; then the final state */
		GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
		GM_CHECK(cudaStreamSynchronize(h->stream));
		if (st.reason == REASON_BREAKDOWN)
			return breakdown_error(st, err, errlen);
		if (st.reason != REASON_CONVERGED)
			break;				/* iterations spent */

		/* the recurrence says converged: ask the float64 x */
		cg_fold<T><<<grid_for(n, h), TPB, 0, h->stream>>>(n, w.s, (T *) w.y, w.x);
		GM_CHECK_LAUNCH();
		if ((rc = true_residual<OT>(h, w, &nr, err, errlen)) != GM_OK)
			return rc;
		if (nr <= target)
		{
			res->converged = 1;
			break;
		}
		res->replacements++;
		stall = nr > 0.5 * last_true ? stall + 1 : 0;
		last_true = nr;
		{
			/* the fused iteration's current buffers are those of index iter & 1 */
			const int	cur = fused ? (st.iter & 1) : 0;

			cg_restart<T><<<grid_for(n, h), TPB, 0, h->stream>>>(
				n, w.s, w.rt, (T *) (cur ? w.r2 : w.r), (T *) (cur ? w.p2 : w.p), (T *) w.y,
				h->st, h->partials);
			GM_CHECK_LAUNCH();
			if (fused && (rc = fused_first<T>(h, w, dia, cur, err, errlen)) != GM_OK)
				return rc;
		}
		GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
		GM_CHECK(cudaStreamSynchronize(h->stream));
		if (st.done && st.reason == REASON_BREAKDOWN)
			return breakdown_error(st, err, errlen);
		if ((stall >= STALL_LIMIT && prm->tolerance > 0.0) || st.rr == 0.0)
		{
			res->stagnated = 1;
			break;
		}
		if (st.iter >= prm->max_iterations)
			break;
	}
	cg_fold<T><<<grid_for(n, h), TPB, 0, h->stream>>>(n, w.s, (T *) w.y, w.x);
	GM_CHECK_LAUNCH();
	GM_CHECK(cudaMemcpyAsync(x, w.x, sizeof(double) * n, cudaMemcpyDeviceToHost, h->stream));
	if ((rc = true_residual<OT>(h, w, &nr, err, errlen)) != GM_OK)
		return rc;
	res->iterations = st.iter;
	res->residual = bn > 0 ? nr / bn : nr;
	res->converged = nr <= target;
	return GM_OK;
}

/* ------------------------------------------------------------ the ops */

void
sparse_destroy(void *vh)
{
	SparseHandle *h = (SparseHandle *) vh;

	if (h == NULL)
		return;
	if (h->stream)
		cudaStreamSynchronize(h->stream);
	delete h->cgw;
	if (h->vx)
		cusparseDestroyDnVec(h->vx);
	if (h->vy)
		cusparseDestroyDnVec(h->vy);
	if (h->mat)
		cusparseDestroySpMat(h->mat);
	if (h->sp)
		cusparseDestroy(h->sp);
	for (void *p : {h->indptr, (void *) h->indices, (void *) h->vals64, (void *) h->vals32,
			(void *) h->blocks, (void *) h->longinfo, h->longpart, (void *) h->longcnt,
			(void *) h->dia_off, (void *) h->dia_off_nz, h->dia_vals,
			(void *) h->partials, (void *) h->st, h->spbuf, h->dx, h->dy, (void *) h->dx64})
		if (p)
			gm_dev_free(p);
	if (h->stream)
		cudaStreamDestroy(h->stream);
	delete h;
}

int
sparse_create_inner(SparseHandle *h, const gm_spmat *A, gm_precision prec, char *device,
					size_t devlen, char *err, size_t errlen)
{
	std::vector<RowBlock> blocks;
	std::vector<LongInfo> longs;
	cudaDeviceProp prop;
	int			dev = 0;
	const size_t nz = (size_t) A->nnz + PAD;

	{
		/*
		 * float64 SpMV: 60% of the unified L1/shared memory as shared (four
		 * blocks of 24.8 KB), the rest L1 for the x gathers; measured on an
		 * H100: Poisson fp64 SpMV 2160 -> 2550 GB/s, power-law fp64 1035 ->
		 * 1260 GB/s.  float32 keeps the driver's choice (8 blocks of 16.6 KB;
		 * a forced split was no faster).  GPUMF_SPMV_CARVEOUT (percent
		 * shared) overrides both, for experiments.
		 */
		static bool carveout_set = false;
		const char *cv = getenv("GPUMF_SPMV_CARVEOUT");
		int			pct = cv ? atoi(cv) : 60;

		if (!carveout_set)
		{
			carveout_set = true;
			cudaFuncSetAttribute(spmv_rowblocks<double, int, false>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
			cudaFuncSetAttribute(spmv_rowblocks<double, int, true>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
			cudaFuncSetAttribute(spmv_rowblocks<double, long long, false>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
			cudaFuncSetAttribute(spmv_rowblocks<double, long long, true>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
			if (cv)
			{
				cudaFuncSetAttribute(spmv_rowblocks<float, int, false>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
				cudaFuncSetAttribute(spmv_rowblocks<float, int, true>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
				cudaFuncSetAttribute(spmv_rowblocks<float, long long, false>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
				cudaFuncSetAttribute(spmv_rowblocks<float, long long, true>, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
			}
			(void) cudaGetLastError();
		}
	}
	h->n = A->n;
	h->nnz = A->nnz;
	h->npad = (A->n + 3) / 4 * 4;
	h->n4 = h->npad / 4;
	h->prec = prec;
	h->idx64 = A->nnz >= INT32_MAX;
	GM_CHECK(cudaGetDevice(&dev));
	GM_CHECK(cudaGetDeviceProperties(&prop, dev));
	snprintf(h->devname, sizeof(h->devname), "%s", prop.name);
	if (device && devlen)
		snprintf(device, devlen, "%s", prop.name);
	h->nsm = prop.multiProcessorCount;
	h->max_grid = 16 * h->nsm;
	GM_CHECK(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));

	build_row_blocks(A->indptr, A->n, blocks, longs, &h->nlongpart);
	h->nblocks = (int) blocks.size();

	if (h->idx64)
	{
		GM_CHECK(gm_dev_malloc(&h->indptr, sizeof(int64_t) * (size_t) (A->n + 1)));
		GM_CHECK(cudaMemcpy(h->indptr, A->indptr, sizeof(int64_t) * (size_t) (A->n + 1),
							cudaMemcpyHostToDevice));
	}
	else
	{
		std::vector<int> ip32((size_t) A->n + 1);

		for (int64_t i = 0; i <= A->n; i++)
			ip32[i] = (int) A->indptr[i];
		GM_CHECK(gm_dev_malloc(&h->indptr, sizeof(int) * (size_t) (A->n + 1)));
		GM_CHECK(cudaMemcpy(h->indptr, ip32.data(), sizeof(int) * (size_t) (A->n + 1),
							cudaMemcpyHostToDevice));
	}
	GM_CHECK(gm_dev_malloc(&h->indices, sizeof(int) * nz));
	GM_CHECK(cudaMemset(h->indices, 0, sizeof(int) * nz));
	GM_CHECK(cudaMemcpy(h->indices, A->indices, sizeof(int) * (size_t) A->nnz,
						cudaMemcpyHostToDevice));
	GM_CHECK(gm_dev_malloc(&h->vals64, sizeof(double) * nz));
	GM_CHECK(cudaMemset(h->vals64, 0, sizeof(double) * nz));
	GM_CHECK(cudaMemcpy(h->vals64, A->values, sizeof(double) * (size_t) A->nnz,
						cudaMemcpyHostToDevice));
	if (prec == GM_PRECISION_SINGLE)
	{
		GM_CHECK(gm_dev_malloc(&h->vals32, sizeof(float) * nz));
		convert<double, float><<<grid_for((int64_t) nz, h), TPB, 0, h->stream>>>(
			(int64_t) nz, h->vals64, h->vals32);
		GM_CHECK_LAUNCH();
	}
	{
		int			off[DIA_MAX],
					offnz[DIA_MAX];
		const size_t ts = prec == GM_PRECISION_SINGLE ? sizeof(float) : sizeof(double);
		const int	nd = find_diagonals(A, ts, off);

		if (nd > 0)
		{
			int			k = 0;

			for (int d = 0; d < nd; d++)
				if (off[d] != 0)
					offnz[k++] = off[d];
			h->ndiag = nd;
			h->ndiag_nz = k;
			{
				/* rows per thread; GPUMF_DIA_ROWS (1, 2, 4) overrides both, for experiments */
				const char *rv = getenv("GPUMF_DIA_ROWS");
				const int	want = rv ? atoi(rv)
					: prec == GM_PRECISION_SINGLE ? DIA_ROWS_SINGLE : DIA_ROWS_DOUBLE;

				h->dia_rows = want == 4 || want == 2 ? want : 1;
				h->fused_rows = rv ? h->dia_rows : FUSED_ROWS;
			}
			GM_CHECK(gm_dev_malloc((void **) &h->dia_off, sizeof(int) * DIA_MAX));
			GM_CHECK(gm_dev_malloc((void **) &h->dia_off_nz, sizeof(int) * DIA_MAX));
			GM_CHECK(cudaMemcpy(h->dia_off, off, sizeof(int) * nd, cudaMemcpyHostToDevice));
			if (k > 0)
				GM_CHECK(cudaMemcpy(h->dia_off_nz, offnz, sizeof(int) * k,
									cudaMemcpyHostToDevice));
			GM_CHECK(gm_dev_malloc(&h->dia_vals, ts * (size_t) nd * (size_t) h->npad));
			GM_CHECK(cudaMemsetAsync(h->dia_vals, 0, ts * (size_t) nd * (size_t) h->npad,
									 h->stream));
			if (prec == GM_PRECISION_SINGLE && h->idx64)
				dia_fill<float, long long><<<grid_for(32 * (int64_t) h->n, h), TPB, 0, h->stream>>>(
					h->n, h->npad, (const long long *) h->indptr, h->indices, h->vals64, nullptr,
					nd, h->dia_off, (float *) h->dia_vals);
			else if (prec == GM_PRECISION_SINGLE)
				dia_fill<float, int><<<grid_for(32 * (int64_t) h->n, h), TPB, 0, h->stream>>>(
					h->n, h->npad, (const int *) h->indptr, h->indices, h->vals64, nullptr,
					nd, h->dia_off, (float *) h->dia_vals);
			else if (h->idx64)
				dia_fill<double, long long><<<grid_for(32 * (int64_t) h->n, h), TPB, 0, h->stream>>>(
					h->n, h->npad, (const long long *) h->indptr, h->indices, h->vals64, nullptr,
					nd, h->dia_off, (double *) h->dia_vals);
			else
				dia_fill<double, int><<<grid_for(32 * (int64_t) h->n, h), TPB, 0, h->stream>>>(
					h->n, h->npad, (const int *) h->indptr, h->indices, h->vals64, nullptr,
					nd, h->dia_off, (double *) h->dia_vals);
			GM_CHECK_LAUNCH();
		}
	}
	GM_CHECK(gm_dev_malloc(&h->blocks, sizeof(RowBlock) * std::max<size_t>(1, blocks.size())));
	GM_CHECK(cudaMemcpy(h->blocks, blocks.data(), sizeof(RowBlock) * blocks.size(),
						cudaMemcpyHostToDevice));
	GM_CHECK(gm_dev_malloc(&h->longinfo, sizeof(LongInfo) * std::max<size_t>(1, longs.size())));
	if (!longs.empty())
		GM_CHECK(cudaMemcpy(h->longinfo, longs.data(), sizeof(LongInfo) * longs.size(),
							cudaMemcpyHostToDevice));
	GM_CHECK(gm_dev_malloc(&h->longpart, sizeof(double) * (size_t) std::max(1, h->nlongpart)));
	GM_CHECK(gm_dev_malloc(&h->longcnt, sizeof(unsigned) * std::max<size_t>(1, longs.size())));
	GM_CHECK(cudaMemset(h->longcnt, 0, sizeof(unsigned) * std::max<size_t>(1, longs.size())));
	GM_CHECK(gm_dev_malloc(&h->partials, sizeof(double) * 5 * (size_t) h->max_grid));
	GM_CHECK(gm_dev_malloc(&h->st, sizeof(CgState)));
	GM_CHECK(cudaMemset(h->st, 0, sizeof(CgState)));

	/* cuSPARSE on the handle's values */
	if (cusparseCreate(&h->sp) != CUSPARSE_STATUS_SUCCESS)
	{
		h->sp = nullptr;
		snprintf(err, errlen, "cusparseCreate failed");
		return GM_EDEVICE;
	}
	GM_CHECK(cusparseSetStream(h->sp, h->stream));
	GM_CHECK(gm_dev_malloc(&h->dx, sizeof(double) * (size_t) h->npad));
	GM_CHECK(gm_dev_malloc(&h->dy, sizeof(double) * (size_t) h->npad));
	GM_CHECK(gm_dev_malloc(&h->dx64, sizeof(double) * (size_t) h->npad));
	GM_CHECK(cusparseCreateDnVec(&h->vx, h->n, h->dx, cuda_type(prec)));
	GM_CHECK(cusparseCreateDnVec(&h->vy, h->n, h->dy, cuda_type(prec)));
	if (!h->idx64)
		GM_CHECK(cusparseCreateCsr(&h->mat, h->n, h->n, h->nnz, h->indptr, h->indices,
								   prec == GM_PRECISION_SINGLE ? (void *) h->vals32
								   : (void *) h->vals64,
								   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
								   CUSPARSE_INDEX_BASE_ZERO, cuda_type(prec)));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	return GM_OK;
}

int
sparse_create(void **out, const gm_spmat *A, gm_precision prec, char *device, size_t devlen,
			  char *err, size_t errlen)
{
	SparseHandle *h = new(std::nothrow) SparseHandle();
	int			rc;

	*out = nullptr;
	if (h == nullptr)
	{
		snprintf(err, errlen, "out of memory");
		return GM_ENOMEM;
	}
	rc = sparse_create_inner(h, A, prec, device, devlen, err, errlen);
	if (rc != GM_OK)
	{
		sparse_destroy(h);
		return rc;
	}
	*out = h;
	return GM_OK;
}

int
sparse_spmv_device(void *vh, gm_spmv_impl impl, const void *x, void *y, char *err,
				   size_t errlen)
{
	SparseHandle *h = (SparseHandle *) vh;

	if (h->prec == GM_PRECISION_SINGLE)
		return spmv_device_t<float>(h, impl, (const float *) x, (float *) y, err, errlen);
	return spmv_device_t<double>(h, impl, (const double *) x, (double *) y, err, errlen);
}

int
sparse_spmv(void *vh, gm_spmv_impl impl, const double *x, double *y, char *err, size_t errlen)
{
	SparseHandle *h = (SparseHandle *) vh;
	int			rc;
	void	   *dx = h->prec == GM_PRECISION_SINGLE ? h->dx : (void *) h->dx64;

	GM_CHECK(cudaMemcpyAsync(h->dx64, x, sizeof(double) * h->n, cudaMemcpyHostToDevice,
							 h->stream));
	if (h->prec == GM_PRECISION_SINGLE)
	{
		convert<double, float><<<grid_for(h->n, h), TPB, 0, h->stream>>>(h->n, h->dx64,
																		   (float *) h->dx);
		GM_CHECK_LAUNCH();
	}
	if ((rc = sparse_spmv_device(h, impl, dx, h->dy, err, errlen)) != GM_OK)
		return rc;
	if (h->prec == GM_PRECISION_SINGLE)
	{
		convert<float, double><<<grid_for(h->n, h), TPB, 0, h->stream>>>(h->n, (float *) h->dy,
																		   h->dx64);
		GM_CHECK_LAUNCH();
		GM_CHECK(cudaMemcpyAsync(y, h->dx64, sizeof(double) * h->n, cudaMemcpyDeviceToHost,
								 h->stream));
	}
	else
		GM_CHECK(cudaMemcpyAsync(y, h->dy, sizeof(double) * h->n, cudaMemcpyDeviceToHost,
								 h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	return GM_OK;
}

void *
sparse_stream(void *vh)
{
	return (void *) ((SparseHandle *) vh)->stream;
}

int
sparse_cg(void *vh, const double *b, double *x, const gm_cg_params *p,
		  const gm_callbacks *cb, gm_cg_result *res, char *err, size_t errlen)
{
	SparseHandle *h = (SparseHandle *) vh;

	if (p->precision != h->prec)
	{
		snprintf(err, errlen, "the matrix was uploaded for another precision");
		return GM_EINVAL;
	}
	if (h->prec == GM_PRECISION_SINGLE)
		return h->idx64 ? cg_solve_t<float, long long>(h, b, x, p, cb, res, err, errlen)
			: cg_solve_t<float, int>(h, b, x, p, cb, res, err, errlen);
	return h->idx64 ? cg_solve_t<double, long long>(h, b, x, p, cb, res, err, errlen)
		: cg_solve_t<double, int>(h, b, x, p, cb, res, err, errlen);
}

const gm_linalg_ops linalg_ops = {
	GM_LINALG_ABI_VERSION,
	"cuda",
	sparse_create,
	sparse_spmv,
	sparse_spmv_device,
	sparse_stream,
	sparse_cg,
	sparse_destroy,
	gm_cuda_ols_create,
	gm_cuda_ols_fold,
	gm_cuda_ols_timing,
	gm_cuda_ols_destroy,
};

}								/* namespace */

extern "C" const gm_linalg_ops *
gm_cuda_linalg_ops(void)
{
	return &linalg_ops;
}
