/*
 * spmv_kernels.cuh: the SpMV kernels of the GPU's sparse linear algebra and
 * their launches, used by spmv.cu (y = A x) and, in their CG mode, by
 * pcg.cu (q = A p with the iteration's dot products); internal to the CUDA
 * module.
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
 */
#ifndef GM_SPMV_KERNELS_CUH
#define GM_SPMV_KERNELS_CUH

#include "sparse.cuh"

namespace
{

/* ------------------------------------------------------------ kernels */

/*
 * y = A x over row blocks (see the top of the file).  CG: x is p, y is q,
 * r the residual; p.q, r.q, q.q are summed and the last block sets alpha
 * and beta.  A persistent grid: block b takes row blocks b, b + grid, ...
 */
template <typename T, typename OT, bool CG>
__global__ void __launch_bounds__(TPB, GM_MIN_BLOCKS(TPB, 8))
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

template <typename A, typename B>
__global__ void __launch_bounds__(TPB)
convert(int64_t n, const A *__restrict__ a, B *b)
{
	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
		b[i] = (B) a[i];
}

/* ------------------------------------------------------------ launches */

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

}								/* namespace */

#endif							/* GM_SPMV_KERNELS_CUH */
