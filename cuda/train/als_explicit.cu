/*
 * als_explicit.cu: ALS for explicit ratings with weighted-lambda
 * regularisation on the GPU, the table gm_cuda_als_explicit_ops.  The model,
 * the objective and the per-row systems are those of src/core/train/als_explicit.c:
 *     (sum_j y_j y_j^T + lambda n_i I) x_i = sum_j (r_ij - mu - c_j) y_j
 * with x_i = (w_i, b_i), y_j = (h_j, 1) when biases are on.
 *
 *  - Factors are row-major with ld = k + 1 floats a row, the bias last.
 *  - A sweep's rows are solved in batches of up to `batch` rows:
 *      1. A and b of the batch are zeroed;
 *      2. als_gram: a block per task, a task being up to ALS_CHUNK nonzeros
 *         of one row (long rows have several, added with atomics).  The
 *         block stages ALS_NB rows y_j (padded to kp floats) in shared
 *         memory; each thread owns a TS x TS tile of the upper triangle of
 *         A and accumulates y_j[tile rows] y_j[tile cols]^T in registers
 *         (TS^2 FMAs per 2 TS shared reads); the diagonal tiles also
 *         accumulate b += t_j y_j.  Float32, as on the CPU.
 *      3. the solve, one of (gm_cuda_als_explicit_set_solver):
 *         0 cuSOLVER: a kernel mirrors A and adds lambda n_i I, then
 *           potrfBatched + potrsBatched, then a kernel scatters x into the
 *           factors;
 *         1 own: a block per row loads A (adding the ridge) into shared
 *           memory, factors it (right-looking Cholesky, a column per step)
 *           and solves, writing x straight into the factors.  For kk up to
 *           ALS_OWN_MAXK whose 4 kk (kk + 1) bytes fit the device's shared
 *           memory per block (kk <= 200 on 8.0, 9.0, 10.0; <= 158 on 8.6,
 *           8.9, 12.0; <= 127 on 7.5); larger k fall back to cuSOLVER.
 *  - Loss and RMSE accumulate in float64 (evaluate): groups of 8 lanes per
 *    rating compute the dot products.
 */
#include "explicit.cuh"
#include "device_csr.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ALS_NB			32		/* rows y_j staged per shared-memory round */
#define ALS_CHUNK		2048	/* nonzeros per Gram task */
#define ALS_MAXK		240		/* largest k on the GPU (als_gram: 512 threads) */
#define ALS_OWN_MAXK	200		/* largest kk for the shared-memory Cholesky */
#define ALS_WS_BYTES	((size_t) 1 << 30)	/* the batch's A matrices */

static int g_solver = 1;

/* The per-row solver of later trainings: 0 cuSOLVER batched, 1 own kernel. */
extern "C" void
gm_cuda_als_explicit_set_solver(int solver)
{
	g_solver = solver == 0 ? 0 : 1;
}

typedef struct als_side
{
	int32_t		n;
	const int64_t *ptr_h;
	gm_dcsr		csr;			/* the ratings */
	float	   *F;				/* n x ld */
	int2	   *tasks;			/* (row, chunk) */
	int32_t    *first_task_h;	/* host, n + 1 */
} als_side;

typedef struct als_gpu
{
	int			dev;			/* the CUDA device */
	int32_t		own0[2],		/* the rows of each side it solves (all on one device) */
				own1[2];
	int			k;
	int			kk;
	int			kp;				/* kk padded to the tile size */
	int			ts;				/* tile size: 4 or 8 */
	int			ld;
	int			biases;
	int			solver;
	float		lambda;
	double		mu;
	int64_t		nnz;
	int32_t		batch;
	als_side	side[2];
	float	   *A;				/* batch x kk x kk */
	float	   *b;				/* batch x kk */
	float	  **Aptr;
	float	  **bptr;
	int		   *info;
	double	   *dsum;
	cudaStream_t stream;
	cusolverDnHandle_t solver_h;
	int			have_stream;
	int			have_solver;
} als_gpu;

/* ------------------------------------------------------------ kernels */

struct gram_args
{
	const int64_t *ptr;
	const int32_t *idx;
	const float *val;
	const int2 *tasks;
	int32_t		task0;
	const float *Y;				/* the other side's factors (ld) */
	int			k;
	int			kk;
	int			kp;
	int			ld;
	int			biases;
	double		mu;
	int32_t		row0;			/* the batch's first row */
	float	   *A;
	float	   *b;
};

/* Thread tid's tile (ti <= tj) of the upper triangle of nt x nt tiles. */
__device__ __forceinline__ void
tile_of(int tid, int nt, int &ti, int &tj)
{
	int			r = 0,
				left = tid;

	while (left >= nt - r)
	{
		left -= nt - r;
		r++;
	}
	ti = r;
	tj = r + left;
}

