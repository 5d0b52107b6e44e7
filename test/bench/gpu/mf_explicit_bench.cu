/*
 * mf_explicit_bench.cu: correctness checks and the benchmark of gpumf's
 * explicit-feedback models on the GPU (cuda/train/ccd.cu, cuda/train/als_explicit.cu)
 * against the CPU core (src/core/train/ccd.c, src/core/train/als_explicit.c).
 *
 *   1. GPU vs CPU from the same start on a planted problem with long rows
 *      and columns (every work class of the GPU schedule, multi-chunk rows):
 *      training RMSE and loss per iteration within 1e-3 relative, for CCD++
 *      (each work layout, inner iterations 1 and 2, biases on and off) and
 *      explicit ALS (each solver, biases on and off); every downloaded value
 *      finite (host arrays are poisoned with NaN before the download).
 *   2. The planted test on the GPU: 20,000 x 5,000, rank 10, sigma 0.5,
 *      held-out RMSE within 5% of sigma for both algorithms.
 *   3. The Netflix-shaped benchmark, generated here: 480,189 x 17,770,
 *      100M ratings (1% held out), planted rank 10 + N(0, 0.5^2), power-law
 *      item popularity; factors 40 and 100, 10 iterations, lambda 0.058,
 *      biases off.  Seconds per iteration for the CPU (all cores; one
 *      iteration), the GPU without binning, binned (one launch), binned
 *      (a launch per class on streams); the bandwidth floor; held-out RMSE;
 *      explicit ALS with its FLOP floor; cuMF's anchors beside.
 *
 * Ends with "N passed, M failed" over the checks of 1 and 2 (the benchmark
 * prints numbers, it asserts nothing).  No PostgreSQL.
 *
 *   4. Explicit ALS and CCD++ (every work layout) on several GPUs against
 *      one (check_multi_gpu; shares as streams of one GPU where only one is
 *      visible); --multi-timing: the Netflix shape on one GPU and on two,
 *      seconds per iteration.
 *
 * Usage: mf_explicit_bench [--quick | --timing | --multi-timing] [--seed N] [--cpu-iterations N] [--profile MODES
 *        [--profile-k KS] [--profile-iterations N] [--profile-repeat R]]
 *   --quick: checks only.
 *   --timing: the benchmark (3) alone, its GPU rows only.
 *   --profile MODES: no checks; the Netflix shape, CCD++ at every k of the
 *   comma list KS (40) in every work layout of the comma list MODES (0 .. 4:
 *   none, binned, streams, one copy with fixed-point sums, one copy with
 *   float sums) for N (3) iterations, R (1) times over, each iteration's
 *   time printed (also for a profiler).
 */
#include "../../../src/core/train/gm_explicit.h"
#include "../../../cuda/common/common.cuh"	/* the module's exported entry points */

#include <cuda_runtime.h>

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

/* the module's switches (cuda/train/ccd.cu, cuda/train/als_explicit.cu) */
extern "C"
{
	void		gm_cuda_ccd_set_binning(int mode);
	void		gm_cuda_ccd_set_fixed_count(float cnt);
	long long	gm_cuda_ccd_scatter_fallbacks(void);
	void		gm_cuda_als_explicit_set_solver(int solver);
}

#include "bench_check.h"

/* ------------------------------------------------------------ data */

typedef struct dataset
{
	gm_ratings_spec spec;
	gm_csr		R,
				Rt;				/* training ratings */
	double		mu;				/* their mean */
	std::vector<int32_t> tu,
				ti;				/* held-out ratings */
	std::vector<float> tr;
	double		gen_seconds;
	double		csr_seconds;
} dataset;

static void
make_dataset(dataset *ds, int32_t nu, int32_t ni, int64_t n, int rank,
			 double noise, double mean, double bias_sd, double holdout,
			 double popularity, int min_per_user, uint64_t seed)
{
	char		err[GM_ERRLEN];
	gm_ratings_spec *s = &ds->spec;
	int32_t    *u = (int32_t *) malloc(sizeof(int32_t) * n),
			   *i = (int32_t *) malloc(sizeof(int32_t) * n);
	float	   *r = (float *) malloc(sizeof(float) * n);
	uint8_t    *h = (uint8_t *) malloc(n);
	int64_t		m = 0;
	double		t0,
				sum = 0.0;

	memset(s, 0, sizeof(*s));
	s->n_users = nu;
	s->n_items = ni;
	s->n_ratings = n;
	s->rank = rank;
	s->noise = noise;
	s->mean = mean;
	s->bias_sd = bias_sd;
	s->holdout = holdout;
	s->popularity_exponent = popularity;
	s->min_per_user = min_per_user;
	s->seed = seed;
	if (!u || !i || !r || !h)
	{
		fprintf(stderr, "out of host memory for %lld ratings\n", (long long) n);
		exit(2);
	}
	t0 = gm_now();
	if (gm_synth_ratings(s, u, i, r, h, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "gm_synth_ratings: %s\n", err);
		exit(2);
	}
	ds->gen_seconds = gm_now() - t0;
	t0 = gm_now();
	/* compact the training part in place, the held-out part aside */
	for (int64_t e = 0; e < n; e++)
	{
		if (h[e])
		{
			ds->tu.push_back(u[e]);
			ds->ti.push_back(i[e]);
			ds->tr.push_back(r[e]);
			continue;
		}
		u[m] = u[e];
		i[m] = i[e];
		r[m] = r[e];
		sum += r[e];
		m++;
	}
	free(h);
	if (gm_csr_from_coo(nu, ni, m, u, i, r, &ds->R, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "gm_csr_from_coo: %s\n", err);
		exit(2);
	}
	free(u);
	free(i);
	free(r);
	if (gm_csr_transpose(&ds->R, &ds->Rt, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "gm_csr_transpose: %s\n", err);
		exit(2);
	}
	ds->mu = m > 0 ? sum / m : 0.0;
	ds->csr_seconds = gm_now() - t0;
}

static void
free_dataset(dataset *ds)
{
	gm_csr_free(&ds->R);
	gm_csr_free(&ds->Rt);
	ds->tu.clear();
	ds->ti.clear();
	ds->tr.clear();
}

