/*
 * train.c: gpumf_train and gpumf_drop_model.
 *
 * gpumf_train checks its arguments, takes the model's lock, reads the source
 * with the caller's rights (source.c), builds CSR/CSC, trains on the device
 * gpumf.device picks (device.c, the core's gm_mf_train), stores the factors
 * in new tables (model_store.c) and writes the catalog row
 * (model_catalog.c), all in the caller's transaction: readers see the old
 * model until commit, and an error or a cancel leaves it untouched.
 */
#include "gpumf_train.h"

#include <float.h>
#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(gpumf_train);
PG_FUNCTION_INFO_V1(gpumf_drop_model);

/* gpumf_train's arguments, by position (gpumf--0.1--0.2.sql) */
enum
{
	ARG_SOURCE, ARG_USER_COL, ARG_ITEM_COL, ARG_VALUE_COL, ARG_FACTORS, ARG_MODEL,
	ARG_ITERATIONS, ARG_REGULARIZATION, ARG_ALPHA, ARG_CG_STEPS, ARG_SEED,
	ARG_ALGORITHM, ARG_INNER_ITERATIONS, ARG_BIASES, ARG_TOLERANCE,
	ARG_ALPHA0, ARG_NU, ARG_SOLVER, ARG_BLOCK_SIZE, ARG_HOLDOUT, ARG_METRIC, ARG_AUTOTUNE,
	ARG_IALS_FACTORS, ARG_BLEND, ARG_IALS_ITERATIONS	/* 0.5 */
};

/*
 * graph_filter's iALS part, when ials_factors is given: the defaults of its
 * hyper-parameters and of the blend, chosen on a validation split carved
 * from Gowalla's training part (test/bench/README.md, "graph_filter blended
 * with iALS")
 */
#define GF_IALS_REGULARIZATION	0.0163084f
#define GF_IALS_ALPHA0			0.025f
#define GF_IALS_NU				0.75f
#define GF_IALS_ITERATIONS		4
#define GF_BLEND				0.4f

/* Everything malloc'ed while training; freed by a memory-context callback. */
typedef struct TrainState
{
	gm_csr		R;
	gm_csr		Rt;
	gm_csr		part;			/* holdout: the rows trained on, */
	gm_csr		part_t;			/* their transpose */
	gm_csr		held;			/* and the held-out rows */
	float	   *X;
	float	   *Y;
	float	   *user_bias;
	float	   *item_bias;
	double		global_mean;
	double		keymap_bytes;	/* the source's key maps, kept until the factors are stored */
	void	   *service_seg;	/* the factors are in the training service's segment */
	bool		lean;			/* gpumf.lean_training: Rt not formed, factors drawn
								 * on the GPU, R's values freed once uploaded */
	double		mem_uploaded;	/* the backend's private memory (MB) after the upload */
	bool		keep_items;		/* Y and the item biases kept past the store, for the warming */
	MemoryContextCallback cb;
} TrainState;

/* The upload is done: a lean training's R's values are not read again (the store keeps its pattern). */
static void
free_uploaded_values(void *arg)
{
	TrainState *ts = arg;

	if (ts->lean)
	{
		free(ts->R.data);
		ts->R.data = NULL;
	}
	ts->mem_uploaded = gpumf_private_memory_mb();
}

/* The factors, unless the training service's segment's (detached by gpumf_train or the transaction's end) */
static void
free_factors(TrainState *ts)
{
	if (ts->service_seg == NULL)
	{
		free(ts->X);
		free(ts->Y);
		free(ts->user_bias);
		free(ts->item_bias);
	}
	ts->X = ts->Y = ts->user_bias = ts->item_bias = NULL;
}

/*
 * The factor tables are filled: their indexes are built next, from the
 * tables.  The factors, R's arrays (R's sizes stay, for the catalog row)
 * and its transpose are not read again and go now, so the index builds'
 * sorts never sit on top of them; but for the item factors and biases
 * that the warming copies (keep_items: k floats an item, not a user).
 */
static void
free_stored(void *arg)
{
	TrainState *ts = arg;
	int64		nnz = ts->R.nnz;

	gm_csr_free(&ts->R);
	ts->R.nnz = nnz;
	gm_csr_free(&ts->Rt);
	if (!ts->keep_items)		/* (never kept in the training service's segment) */
		free_factors(ts);
	else
	{
		free(ts->X);
		free(ts->user_bias);
		ts->X = ts->user_bias = NULL;
	}
}

/* item i's key, as the store wrote it (GpumfItemsAtHand.key) */
static Datum
item_key_at(void *arg, int32 i)
{
	return gpumf_key_datum(((GpumfSource *) arg)->items, ((GpumfSource *) arg)->ikind,
						   ((GpumfSource *) arg)->itype, i);
}

static void
train_state_free(void *arg)
{
	TrainState *ts = arg;

	gm_csr_free(&ts->R);
	gm_csr_free(&ts->Rt);
	gm_csr_free(&ts->part);
	gm_csr_free(&ts->part_t);
	gm_csr_free(&ts->held);
	free_factors(ts);
	gm_csr_device_drop_kept();	/* a copy of R the upload did not take */
}

/* ------------------------------------------------------------ arguments */

