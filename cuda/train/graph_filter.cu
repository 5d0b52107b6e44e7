/*
 * graph_filter.cu: the graph-filter recommender (gm_algo.h,
 * GM_ALG_GRAPH_FILTER) on the GPU, the table gm_cuda_graph_filter_ops.  The
 * model, the order of the steps and the arithmetic are those of
 * src/core/train/graph_filter.c (read its header for the math):
 *
 *  - create: Rn = D_U^-1/2 R D_I^-1/2 on R's entries in both orders, its
 *    squared Frobenius norm and the items' degree scales d_i^beta and
 *    d_i^-beta are computed on the host (the CPU's expressions, so the same
 *    floats) and uploaded with R's and Rt's structure; the seeded Gaussian
 *    start Z (gm_gf_gauss) is drawn on the GPU and orthonormalized.
 *  - sweep 0 (users):  Y = Rn Z, skipped while Y is fresh for Z;
 *    sweep 1 (items):  Zn = Rn^T Y; end_sweep(1) swaps Z and Zn and
 *    orthonormalizes Z by the shifted CholeskyQR of the CPU: G = Z^T Z
 *    (cublasSsyrk, float), to double with both triangles, + s I (s = GM_GF_SHIFT of
 *    the largest diagonal element), L = potrf(G) (cuSOLVER, double), Z = Z L^-T
 *    (cublasStrsm with L as float).  Both products are cuSPARSE SpMMs
 *    (CSR, row-major dense); a sweep's whole product is launched by its
 *    first run() slice (or by end_sweep when it had no rows), later slices
 *    have nothing left to do.
 *  - evaluate: loss = 1 - ||Rn Z||_F^2 / ||Rn||_F^2 (float64 sums), rmse NaN.
 *  - download: CholeskyQR once more, Y = Rn Z, M = Y^T Y (syrk, to double),
 *    M = E diag(w) E^T (cusolverDnDsyevd, ascending), V = Z E[:, top
 *    factors, descending] (cublasSgemm), h = gm_gf_filter(clamp(w, 0, 1))
 *    on the host, q_i = d_i^beta V_i and p_u = (sum_{i in u} d_i^-beta V_i)
 *    o h by two small kernels; X, Y (factors columns, no padding) and h go
 *    back to the host.  An eigenvector's sign is the solver's choice (LAPACK
 *    and cuSOLVER may differ), which flips a column of both X and Y: the
 *    scores p_u . q_i do not change.
 *
 * Layouts: every dense matrix is row-major (Z: ni x l, Y: nu x l), i.e. for
 * cuBLAS a column-major l x n matrix (Z^T); the l x l matrices are
 * column-major (symmetric, or the Cholesky factor in the lower triangle).
 *
 * Limits: cuSPARSE's CSR takes one index type for the row offsets and the
 * columns, and the columns are int32 here, so the row offsets are converted
 * to int32: a matrix of 2^31 or more entries is refused with GM_ENOTSUP.
 * One device (device 0); reset is not supported (the loop creates anew).
 */
#include "common.cuh"
#include "gm_core.h"			/* gm_csr_normalized (csr.c is linked into the module) */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define GF_THREADS		256

typedef struct gf_gpu
{
	int32_t		nu,
				ni;
	int64_t		nnz;
	int			d;				/* factors */
	int			l;				/* columns of the subspace */
	int			threads;		/* host threads for the set-up loops */
	double		alpha;
	double		frob2;			/* ||Rn||_F^2 */
	const int64_t *ptr_h[2];	/* host row pointers of R and Rt (begin_sweep) */

	/* Rn on the device: [0] R's order (users x items), [1] Rt's (items x users) */
	int32_t    *ip[2];			/* n + 1 row offsets, int32 */
	int32_t    *ix[2];			/* nnz columns */
	float	   *val[2];			/* nnz values 1 / sqrt(d_u d_i) */
	float	   *iscale_q;		/* ni: d_i^beta (0 for an item without users) */
	float	   *iscale_x;		/* ni: d_i^-beta (0 likewise) */

	float	   *zb[2];			/* ni x l each: Z and Zn (P Z, then V in download) */
	int			zc;				/* zb[zc] is Z */
	float	   *Y;				/* nu x l: Rn Z */
	float	   *Gf;				/* l x l float: the Gram, then the Cholesky factor */
	double	   *Gd;				/* l x l double */
	double	   *w;				/* l eigenvalues */
	float	   *E;				/* l x factors, row-major */
	float	   *hf;				/* factors: the filter */
	float	   *Xo;				/* nu x factors: the user factors */
	float	   *Qo;				/* ni x factors: the item factors */
	double	   *dsum;			/* [0] sum of squares, [1] trace */
	int		   *dinfo;			/* cuSOLVER's info */
	double	   *swork;			/* cuSOLVER's work (potrf and syevd) */
	int			lwork;
	void	   *spbuf;			/* cuSPARSE's SpMM buffer */
	cusparseSpMMAlg_t spalg;

	int			y_fresh;		/* Y = Rn Z for the current Z */
	int			pending;		/* the begun sweep's product is still to launch */

	cudaStream_t stream;
	cublasHandle_t blas;
	cusparseHandle_t sp;
	cusolverDnHandle_t sol;
	cusparseSpMatDescr_t A[2];
	cusparseDnMatDescr_t dz[2];
	cusparseDnMatDescr_t dy;
	int			have_stream,
				have_blas,
				have_sp,
				have_sol,
				have_A[2],
				have_dz[2],
				have_dy;
} gf_gpu;

