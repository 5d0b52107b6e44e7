/*
 * ols.c: ordinary least squares in SQL.
 *
 *   gpumf_linreg(source, y, x name[], intercept)  a fit over a table or view,
 *       read with the caller's rights; rows with a NULL in y or any x are
 *       skipped and counted; float64 QR folded batch by batch while reading,
 *       on the GPU for tall inputs (below), on the CPU otherwise.
 *   gpumf_linreg_agg(y, x float8[] [, intercept])  the same fit as an
 *       aggregate, for GROUP BY; its state is the core's flat gm_ols_state,
 *       serialised for parallel plans and merged by gm_ols_merge.
 *   gpumf_linreg_predict(coef, x)  coef . (1, x), or coef . x.
 *
 * Both fits return gpumf.linreg_result.  The numerics are the core's
 * (src/core/linalg/ols.c: incremental Householder QR, never X'X); this file reads
 * rows, names columns in messages (a rank-deficient X names the collinear
 * columns by their SQL names, or x[i] in the aggregate) and times reading
 * apart from computing.
 *
 * The GPU (gpumf.device = gpu, or auto on an input large enough to pay for
 * the GPU's start, GPUMF_OLS_GPU_MIN_WORK) folds whole batches of rows with
 * cuSOLVER; the finishing steps are the CPU's.  The aggregate always folds
 * on the CPU: its rows arrive one at a time.
 */
#include "gpumf_linalg.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(gpumf_linreg);
PG_FUNCTION_INFO_V1(gpumf_linreg_agg_step);
PG_FUNCTION_INFO_V1(gpumf_linreg_agg_combine);
PG_FUNCTION_INFO_V1(gpumf_linreg_agg_serialize);
PG_FUNCTION_INFO_V1(gpumf_linreg_agg_deserialize);
PG_FUNCTION_INFO_V1(gpumf_linreg_agg_final);
PG_FUNCTION_INFO_V1(gpumf_linreg_predict);

/* x columns a fit may have: a table's column limit */
#define GPUMF_OLS_MAX_COLUMNS	1600
/* rows are folded in batches of about this many bytes (x and y as doubles) */
#define GPUMF_OLS_BATCH_BYTES	((int64) 32 << 20)
/*
 * gpumf.device = auto moves the folds to the GPU once rows * (k + 2)^2
 * multiply-adds reach this (the planner's row estimate counts too): about
 * 2M rows of 100 columns, 0.7 s of folding on 16 cores, more than the GPU's
 * start in a fresh backend costs.
 */
#define GPUMF_OLS_GPU_MIN_WORK	2e10

/* gpumf.linreg_result's fields */
enum
{
	R_TERMS, R_COEF, R_STD_ERR, R_T_STAT, R_P_VALUE, R_R2, R_ADJ_R2, R_RESIDUAL_SE,
	R_CONDITION_NUMBER, R_ROWS_USED, R_ROWS_SKIPPED, R_DEVICE, R_READ_SECONDS,
	R_COMPUTE_SECONDS, R_NFIELDS
};

/* ------------------------------------------------------------ the fit's result */

/* "a", "a and b", "a, b and c" */
static char *
join_and(List *items)
{
	StringInfoData s;
	int			n = list_length(items),
				i = 0;
	ListCell   *lc;

	initStringInfo(&s);
	foreach(lc, items)
	{
		if (i > 0)
			appendStringInfoString(&s, i == n - 1 ? " and " : ", ");
		appendStringInfoString(&s, (const char *) lfirst(lc));
		i++;
	}
	return s.data;
}

/*
 * The ERROR for a failed finish: a rank-deficient X names the collinear
 * columns (mention[j]: how coefficient j is named in a message), anything
 * else is the core's message.
 */