/* at most 31 x 32 / 2 = 496 tiles (kp = 248, kk <= 241): 512 threads */
template <int TS>
__global__ void
__launch_bounds__(512, 1)
als_gram(gram_args a)
{
	extern __shared__ float4 sh4[];	/* float4: 16-byte aligned */
	float	   *sh = reinterpret_cast<float *>(sh4);
	float	   *ys = sh;			/* ALS_NB x kp */
	float	   *ts = sh + ALS_NB * a.kp;	/* ALS_NB */
	const int2	task = a.tasks[a.task0 + blockIdx.x];
	const int	nt = a.kp / TS;
	const int	ntile = nt * (nt + 1) / 2;
	const int	tid = threadIdx.x;
	const int64_t rb = a.ptr[task.x],
				re = a.ptr[task.x + 1];
	const int64_t b = rb + (int64_t) task.y * ALS_CHUNK;
	const int64_t e = b + ALS_CHUNK < re ? b + ALS_CHUNK : re;
	int			ti = 0,
				tj = 0;
	float		acc[TS][TS],
				racc[TS];

	if (tid < ntile)
		tile_of(tid, nt, ti, tj);
#pragma unroll
	for (int p = 0; p < TS; p++)
	{
		racc[p] = 0.0f;
#pragma unroll
		for (int q = 0; q < TS; q++)
			acc[p][q] = 0.0f;
	}
	for (int64_t base = b; base < e; base += ALS_NB)
	{
		const int	cnt = e - base < ALS_NB ? (int) (e - base) : ALS_NB;

		__syncthreads();
		for (int el = tid; el < ALS_NB * a.kp; el += blockDim.x)
		{
			int			n = el / a.kp,
						f = el - n * a.kp;
			float		v = 0.0f;

			if (n < cnt)
			{
				const float *y = a.Y + (int64_t) a.idx[base + n] * a.ld;

				v = f < a.k ? y[f] : (f == a.k && a.biases ? 1.0f : 0.0f);
			}
			ys[el] = v;
		}
		for (int n = tid; n < ALS_NB; n += blockDim.x)
		{
			float		t = 0.0f;

			if (n < cnt)
			{
				const float *y = a.Y + (int64_t) a.idx[base + n] * a.ld;

				t = (float) (a.val[base + n] - a.mu - (a.biases ? y[a.k] : 0.0f));
			}
			ts[n] = t;
		}
		__syncthreads();
		if (tid < ntile)
		{
			for (int n = 0; n < cnt; n++)
			{
				const float *yn = ys + n * a.kp;
				float		u[TS],
							v[TS];

#pragma unroll
				for (int p = 0; p < TS; p += 4)
				{
					float4		x1 = *reinterpret_cast<const float4 *>(yn + ti * TS + p);
					float4		x2 = *reinterpret_cast<const float4 *>(yn + tj * TS + p);

					u[p] = x1.x;
					u[p + 1] = x1.y;
					u[p + 2] = x1.z;
					u[p + 3] = x1.w;
					v[p] = x2.x;
					v[p + 1] = x2.y;
					v[p + 2] = x2.z;
					v[p + 3] = x2.w;
				}
#pragma unroll
				for (int p = 0; p < TS; p++)
#pragma unroll
					for (int q = 0; q < TS; q++)
						acc[p][q] = fmaf(u[p], v[q], acc[p][q]);
				if (ti == tj)
				{
					float		t = ts[n];

#pragma unroll
					for (int p = 0; p < TS; p++)
						racc[p] = fmaf(t, u[p], racc[p]);
				}
			}
		}
	}
	if (tid < ntile)
	{
		const int64_t local = task.x - a.row0;
		float	   *A = a.A + local * a.kk * a.kk;

#pragma unroll
		for (int p = 0; p < TS; p++)
		{
			int			i = ti * TS + p;

			if (i >= a.kk)
				break;
#pragma unroll
			for (int q = 0; q < TS; q++)
			{
				int			j = tj * TS + q;

				if (j < a.kk && j >= i)
					atomicAdd(A + (int64_t) i * a.kk + j, acc[p][q]);
			}
			if (ti == tj)
				atomicAdd(a.b + local * a.kk + i, racc[p]);
		}
	}
}

/* A = its upper triangle mirrored, plus lambda max(n_i, 1) on the diagonal. */
__global__ void
als_finish(float *A, int kk, int32_t nb, int32_t row0, const int64_t *ptr, float lambda)
{
	const int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
	const int64_t per = (int64_t) kk * kk;

	if (e >= per * nb)
		return;
	{
		int64_t		m = e / per;
		int			i = (int) ((e - m * per) / kk),
					j = (int) ((e - m * per) % kk);
		float	   *M = A + m * per;

		if (i > j)
			M[(int64_t) i * kk + j] = M[(int64_t) j * kk + i];
		else if (i == j)
		{
			int64_t		n = ptr[row0 + m + 1] - ptr[row0 + m];

			M[(int64_t) i * kk + i] += lambda * (float) (n > 0 ? n : 1);
		}
	}
}

/* F[row0 + m][0 .. kk) = b[m] */
__global__ void
als_scatter(const float *b, int kk, int32_t nb, int32_t row0, float *F, int ld)
{
	const int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;

	if (e >= (int64_t) kk * nb)
		return;
	F[(row0 + e / kk) * (int64_t) ld + e % kk] = b[e];
}

