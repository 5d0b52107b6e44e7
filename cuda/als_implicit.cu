/*
 * als_implicit.cu: implicit-feedback ALS with a conjugate-gradient solver
 * (Hu, Koren, Volinsky 2008) on the GPU: the CUDA table of operations
 * gm_cuda_als_implicit_ops (gm_algo.h), driven by the core's training loop
 * like the CPU table of src/core/als_implicit.c.
 *
 * How it works (see test/bench/gpu/README.md for the measurements):
 *
 *  - create uploads R and Rt (device_csr.cuh) and turns their values into
 *    confidences c = 1 + alpha v on the device, rounded as the CPU rounds
 *    them; the sum of the confidences (for the loss) is taken on the host.
 *  - Factors live on the device row-major with the row length padded to kp
 *    (gm_padded_k); padded columns stay exactly zero.
 *  - Sweep 0 solves the users, sweep 1 the items.  begin_sweep builds
 *    G = F^T F + reg I of the other side (cuBLAS sgemm, FP32).
 *  - One CG pass (the initial residual, then each of the cg_steps steps) is
 *      1. a cuBLAS sgemm over all rows of the slice: AP = V G   (V = X or P;
 *         the initial pass uses alpha = -1), i.e. the dense part of A v for
 *         every row at once at sgemm speed instead of k^2 scalar reads per row;
 *      2. one fused kernel, a warp per "chunk" (up to GM_CHUNK nonzeros of one
 *         row): lanes form groups of LG lanes, each group takes one nonzero at
 *         a time and holds its k-vector as V float4 per lane (16-byte loads,
 *         coalesced); the dot y_i . v is a log2(LG)-step shuffle reduction
 *         inside the group, so NG = 32/LG nonzeros are in flight per warp
 *         (twice that with the unroll) and no __syncthreads is ever needed.
 *         The groups' partial sums are combined once per chunk.  A row with a
 *         single chunk then does its CG update straight from registers; a
 *         row split over several chunks (popular items, heavy users) adds its
 *         partial sums into AP with float4 atomics and the last chunk to
 *         finish (a per-row counter, threadfence reduction) does the update.
 *  - The update is the CPU core's (src/core/als_implicit.c cg_solve_row):
 *      init:  r = sum_i (c_i - (c_i-1) y_i.x) y_i - G x;  p = r;  rs = r.r
 *      step:  if rs < 1e-20 skip;  Ap = G p + sum_i (c_i-1)(y_i.p) y_i;
 *             a = rs / p.Ap;  x += a p;  r -= a Ap;  rsn = r.r;
 *             p = r + (rsn/rs) p;  rs = rsn    (rsn < 1e-20 stops the row)
 *  - evaluate: the loss accumulates in float64 (gm_als_loss's definition).
 *
 * Every CUDA and cuBLAS call goes through GM_CHECK, which writes the call,
 * the error, the file and the line into err and returns GM_EDEVICE.
 */
#include "common.cuh"
#include "device_csr.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARPS			8		/* warps per block in the CG kernels */

typedef struct als_gpu
{
	int32_t		n[2];			/* rows of side 0 (users) and 1 (items) */
	int64_t		nnz;
	int			k;
	int			kp;
	int			cg_steps;
	float		reg;
	int			prepared;		/* side G was built for, -1 none */
	double		sum_c;
	gm_dcsr		m[2];			/* R and Rt, values turned into confidences */
	gm_dchunks	ch[2];
	const int64_t *indptr_h[2]; /* the caller's row pointers of R and Rt */
	float	   *F[2];			/* X, Y: n x kp */
	float	   *G;				/* kp x kp */
	float	   *R,
			   *P,
			   *AP;				/* max(n) x kp work */
	float	   *rs;				/* max(n) */
	int		   *counter;		/* max(n), zero between passes */
	double	   *acc;			/* loss sums */
	cublasHandle_t blas;
	cudaStream_t stream;
	int			have_blas;
	int			have_stream;
} als_gpu;

/* ------------------------------------------------------------ kernels */

/*
 * v = 1 + alpha v, rounded like the CPU's 1.0f + alpha * v (no fused
 * multiply-add), so both backends train on the same confidences.
 */
