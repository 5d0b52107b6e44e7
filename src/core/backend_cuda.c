/*
 * backend_cuda.c: the CUDA backend, reached through dlopen so that the core
 * (and gpumf.so) needs no CUDA library: without the module, a driver or a
 * GPU, gm_cuda_available says so and training runs on the CPU.
 */
#include "gm_core.h"
#include "gm_backend.h"
#include "../../cuda/gm_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct
{
	void	   *lib;
	int			probed;
	int			status;
	char		name[128];
	char		why[GM_ERRLEN];
	int			(*probe) (int *, char *, size_t, char *, size_t);
	int			(*create) (gm_cuda_als **, int32_t, int32_t, int64_t,
						   const int64_t *, const int32_t *, const float *,
						   const int64_t *, const int32_t *, const float *,
						   const float *, const float *, int, char *, size_t);
	int			(*prepare) (gm_cuda_als *, int, float, char *, size_t);
	int			(*solve) (gm_cuda_als *, int, int, int32_t, int32_t, char *, size_t);
	int			(*sync) (gm_cuda_als *, char *, size_t);
	int			(*loss) (gm_cuda_als *, float, double *, char *, size_t);
	int			(*get) (gm_cuda_als *, float *, float *, char *, size_t);
	void		(*destroy) (gm_cuda_als *);
}			cu;

static void *
sym(const char *name, int *ok)
{
	void	   *p = dlsym(cu.lib, name);

	if (p == NULL)
		*ok = 0;
	return p;
}

/*
 * Is there a GPU the driver can use?  Asks the driver library itself
 * (libcuda.so.1: cuInit, cuDeviceGetCount), which is small and absent on
 * machines without a driver, before the CUDA module (which links the CUDA
 * runtime and cuBLAS, about 95 MB of private memory once initialised) is
 * loaded at all.  The library is closed again either way.
 */
static int
driver_has_device(char *why, size_t whylen)
{
	void	   *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int			(*init) (unsigned int);
	int			(*count) (int *);
	int			n = 0,
				rc;

	if (drv == NULL)
	{
		snprintf(why, whylen, "no NVIDIA driver: libcuda.so.1 cannot be loaded");
		return 0;
	}
	*(void **) &init = dlsym(drv, "cuInit");
	*(void **) &count = dlsym(drv, "cuDeviceGetCount");
	if (init == NULL || count == NULL)
	{
		snprintf(why, whylen, "the NVIDIA driver library lacks cuInit or cuDeviceGetCount");
		dlclose(drv);
		return 0;
	}
	rc = init(0);
	if (rc == 0)
		rc = count(&n);
	dlclose(drv);
	if (rc != 0 || n < 1)
	{
		snprintf(why, whylen, rc != 0 ? "the NVIDIA driver found no usable device (CUresult %d)" :
				 "the NVIDIA driver found no device", rc);
		return 0;
	}
	return 1;
}

int
gm_cuda_available(const char *module_path, char *name, size_t namelen,
				  char *err, size_t errlen)
{
	/* probed once per process: the answer does not change while it runs */
	if (!cu.probed)
	{
		int			ok = 1;
		int			count = 0;

		cu.probed = 1;
		cu.status = GM_ENODEVICE;
		if (access(module_path, F_OK) != 0)
		{
			cu.status = GM_ENOMODULE;
			snprintf(cu.why, sizeof(cu.why), "gpumf was built without its CUDA module (%s)",
					 module_path);
			goto out;
		}
		if (!driver_has_device(cu.why, sizeof(cu.why)))
			goto out;
		cu.lib = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
		if (cu.lib == NULL)
		{
			const char *e = dlerror();

			snprintf(cu.why, sizeof(cu.why), "the CUDA module could not be loaded: %s",
					 e ? e : module_path);
			goto out;
		}
		*(void **) &cu.probe = sym("gm_cuda_probe", &ok);
		*(void **) &cu.create = sym("gm_cuda_als_create", &ok);
		*(void **) &cu.prepare = sym("gm_cuda_als_prepare", &ok);
		*(void **) &cu.solve = sym("gm_cuda_als_solve", &ok);
		*(void **) &cu.sync = sym("gm_cuda_als_sync", &ok);
		*(void **) &cu.loss = sym("gm_cuda_als_loss", &ok);
		*(void **) &cu.get = sym("gm_cuda_als_get", &ok);
		*(void **) &cu.destroy = sym("gm_cuda_als_destroy", &ok);
		if (!ok)
		{
			snprintf(cu.why, sizeof(cu.why), "the CUDA module %s lacks a symbol",
					 module_path);
			goto out;
		}
		if (cu.probe(&count, cu.name, sizeof(cu.name), cu.why, sizeof(cu.why)) != GM_OK
			|| count < 1)
		{
			if (cu.why[0] == '\0')
				snprintf(cu.why, sizeof(cu.why), "no CUDA device found");
			goto out;
		}
		cu.status = GM_OK;
	}
out:
	if (cu.status != GM_OK && cu.lib != NULL)
	{
		/* release what a failed probe loaded */
		dlclose(cu.lib);
		cu.lib = NULL;
	}
	if (name && namelen)
		snprintf(name, namelen, "%s", cu.status == GM_OK ? cu.name : "");
	if (cu.status != GM_OK)
		snprintf(err, errlen, "%s", cu.why);
	return cu.status;
}

static int
ops_prepare(void *h, int side, float reg, char *err, size_t errlen)
{
	return cu.prepare(h, side, reg, err, errlen);
}

static int
ops_solve(void *h, int side, int cg, int32_t b, int32_t e, char *err, size_t errlen)
{
	return cu.solve(h, side, cg, b, e, err, errlen);
}

static int
ops_sync(void *h, char *err, size_t errlen)
{
	return cu.sync(h, err, errlen);
}

static int
ops_loss(void *h, float reg, double *loss, char *err, size_t errlen)
{
	return cu.loss(h, reg, loss, err, errlen);
}

static int
ops_get(void *h, float *X, float *Y, char *err, size_t errlen)
{
	return cu.get(h, X, Y, err, errlen);
}

static void
ops_destroy(void *h)
{
	cu.destroy(h);
}

static const gm_backend_ops cuda_ops = {
	"cuda", ops_prepare, ops_solve, ops_sync, ops_loss, ops_get, ops_destroy
};

const gm_backend_ops *
gm_cuda_backend_ops(void)
{
	return (cu.probed && cu.status == GM_OK) ? &cuda_ops : NULL;
}

int
gm_cuda_backend_create(void **h, const gm_csr *C, const gm_csr *Ct,
					   const float *X, const float *Y, int k,
					   char *name, size_t namelen, char *err, size_t errlen)
{
	gm_cuda_als *a = NULL;
	int			rc;

	rc = cu.create(&a, C->n_rows, C->n_cols, C->nnz,
				   C->indptr, C->indices, C->data,
				   Ct->indptr, Ct->indices, Ct->data, X, Y, k, err, errlen);
	*h = a;
	snprintf(name, namelen, "%s", cu.name);
	return rc;
}
