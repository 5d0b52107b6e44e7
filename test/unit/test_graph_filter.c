/*
 * test_graph_filter.c: the graph-filter model (src/core/train/graph_filter.c)
 * against a float64 reference: the normalized item-item graph built densely,
 * its eigenvectors by Jacobi rotations, and the scores
 * r_u D^-beta V diag(h) V^T D^beta computed from them.
 */
#include "gm_core.h"
#include "harness.h"

#include <math.h>
#include <string.h>

/* Eigen-decomposition of the symmetric n x n A (destroyed) by cyclic Jacobi: w, V (columns). */
static void
jacobi_eigen(double *A, int n, double *w, double *V)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			V[i * n + j] = i == j;
	for (int sweep = 0; sweep < 100; sweep++)
	{
		double		off = 0.0;

		for (int p = 0; p < n; p++)
			for (int q = p + 1; q < n; q++)
				off += A[p * n + q] * A[p * n + q];
		if (off < 1e-26)
			break;
		for (int p = 0; p < n; p++)
			for (int q = p + 1; q < n; q++)
			{
				double		apq = A[p * n + q],
							theta,
							t,
							cs,
							sn;

				if (fabs(apq) < 1e-300)
					continue;
				theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
				t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
				cs = 1 / sqrt(t * t + 1);
				sn = t * cs;
				for (int k = 0; k < n; k++)
				{
					double		akp = A[k * n + p],
								akq = A[k * n + q];

					A[k * n + p] = cs * akp - sn * akq;
					A[k * n + q] = sn * akp + cs * akq;
				}
				for (int k = 0; k < n; k++)
				{
					double		apk = A[p * n + k],
								aqk = A[q * n + k];

					A[p * n + k] = cs * apk - sn * aqk;
					A[q * n + k] = sn * apk + cs * aqk;
				}
				for (int k = 0; k < n; k++)
				{
					double		vkp = V[k * n + p],
								vkq = V[k * n + q];

					V[k * n + p] = cs * vkp - sn * vkq;
					V[k * n + q] = sn * vkp + cs * vkq;
				}
			}
	}
	for (int i = 0; i < n; i++)
		w[i] = A[i * n + i];
}

typedef struct gf_problem
{
	int32_t		nu,
				ni;
	double	   *Rd;				/* nu x ni, 0/1 */
	gm_csr		R,
				Rt;
} gf_problem;

/*
 * A random binary matrix (values as read: positive strengths, which the
 * model ignores) with every user and item present; with blocks > 0, users
 * and items fall into that many communities and mostly meet inside them.
 */
static int
make_problem(gf_problem *pr, int32_t nu, int32_t ni, double density, int blocks)
{
	int64_t		cap = (int64_t) nu * ni,
				n = 0;
	int32_t    *u = xmalloc(sizeof(int32_t) * cap),
			   *i = xmalloc(sizeof(int32_t) * cap);
	float	   *v = xmalloc(sizeof(float) * cap);
	char		err[GM_ERRLEN];

	pr->nu = nu;
	pr->ni = ni;
	pr->Rd = calloc((size_t) cap, sizeof(double));
	for (int32_t a = 0; a < nu; a++)
		for (int32_t b = 0; b < ni; b++)
		{
			double		pa = density;

			if (blocks > 0)
				pa = (a % blocks == b % blocks) ? 4 * density : density / 4;
			if (runif() < pa || b == a % ni || a == b % nu)
			{
				u[n] = a;
				i[n] = b;
				v[n] = (float) (1 + rint_range(0, 4));
				pr->Rd[(size_t) a * ni + b] = 1;
				n++;
			}
		}
	if (gm_csr_from_coo(nu, ni, n, u, i, v, &pr->R, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&pr->R, &pr->Rt, err, sizeof(err)) != GM_OK)
		return -1;
	free(u);
	free(i);
	free(v);
	return 0;
}

static void
free_problem(gf_problem *pr)
{
	free(pr->Rd);
	gm_csr_free(&pr->R);
	gm_csr_free(&pr->Rt);
}

