/*
 * ccd.cu: CCD++ for explicit ratings on the GPU (CuCCD's design), the table
 * gm_cuda_ccd_ops.  The order of work and the arithmetic are those of the
 * CPU version (src/core/train/ccd.c), both following src/core/train/gm_ccd_plan.h.
 *
 *  - The residual lives twice on the device, in CSR order (the pass that
 *    updates a user-side vector reads a user's row) and in CSC order (the
 *    item-side pass), each as indices + values, so both passes read
 *    contiguously.  The ratings themselves are not kept: the residual
 *    starts as r - mu - b - c - W H^T and only ever changes by rank-one
 *    terms.
 *  - Factors are feature-major: vector t of side s is n[s] contiguous
 *    floats (vec[s] + t * n[s]), then the bias vector, then the snapshot
 *    slots of the plan.
 *  - A pass adds its copy's pending rank-one terms while it reads the
 *    residual (and writes the sum back), and computes
 *        target[i] = sum_j res_ij cur_j / (lambda n_i + sum_j cur_j^2),
 *    n_i the row's number of ratings (the weighted lambda of explicit ALS;
 *    read from the row pointers).
 *    The terms are packed first (ccd_pack): per row of the pass
 *    rp[i] = (c0, a1, a2, -), per gathered index cp[j] = (g0, g1, g2, cur),
 *    so one 16-byte gather per nonzero serves every term and the update:
 *        res_ij += c0[i] + g0[j] + a1[i] g1[j] + a2[i] g2[j].
 *  - Work layout ("binning"): rows are grouped by nonzero count into
 *    power-of-two classes; a class is served by groups of G lanes per row
 *    (G = 1 .. 32 growing with the class) with a shuffle reduction inside
 *    the group, and rows longer than CCD_BLOCK_ROW by whole blocks, one
 *    per CCD_CHUNK nonzeros (a row of many chunks adds its partial sums
 *    with float64 atomics; the last chunk to finish updates the row).  The
 *    work is cut into block-sized tasks, heaviest classes first, and one
 *    launch runs them all (mode 1); mode 2 launches each class on its own
 *    stream instead (as CuCCD did); mode 0 is the unbinned baseline, a warp
 *    per row in row order (gm_cuda_ccd_set_binning).
 *  - One copy (mode 3, the default when the item side's sums fit in a
 *    block's shared memory, 8 bytes an item; mode 1 otherwise): the
 *    residual is kept only in CSR order, and the item-side pass becomes a
 *    scatter over it (ccd_scatter).  The update of item j needs
 *    sum_i R_ij u_i and sum_i u_i^2 over its column; the scatter streams the
 *    CSR in storage order (coalesced, no gather: u_i is the row's, from L1),
 *    adds both into shared-memory sums of every item with float atomics,
 *    then into the block's row of a partial-sum buffer; ccd_scatter_finish
 *    adds the rows in float64 and solves.  Per feature the residual is read
 *    twice and written once (20 bytes a rating instead of 24), the random
 *    16-byte gathers of user packs that bound the CSC pass are gone, and
 *    the CSC copy (8 bytes a rating of device memory) is never made.  Terms
 *    queued by an item-side step (the item bias's) are applied by its
 *    scatter, which then writes; `ahead` counts them so that the next CSR
 *    pass does not add them again.
 *  - Fixed-point scatter sums (the default of the one-copy layout): float
 *    atomics on shared memory are compare-and-swap loops on this hardware
 *    (ATOMS.CAST.SPIN, retried under contention on popular items), an int32
 *    add is one instruction (ATOMS.ADD): the scatter runs 1.5x faster
 *    (Netflix shape, H100: 0.41 against 0.61 ms a feature).  Each term is scaled by a power of two and rounded, the
 *    scale chosen so a block's sum of C terms of the bound's size stays
 *    under 2^30 (C = twice the longest column's share of a block, + 64; the
 *    bound = max |residual| seen by the previous scatter, doubled when the
 *    scatter adds terms, times max |u| of this sweep's weights, which the
 *    pack kernel measures).  Every add checks its own signed overflow on
 *    the value the atomic returned, every term that it fits in an int32;
 *    a block where either fails writes nothing and is run again with float
 *    atomics by ccd_scatter's fallback launch (which exits at once for the
 *    other blocks), so a wrong bound costs time, never a wrong sum.  The
 *    sums are order-independent (deterministic); a term is resolved to
 *    2^-30 C of the bound (about 2^-18 on the Netflix shape, C = 4918).
 *  - Narrow packs (load_pack): a binned pass that adds the usual two
 *    feature terms gathers 8 bytes a column instead of 16, one that adds
 *    none 4, so more of the gathered side stays in L1.
 *  - Loss and RMSE accumulate in float64; the penalty is the weighted one,
 *    lambda sum_i n_i (|w_i|^2 + b_i^2) over both sides.
 */
#include "explicit.cuh"
#include "device_csr.cuh"
#include "gm_core.h"			/* gm_csr_nnz_bins */
#include "gm_ccd_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CCD_THREADS		256		/* every pass kernel */
#define CCD_WARPS		(CCD_THREADS / 32)
#define CCD_BLOCK_ROW	1024	/* longer rows are served by whole blocks */
#define CCD_CHUNK		4096	/* nonzeros per block task */
#define CCD_TASK_NNZ	8192	/* about this many nonzeros per task of short rows */
#define CCD_KIND_BLOCK	6		/* task kinds 0 .. 5: log2 of the lanes per row */
#define CCD_CLASSES		12		/* row classes by ceil(log2(nnz)): 0 .. 10, block */
#define CCD_STREAMS		4
#define CCD_SCATTER_THREADS	1024	/* the scatter's blocks: one resident per SM */
#define CCD_BINNED_ONE_COPY	3
#define CCD_ONE_COPY_FLOAT	4	/* one copy, the scatter's sums in float atomics */

static int g_binning = CCD_BINNED_ONE_COPY;
static long long g_scatter_fallbacks = 0;
static float g_fixed_cnt = 0.0f;	/* > 0: the terms a block's sum is sized for (tests) */

/*
 * The work layout of later trainings: 0 none, 1 binned, 2 a stream per
 * class, 3 binned with one copy of the residual and fixed-point scatter
 * sums (default; mode 1 where the item side's sums do not fit in shared
 * memory), 4 the same with float scatter sums.
 */
extern "C" void
gm_cuda_ccd_set_binning(int mode)
{
	g_binning = mode < 0 || mode > 4 ? CCD_BINNED_ONE_COPY : mode;
}

/*
 * Tests: size the fixed-point sums for cnt terms instead (a tiny cnt makes
 * every block overflow and run the fallback); 0 restores the rule.
 */
extern "C" void
gm_cuda_ccd_set_fixed_count(float cnt)
{
	g_fixed_cnt = cnt > 0.0f ? cnt : 0.0f;
}

/*
 * Blocks of fixed-point scatters that the process's trainings ran again
 * with float sums (counted when a training's state is freed).
 */
extern "C" long long
gm_cuda_ccd_scatter_fallbacks(void)
{
	return g_scatter_fallbacks;
}

/*
 * The fixed-point scatter's device state: float bits of nonnegative maxima
 * (ordered as unsigned), the blocks to run again, and their count.
 */
typedef struct ccd_fixed
{
	unsigned	vmax;			/* max |residual| the previous scatter sweep read */
	unsigned	vmax_next;		/* the same, this sweep */
	unsigned	umax;			/* max |weight| of this sweep's pack */
	unsigned	fallbacks;
} ccd_fixed;

typedef struct ccd_side
{
	int32_t		n;				/* rows (every row of the side; a share's view
								 * has entries in [own0, own1) only) */
	int32_t		own0,			/* the rows this device updates */
				own1;
	const int64_t *ptr_h;		/* the caller's row pointers (natural order) */
	gm_dcsr		csr;			/* indptr, indices; data holds the residual */
	gm_dbins	bins;			/* rows in task order: bin 0 the long rows, then
								 * the classes from long to short */
	int4	   *tasks;			/* device: (kind, first or row, count or chunk, slot) */
	int32_t		ntasks;
	int32_t    *task_pos_h;		/* host: binned position of each task's first row, + the
								 * positions (own1 - own0) */
	int32_t		bin_task_h[CCD_CLASSES + 1];	/* host: bin b's tasks start at [b] */
	int64_t    *ptr_perm_h;		/* host: nonzeros in binned order, cumulative (own rows) */
	double2    *acc;			/* device: partial sums of rows of many chunks */
	unsigned   *cnt;
	float4	   *rowpack;		/* device, n */
	float4	   *colpack;		/* device, n */
} ccd_side;

typedef struct ccd_gpu
{
	int			dev;			/* the CUDA device */
	int			slot;			/* several devices: this one's share, of nslots */
	int			nslots;
	int			sweep_side;		/* the current sweep's rows: side, and binned (positions) */
	int			sweep_binned;	/* or storage order (rows) */
	gm_ccd_plan plan;
	gm_ccd_step step;
	int			k;
	int			biases;
	float		lambda;
	double		mu;
	int64_t		nnz;			/* the CSR copy's (this device's share) */
	int			binning;
	int			one_copy;		/* the item-side passes scatter over the CSR copy */
	int			ahead;			/* one copy: terms at the head of the CSR's pending
								 * list that a scatter has already applied */
	int			n_apply;		/* terms the current sweep's pass adds */
	int			pw;				/* its gathered pack's width (load_pack) */
	float2	   *partial;		/* one copy: scatter sums, nslots x scatter_blocks x
								 * n_items (slot q: device q's blocks) */
	int			fixed;			/* one copy: fixed-point scatter sums */
	ccd_fixed  *fx;				/* their device state */
	int		   *redo;			/* scatter_blocks flags: run again with float sums */
	int64_t		col_max;		/* the longest column (item) */
	int32_t    *crow;			/* one copy: the row of every CCD_FLAT_CHUNK-th
								 * nonzero of the CSR */
	int			scatter_blocks;
	size_t		scatter_smem;
	ccd_side	side[2];
	float	   *vec[2];			/* (k + 1 + GM_CCD_SLOTS) x n[s] */
	double	   *dsum;			/* 4 accumulators */
	float	   *tmpF[2];		/* create: row-major factors, biases */
	float	   *tmpb[2];
	cudaStream_t stream;
	cudaStream_t bin_stream[CCD_STREAMS];
	cudaEvent_t ev_fork;
	cudaEvent_t ev_join[CCD_STREAMS];
	int			have_stream;
	int			have_bin_streams;
} ccd_gpu;

/* ------------------------------------------------------------ kernels */

struct pass_args
{
	const int64_t *ptr;
	const int32_t *idx;
	float	   *res;
	const float4 *rp;
	const float4 *cp;
	const int32_t *perm;
	const int4 *tasks;
	int32_t		task0;
	float	   *target;
	float		lambda;
	double2    *acc;
	unsigned   *cnt;
	int32_t		row0;
	int32_t		nrows;
};

/*
 * The closed-form coordinate update of row `row`: num / (lambda n_row + den)
 * with n_row its number of entries (the weighted lambda), 0 for an empty row.
 */
__device__ __forceinline__ float
ccd_update(const pass_args &a, int32_t row, double num, double den)
{
	double		d = (double) a.lambda * (double) (a.ptr[row + 1] - a.ptr[row]) + den;

	return d > 0.0 ? (float) (num / d) : 0.0f;
}

/*
 * The gathered pack of column j as (g0, g1, g2, cur), stored PW floats
 * wide: 4 the general (g0, g1, g2, cur); 2 (g1, cur) when there is no g0
 * term and the second general term's vector is cur's (a feature entry's
 * first pass: the previous entry out, this one in), half the bytes, so
 * that more of the gathered side stays in L1; 1 (cur) for a pass that adds
 * no terms.
 */
