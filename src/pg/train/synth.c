/*
 * synth.c: synthetic training data as rows: gpumf_synthetic (the seeded
 * MovieLens-shaped implicit dataset) and gpumf_synthetic_ratings (planted
 * ratings for the explicit models).
 */
#include "gpumf_train.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "gm_explicit.h"

PG_FUNCTION_INFO_V1(gpumf_synthetic);
PG_FUNCTION_INFO_V1(gpumf_synthetic_ratings);

typedef struct SynthState
{
	gm_synth	g;
	int32		u;				/* current user */
	int32		n;				/* its rows */
	int32		pos;
	int32	   *items;
	float	   *values;
	uint8	   *holdout;
	uint8	   *seen;
	MemoryContextCallback cb;
} SynthState;

static int
synth_should_stop(void *arg)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

static void
check_synth_arg(bool bad, const char *msg)
{
	if (bad)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", msg),
				 errhint("gpumf_synthetic(users, items, rows, seed, min_per_user, clusters, affinity): every user gets at least min_per_user distinct items, so users * min_per_user <= rows <= users * max(items / 2, min_per_user).")));
}

/* Named checks of every size argument, before anything is allocated. */
static void
check_synth_args(const gm_synth *g)
{
	int64		cap = Max(g->n_items / 2, g->min_per_user);

	check_synth_arg(g->n_users < 1 || g->n_users > GM_SYNTH_MAX_USERS,
					psprintf("users must be between 1 and %d, got %d", GM_SYNTH_MAX_USERS, g->n_users));
	check_synth_arg(g->n_items < 1 || g->n_items > GM_SYNTH_MAX_ITEMS,
					psprintf("items must be between 1 and %d, got %d", GM_SYNTH_MAX_ITEMS, g->n_items));
	check_synth_arg(g->n_rows < 1 || g->n_rows > GM_SYNTH_MAX_ROWS,
					psprintf("rows must be between 1 and " INT64_FORMAT ", got " INT64_FORMAT,
							 (int64) GM_SYNTH_MAX_ROWS, (int64) g->n_rows));
	check_synth_arg(g->n_items > g->n_rows,
					psprintf("items (%d) must not exceed rows (" INT64_FORMAT ")", g->n_items, (int64) g->n_rows));
	check_synth_arg(g->min_per_user < 1 || g->min_per_user > g->n_items,
					psprintf("min_per_user must be between 1 and items (%d), got %d", g->n_items, g->min_per_user));
	check_synth_arg(g->clusters < 1 || g->clusters > g->n_items,
					psprintf("clusters must be between 1 and items (%d), got %d", g->n_items, g->clusters));
	check_synth_arg(!(g->affinity >= 0 && g->affinity <= 1),
					psprintf("affinity must be between 0 and 1, got %g", g->affinity));
	check_synth_arg((int64) g->n_users * g->min_per_user > g->n_rows,
					psprintf("rows (" INT64_FORMAT ") must be at least users * min_per_user (" INT64_FORMAT ")",
							 (int64) g->n_rows, (int64) g->n_users * g->min_per_user));
	check_synth_arg(g->n_rows > (int64) g->n_users * cap,
					psprintf("rows (" INT64_FORMAT ") must be at most users * max(items / 2, min_per_user) (" INT64_FORMAT ")",
							 (int64) g->n_rows, (int64) g->n_users * cap));
}

static void
synth_free(void *arg)
{
	gm_synth_free(&((SynthState *) arg)->g);
}

