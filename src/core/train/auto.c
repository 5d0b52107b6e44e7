/*
 * auto.c: the hyper-parameters a bare gpumf_train picks by itself
 * (gm_auto_tune).
 *
 * A structured search on a validation split carved from the training rows,
 * within a time budget, in one training session (a GPU keeps the matrices
 * between trials):
 *
 * implicit ALS (Rendle et al. 2022's form: the unobserved weight alpha0 and
 * the frequency-scaled ridge regularization * (n + alpha0 m)^nu, iALS++'s
 * block solver):
 *   1. at GM_AUTO_START_FACTORS factors, a coordinate search from a start
 *      that transfers across data sets (GM_AUTO_START_*, chosen from the
 *      searches of test/bench/README.md): the ridge of an average user
 *      (reg_eff, on which alpha0 and nu hardly move the optimum), then
 *      alpha0, then nu; each coordinate keeps moving while the held-out
 *      metric improves, first by large steps, then by half steps;
 *   2. a ladder of factors, doubling while the metric improves (and the
 *      next trial's predicted time fits the budget), each rung also trying
 *      twice the ridge (more factors want more regularization);
 *   3. the half steps once more around the best.
 *   Every trial stops early on the held-out metric; its best iteration is
 *   the iteration count chosen.
 *
 * explicit ALS and CCD++: by held-out RMSE, the weighted lambda on a log
 * scale (steps x4 from 0.05), then the factors (halved or doubled from 64
 * while it improves), then lambda again by steps x2 and x1.41, at the
 * given or default iterations.
 *
 * Fixed fields (cfg->fixed) are never moved: explicit settings win.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the search's coordinates: log alpha0, log reg_eff (or log lambda), nu */
typedef struct apoint
{
	int			k;
	double		la0;			/* log alpha0 */
	double		lreg;			/* log reg_eff (implicit) or log lambda (explicit) */
	double		nu;
} apoint;

/* the caller's should_stop, and the search's deadline (0: none) */
typedef struct deadline_stop
{
	const gm_callbacks *user;
	double		deadline;
	int			fired;
} deadline_stop;

typedef struct search
{
	const gm_auto_config *cfg;
	const gm_csr *R;
	const gm_csr *Rt;
	const gm_csr *valid;
	const gm_callbacks *cb;
	gm_mf_session *s;
	float	   *X,
			   *Y,
			   *ub,
			   *ib;
	double		mean_count;
	gm_tune_trial *trials;
	apoint	   *pts;
	int			n;				/* trials run */
	int			best;
	int			explicit_model;
	double		t0;
	double		last_seconds[11];	/* the last trial's seconds by log2(factors) */
	int			stopped_by_time;
	int			time_up;		/* a trial was cut at the deadline: no more */
	/*
	 * the hooks every trial trains with: here, not on a trial's stack, since
	 * a backend's state created in one trial keeps them for the next
	 */
	deadline_stop dl;
	gm_callbacks cbs;
	int			rc;
	char	   *err;
	size_t		errlen;
} search;

/* higher is better for both kinds (explicit: minus the RMSE) */
static double
score(const search *S, int t)
{
	return S->explicit_model ? -S->trials[t].metric : S->trials[t].metric;
}

static int
lg2(int k)
{
	int			l = 0;

	while ((1 << (l + 1)) <= k && l < 10)
		l++;
	return l;
}

/* seconds a trial at k factors is expected to take (from the nearest one run) */
static double
predicted_seconds(const search *S, int k)
{
	int			l = lg2(k);

	if (S->last_seconds[l] > 0)
		return S->last_seconds[l];
	for (int d = 1; d <= 10; d++)
	{
		/* the time grows with k^2 (the Gram and the per-row work) */
		if (l - d >= 0 && S->last_seconds[l - d] > 0)
			return S->last_seconds[l - d] * pow(4.0, d);
		if (l + d <= 10 && S->last_seconds[l + d] > 0)
			return S->last_seconds[l + d] / pow(4.0, d);
	}
	return 0;
}

/* may a trial at k factors start? */
static int
room_for(search *S, int k)
{
	double		used = gm_now() - S->t0;

	if (S->rc != GM_OK || S->time_up || S->n >= S->cfg->max_trials)
		return 0;
	if (S->n > 0 && used + predicted_seconds(S, k) > S->cfg->seconds)
	{
		S->stopped_by_time = 1;
		return 0;
	}
	return 1;
}

