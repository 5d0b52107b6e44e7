/*
 * backend.c: the CUDA backend: gpumf's CUDA module (cuda/gpumf_cuda.so),
 * reached through dlopen so that the core (and gpumf.so) needs no CUDA
 * library: without the module, a driver or a GPU, gm_cuda_available says so
 * and the work runs on the CPU.  Which table of operations runs an
 * algorithm is src/core/train/algorithms.c's question; this file answers
 * its CUDA half (gm_cuda_loaded, gm_cuda_algo_table).  The module exports
 *
 *     int gm_cuda_abi_version(void)                 GM_ALGO_ABI_VERSION it was built with
 *     int gm_cuda_probe(int *count, char *name, size_t, char *err, size_t)
 *     const gm_algo_ops *gm_cuda_algo_ops(int algorithm)
 *
 * and other groups of entry points that gm_cuda_symbol hands out by name.
 */
#include "gm_core.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*abi_version_fn) (void);
typedef int (*probe_fn) (int *, char *, size_t, char *, size_t);
typedef const gm_algo_ops *(*algo_ops_fn) (int);

static struct
{
	void	   *lib;			/* the module, while loaded and working */
	int			probed;
	int			status;
	char		name[128];
	char		why[GM_ERRLEN];
	algo_ops_fn algo_ops;
}			cu;

/* gpumf.gpu_memory_limit in bytes (negative: none), applied when the module loads */
static int64_t cuda_memory_limit = -1;

/* Hand the device memory cap to the loaded module, if it is loaded. */
static void
apply_memory_limit(void)
{
	void		(*set_limit) (long long);

	if (cu.lib == NULL)
		return;
	*(void **) &set_limit = dlsym(cu.lib, "gm_cuda_set_memory_limit");
	if (set_limit)
		set_limit((long long) cuda_memory_limit);
}

/*
 * Is there a GPU the driver can use?  Asks the driver library itself
 * (libcuda.so.1: cuInit, cuDeviceGetCount), which is small and absent on
 * machines without a driver, before the CUDA module (which links the CUDA
 * runtime and the CUDA libraries, about 95 MB of private memory once
 * initialised) is loaded at all.  The library is closed again either way.
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

/*
 * Load the module at module_path and check it: the entry points, the ABI
 * version, a device.  Returns GM_OK or GM_ENODEVICE with cu.why set.
 */
static int
load_module(const char *module_path)
{
	abi_version_fn abi_version;
	probe_fn	probe;
	int			count = 0;

	if (!driver_has_device(cu.why, sizeof(cu.why)))
		return GM_ENODEVICE;
	cu.lib = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
	if (cu.lib == NULL)
	{
		const char *e = dlerror();

		snprintf(cu.why, sizeof(cu.why), "the CUDA module could not be loaded: %s",
				 e ? e : module_path);
		return GM_ENODEVICE;
	}
	*(void **) &abi_version = dlsym(cu.lib, "gm_cuda_abi_version");
	*(void **) &probe = dlsym(cu.lib, "gm_cuda_probe");
	*(void **) &cu.algo_ops = dlsym(cu.lib, "gm_cuda_algo_ops");
	if (abi_version == NULL || probe == NULL || cu.algo_ops == NULL)
	{
		snprintf(cu.why, sizeof(cu.why),
				 "the CUDA module %s lacks gm_cuda_abi_version, gm_cuda_probe or gm_cuda_algo_ops: it is from another gpumf version, reinstall gpumf",
				 module_path);
		return GM_ENODEVICE;
	}
	if (abi_version() != GM_ALGO_ABI_VERSION)
	{
		snprintf(cu.why, sizeof(cu.why),
				 "the CUDA module %s was built for algorithm ABI version %d, this gpumf needs version %d: reinstall gpumf",
				 module_path, abi_version(), GM_ALGO_ABI_VERSION);
		return GM_ENODEVICE;
	}
	if (probe(&count, cu.name, sizeof(cu.name), cu.why, sizeof(cu.why)) != GM_OK
		|| count < 1)
	{
		if (cu.why[0] == '\0')
			snprintf(cu.why, sizeof(cu.why), "no CUDA device found");
		return GM_ENODEVICE;
	}
	return GM_OK;
}

/* Load and probe the CUDA module, once per process (see gm_core.h). */
int
gm_cuda_available(const char *module_path, char *name, size_t namelen,
				  char *err, size_t errlen)
{
	/* probed once per process: the answer does not change while it runs */
	if (!cu.probed)
	{
		cu.probed = 1;
		if (access(module_path, F_OK) != 0)
		{
			cu.status = GM_ENOMODULE;
			snprintf(cu.why, sizeof(cu.why), "gpumf was built without its CUDA module (%s)",
					 module_path);
		}
		else
		{
			cu.status = load_module(module_path);
			if (cu.status == GM_OK)
				apply_memory_limit();
		}
		if (cu.status != GM_OK && cu.lib != NULL)
		{
			/* release what a failed probe loaded */
			dlclose(cu.lib);
			cu.lib = NULL;
			cu.algo_ops = NULL;
		}
	}
	if (name && namelen)
		snprintf(name, namelen, "%s", cu.status == GM_OK ? cu.name : "");
	if (cu.status != GM_OK)
		snprintf(err, errlen, "%s", cu.why);
	return cu.status;
}

