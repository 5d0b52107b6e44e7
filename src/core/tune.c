/*
 * tune.c: hyper-parameter search for implicit ALS (gm_tune): factors, the
 * unobserved weight alpha0, the ridge and its frequency exponent nu, and
 * the iteration count (each trial stops early on the held-out metric and
 * reports its best iteration).
 *
 * Every trial is a full training of the same data in one session
 * (gm_mf_session), so a GPU keeps the matrices between trials.  Two
 * methods share the budget of trials and trial 1, the defaults:
 *
 *   random  uniform draws from the space (log-uniform for alpha0 and the
 *           ridge), the baseline;
 *   local   a quarter of the budget (at least 2) as a Latin hypercube over
 *           the space, then each trial a move from one of the best three
 *           settings so far (the best two times in three): every
 *           continuous coordinate moves with probability 1/2 (at least one
 *           does) by a normal step of sigma times its range, sigma going
 *           from 0.25 down to 0.06 over the trials, the factors one
 *           candidate up or down with probability 1/3.  The ridge is
 *           searched as the ridge of an average user (gm_tune_space), on
 *           which the other coordinates hardly move the optimum, so
 *           coordinate moves make progress.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[GM_TUNE_COUNT] = {
	[GM_TUNE_LOCAL] = "local",
	[GM_TUNE_RANDOM] = "random",
};

/* The method's name, or NULL. */
const char *
gm_tune_method_name(gm_tune_method m)
{
	if ((int) m < 0 || m >= GM_TUNE_COUNT)
		return NULL;
	return method_names[m];
}

/* The method a name stands for. */
int
gm_tune_method_from_name(const char *name, gm_tune_method *m)
{
	for (int i = 0; name != NULL && i < GM_TUNE_COUNT; i++)
		if (strcmp(name, method_names[i]) == 0)
		{
			*m = (gm_tune_method) i;
			return GM_OK;
		}
	return GM_EINVAL;
}

/* The default search space (see gm_core.h). */
void
gm_tune_space_defaults(gm_tune_space *s)
{
	memset(s, 0, sizeof(*s));
	s->factors[0] = 32;
	s->factors[1] = 64;
	s->factors[2] = 128;
	s->n_factors = 3;
	s->alpha0_lo = 1e-3;
	s->alpha0_hi = 1.0;
	s->reg_lo = 1e-3;
	s->reg_hi = 1e3;
	s->nu_lo = 0.0;
	s->nu_hi = 1.0;
}

/* A point of the space: the factor candidate and three coordinates in [0, 1]. */
typedef struct point
{
	int			fi;				/* index into factors */
	double		u[3];			/* alpha0, reg_eff, nu, each mapped from [0, 1] */
} point;

typedef struct rng
{
	uint64_t	s;
} rng;

/* uniform [0, 1) */
static double
unif(rng *r)
{
	r->s += 0x9E3779B97F4A7C15ULL;
	return (gm_mix64(r->s) >> 11) * (1.0 / 9007199254740992.0);
}

/* standard normal (Box-Muller) */
static double
normal(rng *r)
{
	double		a = unif(r) + 1e-300,
				b = unif(r);

	return sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b);
}

/* log-uniform or uniform map of u in [0, 1] onto [lo, hi] */
static double
map_log(double u, double lo, double hi)
{
	return lo > 0 && hi > lo ? exp(log(lo) + u * (log(hi) - log(lo))) : lo;
}

static double
map_lin(double u, double lo, double hi)
{
	return lo + u * (hi - lo);
}

/* the inverse maps, clamped to [0, 1] */
static double
unmap_log(double v, double lo, double hi)
{
	double		u = lo > 0 && hi > lo && v > 0 ? (log(v) - log(lo)) / (log(hi) - log(lo)) : 0.0;

	return u < 0 ? 0 : u > 1 ? 1 : u;
}

static double
unmap_lin(double v, double lo, double hi)
{
	double		u = hi > lo ? (v - lo) / (hi - lo) : 0.0;

	return u < 0 ? 0 : u > 1 ? 1 : u;
}

/* u reflected into [0, 1] */
static double
reflect(double u)
{
	while (u < 0 || u > 1)
		u = u < 0 ? -u : 2.0 - u;
	return u;
}

/* The parameters of point x: cfg->base with the searched fields set. */
static gm_mf_params
point_params(const gm_tune_config *cfg, const point *x, double mean_count,
			 int32_t n_items, double *reg_eff)
{
	gm_mf_params p = cfg->base;
	const gm_tune_space *sp = &cfg->space;

	p.factors = sp->factors[x->fi];
	p.alpha0 = (float) map_log(x->u[0], sp->alpha0_lo, sp->alpha0_hi);
	*reg_eff = map_log(x->u[1], sp->reg_lo, sp->reg_hi);
	p.nu = (float) map_lin(x->u[2], sp->nu_lo, sp->nu_hi);
	p.regularization = (float) (*reg_eff /
								pow(mean_count + (double) p.alpha0 * n_items, p.nu));
	return p;
}

