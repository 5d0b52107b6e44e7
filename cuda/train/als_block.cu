/*
 * als_block.cu: the kernels of the block coordinate descent solver of
 * implicit ALS (als_block.cuh says what a sweep does).
 *
 * gm_block_pass: a warp per chunk (up to GM_CHUNK entries of one row), 8
 * warps per thread block.  Lane j owns column j (and j + 32 when b = 64)
 * of the row's b x b matrix A in registers.  Entries go 32 at a time: lane
 * e loads entry e's slice y_eB (float4, 16-byte loads) into a shared tile
 * and its weights w_e = c_e - alpha0, t_e = c_e - w_e s_e; then for each
 * entry every lane adds w_e y_ej y_eB to its column (the tile row read as
 * broadcast float4) and t_e y_ej to r_j: b^2 fused multiply-adds per entry
 * per warp.  A row split over several chunks adds its partial A and r into
 * a scratch slot with atomics, and the last chunk to arrive (a per-row
 * counter, as in the CG kernel) solves.  G_BB is staged in shared memory
 * once per thread block.
 *
 * The solve: symmetric Gaussian elimination, column p's entries published
 * through shared memory at step p, every lane updating its own columns;
 * the Schur complements stay symmetric, so U(c, p) for c < p is lane c's
 * own register p and the back substitution needs one shuffle a step.
 *
 * b = 32 without tensor cores: register tiles.  Lane l accumulates the
 * 4 x 8 block of A at rows 4 (l / 4) .. + 3 and columns 8 (l % 4) .. + 7,
 * reading 12 of the entry's 32 values per entry (three 16-byte loads)
 * where a lane per column reads all 32 (eight): shared memory delivers 128
 * bytes a clock per SM, and a lane per column asked it for 4 KB an entry
 * (H100: 5-7% faster an iteration; the pass stays latency-bound, 23%
 * achieved occupancy).  At the chunk's end the tiles go through shared
 * memory into the lane-per-column layout that the rest of the kernel uses.
 *
 * With tensor cores (tc), the Gram sum_e w_e y_eB y_eB^T of each tile of 32
 * entries is an m16n16k8 TF32 product of (W Y)^T and Y (FP32 accumulation,
 * the upper triangle of 16 x 16 tiles), stored to shared memory and read
 * back into the lanes' columns at the end of the chunk; r stays FP32.  The
 * Gram only preconditions the block's step (r, the gradient, is FP32 from
 * H and the predictions), so the step still descends and the iteration
 * still converges to the FP32 solution: the bench measures what it costs.
 * TF32 wmma needs compute capability 8.0: code compiled for an older
 * architecture (a compute_75 build, which the driver may also compile for
 * a newer card) has no tensor-core path, and its tc kernels compute the
 * Gram in FP32 like the others; gm_block_pass then launches the FP32
 * kernels instead (gm_block_prepare reads which code the device runs).
 *
 * Warps per thread block: BWARPS where the shared memory allows, fewer on
 * cards with less shared memory per block (gm_block_prepare: b = 64 with
 * tensor cores wants 154 KB for 8 warps, which 8.6, 8.9 and 12.0 (99 KB)
 * and 7.5 (64 KB) do not have).
 *
 * gm_block_apply: a warp per chunk, 8 lanes per entry: s_e += y_eB . d.
 */
#include "als_block.cuh"
#include "device_csr.cuh"

#include <mma.h>

#define BWARPS			8		/* warps per thread block */

/*
 * Shared floats per warp: a tile of 32 entries (stride b + 4), with TC a
 * second one for w_e y_e (the tensor-core operand), and 64 weights.  Every
 * warp's area starts 32-byte aligned (wmma loads need it).
 */
#define TILE_STRIDE(B)	((B) + 4)
#define WARP_SMEM(B, TC)	(32 * TILE_STRIDE(B) * ((TC) ? 2 : 1) + 64)

/*
 * Whether the code being compiled has TF32 wmma (m16n16k8): 8.0 and newer,
 * and the host pass (which only needs the types).
 */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define GM_TF32_MMA		1
#else
#define GM_TF32_MMA		0
#endif

namespace wmma = nvcuda::wmma;

#if GM_TF32_MMA

/*
 * A(i, j) += sum over the tile's 32 entries of wy_e[i] y_e[j] on tensor
 * cores: TF32 inputs, FP32 accumulation, m16n16k8, the upper triangle of
 * 16 x 16 tiles (i-tile <= j-tile), stored to out (b x b, row-major) with
 * the lower triangle mirrored.  Rows of a missing entry are zero.
 */
