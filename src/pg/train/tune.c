/*
 * tune.c: gpumf_tune, a hyper-parameter search for implicit ALS inside the
 * database.
 *
 * It reads the source once (with the caller's rights, as gpumf_train does),
 * holds out a seeded fraction of each user's rows, and runs the core's
 * search (src/core/train/tune.c: factors, alpha0, the ridge, nu, and the
 * iteration count by early stopping on the held-out metric) on the device
 * gpumf.device picks, the data staying there across trials.  Each trial is
 * a NOTICE and a row of the result; with model, the best setting is then
 * trained on all rows and stored under that name (gpumf_train's path).
 */
#include "gpumf_train.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(gpumf_tune);

/* gpumf_tune's arguments, by position (gpumf--0.1--0.2.sql) */
enum
{
	T_SOURCE, T_USER_COL, T_ITEM_COL, T_VALUE_COL, T_METRIC, T_BUDGET, T_HOLDOUT,
	T_FACTORS, T_ITERATIONS, T_ALPHA, T_SOLVER, T_METHOD, T_SEED, T_MODEL,
	T_ALPHA0_RANGE, T_REG_RANGE, T_NU_RANGE
};

/* The search's malloc'ed state, freed by a memory-context callback. */
typedef struct TuneState
{
	gm_csr		R;
	gm_csr		Rt;
	gm_csr		part;
	gm_csr		part_t;
	gm_csr		held;
	gm_tune_trial *trials;
	MemoryContextCallback cb;
} TuneState;

static void
tune_state_free(void *arg)
{
	TuneState  *ts = arg;

	gm_csr_free(&ts->R);
	gm_csr_free(&ts->Rt);
	gm_csr_free(&ts->part);
	gm_csr_free(&ts->part_t);
	gm_csr_free(&ts->held);
	free(ts->trials);
	ts->trials = NULL;
}

/* A two-element real[] range {lo, hi}; lo_min: the smallest lo allowed. */
static void
range_arg(FunctionCallInfo fcinfo, int argno, const char *name, double lo_min,
		  double hi_max, double *lo, double *hi)
{
	ArrayType  *a;
	Datum	   *els;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(argno))
		return;
	a = PG_GETARG_ARRAYTYPE_P(argno);
	gpumf_check_array_1d(a, name);
	deconstruct_array(a, FLOAT4OID, 4, true, TYPALIGN_INT, &els, &nulls, &n);
	if (n != 2 || nulls[0] || nulls[1])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be an array of two numbers {low, high}", name)));
	*lo = DatumGetFloat4(els[0]);
	*hi = DatumGetFloat4(els[1]);
	if (isnan(*lo) || isnan(*hi) || *lo < lo_min || *hi > hi_max || *lo > *hi ||
		(lo_min == 0 && strcmp(name, "nu_range") != 0 && *lo <= 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s {%g, %g} is not a valid range", name, *lo, *hi),
				 errhint("%s", strcmp(name, "nu_range") == 0 ?
						 "nu_range needs 0 <= low <= high <= 1." :
						 "It needs 0 < low <= high (searched on a log scale).")));
}

/* The candidate factor counts (ascending, distinct, 1 .. 1024, at most 16). */
static void
factors_arg(FunctionCallInfo fcinfo, gm_tune_space *sp)
{
	ArrayType  *a;
	Datum	   *els;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(T_FACTORS))
		return;
	a = PG_GETARG_ARRAYTYPE_P(T_FACTORS);
	gpumf_check_array_1d(a, "factors");
	deconstruct_array(a, INT4OID, 4, true, TYPALIGN_INT, &els, &nulls, &n);
	if (n < 1 || n > 16)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("factors must list 1 to 16 candidates, not %d", n)));
	for (int i = 0; i < n; i++)
	{
		int32		v;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("factors must not contain NULL")));
		v = DatumGetInt32(els[i]);
		gpumf_check_int_range("factors", v, 1, 1024);
		if (i > 0 && v <= sp->factors[i - 1])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("factors must be ascending and distinct"),
					 errhint("For example '{32,64,128}'.")));
		sp->factors[i] = v;
	}
	sp->n_factors = n;
}

typedef struct TuneProgress
{
	int			budget;
	gm_rank_metric metric;
	int			K;
	ErrorData  *error;			/* an ERROR raised while reporting */
} TuneProgress;

static int
tune_should_stop(void *arg)
{
	TuneProgress *tp = arg;

	return tp->error != NULL ||
		(InterruptPending && (QueryCancelPending || ProcDiePending));
}