/*
 * A parameter that applies only to some algorithms: NULL (or absent: the 0.1
 * SQL declaration passes fewer arguments) means its default.
 */
static bool
given(FunctionCallInfo fcinfo, int argno, const char *name, const char *algorithm,
	  bool applies)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return false;
	if (!applies)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parameter \"%s\" does not apply to algorithm \"%s\"", name, algorithm),
				 errhint("%s", strcmp(algorithm, "als") == 0 ?
						 "Algorithm \"als\" takes factors, iterations, regularization, alpha, alpha0, nu, solver, cg_steps (solver cg), block_size (solver block), holdout, metric, tolerance and seed." :
						 strcmp(algorithm, "ccd") == 0 ?
						 "Algorithm \"ccd\" takes factors, iterations, regularization (weighted by each user's and item's number of ratings, as for als_explicit), inner_iterations, biases, tolerance and seed." :
						 strcmp(algorithm, "graph_filter") == 0 ?
						 "Algorithm \"graph_filter\" takes factors, iterations (of its subspace iteration), alpha (the weight of its ideal low-pass), tolerance, seed, and ials_factors; with ials_factors also blend, ials_iterations, regularization, alpha0, nu, solver, cg_steps and block_size (of its iALS part)." :
						 "Algorithm \"als_explicit\" takes factors, iterations, regularization (weighted by each user's and item's number of ratings, as for ccd), biases, tolerance and seed.")));
	return true;
}

/* A parameter that applies only with one solver was given with another. */
static void
check_solver_param(bool is_given, const char *name, gm_solver solver, gm_solver wanted)
{
	if (is_given && solver != wanted)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parameter \"%s\" applies to solver \"%s\", not \"%s\"", name,
						gpumf_solver_name(wanted), gpumf_solver_name(solver)),
				 errhint("Give solver => '%s', or leave %s out.", gpumf_solver_name(wanted), name)));
}