template <int B>
__device__ __forceinline__ void
gram_tc(wmma::fragment<wmma::accumulator, 16, 16, 8, float> (&acc)[B / 16][B / 16],
		const float *wy, const float *y, int ts)
{
#pragma unroll
	for (int ks = 0; ks < 4; ks++)
	{
		wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fa[B / 16];
		wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb[B / 16];

#pragma unroll
		for (int t = 0; t < B / 16; t++)
		{
			/* A = (WY)^T: element (i, e) at wy[e * ts + i], column-major */
			wmma::load_matrix_sync(fa[t], wy + 8 * ks * ts + 16 * t, ts);
			/* B = Y: element (e, j) at y[e * ts + j], row-major */
			wmma::load_matrix_sync(fb[t], y + 8 * ks * ts + 16 * t, ts);
#pragma unroll
			for (int i = 0; i < fa[t].num_elements; i++)
				fa[t].x[i] = wmma::__float_to_tf32(fa[t].x[i]);
#pragma unroll
			for (int i = 0; i < fb[t].num_elements; i++)
				fb[t].x[i] = wmma::__float_to_tf32(fb[t].x[i]);
		}
#pragma unroll
		for (int mt = 0; mt < B / 16; mt++)
#pragma unroll
			for (int nt = mt; nt < B / 16; nt++)
				wmma::mma_sync(acc[mt][nt], fa[mt], fb[nt], acc[mt][nt]);
	}
}
#endif							/* GM_TF32_MMA */

/*
 * b = 32 in FP32 asks for 4 resident blocks an SM (64 registers; ptxas
 * spills a few words outside the entry loop): 1-2% faster on the H100
 * than 3 blocks at 80 registers.
 */