__global__ void
to_confidence(float *v, int64_t n, float alpha)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		v[i] = __fadd_rn(1.0f, __fmul_rn(alpha, v[i]));
}

struct pass_args
{
	const int64_t *indptr;
	const int32_t *indices;
	const float *data;
	const int2 *chunks;
	int32_t		nchunks;
	const float *Y;				/* the other side's factors */
	float	   *X;				/* this side's factors */
	float	   *R;
	float	   *P;
	float	   *AP;
	float	   *rs;
	int		   *counter;
};

/*
 * One CG pass.  INIT: r = AP + sum_i (c_i - (c_i-1) y_i.x) y_i with AP = -XG.
 * Otherwise: Ap = AP + sum_i (c_i-1)(y_i.p) y_i with AP = PG, then the update.
 * kp = 4 * LG * V; lane (g = lane / LG, q = lane % LG) holds float4 number
 * q + LG * t (t < V) of every row vector.
 */
template <int LG, int V, bool INIT>
__global__ void
__launch_bounds__(WARPS * 32)
cg_pass(pass_args a)
{
	constexpr int NG = 32 / LG;
	constexpr int KP4 = LG * V;
	const int	lane = threadIdx.x & 31;
	const int	g = lane / LG;
	const int	q = lane % LG;
	const int32_t task = blockIdx.x * WARPS + (threadIdx.x >> 5);

	if (task >= a.nchunks)
		return;

	const int2	ch = a.chunks[task];
	const int32_t row = ch.x;
	const int64_t rb = a.indptr[row];
	const int64_t re = a.indptr[row + 1];
	const int	nch = re - rb > GM_CHUNK ? (int) ((re - rb + GM_CHUNK - 1) / GM_CHUNK) : 1;
	const int64_t b = rb + (int64_t) ch.y * GM_CHUNK;
	const int64_t e = b + GM_CHUNK < re ? b + GM_CHUNK : re;
	float		rsold = 0.0f;

	if (!INIT)
	{
		rsold = a.rs[row];
		if (rsold < 1e-20f)
			return;				/* converged: the CPU's "break" */
	}

	const float4 *vrow = reinterpret_cast<const float4 *>(
		(INIT ? a.X : a.P) + (size_t) row * (KP4 * 4));
	float4		v[V],
				acc[V];

#pragma unroll
	for (int t = 0; t < V; t++)
	{
		v[t] = vrow[q + LG * t];
		acc[t] = make_float4(0.f, 0.f, 0.f, 0.f);
	}

	/*
	 * Two nonzeros per group per round (2 NG per warp), the next round's ids
	 * prefetched.  The loop bound is uniform across the warp so that every
	 * lane reaches every shuffle; missing nonzeros count as zero rows.
	 */
	int32_t		id0 = 0,
				id1 = 0;
	float		c0 = 1.0f,
				c1 = 1.0f;

	if (b + g < e)
	{
		id0 = __ldg(a.indices + b + g);
		c0 = __ldg(a.data + b + g);
	}
	if (b + g + NG < e)
	{
		id1 = __ldg(a.indices + b + g + NG);
		c1 = __ldg(a.data + b + g + NG);
	}
	for (int64_t base = b; base < e; base += 2 * NG)
	{
		const bool	has0 = base + g < e;
		const bool	has1 = base + g + NG < e;
		const float4 *y0p = reinterpret_cast<const float4 *>(a.Y + (size_t) id0 * (KP4 * 4));
		const float4 *y1p = reinterpret_cast<const float4 *>(a.Y + (size_t) id1 * (KP4 * 4));
		const float cc0 = c0,
					cc1 = c1;
		float4		y0[V],
					y1[V];

#pragma unroll
		for (int t = 0; t < V; t++)
		{
			y0[t] = has0 ? __ldg(y0p + q + LG * t) : make_float4(0.f, 0.f, 0.f, 0.f);
			y1[t] = has1 ? __ldg(y1p + q + LG * t) : make_float4(0.f, 0.f, 0.f, 0.f);
		}
		{
			const int64_t n0 = base + 2 * NG + g,
						n1 = base + 3 * NG + g;

			if (n0 < e)
			{
				id0 = __ldg(a.indices + n0);
				c0 = __ldg(a.data + n0);
			}
			if (n1 < e)
			{
				id1 = __ldg(a.indices + n1);
				c1 = __ldg(a.data + n1);
			}
		}
		float		s0 = 0.f,
					s1 = 0.f;

#pragma unroll
		for (int t = 0; t < V; t++)
		{
			s0 += dot4(y0[t], v[t]);
			s1 += dot4(y1[t], v[t]);
		}
		s0 = group_sum<LG>(s0);
		s1 = group_sum<LG>(s1);

		float		w0,
					w1;

		if (INIT)
		{
			w0 = has0 ? cc0 - (cc0 - 1.0f) * s0 : 0.0f;
			w1 = has1 ? cc1 - (cc1 - 1.0f) * s1 : 0.0f;
		}
		else
		{
			w0 = has0 ? (cc0 - 1.0f) * s0 : 0.0f;
			w1 = has1 ? (cc1 - 1.0f) * s1 : 0.0f;
		}
#pragma unroll
		for (int t = 0; t < V; t++)
		{
			fma4(acc[t], w0, y0[t]);
			fma4(acc[t], w1, y1[t]);
		}
	}

	/* combine the NG groups: afterwards every group holds the chunk's sum */
#pragma unroll
	for (int o = LG; o < 32; o <<= 1)
	{
#pragma unroll
		for (int t = 0; t < V; t++)
		{
			acc[t].x += __shfl_xor_sync(0xffffffffu, acc[t].x, o);
			acc[t].y += __shfl_xor_sync(0xffffffffu, acc[t].y, o);
			acc[t].z += __shfl_xor_sync(0xffffffffu, acc[t].z, o);
			acc[t].w += __shfl_xor_sync(0xffffffffu, acc[t].w, o);
		}
	}

	float4	   *aprow = reinterpret_cast<float4 *>(a.AP + (size_t) row * (KP4 * 4));
	float4		ap[V];

	if (nch == 1)
	{
#pragma unroll
		for (int t = 0; t < V; t++)
			ap[t] = add4(aprow[q + LG * t], acc[t]);
	}
	else
	{
		/* several chunks: publish, and the last one to arrive updates */
		int			last = 0;

		if (g == 0)
		{
#pragma unroll
			for (int t = 0; t < V; t++)
				atomicAdd(aprow + q + LG * t, acc[t]);
		}
		__threadfence();
		__syncwarp();
		if (lane == 0)
		{
			int			old = atomicAdd(a.counter + row, 1);

			last = old == nch - 1;
		}
		last = __shfl_sync(0xffffffffu, last, 0);
		if (!last)
			return;
		__threadfence();
#pragma unroll
		for (int t = 0; t < V; t++)
			ap[t] = __ldcg(aprow + q + LG * t);
		if (lane == 0)
			a.counter[row] = 0;
	}

	float4	   *rrow = reinterpret_cast<float4 *>(a.R + (size_t) row * (KP4 * 4));
	float4	   *prow = reinterpret_cast<float4 *>(a.P + (size_t) row * (KP4 * 4));

	if (INIT)
	{
		/* ap holds r */
		float		s = 0.f;

#pragma unroll
		for (int t = 0; t < V; t++)
			s += dot4(ap[t], ap[t]);
		s = group_sum<LG>(s);
		if (g == 0)
		{
#pragma unroll
			for (int t = 0; t < V; t++)
			{
				rrow[q + LG * t] = ap[t];
				prow[q + LG * t] = ap[t];
			}
			if (q == 0)
				a.rs[row] = s;
		}
		return;
	}

	/* the CG step; v holds p */
	float		pap = 0.f;

#pragma unroll
	for (int t = 0; t < V; t++)
		pap += dot4(v[t], ap[t]);
	pap = group_sum<LG>(pap);

	const float alpha = rsold / pap;
	float4	   *xrow = reinterpret_cast<float4 *>(a.X + (size_t) row * (KP4 * 4));
	float4		r[V];
	float		rsn = 0.f;

#pragma unroll
	for (int t = 0; t < V; t++)
	{
		float4		x = xrow[q + LG * t];
		float4		rr = rrow[q + LG * t];

		x.x += alpha * v[t].x;
		x.y += alpha * v[t].y;
		x.z += alpha * v[t].z;
		x.w += alpha * v[t].w;
		rr.x -= alpha * ap[t].x;
		rr.y -= alpha * ap[t].y;
		rr.z -= alpha * ap[t].z;
		rr.w -= alpha * ap[t].w;
		r[t] = rr;
		rsn += dot4(rr, rr);
		if (g == 0)
			xrow[q + LG * t] = x;
	}
	rsn = group_sum<LG>(rsn);
	if (g == 0)
	{
		const float beta = rsn / rsold;

#pragma unroll
		for (int t = 0; t < V; t++)
		{
			float4		pp;

			rrow[q + LG * t] = r[t];
			pp.x = r[t].x + beta * v[t].x;
			pp.y = r[t].y + beta * v[t].y;
			pp.z = r[t].z + beta * v[t].z;
			pp.w = r[t].w + beta * v[t].w;
			prow[q + LG * t] = pp;
		}
		if (q == 0)
			a.rs[row] = rsn;	/* < 1e-20 stops the row */
	}
}