static gm_mf_params
params_of(const search *S, const apoint *x, double *reg_eff)
{
	gm_mf_params p = S->cfg->base;

	p.factors = x->k;
	p.iterations = S->cfg->max_iterations;
	if (S->explicit_model)
	{
		if (!(S->cfg->fixed & GM_AUTO_FIX_REG))
			p.regularization = (float) exp(x->lreg);
		*reg_eff = p.regularization;
		return p;
	}
	p.alpha0 = (float) exp(x->la0);
	p.nu = (float) x->nu;
	if (S->cfg->fixed & GM_AUTO_FIX_REG)
		*reg_eff = p.regularization * pow(S->mean_count + (double) p.alpha0 * S->R->n_cols, p.nu);
	else
	{
		*reg_eff = exp(x->lreg);
		p.regularization = (float) (*reg_eff /
									pow(S->mean_count + (double) p.alpha0 * S->R->n_cols, p.nu));
	}
	return p;
}

static int
same_point(const apoint *a, const apoint *b)
{
	return a->k == b->k && fabs(a->la0 - b->la0) < 1e-6 && fabs(a->lreg - b->lreg) < 1e-6 &&
		fabs(a->nu - b->nu) < 1e-6;
}

/* held-out RMSE of the explicit model in S's arrays */
static double
valid_rmse(const search *S, int k, double global_mean, int biases)
{
	const gm_csr *V = S->valid;
	double		se = 0;
	int64_t		n = 0;

	for (int32_t u = 0; u < V->n_rows; u++)
		for (int64_t e = V->indptr[u]; e < V->indptr[u + 1]; e++)
		{
			int32_t		i = V->indices[e];
			double		pred = 0;
			const float *x = S->X + (size_t) u * k,
					   *y = S->Y + (size_t) i * k;

			for (int f = 0; f < k; f++)
				pred += (double) x[f] * y[f];
			if (biases)
				pred += global_mean + S->ub[u] + S->ib[i];
			se += (pred - V->data[e]) * (pred - V->data[e]);
			n++;
		}
	return n > 0 ? sqrt(se / n) : NAN;
}

static int
stop_at_deadline(void *arg)
{
	deadline_stop *d = arg;

	if (d->user && d->user->should_stop && d->user->should_stop(d->user->arg))
		return 1;
	if (d->deadline > 0 && gm_now() > d->deadline)
	{
		d->fired = 1;
		return 1;
	}
	return 0;
}

/*
 * Train point x (or find it among the trials run); its index, or -1 when
 * there is no room (time, trials) or the training failed (S->rc).
 */
static int
trial(search *S, apoint x)
{
	gm_tune_trial *tr;
	gm_mf_eval	ev;
	gm_mf_result res;
	gm_mf_data	d;
	double		t0;

	if (x.k < 1)
		x.k = 1;
	if (x.nu < 0)
		x.nu = 0;
	if (x.nu > 1)
		x.nu = 1;
	for (int t = 0; t < S->n; t++)
		if (same_point(&S->pts[t], &x))
			return t;
	if (!room_for(S, x.k))
		return -1;
	tr = &S->trials[S->n];
	memset(tr, 0, sizeof(*tr));
	tr->trial = S->n + 1;
	tr->p = params_of(S, &x, &tr->reg_eff);
	memset(&d, 0, sizeof(d));
	d.R = S->R;
	d.Rt = S->Rt;
	d.X = S->X;
	d.Y = S->Y;
	d.user_bias = tr->p.biases ? S->ub : NULL;
	d.item_bias = tr->p.biases ? S->ib : NULL;
	memset(&ev, 0, sizeof(ev));
	memset(&res, 0, sizeof(res));
	/* every trial but the first stops at the budget's end (the first always gives a result) */
	S->dl.user = S->cb;
	S->dl.deadline = S->n == 0 ? 0 : S->t0 + S->cfg->seconds;
	S->dl.fired = 0;
	S->cbs.should_stop = stop_at_deadline;
	S->cbs.on_iteration = NULL;
	S->cbs.arg = &S->dl;
	t0 = gm_now();
	if (S->explicit_model)
	{
		S->rc = gm_mf_session_train(S->s, &tr->p, &d, &S->cbs, NULL, &res, S->err, S->errlen);
		if (S->rc == GM_ECANCELED && S->dl.fired)
		{
			/* cut at the deadline: a half-trained model says nothing */
			S->rc = GM_OK;
			S->time_up = S->stopped_by_time = 1;
			return -1;
		}
		if (S->rc != GM_OK)
			return -1;
		tr->metric = valid_rmse(S, x.k, d.global_mean, tr->p.biases);
		if (!isfinite(tr->metric) || !isfinite(res.final.loss))
			tr->metric = INFINITY;
		tr->p.iterations = res.iterations_run;
	}
	else
	{
		ev.test = S->valid;
		ev.metric = S->cfg->metric;
		ev.K = S->cfg->K;
		ev.every = S->cfg->eval_every > 0 ? S->cfg->eval_every : 1;
		ev.patience = 2;
		S->rc = gm_mf_session_train(S->s, &tr->p, &d, &S->cbs, &ev, &res, S->err, S->errlen);
		if (S->rc == GM_ECANCELED && S->dl.fired)
		{
			/* cut at the deadline: its evaluations so far count, then no more trials */
			S->rc = GM_OK;
			S->time_up = S->stopped_by_time = 1;
			if (!(ev.best_iteration > 0 && isfinite(ev.best)))
				return -1;
		}
		if (S->rc != GM_OK)
			return -1;
		tr->metric = isfinite(ev.best) ? ev.best : 0;
		tr->result = ev.best_result;
		tr->p.iterations = ev.best_iteration > 0 ? ev.best_iteration : 1;
	}
	tr->seconds = gm_now() - t0;
	tr->iterations_run = res.iterations_run;
	S->last_seconds[lg2(x.k)] = tr->seconds;
	S->pts[S->n] = x;
	S->n++;
	if (S->best < 0 || score(S, S->n - 1) > score(S, S->best))
		S->best = S->n - 1;
	if (S->cfg->on_trial)
		S->cfg->on_trial(S->cfg->arg, tr);
	return S->n - 1;
}

