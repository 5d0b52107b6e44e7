/*
 * recommend.c: gpumf_recommend and gpumf_recommend_items.
 *
 * The model comes from the backend's cache (model_cache.c).  A user's
 * factors are the stored row, or (recompute => true, or a user the model
 * lacks) one least-squares solve from the user's current rows in the
 * model's source; a basket's are the same solve from its items
 * (serving.c).  Every item (or every candidate) is scored: an int8 first
 * pass with error bounds, then float32 rescoring of the few items that can
 * reach the top n (gm_topk_dot_among), so the result is the exact float32
 * top n.  Explicit models with biases score with the predicted rating
 * mu + b_u + c_i + x_u . y_i.
 *
 * One C entry point per SQL function serves all its declarations, told
 * apart by their argument count (gpumf--0.1--0.2.sql): the 0.1 form
 * (model, user, n, exclude_seen) still used by gpumf_recommend_text and
 * gpumf_recommend_uuid, the form that returns bigint keys, and the form
 * with the type carrier item_type (after exclude_seen), whose type the
 * result's keys take.  A "user" declared text (for untyped parameters)
 * arrives the same way as one declared "any".
 */
#include "gpumf_serve.h"

#include <float.h>
#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(gpumf_recommend);
PG_FUNCTION_INFO_V1(gpumf_recommend_items);

/* What to rank and what to leave out. */
typedef struct Ranking
{
	int32		n;
	bool		exclude_seen;
	int32	   *only;			/* candidates (sorted, distinct), or NULL: every item */
	int32		nonly;
	int32	   *exclude;		/* sorted, distinct */
	int32		nexclude;
} Ranking;

/* item_type => NULL::t only names a type */
static void
check_carrier(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (!PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s only names the key type and must be NULL", name),
				 errhint("Pass %s => NULL::uuid (or NULL::text, NULL::integer, ...): its type is the type of the keys returned.",
						 name)));
}

/* An optional array of item keys as a sorted set of item indices; NULL when absent. */
static int32 *
item_set(FunctionCallInfo fcinfo, int argno, const char *name, GpumfServed *m,
		 const char *model, int32 *count)
{
	int32	   *idx;
	int32		n;

	*count = 0;
	if (argno < 0 || PG_ARGISNULL(argno))
		return NULL;
	n = gpumf_item_indices(m, PG_GETARG_DATUM(argno),
						   get_fn_expr_argtype(fcinfo->flinfo, argno), name, model, &idx);
	*count = gpumf_index_set(idx, n);
	return idx;
}

/* The union of two sorted sets. */
static int32 *
set_union(const int32 *a, int32 na, const int32 *b, int32 nb, int32 *n)
{
	int32	   *u = palloc(sizeof(int32) * Max(na + nb, 1));
	int32		i = 0,
				j = 0,
				k = 0;

	while (i < na || j < nb)
	{
		int32		v = j >= nb || (i < na && a[i] <= b[j]) ? a[i] : b[j];

		if (i < na && a[i] == v)
			i++;
		if (j < nb && b[j] == v)
			j++;
		u[k++] = v;
	}
	*n = k;
	return u;
}

/*
 * The top n for factors u under r, as rows (item key of type outtype,
 * score) of the function's result.
 */