/* loss, sparse part: sum over stored entries of c(1-s)^2 - s^2, s = x.y */
template <int LG, int V>
__global__ void
__launch_bounds__(WARPS * 32)
loss_sparse(const int64_t *indptr, const int32_t *indices, const float *data,
			const int2 *chunks, int32_t nchunks, const float *X, const float *Y,
			double *out)
{
	constexpr int NG = 32 / LG;
	constexpr int KP4 = LG * V;
	__shared__ double part[WARPS];
	const int	lane = threadIdx.x & 31;
	const int	g = lane / LG;
	const int	q = lane % LG;
	const int32_t task = blockIdx.x * WARPS + (threadIdx.x >> 5);
	double		sum = 0.0;

	if (task < nchunks)
	{
		const int2	ch = chunks[task];
		const int64_t rb = indptr[ch.x];
		const int64_t re = indptr[ch.x + 1];
		const int64_t b = rb + (int64_t) ch.y * GM_CHUNK;
		const int64_t e = b + GM_CHUNK < re ? b + GM_CHUNK : re;
		const float4 *xr = reinterpret_cast<const float4 *>(X + (size_t) ch.x * (KP4 * 4));
		float4		x[V];

#pragma unroll
		for (int t = 0; t < V; t++)
			x[t] = xr[q + LG * t];
		/* the loop bound is uniform per group; the shuffles stay in-group */
		for (int64_t base = b; base < e; base += NG)
		{
			int64_t		i = base + g;
			float		s = 0.f;
			float		c = 0.f;

			if (i < e)
			{
				const float4 *yr = reinterpret_cast<const float4 *>(
					Y + (size_t) __ldg(indices + i) * (KP4 * 4));

				c = __ldg(data + i);
#pragma unroll
				for (int t = 0; t < V; t++)
					s += dot4(__ldg(yr + q + LG * t), x[t]);
			}
			s = group_sum<LG>(s);
			if (i < e && q == 0)
			{
				double		ds = s;

				sum += c * (1.0 - ds) * (1.0 - ds) - ds * ds;
			}
		}
	}
	for (int o = 16; o > 0; o >>= 1)
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	if (lane == 0)
		part[threadIdx.x >> 5] = sum;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		s = 0.0;

		for (int w = 0; w < WARPS; w++)
			s += part[w];
		atomicAdd(out, s);
	}
}

