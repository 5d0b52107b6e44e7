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
#include "gpumf_pg.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
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
	ARG_ALGORITHM, ARG_INNER_ITERATIONS, ARG_BIASES, ARG_TOLERANCE
};

typedef struct TrainArgs
{
	Oid			relid;
	char	   *ucol;
	char	   *icol;
	char	   *vcol;
	char	   *model;
	gm_mf_params p;
} TrainArgs;

/* Everything malloc'ed while training; freed by a memory-context callback. */
typedef struct TrainState
{
	gm_csr		R;
	gm_csr		Rt;
	float	   *X;
	float	   *Y;
	float	   *user_bias;
	float	   *item_bias;
	double		global_mean;
	MemoryContextCallback cb;
} TrainState;

static void
train_state_free(void *arg)
{
	TrainState *ts = arg;

	gm_csr_free(&ts->R);
	gm_csr_free(&ts->Rt);
	free(ts->X);
	free(ts->Y);
	free(ts->user_bias);
	free(ts->item_bias);
	ts->X = ts->Y = ts->user_bias = ts->item_bias = NULL;
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
						 "Algorithm \"als\" takes factors, iterations, regularization, alpha, cg_steps, tolerance and seed." :
						 strcmp(algorithm, "ccd") == 0 ?
						 "Algorithm \"ccd\" takes factors, iterations, regularization, inner_iterations, biases, tolerance and seed." :
						 "Algorithm \"als_explicit\" takes factors, iterations, regularization, biases, tolerance and seed.")));
	return true;
}

static void
parse_args(FunctionCallInfo fcinfo, TrainArgs *a)
{
	const char *alg;
	gm_algorithm algorithm;
	bool		implicit;

	memset(a, 0, sizeof(*a));
	gpumf_check_not_null(fcinfo, ARG_SOURCE, "source");
	gpumf_check_not_null(fcinfo, ARG_USER_COL, "user_col");
	gpumf_check_not_null(fcinfo, ARG_ITEM_COL, "item_col");
	gpumf_check_not_null(fcinfo, ARG_FACTORS, "factors");
	gpumf_check_not_null(fcinfo, ARG_ITERATIONS, "iterations");
	gpumf_check_not_null(fcinfo, ARG_SEED, "seed");
	if (PG_NARGS() > ARG_ALGORITHM)
		gpumf_check_not_null(fcinfo, ARG_ALGORITHM, "algorithm");

	alg = PG_NARGS() > ARG_ALGORITHM ? text_to_cstring(PG_GETARG_TEXT_PP(ARG_ALGORITHM)) : "als";
	if (gm_algorithm_from_name(alg, &algorithm) != GM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown algorithm \"%s\"", alg),
				 errhint("Valid algorithms: \"als\" (implicit feedback), \"als_explicit\" and \"ccd\" (ratings).")));
	implicit = algorithm == GM_ALG_ALS_IMPLICIT;
	gm_mf_params_defaults(&a->p, algorithm);

	a->relid = PG_GETARG_OID(ARG_SOURCE);
	a->ucol = NameStr(*PG_GETARG_NAME(ARG_USER_COL));
	a->icol = NameStr(*PG_GETARG_NAME(ARG_ITEM_COL));
	a->vcol = PG_ARGISNULL(ARG_VALUE_COL) ? NULL : NameStr(*PG_GETARG_NAME(ARG_VALUE_COL));
	if (!implicit && a->vcol == NULL)
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

	a->p.factors = PG_GETARG_INT32(ARG_FACTORS);
	gpumf_check_int_range("factors", a->p.factors, 1, 1024);
	a->p.iterations = PG_GETARG_INT32(ARG_ITERATIONS);
	gpumf_check_int_range("iterations", a->p.iterations, 1, 100000);
	a->p.seed = (uint64) PG_GETARG_INT64(ARG_SEED);
	if (given(fcinfo, ARG_REGULARIZATION, "regularization", alg, true))
	{
		a->p.regularization = PG_GETARG_FLOAT4(ARG_REGULARIZATION);
		gpumf_check_positive("regularization", a->p.regularization);
	}
	if (given(fcinfo, ARG_ALPHA, "alpha", alg, implicit))
	{
		a->p.alpha = PG_GETARG_FLOAT4(ARG_ALPHA);
		gpumf_check_nonneg("alpha", a->p.alpha);
	}
	if (given(fcinfo, ARG_CG_STEPS, "cg_steps", alg, implicit))
	{
		a->p.cg_steps = PG_GETARG_INT32(ARG_CG_STEPS);
		gpumf_check_int_range("cg_steps", a->p.cg_steps, 1, 1024);
	}
	if (given(fcinfo, ARG_INNER_ITERATIONS, "inner_iterations", alg, algorithm == GM_ALG_CCD))
	{
		a->p.inner_iterations = PG_GETARG_INT32(ARG_INNER_ITERATIONS);
		gpumf_check_int_range("inner_iterations", a->p.inner_iterations, 1, 100);
	}
	if (given(fcinfo, ARG_BIASES, "biases", alg, !implicit))
		a->p.biases = PG_GETARG_BOOL(ARG_BIASES);
	if (given(fcinfo, ARG_TOLERANCE, "tolerance", alg, true))
	{
		a->p.tolerance = PG_GETARG_FLOAT4(ARG_TOLERANCE);
		gpumf_check_nonneg("tolerance", a->p.tolerance);
	}
	a->p.threads = gpumf_threads;
}

