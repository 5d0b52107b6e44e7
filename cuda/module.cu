/*
 * module.cu: the entry points of gpumf's CUDA module (gpumf_cuda.so) that
 * the core looks up with dlsym (src/core/common/backend.c): the ABI version, the
 * device probe, and the table of algorithms.
 *
 * The module is built from every .cu file listed in cuda/Makefile
 * (MODULE_SRC); each algorithm's file defines its gm_cuda_<alg>_ops.
 */
#include "common.cuh"
#include "als_block.cuh"

#include <string.h>

/* what GENCODE built, as cuda/Makefile passes it */
#ifndef GM_CUDA_BUILD_ARCHS
#define GM_CUDA_BUILD_ARCHS "unknown"
#endif

/*
 * A kernel that is never launched: its attributes say which of the
 * module's code the driver loaded for the device (cudaFuncGetAttributes
 * fails when there is none).  Every .cu file is built with the same
 * GENCODE, so what holds for it holds for every kernel.
 */
__global__ void
gm_arch_probe_kernel(int *out)
{
#ifdef __CUDA_ARCH__
	*out = __CUDA_ARCH__;
#endif
}

/*
 * The CUDA implementations: one line per algorithm (its ops are defined in
 * its own file, e.g. X(GM_ALG_CCD, gm_cuda_ccd_ops) for ccd.cu).
 */
#define GM_CUDA_ALGORITHMS(X) \
	X(GM_ALG_ALS_IMPLICIT, gm_cuda_als_implicit_ops) \
	X(GM_ALG_ALS_EXPLICIT, gm_cuda_als_explicit_ops) \
	X(GM_ALG_CCD, gm_cuda_ccd_ops) \
	X(GM_ALG_GRAPH_FILTER, gm_cuda_graph_filter_ops)

#define GM_DECLARE_OPS(alg, ops) extern const gm_algo_ops ops;
GM_CUDA_ALGORITHMS(GM_DECLARE_OPS)
#undef GM_DECLARE_OPS

/* The GM_ALGO_ABI_VERSION this module was built with. */
extern "C" int
gm_cuda_abi_version(void)
{
	return GM_ALGO_ABI_VERSION;
}

/*
 * Number of usable devices (0 when none or no driver, when device 0 is older
 * than compute capability 7.5, or when this build has no code for it; err
 * says which) and device 0's name.  Whether the module has code for the
 * device is asked of the runtime (cudaFuncGetAttributes of a kernel), which
 * makes the device's primary context: a usable device's probe is followed
 * by its use anyway.
 */
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
		cudaFuncAttributes fa;

		GM_CHECK(cudaGetDeviceProperties(&prop, 0));
		if (name && namelen)
			snprintf(name, namelen, "%s", prop.name);
		if (prop.major * 10 + prop.minor < GM_MIN_CC)
		{
			/* CUDA 13 and this module start at Turing (T4, RTX 20xx) */
			if (err && errlen)
				snprintf(err, errlen,
						 "%s has compute capability %d.%d; gpumf's CUDA module needs 7.5 or newer (Turing and later GPUs, as CUDA 13 does)",
						 prop.name, prop.major, prop.minor);
			return GM_OK;
		}
		e = cudaFuncGetAttributes(&fa, gm_arch_probe_kernel);
		if (e != cudaSuccess)
		{
			/* e.g. an sm_90-only build on an 8.6 card: no SASS for it, and PTX only for 9.0 */
			if (err && errlen)
				snprintf(err, errlen,
						 "the CUDA module has no code for %s (compute capability %d.%d): it was built for %s (%s); rebuild gpumf with GPUMF_CUDA_ARCHS including %d%d, or with the default list",
						 prop.name, prop.major, prop.minor, GM_CUDA_BUILD_ARCHS,
						 cudaGetErrorString(e), prop.major, prop.minor);
			(void) cudaGetLastError();	/* clear */
			/* the query made the device's context: gone again before the module is unloaded */
			(void) cudaDeviceReset();
			return GM_OK;
		}
	}
	*count = n;
	return GM_OK;
}

/*
 * Device 0 as the module runs on it (gm_gpu_caps): the compute capability,
 * the architecture its loaded code was compiled for, shared memory, and
 * the fast paths that the code and the card allow.  After a successful
 * gm_cuda_probe.
 */
extern "C" int
gm_cuda_device_caps(gm_gpu_caps *c, char *err, size_t errlen)
{
	cudaDeviceProp prop;
	cudaFuncAttributes fa;

	memset(c, 0, sizeof(*c));
	snprintf(c->archs, sizeof(c->archs), "%s", GM_CUDA_BUILD_ARCHS);
	GM_CHECK(cudaSetDevice(0));
	GM_CHECK(cudaGetDeviceProperties(&prop, 0));
	GM_CHECK(cudaFuncGetAttributes(&fa, gm_arch_probe_kernel));
	GM_CHECK(gm_block_prepare());
	c->cc = prop.major * 10 + prop.minor;
	c->code_arch = fa.ptxVersion;
	c->smem_optin = (int) gm_smem_optin();
	c->sms = prop.multiProcessorCount;
	if (gm_block_tensor_cores())
		c->fast |= GM_FAST_TF32_TENSOR_CORES;
	if (c->code_arch >= 90)
		c->fast |= GM_FAST_VECTOR_ATOMICS;
	if ((size_t) c->smem_optin >= gm_block_smem(64, 1) &&
		(size_t) c->smem_optin >= sizeof(float) * 200 * 201)
		c->fast |= GM_FAST_LARGE_SMEM;
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

/* The least free and total memory of devices 0 .. ndev - 1 (cudaMemGetInfo); 0 on success. */
extern "C" int
gm_cuda_mem_info(int ndev, long long *free_bytes, long long *total_bytes)
{
	int			cur = 0;

	*free_bytes = *total_bytes = -1;
	(void) cudaGetDevice(&cur);
	for (int d = 0; d < (ndev > 1 ? ndev : 1); d++)
	{
		size_t		f = 0,
					t = 0;

		if (cudaSetDevice(d) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess)
		{
			(void) cudaGetLastError();
			(void) cudaSetDevice(cur);
			return -1;
		}
		if (*free_bytes < 0 || (long long) f < *free_bytes)
			*free_bytes = (long long) f;
		if (*total_bytes < 0 || (long long) t < *total_bytes)
			*total_bytes = (long long) t;
	}
	(void) cudaSetDevice(cur);
	return 0;
}

/* Device memory the module holds now, in bytes (its own allocations). */
extern "C" long long
gm_cuda_memory_in_use(void)
{
	return gm_dev_used.load();
}
