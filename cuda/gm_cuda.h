/*
 * gm_cuda.h: the extern "C" ABI of gpumf's CUDA module (gpumf_cuda.so).
 *
 * The core loads this module with dlopen on first use, so gpumf.so itself
 * links no CUDA library and loads on machines without a GPU or toolkit.
 * Every function returns 0 (GM_OK) or a gm_core.h error code and writes a
 * message naming the failing CUDA/cuBLAS call into err.  No PostgreSQL here.
 */
#ifndef GM_CUDA_H
#define GM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gm_cuda_als gm_cuda_als;

/* Number of usable devices (0 when none or no driver) and device 0's name. */
int			gm_cuda_probe(int *count, char *name, size_t namelen,
						  char *err, size_t errlen);

/*
 * Copy the problem to the device.  C (n_users x n_items) and Ct are the
 * confidence matrices (CSR: int64 indptr, int32 indices, float data); X and
 * Y the initial factors, row-major, k columns.
 */
int			gm_cuda_als_create(gm_cuda_als **out,
							   int32_t n_users, int32_t n_items, int64_t nnz,
							   const int64_t *c_indptr, const int32_t *c_indices,
							   const float *c_data,
							   const int64_t *ct_indptr, const int32_t *ct_indices,
							   const float *ct_data,
							   const float *X, const float *Y, int k,
							   char *err, size_t errlen);

/* side 0: prepare to solve users (G = Y^T Y + reg I); side 1: items (X^T X). */
int			gm_cuda_als_prepare(gm_cuda_als *h, int side, float reg,
								char *err, size_t errlen);

/* Launch the CG solve for rows [begin, end) of side (after prepare). Async. */
int			gm_cuda_als_solve(gm_cuda_als *h, int side, int cg_steps,
							  int32_t begin, int32_t end,
							  char *err, size_t errlen);

/* Wait for queued work; reports asynchronous kernel errors. */
int			gm_cuda_als_sync(gm_cuda_als *h, char *err, size_t errlen);

/* The implicit-ALS loss (gm_als_loss's definition), in float64. */
int			gm_cuda_als_loss(gm_cuda_als *h, float reg, double *loss,
							 char *err, size_t errlen);

/* Copy factors back (either pointer may be NULL). */
int			gm_cuda_als_get(gm_cuda_als *h, float *X, float *Y,
							char *err, size_t errlen);

/* Free all device memory and handles; safe on NULL and after errors. */
void		gm_cuda_als_destroy(gm_cuda_als *h);

#ifdef __cplusplus
}
#endif

#endif							/* GM_CUDA_H */