template <int CPL, bool TC>
__global__ void
__launch_bounds__(BWARPS * 32, CPL == 1 && !TC ? 4 : 1)
block_pass_kernel(gm_block_args a)
{
	constexpr int B = 32 * CPL;
	constexpr int TS = TILE_STRIDE(B);
	constexpr bool TCX = TC && GM_TF32_MMA;	/* tensor cores in this code */
	constexpr bool TILED = CPL == 1 && !TCX;	/* 4 x 8 register tiles (above) */
	extern __shared__ __align__(128) float4 smem4[];
	float	   *gbb = reinterpret_cast<float *>(smem4);
	const int	lane = threadIdx.x & 31;
	const int	warp = threadIdx.x >> 5;
	const int	nwarps = blockDim.x >> 5;	/* BWARPS or fewer (gm_block_prepare) */
	float	   *tile = gbb + B * B + warp * WARP_SMEM(B, TCX);
	float	   *wytile = tile + 32 * TS;	/* TCX only */
	float	   *wv = tile + 32 * TS * (TCX ? 2 : 1);
	float	   *tv = wv + 32;

	/* G_BB for the whole thread block */
	for (int i = threadIdx.x; i < B * B; i += blockDim.x)
		gbb[i] = __ldg(a.G + (size_t) (a.b0 + i / B) * a.kp + a.b0 + i % B);
	__syncthreads();

	for (int32_t task = gm_chunk_first(a.queue, nwarps); task < a.nchunks;
		 task = gm_chunk_next(a.queue, a.nchunks))
	{
		const gm_chunk_span sp = gm_chunk_at(a.chunks, a.indptr, task);
		const int32_t row = sp.row;
		const int	nch = sp.nch;
		const int64_t cb = sp.b;
		const int64_t ce = sp.e;
		float		A[CPL][B],
					r[CPL];

#if GM_TF32_MMA
		wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[TCX ? B / 16 : 1][TCX ? B / 16 : 1];
#endif

#pragma unroll
		for (int q = 0; q < CPL; q++)
		{
			r[q] = 0.f;
			if (!TCX)
#pragma unroll
				for (int i = 0; i < B; i++)
					A[q][i] = 0.f;
		}
#if GM_TF32_MMA
		if constexpr (TCX)
#pragma unroll
			for (int mt = 0; mt < B / 16; mt++)
#pragma unroll
				for (int nt = 0; nt < B / 16; nt++)
					wmma::fill_fragment(acc[mt][nt], 0.f);
#endif

		/* ---- accumulate the chunk's entries, 32 at a time */
		for (int64_t base = cb; base < ce; base += 32)
		{
			const int64_t ent = base + lane;
			const int	cnt = ce - base < 32 ? (int) (ce - base) : 32;

			int32_t		id = 0;
			float		w = 0.f;

			if (ent < ce)
			{
				const float c = gm_confidence(a.alpha, __ldg(a.data + ent));

				id = __ldg(a.indices + ent);
				w = c - a.alpha0;
				wv[lane] = w;
				tv[lane] = c - w * a.S[ent];
			}
			/*
			 * the slices into the tile, 8 lanes an entry (lane l: float4 l % 8,
			 * + 8, ... of entry 4 i + l / 8): every load instruction reads 4
			 * entries' whole 128-byte lines, where a lane per entry touched 32
			 * lines per instruction (the L1 traffic that bound the prediction
			 * update, block_apply_kernel, at 97%).  Missing entries are zero
			 * (the tensor cores take all 32 rows).
			 */
			if constexpr (CPL == 2 && !TCX)
			{
				/* b = 64 in FP32 measured faster with a lane per entry */
				if (ent < ce)
				{
					const float4 *yp = reinterpret_cast<const float4 *>(a.Y + (size_t) id * a.kp + a.b0);
					float4	   *tr = reinterpret_cast<float4 *>(tile + lane * TS);

#pragma unroll
					for (int f = 0; f < B / 4; f++)
						tr[f] = __ldg(yp + f);
				}
			}
			else
#pragma unroll
				for (int i = 0; i < 8; i++)
				{
					const int	e = 4 * i + (lane >> 3);
					const int32_t ide = __shfl_sync(0xffffffffu, id, e);
					const float we = __shfl_sync(0xffffffffu, w, e);
					const float4 *yp = reinterpret_cast<const float4 *>(a.Y + (size_t) ide * a.kp + a.b0);
					float4	   *tr = reinterpret_cast<float4 *>(tile + e * TS);
					float4	   *wr = reinterpret_cast<float4 *>(wytile + e * TS);

#pragma unroll
					for (int f = lane & 7; f < B / 4; f += 8)
					{
						const float4 y4 = e < cnt ? __ldg(yp + f) : make_float4(0.f, 0.f, 0.f, 0.f);

						tr[f] = y4;
						if (TCX)
							wr[f] = make_float4(we * y4.x, we * y4.y, we * y4.z, we * y4.w);
					}
				}
			__syncwarp();
#if GM_TF32_MMA
			if constexpr (TCX)
			{
				gram_tc<B>(acc, wytile, tile, TS);
				for (int e = 0; e < cnt; e++)
				{
					const float tt = tv[e];

#pragma unroll
					for (int q = 0; q < CPL; q++)
						r[q] = fmaf(tt, tile[e * TS + lane + 32 * q], r[q]);
				}
			}
			else
#endif
			if constexpr (TILED)
			{
				const int	rg = lane >> 2,
							cg = lane & 3;

				for (int e = 0; e < cnt; e++)
				{
					const float *te = tile + e * TS;
					const float4 *te4 = reinterpret_cast<const float4 *>(te);
					const float4 yi = te4[rg],
								ja = te4[2 * cg],
								jb = te4[2 * cg + 1];
					const float we = wv[e];
					const float wyi[4] = {we * yi.x, we * yi.y, we * yi.z, we * yi.w};
					const float yj[8] = {ja.x, ja.y, ja.z, ja.w, jb.x, jb.y, jb.z, jb.w};

					r[0] = fmaf(tv[e], te[lane], r[0]);
#pragma unroll
					for (int i = 0; i < 4; i++)
#pragma unroll
						for (int j = 0; j < 8; j++)
							A[0][8 * i + j] = fmaf(wyi[i], yj[j], A[0][8 * i + j]);
				}
			}
			else
			{
				for (int e = 0; e < cnt; e++)
				{
					const float *te = tile + e * TS;
					const float4 *te4 = reinterpret_cast<const float4 *>(te);
					const float we = wv[e],
								tt = tv[e];
					float		wy[CPL];

#pragma unroll
					for (int q = 0; q < CPL; q++)
					{
						const float yj = te[lane + 32 * q];

						r[q] = fmaf(tt, yj, r[q]);
						wy[q] = we * yj;
					}
#pragma unroll
					for (int i = 0; i < B / 4; i++)
					{
						const float4 y4 = te4[i];

#pragma unroll
						for (int q = 0; q < CPL; q++)
						{
							A[q][4 * i] = fmaf(wy[q], y4.x, A[q][4 * i]);
							A[q][4 * i + 1] = fmaf(wy[q], y4.y, A[q][4 * i + 1]);
							A[q][4 * i + 2] = fmaf(wy[q], y4.z, A[q][4 * i + 2]);
							A[q][4 * i + 3] = fmaf(wy[q], y4.w, A[q][4 * i + 3]);
						}
					}
				}
			}
			__syncwarp();
		}

		if constexpr (TILED)
		{
			/*
			 * the 4 x 8 tiles into the (free) entry tile, rows 33 floats apart
			 * (two-way bank conflicts at most), then a column per lane
			 */
			float	   *am = tile;
			const int	rg = lane >> 2,
						cg = lane & 3;

			__syncwarp();
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 8; j++)
					am[(4 * rg + i) * 33 + 8 * cg + j] = A[0][8 * i + j];
			__syncwarp();
#pragma unroll
			for (int i = 0; i < B; i++)
				A[0][i] = am[i * 33 + lane];
			__syncwarp();
		}
#if GM_TF32_MMA
		if constexpr (TCX)
		{
			/* the tiles into the (free) entry tile as b x b row-major, then columns to registers */
			float	   *am = tile;

#pragma unroll
			for (int mt = 0; mt < (TCX ? B / 16 : 1); mt++)
#pragma unroll
				for (int nt = mt; nt < (TCX ? B / 16 : 1); nt++)
				{
					wmma::store_matrix_sync(am + 16 * mt * B + 16 * nt, acc[mt][nt], B, wmma::mem_row_major);
					if (nt != mt)
						wmma::store_matrix_sync(am + 16 * nt * B + 16 * mt, acc[mt][nt], B,
												wmma::mem_col_major);
				}
			__syncwarp();
#pragma unroll
			for (int q = 0; q < CPL; q++)
#pragma unroll
				for (int i = 0; i < B; i++)
					A[q][i] = am[i * B + lane + 32 * q];
			__syncwarp();
		}
#endif

		/* ---- a row of several chunks: sum into the scratch, the last one solves */
		if (nch > 1)
		{
			float	   *sc = a.scratch + (size_t) (a.slot[row] - a.slot0) * (B * B + B);
			int			last = 0;

#pragma unroll
			for (int q = 0; q < CPL; q++)
			{
#pragma unroll
				for (int i = 0; i < B; i++)
					atomicAdd(sc + i * B + lane + 32 * q, A[q][i]);
				atomicAdd(sc + B * B + lane + 32 * q, r[q]);
			}
			__threadfence();
			__syncwarp();
			if (lane == 0)
				last = atomicAdd(a.counter + row, 1) == nch - 1;
			last = __shfl_sync(0xffffffffu, last, 0);
			if (!last)
				continue;	/* another chunk of the row solves */
			__threadfence();
#pragma unroll
			for (int q = 0; q < CPL; q++)
			{
#pragma unroll
				for (int i = 0; i < B; i++)
				{
					A[q][i] = __ldcg(sc + i * B + lane + 32 * q);
					sc[i * B + lane + 32 * q] = 0.f;
				}
				r[q] = __ldcg(sc + B * B + lane + 32 * q);
				sc[B * B + lane + 32 * q] = 0.f;
			}
			if (lane == 0)
				a.counter[row] = 0;
		}

		/* ---- the row's system: A += G_BB + reg I, r -= H + reg x; padding is the identity */
		const float regu = a.reg ? a.reg[row] : 0.f;
		float		x[CPL];

#pragma unroll
		for (int q = 0; q < CPL; q++)
		{
			const int	c = lane + 32 * q;
			const bool	pad = a.b0 + c >= a.k;

			x[q] = a.X[(size_t) row * a.kp + a.b0 + c];
			r[q] = pad ? 0.f : r[q] - a.H[(size_t) (row - a.row0) * B + c] - regu * x[q];
#pragma unroll
			for (int i = 0; i < B; i++)
			{
				const float g = gbb[i * B + c] + (i == c ? regu : 0.f);

				A[q][i] = pad ? (i == c ? 1.f : 0.f) : A[q][i] + g;
			}
		}

		/* ---- elimination: lane c updates its columns c > p at step p */
		float	   *col = tile;		/* the tile is free now: column p's entries */
		bool		ok = true;

		__syncwarp();
#pragma unroll
		for (int p = 0; p < B; p++)
		{
#pragma unroll
			for (int q = 0; q < CPL; q++)
				col[lane + 32 * q] = A[q][p];	/* A(c, p) = A(p, c) */
			const float rp = __shfl_sync(0xffffffffu, r[p / 32], p % 32);

			__syncwarp();
			const float piv = col[p];

			ok = ok && piv > 0.f && isfinite(piv);
			const float inv = 1.f / piv;

#pragma unroll
			for (int q = 0; q < CPL; q++)
			{
				const int	c = lane + 32 * q;
				const float l = c > p ? A[q][p] * inv : 0.f;

#pragma unroll
				for (int i = p + 1; i < B; i++)
					A[q][i] = fmaf(-l, col[i], A[q][i]);
				r[q] = fmaf(-l, rp, r[q]);
			}
			__syncwarp();
		}

		/* ---- back substitution: U(c, p) = A[c][p] after step c */
		float		d[CPL];

#pragma unroll
		for (int q = 0; q < CPL; q++)
			d[q] = 0.f;
#pragma unroll
		for (int p = B - 1; p >= 0; p--)
		{
			const float dp = __shfl_sync(0xffffffffu, r[p / 32] / A[p / 32][p], p % 32);

#pragma unroll
			for (int q = 0; q < CPL; q++)
			{
				const int	c = lane + 32 * q;

				if (c == p)
					d[q] = dp;
				else if (c < p)
					r[q] = fmaf(-A[q][p], dp, r[q]);
			}
		}
#pragma unroll
		for (int q = 0; q < CPL; q++)
		{
			const int	c = lane + 32 * q;
			const float dq = ok ? d[q] : 0.f;

			a.X[(size_t) row * a.kp + a.b0 + c] = x[q] + dq;
			a.D[(size_t) (row - a.row0) * B + c] = dq;
		}
		__syncwarp();				/* the tile is the next chunk's */
	}
	gm_chunk_done(a.queue, nwarps);
}