/* ------------------------------------------------------------ kernels */

static inline unsigned
gf_blocks(int64_t n)
{
	int64_t		b = (n + GF_THREADS - 1) / GF_THREADS;

	if (b < 1)
		b = 1;
	if (b > 65535L * 32)
		b = 65535L * 32;
	return (unsigned) b;
}

__device__ __forceinline__ double
gf_warp_sum(double v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Z (n = rows x l, row-major) = the seeded Gaussian start, gm_gf_gauss(seed, row, column) */
__global__ void
gf_gauss_start(float *Z, size_t n, int l, uint64_t seed)
{
	for (size_t e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
		 e += (size_t) gridDim.x * blockDim.x)
		Z[e] = gm_gf_gauss(seed, (int64_t) (e / (size_t) l), (int64_t) (e % (size_t) l));
}

/* Gd (l x l, both triangles) = the lower triangle of the float Gram Gf, in double */
__global__ void
gf_gram_to_double(const float *__restrict__ Gf, double *__restrict__ Gd, int l)
{
	const int64_t n = (int64_t) l * l;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
		 e += (int64_t) gridDim.x * blockDim.x)
	{
		int			r = (int) (e % l),
					c = (int) (e / l);

		Gd[e] = (double) (r >= c ? Gf[r + (int64_t) c * l] : Gf[c + (int64_t) r * l]);
	}
}

/*
 * One block: tr = trace(Gd) into out[0]; then Gd += s I with s = mult *
 * GM_GF_SHIFT times the largest diagonal element (1 when it is not
 * positive), as the CPU does.  The host checks tr for finiteness.
 */
__global__ void
__launch_bounds__(GF_THREADS)
gf_trace_shift(double *Gd, int l, double *out, double mult)
{
	__shared__ double part[GF_THREADS / 32];
	__shared__ double partmax[GF_THREADS / 32];
	__shared__ double shift;
	double		t = 0.0,
				mx = 0.0;

	for (int i = threadIdx.x; i < l; i += blockDim.x)
	{
		double		g = Gd[i + (int64_t) i * l];

		t += g;
		mx = fmax(mx, g);
	}
	t = gf_warp_sum(t);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
	if ((threadIdx.x & 31) == 0)
	{
		part[threadIdx.x >> 5] = t;
		partmax[threadIdx.x >> 5] = mx;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		tr = 0.0,
					m = 0.0;

		for (int w = 0; w < (int) (blockDim.x >> 5); w++)
		{
			tr += part[w];
			m = fmax(m, partmax[w]);
		}
		out[0] = tr;
		shift = m > 0 ? mult * GM_GF_SHIFT * m : 1.0;
	}
	__syncthreads();
	for (int i = threadIdx.x; i < l; i += blockDim.x)
		Gd[i + (int64_t) i * l] += shift;
}

/* Lf = the lower triangle of Gd as float, zeros above */
__global__ void
gf_lower_to_float(const double *__restrict__ Gd, float *__restrict__ Lf, int l)
{
	const int64_t n = (int64_t) l * l;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
		 e += (int64_t) gridDim.x * blockDim.x)
	{
		int			r = (int) (e % l),
					c = (int) (e / l);

		Lf[e] = r >= c ? (float) Gd[e] : 0.0f;
	}
}

/* out[0] += sum x^2 over n floats, in float64 */
__global__ void
__launch_bounds__(GF_THREADS)
gf_sumsq(const float *__restrict__ x, int64_t n, double *out)
{
	__shared__ double part[GF_THREADS / 32];
	double		t = 0.0;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
		 e += (int64_t) gridDim.x * blockDim.x)
		t += (double) x[e] * x[e];
	t = gf_warp_sum(t);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = t;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		s = 0.0;

		for (int w = 0; w < (int) (blockDim.x >> 5); w++)
			s += part[w];
		atomicAdd(out, s);
	}
}

/*
 * E (l x k, row-major): column c is eigenvector l-1-c of the column-major
 * eigenvector matrix Ev (l x l, eigenvalues ascending).
 */
__global__ void
gf_pick_eigvecs(const double *__restrict__ Ev, float *__restrict__ E, int l, int k)
{
	const int64_t n = (int64_t) l * k;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
		 e += (int64_t) gridDim.x * blockDim.x)
	{
		int			m = (int) (e / k),
					c = (int) (e % k);

		E[e] = (float) Ev[m + (int64_t) (l - 1 - c) * l];
	}
}