/* out[0] += sum a.b, out[1] += sum b.b over n elements */
__global__ void
dense_sums(const float *A, const float *B, size_t n, double *out)
{
	__shared__ double p0[32],
				p1[32];
	double		s0 = 0.0,
				s1 = 0.0;

	for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
		 i += (size_t) gridDim.x * blockDim.x)
	{
		double		bv = B[i];

		if (A)
			s0 += (double) A[i] * bv;
		s1 += bv * bv;
	}
	for (int o = 16; o > 0; o >>= 1)
	{
		s0 += __shfl_xor_sync(0xffffffffu, s0, o);
		s1 += __shfl_xor_sync(0xffffffffu, s1, o);
	}
	if ((threadIdx.x & 31) == 0)
	{
		p0[threadIdx.x >> 5] = s0;
		p1[threadIdx.x >> 5] = s1;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		a0 = 0.0,
					a1 = 0.0;

		for (int w = 0; w < (int) (blockDim.x >> 5); w++)
		{
			a0 += p0[w];
			a1 += p1[w];
		}
		atomicAdd(out, a0);
		atomicAdd(out + 1, a1);
	}
}

/* G[i][i] += reg for the first k diagonal entries (the padded ones stay 0) */
__global__ void
add_diag(float *G, int k, int kp, float reg)
{
	int			i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < k)
		G[(size_t) i * kp + i] += reg;
}