/* s_e += y_eB . d_row for the chunk's entries, 8 lanes per entry */
template <int CPL>
__global__ void
__launch_bounds__(BWARPS * 32, GM_MIN_BLOCKS(BWARPS * 32, CPL == 1 ? 8 : 1))	/* b = 32: 32 registers, a full SM */
block_apply_kernel(gm_block_args a)
{
	constexpr int B = 32 * CPL;
	const int	lane = threadIdx.x & 31;
	const int	sub = lane & 7;

	for (int32_t task = gm_chunk_first(a.queue, BWARPS); task < a.nchunks;
		 task = gm_chunk_next(a.queue, a.nchunks))
	{
		const int2	ch = a.chunks[task];
		const int64_t rb = a.indptr[ch.x];
		const int64_t re = a.indptr[ch.x + 1];
		const int64_t cb = rb + (int64_t) ch.y * GM_CHUNK;
		const int64_t ce = cb + GM_CHUNK < re ? cb + GM_CHUNK : re;
		const float4 *dp = reinterpret_cast<const float4 *>(a.D + (size_t) (ch.x - a.row0) * B);
		float4		d[CPL];

		/* 8 lanes an entry, lane l holding float4 l % 8 (+ 8) of d: whole lines per load */
#pragma unroll
		for (int q = 0; q < CPL; q++)
			d[q] = dp[sub + 8 * q];
		for (int64_t e0 = cb; e0 < ce; e0 += 16)
		{
			float		s[4];

#pragma unroll
			for (int u = 0; u < 4; u++)
			{
				const int64_t ent = e0 + 4 * u + (lane >> 3);

				s[u] = 0.f;
				if (ent < ce)
				{
					const float4 *yp = reinterpret_cast<const float4 *>(
						a.Y + (size_t) __ldg(a.indices + ent) * a.kp + a.b0);

#pragma unroll
					for (int q = 0; q < CPL; q++)
						s[u] += dot4(__ldg(yp + sub + 8 * q), d[q]);
				}
			}
#pragma unroll
			for (int u = 0; u < 4; u++)
			{
				const int64_t ent = e0 + 4 * u + (lane >> 3);

				s[u] += __shfl_xor_sync(0xffffffffu, s[u], 1);
				s[u] += __shfl_xor_sync(0xffffffffu, s[u], 2);
				s[u] += __shfl_xor_sync(0xffffffffu, s[u], 4);
				if (sub == 0 && ent < ce)
					a.S[ent] += s[u];
			}
		}
	}
	gm_chunk_done(a.queue, BWARPS);
}

