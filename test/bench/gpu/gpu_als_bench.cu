/*
 * gpu_als_bench.cu: correctness and speed of gpumf's CUDA implicit ALS
 * (cuda/train/als_implicit.cu, driven through its table of operations from
 * gm_cuda_algo_ops) against a float64 reference, the CPU core (src/core) and
 * the seed's baseline kernel (SEEDS.md section 1), which is reproduced below.
 *
 * No PostgreSQL.  Usage: gpu_als_bench [--quick | --timing | --multi ROWS] [--module path/to/gpumf_cuda.so]
 *     [--k 64,128,...] [--chunk-queue on|off|both] [--profile K]
 * (--multi ROWS: the several-GPU checks, then one, two (pushing) and two
 * (all-gather) GPUs timed on ROWS interactions, 8M users x 2M items.)
 * (--chunk-queue: how the warp-per-chunk kernels schedule their chunks; both:
 * the checks with the queue, CG 3 and block 32 also timed without it.
 * --timing: the timing tables alone, without the checks before them and
 * without the seed's baseline: test/bench/gpu/arch_run.sh compares builds.)
 */
#include "../../../src/core/common/gm_core.h"
#include "../../../cuda/common/common.cuh"	/* the module's exported entry points */

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* cuda/common/device_csr.cu: warp-per-chunk kernels take chunks from a queue (1) or not (0) */
extern "C" void gm_cuda_set_chunk_queue(int on);
extern "C" int gm_cuda_check_device_transpose(const gm_csr *a, const gm_csr *at, int shares, char *err,
											  size_t errlen);
extern "C" int gm_cuda_check_staged_copy(char *err, size_t errlen);
/* cuda/common/coo_csr.cu: the matrix built on the GPU, the copy it keeps */
extern "C" int gm_cuda_csr_from_coo(int32_t n_rows, int32_t n_cols, int64_t nnz, int32_t **rows,
									int32_t **cols, float **vals, const int32_t *row_map,
									int32_t row_map_n, const int32_t *col_map, int32_t col_map_n,
									int keep, const gm_callbacks *cb,
									gm_csr *out, int64_t *col_ptr, double *seconds, char *err,
									size_t errlen);
extern "C" long long gm_cuda_csr_kept_bytes(void);
extern "C" long long gm_cuda_early_downloads(void);
extern "C" void gm_cuda_csr_drop_kept(void);
extern "C" int gm_cuda_check_upload_equal(const gm_csr *a, int *taken, char *err, size_t errlen);
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_check.h"

/* ================================================================
 * The seed's baseline (SEEDS.md 1): one thread block per user (grid-stride),
 * one thread per factor; p in shared memory; dot products as a warp-shuffle
 * reduction then a second one across warps through shared memory; YtY read
 * as YtY[i * k + threadIdx.x] (coalesced, by symmetry); YtY from cuBLAS sgemm
 * and a tiny kernel adding lambda on its diagonal.  k must be a multiple of
 * 32 (at most 1024).
 * ================================================================ */
__inline__ __device__ float
base_warp_reduce_sum(float val)
{
	for (int offset = 16; offset > 0; offset /= 2)
		val += __shfl_down_sync(0xffffffffu, val, offset);
	return val;
}

/* sum over the block of a[tid] * b[tid]; every thread gets the result */
__inline__ __device__ float
base_dot(float a, float b)
{
	__shared__ float shared[32];
	int			lane = threadIdx.x % 32;
	int			warp = threadIdx.x / 32;
	float		val = a * b;

	__syncthreads();
	val = base_warp_reduce_sum(val);
	if (lane == 0)
		shared[warp] = val;
	__syncthreads();
	val = (lane < (int) (blockDim.x / 32)) ? shared[lane] : 0.0f;
	val = base_warp_reduce_sum(val);
	return __shfl_sync(0xffffffffu, val, 0);
}

__global__ void
base_cg_kernel(int factors, int user_count, float *X, const float *Y,
			   const float *YtY, const int64_t *indptr, const int32_t *indices,
			   const float *data, int cg_steps)
{
	extern __shared__ float P[];

	for (int u = blockIdx.x; u < user_count; u += gridDim.x)
	{
		float	   *x = &X[(size_t) u * factors];
		float		x_value = x[threadIdx.x];
		float		temp = 0.0f;

		/* r = YtCuPu - (YtY + reg I + Yt(Cu - I)Y) x */
		for (int i = 0; i < factors; ++i)
			temp -= x[i] * YtY[i * factors + threadIdx.x];
		for (int64_t index = indptr[u]; index < indptr[u + 1]; ++index)
		{
			const float *Yi = &Y[(size_t) indices[index] * factors];
			float		confidence = data[index];
			float		yv = Yi[threadIdx.x];

			temp += (confidence - (confidence - 1.0f) * base_dot(yv, x_value)) * yv;
		}
		float		r = temp;

		P[threadIdx.x] = r;
		float		rsold = base_dot(r, r);

		if (rsold < 1e-20f)
			continue;
		for (int it = 0; it < cg_steps; ++it)
		{
			__syncthreads();
			float		Ap = 0.0f;

			for (int i = 0; i < factors; ++i)
				Ap += P[i] * YtY[i * factors + threadIdx.x];
			float		p = P[threadIdx.x];

			for (int64_t index = indptr[u]; index < indptr[u + 1]; ++index)
			{
				const float *Yi = &Y[(size_t) indices[index] * factors];
				float		yv = Yi[threadIdx.x];

				Ap += (data[index] - 1.0f) * base_dot(yv, p) * yv;
			}
			float		alpha = rsold / base_dot(p, Ap);

			x_value += alpha * p;
			r -= alpha * Ap;
			float		rsnew = base_dot(r, r);

			if (rsnew < 1e-20f)
				break;
			__syncthreads();
			P[threadIdx.x] = r + (rsnew / rsold) * p;
			rsold = rsnew;
		}
		x[threadIdx.x] = x_value;
	}
}

__global__ void
base_add_reg(float *G, int k, float reg)
{
	int			i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < k)
		G[i * k + i] += reg;
}

struct baseline
{
	int			n[2],
				k;
	int64_t    *indptr[2];
	int32_t    *indices[2];
	float	   *data[2];
	float	   *F[2];
	float	   *G;
	cublasHandle_t blas;
	int			grid[2];
};

static void
base_create(baseline *b, const gm_csr *C, const gm_csr *Ct, const float *X,
			const float *Y, int k)
{
	const gm_csr *m[2] = {C, Ct};
	const float *f[2] = {X, Y};

	b->k = k;
	for (int s = 0; s < 2; s++)
	{
		b->n[s] = m[s]->n_rows;
		CK(cudaMalloc(&b->indptr[s], 8 * ((size_t) m[s]->n_rows + 1)));
		CK(cudaMalloc(&b->indices[s], 4 * (size_t) m[s]->nnz));
		CK(cudaMalloc(&b->data[s], 4 * (size_t) m[s]->nnz));
		CK(cudaMemcpy(b->indptr[s], m[s]->indptr, 8 * ((size_t) m[s]->n_rows + 1), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(b->indices[s], m[s]->indices, 4 * (size_t) m[s]->nnz, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(b->data[s], m[s]->data, 4 * (size_t) m[s]->nnz, cudaMemcpyHostToDevice));
		CK(cudaMalloc(&b->F[s], 4 * (size_t) b->n[s] * k));
		CK(cudaMemcpy(b->F[s], f[s], 4 * (size_t) b->n[s] * k, cudaMemcpyHostToDevice));
	}
	CK(cudaMalloc(&b->G, 4 * (size_t) k * k));
	CB(cublasCreate(&b->blas));
	CB(cublasSetMathMode(b->blas, CUBLAS_PEDANTIC_MATH));
	{
		int			per_sm = 0,
					sms = 0;

		CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
		CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, base_cg_kernel, k, k * 4));
		for (int s = 0; s < 2; s++)
			b->grid[s] = std::min(b->n[s], std::max(1, per_sm) * sms);
	}
}

static void
base_half(baseline *b, int side, float reg, int cg_steps)
{
	const float one = 1.0f,
				zero = 0.0f;
	int			k = b->k;

	CB(cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_T, k, k, b->n[1 - side], &one,
				   b->F[1 - side], k, b->F[1 - side], k, &zero, b->G, k));
	base_add_reg<<<(k + 255) / 256, 256>>>(b->G, k, reg);
	CK(cudaGetLastError());
	base_cg_kernel<<<b->grid[side], k, k * sizeof(float)>>>(
		k, b->n[side], b->F[side], b->F[1 - side], b->G, b->indptr[side],
		b->indices[side], b->data[side], cg_steps);
	CK(cudaGetLastError());
}

static void
base_destroy(baseline *b)
{
	for (int s = 0; s < 2; s++)
	{
		cudaFree(b->indptr[s]);
		cudaFree(b->indices[s]);
		cudaFree(b->data[s]);
		cudaFree(b->F[s]);
	}
	cudaFree(b->G);
	cublasDestroy(b->blas);
}

/* ================================================================ helpers */

static uint64_t rng_state = 0x1234567ULL;