template <int PW>
__device__ __forceinline__ float4
load_pack(const pass_args &a, int32_t j)
{
	if (PW == 4)
		return __ldg(a.cp + j);
	if (PW == 2)
	{
		const float2 t = __ldg((const float2 *) a.cp + j);

		return make_float4(0.0f, t.x, t.y, t.y);
	}
	return make_float4(0.0f, 0.0f, 0.0f, __ldg((const float *) a.cp + j));
}

/*
 * Lane `lane` of a group of G lanes runs over nonzeros b + lane, b + lane +
 * G, ... < e: adds the packed terms (WRITE) and accumulates
 * num += res * cur, den += cur^2.  Four nonzeros in flight per lane, the
 * last round predicated (a row's tail costs one memory round trip, not up
 * to three); the residual and the indices are read once, so they stream
 * past the caches (__ldcs, __stcs) and leave L2 to the gathered packs.
 * PW is the gathered pack's width (load_pack).
 */
template <int G, bool WRITE, int PW>
__device__ __forceinline__ void
row_sums(const pass_args &a, int64_t b, int64_t e, int lane, float4 rp,
		 float &num, float &den)
{
	for (int64_t x = b + lane; x < e; x += 4 * G)
	{
		int32_t		j[4];
		float		r[4];
		float4		g[4];

#pragma unroll
		for (int u = 0; u < 4; u++)
			if (x + u * G < e)
			{
				j[u] = __ldcs(a.idx + x + u * G);
				r[u] = __ldcs(a.res + x + u * G);
			}
#pragma unroll
		for (int u = 0; u < 4; u++)
			if (x + u * G < e)
				g[u] = load_pack<PW>(a, j[u]);
#pragma unroll
		for (int u = 0; u < 4; u++)
			if (x + u * G < e)
			{
				float		v = r[u];

				if (WRITE)
				{
					v += rp.x + g[u].x + rp.y * g[u].y + rp.z * g[u].z;
					__stcs(a.res + x + u * G, v);
				}
				num = fmaf(v, g[u].w, num);
				den = fmaf(g[u].w, g[u].w, den);
			}
	}
}

/* The unbinned baseline: a warp per row, rows [row0, row0 + nrows) in order. */
template <bool WRITE>
__global__ void
__launch_bounds__(CCD_THREADS)
ccd_pass_plain(pass_args a)
{
	const int	lane = threadIdx.x & 31;
	const int64_t r = (int64_t) blockIdx.x * CCD_WARPS + (threadIdx.x >> 5);
	float		num = 0.0f,
				den = 0.0f;
	int32_t		row;

	if (r >= a.nrows)
		return;					/* the whole warp */
	row = a.row0 + (int32_t) r;
	row_sums<32, WRITE, 4>(a, a.ptr[row], a.ptr[row + 1], lane,
						WRITE ? a.rp[row] : make_float4(0, 0, 0, 0), num, den);
	num = group_sum<32>(num);
	den = group_sum<32>(den);
	if (lane == 0)
		a.target[row] = ccd_update(a, row, num, den);
}

/* A task of t.z rows from binned position t.y, a group of G lanes per row. */
template <int G, bool WRITE, int PW>
__device__ __forceinline__ void
rows_task(const pass_args &a, int4 t)
{
	constexpr int GROUPS = CCD_THREADS / G;
	const int	grp = threadIdx.x / G;
	const int	lane = threadIdx.x % G;

	/* the loop bound is the block's, so every lane reaches the shuffles */
	for (int base = 0; base < t.z; base += GROUPS)
	{
		int			r = base + grp;
		int32_t		row = -1;
		float		num = 0.0f,
					den = 0.0f;

		if (r < t.z)
		{
			row = a.perm[t.y + r];
			row_sums<G, WRITE, PW>(a, a.ptr[row], a.ptr[row + 1], lane,
							   WRITE ? a.rp[row] : make_float4(0, 0, 0, 0), num, den);
		}
		num = group_sum<G>(num);
		den = group_sum<G>(den);
		if (row >= 0 && lane == 0)
			a.target[row] = ccd_update(a, row, num, den);
	}
}

/*
 * Chunk t.z of the long row t.y, by the whole block.  t.w < 0: the row has
 * one chunk and is updated here; else slot t.w collects the chunks' sums
 * and the last chunk to finish updates the row and clears the slot.
 */
template <bool WRITE, int PW>
__device__ __forceinline__ void
block_task(const pass_args &a, int4 t)
{
	__shared__ float s_num[CCD_WARPS],
				s_den[CCD_WARPS];
	const int	lane = threadIdx.x & 31,
				warp = threadIdx.x >> 5;
	const int64_t rb = a.ptr[t.y],
				re = a.ptr[t.y + 1];
	const int64_t b = rb + (int64_t) t.z * CCD_CHUNK;
	const int64_t e = b + CCD_CHUNK < re ? b + CCD_CHUNK : re;
	float		num = 0.0f,
				den = 0.0f;

	row_sums<CCD_THREADS, WRITE, PW>(a, b, e, threadIdx.x,
								 WRITE ? a.rp[t.y] : make_float4(0, 0, 0, 0), num, den);
	num = group_sum<32>(num);
	den = group_sum<32>(den);
	if (lane == 0)
	{
		s_num[warp] = num;
		s_den[warp] = den;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		n = 0.0,
					d = 0.0;

		for (int w = 0; w < CCD_WARPS; w++)
		{
			n += s_num[w];
			d += s_den[w];
		}
		if (t.w < 0)
			a.target[t.y] = ccd_update(a, t.y, n, d);
		else
		{
			unsigned	nch = (unsigned) ((re - rb + CCD_CHUNK - 1) / CCD_CHUNK);

			atomicAdd(&a.acc[t.w].x, n);
			atomicAdd(&a.acc[t.w].y, d);
			__threadfence();
			if (atomicAdd(&a.cnt[t.w], 1u) == nch - 1)
			{
				volatile double *s = (volatile double *) &a.acc[t.w];

				__threadfence();
				a.target[t.y] = ccd_update(a, t.y, s[0], s[1]);
				s[0] = 0.0;
				s[1] = 0.0;
				a.cnt[t.w] = 0;
			}
		}
	}
}

/* Binned: one block per task, tasks task0 .. task0 + gridDim.x. */
template <bool WRITE, int PW>
__global__ void
__launch_bounds__(CCD_THREADS)
ccd_pass_binned(pass_args a)
{
	const int4	t = a.tasks[a.task0 + blockIdx.x];

	switch (t.x)
	{
		case 0:
			rows_task<1, WRITE, PW>(a, t);
			break;
		case 1:
			rows_task<2, WRITE, PW>(a, t);
			break;
		case 2:
			rows_task<4, WRITE, PW>(a, t);
			break;
		case 3:
			rows_task<8, WRITE, PW>(a, t);
			break;
		case 4:
			rows_task<16, WRITE, PW>(a, t);
			break;
		case 5:
			rows_task<32, WRITE, PW>(a, t);
			break;
		default:
			block_task<WRITE, PW>(a, t);
			break;
	}
}

/*
 * One copy: the item-side pass as a scatter over the CSR copy, nonzeros
 * [x0, x1) in storage order (rows [r0, r1)).  A warp takes CCD_FLAT_CHUNK
 * consecutive nonzeros at a time, lane l those at l, l + 32, ... (every
 * load coalesced; the next chunk's loads are issued before this chunk's
 * sums), and finds each one's row among the rows crow[c] .. crow[c + 1]
 * that chunk c spans (crow: the row of nonzero c * CCD_FLAT_CHUNK):
 * usually the previous one's row, else a binary search over the row
 * pointers (L1).  With WRITE the row's packed terms (rp) are added and the
 * value written back; then num[j] += v u_i and den[j] += u_i^2 (u_i = rp.w)
 * in shared memory, two arrays of n_items floats (a float a bank: float
 * atomics conflict less than on interleaved pairs, and a compare-and-swap
 * loop over both sums at once measured 5x slower), and at the end into
 * the block's row of `partial` (launches of one sweep run in order, so
 * that read-modify-write needs no atomics).
 */
#define CCD_FLAT_PER_LANE	4
#define CCD_FLAT_CHUNK	(32 * CCD_FLAT_PER_LANE)

/*
 * The power of two s with s * m * cnt <= 2^30 (the fixed-point scale of
 * terms bounded by m, cnt of them to a block's sum), clamped to 2^-100 ..
 * 2^100 (m = 0: every term must be 0; a larger one overflows and is
 * caught).  0 for a bound that is not a finite number: the block falls
 * back at once.
 */
__device__ __forceinline__ float
fixed_scale(float m, float cnt)
{
	float		t;
	int			e;

	if (!(m < 3.0e38f))
		return 0.0f;
	if (m <= 0.0f)
		return 0x1p100f;
	t = 0x1p30f / (cnt * m);
	e = ilogbf(t);
	e = e < -100 ? -100 : (e > 100 ? 100 : e);
	return ldexpf(1.0f, e);
}

/* v into the shared int sum *p as round(v), false when it does not fit */
__device__ __forceinline__ bool
fixed_add(int *p, float v)
{
	int			q,
				old,
				sum;

	if (!(fabsf(v) < 0x1p31f))
		return false;
	q = __float2int_rn(v);
	old = atomicAdd(p, q);
	sum = (int) ((unsigned) old + (unsigned) q);
	return ((old ^ sum) & (q ^ sum)) >= 0;
}

/*
 * One copy: the item-side pass as a scatter over the CSR copy, nonzeros
 * [x0, x1) in storage order (rows [r0, r1)).  A warp takes CCD_FLAT_CHUNK
 * consecutive nonzeros at a time, lane l those at l, l + 32, ... (every
 * load coalesced; the next chunk's loads are issued before this chunk's
 * sums), and finds each one's row among the rows crow[c] .. crow[c + 1]
 * that chunk c spans (crow: the row of nonzero c * CCD_FLAT_CHUNK):
 * usually the previous one's row, else a binary search over the row
 * pointers (L1).  With WRITE the row's packed terms (rp) are added and the
 * value written back; then num[j] += v u_i and den[j] += u_i^2 (u_i = rp.w)
 * in shared memory, two arrays of n_items sums, and at the end into the
 * block's row of `partial` (launches of one sweep run in order, so that
 * read-modify-write needs no atomics).
 *
 * FIXED: the sums are int32 fixed point (see the file's head; fx holds
 * the bounds, cnt the terms a block's sum is sized for); a block that
 * overflows sets redo[block] and writes nothing.  Otherwise float atomics
 * (a float a bank: they conflict less than interleaved pairs, and a
 * compare-and-swap over both sums at once measured 5x slower); with redo
 * set this is the fallback launch: only the blocks flagged run (the
 * residual was written by the fixed-point launch, so WRITE is false), and
 * clear their flag.
 */