static void
fit_error(int rc, const char *err, const gm_ols_result *r, char **mention, bool intercept)
{
	if (rc == GM_EINVAL && r->n_involved > 0)
	{
		const char *dep = mention[r->involved[0]];
		List	   *others = NIL;
		bool		with_intercept = false;
		char	   *msg;

		for (int t = 1; t < r->n_involved; t++)
		{
			if (intercept && r->involved[t] == 0)
				with_intercept = true;
			else
				others = lappend(others, mention[r->involved[t]]);
		}
		if (with_intercept)
			others = lcons("the intercept", others);
		if (r->n_involved == 1)
			msg = strstr(err, "all zeros") ?
				psprintf("%s is all zeros: its coefficient cannot be estimated", dep) :
				psprintf("%s is numerically collinear with the columns before it", dep);
		else if (with_intercept && list_length(others) == 1)
			msg = psprintf("%s is constant: it is collinear with the intercept", dep);
		else
			msg = psprintf("%s is a linear combination of %s", dep, join_and(others));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("X is rank-deficient: %s", msg),
				 errhint("Leave one of these columns out of x.")));
	}
	ereport(ERROR,
			(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY :
					 rc == GM_EINVAL ? ERRCODE_INVALID_PARAMETER_VALUE :
					 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("%s", err)));
}

/* n doubles as a float8[] Datum. */
static Datum
float8_array(const double *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = Float8GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, n, FLOAT8OID, sizeof(float8),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Finish the fit of state s (flushed, otherwise unchanged) as a
 * gpumf.linreg_result: term[j] names coefficient j in the result,
 * mention[j] in messages.  device NULL: no device and timings (the
 * aggregate).
 */
static Datum
fit_result(FunctionCallInfo fcinfo, gm_ols_state *s, char **term, char **mention,
		   const char *device, double read_s, double fold_s)
{
	TupleDesc	tupdesc;
	gm_ols_result r;
	int			p = s->k + s->intercept;
	char		err[GM_ERRLEN];
	double		t0 = gm_now();
	Datum		values[R_NFIELDS];
	bool		nulls[R_NFIELDS];
	Datum	   *td;
	int			rc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(&r, 0, sizeof(r));
	r.coef = palloc0(sizeof(double) * Max(p, 1));
	r.std_err = palloc0(sizeof(double) * Max(p, 1));
	r.t_stat = palloc0(sizeof(double) * Max(p, 1));
	r.p_value = palloc0(sizeof(double) * Max(p, 1));
	r.involved = palloc0(sizeof(int) * Max(p, 1));
	rc = gm_ols_finalize(s, &r, err, sizeof(err));
	if (rc != GM_OK)
		fit_error(rc, err, &r, mention, s->intercept != 0);

	memset(nulls, 0, sizeof(nulls));
	td = palloc(sizeof(Datum) * Max(p, 1));
	for (int j = 0; j < p; j++)
		td[j] = CStringGetTextDatum(term[j]);
	values[R_TERMS] = PointerGetDatum(construct_array(td, p, TEXTOID, -1, false, TYPALIGN_INT));
	values[R_COEF] = float8_array(r.coef, p);
	values[R_STD_ERR] = float8_array(r.std_err, p);
	values[R_T_STAT] = float8_array(r.t_stat, p);
	values[R_P_VALUE] = float8_array(r.p_value, p);
	values[R_R2] = Float8GetDatum(r.r2);
	values[R_ADJ_R2] = Float8GetDatum(r.adj_r2);
	values[R_RESIDUAL_SE] = Float8GetDatum(r.residual_se);
	values[R_CONDITION_NUMBER] = Float8GetDatum(r.condition_number);
	values[R_ROWS_USED] = Int64GetDatum(r.rows_used);
	values[R_ROWS_SKIPPED] = Int64GetDatum(r.rows_skipped);
	if (device)
	{
		values[R_DEVICE] = CStringGetTextDatum(device);
		values[R_READ_SECONDS] = Float8GetDatum(read_s);
		values[R_COMPUTE_SECONDS] = Float8GetDatum(fold_s + gm_now() - t0);
	}
	else
		nulls[R_DEVICE] = nulls[R_READ_SECONDS] = nulls[R_COMPUTE_SECONDS] = true;
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls));
}