/* Q[i, :] = s[i] V[i, :] (ni x k) */
__global__ void
gf_item_factors(const float *__restrict__ V, const float *__restrict__ s, int32_t ni, int k,
				float *__restrict__ Q)
{
	const int64_t n = (int64_t) ni * k;

	for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
		 e += (int64_t) gridDim.x * blockDim.x)
		Q[e] = s[e / k] * V[e];
}

/*
 * X[u, f] = h[f] sum_{e in row u} s[idx[e]] V[idx[e], f]: a warp per user,
 * lanes over the factors; each sum runs in the row's order, as on the CPU.
 */
__global__ void
__launch_bounds__(GF_THREADS)
gf_user_factors(const int32_t *__restrict__ ptr, const int32_t *__restrict__ idx,
				const float *__restrict__ V, const float *__restrict__ s,
				const float *__restrict__ h, int32_t nu, int k, float *__restrict__ X)
{
	const int	lane = threadIdx.x & 31;
	const int64_t warps = (int64_t) gridDim.x * (blockDim.x >> 5);

	for (int64_t u = (int64_t) blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); u < nu;
		 u += warps)
	{
		const int32_t rb = ptr[u],
					re = ptr[u + 1];
		float	   *x = X + u * k;

		for (int f = lane; f < k; f += 32)
		{
			float		acc = 0.0f;

			for (int32_t e = rb; e < re; e++)
			{
				const int32_t i = idx[e];

				acc += s[i] * V[(int64_t) i * k + f];
			}
			x[f] = acc * h[f];
		}
	}
}

/* ------------------------------------------------------- host side */

/* Free the state (safe on NULL and half-built states). */
static void
gf_destroy(void *h)
{
	gf_gpu	   *c = (gf_gpu *) h;

	if (c == NULL)
		return;
	if (c->have_stream)
		cudaStreamSynchronize(c->stream);
	for (int s = 0; s < 2; s++)
	{
		if (c->have_A[s])
			cusparseDestroySpMat(c->A[s]);
		if (c->have_dz[s])
			cusparseDestroyDnMat(c->dz[s]);
		gm_dev_free(c->ip[s]);
		gm_dev_free(c->ix[s]);
		gm_dev_free(c->val[s]);
		gm_dev_free(c->zb[s]);
	}
	if (c->have_dy)
		cusparseDestroyDnMat(c->dy);
	gm_dev_free(c->iscale_q);
	gm_dev_free(c->iscale_x);
	gm_dev_free(c->Y);
	gm_dev_free(c->Gf);
	gm_dev_free(c->Gd);
	gm_dev_free(c->w);
	gm_dev_free(c->E);
	gm_dev_free(c->hf);
	gm_dev_free(c->Xo);
	gm_dev_free(c->Qo);
	gm_dev_free(c->dsum);
	gm_dev_free(c->dinfo);
	gm_dev_free(c->swork);
	gm_dev_free(c->spbuf);
	if (c->have_sol)
		cusolverDnDestroy(c->sol);
	if (c->have_sp)
		cusparseDestroy(c->sp);
	if (c->have_blas)
		cublasDestroy(c->blas);
	if (c->have_stream)
		cudaStreamDestroy(c->stream);
	(void) cudaGetLastError();
	free(c);
}

/* Upload n floats (or int32s) from the host into a fresh device array of at least one element. */
template <typename T>
static int
upload(T **dst, const T *src, size_t n, char *err, size_t errlen)
{
	GM_CHECK(gm_dev_malloc(dst, sizeof(T) * (n > 0 ? n : 1)));
	if (n > 0)
		GM_CHECK(cudaMemcpy(*dst, src, sizeof(T) * n, cudaMemcpyHostToDevice));
	return GM_OK;
}

/*
 * One side of Rn on the device: A's structure with int32 row offsets, and
 * the values 1 / sqrt(d_row d_col) (degrees: the row pointers of A and of
 * its transpose At).  *f2 gets the sum of their squares in float64.
 */
static int
upload_side(gf_gpu *c, int s, const gm_csr *A, const gm_csr *At, double *f2,
			char *err, size_t errlen)
{
	size_t		n1 = (size_t) A->n_rows + 1,
				nz = (size_t) A->nnz;
	int32_t    *ip = (int32_t *) malloc(sizeof(int32_t) * n1);
	float	   *v = (float *) malloc(sizeof(float) * (nz > 0 ? nz : 1));
	double		sum = 0.0;
	int			rc;

	if (!ip || !v)
	{
		free(ip);
		free(v);
		snprintf(err, errlen, "graph_filter: out of host memory for the normalized matrix");
		return GM_ENOMEM;
	}
	for (size_t r = 0; r < n1; r++)
		ip[r] = (int32_t) A->indptr[r];
	sum = gm_csr_normalized(A, At, v, c->threads);
	*f2 = sum;
	rc = upload(&c->ip[s], ip, n1, err, errlen);
	if (rc == GM_OK)
		rc = upload(&c->ix[s], (const int32_t *) A->indices, nz, err, errlen);
	if (rc == GM_OK)
		rc = upload(&c->val[s], (const float *) v, nz, err, errlen);
	free(ip);
	free(v);
	return rc;
}