static void
emit_top(FunctionCallInfo fcinfo, GpumfServed *m, const GpumfUserFactors *u,
		 const Ranking *r, Oid outtype)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int32		nskip;
	int32	   *skip;
	int32		n = Min(r->n, m->n_items);
	int32	   *idx;
	float	   *sc;
	int			got;

	if (r->only && r->nonly == 0)
		return;					/* no candidate is in the model */
	if (r->exclude_seen)
		skip = set_union(u->seen, u->nseen, r->exclude, r->nexclude, &nskip);
	else
	{
		skip = r->exclude;
		nskip = r->nexclude;
	}
	idx = palloc(sizeof(int32) * Max(n, 1));
	sc = palloc(sizeof(float) * Max(n, 1));
	if (m->item_bias)
	{
		/* explicit models: rank by x.y + c_i (mu + b_u is the same for every item) */
		int32		cnt = r->only ? r->nonly : m->n_items;
		float	   *s = palloc(sizeof(float) * Max(cnt, 1));
		int32		sk = 0;

		for (int32 c = 0; c < cnt; c++)
		{
			int32		i = r->only ? r->only[c] : c;
			const float *y = m->Y + (size_t) i * m->k;
			float		d = 0.0f;

			while (sk < nskip && skip[sk] < i)
				sk++;
			if (sk < nskip && skip[sk] == i)
			{
				s[c] = NAN;		/* never ranks */
				continue;
			}
			for (int f = 0; f < m->k; f++)
				d += u->x[f] * y[f];
			s[c] = d + m->item_bias[i];
		}
		got = gm_topk(s, cnt, n, NULL, 0, idx, sc);
		if (r->only)
			for (int j = 0; j < got; j++)
				idx[j] = r->only[idx[j]];
	}
	else
	{
		/*
		 * a large catalog's first pass over every core (gpumf.threads), but
		 * one a process in a parallel plan, whose workers already share them
		 */
		got = gm_topk_dot_among_threads(m->Y, &m->Q, u->x, n, r->only, r->nonly, skip, nskip,
										m->scratch, idx, sc, NULL,
										IsInParallelMode() ? 1 : gpumf_threads);
	}
	for (int j = 0; j < got; j++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		float		score = sc[j];

		if (m->has_bias)
			score += (float) m->global_mean + u->bias;
		values[0] = gpumf_key_output(m->item_keys[idx[j]], m->item_type, outtype, "item");
		values[1] = Float4GetDatum(score);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/* gpumf_recommend's arguments, by position, in each SQL declaration */
typedef struct RecommendArgs
{
	int			model,
				user,
				item_type,
				n,
				exclude_seen,
				candidates,
				exclude,
				recompute;
} RecommendArgs;

static const RecommendArgs recommend_v01 = {0, 1, -1, 2, 3, -1, -1, -1};
static const RecommendArgs recommend_bigint = {0, 1, -1, 2, 3, 4, 5, 6};
static const RecommendArgs recommend_typed = {0, 1, 4, 2, 3, 5, 6, 7};

/* gpumf_recommend: the top n items for a user (stored or folded in), filtered. */
Datum
gpumf_recommend(PG_FUNCTION_ARGS)
{
	const RecommendArgs *a = PG_NARGS() == 8 ? &recommend_typed :
		PG_NARGS() == 7 ? &recommend_bigint : &recommend_v01;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *model;
	Oid			outtype;
	bool		recompute = false;
	GpumfServed *m;
	GpumfUserFactors u;
	Ranking		r;
	Datum		key;

	gpumf_check_catalog_version();
	InitMaterializedSRF(fcinfo, 0);
	/* NULL model, user, n or exclude_seen: no rows, as for a STRICT function */
	if (PG_ARGISNULL(a->model) || PG_ARGISNULL(a->user) || PG_ARGISNULL(a->n) ||
		PG_ARGISNULL(a->exclude_seen))
		return (Datum) 0;
	if (a->item_type >= 0)
		check_carrier(fcinfo, a->item_type, "item_type");
	memset(&r, 0, sizeof(r));
	r.n = PG_GETARG_INT32(a->n);
	gpumf_check_n(r.n);
	r.exclude_seen = PG_GETARG_BOOL(a->exclude_seen);
	if (a->recompute >= 0 && !PG_ARGISNULL(a->recompute))
		recompute = PG_GETARG_BOOL(a->recompute);
	model = text_to_cstring(PG_GETARG_TEXT_PP(a->model));
	outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;

	m = gpumf_served_get(model);
	gpumf_check_key_output(m->item_type, outtype, "item", model, a->item_type >= 0);
	r.only = item_set(fcinfo, a->candidates, "candidates", m, model, &r.nonly);
	r.exclude = item_set(fcinfo, a->exclude, "exclude", m, model, &r.nexclude);
	if (!gpumf_key_from_arg(PG_GETARG_DATUM(a->user),
							get_fn_expr_argtype(fcinfo->flinfo, a->user), m->user_type, &key))
		return (Datum) 0;		/* no user can have that key */
	if (!gpumf_user_factors(m, model, key, recompute, &u))
		return (Datum) 0;		/* unknown user: no rows */
	emit_top(fcinfo, m, &u, &r, outtype);
	return (Datum) 0;
}

/* gpumf_recommend_items' arguments, by position */
typedef struct ItemsArgs
{
	int			model,
				items,
				item_type,
				n,
				values,
				exclude_seen,
				candidates,
				exclude;
} ItemsArgs;

static const ItemsArgs items_bigint = {0, 1, -1, 2, 3, 4, 5, 6};
static const ItemsArgs items_typed = {0, 1, 5, 2, 3, 4, 6, 7};

/* The values array: as many finite numbers as there are items (>= 0 for implicit models). */
static float *
basket_values(FunctionCallInfo fcinfo, int argno, int32 nitems, bool implicit,
			  const char *model)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	float	   *v = palloc(sizeof(float) * Max(nitems, 1));

	if (PG_ARGISNULL(argno))
	{
		if (!implicit)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("model \"%s\" learns ratings: values must give one per item", model)));
		for (int32 e = 0; e < nitems; e++)
			v[e] = 1.0f;		/* each item counts 1, as a row without a value does */
		return v;
	}
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	gpumf_check_array_1d(arr, "values");
	deconstruct_array(arr, FLOAT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &n);
	if (n != nitems)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("values has %d elements, but items has %d", n, nitems),
				 errhint("Give one value per item, in the same order.")));
	for (int e = 0; e < n; e++)
	{
		double		d = nulls[e] ? NAN : DatumGetFloat8(elems[e]);

		if (nulls[e] || isnan(d) || isinf(d))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("values[%d] is %s", e + 1, nulls[e] ? "NULL" : psprintf("%g", d)),
					 errhint("Values must be finite numbers, one per item, as training requires.")));
		if (fabs(d) > FLT_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("values[%d] is %g, beyond the range of real (|value| <= %g) that models keep values in",
							e + 1, d, (double) FLT_MAX),
					 errhint("Scale the values down: training refuses such values too.")));
		if (implicit && d < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("values[%d] is %g, but model \"%s\" learns implicit feedback, whose values are >= 0",
							e + 1, d, model),
					 errhint("Values are strengths (confidence = 1 + alpha * value), as training requires.")));
		v[e] = (float) d;
	}
	return v;
}