/* "NaN", "Infinity" or "-Infinity" */
static const char *
nonfinite(double v)
{
	return isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
}

/* ------------------------------------------------------------ gpumf_linreg */

/* A fit being read from a table; malloc'ed parts freed by a callback. */
typedef struct LinregRead
{
	DestReceiver pub;
	int			k;
	bool		intercept;
	Oid		   *types;			/* k + 1: y, then the x columns */
	char	  **cols;			/* their names */
	gm_ols_state *s;
	double	   *X;				/* a batch: batch x k, row-major */
	double	   *y;
	int64		batch;
	int64		nb;				/* rows in the batch */
	int64		rows_read;
	int64		rows_skipped;
	double		fold_seconds;
	double		estimate;		/* the planner's row count, or 0 */
	bool		device_chosen;
	const gm_linalg_ops *gpu;
	void	   *gpu_handle;
	char		gpu_name[128];
	MemoryContextCallback cb;
} LinregRead;

/* Reset callback: the GPU handle, the state and the batch. */
static void
linreg_free(void *arg)
{
	LinregRead *lr = arg;

	if (lr->gpu_handle)
		lr->gpu->ols_destroy(lr->gpu_handle);
	lr->gpu_handle = NULL;
	free(lr->s);
	free(lr->X);
	free(lr->y);
	lr->s = NULL;
	lr->X = lr->y = NULL;
}

/*
 * The GPU for the folds from here on, when gpumf.device allows and the
 * input is tall enough (auto) or always (gpu).  Asked once.
 */
static void
linreg_pick_device(LinregRead *lr)
{
	double		m = lr->k + (lr->intercept ? 1 : 0) + 1;
	double		rows = Max(lr->estimate, (double) (lr->s->rows_used + lr->nb));
	char		err[GM_ERRLEN];
	int			rc;

	if (lr->device_chosen || gpumf_device == GPUMF_DEVICE_CPU)
		return;
	if (gpumf_device == GPUMF_DEVICE_AUTO && rows * m * m < GPUMF_OLS_GPU_MIN_WORK)
		return;
	lr->device_chosen = true;
	lr->gpu = gpumf_linalg_device(lr->gpu_name, sizeof(lr->gpu_name));
	if (lr->gpu == NULL)
		return;
	rc = lr->gpu->ols_create(&lr->gpu_handle, lr->k, lr->intercept ? 1 : 0, lr->batch,
							 err, sizeof(err));
	if (rc == GM_OK)
		return;
	lr->gpu_handle = NULL;
	lr->gpu = NULL;
	if (gpumf_device == GPUMF_DEVICE_GPU)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("the GPU cannot fit this least-squares problem: %s", err),
				 errhint("Set gpumf.device to 'auto' or 'cpu' to fit it on the CPU.")));
	ereport(NOTICE,
			(errmsg("least squares on the CPU: %s", err)));
}

/* Fold the batch into the state (timed: the compute part). */
static void
linreg_fold(LinregRead *lr)
{
	gm_ols_exec ex;
	char		err[GM_ERRLEN];
	double		t0;
	int			rc;

	if (lr->nb == 0)
		return;
	linreg_pick_device(lr);
	ex.threads = gpumf_threads;
	ex.gpu = lr->gpu_handle ? lr->gpu : NULL;
	ex.gpu_handle = lr->gpu_handle;
	ex.gpu_min_rows = 1;
	t0 = gm_now();
	rc = gm_ols_add_rows(lr->s, lr->nb, lr->X, lr->k, lr->y, &ex, err, sizeof(err));
	lr->fold_seconds += gm_now() - t0;
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("least squares failed: %s", err)));
	lr->nb = 0;
}

/*
 * One row (y, x...): skipped and counted with a NULL, an ERROR naming the
 * column and row when not finite, else into the batch (folded when full).
 */
