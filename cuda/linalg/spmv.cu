/*
 * spmv.cu: y = A x on the GPU for the module's linear algebra: the row
 * blocks and the diagonal layout of an uploaded matrix (the kernels are
 * spmv_kernels.cuh's), cuSPARSE's cusparseSpMV behind the same calls, the
 * choice between them (gm_spmv_impl; GM_SPMV_AUTO times both once per
 * matrix), and the handle's SpMV entry points of gm_linalg_ops.
 */
#include "spmv_kernels.cuh"

namespace gm_sparse
{

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

template int spmv_device_t<float>(SparseHandle *h, gm_spmv_impl impl, const float *x, float *y,
								  char *err, size_t errlen);
template int spmv_device_t<double>(SparseHandle *h, gm_spmv_impl impl, const double *x,
								   double *y, char *err, size_t errlen);

/* ------------------------------------------------------------ the ops */

/* y = A x on device vectors of the handle's precision (gm_linalg_ops.spmv_device) */
int
sparse_spmv_device(void *vh, gm_spmv_impl impl, const void *x, void *y, char *err,
				   size_t errlen)
{
	SparseHandle *h = (SparseHandle *) vh;

	if (h->prec == GM_PRECISION_SINGLE)
		return spmv_device_t<float>(h, impl, (const float *) x, (float *) y, err, errlen);
	return spmv_device_t<double>(h, impl, (const double *) x, (double *) y, err, errlen);
}

/* y = A x on host float64 vectors (gm_linalg_ops.spmv) */
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

}								/* namespace gm_sparse */