/* gpumf_recommend_items: the top n items for a basket of items. */
Datum
gpumf_recommend_items(PG_FUNCTION_ARGS)
{
	const ItemsArgs *a = PG_NARGS() == 8 ? &items_typed : &items_bigint;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *model;
	Oid			outtype;
	GpumfServed *m;
	GpumfUserFactors u;
	Ranking		r;
	int32	   *idx;
	float	   *vals,
			   *v;
	int32		nelems,
				n = 0;

	gpumf_check_catalog_version();
	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(a->model) || PG_ARGISNULL(a->items) || PG_ARGISNULL(a->n) ||
		PG_ARGISNULL(a->exclude_seen))
		return (Datum) 0;
	if (a->item_type >= 0)
		check_carrier(fcinfo, a->item_type, "item_type");
	memset(&r, 0, sizeof(r));
	r.n = PG_GETARG_INT32(a->n);
	gpumf_check_n(r.n);
	r.exclude_seen = PG_GETARG_BOOL(a->exclude_seen);
	model = text_to_cstring(PG_GETARG_TEXT_PP(a->model));
	outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;

	m = gpumf_served_get(model);
	gpumf_check_key_output(m->item_type, outtype, "item", model, a->item_type >= 0);
	nelems = gpumf_item_indices(m, PG_GETARG_DATUM(a->items),
								get_fn_expr_argtype(fcinfo->flinfo, a->items), "items",
								model, &idx);
	if (nelems == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("items must not be empty"),
				 errhint("Pass the items someone interacted with, e.g. ARRAY[1, 2, 3].")));
	v = basket_values(fcinfo, a->values, nelems, gpumf_served_implicit(m), model);
	r.only = item_set(fcinfo, a->candidates, "candidates", m, model, &r.nonly);
	r.exclude = item_set(fcinfo, a->exclude, "exclude", m, model, &r.nexclude);

	/* the items the model knows, with their values */
	vals = palloc(sizeof(float) * nelems);
	for (int32 e = 0; e < nelems; e++)
		if (idx[e] >= 0)
		{
			idx[n] = idx[e];
			vals[n] = v[e];
			n++;
		}
	if (n == 0)
		return (Datum) 0;		/* none of them is in the model */
	gpumf_basket_factors(m, model, idx, vals, n, &u);
	emit_top(fcinfo, m, &u, &r, outtype);
	return (Datum) 0;
}