static bool
linreg_receive(TupleTableSlot *slot, DestReceiver *self)
{
	LinregRead *lr = (LinregRead *) self;
	double	   *row = lr->X + lr->nb * lr->k;
	double		v;

	slot_getallattrs(slot);
	lr->rows_read++;
	for (int a = 0; a <= lr->k; a++)
		if (slot->tts_isnull[a])
		{
			lr->rows_skipped++;
			return true;
		}
	for (int a = 0; a <= lr->k; a++)
	{
		v = gpumf_datum_double(lr->types[a], slot->tts_values[a]);
		if (isnan(v) || isinf(v))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("column \"%s\" is %s in row " INT64_FORMAT, lr->cols[a],
							nonfinite(v), lr->rows_read),
					 errhint("Rows are numbered in the order read; leave such rows out with a view or a WHERE clause (rows with a NULL are skipped).")));
		if (a == 0)
			lr->y[lr->nb] = v;
		else
			row[a - 1] = v;
	}
	if (++lr->nb == lr->batch)
		linreg_fold(lr);
	return true;
}

/* The receiver needs no setup or teardown. */
static void
linreg_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
linreg_nothing(DestReceiver *self)
{
}

/* The planner's row count of a table (0 when unknown, or for a view). */
static double
row_estimate(Oid relid)
{
	Relation	rel = relation_open(relid, NoLock);
	double		n = rel->rd_rel->reltuples;

	relation_close(rel, NoLock);
	return n > 0 ? n : 0;
}

/*
 * gpumf_linreg(source, y, x name[], intercept): the least-squares fit of
 * column y on the columns x, read with the caller's rights.
 */
