/*
 * linalg_backend.c: finding the CUDA module's linear-algebra table.
 *
 * The module (gpumf_cuda.so) is probed and loaded once per process by
 * gm_cuda_available (backend_cuda.c: driver check first, then dlopen); here
 * the already loaded module is asked for gm_cuda_linalg_ops and its ABI
 * version checked.  module_symbol() is the one place that touches the
 * module: when the core offers gm_cuda_symbol(name), it becomes a call to
 * that.
 */
#include "gm_linalg.h"

#include <dlfcn.h>
#include <stdio.h>

/* backend_cuda.c (declared here: gm_core.h and gm_algo.h both define gm_csr) */
int			gm_cuda_available(const char *module_path, char *name, size_t namelen,
							  char *err, size_t errlen);

/*
 * A symbol of the loaded CUDA module, or NULL.  dlopen with RTLD_NOLOAD
 * returns the handle gm_cuda_available opened (and loads nothing new).
 */
static void *
module_symbol(const char *module_path, const char *name)
{
	void	   *lib = dlopen(module_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	void	   *p;

	if (lib == NULL)
		return NULL;
	p = dlsym(lib, name);
	dlclose(lib);				/* drops only our reference */
	return p;
}

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
	*(void **) &fn = module_symbol(module_path, "gm_cuda_linalg_ops");
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
