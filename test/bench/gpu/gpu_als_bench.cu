/*
 * gpu_als_bench.cu: correctness and speed of gpumf's CUDA implicit ALS
 * (cuda/als_implicit.cu, driven through its table of operations from
 * gm_cuda_algo_ops) against a float64 reference, the CPU core (src/core) and
 * the seed's baseline kernel (SEEDS.md section 1), which is reproduced below.
 *
 * No PostgreSQL.  Usage: gpu_als_bench [--quick] [--module path/to/gpumf_cuda.so]
 */
#include "../../../src/core/gm_core.h"
#include "../../../cuda/common.cuh"	/* the module's exported entry points */

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CK(call) \
	do { \
		cudaError_t e_ = (call); \
		if (e_ != cudaSuccess) { \
			fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
			exit(2); \
		} \
	} while (0)
#define CB(call) \
	do { \
		cublasStatus_t s_ = (call); \
		if (s_ != CUBLAS_STATUS_SUCCESS) { \
			fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cublasGetStatusString(s_), __FILE__, __LINE__); \
			exit(2); \
		} \
	} while (0)
#define GM(call) \
	do { \
		int rc_ = (call); \
		if (rc_ != 0) { \
			fprintf(stderr, "%s failed (%d): %s (%s:%d)\n", #call, rc_, err, __FILE__, __LINE__); \
			exit(2); \
		} \
	} while (0)

static char err[GM_ERRLEN];
static int	failures = 0;
static int	checks = 0;		/* for the closing "N passed, M failed" line */

#define CHECK(cond, ...) \
	do { \
		printf("  [%s] ", (cond) ? "ok" : "FAIL"); \
		printf(__VA_ARGS__); \
		printf("\n"); \
		checks++; \
		if (!(cond)) failures++; \
	} while (0)

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
};

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

	GM(g->ops->begin_sweep(g->h, side, sw ? sw : &s, err, sizeof(err)));
}

static void
ga_run(gpu_als *g, int side, int32_t b, int32_t e)
{
	GM(g->ops->run(g->h, side, b, e, err, sizeof(err)));
}

static void
ga_sync(gpu_als *g)
{
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

/* ============================================================ timing */

static double
median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? NAN : v[v.size() / 2];
}

static double sgemm_tflops,
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
	printf("ceilings: FP32 sgemm (8192^3, no TF32) %.1f TFLOP/s; device-to-device copy %.0f GB/s (read + write)\n",
		   sgemm_tflops, d2d_gbs);
}

struct result
{
	int			k;
	double		base_ms,
				gm_ms,
				phase[4],
				sliced_ms[3],
				floor_ms,
				flop_ms,
				byte_ms;
	double		base_loss,
				gm_loss,
				gm_loss_gpu;
	double		base_p10,
				gm_p10;
	int			nslices[3];
};