static double
urand(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static double
nrand(void)
{
	double		u1 = urand() + 1e-300,
				u2 = urand();

	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void
fill_nan(float *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		a[i] = NAN;
}

static size_t
count_nonfinite(const float *a, size_t n)
{
	size_t		c = 0;

	for (size_t i = 0; i < n; i++)
		c += !isfinite(a[i]);
	return c;
}

/*
 * synthetic dataset: the train values A (and At) the GPU trains on, their
 * confidence matrix C (and Ct) for the CPU core's functions, and the holdout
 */
struct dataset
{
	gm_csr		A,
				At,
				C,
				Ct;
	float		alpha;			/* C = 1 + alpha A */
	std::vector<int64_t> test_ptr;
	std::vector<int32_t> test_idx;	/* sorted per user */
};

static void
make_dataset(dataset *d, int32_t users, int32_t items, int64_t rows, int min_per_user,
			 int clusters, double affinity, uint64_t seed, float alpha)
{
	gm_synth	g;
	std::vector<int64_t> off(users + 1, 0);

	memset(&g, 0, sizeof(g));
	g.n_users = users;
	g.n_items = items;
	g.n_rows = rows;
	g.min_per_user = min_per_user;
	g.clusters = clusters;
	g.affinity = affinity;
	g.seed = seed;
	GM(gm_synth_init(&g, err, sizeof(err)));
	for (int32_t u = 0; u < users; u++)
		off[u + 1] = off[u] + g.counts[u];

	std::vector<int32_t> it(off[users]);
	std::vector<float> val(off[users]);
	std::vector<uint8_t> ho(off[users]);

#pragma omp parallel
	{
		std::vector<uint8_t> seen(items, 0);

#pragma omp for schedule(dynamic, 256)
		for (int32_t u = 0; u < users; u++)
			gm_synth_user(&g, u, it.data() + off[u], val.data() + off[u],
						  ho.data() + off[u], seen.data());
	}
	gm_synth_free(&g);

	int64_t		ntrain = 0;

	for (int64_t e = 0; e < off[users]; e++)
		ntrain += !ho[e];
	std::vector<int32_t> r(ntrain),
				c(ntrain);
	std::vector<float> v(ntrain);
	int64_t		j = 0;

	d->test_ptr.assign(users + 1, 0);
	d->test_idx.clear();
	for (int32_t u = 0; u < users; u++)
	{
		int64_t		t0 = d->test_idx.size();

		for (int64_t e = off[u]; e < off[u + 1]; e++)
		{
			if (ho[e])
				d->test_idx.push_back(it[e]);
			else
			{
				r[j] = u;
				c[j] = it[e];
				v[j] = val[e];
				j++;
			}
		}
		std::sort(d->test_idx.begin() + t0, d->test_idx.end());
		d->test_ptr[u + 1] = d->test_idx.size();
	}
	d->alpha = alpha;
	GM(gm_csr_from_coo(users, items, ntrain, r.data(), c.data(), v.data(), &d->A, err, sizeof(err)));
	GM(gm_csr_transpose(&d->A, &d->At, err, sizeof(err)));
	GM(gm_confidence(&d->A, alpha, &d->C, err, sizeof(err)));
	GM(gm_confidence(&d->At, alpha, &d->Ct, err, sizeof(err)));
}

static void
dataset_free(dataset *d)
{
	gm_csr_free(&d->A);
	gm_csr_free(&d->At);
	gm_csr_free(&d->C);
	gm_csr_free(&d->Ct);
}

/*
 * The module's implicit ALS through its table of operations, the way the
 * core's gm_mf_train drives it: create uploads the values A (the module
 * derives c = 1 + alpha v), begin_sweep(side) builds the Gram matrix, run
 * solves a slice of rows, evaluate computes the loss, download copies back.
 */
struct gpu_als
{
	const gm_algo_ops *ops;
	void	   *h;
	int			k;
	int32_t		max_rows;		/* the last begin_sweep's cap on a slice (0: none) */
};

/* rows [b, e) of sweep s, in slices of at most the backend's max_rows */
static void
ga_run_rows(gpu_als *g, int s, int32_t b, int32_t e)
{
	for (int32_t x = b; x < e;)
	{
		int32_t		y = g->max_rows > 0 && e - x > g->max_rows ? x + g->max_rows : e;

		GM(g->ops->run(g->h, s, x, y, err, sizeof(err)));
		x = y;
	}
}

static gm_mf_params
gpu_params(int k, int cg, float reg, float alpha)
{
	gm_mf_params p;

	gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
	p.backend = GM_BACKEND_CUDA;
	p.factors = k;
	p.cg_steps = cg;
	p.regularization = reg;
	p.alpha = alpha;
	return p;
}

static void
ga_create_p(gpu_als *g, const gm_csr *A, const gm_csr *At, const float *X,
			const float *Y, const gm_mf_params *pp)
{
	gm_mf_params p = *pp;
	gm_mf_data	d;
	char		name[128];

	p.backend = GM_BACKEND_CUDA;
	memset(&d, 0, sizeof(d));
	d.R = A;
	d.Rt = At;
	d.X = (float *) X;
	d.Y = (float *) Y;
	g->k = p.factors;
	g->h = NULL;
	g->ops = gm_cuda_algo_ops(GM_ALG_ALS_IMPLICIT);
	if (g->ops == NULL)
	{
		fprintf(stderr, "the CUDA module has no implicit ALS\n");
		exit(2);
	}
	GM(g->ops->create(&g->h, &d, &p, NULL, name, sizeof(name), err, sizeof(err)));
}

/* one iteration the way gm_mf_train drives it, every sweep in as few slices as the backend takes */
static void
ga_iteration(gpu_als *g)
{
	int			n = g->ops->n_sweeps(g->h);

	for (int s = 0; s < n; s++)
	{
		gm_sweep	sw;

		GM(g->ops->begin_sweep(g->h, s, &sw, err, sizeof(err)));
		g->max_rows = sw.max_rows;
		ga_run_rows(g, s, 0, sw.n_rows);
		if (g->ops->end_sweep)
			GM(g->ops->end_sweep(g->h, s, err, sizeof(err)));
	}
}

/* the sweeps of one side (0 users, 1 items), each in as few slices as the backend takes */
static void
ga_side(gpu_als *g, int side)
{
	int			n = g->ops->n_sweeps(g->h);

	for (int s = side * n / 2; s < (side + 1) * n / 2; s++)
	{
		gm_sweep	sw;

		GM(g->ops->begin_sweep(g->h, s, &sw, err, sizeof(err)));
		g->max_rows = sw.max_rows;
		ga_run_rows(g, s, 0, sw.n_rows);
		if (g->ops->end_sweep)
			GM(g->ops->end_sweep(g->h, s, err, sizeof(err)));
	}
}

static void
ga_create(gpu_als *g, const gm_csr *A, const gm_csr *At, const float *X,
		  const float *Y, int k, int cg, float reg, float alpha)
{
	gm_mf_params p = gpu_params(k, cg, reg, alpha);
	gm_mf_data	d;
	char		name[128];

	memset(&d, 0, sizeof(d));
	d.R = A;
	d.Rt = At;
	d.X = (float *) X;
	d.Y = (float *) Y;
	g->k = k;
	g->h = NULL;
	g->ops = gm_cuda_algo_ops(GM_ALG_ALS_IMPLICIT);
	if (g->ops == NULL)
	{
		fprintf(stderr, "the CUDA module has no implicit ALS\n");
		exit(2);
	}
	GM(g->ops->create(&g->h, &d, &p, NULL, name, sizeof(name), err, sizeof(err)));
}

static void
ga_begin(gpu_als *g, int side, gm_sweep *sw = NULL)
{
	gm_sweep	s;

	memset(&s, 0, sizeof(s));
	GM(g->ops->begin_sweep(g->h, side, sw ? sw : &s, err, sizeof(err)));
	g->max_rows = (sw ? sw : &s)->max_rows;
}

static void
ga_run(gpu_als *g, int side, int32_t b, int32_t e)
{
	ga_run_rows(g, side, b, e);
}

static void
ga_sync(gpu_als *g)
{
	if (g->ops->sync)
		GM(g->ops->sync(g->h, err, sizeof(err)));
}

static double
ga_loss(gpu_als *g)
{
	gm_mf_metrics m;

	GM(g->ops->evaluate(g->h, &m, err, sizeof(err)));
	return m.loss;
}

/* copy back (X or Y may be NULL) */
static void
ga_get(gpu_als *g, float *X, float *Y)
{
	gm_mf_data	d;

	memset(&d, 0, sizeof(d));
	d.X = X;
	d.Y = Y;
	GM(g->ops->download(g->h, &d, err, sizeof(err)));
}

static void
ga_destroy(gpu_als *g)
{
	g->ops->destroy(g->h);
	g->h = NULL;
}

/* top-10 per sampled user (train items skipped), scored on the GPU */
static void
top10(const dataset *d, const float *X, const float *Y, int k,
	  const std::vector<int32_t> &users, std::vector<int32_t> &out)
{
	const int	B = 512;
	int32_t		ni = d->C.n_cols;
	float	   *dY,
			   *dX,
			   *dS;
	cublasHandle_t h;
	const float one = 1.0f,
				zero = 0.0f;
	std::vector<float> S((size_t) B * ni),
				Xb((size_t) B * k);

	out.assign(users.size() * 10, -1);
	CB(cublasCreate(&h));
	CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
	CK(cudaMalloc(&dY, 4 * (size_t) ni * k));
	CK(cudaMalloc(&dX, 4 * (size_t) B * k));
	CK(cudaMalloc(&dS, 4 * (size_t) B * ni));
	CK(cudaMemcpy(dY, Y, 4 * (size_t) ni * k, cudaMemcpyHostToDevice));
	for (size_t b0 = 0; b0 < users.size(); b0 += B)
	{
		int			nb = (int) std::min((size_t) B, users.size() - b0);

		for (int j = 0; j < nb; j++)
			memcpy(&Xb[(size_t) j * k], X + (size_t) users[b0 + j] * k, 4 * k);
		CK(cudaMemcpy(dX, Xb.data(), 4 * (size_t) nb * k, cudaMemcpyHostToDevice));
		CB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, ni, nb, k, &one, dY, k, dX, k,
					   &zero, dS, ni));
		CK(cudaMemcpy(S.data(), dS, 4 * (size_t) nb * ni, cudaMemcpyDeviceToHost));
#pragma omp parallel for schedule(dynamic, 8)
		for (int j = 0; j < nb; j++)
		{
			int32_t		u = users[b0 + j];
			int64_t		p = d->C.indptr[u];
			float		sc[10];

			gm_topk(&S[(size_t) j * ni], ni, 10, d->C.indices + p,
					(int32_t) (d->C.indptr[u + 1] - p), &out[(b0 + j) * 10], sc);
		}
	}
	cudaFree(dY);
	cudaFree(dX);
	cudaFree(dS);
	cublasDestroy(h);
}

static double
precision10(const dataset *d, const std::vector<int32_t> &users,
			const std::vector<int32_t> &rec)
{
	double		sum = 0.0;
	int64_t		n = 0;

	for (size_t j = 0; j < users.size(); j++)
	{
		int32_t		u = users[j];
		const int32_t *tb = d->test_idx.data() + d->test_ptr[u],
				   *te = d->test_idx.data() + d->test_ptr[u + 1];
		int			hits = 0;

		if (tb == te)
			continue;
		for (int t = 0; t < 10; t++)
			hits += rec[j * 10 + t] >= 0 && std::binary_search(tb, te, rec[j * 10 + t]);
		sum += hits / 10.0;
		n++;
	}
	return n ? sum / n : 0.0;
}

static double
overlap10(const std::vector<int32_t> &a, const std::vector<int32_t> &b)
{
	double		s = 0.0;
	size_t		n = a.size() / 10;

	for (size_t j = 0; j < n; j++)
	{
		int			c = 0;

		for (int x = 0; x < 10; x++)
			for (int y = 0; y < 10; y++)
				c += a[j * 10 + x] == b[j * 10 + y] && a[j * 10 + x] >= 0;
		s += c;
	}
	return n ? s / n : 0.0;
}

/* ============================================================ tests */

/* 1: one user's CG with cg_steps = k against a float64 Cholesky solve */
static void
test_exact(int k)
{
	int32_t		nu = 24,
				ni = 700;
	std::vector<int32_t> r,
				c;
	std::vector<float> v;
	float		reg = 0.1f,
				alpha = 2.0f;
	gm_csr		A,
				At,
				C;

	for (int32_t u = 0; u < nu; u++)
		for (int32_t i = 0; i < ni; i++)
			if (urand() < 0.05 + 0.45 * (u % 3 == 0))	/* every third user > 256 items: several chunks */
			{
				r.push_back(u);
				c.push_back(i);
				v.push_back((float) (1 + (int) (urand() * 5)));
			}
	GM(gm_csr_from_coo(nu, ni, (int64_t) r.size(), r.data(), c.data(), v.data(), &A, err, sizeof(err)));
	GM(gm_csr_transpose(&A, &At, err, sizeof(err)));
	GM(gm_confidence(&A, alpha, &C, err, sizeof(err)));

	std::vector<float> X((size_t) nu * k),
				Y((size_t) ni * k),
				Xo((size_t) nu * k);

	for (auto &x : X)
		x = (float) (0.1 * nrand());
	for (auto &y : Y)
		y = (float) (0.1 * nrand());

	gpu_als		g;

	ga_create(&g, &A, &At, X.data(), Y.data(), k, k, reg, alpha);
	ga_begin(&g, 0);
	/* two slices, to check that slices are independent */
	ga_run(&g, 0, 0, 7);
	ga_run(&g, 0, 7, nu);
	ga_sync(&g);
	fill_nan(Xo.data(), Xo.size());
	ga_get(&g, Xo.data(), NULL);
	ga_destroy(&g);

	double		worst = 0.0;

	for (int32_t u = 0; u < nu; u++)
	{
		std::vector<double> M((size_t) k * k, 0.0),
					b(k, 0.0);

		for (int i = 0; i < k; i++)
			M[(size_t) i * k + i] = reg;
		for (int32_t j = 0; j < ni; j++)
			for (int a = 0; a < k; a++)
				for (int bb = 0; bb < k; bb++)
					M[(size_t) a * k + bb] += (double) Y[(size_t) j * k + a] * Y[(size_t) j * k + bb];
		for (int64_t e = C.indptr[u]; e < C.indptr[u + 1]; e++)
		{
			const float *y = &Y[(size_t) C.indices[e] * k];
			double		cc = C.data[e];

			for (int a = 0; a < k; a++)
			{
				b[a] += cc * y[a];
				for (int bb = 0; bb < k; bb++)
					M[(size_t) a * k + bb] += (cc - 1.0) * y[a] * y[bb];
			}
		}
		/* Cholesky */
		for (int j = 0; j < k; j++)
		{
			double		s = M[(size_t) j * k + j];

			for (int t = 0; t < j; t++)
				s -= M[(size_t) j * k + t] * M[(size_t) j * k + t];
			M[(size_t) j * k + j] = sqrt(s);
			for (int i = j + 1; i < k; i++)
			{
				double		z = M[(size_t) i * k + j];

				for (int t = 0; t < j; t++)
					z -= M[(size_t) i * k + t] * M[(size_t) j * k + t];
				M[(size_t) i * k + j] = z / M[(size_t) j * k + j];
			}
		}
		for (int i = 0; i < k; i++)
		{
			double		s = b[i];

			for (int t = 0; t < i; t++)
				s -= M[(size_t) i * k + t] * b[t];
			b[i] = s / M[(size_t) i * k + i];
		}
		for (int i = k - 1; i >= 0; i--)
		{
			double		s = b[i];

			for (int t = i + 1; t < k; t++)
				s -= M[(size_t) t * k + i] * b[t];
			b[i] = s / M[(size_t) i * k + i];
		}
		double		num = 0.0,
					den = 0.0;

		for (int i = 0; i < k; i++)
		{
			double		dlt = Xo[(size_t) u * k + i] - b[i];

			num += dlt * dlt;
			den += b[i] * b[i];
		}
		double		rel = sqrt(num / den);

		if (!(rel <= worst))
			worst = isnan(rel) ? INFINITY : std::max(worst, rel);
	}
	CHECK(worst < 1e-4 && count_nonfinite(Xo.data(), Xo.size()) == 0,
		  "exact solve k=%d (%d users, cg_steps=k): max rel err vs float64 Cholesky %.2e (< 1e-4)",
		  k, nu, worst);
	gm_csr_free(&A);
	gm_csr_free(&At);
	gm_csr_free(&C);
}