/*
 * Move coordinate c (0 la0, 1 lreg, 2 nu) of the best point by step, in
 * the direction that improves, as long as it improves (at most 4 moves a
 * direction).  Returns whether the best point changed.
 */
static int
coordinate(search *S, int c, double step, double lo, double hi)
{
	int			moved = 0;

	for (int dir = 1; dir >= -1; dir -= 2)
	{
		for (int m = 0; m < 4; m++)
		{
			apoint		x = S->pts[S->best];
			double	   *v = c == 0 ? &x.la0 : c == 1 ? &x.lreg : &x.nu;
			int			before = S->best,
						t;

			*v += dir * step;
			if (*v < lo - 1e-9 || *v > hi + 1e-9)
				break;
			t = trial(S, x);
			if (t < 0 || S->best == before)
				break;
			moved = 1;
		}
		if (moved)
			break;				/* improved one way: no need to try the other */
	}
	return moved;
}

/* one pass over the free coordinates with the given steps */
static void
coordinate_pass(search *S, double s_a0, double s_reg, double s_nu)
{
	unsigned	fixed = S->cfg->fixed;

	if (!(fixed & GM_AUTO_FIX_REG))
		coordinate(S, 1, s_reg, log(1e-6), log(1e6));
	if (!S->explicit_model && !(fixed & GM_AUTO_FIX_ALPHA0))
		coordinate(S, 0, s_a0, log(1e-5), log(10.0));
	if (!S->explicit_model && !(fixed & GM_AUTO_FIX_NU))
		coordinate(S, 2, s_nu, 0, 1);
}

/* the factors of the best point halved (to 4) or doubled (to kmax) while it improves */
static void
factor_moves(search *S, int kmax)
{
	for (int dir = -1; dir <= 1; dir += 2)
	{
		int			moved = 0;

		for (;;)
		{
			apoint		x = S->pts[S->best];
			int			before = S->best;

			x.k = dir < 0 ? x.k / 2 : x.k * 2;
			if (x.k < 4 || x.k > kmax || trial(S, x) < 0 || S->best == before)
				break;
			moved = 1;
		}
		if (moved)
			break;
	}
}