static int64_t
longest_row(const gm_csr *A)
{
	int64_t		m = 0;

	for (int32_t r = 0; r < A->n_rows; r++)
		m = std::max(m, A->indptr[r + 1] - A->indptr[r]);
	return m;
}

/* A model: factors and biases (gm_mf_train initialises them). */
typedef struct model
{
	int			k;
	std::vector<float> X,
				Y,
				ub,
				ib;
	double		mu;
} model;

static void
model_alloc(model *m, const dataset *ds, int k)
{
	m->k = k;
	m->X.assign((size_t) ds->R.n_rows * k, NAN);
	m->Y.assign((size_t) ds->R.n_cols * k, NAN);
	m->ub.assign(ds->R.n_rows, NAN);
	m->ib.assign(ds->R.n_cols, NAN);
	m->mu = 0.0;
}

static int
model_finite(const model *m, int biases)
{
	for (float v : m->X)
		if (!isfinite(v))
			return 0;
	for (float v : m->Y)
		if (!isfinite(v))
			return 0;
	for (size_t i = 0; biases && i < m->ub.size(); i++)
		if (!isfinite(m->ub[i]))
			return 0;
	for (size_t i = 0; biases && i < m->ib.size(); i++)
		if (!isfinite(m->ib[i]))
			return 0;
	return 1;
}

static double
heldout_rmse(const dataset *ds, const model *m, int biases)
{
	double		sse = 0.0;
	int64_t		n = (int64_t) ds->tu.size();
	int			k = m->k;

#pragma omp parallel for reduction(+:sse) schedule(static)
	for (int64_t e = 0; e < n; e++)
	{
		int32_t		u = ds->tu[e],
					i = ds->ti[e];
		double		p = biases ? m->mu + m->ub[u] + m->ib[i] : 0.0;

		for (int f = 0; f < k; f++)
			p += (double) m->X[(size_t) u * k + f] * m->Y[(size_t) i * k + f];
		sse += (ds->tr[e] - p) * (ds->tr[e] - p);
	}
	return n > 0 ? sqrt(sse / n) : NAN;
}

/* ------------------------------------------------------------ training */

typedef struct run_result
{
	int			rc;
	char		err[GM_ERRLEN];
	char		device[128];
	std::vector<double> rmse,
				loss,
				seconds;		/* per iteration, as gm_mf_train reports them */
	double		setup_seconds;	/* create + download (gm_mf_result.transfer_seconds) */
} run_result;

static void
on_iteration(void *arg, int iteration, double loss, double rmse, double seconds)
{
	run_result *r = (run_result *) arg;
	double		before = 0.0;

	for (double s : r->seconds)
		before += s;
	r->rmse.push_back(rmse);
	r->loss.push_back(loss);
	r->seconds.push_back(seconds - before);
}

/*
 * Train through the core's gm_mf_train (the registered CPU table, or the
 * CUDA module's through dlopen): factors from gm_factors_init(seed 42),
 * biases 0, the mean rating; each iteration's loss, RMSE and time (every
 * sweep in the loop's slices, its syncs and polls, and the evaluation).
 */
static int g_gpus = 1;			/* gm_mf_params.gpus of the next trainings */

static void
train(gm_backend_kind backend, const dataset *ds, model *m, gm_algorithm alg, int k,
	  int iterations, float lambda, int biases, int inner, int threads,
	  run_result *res)
{
	gm_mf_params p;
	gm_mf_data	d;
	gm_mf_result out;
	gm_callbacks cb;

	model_alloc(m, ds, k);
	gm_mf_params_defaults(&p, alg);
	p.backend = backend;
	p.factors = k;
	p.iterations = iterations;
	p.regularization = lambda;
	p.threads = threads;
	p.inner_iterations = inner;
	p.biases = biases;
	p.seed = 42;
	p.gpus = g_gpus;
	memset(&d, 0, sizeof(d));
	d.R = &ds->R;
	d.Rt = &ds->Rt;
	d.X = m->X.data();
	d.Y = m->Y.data();
	d.user_bias = m->ub.data();
	d.item_bias = m->ib.data();
	memset(&cb, 0, sizeof(cb));
	cb.on_iteration = on_iteration;
	cb.arg = res;
	res->rmse.clear();
	res->loss.clear();
	res->seconds.clear();
	res->err[0] = '\0';
	res->rc = gm_mf_train(&p, &d, &cb, &out, res->err, sizeof(res->err));
	snprintf(res->device, sizeof(res->device), "%s", out.device_name);
	res->setup_seconds = out.transfer_seconds;
	m->mu = d.global_mean;
}