/* 2: GPU vs CPU core from the same factors, per-iteration loss; top-10 */
static void
test_vs_cpu(int k, int iters_loss, int iters_total)
{
	dataset		d;
	float		reg = 0.05f,
				alpha = 2.0f;
	int			cg = 3;

	make_dataset(&d, 3000, 1200, 240000, 8, 12, 0.6, 77 + k, alpha);
	int32_t		nu = d.C.n_rows,
				ni = d.C.n_cols;
	std::vector<float> Xc((size_t) nu * k),
				Yc((size_t) ni * k),
				Xg((size_t) nu * k),
				Yg((size_t) ni * k),
				G((size_t) k * k);

	/* random (not tiny) starting factors, fresh per k */
	for (auto &x : Xc)
		x = (float) (0.1 * nrand());
	for (auto &y : Yc)
		y = (float) (0.1 * nrand());
	int64_t		maxrow = 0,
				maxcol = 0;

	for (int32_t u = 0; u < nu; u++)
		maxrow = std::max(maxrow, d.C.indptr[u + 1] - d.C.indptr[u]);
	for (int32_t i = 0; i < ni; i++)
		maxcol = std::max(maxcol, d.Ct.indptr[i + 1] - d.Ct.indptr[i]);

	gpu_als		g;

	ga_create(&g, &d.A, &d.At, Xc.data(), Yc.data(), k, cg, reg, alpha);
	double		worst = 0.0,
				worst_lossfn = 0.0;
	size_t		bad = 0;

	for (int it = 0; it < iters_total; it++)
	{
		/* CPU */
		gm_gram(Yc.data(), ni, k, reg, G.data(), 0);
		gm_als_cg_solve_rows(&d.C, Xc.data(), Yc.data(), G.data(), k, cg, 0, nu, 0);
		gm_gram(Xc.data(), nu, k, reg, G.data(), 0);
		gm_als_cg_solve_rows(&d.Ct, Yc.data(), Xc.data(), G.data(), k, cg, 0, ni, 0);
		/* GPU, in uneven slices */
		for (int side = 0; side < 2; side++)
		{
			int32_t		n = side ? ni : nu;

			ga_begin(&g, side);
			for (int32_t b = 0; b < n;)
			{
				int32_t		e = std::min(n, b + 1 + (int32_t) (urand() * 700));

				ga_run(&g, side, b, e);
				b = e;
			}
		}
		ga_sync(&g);
		if (it < iters_loss)
		{
			double		lg,
						lc = gm_als_loss(&d.C, Xc.data(), Yc.data(), k, reg, 0);

			lg = ga_loss(&g);
			fill_nan(Xg.data(), Xg.size());
			fill_nan(Yg.data(), Yg.size());
			ga_get(&g, Xg.data(), Yg.data());
			bad += count_nonfinite(Xg.data(), Xg.size()) + count_nonfinite(Yg.data(), Yg.size());
			double		lcg = gm_als_loss(&d.C, Xg.data(), Yg.data(), k, reg, 0);
			double		rel = fabs(lg - lc) / fabs(lc);

			printf("    k=%d it %d: loss cpu %.8f gpu %.8f (cpu fn on gpu factors %.8f) rel %.2e\n",
				   k, it + 1, lc, lg, lcg, rel);
			worst = std::max(worst, isnan(rel) ? INFINITY : rel);
			worst_lossfn = std::max(worst_lossfn, fabs(lcg - lg) / fabs(lcg));
		}
	}
	CHECK(worst < 1e-3 && bad == 0,
		  "gpu vs cpu core k=%d (%d x %d, nnz %lld, longest row %lld, longest column %lld): "
		  "loss over %d iterations max rel diff %.2e (< 1e-3), %zu unwritten values",
		  k, nu, ni, (long long) d.C.nnz, (long long) maxrow, (long long) maxcol,
		  iters_loss, worst, bad);
	CHECK(worst_lossfn < 1e-5, "gpu loss function vs cpu loss function on the same factors k=%d: max rel %.2e (< 1e-5)",
		  k, worst_lossfn);

	fill_nan(Xg.data(), Xg.size());
	fill_nan(Yg.data(), Yg.size());
	ga_get(&g, Xg.data(), Yg.data());
	ga_destroy(&g);
	std::vector<int32_t> users,
				rc,
				rg;

	for (int32_t u = 0; u < nu; u += 3)
		users.push_back(u);
	top10(&d, Xc.data(), Yc.data(), k, users, rc);
	top10(&d, Xg.data(), Yg.data(), k, users, rg);
	double		ov = overlap10(rc, rg);

	CHECK(ov >= 9.0 && count_nonfinite(Xg.data(), Xg.size()) == 0,
		  "top-10 overlap gpu vs cpu after %d iterations k=%d: %.3f / 10 (>= 9); p@10 cpu %.4f gpu %.4f",
		  iters_total, k, ov, precision10(&d, users, rc), precision10(&d, users, rg));
	dataset_free(&d);
}

/* losses reported by gm_mf_train per iteration */
struct loss_log
{
	std::vector<double> loss;
};

static void
log_loss(void *arg, int it, double loss, double rmse, double seconds)
{
	(void) it;
	(void) rmse;
	(void) seconds;
	((loss_log *) arg)->loss.push_back(loss);
}

/* 3: the core's own training loop through the dlopen'ed module vs the CPU */
static void
test_train_backend(const char *module, int k)
{
	dataset		d;
	char		name[128];
	gm_mf_params p;
	gm_mf_result rc,
				rg;
	gm_mf_data	dc,
				dg;
	loss_log	lc,
				lg;
	gm_callbacks cbc = {NULL, log_loss, &lc},
				cbg = {NULL, log_loss, &lg};
	const gm_algo_ops *ops;

	if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
	{
		CHECK(0, "gm_cuda_available(%s): %s", module, err);
		return;
	}
	ops = gm_algo_ops_get(GM_ALG_ALS_IMPLICIT, GM_BACKEND_CUDA, err, sizeof(err));
	CHECK(ops != NULL && strcmp(ops->name, "cuda") == 0,
		  "gm_algo_ops_get(als, cuda) through %s: %s", module, ops ? ops->name : err);
	make_dataset(&d, 2000, 800, 120000, 8, 10, 0.6, 99, 2.0f);
	gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
	p.factors = k;
	p.iterations = 5;
	p.cg_steps = 3;
	p.regularization = 0.05f;
	p.alpha = 2.0f;
	p.seed = 7;
	std::vector<float> X1((size_t) d.A.n_rows * k),
				Y1((size_t) d.A.n_cols * k),
				X2((size_t) d.A.n_rows * k),
				Y2((size_t) d.A.n_cols * k);

	memset(&dc, 0, sizeof(dc));
	dc.R = &d.A;
	dc.Rt = &d.At;
	dg = dc;
	dc.X = X1.data();
	dc.Y = Y1.data();
	dg.X = X2.data();
	dg.Y = Y2.data();
	fill_nan(X2.data(), X2.size());
	fill_nan(Y2.data(), Y2.size());
	p.backend = GM_BACKEND_CPU;
	GM(gm_mf_train(&p, &dc, &cbc, &rc, err, sizeof(err)));
	p.backend = GM_BACKEND_CUDA;
	GM(gm_mf_train(&p, &dg, &cbg, &rg, err, sizeof(err)));
	double		rel = fabs(rc.final.loss - rg.final.loss) / fabs(rc.final.loss),
				worst = 0.0;

	for (size_t i = 0; i < lc.loss.size() && i < lg.loss.size(); i++)
		worst = std::max(worst, fabs(lc.loss[i] - lg.loss[i]) / fabs(lc.loss[i]));
	CHECK(rel < 1e-3 && worst < 1e-3 && rg.iterations_run == 5 && lg.loss.size() == 5 &&
		  count_nonfinite(X2.data(), X2.size()) + count_nonfinite(Y2.data(), Y2.size()) == 0,
		  "gm_mf_train cpu vs cuda (%s via %s) k=%d: final loss %.8f vs %.8f rel %.2e, "
		  "per iteration max rel %.2e, %d iterations", rg.device_name, module, k,
		  rc.final.loss, rg.final.loss, rel, worst, rg.iterations_run);
	dataset_free(&d);
}

/*
 * 4: the model's general form on the GPU, one side's solve from a fresh
 * random start against the CPU core's gm_als_solve_rows (the same solver,
 * block size and sweeps) and, for the exact solver (one block of kp <= 64)
 * and the block solver after many sweeps, a float64 Cholesky solve of
 * A = alpha0 Y^T Y + sum (c - alpha0) y y^T + reg_u I, reg_u = lambda
 * (n_u + alpha0 |I|)^nu (Rendle's frequency scaling).  Users with > 256
 * items (several chunks) included.
 */
static void
test_general_solve(int k, gm_solver solver, int bs, int sweeps, float alpha0, float nu,
				   int tf32 = 0)
{
	int32_t		nu_ = 30,
				ni = 900;
	std::vector<int32_t> r,
				c;
	std::vector<float> v;
	float		lam = 0.05f,
				alpha = 3.0f;
	gm_csr		A,
				At,
				C;

	for (int32_t u = 0; u < nu_; u++)
		for (int32_t i = 0; i < ni; i++)
			if (urand() < 0.04 + 0.4 * (u % 3 == 0))
			{
				r.push_back(u);
				c.push_back(i);
				v.push_back((float) (1 + (int) (urand() * 5)));
			}
	GM(gm_csr_from_coo(nu_, ni, (int64_t) r.size(), r.data(), c.data(), v.data(), &A, err, sizeof(err)));
	GM(gm_csr_transpose(&A, &At, err, sizeof(err)));
	GM(gm_confidence(&A, alpha, &C, err, sizeof(err)));

	std::vector<float> X((size_t) nu_ * k),
				Y((size_t) ni * k),
				Xg((size_t) nu_ * k),
				Xc((size_t) nu_ * k),
				G((size_t) k * k),
				reg(nu_);

	for (auto &x : X)
		x = (float) (0.3 * nrand());
	for (auto &y : Y)
		y = (float) (nrand() / sqrt((double) ni));
	int			cg = solver == GM_SOLVER_CG ? k : 3;	/* CG with k steps: exact */
	gm_mf_params p = gpu_params(k, cg, lam, alpha);

	p.alpha0 = alpha0;
	p.nu = nu;
	p.solver = solver;
	p.block_size = bs;
	p.block_sweeps = sweeps;
	p.tf32 = tf32;

	gpu_als		g;

	ga_create_p(&g, &A, &At, X.data(), Y.data(), &p);
	ga_side(&g, 0);
	ga_sync(&g);
	fill_nan(Xg.data(), Xg.size());
	ga_get(&g, Xg.data(), NULL);
	ga_destroy(&g);

	/* the CPU core: G = alpha0 Y^T Y (+ lambda I when nu = 0), row ridges */
	gm_gram(Y.data(), ni, k, 0.0f, G.data(), 0);
	for (int i = 0; i < k * k; i++)
		G[i] *= alpha0;
	if (nu == 0.0f)
		for (int i = 0; i < k; i++)
			G[(size_t) i * k + i] += lam;
	gm_als_row_reg(&A, lam, alpha0, nu, reg.data());
	std::copy(X.begin(), X.end(), Xc.begin());
	{
		gm_als_side sd = {&C, Xc.data(), Y.data(), G.data(), nu == 0.0f ? NULL : reg.data(),
		alpha0, k};

		GM(gm_als_solve_rows(&sd, solver, cg, bs, sweeps, 0, nu_, 0));
	}

	double		worst_cpu = 0.0,
				worst_exact = 0.0;

	for (int32_t u = 0; u < nu_; u++)
	{
		std::vector<double> M((size_t) k * k, 0.0),
					b(k, 0.0);
		double		num = 0.0,
					den = 0.0,
					numc = 0.0;

		for (int32_t j = 0; j < ni; j++)
			for (int a = 0; a < k; a++)
				for (int bb = 0; bb < k; bb++)
					M[(size_t) a * k + bb] += alpha0 * (double) Y[(size_t) j * k + a] * Y[(size_t) j * k + bb];
		for (int i = 0; i < k; i++)
			M[(size_t) i * k + i] += nu == 0.0f ? lam : reg[u];
		for (int64_t e = C.indptr[u]; e < C.indptr[u + 1]; e++)
		{
			const float *y = &Y[(size_t) C.indices[e] * k];
			double		cc = C.data[e];

			for (int a = 0; a < k; a++)
			{
				b[a] += cc * y[a];
				for (int bb = 0; bb < k; bb++)
					M[(size_t) a * k + bb] += (cc - alpha0) * y[a] * y[bb];
			}
		}
		/* Cholesky */
		for (int j = 0; j < k; j++)
		{
			double		sum = M[(size_t) j * k + j];

			for (int t = 0; t < j; t++)
				sum -= M[(size_t) j * k + t] * M[(size_t) j * k + t];
			M[(size_t) j * k + j] = sqrt(sum);
			for (int i = j + 1; i < k; i++)
			{
				double		z = M[(size_t) i * k + j];

				for (int t = 0; t < j; t++)
					z -= M[(size_t) i * k + t] * M[(size_t) j * k + t];
				M[(size_t) i * k + j] = z / M[(size_t) j * k + j];
			}
		}
		for (int i = 0; i < k; i++)
		{
			double		sum = b[i];

			for (int t = 0; t < i; t++)
				sum -= M[(size_t) i * k + t] * b[t];
			b[i] = sum / M[(size_t) i * k + i];
		}
		for (int i = k - 1; i >= 0; i--)
		{
			double		sum = b[i];

			for (int t = i + 1; t < k; t++)
				sum -= M[(size_t) t * k + i] * b[t];
			b[i] = sum / M[(size_t) i * k + i];
		}
		for (int i = 0; i < k; i++)
		{
			double		dlt = Xg[(size_t) u * k + i] - b[i],
						dc = Xg[(size_t) u * k + i] - Xc[(size_t) u * k + i];

			num += dlt * dlt;
			numc += dc * dc;
			den += b[i] * b[i];
		}
		worst_exact = std::max(worst_exact, isnan(num) ? INFINITY : sqrt(num / den));
		worst_cpu = std::max(worst_cpu, isnan(numc) ? INFINITY : sqrt(numc / den));
	}
	bool		exact = solver != GM_SOLVER_BLOCK || sweeps >= 20;
	/* TF32 Grams change a block step by ~1e-3 (the iteration still converges) */
	double		tol_cpu = tf32 && !exact ? 2e-2 : exact ? 1e-3 : 1e-4;

	CHECK(worst_cpu < tol_cpu && (!exact || worst_exact < 1e-4) &&
		  count_nonfinite(Xg.data(), Xg.size()) == 0,
		  "%s%s k=%d block %d x %d alpha0 %g nu %g (%d users, some > 256 items): max rel diff vs the CPU core %.2e (< %.0e)%s %.2e",
		  solver == GM_SOLVER_EXACT ? "exact" : solver == GM_SOLVER_BLOCK ? "block" : "cg (k steps)",
		  tf32 ? " tf32" : "", k, bs, sweeps, alpha0, nu, nu_, worst_cpu, tol_cpu,
		  exact ? ", vs float64 Cholesky (< 1e-4)" : "; vs float64 Cholesky (not converged, shown)",
		  worst_exact);
	gm_csr_free(&A);
	gm_csr_free(&At);
	gm_csr_free(&C);
}

