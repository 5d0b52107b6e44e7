/*
 * sparse.cuh: what the sparse half of the module's linear algebra shares
 * (spmv.cu, pcg.cu, sparse_handle.cu; internal to the CUDA module): the
 * launch constants, the row blocks, the CG's device scalars, the handle of
 * an uploaded matrix, the warp, block and grid reductions and the CG's
 * scalar steps, and the functions one file calls in another (namespace
 * gm_sparse).  Every CUDA and cuSPARSE call goes through GM_CHECK
 * (common.cuh).
 */
#ifndef GM_SPARSE_CUH
#define GM_SPARSE_CUH

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

namespace gm_sparse
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

/* spmv.cu */
void		build_row_blocks(const int64_t *indptr, int n, std::vector<RowBlock> &blocks,
							 std::vector<LongInfo> &longs, int *nlongpart);
int			find_diagonals(const gm_spmat *A, size_t ts, int *off);
cudaDataType cuda_type(gm_precision p);
int			cusparse_spmv(SparseHandle *h, cusparseSpMatDescr_t mat, cusparseSpMVAlg_t alg,
						  const void *x, void *y, char *err, size_t errlen);
cusparseSpMVAlg_t cusparse_alg(gm_spmv_impl impl);
gm_spmv_impl resolve_impl(SparseHandle *h, gm_spmv_impl impl);
template <typename T>
int			spmv_device_t(SparseHandle *h, gm_spmv_impl impl, const T *x, T *y, char *err,
						  size_t errlen);
int			sparse_spmv_device(void *vh, gm_spmv_impl impl, const void *x, void *y, char *err,
							   size_t errlen);
int			sparse_spmv(void *vh, gm_spmv_impl impl, const double *x, double *y, char *err,
						size_t errlen);

/* pcg.cu */
void		cg_work_free(CgWork *w);
int			sparse_cg(void *vh, const double *b, double *x, const gm_cg_params *p,
					  const gm_callbacks *cb, gm_cg_result *res, char *err, size_t errlen);

}								/* namespace gm_sparse */

namespace
{

using namespace gm_sparse;

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

/* ------------------------------------------------------------ host helpers */

inline int
grid_for(int64_t work, const SparseHandle *h)
{
	int64_t		g = (work + TPB - 1) / TPB;

	return (int) std::max<int64_t>(1, std::min<int64_t>(g, h->max_grid));
}

template <typename T>
const T *
hvals(const SparseHandle *h)
{
	return std::is_same<T, double>::value ? (const T *) h->vals64 : (const T *) h->vals32;
}

}								/* namespace */

#endif							/* GM_SPARSE_CUH */