template <bool WRITE, bool FIXED>
__global__ void
__launch_bounds__(CCD_SCATTER_THREADS)
ccd_scatter(pass_args a, int64_t x0, int64_t x1, int32_t r0, int32_t r1,
			const int32_t *crow, int32_t n_items, float2 *partial,
			ccd_fixed *fx, float cnt, int *redo)
{
	extern __shared__ float s_sum[];
	__shared__ int s_bad;
	__shared__ float s_vmax[CCD_SCATTER_THREADS / 32];
	constexpr int WARPS = CCD_SCATTER_THREADS / 32;
	float	   *s_num = s_sum,
			   *s_den = s_sum + n_items;
	int		   *i_num = (int *) s_sum,
			   *i_den = (int *) s_sum + n_items;
	const int	lane = threadIdx.x & 31;
	const int64_t stride = (int64_t) gridDim.x * WARPS;
	int64_t		c = x0 / CCD_FLAT_CHUNK + (int64_t) blockIdx.x * WARPS + (threadIdx.x >> 5);
	int32_t		jn[CCD_FLAT_PER_LANE];
	float		rn[CCD_FLAT_PER_LANE];
	float2	   *mine = partial + (size_t) blockIdx.x * n_items;
	float		sn = 0.0f,
				sd = 0.0f,
				vmax = 0.0f;
	bool		ok = true;

	if (!FIXED && redo != NULL && redo[blockIdx.x] == 0)
		return;					/* the whole block: nothing to run again */
	if (FIXED)
	{
		const float um = __uint_as_float(fx->umax);

		sn = fixed_scale((WRITE ? 2.0f : 1.0f) * __uint_as_float(fx->vmax) * um, cnt);
		sd = fixed_scale(um * um, cnt);
		ok = sn > 0.0f && sd > 0.0f;
	}
	if (threadIdx.x == 0)
		s_bad = 0;
	for (int32_t j = threadIdx.x; j < 2 * n_items; j += CCD_SCATTER_THREADS)
		s_sum[j] = 0.0f;		/* also int 0 */
	__syncthreads();

#pragma unroll
	for (int u = 0; u < CCD_FLAT_PER_LANE; u++)
	{
		const int64_t x = c * CCD_FLAT_CHUNK + u * 32 + lane;

		if (x >= x0 && x < x1)
		{
			jn[u] = __ldcs(a.idx + x);
			rn[u] = __ldcs(a.res + x);
		}
	}
	for (; c * CCD_FLAT_CHUNK < x1; c += stride)
	{
		const int64_t base = c * CCD_FLAT_CHUNK,
					next = (c + stride) * CCD_FLAT_CHUNK;
		const int32_t hi = min(crow[c + 1], r1 - 1);
		int32_t		row = max(crow[c], r0);
		int32_t		j[CCD_FLAT_PER_LANE];
		float		r[CCD_FLAT_PER_LANE];

#pragma unroll
		for (int u = 0; u < CCD_FLAT_PER_LANE; u++)
		{
			const int64_t x = next + u * 32 + lane;

			j[u] = jn[u];
			r[u] = rn[u];
			if (x < x1)
			{
				jn[u] = __ldcs(a.idx + x);
				rn[u] = __ldcs(a.res + x);
			}
		}
#pragma unroll
		for (int u = 0; u < CCD_FLAT_PER_LANE; u++)
		{
			const int64_t x = base + u * 32 + lane;

			if (x >= x0 && x < x1)
			{
				float4		rp;

				if (a.ptr[row + 1] <= x)
				{
					/* the last row in (row, hi] that starts at or before x */
					int32_t		lo = row + 1,
								up = hi;

					while (lo < up)
					{
						int32_t		mid = lo + (up - lo + 1) / 2;

						if (a.ptr[mid] <= x)
							lo = mid;
						else
							up = mid - 1;
					}
					row = lo;
				}
				rp = a.rp[row];
				if (WRITE)
				{
					const float4 g = __ldg(a.cp + j[u]);

					r[u] += rp.x + g.x + rp.y * g.y + rp.z * g.z;
					__stcs(a.res + x, r[u]);
				}
				if (FIXED)
				{
					vmax = fmaxf(vmax, fabsf(r[u]));
					ok &= fixed_add(i_num + j[u], r[u] * rp.w * sn);
					ok &= fixed_add(i_den + j[u], rp.w * rp.w * sd);
				}
				else
				{
					atomicAdd(s_num + j[u], r[u] * rp.w);
					atomicAdd(s_den + j[u], rp.w * rp.w);
				}
			}
		}
	}
	if (FIXED)
	{
		/* the largest |residual| read, for the next sweep's bound (a NaN fails fixed_add) */
		for (int o = 16; o > 0; o >>= 1)
			vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
		if (lane == 0)
			s_vmax[threadIdx.x >> 5] = vmax;
		if (!ok)
			s_bad = 1;
	}
	__syncthreads();
	if (FIXED)
	{
		if (threadIdx.x == 0)
		{
			float		m = 0.0f;

			for (int w = 0; w < WARPS; w++)
				m = fmaxf(m, s_vmax[w]);
			atomicMax(&fx->vmax_next, __float_as_uint(m));
			if (s_bad)
				redo[blockIdx.x] = 1;
		}
		if (s_bad)
			return;				/* the whole block */
	}
	for (int32_t j = threadIdx.x; j < n_items; j += CCD_SCATTER_THREADS)
	{
		float		n,
					d;

		if (FIXED)
		{
			n = (float) ((double) i_num[j] / (double) sn);
			d = (float) ((double) i_den[j] / (double) sd);
		}
		else
		{
			n = s_num[j];
			d = s_den[j];
		}
		if (n != 0.0f || d != 0.0f)
		{
			float2		p = mine[j];

			p.x += n;
			p.y += d;
			mine[j] = p;
		}
	}
	if (!FIXED && redo != NULL && threadIdx.x == 0)
	{
		redo[blockIdx.x] = 0;
		atomicAdd(&fx->fallbacks, 1u);
	}
}

/*
 * The end of a scatter sweep: target[j] = the blocks' numerators summed /
 * (lambda n_j + their denominators summed), in float64 as ccd_update.  A
 * block takes 32 items, its 8 warps a share of the partial rows each
 * (coalesced), then adds the warps' sums.  The caller clears `partial`.
 * Fixed-point sums (fx): the largest |residual| this sweep read becomes
 * the next one's bound.
 */
__global__ void
__launch_bounds__(256)
ccd_scatter_finish(const float2 *partial, int nblocks, int32_t n_items, const int64_t *cptr,
				   float lambda, float *target, ccd_fixed *fx)
{
	__shared__ double s_num[8][32],
				s_den[8][32];
	const int	lane = threadIdx.x & 31,
				warp = threadIdx.x >> 5;
	const int32_t j = (int32_t) blockIdx.x * 32 + lane;
	double		num = 0.0,
				den = 0.0;

	if (fx != NULL && blockIdx.x == 0 && threadIdx.x == 0)
		fx->vmax = fx->vmax_next;	/* the next scatter sweep's bound */
	if (j < n_items)
#pragma unroll 4
		for (int b = warp; b < nblocks; b += 8)
		{
			const float2 p = partial[(size_t) b * n_items + j];

			num += p.x;
			den += p.y;
		}
	s_num[warp][lane] = num;
	s_den[warp][lane] = den;
	__syncthreads();
	if (warp == 0 && j < n_items)
	{
		double		d;

		for (int w = 1; w < 8; w++)
		{
			num += s_num[w][lane];
			den += s_den[w][lane];
		}
		d = (double) lambda * (double) (cptr[j + 1] - cptr[j]) + den;
		target[j] = d > 0.0 ? (float) (num / d) : 0.0f;
	}
}

struct pack_args
{
	int32_t		n_fixed;
	float4	   *rp;
	int			n_c0;
	const float *c0v[GM_CCD_MAX_TERMS];	/* NULL: ones */
	float		c0s[GM_CCD_MAX_TERMS];
	int			n_gen;
	const float *genf[GM_CCD_MAX_GENERAL];
	float		gens[GM_CCD_MAX_GENERAL];
	int32_t		n_gath;
	float4	   *cp;
	int			n_g0;
	const float *g0v[GM_CCD_MAX_TERMS];
	float		g0s[GM_CCD_MAX_TERMS];
	const float *geng[GM_CCD_MAX_GENERAL];
	const float *cur;			/* NULL: ones */
	int			w_on;			/* rp.w = w[i] (NULL: ones), the scatter's weight */
	const float *w;
	unsigned   *umax;			/* non-NULL: max |rp.w| into it (float bits) */
	int			pw;				/* cp's width (load_pack): 4, 2 or 1 floats */
};

/* rp[i] = (c0, a1, a2, 0 or w) for the pass's rows, cp[j] = (g0, g1, g2, cur). */
__global__ void
__launch_bounds__(256)
ccd_pack(pack_args p)
{
	__shared__ float s_max[8];
	const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;

	if (p.umax != NULL)
	{
		/* the block's largest |w| (a NaN is kept: the scatter then falls back) */
		float		m = i < p.n_fixed ? fabsf(p.w ? p.w[i] : 1.0f) : 0.0f;

		for (int o = 16; o > 0; o >>= 1)
		{
			float		t = __shfl_xor_sync(0xffffffffu, m, o);

			m = m != m ? m : (t != t ? t : fmaxf(m, t));
		}
		if ((threadIdx.x & 31) == 0)
			s_max[threadIdx.x >> 5] = m;
		__syncthreads();
		if (threadIdx.x == 0)
		{
			for (int w = 1; w < (int) (blockDim.x >> 5); w++)
				m = m != m ? m : (s_max[w] != s_max[w] ? s_max[w] : fmaxf(m, s_max[w]));
			atomicMax(p.umax, __float_as_uint(m));
		}
	}

	if (p.rp != NULL && i < p.n_fixed)
	{
		float		c0 = 0.0f;

		for (int m = 0; m < p.n_c0; m++)
			c0 += p.c0s[m] * (p.c0v[m] ? p.c0v[m][i] : 1.0f);
		p.rp[i] = make_float4(c0,
							  p.n_gen > 0 ? p.gens[0] * p.genf[0][i] : 0.0f,
							  p.n_gen > 1 ? p.gens[1] * p.genf[1][i] : 0.0f,
							  p.w_on ? (p.w ? p.w[i] : 1.0f) : 0.0f);
	}
	if (i < p.n_gath && p.pw == 2)
		((float2 *) p.cp)[i] = make_float2(p.geng[0][i], p.geng[1][i]);
	else if (i < p.n_gath && p.pw == 1)
		((float *) p.cp)[i] = p.cur ? p.cur[i] : 1.0f;
	else if (i < p.n_gath)
	{
		float		g0 = 0.0f;

		for (int m = 0; m < p.n_g0; m++)
			g0 += p.g0s[m] * p.g0v[m][i];
		p.cp[i] = make_float4(g0,
							  p.n_gen > 0 ? p.geng[0][i] : 0.0f,
							  p.n_gen > 1 ? p.geng[1][i] : 0.0f,
							  p.cur ? p.cur[i] : 1.0f);
	}
}

/*
 * out[0] += sum over the CSR copy of (res + packed terms)^2: warps stride
 * over the rows, float64 sums.
 */
__global__ void
__launch_bounds__(CCD_THREADS)
ccd_eval_sse(pass_args a, int32_t n, double *out)
{
	__shared__ double s[CCD_WARPS];
	const int	lane = threadIdx.x & 31,
				warp = threadIdx.x >> 5;
	double		acc = 0.0;

	for (int64_t row = (int64_t) blockIdx.x * CCD_WARPS + warp; row < n;
		 row += (int64_t) gridDim.x * CCD_WARPS)
	{
		const float4 rp = a.rp[row];

		for (int64_t x = a.ptr[row] + lane; x < a.ptr[row + 1]; x += 32)
		{
			const float4 g = __ldg(a.cp + a.idx[x]);
			double		v = a.res[x] + (rp.x + g.x + rp.y * g.y + rp.z * g.z);

			acc += v * v;
		}
	}
	acc = warp_sum_d(acc);
	if (lane == 0)
		s[warp] = acc;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		t = 0.0;

		for (int w = 0; w < CCD_WARPS; w++)
			t += s[w];
		atomicAdd(out, t);
	}
}