static void
bench_k(const dataset *d, int k, int iters, int cg, float reg, const std::vector<int32_t> &sample,
		result *res, FILE *log)
{
	int32_t		nu = d->C.n_rows,
				ni = d->C.n_cols;
	int64_t		nnz = d->C.nnz;
	std::vector<float> X0((size_t) nu * k),
				Y0((size_t) ni * k),
				X((size_t) nu * k),
				Y((size_t) ni * k);
	cudaEvent_t e0,
				e1;
	std::vector<double> tb,
				tg,
				ts;
	std::vector<int32_t> rec;

	res->k = k;
	gm_factors_init(X0.data(), nu, k, 42, 0);
	gm_factors_init(Y0.data(), ni, k, 42, 1);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));

	/* floor: FLOPs of the algorithm and the fewest bytes, per iteration */
	{
		double		fl = 0.0,
					by = 0.0;
		int32_t		n[2] = {nu, ni};

		for (int s = 0; s < 2; s++)
		{
			fl += 2.0 * n[1 - s] * (double) k * k;	/* gram */
			fl += (cg + 1.0) * (2.0 * n[s] * (double) k * k + 4.0 * nnz * (double) k);
			by += 8.0 * (n[s] + 1) + 8.0 * nnz + 4.0 * n[1 - s] * k + 8.0 * n[s] * k;
		}
		res->flop_ms = fl / (sgemm_tflops * 1e12) * 1e3;
		res->byte_ms = by / (d2d_gbs * 1e9) * 1e3;
		res->floor_ms = std::max(res->flop_ms, res->byte_ms);
		fprintf(log, "k=%d floor: %.1f GFLOP -> %.3f ms at %.1f TFLOP/s; %.1f MB -> %.3f ms at %.0f GB/s\n",
				k, fl / 1e9, res->flop_ms, sgemm_tflops, by / 1e6, res->byte_ms, d2d_gbs);
	}

	/* baseline */
	{
		baseline	b;

		base_create(&b, &d->C, &d->Ct, X0.data(), Y0.data(), k);
		for (int it = 0; it < iters; it++)
		{
			float		ms;

			CK(cudaEventRecord(e0));
			base_half(&b, 0, reg, cg);
			base_half(&b, 1, reg, cg);
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			fprintf(log, "k=%d baseline iteration %d: %.3f ms\n", k, it + 1, ms);
			if (it >= 2)
				tb.push_back(ms);
		}
		fill_nan(X.data(), X.size());
		fill_nan(Y.data(), Y.size());
		CK(cudaMemcpy(X.data(), b.F[0], 4 * X.size(), cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(Y.data(), b.F[1], 4 * Y.size(), cudaMemcpyDeviceToHost));
		base_destroy(&b);
		res->base_loss = gm_als_loss(&d->C, X.data(), Y.data(), k, reg, 0);
		top10(d, X.data(), Y.data(), k, sample, rec);
		res->base_p10 = precision10(d, sample, rec);
		fprintf(log, "k=%d baseline: loss %.8f p@10 %.4f (%zu nonfinite)\n", k, res->base_loss,
				res->base_p10, count_nonfinite(X.data(), X.size()) + count_nonfinite(Y.data(), Y.size()));
	}

	/* gpumf */
	{
		gpu_als		g;

		ga_create(&g, &d->A, &d->At, X0.data(), Y0.data(), k, cg, reg, d->alpha);
		for (int it = 0; it < iters; it++)
		{
			float		ms;

			CK(cudaEventRecord(e0));
			ga_begin(&g, 0);
			ga_run(&g, 0, 0, nu);
			ga_begin(&g, 1);
			ga_run(&g, 1, 0, ni);
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			ga_sync(&g);
			CK(cudaEventElapsedTime(&ms, e0, e1));
			fprintf(log, "k=%d gpumf iteration %d: %.3f ms\n", k, it + 1, ms);
			if (it >= 2)
				tg.push_back(ms);
		}
		res->gm_loss_gpu = ga_loss(&g);
		fill_nan(X.data(), X.size());
		fill_nan(Y.data(), Y.size());
		ga_get(&g, X.data(), Y.data());
		size_t		bad = count_nonfinite(X.data(), X.size()) + count_nonfinite(Y.data(), Y.size());

		res->gm_loss = gm_als_loss(&d->C, X.data(), Y.data(), k, reg, 0);
		top10(d, X.data(), Y.data(), k, sample, rec);
		res->gm_p10 = precision10(d, sample, rec);
		fprintf(log, "k=%d gpumf: loss (cpu fn) %.8f (gpu fn) %.8f p@10 %.4f (%zu nonfinite)\n", k,
				res->gm_loss, res->gm_loss_gpu, res->gm_p10, bad);
		checks++;
		if (bad)
			failures++;

		/* where the time goes: gram and solve of each side (events between) */
		{
			std::vector<double> ph[4];
			cudaEvent_t ev[5];

			for (int j = 0; j < 5; j++)
				CK(cudaEventCreate(&ev[j]));
			for (int it = 0; it < 5; it++)
			{
				CK(cudaEventRecord(ev[0]));
				ga_begin(&g, 0);
				CK(cudaEventRecord(ev[1]));
				ga_run(&g, 0, 0, nu);
				CK(cudaEventRecord(ev[2]));
				ga_begin(&g, 1);
				CK(cudaEventRecord(ev[3]));
				ga_run(&g, 1, 0, ni);
				CK(cudaEventRecord(ev[4]));
				CK(cudaEventSynchronize(ev[4]));
				for (int j = 0; j < 4; j++)
				{
					float		ms;

					CK(cudaEventElapsedTime(&ms, ev[j], ev[j + 1]));
					ph[j].push_back(ms);
				}
			}
			res->phase[0] = median(ph[0]);
			res->phase[1] = median(ph[1]);
			res->phase[2] = median(ph[2]);
			res->phase[3] = median(ph[3]);
			fprintf(log, "k=%d gpumf phases (median of 5): gram for users %.3f ms, user solve %.3f ms, "
					"gram for items %.3f ms, item solve %.3f ms\n", k, res->phase[0], res->phase[1],
					res->phase[2], res->phase[3]);
			for (int j = 0; j < 5; j++)
				cudaEventDestroy(ev[j]);
		}

		/*
		 * iterations in the slices gm_mf_train cuts (src/core/mf_loop.c:
		 * rows while the work, row_work + nnz_work * len from begin_sweep,
		 * is under the budget; 2^32 is what it uses on CUDA)
		 */
		for (int bi = 0; bi < 3; bi++)
		{
			double		budget = bi == 0 ? 268435456.0 : bi == 1 ? 1073741824.0 : 4294967296.0;
			int			nslices = 0;

			ts.clear();
			for (int it = 0; it < 4; it++)
			{
				float		ms;

				nslices = 0;
				CK(cudaEventRecord(e0));
				for (int side = 0; side < 2; side++)
				{
					gm_sweep	sw;

					ga_begin(&g, side, &sw);
					for (int32_t b = 0; b < sw.n_rows;)
					{
						double		work = 0.0;
						int32_t		e = b;

						while (e < sw.n_rows && (e == b || work < budget))
						{
							work += sw.row_work + sw.nnz_work * (double) (sw.indptr[e + 1] - sw.indptr[e]);
							e++;
						}
						ga_run(&g, side, b, e);
						nslices++;
						b = e;
					}
				}
				CK(cudaEventRecord(e1));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms, e0, e1));
				if (it >= 1)
					ts.push_back(ms);
			}
			res->sliced_ms[bi] = median(ts);
			res->nslices[bi] = nslices;
			fprintf(log, "k=%d gpumf sliced, budget 2^%d multiply-adds: %d slices, %.3f ms\n",
					k, 28 + 2 * bi, nslices, res->sliced_ms[bi]);
		}
		ga_destroy(&g);
	}
	res->base_ms = median(tb);
	res->gm_ms = median(tg);
	fprintf(log, "k=%d median ms: baseline %.3f gpumf %.3f\n", k, res->base_ms, res->gm_ms);
	fflush(log);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

