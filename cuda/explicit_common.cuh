/*
 * explicit_common.cuh: error checking and small helpers for the explicit
 * models' CUDA code (ccd.cu, als_explicit.cu).  Every CUDA, cuBLAS and
 * cuSOLVER call goes through EX_CHECK, which writes the call, the error, the
 * file and the line into err and returns GM_ENOMEM for an allocation failure,
 * GM_EDEVICE otherwise.
 */
#ifndef EXPLICIT_COMMON_CUH
#define EXPLICIT_COMMON_CUH

#include "../src/core/gm_algo.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cusolverDn.h>

#include <stdio.h>

static inline const char *
ex_status_text(cudaError_t e, int *code)
{
	*code = e == cudaErrorMemoryAllocation ? GM_ENOMEM : GM_EDEVICE;
	return e == cudaSuccess ? NULL : cudaGetErrorString(e);
}

static inline const char *
ex_status_text(cublasStatus_t s, int *code)
{
	*code = s == CUBLAS_STATUS_ALLOC_FAILED ? GM_ENOMEM : GM_EDEVICE;
	return s == CUBLAS_STATUS_SUCCESS ? NULL : cublasGetStatusString(s);
}

static inline const char *
ex_status_text(cusolverStatus_t s, int *code)
{
	static const char *const names[] = {
		"CUSOLVER_STATUS_SUCCESS", "CUSOLVER_STATUS_NOT_INITIALIZED",
		"CUSOLVER_STATUS_ALLOC_FAILED", "CUSOLVER_STATUS_INVALID_VALUE",
		"CUSOLVER_STATUS_ARCH_MISMATCH", "CUSOLVER_STATUS_MAPPING_ERROR",
		"CUSOLVER_STATUS_EXECUTION_FAILED", "CUSOLVER_STATUS_INTERNAL_ERROR",
		"CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED", "CUSOLVER_STATUS_NOT_SUPPORTED"
	};

	*code = s == CUSOLVER_STATUS_ALLOC_FAILED ? GM_ENOMEM : GM_EDEVICE;
	if (s == CUSOLVER_STATUS_SUCCESS)
		return NULL;
	return (int) s >= 0 && (int) s < 10 ? names[(int) s] : "cuSOLVER error";
}

#define EX_CHECK(call) \
	do { \
		int			code_; \
		const char *m_ = ex_status_text((call), &code_); \
		if (m_ != NULL) \
		{ \
			if (err && errlen) \
				snprintf(err, errlen, "%s failed: %s (%s:%d)", #call, m_, \
						 __FILE__, __LINE__); \
			return code_; \
		} \
	} while (0)

/* after a kernel launch */
#define EX_CHECK_LAUNCH()	EX_CHECK(cudaGetLastError())

/* sum over the lanes of an aligned group of G lanes (G a power of two <= 32) */
template <int G>
__device__ __forceinline__ float
ex_group_sum(float v)
{
#pragma unroll
	for (int o = G / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ double
ex_warp_sum_d(double v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static inline unsigned
ex_blocks(int64_t n, int per_block)
{
	int64_t		b = (n + per_block - 1) / per_block;

	return (unsigned) (b < 1 ? 1 : b);
}

#endif							/* EXPLICIT_COMMON_CUH */
