/*
 * test_explicit.c: unit tests of the explicit-feedback models in the core:
 * CCD++ (ccd.c, gm_ccd_plan.h), weighted-lambda ALS (als_explicit.c) and the
 * planted ratings generator (synth_ratings.c).
 *
 * Random inputs are fresh on every run: the seed comes from the time and the
 * pid (or from GM_TEST_SEED to replay a run) and is printed first.  Output is
 * one line per test, "ok N - name" or "not ok N - name: detail", then
 * "N passed, M failed"; the exit status is non-zero when any test failed.
 */
#include "gm_explicit.h"
#include "gm_ccd_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------ problems */

/* A training problem: R, Rt, the model arrays gm_mf_data points at. */
typedef struct problem
{
	gm_csr		R,
				Rt;
	int			k;
	float	   *X,
			   *Y,
			   *ub,
			   *ib;
	double		mu;
} problem;

static void
problem_free(problem *pr)
{
	gm_csr_free(&pr->R);
	gm_csr_free(&pr->Rt);
	free(pr->X);
	free(pr->Y);
	free(pr->ub);
	free(pr->ib);
	memset(pr, 0, sizeof(*pr));
}

/* CSR and CSC from coordinates (aborts on failure: a harness error). */
static void
problem_from_coo(problem *pr, int32_t nu, int32_t ni, int64_t n,
				 const int32_t *u, const int32_t *i, const float *r, int k)
{
	char		err[GM_ERRLEN];

	memset(pr, 0, sizeof(*pr));
	if (gm_csr_from_coo(nu, ni, n, u, i, r, &pr->R, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&pr->R, &pr->Rt, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "harness: %s\n", err);
		exit(2);
	}
	pr->k = k;
	pr->X = xmalloc(sizeof(float) * (size_t) nu * k);
	pr->Y = xmalloc(sizeof(float) * (size_t) ni * k);
	pr->ub = xcalloc(nu, sizeof(float));
	pr->ib = xcalloc(ni, sizeof(float));
}

/* A random problem: each (u, i) present with probability density. */
static void
problem_random(problem *pr, int32_t nu, int32_t ni, double density, int k)
{
	int64_t		cap = (int64_t) nu * ni,
				n = 0;
	int32_t    *u = xmalloc(sizeof(int32_t) * cap),
			   *i = xmalloc(sizeof(int32_t) * cap);
	float	   *r = xmalloc(sizeof(float) * cap);
	double		sum = 0.0;

	for (int32_t a = 0; a < nu; a++)
		for (int32_t b = 0; b < ni; b++)
			if (runif() < density)
			{
				u[n] = a;
				i[n] = b;
				r[n] = (float) (1.0 + 4.0 * runif());
				sum += r[n];
				n++;
			}
	problem_from_coo(pr, nu, ni, n, u, i, r, k);
	for (int64_t e = 0; e < (int64_t) nu * k; e++)
		pr->X[e] = (float) (runif() - 0.5);
	for (int64_t e = 0; e < (int64_t) ni * k; e++)
		pr->Y[e] = (float) (runif() - 0.5);
	for (int32_t a = 0; a < nu; a++)
		pr->ub[a] = (float) (0.4 * (runif() - 0.5));
	for (int32_t b = 0; b < ni; b++)
		pr->ib[b] = (float) (0.4 * (runif() - 0.5));
	pr->mu = n > 0 ? sum / n : 0.0;
	free(u);
	free(i);
	free(r);
}

static gm_mf_data
problem_data(problem *pr, int biases)
{
	gm_mf_data	d;

	memset(&d, 0, sizeof(d));
	d.R = &pr->R;
	d.Rt = &pr->Rt;
	d.X = pr->X;
	d.Y = pr->Y;
	d.user_bias = biases ? pr->ub : NULL;
	d.item_bias = biases ? pr->ib : NULL;
	d.global_mean = biases ? pr->mu : 0.0;
	return d;
}

static gm_mf_params
params(gm_algorithm alg, int k, int iterations, float lambda, int biases)
{
	gm_mf_params p;

	memset(&p, 0, sizeof(p));
	p.algorithm = alg;
	p.backend = GM_BACKEND_CPU;
	p.factors = k;
	p.iterations = iterations;
	p.regularization = lambda;
	p.seed = 42;
	p.threads = 0;
	p.inner_iterations = 1;
	p.biases = biases;
	return p;
}

/* ------------------------------------------------------ driver */

/*
 * Drive an ops table the way the training loop does: every sweep in slices
 * of at most slice rows (0: one slice), evaluate after each iteration into
 * hist (may be NULL), download at the end.  stop_after >= 0 abandons the
 * run after that many slices (a cancel), destroying the state.
 */
static int
drive(const gm_algo_ops *ops, gm_mf_data *d, const gm_mf_params *p,
	  int32_t slice, int stop_after, gm_mf_metrics *hist, char *err)
{
	void	   *h = NULL;
	char		dev[128];
	int			rc,
				slices = 0;

	rc = ops->create(&h, d, p, NULL, dev, sizeof(dev), err, GM_ERRLEN);
	if (rc != GM_OK)
		return rc;
	for (int it = 0; it < p->iterations; it++)
	{
		for (int s = 0; s < ops->n_sweeps(h); s++)
		{
			gm_sweep	sw;

			memset(&sw, 0, sizeof(sw));
			if ((rc = ops->begin_sweep(h, s, &sw, err, GM_ERRLEN)) != GM_OK)
				goto out;
			for (int32_t b = 0; b < sw.n_rows;)
			{
				int32_t		e = slice > 0 && sw.n_rows - b > slice ? b + slice : sw.n_rows;

				if ((rc = ops->run(h, s, b, e, err, GM_ERRLEN)) != GM_OK)
					goto out;
				b = e;
				if (stop_after >= 0 && ++slices > stop_after)
				{
					rc = GM_ECANCELED;
					goto out;
				}
			}
			if (ops->end_sweep && (rc = ops->end_sweep(h, s, err, GM_ERRLEN)) != GM_OK)
				goto out;
		}
		if (ops->sync && (rc = ops->sync(h, err, GM_ERRLEN)) != GM_OK)
			goto out;
		if (hist && (rc = ops->evaluate(h, &hist[it], err, GM_ERRLEN)) != GM_OK)
			goto out;
	}
	rc = ops->download(h, d, err, GM_ERRLEN);
out:
	ops->destroy(h);
	return rc;
}

/* ------------------------------------------------ float64 references */

/* The model's residual and RMSE, in float64, from row-major factors. */
static double
model_sse(const gm_csr *R, const float *X, const float *Y, int k,
		  const float *ub, const float *ib, double mu)
{
	double		sse = 0.0;

	for (int32_t u = 0; u < R->n_rows; u++)
		for (int64_t e = R->indptr[u]; e < R->indptr[u + 1]; e++)
		{
			int32_t		i = R->indices[e];
			double		p = mu + (ub ? ub[u] : 0.0) + (ib ? ib[i] : 0.0);

			for (int f = 0; f < k; f++)
				p += (double) X[(size_t) u * k + f] * Y[(size_t) i * k + f];
			sse += (R->data[e] - p) * (R->data[e] - p);
		}
	return sse;
}