/*
 * A block per row m of the batch: M = upper(A_m) mirrored + lambda
 * max(n, 1) I in shared memory, its Cholesky factor L in place (lower
 * triangle), then L L^T x = b by one warp; x goes into F.
 */
__global__ void
__launch_bounds__(256)
als_chol_solve(const float *A, const float *b, int kk, int32_t row0,
			   const int64_t *ptr, float lambda, float *F, int ld)
{
	extern __shared__ float sh[];
	float	   *M = sh;				/* kk x kk */
	float	   *x = sh + kk * kk;	/* kk */
	const int64_t m = blockIdx.x;
	const float *Am = A + m * kk * kk;
	const int	tid = threadIdx.x,
				lane = tid & 31,
				warp = tid >> 5,
				nw = blockDim.x >> 5;
	const int64_t n = ptr[row0 + m + 1] - ptr[row0 + m];
	const float reg = lambda * (float) (n > 0 ? n : 1);

	for (int e = tid; e < kk * kk; e += blockDim.x)
	{
		int			i = e / kk,
					j = e - i * kk;

		M[e] = (i <= j ? Am[i * kk + j] : Am[j * kk + i]) + (i == j ? reg : 0.0f);
	}
	for (int i = tid; i < kk; i += blockDim.x)
		x[i] = b[m * kk + i];
	__syncthreads();
	for (int j = 0; j < kk; j++)
	{
		const float d = sqrtf(M[j * kk + j]);

		/* column j below the diagonal; every thread read d first */
		__syncthreads();
		for (int i = j + 1 + tid; i < kk; i += blockDim.x)
			M[i * kk + j] /= d;
		if (tid == 0)
			M[j * kk + j] = d;
		__syncthreads();
		/* the trailing lower triangle: rows by warps, columns by lanes */
		for (int i = j + 1 + warp; i < kk; i += nw)
		{
			const float lij = M[i * kk + j];

			for (int l = j + 1 + lane; l <= i; l += 32)
				M[i * kk + l] -= lij * M[l * kk + j];
		}
		__syncthreads();
	}
	if (warp == 0)
	{
		/* L y = b */
		for (int i = 0; i < kk; i++)
		{
			float		s = 0.0f;

			for (int p = lane; p < i; p += 32)
				s += M[i * kk + p] * x[p];
			s = group_sum<32>(s);
			if (lane == 0)
				x[i] = (x[i] - s) / M[i * kk + i];
			__syncwarp();
		}
		/* L^T x = y */
		for (int i = kk - 1; i >= 0; i--)
		{
			float		s = 0.0f;

			for (int p = i + 1 + lane; p < kk; p += 32)
				s += M[p * kk + i] * x[p];
			s = group_sum<32>(s);
			if (lane == 0)
				x[i] = (x[i] - s) / M[i * kk + i];
			__syncwarp();
		}
		for (int i = lane; i < kk; i += 32)
			F[(row0 + m) * (int64_t) ld + i] = x[i];
	}
}

/*
 * out[0] += sum_ij (r_ij - mu - b_i - c_j - x_i.y_j)^2 over the CSR,
 * out[1] += sum_i n_i |x_i|^2 (kk entries, the bias included): warps stride
 * over rows, 8 lanes per rating.
 */
__global__ void
__launch_bounds__(256)
als_eval(const int64_t *ptr, const int32_t *idx, const float *val, int32_t n,
		 const float *X, const float *Y, int k, int kk, int ld, int biases,
		 double mu, double *out)
{
	__shared__ double s0[8],
				s1[8];
	const int	lane = threadIdx.x & 31,
				warp = threadIdx.x >> 5,
				sub = lane >> 3,
				q = lane & 7;
	double		sse = 0.0,
				pen = 0.0;

	for (int64_t row = (int64_t) blockIdx.x * 8 + warp; row < n; row += (int64_t) gridDim.x * 8)
	{
		const float *x = X + row * ld;
		const int64_t rb = ptr[row],
					re = ptr[row + 1];
		float		nx = 0.0f;

		for (int f = lane; f < kk; f += 32)
			nx += x[f] * x[f];
		nx = group_sum<32>(nx);
		if (lane == 0)
			pen += (double) nx * (double) (re - rb);
		for (int64_t base = rb; base < re; base += 4)
		{
			const int64_t e = base + sub;
			float		dot = 0.0f;
			const float *y = NULL;

			if (e < re)
			{
				y = Y + (int64_t) idx[e] * ld;
				for (int f = q; f < k; f += 8)
					dot = fmaf(x[f], y[f], dot);
			}
			dot = group_sum<8>(dot);
			if (e < re && q == 0)
			{
				double		r = val[e] - mu - (double) dot -
					(biases ? (double) x[k] + y[k] : 0.0);

				sse += r * r;
			}
		}
	}
	sse = warp_sum_d(sse);
	pen = warp_sum_d(pen);
	if (lane == 0)
	{
		s0[warp] = sse;
		s1[warp] = pen;
	}
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		a = 0.0,
					c = 0.0;

		for (int w = 0; w < 8; w++)
		{
			a += s0[w];
			c += s1[w];
		}
		atomicAdd(out, a);
		atomicAdd(out + 1, c);
	}
}

