/*
 * als.cu: gpumf's CUDA module: implicit-feedback ALS with a conjugate-gradient
 * solver (Hu, Koren, Volinsky 2008), the ABI of gm_cuda.h.
 *
 * How it works (see test/bench/gpu/README.md for the measurements):
 *
 *  - Factors live on the device row-major with the row length padded to kp,
 *    a multiple of 32 (of 128 above 256); padded columns stay exactly zero.
 *  - G = F^T F + reg I (cuBLAS sgemm, FP32, once per prepare).
 *  - One CG pass (the initial residual, then each of the cg_steps steps) is
 *      1. a cuBLAS sgemm over all rows of the slice: AP = V G   (V = X or P;
 *         the initial pass uses alpha = -1), i.e. the dense part of A v for
 *         every row at once at sgemm speed instead of k^2 scalar reads per row;
 *      2. one fused kernel, a warp per "chunk" (up to CHUNK nonzeros of one
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
 *  - The update is the CPU core's (src/core/als.c cg_solve_row) exactly:
 *      init:  r = sum_i (c_i - (c_i-1) y_i.x) y_i - G x;  p = r;  rs = r.r
 *      step:  if rs < 1e-20 skip;  Ap = G p + sum_i (c_i-1)(y_i.p) y_i;
 *             a = rs / p.Ap;  x += a p;  r -= a Ap;  rsn = r.r;
 *             p = r + (rsn/rs) p;  rs = rsn    (rsn < 1e-20 stops the row)
 *  - The loss accumulates in float64 (gm_als_loss's definition).
 *
 * Every CUDA and cuBLAS call goes through GM_CHECK, which writes the call,
 * the error, the file and the line into err and returns GM_EDEVICE.
 */
#include "gm_cuda.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* gm_core.h's codes (cuda/ does not include the core) */
#define GMC_OK			0
#define GMC_ENOMEM		1
#define GMC_EINVAL		2
#define GMC_EDEVICE		4

#define CHUNK			256		/* nonzeros per warp task */
#define WARPS			8		/* warps per block in the CG kernels */
#define MAXK			1024

static const char *
status_text(cudaError_t e)
{
	return e == cudaSuccess ? NULL : cudaGetErrorString(e);
}

static const char *
status_text(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? NULL : cublasGetStatusString(s);
}

#define GM_CHECK(call) \
	do { \
		const char *m_ = status_text(call); \
		if (m_ != NULL) \
		{ \
			if (err && errlen) \
				snprintf(err, errlen, "%s failed: %s (%s:%d)", #call, m_, \
						 __FILE__, __LINE__); \
			return GMC_EDEVICE; \
		} \
	} while (0)

/* after a kernel launch */
#define GM_CHECK_LAUNCH()	GM_CHECK(cudaGetLastError())

struct gm_cuda_als
{
	int32_t		n[2];			/* rows of side 0 (users) and 1 (items) */
	int64_t		nnz;
	int			k;
	int			kp;
	int			prepared;		/* side G was built for, -1 none */
	double		sum_c;
	int64_t    *indptr[2];
	int32_t    *indices[2];
	float	   *data[2];
	int2	   *chunks[2];		/* (row, chunk number within the row) */
	int32_t    *chunk_ptr_h[2]; /* host: row -> first chunk, n+1 */
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
};

/* ------------------------------------------------------------ kernels */

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
	const int	nch = re - rb > CHUNK ? (int) ((re - rb + CHUNK - 1) / CHUNK) : 1;
	const int64_t b = rb + (int64_t) ch.y * CHUNK;
	const int64_t e = b + CHUNK < re ? b + CHUNK : re;
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
		const int64_t b = rb + (int64_t) ch.y * CHUNK;
		const int64_t e = b + CHUNK < re ? b + CHUNK : re;
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

__global__ void
add_diag(float *G, int k, int kp, float reg)
{
	int			i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < k)
		G[(size_t) i * kp + i] += reg;
}

/* ----------------------------------------------------- shape dispatch */

