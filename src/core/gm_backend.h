/*
 * gm_backend.h: the interface both ALS backends implement (internal to core).
 */
#ifndef GM_BACKEND_H
#define GM_BACKEND_H

#include "gm_core.h"

typedef struct gm_backend_ops
{
	const char *name;
	int			(*prepare) (void *h, int side, float reg, char *err, size_t errlen);
	int			(*solve) (void *h, int side, int cg_steps, int32_t begin,
						  int32_t end, char *err, size_t errlen);
	int			(*sync) (void *h, char *err, size_t errlen);
	int			(*loss) (void *h, float reg, double *loss, char *err, size_t errlen);
	int			(*get) (void *h, float *X, float *Y, char *err, size_t errlen);
	void		(*destroy) (void *h);
} gm_backend_ops;

/* The CUDA backend (backend_cuda.c): NULL until gm_cuda_available succeeded. */
const gm_backend_ops *gm_cuda_backend_ops(void);
int			gm_cuda_backend_create(void **h, const gm_csr *C, const gm_csr *Ct,
								   const float *X, const float *Y, int k,
								   char *name, size_t namelen,
								   char *err, size_t errlen);

#endif
