/*
 * train_params.c: what gpumf_train records in gpumf.models.params, the
 * hyper-parameters that apply to the algorithm by name (serving.c reads
 * graph_filter's filter and iALS part back from it).
 */
#include "gpumf_train.h"

#include "common/shortest_dec.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

/* a real as its shortest exact decimal (0.01, not 0.00999999978) */
static const char *
real_text(float v)
{
	char	   *buf = palloc(FLOAT_SHORTEST_DECIMAL_LEN);

	float_to_shortest_decimal_buf(v, buf);
	return buf;
}

/* The hyper-parameters that apply to the algorithm, by name. */
Jsonb *
gpumf_train_params_jsonb(const TrainArgs *a)
{
	const gm_mf_params *p = &a->p;
	StringInfoData s;

	initStringInfo(&s);
	if (p->algorithm == GM_ALG_GRAPH_FILTER)
	{
		/* its constants (gm_algo.h) and the filter fold-in applies to new users */
		appendStringInfo(&s, "{\"iterations\": %d, \"alpha\": %s, \"columns\": " INT64_FORMAT
						 ", \"beta\": %s, \"ideal_columns\": %d, \"chebyshev_order\": %d, \"filter\": [",
						 p->iterations, real_text(p->alpha),
						 (int64) gm_gf_columns(p->factors, a->n_items), real_text((float) GM_GF_BETA),
						 GM_GF_IDEAL, GM_GF_ORDER);
		for (int f = 0; f < p->factors; f++)
			appendStringInfo(&s, "%s%s", f ? ", " : "", real_text(a->filter ? a->filter[f] : 0.0f));
		appendStringInfo(&s, "], \"tolerance\": %s, \"seed\": " INT64_FORMAT,
						 real_text((float) p->tolerance), (int64) p->seed);
		if (a->ials_factors > 0)
		{
			/* the iALS part: the last ials_factors factors (serving.c reads these) */
			const gm_mf_params *q = &a->ip;

			appendStringInfo(&s, ", \"ials\": {\"factors\": %d, \"blend\": %s, \"iterations\": %d, "
							 "\"regularization\": %s, \"alpha\": %s, \"alpha0\": %s, \"nu\": %s, "
							 "\"solver\": \"%s\"",
							 q->factors, real_text(a->blend), q->iterations,
							 real_text(q->regularization), real_text(q->alpha), real_text(q->alpha0),
							 real_text(q->nu), gpumf_solver_name(q->solver));
			if (q->solver == GM_SOLVER_CG)
				appendStringInfo(&s, ", \"cg_steps\": %d", q->cg_steps);
			if (q->solver == GM_SOLVER_BLOCK)
				appendStringInfo(&s, ", \"block_size\": %d", gm_block_size(q));
			appendStringInfo(&s, ", \"final_loss\": %.17g}", a->ials_loss);
		}
		appendStringInfoChar(&s, '}');
		return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s.data)));
	}
	appendStringInfo(&s, "{\"iterations\": %d, \"regularization\": %s", p->iterations,
					 real_text(p->regularization));
	if (p->algorithm == GM_ALG_ALS_IMPLICIT)
	{
		appendStringInfo(&s, ", \"alpha\": %s, \"alpha0\": %s, \"nu\": %s, \"solver\": \"%s\"",
						 real_text(p->alpha), real_text(p->alpha0), real_text(p->nu),
						 gpumf_solver_name(p->solver));
		if (p->solver == GM_SOLVER_CG)
			appendStringInfo(&s, ", \"cg_steps\": %d", p->cg_steps);
		if (p->solver == GM_SOLVER_BLOCK)
			appendStringInfo(&s, ", \"block_size\": %d", gm_block_size(p));
		if (a->holdout > 0)
			appendStringInfo(&s, ", \"holdout\": %s, \"metric\": \"%s@%d\"",
							 real_text(a->holdout), gm_rank_metric_name(a->metric), a->K);
	}
	else
	{
		if (p->algorithm == GM_ALG_CCD)
			appendStringInfo(&s, ", \"inner_iterations\": %d", p->inner_iterations);
		appendStringInfo(&s, ", \"biases\": %s", p->biases ? "true" : "false");
	}
	if (p->gpus > 1)
		appendStringInfo(&s, ", \"gpus\": %d", p->gpus);
	appendStringInfo(&s, ", \"tolerance\": %s, \"seed\": " INT64_FORMAT,
					 real_text((float) p->tolerance), (int64) p->seed);
	if (a->auto_json)
		appendStringInfo(&s, ", \"autotune\": %s", a->auto_json);
	appendStringInfoChar(&s, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s.data)));
}