/* kp and the (LG, V) split used for it; 0 if k is out of range */
static int
padded_k(int k)
{
	if (k < 1 || k > MAXK)
		return 0;
	if (k <= 256)
		return (k + 31) / 32 * 32;
	return (k + 127) / 128 * 128;
}

#define GM_SHAPES(X) \
	X(32, 4, 2) X(64, 8, 2) X(96, 8, 3) X(128, 8, 4) X(160, 8, 5) \
	X(192, 16, 3) X(224, 8, 7) X(256, 16, 4) X(384, 32, 3) X(512, 32, 4) \
	X(640, 32, 5) X(768, 32, 6) X(896, 32, 7) X(1024, 32, 8)

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

static cudaError_t
launch_loss(int kp, const gm_cuda_als *h, double *out)
{
	int32_t		nchunks = h->chunk_ptr_h[0][h->n[0]];
	dim3		grid((nchunks + WARPS - 1) / WARPS);

	if (nchunks == 0)
		return cudaSuccess;
	switch (kp)
	{
#define CASE(KP, LG, V) \
		case KP: \
			loss_sparse<LG, V><<<grid, WARPS * 32, 0, h->stream>>>( \
				h->indptr[0], h->indices[0], h->data[0], h->chunks[0], nchunks, \
				h->F[0], h->F[1], out); \
			break;
			GM_SHAPES(CASE)
#undef CASE
		default:
			return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* ---------------------------------------------------------------- ABI */

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
		return GMC_OK;
	}
	{
		cudaDeviceProp prop;

		GM_CHECK(cudaGetDeviceProperties(&prop, 0));
		if (name && namelen)
			snprintf(name, namelen, "%s", prop.name);
	}
	*count = n;
	return GMC_OK;
}