static void
parse_args(FunctionCallInfo fcinfo, TrainArgs *a)
{
	const char *alg;
	gm_algorithm algorithm;
	bool		implicit,
				gf;
	bool		hyper = false;	/* a hyper-parameter was given */
	bool		solver_given = false;
	bool		metric_given;
	bool		ials;			/* graph_filter with an iALS part */
	gm_mf_params *ip;			/* the als parameters' target: a->p or a->ip */

	memset(a, 0, sizeof(*a));
	gpumf_check_not_null(fcinfo, ARG_SOURCE, "source");
	gpumf_check_not_null(fcinfo, ARG_USER_COL, "user_col");
	gpumf_check_not_null(fcinfo, ARG_ITEM_COL, "item_col");
	/* NULL factors and iterations: the defaults (0.4; 0.3's declaration passes 64 and 15) */
	gpumf_check_not_null(fcinfo, ARG_SEED, "seed");
	if (PG_NARGS() > ARG_ALGORITHM)
		gpumf_check_not_null(fcinfo, ARG_ALGORITHM, "algorithm");

	alg = PG_NARGS() > ARG_ALGORITHM ? text_to_cstring(PG_GETARG_TEXT_PP(ARG_ALGORITHM)) : "als";
	if (gm_algorithm_from_name(alg, &algorithm) != GM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown algorithm \"%s\"", alg),
				 errhint("Valid algorithms: \"als\" and \"graph_filter\" (implicit feedback), \"als_explicit\" and \"ccd\" (ratings).")));
	implicit = algorithm == GM_ALG_ALS_IMPLICIT;
	gf = algorithm == GM_ALG_GRAPH_FILTER;
	gm_mf_params_defaults(&a->p, algorithm);

	a->relid = PG_GETARG_OID(ARG_SOURCE);
	a->ucol = NameStr(*PG_GETARG_NAME(ARG_USER_COL));
	a->icol = NameStr(*PG_GETARG_NAME(ARG_ITEM_COL));
	a->vcol = PG_ARGISNULL(ARG_VALUE_COL) ? NULL : NameStr(*PG_GETARG_NAME(ARG_VALUE_COL));
	if (!implicit && !gf && a->vcol == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("algorithm \"%s\" needs a value column", alg),
				 errhint("Explicit models learn ratings: name the rating column in value_col.")));
	a->model = PG_ARGISNULL(ARG_MODEL) ? get_rel_name(a->relid) :
		text_to_cstring(PG_GETARG_TEXT_PP(ARG_MODEL));
	if (a->model == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", a->relid)));
	gpumf_check_model_name(a->model);

	if (!PG_ARGISNULL(ARG_FACTORS))
	{
		a->p.factors = PG_GETARG_INT32(ARG_FACTORS);
		gpumf_check_int_range("factors", a->p.factors, 1, gf ? GM_GF_MAXK : GM_MAXK);
		a->auto_fixed |= GM_AUTO_FIX_FACTORS;
		hyper = true;
	}
	if (!PG_ARGISNULL(ARG_ITERATIONS))
	{
		a->p.iterations = PG_GETARG_INT32(ARG_ITERATIONS);
		gpumf_check_int_range("iterations", a->p.iterations, 1, 100000);
		hyper = true;
	}
	a->p.seed = (uint64) PG_GETARG_INT64(ARG_SEED);

	/* graph_filter's iALS part: the als parameters below are its */
	ials = given(fcinfo, ARG_IALS_FACTORS, "ials_factors", alg, gf);
	ip = &a->p;
	if (ials)
	{
		hyper = true;
		a->ials_factors = PG_GETARG_INT32(ARG_IALS_FACTORS);
		gpumf_check_int_range("ials_factors", a->ials_factors, 1, GM_MAXK);
		if ((int64) a->p.factors + a->ials_factors > GM_GF_MAXK)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("graph_filter's factors and ials_factors add up to %d, more than %d",
							a->p.factors + a->ials_factors, GM_GF_MAXK),
					 errhint("Give fewer factors or ials_factors.")));
		gm_mf_params_defaults(&a->ip, GM_ALG_ALS_IMPLICIT);
		a->ip.factors = a->ials_factors;
		a->ip.iterations = GF_IALS_ITERATIONS;
		a->ip.regularization = GF_IALS_REGULARIZATION;
		a->ip.alpha0 = GF_IALS_ALPHA0;
		a->ip.nu = GF_IALS_NU;
		a->ip.solver = GM_SOLVER_BLOCK;
		a->ip.seed = a->p.seed;
		a->blend = GF_BLEND;
		ip = &a->ip;
	}
	else
	{
		if (PG_NARGS() > ARG_BLEND && !PG_ARGISNULL(ARG_BLEND))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parameter \"blend\" needs ials_factors"),
					 errhint("blend is graph_filter's share of a blend with an iALS model of ials_factors factors.")));
		if (PG_NARGS() > ARG_IALS_ITERATIONS && !PG_ARGISNULL(ARG_IALS_ITERATIONS))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parameter \"ials_iterations\" needs ials_factors"),
					 errhint("ials_iterations are those of graph_filter's iALS part, which ials_factors asks for.")));
	}
	if (ials && !PG_ARGISNULL(ARG_BLEND))
	{
		a->blend = PG_GETARG_FLOAT4(ARG_BLEND);
		if (!(a->blend > 0.0f && a->blend < 1.0f))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("blend must be between 0 and 1 (exclusive), not %g", (double) a->blend),
					 errhint("blend is graph_filter's share of each user's score; %g was chosen on held-out data.",
							 (double) GF_BLEND)));
	}
	if (ials && !PG_ARGISNULL(ARG_IALS_ITERATIONS))
	{
		a->ip.iterations = PG_GETARG_INT32(ARG_IALS_ITERATIONS);
		gpumf_check_int_range("ials_iterations", a->ip.iterations, 1, 100000);
	}

	if (given(fcinfo, ARG_REGULARIZATION, "regularization", alg, !gf || ials))
	{
		a->auto_fixed |= GM_AUTO_FIX_REG;
		hyper = true;
		ip->regularization = PG_GETARG_FLOAT4(ARG_REGULARIZATION);
		gpumf_check_positive("regularization", ip->regularization);
	}
	if (given(fcinfo, ARG_ALPHA, "alpha", alg, implicit || gf))
	{
		hyper = true;
		a->p.alpha = PG_GETARG_FLOAT4(ARG_ALPHA);
		gpumf_check_nonneg("alpha", a->p.alpha);
	}
	if (given(fcinfo, ARG_CG_STEPS, "cg_steps", alg, implicit || ials))
	{
		hyper = true;
		ip->cg_steps = PG_GETARG_INT32(ARG_CG_STEPS);
		gpumf_check_int_range("cg_steps", ip->cg_steps, 1, 1024);
	}
	if (given(fcinfo, ARG_INNER_ITERATIONS, "inner_iterations", alg, algorithm == GM_ALG_CCD))
	{
		hyper = true;
		a->p.inner_iterations = PG_GETARG_INT32(ARG_INNER_ITERATIONS);
		gpumf_check_int_range("inner_iterations", a->p.inner_iterations, 1, 100);
	}
	if (given(fcinfo, ARG_BIASES, "biases", alg, !implicit && !gf))
	{
		hyper = true;
		a->p.biases = PG_GETARG_BOOL(ARG_BIASES);
	}
	if (given(fcinfo, ARG_TOLERANCE, "tolerance", alg, true))
	{
		hyper = true;
		a->p.tolerance = PG_GETARG_FLOAT4(ARG_TOLERANCE);
		gpumf_check_nonneg("tolerance", a->p.tolerance);
	}
	if (given(fcinfo, ARG_ALPHA0, "alpha0", alg, implicit || ials))
	{
		hyper = true;
		a->auto_fixed |= GM_AUTO_FIX_ALPHA0;
		ip->alpha0 = PG_GETARG_FLOAT4(ARG_ALPHA0);
		gpumf_check_nonneg("alpha0", ip->alpha0);
	}
	if (given(fcinfo, ARG_NU, "nu", alg, implicit || ials))
	{
		hyper = true;
		a->auto_fixed |= GM_AUTO_FIX_NU;
		ip->nu = PG_GETARG_FLOAT4(ARG_NU);
		gpumf_check_unit("nu", ip->nu);
	}
	if (given(fcinfo, ARG_SOLVER, "solver", alg, implicit || ials))
	{
		hyper = true;
		solver_given = true;
		ip->solver = gpumf_solver_from_text(text_to_cstring(PG_GETARG_TEXT_PP(ARG_SOLVER)));
	}
	check_solver_param(PG_NARGS() > ARG_CG_STEPS && !PG_ARGISNULL(ARG_CG_STEPS), "cg_steps",
					   ip->solver, GM_SOLVER_CG);
	if (given(fcinfo, ARG_BLOCK_SIZE, "block_size", alg, implicit || ials))
	{
		hyper = true;
		check_solver_param(true, "block_size", ip->solver, GM_SOLVER_BLOCK);
		ip->block_size = PG_GETARG_INT32(ARG_BLOCK_SIZE);
		gpumf_check_int_range("block_size", ip->block_size, 1, ip->factors);
	}
	if (given(fcinfo, ARG_HOLDOUT, "holdout", alg, implicit))
	{
		hyper = true;
		a->holdout = PG_GETARG_FLOAT4(ARG_HOLDOUT);
		gpumf_check_holdout(a->holdout);
	}
	a->metric = GM_METRIC_RECALL;
	a->K = 20;
	metric_given = given(fcinfo, ARG_METRIC, "metric", alg, implicit);

	/*
	 * The automatic search: asked for, or (autotune NULL) a call that gives
	 * no hyper-parameter while gpumf.autotune is on.  0.3's declaration has
	 * no autotune and passes factors: it never searches.
	 */
	if (PG_NARGS() > ARG_AUTOTUNE && !PG_ARGISNULL(ARG_AUTOTUNE))
		a->autotune = PG_GETARG_BOOL(ARG_AUTOTUNE);
	else
		a->autotune = gpumf_autotune && !hyper && !metric_given && !gf;
	if (gf && a->autotune)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("algorithm \"graph_filter\" has no automatic search"),
				 errhint("Its defaults were chosen on held-out data (see the README): leave autotune out, or give factors, iterations and alpha yourself.")));
	if (metric_given)
	{
		if (a->holdout <= 0 && !a->autotune)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parameter \"metric\" needs a holdout"),
					 errhint("The metric is measured on held-out rows: give holdout => 0.2, say, or autotune => true to choose the hyper-parameters by it.")));
		gpumf_metric_from_text(text_to_cstring(PG_GETARG_TEXT_PP(ARG_METRIC)), &a->metric, &a->K);
	}
	if (a->autotune)
	{
		if (a->holdout > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parameters \"autotune\" and \"holdout\" do not combine"),
					 errhint("The automatic search holds out its own validation rows and picks the iterations on them: leave holdout out, or give autotune => false.")));
		a->auto_solver_given = solver_given;
		/* implicit: the most iterations a trial runs (stopped early); explicit: the iterations */
		a->auto_max_iterations = !PG_ARGISNULL(ARG_ITERATIONS) ? a->p.iterations :
			implicit ? 20 : a->p.iterations;
	}
	a->p.threads = gpumf_threads;
	a->ip.threads = gpumf_threads;
}