/*
 * out[0] += sum_i n_i sum_f V[f * n + i]^2 over nvec feature-major vectors
 * of n floats, n_i = ptr[i + 1] - ptr[i]: one side's weighted penalty.
 */
__global__ void
__launch_bounds__(CCD_THREADS)
ccd_weighted_squares(const float *V, int32_t n, int nvec, const int64_t *ptr, double *out)
{
	__shared__ double s[CCD_WARPS];
	double		acc = 0.0;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		double		sq = 0.0;

		for (int f = 0; f < nvec; f++)
		{
			double		v = V[(int64_t) f * n + i];

			sq += v * v;
		}
		acc += sq * (double) (ptr[i + 1] - ptr[i]);
	}
	acc = warp_sum_d(acc);
	if ((threadIdx.x & 31) == 0)
		s[threadIdx.x >> 5] = acc;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		t = 0.0;

		for (int w = 0; w < CCD_WARPS; w++)
			t += s[w];
		atomicAdd(out, t);
	}
}

/* *out = max(*out, max |v[0 .. n)|) as float bits (a NaN wins) */
__global__ void
__launch_bounds__(CCD_THREADS)
ccd_absmax(const float *v, int64_t n, unsigned *out)
{
	__shared__ unsigned s[CCD_WARPS];
	unsigned	m = 0;

	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		m = max(m, __float_as_uint(fabsf(v[i])));
	for (int o = 16; o > 0; o >>= 1)
		m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
	if ((threadIdx.x & 31) == 0)
		s[threadIdx.x >> 5] = m;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		for (int w = 1; w < CCD_WARPS; w++)
			m = max(m, s[w]);
		atomicMax(out, m);
	}
}

/*
 * res (holding the ratings) -= mu + b_i + c_j + x_i . y_j for the rows of a
 * CSR (X its rows' factors, Y its columns', row-major k): a warp per row,
 * the dot in float64 like the CPU's.
 */
__global__ void
__launch_bounds__(CCD_THREADS)
ccd_init_residual(const int64_t *ptr, const int32_t *idx, float *res, int32_t n,
				  const float *X, const float *Y, int k, const float *brow,
				  const float *bcol, double mu)
{
	const int	lane = threadIdx.x & 31;
	const int64_t row = (int64_t) blockIdx.x * CCD_WARPS + (threadIdx.x >> 5);

	if (row >= n)
		return;
	for (int64_t x = ptr[row] + lane; x < ptr[row + 1]; x += 32)
	{
		const int32_t j = idx[x];
		const float *xr = X + row * k,
				   *yr = Y + (int64_t) j * k;
		double		dot = 0.0;

		for (int f = 0; f < k; f++)
			dot += (double) xr[f] * yr[f];
		res[x] = (float) (res[x] - mu - (brow ? brow[row] : 0.0f) -
						  (bcol ? bcol[j] : 0.0f) - dot);
	}
}

/* vec[f * n + i] = F[i * k + f]; vec[k * n + i] = bias[i] (or 0). */
__global__ void
ccd_to_feature_major(const float *F, const float *bias, int32_t n, int k, float *vec)
{
	const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	for (int f = 0; f < k; f++)
		vec[(int64_t) f * n + i] = F[i * k + f];
	vec[(int64_t) k * n + i] = bias ? bias[i] : 0.0f;
}

/* ------------------------------------------------------- host helpers */

/* Vector id of side s on the device, NULL for the all-ones vector. */
static inline float *
vec_of(ccd_gpu *c, int s, int id)
{
	return id == GM_CCD_ONES ? NULL : c->vec[s] + (size_t) id * c->side[s].n;
}

/* The smallest c with 2^c >= v. */
static int
ceil_log2(int64_t v)
{
	int			c = 0;

	while (((int64_t) 1 << c) < v)
		c++;
	return c;
}

/* lanes per row of class c (rows of 2^(c-1) < nnz <= 2^c): about 4 nonzeros a lane */
static int
class_lanes(int c)
{
	int			g = (1 << c) / 4;

	return g < 1 ? 1 : (g > 32 ? 32 : g);
}

/*
 * The task list of one side.  gm_csr_nnz_bins groups the rows into the
 * classes nnz <= 1, 2, 4, ..., 1024 and longer; the task order (and the
 * sweep's row order) takes the long rows first, a task per CCD_CHUNK
 * nonzeros, then the classes from long to short, rows ascending within a
 * class, cut into tasks of about CCD_TASK_NNZ nonzeros; heavy work first,
 * so the launch ends on short tasks.  Only the rows the device updates
 * ([own0, own1)) are scheduled: the sweep's positions are theirs.
 */
static int
build_schedule(ccd_side *sd, const gm_csr *A, int32_t *n_long, char *err, size_t errlen)
{
	int32_t		n = sd->own1 - sd->own0;	/* positions */
	const int64_t *ptr = sd->ptr_h;
	int64_t		upper[CCD_CLASSES];
	int32_t		start[CCD_CLASSES + 1],
				bstart[CCD_CLASSES + 1];
	int32_t    *perm = (int32_t *) malloc(sizeof(int32_t) * ((size_t) sd->n + 1));
	int32_t    *order = (int32_t *) malloc(sizeof(int32_t) * ((size_t) n + 1));
	int4	   *tasks = NULL;
	int64_t		ntasks = 0;
	int32_t		pos = 0;
	int			rc;

	if (!perm || !order)
		goto oom;
	for (int c = 0; c < CCD_CLASSES - 1; c++)
		upper[c] = (int64_t) 1 << c;
	upper[CCD_CLASSES - 1] = INT64_MAX;
	if ((rc = gm_csr_nnz_bins(A, CCD_CLASSES, upper, perm, start, err, errlen)) != GM_OK)
	{
		free(perm);
		free(order);
		return rc;
	}
	/* a share: keep its own rows, in the same order (the classes' starts move) */
	if (n < sd->n)
	{
		int32_t		q = 0;

		for (int c = 0; c < CCD_CLASSES; c++)
		{
			int32_t		b = start[c];

			start[c] = q;
			for (int32_t p = b; p < start[c + 1]; p++)
				if (perm[p] >= sd->own0 && perm[p] < sd->own1)
					perm[q++] = perm[p];
		}
		start[CCD_CLASSES] = q;
	}
	/* count the tasks: long rows by chunks, classes by groups of rows */
	for (int32_t p = start[CCD_CLASSES - 1]; p < n; p++)
		ntasks += (ptr[perm[p] + 1] - ptr[perm[p]] + CCD_CHUNK - 1) / CCD_CHUNK;
	for (int c = 0; c < CCD_CLASSES - 1; c++)
	{
		int			groups = CCD_THREADS / class_lanes(c);
		int			rounds = CCD_TASK_NNZ / (groups << c);
		int64_t		per = (int64_t) groups * (rounds > 1 ? rounds : 1);

		ntasks += (start[c + 1] - start[c] + per - 1) / per;
	}
	if (ntasks > INT32_MAX / 2)
	{
		free(perm);
		free(order);
		snprintf(err, errlen, "ccd: too many nonzeros for the CUDA schedule");
		return GM_EINVAL;
	}
	tasks = (int4 *) malloc(sizeof(int4) * (size_t) (ntasks > 0 ? ntasks : 1));
	sd->task_pos_h = (int32_t *) malloc(sizeof(int32_t) * (size_t) (ntasks + 1));
	sd->ptr_perm_h = (int64_t *) malloc(sizeof(int64_t) * ((size_t) n + 1));
	if (!tasks || !sd->task_pos_h || !sd->ptr_perm_h)
		goto oom;

	/* bin 0: the long rows, a task per chunk (a slot when several) */
	sd->ntasks = 0;
	sd->bin_task_h[0] = 0;
	bstart[0] = 0;
	*n_long = 0;
	for (int32_t p = start[CCD_CLASSES - 1]; p < n; p++)
	{
		int32_t		r = perm[p];
		int32_t		nch = (int32_t) ((ptr[r + 1] - ptr[r] + CCD_CHUNK - 1) / CCD_CHUNK);

		for (int32_t ch = 0; ch < nch; ch++)
		{
			tasks[sd->ntasks] = make_int4(CCD_KIND_BLOCK, r, ch, nch > 1 ? *n_long : -1);
			sd->task_pos_h[sd->ntasks++] = pos;
		}
		if (nch > 1)
			(*n_long)++;
		order[pos++] = r;
	}
	sd->bin_task_h[1] = sd->ntasks;
	bstart[1] = pos;
	/* bins 1 ..: class c = CCD_CLASSES - 1 - bin */
	for (int c = CCD_CLASSES - 2; c >= 0; c--)
	{
		int			G = class_lanes(c);
		int			groups = CCD_THREADS / G;
		int			rounds = CCD_TASK_NNZ / (groups << c);
		int32_t		per = groups * (rounds > 1 ? rounds : 1);
		int32_t		first = pos;

		for (int32_t p = start[c]; p < start[c + 1]; p++)
			order[pos++] = perm[p];
		for (int32_t f = first; f < pos; f += per)
		{
			tasks[sd->ntasks] = make_int4(ceil_log2(G), f, pos - f < per ? pos - f : per, -1);
			sd->task_pos_h[sd->ntasks++] = f;
		}
		sd->bin_task_h[CCD_CLASSES - c] = sd->ntasks;
		bstart[CCD_CLASSES - c] = pos;
	}
	sd->task_pos_h[sd->ntasks] = n;
	sd->ptr_perm_h[0] = 0;
	for (int32_t p = 0; p < n; p++)
		sd->ptr_perm_h[p + 1] = sd->ptr_perm_h[p] + (ptr[order[p] + 1] - ptr[order[p]]);

	rc = gm_dbins_upload(&sd->bins, order, n, bstart, CCD_CLASSES, err, errlen);
	if (rc == GM_OK)
	{
		cudaError_t e = gm_dev_malloc((void **) &sd->tasks, sizeof(int4) * (size_t) (sd->ntasks > 0 ? sd->ntasks : 1));

		if (e == cudaSuccess && sd->ntasks > 0)
			e = cudaMemcpy(sd->tasks, tasks, sizeof(int4) * (size_t) sd->ntasks, cudaMemcpyHostToDevice);
		if (e != cudaSuccess)
		{
			snprintf(err, errlen, "ccd: uploading the GPU schedule failed: %s", cudaGetErrorString(e));
			rc = GM_EDEVICE;
		}
	}
	free(perm);
	free(order);
	free(tasks);
	return rc;

oom:
	free(perm);
	free(order);
	free(tasks);
	snprintf(err, errlen, "ccd: out of host memory for the GPU schedule");
	return GM_ENOMEM;
}