/*
 * The float64 reference: eigenvalues (descending) of P and the scores of the
 * model truncated to d columns (nu x ni).
 */
static void
reference(const gf_problem *pr, int d, double alpha, double *lam, double *S)
{
	int32_t		nu = pr->nu,
				ni = pr->ni;
	double	   *du = calloc(nu, sizeof(double)),
			   *di = calloc(ni, sizeof(double)),
			   *P = calloc((size_t) ni * ni, sizeof(double)),
			   *w = calloc(ni, sizeof(double)),
			   *E = calloc((size_t) ni * ni, sizeof(double)),
			   *M = calloc((size_t) ni * ni, sizeof(double));
	int		   *ord = calloc(ni, sizeof(int));

	for (int32_t a = 0; a < nu; a++)
		for (int32_t b = 0; b < ni; b++)
		{
			du[a] += pr->Rd[(size_t) a * ni + b];
			di[b] += pr->Rd[(size_t) a * ni + b];
		}
	for (int32_t x = 0; x < ni; x++)
		for (int32_t y = 0; y < ni; y++)
		{
			double		s = 0.0;

			for (int32_t a = 0; a < nu; a++)
				if (pr->Rd[(size_t) a * ni + x] != 0 && pr->Rd[(size_t) a * ni + y] != 0)
					s += 1.0 / du[a];
			P[(size_t) x * ni + y] = s / sqrt(di[x] * di[y]);
		}
	jacobi_eigen(P, ni, w, E);
	for (int j = 0; j < ni; j++)
		ord[j] = j;
	for (int a = 0; a < ni; a++)	/* sort descending */
		for (int b = a + 1; b < ni; b++)
			if (w[ord[b]] > w[ord[a]])
			{
				int			t = ord[a];

				ord[a] = ord[b];
				ord[b] = t;
			}
	for (int j = 0; j < ni; j++)
		lam[j] = w[ord[j]];
	/* M = D^-beta V_d diag(h) V_d^T D^beta */
	for (int32_t x = 0; x < ni; x++)
		for (int32_t y = 0; y < ni; y++)
		{
			double		s = 0.0;

			for (int j = 0; j < d; j++)
			{
				double		l = lam[j] < 0 ? 0 : lam[j] > 1 ? 1 : lam[j];

				s += E[(size_t) x * ni + ord[j]] * gm_gf_filter(l, j, alpha) *
					E[(size_t) y * ni + ord[j]];
			}
			M[(size_t) x * ni + y] = pow(di[x], -GM_GF_BETA) * s * pow(di[y], GM_GF_BETA);
		}
	for (int32_t a = 0; a < nu; a++)
		for (int32_t y = 0; y < ni; y++)
		{
			double		s = 0.0;

			for (int32_t x = 0; x < ni; x++)
				s += pr->Rd[(size_t) a * ni + x] * M[(size_t) x * ni + y];
			S[(size_t) a * ni + y] = s;
		}
	free(du);
	free(di);
	free(P);
	free(w);
	free(E);
	free(M);
	free(ord);
}

/* Train on the CPU tables; factors into X, Y, the filter into h. */
static int
train(const gf_problem *pr, int d, int iterations, uint64_t seed, float *X, float *Y,
	  float *h, double *loss, char *err, size_t errlen)
{
	gm_mf_params p;
	gm_mf_data	md;
	gm_mf_result res;

	gm_mf_params_defaults(&p, GM_ALG_GRAPH_FILTER);
	p.factors = d;
	p.iterations = iterations;
	p.seed = seed;
	p.threads = 2;
	memset(&md, 0, sizeof(md));
	md.R = &pr->R;
	md.Rt = &pr->Rt;
	md.X = X;
	md.Y = Y;
	md.filter = h;
	if (gm_mf_train(&p, &md, NULL, &res, err, errlen) != GM_OK)
		return -1;
	*loss = res.final.loss;
	return 0;
}

