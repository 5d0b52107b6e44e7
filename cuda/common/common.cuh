/*
 * common.cuh: what every .cu file of gpumf's CUDA module shares: the error
 * check that turns a failed CUDA / cuBLAS / cuSPARSE / cuSOLVER call into
 * GM_EDEVICE and a message, float4 helpers for the warp-group kernels, the
 * padded factor widths and the table of kernel shapes per width, and the
 * module's exported entry points (module.cu; the core reaches them through
 * dlopen, see src/core/common/backend.c).  No PostgreSQL, no core internals: only
 * gm_errors.h and gm_algo.h.
 */
#ifndef GM_COMMON_CUH
#define GM_COMMON_CUH

#include "gm_errors.h"
#include "gm_algo.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cusparse.h>
#include <cusolverDn.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

/* seconds on the monotonic clock, for the phases the module times itself */
static inline double
gm_wall_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------ exported ABI */

extern "C" {
/* GM_ALGO_ABI_VERSION as this module was built; the core refuses another. */
int			gm_cuda_abi_version(void);

/* Number of usable devices (0 when none or no driver) and device 0's name. */
int			gm_cuda_probe(int *count, char *name, size_t namelen,
						  char *err, size_t errlen);

/* The CUDA operations of algorithm (a gm_algorithm), NULL if there are none. */
const gm_algo_ops *gm_cuda_algo_ops(int algorithm);

/* Cap on the device memory the module allocates (bytes; < 0: no cap). */
void		gm_cuda_set_memory_limit(long long bytes);

/* Device memory the module holds now (bytes), allocated through gm_dev_malloc. */
long long	gm_cuda_memory_in_use(void);
}

/* ------------------------------------------------- device memory accounting */

/*
 * Every device allocation of the module goes through gm_dev_malloc and
 * gm_dev_free, which keep the bytes held per pointer, per device and in
 * total, so that gpumf.gpu_memory_limit caps what one backend's gpumf holds
 * on each card
 * (cuBLAS / cuSOLVER workspaces and the CUDA context itself are not
 * counted), and so that a failed allocation says how much was asked for.
 * A request over the cap fails as cudaErrorMemoryAllocation, like a full
 * card; GM_CHECK turns either into GM_ENOMEM.  C++17 inline variables: one
 * instance in the module, whichever .cu file uses them.
 */
inline std::atomic<long long> gm_dev_limit{-1};	/* on each device */
inline std::atomic<long long> gm_dev_used{0};	/* on all devices */
inline std::atomic<long long> gm_dev_used_on[GM_MAX_GPUS];
inline std::mutex gm_dev_lock;
inline std::unordered_map<void *, std::pair<size_t, int>> gm_dev_sizes;

/* the current device, as an index of gm_dev_used_on */
static inline int
gm_dev_index(void)
{
	int			d = 0;

	if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= GM_MAX_GPUS)
	{
		(void) cudaGetLastError();
		d = 0;
	}
	return d;
}
inline thread_local size_t gm_dev_last_request = 0;

static inline cudaError_t
gm_dev_malloc_bytes(void **p, size_t bytes)
{
	long long	limit = gm_dev_limit.load();
	int			dev = gm_dev_index();
	cudaError_t e;

	gm_dev_last_request = bytes;
	if (limit >= 0 && gm_dev_used_on[dev].load() + (long long) bytes > limit)
	{
		*p = NULL;
		return cudaErrorMemoryAllocation;
	}
	e = cudaMalloc(p, bytes);
	if (e != cudaSuccess)
	{
		*p = NULL;
		return e;
	}
	{
		std::lock_guard<std::mutex> g(gm_dev_lock);

		gm_dev_sizes[*p] = std::make_pair(bytes, dev);
	}
	gm_dev_used += (long long) bytes;
	gm_dev_used_on[dev] += (long long) bytes;
	return cudaSuccess;
}

/* cudaMalloc with accounting (any pointer type, as cudaMalloc's template) */
template <class T>
static inline cudaError_t
gm_dev_malloc(T **p, size_t bytes)
{
	return gm_dev_malloc_bytes((void **) p, bytes);
}

/* cudaFree with accounting; NULL is fine */
static inline cudaError_t
gm_dev_free(void *p)
{
	if (p == NULL)
		return cudaSuccess;
	{
		std::lock_guard<std::mutex> g(gm_dev_lock);
		auto		it = gm_dev_sizes.find(p);

		if (it != gm_dev_sizes.end())
		{
			gm_dev_used -= (long long) it->second.first;
			gm_dev_used_on[it->second.second] -= (long long) it->second.first;
			gm_dev_sizes.erase(it);
		}
	}
	return cudaFree(p);
}

