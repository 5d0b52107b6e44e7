/*
 * gm_util.h: small helpers shared inside the core (not part of its API).
 */
#ifndef GM_UTIL_H
#define GM_UTIL_H

#include <stdint.h>

#include "gm_algo.h"			/* gm_mix64 */

/*
 * Hot loops are compiled twice (AVX2+FMA and baseline x86-64) and picked at
 * load time, so one build runs well on any x86-64 machine.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GM_HOT __attribute__((target_clones("arch=haswell", "default")))
#else
#define GM_HOT
#endif

/* The thread count a "threads" parameter means (<= 0: one per core). */
int			gm_resolve_threads(int threads);

/*
 * Solve A x = b in place by Cholesky (A n x n, row-major, lower triangle
 * read and overwritten by L; b becomes x).  -1 when A is not positive definite.
 */
int			gm_cholesky_solve(double *A, double *b, int n);

/*
 * G = scale Y^T Y + reg I (Y n x k, G k x k, both row-major) with threads
 * threads, polling cb's should_stop between chunks: GM_OK or GM_ECANCELED
 * (gram.c; gm_gram is the same without polling).
 */
struct gm_callbacks;
int			gm_gram_polled(const float *Y, int64_t n, int k, float scale, float reg,
						   float *G, int threads, const struct gm_callbacks *cb);


/* a . b; "omp simd" lets the compiler vectorise the sum without -ffast-math */
static inline float
gm_dot(const float *a, const float *b, int k)
{
	float		s = 0.0f;

#pragma omp simd reduction(+:s)
	for (int f = 0; f < k; f++)
		s += a[f] * b[f];
	return s;
}

#endif