/*
 * 5: gm_mf_train on both backends with the general model and each solver:
 * loss per iteration within 1e-3 relative (the block solver carries its
 * predictions from side to side on the GPU, recomputes them on the CPU),
 * top-10 overlap and p@10 after the last iteration.
 */
static void
test_backends(const char *what, gm_mf_params p, int iters, double tol = 1e-3, double min_overlap = 9.0)
{
	dataset		d;
	gm_mf_result rc,
				rg;
	gm_mf_data	dc,
				dg;
	loss_log	lc,
				lg;
	gm_callbacks cbc = {NULL, log_loss, &lc},
				cbg = {NULL, log_loss, &lg};
	int			k = p.factors;

	make_dataset(&d, 2000, 800, 120000, 8, 10, 0.6, 99 + k, p.alpha);
	p.iterations = iters;
	std::vector<float> X1((size_t) d.A.n_rows * k),
				Y1((size_t) d.A.n_cols * k),
				X2((size_t) d.A.n_rows * k),
				Y2((size_t) d.A.n_cols * k);

	memset(&dc, 0, sizeof(dc));
	dc.R = &d.A;
	dc.Rt = &d.At;
	dg = dc;
	dc.X = X1.data();
	dc.Y = Y1.data();
	dg.X = X2.data();
	dg.Y = Y2.data();
	fill_nan(X2.data(), X2.size());
	fill_nan(Y2.data(), Y2.size());
	p.backend = GM_BACKEND_CPU;
	GM(gm_mf_train(&p, &dc, &cbc, &rc, err, sizeof(err)));
	p.backend = GM_BACKEND_CUDA;
	GM(gm_mf_train(&p, &dg, &cbg, &rg, err, sizeof(err)));

	double		worst = 0.0;

	for (size_t i = 0; i < lc.loss.size() && i < lg.loss.size(); i++)
		worst = std::max(worst, isnan(lg.loss[i]) ? INFINITY : fabs(lc.loss[i] - lg.loss[i]) / fabs(lc.loss[i]));

	std::vector<int32_t> users,
				rcpu,
				rgpu;

	for (int32_t u = 0; u < d.A.n_rows; u += 2)
		users.push_back(u);
	top10(&d, X1.data(), Y1.data(), k, users, rcpu);
	top10(&d, X2.data(), Y2.data(), k, users, rgpu);
	double		ov = overlap10(rcpu, rgpu);

	printf("    %s k=%d: loss rel diff per iteration", what, k);
	for (size_t i = 0; i < lc.loss.size() && i < lg.loss.size(); i++)
		printf(" %.1e", fabs(lc.loss[i] - lg.loss[i]) / fabs(lc.loss[i]));
	printf("\n");
	CHECK(worst < tol && (int) lg.loss.size() == iters && ov >= min_overlap &&
		  count_nonfinite(X2.data(), X2.size()) + count_nonfinite(Y2.data(), Y2.size()) == 0,
		  "gm_mf_train cpu vs cuda, %s k=%d alpha0 %g nu %g: loss per iteration max rel %.2e (< %.0e) over %d, "
		  "final %.8f vs %.8f; top-10 overlap %.3f (>= %g); p@10 cpu %.4f gpu %.4f",
		  what, k, p.alpha0, p.nu, worst, tol, iters, rc.final.loss, rg.final.loss, ov, min_overlap,
		  precision10(&d, users, rcpu), precision10(&d, users, rgpu));
	dataset_free(&d);
}

/*
 * 6: a session on the GPU trains the same data with other parameters by
 * reset (the matrices stay uploaded): the same losses as fresh trainings.
 */
static void
test_session_gpu(void)
{
	dataset		d;
	gm_mf_params p[3];
	gm_mf_session *s = gm_mf_session_create();
	double		worst = 0.0;

	make_dataset(&d, 1500, 700, 90000, 8, 10, 0.6, 4242, 1.0f);
	for (int i = 0; i < 3; i++)
	{
		gm_mf_params_defaults(&p[i], GM_ALG_ALS_IMPLICIT);
		p[i].backend = GM_BACKEND_CUDA;
		p[i].iterations = 4;
	}
	p[0].factors = 64;
	p[1].factors = 128;
	p[1].solver = GM_SOLVER_BLOCK;
	p[1].alpha0 = 0.2f;
	p[1].nu = 0.5f;
	p[1].alpha = 3.0f;
	p[2].factors = 32;
	p[2].solver = GM_SOLVER_EXACT;
	p[2].alpha0 = 0.05f;
	for (int i = 0; i < 3; i++)
	{
		int			k = p[i].factors;
		std::vector<float> X((size_t) d.A.n_rows * k),
					Y((size_t) d.A.n_cols * k);
		gm_mf_data	dd;
		gm_mf_result r1,
					r2;

		memset(&dd, 0, sizeof(dd));
		dd.R = &d.A;
		dd.Rt = &d.At;
		dd.X = X.data();
		dd.Y = Y.data();
		GM(gm_mf_session_train(s, &p[i], &dd, NULL, NULL, &r1, err, sizeof(err)));
		GM(gm_mf_train(&p[i], &dd, NULL, &r2, err, sizeof(err)));
		worst = std::max(worst, fabs(r1.final.loss - r2.final.loss) / fabs(r2.final.loss));
	}
	CHECK(worst < 1e-5 && gm_mf_session_reuses(s) == 2,
		  "session on the GPU (CG 64, block 128, exact 32 by reset): loss vs fresh trainings max rel %.2e (< 1e-5), %d resets",
		  worst, gm_mf_session_reuses(s));
	gm_mf_session_free(s);
	dataset_free(&d);
}

/*
 * 6b: the same training on several GPUs (gm_mf_params.gpus: rows cut in
 * shares, factors exchanged after each side) from the same start: the
 * one-GPU factors within float rounding (a row's arithmetic is the same;
 * rows longer than a chunk add their chunks' sums with atomics, in any
 * order, on one GPU as on several), and the block solver within a little
 * more (it recomputes its per-entry predictions each side instead of
 * permuting them).  On a machine with one
 * GPU the shares run as streams of that GPU (GM_GPUS_SHARE_DEVICE).
 */
static void
test_multi_gpu(void)
{
	dataset		d;
	int			visible = 0;
	bool		shared;

	cudaGetDeviceCount(&visible);
	shared = visible < 2;
	if (shared)
		setenv("GM_GPUS_SHARE_DEVICE", "1", 1);
	make_dataset(&d, 3000, 1200, 180000, 8, 10, 0.6, 777, 1.0f);
	for (int c = 0; c < 4; c++)
	{
		gm_mf_params p;
		int			ngpu = c == 3 ? 3 : 2;
		const char *what = c == 0 ? "CG 3 k=64" : c == 1 ? "CG 3 k=200 nu 0.5" : c == 2 ? "block 64 k=128" : "CG 3 k=96 on three";

		gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
		p.backend = GM_BACKEND_CUDA;
		p.iterations = 6;
		p.factors = c == 1 ? 200 : c == 2 ? 128 : c == 3 ? 96 : 64;
		p.tf32 = 0;
		if (c == 1)
		{
			p.nu = 0.5f;
			p.alpha0 = 0.3f;
		}
		if (c == 2)
		{
			p.solver = GM_SOLVER_BLOCK;
			p.block_size = 64;
			p.alpha0 = 0.1f;
		}
		if (ngpu > visible && !shared)
		{
			printf("  [skip] %s on %d GPUs: %d visible\n", what, ngpu, visible);
			continue;
		}
		{
			int			k = p.factors;
			std::vector<float> X[3], Y[3];
			gm_mf_result r[3];
			double		diff[2] = {0.0, 0.0},
						rel[2],
						scale = 0.0;

			/* one GPU twice (its own run-to-run noise), then the shares */
			for (int t = 0; t < 3; t++)
			{
				gm_mf_data	dd;

				X[t].assign((size_t) d.A.n_rows * k, 0.0f);
				Y[t].assign((size_t) d.A.n_cols * k, 0.0f);
				memset(&dd, 0, sizeof(dd));
				dd.R = &d.A;
				dd.Rt = &d.At;
				dd.X = X[t].data();
				dd.Y = Y[t].data();
				p.gpus = t < 2 ? 1 : ngpu;
				GM(gm_mf_train(&p, &dd, NULL, &r[t], err, sizeof(err)));
			}
			for (int t = 0; t < 2; t++)
			{
				for (size_t i = 0; i < X[0].size(); i++)
				{
					diff[t] = std::max(diff[t], (double) fabsf(X[0][i] - X[t + 1][i]));
					scale = std::max(scale, (double) fabsf(X[0][i]));
				}
				for (size_t i = 0; i < Y[0].size(); i++)
				{
					diff[t] = std::max(diff[t], (double) fabsf(Y[0][i] - Y[t + 1][i]));
					scale = std::max(scale, (double) fabsf(Y[0][i]));
				}
				rel[t] = fabs(r[0].final.loss - r[t + 1].final.loss) / fabs(r[0].final.loss);
			}
			/* the block solver: also its own path to the predictions (recomputed, not permuted) */
			/*
			 * within ten times the one-GPU noise (each pair's noise varies:
			 * the loss within 3e-5 relative at least, the factors 1e-6 of
			 * their scale); a share computed wrongly, or not exchanged, is
			 * off by far more
			 */
			CHECK(((diff[1] <= std::max(10.0 * diff[0], 1e-6 * scale) &&
					rel[1] <= std::max(10.0 * rel[0], 3e-5)) ||
				   (p.solver == GM_SOLVER_BLOCK && diff[1] < 1e-3 * scale && rel[1] < 1e-5)) &&
				  strstr(r[2].device_name, " x ") != NULL,
				  "%s on %d %s vs one GPU: factors max abs diff %.2e, loss rel %.1e; one GPU twice: %.2e, %.1e "
				  "(rows longer than a chunk add with atomics in any order); scale %.2e, device \"%s\"",
				  what, ngpu, shared ? "shares of one GPU" : "GPUs", diff[1], rel[1], diff[0], rel[0],
				  scale, r[2].device_name);
		}
	}
	if (shared)
		unsetenv("GM_GPUS_SHARE_DEVICE");
	dataset_free(&d);
}

/*
 * 6c: a lean training (gm_mf_data.start_on_device, Rt a transpose not
 * formed, built in slabs of GM_TRANSPOSE_SLAB entries as it is uploaded;
 * gpumf.lean_training) equals the plain one from the same start: the
 * starting factors drawn on the GPU are gm_factors_init's, the slabs are
 * the transpose, on one GPU and on shares.  uploaded is called once, after
 * the upload; X and Y are untouched until the download.
 */