int
main(int argc, char **argv)
{
	const char *module = "cuda/gpumf_cuda.so";
	bool		quick = false;
	std::vector<int> ks = {64, 128, 256};
	int			count = 0;
	char		name[128];

	for (int i = 1; i < argc; i++)
	{
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--module") && i + 1 < argc)
			module = argv[++i];
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
	{
		/* errors are reported, not crashes */
		const gm_algo_ops *ops = gm_cuda_algo_ops(GM_ALG_ALS_IMPLICIT);
		int64_t		ip[2] = {0, 0};
		float		f = 0.f;
		gm_csr		one = {1, 1, 0, ip, NULL, NULL};
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
		p = gpu_params(8, 3, 0.1f, 1.0f);
		p.alpha0 = 0.5f;
		h = &f;
		rc = ops->create(&h, &dd, &p, NULL, name, sizeof(name), err, sizeof(err));
		CHECK(rc == GM_ENOTSUP && h == NULL, "alpha0 != 1 not supported yet: rc %d: %s", rc, err);
		CHECK(gm_cuda_abi_version() == GM_ALGO_ABI_VERSION, "module ABI version %d, core %d",
			  gm_cuda_abi_version(), GM_ALGO_ABI_VERSION);
	}
	if (quick)
	{
		printf("%s\n", failures ? "CORRECTNESS FAILED" : "correctness ok");
		printf("%d passed, %d failed\n", checks - failures, failures);
		return failures ? 1 : 0;
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

	FILE	   *log = stdout;
	std::vector<result> res(ks.size());
	int			iters = 15,
				cg = 3;
	float		reg = 0.05f;

	for (size_t j = 0; j < ks.size(); j++)
		bench_k(&d, ks[j], iters, cg, reg, sample, &res[j], log);

	printf("\n## ALS iteration time (both half-steps, YtY included), ML-20M shape, cg_steps=%d, "
		   "median of iterations 3..%d; loss after %d iterations; p@10 on %zu held-out users\n\n",
		   cg, iters, iters, sample.size());
	printf("| k | baseline ms | gpumf ms | speedup | floor ms (flop / bytes) | gpumf / floor | loss baseline | loss gpumf | loss rel diff | p@10 baseline | p@10 gpumf |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (auto &r : res)
	{
		double		rel = fabs(r.gm_loss - r.base_loss) / fabs(r.base_loss);

		printf("| %d | %.2f | %.2f | %.1fx | %.2f (%.2f / %.2f) | %.1fx | %.6f | %.6f | %.1e | %.4f | %.4f |\n",
			   r.k, r.base_ms, r.gm_ms, r.base_ms / r.gm_ms, r.floor_ms,
			   r.flop_ms, r.byte_ms, r.gm_ms / r.floor_ms, r.base_loss, r.gm_loss, rel,
			   r.base_p10, r.gm_p10);
		checks++;
		if (!(rel < 0.01) || !(fabs(r.base_p10 - r.gm_p10) < 0.005) || !(r.base_ms / r.gm_ms >= 5.0))
			failures++;
	}
	printf("\n## gpumf phases (ms, median of 5) and iterations in host slices (budget = multiply-adds per slice, a row costing (len + k) k cg_steps)\n\n");
	printf("| k | gram(Y) | user solve | gram(X) | item solve | sliced 2^28 (slices) | sliced 2^30 | sliced 2^32 |\n");
	printf("|---|---|---|---|---|---|---|---|\n");
	for (auto &r : res)
		printf("| %d | %.3f | %.3f | %.3f | %.3f | %.2f (%d) | %.2f (%d) | %.2f (%d) |\n", r.k,
			   r.phase[0], r.phase[1], r.phase[2], r.phase[3], r.sliced_ms[0], r.nslices[0],
			   r.sliced_ms[1], r.nslices[1], r.sliced_ms[2], r.nslices[2]);
	printf("\n%s\n", failures ? "SOME CHECKS FAILED" : "all checks passed");
	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
