/*
 * explicit.cuh: small helpers the explicit models' kernels share (ccd.cu,
 * als_explicit.cu) beyond common.cuh: a float64 warp sum for the loss and
 * the grid size for one thread (or group) per element.
 */
#ifndef GM_EXPLICIT_CUH
#define GM_EXPLICIT_CUH

#include "common.cuh"
#include "gm_explicit.h"		/* gm_explicit_check */

/* sum of v over the warp; every lane gets it */
__device__ __forceinline__ double
warp_sum_d(double v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* blocks of per_block for n elements (at least one) */
static inline unsigned
blocks_for(int64_t n, int per_block)
{
	int64_t		b = (n + per_block - 1) / per_block;

	return (unsigned) (b < 1 ? 1 : b);
}

#endif							/* GM_EXPLICIT_CUH */