/* ----------------------------------------------------- shape dispatch */

/* Launch one CG pass over a slice's chunks with the kernel shape of kp. */
static cudaError_t
launch_pass(int kp, bool init, const pass_args &a, cudaStream_t st)
{
	dim3		grid((a.nchunks + WARPS - 1) / WARPS);

	if (a.nchunks == 0)
		return cudaSuccess;
	switch (kp)
	{
#define CASE(KP, LG, V) \
		case KP: \
			if (init) \
				cg_pass<LG, V, true><<<grid, WARPS * 32, 0, st>>>(a); \
			else \
				cg_pass<LG, V, false><<<grid, WARPS * 32, 0, st>>>(a); \
			break;
			GM_SHAPES(CASE)
#undef CASE
		default:
			return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* Launch the loss's sparse part over all users with the kernel shape of kp. */
static cudaError_t
launch_loss(int kp, const als_gpu *h, double *out)
{
	int32_t		nchunks = h->ch[0].ptr[h->n[0]];
	dim3		grid((nchunks + WARPS - 1) / WARPS);

	if (nchunks == 0)
		return cudaSuccess;
	switch (kp)
	{
#define CASE(KP, LG, V) \
		case KP: \
			loss_sparse<LG, V><<<grid, WARPS * 32, 0, h->stream>>>( \
				h->m[0].indptr, h->m[0].indices, h->m[0].data, h->ch[0].chunks, nchunks, \
				h->F[0], h->F[1], out); \
			break;
			GM_SHAPES(CASE)
#undef CASE
		default:
			return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* --------------------------------------------------------- operations */

/* Free all device memory and handles; safe on NULL and after errors. */
static void
als_destroy(void *p)
{
	als_gpu    *h = (als_gpu *) p;

	if (h == NULL)
		return;
	if (h->have_stream)
		cudaStreamSynchronize(h->stream);
	for (int s = 0; s < 2; s++)
	{
		gm_dcsr_free(&h->m[s]);
		gm_dchunks_free(&h->ch[s]);
		cudaFree(h->F[s]);
	}
	cudaFree(h->G);
	cudaFree(h->R);
	cudaFree(h->P);
	cudaFree(h->AP);
	cudaFree(h->rs);
	cudaFree(h->counter);
	cudaFree(h->acc);
	if (h->have_blas)
		cublasDestroy(h->blas);
	if (h->have_stream)
		cudaStreamDestroy(h->stream);
	(void) cudaGetLastError();
	free(h);
}

/* The device side of create: uploads, confidences, factors, work arrays. */
static int
create_inner(als_gpu *h, const gm_mf_data *d, float alpha, char *err, size_t errlen)
{
	const gm_csr *A[2] = {d->R, d->Rt};
	const float *Fh[2] = {d->X, d->Y};
	size_t		nmax;
	int			kp = h->kp,
				k = h->k,
				rc;

	GM_CHECK(cudaSetDevice(0));
	/* a blocking stream: events on the legacy default stream bracket it */
	GM_CHECK(cudaStreamCreate(&h->stream));
	h->have_stream = 1;
	GM_CHECK(cublasCreate(&h->blas));
	h->have_blas = 1;
	GM_CHECK(cublasSetStream(h->blas, h->stream));
	GM_CHECK(cublasSetMathMode(h->blas, CUBLAS_PEDANTIC_MATH));	/* FP32, no TF32 */

	for (int s = 0; s < 2; s++)
	{
		int32_t		n = h->n[s];

		if ((rc = gm_dcsr_upload(&h->m[s], A[s], err, errlen)) != GM_OK)
			return rc;
		if (h->nnz > 0)
		{
			to_confidence<<<1024, 256, 0, h->stream>>>(h->m[s].data, h->nnz, alpha);
			GM_CHECK_LAUNCH();
		}
		if ((rc = gm_dchunks_build(&h->ch[s], A[s]->indptr, n, err, errlen)) != GM_OK)
			return rc;
		GM_CHECK(cudaMalloc((void **) &h->F[s], sizeof(float) * (size_t) n * kp));
		GM_CHECK(cudaMemset(h->F[s], 0, sizeof(float) * (size_t) n * kp));
		GM_CHECK(cudaMemcpy2D(h->F[s], sizeof(float) * kp, Fh[s], sizeof(float) * k,
							  sizeof(float) * k, n, cudaMemcpyHostToDevice));
	}
	nmax = (size_t) (h->n[0] > h->n[1] ? h->n[0] : h->n[1]);
	GM_CHECK(cudaMalloc((void **) &h->G, sizeof(float) * (size_t) kp * kp));
	GM_CHECK(cudaMalloc((void **) &h->R, sizeof(float) * nmax * kp));
	GM_CHECK(cudaMalloc((void **) &h->P, sizeof(float) * nmax * kp));
	GM_CHECK(cudaMalloc((void **) &h->AP, sizeof(float) * nmax * kp));
	GM_CHECK(cudaMalloc((void **) &h->rs, sizeof(float) * nmax));
	GM_CHECK(cudaMalloc((void **) &h->counter, sizeof(int) * nmax));
	GM_CHECK(cudaMalloc((void **) &h->acc, sizeof(double) * 4));
	/* poison the work arrays (0xff.. is a NaN): reading what no pass wrote shows */
	GM_CHECK(cudaMemset(h->R, 0xff, sizeof(float) * nmax * kp));
	GM_CHECK(cudaMemset(h->P, 0xff, sizeof(float) * nmax * kp));
	GM_CHECK(cudaMemset(h->AP, 0xff, sizeof(float) * nmax * kp));
	GM_CHECK(cudaMemset(h->rs, 0xff, sizeof(float) * nmax));
	GM_CHECK(cudaMemset(h->counter, 0, sizeof(int) * nmax));

	/* the loss's denominator, summed as the confidences were before (host, in order) */
	h->sum_c = 0.0;
	for (int64_t i = 0; i < h->nnz; i++)
	{
		float		c = 1.0f + alpha * d->R->data[i];

		h->sum_c += c;
	}
	GM_CHECK(cudaDeviceSynchronize());
	return GM_OK;
}

/* Take the problem: upload it (see the file's comment). */
static int
als_create(void **out, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_gpu    *h;
	int			rc;

	(void) cb;					/* the core polls between slices */
	*out = NULL;
	if (!d || !p || !d->R || !d->Rt || !d->X || !d->Y || !d->R->indptr || !d->Rt->indptr ||
		d->R->n_rows < 1 || d->R->n_cols < 1 || d->R->nnz < 0 ||
		d->Rt->n_rows != d->R->n_cols || d->Rt->nnz != d->R->nnz || p->cg_steps < 0 ||
		(d->R->nnz > 0 && (!d->R->indices || !d->R->data || !d->Rt->indices || !d->Rt->data)))
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS create");
		return GM_EINVAL;
	}
	if (p->solver != GM_SOLVER_CG || p->alpha0 != 1.0f || p->nu != 0.0f)
	{
		snprintf(err, errlen,
				 "implicit ALS supports only the CG solver with alpha0 = 1 and nu = 0 so far");
		return GM_ENOTSUP;
	}
	if (gm_padded_k(p->factors) == 0)
	{
		snprintf(err, errlen, "the CUDA module supports 1 to %d factors, not %d",
				 GM_MAXK, p->factors);
		return GM_EINVAL;
	}
	h = (als_gpu *) calloc(1, sizeof(als_gpu));
	if (!h)
	{
		snprintf(err, errlen, "out of host memory");
		return GM_ENOMEM;
	}
	h->n[0] = d->R->n_rows;
	h->n[1] = d->R->n_cols;
	h->nnz = d->R->nnz;
	h->k = p->factors;
	h->kp = gm_padded_k(p->factors);
	h->cg_steps = p->cg_steps;
	h->reg = p->regularization;
	h->prepared = -1;
	h->indptr_h[0] = d->R->indptr;
	h->indptr_h[1] = d->Rt->indptr;
	rc = create_inner(h, d, p->alpha, err, errlen);
	if (rc != GM_OK)
	{
		als_destroy(h);
		return rc;
	}
	gm_device_name(device, devlen);
	*out = h;
	return GM_OK;
}

/* Two sweeps an iteration: the users, then the items. */
static int
als_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

/* G = F^T F (+ reg on the first k diagonal entries), F = factors of a side */
static int
gram(als_gpu *h, const float *F, int32_t n, float reg, float *G,
	 char *err, size_t errlen)
{
	const float one = 1.0f,
				zero = 0.0f;
	int			kp = h->kp;

	/* column-major view: F is kp x n (ld kp); G = F F^T */
	GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_T, kp, kp, n, &one,
						 F, kp, F, kp, &zero, G, kp));
	if (reg != 0.0f)
	{
		add_diag<<<(h->k + 255) / 256, 256, 0, h->stream>>>(G, h->k, kp, reg);
		GM_CHECK_LAUNCH();
	}
	return GM_OK;
}

/*
 * Sweep side: G = Y^T Y + reg I for the users (side 0), X^T X + reg I for
 * the items.  A row costs (len + k) k multiply-adds per CG pass, as on the
 * CPU, so the core cuts the same slices.
 */
static int
als_begin_sweep(void *p, int side, gm_sweep *sw, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) p;
	int			rc;

	if (!h || (side != 0 && side != 1) || !sw)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS begin_sweep");
		return GM_EINVAL;
	}
	rc = gram(h, h->F[1 - side], h->n[1 - side], h->reg, h->G, err, errlen);
	if (rc != GM_OK)
		return rc;
	h->prepared = side;
	sw->n_rows = h->n[side];
	sw->indptr = h->indptr_h[side];
	sw->row_work = (double) h->k * h->k * h->cg_steps;
	sw->nnz_work = (double) h->k * h->cg_steps;
	return GM_OK;
}