/* The point nearest to gpumf's defaults (trial 1). */
static point
default_point(const gm_tune_config *cfg, double mean_count, int32_t n_items)
{
	gm_mf_params d;
	const gm_tune_space *sp = &cfg->space;
	point		x;
	int			best = 0;

	gm_mf_params_defaults(&d, GM_ALG_ALS_IMPLICIT);
	for (int i = 1; i < sp->n_factors; i++)
		if (abs(sp->factors[i] - d.factors) < abs(sp->factors[best] - d.factors))
			best = i;
	x.fi = best;
	x.u[0] = unmap_log(d.alpha0, sp->alpha0_lo, sp->alpha0_hi);
	x.u[2] = unmap_lin(d.nu, sp->nu_lo, sp->nu_hi);
	/* reg_eff of the default ridge at the nu and alpha0 the point gets */
	x.u[1] = unmap_log(d.regularization *
					   pow(mean_count + map_log(x.u[0], sp->alpha0_lo, sp->alpha0_hi) * n_items,
						   map_lin(x.u[2], sp->nu_lo, sp->nu_hi)),
					   sp->reg_lo, sp->reg_hi);
	return x;
}

/* Checks of the configuration; the message names what is wrong. */
static int
check_config(const gm_tune_config *cfg, char *err, size_t errlen)
{
	const gm_tune_space *sp = &cfg->space;

	if (cfg->budget < 1 || cfg->budget > 1000)
	{
		snprintf(err, errlen, "budget must be between 1 and 1000, not %d", cfg->budget);
		return GM_EINVAL;
	}
	if (sp->n_factors < 1 || sp->n_factors > 16)
	{
		snprintf(err, errlen, "factors: give 1 to 16 candidates, not %d", sp->n_factors);
		return GM_EINVAL;
	}
	for (int i = 0; i < sp->n_factors; i++)
		if (sp->factors[i] < 1 || sp->factors[i] > 1024 ||
			(i > 0 && sp->factors[i] <= sp->factors[i - 1]))
		{
			snprintf(err, errlen, "factors: candidates must be ascending, distinct and between 1 and 1024");
			return GM_EINVAL;
		}
	if (!(sp->alpha0_lo > 0) || !(sp->alpha0_hi >= sp->alpha0_lo) || !isfinite(sp->alpha0_hi) ||
		!(sp->reg_lo > 0) || !(sp->reg_hi >= sp->reg_lo) || !isfinite(sp->reg_hi) ||
		!(sp->nu_lo >= 0) || !(sp->nu_hi >= sp->nu_lo) || !(sp->nu_hi <= 1))
	{
		snprintf(err, errlen, "search ranges: alpha0 and the ridge need 0 < lo <= hi, nu 0 <= lo <= hi <= 1");
		return GM_EINVAL;
	}
	if (cfg->K < 1 || cfg->eval_every < 1 || cfg->patience < 0 ||
		(int) cfg->metric < 0 || cfg->metric >= GM_METRIC_COUNT ||
		(int) cfg->method < 0 || cfg->method >= GM_TUNE_COUNT)
	{
		snprintf(err, errlen, "tune: bad metric, K, evaluation interval, patience or method");
		return GM_EINVAL;
	}
	if (cfg->base.algorithm != GM_ALG_ALS_IMPLICIT)
	{
		snprintf(err, errlen, "tune searches implicit ALS only");
		return GM_ENOTSUP;
	}
	return GM_OK;
}

/* Index of the i-th best trial of n (0: the best); ties go to the earlier. */
static int
ranked(const gm_tune_trial *t, int n, int i)
{
	int			order[3] = {-1, -1, -1};

	for (int j = 0; j < n; j++)
		for (int r = 0; r < 3; r++)
			if (order[r] < 0 || t[j].metric > t[order[r]].metric)
			{
				for (int q = 2; q > r; q--)
					order[q] = order[q - 1];
				order[r] = j;
				break;
			}
	return order[i < n ? i : n - 1];
}