static int lean_uploads = 0;
static void
lean_uploaded(void *arg)
{
	(void) arg;
	lean_uploads++;
}

/* A's transpose as a lean training takes it: At's row pointers, no entries (formed from A as they are uploaded) */
static gm_csr
lean_transpose_view(const gm_csr *A, const gm_csr *At)
{
	gm_csr		vt = *At;

	vt.indices = NULL;
	vt.data = NULL;
	vt.of = A;
	vt.of_r0 = 0;
	vt.of_r1 = At->n_rows;
	return vt;
}

static void
test_lean(void)
{
	dataset		d;
	int			visible = 0;

	cudaGetDeviceCount(&visible);
	make_dataset(&d, 2500, 1100, 150000, 8, 10, 0.6, 991, 1.0f);
	setenv("GM_TRANSPOSE_SLAB", "7001", 1);
	for (int c = 0; c < 3; c++)
	{
		gm_mf_params p;
		const char *what = c == 0 ? "CG 3 k=64" : c == 1 ? "block 64 k=128" : "CG 3 k=96 on two";
		int			k;
		std::vector<float> X[3], Y[3];
		gm_mf_result r[3];
		gm_csr		vt = lean_transpose_view(&d.A, &d.At);
		double		diff[2] = {0.0, 0.0},
					rel[2],
					scale = 0.0;
		bool		untouched = true;

		gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
		p.backend = GM_BACKEND_CUDA;
		/*
		 * one iteration (both sides, so both matrices and both starts): CG's
		 * atomics-ordered sums grow into differences of a percent of the
		 * factors' scale after a few iterations, between any two trainings
		 */
		p.iterations = 1;
		p.tf32 = 0;
		p.factors = c == 0 ? 64 : c == 1 ? 128 : 96;
		if (c == 1)
		{
			p.solver = GM_SOLVER_BLOCK;
			p.block_size = 64;
			p.alpha0 = 0.1f;
		}
		if (c == 2 && visible < 2)
			setenv("GM_GPUS_SHARE_DEVICE", "1", 1);
		p.gpus = c == 2 ? 2 : 1;
		k = p.factors;
		/* plain twice (the run-to-run noise), then lean */
		for (int t = 0; t < 3; t++)
		{
			gm_mf_data	dd;

			X[t].assign((size_t) d.A.n_rows * k, t == 2 ? 12345.0f : 0.0f);
			Y[t].assign((size_t) d.A.n_cols * k, t == 2 ? 12345.0f : 0.0f);
			memset(&dd, 0, sizeof(dd));
			dd.R = &d.A;
			dd.Rt = t < 2 ? &d.At : &vt;
			dd.X = X[t].data();
			dd.Y = Y[t].data();
			if (t == 2)
			{
				dd.start_on_device = 1;
				dd.uploaded = lean_uploaded;
				lean_uploads = 0;
			}
			GM(gm_mf_train(&p, &dd, NULL, &r[t], err, sizeof(err)));
		}
		for (int t = 0; t < 2; t++)
		{
			for (size_t i = 0; i < X[0].size(); i++)
			{
				diff[t] = std::max(diff[t], (double) fabsf(X[0][i] - X[t + 1][i]));
				scale = std::max(scale, (double) fabsf(X[0][i]));
				untouched = untouched && X[2][i] != 12345.0f;
			}
			for (size_t i = 0; i < Y[0].size(); i++)
			{
				diff[t] = std::max(diff[t], (double) fabsf(Y[0][i] - Y[t + 1][i]));
				scale = std::max(scale, (double) fabsf(Y[0][i]));
			}
			rel[t] = fabs(r[0].final.loss - r[t + 1].final.loss) / fabs(r[0].final.loss);
		}
		/*
		 * the floor: two plain trainings over two shares of one H100 were
		 * 8.75e-08 apart in one run and 5.70e-04 (3.4e-5 of the scale) in
		 * the next (CG's atomics-ordered sums), so one pair's noise is no
		 * measure of the next; a wrong transpose or start is off by far
		 * more, in the loss too
		 */
		CHECK(diff[1] <= std::max(10.0 * diff[0], 1e-4 * scale) &&
			  rel[1] <= std::max(10.0 * rel[0], 3e-5) && lean_uploads == 1 && untouched,
			  "lean %s vs plain: factors max abs diff %.2e, loss rel %.1e; plain twice: %.2e, %.1e; "
			  "scale %.2e; uploaded called %d times (1); every factor downloaded: %d",
			  what, diff[1], rel[1], diff[0], rel[0], scale, lean_uploads, (int) untouched);
		if (c == 2 && visible < 2)
			unsetenv("GM_GPUS_SHARE_DEVICE");
	}
	unsetenv("GM_TRANSPOSE_SLAB");
	{
		/* refused off the GPU and for another algorithm */
		gm_mf_params p;
		gm_mf_data	dd;
		gm_mf_result rr;
		std::vector<float> X((size_t) d.A.n_rows * 8), Y((size_t) d.A.n_cols * 8);
		char		e2[GM_ERRLEN];

		gm_mf_params_defaults(&p, GM_ALG_ALS_EXPLICIT);
		p.backend = GM_BACKEND_CUDA;
		p.factors = 8;
		memset(&dd, 0, sizeof(dd));
		dd.R = &d.A;
		dd.Rt = &d.At;
		dd.X = X.data();
		dd.Y = Y.data();
		dd.start_on_device = 1;
		CHECK(gm_mf_train(&p, &dd, NULL, &rr, e2, sizeof(e2)) == GM_EINVAL && strstr(e2, "lean") != NULL,
			  "a lean explicit ALS training was not refused: %s", e2);
	}
	dataset_free(&d);
}

/*
 * 6c': the early download (gm_algo_ops.final_iteration): in the last
 * iteration a thread copies the users' factors back while the GPU solves
 * the items.  The same training with it and without it
 * (GM_EARLY_DOWNLOAD_OFF), plain and lean, on one GPU and over two and
 * three shares (of one GPU where fewer are visible), from host memory
 * filled with a sentinel: every factor is written, by the early copy where
 * it ran (its counter moves), and the factors are within the noise of two
 * trainings without it.  Rows shorter than a CG chunk add no atomics, so
 * the noise here is zero.
 */
static void
test_early_download(void)
{
	dataset		d;
	int			visible = 0;

	cudaGetDeviceCount(&visible);
	make_dataset(&d, 3000, 1200, 120000, 8, 10, 0.6, 4242, 1.0f);
	for (int c = 0; c < 4; c++)
	{
		gm_mf_params p;
		const int	shares = c < 2 ? 1 : c == 2 ? 2 : 3;
		const bool	lean = c == 1 || c == 2;
		std::vector<float> X[3], Y[3];
		gm_mf_result r[3];
		gm_csr		vt = lean_transpose_view(&d.A, &d.At);
		double		diff[2] = {0.0, 0.0},
					rel[2],
					scale = 0.0;
		bool		written = true;
		long long	early[3];

		gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
		p.backend = GM_BACKEND_CUDA;
		p.iterations = 1;		/* CG's atomics-ordered sums: see test_lean */
		p.factors = 64;
		p.gpus = shares;
		if (shares > visible)
			setenv("GM_GPUS_SHARE_DEVICE", "1", 1);
		/* without twice (the noise), then with */
		for (int t = 0; t < 3; t++)
		{
			gm_mf_data	dd;
			long long	before = gm_cuda_early_downloads();

			if (t < 2)
				setenv("GM_EARLY_DOWNLOAD_OFF", "1", 1);
			else
				unsetenv("GM_EARLY_DOWNLOAD_OFF");
			X[t].assign((size_t) d.A.n_rows * p.factors, 12345.0f);
			Y[t].assign((size_t) d.A.n_cols * p.factors, 12345.0f);
			memset(&dd, 0, sizeof(dd));
			dd.R = &d.A;
			dd.Rt = lean ? &vt : &d.At;
			dd.X = X[t].data();
			dd.Y = Y[t].data();
			dd.start_on_device = lean;
			GM(gm_mf_train(&p, &dd, NULL, &r[t], err, sizeof(err)));
			early[t] = gm_cuda_early_downloads() - before;
		}
		for (int t = 0; t < 2; t++)
		{
			for (size_t i = 0; i < X[0].size(); i++)
			{
				diff[t] = std::max(diff[t], (double) fabsf(X[0][i] - X[t + 1][i]));
				scale = std::max(scale, (double) fabsf(X[0][i]));
				written = written && X[t + 1][i] != 12345.0f;
			}
			for (size_t i = 0; i < Y[0].size(); i++)
			{
				diff[t] = std::max(diff[t], (double) fabsf(Y[0][i] - Y[t + 1][i]));
				scale = std::max(scale, (double) fabsf(Y[0][i]));
				written = written && Y[t + 1][i] != 12345.0f;
			}
			rel[t] = fabs(r[0].final.loss - r[t + 1].final.loss) / fabs(r[0].final.loss);
		}
		/* the floor of test_lean: a wrong or missing copy is off by the factors' scale */
		CHECK(written && early[0] == 0 && early[1] == 0 && early[2] == 1 &&
			  diff[1] <= std::max(10.0 * diff[0], 1e-4 * scale) && rel[1] <= std::max(10.0 * rel[0], 3e-5),
			  "early download (%s, %d share%s): factors max abs diff %.2e, loss rel %.1e; without it twice: "
			  "%.2e, %.1e; scale %.2e; early copies %lld, %lld, %lld (0, 0, 1); every factor written: %d",
			  lean ? "lean" : "plain", shares, shares > 1 ? "s" : "", diff[1], rel[1], diff[0], rel[0],
			  scale, early[0], early[1], early[2], (int) written);
		unsetenv("GM_GPUS_SHARE_DEVICE");
	}
	unsetenv("GM_EARLY_DOWNLOAD_OFF");
	dataset_free(&d);
}

/*
 * 6d: the transpose a lean upload forms on the GPU from R's copy there
 * (an atomic scatter, then each slab of columns sorted by row) is the
 * host's transpose entry for entry: slabs of the default size, of 7001
 * entries and of one column each (a column longer than a slab is a slab of
 * its own), a matrix with empty columns and one long column.  Over shares
 * (2 and 3, as several GPUs have them) each share's rows of the transpose
 * come from its rows of R on the device and the other rows streamed from
 * the host in chunks: of the default size, of 5003 entries and of one row
 * each (a row longer than a chunk is a chunk of its own).
 */
static void
test_device_transpose(void)
{
	dataset		d;
	const char *slabs[3] = {NULL, "7001", "1"};
	const char *streams[3] = {NULL, "5003", "1"};

	make_dataset(&d, 2500, 1100, 150000, 8, 10, 0.6, 993, 1.0f);
	for (int s = 0; s < 3; s++)
		for (int shares = 1; shares <= 3; shares++)
		{
			char		e2[GM_ERRLEN] = "";

			if (slabs[s])
				setenv("GM_TRANSPOSE_SLAB", slabs[s], 1);
			if (streams[s])
				setenv("GM_TRANSPOSE_STREAM", streams[s], 1);
			CHECK(gm_cuda_check_device_transpose(&d.A, &d.At, shares, e2, sizeof(e2)) == GM_OK,
				  "device transpose of %lld entries over %d share(s), slabs of %s entries, chunks of %s: the host's %s",
				  (long long) d.A.nnz, shares, slabs[s] ? slabs[s] : "2^24", streams[s] ? streams[s] : "2^22", e2);
			unsetenv("GM_TRANSPOSE_SLAB");
			unsetenv("GM_TRANSPOSE_STREAM");
		}
	dataset_free(&d);
	{
		/* 3000 rows, 50 columns of which 0 mod 3 are empty and column 49 is in every row */
		const int32_t nr = 3000, nc = 50;
		std::vector<int64_t> ptr(1, 0);
		std::vector<int32_t> ind;
		std::vector<float> val;
		gm_csr		a,
					at;

		for (int32_t r = 0; r < nr; r++)
		{
			for (int32_t j = 1; j < nc - 1; j++)
				if (j % 3 != 0 && (r * 7 + j * 13) % 11 < 3)
				{
					ind.push_back(j);
					val.push_back((float) (r % 17) * 0.25f + (float) j);
				}
			ind.push_back(nc - 1);
			val.push_back((float) r);
			ptr.push_back((int64_t) ind.size());
		}
		memset(&a, 0, sizeof(a));
		a.n_rows = nr;
		a.n_cols = nc;
		a.nnz = (int64_t) ind.size();
		a.indptr = ptr.data();
		a.indices = ind.data();
		a.data = val.data();
		GM(gm_csr_transpose(&a, &at, err, sizeof(err)));
		setenv("GM_TRANSPOSE_SLAB", "100", 1);
		setenv("GM_TRANSPOSE_STREAM", "7", 1);
		for (int shares = 1; shares <= 3; shares++)
		{
			char		e2[GM_ERRLEN] = "";

			CHECK(gm_cuda_check_device_transpose(&a, &at, shares, e2, sizeof(e2)) == GM_OK,
				  "device transpose with empty columns and a column of %d entries over %d share(s) "
				  "(slabs of 100, chunks of 7): the host's %s", nr, shares, e2);
		}
		unsetenv("GM_TRANSPOSE_SLAB");
		unsetenv("GM_TRANSPOSE_STREAM");
		gm_csr_free(&at);
	}
}