/* The largest |X_u . Y_i - S_ui| over every pair; *smax the largest |S_ui|. */
static double
score_diff(const float *X, const float *Y, const double *S, int32_t nu, int32_t ni, int d,
		   double *smax)
{
	double		dmax = 0;

	*smax = 0;
	for (int32_t a = 0; a < nu; a++)
		for (int32_t b = 0; b < ni; b++)
		{
			double		s = 0;

			for (int f = 0; f < d; f++)
				s += (double) X[(size_t) a * d + f] * Y[(size_t) b * d + f];
			*smax = fmax(*smax, fabs(S[(size_t) a * ni + b]));
			dmax = fmax(dmax, fabs(s - S[(size_t) a * ni + b]));
		}
	return dmax;
}

/* With as many factors as items the model is exact: scores equal the reference's. */
static int
test_full_rank(void)
{
	gf_problem	pr;
	int32_t		nu = (int32_t) rint_range(40, 70),
				ni = (int32_t) rint_range(20, 35);
	double	   *lam = xmalloc(sizeof(double) * ni),
			   *S = xmalloc(sizeof(double) * (size_t) nu * ni),
				smax = 0,
				dmax = 0,
				loss;
	float	   *X = xmalloc(sizeof(float) * (size_t) nu * ni),
			   *Y = xmalloc(sizeof(float) * (size_t) ni * ni),
			   *h = xmalloc(sizeof(float) * ni);
	char		err[GM_ERRLEN];

	memset(&pr, 0, sizeof(pr));
	CHECK(make_problem(&pr, nu, ni, 0.15, 0) == 0, "problem");
	reference(&pr, ni, GM_GF_DEFAULT_ALPHA, lam, S);
	CHECK(train(&pr, ni, 3, rnext(), X, Y, h, &loss, err, sizeof(err)) == 0, "%s", err);
	CHECK(fabs(lam[0] - 1.0) < 1e-9, "the top eigenvalue of the normalized graph is %g, not 1", lam[0]);
	CHECK(loss < 1e-3, "the whole space holds all the energy: loss %g", loss);
	for (int j = 0; j < ni; j++)
	{
		double		l = lam[j] < 0 ? 0 : lam[j];

		CHECK(fabs(h[j] - gm_gf_filter(l, j, GM_GF_DEFAULT_ALPHA)) < 1e-3,
			  "filter of column %d: %g, reference %g", j, h[j], gm_gf_filter(l, j, GM_GF_DEFAULT_ALPHA));
	}
	dmax = score_diff(X, Y, S, nu, ni, ni, &smax);
	CHECK(dmax <= 1e-4 * smax + 1e-6, "scores differ from the float64 reference by %g (largest %g)",
		  dmax, smax);
	free_problem(&pr);
	free(lam);
	free(S);
	free(X);
	free(Y);
	free(h);
	return 0;
fail:
	free_problem(&pr);
	return 1;
}

/*
 * Truncated: on data with communities (a spectral gap after the first few
 * eigenvalues) the top-d eigenvalues, the filter and the scores match the
 * reference's rank-d model; the loss falls as the iterations go on.
 */