extern "C" void
gm_cuda_als_destroy(gm_cuda_als *h)
{
	if (h == NULL)
		return;
	if (h->have_stream)
		cudaStreamSynchronize(h->stream);
	for (int s = 0; s < 2; s++)
	{
		cudaFree(h->indptr[s]);
		cudaFree(h->indices[s]);
		cudaFree(h->data[s]);
		cudaFree(h->chunks[s]);
		cudaFree(h->F[s]);
		free(h->chunk_ptr_h[s]);
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

/* chunk list of one CSR: every row gets max(1, ceil(len / CHUNK)) chunks */
static int
build_chunks(const int64_t *indptr, int32_t n, int2 **chunks_h,
			 int32_t **chunk_ptr, char *err, size_t errlen)
{
	int64_t		total = 0;
	int32_t    *ptr = (int32_t *) malloc(sizeof(int32_t) * ((size_t) n + 1));
	int2	   *c;

	if (!ptr)
		goto oom;
	for (int32_t r = 0; r < n; r++)
	{
		int64_t		len = indptr[r + 1] - indptr[r];

		ptr[r] = (int32_t) total;
		total += len > CHUNK ? (len + CHUNK - 1) / CHUNK : 1;
		if (total > INT32_MAX / 2)
		{
			free(ptr);
			snprintf(err, errlen, "too many nonzeros for the CUDA module");
			return GMC_EINVAL;
		}
	}
	ptr[n] = (int32_t) total;
	c = (int2 *) malloc(sizeof(int2) * (size_t) (total > 0 ? total : 1));
	if (!c)
	{
		free(ptr);
		goto oom;
	}
	for (int32_t r = 0; r < n; r++)
		for (int32_t j = 0; j < ptr[r + 1] - ptr[r]; j++)
			c[ptr[r] + j] = make_int2(r, j);
	*chunks_h = c;
	*chunk_ptr = ptr;
	return GMC_OK;
oom:
	snprintf(err, errlen, "out of host memory for the chunk list");
	return GMC_ENOMEM;
}

static int
create_inner(gm_cuda_als *h, int32_t n_users, int32_t n_items, int64_t nnz,
			 const int64_t *c_indptr, const int32_t *c_indices,
			 const float *c_data, const int64_t *ct_indptr,
			 const int32_t *ct_indices, const float *ct_data,
			 const float *X, const float *Y, int k, char *err, size_t errlen)
{
	const int64_t *ip[2] = {c_indptr, ct_indptr};
	const int32_t *ix[2] = {c_indices, ct_indices};
	const float *dv[2] = {c_data, ct_data};
	const float *Fh[2] = {X, Y};
	size_t		nmax;
	int			kp = h->kp;

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
		int2	   *chunks_h = NULL;
		int			rc;
		cudaError_t e;

		GM_CHECK(cudaMalloc((void **) &h->indptr[s], sizeof(int64_t) * ((size_t) n + 1)));
		GM_CHECK(cudaMalloc((void **) &h->indices[s], sizeof(int32_t) * (size_t) (nnz > 0 ? nnz : 1)));
		GM_CHECK(cudaMalloc((void **) &h->data[s], sizeof(float) * (size_t) (nnz > 0 ? nnz : 1)));
		GM_CHECK(cudaMemcpy(h->indptr[s], ip[s], sizeof(int64_t) * ((size_t) n + 1), cudaMemcpyHostToDevice));
		if (nnz > 0)
		{
			GM_CHECK(cudaMemcpy(h->indices[s], ix[s], sizeof(int32_t) * (size_t) nnz, cudaMemcpyHostToDevice));
			GM_CHECK(cudaMemcpy(h->data[s], dv[s], sizeof(float) * (size_t) nnz, cudaMemcpyHostToDevice));
		}
		rc = build_chunks(ip[s], n, &chunks_h, &h->chunk_ptr_h[s], err, errlen);
		if (rc != GMC_OK)
			return rc;
		e = cudaMalloc((void **) &h->chunks[s], sizeof(int2) * (size_t) h->chunk_ptr_h[s][n]);
		if (e == cudaSuccess)
			e = cudaMemcpy(h->chunks[s], chunks_h, sizeof(int2) * (size_t) h->chunk_ptr_h[s][n],
						   cudaMemcpyHostToDevice);
		free(chunks_h);
		GM_CHECK(e);

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

	h->sum_c = 0.0;
	for (int64_t i = 0; i < nnz; i++)
		h->sum_c += c_data[i];
	GM_CHECK(cudaDeviceSynchronize());
	return GMC_OK;
}

extern "C" int
gm_cuda_als_create(gm_cuda_als **out, int32_t n_users, int32_t n_items,
				   int64_t nnz, const int64_t *c_indptr,
				   const int32_t *c_indices, const float *c_data,
				   const int64_t *ct_indptr, const int32_t *ct_indices,
				   const float *ct_data, const float *X, const float *Y, int k,
				   char *err, size_t errlen)
{
	gm_cuda_als *h;
	int			rc;

	*out = NULL;
	if (n_users < 1 || n_items < 1 || nnz < 0 || k < 1 || !c_indptr ||
		!ct_indptr || !X || !Y || (nnz > 0 && (!c_indices || !c_data ||
											   !ct_indices || !ct_data)))
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_als_create");
		return GMC_EINVAL;
	}
	if (padded_k(k) == 0)
	{
		snprintf(err, errlen, "the CUDA module supports 1 to %d factors, not %d",
				 MAXK, k);
		return GMC_EINVAL;
	}
	h = (gm_cuda_als *) calloc(1, sizeof(gm_cuda_als));
	if (!h)
	{
		snprintf(err, errlen, "out of host memory");
		return GMC_ENOMEM;
	}
	h->n[0] = n_users;
	h->n[1] = n_items;
	h->nnz = nnz;
	h->k = k;
	h->kp = padded_k(k);
	h->prepared = -1;
	rc = create_inner(h, n_users, n_items, nnz, c_indptr, c_indices, c_data,
					  ct_indptr, ct_indices, ct_data, X, Y, k, err, errlen);
	if (rc != GMC_OK)
	{
		gm_cuda_als_destroy(h);
		return rc;
	}
	*out = h;
	return GMC_OK;
}

/* G = F^T F (+ reg on the first k diagonal entries), F = factors of side */
static int
gram(gm_cuda_als *h, const float *F, int32_t n, float reg, float *G,
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
	return GMC_OK;
}

extern "C" int
gm_cuda_als_prepare(gm_cuda_als *h, int side, float reg, char *err, size_t errlen)
{
	int			rc;

	if (!h || (side != 0 && side != 1))
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_als_prepare");
		return GMC_EINVAL;
	}
	rc = gram(h, h->F[1 - side], h->n[1 - side], reg, h->G, err, errlen);
	if (rc == GMC_OK)
		h->prepared = side;
	return rc;
}