/* ------------------------------------------------------- error checks */

/* whether a status says that memory ran out (the card's, or the cap's) */
static inline bool
gm_status_oom(cudaError_t e)
{
	return e == cudaErrorMemoryAllocation;
}

static inline bool
gm_status_oom(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_ALLOC_FAILED;
}

static inline bool
gm_status_oom(cusparseStatus_t s)
{
	return s == CUSPARSE_STATUS_ALLOC_FAILED;
}

static inline bool
gm_status_oom(cusolverStatus_t s)
{
	return s == CUSOLVER_STATUS_ALLOC_FAILED;
}

/*
 * The message of an allocation that failed: what was asked for, what gpumf
 * holds, the cap and the card's free memory.  Returns GM_ENOMEM.
 */
static inline int
gm_oom_message(const char *call, const char *file, int line, char *err, size_t errlen)
{
	size_t		free_b = 0,
				total_b = 0;
	long long	limit = gm_dev_limit.load();
	char		cap[64];

	(void) cudaGetLastError();
	(void) cudaMemGetInfo(&free_b, &total_b);
	if (limit >= 0)
		snprintf(cap, sizeof(cap), "%.1f MB", limit / 1048576.0);
	else
		snprintf(cap, sizeof(cap), "none");
	if (err && errlen)
		snprintf(err, errlen,
				 "out of GPU memory: %s asked for %.1f MB; gpumf holds %.1f MB on this card in this session, "
				 "gpumf.gpu_memory_limit is %s, the card has %.1f MB free of %.1f MB (%s:%d)",
				 call, gm_dev_last_request / 1048576.0, gm_dev_used_on[gm_dev_index()].load() / 1048576.0, cap,
				 free_b / 1048576.0, total_b / 1048576.0, file, line);
	return GM_ENOMEM;
}

/* NULL on success, else the library's text for the status */
static inline const char *
gm_status_text(cudaError_t e)
{
	return e == cudaSuccess ? NULL : cudaGetErrorString(e);
}

static inline const char *
gm_status_text(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? NULL : cublasGetStatusString(s);
}

static inline const char *
gm_status_text(cusparseStatus_t s)
{
	return s == CUSPARSE_STATUS_SUCCESS ? NULL : cusparseGetErrorString(s);
}

static inline const char *
gm_status_text(cusolverStatus_t s)
{
	switch (s)
	{
		case CUSOLVER_STATUS_SUCCESS:
			return NULL;
		case CUSOLVER_STATUS_NOT_INITIALIZED:
			return "cuSOLVER not initialized";
		case CUSOLVER_STATUS_ALLOC_FAILED:
			return "cuSOLVER allocation failed";
		case CUSOLVER_STATUS_INVALID_VALUE:
			return "cuSOLVER invalid value";
		case CUSOLVER_STATUS_ARCH_MISMATCH:
			return "cuSOLVER architecture mismatch";
		case CUSOLVER_STATUS_EXECUTION_FAILED:
			return "cuSOLVER execution failed";
		case CUSOLVER_STATUS_INTERNAL_ERROR:
			return "cuSOLVER internal error";
		case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED:
			return "cuSOLVER matrix type not supported";
		case CUSOLVER_STATUS_NOT_SUPPORTED:
			return "cuSOLVER operation not supported";
		case CUSOLVER_STATUS_ZERO_PIVOT:
			return "cuSOLVER zero pivot";
		default:
			return "cuSOLVER error";
	}
}

/*
 * Evaluate a CUDA / cuBLAS / cuSPARSE / cuSOLVER call; on failure write the
 * call, the library's text, the file and the line into err (the enclosing
 * function's err and errlen) and return GM_EDEVICE, or GM_ENOMEM with what
 * was asked for and what is free when memory ran out.
 */
