/*
 * evaluate.c: gpumf_evaluate, a model's ranking metrics at k (and rating
 * errors for explicit models) on a test table.
 *
 * The test table is read with the caller's rights (source.c, as training
 * reads).  Its users unknown to the model are skipped and counted, and so
 * are its rows whose item the model does not know.  Every evaluated user's
 * top k comes from one batch scoring pass over all of them (gm_score_topk:
 * the GPU when gpumf.device allows, the CPU otherwise), the items the user
 * had in training left out; the metrics are computed from those lists as the
 * implicit library defines them (src/core/serve/metrics.c).  Explicit models also
 * get RMSE and MAE of mu + b_u + c_i + x.y over the test rows.
 *
 * With record => true the results are written into the model's catalog
 * row (gpumf.models.metrics), as the owner, for the version evaluated.
 */
#include "gpumf_serve.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(gpumf_evaluate);

enum
{
	ARG_MODEL, ARG_TEST, ARG_USER_COL, ARG_ITEM_COL, ARG_K, ARG_VALUE_COL, ARG_RECORD
};

#define EVAL_MAX_K 10000

/* the model index of the key of row idx of map src (built from a column of type coltype) */
static int32
key_to_model(gm_keymap *src, int32 idx, GpumfKeyKind kind, gm_keymap *model)
{
	if (kind == GPUMF_KEY_INT)
		return gm_keymap_find_int(model, gm_keymap_int_at(src, idx));
	else
	{
		uint32		len;
		const void *p = gm_keymap_bytes_at(src, idx, &len);

		return gm_keymap_find_bytes(model, p, len);
	}
}

/* a double as JSON: null for NaN */
static void
json_num(StringInfo s, const char *key, double v)
{
	if (isnan(v) || isinf(v))
		appendStringInfo(s, ", \"%s\": null", key);
	else
		appendStringInfo(s, ", \"%s\": %.17g", key, v);
}