/* Free the state (safe on NULL and half-built states). */
static void
ccd_destroy(void *h)
{
	ccd_gpu    *c = (ccd_gpu *) h;

	if (c == NULL)
		return;
	(void) cudaSetDevice(c->dev);
	if (c->have_stream)
		cudaStreamSynchronize(c->stream);
	for (int s = 0; s < 2; s++)
	{
		ccd_side   *sd = &c->side[s];

		gm_dcsr_free(&sd->csr);
		gm_dbins_free(&sd->bins);
		gm_dev_free(sd->tasks);
		gm_dev_free(sd->acc);
		gm_dev_free(sd->cnt);
		gm_dev_free(sd->rowpack);
		gm_dev_free(sd->colpack);
		free(sd->task_pos_h);
		free(sd->ptr_perm_h);
		gm_dev_free(c->vec[s]);
		gm_dev_free(c->tmpF[s]);
		gm_dev_free(c->tmpb[s]);
	}
	if (c->fx != NULL)
	{
		ccd_fixed	f;

		if (cudaMemcpy(&f, c->fx, sizeof(f), cudaMemcpyDeviceToHost) == cudaSuccess)
			g_scatter_fallbacks += f.fallbacks;
	}
	gm_dev_free(c->fx);
	gm_dev_free(c->redo);
	gm_dev_free(c->dsum);
	gm_dev_free(c->partial);
	gm_dev_free(c->crow);
	if (c->have_bin_streams)
	{
		for (int q = 0; q < CCD_STREAMS; q++)
		{
			cudaStreamDestroy(c->bin_stream[q]);
			cudaEventDestroy(c->ev_join[q]);
		}
		cudaEventDestroy(c->ev_fork);
	}
	if (c->have_stream)
		cudaStreamDestroy(c->stream);
	(void) cudaGetLastError();
	free(c);
}

/* The scatter sums of every device's blocks (slot q: device q's). */
static size_t
partial_bytes(const ccd_gpu *c)
{
	int32_t		n_items = c->side[1].n;

	return sizeof(float2) * (size_t) c->nslots * c->scatter_blocks * (n_items > 0 ? n_items : 1);
}

/* This device's slot of the scatter sums. */
static float2 *
partial_mine(const ccd_gpu *c)
{
	return c->partial + (size_t) c->slot * c->scatter_blocks * c->side[1].n;
}

/*
 * Decide the one-copy layout (mode 3 and the item side's sums fit in a
 * block's shared memory) and size its launch: as many resident blocks as
 * the shared memory allows, one partial-sum row each.
 */
static int
scatter_setup(ccd_gpu *c, char *err, size_t errlen)
{
	int			dev,
				optin,
				sms,
				per_sm = 0;
	int32_t		n_items = c->side[1].n;

	const void *kern[4] = {(const void *) ccd_scatter<true, true>, (const void *) ccd_scatter<false, true>,
	(const void *) ccd_scatter<true, false>, (const void *) ccd_scatter<false, false>};
	size_t		static_smem = 0;

	c->one_copy = 0;
	c->fixed = 0;
	if (c->binning != CCD_BINNED_ONE_COPY && c->binning != CCD_ONE_COPY_FLOAT)
		return GM_OK;
	c->fixed = c->binning == CCD_BINNED_ONE_COPY;
	c->binning = 1;				/* the CSR passes run binned */
	GM_CHECK(cudaGetDevice(&dev));
	optin = (int) gm_smem_optin();	/* the card's limit per block (64 KB on 7.5 .. 227 KB on 9.0) */
	GM_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	for (int q = 0; q < 4; q++)
	{
		cudaFuncAttributes fa;

		GM_CHECK(cudaFuncGetAttributes(&fa, kern[q]));
		if (fa.sharedSizeBytes > static_smem)
			static_smem = fa.sharedSizeBytes;
	}
	c->scatter_smem = 2 * sizeof(float) * (size_t) (n_items > 0 ? n_items : 1);
	if (c->scatter_smem + static_smem > (size_t) optin)
	{
		c->fixed = 0;
		return GM_OK;			/* two copies */
	}
	for (int q = 0; q < 4; q++)
		GM_CHECK(cudaFuncSetAttribute(kern[q], cudaFuncAttributeMaxDynamicSharedMemorySize,
									  (int) c->scatter_smem));
	GM_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ccd_scatter<true, true>,
														   CCD_SCATTER_THREADS, c->scatter_smem));
	if (per_sm < 1)
	{
		c->fixed = 0;
		return GM_OK;
	}
	c->scatter_blocks = sms * per_sm;
	GM_CHECK(gm_dev_malloc((void **) &c->partial, partial_bytes(c)));
	GM_CHECK(cudaMemset(c->partial, 0, partial_bytes(c)));
	if (c->fixed)
	{
		GM_CHECK(gm_dev_malloc((void **) &c->fx, sizeof(ccd_fixed)));
		GM_CHECK(cudaMemset(c->fx, 0, sizeof(ccd_fixed)));
		GM_CHECK(gm_dev_malloc((void **) &c->redo, sizeof(int) * (size_t) c->scatter_blocks));
		GM_CHECK(cudaMemset(c->redo, 0, sizeof(int) * (size_t) c->scatter_blocks));
	}
	c->one_copy = 1;
	return GM_OK;
}

/* The flat scatter's chunk rows: crow[c] = the row of nonzero c * CCD_FLAT_CHUNK. */
static int
upload_chunk_rows(ccd_gpu *c, const gm_csr *A, char *err, size_t errlen)
{
	int64_t		nch = (A->nnz + CCD_FLAT_CHUNK - 1) / CCD_FLAT_CHUNK;
	int32_t    *h = (int32_t *) malloc(sizeof(int32_t) * (size_t) (nch + 2));
	int32_t		row = 0;
	cudaError_t e;

	if (h == NULL)
	{
		snprintf(err, errlen, "ccd: out of host memory for the GPU schedule");
		return GM_ENOMEM;
	}
	for (int64_t ch = 0; ch <= nch + 1; ch++)
	{
		int64_t		x = ch * CCD_FLAT_CHUNK;

		if (x >= A->nnz)
			h[ch] = A->n_rows > 0 ? A->n_rows - 1 : 0;
		else
		{
			while (A->indptr[row + 1] <= x)
				row++;
			h[ch] = row;
		}
	}
	e = gm_dev_malloc((void **) &c->crow, sizeof(int32_t) * (size_t) (nch + 2));
	if (e == cudaSuccess)
		e = cudaMemcpy(c->crow, h, sizeof(int32_t) * (size_t) (nch + 2), cudaMemcpyHostToDevice);
	free(h);
	GM_CHECK(e);
	return GM_OK;
}

/*
 * Everything create does that can fail on the device.  dv: the device's
 * problem (d itself, or with R and Rt replaced by its share's row views);
 * d: the whole problem (the factors, and the item side's column pointers
 * under one copy, where every device updates every item).
 */
static int
create_inner(ccd_gpu *c, const gm_mf_data *dv, const gm_mf_data *d, char *err, size_t errlen)
{
	const gm_csr *A[2] = {dv->R, dv->Rt};
	const float *F[2] = {d->X, d->Y};
	const float *bias[2] = {d->user_bias, d->item_bias};
	int			k = c->k;
	int			nvec = k + 1 + GM_CCD_SLOTS;
	float	  **Fd = c->tmpF,
			  **bd = c->tmpb;
	int			rc = GM_OK;

	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaStreamCreate(&c->stream));
	c->have_stream = 1;
	if (c->binning == 2)
	{
		GM_CHECK(cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming));
		for (int q = 0; q < CCD_STREAMS; q++)
		{
			GM_CHECK(cudaStreamCreateWithFlags(&c->bin_stream[q], cudaStreamNonBlocking));
			GM_CHECK(cudaEventCreateWithFlags(&c->ev_join[q], cudaEventDisableTiming));
			c->have_bin_streams = q + 1 == CCD_STREAMS;
		}
	}
	GM_CHECK(gm_dev_malloc((void **) &c->dsum, sizeof(double) * 4));
	if ((rc = scatter_setup(c, err, errlen)) != GM_OK)
		return rc;
	if (c->one_copy)
	{
		/* every device updates every item, from the sums of all */
		A[1] = d->Rt;
		c->side[1].own0 = 0;
		c->side[1].own1 = c->side[1].n;
	}

	for (int s = 0; s < 2; s++)
	{
		ccd_side   *sd = &c->side[s];
		size_t		n1 = (size_t) (sd->n > 0 ? sd->n : 1);
		int32_t		n_long = 0;

		sd->ptr_h = A[s]->indptr;
		if (s == 1)
			for (int32_t j = 0; j < sd->n; j++)
				if (sd->ptr_h[j + 1] - sd->ptr_h[j] > c->col_max)
					c->col_max = sd->ptr_h[j + 1] - sd->ptr_h[j];
		if (s == 1 && c->one_copy)
		{
			/* one copy: the item side keeps only its column pointers (n_j) */
			sd->csr.n_rows = sd->n;
			GM_CHECK(gm_dev_malloc((void **) &sd->csr.indptr, sizeof(int64_t) * (n1 + 1)));
			GM_CHECK(cudaMemcpy(sd->csr.indptr, A[s]->indptr, sizeof(int64_t) * ((size_t) sd->n + 1),
								cudaMemcpyHostToDevice));
		}
		/* the ratings go up as the CSR's values and become the residual there */
		else if ((rc = gm_dcsr_upload(&sd->csr, A[s], err, errlen)) != GM_OK)
			return rc;
		GM_CHECK(gm_dev_malloc((void **) &sd->rowpack, sizeof(float4) * n1));
		GM_CHECK(gm_dev_malloc((void **) &sd->colpack, sizeof(float4) * n1));
		if (!(s == 1 && c->one_copy) &&
			(rc = build_schedule(sd, A[s], &n_long, err, errlen)) != GM_OK)
			return rc;
		GM_CHECK(gm_dev_malloc((void **) &sd->acc, sizeof(double2) * (size_t) (n_long > 0 ? n_long : 1)));
		GM_CHECK(gm_dev_malloc((void **) &sd->cnt, sizeof(unsigned) * (size_t) (n_long > 0 ? n_long : 1)));
		GM_CHECK(cudaMemset(sd->acc, 0, sizeof(double2) * (size_t) (n_long > 0 ? n_long : 1)));
		GM_CHECK(cudaMemset(sd->cnt, 0, sizeof(unsigned) * (size_t) (n_long > 0 ? n_long : 1)));

		/* factors, all rows: row-major upload, feature-major on the device */
		GM_CHECK(gm_dev_malloc((void **) &c->vec[s], sizeof(float) * n1 * nvec));
		/* poison the slots (NaN): a term read before its snapshot shows */
		GM_CHECK(cudaMemset(c->vec[s], 0xff, sizeof(float) * n1 * nvec));
		GM_CHECK(gm_dev_malloc((void **) &Fd[s], sizeof(float) * n1 * k));
		GM_CHECK(cudaMemcpy(Fd[s], F[s], sizeof(float) * (size_t) sd->n * k, cudaMemcpyHostToDevice));
		if (c->biases)
		{
			GM_CHECK(gm_dev_malloc((void **) &bd[s], sizeof(float) * n1));
			GM_CHECK(cudaMemcpy(bd[s], bias[s], sizeof(float) * (size_t) sd->n, cudaMemcpyHostToDevice));
		}
		ccd_to_feature_major<<<blocks_for(sd->n, 256), 256, 0, c->stream>>>(Fd[s], bd[s], sd->n, k, c->vec[s]);
		GM_CHECK_LAUNCH();
	}
	for (int s = 0; s < (c->one_copy ? 1 : 2); s++)
	{
		ccd_side   *sd = &c->side[s];

		ccd_init_residual<<<blocks_for(sd->n, CCD_WARPS), CCD_THREADS, 0, c->stream>>>(
			sd->csr.indptr, sd->csr.indices, sd->csr.data, sd->n, Fd[s], Fd[1 - s], k, bd[s], bd[1 - s], c->mu);
		GM_CHECK_LAUNCH();
	}
	if (c->one_copy && (rc = upload_chunk_rows(c, A[0], err, errlen)) != GM_OK)
		return rc;
	if (c->fixed && c->nnz > 0)
	{
		/* the first scatter's bound: the starting residual's largest entry */
		ccd_absmax<<<blocks_for(c->nnz, 4 * CCD_THREADS) < 1024 ? blocks_for(c->nnz, 4 * CCD_THREADS) : 1024,
			CCD_THREADS, 0, c->stream>>>(c->side[0].csr.data, c->nnz, &c->fx->vmax);
		GM_CHECK_LAUNCH();
	}
	GM_CHECK(cudaStreamSynchronize(c->stream));
	for (int s = 0; s < 2; s++)
	{
		GM_CHECK(gm_dev_free(Fd[s]));
		GM_CHECK(gm_dev_free(bd[s]));
		Fd[s] = bd[s] = NULL;
	}
	return GM_OK;
}