/*
 * Dense float64 CCD++ in the textbook order: per outer iteration the user
 * biases, the item biases (when on), then for each feature t:
 *   Rhat = E + u_t v_t^T;  inner times: u = ..., v = ...;  E = Rhat - u v^T.
 * W, H row-major (n x k), b, c, E dense n_u x n_i with mask M.  The
 * regularization is weighted like explicit ALS's: every update of user u
 * (item i) uses lambda n_u (lambda n_i), its number of ratings, and the
 * penalty is lambda (sum_u n_u (|w_u|^2 + b_u^2) + sum_i n_i (...)).
 */
typedef struct ccd_ref
{
	int32_t		nu,
				ni;
	int			k;
	double	   *W,
			   *H,
			   *b,
			   *c,
			   *E;
	uint8_t    *M;
	double	   *nu_cnt,			/* ratings of each user */
			   *ni_cnt;			/* and of each item */
} ccd_ref;

static void
ccd_ref_init(ccd_ref *r, const problem *pr, int biases)
{
	const gm_csr *R = &pr->R;

	r->nu = R->n_rows;
	r->ni = R->n_cols;
	r->k = pr->k;
	r->W = xmalloc(sizeof(double) * r->nu * r->k);
	r->H = xmalloc(sizeof(double) * r->ni * r->k);
	r->b = xcalloc(r->nu, sizeof(double));
	r->c = xcalloc(r->ni, sizeof(double));
	r->E = xcalloc((size_t) r->nu * r->ni, sizeof(double));
	r->M = xcalloc((size_t) r->nu * r->ni, 1);
	r->nu_cnt = xcalloc(r->nu, sizeof(double));
	r->ni_cnt = xcalloc(r->ni, sizeof(double));
	for (int64_t e = 0; e < (int64_t) r->nu * r->k; e++)
		r->W[e] = pr->X[e];
	for (int64_t e = 0; e < (int64_t) r->ni * r->k; e++)
		r->H[e] = pr->Y[e];
	if (biases)
	{
		for (int32_t u = 0; u < r->nu; u++)
			r->b[u] = pr->ub[u];
		for (int32_t i = 0; i < r->ni; i++)
			r->c[i] = pr->ib[i];
	}
	for (int32_t u = 0; u < r->nu; u++)
		for (int64_t e = R->indptr[u]; e < R->indptr[u + 1]; e++)
		{
			int32_t		i = R->indices[e];
			double		p = (biases ? pr->mu + r->b[u] + r->c[i] : 0.0);

			for (int f = 0; f < r->k; f++)
				p += r->W[u * r->k + f] * r->H[i * r->k + f];
			r->E[(size_t) u * r->ni + i] = R->data[e] - p;
			r->M[(size_t) u * r->ni + i] = 1;
			r->nu_cnt[u] += 1.0;
			r->ni_cnt[i] += 1.0;
		}
}

static void
ccd_ref_free(ccd_ref *r)
{
	free(r->W);
	free(r->H);
	free(r->b);
	free(r->c);
	free(r->E);
	free(r->M);
	free(r->nu_cnt);
	free(r->ni_cnt);
}

static void
ccd_ref_iteration(ccd_ref *r, double lambda, int inner, int biases)
{
	int32_t		nu = r->nu,
				ni = r->ni;
	int			k = r->k;

	if (biases)
	{
		for (int32_t u = 0; u < nu; u++)
		{
			double		num = 0.0,
						den = lambda * r->nu_cnt[u],
						nb;

			for (int32_t i = 0; i < ni; i++)
				if (r->M[(size_t) u * ni + i])
				{
					num += r->E[(size_t) u * ni + i] + r->b[u];
					den += 1.0;
				}
			nb = den > 0 ? num / den : 0.0;
			for (int32_t i = 0; i < ni; i++)
				if (r->M[(size_t) u * ni + i])
					r->E[(size_t) u * ni + i] += r->b[u] - nb;
			r->b[u] = nb;
		}
		for (int32_t i = 0; i < ni; i++)
		{
			double		num = 0.0,
						den = lambda * r->ni_cnt[i],
						nc;

			for (int32_t u = 0; u < nu; u++)
				if (r->M[(size_t) u * ni + i])
				{
					num += r->E[(size_t) u * ni + i] + r->c[i];
					den += 1.0;
				}
			nc = den > 0 ? num / den : 0.0;
			for (int32_t u = 0; u < nu; u++)
				if (r->M[(size_t) u * ni + i])
					r->E[(size_t) u * ni + i] += r->c[i] - nc;
			r->c[i] = nc;
		}
	}
	for (int t = 0; t < k; t++)
	{
		/* E becomes Rhat */
		for (int32_t u = 0; u < nu; u++)
			for (int32_t i = 0; i < ni; i++)
				if (r->M[(size_t) u * ni + i])
					r->E[(size_t) u * ni + i] += r->W[u * k + t] * r->H[i * k + t];
		for (int s = 0; s < inner; s++)
		{
			for (int32_t u = 0; u < nu; u++)
			{
				double		num = 0.0,
							den = lambda * r->nu_cnt[u];

				for (int32_t i = 0; i < ni; i++)
					if (r->M[(size_t) u * ni + i])
					{
						num += r->E[(size_t) u * ni + i] * r->H[i * k + t];
						den += r->H[i * k + t] * r->H[i * k + t];
					}
				r->W[u * k + t] = den > 0 ? num / den : 0.0;
			}
			for (int32_t i = 0; i < ni; i++)
			{
				double		num = 0.0,
							den = lambda * r->ni_cnt[i];

				for (int32_t u = 0; u < nu; u++)
					if (r->M[(size_t) u * ni + i])
					{
						num += r->E[(size_t) u * ni + i] * r->W[u * k + t];
						den += r->W[u * k + t] * r->W[u * k + t];
					}
				r->H[i * k + t] = den > 0 ? num / den : 0.0;
			}
		}
		for (int32_t u = 0; u < nu; u++)
			for (int32_t i = 0; i < ni; i++)
				if (r->M[(size_t) u * ni + i])
					r->E[(size_t) u * ni + i] -= r->W[u * k + t] * r->H[i * k + t];
	}
}

/* sum of squares of the residual over the mask, and of the model's penalty */
static void
ccd_ref_loss(const ccd_ref *r, double lambda, int64_t nnz, double *loss, double *rmse)
{
	double		sse = 0.0,
				pen = 0.0;

	for (size_t e = 0; e < (size_t) r->nu * r->ni; e++)
		if (r->M[e])
			sse += r->E[e] * r->E[e];
	for (int32_t u = 0; u < r->nu; u++)
	{
		double		sq = r->b[u] * r->b[u];

		for (int f = 0; f < r->k; f++)
			sq += r->W[(size_t) u * r->k + f] * r->W[(size_t) u * r->k + f];
		pen += r->nu_cnt[u] * sq;
	}
	for (int32_t i = 0; i < r->ni; i++)
	{
		double		sq = r->c[i] * r->c[i];

		for (int f = 0; f < r->k; f++)
			sq += r->H[(size_t) i * r->k + f] * r->H[(size_t) i * r->k + f];
		pen += r->ni_cnt[i] * sq;
	}
	*loss = (sse + lambda * pen) / nnz;
	*rmse = sqrt(sse / nnz);
}