Datum
gpumf_evaluate(PG_FUNCTION_ARGS)
{
	char	   *model;
	Oid			test;
	int32		k;
	bool		record;
	GpumfModel	cat;
	GpumfServed *m;
	GpumfUsers *u;
	gm_keymap  *imap;
	GpumfSource *src;
	const char *ucol,
			   *icol,
			   *vcol = NULL;
	int32		ntu;
	int32	   *urow;			/* test user -> model row, -1 unknown */
	int32	   *ucount;			/* test user -> evaluated index, -1 none */
	int32	   *eval_rows;
	int32		neval = 0;
	int64		skipped_users = 0,
				skipped_rows;
	int32	   *trows,
			   *tcols;
	float	   *tvals;
	int64		nt = 0;
	gm_csr		T;
	gm_rank_metrics rm;
	double		rmse = NAN,
				mae = NAN;
	gm_backend_kind backend;
	char		devname[128] = "";
	char		err[GM_ERRLEN];
	double		t0 = gm_now();
	TupleDesc	tupdesc;
	Datum		values[12];
	bool		nulls[12] = {false};

	gpumf_check_catalog_version();
	gpumf_check_not_null(fcinfo, ARG_MODEL, "model");
	gpumf_check_not_null(fcinfo, ARG_TEST, "test");
	gpumf_check_not_null(fcinfo, ARG_K, "k");
	gpumf_check_not_null(fcinfo, ARG_RECORD, "record");
	model = text_to_cstring(PG_GETARG_TEXT_PP(ARG_MODEL));
	test = PG_GETARG_OID(ARG_TEST);
	k = PG_GETARG_INT32(ARG_K);
	record = PG_GETARG_BOOL(ARG_RECORD);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	gpumf_check_model_name(model);
	gpumf_check_int_range("k", k, 1, EVAL_MAX_K);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	m = gpumf_served_get(model);
	if (!gpumf_model_lookup(model, &cat))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", model)));
	/* only the owner may record: refuse before the work */
	if (record)
		gpumf_model_check_owner(&cat, "record metrics of");
	ucol = PG_ARGISNULL(ARG_USER_COL) ? cat.user_col : NameStr(*PG_GETARG_NAME(ARG_USER_COL));
	icol = PG_ARGISNULL(ARG_ITEM_COL) ? cat.item_col : NameStr(*PG_GETARG_NAME(ARG_ITEM_COL));
	if (cat.explicit_values)
	{
		vcol = PG_ARGISNULL(ARG_VALUE_COL) ? cat.value_col : NameStr(*PG_GETARG_NAME(ARG_VALUE_COL));
		if (vcol == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("model \"%s\" learned ratings: name the test table's rating column in value_col",
							model)));
	}
	else if (!PG_ARGISNULL(ARG_VALUE_COL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("value_col does not apply to model \"%s\" (algorithm \"%s\")", model, cat.algorithm),
				 errhint("Implicit-feedback models are evaluated by ranking only: every test row is a relevant item.")));

	/* the test table, locked and checked, then read with the caller's rights */
	src = gpumf_source_open(test, ucol, icol, vcol, GPUMF_VALUES_RATINGS);
	gpumf_check_key_column(src->ucoltype, m->user_type, ucol, "user", model);
	gpumf_check_key_column(src->icoltype, m->item_type, icol, "item", model);
	u = gpumf_users_read(m);
	imap = gpumf_items_keymap(m);
	gpumf_source_read(src);

	/* test users -> model rows; rows of unknown users or items are skipped */
	ntu = gm_keymap_size(src->users);
	urow = palloc_extended(sizeof(int32) * (Size) Max(ntu, 1), MCXT_ALLOC_HUGE);
	ucount = palloc_extended(sizeof(int32) * (Size) Max(ntu, 1), MCXT_ALLOC_HUGE);
	for (int32 j = 0; j < ntu; j++)
	{
		urow[j] = key_to_model(src->users, j, gpumf_key_kind(src->utype), u->keys);
		ucount[j] = -1;
		if (urow[j] < 0)
			skipped_users++;
		if ((j & 0xFFFF) == 0xFFFF)
			CHECK_FOR_INTERRUPTS();
	}
	gpumf_check_memory((double) src->n * 12 * 2, "evaluating");
	trows = palloc_extended(sizeof(int32) * Max(src->n, 1), MCXT_ALLOC_HUGE);
	tcols = palloc_extended(sizeof(int32) * Max(src->n, 1), MCXT_ALLOC_HUGE);
	tvals = palloc_extended(sizeof(float) * Max(src->n, 1), MCXT_ALLOC_HUGE);
	eval_rows = palloc_extended(sizeof(int32) * (Size) Max(ntu, 1), MCXT_ALLOC_HUGE);
	{
		int32	   *imap_cache = palloc_extended(sizeof(int32) * (Size) Max(gm_keymap_size(src->items), 1),
												 MCXT_ALLOC_HUGE);

		for (int32 j = 0; j < gm_keymap_size(src->items); j++)
		{
			imap_cache[j] = key_to_model(src->items, j, gpumf_key_kind(src->itype), imap);
			if ((j & 0xFFFF) == 0xFFFF)
				CHECK_FOR_INTERRUPTS();
		}
		for (int64 e = 0; e < src->n; e++)
		{
			int32		tu = src->rows[e],
						item = imap_cache[src->cols[e]];

			if ((e & 0xFFFFF) == 0xFFFFF)
				CHECK_FOR_INTERRUPTS();

			if (urow[tu] < 0 || item < 0)
				continue;
			if (ucount[tu] < 0)
			{
				ucount[tu] = neval;
				eval_rows[neval++] = urow[tu];
			}
			trows[nt] = ucount[tu];
			tcols[nt] = item;
			tvals[nt] = src->vals[e];
			nt++;
		}
	}
	skipped_rows = src->rows_read - nt;

	/* ranking: the top k of every evaluated user, one pass */
	memset(&rm, 0, sizeof(rm));
	rm.precision = rm.recall = rm.map = rm.ndcg = rm.auc = NAN;
	backend = gpumf_scoring_backend(devname, sizeof(devname));
	if (neval > 0)
	{
		gm_score_problem p;
		gm_score_result r;
		float	   *Xs = palloc_extended(sizeof(float) * (size_t) neval * m->k, MCXT_ALLOC_HUGE);
		int64	   *sp = palloc_extended(sizeof(int64) * ((size_t) neval + 1), MCXT_ALLOC_HUGE);
		int32	   *si;
		int64		total = 0;
		float	   *ones;

		for (int32 j = 0; j < neval; j++)
			total += u->seen_ptr[eval_rows[j] + 1] - u->seen_ptr[eval_rows[j]];
		si = palloc_extended(sizeof(int32) * Max(total, 1), MCXT_ALLOC_HUGE);
		sp[0] = 0;
		for (int32 j = 0; j < neval; j++)
		{
			int64		a = u->seen_ptr[eval_rows[j]],
						b = u->seen_ptr[eval_rows[j] + 1];

			memcpy(Xs + (size_t) j * m->k, u->X + (size_t) eval_rows[j] * m->k, sizeof(float) * m->k);
			memcpy(si + sp[j], u->seen_idx + a, sizeof(int32) * (b - a));
			sp[j + 1] = sp[j] + (b - a);
			if ((j & 0xFFFF) == 0xFFFF)
				CHECK_FOR_INTERRUPTS();
		}
		memset(&p, 0, sizeof(p));
		p.n_users = neval;
		p.n_items = m->n_items;
		p.k = m->k;
		p.X = Xs;
		p.Y = m->Y;
		p.item_bias = m->item_bias;
		p.seen_ptr = sp;
		p.seen_idx = si;
		p.n = k;
		{
			/* the top k of every user, the gathered factors, the CPU scorer's block */
			int			threads = gpumf_threads > 0 ? gpumf_threads : gm_default_threads();
			double		block = gm_score_cpu_memory(m->n_items, threads);

			gpumf_check_memory_threads((double) neval * k * 8 + (double) neval * m->k * 4 + block,
									   block / threads, threads, "evaluating");
		}
		memset(&r, 0, sizeof(r));
		r.idx = palloc_extended(sizeof(int32) * (size_t) neval * k, MCXT_ALLOC_HUGE);
		r.score = palloc_extended(sizeof(float) * (size_t) neval * k, MCXT_ALLOC_HUGE);
		r.count = palloc_extended(sizeof(int32) * (size_t) neval, MCXT_ALLOC_HUGE);
		gpumf_score(&p, &backend, &r);

		/* the relevant items: a CSR over the evaluated users (repeats merge) */
		ones = palloc_extended(sizeof(float) * Max(nt, 1), MCXT_ALLOC_HUGE);
		for (int64 e = 0; e < nt; e++)
			ones[e] = 1.0f;
		if (gm_csr_from_coo(neval, m->n_items, nt, trows, tcols, ones, &T, err, sizeof(err)) != GM_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
		if (gm_rank_metrics_at_k(neval, m->n_items, k, r.idx, k, r.count, &T, &rm, err,
								 sizeof(err)) != GM_OK)
		{
			gm_csr_free(&T);
			elog(ERROR, "gpumf: computing metrics failed: %s", err);
		}
		gm_csr_free(&T);

		if (cat.explicit_values)
		{
			/* rows index the evaluated users: their factors and biases, gathered */
			float	   *bs = NULL;

			if (u->bias)
			{
				bs = palloc(sizeof(float) * neval);
				for (int32 j = 0; j < neval; j++)
					bs[j] = u->bias[eval_rows[j]];
			}
			if (gm_rating_errors(nt, trows, tcols, tvals, Xs, m->Y, m->k, m->has_bias ? bs : NULL,
								 m->has_bias ? m->item_bias : NULL,
								 m->has_bias ? m->global_mean : 0.0, &rmse, &mae, err,
								 sizeof(err)) != GM_OK)
				elog(ERROR, "gpumf: computing rating errors failed: %s", err);
		}
	}
	if (neval == 0)
		ereport(NOTICE,
				(errmsg("no test row has a user and an item that model \"%s\" knows", model),
				 errdetail(INT64_FORMAT " rows read, " INT64_FORMAT " users unknown to the model.",
						   src->rows_read, skipped_users)));

	values[0] = Int64GetDatum(rm.users);
	values[1] = Int64GetDatum(skipped_users);
	values[2] = Int64GetDatum(skipped_rows);
	values[3] = Float8GetDatum(rm.precision);
	values[4] = Float8GetDatum(rm.recall);
	values[5] = Float8GetDatum(rm.map);
	values[6] = Float8GetDatum(rm.ndcg);
	values[7] = Float8GetDatum(rm.auc);
	values[8] = Float8GetDatum(rmse);
	nulls[8] = isnan(rmse);
	values[9] = Float8GetDatum(mae);
	nulls[9] = isnan(mae);
	values[11] = Float8GetDatum(gm_now() - t0);
	for (int i = 3; i <= 7; i++)
		nulls[i] = isnan(DatumGetFloat8(values[i]));

	if (record)
	{
		StringInfoData s;

		initStringInfo(&s);
		/* the name as a JSON string: a quoted identifier has quotes, maybe backslashes */
		appendStringInfo(&s, "{\"k\": %d, \"test\": ", k);
		escape_json(&s, src->relname);
		appendStringInfo(&s, ", \"users\": " INT64_FORMAT ", \"skipped_users\": " INT64_FORMAT
						 ", \"skipped_rows\": " INT64_FORMAT, rm.users, skipped_users, skipped_rows);
		json_num(&s, "precision", rm.precision);
		json_num(&s, "recall", rm.recall);
		json_num(&s, "map", rm.map);
		json_num(&s, "ndcg", rm.ndcg);
		json_num(&s, "auc", rm.auc);
		if (cat.explicit_values)
		{
			json_num(&s, "rmse", rmse);
			json_num(&s, "mae", mae);
		}
		appendStringInfoChar(&s, '}');
		gpumf_model_record_metrics(model, m->id, m->version,
								   DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s.data))));
	}
	SPI_finish();
	/* after SPI_finish, which frees what was allocated since SPI_connect */
	values[10] = CStringGetTextDatum(backend == GM_BACKEND_CUDA ? "cuda" : "cpu");
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