static double
median(std::vector<double> v)
{
	if (v.empty())
		return NAN;
	std::sort(v.begin(), v.end());
	return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

static double
max_rel(const std::vector<double> &a, const std::vector<double> &b)
{
	double		m = 0.0;

	if (a.size() != b.size() || a.empty())
		return INFINITY;
	for (size_t i = 0; i < a.size(); i++)
	{
		double		d = fabs(a[i] - b[i]) / fabs(b[i]);

		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/* ------------------------------------------------------------ checks */

/*
 * Drive the module's table directly (as gm_mf_train would, from the same
 * start) but in random slices of every sweep, a sync after each: RMSE per
 * iteration into r.  Exercises run() on partial ranges (the binned task
 * lookup, rows split across slices).
 */
static void
train_sliced(gm_algorithm alg, const dataset *ds, int k, int iterations, float lambda,
			 int biases, int inner, uint64_t seed, run_result *r)
{
	const gm_algo_ops *ops = gm_cuda_algo_ops(alg);
	gm_mf_params p;
	gm_mf_data	d;
	model		m;
	void	   *h = NULL;
	double		sum = 0.0;
	uint64_t	st = seed;

	r->rmse.clear();
	r->loss.clear();
	model_alloc(&m, ds, k);
	gm_mf_params_defaults(&p, alg);
	p.backend = GM_BACKEND_CUDA;
	p.factors = k;
	p.iterations = iterations;
	p.regularization = lambda;
	p.inner_iterations = inner;
	p.biases = biases;
	gm_factors_init(m.X.data(), ds->R.n_rows, k, 42, 0);
	gm_factors_init(m.Y.data(), ds->R.n_cols, k, 42, 1);
	std::fill(m.ub.begin(), m.ub.end(), 0.0f);
	std::fill(m.ib.begin(), m.ib.end(), 0.0f);
	for (int64_t e = 0; e < ds->R.nnz; e++)
		sum += ds->R.data[e];
	memset(&d, 0, sizeof(d));
	d.R = &ds->R;
	d.Rt = &ds->Rt;
	d.X = m.X.data();
	d.Y = m.Y.data();
	d.user_bias = biases ? m.ub.data() : NULL;
	d.item_bias = biases ? m.ib.data() : NULL;
	d.global_mean = biases ? sum / ds->R.nnz : 0.0;
	r->rc = ops ? ops->create(&h, &d, &p, NULL, r->device, sizeof(r->device), r->err, sizeof(r->err))
		: GM_ENOTSUP;
	for (int it = 0; it < iterations && r->rc == GM_OK; it++)
	{
		gm_mf_metrics mt;

		for (int s = 0; s < ops->n_sweeps(h) && r->rc == GM_OK; s++)
		{
			gm_sweep	sw;

			memset(&sw, 0, sizeof(sw));
			r->rc = ops->begin_sweep(h, s, &sw, r->err, sizeof(r->err));
			for (int32_t b = 0; b < sw.n_rows && r->rc == GM_OK;)
			{
				int32_t		e;

				st = st * 6364136223846793005ULL + 1442695040888963407ULL;
				e = b + 1 + (int32_t) ((st >> 33) % (uint64_t) (sw.n_rows / 3 + 1));
				if (e > sw.n_rows)
					e = sw.n_rows;
				r->rc = ops->run(h, s, b, e, r->err, sizeof(r->err));
				if (r->rc == GM_OK && ops->sync)
					r->rc = ops->sync(h, r->err, sizeof(r->err));
				b = e;
			}
			if (r->rc == GM_OK && ops->end_sweep)
				r->rc = ops->end_sweep(h, s, r->err, sizeof(r->err));
		}
		if (r->rc == GM_OK)
			r->rc = ops->evaluate(h, &mt, r->err, sizeof(r->err));
		if (r->rc == GM_OK)
		{
			r->rmse.push_back(mt.rmse);
			r->loss.push_back(mt.loss);
		}
	}
	if (ops)
		ops->destroy(h);
}

/*
 * CCD++ work layouts 0 .. 4 (gm_cuda_ccd_set_binning); 5 is layout 3 with
 * every fixed-point scatter block overflowing into the float fallback.
 */
static const char *
ccd_layout_name(int mode)
{
	static const char *names[6] = {"no binning", "binned, one launch", "binned, streams", "one copy, fixed sums",
	"one copy, float sums", "one copy, fallback"};

	return mode >= 0 && mode < 6 ? names[mode] : "?";
}

static void
check_agreement(const dataset *ds, int threads, uint64_t seed)
{
	struct
	{
		gm_algorithm alg;
		int			biases;
		int			mode;		/* ccd: binning; als: solver */
		int			inner;
	}			cases[] = {
		{GM_ALG_CCD, 1, 1, 1}, {GM_ALG_CCD, 0, 1, 1}, {GM_ALG_CCD, 1, 0, 1},
		{GM_ALG_CCD, 0, 2, 1}, {GM_ALG_CCD, 1, 1, 2}, {GM_ALG_CCD, 0, 0, 2},
		{GM_ALG_CCD, 1, 3, 1}, {GM_ALG_CCD, 0, 3, 1}, {GM_ALG_CCD, 1, 3, 2},
		{GM_ALG_CCD, 0, 3, 3}, {GM_ALG_CCD, 1, 4, 1}, {GM_ALG_CCD, 0, 4, 2},
		{GM_ALG_CCD, 1, 5, 1}, {GM_ALG_CCD, 0, 5, 2},
		{GM_ALG_ALS_EXPLICIT, 1, 1, 1}, {GM_ALG_ALS_EXPLICIT, 0, 1, 1},
		{GM_ALG_ALS_EXPLICIT, 1, 0, 1}, {GM_ALG_ALS_EXPLICIT, 0, 0, 1},
	};
	const int	k = 12,
				iters = 5;

	printf("\n== 1. GPU vs CPU through gm_mf_train from the same start: %d x %d, %lld ratings (longest row %lld, column %lld), k %d, %d iterations\n",
		   ds->R.n_rows, ds->R.n_cols, (long long) ds->R.nnz, (long long) longest_row(&ds->R),
		   (long long) longest_row(&ds->Rt), k, iters);
	printf("  %-13s %-6s %-22s %-5s %11s %11s %9s %9s %9s %9s\n", "algorithm", "biases", "gpu layout / solver",
		   "inner", "rmse cpu", "rmse gpu", "rmse", "loss", "held-out", "sliced");
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
	{
		int			ccd = cases[c].alg == GM_ALG_CCD;
		float		lambda = 0.05f;	/* both weigh lambda by the row's ratings */
		model		mc,
					mg;
		run_result	rc,
					rg,
					rs;
		double		dr,
					dl,
					dh,
					ds_;
		const char *layout;
		const char *name = gm_algorithm_name(cases[c].alg);

		long long	fb0 = gm_cuda_ccd_scatter_fallbacks();

		if (ccd)
		{
			gm_cuda_ccd_set_binning(cases[c].mode == 5 ? 3 : cases[c].mode);
			gm_cuda_ccd_set_fixed_count(cases[c].mode == 5 ? 1e-6f : 0.0f);
			layout = ccd_layout_name(cases[c].mode);
		}
		else
		{
			gm_cuda_als_explicit_set_solver(cases[c].mode);
			layout = cases[c].mode == 0 ? "cuSOLVER batched" : "own Cholesky kernel";
		}
		train(GM_BACKEND_CPU, ds, &mc, cases[c].alg, k, iters, lambda, cases[c].biases,
			  cases[c].inner, threads, &rc);
		train(GM_BACKEND_CUDA, ds, &mg, cases[c].alg, k, iters, lambda, cases[c].biases,
			  cases[c].inner, 0, &rg);
		train_sliced(cases[c].alg, ds, k, iters, lambda, cases[c].biases, cases[c].inner,
					 seed + c, &rs);
		if (rc.rc != GM_OK || rg.rc != GM_OK || rs.rc != GM_OK)
		{
			CHECK(0, "%s biases %d %s: cpu rc %d (%s), gpu rc %d (%s), sliced rc %d (%s)", name,
				  cases[c].biases, layout, rc.rc, rc.err, rg.rc, rg.err, rs.rc, rs.err);
			continue;
		}
		dr = max_rel(rg.rmse, rc.rmse);
		dl = max_rel(rg.loss, rc.loss);
		dh = fabs(heldout_rmse(ds, &mg, cases[c].biases) / heldout_rmse(ds, &mc, cases[c].biases) - 1.0);
		ds_ = max_rel(rs.rmse, rg.rmse);
		printf("  %-13s %-6s %-22s %-5d %11.7f %11.7f %9.2e %9.2e %9.2e %9.2e\n", name,
			   cases[c].biases ? "on" : "off", layout, cases[c].inner, rc.rmse.back(), rg.rmse.back(),
			   dr, dl, dh, ds_);
		if (ccd && cases[c].mode == 5)
			CHECK(gm_cuda_ccd_scatter_fallbacks() > fb0,
				  "ccd, fixed-point sums forced to overflow: the fallback ran (%lld blocks)",
				  gm_cuda_ccd_scatter_fallbacks() - fb0);
		if (ccd && cases[c].mode == 3)
			CHECK(gm_cuda_ccd_scatter_fallbacks() == fb0,
				  "ccd, fixed-point sums: no block needed the fallback (%lld did)",
				  gm_cuda_ccd_scatter_fallbacks() - fb0);
		CHECK(dr <= 1e-3 && dl <= 1e-3 && dh <= 1e-3 && ds_ <= 1e-5 && model_finite(&mg, cases[c].biases),
			  "%s, biases %s, %s, inner %d: rmse, loss per iteration and held-out rmse of the downloaded model within 1e-3 of the CPU's (%.1e %.1e %.1e); random slices within 1e-5 (%.1e); model finite",
			  name, cases[c].biases ? "on" : "off", layout, cases[c].inner, dr, dl, dh, ds_);
	}
	gm_cuda_ccd_set_binning(3);
	gm_cuda_ccd_set_fixed_count(0.0f);
	gm_cuda_als_explicit_set_solver(1);
}

/* The module refuses what it cannot do, with a message. */
static void
check_refusals(const dataset *ds)
{
	model		m;
	run_result	r;

	train(GM_BACKEND_CUDA, ds, &m, GM_ALG_ALS_EXPLICIT, 512, 1, 0.05f, 1, 1, 0, &r);
	CHECK(r.rc == GM_ENOTSUP && strstr(r.err, "factors") != NULL,
		  "als_explicit at k 512 on the GPU refused: rc %d: %s", r.rc, r.err);
}

static void
check_planted_gpu(uint64_t seed)
{
	dataset		ds;
	const double sigma = 0.5;

	make_dataset(&ds, 20000, 5000, 8000000, 10, sigma, 3.6, 0.3, 0.1, 0.8, 20, seed);
	printf("\n== 2. planted data on the GPU: %d x %d, rank 10, sigma %.2f, %lld training ratings, %zu held out\n",
		   ds.R.n_rows, ds.R.n_cols, sigma, (long long) ds.R.nnz, ds.tr.size());
	for (int alg = 0; alg < 2; alg++)
	{
		int			ccd = alg == 0;
		model		m;
		run_result	r;
		double		rmse;

		train(GM_BACKEND_CUDA, &ds, &m, ccd ? GM_ALG_CCD : GM_ALG_ALS_EXPLICIT, 10,
			  ccd ? 20 : 10, 0.003f, 1, 1, 0, &r);
		if (r.rc != GM_OK)
		{
			CHECK(0, "%s: rc %d: %s", ccd ? "ccd" : "als_explicit", r.rc, r.err);
			continue;
		}
		rmse = heldout_rmse(&ds, &m, 1);
		CHECK(rmse <= 1.05 * sigma, "%s (biases on, lambda %g): training rmse %.4f, held-out %.4f <= %.4f (1.05 sigma)",
			  ccd ? "ccd" : "als_explicit", 0.003, r.rmse.back(), rmse, 1.05 * sigma);
	}
	free_dataset(&ds);
}

/* ------------------------------------------------------------ benchmark */

/* device-to-device copy rate (bytes read + written per second), median of 9 */
static double
copy_bandwidth(void)
{
	size_t		bytes = (size_t) 2 << 30;
	void	   *a,
			   *b;
	cudaEvent_t e0,
				e1;
	std::vector<double> gbs;

	CK(cudaMalloc(&a, bytes));
	CK(cudaMalloc(&b, bytes));
	CK(cudaMemset(a, 1, bytes));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < 11; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CK(cudaMemcpyAsync(r % 2 ? a : b, r % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 2)
			gbs.push_back(2.0 * bytes / (ms * 1e-3) / 1e9);
	}
	CK(cudaFree(a));
	CK(cudaFree(b));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return median(gbs);
}

/* 8 independent FMA chains a thread, 2 FLOPs each */
__global__ void
fma_rate_kernel(float *out, int n, float a, float b)
{
	float		x[8];

	for (int c = 0; c < 8; c++)
		x[c] = threadIdx.x * 1e-3f + c;
	for (int i = 0; i < n; i++)
#pragma unroll
		for (int c = 0; c < 8; c++)
			x[c] = fmaf(x[c], a, b);
	out[blockIdx.x * blockDim.x + threadIdx.x] = x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
}

/* FP32 FLOP/s of plain FMAs, median of 5 */
static double
fp32_rate(void)
{
	cudaDeviceProp prop;
	int			blocks,
				threads = 256,
				n = 1 << 16;
	float	   *out;
	cudaEvent_t e0,
				e1;
	std::vector<double> r;

	CK(cudaGetDeviceProperties(&prop, 0));
	blocks = prop.multiProcessorCount * 8;
	CK(cudaMalloc((void **) &out, sizeof(float) * blocks * threads));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int rep = 0; rep < 7; rep++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		fma_rate_kernel<<<blocks, threads>>>(out, n, 0.999f, 1e-3f);
		CK(cudaGetLastError());
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (rep >= 2)
			r.push_back(2.0 * 8 * (double) n * blocks * threads / (ms * 1e-3));
	}
	CK(cudaFree(out));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return median(r);
}

/*
 * Bytes one CCD++ iteration must move (biases off, one inner iteration):
 * for each of the k features, the CSR pass reads every column index and
 * residual value and writes the value back (4 + 4 + 4 bytes a rating), reads
 * the row pointers (8 bytes a row) and writes the updated user vector
 * (4 bytes a user), and reads the other side's vector entries it needs at
 * least once (4 bytes an item, twice: the feature's and the previous one's,
 * for the rank-one terms); the CSC pass the same with the sides swapped:
 *     k * (2 * 12 * nnz + 2 * (8 + 4 + 2 * 4) * ... )
 *   = k * (24 nnz + 20 (n_users + n_items)).
 */
static double
ccd_floor_bytes(const dataset *ds, int k)
{
	return (double) k * (24.0 * ds->R.nnz + 20.0 * ((double) ds->R.n_rows + ds->R.n_cols));
}

/*
 * The same for the one-copy layout: the CSR pass as above (12 bytes a
 * rating; row pointers and the new user vector, 12 bytes a user; the item
 * vectors of the terms, 8 bytes an item); the scatter reads each index and
 * value once more (8 bytes a rating), the row pointers and the user vector
 * (12 bytes a user); the last kernel reads the column pointers and writes
 * the item vector (12 bytes an item).  The blocks' partial-sum rows (a few
 * MB, written and read once in L2) are left out:
 *     k * (20 nnz + 24 n_users + 20 n_items).
 */
static double
ccd_one_copy_bytes(const dataset *ds, int k)
{
	return (double) k * (20.0 * ds->R.nnz + 24.0 * ds->R.n_rows + 20.0 * ds->R.n_cols);
}

/*
 * FLOPs of one explicit-ALS iteration (biases off, kk = k): both sides'
 * Gram matrices (upper triangle with the diagonal, a multiply-add each:
 * nnz k (k + 1) FLOPs a side) and right-hand sides (2 nnz k a side), a
 * Cholesky factorisation (k^3 / 3) and two triangular solves (2 k^2) per row.
 */
static double
als_floor_flops(const dataset *ds, int k)
{
	double		kk = k,
				rows = (double) ds->R.n_rows + ds->R.n_cols;

	return 2.0 * (ds->R.nnz * kk * (kk + 1) + 2.0 * ds->R.nnz * kk) +
		rows * (kk * kk * kk / 3.0 + 2.0 * kk * kk);
}

/*
 * The benchmark's data: the Netflix shape, 480,189 x 17,770, 100M ratings
 * (1% held out), planted rank 10 + N(0, 0.5^2), power-law items.
 */
static void
make_netflix(dataset *ds, uint64_t seed)
{
	make_dataset(ds, 480189, 17770, 100000000, 10, 0.5, 0.0, 0.0, 0.01, 0.9, 5, seed);
}

/*
 * --profile: CCD++ trainings for a profiler to watch (or for repeated
 * timings): every layout of the comma list `modes` at every k of `ks`,
 * `repeat` times, on one Netflix-shaped dataset.
 */
static void
profile_run(uint64_t seed, const char *modes, const char *ks, int iters, int repeat)
{
	dataset		ds;

	make_netflix(&ds, seed);
	for (int rep = 0; rep < repeat; rep++)
		for (const char *kp = ks; *kp; kp = strchr(kp, ',') ? strchr(kp, ',') + 1 : "")
			for (const char *mp = modes; *mp; mp = strchr(mp, ',') ? strchr(mp, ',') + 1 : "")
			{
				int			mode = atoi(mp),
							k = atoi(kp);
				long long	fb0 = gm_cuda_ccd_scatter_fallbacks();
				model		m;
				run_result	r;

				struct timespec t0;

				gm_cuda_ccd_set_binning(mode);
				clock_gettime(CLOCK_REALTIME, &t0);
				train(GM_BACKEND_CUDA, &ds, &m, GM_ALG_CCD, k, iters, 0.058f, 0, 1, 0, &r);
				if (r.rc == GM_OK)
				{
					printf("  profile: [started %.1f] layout %d, k %d: %.1f ms per iteration (median of %d), held-out rmse %.4f, %lld fallback blocks:",
						   t0.tv_sec % 10000 + t0.tv_nsec * 1e-9, mode, k, median(r.seconds) * 1e3, iters, heldout_rmse(&ds, &m, 0),
						   gm_cuda_ccd_scatter_fallbacks() - fb0);
					for (size_t i = 0; i < r.seconds.size(); i++)
						printf(" %.1f", r.seconds[i] * 1e3);
					printf("\n");
				}
				else
					printf("  profile: failed: rc %d: %s\n", r.rc, r.err);
				fflush(stdout);
			}
	gm_cuda_ccd_set_binning(3);
	free_dataset(&ds);
}

static void
benchmark(uint64_t seed, int threads, int cpu_iterations)
{
	dataset		ds;
	double		bw,
				flops;
	const int	iters = 10;
	const float lambda = 0.058f;
	float		fit;
	const int	ks[2] = {40, 100};
	const double cumf_ms[2] = {218.0, 540.0};

	printf("\n== 3. Netflix-shaped benchmark\n");
	make_netflix(&ds, seed);
	printf("  data: %d users x %d items, %lld training ratings, %zu held out (1%%); planted rank 10, sigma 0.5,\n"
		   "  power-law items (exponent 0.9); longest user row %lld, longest item column %lld;\n"
		   "  generated in %.1f s, CSR + CSC in %.1f s (%d threads)\n",
		   ds.R.n_rows, ds.R.n_cols, (long long) ds.R.nnz, ds.tr.size(), (long long) longest_row(&ds.R),
		   (long long) longest_row(&ds.Rt), ds.gen_seconds, ds.csr_seconds, threads);
	bw = copy_bandwidth();
	flops = fp32_rate();
	printf("  measured: device copy %.0f GB/s (read + write), FP32 FMA rate %.1f TFLOP/s\n", bw, flops / 1e12);
	printf("  lambda %.3f, biases off, inner iterations 1, %d iterations, factors from gm_factors_init(seed 42);\n"
		   "  time per iteration = every sweep + sync + loss/RMSE evaluation, median over the iterations\n",
		   lambda, iters);

	printf("\n  CCD++: seconds per iteration\n");
	printf("  %-4s %-28s %10s %12s %9s %10s %12s %12s\n", "k", "variant", "ms/iter", "floor ms", "/floor",
		   "vs cuMF", "train rmse", "held-out");
	for (int ki = 0; ki < 2; ki++)
	{
		int			k = ks[ki];
		double		floor_ms = ccd_floor_bytes(&ds, k) / (bw * 1e9) * 1e3;

		printf("  %-4d %-28s %10.1f %12.1f %8.2fx %10s %12s %12s   (floor: %.1f GB per iteration)\n", k,
			   "cuMF cumf_ccd (anchor)", cumf_ms[ki], floor_ms, cumf_ms[ki] / floor_ms, "1.00x", "",
			   ki == 0 ? "0.548" : "-", ccd_floor_bytes(&ds, k) / 1e9);
		for (int v = 0; v < 6; v++)
		{
			model		m;
			run_result	r;
			int			n_it = v == 0 ? cpu_iterations : iters;
			const char *name[6] = {"CPU", "GPU, no binning", "GPU, binned (one launch)", "GPU, binned (streams)",
			"GPU, one copy, fixed sums", "GPU, one copy, float sums"};
			char		label[64];
			double		ms;
			long long	fb0 = gm_cuda_ccd_scatter_fallbacks();

			if (v == 0 && n_it <= 0)
				continue;
			if (v > 0)
				gm_cuda_ccd_set_binning(v - 1);
			if (v == 0)
				snprintf(label, sizeof(label), "%s (%d threads, %d it)", name[v], threads, n_it);
			else
				snprintf(label, sizeof(label), "%s", name[v]);
			train(v == 0 ? GM_BACKEND_CPU : GM_BACKEND_CUDA, &ds, &m, GM_ALG_CCD, k, n_it, lambda,
				  0, 1, threads, &r);
			if (r.rc != GM_OK)
			{
				printf("  %-4d %-28s failed: rc %d: %s\n", k, label, r.rc, r.err);
				continue;
			}
			ms = median(r.seconds) * 1e3;
			printf("  %-4d %-28s %10.1f %12.1f %8.2fx %9.2fx %12.4f %12.4f", k, label, ms, floor_ms,
				   ms / floor_ms, cumf_ms[ki] / ms, r.rmse.back(), heldout_rmse(&ds, &m, 0));
			if (v >= 4)
				printf("   (its own floor, 20 bytes a rating: %.1f ms, %.2fx)",
					   ccd_one_copy_bytes(&ds, k) / (bw * 1e9) * 1e3,
					   ms / (ccd_one_copy_bytes(&ds, k) / (bw * 1e9) * 1e3));
			if (v == 4)
				printf("   [%lld scatter blocks fell back to float sums]", gm_cuda_ccd_scatter_fallbacks() - fb0);
			printf("\n");
			fflush(stdout);
		}
		gm_cuda_ccd_set_binning(3);
	}

	/*
	 * the same with a lambda that suits this data: the weighted lambda whose
	 * ridge for an average user, lambda n_u, is the planted model's
	 * sigma^2 / var(w_f) = 0.25 / 0.316
	 */
	fit = (float) (0.8 / ((double) ds.R.nnz / ds.R.n_rows));
	printf("\n  CCD++ on the GPU (binned) at lambda %.4f (lambda x mean ratings per user = 0.8, the planted model's sigma^2 / var(w_f) = 0.25 / 0.316):\n",
		   fit);
	for (int ki = 0; ki < 2; ki++)
	{
		model		m;
		run_result	r;

		train(GM_BACKEND_CUDA, &ds, &m, GM_ALG_CCD, ks[ki], iters, fit, 0, 1, 0, &r);
		if (r.rc == GM_OK)
			printf("  k %-4d %10.1f ms/iter   train rmse %.4f   held-out %.4f\n", ks[ki],
				   median(r.seconds) * 1e3, r.rmse.back(), heldout_rmse(&ds, &m, 0));
		else
			printf("  k %-4d failed: rc %d: %s\n", ks[ki], r.rc, r.err);
	}

	printf("\n  explicit ALS (weighted lambda %.3f): seconds per iteration, %d iterations\n", lambda, iters);
	printf("  %-4s %-24s %10s %12s %9s %12s %12s\n", "k", "solver", "ms/iter", "floor ms", "/floor",
		   "train rmse", "held-out");
	for (int ki = 0; ki < 2; ki++)
	{
		int			k = ks[ki];
		double		floor_ms = als_floor_flops(&ds, k) / flops * 1e3;

		for (int solver = 1; solver >= 0; solver--)
		{
			model		m;
			run_result	r;
			double		ms;

			gm_cuda_als_explicit_set_solver(solver);
			train(GM_BACKEND_CUDA, &ds, &m, GM_ALG_ALS_EXPLICIT, k, iters, lambda, 0, 1, 0, &r);
			if (r.rc != GM_OK)
			{
				printf("  %-4d %-24s failed: rc %d: %s\n", k, solver ? "own Cholesky" : "cuSOLVER batched",
					   r.rc, r.err);
				continue;
			}
			ms = median(r.seconds) * 1e3;
			printf("  %-4d %-24s %10.1f %12.1f %8.2fx %12.4f %12.4f   (%.2f TFLOP per iteration)\n", k,
				   solver ? "own Cholesky" : "cuSOLVER batched", ms, floor_ms, ms / floor_ms,
				   r.rmse.back(), heldout_rmse(&ds, &m, 0), als_floor_flops(&ds, k) / 1e12);
			fflush(stdout);
		}
	}
	gm_cuda_als_explicit_set_solver(1);
	free_dataset(&ds);
}

/*
 * Explicit ALS and CCD++ on several GPUs (gm_mf_params.gpus: rows cut in
 * shares, each side's updated rows exchanged after its sweep) from the same
 * start: the one-GPU model within ten times the one-GPU run-to-run noise
 * (rows longer than a chunk add their chunks with atomics, in any order),
 * per iteration's loss and RMSE too, with a floor: explicit ALS 1e-6 (a
 * row's solve is the one-GPU solve), CCD++'s one copy 1e-4 of the factors'
 * scale and 1e-5 of the loss (its item sums are cut into twice the partial
 * sums, each rounded on its own), its two copies and unbinned passes 1e-6;
 * on one GPU the shares run as streams of it (GM_GPUS_SHARE_DEVICE).
 */
static void
check_multi_gpu(uint64_t seed, int threads)
{
	struct mcase
	{
		gm_algorithm alg;
		int			ngpu,
					k,
					biases,
					binning;	/* CCD++'s work layout (gm_cuda_ccd_set_binning) */
		double		floor;
		const char *what;
	};
	static const mcase cases[] = {
		{GM_ALG_ALS_EXPLICIT, 2, 32, 1, 3, 1e-6, "explicit ALS"},
		{GM_ALG_ALS_EXPLICIT, 2, 100, 0, 3, 1e-6, "explicit ALS"},
		{GM_ALG_ALS_EXPLICIT, 3, 32, 1, 3, 1e-6, "explicit ALS"},
		{GM_ALG_CCD, 2, 32, 1, 3, 1e-4, "CCD++ one copy, fixed-point sums"},
		{GM_ALG_CCD, 3, 24, 0, 3, 1e-4, "CCD++ one copy, fixed-point sums"},
		{GM_ALG_CCD, 2, 32, 1, 4, 1e-4, "CCD++ one copy, float sums"},
		{GM_ALG_CCD, 2, 32, 1, 1, 1e-6, "CCD++ two copies, binned"},
		{GM_ALG_CCD, 3, 16, 0, 0, 1e-6, "CCD++ two copies, unbinned"},
		{GM_ALG_CCD, 2, 16, 1, 2, 1e-6, "CCD++ two copies, a stream per class"},
	};
	dataset		ds;
	int			visible = 0;
	bool		shared;

	cudaGetDeviceCount(&visible);
	shared = visible < 2;
	if (shared)
		setenv("GM_GPUS_SHARE_DEVICE", "1", 1);
	make_dataset(&ds, 6000, 1500, 400000, 6, 0.5, 3.5, 0.3, 0.05, 0.8, 3, seed);
	for (const mcase &c : cases)
	{
		model		m[3];
		run_result	r[3];
		double		diff[2] = {0, 0},
					scale = 0,
					rel[2] = {0, 0};
		double		lfloor = c.alg == GM_ALG_CCD && c.floor > 1e-6 ? 1e-5 : c.floor;

		if (c.ngpu > visible && !shared)
		{
			printf("  [skip] %s on %d GPUs: %d visible\n", c.what, c.ngpu, visible);
			continue;
		}
		gm_cuda_ccd_set_binning(c.binning);
		for (int t = 0; t < 3; t++)
		{
			g_gpus = t < 2 ? 1 : c.ngpu;
			train(GM_BACKEND_CUDA, &ds, &m[t], c.alg, c.k, 5, 0.05f, c.biases, 1, threads, &r[t]);
		}
		g_gpus = 1;
		gm_cuda_ccd_set_binning(3);
		CHECK(r[0].rc == GM_OK && r[1].rc == GM_OK && r[2].rc == GM_OK,
			  "%s k=%d on %d GPUs trains: %s %s", c.what, c.k, c.ngpu, r[1].err, r[2].err);
		if (r[2].rc != GM_OK)
			continue;
		for (int t = 0; t < 2; t++)
		{
			for (size_t i = 0; i < m[0].X.size(); i++)
			{
				diff[t] = std::max(diff[t], (double) fabsf(m[0].X[i] - m[t + 1].X[i]));
				scale = std::max(scale, (double) fabsf(m[0].X[i]));
			}
			for (size_t i = 0; i < m[0].Y.size(); i++)
			{
				diff[t] = std::max(diff[t], (double) fabsf(m[0].Y[i] - m[t + 1].Y[i]));
				scale = std::max(scale, (double) fabsf(m[0].Y[i]));
			}
			for (size_t i = 0; c.biases && i < m[0].ub.size(); i++)
				diff[t] = std::max(diff[t], (double) fabsf(m[0].ub[i] - m[t + 1].ub[i]));
			for (size_t i = 0; c.biases && i < m[0].ib.size(); i++)
				diff[t] = std::max(diff[t], (double) fabsf(m[0].ib[i] - m[t + 1].ib[i]));
			for (size_t it = 0; it < r[0].loss.size() && it < r[t + 1].loss.size(); it++)
				rel[t] = std::max(rel[t], fabs(r[0].loss[it] - r[t + 1].loss[it]) / fabs(r[0].loss[it]));
		}
		CHECK(r[2].loss.size() == r[0].loss.size() &&
			  diff[1] <= std::max(10.0 * diff[0], c.floor * scale) && rel[1] <= std::max(10.0 * rel[0], lfloor) &&
			  strstr(r[2].device, " x ") != NULL,
			  "%s k=%d%s on %d GPUs%s (%s): factors within %.3g (one GPU twice: %.3g; scale %.3g), loss per iteration within %.3g relative (%.3g)",
			  c.what, c.k, c.biases ? " biases" : "", c.ngpu, shared ? " (streams of one)" : "", r[2].device,
			  diff[1], diff[0], scale, rel[1], rel[0]);
	}
	if (shared)
		unsetenv("GM_GPUS_SHARE_DEVICE");
	free_dataset(&ds);
}

/*
 * --multi-timing: explicit ALS and CCD++ (one copy, the default on this
 * shape, and two copies) on one GPU and on two, the Netflix shape with n
 * ratings, factors k: seconds per iteration (the mean after the first) and
 * the final loss, one table.
 */
static void
multi_gpu_timing(uint64_t seed, int threads, int64_t n, int k)
{
	dataset		ds;
	int			visible = 0;

	cudaGetDeviceCount(&visible);
	make_dataset(&ds, 480189, 17770, n, 10, 0.5, 3.6, 0.3, 0.01, 0.8, 3, seed);
	printf("\n| %lld ratings, 480,189 x 17,770, k %d | GPUs | s / iteration (2..5) | loss | RMSE |\n|---|---|---|---|---|\n",
		   (long long) ds.R.nnz, k);
	for (int a = 0; a < 3; a++)
	{
		/* explicit ALS; CCD++ in its default layout (one copy here) and with two copies */
		gm_algorithm alg = a == 0 ? GM_ALG_ALS_EXPLICIT : GM_ALG_CCD;

		gm_cuda_ccd_set_binning(a == 2 ? 1 : 3);
		for (int g = 1; g <= visible && g <= 2; g++)
		{
			model		m;
			run_result	r;
			double		t = 0;

			g_gpus = g;
			train(GM_BACKEND_CUDA, &ds, &m, alg, k, 5, 0.05f, 0, 1, threads, &r);
			for (size_t i = 1; i < r.seconds.size(); i++)
				t += r.seconds[i];
			printf("| %s%s: %s | %d | %.3f | %.6g | %.5f |\n", a == 0 ? "explicit ALS" : "CCD++",
				   a == 0 ? "" : (a == 1 ? " one copy" : " two copies"), r.rc == GM_OK ? r.device : r.err, g,
				   r.seconds.size() > 1 ? t / (double) (r.seconds.size() - 1) : NAN,
				   r.loss.empty() ? NAN : r.loss.back(), r.rmse.empty() ? NAN : r.rmse.back());
			fflush(stdout);
		}
	}
	gm_cuda_ccd_set_binning(3);
	g_gpus = 1;
	free_dataset(&ds);
}

int
main(int argc, char **argv)
{
	int			quick = 0,
				timing = 0,
				multi_timing = 0,
				profile_iters = 3,
				profile_repeat = 1,
				cpu_iterations = 1;
	const char *module = "cuda/gpumf_cuda.so",
			   *profile = NULL,
			   *profile_k = "40";
	char		err[GM_ERRLEN],
				name[128];
	uint64_t	seed = (uint64_t) time(NULL);
	int			threads;
	cudaDeviceProp prop;

	for (int a = 1; a < argc; a++)
	{
		if (strcmp(argv[a], "--quick") == 0)
			quick = 1;
		else if (strcmp(argv[a], "--timing") == 0)
			timing = 1;
		else if (strcmp(argv[a], "--multi-timing") == 0)
			multi_timing = 1;
		else if (strcmp(argv[a], "--seed") == 0 && a + 1 < argc)
			seed = strtoull(argv[++a], NULL, 10);
		else if (strcmp(argv[a], "--cpu-iterations") == 0 && a + 1 < argc)
			cpu_iterations = atoi(argv[++a]);
		else if (strcmp(argv[a], "--module") == 0 && a + 1 < argc)
			module = argv[++a];
		else if (strcmp(argv[a], "--profile") == 0 && a + 1 < argc)
			profile = argv[++a];
		else if (strcmp(argv[a], "--profile-k") == 0 && a + 1 < argc)
			profile_k = argv[++a];
		else if (strcmp(argv[a], "--profile-repeat") == 0 && a + 1 < argc)
			profile_repeat = atoi(argv[++a]);
		else if (strcmp(argv[a], "--profile-iterations") == 0 && a + 1 < argc)
			profile_iters = atoi(argv[++a]);
		else
		{
			fprintf(stderr, "usage: %s [--quick | --timing | --multi-timing] [--seed N] [--cpu-iterations N] [--module path] [--profile MODES [--profile-k KS] [--profile-iterations N] [--profile-repeat N]]\n", argv[0]);
			return 2;
		}
	}
	threads = gm_default_threads();
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("# mf_explicit_bench: %s, %d SMs, %.0f GiB; %d CPU threads; seed %llu\n", prop.name,
		   prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, threads, (unsigned long long) seed);

	/* the core trains on the GPU through the module it loads with dlopen */
	if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
	{
		CHECK(0, "gm_cuda_available(%s): %s", module, err);
		printf("\n%d passed, %d failed\n", checks - failures, failures);
		return 1;
	}
	CHECK(gm_cuda_abi_version() == GM_ALGO_ABI_VERSION &&
		  gm_algo_ops_get(GM_ALG_CCD, GM_BACKEND_CUDA, err, sizeof(err)) == gm_cuda_algo_ops(GM_ALG_CCD) &&
		  gm_algo_ops_get(GM_ALG_ALS_EXPLICIT, GM_BACKEND_CUDA, err, sizeof(err)) ==
		  gm_cuda_algo_ops(GM_ALG_ALS_EXPLICIT) && gm_cuda_algo_ops(GM_ALG_CCD) != NULL,
		  "the module (%s, on %s) registers ccd and als_explicit", module, name);
	if (profile != NULL)
	{
		profile_run(seed, profile, profile_k, profile_iters, profile_repeat);
		return 0;
	}
	if (multi_timing)
	{
		multi_gpu_timing(seed, threads, 100000000, 100);
		return 0;
	}
	if (timing)
	{
		/* the benchmark alone, GPU rows only (test/bench/gpu/arch_run.sh compares builds) */
		benchmark(seed + 2, threads, 0);
		printf("\n%d passed, %d failed\n", checks - failures, failures);
		return failures ? 1 : 0;
	}
	{
		dataset		ds;

		/* long columns (popular items over 4096 ratings: multi-chunk) and short rows */
		make_dataset(&ds, 12000, 2000, 1200000, 6, 0.5, 3.5, 0.3, 0.05, 0.8, 3, seed);
		check_agreement(&ds, threads, seed);
		check_refusals(&ds);
		free_dataset(&ds);
	}
	check_multi_gpu(seed + 3, threads);
	check_planted_gpu(seed + 1);
	if (!quick)
		benchmark(seed + 2, threads, cpu_iterations);
	printf("\n%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