Datum
gpumf_synthetic(PG_FUNCTION_ARGS)
{
	FuncCallContext *fctx;
	SynthState *st;

	if (SRF_IS_FIRSTCALL())
	{
		MemoryContext old;
		char		err[GM_ERRLEN];
		TupleDesc	tupdesc;

		fctx = SRF_FIRSTCALL_INIT();
		old = MemoryContextSwitchTo(fctx->multi_call_memory_ctx);
		st = palloc0(sizeof(SynthState));
		st->g.n_users = PG_GETARG_INT32(0);
		st->g.n_items = PG_GETARG_INT32(1);
		st->g.n_rows = PG_GETARG_INT64(2);
		st->g.seed = (uint64_t) PG_GETARG_INT64(3);
		st->g.min_per_user = PG_GETARG_INT32(4);
		st->g.clusters = PG_GETARG_INT32(5);
		st->g.affinity = PG_GETARG_FLOAT8(6);
		check_synth_args(&st->g);
		st->g.should_stop = synth_should_stop;
		switch (gm_synth_init(&st->g, err, sizeof(err)))
		{
			case GM_OK:
				break;
			case GM_ECANCELED:
				CHECK_FOR_INTERRUPTS();
				/* FALLTHROUGH */
			default:
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s", err)));
		}
		st->cb.func = synth_free;
		st->cb.arg = st;
		MemoryContextRegisterResetCallback(fctx->multi_call_memory_ctx, &st->cb);
		st->items = palloc(sizeof(int32) * st->g.max_count);
		st->values = palloc(sizeof(float) * st->g.max_count);
		st->holdout = palloc(st->g.max_count);
		st->seen = palloc0(st->g.n_items);
		st->u = -1;
		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		fctx->tuple_desc = BlessTupleDesc(tupdesc);
		fctx->user_fctx = st;
		MemoryContextSwitchTo(old);
	}
	fctx = SRF_PERCALL_SETUP();
	st = fctx->user_fctx;
	while (st->pos >= st->n)
	{
		if (st->u + 1 >= st->g.n_users)
			SRF_RETURN_DONE(fctx);
		st->u++;
		st->n = gm_synth_user(&st->g, st->u, st->items, st->values, st->holdout, st->seen);
		st->pos = 0;
		if ((st->u & 255) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = Int32GetDatum(st->u + 1);	/* ids start at 1 */
		values[1] = Int32GetDatum(st->items[st->pos] + 1);
		values[2] = Float4GetDatum(st->values[st->pos]);
		values[3] = BoolGetDatum(st->holdout[st->pos] != 0);
		st->pos++;
		SRF_RETURN_NEXT(fctx, HeapTupleGetDatum(heap_form_tuple(fctx->tuple_desc, values, nulls)));
	}
}

/* ------------------------------------------------- planted ratings */

/*
 * gpumf_synthetic_ratings: ratings from a planted rank-r model with Gaussian
 * noise of known sigma (mean 3.5, user and item biases, power-law item
 * popularity), about `holdout` of them marked for held-out evaluation.
 */
Datum
gpumf_synthetic_ratings(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	gm_ratings_spec s;
	int32	   *users,
			   *items;
	float	   *ratings;
	uint8	   *holdout;
	char		err[GM_ERRLEN];
	int			rc;

	for (int a = 0; a < 6; a++)
		if (PG_ARGISNULL(a))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be NULL",
							((const char *[]) {"users", "items", "rows", "rank", "noise", "seed"})[a])));
	memset(&s, 0, sizeof(s));
	s.n_users = PG_GETARG_INT32(0);
	s.n_items = PG_GETARG_INT32(1);
	s.n_ratings = PG_GETARG_INT64(2);
	s.rank = PG_GETARG_INT32(3);
	s.noise = PG_GETARG_FLOAT8(4);
	s.seed = (uint64) PG_GETARG_INT64(5);
	s.mean = 3.5;
	s.bias_sd = 0.3;
	s.holdout = 0.1;
	s.popularity_exponent = 0.8;
	s.min_per_user = s.n_items >= 10 ? 5 : 1;
	s.threads = gpumf_threads;

	gpumf_check_int_range("users", s.n_users, 1, GM_SYNTH_MAX_USERS);
	gpumf_check_int_range("items", s.n_items, 2, GM_SYNTH_MAX_ITEMS);
	if (s.n_ratings < (int64) s.n_users * s.min_per_user || s.n_ratings > (int64) s.n_users * (s.n_items / 2) ||
		s.n_ratings > INT64CONST(200000000))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rows must be between users * %d and users * items / 2 (and at most 200,000,000), got " INT64_FORMAT,
						s.min_per_user, s.n_ratings)));
	gpumf_check_int_range("rank", s.rank, 1, 1024);
	if (!(s.noise >= 0 && s.noise < 100))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("noise must be between 0 and 100, got %g", s.noise)));
	gpumf_check_memory((double) s.n_ratings * 13 * 2, "generating the ratings");

	InitMaterializedSRF(fcinfo, 0);
	users = palloc_extended(sizeof(int32) * s.n_ratings, MCXT_ALLOC_HUGE);
	items = palloc_extended(sizeof(int32) * s.n_ratings, MCXT_ALLOC_HUGE);
	ratings = palloc_extended(sizeof(float) * s.n_ratings, MCXT_ALLOC_HUGE);
	holdout = palloc_extended(s.n_ratings, MCXT_ALLOC_HUGE);
	rc = gm_synth_ratings(&s, users, items, ratings, holdout, err, sizeof(err));
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", err)));
	for (int64 r = 0; r < s.n_ratings; r++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = Int32GetDatum(users[r] + 1);	/* ids start at 1 */
		values[1] = Int32GetDatum(items[r] + 1);
		values[2] = Float4GetDatum(ratings[r]);
		values[3] = BoolGetDatum(holdout[r] != 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		if ((r & 65535) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	return (Datum) 0;
}
