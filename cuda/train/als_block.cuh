/*
 * als_block.cuh: the block coordinate descent solver of implicit ALS on the
 * GPU (iALS++, Rendle et al. 2021), used by als_implicit.cu for
 * GM_SOLVER_BLOCK (and GM_SOLVER_EXACT when the padded width is at most 64:
 * one block is the exact solve).
 *
 * A sweep of a side is, for each block B of GM_B coordinates in turn:
 *
 *   1. H = X G(:, B) for every row (cuBLAS sgemm, als_implicit.cu);
 *   2. gm_block_pass: for every row, with s_e = y_e . x cached per entry,
 *        A = G_BB + reg I + sum_e (c_e - alpha0) y_eB y_eB^T
 *        r = sum_e (c_e - (c_e - alpha0) s_e) y_eB - H_row - reg x_B
 *      then the b x b system A d = r solved exactly (symmetric Gaussian
 *      elimination in registers, a pivot that is not positive leaves the
 *      row unchanged), x_B += d, and d kept in D;
 *   3. gm_block_apply: s_e += y_eB . d_row for every entry.
 *
 * The math is src/core/train/als_implicit.c's block_solve_row; the CPU solves a
 * row's blocks one after the other, the GPU a block of every row at a time,
 * which is the same arithmetic (rows are independent) and keeps the slice
 * Y(:, B) of the other side, 4 b n bytes, in L2 while a block runs.
 */
#ifndef GM_ALS_BLOCK_CUH
#define GM_ALS_BLOCK_CUH

#include "common.cuh"

/* GM_BLOCK_MIN, GM_BLOCK_MAX and gm_gpu_block_width: gm_algo.h */

typedef struct gm_block_args
{
	const int64_t *indptr;		/* this side's CSR (values as read) */
	const int32_t *indices;
	const float *data;
	const int2 *chunks;			/* the rows' chunks (device_csr.cuh) */
	int32_t		nchunks;
	const float *Y;				/* the other side's factors, n_other x kp */
	float	   *X;				/* this side's factors, n x kp */
	float	   *S;				/* per entry: y_e . x */
	const float *G;				/* kp x kp */
	const float *H;				/* slice rows x b: (X G)(:, B), row r at r - row0 */
	float	   *D;				/* slice rows x b: the step taken, row r at r - row0 */
	const float *reg;			/* per-row ridge, or NULL */
	const int32_t *slot;		/* per row: its scratch slot, -1 for single-chunk rows */
	int32_t		slot0;			/* the slice's first slot: scratch starts there */
	float	   *scratch;		/* the slice's slots x (b^2 + b), zero between passes */
	int		   *counter;		/* per row, zero between passes */
	int		   *queue;			/* the chunk queue (device_csr.cuh), or NULL */
	int			kp;
	int			k;				/* real factors; columns k .. kp-1 are padding */
	int			b0;				/* the block's first coordinate */
	int32_t		row0;			/* the slice's first row (H and D start there) */
	float		alpha;			/* confidence = 1 + alpha value (gm_confidence) */
	float		alpha0;
} gm_block_args;

/*
 * c = 1 + alpha v, rounded like the CPU's 1.0f + alpha * v (no fused
 * multiply-add), so both backends train on the same confidences.  The GPU
 * keeps the values as read and forms each confidence where it is used: one
 * copy of the values instead of two (values and confidences).
 */
__device__ __forceinline__ float
gm_confidence(float alpha, float v)
{
	return __fadd_rn(1.0f, __fmul_rn(alpha, v));
}

/*
 * Launch steps 2 and 3 above for a slice's chunks; b is 32 or 64; tc: the
 * b x b Grams on tensor cores (TF32 inputs, FP32 accumulation) where the
 * code the device runs has them (compute capability 8.0 and newer), else
 * in FP32.
 */
cudaError_t gm_block_pass(int b, int tc, const gm_block_args &a, cudaStream_t st);
cudaError_t gm_block_apply(int b, const gm_block_args &a, cudaStream_t st);

/* Shared memory a gm_block_pass launch needs with 8 warps a block. */
size_t		gm_block_smem(int b, int tc);

/*
 * Plan the kernels for the current device (warps per block that fit its
 * shared memory, tensor cores or not) and allow them their shared memory;
 * before the first gm_block_pass, and again for another device.
 */
cudaError_t gm_block_prepare(void);

/* Whether tc = 1 really runs on tensor cores here (after gm_block_prepare). */
int			gm_block_tensor_cores(void);

#endif							/* GM_ALS_BLOCK_CUH */
