/*
 * autotune.c: the automatic choice of hyper-parameters behind a bare
 * gpumf_train (gpumf_autotune_choose): a validation split carved from the
 * rows already read, the core's search (src/core/train/auto.c) on the
 * device gpumf.device picks, a NOTICE per trial, and the choice with its
 * summary for gpumf.models.params.
 */
#include "gpumf_train.h"

#include <math.h>

#include "miscadmin.h"
#include "utils/memutils.h"

typedef struct AutoState
{
	gm_csr		part;
	gm_csr		part_t;
	gm_csr		held;
	gm_tune_trial *trials;
	MemoryContextCallback cb;
} AutoState;

static void
auto_state_free(void *arg)
{
	AutoState  *as = arg;

	gm_csr_free(&as->part);
	gm_csr_free(&as->part_t);
	gm_csr_free(&as->held);
	free(as->trials);
	as->trials = NULL;
}

typedef struct AutoProgress
{
	bool		explicit_model;
	gm_rank_metric metric;
	int			K;
	ErrorData  *error;
} AutoProgress;

static int
auto_should_stop(void *arg)
{
	AutoProgress *ap = arg;

	return ap->error != NULL ||
		(InterruptPending && (QueryCancelPending || ProcDiePending));
}

/* A NOTICE per trial of the automatic search; must not longjmp. */
static void
on_auto_trial(void *arg, const gm_tune_trial *t)
{
	AutoProgress *ap = arg;
	MemoryContext mcx = CurrentMemoryContext;

	if (!gpumf_progress || ap->error)
		return;
	PG_TRY();
	{
		if (ap->explicit_model)
			ereport(NOTICE,
					(errmsg("autotune trial %d: factors %d, regularization %.4g: held-out RMSE %.4f, %.2f s",
							t->trial, t->p.factors, t->p.regularization, t->metric, t->seconds)));
		else
			ereport(NOTICE,
					(errmsg("autotune trial %d: factors %d, regularization %.4g (%.4g for an average user), alpha0 %.4g, nu %.3g: %s@%d %.4f at iteration %d, %.2f s",
							t->trial, t->p.factors, t->p.regularization, t->reg_eff, t->p.alpha0,
							t->p.nu, gm_rank_metric_name(ap->metric), ap->K, t->metric,
							t->p.iterations, t->seconds)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		ap->error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
}

/* a number in JSON: null where it is not finite (a search whose every trial diverged) */
static void
json_number(StringInfo s, double v)
{
	if (isfinite(v))
		appendStringInfo(s, "%.6g", v);
	else
		appendStringInfoString(s, "null");
}

#define AUTO_HOLDOUT	0.2
#define AUTO_MAX_TRIALS 40
#define AUTO_MIN_HELD	10		/* held-out rows a search needs */
#define AUTO_MAX_USERS	50000	/* users whose rows are held out (the evaluation's cost) */

void
gpumf_autotune_choose(TrainArgs *a, const gm_csr *R, const gm_csr *Rt)
{
	AutoState  *as;
	AutoProgress ap;
	gm_auto_config cfg;
	gm_auto_result res;
	gm_callbacks cbs;
	char		err[GM_ERRLEN];
	char		devname[128] = "";
	bool		explicit_model = a->p.algorithm != GM_ALG_ALS_IMPLICIT;
	StringInfoData s;
	int			rc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.base = a->p;
	/* implicit: iALS++'s block solver unless a solver was given */
	if (!explicit_model && !a->auto_solver_given)
		cfg.base.solver = GM_SOLVER_BLOCK;
	cfg.base.backend = gpumf_training_backend(devname, sizeof(devname));
	gpumf_apply_gpus(&cfg.base);
	cfg.fixed = a->auto_fixed;
	cfg.metric = a->metric;
	cfg.K = a->K;
	cfg.eval_every = 2;
	cfg.max_iterations = a->auto_max_iterations;
	cfg.max_factors = (a->auto_fixed & GM_AUTO_FIX_FACTORS) ? a->p.factors :
		Min(gpumf_autotune_max_factors, 1024);
	/* no more factors than a quarter of the smaller side (at least 8) */
	if (!(a->auto_fixed & GM_AUTO_FIX_FACTORS))
		while (cfg.max_factors > 8 && cfg.max_factors * 4 > Min(R->n_rows, R->n_cols))
			cfg.max_factors /= 2;
	cfg.max_trials = AUTO_MAX_TRIALS;
	cfg.seconds = gpumf_autotune_seconds;

	/*
	 * what the search holds beside R and Rt, counted before it allocates;
	 * fewer factors where the most would not fit gpumf.max_memory
	 */
	for (;;)
	{
		gm_mf_params p = cfg.base;
		double		per_thread;
		double		need;

		p.factors = cfg.max_factors;
		need = gpumf_csr_bytes(R) * 4 +
			((double) R->n_rows + R->n_cols) * (cfg.max_factors + 1) * sizeof(float) * 2 +
			gm_mf_memory(&p, R, Rt, explicit_model ? 0 : cfg.K, 0, &per_thread);
		if ((need > (double) gpumf_memory_limit() || !gpumf_gpu_memory_fits(&p, R, Rt)) &&
			cfg.max_factors > 64 && !(a->auto_fixed & GM_AUTO_FIX_FACTORS))
		{
			cfg.max_factors /= 2;
			continue;
		}
		gpumf_check_memory_threads(need, per_thread,
								   p.threads > 0 ? p.threads : gm_default_threads(),
								   "the automatic search");
		gpumf_check_gpu_memory(&p, R, Rt, "the automatic search");
		break;
	}

	as = palloc0(sizeof(AutoState));
	as->cb.func = auto_state_free;
	as->cb.arg = as;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &as->cb);
	if (gm_split_holdout_users(R, AUTO_HOLDOUT, a->p.seed, AUTO_MAX_USERS, &as->part, &as->held,
							   err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&as->part, &as->part_t, err, sizeof(err)) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
	if (as->held.nnz < AUTO_MIN_HELD)
	{
		/* nothing to measure a choice on: the fixed defaults, as autotune => false */
		ereport(NOTICE,
				(errmsg("too few rows to choose hyper-parameters (" INT64_FORMAT " held out for validation, at least %d needed): training with the fixed defaults",
						(int64) as->held.nnz, AUTO_MIN_HELD),
				 errhint("Give the hyper-parameters, or autotune => false, to silence this.")));
		a->autotune = false;
		auto_state_free(as);
		return;
	}
	as->trials = calloc(AUTO_MAX_TRIALS, sizeof(gm_tune_trial));
	if (as->trials == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory for the trials")));

	ap.explicit_model = explicit_model;
	ap.metric = cfg.metric;
	ap.K = cfg.K;
	ap.error = NULL;
	cfg.on_trial = on_auto_trial;
	cfg.arg = &ap;
	cbs.should_stop = auto_should_stop;
	cbs.on_iteration = NULL;
	cbs.arg = &ap;
	rc = gm_auto_tune(&cfg, &as->part, &as->part_t, &as->held, &cbs, as->trials, &res,
					  err, sizeof(err));
	gpumf_train_check_rc(rc, ap.error, "training", err,
						 "The automatic search ran out of memory: lower gpumf.autotune_max_factors, or give factors.");

	/* the choice: the searched fields; the rest (backend, threads) stay a's */
	a->p.factors = res.best.factors;
	a->p.iterations = Max(res.best.iterations, 1);
	a->p.regularization = res.best.regularization;
	a->p.alpha0 = res.best.alpha0;
	a->p.nu = res.best.nu;
	a->p.solver = res.best.solver;

	initStringInfo(&s);
	appendStringInfo(&s, "{\"trials\": %d, \"best_trial\": %d, \"seconds\": %.3f, "
					 "\"budget_seconds\": %g, \"stopped_by_time\": %s, \"holdout\": %g, "
					 "\"validation_rows\": " INT64_FORMAT ", ",
					 res.trials, res.best_trial + 1, res.seconds, gpumf_autotune_seconds,
					 res.stopped_by_time ? "true" : "false", AUTO_HOLDOUT, (int64) as->held.nnz);
	if (explicit_model)
		appendStringInfoString(&s, "\"metric\": \"rmse\", ");
	else
	{
		appendStringInfo(&s, "\"metric\": \"%s@%d\", \"ridge_average_user\": ",
						 gm_rank_metric_name(cfg.metric), cfg.K);
		json_number(&s, res.reg_eff);
		appendStringInfoString(&s, ", ");
	}
	appendStringInfoString(&s, "\"validation\": ");
	json_number(&s, res.metric);
	appendStringInfoString(&s, ", \"searched\": [");
	{
		const char *sep = "";

#define SEARCHED(bit, name) \
		if (!(a->auto_fixed & (bit))) { appendStringInfo(&s, "%s\"%s\"", sep, name); sep = ", "; }
		SEARCHED(GM_AUTO_FIX_FACTORS, "factors");
		SEARCHED(GM_AUTO_FIX_REG, "regularization");
		if (!explicit_model)
		{
			SEARCHED(GM_AUTO_FIX_ALPHA0, "alpha0");
			SEARCHED(GM_AUTO_FIX_NU, "nu");
			appendStringInfo(&s, "%s\"iterations\"", sep);
		}
#undef SEARCHED
	}
	appendStringInfoString(&s, "]}");
	a->auto_json = s.data;
	if (gpumf_progress)
		ereport(NOTICE,
				(errmsg("autotune chose factors %d, regularization %.4g%s after %d trials in %.1f s",
						a->p.factors, a->p.regularization,
						explicit_model ? "" : psprintf(", alpha0 %.4g, nu %.3g, %d iterations",
													   a->p.alpha0, a->p.nu, a->p.iterations),
						res.trials, res.seconds)));
	auto_state_free(as);
}