/*
 * Upload device dev's problem (slot of nslots; own0/own1: the rows of each
 * side it updates): the model feature-major, the residual in both orders
 * (its rows of each).
 */
static int
dev_create(ccd_gpu **out, const gm_mf_data *dv, const gm_mf_data *d, const gm_mf_params *p,
		   int dev, int slot, int nslots, const int32_t *own0, const int32_t *own1,
		   char *err, size_t errlen)
{
	ccd_gpu    *c;
	int			rc;

	*out = NULL;
	c = (ccd_gpu *) calloc(1, sizeof(ccd_gpu));
	if (c == NULL)
	{
		snprintf(err, errlen, "ccd: out of host memory");
		return GM_ENOMEM;
	}
	c->dev = dev;
	c->slot = slot;
	c->nslots = nslots;
	c->k = p->factors;
	c->biases = p->biases ? 1 : 0;
	c->lambda = p->regularization;
	c->mu = c->biases ? d->global_mean : 0.0;
	c->nnz = dv->R->nnz;
	c->binning = g_binning;
	c->side[0].n = d->R->n_rows;
	c->side[1].n = d->R->n_cols;
	for (int s = 0; s < 2; s++)
	{
		c->side[s].own0 = own0[s];
		c->side[s].own1 = own1[s];
	}
	gm_ccd_plan_init(&c->plan, c->k, p->inner_iterations, c->biases);
	rc = create_inner(c, dv, d, err, errlen);
	if (rc != GM_OK)
	{
		ccd_destroy(c);
		return rc;
	}
	*out = c;
	return GM_OK;
}

/*
 * Queue the pack kernel for a pass over side s's rows (rows: also rp; w_on:
 * rp.w = vector w of side s, a scatter's weight).
 */