int
gm_auto_tune(const gm_auto_config *cfg, const gm_csr *R, const gm_csr *Rt,
			 const gm_csr *valid, const gm_callbacks *cb, gm_tune_trial *trials,
			 gm_auto_result *out, char *err, size_t errlen)
{
	search		S;
	apoint		x0;
	int			kmax,
				k0;

	memset(out, 0, sizeof(*out));
	if (cfg->max_trials < 1 || cfg->max_iterations < 1 || cfg->max_factors < 1 ||
		!(cfg->seconds > 0) || R == NULL || Rt == NULL || valid == NULL ||
		valid->n_rows != R->n_rows || valid->n_cols != R->n_cols || R->n_rows < 1)
	{
		snprintf(err, errlen, "auto: invalid configuration");
		return GM_EINVAL;
	}
	memset(&S, 0, sizeof(S));
	S.cfg = cfg;
	S.R = R;
	S.Rt = Rt;
	S.valid = valid;
	S.cb = cb;
	S.trials = trials;
	S.best = -1;
	S.rc = GM_OK;
	S.err = err;
	S.errlen = errlen;
	S.explicit_model = gm_algorithm_is_explicit(cfg->base.algorithm);
	S.mean_count = (double) R->nnz / R->n_rows;
	kmax = (cfg->fixed & GM_AUTO_FIX_FACTORS) ? cfg->base.factors : cfg->max_factors;
	k0 = (cfg->fixed & GM_AUTO_FIX_FACTORS) ? cfg->base.factors :
		(GM_AUTO_START_FACTORS < kmax ? GM_AUTO_START_FACTORS : kmax);
	S.s = gm_mf_session_create();
	S.pts = malloc(sizeof(apoint) * (size_t) cfg->max_trials);
	S.X = malloc(sizeof(float) * (size_t) R->n_rows * kmax);
	S.Y = malloc(sizeof(float) * (size_t) R->n_cols * kmax);
	S.ub = malloc(sizeof(float) * (size_t) R->n_rows);
	S.ib = malloc(sizeof(float) * (size_t) R->n_cols);
	if (!S.s || !S.pts || !S.X || !S.Y || !S.ub || !S.ib)
	{
		snprintf(err, errlen, "out of memory for the automatic search (%d factors at most)", kmax);
		S.rc = GM_ENOMEM;
		goto done;
	}
	S.t0 = gm_now();

	/* the start: what transfers across data sets, or what was given */
	x0.k = k0;
	if (S.explicit_model)
	{
		x0.la0 = 0;
		x0.nu = 0;
		x0.lreg = log(cfg->fixed & GM_AUTO_FIX_REG ? cfg->base.regularization :
					  GM_AUTO_START_LAMBDA);
	}
	else
	{
		x0.la0 = log(cfg->fixed & GM_AUTO_FIX_ALPHA0 ? (cfg->base.alpha0 > 0 ? cfg->base.alpha0 : 1e-5) :
					 GM_AUTO_START_ALPHA0);
		x0.nu = cfg->fixed & GM_AUTO_FIX_NU ? cfg->base.nu : GM_AUTO_START_NU;
		x0.lreg = log(GM_AUTO_START_REG_EFF);
	}
	if (trial(&S, x0) < 0)
		goto done;

	if (S.explicit_model)
	{
		/* lambda x4, the factors halved or doubled, lambda x2, then x1.41 */
		coordinate_pass(&S, 0, log(4.0), 0);
		if (!(cfg->fixed & GM_AUTO_FIX_FACTORS))
			factor_moves(&S, kmax);
		coordinate_pass(&S, 0, log(2.0), 0);
		coordinate_pass(&S, 0, log(2.0) / 2, 0);
		goto done;
	}

	/* 1. the coordinates at k0: large steps, then half steps */
	coordinate_pass(&S, log(4.0), log(4.0), 0.3);
	coordinate_pass(&S, log(2.0), log(2.0), 0.15);

	/* 2. the ladder of factors, while it pays */
	if (!(cfg->fixed & GM_AUTO_FIX_FACTORS))
	{
		int			k = k0;

		while (2 * k <= kmax)
		{
			int			before = S.best,
						t;
			apoint		x = S.pts[S.best];

			k *= 2;
			x.k = k;
			t = trial(&S, x);
			if (t < 0)
				break;
			if (!(cfg->fixed & GM_AUTO_FIX_REG))
			{
				x.lreg += log(2.0);
				(void) trial(&S, x);
			}
			/* stop once a rung did not beat the best by 0.5% */
			if (S.best == before ||
				score(&S, S.best) < score(&S, before) + 0.005 * fabs(score(&S, before)))
				break;
		}
	}

	/* 3. half steps around the best, at its factors */
	coordinate_pass(&S, log(2.0), log(2.0), 0.1);

done:
	if (S.best >= 0)
	{
		out->best = trials[S.best].p;
		out->reg_eff = trials[S.best].reg_eff;
		out->metric = trials[S.best].metric;
		out->rank = trials[S.best].result;
		out->best_trial = S.best;
	}
	out->trials = S.n;
	out->seconds = gm_now() - S.t0;
	out->stopped_by_time = S.stopped_by_time;
	gm_mf_session_free(S.s);
	free(S.pts);
	free(S.X);
	free(S.Y);
	free(S.ub);
	free(S.ib);
	if (S.rc == GM_OK && S.best < 0)
	{
		snprintf(err, errlen, "auto: no trial ran");
		return GM_EINVAL;
	}
	return S.rc;
}
