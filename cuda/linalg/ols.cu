/*
 * ols.cu: least squares on the GPU for tall inputs (the least-squares half
 * of gm_linalg_ops): a tall-skinny QR in float64.
 *
 * The host hands over R, the m x m upper-triangular factor of everything
 * folded so far (src/core/linalg/ols.c), and a batch of rows.  On the device W
 * (column-major, m columns) holds R in its top m rows and a chunk of up to
 * max_rows rows of [1, x - c, y - d] below; cuSOLVER's Householder QR
 * (cusolverDnXgeqrf) of W leaves the new R in the top rows, the Householder
 * vectors below the diagonal are cleared, the next chunk is written under
 * it, and so on; R goes back to the host at the end.  The finishing
 * (coefficients, errors, rank, condition number) is the CPU path's code.
 *
 * Rows travel through two pinned staging buffers on a copy stream while the
 * previous chunk is factored, so the host's packing, the PCIe copy and the
 * factorization overlap.
 */
#include "linalg_cuda.h"

#include <cusolverDn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace
{

constexpr int TPB = 256;

struct OlsHandle
{
	int			k;
	int			intercept;
	int			m;				/* k + intercept + 1 */
	int64_t		max_rows;
	int64_t		ldw;			/* m + max_rows */
	cudaStream_t stream;		/* factorization */
	cudaStream_t copy;			/* host-to-device copies */
	cusolverDnHandle_t sol;
	cusolverDnParams_t params;
	double	   *W;
	double	   *tau;
	void	   *work;
	size_t		work_bytes;
	void	   *hwork;
	size_t		hwork_bytes;
	int		   *info;
	double	   *shift;			/* k + 1 */
	double	   *stage_d[2];		/* max_rows x (k + 1), row-major */
	double	   *stage_h[2];		/* pinned */
	cudaEvent_t arrived[2];		/* copy of a staging buffer done */
	cudaEvent_t consumed[2];	/* its rows written into W */
	cudaEvent_t c0,
				c1;				/* around the factorizations */
	double		transfer_s;
	double		compute_s;
};

/*
 * W rows [m, m + n) := the chunk in stage (row-major x then y):
 * [1, x - c, y - d] or [x, y].  A thread per (row, column).
 */
__global__ void __launch_bounds__(TPB)
fill_chunk(int64_t n, int k, int intercept, int64_t ldw, int m, const double *__restrict__ stage,
		   const double *__restrict__ shift, double *W)
{
	const int64_t total = n * (int64_t) m;

	for (int64_t t = blockIdx.x * (int64_t) TPB + threadIdx.x; t < total;
		 t += (int64_t) gridDim.x * TPB)
	{
		const int64_t i = t % n;	/* consecutive threads: consecutive rows of one column */
		const int	j = (int) (t / n);
		double		v;

		if (intercept && j == 0)
			v = 1.0;
		else
		{
			const int	c = j - intercept;	/* 0 .. k-1: x, k: y */

			v = stage[i * (k + 1) + c] - shift[c];
		}
		W[(int64_t) j * ldw + m + i] = v;
	}
}

/* clear the Householder vectors under the diagonal of W's top m x m block */
__global__ void __launch_bounds__(TPB)
clear_lower(int m, int64_t ldw, double *W)
{
	for (int64_t t = blockIdx.x * (int64_t) TPB + threadIdx.x; t < (int64_t) m * m;
		 t += (int64_t) gridDim.x * TPB)
	{
		const int	i = (int) (t % m),
					j = (int) (t / m);

		if (i > j)
			W[(int64_t) j * ldw + i] = 0.0;
	}
}

int
blocks_for(int64_t work)
{
	return (int) std::max<int64_t>(1, std::min<int64_t>((work + TPB - 1) / TPB, 65536));
}

int
ols_create_inner(OlsHandle *h, int k, int intercept, int64_t max_rows, char *err, size_t errlen)
{
	size_t		wb = 0,
				hb = 0;

	h->k = k;
	h->intercept = intercept ? 1 : 0;
	h->m = k + h->intercept + 1;
	h->max_rows = max_rows > 0 ? max_rows : (int64_t) 1 << 20;
	h->ldw = h->m + h->max_rows;
	GM_CHECK(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
	GM_CHECK(cudaStreamCreateWithFlags(&h->copy, cudaStreamNonBlocking));
	GM_CHECK(cusolverDnCreate(&h->sol));
	GM_CHECK(cusolverDnSetStream(h->sol, h->stream));
	GM_CHECK(cusolverDnCreateParams(&h->params));
	GM_CHECK(gm_dev_malloc(&h->W, sizeof(double) * (size_t) h->ldw * h->m));
	GM_CHECK(gm_dev_malloc(&h->tau, sizeof(double) * (size_t) h->m));
	GM_CHECK(gm_dev_malloc(&h->info, sizeof(int)));
	GM_CHECK(gm_dev_malloc(&h->shift, sizeof(double) * (size_t) (k + 1)));
	GM_CHECK(cusolverDnXgeqrf_bufferSize(h->sol, h->params, h->ldw, h->m, CUDA_R_64F, h->W,
										 h->ldw, CUDA_R_64F, h->tau, CUDA_R_64F, &wb, &hb));
	h->work_bytes = std::max<size_t>(wb, 256);
	h->hwork_bytes = hb;
	GM_CHECK(gm_dev_malloc(&h->work, h->work_bytes));
	if (hb > 0)
	{
		h->hwork = malloc(hb);
		if (h->hwork == NULL)
		{
			snprintf(err, errlen, "out of memory");
			return GM_ENOMEM;
		}
	}
	for (int b = 0; b < 2; b++)
	{
		size_t		sb = sizeof(double) * (size_t) h->max_rows * (k + 1);

		GM_CHECK(gm_dev_malloc(&h->stage_d[b], sb));
		GM_CHECK(cudaHostAlloc((void **) &h->stage_h[b], sb, cudaHostAllocDefault));
		GM_CHECK(cudaEventCreateWithFlags(&h->arrived[b], cudaEventDisableTiming));
		GM_CHECK(cudaEventCreateWithFlags(&h->consumed[b], cudaEventDisableTiming));
	}
	GM_CHECK(cudaEventCreate(&h->c0));
	GM_CHECK(cudaEventCreate(&h->c1));
	return GM_OK;
}

double
now_seconds()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int
ols_fold_inner(OlsHandle *h, int64_t n, const double *X, int64_t ldx, const double *y,
			   const double *shift, double *R, char *err, size_t errlen)
{
	const int	m = h->m,
				k = h->k;
	std::vector<double> top((size_t) m * m, 0.0);
	double		t_start = now_seconds(),
				compute_ms = 0.0;
	int			info = 0;
	int64_t		nchunks = (n + h->max_rows - 1) / h->max_rows;

	GM_CHECK(cudaMemcpyAsync(h->shift, shift, sizeof(double) * (k + 1), cudaMemcpyHostToDevice,
							 h->stream));
	/* R into W's top rows, column-major, zeros below the diagonal */
	for (int i = 0; i < m; i++)
		for (int j = i; j < m; j++)
			top[(size_t) j * m + i] = R[(size_t) i * m + j];
	GM_CHECK(cudaMemcpy2DAsync(h->W, sizeof(double) * h->ldw, top.data(), sizeof(double) * m,
							   sizeof(double) * m, m, cudaMemcpyHostToDevice, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));

	for (int64_t c = 0; c < nchunks; c++)
	{
		const int	b = (int) (c & 1);
		const int64_t r0 = c * h->max_rows,
					cr = std::min(h->max_rows, n - r0);
		double	   *sh = h->stage_h[b];
		float		ms = 0.0f;

		/* the pinned buffer is free once its previous copy arrived */
		GM_CHECK(cudaEventSynchronize(h->arrived[b]));
#pragma omp parallel for schedule(static)
		for (int64_t i = 0; i < cr; i++)
		{
			memcpy(sh + i * (k + 1), X + (size_t) (r0 + i) * ldx, sizeof(double) * k);
			sh[i * (k + 1) + k] = y[r0 + i];
		}
		/* and the device buffer once the fill two chunks ago read it */
		GM_CHECK(cudaStreamWaitEvent(h->copy, h->consumed[b], 0));
		GM_CHECK(cudaMemcpyAsync(h->stage_d[b], sh, sizeof(double) * (size_t) cr * (k + 1),
								 cudaMemcpyHostToDevice, h->copy));
		GM_CHECK(cudaEventRecord(h->arrived[b], h->copy));

		GM_CHECK(cudaStreamWaitEvent(h->stream, h->arrived[b], 0));
		if (c > 0)
		{
			/* the previous chunk's factorization time */
			GM_CHECK(cudaEventSynchronize(h->c1));
			GM_CHECK(cudaEventElapsedTime(&ms, h->c0, h->c1));
			compute_ms += ms;
		}
		GM_CHECK(cudaEventRecord(h->c0, h->stream));
		fill_chunk<<<blocks_for(cr * m), TPB, 0, h->stream>>>(cr, k, h->intercept, h->ldw, m,
															   h->stage_d[b], h->shift, h->W);
		GM_CHECK_LAUNCH();
		GM_CHECK(cudaEventRecord(h->consumed[b], h->stream));
		GM_CHECK(cusolverDnXgeqrf(h->sol, h->params, m + cr, m, CUDA_R_64F, h->W, h->ldw,
								  CUDA_R_64F, h->tau, CUDA_R_64F, h->work, h->work_bytes,
								  h->hwork, h->hwork_bytes, h->info));
		clear_lower<<<blocks_for((int64_t) m * m), TPB, 0, h->stream>>>(m, h->ldw, h->W);
		GM_CHECK_LAUNCH();
		GM_CHECK(cudaEventRecord(h->c1, h->stream));
	}
	if (nchunks > 0)
	{
		float		ms = 0.0f;

		GM_CHECK(cudaEventSynchronize(h->c1));
		GM_CHECK(cudaEventElapsedTime(&ms, h->c0, h->c1));
		compute_ms += ms;
	}
	GM_CHECK(cudaMemcpyAsync(&info, h->info, sizeof(int), cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaMemcpy2DAsync(top.data(), sizeof(double) * m, h->W, sizeof(double) * h->ldw,
							   sizeof(double) * m, m, cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	if (info != 0)
	{
		snprintf(err, errlen, "cusolverDnXgeqrf reported argument %d invalid", -info);
		return GM_EDEVICE;
	}
	for (int i = 0; i < m; i++)
		for (int j = 0; j < m; j++)
			R[(size_t) i * m + j] = j >= i ? top[(size_t) j * m + i] : 0.0;
	h->compute_s += compute_ms * 1e-3;
	h->transfer_s += std::max(0.0, now_seconds() - t_start - compute_ms * 1e-3);
	return GM_OK;
}

}								/* namespace */

extern "C" void
gm_cuda_ols_destroy(void *vh)
{
	OlsHandle  *h = (OlsHandle *) vh;

	if (h == NULL)
		return;
	if (h->stream)
		cudaStreamSynchronize(h->stream);
	if (h->copy)
		cudaStreamSynchronize(h->copy);
	for (int b = 0; b < 2; b++)
	{
		if (h->stage_d[b])
			gm_dev_free(h->stage_d[b]);
		if (h->stage_h[b])
			cudaFreeHost(h->stage_h[b]);
		if (h->arrived[b])
			cudaEventDestroy(h->arrived[b]);
		if (h->consumed[b])
			cudaEventDestroy(h->consumed[b]);
	}
	if (h->c0)
		cudaEventDestroy(h->c0);
	if (h->c1)
		cudaEventDestroy(h->c1);
	for (void *p : {(void *) h->W, (void *) h->tau, h->work, (void *) h->info, (void *) h->shift})
		if (p)
			gm_dev_free(p);
	free(h->hwork);
	if (h->params)
		cusolverDnDestroyParams(h->params);
	if (h->sol)
		cusolverDnDestroy(h->sol);
	if (h->copy)
		cudaStreamDestroy(h->copy);
	if (h->stream)
		cudaStreamDestroy(h->stream);
	delete h;
}

extern "C" int
gm_cuda_ols_create(void **out, int k, int intercept, int64_t max_rows, char *err, size_t errlen)
{
	OlsHandle  *h = new(std::nothrow) OlsHandle();
	int			rc;

	*out = NULL;
	if (h == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return GM_ENOMEM;
	}
	if (k < 0 || k > 4096)
	{
		delete h;
		snprintf(err, errlen, "the GPU least-squares path takes 0 to 4096 x columns, not %d", k);
		return GM_EINVAL;
	}
	rc = ols_create_inner(h, k, intercept, max_rows, err, errlen);
	if (rc != GM_OK)
	{
		gm_cuda_ols_destroy(h);
		return rc;
	}
	*out = h;
	return GM_OK;
}

extern "C" int
gm_cuda_ols_fold(void *vh, int64_t n, const double *X, int64_t ldx, const double *y,
				 const double *shift, double *R, char *err, size_t errlen)
{
	OlsHandle  *h = (OlsHandle *) vh;

	if (n <= 0)
		return GM_OK;
	return ols_fold_inner(h, n, X, ldx, y, shift, R, err, errlen);
}

extern "C" void
gm_cuda_ols_timing(void *vh, double *transfer, double *compute)
{
	OlsHandle  *h = (OlsHandle *) vh;

	*transfer = h->transfer_s;
	*compute = h->compute_s;
}