/* Shared memory of a gm_block_pass launch with the given warps per block. */
static size_t
block_smem(int b, int tc, int warps)
{
	return sizeof(float) * ((size_t) b * b + (size_t) warps * WARP_SMEM(b, tc));
}

/* Shared memory of a gm_block_pass launch at full width (BWARPS warps). */
size_t
gm_block_smem(int b, int tc)
{
	return block_smem(b, tc, BWARPS);
}

/*
 * How the four accumulate-and-solve kernels launch on this process's
 * device (gm_block_prepare): warps per block (0: not at all) and shared
 * memory; index (b == 64) + 2 tc.  block_tc: the tc kernels' code has
 * tensor cores (it was compiled for 8.0 or newer).
 */
static int	block_warps[4];
static bool block_tc;

/*
 * Plan the kernels for the device: TF32 tensor cores where the code that
 * the device runs has them, and for each kernel the most warps (up to
 * BWARPS) whose shared memory fits the device's per-block limit
 * (gm_smem_optin), which the kernel is then allowed.
 */
cudaError_t
gm_block_prepare(void)
{
	const void *kern[4] = {
		(const void *) block_pass_kernel<1, false>, (const void *) block_pass_kernel<2, false>,
		(const void *) block_pass_kernel<1, true>, (const void *) block_pass_kernel<2, true>
	};
	size_t		optin = gm_smem_optin();
	cudaFuncAttributes fa;
	cudaError_t e;

	e = cudaFuncGetAttributes(&fa, kern[2]);
	if (e != cudaSuccess)
		return e;
	block_tc = fa.ptxVersion >= 80;
	for (int i = 0; i < 4; i++)
	{
		const int	b = i % 2 ? 64 : 32,
					tc = i / 2;
		int			w = BWARPS;

		while (w > 1 && block_smem(b, tc, w) > optin)
			w--;
		block_warps[i] = block_smem(b, tc, w) <= optin ? w : 0;
		if (block_warps[i] == 0)
			continue;
		e = cudaFuncSetAttribute(kern[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
								 (int) block_smem(b, tc, w));
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

/* Whether gm_block_pass puts the Grams on tensor cores when asked (after gm_block_prepare). */
int
gm_block_tensor_cores(void)
{
	return block_tc;
}

/*
 * Launch the accumulate-and-solve pass over a's chunks (tc: Grams on tensor
 * cores where the device's code has them, else FP32).
 */
cudaError_t
gm_block_pass(int b, int tc, const gm_block_args &a, cudaStream_t st)
{
	static int	resident[4];	/* per kernel (gm_chunk_grid) */
	int			i,
				w;
	size_t		sm;

	if (a.nchunks == 0)
		return cudaSuccess;
	if (b != 32 && b != 64)
		return cudaErrorInvalidValue;
	tc = tc && block_tc;
	i = (b == 64) + 2 * tc;
	w = block_warps[i];
	if (w == 0)
		return cudaErrorInvalidConfiguration;	/* no shared memory for it (or not prepared) */
	sm = block_smem(b, tc, w);
#define PASS(CPL, TC) \
	block_pass_kernel<CPL, TC><<<gm_chunk_grid(block_pass_kernel<CPL, TC>, &resident[i], w, sm, \
											   a.nchunks, a.queue), \
		w * 32, sm, st>>>(a)
	switch (i)
	{
		case 0:
			PASS(1, false);
			break;
		case 1:
			PASS(2, false);
			break;
		case 2:
			PASS(1, true);
			break;
		default:
			PASS(2, true);
			break;
	}
#undef PASS
	return cudaGetLastError();
}

/* Launch the prediction update over a's chunks. */
cudaError_t
gm_block_apply(int b, const gm_block_args &a, cudaStream_t st)
{
	static int	resident[2];	/* per kernel (gm_chunk_grid) */

	if (a.nchunks == 0)
		return cudaSuccess;
	if (b == 32)
		block_apply_kernel<1><<<gm_chunk_grid(block_apply_kernel<1>, &resident[0], BWARPS, 0,
											  a.nchunks, a.queue),
			BWARPS * 32, 0, st>>>(a);
	else if (b == 64)
		block_apply_kernel<2><<<gm_chunk_grid(block_apply_kernel<2>, &resident[1], BWARPS, 0,
											  a.nchunks, a.queue),
			BWARPS * 32, 0, st>>>(a);
	else
		return cudaErrorInvalidValue;
	return cudaGetLastError();
}