/* out[0] += sum_j n_j |y_j|^2 (kk entries a row) */
__global__ void
__launch_bounds__(256)
als_penalty(const int64_t *ptr, int32_t n, const float *Y, int kk, int ld, double *out)
{
	__shared__ double s[8];
	double		pen = 0.0;

	for (int64_t row = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; row < n;
		 row += (int64_t) gridDim.x * blockDim.x)
	{
		double		ny = 0.0;

		for (int f = 0; f < kk; f++)
			ny += (double) Y[row * ld + f] * Y[row * ld + f];
		pen += ny * (double) (ptr[row + 1] - ptr[row]);
	}
	pen = warp_sum_d(pen);
	if ((threadIdx.x & 31) == 0)
		s[threadIdx.x >> 5] = pen;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		double		t = 0.0;

		for (int w = 0; w < 8; w++)
			t += s[w];
		atomicAdd(out, t);
	}
}

/* ------------------------------------------------------- host side */

/* Free the state (safe on NULL and half-built states). */
static void
dev_destroy(als_gpu *c)
{
	if (c == NULL)
		return;
	(void) cudaSetDevice(c->dev);
	if (c->have_stream)
		cudaStreamSynchronize(c->stream);
	for (int s = 0; s < 2; s++)
	{
		gm_dcsr_free(&c->side[s].csr);
		gm_dev_free(c->side[s].F);
		gm_dev_free(c->side[s].tasks);
		free(c->side[s].first_task_h);
	}
	gm_dev_free(c->A);
	gm_dev_free(c->b);
	gm_dev_free(c->Aptr);
	gm_dev_free(c->bptr);
	gm_dev_free(c->info);
	gm_dev_free(c->dsum);
	if (c->have_solver)
		cusolverDnDestroy(c->solver_h);
	if (c->have_stream)
		cudaStreamDestroy(c->stream);
	(void) cudaGetLastError();
	free(c);
}

/* Gram tasks of one side: every row max(1, ceil(nnz / ALS_CHUNK)) chunks. */
static int
build_tasks(als_side *sd, char *err, size_t errlen)
{
	int64_t		total = 0;
	int2	   *t;
	cudaError_t e;

	sd->first_task_h = (int32_t *) malloc(sizeof(int32_t) * ((size_t) sd->n + 1));
	if (!sd->first_task_h)
		goto oom;
	for (int32_t r = 0; r < sd->n; r++)
	{
		int64_t		len = sd->ptr_h[r + 1] - sd->ptr_h[r];

		sd->first_task_h[r] = (int32_t) total;
		total += len > ALS_CHUNK ? (len + ALS_CHUNK - 1) / ALS_CHUNK : 1;
		if (total > INT32_MAX / 2)
		{
			snprintf(err, errlen, "als_explicit: too many nonzeros for the CUDA module");
			return GM_EINVAL;
		}
	}
	sd->first_task_h[sd->n] = (int32_t) total;
	t = (int2 *) malloc(sizeof(int2) * (size_t) (total > 0 ? total : 1));
	if (!t)
		goto oom;
	for (int32_t r = 0; r < sd->n; r++)
		for (int32_t j = 0; j < sd->first_task_h[r + 1] - sd->first_task_h[r]; j++)
			t[sd->first_task_h[r] + j] = make_int2(r, j);
	e = gm_dev_malloc((void **) &sd->tasks, sizeof(int2) * (size_t) (total > 0 ? total : 1));
	if (e == cudaSuccess)
		e = cudaMemcpy(sd->tasks, t, sizeof(int2) * (size_t) total, cudaMemcpyHostToDevice);
	free(t);
	GM_CHECK(e);
	return GM_OK;
oom:
	snprintf(err, errlen, "als_explicit: out of host memory for the task list");
	return GM_ENOMEM;
}