/* a real as its shortest exact decimal (0.01, not 0.00999999978) */
static const char *
real_text(float v)
{
	char	   *buf = palloc(FLOAT_SHORTEST_DECIMAL_LEN);

	float_to_shortest_decimal_buf(v, buf);
	return buf;
}

/* The hyper-parameters that apply to the algorithm, by name. */
static Jsonb *
params_jsonb(const gm_mf_params *p)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfo(&s, "{\"iterations\": %d, \"regularization\": %s", p->iterations,
					 real_text(p->regularization));
	if (p->algorithm == GM_ALG_ALS_IMPLICIT)
		appendStringInfo(&s, ", \"alpha\": %s, \"cg_steps\": %d", real_text(p->alpha),
						 p->cg_steps);
	else
	{
		if (p->algorithm == GM_ALG_CCD)
			appendStringInfo(&s, ", \"inner_iterations\": %d", p->inner_iterations);
		appendStringInfo(&s, ", \"biases\": %s", p->biases ? "true" : "false");
	}
	appendStringInfo(&s, ", \"tolerance\": %s, \"seed\": " INT64_FORMAT "}",
					 real_text((float) p->tolerance), (int64) p->seed);
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s.data)));
}

/* ------------------------------------------------------------ training */

typedef struct ProgressArg
{
	int			iterations;
	bool		explicit_model;
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

/* Train the model on ts->R/Rt into ts's factor arrays. */
static void
train_model(const TrainArgs *a, TrainState *ts, gm_mf_result *res)
{
	ProgressArg pa;
	gm_callbacks cbs;
	gm_mf_data d;
	char		err[GM_ERRLEN];
	int			rc;
	int32		nu = ts->R.n_rows,
				ni = ts->R.n_cols;
	int			k = a->p.factors;

	/* factors on the host, and what the algorithms keep beside them */
	gpumf_check_memory(((double) nu + ni) * k * sizeof(float) * 4 +
					   (double) ts->R.nnz * sizeof(float) * 4, "training");
	ts->X = malloc(sizeof(float) * (size_t) nu * k);
	ts->Y = malloc(sizeof(float) * (size_t) ni * k);
	if (a->p.biases)
	{
		ts->user_bias = malloc(sizeof(float) * (size_t) Max(nu, 1));
		ts->item_bias = malloc(sizeof(float) * (size_t) Max(ni, 1));
	}
	if (!ts->X || !ts->Y || (a->p.biases && (!ts->user_bias || !ts->item_bias)))
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory for factors")));

	memset(&d, 0, sizeof(d));
	d.R = &ts->R;
	d.Rt = &ts->Rt;
	d.X = ts->X;
	d.Y = ts->Y;
	d.user_bias = ts->user_bias;
	d.item_bias = ts->item_bias;

	pa.iterations = a->p.iterations;
	pa.explicit_model = a->p.algorithm != GM_ALG_ALS_IMPLICIT;
	pa.error = NULL;
	cbs.should_stop = should_stop;
	cbs.on_iteration = on_iteration;
	cbs.arg = &pa;
	rc = gm_mf_train(&a->p, &d, &cbs, res, err, sizeof(err));
	if (pa.error)
		ReThrowError(pa.error);
	if (rc == GM_ECANCELED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("training canceled")));
	}
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY :
						 rc == GM_ENOTSUP ? ERRCODE_FEATURE_NOT_SUPPORTED :
						 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("training failed: %s", err),
				 rc == GM_ENOMEM ?
				 errhint("Train with fewer factors, on the CPU (SET gpumf.device = 'cpu'), or with a larger gpumf.gpu_memory_limit / gpumf.max_memory; the previous model is unchanged.") : 0));
	if (isnan(res->final.loss) || isinf(res->final.loss) || res->final.loss < 0)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("training diverged: the loss is %g", res->final.loss),
				 errhint("Use a larger regularization or a smaller alpha.")));
	if (!pa.explicit_model)
		res->final.rmse = NAN;
	ts->global_mean = d.global_mean;	/* set by gm_mf_train when biases are on */
}

