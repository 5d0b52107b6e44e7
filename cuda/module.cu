/*
 * module.cu: the entry points of gpumf's CUDA module (gpumf_cuda.so) that
 * the core looks up with dlsym (src/core/common/backend.c): the ABI version, the
 * device probe, and the table of algorithms.
 *
 * The module is built from every .cu file listed in cuda/Makefile
 * (MODULE_SRC); each algorithm's file defines its gm_cuda_<alg>_ops.
 */
#include "common.cuh"

/*
 * The CUDA implementations: one line per algorithm (its ops are defined in
 * its own file, e.g. X(GM_ALG_CCD, gm_cuda_ccd_ops) for ccd.cu).
 */
#define GM_CUDA_ALGORITHMS(X) \
	X(GM_ALG_ALS_IMPLICIT, gm_cuda_als_implicit_ops) \
	X(GM_ALG_ALS_EXPLICIT, gm_cuda_als_explicit_ops) \
	X(GM_ALG_CCD, gm_cuda_ccd_ops)

#define GM_DECLARE_OPS(alg, ops) extern const gm_algo_ops ops;
GM_CUDA_ALGORITHMS(GM_DECLARE_OPS)
#undef GM_DECLARE_OPS

/* The GM_ALGO_ABI_VERSION this module was built with. */
extern "C" int
gm_cuda_abi_version(void)
{
	return GM_ALGO_ABI_VERSION;
}

/* Number of usable devices (0 when none or no driver) and device 0's name. */
extern "C" int
gm_cuda_probe(int *count, char *name, size_t namelen, char *err, size_t errlen)
{
	cudaError_t e;
	int			n = 0;

	*count = 0;
	if (name && namelen)
		name[0] = '\0';
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n < 1)
	{
		if (err && errlen)
			snprintf(err, errlen, "no usable CUDA device: %s",
					 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		(void) cudaGetLastError();	/* clear */
		return GM_OK;
	}
	{
		cudaDeviceProp prop;

		GM_CHECK(cudaGetDeviceProperties(&prop, 0));
		if (name && namelen)
			snprintf(name, namelen, "%s", prop.name);
	}
	*count = n;
	return GM_OK;
}

/* The CUDA operations of an algorithm, NULL if it has none. */
extern "C" const gm_algo_ops *
gm_cuda_algo_ops(int algorithm)
{
	switch (algorithm)
	{
#define GM_OPS_CASE(alg, ops) case alg: return &ops;
			GM_CUDA_ALGORITHMS(GM_OPS_CASE)
#undef GM_OPS_CASE
		default:
			return NULL;
	}
}

/* Cap the device memory the module allocates (bytes; negative: no cap). */
extern "C" void
gm_cuda_set_memory_limit(long long bytes)
{
	gm_dev_limit = bytes < 0 ? -1 : bytes;
}

/* Device memory the module holds now, in bytes (its own allocations). */
extern "C" long long
gm_cuda_memory_in_use(void)
{
	return gm_dev_used.load();
}