/* Everything create does that can fail on the device. */
static int
create_inner(als_gpu *c, const gm_mf_data *d, char *device, size_t devlen,
			 char *err, size_t errlen)
{
	const gm_csr *A[2] = {d->R, d->Rt};
	const float *F[2] = {d->X, d->Y};
	const float *bias[2] = {d->user_bias, d->item_bias};
	int32_t		nmax;
	size_t		per = (size_t) c->kk * c->kk * sizeof(float);
	int			rc;

	GM_CHECK(cudaSetDevice(c->dev));
	gm_device_name(device, devlen);
	/* the own Cholesky holds a kk x kk matrix in shared memory: cuSOLVER where it does not fit */
	if (c->solver == 1 && sizeof(float) * c->kk * (c->kk + 1) > gm_smem_optin())
		c->solver = 0;
	GM_CHECK(cudaStreamCreate(&c->stream));
	c->have_stream = 1;
	GM_CHECK(cusolverDnCreate(&c->solver_h));
	c->have_solver = 1;
	GM_CHECK(cusolverDnSetStream(c->solver_h, c->stream));
	GM_CHECK(gm_dev_malloc((void **) &c->dsum, sizeof(double) * 4));
	for (int s = 0; s < 2; s++)
	{
		als_side   *sd = &c->side[s];
		size_t		n1 = (size_t) (sd->n > 0 ? sd->n : 1);

		sd->ptr_h = A[s]->indptr;
		if ((rc = gm_dcsr_upload(&sd->csr, A[s], err, errlen)) != GM_OK)
			return rc;
		GM_CHECK(gm_dev_malloc((void **) &sd->F, sizeof(float) * n1 * c->ld));
		GM_CHECK(cudaMemset(sd->F, 0, sizeof(float) * n1 * c->ld));
		if (sd->n > 0)
		{
			GM_CHECK(cudaMemcpy2D(sd->F, sizeof(float) * c->ld, F[s], sizeof(float) * c->k,
								  sizeof(float) * c->k, sd->n, cudaMemcpyHostToDevice));
			if (c->biases)
				GM_CHECK(cudaMemcpy2D(sd->F + c->k, sizeof(float) * c->ld, bias[s], sizeof(float),
									  sizeof(float), sd->n, cudaMemcpyHostToDevice));
		}
		if ((rc = build_tasks(sd, err, errlen)) != GM_OK)
			return rc;
	}

	/* the batch: as many rows as ALS_WS_BYTES of A matrices hold */
	nmax = c->side[0].n > c->side[1].n ? c->side[0].n : c->side[1].n;
	c->batch = (int32_t) (ALS_WS_BYTES / per < (size_t) nmax ? ALS_WS_BYTES / per : (size_t) nmax);
	if (c->batch < 1)
		c->batch = 1;
	GM_CHECK(gm_dev_malloc((void **) &c->A, per * c->batch));
	GM_CHECK(gm_dev_malloc((void **) &c->b, sizeof(float) * (size_t) c->kk * c->batch));
	GM_CHECK(gm_dev_malloc((void **) &c->info, sizeof(int) * ((size_t) c->batch + 1)));
	if (c->solver == 0)
	{
		float	  **hp = (float **) malloc(sizeof(float *) * (size_t) c->batch * 2);
		cudaError_t e1,
					e2;

		if (!hp)
		{
			snprintf(err, errlen, "als_explicit: out of host memory");
			return GM_ENOMEM;
		}
		for (int32_t m = 0; m < c->batch; m++)
		{
			hp[m] = c->A + (size_t) m * c->kk * c->kk;
			hp[c->batch + m] = c->b + (size_t) m * c->kk;
		}
		e1 = gm_dev_malloc((void **) &c->Aptr, sizeof(float *) * (size_t) c->batch);
		e2 = gm_dev_malloc((void **) &c->bptr, sizeof(float *) * (size_t) c->batch);
		if (e1 == cudaSuccess && e2 == cudaSuccess)
		{
			e1 = cudaMemcpy(c->Aptr, hp, sizeof(float *) * (size_t) c->batch, cudaMemcpyHostToDevice);
			e2 = cudaMemcpy(c->bptr, hp + c->batch, sizeof(float *) * (size_t) c->batch,
							cudaMemcpyHostToDevice);
		}
		free(hp);
		GM_CHECK(e1);
		GM_CHECK(e2);
	}
	else
		GM_CHECK(cudaFuncSetAttribute(als_chol_solve, cudaFuncAttributeMaxDynamicSharedMemorySize,
									  (int) (sizeof(float) * c->kk * (c->kk + 1))));
	{
		size_t		gram_smem = sizeof(float) * (ALS_NB * (size_t) c->kp + ALS_NB);

		if (c->ts == 4)
			GM_CHECK(cudaFuncSetAttribute(als_gram<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
										  (int) gram_smem));
		else
			GM_CHECK(cudaFuncSetAttribute(als_gram<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
										  (int) gram_smem));
	}
	GM_CHECK(cudaDeviceSynchronize());
	return GM_OK;
}

/*
 * Upload the problem to device dev: ratings in both orders (d's, or a row
 * view of them), factors with their biases as a last column; it solves rows
 * own0[s] .. own1[s] of each side.
 */
static int
dev_create(als_gpu **h, const gm_mf_data *d, const gm_mf_params *p, int dev,
		   const int32_t *own0, const int32_t *own1, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_gpu    *c;
	int			rc;

	*h = NULL;
	c = (als_gpu *) calloc(1, sizeof(als_gpu));
	if (c == NULL)
	{
		snprintf(err, errlen, "als_explicit: out of host memory");
		return GM_ENOMEM;
	}
	c->k = p->factors;
	c->biases = p->biases ? 1 : 0;
	c->kk = c->k + c->biases;
	c->ts = c->kk <= 32 ? 4 : 8;
	c->kp = (c->kk + c->ts - 1) / c->ts * c->ts;
	c->ld = c->k + 1;
	c->lambda = p->regularization;
	c->mu = c->biases ? d->global_mean : 0.0;
	c->nnz = d->R->nnz;
	c->solver = c->kk <= ALS_OWN_MAXK ? g_solver : 0;
	c->side[0].n = d->R->n_rows;
	c->side[1].n = d->R->n_cols;
	c->dev = dev;
	for (int s = 0; s < 2; s++)
	{
		c->own0[s] = own0[s];
		c->own1[s] = own1[s];
	}
	rc = create_inner(c, d, device, devlen, err, errlen);
	if (rc != GM_OK)
	{
		dev_destroy(c);
		return rc;
	}
	*h = c;
	return GM_OK;
}