/* ------------------------------------------------------------ training */

typedef struct ProgressArg
{
	int			iterations;
	bool		explicit_model;
	gm_rank_metric metric;		/* holdout */
	int			K;
	ErrorData  *error;			/* an ERROR raised while reporting progress */
} ProgressArg;

static int
should_stop(void *arg)
{
	ProgressArg *pa = arg;

	return pa->error != NULL ||
		(InterruptPending && (QueryCancelPending || ProcDiePending));
}

/*
 * Called by the core between iterations.  The core holds malloc'ed and GPU
 * memory that only its own exit path frees, so nothing may longjmp out of
 * here: an ERROR raised while sending the NOTICE (out of memory, say) is
 * caught, stops the training through should_stop(), and is re-thrown by the
 * caller once the core has returned and freed everything.
 */
static void
on_iteration(void *arg, int it, double loss, double rmse, double seconds)
{
	ProgressArg *pa = arg;
	MemoryContext mcx = CurrentMemoryContext;

	if (!gpumf_progress || pa->error)
		return;
	PG_TRY();
	{
		if (pa->explicit_model)
			ereport(NOTICE,
					(errmsg("iteration %d/%d: loss %.6g, training RMSE %.6g, %.3f s", it,
							pa->iterations, loss, rmse, seconds)));
		else
			ereport(NOTICE,
					(errmsg("iteration %d/%d: loss %.6g, %.3f s", it, pa->iterations,
							loss, seconds)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		pa->error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
}

static double
elapsed(double *t)
{
	double		now = gm_now(),
				d = now - *t;

	*t = now;
	return d;
}

/* A held-out evaluation's result, NOTICEd like an iteration (must not longjmp). */
static void
on_eval(void *arg, int it, const gm_rank_result *r)
{
	ProgressArg *pa = arg;
	MemoryContext mcx = CurrentMemoryContext;

	if (!gpumf_progress || pa->error)
		return;
	PG_TRY();
	{
		ereport(NOTICE,
				(errmsg("iteration %d: held-out %s@%d %.6g", it,
						gm_rank_metric_name(pa->metric), pa->K, gm_rank_value(r, pa->metric))));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		pa->error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
}

/*
 * Train the model on ts->R/Rt into ts's factor arrays.  With a holdout,
 * a->holdout of each user's rows are held out (seeded), the model trains on
 * the rest, is measured on them after every iteration and stops once two
 * measurements in a row did not beat the best; the best one is kept (*ev
 * says which and how good).
 */
static void
train_model(TrainArgs *a, bool service, TrainState *ts, gm_mf_result *res, gm_mf_eval *ev)
{
	ProgressArg pa;
	gm_callbacks cbs;
	gm_mf_data d;
	char		err[GM_ERRLEN];
	int			rc;
	int32		nu = ts->R.n_rows,
				ni = ts->R.n_cols;
	int			k = a->p.factors;

	/*
	 * Everything the training holds, counted before it allocates: R and its
	 * transpose (with a holdout the part trained on, its transpose and the
	 * held rows too), the factors and biases, and what the algorithm
	 * allocates beside them, each thread's scratch included.
	 */
	{
		double		per_thread;
		double		need = ts->lean ?
			/* R, the transpose's slab buffers, the factors as downloaded */
			gpumf_csr_bytes(&ts->R) + ((double) ni + 1) * sizeof(int64) + 512.0 * 1024 * 1024 +
			ts->keymap_bytes + ((double) nu + ni) * (k + 1) * sizeof(float) :
			gpumf_csr_bytes(&ts->R) * (a->holdout > 0 ? 4 : 2) +
			ts->keymap_bytes + ((double) nu + ni) * (k + 1) * sizeof(float) +
			gm_mf_memory(&a->p, &ts->R, &ts->Rt, a->holdout > 0 ? a->K : 0, a->holdout > 0,
						 &per_thread);

		gpumf_check_memory_threads(need, per_thread,
								   a->p.threads > 0 ? a->p.threads : gm_default_threads(),
								   "training");
	}

	memset(&d, 0, sizeof(d));
	d.R = &ts->R;
	d.Rt = &ts->Rt;
	d.start_on_device = ts->lean;
	if (!service)
	{
		d.uploaded = free_uploaded_values;
		d.uploaded_arg = ts;
	}
	if (a->holdout > 0)
	{
		if (gm_split_holdout(&ts->R, a->holdout, a->p.seed, &ts->part, &ts->held,
							 err, sizeof(err)) != GM_OK ||
			gm_csr_transpose(&ts->part, &ts->part_t, err, sizeof(err)) != GM_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
		if (ts->held.nnz == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("no rows to hold out: every user has fewer than two rows"),
					 errhint("Train without holdout.")));
		d.R = &ts->part;
		d.Rt = &ts->part_t;
		memset(ev, 0, sizeof(*ev));
		ev->test = &ts->held;
		ev->metric = a->metric;
		ev->K = a->K;
		ev->every = 1;
		ev->patience = 2;
		ev->keep_best = 1;
		ev->on_eval = on_eval;
		ev->arg = &pa;
	}
	pa.iterations = a->p.iterations;
	pa.explicit_model = gm_algorithm_is_explicit(a->p.algorithm);
	pa.error = NULL;
	pa.metric = a->metric;
	pa.K = a->K;
	cbs.should_stop = should_stop;
	/* without progress NOTICEs (and no tolerance) implicit ALS evaluates only its last loss */
	cbs.on_iteration = gpumf_progress ? on_iteration : NULL;
	cbs.arg = &pa;

	/* GPU memory: refused before anything is uploaded when the card cannot hold it */
	gpumf_check_gpu_memory(&a->p, d.R, d.Rt, "training");

	/* graph_filter returns its filter too: this process trains it */
	if (a->p.algorithm == GM_ALG_GRAPH_FILTER)
	{
		Assert(!service);
		a->filter = palloc0(sizeof(float) * k);
		d.filter = a->filter;
	}
	/* on the training service's worker (its factors stay in its segment) */
	if (service)
	{
		ts->service_seg = gpumf_service_train(&a->p, &d, &cbs, a->holdout > 0 ? ev : NULL,
											  res, &rc, err, sizeof(err));
		if (ts->service_seg)
		{
			elog(DEBUG1, "gpumf: trained by the training service");
			ts->X = d.X;
			ts->Y = d.Y;
			ts->user_bias = d.user_bias;
			ts->item_bias = d.item_bias;
		}
		else if (a->p.backend != GM_BACKEND_CUDA)
			elog(DEBUG1, "gpumf: the training service is busy: training in this session");
		else
		{
			/* busy with another session's training: in this process, as without it */
			char		name[128];

			elog(DEBUG1, "gpumf: the training service is busy: training in this session");
			a->p.backend = gpumf_training_backend(name, sizeof(name));
		}
	}
	if (ts->service_seg == NULL)
	{
		/* graph_filter stores no user factors: none are formed */
		ts->X = a->p.algorithm == GM_ALG_GRAPH_FILTER ? NULL : malloc(sizeof(float) * (size_t) nu * k);
		ts->Y = malloc(sizeof(float) * (size_t) ni * k);
		if (a->p.biases)
		{
			ts->user_bias = malloc(sizeof(float) * (size_t) Max(nu, 1));
			ts->item_bias = malloc(sizeof(float) * (size_t) Max(ni, 1));
		}
		if ((!ts->X && a->p.algorithm != GM_ALG_GRAPH_FILTER) || !ts->Y ||
			(a->p.biases && (!ts->user_bias || !ts->item_bias)))
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory for factors")));
		d.X = ts->X;
		d.Y = ts->Y;
		d.user_bias = ts->user_bias;
		d.item_bias = ts->item_bias;
		rc = gm_mf_train_eval(&a->p, &d, &cbs, a->holdout > 0 ? ev : NULL, res, err, sizeof(err));
	}
	gpumf_train_check_rc(rc, pa.error, "training", err,
						 "Train with fewer factors, on the CPU (SET gpumf.device = 'cpu'), or with a larger gpumf.gpu_memory_limit / gpumf.max_memory; the previous model is unchanged.");
	if (isnan(res->final.loss) || isinf(res->final.loss) || res->final.loss < 0)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("training diverged: the loss is %g", res->final.loss),
				 errhint("Use a larger regularization or a smaller alpha.")));
	if (!pa.explicit_model)
		res->final.rmse = NAN;
	ts->global_mean = d.global_mean;	/* set by gm_mf_train when biases are on */
}

/*
 * graph_filter's iALS part (ials_factors): an als model trained on the same
 * R, after the filter, into a second TrainState whose R and Rt are ts's
 * (borrowed: its callback frees only its factors).  Returns that state,
 * whose factors the store writes after the filter's.
 */
static void
ials_part_free(void *arg)
{
	TrainState *t = arg;

	free(t->X);
	free(t->Y);
	t->X = t->Y = NULL;
}

static TrainState *
train_ials_part(TrainArgs *a, TrainState *ts, gm_mf_result *res)
{
	TrainArgs	b = *a;
	TrainState *t2 = palloc0(sizeof(TrainState));
	gm_mf_result r2;
	gm_mf_eval	ev2;

	t2->cb.func = ials_part_free;
	t2->cb.arg = t2;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &t2->cb);
	t2->R = ts->R;
	t2->Rt = ts->Rt;
	/* held beside it: the key maps and the filter's item factors */
	t2->keymap_bytes = ts->keymap_bytes + (double) ts->R.n_cols * a->p.factors * sizeof(float);
	b.p = a->ip;
	b.p.backend = a->p.backend;
	gpumf_apply_gpus(&b.p);
	b.holdout = 0;
	b.filter = NULL;
	memset(&r2, 0, sizeof(r2));
	train_model(&b, false, t2, &r2, &ev2);
	a->ials_loss = r2.final.loss;
	res->train_seconds += r2.train_seconds;
	res->loss_seconds += r2.loss_seconds;
	res->transfer_seconds += r2.transfer_seconds;
	res->download_seconds += r2.download_seconds;
	return t2;
}

/* Train and store a model as a says (gpumf_train, gpumf_tune); the catalog row. */
Datum
gpumf_train_args(const TrainArgs *args)
{
	TrainArgs	a = *args;
	TrainState *ts;
	gm_mf_eval	ev;
	GpumfSource *src;
	GpumfModel	old;
	GpumfModelRow row;
	GpumfFactorTables tables,
				old_tables;
	GpumfStoreInput in;
	gm_mf_result res;
	bool		exists,
				try_service,
				service,
				early;
	double		t,
				t_read,
				t_csr,
				mem[4] = {-1, -1, -1, -1},
				t_store,
				est_rows;
	char		devname[128] = "";
	Oid			caller = GetUserId();
	Datum		result;
	TrainState *ials = NULL;	/* graph_filter's iALS part */

	memset(&ev, 0, sizeof(ev));
	/* the source is locked before its columns are checked */
	src = gpumf_source_open(a.relid, a.ucol, a.icol, a.vcol,
					  !gm_algorithm_is_explicit(a.p.algorithm) ? GPUMF_VALUES_IMPLICIT :
					  GPUMF_VALUES_RATINGS);
	src->defer_maps = true;		/* the keys' maps applied as the matrix is built (by the GPU) */

	ts = palloc0(sizeof(TrainState));
	ts->mem_uploaded = -1;
	ts->cb.func = train_state_free;
	ts->cb.arg = ts;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &ts->cb);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* ---- one training per model at a time; the retrainer must own it */
	gpumf_model_lock(a.model);
	exists = gpumf_model_lookup(a.model, &old);
	gpumf_model_check_current(a.model, exists, exists ? old.version : 0);
	if (exists)
		gpumf_model_check_owner(&old, "retrain");

	/* ---- read, as the caller (the GPU is looked for meanwhile) */
	try_service = gpumf_device_prefetch(&a.p, est_rows = gpumf_source_estimate_rows(src));
	/* the store's WAL files made meanwhile: first guessed at 64 rows a user, then known */
	gpumf_wal_ahead(gpumf_store_wal_bytes(est_rows / 64, 0, est_rows, a.p.factors + a.ials_factors));
	t = gm_now();
	gpumf_source_read(src);
	t_read = elapsed(&t);
	mem[0] = gpumf_private_memory_mb();
	if (src->null_keys > 0)
		ereport(NOTICE,
				(errmsg("skipped " INT64_FORMAT " rows with a NULL user or item", src->null_keys)));
	if (src->null_values > 0)
		ereport(NOTICE,
				(errmsg("skipped " INT64_FORMAT " rows with a NULL value", src->null_values)));
	if (src->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("no rows to train on in \"%s\"", get_rel_name(a.relid)),
				 errdetail(INT64_FORMAT " rows read, " INT64_FORMAT " with a NULL key, " INT64_FORMAT " with a NULL value.",
						   src->rows_read, src->null_keys, src->null_values),
				 errhint("The source must have at least one row with a non-NULL user and item.")));

	/* ---- the device first when the GPU may build the matrix; CSR / CSC, keys renumbered in key order */
	if ((early = gpumf_gpu_build_rows >= 0 && src->n >= gpumf_gpu_build_rows))
		ts->lean = gpumf_choose_backend(&a, try_service, devname, sizeof(devname), &service);
	gpumf_source_to_csr(src, &ts->R, early ? gpumf_csr_build_where(&a, service, ts->lean, src->n) :
						GPUMF_CSR_HOST, a.p.factors);
	gpumf_check_summed_values(src, &ts->R);
	ts->keymap_bytes = (double) gm_keymap_memory(src->users) + gm_keymap_memory(src->items);
	t_csr = elapsed(&t);
	mem[1] = gpumf_private_memory_mb();
	gpumf_wal_ahead(gpumf_store_wal_bytes(ts->R.n_rows, ts->R.n_cols, ts->R.nnz, a.p.factors + a.ials_factors));

	/* ---- device and training */
	if (!early)
		ts->lean = gpumf_choose_backend(&a, try_service, devname, sizeof(devname), &service);
	a.n_items = ts->R.n_cols;
	if (a.p.algorithm == GM_ALG_GRAPH_FILTER && a.p.factors > ts->R.n_cols)
	{
		if (a.auto_fixed & GM_AUTO_FIX_FACTORS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("graph_filter needs at most as many factors as items: %d factors, %d items",
							a.p.factors, ts->R.n_cols),
					 errhint("Give factors => %d or fewer.", ts->R.n_cols)));
		a.p.factors = ts->R.n_cols; /* the default, 1024, on fewer items */
	}
	/*
	 * The transpose: formed, or (a lean training: one implicit ALS training
	 * on the GPU in this process) built a slab at a time as it is uploaded
	 */
	t = gm_now();
	gpumf_csr_transpose_for(&ts->R, &ts->Rt, !ts->lean);
	t_csr += elapsed(&t);
	mem[2] = gpumf_private_memory_mb();
	if (a.autotune)
		gpumf_autotune_choose(&a, &ts->R, &ts->Rt);
	train_model(&a, service, ts, &res, &ev);
	if (a.ials_factors > 0)
		ials = train_ials_part(&a, ts, &res);
	mem[3] = gpumf_private_memory_mb();
	t = gm_now();

	/* ---- store, as the extension's owner */
	memset(&row, 0, sizeof(row));
	row.m.id = exists ? old.id : gpumf_model_next_id();
	/* after a gpumf_use_version roll-back, newer versions may be kept: skip past them */
	row.m.version = exists ? gpumf_history_next_version(old.id, old.version) : 1;
	row.m.name = a.model;
	row.m.algorithm = (char *) gm_algorithm_name(a.p.algorithm);
	row.m.factors = a.p.factors + a.ials_factors;	/* graph_filter's iALS part last */
	row.m.user_type = src->utype;
	row.m.item_type = src->itype;
	row.m.owner = exists && OidIsValid(old.owner) ? old.owner : caller;
	row.m.explicit_values = gm_algorithm_is_explicit(a.p.algorithm);
	row.m.has_bias = a.p.biases != 0;
	row.m.global_mean = a.p.biases ? ts->global_mean : NAN;
	row.m.value_min = src->vmin;
	row.m.value_max = src->vmax;
	row.m.source = src->relname;
	/* pinned by OID: a rename follows it, a dropped source is never looked up by name */
	row.source_relid = a.relid;
	row.m.user_col = a.ucol;
	row.m.item_col = a.icol;
	row.m.value_col = a.vcol;

	memset(&in, 0, sizeof(in));
	in.id = row.m.id;
	in.version = row.m.version;
	in.k = a.p.factors + a.ials_factors;
	/*
	 * graph_filter's users are the sums of their items' rows: serving forms
	 * them; with an iALS part, that part's user factors are stored
	 */
	in.X = a.p.algorithm != GM_ALG_GRAPH_FILTER ? ts->X : ials ? ials->X : NULL;
	in.xk = a.ials_factors;
	in.Y = ts->Y;
	in.Y2 = ials ? ials->Y : NULL;
	in.k2 = a.ials_factors;
	in.user_bias = ts->user_bias;
	in.item_bias = ts->item_bias;
	in.R = &ts->R;
	in.users = src->users;
	in.items = src->items;
	in.ukind = src->ukind;
	in.ikind = src->ikind;
	in.utype = src->utype;
	in.itype = src->itype;
	in.read_workers = src->read_workers;
	in.filled = free_stored;
	in.filled_arg = ts;
	/* the warming copies the items from memory: fixed-size keys, Y as stored */
	ts->keep_items = gpumf_served_warms(row.m.id) && !ts->service_seg && in.Y && in.Y == ts->Y &&
		!in.Y2 && src->itype != TEXTOID;
	tables = gpumf_store_write(&in);
	if (exists)
	{
		old_tables.users = old.user_table;
		old_tables.items = old.item_table;
	}
	gpumf_store_grant(&tables, exists ? &old_tables : NULL, row.m.owner);
	t_store = gm_now() - t;
	elog(DEBUG1, "gpumf: the backend's private memory (MB) after the read %.0f, the matrix %.0f, its transpose %.0f, the upload %.0f, the training %.0f, the store %.0f%s",
		 mem[0], mem[1], mem[2], ts->mem_uploaded, mem[3], gpumf_private_memory_mb(),
		 ts->lean ? " (lean)" : "");
	elog(DEBUG1, "gpumf: transfer %.3f s, of it after the training (the factors' download) %.3f s",
		 res.transfer_seconds, res.download_seconds);
	if (ts->service_seg)
	{
		/* the factors are in the tables: let the service's segment go */
		gpumf_service_release(ts->service_seg);
		ts->X = ts->Y = ts->user_bias = ts->item_bias = NULL;
	}

	row.m.user_table = tables.users;
	row.m.item_table = tables.items;
	row.params = gpumf_train_params_jsonb(&a);
	if (a.holdout > 0)
	{
		StringInfoData m;

		initStringInfo(&m);
		appendStringInfo(&m, "{\"holdout\": {\"metric\": \"%s@%d\", \"value\": %.17g, "
						 "\"best_iteration\": %d, \"recall\": %.17g, \"ndcg\": %.17g, "
						 "\"precision\": %.17g, \"users\": " INT64_FORMAT ", \"rows\": " INT64_FORMAT
						 ", \"iterations_trained\": %d}}",
						 gm_rank_metric_name(a.metric), a.K, ev.best, ev.best_iteration,
						 ev.best_result.recall, ev.best_result.ndcg, ev.best_result.precision,
						 (int64) ev.best_result.users, (int64) ts->held.nnz, res.iterations_run);
		row.metrics = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(m.data)));
	}
	row.n_rows = src->rows_read;
	row.nnz = ts->R.nnz;
	row.n_users = ts->R.n_rows;
	row.n_items = ts->R.n_cols;
	row.backend = a.p.backend == GM_BACKEND_CUDA ? "cuda" : "cpu";
	row.device = res.device_name;
	row.iterations_run = a.holdout > 0 ? ev.best_iteration : res.iterations_run;
	row.final_loss = res.final.loss;
	row.train_rmse = res.final.rmse;
	row.read_seconds = t_read;
	row.build_seconds = t_csr;
	row.transfer_seconds = res.transfer_seconds;
	row.train_seconds = res.train_seconds;
	row.loss_seconds = res.loss_seconds;
	row.store_seconds = t_store;
	gpumf_model_write(&row, exists);
	if (exists)
		gpumf_store_retire(&old_tables);
	gpumf_store_drop_retired();
	/*
	 * The new version into shared memory now, so that the first call after
	 * the commit attaches; once this transaction commits, a background
	 * worker lets the replaced one go (its readers keep their mapping), and
	 * reads the new one if that failed here.
	 */
	gpumf_served_warm_now(a.model, row.m.id, ts->keep_items && ts->Y ?
						  &(GpumfItemsAtHand) {row.m.id, row.m.version, tables.items, ts->R.n_cols,
						  in.k, ts->Y, ts->item_bias, item_key_at, src} : NULL);
	gpumf_served_warm_on_commit(row.m.id, row.m.version);

	SPI_finish();
	/* after SPI_finish, which frees what was allocated since SPI_connect */
	result = gpumf_model_row_datum(a.model);
	train_state_free(ts);
	return result;
}