static int
launch_pack(ccd_gpu *c, int s, const gm_ccd_pack *pk, int rows, int w_on, int w, int pw,
			char *err, size_t errlen)
{
	pack_args	a;
	int			g = 1 - s;
	int32_t		nmax;

	memset(&a, 0, sizeof(a));
	a.n_fixed = c->side[s].n;
	a.rp = rows ? c->side[s].rowpack : NULL;
	a.n_c0 = pk->n_c0;
	for (int m = 0; m < pk->n_c0; m++)
	{
		a.c0v[m] = vec_of(c, s, pk->c0_vec[m]);
		a.c0s[m] = pk->c0_scale[m];
	}
	a.n_gen = pk->n_gen;
	for (int m = 0; m < pk->n_gen; m++)
	{
		a.genf[m] = vec_of(c, s, pk->gen_fixed[m]);
		a.geng[m] = vec_of(c, g, pk->gen_gathered[m]);
		a.gens[m] = pk->gen_scale[m];
	}
	a.n_gath = c->side[g].n;
	a.cp = c->side[g].colpack;
	a.n_g0 = pk->n_g0;
	for (int m = 0; m < pk->n_g0; m++)
	{
		a.g0v[m] = vec_of(c, g, pk->g0_vec[m]);
		a.g0s[m] = pk->g0_scale[m];
	}
	a.cur = vec_of(c, g, pk->cur);
	a.w_on = w_on;
	a.w = w_on ? vec_of(c, s, w) : NULL;
	a.umax = w_on && c->fixed ? &c->fx->umax : NULL;	/* a fixed-point scatter's weights */
	a.pw = pw;
	nmax = a.n_fixed > a.n_gath ? a.n_fixed : a.n_gath;
	ccd_pack<<<blocks_for(nmax, 256), 256, 0, c->stream>>>(a);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/* The live vector a snapshot slot of side s was copied from in this step (or id itself). */
static int
snapshot_source(const gm_ccd_step *st, int s, int id)
{
	for (int m = 0; m < st->n_copies; m++)
		if (st->copies[m].side == s && st->copies[m].dst == id)
			return st->copies[m].src;
	return id;
}

/*
 * Plan sweep s: take its snapshots, pack its terms, describe its rows:
 * binned positions (0 .. own1 - own0 of the side's rows, ptr_perm_h) or
 * rows in storage order (0 .. n, ptr_h; the unbinned passes and the
 * scatter), as sweep_binned says.
 */
static int
dev_begin_sweep(ccd_gpu *c, int s, gm_sweep *sw, char *err, size_t errlen)
{
	gm_ccd_step *st = &c->step;
	gm_ccd_pack pk;
	int			queued0 = c->plan.n_pending[0];
	const gm_ccd_term *apply;
	int			scatter,
				rc;

	GM_CHECK(cudaSetDevice(c->dev));
	if (gm_ccd_plan_step(&c->plan, s, st) != 0)
	{
		snprintf(err, errlen, "ccd: internal error planning sweep %d", s);
		return GM_EINVAL;
	}
	/*
	 * The terms this pass adds.  Two copies: its copy's pending terms.  One
	 * copy: a scatter (item side) adds the terms this step queued (the tail
	 * of its list; the CSR copy has every earlier one) and counts them
	 * ahead; a CSR pass skips the ones counted ahead.
	 */
	scatter = c->one_copy && st->side == 1;
	apply = st->terms;
	c->n_apply = st->n_terms;
	if (scatter)
	{
		int			n_new = c->plan.n_pending[0] - queued0;

		apply = st->terms + st->n_terms - n_new;
		c->n_apply = n_new;
		c->ahead += n_new;
	}
	else if (c->one_copy)
	{
		apply = st->terms + c->ahead;
		c->n_apply = st->n_terms - c->ahead;
		c->ahead = 0;
	}
	if (c->n_apply < 0 ||
		gm_ccd_make_pack(apply, c->n_apply, scatter ? 0 : st->side, scatter ? GM_CCD_ONES : st->cur, &pk) != 0)
	{
		snprintf(err, errlen, "ccd: internal error planning sweep %d", s);
		return GM_EINVAL;
	}
	for (int m = 0; m < st->n_copies; m++)
		GM_CHECK(cudaMemcpyAsync(vec_of(c, st->copies[m].side, st->copies[m].dst),
								 vec_of(c, st->copies[m].side, st->copies[m].src),
								 sizeof(float) * c->side[st->copies[m].side].n,
								 cudaMemcpyDeviceToDevice, c->stream));
	if (scatter)
	{
		/* the fixed-point bounds of this sweep: measured by the pack and the scatter */
		if (c->fixed)
			GM_CHECK(cudaMemsetAsync(&c->fx->vmax_next, 0, 2 * sizeof(unsigned), c->stream));
		/* rows are the users', weighted by the entry's user-side vector */
		if ((rc = launch_pack(c, 0, &pk, 1, 1, st->cur, 4, err, errlen)) != GM_OK)
			return rc;
		c->sweep_side = 0;
		c->sweep_binned = 0;
		sw->n_rows = c->side[0].n;
		sw->indptr = c->side[0].ptr_h;	/* storage order */
		sw->row_work = 4.0;
		sw->nnz_work = c->n_apply > 0 ? 6.0 : 2.0;
		return GM_OK;
	}
	/* the narrow packs (load_pack) where the binned kernels can use them */
	c->pw = 4;
	if (c->binning != 0 && c->n_apply == 0)
		c->pw = 1;
	else if (c->binning != 0 && pk.n_g0 == 0 && pk.n_gen == 2 &&
			 snapshot_source(st, 1 - st->side, pk.gen_gathered[1]) == pk.cur)
		c->pw = 2;
	if ((rc = launch_pack(c, st->side, &pk, c->n_apply > 0, 0, 0, c->pw, err, errlen)) != GM_OK)
		return rc;
	c->sweep_side = st->side;
	c->sweep_binned = c->binning != 0;
	sw->n_rows = c->binning ? c->side[st->side].own1 - c->side[st->side].own0 : c->side[st->side].n;
	sw->indptr = c->binning ? c->side[st->side].ptr_perm_h : c->side[st->side].ptr_h;
	sw->row_work = 8.0;
	sw->nnz_work = c->n_apply > 0 ? 6.0 : 2.0;
	return GM_OK;
}

/* first task whose position is >= pos */
static int32_t
task_at(const ccd_side *sd, int32_t pos)
{
	int32_t		lo = 0,
				hi = sd->ntasks;

	while (lo < hi)
	{
		int32_t		mid = lo + (hi - lo) / 2;

		if (sd->task_pos_h[mid] >= pos)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* Launch tasks [t0, t1) of a binned pass on stream st. */
static cudaError_t
launch_tasks(const pass_args &a, int32_t t0, int32_t t1, int write, int pw, cudaStream_t st)
{
	pass_args	b = a;

	if (t1 <= t0)
		return cudaSuccess;
	b.task0 = t0;
	if (write && pw == 2)
		ccd_pass_binned<true, 2><<<t1 - t0, CCD_THREADS, 0, st>>>(b);
	else if (write)
		ccd_pass_binned<true, 4><<<t1 - t0, CCD_THREADS, 0, st>>>(b);
	else if (pw == 1)
		ccd_pass_binned<false, 1><<<t1 - t0, CCD_THREADS, 0, st>>>(b);
	else
		ccd_pass_binned<false, 4><<<t1 - t0, CCD_THREADS, 0, st>>>(b);
	return cudaGetLastError();
}

/* Rows (or binned positions) [begin, end) of the current sweep's pass. */
static int
dev_run(ccd_gpu *c, int32_t begin, int32_t end, char *err, size_t errlen)
{
	gm_ccd_step *st = &c->step;
	int			scatter = c->one_copy && st->side == 1;
	ccd_side   *sd = &c->side[scatter ? 0 : st->side];
	pass_args	a;
	int			write = c->n_apply > 0;

	GM_CHECK(cudaSetDevice(c->dev));
	if (begin < 0 || end > (c->sweep_binned ? sd->own1 - sd->own0 : sd->n) || begin > end)
	{
		snprintf(err, errlen, "ccd: rows [%d, %d) outside the sweep", begin, end);
		return GM_EINVAL;
	}
	if (begin == end)
		return GM_OK;
	memset(&a, 0, sizeof(a));
	a.ptr = sd->csr.indptr;
	a.idx = sd->csr.indices;
	a.res = sd->csr.data;
	a.rp = sd->rowpack;
	a.cp = c->side[scatter ? 1 : 1 - st->side].colpack;
	a.perm = sd->bins.perm;
	a.tasks = sd->tasks;
	a.target = vec_of(c, st->side, st->target);
	a.lambda = c->lambda;
	a.acc = sd->acc;
	a.cnt = sd->cnt;

	if (scatter)
	{
		const int64_t x0 = sd->ptr_h[begin],
					x1 = sd->ptr_h[end];
		const int64_t chunks = x1 > x0 ? (x1 - 1) / CCD_FLAT_CHUNK - x0 / CCD_FLAT_CHUNK + 1 : 0;
		int64_t		blocks = (chunks + CCD_SCATTER_THREADS / 32 - 1) / (CCD_SCATTER_THREADS / 32);

		if (chunks == 0)
			return GM_OK;
		if (blocks > c->scatter_blocks)
			blocks = c->scatter_blocks;
		if (c->fixed)
		{
			/* a block's sums sized for twice the longest column's share, + 64 terms */
			float		cnt = g_fixed_cnt > 0.0f ? g_fixed_cnt :
				(float) (2 * ((c->col_max + blocks - 1) / blocks) + 64);

			if (write)
				ccd_scatter<true, true><<<(int) blocks, CCD_SCATTER_THREADS, c->scatter_smem, c->stream>>>(
					a, x0, x1, begin, end, c->crow, c->side[1].n, partial_mine(c), c->fx, cnt, c->redo);
			else
				ccd_scatter<false, true><<<(int) blocks, CCD_SCATTER_THREADS, c->scatter_smem, c->stream>>>(
					a, x0, x1, begin, end, c->crow, c->side[1].n, partial_mine(c), c->fx, cnt, c->redo);
			GM_CHECK_LAUNCH();
			/* the blocks that overflowed, again with float sums (the others exit at once) */
			ccd_scatter<false, false><<<(int) blocks, CCD_SCATTER_THREADS, c->scatter_smem, c->stream>>>(
				a, x0, x1, begin, end, c->crow, c->side[1].n, partial_mine(c), c->fx, 0.0f, c->redo);
		}
		else if (write)
			ccd_scatter<true, false><<<(int) blocks, CCD_SCATTER_THREADS, c->scatter_smem, c->stream>>>(
				a, x0, x1, begin, end, c->crow, c->side[1].n, partial_mine(c), NULL, 0.0f, NULL);
		else
			ccd_scatter<false, false><<<(int) blocks, CCD_SCATTER_THREADS, c->scatter_smem, c->stream>>>(
				a, x0, x1, begin, end, c->crow, c->side[1].n, partial_mine(c), NULL, 0.0f, NULL);
		GM_CHECK_LAUNCH();
		return GM_OK;
	}

	if (c->binning == 0)
	{
		a.row0 = begin;
		a.nrows = end - begin;
		if (write)
			ccd_pass_plain<true><<<blocks_for(end - begin, CCD_WARPS), CCD_THREADS, 0, c->stream>>>(a);
		else
			ccd_pass_plain<false><<<blocks_for(end - begin, CCD_WARPS), CCD_THREADS, 0, c->stream>>>(a);
		GM_CHECK_LAUNCH();
		return GM_OK;
	}
	{
		int32_t		t0 = task_at(sd, begin),
					t1 = task_at(sd, end);

		if (c->binning == 1)
		{
			GM_CHECK(launch_tasks(a, t0, t1, write, c->pw, c->stream));
			return GM_OK;
		}
		/* a stream per class, joined back into the main stream */
		GM_CHECK(cudaEventRecord(c->ev_fork, c->stream));
		for (int q = 0; q < CCD_STREAMS; q++)
			GM_CHECK(cudaStreamWaitEvent(c->bin_stream[q], c->ev_fork, 0));
		for (int cl = 0; cl < CCD_CLASSES; cl++)
		{
			int32_t		b = sd->bin_task_h[cl] > t0 ? sd->bin_task_h[cl] : t0;
			int32_t		e = sd->bin_task_h[cl + 1] < t1 ? sd->bin_task_h[cl + 1] : t1;

			GM_CHECK(launch_tasks(a, b, e, write, c->pw, c->bin_stream[cl % CCD_STREAMS]));
		}
		for (int q = 0; q < CCD_STREAMS; q++)
		{
			GM_CHECK(cudaEventRecord(c->ev_join[q], c->bin_stream[q]));
			GM_CHECK(cudaStreamWaitEvent(c->stream, c->ev_join[q], 0));
		}
	}
	return GM_OK;
}

/* Whether the current sweep is a scatter (one copy, the item side) that updates items. */
static int
dev_scatter_sweep(const ccd_gpu *c)
{
	return c->one_copy && c->step.side == 1 && c->side[1].n > 0;
}

/*
 * One copy: a scatter sweep ends by solving the item side's updates from
 * the sums of every slot (several devices: the others' slots copied in
 * first), then (dev_clear_sums, once no device reads them) clearing them.
 */
static int
dev_finish_scatter(ccd_gpu *c, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	ccd_scatter_finish<<<blocks_for(c->side[1].n, 32), 256, 0, c->stream>>>(
		c->partial, c->nslots * c->scatter_blocks, c->side[1].n, c->side[1].csr.indptr, c->lambda,
		vec_of(c, 1, c->step.target), c->fixed ? c->fx : NULL);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

static int
dev_clear_sums(ccd_gpu *c, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaMemsetAsync(c->partial, 0, partial_bytes(c), c->stream));
	return GM_OK;
}

/* Wait for the queued work; report asynchronous errors. */
static int
dev_sync(ccd_gpu *c, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaStreamSynchronize(c->stream));
	GM_CHECK(cudaGetLastError());
	return GM_OK;
}

/*
 * Queue the device's part of the loss into c->dsum: [0] the squared
 * residuals of its CSR copy, [1] the weighted squares of the rows it
 * updates (the item side under one copy, which every device updates: the
 * first device only); dev_sums_read reads them.
 */
static int
dev_sums(ccd_gpu *c, char *err, size_t errlen)
{
	gm_ccd_term terms[GM_CCD_MAX_TERMS + 1];
	gm_ccd_pack pk;
	int			n_terms = gm_ccd_plan_eval(&c->plan, terms);
	int			skip = c->one_copy ? c->ahead : 0;	/* already in the CSR copy */
	pass_args	a;
	int			rc;

	GM_CHECK(cudaSetDevice(c->dev));
	if (skip > n_terms ||
		gm_ccd_make_pack(terms + skip, n_terms - skip, 0, GM_CCD_ONES, &pk) != 0)
	{
		snprintf(err, errlen, "ccd: internal error evaluating the loss");
		return GM_EINVAL;
	}
	if ((rc = launch_pack(c, 0, &pk, 1, 0, 0, 4, err, errlen)) != GM_OK)
		return rc;
	GM_CHECK(cudaMemsetAsync(c->dsum, 0, sizeof(double) * 2, c->stream));
	memset(&a, 0, sizeof(a));
	a.ptr = c->side[0].csr.indptr;
	a.idx = c->side[0].csr.indices;
	a.res = c->side[0].csr.data;
	a.rp = c->side[0].rowpack;
	a.cp = c->side[1].colpack;
	ccd_eval_sse<<<1024, CCD_THREADS, 0, c->stream>>>(a, c->side[0].n, c->dsum);
	GM_CHECK_LAUNCH();
	/* a share's row views count only its rows' entries (n_i = 0 elsewhere) */
	for (int s = 0; s < 2; s++)
		if (!(s == 1 && c->one_copy && c->slot > 0))
		{
			ccd_weighted_squares<<<256, CCD_THREADS, 0, c->stream>>>(
				c->vec[s], c->side[s].n, c->k + c->biases, c->side[s].csr.indptr, c->dsum + 1);
			GM_CHECK_LAUNCH();
		}
	return GM_OK;
}

/* The sums dev_sums queued, once they are done. */
static int
dev_sums_read(ccd_gpu *c, double *sums, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaMemcpyAsync(sums, c->dsum, sizeof(double) * 2, cudaMemcpyDeviceToHost, c->stream));
	GM_CHECK(cudaStreamSynchronize(c->stream));
	return GM_OK;
}

/* Write the model back row-major into d's arrays. */
static int
dev_download(ccd_gpu *c, gm_mf_data *d, char *err, size_t errlen)
{
	int			k = c->k;

	GM_CHECK(cudaSetDevice(c->dev));

	for (int s = 0; s < 2; s++)
	{
		int32_t		n = c->side[s].n;
		float	   *F = s == 0 ? d->X : d->Y;
		float	   *bias = s == 0 ? d->user_bias : d->item_bias;
		float	   *V = (float *) malloc(sizeof(float) * (size_t) (n > 0 ? n : 1) * (k + 1));

		if (V == NULL)
		{
			snprintf(err, errlen, "ccd: out of host memory for the factors");
			return GM_ENOMEM;
		}
		{
			cudaError_t e = cudaMemcpyAsync(V, c->vec[s], sizeof(float) * (size_t) n * (k + 1),
											cudaMemcpyDeviceToHost, c->stream);

			if (e == cudaSuccess)
				e = cudaStreamSynchronize(c->stream);
			if (e != cudaSuccess)
				free(V);
			GM_CHECK(e);
		}
		for (int32_t i = 0; i < n; i++)
		{
			for (int f = 0; f < k; f++)
				F[(size_t) i * k + f] = V[(size_t) f * n + i];
			if (c->biases && bias)
				bias[i] = V[(size_t) k * n + i];
		}
		free(V);
	}
	return GM_OK;
}

/* ------------------------------------------------------ the devices */

/*
 * The handle the core drives: one device, or several (p->gpus).  A side's
 * rows are cut into shares of about equal work (gm_shares_plan, as for ALS);
 * a device holds every row of both sides' vectors and its share's
 * residual (a row view of R, and of Rt under two copies), and runs the
 * plan's every sweep over its own rows, so each row's arithmetic is the one
 * device's.  Every device takes the same snapshots and packs (its vectors
 * are whole).  After a sweep that updates rows of a shared side, each device
 * pulls the rows the others updated (peer copies queued behind an event of
 * each other device: no host wait).  Under one copy the item side's passes
 * are scatters over each device's CSR rows into its slot of the scatter
 * sums; every device pulls the others' slots and solves every item itself,
 * from the sums of all slots in the same order, so the item vectors agree
 * on every device.  The loss adds the devices' sums.
 *
 * The results equal the one-device training's within float rounding: the
 * rows and their pass order are the same, but under one copy the item
 * sums are cut into more blocks (more, smaller fixed-point or float sums).
 */
typedef struct ccd_top
{
	int			ndev;
	ccd_gpu    *g[GM_MAX_GPUS];
	int64_t		nnz;
	float		lambda;
	gm_shares	sh;
	int64_t    *vbin[2];		/* virtual binned positions: the devices' nonzeros added */
	int32_t		vbn[2];
	cudaEvent_t ev[GM_MAX_GPUS][2];
	int			have_ev;
	const gm_mf_data *d;		/* create's (while it makes the shares) */
	const gm_mf_params *p;
} ccd_top;

static void
ccd_destroy_top(void *h)
{
	ccd_top    *t = (ccd_top *) h;

	if (t == NULL)
		return;
	for (int i = 0; i < t->ndev; i++)
	{
		if (t->g[i] != NULL && i < t->have_ev)
		{
			(void) cudaSetDevice(t->g[i]->dev);
			cudaEventDestroy(t->ev[i][0]);
			cudaEventDestroy(t->ev[i][1]);
		}
		ccd_destroy(t->g[i]);
	}
	gm_shares_free(&t->sh);
	free(t->vbin[0]);
	free(t->vbin[1]);
	(void) cudaSetDevice(0);
	free(t);
}

/* Side s's virtual binned positions: position r of every device at once. */
static int
virtual_positions(ccd_top *t, int s, char *err, size_t errlen)
{
	int32_t		vn = 0;
	int64_t    *v;

	for (int i = 0; i < t->ndev; i++)
		if (t->g[i]->side[s].own1 - t->g[i]->side[s].own0 > vn)
			vn = t->g[i]->side[s].own1 - t->g[i]->side[s].own0;
	v = (int64_t *) malloc(sizeof(int64_t) * ((size_t) vn + 1));
	if (v == NULL)
	{
		snprintf(err, errlen, "ccd: out of host memory for the shares' rows");
		return GM_ENOMEM;
	}
	v[0] = 0;
	for (int32_t r = 0; r < vn; r++)
	{
		int64_t		e = 0;

		for (int i = 0; i < t->ndev; i++)
		{
			const ccd_side *sd = &t->g[i]->side[s];

			if (r < sd->own1 - sd->own0)
				e += sd->ptr_perm_h[r + 1] - sd->ptr_perm_h[r];
		}
		v[r + 1] = v[r] + e;
	}
	t->vbin[s] = v;
	t->vbn[s] = vn;
	return GM_OK;
}

/*
 * Share i's device state (gm_shares_make_all); every device must lay the
 * residual out alike (the same copies, the same scatter blocks).
 */
static int
make_share(void *top, int i, const gm_mf_data *dv, int dev, const int32_t *own0,
		   const int32_t *own1, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) top;
	int			rc = dev_create(&t->g[i], dv, t->d, t->p, dev, i, t->sh.ndev, own0, own1, err, errlen);

	if (rc == GM_OK && i > 0 &&
		(t->g[i]->one_copy != t->g[0]->one_copy ||
		 (t->g[i]->one_copy && t->g[i]->scatter_blocks != t->g[0]->scatter_blocks)))
	{
		snprintf(err, errlen, "ccd: the GPUs differ (shared memory or multiprocessors), so they cannot share one training");
		rc = GM_ENOTSUP;
	}
	return rc;
}