/* Describe sweep s's rows (users or items) and their cost. */
static int
dev_begin_sweep(als_gpu *c, int s, gm_sweep *sw, char *err, size_t errlen)
{
	double		kk = c->kk;

	if (s < 0 || s > 1)
	{
		snprintf(err, errlen, "als_explicit: no sweep %d", s);
		return GM_EINVAL;
	}
	sw->n_rows = c->side[s].n;
	sw->indptr = c->side[s].ptr_h;
	sw->row_work = kk * kk * kk / 3.0 + kk * kk;
	sw->nnz_work = kk * (kk + 1) / 2.0 + kk;
	return GM_OK;
}

/* Solve rows [r0, r0 + nb) of side s (nb <= batch). */
static int
solve_batch(als_gpu *c, int s, int32_t r0, int32_t nb, char *err, size_t errlen)
{
	als_side   *sd = &c->side[s];
	gram_args	g;
	int32_t		t0 = sd->first_task_h[r0],
				t1 = sd->first_task_h[r0 + nb];
	int			nt = c->kp / c->ts;
	int			threads = (nt * (nt + 1) / 2 + 31) / 32 * 32;
	size_t		smem = sizeof(float) * (ALS_NB * (size_t) c->kp + ALS_NB);

	if (threads < 64)
		threads = 64;
	GM_CHECK(cudaMemsetAsync(c->A, 0, sizeof(float) * (size_t) c->kk * c->kk * nb, c->stream));
	GM_CHECK(cudaMemsetAsync(c->b, 0, sizeof(float) * (size_t) c->kk * nb, c->stream));
	memset(&g, 0, sizeof(g));
	g.ptr = sd->csr.indptr;
	g.idx = sd->csr.indices;
	g.val = sd->csr.data;
	g.tasks = sd->tasks;
	g.task0 = t0;
	g.Y = c->side[1 - s].F;
	g.k = c->k;
	g.kk = c->kk;
	g.kp = c->kp;
	g.ld = c->ld;
	g.biases = c->biases;
	g.mu = c->mu;
	g.row0 = r0;
	g.A = c->A;
	g.b = c->b;
	if (t1 > t0)
	{
		if (c->ts == 4)
			als_gram<4><<<t1 - t0, threads, smem, c->stream>>>(g);
		else
			als_gram<8><<<t1 - t0, threads, smem, c->stream>>>(g);
		GM_CHECK_LAUNCH();
	}
	if (c->solver == 1)
	{
		als_chol_solve<<<nb, 256, sizeof(float) * c->kk * (c->kk + 1), c->stream>>>(
			c->A, c->b, c->kk, r0, sd->csr.indptr, c->lambda, sd->F, c->ld);
		GM_CHECK_LAUNCH();
		return GM_OK;
	}
	als_finish<<<blocks_for((int64_t) c->kk * c->kk * nb, 256), 256, 0, c->stream>>>(
		c->A, c->kk, nb, r0, sd->csr.indptr, c->lambda);
	GM_CHECK_LAUNCH();
	GM_CHECK(cusolverDnSpotrfBatched(c->solver_h, CUBLAS_FILL_MODE_LOWER, c->kk, c->Aptr,
									 c->kk, c->info, nb));
	GM_CHECK(cusolverDnSpotrsBatched(c->solver_h, CUBLAS_FILL_MODE_LOWER, c->kk, 1, c->Aptr,
									 c->kk, c->bptr, c->kk, c->info + c->batch, nb));
	als_scatter<<<blocks_for((int64_t) c->kk * nb, 256), 256, 0, c->stream>>>(
		c->b, c->kk, nb, r0, sd->F, c->ld);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/* Solve rows [begin, end) of sweep s. */
static int
dev_run(als_gpu *c, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	if (s < 0 || s > 1 || begin < 0 || end > c->side[s].n || begin > end)
	{
		snprintf(err, errlen, "als_explicit: rows [%d, %d) outside sweep %d", begin, end, s);
		return GM_EINVAL;
	}
	GM_CHECK(cudaSetDevice(c->dev));
	for (int32_t r = begin; r < end; r += c->batch)
	{
		int			rc = solve_batch(c, s, r, end - r < c->batch ? end - r : c->batch,
									 err, errlen);

		if (rc != GM_OK)
			return rc;
	}
	return GM_OK;
}

/* Wait for the queued work; report asynchronous errors. */
static int
dev_sync(als_gpu *c, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaStreamSynchronize(c->stream));
	GM_CHECK(cudaGetLastError());
	return GM_OK;
}