Datum
gpumf_linreg(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *relname;
	char	   *ycol;
	ArrayType  *xa;
	Datum	   *xd;
	bool	   *xnull;
	int			k;
	bool		intercept;
	LinregRead *lr;
	StringInfoData q;
	char	  **term,
			  **mention;
	char		err[GM_ERRLEN];
	char		device[160];
	double		t0,
				read_s;
	int			p;

	gpumf_check_not_null(fcinfo, 0, "source");
	gpumf_check_not_null(fcinfo, 1, "y");
	gpumf_check_not_null(fcinfo, 2, "x");
	gpumf_check_not_null(fcinfo, 3, "intercept");
	relid = PG_GETARG_OID(0);
	ycol = NameStr(*PG_GETARG_NAME(1));
	xa = PG_GETARG_ARRAYTYPE_P(2);
	intercept = PG_GETARG_BOOL(3);

	/* ---- x: distinct column names, not too many */
	if (ARR_NDIM(xa) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("x must be a one-dimensional array of column names")));
	deconstruct_array(xa, NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR, &xd, &xnull, &k);
	if (k == 0 && !intercept)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("x is empty and there is no intercept: nothing to fit"),
				 errhint("Name at least one column in x, or fit the intercept alone.")));
	if (k > GPUMF_OLS_MAX_COLUMNS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("x names %d columns, at most %d are supported", k, GPUMF_OLS_MAX_COLUMNS)));
	for (int j = 0; j < k; j++)
	{
		if (xnull[j])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("x element %d is NULL", j + 1)));
		for (int i = 0; i < j; i++)
			if (strcmp(NameStr(*DatumGetName(xd[i])), NameStr(*DatumGetName(xd[j]))) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("x names column \"%s\" twice", NameStr(*DatumGetName(xd[j]))),
						 errhint("Each column can be a regressor once.")));
	}

	/* ---- the source: locked, then its columns checked */
	relname = gpumf_relation_open(relid);
	lr = palloc0(sizeof(LinregRead));
	lr->k = k;
	lr->intercept = intercept;
	lr->types = palloc(sizeof(Oid) * (k + 1));
	lr->cols = palloc(sizeof(char *) * (k + 1));
	lr->cols[0] = ycol;
	for (int j = 0; j < k; j++)
		lr->cols[j + 1] = NameStr(*DatumGetName(xd[j]));
	for (int a = 0; a <= k; a++)
	{
		lr->types[a] = gpumf_column_type(relid, lr->cols[a], "read");
		gpumf_check_numeric_type(lr->types[a], lr->cols[a], a == 0 ? "y" : "x");
	}
	lr->estimate = row_estimate(relid);

	/* ---- the state and a batch of rows (and the GPU's two pinned copies) */
	lr->batch = GPUMF_OLS_BATCH_BYTES / ((int64) sizeof(double) * (k + 1));
	lr->batch = Min(Max(lr->batch, 1024), 1 << 20);
	gpumf_check_memory((double) gm_ols_state_size(k) +
					   3.0 * lr->batch * (k + 1) * sizeof(double), "the least-squares fit");
	lr->cb.func = linreg_free;
	lr->cb.arg = lr;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &lr->cb);
	lr->s = malloc(gm_ols_state_size(k));
	lr->X = malloc(sizeof(double) * (size_t) lr->batch * Max(k, 1));
	lr->y = malloc(sizeof(double) * (size_t) lr->batch);
	if (!lr->s || !lr->X || !lr->y)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory for the least-squares fit")));
	if (gm_ols_init(lr->s, k, intercept ? 1 : 0, err, sizeof(err)) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", err)));

	/* gpumf.device = gpu: the GPU set up before the work (or an ERROR) */
	if (gpumf_device == GPUMF_DEVICE_GPU)
		linreg_pick_device(lr);

	/* ---- read as the caller, folding batch by batch */
	initStringInfo(&q);
	appendStringInfo(&q, "SELECT %s", quote_identifier(ycol));
	for (int j = 1; j <= k; j++)
		appendStringInfo(&q, ", %s", quote_identifier(lr->cols[j]));
	appendStringInfo(&q, " FROM %s", relname);
	lr->pub.receiveSlot = linreg_receive;
	lr->pub.rStartup = linreg_startup;
	lr->pub.rShutdown = linreg_nothing;
	lr->pub.rDestroy = linreg_nothing;
	lr->pub.mydest = DestNone;
	t0 = gm_now();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	gpumf_read_query(q.data, (DestReceiver *) lr, false, "the source");
	SPI_finish();
	linreg_fold(lr);
	read_s = gm_now() - t0 - lr->fold_seconds;
	gm_ols_skip_rows(lr->s, lr->rows_skipped);
	if (lr->s->rows_used == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("no rows to fit in \"%s\"", get_rel_name(relid)),
				 errdetail(INT64_FORMAT " rows read, " INT64_FORMAT " with a NULL in y or x.",
						   lr->rows_read, lr->rows_skipped)));

	/* ---- the fit, its terms named by the columns */
	p = k + (intercept ? 1 : 0);
	term = palloc(sizeof(char *) * Max(p, 1));
	mention = palloc(sizeof(char *) * Max(p, 1));
	if (intercept)
	{
		term[0] = "(intercept)";
		mention[0] = "the intercept";
	}
	for (int j = 0; j < k; j++)
	{
		term[j + p - k] = lr->cols[j + 1];
		mention[j + p - k] = psprintf("column \"%s\"", lr->cols[j + 1]);
	}
	if (lr->gpu_handle)
		snprintf(device, sizeof(device), "%s", lr->gpu_name);
	else
		snprintf(device, sizeof(device), "cpu (%d threads)",
				 gpumf_threads > 0 ? gpumf_threads : gm_default_threads());
	PG_RETURN_DATUM(fit_result(fcinfo, lr->s, term, mention, device, read_s, lr->fold_seconds));
}

/* ------------------------------------------------------------ the aggregate */

/* The aggregate's state: the core's state once the group's width is known. */
typedef struct LinregAgg
{
	int32		k;				/* x's length; -1 before the first row with an x */
	int32		intercept;
	int64		skipped;		/* rows skipped before the core's state existed */
	gm_ols_state *s;			/* in the aggregate's memory context */
} LinregAgg;

/* What gpumf_linreg_agg_serialize writes before the core's state. */
typedef struct LinregAggWire
{
	int32		k;
	int32		intercept;
	int64		skipped;
} LinregAggWire;