/*
 * 6e: copies between pageable memory and the GPU through pinned buffers
 * (gm_copy_staged: the CSR's upload, the factors' download) move every byte
 * and no other, for sizes below, at and above the staging threshold, from
 * and to unaligned addresses.
 */
static void
test_staged_copy(void)
{
	char		e2[GM_ERRLEN] = "";

	CHECK(gm_cuda_check_staged_copy(e2, sizeof(e2)) == GM_OK,
		  "staged copies up and down, 32 MB - 1 to 224 MB + 5 bytes, unaligned: cudaMemcpy's bytes %s", e2);
}

/*
 * 6f: the matrix built on the GPU from coordinates (gm_cuda_csr_from_coo)
 * is gm_csr_from_coo's, bit for bit: random pairs with duplicates (summed in
 * input order), empty rows and columns, one pair repeated 100,000 times, a
 * single entry; the copy it keeps is what the upload of that CSR takes;
 * out-of-range pairs and a stop are errors after which nothing is left.
 */
static int
stop_always(void *)
{
	return 1;
}

static void
coo_case(const char *what, int32_t nr, int32_t nc, int64_t n, double dup_share, int32_t row_skip,
		 int keep, int mapped)
{
	/* mapped: the pairs go up as raw keys (index i as key 3i + 1, other keys -1), the maps with them */
	std::vector<int32_t> rmap(mapped ? (size_t) nr * 3 + 2 : 0, -1),
				cmap(mapped ? (size_t) nc * 3 + 2 : 0, -1);

	for (int32_t i = 0; mapped && i < nr; i++)
		rmap[(size_t) i * 3 + 1] = i;
	for (int32_t i = 0; mapped && i < nc; i++)
		cmap[(size_t) i * 3 + 1] = i;
	std::vector<int32_t> r((size_t) n),
				c((size_t) n);
	std::vector<float> v((size_t) n);
	int32_t    *hr = (int32_t *) malloc(sizeof(int32_t) * (size_t) n),
			   *hc = (int32_t *) malloc(sizeof(int32_t) * (size_t) n);
	float	   *hv = (float *) malloc(sizeof(float) * (size_t) n);
	gm_csr		ref,
				got;
	char		err[GM_ERRLEN] = "";
	double		sec[3];
	int			rc,
				taken = 0;

	for (int64_t i = 0; i < n; i++)
	{
		if (i > 0 && urand() < dup_share)
		{
			/* an earlier pair again */
			int64_t		j = (int64_t) (urand() * i);

			r[i] = r[j];
			c[i] = c[j];
		}
		else
		{
			r[i] = (int32_t) (urand() * nr);
			if (row_skip > 1)
				r[i] -= r[i] % row_skip;	/* only every row_skip-th row has entries */
			c[i] = (int32_t) (urand() * nc);
		}
		v[i] = (float) (nrand() * 3.0);
	}
	memcpy(hr, r.data(), sizeof(int32_t) * (size_t) n);
	memcpy(hc, c.data(), sizeof(int32_t) * (size_t) n);
	for (int64_t i = 0; mapped && i < n; i++)
	{
		hr[i] = r[i] * 3 + 1;
		hc[i] = c[i] * 3 + 1;
	}
	memcpy(hv, v.data(), sizeof(float) * (size_t) n);
	memset(&ref, 0, sizeof(ref));
	GM(gm_csr_from_coo(nr, nc, n, r.data(), c.data(), v.data(), &ref, err, sizeof(err)));
	std::vector<int64_t> cp((size_t) nc + 1, -1),
				cref((size_t) nc + 1, -2);

	GM(gm_csr_column_pointers(&ref, 0, NULL, cref.data()));
	rc = gm_cuda_csr_from_coo(nr, nc, n, &hr, &hc, &hv, mapped ? rmap.data() : NULL,
							  (int32_t) rmap.size(), mapped ? cmap.data() : NULL,
							  (int32_t) cmap.size(), keep, NULL, &got, cp.data(), sec, err,
							  sizeof(err));
	CHECK(rc == GM_OK && hr == NULL && hc == NULL && hv == NULL && got.nnz == ref.nnz && cp == cref &&
		  got.n_rows == ref.n_rows && got.n_cols == ref.n_cols &&
		  memcmp(got.indptr, ref.indptr, sizeof(int64_t) * ((size_t) nr + 1)) == 0 &&
		  memcmp(got.indices, ref.indices, sizeof(int32_t) * (size_t) ref.nnz) == 0 &&
		  memcmp(got.data, ref.data, sizeof(float) * (size_t) ref.nnz) == 0,
		  "CSR built on the GPU, %s (%d x %d, %lld pairs, %lld entries): the host's, bit for bit, "
		  "and its transpose's row pointers "
		  "(up %.3f s, sort and sums %.3f s, down %.3f s) %s", what, nr, nc, (long long) n,
		  (long long) ref.nnz, sec[0], sec[1], sec[2], err);
	if (keep && rc == GM_OK)
	{
		rc = gm_cuda_check_upload_equal(&got, &taken, err, sizeof(err));
		CHECK(rc == GM_OK && taken && gm_cuda_csr_kept_bytes() == 0,
			  "the copy kept on the GPU is what the CSR's upload takes (taken %d) %s", taken, err);
	}
	free(hr);
	free(hc);
	free(hv);
	gm_csr_free(&ref);
	gm_csr_free(&got);
}

static void
test_coo_csr_device(void)
{
	int32_t    *hr,
			   *hc;
	float	   *hv;
	gm_csr		got,
				plain;
	gm_callbacks cb;
	char		err[GM_ERRLEN] = "";
	int			rc,
				taken = 1;

	coo_case("random pairs, 10% again", 50000, 20000, 3000000, 0.10, 1, 0, 0);
	coo_case("every 7th row only, 30% again, kept", 70001, 3001, 2000000, 0.30, 7, 1, 0);
	coo_case("raw keys through maps, 5% again, kept", 40000, 9000, 2000000, 0.05, 1, 1, 1);
	coo_case("one entry", 5, 9, 1, 0.0, 1, 0, 0);
	coo_case("one pair 100,000 times", 3, 4, 100000, 1.0, 1, 1, 0);
	memset(&cb, 0, sizeof(cb));
	cb.should_stop = stop_always;
	hr = (int32_t *) calloc(1000, sizeof(int32_t));
	hc = (int32_t *) calloc(1000, sizeof(int32_t));
	hv = (float *) calloc(1000, sizeof(float));
	rc = gm_cuda_csr_from_coo(10, 10, 1000, &hr, &hc, &hv, NULL, 0, NULL, 0, 1, &cb, &got, NULL, NULL,
							  err, sizeof(err));
	CHECK(rc == GM_ECANCELED && hr == NULL && got.indptr == NULL && gm_cuda_csr_kept_bytes() == 0,
		  "a stop after the upload: canceled, the host's arrays freed, nothing kept (%s)", err);
	hr = (int32_t *) calloc(1000, sizeof(int32_t));
	hc = (int32_t *) calloc(1000, sizeof(int32_t));
	hv = (float *) calloc(1000, sizeof(float));
	hc[999] = 10;
	rc = gm_cuda_csr_from_coo(10, 10, 1000, &hr, &hc, &hv, NULL, 0, NULL, 0, 1, NULL, &got, NULL, NULL,
							  err, sizeof(err));
	CHECK(rc == GM_EINVAL && got.indptr == NULL && gm_cuda_csr_kept_bytes() == 0,
		  "a column out of range: an error, nothing kept (%s)", err);
	{
		int32_t		m[3] = {0, -1, 1};

		hr = (int32_t *) calloc(100, sizeof(int32_t));
		hc = (int32_t *) calloc(100, sizeof(int32_t));
		hv = (float *) calloc(100, sizeof(float));
		hc[50] = 1;				/* mapped to -1: a key never numbered */
		rc = gm_cuda_csr_from_coo(2, 2, 100, &hr, &hc, &hv, NULL, 0, m, 3, 0, NULL, &got, NULL,
								  NULL, err, sizeof(err));
		CHECK(rc == GM_EINVAL && got.indptr == NULL, "an entry its map sends to -1: an error (%s)", err);
	}
	/* another CSR than the kept one's host copy (equal, elsewhere) is copied, not taken */
	hr = (int32_t *) calloc(100, sizeof(int32_t));
	hc = (int32_t *) calloc(100, sizeof(int32_t));
	hv = (float *) calloc(100, sizeof(float));
	for (int i = 0; i < 100; i++)
	{
		hr[i] = i % 10;
		hc[i] = (i * 7) % 13;
		hv[i] = 1.0f + i;
	}
	rc = gm_cuda_csr_from_coo(10, 13, 100, &hr, &hc, &hv, NULL, 0, NULL, 0, 1, NULL, &got, NULL, NULL,
							  err, sizeof(err));
	memset(&plain, 0, sizeof(plain));
	if (rc == GM_OK)
	{
		std::vector<int32_t> r2(100),
					c2(100);
		std::vector<float> v2(100);

		for (int i = 0; i < 100; i++)
		{
			r2[i] = i % 10;
			c2[i] = (i * 7) % 13;
			v2[i] = 1.0f + i;
		}
		GM(gm_csr_from_coo(10, 13, 100, r2.data(), c2.data(), v2.data(), &plain, err, sizeof(err)));
		rc = gm_cuda_check_upload_equal(&plain, &taken, err, sizeof(err));
	}
	CHECK(rc == GM_OK && !taken && gm_cuda_csr_kept_bytes() > 0,
		  "another CSR than the kept one's host copy: uploaded, the kept one left (%s)", err);
	gm_cuda_csr_drop_kept();
	CHECK(gm_cuda_csr_kept_bytes() == 0, "the kept CSR dropped");
	gm_csr_free(&plain);
	gm_csr_free(&got);
}

/* 7: ranking metrics with the scores computed on the GPU equal the CPU's */
static void
test_rank_eval_gpu(void)
{
	dataset		d;
	int			k = 48;
	gm_rank_result rc,
				rg;

	make_dataset(&d, 3000, 1500, 150000, 8, 10, 0.6, 777, 1.0f);
	std::vector<float> X((size_t) d.A.n_rows * k),
				Y((size_t) d.A.n_cols * k);
	gm_csr		test;
	std::vector<float> ones(d.test_idx.size(), 1.0f);

	for (auto &x : X)
		x = (float) nrand();
	for (auto &y : Y)
		y = (float) nrand();
	test.n_rows = d.A.n_rows;
	test.n_cols = d.A.n_cols;
	test.nnz = (int64_t) d.test_idx.size();
	test.indptr = d.test_ptr.data();
	test.indices = d.test_idx.data();
	test.data = ones.data();
	GM(gm_rank_eval(&d.A, &test, X.data(), Y.data(), k, 20, 0, GM_BACKEND_CPU, NULL, &rc, err, sizeof(err)));
	GM(gm_rank_eval(&d.A, &test, X.data(), Y.data(), k, 20, 0, GM_BACKEND_CUDA, NULL, &rg, err, sizeof(err)));
	CHECK(rc.users == rg.users && fabs(rc.recall - rg.recall) < 1e-3 && fabs(rc.ndcg - rg.ndcg) < 1e-3,
		  "recall@20 / ndcg@20 with GPU scores %.6f / %.6f, CPU %.6f / %.6f (%lld users)",
		  rg.recall, rg.ndcg, rc.recall, rc.ndcg, (long long) rg.users);
	dataset_free(&d);
}

/* ============================================================ timing */

static double
median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? NAN : v[v.size() / 2];
}

static double sgemm_tflops,
			tf32_tflops,
			d2d_gbs;