/* out = A[s] in (n x l, row-major) where A[s] is Rn (s 0) or Rn^T (s 1), launched on the stream */
static int
spmm(gf_gpu *c, int s, cusparseDnMatDescr_t in, cusparseDnMatDescr_t out, float *out_ptr,
	 int32_t out_rows, char *err, size_t errlen)
{
	const float one = 1.0f,
				zero = 0.0f;

	if (c->nnz == 0)
	{
		GM_CHECK(cudaMemsetAsync(out_ptr, 0, sizeof(float) * (size_t) out_rows * c->l, c->stream));
		return GM_OK;
	}
	GM_CHECK(cusparseSpMM(c->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
						  &one, c->A[s], in, &zero, out, CUDA_R_32F, c->spalg, c->spbuf));
	return GM_OK;
}

/* Y = Rn Z */
static int
product_y(gf_gpu *c, char *err, size_t errlen)
{
	return spmm(c, 0, c->dz[c->zc], c->dy, c->Y, c->nu, err, errlen);
}

/* Zn = Rn^T Y */
static int
product_zn(gf_gpu *c, char *err, size_t errlen)
{
	return spmm(c, 1, c->dy, c->dz[c->zc ^ 1], c->zb[c->zc ^ 1], c->ni, err, errlen);
}

/* Y = Rn Z for the current Z (once per Z). */
static int
fresh_y(gf_gpu *c, char *err, size_t errlen)
{
	int			rc;

	if (!c->y_fresh && (rc = product_y(c, err, errlen)) != GM_OK)
		return rc;
	c->y_fresh = 1;
	return GM_OK;
}