Datum
gpumf_train(PG_FUNCTION_ARGS)
{
	TrainArgs	a;

	gpumf_check_catalog_version();
	parse_args(fcinfo, &a);
	PG_RETURN_DATUM(gpumf_train_args(&a));
}

Datum
gpumf_drop_model(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		if_exists = PG_NARGS() > 1 && PG_GETARG_BOOL(1);
	GpumfModel	m;
	GpumfFactorTables t;

	gpumf_check_catalog_version();
	gpumf_check_model_name(model);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	gpumf_model_lock(model);
	if (!gpumf_model_lookup(model, &m))
	{
		if (if_exists)
		{
			ereport(NOTICE,
					(errmsg("model \"%s\" does not exist, skipping", model)));
			SPI_finish();
			PG_RETURN_BOOL(false);
		}
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", model),
				 errhint("SELECT name FROM gpumf.models lists the models; if_exists => true skips a missing model.")));
	}
	gpumf_model_check_owner(&m, "drop");
	gpumf_model_delete(m.id);
	gpumf_served_forget(m.id);
	t.users = m.user_table;
	t.items = m.item_table;
	gpumf_store_drop(&t);
	gpumf_store_drop_retired();
	SPI_finish();
	PG_RETURN_BOOL(true);
}

/* A ranking metric and its cutoff from 'recall@20'. */
void
gpumf_metric_from_text(const char *s, gm_rank_metric *m, int *K)
{
	char		err[GM_ERRLEN];

	if (gm_rank_metric_parse(s, m, K, err, sizeof(err)) != GM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", err),
				 errhint("For example 'recall@20' or 'ndcg@10'.")));
}