/* max |a - b| / (atol + |b|) over n entries */
static double
max_rel_f(const float *a, const double *b, int64_t n, double atol)
{
	double		m = 0.0;

	for (int64_t e = 0; e < n; e++)
	{
		double		d = fabs(a[e] - b[e]) / (atol + fabs(b[e]));

		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/*
 * Normwise difference max|a - b| / max|b| (0 when both are zero): the
 * measure for a whole factor matrix, whose small entries can be differences
 * of large ones and carry float32 rounding of the matrix's scale.
 */
static double
max_normwise_f(const float *a, const double *b, int64_t n)
{
	double		d = 0.0,
				s = 0.0;

	for (int64_t e = 0; e < n; e++)
	{
		double		t = fabs(a[e] - b[e]);

		if (!(t <= d))
			d = isnan(t) ? INFINITY : t;
		s = fmax(s, fabs(b[e]));
	}
	return d == 0.0 ? 0.0 : d / s;
}

/* ------------------------------------------------------------ tests */

/*
 * The plan stays consistent (slots, terms, at most two general terms a
 * pass) over many iterations for every shape of cycle.
 */
static int
test_ccd_plan(void)
{
	for (int k = 1; k <= 7; k++)
		for (int inner = 1; inner <= 3; inner++)
			for (int biases = 0; biases <= 1; biases++)
			{
				gm_ccd_plan p;

				gm_ccd_plan_init(&p, k, inner, biases);
				CHECK(p.n_sweeps == 2 * biases + 2 * inner * k,
					  "k %d inner %d biases %d: %d sweeps", k, inner, biases, p.n_sweeps);
				for (int it = 0; it < 6; it++)
					for (int s = 0; s < p.n_sweeps; s++)
					{
						gm_ccd_step st;
						gm_ccd_pack pk;
						gm_ccd_term ev[GM_CCD_MAX_TERMS + 1];

						CHECK(gm_ccd_plan_step(&p, s, &st) == 0,
							  "k %d inner %d biases %d: step %d of iteration %d failed",
							  k, inner, biases, s, it);
						CHECK(gm_ccd_make_pack(st.terms, st.n_terms, st.side, st.cur, &pk) == 0,
							  "k %d inner %d biases %d: too many general terms at %d",
							  k, inner, biases, s);
						CHECK(gm_ccd_make_pack(ev, gm_ccd_plan_eval(&p, ev), 0,
											   GM_CCD_ONES, &pk) == 0,
							  "k %d: evaluation terms", k);
					}
			}
	return 0;
fail:
	return 1;
}

/*
 * One CCD++ rank-one update (the first entry's sweeps) against its closed
 * form in float64, from random factors: with biases off, sweep 0 is
 *   u_i = sum_j (e_ij + u_i v_j) v_j / (lambda n_i + sum_j v_j^2)   (feature 0)
 * (n_i the ratings of row i: the weighted lambda)
 * and sweep 1 the same for v with the new u; with biases on, sweeps 0 and 1
 * are the user and item bias updates and 2, 3 the feature's.  Every other
 * coordinate must stay as it was.
 */
static int
test_ccd_rank_one(void)
{
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 8; trial++)
	{
		int			biases = trial % 2;
		int			k = (int) rint_range(1, 5);
		problem		pr;
		gm_mf_params p = params(GM_ALG_CCD, k, 1, (float) (0.05 + runif()), biases);
		gm_mf_data	d;
		ccd_ref		ref;
		void	   *h = NULL;
		char		dev[64];
		int			nsw = biases ? 4 : 2;
		double		e1;

		problem_random(&pr, (int32_t) rint_range(5, 60), (int32_t) rint_range(5, 40),
					   0.1 + 0.5 * runif(), k);
		d = problem_data(&pr, biases);
		ccd_ref_init(&ref, &pr, biases);

		/* the reference: the same first entries, by hand */
		{
			int32_t		nu = ref.nu,
						ni = ref.ni;
			double		lambda = p.regularization;

			if (biases)
			{
				/* one outer iteration with k = 0 does exactly the biases */
				ref.k = 0;
				ccd_ref_iteration(&ref, lambda, 1, 1);
				ref.k = k;
			}
			for (int32_t u = 0; u < nu; u++)
				for (int32_t i = 0; i < ni; i++)
					if (ref.M[(size_t) u * ni + i])
						ref.E[(size_t) u * ni + i] += ref.W[u * k] * ref.H[i * k];
			for (int32_t u = 0; u < nu; u++)
			{
				double		num = 0.0,
							den = lambda * ref.nu_cnt[u];

				for (int32_t i = 0; i < ni; i++)
					if (ref.M[(size_t) u * ni + i])
					{
						num += ref.E[(size_t) u * ni + i] * ref.H[i * k];
						den += ref.H[i * k] * ref.H[i * k];
					}
				ref.W[u * k] = den > 0 ? num / den : 0.0;
			}
			for (int32_t i = 0; i < ni; i++)
			{
				double		num = 0.0,
							den = lambda * ref.ni_cnt[i];

				for (int32_t u = 0; u < nu; u++)
					if (ref.M[(size_t) u * ni + i])
					{
						num += ref.E[(size_t) u * ni + i] * ref.W[u * k];
						den += ref.W[u * k] * ref.W[u * k];
					}
				ref.H[i * k] = den > 0 ? num / den : 0.0;
			}
		}

		CHECK(gm_cpu_ccd_ops.create(&h, &d, &p, NULL, dev, sizeof(dev), err, sizeof(err)) == GM_OK,
			  "create: %s", err);
		for (int s = 0; s < nsw; s++)
		{
			gm_sweep	sw;

			CHECK(gm_cpu_ccd_ops.begin_sweep(h, s, &sw, err, sizeof(err)) == GM_OK, "%s", err);
			CHECK(gm_cpu_ccd_ops.run(h, s, 0, sw.n_rows, err, sizeof(err)) == GM_OK, "%s", err);
		}
		CHECK(gm_cpu_ccd_ops.download(h, &d, err, sizeof(err)) == GM_OK, "%s", err);
		gm_cpu_ccd_ops.destroy(h);
		h = NULL;

		e1 = max_rel_f(pr.X, ref.W, (int64_t) ref.nu * k, 1e-2);
		CHECK(e1 < 1e-3, "trial %d (k %d, biases %d): W differs by %.3g", trial, k, biases, e1);
		e1 = max_rel_f(pr.Y, ref.H, (int64_t) ref.ni * k, 1e-2);
		CHECK(e1 < 1e-3, "trial %d (k %d, biases %d): H differs by %.3g", trial, k, biases, e1);
		if (biases)
		{
			e1 = max_rel_f(pr.ub, ref.b, ref.nu, 1e-3);
			CHECK(e1 < 1e-4, "trial %d: user biases differ by %.3g", trial, e1);
			e1 = max_rel_f(pr.ib, ref.c, ref.ni, 1e-3);
			CHECK(e1 < 1e-4, "trial %d: item biases differ by %.3g", trial, e1);
		}
		ccd_ref_free(&ref);
		problem_free(&pr);
		continue;
fail:
		if (h)
			gm_cpu_ccd_ops.destroy(h);
		return 1;
	}
	return 0;
}

/*
 * Whole CCD++ iterations (random k, inner iterations, biases, slicing)
 * against the dense float64 reference: factors, loss and RMSE; and the
 * reported RMSE equals the RMSE of the downloaded model (the maintained
 * residual is the true one).
 */
static int
test_ccd_iterations(void)
{
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 10; trial++)
	{
		int			biases = trial % 2;
		int			k = (int) rint_range(1, 6);
		int			iters = (int) rint_range(1, 4);
		problem		pr;
		gm_mf_params p = params(GM_ALG_CCD, k, iters, (float) (0.1 + runif()), biases);
		gm_mf_data	d;
		ccd_ref		ref;
		gm_mf_metrics hist[4];
		double		loss,
					rmse,
					e1,
					sse;

		p.inner_iterations = (int) rint_range(1, 3);
		p.threads = (int) rint_range(1, 3);
		problem_random(&pr, (int32_t) rint_range(10, 50), (int32_t) rint_range(10, 40),
					   0.1 + 0.4 * runif(), k);
		d = problem_data(&pr, biases);
		ccd_ref_init(&ref, &pr, biases);
		CHECK(drive(&gm_cpu_ccd_ops, &d, &p, (int32_t) rint_range(0, 7), -1, hist, err) == GM_OK,
			  "drive: %s", err);
		for (int it = 0; it < iters; it++)
		{
			ccd_ref_iteration(&ref, p.regularization, p.inner_iterations, biases);
			ccd_ref_loss(&ref, p.regularization, pr.R.nnz, &loss, &rmse);
			CHECK(fabs(hist[it].rmse - rmse) <= 1e-4 * rmse + 1e-6,
				  "trial %d iteration %d: rmse %.8g, reference %.8g", trial, it, hist[it].rmse, rmse);
			CHECK(fabs(hist[it].loss - loss) <= 1e-4 * loss + 1e-6,
				  "trial %d iteration %d: loss %.8g, reference %.8g", trial, it, hist[it].loss, loss);
		}
		e1 = max_normwise_f(pr.X, ref.W, (int64_t) ref.nu * k);
		CHECK(e1 < 1e-4, "trial %d: W differs by %.3g of its largest entry", trial, e1);
		e1 = max_normwise_f(pr.Y, ref.H, (int64_t) ref.ni * k);
		CHECK(e1 < 1e-4, "trial %d: H differs by %.3g of its largest entry", trial, e1);
		sse = model_sse(&pr.R, pr.X, pr.Y, k, biases ? pr.ub : NULL,
						biases ? pr.ib : NULL, biases ? pr.mu : 0.0);
		CHECK(fabs(sqrt(sse / pr.R.nnz) - hist[iters - 1].rmse) <= 1e-4 * hist[iters - 1].rmse,
			  "trial %d: reported rmse %.8g, the downloaded model's %.8g", trial,
			  hist[iters - 1].rmse, sqrt(sse / pr.R.nnz));
		ccd_ref_free(&ref);
		problem_free(&pr);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* Gaussian elimination with partial pivoting in long double: x = A^-1 b. */
static void
solve_ld(long double *A, long double *b, int n)
{
	for (int c = 0; c < n; c++)
	{
		int			piv = c;

		for (int r = c + 1; r < n; r++)
			if (fabsl(A[r * n + c]) > fabsl(A[piv * n + c]))
				piv = r;
		for (int j = 0; j < n; j++)
		{
			long double t = A[c * n + j];

			A[c * n + j] = A[piv * n + j];
			A[piv * n + j] = t;
		}
		{
			long double t = b[c];

			b[c] = b[piv];
			b[piv] = t;
		}
		for (int r = c + 1; r < n; r++)
		{
			long double f = A[r * n + c] / A[c * n + c];

			for (int j = c; j < n; j++)
				A[r * n + j] -= f * A[c * n + j];
			b[r] -= f * b[c];
		}
	}
	for (int r = n - 1; r >= 0; r--)
	{
		long double s = b[r];

		for (int j = r + 1; j < n; j++)
			s -= A[r * n + j] * b[j];
		b[r] = s / A[r * n + r];
	}
}

/*
 * One explicit-ALS row solve against a float64 (long double) solve of the
 * same system, with and without the bias coordinate.
 */
static int
test_als_row(void)
{
	for (int trial = 0; trial < 200; trial++)
	{
		int			k = (int) rint_range(1, 48);
		int			biases = trial % 2;
		int			kk = k + biases;
		int			ldy = k + 1 + (int) rint_range(0, 3);
		int32_t		m = (int32_t) rint_range(1, 300);
		int64_t		n = rint_range(0, m);
		int32_t    *idx = xmalloc(sizeof(int32_t) * (n + 1));
		float	   *vals = xmalloc(sizeof(float) * (n + 1));
		float	   *Y = xmalloc(sizeof(float) * (size_t) m * ldy);
		float	   *x = xmalloc(sizeof(float) * kk);
		float	   *fw = xmalloc(sizeof(float) * kk * (kk + 2));
		double	   *dw = xmalloc(sizeof(double) * kk * (kk + 1));
		long double *A = xcalloc((size_t) kk * kk, sizeof(long double));
		long double *b = xcalloc(kk, sizeof(long double));
		double		lambda = 0.01 + runif(),
					reg = lambda * (n > 0 ? n : 1),
					shift = biases ? 3.0 * runif() : 0.0,
					worst = 0.0,
					scale = 0.0;
		int			rc;

		for (int64_t e = 0; e < (int64_t) m * ldy; e++)
			Y[e] = (float) (runif() - 0.5);
		for (int64_t e = 0; e < n; e++)
		{
			idx[e] = (int32_t) rint_range(0, m - 1);
			vals[e] = (float) (1.0 + 4.0 * runif());
		}
		for (int64_t e = 0; e < n; e++)
		{
			const float *y = Y + (size_t) idx[e] * ldy;
			long double yy[64];
			long double t = vals[e] - shift - (biases ? y[k] : 0.0f);

			for (int a = 0; a < k; a++)
				yy[a] = y[a];
			if (biases)
				yy[k] = 1.0L;
			for (int a = 0; a < kk; a++)
			{
				b[a] += t * yy[a];
				for (int c = 0; c < kk; c++)
					A[a * kk + c] += yy[a] * yy[c];
			}
		}
		for (int a = 0; a < kk; a++)
			A[a * kk + a] += reg;
		solve_ld(A, b, kk);

		for (int a = 0; a < kk; a++)
			x[a] = NAN;
		rc = gm_als_explicit_solve_row(idx, vals, n, Y, ldy, k, kk,
									   biases ? Y + k : NULL, shift, reg, x, fw, dw);
		for (int a = 0; a < kk; a++)
			if (fabsl(b[a]) > scale)
				scale = fabsl(b[a]);
		for (int a = 0; a < kk; a++)
		{
			double		dd = fabs(x[a] - (double) b[a]);

			if (!(dd <= worst))
				worst = isnan(dd) ? INFINITY : dd;
		}
		free(idx);
		free(vals);
		free(Y);
		free(x);
		free(fw);
		free(dw);
		free(A);
		free(b);
		CHECK(rc == 0, "trial %d: solve reports failure", trial);
		CHECK(worst <= 1e-4 * (scale + 1e-3),
			  "trial %d (k %d, biases %d, n %lld): max error %.3g at scale %.3g",
			  trial, k, biases, (long long) n, worst, scale);
	}
	return 0;
fail:
	return 1;
}

/*
 * Whole explicit-ALS iterations, sweep by sweep: after each sweep (run in
 * random slices) the model is downloaded and the swept side compared with
 * float64 solves of the same systems built from the model before the sweep
 * (so float32 rounding does not accumulate into the comparison); then the
 * reported loss and RMSE against float64 sums over the downloaded model.
 */
static int
test_als_iterations(void)
{
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 8; trial++)
	{
		int			biases = trial % 2;
		int			k = (int) rint_range(1, 8);
		int			kk = k + biases;
		problem		pr;
		gm_mf_params p = params(GM_ALG_ALS_EXPLICIT, k, 2, (float) (0.02 + 0.3 * runif()), biases);
		gm_mf_data	d;
		gm_mf_metrics m;
		int32_t		nu,
					ni;
		double	   *F[2] = {NULL, NULL};
		double		sse = 0.0,
					pen = 0.0;
		void	   *h = NULL;
		char		dev[64];

		p.threads = (int) rint_range(1, 3);
		problem_random(&pr, (int32_t) rint_range(10, 60), (int32_t) rint_range(10, 50),
					   0.1 + 0.4 * runif(), k);
		nu = pr.R.n_rows;
		ni = pr.R.n_cols;
		F[0] = xcalloc((size_t) nu * (k + 1), sizeof(double));
		F[1] = xcalloc((size_t) ni * (k + 1), sizeof(double));
		d = problem_data(&pr, biases);
		CHECK(gm_cpu_als_explicit_ops.create(&h, &d, &p, NULL, dev, sizeof(dev), err, sizeof(err)) == GM_OK,
			  "create: %s", err);
		for (int it = 0; it < 2; it++)
			for (int s = 0; s < 2; s++)
			{
				const gm_csr *A = s == 0 ? &pr.R : &pr.Rt;
				gm_sweep	sw;
				double		worst = 0.0;

				/* the model before the sweep, as float64 rows of k + 1 */
				for (int32_t u = 0; u < nu; u++)
				{
					for (int f = 0; f < k; f++)
						F[0][u * (k + 1) + f] = pr.X[u * k + f];
					F[0][u * (k + 1) + k] = biases ? pr.ub[u] : 0.0;
				}
				for (int32_t i = 0; i < ni; i++)
				{
					for (int f = 0; f < k; f++)
						F[1][i * (k + 1) + f] = pr.Y[i * k + f];
					F[1][i * (k + 1) + k] = biases ? pr.ib[i] : 0.0;
				}
				CHECK(gm_cpu_als_explicit_ops.begin_sweep(h, s, &sw, err, sizeof(err)) == GM_OK, "%s", err);
				for (int32_t b = 0; b < sw.n_rows;)
				{
					int32_t		e = b + (int32_t) rint_range(1, 9);

					e = e > sw.n_rows ? sw.n_rows : e;
					CHECK(gm_cpu_als_explicit_ops.run(h, s, b, e, err, sizeof(err)) == GM_OK, "%s", err);
					b = e;
				}
				CHECK(gm_cpu_als_explicit_ops.download(h, &d, err, sizeof(err)) == GM_OK, "%s", err);
				for (int32_t r = 0; r < A->n_rows; r++)
				{
					long double M[100],
								bb[10],
								scale = 0.0L;
					int64_t		n = A->indptr[r + 1] - A->indptr[r];

					memset(M, 0, sizeof(M));
					memset(bb, 0, sizeof(bb));
					for (int64_t e = A->indptr[r]; e < A->indptr[r + 1]; e++)
					{
						const double *y = F[1 - s] + (size_t) A->indices[e] * (k + 1);
						long double yy[10];
						long double t = A->data[e] - (biases ? pr.mu + y[k] : 0.0);

						for (int a = 0; a < k; a++)
							yy[a] = y[a];
						yy[k] = 1.0L;
						for (int a = 0; a < kk; a++)
						{
							bb[a] += t * yy[a];
							for (int c = 0; c < kk; c++)
								M[a * kk + c] += yy[a] * yy[c];
						}
					}
					for (int a = 0; a < kk; a++)
						M[a * kk + a] += (long double) p.regularization * (n > 0 ? n : 1);
					solve_ld(M, bb, kk);
					for (int a = 0; a < kk; a++)
						if (fabsl(bb[a]) > scale)
							scale = fabsl(bb[a]);
					for (int a = 0; a < kk; a++)
					{
						double		got = s == 0 ? (a < k ? pr.X[r * k + a] : pr.ub[r])
							: (a < k ? pr.Y[r * k + a] : pr.ib[r]);
						double		dd = fabs(got - (double) bb[a]) / (1e-3 + (double) scale);

						if (!(dd <= worst))
							worst = isnan(dd) ? INFINITY : dd;
					}
				}
				CHECK(worst < 1e-3, "trial %d (k %d, biases %d) iteration %d sweep %d: rows differ by %.3g of their scale",
					  trial, k, biases, it, s, worst);
			}
		CHECK(gm_cpu_als_explicit_ops.evaluate(h, &m, err, sizeof(err)) == GM_OK, "%s", err);
		gm_cpu_als_explicit_ops.destroy(h);
		h = NULL;
		/* loss and RMSE of the trained model, in float64 */
		for (int32_t u = 0; u < nu; u++)
			for (int64_t e = pr.R.indptr[u]; e < pr.R.indptr[u + 1]; e++)
			{
				int32_t		i = pr.R.indices[e];
				double		q = biases ? pr.mu + pr.ub[u] + pr.ib[i] : 0.0;

				for (int f = 0; f < k; f++)
					q += (double) pr.X[u * k + f] * pr.Y[i * k + f];
				sse += (pr.R.data[e] - q) * (pr.R.data[e] - q);
			}
		for (int s = 0; s < 2; s++)
		{
			const gm_csr *A = s == 0 ? &pr.R : &pr.Rt;

			for (int32_t r = 0; r < A->n_rows; r++)
				for (int f = 0; f < kk; f++)
				{
					double		v = s == 0 ? (f < k ? pr.X[r * k + f] : pr.ub[r])
						: (f < k ? pr.Y[r * k + f] : pr.ib[r]);

					pen += v * v * (double) (A->indptr[r + 1] - A->indptr[r]);
				}
		}
		CHECK(fabs(m.rmse - sqrt(sse / pr.R.nnz)) <= 1e-5 * m.rmse,
			  "trial %d: rmse %.8g, reference %.8g", trial, m.rmse, sqrt(sse / pr.R.nnz));
		CHECK(fabs(m.loss - (sse + p.regularization * pen) / pr.R.nnz) <= 1e-5 * m.loss,
			  "trial %d: loss %.8g, reference %.8g", trial, m.loss,
			  (sse + p.regularization * pen) / pr.R.nnz);
		free(F[0]);
		free(F[1]);
		problem_free(&pr);
		continue;
fail:
		if (h)
			gm_cpu_als_explicit_ops.destroy(h);
		free(F[0]);
		free(F[1]);
		return 1;
	}
	return 0;
}

/*
 * Results do not depend on the number of threads or on how sweeps are
 * sliced: every row's arithmetic is sequential and the same.
 */
static int
test_threads_slices(void)
{
	char		err[GM_ERRLEN];

	for (int alg = 0; alg < 2; alg++)
	{
		const gm_algo_ops *ops = alg == 0 ? &gm_cpu_ccd_ops : &gm_cpu_als_explicit_ops;
		problem		a,
					b;
		uint64_t	st = rng_state;
		int			k = 4;
		gm_mf_params p = params(alg == 0 ? GM_ALG_CCD : GM_ALG_ALS_EXPLICIT, k, 3, 0.1f, 1);
		gm_mf_data	da,
					db;
		gm_mf_metrics ha[3],
					hb[3];

		problem_random(&a, 80, 60, 0.2, k);
		rng_state = st;
		problem_random(&b, 80, 60, 0.2, k);
		da = problem_data(&a, 1);
		db = problem_data(&b, 1);
		p.threads = 1;
		CHECK(drive(ops, &da, &p, 0, -1, ha, err) == GM_OK, "%s", err);
		p.threads = 3;
		CHECK(drive(ops, &db, &p, 7, -1, hb, err) == GM_OK, "%s", err);
		CHECK(memcmp(a.X, b.X, sizeof(float) * 80 * k) == 0 &&
			  memcmp(a.Y, b.Y, sizeof(float) * 60 * k) == 0 &&
			  memcmp(a.ub, b.ub, sizeof(float) * 80) == 0 &&
			  memcmp(a.ib, b.ib, sizeof(float) * 60) == 0,
			  "%s: 1 thread, one slice differs from 3 threads, slices of 7", ops == &gm_cpu_ccd_ops ? "ccd" : "als_explicit");
		/* only the loss's final reduction depends on the threads */
		CHECK(fabs(ha[2].loss - hb[2].loss) <= 1e-12 * ha[2].loss,
			  "loss %.17g vs %.17g", ha[2].loss, hb[2].loss);
		problem_free(&a);
		problem_free(&b);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* should_stop that answers yes from its n-th poll on; counts the polls */
typedef struct stopper
{
	int			polls;
	int			stop_at;
	int			iterations;
	double		last_loss;
	double		last_rmse;
} stopper;

static int
stop_cb(void *arg)
{
	stopper    *s = arg;

	return ++s->polls >= s->stop_at;
}

static void
iteration_cb(void *arg, int iteration, double loss, double rmse, double seconds)
{
	stopper    *s = arg;

	s->iterations = iteration;
	s->last_loss = loss;
	s->last_rmse = rmse;
}

/*
 * Through gm_mf_train (the registered CPU tables): a cancel mid-training
 * returns GM_ECANCELED with a message and leaves nothing behind (a training
 * afterwards equals one on a pristine copy); the per-iteration callback gets
 * the loss and the training RMSE; bad parameters are refused by name.
 */
static int
test_train_cancel(void)
{
	char		err[GM_ERRLEN];

	for (int alg = 0; alg < 2; alg++)
	{
		gm_algorithm a = alg == 0 ? GM_ALG_CCD : GM_ALG_ALS_EXPLICIT;
		problem		pa,
					pb;
		uint64_t	st = rng_state;
		gm_mf_params p;
		gm_mf_data	da,
					db;
		gm_mf_result res;
		stopper		sa,
					sb;
		gm_callbacks cba,
					cbb;

		gm_mf_params_defaults(&p, a);
		p.factors = 3;
		p.iterations = 4;
		p.threads = 2;
		CHECK(gm_algo_ops_get(a, GM_BACKEND_CPU, err, sizeof(err)) != NULL,
			  "%s has no CPU table: %s", gm_algorithm_name(a), err);
		problem_random(&pa, 60, 40, 0.3, 3);
		rng_state = st;
		problem_random(&pb, 60, 40, 0.3, 3);
		da = problem_data(&pa, 1);
		db = problem_data(&pb, 1);
		memset(&sa, 0, sizeof(sa));
		memset(&sb, 0, sizeof(sb));
		sa.stop_at = 2;
		sb.stop_at = 1 << 30;
		cba.should_stop = stop_cb;
		cba.on_iteration = iteration_cb;
		cba.arg = &sa;
		cbb = cba;
		cbb.arg = &sb;
		err[0] = '\0';
		CHECK(gm_mf_train(&p, &da, &cba, &res, err, sizeof(err)) == GM_ECANCELED && err[0] != '\0',
			  "%s: not canceled (polls %d)", gm_algorithm_name(a), sa.polls);
		CHECK(gm_mf_train(&p, &da, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_mf_train(&p, &db, &cbb, &res, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(memcmp(pa.X, pb.X, sizeof(float) * 60 * 3) == 0 &&
			  memcmp(pa.Y, pb.Y, sizeof(float) * 40 * 3) == 0 &&
			  memcmp(pa.ub, pb.ub, sizeof(float) * 60) == 0,
			  "%s: training after a cancel differs", gm_algorithm_name(a));
		CHECK(sb.iterations == 4 && res.iterations_run == 4 &&
			  sb.last_loss == res.final.loss && sb.last_rmse == res.final.rmse &&
			  isfinite(res.final.rmse) && res.final.rmse > 0,
			  "%s: callback saw iteration %d loss %g rmse %g; result %d, %g, %g",
			  gm_algorithm_name(a), sb.iterations, sb.last_loss, sb.last_rmse,
			  res.iterations_run, res.final.loss, res.final.rmse);
		{
			double		sse = model_sse(&pb.R, pb.X, pb.Y, 3, pb.ub, pb.ib, db.global_mean);

			CHECK(fabs(sqrt(sse / pb.R.nnz) - res.final.rmse) <= 1e-4 * res.final.rmse,
				  "%s: reported rmse %.8g, the trained model's %.8g", gm_algorithm_name(a),
				  res.final.rmse, sqrt(sse / pb.R.nnz));
		}
		p.factors = 0;
		CHECK(gm_mf_train(&p, &da, NULL, &res, err, sizeof(err)) == GM_EINVAL &&
			  strstr(err, "factors") != NULL, "factors 0: %s", err);
		problem_free(&pa);
		problem_free(&pb);
		continue;
fail:
		return 1;
	}
	return 0;
}

/*
 * The tables refuse what they cannot train, with a message: no factors,
 * biases on without bias arrays; and a state destroyed mid-iteration (a
 * cancel between slices) leaves the caller's arrays as they were.
 */
static int
test_ops_refuse(void)
{
	char		err[GM_ERRLEN];

	for (int alg = 0; alg < 2; alg++)
	{
		const gm_algo_ops *ops = alg == 0 ? &gm_cpu_ccd_ops : &gm_cpu_als_explicit_ops;
		problem		a;
		gm_mf_params p = params(alg == 0 ? GM_ALG_CCD : GM_ALG_ALS_EXPLICIT, 3, 2, 0.1f, 1);
		gm_mf_data	da;
		float	   *X0;
		void	   *h = NULL;
		char		dev[64];

		problem_random(&a, 50, 30, 0.3, 3);
		X0 = xmalloc(sizeof(float) * 50 * 3);
		memcpy(X0, a.X, sizeof(float) * 50 * 3);
		da = problem_data(&a, 1);
		CHECK(drive(ops, &da, &p, 5, 3, NULL, err) == GM_ECANCELED, "not abandoned");
		CHECK(memcmp(a.X, X0, sizeof(float) * 50 * 3) == 0,
			  "an abandoned training changed the caller's factors");
		p.factors = 0;
		err[0] = '\0';
		CHECK(ops->create(&h, &da, &p, NULL, dev, sizeof(dev), err, sizeof(err)) == GM_EINVAL &&
			  h == NULL && err[0] != '\0', "factors 0 accepted");
		p.factors = 3;
		da.user_bias = NULL;
		err[0] = '\0';
		CHECK(ops->create(&h, &da, &p, NULL, dev, sizeof(dev), err, sizeof(err)) == GM_EINVAL &&
			  h == NULL && err[0] != '\0', "biases without bias arrays accepted");
		free(X0);
		problem_free(&a);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------ planted data */

typedef struct planted
{
	gm_ratings_spec spec;
	int64_t		n;
	int32_t    *u,
			   *i;
	float	   *r;
	uint8_t    *ho;
} planted;

static void
planted_make(planted *pl, int32_t nu, int32_t ni, int64_t n, int rank,
			 double noise, double mean, double bias_sd, uint64_t seed)
{
	char		err[GM_ERRLEN];

	memset(pl, 0, sizeof(*pl));
	pl->spec.n_users = nu;
	pl->spec.n_items = ni;
	pl->spec.n_ratings = n;
	pl->spec.rank = rank;
	pl->spec.noise = noise;
	pl->spec.mean = mean;
	pl->spec.bias_sd = bias_sd;
	pl->spec.holdout = 0.1;
	pl->spec.popularity_exponent = 0.8;
	pl->spec.min_per_user = 20;
	pl->spec.seed = seed;
	pl->n = n;
	pl->u = xmalloc(sizeof(int32_t) * n);
	pl->i = xmalloc(sizeof(int32_t) * n);
	pl->r = xmalloc(sizeof(float) * n);
	pl->ho = xmalloc(n);
	if (gm_synth_ratings(&pl->spec, pl->u, pl->i, pl->r, pl->ho, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "harness: %s\n", err);
		exit(2);
	}
}

static void
planted_free(planted *pl)
{
	free(pl->u);
	free(pl->i);
	free(pl->r);
	free(pl->ho);
}

/* The training part as a problem (factors from gm_factors_init). */
static void
planted_problem(const planted *pl, problem *pr, int k, uint64_t seed)
{
	int64_t		m = 0;
	int32_t    *u = xmalloc(sizeof(int32_t) * pl->n),
			   *i = xmalloc(sizeof(int32_t) * pl->n);
	float	   *r = xmalloc(sizeof(float) * pl->n);
	double		sum = 0.0;

	for (int64_t e = 0; e < pl->n; e++)
		if (!pl->ho[e])
		{
			u[m] = pl->u[e];
			i[m] = pl->i[e];
			r[m] = pl->r[e];
			sum += r[m];
			m++;
		}
	problem_from_coo(pr, pl->spec.n_users, pl->spec.n_items, m, u, i, r, k);
	gm_factors_init(pr->X, pl->spec.n_users, k, seed, 0);
	gm_factors_init(pr->Y, pl->spec.n_items, k, seed, 1);
	pr->mu = sum / m;
	free(u);
	free(i);
	free(r);
}

/* RMSE of the model on the held-out ratings. */
static double
planted_test_rmse(const planted *pl, const problem *pr, int biases)
{
	double		sse = 0.0;
	int64_t		m = 0;

	for (int64_t e = 0; e < pl->n; e++)
		if (pl->ho[e])
		{
			int32_t		u = pl->u[e],
						i = pl->i[e];
			double		p = biases ? pr->mu + pr->ub[u] + pr->ib[i] : 0.0;

			for (int f = 0; f < pr->k; f++)
				p += (double) pr->X[(size_t) u * pr->k + f] * pr->Y[(size_t) i * pr->k + f];
			sse += (pl->r[e] - p) * (pl->r[e] - p);
			m++;
		}
	return sqrt(sse / m);
}

/*
 * The generator: the exact count, distinct items per user, deterministic in
 * the seed and independent of threads; held-out share, mean and variance of
 * the ratings as planted (1 + 2 bias_sd^2 + noise^2 around mean).
 */
static int
test_synth_ratings(void)
{
	char		err[GM_ERRLEN];
	planted		a;
	gm_ratings_spec s;
	int32_t    *u2,
			   *i2;
	float	   *r2;
	uint8_t    *h2,
			   *seen;
	double		sum = 0.0,
				sq = 0.0,
				var,
				ho = 0.0;
	uint64_t	seed = rnext();

	planted_make(&a, 3000, 800, 150000, 4, 0.5, 3.0, 0.3, seed);
	s = a.spec;
	s.threads = 1;
	u2 = xmalloc(sizeof(int32_t) * a.n);
	i2 = xmalloc(sizeof(int32_t) * a.n);
	r2 = xmalloc(sizeof(float) * a.n);
	h2 = xmalloc(a.n);
	seen = xcalloc((size_t) 3000 * 800, 1);
	CHECK(gm_synth_ratings(&s, u2, i2, r2, h2, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(memcmp(a.u, u2, sizeof(int32_t) * a.n) == 0 && memcmp(a.i, i2, sizeof(int32_t) * a.n) == 0 &&
		  memcmp(a.r, r2, sizeof(float) * a.n) == 0 && memcmp(a.ho, h2, a.n) == 0,
		  "1 thread and many threads differ");
	for (int64_t e = 0; e < a.n; e++)
	{
		size_t		cell = (size_t) a.u[e] * 800 + a.i[e];

		CHECK(a.u[e] >= 0 && a.u[e] < 3000 && a.i[e] >= 0 && a.i[e] < 800, "index out of range");
		CHECK(!seen[cell], "user %d rates item %d twice", a.u[e], a.i[e]);
		seen[cell] = 1;
		sum += a.r[e];
		sq += (double) a.r[e] * a.r[e];
		ho += a.ho[e];
	}
	var = sq / a.n - (sum / a.n) * (sum / a.n);
	CHECK(fabs(sum / a.n - 3.0) < 0.1, "mean rating %.4f, planted 3.0", sum / a.n);
	CHECK(fabs(var - (1.0 + 2 * 0.09 + 0.25)) < 0.2, "variance %.4f, planted 1.43", var);
	CHECK(fabs(ho / a.n - 0.1) < 0.01, "held out %.4f, asked 0.1", ho / a.n);
	s.n_ratings = 3000LL * 401;
	CHECK(gm_synth_ratings(&s, u2, i2, r2, h2, err, sizeof(err)) == GM_EINVAL &&
		  strstr(err, "n_ratings") != NULL, "too many ratings accepted: %s", err);
	free(u2);
	free(i2);
	free(r2);
	free(h2);
	free(seen);
	planted_free(&a);
	return 0;
fail:
	free(u2);
	free(i2);
	free(r2);
	free(h2);
	free(seen);
	planted_free(&a);
	return 1;
}

/*
 * The planted test: 2,000 x 1,000, rank 5, sigma 0.5, 500k ratings, 10%
 * held out, trained by gm_mf_train from its own start.  Both algorithms reach a held-out RMSE within 5% of sigma; with
 * biases on data that has biases, and with biases off on data without.  A
 * model without biases on biased data must do clearly worse (the biases are
 * really fitted when on).
 */
static int
test_planted(void)
{
	const double sigma = 0.5;
	char		err[GM_ERRLEN];
	uint64_t	seed = rnext();
	planted		biased,
				plain;

	planted_make(&biased, 2000, 1000, 500000, 5, sigma, 3.5, 0.4, seed);
	planted_make(&plain, 2000, 1000, 500000, 5, sigma, 0.0, 0.0, seed + 1);
	for (int alg = 0; alg < 2; alg++)
		for (int variant = 0; variant < 3; variant++)
		{
			/* 0: biased data, biases on; 1: plain data, off; 2: biased, off */
			const planted *pl = variant == 1 ? &plain : &biased;
			int			biases = variant == 0;
			problem		pr;
			gm_mf_params p;
			gm_mf_data	d;
			gm_mf_result res;
			double		rmse;

			gm_mf_params_defaults(&p, alg == 0 ? GM_ALG_CCD : GM_ALG_ALS_EXPLICIT);
			p.factors = 5;
			p.biases = biases;
			p.inner_iterations = 1;
			/* one (weighted) lambda for both: about sigma^2 / var(w) / n_u */
			p.regularization = 0.004f;
			p.iterations = alg == 0 ? 25 : 15;
			planted_problem(pl, &pr, 5, seed);
			d = problem_data(&pr, biases);
			if (gm_mf_train(&p, &d, NULL, &res, err, sizeof(err)) != GM_OK)
			{
				problem_free(&pr);
				FAIL("%s", err);
			}
			pr.mu = d.global_mean;
			rmse = planted_test_rmse(pl, &pr, biases);
			printf("# %s, %s: training rmse %.4f, held-out %.4f (sigma %.2f)\n",
				   alg == 0 ? "ccd" : "als_explicit",
				   variant == 0 ? "biased data, biases on" :
				   variant == 1 ? "plain data, biases off" : "biased data, biases off",
				   res.final.rmse, rmse, sigma);
			problem_free(&pr);
			if (variant < 2)
				CHECK(rmse <= 1.05 * sigma, "%s variant %d: held-out rmse %.4f > 1.05 sigma",
					  alg == 0 ? "ccd" : "als_explicit", variant, rmse);
			else
				CHECK(rmse > 1.15 * sigma, "%s: no biases on biased data still reaches %.4f",
					  alg == 0 ? "ccd" : "als_explicit", rmse);
		}
	planted_free(&biased);
	planted_free(&plain);
	return 0;
fail:
	planted_free(&biased);
	planted_free(&plain);
	return 1;
}

/* ------------------------------------------------------------ main */

/*
 * gm_mf_train's slices (gm_sweep_slice_end, a binary search) against the
 * row-by-row walk it replaced, on random row lengths (empty rows, one very
 * long row), budgets and work weights, from every start.
 */
static int
test_slice_end(void)
{
	for (int round = 0; round < 200; round++)
	{
		int32_t		n = (int32_t) rint_range(1, 400);
		int64_t    *ptr = xmalloc(sizeof(int64_t) * (size_t) (n + 1));
		gm_sweep	sw;
		double		budget;

		ptr[0] = 0;
		for (int32_t i = 0; i < n; i++)
			ptr[i + 1] = ptr[i] + (runif() < 0.2 ? 0 : (runif() < 0.01 ? rint_range(1000, 50000) : rint_range(1, 60)));
		memset(&sw, 0, sizeof(sw));
		sw.n_rows = n;
		sw.indptr = round % 10 == 9 ? NULL : ptr;
		/* a backend's cap on a slice's rows (its work arrays), every third round */
		sw.max_rows = round % 3 == 1 ? (int32_t) rint_range(1, 50) : 0;
		sw.row_work = round % 7 == 3 ? 0.0 : (double) rint_range(0, 16);
		sw.nnz_work = (double) rint_range(0, 8);
		budget = round % 5 == 4 ? 0.0 : exp(runif() * 12.0);
		for (int32_t b = 0; b < n; b++)
		{
			double		w = 0.0,
						got_w = -1.0;
			int32_t		end = b,
						got;

			while (end < n && (end == b || w < budget) && (sw.max_rows == 0 || end - b < sw.max_rows))
			{
				w += sw.row_work + sw.nnz_work * (sw.indptr ? (double) (ptr[end + 1] - ptr[end]) : 0.0);
				end++;
			}
			got = gm_sweep_slice_end(&sw, b, budget, &got_w);
			if (got != end || fabs(got_w - w) > 1e-9 * (1.0 + w))
			{
				free(ptr);
				FAIL("round %d, n %d, begin %d, budget %g, row %g, nnz %g, max rows %d: end %d work %g, the walk %d %g",
					 round, n, b, budget, sw.row_work, sw.nnz_work, sw.max_rows, got, got_w, end, w);
			}
		}
		free(ptr);
	}
	return 0;
fail:
	return 1;
}

static const gm_test tests[] = {
	{"gm_mf_train's slices: the binary search ends where the row walk did, within max_rows", test_slice_end},
	{"ccd plan: slots and terms stay consistent", test_ccd_plan},
	{"ccd rank-one update matches its float64 closed form", test_ccd_rank_one},
	{"ccd iterations match dense float64 CCD++", test_ccd_iterations},
	{"als_explicit row solve matches a float64 solve", test_als_row},
	{"als_explicit sweeps match float64 solves of the same systems", test_als_iterations},
	{"explicit models: same result for any threads and slicing", test_threads_slices},
	{"gm_mf_train: cancel leaves no state, callbacks get loss and rmse", test_train_cancel},
	{"ops tables refuse bad input; abandoning leaves the caller's arrays", test_ops_refuse},
	{"planted ratings generator", test_synth_ratings},
	{"planted rank-5 data: held-out rmse within 5% of sigma", test_planted},
};

int
main(void)
{
	return gm_test_main(tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
