/*
 * ml100k_rmse.c: held-out RMSE of gpumf's explicit models (CCD++ and
 * weighted-lambda ALS, biases on) on MovieLens 100K, through the core's
 * gm_mf_train on the CPU.  No PostgreSQL.
 *
 * The ratings file is not part of gpumf (its terms forbid redistribution):
 * fetch ml-100k for local use and pass u.data's path.
 *
 *     make ml100k_rmse && ./ml100k_rmse /path/to/ml-100k/u.data [seed]
 *
 * Protocol: a seeded random 90/10 split of the ratings into train and test;
 * a seeded 10% of train is set aside as validation; for each algorithm and
 * factors 10 and 40, every lambda of a small grid is trained on the rest of
 * train and scored on validation; the best lambda is retrained on the whole
 * train part and scored on test (RMSE of the raw predictions, and clipped to
 * the training range [1, 5]).  Both algorithms weigh lambda by each row's
 * number of ratings, so they share one grid.  The last column trains the
 * whole train part with the default regularization (gm_mf_params_defaults)
 * and scores it on test.
 */
#include "gm_explicit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ratings
{
	int64_t		n;
	int32_t    *u,
			   *i;
	float	   *r;
} ratings;

static void *
xmalloc(size_t n)
{
	void	   *p = malloc(n > 0 ? n : 1);

	if (!p)
	{
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

static void
ratings_alloc(ratings *a, int64_t cap)
{
	a->n = 0;
	a->u = xmalloc(sizeof(int32_t) * cap);
	a->i = xmalloc(sizeof(int32_t) * cap);
	a->r = xmalloc(sizeof(float) * cap);
}

static void
ratings_push(ratings *a, int32_t u, int32_t i, float r)
{
	a->u[a->n] = u;
	a->i[a->n] = i;
	a->r[a->n] = r;
	a->n++;
}

static void
ratings_free(ratings *a)
{
	free(a->u);
	free(a->i);
	free(a->r);
}

static uint64_t rng;

static uint64_t
rnext(void)
{
	uint64_t	z = (rng += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* Fisher-Yates on the ratings' order */
static void
shuffle(ratings *a)
{
	for (int64_t e = a->n - 1; e > 0; e--)
	{
		int64_t		j = (int64_t) (rnext() % (uint64_t) (e + 1));
		int32_t		t;
		float		f;

		t = a->u[e], a->u[e] = a->u[j], a->u[j] = t;
		t = a->i[e], a->i[e] = a->i[j], a->i[j] = t;
		f = a->r[e], a->r[e] = a->r[j], a->r[j] = f;
	}
}

/* u.data: user id, item id, rating, timestamp (tab separated), ids from 1 */
static void
read_udata(const char *path, ratings *all, int32_t *nu, int32_t *ni)
{
	FILE	   *f = fopen(path, "r");
	long		u,
				i,
				t;
	double		r;

	if (!f)
	{
		perror(path);
		exit(2);
	}
	ratings_alloc(all, 200000);
	*nu = *ni = 0;
	while (fscanf(f, "%ld %ld %lf %ld", &u, &i, &r, &t) == 4)
	{
		if (u < 1 || i < 1 || u > 1000000 || i > 1000000 || all->n >= 200000)
		{
			fprintf(stderr, "%s: unexpected line (user %ld, item %ld)\n", path, u, i);
			exit(2);
		}
		ratings_push(all, (int32_t) u - 1, (int32_t) i - 1, (float) r);
		if (u > *nu)
			*nu = (int32_t) u;
		if (i > *ni)
			*ni = (int32_t) i;
	}
	fclose(f);
}

typedef struct model
{
	int			k;
	float	   *X,
			   *Y,
			   *ub,
			   *ib;
	double		mu;
} model;

/* Train alg on the ratings tr (biases on); the model into m. */
static int
train(gm_algorithm alg, const ratings *tr, int32_t nu, int32_t ni, int k,
	  float lambda, int iterations, model *m, double *train_rmse)
{
	char		err[GM_ERRLEN];
	gm_csr		R,
				Rt;
	gm_mf_params p;
	gm_mf_data	d;
	gm_mf_result res;
	int			rc;

	if (gm_csr_from_coo(nu, ni, tr->n, tr->u, tr->i, tr->r, &R, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&R, &Rt, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "%s\n", err);
		exit(2);
	}
	m->k = k;
	m->X = xmalloc(sizeof(float) * nu * k);
	m->Y = xmalloc(sizeof(float) * ni * k);
	m->ub = xmalloc(sizeof(float) * nu);
	m->ib = xmalloc(sizeof(float) * ni);
	gm_mf_params_defaults(&p, alg);
	p.factors = k;
	p.iterations = iterations;
	p.regularization = lambda;
	memset(&d, 0, sizeof(d));
	d.R = &R;
	d.Rt = &Rt;
	d.X = m->X;
	d.Y = m->Y;
	d.user_bias = m->ub;
	d.item_bias = m->ib;
	rc = gm_mf_train(&p, &d, NULL, &res, err, sizeof(err));
	if (rc != GM_OK)
		fprintf(stderr, "gm_mf_train: %s\n", err);
	m->mu = d.global_mean;
	*train_rmse = res.final.rmse;
	gm_csr_free(&R);
	gm_csr_free(&Rt);
	return rc;
}

static void
model_free(model *m)
{
	free(m->X);
	free(m->Y);
	free(m->ub);
	free(m->ib);
}

/* RMSE of m on te; clip: predictions clipped to [lo, hi] */
static double
rmse(const model *m, const ratings *te, int clip, double lo, double hi)
{
	double		sse = 0.0;

	for (int64_t e = 0; e < te->n; e++)
	{
		int32_t		u = te->u[e],
					i = te->i[e];
		double		p = m->mu + m->ub[u] + m->ib[i];

		for (int f = 0; f < m->k; f++)
			p += (double) m->X[(size_t) u * m->k + f] * m->Y[(size_t) i * m->k + f];
		if (clip)
			p = p < lo ? lo : (p > hi ? hi : p);
		sse += (te->r[e] - p) * (te->r[e] - p);
	}
	return sqrt(sse / te->n);
}

int
main(int argc, char **argv)
{
	ratings		all,
				train_part,
				test_part,
				fit,
				valid;
	int32_t		nu,
				ni;
	uint64_t	seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 42;
	const int	ks[2] = {10, 40};
	/* both: lambda weighted by each row's count of ratings */
	const float grid[] = {0.04f, 0.06f, 0.08f, 0.1f, 0.11f, 0.12f, 0.13f, 0.15f, 0.2f};
	const int	ngrid = 9;
	double		lo = 1e300,
				hi = -1e300,
				sum = 0.0;

	if (argc < 2)
	{
		fprintf(stderr, "usage: %s path/to/ml-100k/u.data [seed]\n", argv[0]);
		return 2;
	}
	read_udata(argv[1], &all, &nu, &ni);
	rng = seed;
	shuffle(&all);
	ratings_alloc(&train_part, all.n);
	ratings_alloc(&test_part, all.n);
	ratings_alloc(&fit, all.n);
	ratings_alloc(&valid, all.n);
	for (int64_t e = 0; e < all.n; e++)
	{
		if (e < all.n / 10)
			ratings_push(&test_part, all.u[e], all.i[e], all.r[e]);
		else
		{
			ratings_push(&train_part, all.u[e], all.i[e], all.r[e]);
			/* every tenth training rating validates the lambda */
			if ((e - all.n / 10) % 10 == 0)
				ratings_push(&valid, all.u[e], all.i[e], all.r[e]);
			else
				ratings_push(&fit, all.u[e], all.i[e], all.r[e]);
			lo = all.r[e] < lo ? all.r[e] : lo;
			hi = all.r[e] > hi ? all.r[e] : hi;
			sum += all.r[e];
		}
	}
	printf("# MovieLens 100K: %lld ratings, %d users, %d items; seed %llu: train %lld (fit %lld + validation %lld), test %lld\n",
		   (long long) all.n, nu, ni, (unsigned long long) seed, (long long) train_part.n,
		   (long long) fit.n, (long long) valid.n, (long long) test_part.n);
	{
		double		mean = sum / train_part.n,
					sse = 0.0;

		for (int64_t e = 0; e < test_part.n; e++)
			sse += (test_part.r[e] - mean) * (test_part.r[e] - mean);
		printf("# reference: the training mean (%.4f) predicts test with RMSE %.4f\n", mean,
			   sqrt(sse / test_part.n));
	}
	printf("# biases on; ccd: inner_iterations 3, 30 iterations; als_explicit: 20 iterations; both: lambda weighted by counts\n\n");
	printf("| algorithm | factors | lambda grid (validation RMSE) | best lambda | train RMSE | test RMSE | test RMSE, clipped [%.0f, %.0f] | test RMSE at the default lambda |\n",
		   lo, hi);
	printf("|---|---|---|---|---|---|---|---|\n");
	for (int a = 0; a < 2; a++)
	{
		gm_algorithm alg = a == 0 ? GM_ALG_CCD : GM_ALG_ALS_EXPLICIT;
		int			iterations = a == 0 ? 30 : 20;
		gm_mf_params dp;

		gm_mf_params_defaults(&dp, alg);

		for (int ki = 0; ki < 2; ki++)
		{
			char		cells[1024];
			size_t		len = 0;
			double		best = 1e300,
						tr_rmse;
			float		best_lambda = grid[0];
			model		m;

			cells[0] = '\0';
			for (int g = 0; g < ngrid; g++)
			{
				double		v;

				if (train(alg, &fit, nu, ni, ks[ki], grid[g], iterations, &m, &tr_rmse) != GM_OK)
					return 1;
				v = rmse(&m, &valid, 0, lo, hi);
				model_free(&m);
				len += snprintf(cells + len, sizeof(cells) - len, "%s%g: %.4f", g ? ", " : "",
								grid[g], v);
				if (v < best)
				{
					best = v;
					best_lambda = grid[g];
				}
			}
			if (train(alg, &train_part, nu, ni, ks[ki], best_lambda, iterations, &m, &tr_rmse) != GM_OK)
				return 1;
			printf("| %s | %d | %s | %g | %.4f | %.4f | %.4f |", gm_algorithm_name(alg), ks[ki],
				   cells, best_lambda, tr_rmse, rmse(&m, &test_part, 0, lo, hi),
				   rmse(&m, &test_part, 1, lo, hi));
			model_free(&m);
			if (train(alg, &train_part, nu, ni, ks[ki], dp.regularization, iterations, &m, &tr_rmse) != GM_OK)
				return 1;
			printf(" %g: %.4f |\n", dp.regularization, rmse(&m, &test_part, 0, lo, hi));
			fflush(stdout);
			model_free(&m);
		}
	}
	ratings_free(&all);
	ratings_free(&train_part);
	ratings_free(&test_part);
	ratings_free(&fit);
	ratings_free(&valid);
	return 0;
}