static int
test_truncated(void)
{
	gf_problem	pr;
	int			blocks = 4,
				d = 4;
	int32_t		nu = 200,
				ni = 120;
	double	   *lam = xmalloc(sizeof(double) * ni),
			   *S = xmalloc(sizeof(double) * (size_t) nu * ni),
				smax = 0,
				dmax = 0,
				loss1,
				loss8;
	float	   *X = xmalloc(sizeof(float) * (size_t) nu * d),
			   *Y = xmalloc(sizeof(float) * (size_t) ni * d),
			   *h = xmalloc(sizeof(float) * d);
	char		err[GM_ERRLEN];
	uint64_t	seed = rnext();

	memset(&pr, 0, sizeof(pr));
	CHECK(make_problem(&pr, nu, ni, 0.05, blocks) == 0, "problem");
	reference(&pr, d, GM_GF_DEFAULT_ALPHA, lam, S);
	CHECK(lam[d - 1] > 2 * lam[d], "no gap after %d eigenvalues: %g, %g", d, lam[d - 1], lam[d]);
	CHECK(train(&pr, d, 1, seed, X, Y, h, &loss1, err, sizeof(err)) == 0, "%s", err);
	CHECK(train(&pr, d, 30, seed, X, Y, h, &loss8, err, sizeof(err)) == 0, "%s", err);
	CHECK(loss8 <= loss1 + 1e-6, "the loss grew with the iterations: %g, then %g", loss1, loss8);
	for (int j = 0; j < d; j++)
		CHECK(fabs(h[j] - gm_gf_filter(lam[j], j, GM_GF_DEFAULT_ALPHA)) < 1e-3,
			  "filter of column %d: %g, reference %g (eigenvalue %g)", j, h[j],
			  gm_gf_filter(lam[j], j, GM_GF_DEFAULT_ALPHA), lam[j]);
	dmax = score_diff(X, Y, S, nu, ni, d, &smax);
	CHECK(dmax <= 1e-3 * smax, "rank-%d scores differ from the reference by %g (largest %g)",
		  d, dmax, smax);
	free_problem(&pr);
	free(lam);
	free(S);
	free(X);
	free(Y);
	free(h);
	return 0;
fail:
	free_problem(&pr);
	return 1;
}

/* Bad shapes are refused with a message; the filter follows ChebyCF's samples. */
static int
test_checks(void)
{
	gf_problem	pr;
	float	   *X = xmalloc(sizeof(float) * 64 * 64),
			   *Y = xmalloc(sizeof(float) * 64 * 64);
	double		loss;
	char		err[GM_ERRLEN] = "";

	memset(&pr, 0, sizeof(pr));
	CHECK(fabs(gm_gf_filter(0.5, 600, 0) - 0.5) < 1e-6, "h(0.5) = %g", gm_gf_filter(0.5, 600, 0));
	CHECK(fabs(gm_gf_filter(1.0, 600, 0) - 1.005) < 1e-3, "h(1) = %g", gm_gf_filter(1.0, 600, 0));
	CHECK(fabs(gm_gf_filter(0.1, 600, 0) - 0.096) < 1e-3, "h(0.1) = %g", gm_gf_filter(0.1, 600, 0));
	CHECK(fabs(gm_gf_filter(0.1, 0, 0.2) - 0.296) < 1e-3, "the ideal pass adds alpha");
	CHECK(gm_gf_columns(1024, 100000) == 1280 && gm_gf_columns(1024, 1100) == 1100, "columns");
	CHECK(make_problem(&pr, 30, 20, 0.2, 0) == 0, "problem");
	CHECK(train(&pr, 21, 2, 1, X, Y, NULL, &loss, err, sizeof(err)) != 0 &&
		  strstr(err, "at most the number of items") != NULL, "21 factors of 20 items: %s", err);
	/* without X (serving forms the users): the same item factors */
	{
		float	   *Y2 = xmalloc(sizeof(float) * 64 * 64);
		double		loss2;

		CHECK(train(&pr, 8, 3, 5, X, Y, NULL, &loss, err, sizeof(err)) == 0, "%s", err);
		CHECK(train(&pr, 8, 3, 5, NULL, Y2, NULL, &loss2, err, sizeof(err)) == 0, "without X: %s", err);
		CHECK(memcmp(Y, Y2, sizeof(float) * 20 * 8) == 0 && loss == loss2,
			  "without X the item factors or the loss differ");
		free(Y2);
	}
	free_problem(&pr);
	free(X);
	free(Y);
	return 0;
fail:
	free_problem(&pr);
	return 1;
}

static const gm_test tests[] = {
	{"graph_filter: all factors equal the float64 reference's scores", test_full_rank},
	{"graph_filter: truncated, the top eigenvalues, filter and scores match", test_truncated},
	{"graph_filter: the filter's samples; too many factors refused; no user factors asked for", test_checks},
};

int
main(void)
{
	return gm_test_main(tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
