/*
 * synth.c: gpumf_synthetic, the seeded MovieLens-shaped dataset as rows.
 */
#include "gpumf_pg.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(gpumf_synthetic);

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
		if (gm_synth_init(&st->g, err, sizeof(err)) != GM_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s", err)));
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