extern "C" int
gm_cuda_als_solve(gm_cuda_als *h, int side, int cg_steps, int32_t begin,
				  int32_t end, char *err, size_t errlen)
{
	const int	kp = h ? h->kp : 0;
	const float one = 1.0f,
				minus = -1.0f,
				zero = 0.0f;
	pass_args	a;
	int32_t		n;

	if (!h || (side != 0 && side != 1) || cg_steps < 0 || begin < 0 ||
		end > h->n[side] || begin > end)
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_als_solve");
		return GMC_EINVAL;
	}
	if (h->prepared != side)
	{
		snprintf(err, errlen, "gm_cuda_als_solve: side %d was not prepared", side);
		return GMC_EINVAL;
	}
	n = end - begin;
	if (n == 0 || cg_steps == 0)
		return GMC_OK;

	a.indptr = h->indptr[side];
	a.indices = h->indices[side];
	a.data = h->data[side];
	a.chunks = h->chunks[side] + h->chunk_ptr_h[side][begin];
	a.nchunks = h->chunk_ptr_h[side][end] - h->chunk_ptr_h[side][begin];
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
	for (int s = 0; s < cg_steps; s++)
	{
		GM_CHECK(cublasSgemm(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, kp, n, kp, &one,
							 h->G, kp, h->P + (size_t) begin * kp, kp, &zero,
							 h->AP + (size_t) begin * kp, kp));
		GM_CHECK(launch_pass(kp, false, a, h->stream));
	}
	return GMC_OK;
}

extern "C" int
gm_cuda_als_sync(gm_cuda_als *h, char *err, size_t errlen)
{
	if (!h)
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_als_sync");
		return GMC_EINVAL;
	}
	GM_CHECK(cudaStreamSynchronize(h->stream));
	GM_CHECK(cudaGetLastError());
	return GMC_OK;
}

extern "C" int
gm_cuda_als_loss(gm_cuda_als *h, float reg, double *loss, char *err, size_t errlen)
{
	const float one = 1.0f,
				zero = 0.0f;
	const int	kp = h ? h->kp : 0;
	double		acc[4];
	int			rc;

	if (!h || !loss)
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_als_loss");
		return GMC_EINVAL;
	}
	/* G is rebuilt by the next prepare */
	h->prepared = -1;
	rc = gram(h, h->F[1], h->n[1], 0.0f, h->G, err, errlen);
	if (rc != GMC_OK)
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
	*loss = (acc[0] + acc[2] + reg * (acc[1] + acc[3])) /
		(h->sum_c + (double) h->n[0] * h->n[1] - (double) h->nnz);
	return GMC_OK;
}

extern "C" int
gm_cuda_als_get(gm_cuda_als *h, float *X, float *Y, char *err, size_t errlen)
{
	float	   *out[2] = {X, Y};

	if (!h)
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_als_get");
		return GMC_EINVAL;
	}
	GM_CHECK(cudaStreamSynchronize(h->stream));
	for (int s = 0; s < 2; s++)
		if (out[s])
			GM_CHECK(cudaMemcpy2D(out[s], sizeof(float) * h->k, h->F[s],
								  sizeof(float) * h->kp, sizeof(float) * h->k,
								  h->n[s], cudaMemcpyDeviceToHost));
	return GMC_OK;
}
