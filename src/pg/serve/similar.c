/*
 * similar.c: gpumf_similar_items and gpumf_similar_users.
 *
 * Cosine similarity of the factors, (a . b) / (|a| |b|), against every
 * other item (user), the item (user) itself left out; rows of norm 0 never
 * rank.  Item norms are computed once per served version; the users'
 * factors are loaded into backend memory on the first gpumf_similar_users
 * call for a version (n_users x factors floats).  A user the model lacks is
 * folded in from the model's source, as gpumf_recommend does.
 *
 * As in recommend.c, one C entry point serves both SQL declarations: the
 * one that returns bigint keys and the one with a type carrier.
 */
#include "gpumf_serve.h"

#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(gpumf_similar_items);
PG_FUNCTION_INFO_V1(gpumf_similar_users);

/* (model, key, n) or (model, key, type carrier, n) */
typedef struct SimilarArgs
{
	int			model,
				key,
				carrier,
				n;
} SimilarArgs;

static const SimilarArgs similar_bigint = {0, 1, -1, 2};
static const SimilarArgs similar_typed = {0, 1, 3, 2};

/* Rows (key of type outtype, score) for the top positions idx/sc. */
static void
emit(FunctionCallInfo fcinfo, const Datum *keys, Oid keytype, Oid outtype,
	 const char *what, const int32 *idx, const float *sc, int got)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	for (int j = 0; j < got; j++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		values[0] = gpumf_key_output(keys[idx[j]], keytype, outtype, what);
		values[1] = Float4GetDatum(sc[j]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * The common start: the arguments, NULLs giving no rows; false when there
 * is nothing to do.
 */
static bool
similar_begin(FunctionCallInfo fcinfo, const SimilarArgs **a, const char *carrier,
			  char **model, int32 *n, Oid *outtype)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	*a = PG_NARGS() == 4 ? &similar_typed : &similar_bigint;
	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL((*a)->model) || PG_ARGISNULL((*a)->key) || PG_ARGISNULL((*a)->n))
		return false;
	if ((*a)->carrier >= 0 && !PG_ARGISNULL((*a)->carrier))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s only names the key type and must be NULL", carrier),
				 errhint("Pass %s => NULL::uuid (or NULL::text, NULL::integer, ...): its type is the type of the keys returned.",
						 carrier)));
	*n = PG_GETARG_INT32((*a)->n);
	gpumf_check_n(*n);
	*model = text_to_cstring(PG_GETARG_TEXT_PP((*a)->model));
	*outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;
	return true;
}

/* gpumf_similar_items: the n items closest to an item by cosine. */
Datum
gpumf_similar_items(PG_FUNCTION_ARGS)
{
	const SimilarArgs *a;
	char	   *model;
	int32		n,
				i;
	Oid			outtype;
	GpumfServed *m;
	Datum		key;
	int32	   *idx;
	float	   *sc;
	int			got;

	gpumf_check_catalog_version();
	if (!similar_begin(fcinfo, &a, "item_type", &model, &n, &outtype))
		return (Datum) 0;
	m = gpumf_served_get(model);
	gpumf_check_key_output(m->item_type, outtype, "item", model, a->carrier >= 0);
	if (!gpumf_key_from_arg(PG_GETARG_DATUM(a->key),
							get_fn_expr_argtype(fcinfo->flinfo, a->key), m->item_type, &key))
		return (Datum) 0;
	i = gpumf_item_index(m, key, m->item_type);
	if (i < 0)
		return (Datum) 0;		/* an item the model does not have: no rows */
	n = Min(n, m->n_items);
	idx = palloc(sizeof(int32) * Max(n, 1));
	sc = palloc(sizeof(float) * Max(n, 1));
	got = gm_topk_cosine(m->Y, gpumf_item_norms(m), m->n_items, m->k,
						 m->Y + (size_t) i * m->k, n, &i, 1, m->scratch, idx, sc);
	emit(fcinfo, m->item_keys, m->item_type, outtype, "item", idx, sc, got);
	return (Datum) 0;
}

/* gpumf_similar_users: the n users closest to a user by cosine. */
Datum
gpumf_similar_users(PG_FUNCTION_ARGS)
{
	const SimilarArgs *a;
	char	   *model;
	int32		n,
				u;
	Oid			outtype;
	GpumfServed *m;
	GpumfServing *sv;
	Datum		key;
	const float *x;
	int32	   *idx;
	float	   *sc;
	int			got;

	gpumf_check_catalog_version();
	if (!similar_begin(fcinfo, &a, "user_type", &model, &n, &outtype))
		return (Datum) 0;
	m = gpumf_served_get(model);
	gpumf_check_key_output(m->user_type, outtype, "user", model, a->carrier >= 0);
	if (!gpumf_key_from_arg(PG_GETARG_DATUM(a->key),
							get_fn_expr_argtype(fcinfo->flinfo, a->key), m->user_type, &key))
		return (Datum) 0;
	gpumf_load_users(m);
	sv = m->serving;
	u = gpumf_user_index(m, key);
	if (u >= 0)
		x = sv->X + (size_t) u * m->k;
	else
	{
		/*
		 * a user the model lacks: folded in from the source, when it has rows
		 * there and the caller may read them (as gpumf_recommend does: no
		 * rows otherwise)
		 */
		GpumfUserFactors uf;

		if (!gpumf_user_factors(m, model, key, false, &uf))
			return (Datum) 0;
		x = uf.x;
	}
	n = Min(n, sv->n_users);
	idx = palloc(sizeof(int32) * Max(n, 1));
	sc = palloc(sizeof(float) * Max(n, 1));
	got = gm_topk_cosine(sv->X, sv->user_norms, sv->n_users, m->k, x, n,
						 u >= 0 ? &u : NULL, u >= 0 ? 1 : 0, sv->user_scratch, idx, sc);
	emit(fcinfo, sv->user_keys, m->user_type, outtype, "user", idx, sc, got);
	return (Datum) 0;
}