/* Gd = F^T F (F: n x l, row-major) in double, both triangles; Gf the float Gram */
static int
gram(gf_gpu *c, const float *F, int32_t n, char *err, size_t errlen)
{
	const float one = 1.0f,
				zero = 0.0f;
	int			l = c->l;

	if (n > 0)
		GM_CHECK(cublasSsyrk(c->blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, l, n, &one, F, l,
							 &zero, c->Gf, l));
	else
		GM_CHECK(cudaMemsetAsync(c->Gf, 0, sizeof(float) * (size_t) l * l, c->stream));
	gf_gram_to_double<<<gf_blocks((int64_t) l * l), GF_THREADS, 0, c->stream>>>(c->Gf, c->Gd, l);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/*
 * Z = Z L^-T where Z^T Z + s I = L L^T (s: GM_GF_SHIFT of the largest
 * diagonal element, 100 and 10000 times that if the factorization fails, as
 * on the CPU; the span is Z's all the same).  Waits for the stream (the
 * factorization's outcome is checked here).
 */
static int
orthonormalize(gf_gpu *c, char *err, size_t errlen)
{
	const float one = 1.0f;
	int			l = c->l,
				info = 0;
	double		tr = 0.0;
	float	   *Z = c->zb[c->zc];
	int			rc;

	if ((rc = gram(c, Z, c->ni, err, errlen)) != GM_OK)
		return rc;
	/* a failed factorization is tried again with a 100 times larger shift, twice */
	for (int attempt = 0; attempt < 3; attempt++)
	{
		if (attempt > 0)
		{
			gf_gram_to_double<<<gf_blocks((int64_t) l * l), GF_THREADS, 0, c->stream>>>(c->Gf, c->Gd, l);
			GM_CHECK_LAUNCH();
		}
		gf_trace_shift<<<1, GF_THREADS, 0, c->stream>>>(c->Gd, l, c->dsum + 1,
														attempt == 0 ? 1.0 : attempt == 1 ? 100.0 : 10000.0);
		GM_CHECK_LAUNCH();
		GM_CHECK(cusolverDnDpotrf(c->sol, CUBLAS_FILL_MODE_LOWER, l, c->Gd, l, c->swork, c->lwork,
								  c->dinfo));
		GM_CHECK(cudaMemcpyAsync(&tr, c->dsum + 1, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
		GM_CHECK(cudaMemcpyAsync(&info, c->dinfo, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
		GM_CHECK(cudaStreamSynchronize(c->stream));
		if (!isfinite(tr))
		{
			snprintf(err, errlen, "graph_filter: the subspace has non-finite values");
			return GM_EINVAL;
		}
		if (info == 0)
			break;
	}
	if (info != 0)
	{
		snprintf(err, errlen, "graph_filter: the Cholesky factorization of the subspace's Gram matrix failed (%d)",
				 info);
		return GM_EINVAL;
	}
	gf_lower_to_float<<<gf_blocks((int64_t) l * l), GF_THREADS, 0, c->stream>>>(c->Gd, c->Gf, l);
	GM_CHECK_LAUNCH();
	/* Z^T (column-major l x ni) = L^-1 Z^T */
	GM_CHECK(cublasStrsm(c->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
						 CUBLAS_DIAG_NON_UNIT, l, c->ni, &one, c->Gf, l, Z, l));
	return GM_OK;
}

/* Everything create does that can fail on the device. */
static int
create_inner(gf_gpu *c, const gm_mf_data *d, uint64_t seed, char *device, size_t devlen,
			 char *err, size_t errlen)
{
	const gm_csr *R = d->R,
			   *Rt = d->Rt;
	size_t		ni = (size_t) c->ni,
				nu = (size_t) c->nu,
				l = (size_t) c->l,
				k = (size_t) c->d;
	double		f2t = 0.0;
	int			rc,
				lw1 = 0,
				lw2 = 0;

	GM_CHECK(cudaSetDevice(0));
	gm_device_name(device, devlen);
	GM_CHECK(cudaStreamCreate(&c->stream));
	c->have_stream = 1;
	GM_CHECK(cublasCreate(&c->blas));
	c->have_blas = 1;
	GM_CHECK(cublasSetStream(c->blas, c->stream));
	GM_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));	/* FP32, no TF32 */
	GM_CHECK(cusparseCreate(&c->sp));
	c->have_sp = 1;
	GM_CHECK(cusparseSetStream(c->sp, c->stream));
	GM_CHECK(cusolverDnCreate(&c->sol));
	c->have_sol = 1;
	GM_CHECK(cusolverDnSetStream(c->sol, c->stream));

	/* Rn in both orders; ||Rn||^2 from R's order (the CPU's sum) */
	if ((rc = upload_side(c, 0, R, Rt, &c->frob2, err, errlen)) != GM_OK)
		return rc;
	if ((rc = upload_side(c, 1, Rt, R, &f2t, err, errlen)) != GM_OK)
		return rc;

	/* the items' degree scales, as the CPU rounds them */
	{
		float	   *sq = (float *) malloc(sizeof(float) * ni),
				   *sx = (float *) malloc(sizeof(float) * ni);

		if (!sq || !sx)
		{
			free(sq);
			free(sx);
			snprintf(err, errlen, "graph_filter: out of host memory");
			return GM_ENOMEM;
		}
		for (size_t i = 0; i < ni; i++)
		{
			int64_t		di = Rt->indptr[i + 1] - Rt->indptr[i];

			sq[i] = di > 0 ? (float) pow((double) di, GM_GF_BETA) : 0.0f;
			sx[i] = di > 0 ? (float) pow((double) di, -GM_GF_BETA) : 0.0f;
		}
		rc = upload(&c->iscale_q, (const float *) sq, ni, err, errlen);
		if (rc == GM_OK)
			rc = upload(&c->iscale_x, (const float *) sx, ni, err, errlen);
		free(sq);
		free(sx);
		if (rc != GM_OK)
			return rc;
	}

	/* the dense matrices */
	GM_CHECK(gm_dev_malloc(&c->zb[0], sizeof(float) * ni * l));
	GM_CHECK(gm_dev_malloc(&c->zb[1], sizeof(float) * ni * l));
	GM_CHECK(gm_dev_malloc(&c->Y, sizeof(float) * (nu > 0 ? nu : 1) * l));
	GM_CHECK(gm_dev_malloc(&c->Gf, sizeof(float) * l * l));
	GM_CHECK(gm_dev_malloc(&c->Gd, sizeof(double) * l * l));
	GM_CHECK(gm_dev_malloc(&c->w, sizeof(double) * l));
	GM_CHECK(gm_dev_malloc(&c->E, sizeof(float) * l * k));
	GM_CHECK(gm_dev_malloc(&c->hf, sizeof(float) * k));
	GM_CHECK(gm_dev_malloc(&c->Xo, sizeof(float) * (nu > 0 ? nu : 1) * k));
	GM_CHECK(gm_dev_malloc(&c->Qo, sizeof(float) * ni * k));
	GM_CHECK(gm_dev_malloc(&c->dsum, sizeof(double) * 2));
	GM_CHECK(gm_dev_malloc(&c->dinfo, sizeof(int)));

	/* cuSOLVER's work: the larger of potrf's and syevd's */
	GM_CHECK(cusolverDnDpotrf_bufferSize(c->sol, CUBLAS_FILL_MODE_LOWER, c->l, c->Gd, c->l, &lw1));
	GM_CHECK(cusolverDnDsyevd_bufferSize(c->sol, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
										 c->l, c->Gd, c->l, c->w, &lw2));
	c->lwork = lw1 > lw2 ? lw1 : lw2;
	if (c->lwork < 1)
		c->lwork = 1;
	GM_CHECK(gm_dev_malloc(&c->swork, sizeof(double) * (size_t) c->lwork));

	/* cuSPARSE: Rn and Rn^T (int32 offsets and columns), Z, Zn and Y row-major */
	if (c->nnz > 0)
	{
		const float one = 1.0f,
					zero = 0.0f;
		size_t		b0 = 0,
					b1 = 0;
		cusparseStatus_t st;

		GM_CHECK(cusparseCreateCsr(&c->A[0], c->nu, c->ni, c->nnz, c->ip[0], c->ix[0], c->val[0],
								   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
								   CUDA_R_32F));
		c->have_A[0] = 1;
		GM_CHECK(cusparseCreateCsr(&c->A[1], c->ni, c->nu, c->nnz, c->ip[1], c->ix[1], c->val[1],
								   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
								   CUDA_R_32F));
		c->have_A[1] = 1;
		for (int b = 0; b < 2; b++)
		{
			GM_CHECK(cusparseCreateDnMat(&c->dz[b], c->ni, c->l, c->l, c->zb[b], CUDA_R_32F,
										 CUSPARSE_ORDER_ROW));
			c->have_dz[b] = 1;
		}
		GM_CHECK(cusparseCreateDnMat(&c->dy, c->nu, c->l, c->l, c->Y, CUDA_R_32F,
									 CUSPARSE_ORDER_ROW));
		c->have_dy = 1;
		/* CSR_ALG2 suits row-major dense matrices; the default where a version lacks it */
		c->spalg = CUSPARSE_SPMM_CSR_ALG2;
		st = cusparseSpMM_bufferSize(c->sp, CUSPARSE_OPERATION_NON_TRANSPOSE,
									 CUSPARSE_OPERATION_NON_TRANSPOSE, &one, c->A[0], c->dz[0],
									 &zero, c->dy, CUDA_R_32F, c->spalg, &b0);
		if (st == CUSPARSE_STATUS_NOT_SUPPORTED)
		{
			c->spalg = CUSPARSE_SPMM_ALG_DEFAULT;
			GM_CHECK(cusparseSpMM_bufferSize(c->sp, CUSPARSE_OPERATION_NON_TRANSPOSE,
											 CUSPARSE_OPERATION_NON_TRANSPOSE, &one, c->A[0],
											 c->dz[0], &zero, c->dy, CUDA_R_32F, c->spalg, &b0));
		}
		else
			GM_CHECK(st);
		GM_CHECK(cusparseSpMM_bufferSize(c->sp, CUSPARSE_OPERATION_NON_TRANSPOSE,
										 CUSPARSE_OPERATION_NON_TRANSPOSE, &one, c->A[1], c->dy,
										 &zero, c->dz[1], CUDA_R_32F, c->spalg, &b1));
		if (b0 < b1)
			b0 = b1;
		GM_CHECK(gm_dev_malloc(&c->spbuf, b0 > 0 ? b0 : 1));
	}

	/*
	 * The seeded Gaussian start, drawn on the GPU by the function the CPU
	 * draws it with (a hash of the seed, the row and the column), then
	 * orthonormalized.  Drawn on the host it took a pass over ni x l values
	 * and their upload (840 MB at 41k items and 4,096 factors).
	 */
	{
		size_t		n = (size_t) ni * l;

		gf_gauss_start<<<gf_blocks((int64_t) n), GF_THREADS, 0, c->stream>>>(c->zb[0], n, c->l,
																			  seed);
		GM_CHECK(cudaGetLastError());
	}
	c->zc = 0;
	c->y_fresh = 0;
	if ((rc = orthonormalize(c, err, errlen)) != GM_OK)
		return rc;
	GM_CHECK(cudaStreamSynchronize(c->stream));
	return GM_OK;
}

/* Take the problem: Rn in both orders, the degrees, the starting subspace. */
static int
gf_create(void **h, const gm_mf_data *d, const gm_mf_params *p,
		  const gm_callbacks *cb, char *device, size_t devlen,
		  char *err, size_t errlen)
{
	gf_gpu	   *c;
	const gm_csr *R = d->R;
	int			rc;

	(void) cb;
	*h = NULL;
	if (p->factors > R->n_cols)
	{
		snprintf(err, errlen, "graph_filter: factors (%d) must be at most the number of items (%d)",
				 p->factors, R->n_cols);
		return GM_EINVAL;
	}
	if (p->factors < 1)
	{
		snprintf(err, errlen, "graph_filter: factors (%d) must be at least 1", p->factors);
		return GM_EINVAL;
	}
	if (R->nnz > INT32_MAX)
	{
		snprintf(err, errlen, "graph_filter on the GPU supports at most %d entries (cuSPARSE with 32-bit row offsets), not %lld",
				 INT32_MAX, (long long) R->nnz);
		return GM_ENOTSUP;
	}
	c = (gf_gpu *) calloc(1, sizeof(gf_gpu));
	if (c == NULL)
	{
		snprintf(err, errlen, "graph_filter: out of host memory");
		return GM_ENOMEM;
	}
	c->nu = R->n_rows;
	c->ni = R->n_cols;
	c->nnz = R->nnz;
	c->d = p->factors;
	c->l = (int) gm_gf_columns(p->factors, R->n_cols);
	c->alpha = p->alpha;
#ifdef _OPENMP
	c->threads = p->threads > 0 ? p->threads : omp_get_num_procs();
#else
	c->threads = 1;
#endif
	c->ptr_h[0] = R->indptr;
	c->ptr_h[1] = d->Rt->indptr;
	rc = create_inner(c, d, p->seed, device, devlen, err, errlen);
	if (rc != GM_OK)
	{
		gf_destroy(c);
		return rc;
	}
	*h = c;
	return GM_OK;
}

/* Two sweeps: Y = Rn Z over the users, then Z = Rn^T Y over the items. */
static int
gf_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

static int
gf_begin_sweep(void *h, int s, gm_sweep *sw, char *err, size_t errlen)
{
	gf_gpu	   *c = (gf_gpu *) h;

	if (s < 0 || s > 1)
	{
		snprintf(err, errlen, "graph_filter: no sweep %d", s);
		return GM_EINVAL;
	}
	sw->n_rows = s == 0 ? c->nu : c->ni;
	sw->indptr = c->ptr_h[s];
	sw->row_work = c->l;
	sw->nnz_work = c->l;
	c->pending = 1;
	return GM_OK;
}

/* The sweep's product (all its rows): Y = Rn Z unless fresh, or Zn = Rn^T Y. */
static int
sweep_product(gf_gpu *c, int s, char *err, size_t errlen)
{
	c->pending = 0;
	if (s == 0)
		return c->y_fresh ? GM_OK : product_y(c, err, errlen);
	return product_zn(c, err, errlen);
}

static int
gf_run(void *h, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	gf_gpu	   *c = (gf_gpu *) h;

	if (s < 0 || s > 1 || begin < 0 || end > (s == 0 ? c->nu : c->ni) || begin > end)
	{
		snprintf(err, errlen, "graph_filter: rows [%d, %d) outside sweep %d", begin, end, s);
		return GM_EINVAL;
	}
	/* the first slice launches the whole product (asynchronous); later ones find it done */
	if (c->pending && end > begin)
		return sweep_product(c, s, err, errlen);
	return GM_OK;
}

/* After the users' sweep Y is fresh; after the items' sweep: Z = orth(P Z). */
static int
gf_end_sweep(void *h, int s, char *err, size_t errlen)
{
	gf_gpu	   *c = (gf_gpu *) h;
	int			rc;

	if (s < 0 || s > 1)
	{
		snprintf(err, errlen, "graph_filter: no sweep %d", s);
		return GM_EINVAL;
	}
	if (c->pending && (rc = sweep_product(c, s, err, errlen)) != GM_OK)
		return rc;
	if (s == 0)
	{
		c->y_fresh = 1;
		return GM_OK;
	}
	c->zc ^= 1;
	c->y_fresh = 0;
	return orthonormalize(c, err, errlen);
}

/* Wait for the queued work; report asynchronous errors. */
static int
gf_sync(void *h, char *err, size_t errlen)
{
	gf_gpu	   *c = (gf_gpu *) h;

	GM_CHECK(cudaStreamSynchronize(c->stream));
	GM_CHECK(cudaGetLastError());
	return GM_OK;
}

/* loss = 1 - ||Rn Z||^2 / ||Rn||^2: the energy span(Z) misses */
static int
gf_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	gf_gpu	   *c = (gf_gpu *) h;
	double		y2 = 0.0;
	int64_t		n = (int64_t) c->nu * c->l;
	int			rc;

	if ((rc = fresh_y(c, err, errlen)) != GM_OK)
		return rc;
	GM_CHECK(cudaMemsetAsync(c->dsum, 0, sizeof(double), c->stream));
	if (n > 0)
	{
		gf_sumsq<<<gf_blocks(n) < 1024 ? gf_blocks(n) : 1024, GF_THREADS, 0, c->stream>>>(c->Y, n, c->dsum);
		GM_CHECK_LAUNCH();
	}
	GM_CHECK(cudaMemcpyAsync(&y2, c->dsum, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
	GM_CHECK(cudaStreamSynchronize(c->stream));
	m->loss = gm_gf_loss(y2, c->frob2);
	m->rmse = NAN;
	return GM_OK;
}

/* Rayleigh-Ritz on span(Z), then the factors (see the top of the file). */
static int
gf_download(void *h, gm_mf_data *d, char *err, size_t errlen)
{
	gf_gpu	   *c = (gf_gpu *) h;
	int			l = c->l,
				k = c->d,
				info = 0,
				rc;
	double	   *w = NULL;
	float	   *hf = NULL,
			   *V;
	const float one = 1.0f,
				zero = 0.0f;

	/* CholeskyQR2: one more pass; then Y = Rn Z and M = Y^T Y */
	if ((rc = orthonormalize(c, err, errlen)) != GM_OK)
		return rc;
	c->y_fresh = 0;
	if ((rc = fresh_y(c, err, errlen)) != GM_OK)
		return rc;
	if ((rc = gram(c, c->Y, c->nu, err, errlen)) != GM_OK)
		return rc;
	GM_CHECK(cusolverDnDsyevd(c->sol, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, l, c->Gd, l,
							  c->w, c->swork, c->lwork, c->dinfo));
	w = (double *) malloc(sizeof(double) * (size_t) l);
	hf = (float *) malloc(sizeof(float) * (size_t) k);
	if (!w || !hf)
	{
		free(w);
		free(hf);
		(void) cudaStreamSynchronize(c->stream);
		snprintf(err, errlen, "graph_filter: out of memory in the Rayleigh-Ritz step");
		return GM_ENOMEM;
	}
	rc = GM_OK;
	{
		cudaError_t e1 = cudaMemcpyAsync(w, c->w, sizeof(double) * (size_t) l, cudaMemcpyDeviceToHost,
										 c->stream),
					e2 = cudaMemcpyAsync(&info, c->dinfo, sizeof(int), cudaMemcpyDeviceToHost,
										 c->stream),
					e3 = cudaStreamSynchronize(c->stream);

		if (e1 != cudaSuccess || e2 != cudaSuccess || e3 != cudaSuccess)
		{
			cudaError_t e = e1 != cudaSuccess ? e1 : e2 != cudaSuccess ? e2 : e3;

			snprintf(err, errlen, "graph_filter: copying the eigenvalues back failed: %s (%s:%d)",
					 cudaGetErrorString(e), __FILE__, __LINE__);
			(void) cudaGetLastError();
			rc = GM_EDEVICE;
		}
	}
	if (rc == GM_OK && info != 0)
	{
		snprintf(err, errlen, "graph_filter: the eigendecomposition of the %d x %d Rayleigh-Ritz matrix failed (%d)",
				 l, l, info);
		rc = GM_EINVAL;
	}
	if (rc == GM_OK)
	{
		/* eigenvalues ascending: factor column c is eigenvalue l-1-c, clamped to [0, 1] */
		for (int col = 0; col < k; col++)
			hf[col] = gm_gf_column_filter(w[l - 1 - col], col, c->alpha);
	}
	free(w);
	if (rc != GM_OK)
	{
		free(hf);
		return rc;
	}
	{
		cudaError_t e = cudaMemcpy(c->hf, hf, sizeof(float) * (size_t) k, cudaMemcpyHostToDevice);

		if (e == cudaSuccess && d->filter)
			memcpy(d->filter, hf, sizeof(float) * (size_t) k);
		free(hf);
		GM_CHECK(e);
	}

	/* E (l x k) from the eigenvectors; V = Z E into Zn (ni x k, ld k) */
	gf_pick_eigvecs<<<gf_blocks((int64_t) l * k), GF_THREADS, 0, c->stream>>>(c->Gd, c->E, l, k);
	GM_CHECK_LAUNCH();
	V = c->zb[c->zc ^ 1];
	/* column-major: V^T (k x ni) = E^T (k x l, ld k) Z^T (l x ni, ld l) */
	GM_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, k, c->ni, l, &one, c->E, k,
						 c->zb[c->zc], l, &zero, V, k));
	gf_item_factors<<<gf_blocks((int64_t) c->ni * k), GF_THREADS, 0, c->stream>>>(
		V, c->iscale_q, c->ni, k, c->Qo);
	GM_CHECK_LAUNCH();
	if (c->nu > 0 && d->X != NULL)
	{
		int64_t		warps_blocks = ((int64_t) c->nu + GF_THREADS / 32 - 1) / (GF_THREADS / 32);

		gf_user_factors<<<(unsigned) (warps_blocks < 65535L * 32 ? warps_blocks : 65535L * 32),
			GF_THREADS, 0, c->stream>>>(c->ip[0], c->ix[0], V, c->iscale_x, c->hf, c->nu, k, c->Xo);
		GM_CHECK_LAUNCH();
		GM_CHECK(cudaMemcpyAsync(d->X, c->Xo, sizeof(float) * (size_t) c->nu * k,
								 cudaMemcpyDeviceToHost, c->stream));
	}
	GM_CHECK(cudaMemcpyAsync(d->Y, c->Qo, sizeof(float) * (size_t) c->ni * k,
							 cudaMemcpyDeviceToHost, c->stream));
	GM_CHECK(cudaStreamSynchronize(c->stream));
	return GM_OK;
}

extern "C" const gm_algo_ops gm_cuda_graph_filter_ops = {
	"cuda",
	gf_create,
	gf_n_sweeps,
	gf_begin_sweep,
	gf_run,
	gf_end_sweep,
	gf_sync,
	gf_evaluate,
	gf_download,
	gf_destroy,
	NULL						/* reset: none (the loop destroys and creates instead) */
};
