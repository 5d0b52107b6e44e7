/*
 * linalg_backend.c: finding the CUDA module's linear-algebra table.
 *
 * The module (gpumf_cuda.so) is probed and loaded once per process by
 * gm_cuda_available (backend.c: driver check first, then dlopen); here the
 * loaded module is asked for gm_cuda_linalg_ops (gm_cuda_symbol) and the
 * table's ABI version checked.
 */
#include "gm_core.h"
#include "gm_linalg.h"

#include <stdio.h>

const gm_linalg_ops *
gm_linalg_cuda_ops(const char *module_path, char *err, size_t errlen)
{
	static const gm_linalg_ops *ops;
	char		name[128];
	gm_cuda_linalg_ops_fn fn;

	if (ops != NULL)
		return ops;
	if (gm_cuda_available(module_path, name, sizeof(name), err, errlen) != GM_OK)
		return NULL;
	*(void **) &fn = gm_cuda_symbol("gm_cuda_linalg_ops");
	if (fn == NULL)
	{
		snprintf(err, errlen, "the CUDA module %s has no linear-algebra operations "
				 "(gm_cuda_linalg_ops): rebuild gpumf", module_path);
		return NULL;
	}
	ops = fn();
	if (ops == NULL || ops->abi_version != GM_LINALG_ABI_VERSION)
	{
		snprintf(err, errlen, "the CUDA module %s was built for linear-algebra ABI %d, "
				 "this gpumf needs %d: rebuild and reinstall gpumf",
				 module_path, ops ? ops->abi_version : -1, GM_LINALG_ABI_VERSION);
		ops = NULL;
		return NULL;
	}
	return ops;
}