/* The aggregate's memory context; ERROR outside an aggregate. */
static MemoryContext
agg_context(FunctionCallInfo fcinfo, const char *fn)
{
	MemoryContext cxt;

	if (!AggCheckCallContext(fcinfo, &cxt))
		elog(ERROR, "%s called in a non-aggregate context", fn);
	return cxt;
}

/* The core's state for k columns, in cxt. */
static gm_ols_state *
agg_new_state(MemoryContext cxt, int k, int intercept)
{
	gm_ols_state *s;
	char		err[GM_ERRLEN];

	if (k > GPUMF_OLS_MAX_COLUMNS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("x has %d elements, at most %d are supported", k, GPUMF_OLS_MAX_COLUMNS)));
	if (k == 0 && !intercept)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("x is empty and there is no intercept: nothing to fit")));
	gpumf_check_memory((double) gm_ols_state_size(k), "the least-squares state");
	s = MemoryContextAlloc(cxt, gm_ols_state_size(k));
	if (gm_ols_init(s, k, intercept, err, sizeof(err)) != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", err)));
	return s;
}

/* Count n skipped rows (in the core's state once it exists). */
static void
agg_skip(LinregAgg *la, int64 n)
{
	if (la->s)
		gm_ols_skip_rows(la->s, n);
	else
		la->skipped += n;
}

/*
 * Transition: add the row (y, x) to the group's fit; a row with a NULL y,
 * x or element of x is skipped and counted.  x's length must be the same in
 * every row of a group.
 */
Datum
gpumf_linreg_agg_step(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = agg_context(fcinfo, "gpumf_linreg_agg_step");
	LinregAgg  *la = PG_ARGISNULL(0) ? NULL : (LinregAgg *) PG_GETARG_POINTER(0);
	int32		intercept = 1;
	ArrayType  *xa;
	int			k;
	double		y;
	const double *x;
	char		err[GM_ERRLEN];

	if (PG_NARGS() > 3)
	{
		if (PG_ARGISNULL(3))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("intercept must not be NULL")));
		intercept = PG_GETARG_BOOL(3) ? 1 : 0;
	}
	if (la == NULL)
	{
		la = MemoryContextAllocZero(cxt, sizeof(LinregAgg));
		la->k = -1;
		la->intercept = intercept;
	}
	else if (la->intercept != intercept)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("intercept must be the same in every row of a group")));
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
	{
		agg_skip(la, 1);
		PG_RETURN_POINTER(la);
	}
	y = PG_GETARG_FLOAT8(1);
	xa = PG_GETARG_ARRAYTYPE_P(2);
	if (ARR_NDIM(xa) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("x must be a one-dimensional array, not %d-dimensional", ARR_NDIM(xa))));
	k = ARR_NDIM(xa) == 0 ? 0 : ARR_DIMS(xa)[0];
	if (la->s == NULL)
	{
		la->s = agg_new_state(cxt, k, intercept);
		gm_ols_skip_rows(la->s, la->skipped);
		la->skipped = 0;
		la->k = k;
	}
	else if (k != la->k)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("x has %d elements in this row but %d in earlier rows of its group", k, la->k),
				 errhint("Every row of a group needs the same regressors.")));
	if (ARR_HASNULL(xa))
	{
		agg_skip(la, 1);
		PG_RETURN_POINTER(la);
	}
	x = (const double *) ARR_DATA_PTR(xa);
	if (isnan(y) || isinf(y))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("y is %s", nonfinite(y)),
				 errhint("Leave such rows out with a WHERE clause (rows with a NULL are skipped).")));
	for (int j = 0; j < k; j++)
		if (isnan(x[j]) || isinf(x[j]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("x[%d] is %s", j + 1, nonfinite(x[j])),
					 errhint("Leave such rows out with a WHERE clause (rows with a NULL are skipped).")));
	if (gm_ols_add_row(la->s, x, y, err, sizeof(err)) != GM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("least squares failed: %s", err)));
	PG_RETURN_POINTER(la);
}

