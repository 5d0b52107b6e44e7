/*
 * bench_check.h: the checks shared by the GPU check-and-benchmark programs
 * (gpu_als_bench, score_bench, linalg_bench, mf_explicit_bench): a CUDA, cuBLAS or gpumf call
 * that fails ends the program with its error; CHECK prints "[ok]" or
 * "[FAIL]" with a message and counts the outcome for the closing
 * "N passed, M failed" line.
 */
#ifndef GPUMF_BENCH_CHECK_H
#define GPUMF_BENCH_CHECK_H

#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../../../src/core/common/gm_errors.h"

/* a library call returning status type T, success ok, described by str(status) */
#define BENCH_CALL(T, ok, str, call) \
	do { \
		T s_ = (call); \
		if (s_ != (ok)) { \
			fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, str(s_), __FILE__, __LINE__); \
			exit(2); \
		} \
	} while (0)
#define CK(call) BENCH_CALL(cudaError_t, cudaSuccess, cudaGetErrorString, call)
#define CB(call) BENCH_CALL(cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, call)
/* a gpumf call: 0 or an error code with its message in err */
#define GM(call) \
	do { \
		int rc_ = (call); \
		if (rc_ != 0) { \
			fprintf(stderr, "%s failed (%d): %s (%s:%d)\n", #call, rc_, err, __FILE__, __LINE__); \
			exit(2); \
		} \
	} while (0)

[[maybe_unused]] static char err[GM_ERRLEN];
static int	failures = 0;
static int	checks = 0;		/* for the closing "N passed, M failed" line */

#define CHECK(cond, ...) \
	do { \
		bool ok_ = (cond); \
		printf("  [%s] ", ok_ ? "ok" : "FAIL"); \
		printf(__VA_ARGS__); \
		printf("\n"); \
		fflush(stdout); \
		checks++; \
		if (!ok_) failures++; \
	} while (0)

#endif