static void
measure_ceilings(void)
{
	const int	n = 8192;
	float	   *a,
			   *b,
			   *c;
	cublasHandle_t h;
	cudaEvent_t e0,
				e1;
	const float one = 1.0f,
				zero = 0.0f;
	std::vector<double> t;
	size_t		bytes = (size_t) 1 << 31;

	CK(cudaMalloc(&a, 4 * (size_t) n * n));
	CK(cudaMalloc(&b, 4 * (size_t) n * n));
	CK(cudaMalloc(&c, 4 * (size_t) n * n));
	{
		std::vector<float> hv((size_t) n * n);

		for (auto &x : hv)
			x = (float) (urand() - 0.5);
		CK(cudaMemcpy(a, hv.data(), 4 * hv.size(), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(b, hv.data(), 4 * hv.size(), cudaMemcpyHostToDevice));
	}
	CB(cublasCreate(&h));
	CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < 8; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 2)
			t.push_back(ms);
	}
	sgemm_tflops = 2.0 * n * (double) n * n / (median(t) * 1e-3) / 1e12;
	/* the same product on tensor cores, TF32 inputs */
	CB(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
	t.clear();
	for (int r = 0; r < 8; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 2)
			t.push_back(ms);
	}
	tf32_tflops = 2.0 * n * (double) n * n / (median(t) * 1e-3) / 1e12;
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
	CK(cudaMalloc(&a, bytes));
	CK(cudaMalloc(&b, bytes));
	CK(cudaMemset(a, 1, bytes));
	t.clear();
	for (int r = 0; r < 8; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 2)
			t.push_back(ms);
	}
	d2d_gbs = 2.0 * bytes / (median(t) * 1e-3) / 1e9;
	cudaFree(a);
	cudaFree(b);
	cublasDestroy(h);
	printf("ceilings: FP32 sgemm (8192^3, no TF32) %.1f TFLOP/s; TF32 tensor-core sgemm %.1f TFLOP/s; "
		   "device-to-device copy %.0f GB/s (read + write)\n", sgemm_tflops, tf32_tflops, d2d_gbs);
}

/* One solver configuration's timing and quality at one k. */
struct result
{
	int			k;
	const char *label;
	double		ms,
				floor_ms,
				flop_ms,
				byte_ms,
				gflop,
				loss,
				p10;
	bool		has;
};

/*
 * FLOPs of one iteration (both sides) for a solver, counted from the
 * algorithm: CG per side 2 m k^2 (G) + (cg + 1)(2 n k^2 + 4 nnz k);
 * block (b, passes) per side 2 m k^2 + passes (2 n k^2 (the H products)
 * + 2 nnz k b (the b x b Grams, full) + 4 nnz k (r and the predictions)
 * + n k b^2 / 3 (the solves)); the baseline as CG.  Bytes: the CSR of both
 * sides and each factor matrix read once and written once.
 */
static void
floors(const dataset *d, int k, int block, int passes, int cg, int tf32, result *r)
{
	int32_t		n[2] = {d->C.n_rows, d->C.n_cols};
	double		nnz = (double) d->C.nnz,
				fl = 0.0,
				tc = 0.0,		/* of fl, what runs on tensor cores with tf32 */
				by = 0.0,
				kk = k;

	for (int s = 0; s < 2; s++)
	{
		fl += 2.0 * n[1 - s] * kk * kk;
		if (block == 0)
		{
			fl += (cg + 1.0) * (2.0 * n[s] * kk * kk + 4.0 * nnz * kk);
			tc += (cg + 1.0) * 2.0 * n[s] * kk * kk;
		}
		else
		{
			fl += passes * (2.0 * n[s] * kk * kk + 2.0 * nnz * kk * block + 4.0 * nnz * kk +
							n[s] * kk * block * block / 3.0);
			tc += passes * 2.0 * nnz * kk * block;
		}
		by += 8.0 * (n[s] + 1) + 8.0 * nnz + 4.0 * n[1 - s] * kk + 8.0 * n[s] * kk;
	}
	if (!tf32)
		tc = 0.0;
	r->gflop = fl / 1e9;
	r->flop_ms = ((fl - tc) / (sgemm_tflops * 1e12) + tc / (tf32_tflops * 1e12)) * 1e3;
	r->byte_ms = by / (d2d_gbs * 1e9) * 1e3;
	r->floor_ms = std::max(r->flop_ms, r->byte_ms);
}