/* A copy of la (and its core state) in cxt. */
static LinregAgg *
agg_copy(const LinregAgg *la, MemoryContext cxt)
{
	LinregAgg  *c = MemoryContextAlloc(cxt, sizeof(LinregAgg));

	*c = *la;
	if (la->s)
	{
		c->s = MemoryContextAlloc(cxt, gm_ols_state_size(la->k));
		memcpy(c->s, la->s, gm_ols_state_size(la->k));
	}
	return c;
}

/* Combine two partial fits (parallel aggregation): a += b. */
Datum
gpumf_linreg_agg_combine(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = agg_context(fcinfo, "gpumf_linreg_agg_combine");
	LinregAgg  *a = PG_ARGISNULL(0) ? NULL : (LinregAgg *) PG_GETARG_POINTER(0);
	LinregAgg  *b = PG_ARGISNULL(1) ? NULL : (LinregAgg *) PG_GETARG_POINTER(1);
	char		err[GM_ERRLEN];

	if (b == NULL)
	{
		if (a == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(a);
	}
	if (a == NULL)
		PG_RETURN_POINTER(agg_copy(b, cxt));
	if (a->intercept != b->intercept)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("intercept must be the same in every row of a group")));
	if (b->s == NULL)
	{
		agg_skip(a, b->skipped);
		PG_RETURN_POINTER(a);
	}
	if (a->s == NULL)
	{
		int64		skipped = a->skipped;

		a->s = MemoryContextAlloc(cxt, gm_ols_state_size(b->k));
		memcpy(a->s, b->s, gm_ols_state_size(b->k));
		a->k = b->k;
		a->skipped = 0;
		gm_ols_skip_rows(a->s, skipped);
		PG_RETURN_POINTER(a);
	}
	if (a->k != b->k)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("x has %d elements in some rows of a group and %d in others", b->k, a->k),
				 errhint("Every row of a group needs the same regressors.")));
	{
		/* the merge flushes its source: work on a copy, b stays as it was */
		gm_ols_state *src = palloc(gm_ols_state_size(b->k));

		memcpy(src, b->s, gm_ols_state_size(b->k));
		if (gm_ols_merge(a->s, src, err, sizeof(err)) != GM_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("least squares failed: %s", err)));
		pfree(src);
	}
	PG_RETURN_POINTER(a);
}

/* The state as bytea, for parallel workers (the core's state is flat). */
Datum
gpumf_linreg_agg_serialize(PG_FUNCTION_ARGS)
{
	LinregAgg  *la = (LinregAgg *) PG_GETARG_POINTER(0);
	LinregAggWire w;
	Size		sz = la->s ? gm_ols_state_size(la->k) : 0;
	bytea	   *out;

	agg_context(fcinfo, "gpumf_linreg_agg_serialize");
	w.k = la->s ? la->k : -1;
	w.intercept = la->intercept;
	w.skipped = la->skipped;
	out = palloc(VARHDRSZ + sizeof(w) + sz);
	SET_VARSIZE(out, VARHDRSZ + sizeof(w) + sz);
	memcpy(VARDATA(out), &w, sizeof(w));
	if (sz)
		memcpy(VARDATA(out) + sizeof(w), la->s, sz);
	PG_RETURN_BYTEA_P(out);
}

/* The state back from gpumf_linreg_agg_serialize's bytea (checked). */
Datum
gpumf_linreg_agg_deserialize(PG_FUNCTION_ARGS)
{
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	Size		len = VARSIZE_ANY_EXHDR(in);
	LinregAggWire w;
	LinregAgg  *la;
	const gm_ols_state *s;

	agg_context(fcinfo, "gpumf_linreg_agg_deserialize");
	if (len < sizeof(w))
		elog(ERROR, "gpumf_linreg_agg: a serialized state of %zu bytes is too short", len);
	memcpy(&w, VARDATA_ANY(in), sizeof(w));
	if (w.k < -1 || w.k > GPUMF_OLS_MAX_COLUMNS ||
		len != sizeof(w) + (w.k >= 0 ? gm_ols_state_size(w.k) : 0))
		elog(ERROR, "gpumf_linreg_agg: a serialized state of %zu bytes for %d columns is damaged",
			 len, w.k);
	la = palloc0(sizeof(LinregAgg));
	la->k = w.k;
	la->intercept = w.intercept;
	la->skipped = w.skipped;
	if (w.k >= 0)
	{
		la->s = palloc(gm_ols_state_size(w.k));
		memcpy(la->s, VARDATA_ANY(in) + sizeof(w), gm_ols_state_size(w.k));
		s = la->s;
		if (s->k != w.k || s->intercept != w.intercept)
			elog(ERROR, "gpumf_linreg_agg: a serialized state is damaged");
	}
	PG_RETURN_POINTER(la);
}