Datum
gpumf_train(PG_FUNCTION_ARGS)
{
	TrainArgs	a;
	TrainState *ts;
	GpumfSource *src;
	GpumfModel	old;
	GpumfModelRow row;
	GpumfFactorTables tables,
				old_tables;
	GpumfStoreInput in;
	gm_mf_result res;
	bool		exists;
	double		t,
				t_read,
				t_csr,
				t_store;
	char		devname[128] = "";
	Oid			caller = GetUserId();
	Datum		result;

	parse_args(fcinfo, &a);

	/* the source is locked before its columns are checked */
	src = gpumf_source_open(a.relid, a.ucol, a.icol, a.vcol,
					  a.p.algorithm == GM_ALG_ALS_IMPLICIT ? GPUMF_VALUES_IMPLICIT :
					  GPUMF_VALUES_RATINGS);

	ts = palloc0(sizeof(TrainState));
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
	gpumf_device_prefetch();
	t = gm_now();
	gpumf_source_read(src);
	t_read = elapsed(&t);
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

	/* ---- CSR / CSC, keys renumbered in key order */
	gpumf_source_to_csr(src, &ts->R, &ts->Rt);
	t_csr = elapsed(&t);

	/* ---- device and training */
	a.p.backend = gpumf_training_backend(devname, sizeof(devname));
	train_model(&a, ts, &res);
	t = gm_now();

	/* ---- store, as the extension's owner */
	memset(&row, 0, sizeof(row));
	row.m.id = exists ? old.id : gpumf_model_next_id();
	/* after a gpumf_use_version roll-back, newer versions may be kept: skip past them */
	row.m.version = exists ? gpumf_history_next_version(old.id, old.version) : 1;
	row.m.name = a.model;
	row.m.algorithm = (char *) gm_algorithm_name(a.p.algorithm);
	row.m.factors = a.p.factors;
	row.m.user_type = src->utype;
	row.m.item_type = src->itype;
	row.m.owner = exists && OidIsValid(old.owner) ? old.owner : caller;
	row.m.explicit_values = a.p.algorithm != GM_ALG_ALS_IMPLICIT;
	row.m.has_bias = a.p.biases != 0;
	row.m.global_mean = a.p.biases ? ts->global_mean : NAN;
	row.m.value_min = src->vmin;
	row.m.value_max = src->vmax;
	row.m.source = src->relname;
	row.m.user_col = a.ucol;
	row.m.item_col = a.icol;
	row.m.value_col = a.vcol;

	memset(&in, 0, sizeof(in));
	in.id = row.m.id;
	in.version = row.m.version;
	in.k = a.p.factors;
	in.X = ts->X;
	in.Y = ts->Y;
	in.user_bias = ts->user_bias;
	in.item_bias = ts->item_bias;
	in.R = &ts->R;
	in.users = src->users;
	in.items = src->items;
	in.ukind = src->ukind;
	in.ikind = src->ikind;
	in.utype = src->utype;
	in.itype = src->itype;
	tables = gpumf_store_write(&in);
	if (exists)
	{
		old_tables.users = old.user_table;
		old_tables.items = old.item_table;
	}
	gpumf_store_grant(&tables, exists ? &old_tables : NULL, row.m.owner);
	t_store = gm_now() - t;

	row.m.user_table = tables.users;
	row.m.item_table = tables.items;
	row.params = params_jsonb(&a.p);
	row.n_rows = src->rows_read;
	row.nnz = ts->R.nnz;
	row.n_users = ts->R.n_rows;
	row.n_items = ts->R.n_cols;
	row.backend = a.p.backend == GM_BACKEND_CUDA ? "cuda" : "cpu";
	row.device = res.device_name;
	row.iterations_run = res.iterations_run;
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
	/*
	 * Once this transaction commits, a background worker reads the new
	 * version into shared memory and lets the replaced one go (its readers
	 * keep their mapping).
	 */
	gpumf_served_warm_on_commit(row.m.id, row.m.version);
	gpumf_store_drop_retired();

	result = gpumf_model_row_datum(a.model);
	SPI_finish();
	train_state_free(ts);
	PG_RETURN_DATUM(result);
}

Datum
gpumf_drop_model(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		if_exists = PG_NARGS() > 1 && PG_GETARG_BOOL(1);
	GpumfModel	m;
	GpumfFactorTables t;

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
