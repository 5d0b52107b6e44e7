/*
 * sparse_handle.cu: a sparse matrix uploaded to the GPU for the module's
 * linear algebra (the handle of sparse.cuh: CSR arrays in the working
 * precision, the row blocks, the diagonal layout where it pays, the
 * cuSPARSE descriptors), created and destroyed, and the module's table of
 * linear-algebra operations (gm_cuda_linalg_ops): the SpMV entry points are
 * spmv.cu's, the CG pcg.cu's, least squares ols.cu's.
 */
#include "spmv_kernels.cuh"

namespace
{

/* Free everything of a handle (gm_linalg_ops.destroy). */
void
sparse_destroy(void *vh)
{
	SparseHandle *h = (SparseHandle *) vh;

	if (h == NULL)
		return;
	if (h->stream)
		cudaStreamSynchronize(h->stream);
	cg_work_free(h->cgw);
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

/* Upload A and build its layouts into h (sparse_create frees h on an error). */
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

/* Upload A (gm_linalg_ops.create). */
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

/* The handle's CUDA stream (gm_linalg_ops.stream). */
void *
sparse_stream(void *vh)
{
	return (void *) ((SparseHandle *) vh)->stream;
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
