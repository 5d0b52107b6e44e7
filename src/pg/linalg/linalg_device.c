/*
 * linalg_device.c: the device the linear algebra (gpumf_cg_solve,
 * gpumf_spmv, gpumf_linreg) runs on under gpumf.device: the CUDA module's
 * gm_linalg_ops table, or the CPU (common/device.c's rules).
 */
#include "gpumf_linalg.h"

int			gpumf_spmv_choice = GM_SPMV_AUTO;

/*
 * The CUDA module's linear-algebra table when gpumf.device picks the GPU,
 * NULL for the CPU.  The same rules as training: auto falls back with one
 * NOTICE per session, gpu without a usable GPU is an ERROR.
 */
const gm_linalg_ops *
gpumf_linalg_device(char *name, size_t namelen)
{
	char		err[GM_ERRLEN];
	const gm_linalg_ops *ops = NULL;
	int			rc;

	if (name && namelen)
		name[0] = '\0';
	if (gpumf_device == GPUMF_DEVICE_CPU)
		return NULL;
	rc = gm_cuda_available(gpumf_cuda_module_path(), name, namelen, err, sizeof(err));
	if (rc == GM_OK)
		ops = gm_linalg_cuda_ops(gpumf_cuda_module_path(), err, sizeof(err));
	if (ops != NULL)
		return ops;
	if (gpumf_device == GPUMF_DEVICE_GPU)
		gpumf_no_gpu_error(err, "compute");
	if (rc != GM_ENOMODULE)
		gpumf_gpu_fallback_notice(err, "computing");
	return NULL;
}