/* The group's fit (NULL when no row of the group could be used). */
Datum
gpumf_linreg_agg_final(PG_FUNCTION_ARGS)
{
	LinregAgg  *la = PG_ARGISNULL(0) ? NULL : (LinregAgg *) PG_GETARG_POINTER(0);
	gm_ols_state *s;
	char	  **term,
			  **mention;
	int			p;

	agg_context(fcinfo, "gpumf_linreg_agg_final");
	if (la == NULL || la->s == NULL || la->s->rows_used == 0)
		PG_RETURN_NULL();
	/* finishing flushes the state: finish a copy, the state stays read-only */
	s = palloc(gm_ols_state_size(la->k));
	memcpy(s, la->s, gm_ols_state_size(la->k));
	p = la->k + la->intercept;
	term = palloc(sizeof(char *) * Max(p, 1));
	mention = palloc(sizeof(char *) * Max(p, 1));
	if (la->intercept)
	{
		term[0] = "(intercept)";
		mention[0] = "the intercept";
	}
	for (int j = 0; j < la->k; j++)
		term[j + la->intercept] = mention[j + la->intercept] = psprintf("x[%d]", j + 1);
	PG_RETURN_DATUM(fit_result(fcinfo, s, term, mention, NULL, 0, 0));
}

/* ------------------------------------------------------------ prediction */

/* A float8[] as n doubles; false when an element is NULL. */
static bool
array_values(ArrayType *a, const char *name, double **v, int *n)
{
	Datum	   *d;
	bool	   *nulls;

	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array, not %d-dimensional", name, ARR_NDIM(a))));
	deconstruct_array(a, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &d, &nulls, n);
	*v = palloc(sizeof(double) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
	{
		if (nulls[i])
			return false;
		(*v)[i] = DatumGetFloat8(d[i]);
	}
	return true;
}

/*
 * gpumf_linreg_predict(coef, x): coef[1] + coef[2:] . x when coef has one
 * more entry than x (the intercept first, as the fits return it), coef . x
 * when as many; NULL when an element is NULL.
 */
Datum
gpumf_linreg_predict(PG_FUNCTION_ARGS)
{
	double	   *coef,
			   *x;
	int			p,
				k;
	double		y;
	bool		finite = true;

	if (!array_values(PG_GETARG_ARRAYTYPE_P(0), "coef", &coef, &p) ||
		!array_values(PG_GETARG_ARRAYTYPE_P(1), "x", &x, &k))
		PG_RETURN_NULL();
	if (p != k && p != k + 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("coef has %d entries and x %d: coef needs one per x, plus the intercept first", p, k),
				 errhint("Pass the coef of a gpumf_linreg fit and x in the order of its terms (without the intercept).")));
	y = gm_ols_predict(coef, p, x, k);
	for (int i = 0; i < p; i++)
		finite &= isfinite(coef[i]) != 0;
	for (int i = 0; i < k; i++)
		finite &= isfinite(x[i]) != 0;
	/* as float8 arithmetic does: finite inputs whose result is not finite overflowed */
	if (finite && !isfinite(y))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("the fitted value overflows double precision"),
				 errhint("A term coef[i] * x[i], or their sum, is beyond about 1.8e308.")));
	PG_RETURN_FLOAT8(y);
}