/* Is the CUDA module loaded (see gm_core.h)? */
int
gm_cuda_loaded(char *err, size_t errlen)
{
	if (cu.lib == NULL)
	{
		snprintf(err, errlen, "the CUDA module is not loaded%s%s",
				 cu.probed ? ": " : "", cu.probed ? cu.why : "");
		return 0;
	}
	return 1;
}

/* The CUDA module's table of algorithm a (see gm_core.h). */
const gm_algo_ops *
gm_cuda_algo_table(gm_algorithm a)
{
	return cu.lib == NULL ? NULL : cu.algo_ops((int) a);
}

/* Cap the CUDA module's device memory (see gm_core.h). */
void
gm_cuda_memory_cap(int64_t bytes)
{
	cuda_memory_limit = bytes < 0 ? -1 : bytes;
	apply_memory_limit();
}

/* Device memory the CUDA module holds now (see gm_core.h). */
int64_t
gm_cuda_memory_held(void)
{
	long long	(*in_use) (void);

	if (cu.lib == NULL)
		return 0;
	*(void **) &in_use = dlsym(cu.lib, "gm_cuda_memory_in_use");
	return in_use ? (int64_t) in_use() : 0;
}

/* The card's free and total memory, and the cap (see gm_core.h). */
int
gm_cuda_device_memory(int ndev, int64_t *free_bytes, int64_t *total_bytes, int64_t *cap)
{
	int			(*info) (int, long long *, long long *);
	long long	f = 0,
				t = 0;

	*free_bytes = *total_bytes = 0;
	*cap = cuda_memory_limit;
	if (cu.lib == NULL)
		return GM_ENODEVICE;
	*(void **) &info = dlsym(cu.lib, "gm_cuda_mem_info");
	if (info == NULL || info(ndev, &f, &t) != 0)
		return GM_ENODEVICE;
	*free_bytes = f;
	*total_bytes = t;
	return GM_OK;
}

/* A symbol of the loaded CUDA module, or NULL. */
void *
gm_cuda_symbol(const char *name)
{
	if (cu.lib == NULL || name == NULL)
		return NULL;
	return dlsym(cu.lib, name);
}

/* The CSR built on the GPU (see gm_core.h). */
int
gm_csr_from_coo_device(int32_t n_rows, int32_t n_cols, int64_t nnz, int32_t **rows,
					   int32_t **cols, float **vals, const int32_t *row_map, int32_t row_map_n,
					   const int32_t *col_map, int32_t col_map_n, int keep,
					   const gm_callbacks *cb, gm_csr *out, int64_t *col_ptr, double *seconds,
					   char *err, size_t errlen)
{
	int			(*fn) (int32_t, int32_t, int64_t, int32_t **, int32_t **, float **,
					   const int32_t *, int32_t, const int32_t *, int32_t, int,
					   const gm_callbacks *, gm_csr *, int64_t *, double *, char *, size_t);

	*(void **) &fn = gm_cuda_symbol("gm_cuda_csr_from_coo");
	if (fn == NULL)
	{
		snprintf(err, errlen, "the CUDA module is not loaded");
		return GM_ENODEVICE;
	}
	return fn(n_rows, n_cols, nnz, rows, cols, vals, row_map, row_map_n, col_map, col_map_n, keep,
			  cb, out, col_ptr, seconds, err, errlen);
}

int64_t
gm_csr_device_kept_bytes(void)
{
	long long	(*fn) (void);

	*(void **) &fn = gm_cuda_symbol("gm_cuda_csr_kept_bytes");
	return fn ? (int64_t) fn() : 0;
}

void
gm_csr_device_drop_kept(void)
{
	void		(*fn) (void);

	*(void **) &fn = gm_cuda_symbol("gm_cuda_csr_drop_kept");
	if (fn)
		fn();
}

/* The GPU as the loaded CUDA module runs on it (see gm_core.h). */
int
gm_cuda_caps(gm_gpu_caps *caps, char *err, size_t errlen)
{
	int			(*fn) (gm_gpu_caps *, char *, size_t);

	memset(caps, 0, sizeof(*caps));
	if (cu.lib == NULL)
	{
		snprintf(err, errlen, "the CUDA module is not loaded%s%s",
				 cu.probed ? ": " : "", cu.probed ? cu.why : "");
		return GM_ENODEVICE;
	}
	*(void **) &fn = dlsym(cu.lib, "gm_cuda_device_caps");
	if (fn == NULL)
	{
		snprintf(err, errlen, "the CUDA module lacks gm_cuda_device_caps: reinstall gpumf");
		return GM_ENOTSUP;
	}
	return fn(caps, err, errlen);
}

/*
 * The names of the GM_FAST_* bits set in fast, comma-separated (see
 * gm_core.h); as many whole names as len holds.
 */
void
gm_gpu_fast_paths(unsigned fast, char *buf, size_t len)
{
	static const struct
	{
		unsigned	bit;
		const char *name;
	}			names[] = {
		{GM_FAST_TF32_TENSOR_CORES, "tf32_tensor_cores"},
		{GM_FAST_VECTOR_ATOMICS, "vector_atomics"},
		{GM_FAST_LARGE_SMEM, "large_smem"},
	};
	size_t		used = 0;

	if (len == 0)
		return;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
	{
		int			w;

		if (!(fast & names[i].bit))
			continue;
		w = snprintf(buf + used, len - used, "%s%s", used ? "," : "", names[i].name);
		if (w < 0 || (size_t) w >= len - used)
		{
			buf[used] = '\0';	/* whole names only */
			return;
		}
		used += (size_t) w;
	}
}