/* The seed's baseline kernel: iterations 3..iters timed, loss and p@10. */
static void
bench_baseline(const dataset *d, int k, int iters, int cg, float reg,
			   const std::vector<int32_t> &sample, result *res)
{
	std::vector<float> X((size_t) d->C.n_rows * k),
				Y((size_t) d->C.n_cols * k);
	std::vector<double> t;
	std::vector<int32_t> rec;
	cudaEvent_t e0,
				e1;
	baseline	b;

	res->k = k;
	res->label = "seed baseline (CG)";
	res->has = true;
	floors(d, k, 0, 1, cg, 0, res);
	gm_factors_init(X.data(), d->C.n_rows, k, 42, 0);
	gm_factors_init(Y.data(), d->C.n_cols, k, 42, 1);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	base_create(&b, &d->C, &d->Ct, X.data(), Y.data(), k);
	for (int it = 0; it < iters; it++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		base_half(&b, 0, reg, cg);
		base_half(&b, 1, reg, cg);
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (it >= 2)
			t.push_back(ms);
	}
	fill_nan(X.data(), X.size());
	fill_nan(Y.data(), Y.size());
	CK(cudaMemcpy(X.data(), b.F[0], 4 * X.size(), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(Y.data(), b.F[1], 4 * Y.size(), cudaMemcpyDeviceToHost));
	base_destroy(&b);
	res->ms = median(t);
	res->loss = gm_als_loss(&d->C, X.data(), Y.data(), k, reg, 0);
	top10(d, X.data(), Y.data(), k, sample, rec);
	res->p10 = precision10(d, sample, rec);
	printf("  k=%d %s: %.3f ms/iteration, loss %.8f, p@10 %.4f\n", k, res->label, res->ms,
		   res->loss, res->p10);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

/*
 * gpumf's solver p through its table of operations, every sweep in one
 * slice: iterations 3..iters timed (CUDA events), then the loss (the CPU
 * core's function on the downloaded factors) and p@10 on the sample.
 */
static void
bench_solver(const dataset *d, const gm_mf_params &p, const char *label, int iters,
			 const std::vector<int32_t> &sample, result *res)
{
	int			k = p.factors;
	std::vector<float> X((size_t) d->C.n_rows * k),
				Y((size_t) d->C.n_cols * k);
	std::vector<double> t;
	std::vector<int32_t> rec;
	cudaEvent_t e0,
				e1;
	gpu_als		g;
	size_t		bad;

	res->k = k;
	res->label = label;
	res->has = true;
	floors(d, k, p.solver == GM_SOLVER_CG ? 0 :
		   p.solver == GM_SOLVER_EXACT ? gm_padded_k(k) : std::max(32, gm_block_size(&p)),
		   p.block_sweeps, p.cg_steps, p.tf32, res);
	gm_factors_init(X.data(), d->C.n_rows, k, 42, 0);
	gm_factors_init(Y.data(), d->C.n_cols, k, 42, 1);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	ga_create_p(&g, &d->A, &d->At, X.data(), Y.data(), &p);
	for (int it = 0; it < iters; it++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		ga_iteration(&g);
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		ga_sync(&g);
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (it >= 2)
			t.push_back(ms);
	}
	fill_nan(X.data(), X.size());
	fill_nan(Y.data(), Y.size());
	ga_get(&g, X.data(), Y.data());
	ga_destroy(&g);
	bad = count_nonfinite(X.data(), X.size()) + count_nonfinite(Y.data(), Y.size());
	res->ms = median(t);
	res->loss = gm_als_loss(&d->C, X.data(), Y.data(), k, p.regularization, 0);
	top10(d, X.data(), Y.data(), k, sample, rec);
	res->p10 = precision10(d, sample, rec);
	printf("  k=%d %s: %.3f ms/iteration (floor %.3f: %.1f GFLOP), loss %.8f, p@10 %.4f, %zu nonfinite\n",
		   k, label, res->ms, res->floor_ms, res->gflop, res->loss, res->p10, bad);
	checks++;
	if (bad)
		failures++;
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

/*
 * --multi ROWS: test_multi_gpu, then implicit ALS (CG 3 steps, k 128, 5
 * iterations, as test/bench/scale/ trains) on a synthetic set of ROWS
 * interactions over 8M users x 2M items: the training phase on one GPU,
 * on every visible GPU (two or more) with the rows pushed after each slice
 * (gm_share_push), and the same with the all-gather after each side
 * (GM_SHARE_PUSH=0), one table.
 */
static void
multi_timing(int64_t rows)
{
	dataset		d;
	int			visible = 0;
	const int	k = 128;
	double		base = 0.0;

	cudaGetDeviceCount(&visible);
	make_dataset(&d, 8000000, 2000000, rows, 5, 40, 0.5, 2026, 1.0f);
	printf("\n| implicit ALS, CG 3, k %d, %lld interactions, 8M x 2M, 5 iterations | GPUs | exchange | train s | loss s | transfer s | speed-up | final loss |\n|---|---|---|---|---|---|---|---|\n",
		   k, (long long) d.A.nnz);
	for (int c = 0; c < 3; c++)
	{
		int			g = c == 0 ? 1 : visible;
		gm_mf_params p = gpu_params(k, 3, 0.05f, 1.0f);
		gm_mf_data	dd;
		gm_mf_result r;
		std::vector<float> X((size_t) d.A.n_rows * k),
					Y((size_t) d.A.n_cols * k);

		if (c > 0 && visible < 2)
			break;
		if (c == 2)
			setenv("GM_SHARE_PUSH", "0", 1);
		p.iterations = 5;
		p.gpus = g;
		p.tf32 = 0;
		gm_factors_init(X.data(), d.A.n_rows, k, 42, 0);
		gm_factors_init(Y.data(), d.A.n_cols, k, 42, 1);
		memset(&dd, 0, sizeof(dd));
		dd.R = &d.A;
		dd.Rt = &d.At;
		dd.X = X.data();
		dd.Y = Y.data();
		GM(gm_mf_train(&p, &dd, NULL, &r, err, sizeof(err)));
		unsetenv("GM_SHARE_PUSH");
		if (c == 0)
			base = r.train_seconds;
		printf("| %s | %d | %s | %.3f | %.3f | %.3f | %.2fx | %.8g |\n", r.device_name, g,
			   c == 0 ? "none" : c == 1 ? "pushed after each slice" : "all-gather after each side",
			   r.train_seconds, r.loss_seconds, r.transfer_seconds, base / r.train_seconds, r.final.loss);
	}
	dataset_free(&d);
}

int
main(int argc, char **argv)
{
	const char *module = "cuda/gpumf_cuda.so";
	bool		quick = false;
	bool		timing = false;
	int			profile_k = 0;
	std::vector<int> ks = {64, 128, 256, 512, 1024};
	int			queue = 1;		/* --chunk-queue: 0 off, 1 on (the default), 2 both (checks with it on) */
	int64_t		multi_rows = 0;	/* --multi ROWS */
	int			count = 0;
	char		name[128];

	for (int i = 1; i < argc; i++)
	{
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--timing"))
			timing = true;
		else if (!strcmp(argv[i], "--module") && i + 1 < argc)
			module = argv[++i];
		else if (!strcmp(argv[i], "--chunk-queue") && i + 1 < argc)
		{
			i++;
			queue = !strcmp(argv[i], "on") ? 1 : !strcmp(argv[i], "both") ? 2 : 0;
		}
		else if (!strcmp(argv[i], "--profile") && i + 1 < argc)
			profile_k = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--multi") && i + 1 < argc)
			multi_rows = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--k") && i + 1 < argc)
		{
			ks.clear();
			for (char *s = strtok(argv[++i], ","); s; s = strtok(NULL, ","))
				ks.push_back(atoi(s));
		}
	}
	GM(gm_cuda_probe(&count, name, sizeof(name), err, sizeof(err)));
	if (count < 1)
	{
		printf("no GPU: %s\n", err);
		return 1;
	}
	printf("device: %s (%d visible)\n", name, count);
	setvbuf(stdout, NULL, _IOLBF, 0);
	gm_cuda_set_chunk_queue(queue != 0);
	printf("chunk queue: %s\n", queue == 0 ? "off" : queue == 1 ? "on" : "on for the checks, both timed");

	if (multi_rows > 0)
	{
		/* the several-GPU checks and timing alone, through the core's loop and the module */
		rng_state = (uint64_t) time(NULL);
		if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
		{
			printf("gm_cuda_available(%s): %s\n", module, err);
			return 1;
		}
		test_multi_gpu();
		multi_timing(multi_rows);
		printf("\n%d passed, %d failed\n", checks - failures, failures);
		return failures ? 1 : 0;
	}
	if (profile_k > 0)
	{
		/* for a profiler: three iterations of block 32 on the ML-20M shape, nothing else */
		dataset		d;
		gm_mf_params p = gpu_params(profile_k, 3, 0.05f, 2.0f);
		std::vector<float> X((size_t) 138493 * profile_k),
					Y((size_t) 26744 * profile_k);
		gpu_als		g;

		make_dataset(&d, 138493, 26744, 20000263, 20, 40, 0.5, 2024, 2.0f);
		gm_factors_init(X.data(), d.A.n_rows, profile_k, 42, 0);
		gm_factors_init(Y.data(), d.A.n_cols, profile_k, 42, 1);
		p.solver = GM_SOLVER_BLOCK;
		p.block_size = 32;
		p.tf32 = 0;
		ga_create_p(&g, &d.A, &d.At, X.data(), Y.data(), &p);
		for (int it = 0; it < 3; it++)
			ga_iteration(&g);
		ga_sync(&g);
		ga_destroy(&g);
		dataset_free(&d);
		printf("profile run done\n");
		return 0;
	}
	if (!timing)
	{
		printf("== correctness\n");
		rng_state = (uint64_t) time(NULL);	/* fresh inputs every run */
		printf("  (random seed %llu)\n", (unsigned long long) rng_state);
		test_exact(32);
		test_exact(50);
		test_exact(64);
		test_exact(128);
		test_exact(200);
		test_exact(300);
		test_vs_cpu(64, 4, 15);
		test_vs_cpu(50, 3, 15);
		test_vs_cpu(128, 3, 15);
		test_vs_cpu(256, 2, 15);
		test_train_backend(module, 32);
		test_lean();
		test_early_download();
		test_device_transpose();
		test_staged_copy();
		test_coo_csr_device();
		/* the general model: exact solves (one block), block solves */
		test_general_solve(32, GM_SOLVER_EXACT, 0, 1, 0.1f, 0.7f);
		test_general_solve(50, GM_SOLVER_EXACT, 0, 1, 0.5f, 0.0f);
		test_general_solve(64, GM_SOLVER_EXACT, 0, 1, 1.0f, 1.0f);
		test_general_solve(64, GM_SOLVER_BLOCK, 32, 1, 0.2f, 0.5f);
		test_general_solve(50, GM_SOLVER_BLOCK, 32, 2, 0.05f, 0.0f);
		test_general_solve(200, GM_SOLVER_BLOCK, 32, 1, 0.3f, 1.0f);
		test_general_solve(256, GM_SOLVER_BLOCK, 64, 1, 0.1f, 0.3f);
		test_general_solve(300, GM_SOLVER_BLOCK, 32, 1, 0.02f, 0.0f);
		test_general_solve(96, GM_SOLVER_BLOCK, 32, 40, 0.5f, 0.2f);
		test_general_solve(128, GM_SOLVER_BLOCK, 64, 40, 0.5f, 0.0f);
		test_general_solve(64, GM_SOLVER_CG, 0, 1, 0.3f, 0.5f);
		test_general_solve(200, GM_SOLVER_CG, 0, 1, 0.05f, 1.0f);
		test_general_solve(128, GM_SOLVER_BLOCK, 32, 1, 0.1f, 0.5f, 1);
		test_general_solve(256, GM_SOLVER_BLOCK, 64, 1, 0.1f, 0.0f, 1);
		test_general_solve(96, GM_SOLVER_BLOCK, 32, 40, 0.5f, 0.2f, 1);
		test_general_solve(128, GM_SOLVER_BLOCK, 64, 40, 0.2f, 0.0f, 1);
		{
			gm_mf_params p;

			gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
			p.regularization = 0.05f;
			p.alpha = 2.0f;
			p.factors = 64;
			p.alpha0 = 0.3f;
			p.nu = 0.5f;
			/*
			 * 8 CG steps here: with 3 from the tiny start at this alpha0 the
			 * first iteration's loss moves by 1e-3 when the start moves by 1e-6
			 * (measured on the CPU alone): truncated CG, not the backends
			 */
			p.cg_steps = 8;
			test_backends("cg 8", p, 12);
			p.cg_steps = 3;
			p.factors = 50;
			p.alpha0 = 1.0f;
			p.nu = 0.0f;
			test_backends("cg 3 (2008 form)", p, 12);
			p.solver = GM_SOLVER_EXACT;
			p.factors = 64;
			p.alpha0 = 0.1f;
			p.nu = 1.0f;
			p.regularization = 1e-4f;
			test_backends("exact", p, 10);
			p.solver = GM_SOLVER_BLOCK;
			p.block_size = 32;
			p.factors = 128;
			p.alpha0 = 0.1f;
			p.nu = 0.0f;
			p.regularization = 0.1f;
			test_backends("block 32", p, 15);
			p.factors = 200;
			p.nu = 1.0f;
			p.regularization = 1e-4f;
			test_backends("block 32, k=200 (padded 224)", p, 15);
			p.factors = 256;
			p.block_size = 64;
			p.block_sweeps = 2;
			p.nu = 0.0f;
			p.regularization = 0.1f;
			test_backends("block 64 x 2", p, 10);
			/* tensor cores: a different trajectory, the same model */
			p.block_sweeps = 1;
			p.tf32 = 1;
			test_backends("block 64 tf32", p, 10, 1e-2, 8.0);
			p.factors = 128;
			p.block_size = 32;
			test_backends("block 32 tf32", p, 10, 1e-2, 8.0);
			p.solver = GM_SOLVER_CG;
			test_backends("cg 3 tf32", p, 10, 1e-2, 8.0);
		}
		test_session_gpu();
		test_multi_gpu();
		test_rank_eval_gpu();
		{
			/* errors are reported, not crashes */
			const gm_algo_ops *ops = gm_cuda_algo_ops(GM_ALG_ALS_IMPLICIT);
			int64_t		ip[2] = {0, 0};
			float		f = 0.f;
			gm_csr		one = {1, 1, 0, ip, NULL, NULL, NULL, 0, 0};
			gm_mf_data	dd;
			gm_mf_params p = gpu_params(4096, 3, 0.1f, 1.0f);
			void	   *h = &f;
			char		name[128];
			int			rc;

			memset(&dd, 0, sizeof(dd));
			dd.R = &one;
			dd.Rt = &one;
			dd.X = &f;
			dd.Y = &f;
			rc = ops->create(&h, &dd, &p, NULL, name, sizeof(name), err, sizeof(err));
			CHECK(rc == GM_EINVAL && h == NULL, "k=4096 refused: rc %d: %s", rc, err);
			p = gpu_params(100, 3, 0.1f, 1.0f);
			p.solver = GM_SOLVER_EXACT;
			h = &f;
			rc = ops->create(&h, &dd, &p, NULL, name, sizeof(name), err, sizeof(err));
			CHECK(rc == GM_ENOTSUP && h == NULL, "exact solver above 64 factors refused on the GPU: rc %d: %s", rc, err);
			CHECK(gm_cuda_abi_version() == GM_ALGO_ABI_VERSION, "module ABI version %d, core %d",
				  gm_cuda_abi_version(), GM_ALGO_ABI_VERSION);
		}
		if (quick)
		{
			printf("%s\n", failures ? "CORRECTNESS FAILED" : "correctness ok");
			printf("%d passed, %d failed\n", checks - failures, failures);
			return failures ? 1 : 0;
		}
	}

	printf("== timing\n");
	measure_ceilings();
	dataset		d;
	double		t0 = gm_now();

	/* ML-20M shape: 138,493 users x 26,744 items, 20,000,263 rows, >= 20 per user */
	make_dataset(&d, 138493, 26744, 20000263, 20, 40, 0.5, 2024, 2.0f);
	int64_t		maxr = 0,
				maxc = 0;

	for (int32_t u = 0; u < d.C.n_rows; u++)
		maxr = std::max(maxr, d.C.indptr[u + 1] - d.C.indptr[u]);
	for (int32_t i = 0; i < d.C.n_cols; i++)
		maxc = std::max(maxc, d.Ct.indptr[i + 1] - d.Ct.indptr[i]);
	printf("dataset: %d users x %d items, %lld train nonzeros (%.1f%% of 20,000,263), %zu held out; "
		   "longest row %lld, longest column %lld; built in %.1f s\n",
		   d.C.n_rows, d.C.n_cols, (long long) d.C.nnz, 100.0 * d.C.nnz / 20000263.0,
		   d.test_idx.size(), (long long) maxr, (long long) maxc, gm_now() - t0);

	std::vector<int32_t> sample;

	for (int32_t u = 0; u < d.C.n_rows && sample.size() < 10000; u += 13)
		sample.push_back(u);

	int			iters = 15,
				cg = 3;
	float		reg = 0.05f;
	const int	nsolv = 10;
	std::vector<result> res(ks.size() * nsolv);

	for (size_t j = 0; j < ks.size(); j++)
	{
		int			k = ks[j];
		gm_mf_params p = gpu_params(k, cg, reg, d.alpha);
		result	   *r = &res[j * nsolv];

		p.tf32 = 0;

		if (k <= 256 && !timing)
			bench_baseline(&d, k, iters, cg, reg, sample, &r[0]);
		bench_solver(&d, p, "gpumf CG 3", iters, sample, &r[1]);
		p.tf32 = 1;
		bench_solver(&d, p, "gpumf CG 3, TF32 V G", iters, sample, &r[2]);
		p.tf32 = 0;
		p.solver = GM_SOLVER_BLOCK;
		p.block_size = 32;
		bench_solver(&d, p, "gpumf block 32 x 1", iters, sample, &r[3]);
		p.tf32 = 1;
		bench_solver(&d, p, "gpumf block 32 x 1, TF32 Grams", iters, sample, &r[4]);
		if (gm_padded_k(k) % 64 == 0 && gm_padded_k(k) > 64)
		{
			p.block_size = 64;
			p.tf32 = 0;
			bench_solver(&d, p, "gpumf block 64 x 1", iters, sample, &r[5]);
			p.tf32 = 1;
			bench_solver(&d, p, "gpumf block 64 x 1, TF32 Grams", iters, sample, &r[6]);
		}
		if (gm_padded_k(k) <= 64)
		{
			p.solver = GM_SOLVER_EXACT;
			p.tf32 = 0;
			bench_solver(&d, p, "gpumf exact", iters, sample, &r[7]);
		}
		if (queue == 2)
		{
			/* rows 1 and 3 again with the other scheduling of the chunks */
			gm_cuda_set_chunk_queue(0);
			p = gpu_params(k, cg, reg, d.alpha);
			p.tf32 = 0;
			bench_solver(&d, p, "gpumf CG 3, no chunk queue", iters, sample, &r[8]);
			p.solver = GM_SOLVER_BLOCK;
			p.block_size = 32;
			bench_solver(&d, p, "gpumf block 32 x 1, no chunk queue", iters, sample, &r[9]);
			gm_cuda_set_chunk_queue(1);
			for (int v = 0; v < 2; v++)
			{
				const result *a = &r[v == 0 ? 1 : 3],
						   *b = &r[8 + v];

				CHECK(fabs(a->loss - b->loss) <= 1e-4 * fabs(b->loss) && fabs(a->p10 - b->p10) < 0.005,
					  "k=%d %s: chunk queue vs none, loss %.8f vs %.8f, p@10 %.4f vs %.4f, %.2f vs %.2f ms",
					  k, v == 0 ? "CG 3" : "block 32", a->loss, b->loss, a->p10, b->p10, a->ms, b->ms);
			}
		}
	}

	printf("\n## ALS iteration time (both half-steps, Gram matrices included), ML-20M shape, lambda %g, alpha %g, "
		   "median of iterations 3..%d; loss (2008 model) and p@10 on %zu held-out users after %d iterations\n\n",
		   reg, d.alpha, iters, sample.size(), iters);
	printf("Floor: FLOPs at the measured FP32 sgemm rate (%.1f TFLOP/s), the TF32 rows' tensor-core part (block: the b x b Grams; "
		   "CG: the dense products V G) at the measured TF32 sgemm rate (%.1f TFLOP/s); bytes at %.0f GB/s\n\n",
		   sgemm_tflops, tf32_tflops, d2d_gbs);
	printf("| k | solver | ms / iteration | GFLOP / iteration | floor ms (flop / bytes) | ms / floor | vs CG | loss | p@10 |\n");
	printf("|---|---|---|---|---|---|---|---|---|\n");
	for (size_t j = 0; j < ks.size(); j++)
		for (int v = 0; v < nsolv; v++)
		{
			const result *r = &res[j * nsolv + v];
			const result *c = &res[j * nsolv + 1];

			if (!r->has)
				continue;
			printf("| %d | %s | %.2f | %.0f | %.2f (%.2f / %.2f) | %.1fx | %.2fx | %.6f | %.4f |\n",
				   r->k, r->label, r->ms, r->gflop, r->floor_ms, r->flop_ms, r->byte_ms,
				   r->ms / r->floor_ms, c->ms / r->ms, r->loss, r->p10);
		}
	/* the CG kernel must still beat the seed's baseline and match its quality */
	for (size_t j = 0; j < ks.size(); j++)
	{
		const result *b = &res[j * nsolv];
		const result *c = &res[j * nsolv + 1];

		if (!b->has)
			continue;
		CHECK(fabs(c->loss - b->loss) < 0.01 * fabs(b->loss) && fabs(c->p10 - b->p10) < 0.005 &&
			  b->ms / c->ms >= 5.0,
			  "k=%d CG vs the seed's baseline: %.1fx faster, loss rel diff %.1e, p@10 %.4f vs %.4f",
			  c->k, b->ms / c->ms, fabs(c->loss - b->loss) / fabs(b->loss), c->p10, b->p10);
	}
	printf("\n%s\n", failures ? "SOME CHECKS FAILED" : "all checks passed");
	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