/* A NOTICE per trial; must not longjmp (the core holds memory). */
static void
on_trial(void *arg, const gm_tune_trial *t)
{
	TuneProgress *tp = arg;
	MemoryContext mcx = CurrentMemoryContext;

	if (!gpumf_progress || tp->error)
		return;
	PG_TRY();
	{
		ereport(NOTICE,
				(errmsg("trial %d/%d: factors %d, regularization %.4g (%.4g for an average user), alpha0 %.4g, nu %.3g: %s@%d %.4f at iteration %d, %.2f s",
						t->trial, tp->budget, t->p.factors, t->p.regularization, t->reg_eff,
						t->p.alpha0, t->p.nu, gm_rank_metric_name(tp->metric), tp->K,
						t->metric, t->p.iterations, t->seconds)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		tp->error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
}

Datum
gpumf_tune(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TuneState  *ts;
	GpumfSource *src;
	gm_tune_config cfg;
	TuneProgress tp;
	gm_callbacks cbs;
	Oid			relid;
	char	   *ucol,
			   *icol,
			   *vcol,
			   *model = NULL;
	double		holdout = 0.2;
	int			best = -1,
				rc,
				maxk;
	char		err[GM_ERRLEN];
	char		devname[128] = "";

	/* ---- arguments, checked before anything is read */
	if (!PG_ARGISNULL(T_MODEL))
		gpumf_check_catalog_version();	/* the best setting is stored in the catalog */
	gpumf_check_not_null(fcinfo, T_SOURCE, "source");
	gpumf_check_not_null(fcinfo, T_USER_COL, "user_col");
	gpumf_check_not_null(fcinfo, T_ITEM_COL, "item_col");
	gpumf_check_not_null(fcinfo, T_METRIC, "metric");
	gpumf_check_not_null(fcinfo, T_BUDGET, "budget");
	gpumf_check_not_null(fcinfo, T_HOLDOUT, "holdout");
	gpumf_check_not_null(fcinfo, T_ITERATIONS, "iterations");
	gpumf_check_not_null(fcinfo, T_METHOD, "method");
	gpumf_check_not_null(fcinfo, T_SEED, "seed");
	relid = PG_GETARG_OID(T_SOURCE);
	ucol = NameStr(*PG_GETARG_NAME(T_USER_COL));
	icol = NameStr(*PG_GETARG_NAME(T_ITEM_COL));
	vcol = PG_ARGISNULL(T_VALUE_COL) ? NULL : NameStr(*PG_GETARG_NAME(T_VALUE_COL));

	memset(&cfg, 0, sizeof(cfg));
	gm_mf_params_defaults(&cfg.base, GM_ALG_ALS_IMPLICIT);
	gm_tune_space_defaults(&cfg.space);
	gpumf_metric_from_text(text_to_cstring(PG_GETARG_TEXT_PP(T_METRIC)), &cfg.metric, &cfg.K);
	cfg.budget = PG_GETARG_INT32(T_BUDGET);
	gpumf_check_int_range("budget", cfg.budget, 1, 1000);
	holdout = PG_GETARG_FLOAT4(T_HOLDOUT);
	gpumf_check_holdout(holdout);
	factors_arg(fcinfo, &cfg.space);
	cfg.base.iterations = PG_GETARG_INT32(T_ITERATIONS);
	gpumf_check_int_range("iterations", cfg.base.iterations, 1, 1000);
	if (!PG_ARGISNULL(T_ALPHA))
	{
		cfg.base.alpha = PG_GETARG_FLOAT4(T_ALPHA);
		gpumf_check_nonneg("alpha", cfg.base.alpha);
	}
	if (!PG_ARGISNULL(T_SOLVER))
		cfg.base.solver = gpumf_solver_from_text(text_to_cstring(PG_GETARG_TEXT_PP(T_SOLVER)));
	if (gm_tune_method_from_name(text_to_cstring(PG_GETARG_TEXT_PP(T_METHOD)), &cfg.method) != GM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown search method \"%s\"", text_to_cstring(PG_GETARG_TEXT_PP(T_METHOD))),
				 errhint("Valid methods: \"local\" (a Latin hypercube, then moves around the best settings), \"bayes\" (a Latin hypercube, then Gaussian-process expected improvement) and \"random\".")));
	cfg.seed = (uint64) PG_GETARG_INT64(T_SEED);
	cfg.base.seed = cfg.seed;
	if (!PG_ARGISNULL(T_MODEL))
	{
		model = text_to_cstring(PG_GETARG_TEXT_PP(T_MODEL));
		gpumf_check_model_name(model);
	}
	range_arg(fcinfo, T_ALPHA0_RANGE, "alpha0_range", 0, INFINITY, &cfg.space.alpha0_lo,
			  &cfg.space.alpha0_hi);
	range_arg(fcinfo, T_REG_RANGE, "regularization_range", 0, INFINITY, &cfg.space.reg_lo,
			  &cfg.space.reg_hi);
	range_arg(fcinfo, T_NU_RANGE, "nu_range", 0, 1, &cfg.space.nu_lo, &cfg.space.nu_hi);
	cfg.eval_every = 1;
	cfg.patience = 2;
	cfg.base.threads = gpumf_threads;
	maxk = cfg.space.factors[cfg.space.n_factors - 1];

	InitMaterializedSRF(fcinfo, 0);

	/* ---- read the source (locked first, with the caller's rights) */
	src = gpumf_source_open(relid, ucol, icol, vcol, GPUMF_VALUES_IMPLICIT);
	ts = palloc0(sizeof(TuneState));
	ts->cb.func = tune_state_free;
	ts->cb.arg = ts;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &ts->cb);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	gpumf_source_read(src);
	if (src->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("no rows to tune on in \"%s\"", get_rel_name(relid)),
				 errhint("The source must have rows with a non-NULL user and item.")));
	gpumf_source_to_csr(src, &ts->R, GPUMF_CSR_HOST, 0);
	gpumf_csr_transpose_for(&ts->R, &ts->Rt, true);
	gpumf_check_summed_values(src, &ts->R);
	SPI_finish();

	/* ---- the held-out split, made here; everything counted first (the largest factors) */
	cfg.base.backend = gpumf_training_backend(devname, sizeof(devname));
	gpumf_apply_gpus(&cfg.base);
	{
		gm_mf_params p = cfg.base;
		double		per_thread;
		double		need;

		p.factors = maxk;
		need = gpumf_csr_bytes(&ts->R) * 4 +
			((double) ts->R.n_rows + ts->R.n_cols) * maxk * sizeof(float) +
			(double) cfg.budget * sizeof(gm_tune_trial) +
			gm_mf_memory(&p, &ts->R, &ts->Rt, cfg.K, 1, &per_thread);
		gpumf_check_memory_threads(need, per_thread,
								   p.threads > 0 ? p.threads : gm_default_threads(), "tuning");
		gpumf_check_gpu_memory(&p, &ts->R, &ts->Rt, "tuning");
	}
	if (gm_split_holdout(&ts->R, holdout, cfg.seed, &ts->part, &ts->held, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&ts->part, &ts->part_t, err, sizeof(err)) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
	if (ts->held.nnz == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("no rows to hold out: every user has fewer than two rows")));

	/* ---- the search */
	ts->trials = calloc(cfg.budget, sizeof(gm_tune_trial));
	if (ts->trials == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory for the trials")));
	tp.budget = cfg.budget;
	tp.metric = cfg.metric;
	tp.K = cfg.K;
	tp.error = NULL;
	cfg.on_trial = on_trial;
	cfg.arg = &tp;
	cbs.should_stop = tune_should_stop;
	cbs.on_iteration = NULL;
	cbs.arg = &tp;
	rc = gm_tune(&cfg, &ts->part, &ts->part_t, &ts->held, &cbs, ts->trials, &best,
				 err, sizeof(err));
	gpumf_train_check_rc(rc, tp.error, "tuning", err, NULL);

	for (int t = 0; t < cfg.budget; t++)
	{
		const gm_tune_trial *tr = &ts->trials[t];
		Datum		values[12];
		bool		nulls[12] = {false};

		values[0] = Int32GetDatum(tr->trial);
		values[1] = Int32GetDatum(tr->p.factors);
		values[2] = Float4GetDatum(tr->p.regularization);
		values[3] = Float4GetDatum(tr->p.alpha);
		values[4] = Float4GetDatum(tr->p.alpha0);
		values[5] = Float4GetDatum(tr->p.nu);
		values[6] = Int32GetDatum(tr->p.iterations);
		values[7] = Float8GetDatum(tr->metric);
		values[8] = Float8GetDatum(tr->result.recall);
		values[9] = Float8GetDatum(tr->result.ndcg);
		values[10] = Float8GetDatum(tr->seconds);
		values[11] = BoolGetDatum(t == best);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	/* ---- the best setting on all rows, stored under model */
	if (model != NULL && best >= 0)
	{
		TrainArgs	a;

		memset(&a, 0, sizeof(a));
		a.relid = relid;
		a.ucol = ucol;
		a.icol = icol;
		a.vcol = vcol;
		a.model = model;
		a.p = ts->trials[best].p;
		a.p.iterations = Max(a.p.iterations, 1);
		a.p.threads = gpumf_threads;
		a.metric = cfg.metric;
		a.K = cfg.K;
		tune_state_free(ts);
		(void) gpumf_train_args(&a);
	}
	return (Datum) 0;
}