/* The search (see gm_core.h). */
int
gm_tune(const gm_tune_config *cfg, const gm_csr *R, const gm_csr *Rt,
		const gm_csr *valid, const gm_callbacks *cb, gm_tune_trial *trials,
		int *best, char *err, size_t errlen)
{
	const gm_tune_space *sp = &cfg->space;
	gm_mf_session *s = NULL;
	point	   *pts = NULL;
	float	   *X = NULL,
			   *Y = NULL;
	double		mean_count;
	int			maxk,
				n_init,
				rc;
	rng			r;

	*best = -1;
	if ((rc = check_config(cfg, err, errlen)) != GM_OK)
		return rc;
	if (R == NULL || Rt == NULL || valid == NULL || valid->n_rows != R->n_rows ||
		valid->n_cols != R->n_cols || R->n_rows < 1)
	{
		snprintf(err, errlen, "tune: the held-out entries must have the training data's shape");
		return GM_EINVAL;
	}
	maxk = sp->factors[sp->n_factors - 1];
	mean_count = (double) R->nnz / R->n_rows;
	s = gm_mf_session_create();
	pts = malloc(sizeof(point) * (size_t) cfg->budget);
	X = malloc(sizeof(float) * (size_t) R->n_rows * maxk);
	Y = malloc(sizeof(float) * (size_t) R->n_cols * maxk);
	if (!s || !pts || !X || !Y)
	{
		snprintf(err, errlen, "out of memory for the search (%d factors at most)", maxk);
		rc = GM_ENOMEM;
		goto done;
	}
	r.s = gm_mix64(cfg->seed ^ 0x5EA2C4ULL);
	n_init = cfg->method == GM_TUNE_LOCAL ? cfg->budget / 4 : cfg->budget;
	if (n_init < 2)
		n_init = 2;

	/* trial 1 the defaults; then a Latin hypercube (local) or uniform draws */
	pts[0] = default_point(cfg, mean_count, R->n_cols);
	{
		int			m = n_init - 1;

		for (int d = 0; d < 4 && m > 0; d++)
		{
			/* a random permutation of the m strata of coordinate d */
			int		   *perm = malloc(sizeof(int) * m);

			if (perm == NULL)
			{
				snprintf(err, errlen, "out of memory for the search");
				rc = GM_ENOMEM;
				goto done;
			}
			for (int i = 0; i < m; i++)
				perm[i] = i;
			for (int i = m - 1; i > 0; i--)
			{
				int			j = (int) (unif(&r) * (i + 1));
				int			t = perm[i];

				perm[i] = perm[j];
				perm[j] = t;
			}
			for (int i = 0; i < m && 1 + i < cfg->budget; i++)
			{
				double		u = cfg->method == GM_TUNE_LOCAL ? (perm[i] + unif(&r)) / m : unif(&r);

				if (d == 3)
					pts[1 + i].fi = (int) (u * sp->n_factors) < sp->n_factors ?
						(int) (u * sp->n_factors) : sp->n_factors - 1;
				else
					pts[1 + i].u[d] = u;
			}
			free(perm);
		}
	}

	for (int t = 0; t < cfg->budget; t++)
	{
		gm_tune_trial *tr = &trials[t];
		gm_mf_eval	ev;
		gm_mf_result res;
		gm_mf_data	d;
		double		t0;

		if (t >= n_init)
		{
			/* a move from one of the best three (local) */
			double		sigma = 0.25 - 0.19 * (double) (t - n_init) /
				(cfg->budget - n_init > 1 ? cfg->budget - n_init - 1 : 1);
			int			parent = ranked(trials, t, unif(&r) < 2.0 / 3.0 ? 0 :
										(int) (1 + unif(&r) * 2));
			point		x = pts[parent];
			int			moved = 0;

			while (!moved)
			{
				for (int c = 0; c < 3; c++)
					if (unif(&r) < 0.5)
					{
						x.u[c] = reflect(x.u[c] + sigma * normal(&r));
						moved = 1;
					}
			}
			if (sp->n_factors > 1 && unif(&r) < 1.0 / 3.0)
			{
				int			step = unif(&r) < 0.5 ? -1 : 1;

				if (x.fi + step < 0 || x.fi + step >= sp->n_factors)
					step = -step;
				x.fi += step;
			}
			pts[t] = x;
		}
		memset(tr, 0, sizeof(*tr));
		tr->trial = t + 1;
		tr->p = point_params(cfg, &pts[t], mean_count, R->n_cols, &tr->reg_eff);
		memset(&ev, 0, sizeof(ev));
		ev.test = valid;
		ev.metric = cfg->metric;
		ev.K = cfg->K;
		ev.every = cfg->eval_every;
		ev.patience = cfg->patience;
		memset(&d, 0, sizeof(d));
		d.R = R;
		d.Rt = Rt;
		d.X = X;
		d.Y = Y;
		t0 = gm_now();
		rc = gm_mf_session_train(s, &tr->p, &d, cb, &ev, &res, err, errlen);
		if (rc != GM_OK)
			goto done;
		tr->seconds = gm_now() - t0;
		tr->metric = ev.best;
		tr->result = ev.best_result;
		tr->iterations_run = res.iterations_run;
		tr->p.iterations = ev.best_iteration;
		if (*best < 0 || tr->metric > trials[*best].metric)
			*best = t;
		if (cfg->on_trial)
			cfg->on_trial(cfg->arg, tr);
	}
	rc = GM_OK;

done:
	gm_mf_session_free(s);
	free(pts);
	free(X);
	free(Y);
	return rc;
}