static int
ccd_create(void **out, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	ccd_top    *t;
	int			rc;

	(void) cb;					/* the core polls between slices */
	*out = NULL;
	if (gm_explicit_check("ccd", p, d, 1, err, errlen) != GM_OK)
		return GM_EINVAL;
	t = (ccd_top *) calloc(1, sizeof(ccd_top));
	if (t == NULL)
	{
		snprintf(err, errlen, "ccd: out of host memory");
		return GM_ENOMEM;
	}
	t->nnz = d->R->nnz;
	t->lambda = p->regularization;
	t->d = d;
	t->p = p;
	rc = gm_shares_make_all(&t->sh, d, p->gpus > 1 ? p->gpus : 1, gm_gpu_share_row_weight(p),
							make_share, t, &t->ndev, err, errlen);
	if (rc == GM_OK && t->ndev > 1)
	{
		for (int s = 0; s < 2 && rc == GM_OK; s++)
			if (!(s == 1 && t->g[0]->one_copy) && t->g[0]->binning != 0)
				rc = virtual_positions(t, s, err, errlen);
		for (int i = 0; i < t->ndev && rc == GM_OK; i++)
		{
			cudaError_t e = cudaSetDevice(t->g[i]->dev);

			if (e == cudaSuccess)
				e = cudaEventCreateWithFlags(&t->ev[i][0], cudaEventDisableTiming);
			if (e == cudaSuccess && (e = cudaEventCreateWithFlags(&t->ev[i][1], cudaEventDisableTiming)) != cudaSuccess)
				cudaEventDestroy(t->ev[i][0]);
			if (e != cudaSuccess)
			{
				snprintf(err, errlen, "ccd: creating the devices' events failed: %s", cudaGetErrorString(e));
				rc = GM_EDEVICE;
			}
			else
				t->have_ev = i + 1;
		}
	}
	if (rc != GM_OK)
	{
		ccd_destroy_top(t);
		return rc;
	}
	gm_shares_device_name(&t->sh, device, devlen);
	*out = t;
	return GM_OK;
}

/* Sweeps per outer iteration (the plan's). */
static int
ccd_n_sweeps(void *h)
{
	return ((ccd_top *) h)->g[0]->plan.n_sweeps;
}

static int
ccd_begin_sweep(void *h, int s, gm_sweep *sw, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) h;
	int			rc;

	for (int i = 0; i < t->ndev; i++)
	{
		gm_sweep	mine = *sw;

		if ((rc = dev_begin_sweep(t->g[i], s, i == 0 ? sw : &mine, err, errlen)) != GM_OK)
			return rc;
	}
	if (t->ndev > 1)
	{
		/* virtual rows: a slice runs on every device at once, sized as one device's */
		int			side = t->g[0]->sweep_side;

		if (t->g[0]->sweep_binned)
		{
			sw->n_rows = t->vbn[side];
			sw->indptr = t->vbin[side];
		}
		else
		{
			sw->n_rows = t->sh.vn[side];
			sw->indptr = t->sh.vrow[side];
		}
		sw->nnz_work /= t->ndev;
	}
	return GM_OK;
}

static int
ccd_run(void *h, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) h;
	int			side = t->g[0]->sweep_side,
				rc;

	(void) s;
	if (t->ndev == 1)
		return dev_run(t->g[0], begin, end, err, errlen);
	if (begin < 0 || begin > end ||
		end > (t->g[0]->sweep_binned ? t->vbn[side] : t->sh.vn[side]))
	{
		snprintf(err, errlen, "ccd: rows [%d, %d) outside the sweep", begin, end);
		return GM_EINVAL;
	}
	for (int i = 0; i < t->ndev; i++)
	{
		int32_t		b,
					e;

		if (t->g[i]->sweep_binned)
		{
			int32_t		np = t->g[i]->side[side].own1 - t->g[i]->side[side].own0;

			b = begin < np ? begin : np;
			e = end < np ? end : np;
		}
		else
			gm_shares_rows(&t->sh, side, i, begin, end, &b, &e);
		if (b < e && (rc = dev_run(t->g[i], b, e, err, errlen)) != GM_OK)
			return rc;
	}
	return GM_OK;
}

/* Each device's stream waits for event q of every other device. */
static int
wait_others(ccd_top *t, int j, int q, char *err, size_t errlen)
{
	for (int i = 0; i < t->ndev; i++)
		if (i != j)
			GM_CHECK(cudaStreamWaitEvent(t->g[j]->stream, t->ev[i][q], 0));
	return GM_OK;
}

static int
record_all(ccd_top *t, int q, char *err, size_t errlen)
{
	for (int i = 0; i < t->ndev; i++)
	{
		GM_CHECK(cudaSetDevice(t->g[i]->dev));
		GM_CHECK(cudaEventRecord(t->ev[i][q], t->g[i]->stream));
	}
	return GM_OK;
}

/*
 * Device j's stream, once every other device's event 0 is reached: from
 * each other device i, bytes[i] at byte offset off[i] of its buffer
 * bufs[i] into the same place of j's buffer bufs[j].
 */
static int
pull_others(ccd_top *t, int j, char *const *bufs, const size_t *off, const size_t *bytes,
			char *err, size_t errlen)
{
	ccd_gpu    *c = t->g[j];
	int			rc;

	GM_CHECK(cudaSetDevice(c->dev));
	if ((rc = wait_others(t, j, 0, err, errlen)) != GM_OK)
		return rc;
	for (int i = 0; i < t->ndev; i++)
		if (i != j && bytes[i] > 0)
			GM_CHECK(cudaMemcpyPeerAsync(bufs[j] + off[i], c->dev, bufs[i] + off[i], t->g[i]->dev,
										 bytes[i], c->stream));
	return GM_OK;
}

/*
 * The end of a sweep.  Several devices: a scatter's sums of every slot to
 * every device, each then solving every item; otherwise the rows each
 * device updated to the others.
 */
static int
ccd_end_sweep(void *h, int s, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) h;
	ccd_gpu    *g0 = t->g[0];
	char	   *bufs[GM_MAX_GPUS];
	size_t		off[GM_MAX_GPUS],
				bytes[GM_MAX_GPUS];
	int			rc;

	(void) s;
	if (t->ndev == 1)
	{
		if (!dev_scatter_sweep(g0))
			return GM_OK;
		if ((rc = dev_finish_scatter(g0, err, errlen)) != GM_OK)
			return rc;
		return dev_clear_sums(g0, err, errlen);
	}
	if ((rc = record_all(t, 0, err, errlen)) != GM_OK)
		return rc;
	if (dev_scatter_sweep(g0))
	{
		size_t		slot = sizeof(float2) * g0->scatter_blocks * g0->side[1].n;

		for (int i = 0; i < t->ndev; i++)
		{
			bufs[i] = (char *) t->g[i]->partial;
			off[i] = i * slot;
			bytes[i] = slot;
		}
		for (int j = 0; j < t->ndev; j++)
			if ((rc = pull_others(t, j, bufs, off, bytes, err, errlen)) != GM_OK ||
				(rc = dev_finish_scatter(t->g[j], err, errlen)) != GM_OK)
				return rc;
		/* a device clears its sums once the others have copied its slot */
		if ((rc = record_all(t, 1, err, errlen)) != GM_OK)
			return rc;
		for (int j = 0; j < t->ndev; j++)
		{
			GM_CHECK(cudaSetDevice(t->g[j]->dev));
			if ((rc = wait_others(t, j, 1, err, errlen)) != GM_OK ||
				(rc = dev_clear_sums(t->g[j], err, errlen)) != GM_OK)
				return rc;
		}
		return GM_OK;
	}

	/*
	 * The updated vector's rows from their devices.  A device writes this
	 * vector again two sweeps on at the earliest, after waiting (at the
	 * next sweep's end) for every other device's work, these copies
	 * included.
	 */
	for (int i = 0; i < t->ndev; i++)
	{
		const ccd_side *sd = &t->g[i]->side[g0->step.side];

		bufs[i] = (char *) vec_of(t->g[i], g0->step.side, g0->step.target);
		off[i] = sizeof(float) * (size_t) sd->own0;
		bytes[i] = sizeof(float) * (size_t) (sd->own1 - sd->own0);
	}
	for (int j = 0; j < t->ndev; j++)
		if ((rc = pull_others(t, j, bufs, off, bytes, err, errlen)) != GM_OK)
			return rc;
	return GM_OK;
}

static int
ccd_sync(void *h, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) h;
	int			rc;

	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_sync(t->g[i], err, errlen)) != GM_OK)
			return rc;
	(void) cudaSetDevice(0);
	return GM_OK;
}

/* Loss and training RMSE (gm_explicit.h) of the current model: the devices' sums added. */
static int
ccd_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) h;
	double		tot[2] = {0, 0};
	int			rc;

	/* every device's sums queued first, so that the devices compute them at once */
	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_sums(t->g[i], err, errlen)) != GM_OK)
			return rc;
	for (int i = 0; i < t->ndev; i++)
	{
		double		sums[2];

		if ((rc = dev_sums_read(t->g[i], sums, err, errlen)) != GM_OK)
			return rc;
		tot[0] += sums[0];
		tot[1] += sums[1];
	}
	(void) cudaSetDevice(0);
	m->loss = (tot[0] + t->lambda * tot[1]) / (double) (t->nnz > 0 ? t->nnz : 1);
	m->rmse = sqrt(tot[0] / (double) (t->nnz > 0 ? t->nnz : 1));
	return GM_OK;
}

/* Every device holds the whole model after the exchanges: the first one's. */
static int
ccd_download(void *h, gm_mf_data *d, char *err, size_t errlen)
{
	ccd_top    *t = (ccd_top *) h;
	int			rc = dev_download(t->g[0], d, err, errlen);

	(void) cudaSetDevice(0);
	return rc;
}

extern "C" const gm_algo_ops gm_cuda_ccd_ops = {
	"cuda",
	ccd_create,
	ccd_n_sweeps,
	ccd_begin_sweep,
	ccd_run,
	ccd_end_sweep,				/* one copy: the item side's solve; several devices: the exchanges */
	ccd_sync,
	ccd_evaluate,
	ccd_download,
	ccd_destroy_top,
	NULL						/* reset: none (the loop destroys and creates instead) */
};
