/*
 * linalg_cuda.h: what the linear-algebra files of the CUDA module share
 * (cuda/linalg; internal to the module): the least-squares entry points
 * that sparse_handle.cu puts into the module's gm_linalg_ops table.  Errors go through common.cuh's
 * GM_CHECK.
 */
#ifndef GM_LINALG_CUDA_H
#define GM_LINALG_CUDA_H

#include "common.cuh"
#include "gm_linalg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda/linalg/ols.cu */
int			gm_cuda_ols_create(void **h, int k, int intercept, int64_t max_rows,
							   char *err, size_t errlen);
int			gm_cuda_ols_fold(void *h, int64_t n, const double *X, int64_t ldx,
							 const double *y, const double *shift, double *R,
							 char *err, size_t errlen);
void		gm_cuda_ols_timing(void *h, double *transfer, double *compute);
void		gm_cuda_ols_destroy(void *h);

/* cuda/linalg/sparse_handle.cu: the module's table of linear-algebra operations */
const gm_linalg_ops *gm_cuda_linalg_ops(void);

#ifdef __cplusplus
}
#endif

#endif							/* GM_LINALG_CUDA_H */