#define GM_CHECK(call) \
	do { \
		auto s_ = (call); \
		const char *m_ = gm_status_text(s_); \
		if (m_ != NULL) \
		{ \
			if (gm_status_oom(s_)) \
				return gm_oom_message(#call, __FILE__, __LINE__, err, errlen); \
			if (err && errlen) \
				snprintf(err, errlen, "%s failed: %s (%s:%d)", #call, m_, \
						 __FILE__, __LINE__); \
			return GM_EDEVICE; \
		} \
	} while (0)

/* after a kernel launch */
#define GM_CHECK_LAUNCH()	GM_CHECK(cudaGetLastError())

/* ------------------------------------------------------ float4 helpers */

/* sum of v over aligned groups of W lanes (W a power of two <= 32); all lanes get it */
template <int W>
__device__ __forceinline__ float
group_sum(float v)
{
#pragma unroll
	for (int o = W / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float
dot4(float4 a, float4 b)
{
	return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

/* acc += w y */
__device__ __forceinline__ void
fma4(float4 &acc, float w, float4 y)
{
	acc.x = fmaf(w, y.x, acc.x);
	acc.y = fmaf(w, y.y, acc.y);
	acc.z = fmaf(w, y.z, acc.z);
	acc.w = fmaf(w, y.w, acc.w);
}

__device__ __forceinline__ float4
add4(float4 a, float4 b)
{
	return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/*
 * *p += v in global memory, atomically per component: one 16-byte vector
 * atomic where the code is compiled for compute capability 9.0 or newer
 * (the only ones that have it), else four float atomics.  The sum is the
 * same either way; only the number of memory transactions differs.
 */
__device__ __forceinline__ void
atomic_add4(float4 *p, float4 v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	atomicAdd(p, v);
#else
	atomicAdd(&p->x, v.x);
	atomicAdd(&p->y, v.y);
	atomicAdd(&p->z, v.z);
	atomicAdd(&p->w, v.w);
#endif
}

/* ------------------------------------------------ what the device allows */

/*
 * Threads an SM holds at once on the architecture the code is compiled for:
 * 1024 on 7.5, 1536 on 8.6, 8.7, 8.9 and 11.0 and newer, 2048 on 8.0, 9.0
 * and 10.x.  GM_MIN_BLOCKS(threads, n) is __launch_bounds__'s blocks per
 * SM: n where the SM holds n such blocks, else as many as it holds (ptxas
 * ignores a bound the SM cannot meet, and the register cap with it).
 */
#if !defined(__CUDA_ARCH__)
#define GM_SM_THREADS	2048
#elif __CUDA_ARCH__ == 750
#define GM_SM_THREADS	1024
#elif __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1100
#define GM_SM_THREADS	1536
#else
#define GM_SM_THREADS	2048
#endif
#define GM_MIN_BLOCKS(threads, n) \
	((n) * (threads) <= GM_SM_THREADS ? (n) : GM_SM_THREADS / (threads))

/* The oldest compute capability the module runs on (10 major + minor): CUDA 13's. */
#define GM_MIN_CC		75

/*
 * Bytes of shared memory one block may opt in to on device 0 (the device's
 * cudaDevAttrMaxSharedMemoryPerBlockOptin: 64 KB on 7.5, 163 KB on 8.0,
 * 99 KB on 8.6, 8.9 and 12.0, 227 KB on 9.0 and 10.0), or fewer when the
 * environment variable GPUMF_CUDA_SMEM_LIMIT (bytes, at least 48 KB) says
 * so: a test makes a large card choose what a smaller one would.  Every
 * launch configuration that depends on shared memory is chosen from this
 * at run time, so one build runs on every card.  0 if the device cannot
 * say.
 */
static inline size_t
gm_smem_optin(void)
{
	int			dev = 0,
				optin = 0;
	const char *lim = getenv("GPUMF_CUDA_SMEM_LIMIT");

	if (cudaGetDevice(&dev) != cudaSuccess ||
		cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return 0;
	}
	if (lim != NULL && *lim != '\0')
	{
		long		l = strtol(lim, NULL, 10);

		if (l >= 48 * 1024 && l < optin)
			optin = (int) l;
	}
	return (size_t) optin;
}

/* ----------------------------------------------- factor widths, shapes */

/* GM_MAXK and gm_padded_k: gm_algo.h (the core sizes the GPU's arrays too) */

/*
 * The kernel shape for each padded width: X(KP, LG, V) with kp = 4 LG V,
 * i.e. a group of LG lanes holds a kp-vector as V float4 per lane, and a
 * warp has 32 / LG groups.  A switch over kp with one case per line
 * instantiates a kernel template for every width.
 */
#define GM_SHAPES(X) \
	X(32, 4, 2) X(64, 8, 2) X(96, 8, 3) X(128, 8, 4) X(160, 8, 5) \
	X(192, 16, 3) X(224, 8, 7) X(256, 16, 4) X(384, 32, 3) X(512, 32, 4) \
	X(640, 32, 5) X(768, 32, 6) X(896, 32, 7) X(1024, 32, 8)

/* device 0's name, "" if it cannot be read */
static inline void
gm_device_name(char *name, size_t namelen)
{
	cudaDeviceProp prop;

	if (name == NULL || namelen == 0)
		return;
	name[0] = '\0';
	if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
		snprintf(name, namelen, "%s", prop.name);
	else
		(void) cudaGetLastError();
}

#endif							/* GM_COMMON_CUH */