/*
 * Queue the loss's sums over the entries the device holds into c->dsum:
 * squared errors, the users' and the items' penalties (rows without entries
 * here add nothing); dev_sums_read reads them.
 */
static int
dev_sums(als_gpu *c, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaMemsetAsync(c->dsum, 0, sizeof(double) * 3, c->stream));
	als_eval<<<1024, 256, 0, c->stream>>>(c->side[0].csr.indptr, c->side[0].csr.indices,
										  c->side[0].csr.data,
										  c->side[0].n, c->side[0].F, c->side[1].F, c->k,
										  c->kk, c->ld, c->biases, c->mu, c->dsum);
	GM_CHECK_LAUNCH();
	als_penalty<<<256, 256, 0, c->stream>>>(c->side[1].csr.indptr, c->side[1].n, c->side[1].F,
											c->kk, c->ld, c->dsum + 2);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/* The sums dev_sums queued, once they are done. */
static int
dev_sums_read(als_gpu *c, double *sums, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	GM_CHECK(cudaMemcpyAsync(sums, c->dsum, sizeof(double) * 3, cudaMemcpyDeviceToHost, c->stream));
	GM_CHECK(cudaStreamSynchronize(c->stream));
	return GM_OK;
}

/* Write the model back into d's arrays. */
static int
dev_download(als_gpu *c, gm_mf_data *d, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(c->dev));
	for (int s = 0; s < 2; s++)
	{
		als_side   *sd = &c->side[s];
		float	   *F = s == 0 ? d->X : d->Y;
		float	   *bias = s == 0 ? d->user_bias : d->item_bias;

		if (sd->n == 0)
			continue;
		GM_CHECK(cudaMemcpy2D(F, sizeof(float) * c->k, sd->F, sizeof(float) * c->ld,
							  sizeof(float) * c->k, sd->n, cudaMemcpyDeviceToHost));
		if (c->biases && bias)
			GM_CHECK(cudaMemcpy2D(bias, sizeof(float), sd->F + c->k, sizeof(float) * c->ld,
								  sizeof(float), sd->n, cudaMemcpyDeviceToHost));
	}
	return GM_OK;
}

/* ------------------------------------------------------ the devices */

/*
 * The handle the core drives: one device, or several (p->gpus), as for
 * implicit ALS (als_implicit.cu): the rows of a side are cut where the
 * ratings are shared evenly, a device holds the full factors of both sides
 * and only its rows' ratings (a row view of R and of Rt), a slice of virtual
 * rows runs on every device at once, and after a side's sweep every device
 * sends the rows it solved to the others (gm_share_allgather).  A row's
 * system and solve are the one-device ones, so the factors are the same bit
 * for bit; the loss adds the devices' sums.  The sending overlaps the
 * sweep as in implicit ALS (gm_share_push after each slice, gm_share_join
 * at the side's end; GM_SHARE_PUSH=0: the all-gather after the side).
 */
typedef struct als_top
{
	int			ndev;
	als_gpu    *g[GM_MAX_GPUS];
	int64_t		nnz;
	float		lambda;
	gm_shares	sh;				/* the rows' shares (several devices) */
	gm_share_links links;		/* the copy streams (several devices, pushing) */
	int			push;
	const gm_mf_params *p;		/* create's (while it makes the shares) */
	char	   *device;
	size_t		devlen;
} als_top;

/* The devices' factors of side s, as the exchanges see them. */
static void
shares_of(const als_top *t, int s, gm_share *sh)
{
	for (int i = 0; i < t->ndev; i++)
	{
		sh[i].dev = t->g[i]->dev;
		sh[i].stream = t->g[i]->stream;
		sh[i].F = t->g[i]->side[s].F;
		sh[i].own0 = t->g[i]->own0[s];
		sh[i].own1 = t->g[i]->own1[s];
	}
}

static void
als_destroy(void *ph)
{
	als_top    *t = (als_top *) ph;

	if (t == NULL)
		return;
	gm_share_links_free(&t->links);
	for (int i = 0; i < t->ndev; i++)
		dev_destroy(t->g[i]);
	gm_shares_free(&t->sh);
	(void) cudaSetDevice(0);
	free(t);
}

/* Share i's device state (gm_shares_make_all). */
static int
make_share(void *top, int i, const gm_mf_data *dv, int dev, const int32_t *own0,
		   const int32_t *own1, char *err, size_t errlen)
{
	als_top    *t = (als_top *) top;

	return dev_create(&t->g[i], dv, t->p, dev, own0, own1, t->device, t->devlen, err, errlen);
}