/* Launch the CG solve of rows [begin, end) of side (after begin_sweep).  Asynchronous. */
static int
als_run(void *p, int side, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) p;
	const int	kp = h ? h->kp : 0;
	const float one = 1.0f,
				minus = -1.0f,
				zero = 0.0f;
	pass_args	a;
	int32_t		n;

	if (!h || (side != 0 && side != 1) || begin < 0 || end > h->n[side] || begin > end)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS run");
		return GM_EINVAL;
	}
	if (h->prepared != side)
	{
		snprintf(err, errlen, "CUDA implicit ALS run: sweep %d was not begun", side);
		return GM_EINVAL;
	}
	n = end - begin;
	if (n == 0 || h->cg_steps == 0)
		return GM_OK;

	a.indptr = h->m[side].indptr;
	a.indices = h->m[side].indices;
	a.data = h->m[side].data;
	a.chunks = h->ch[side].chunks + h->ch[side].ptr[begin];
	a.nchunks = h->ch[side].ptr[end] - h->ch[side].ptr[begin];
	a.Y = h->F[1 - side];
	a.X = h->F[side];
	a.R = h->R;
	a.P = h->P;
	a.AP = h->AP;
	a.rs = h->rs;
	a.counter = h->counter;

	/* AP = -X G for the slice (column-major: AP^T = G^T X^T, G symmetric) */
	GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, n, kp, &minus,
						 h->G, kp, h->F[side] + (size_t) begin * kp, kp, &zero,
						 h->AP + (size_t) begin * kp, kp));
	GM_CHECK(launch_pass(kp, true, a, h->stream));
	for (int s = 0; s < h->cg_steps; s++)
	{
		GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, n, kp, &one,
							 h->G, kp, h->P + (size_t) begin * kp, kp, &zero,
							 h->AP + (size_t) begin * kp, kp));
		GM_CHECK(launch_pass(kp, false, a, h->stream));
	}
	return GM_OK;
}

