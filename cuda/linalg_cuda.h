/*
 * linalg_cuda.h: what cuda/spmv_pcg.cu and cuda/ols.cu share (internal to
 * the CUDA module): the error-check helpers and the least-squares entry
 * points that spmv_pcg.cu puts into the module's gm_linalg_ops table.
 */
#ifndef GM_LINALG_CUDA_H
#define GM_LINALG_CUDA_H

#include "../src/core/gm_linalg.h"

#include <cuda_runtime.h>
#include <stdio.h>

/* the message for a failed call, NULL on success */
static inline const char *
la_status_text(cudaError_t e)
{
	return e == cudaSuccess ? NULL : cudaGetErrorString(e);
}

/* GM_ENOMEM for an allocation failure, GM_EDEVICE for anything else */
static inline int
la_status_code(cudaError_t e)
{
	return e == cudaErrorMemoryAllocation ? GM_ENOMEM : GM_EDEVICE;
}

/*
 * Every CUDA (cuSPARSE, cuSOLVER) call goes through LA_CHECK: on failure it
 * writes the call, the error, the file and the line into err and returns
 * from the enclosing function (which must have err and errlen).
 */
#define LA_CHECK(call) \
	do { \
		auto s_ = (call); \
		const char *m_ = la_status_text(s_); \
		if (m_ != NULL) \
		{ \
			if (err && errlen) \
				snprintf(err, errlen, "%s failed: %s (%s:%d)", #call, m_, \
						 __FILE__, __LINE__); \
			return la_status_code(s_); \
		} \
	} while (0)

/* after a kernel launch */
#define LA_CHECK_LAUNCH()	LA_CHECK(cudaGetLastError())

#ifdef __cplusplus
extern "C" {
#endif

/* cuda/ols.cu */
int			gm_cuda_ols_create(void **h, int k, int intercept, int64_t max_rows,
							   char *err, size_t errlen);
int			gm_cuda_ols_fold(void *h, int64_t n, const double *X, int64_t ldx,
							 const double *y, const double *shift, double *R,
							 char *err, size_t errlen);
void		gm_cuda_ols_timing(void *h, double *transfer, double *compute);
void		gm_cuda_ols_destroy(void *h);

/* cuda/spmv_pcg.cu: the module's table of linear-algebra operations */
const gm_linalg_ops *gm_cuda_linalg_ops(void);

#ifdef __cplusplus
}
#endif

#endif							/* GM_LINALG_CUDA_H */