static int
als_create(void **out, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_top    *t;
	int			rc;

	(void) cb;					/* the core polls between slices */
	*out = NULL;
	if (gm_explicit_check("als_explicit", p, d, 0, err, errlen) != GM_OK)
		return GM_EINVAL;
	if (p->factors > ALS_MAXK)
	{
		snprintf(err, errlen, "als_explicit on the GPU supports at most %d factors, not %d",
				 ALS_MAXK, p->factors);
		return GM_ENOTSUP;
	}
	t = (als_top *) calloc(1, sizeof(als_top));
	if (!t)
	{
		snprintf(err, errlen, "als_explicit: out of host memory");
		return GM_ENOMEM;
	}
	t->nnz = d->R->nnz;
	t->lambda = p->regularization;
	t->p = p;
	t->device = device;
	t->devlen = devlen;
	rc = gm_shares_make_all(&t->sh, d, p->gpus > 1 ? p->gpus : 1, gm_gpu_share_row_weight(p),
							make_share, t, &t->ndev, err, errlen);
	if (rc == GM_OK)
		rc = gm_share_links_open(&t->links, &t->sh, &t->push, err, errlen);
	if (rc != GM_OK)
	{
		als_destroy(t);
		return rc;
	}
	gm_shares_device_name(&t->sh, device, devlen);
	*out = t;
	return GM_OK;
}

/* Two sweeps: users, then items. */
static int
als_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

static int
als_begin_sweep(void *ph, int s, gm_sweep *sw, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			rc;

	if ((rc = dev_begin_sweep(t->g[0], s, sw, err, errlen)) != GM_OK)
		return rc;
	if (t->ndev > 1)
	{
		/* virtual rows: a slice runs on every device at once, sized as one device's */
		sw->n_rows = t->sh.vn[s];
		sw->indptr = t->sh.vrow[s];
		sw->nnz_work /= t->ndev;
	}
	return GM_OK;
}

static int
als_run(void *ph, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	gm_share	sh[GM_MAX_GPUS];
	int			rc;

	if (t->ndev == 1)
		return dev_run(t->g[0], s, begin, end, err, errlen);
	if (s < 0 || s > 1 || begin < 0 || end > t->sh.vn[s] || begin > end)
	{
		snprintf(err, errlen, "als_explicit: rows [%d, %d) outside sweep %d", begin, end, s);
		return GM_EINVAL;
	}
	/* virtual rows begin .. end: the same rows of every device's share */
	if (t->push)
		shares_of(t, s, sh);
	for (int i = 0; i < t->ndev; i++)
	{
		int32_t		b,
					e;

		gm_shares_rows(&t->sh, s, i, begin, end, &b, &e);
		if (b < e && (rc = dev_run(t->g[i], s, b, e, err, errlen)) != GM_OK)
			return rc;
		/* these rows are final: on their way to the others */
		if (b < e && t->push &&
			(rc = gm_share_push(&t->links, sh, t->ndev, i, b, e, (size_t) t->g[0]->ld, err, errlen)) != GM_OK)
			return rc;
	}
	return GM_OK;
}

/* After a side's sweep, several devices: every device's solved rows to the others. */
static int
als_end_sweep(void *ph, int s, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	gm_share	sh[GM_MAX_GPUS];

	if (t->ndev == 1)
		return GM_OK;
	shares_of(t, s, sh);
	if (t->push)
		return gm_share_join(&t->links, sh, t->ndev, err, errlen);
	return gm_share_allgather(sh, t->ndev, (size_t) t->g[0]->ld, err, errlen);
}

static int
als_sync(void *ph, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			rc;

	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_sync(t->g[i], err, errlen)) != GM_OK)
			return rc;
	(void) cudaSetDevice(0);
	return GM_OK;
}

/* Loss and training RMSE (gm_explicit.h) of the current model: the devices' sums added. */
static int
als_evaluate(void *ph, gm_mf_metrics *m, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	double		tot[3] = {0, 0, 0};
	int			rc;

	/* every device's sums queued first, so that the devices compute them at once */
	for (int i = 0; i < t->ndev; i++)
		if ((rc = dev_sums(t->g[i], err, errlen)) != GM_OK)
			return rc;
	for (int i = 0; i < t->ndev; i++)
	{
		double		sums[3];

		if ((rc = dev_sums_read(t->g[i], sums, err, errlen)) != GM_OK)
			return rc;
		for (int j = 0; j < 3; j++)
			tot[j] += sums[j];
	}
	(void) cudaSetDevice(0);
	m->loss = (tot[0] + t->lambda * (tot[1] + tot[2])) / (double) (t->nnz > 0 ? t->nnz : 1);
	m->rmse = sqrt(tot[0] / (double) (t->nnz > 0 ? t->nnz : 1));
	return GM_OK;
}

/* Every device holds the whole model after the exchanges: the first one's. */
static int
als_download(void *ph, gm_mf_data *d, char *err, size_t errlen)
{
	als_top    *t = (als_top *) ph;
	int			rc = dev_download(t->g[0], d, err, errlen);

	(void) cudaSetDevice(0);
	return rc;
}

extern "C" const gm_algo_ops gm_cuda_als_explicit_ops = {
	"cuda",
	als_create,
	als_n_sweeps,
	als_begin_sweep,
	als_run,
	als_end_sweep,				/* several devices: the all-gather of a side */
	als_sync,
	als_evaluate,
	als_download,
	als_destroy,
	NULL						/* reset: none (the loop destroys and creates instead) */
};