/* Nothing to finish at a sweep's end. */
static int
als_end_sweep(void *p, int side, char *err, size_t errlen)
{
	(void) p;
	(void) side;
	(void) err;
	(void) errlen;
	return GM_OK;
}

/* Wait for queued work; reports asynchronous kernel errors. */
static int
als_sync(void *p, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) p;

	if (!h)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS sync");
		return GM_EINVAL;
	}
	GM_CHECK(cudaStreamSynchronize(h->stream));
	GM_CHECK(cudaGetLastError());
	return GM_OK;
}

/* The implicit-ALS loss (gm_als_loss's definition), in float64; no RMSE. */
static int
als_evaluate(void *p, gm_mf_metrics *m, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) p;
	const float one = 1.0f,
				zero = 0.0f;
	const int	kp = h ? h->kp : 0;
	double		acc[4];
	int			rc;

	if (!h || !m)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS evaluate");
		return GM_EINVAL;
	}
	/* G is rebuilt by the next begin_sweep */
	h->prepared = -1;
	rc = gram(h, h->F[1], h->n[1], 0.0f, h->G, err, errlen);
	if (rc != GM_OK)
		return rc;
	/* AP = X (Y^T Y) */
	GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, h->n[0], kp, &one,
						 h->G, kp, h->F[0], kp, &zero, h->AP, kp));
	GM_CHECK(cudaMemsetAsync(h->acc, 0, sizeof(double) * 4, h->stream));
	dense_sums<<<1024, 256, 0, h->stream>>>(h->AP, h->F[0], (size_t) h->n[0] * kp, h->acc);
	GM_CHECK_LAUNCH();
	dense_sums<<<256, 256, 0, h->stream>>>(NULL, h->F[1], (size_t) h->n[1] * kp, h->acc + 2);
	GM_CHECK_LAUNCH();
	GM_CHECK(launch_loss(kp, h, h->acc + 2));	/* acc[2] is unused by dense_sums */
	GM_CHECK(cudaMemcpyAsync(acc, h->acc, sizeof(double) * 4, cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	/* acc: [0] x'Gx  [1] |X|^2  [2] sparse  [3] |Y|^2 */
	m->loss = (acc[0] + acc[2] + h->reg * (acc[1] + acc[3])) /
		(h->sum_c + (double) h->n[0] * h->n[1] - (double) h->nnz);
	m->rmse = NAN;
	return GM_OK;
}

/* Copy the factors back into d->X and d->Y (a NULL array is skipped). */
static int
als_download(void *p, gm_mf_data *d, char *err, size_t errlen)
{
	als_gpu    *h = (als_gpu *) p;
	float	   *out[2];

	if (!h || !d)
	{
		snprintf(err, errlen, "invalid arguments to the CUDA implicit ALS download");
		return GM_EINVAL;
	}
	out[0] = d->X;
	out[1] = d->Y;
	GM_CHECK(cudaStreamSynchronize(h->stream));
	for (int s = 0; s < 2; s++)
		if (out[s])
			GM_CHECK(cudaMemcpy2D(out[s], sizeof(float) * h->k, h->F[s],
								  sizeof(float) * h->kp, sizeof(float) * h->k,
								  h->n[s], cudaMemcpyDeviceToHost));
	return GM_OK;
}

extern const gm_algo_ops gm_cuda_als_implicit_ops = {
	"cuda",
	als_create,
	als_n_sweeps,
	als_begin_sweep,
	als_run,
	als_end_sweep,
	als_sync,
	als_evaluate,
	als_download,
	als_destroy,
};
