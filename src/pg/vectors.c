/*
 * vectors.c: gpumf_user_vector, gpumf_item_vector and gpumf_item_vectors.
 *
 * A model's factors as real[] arrays whose inner product is the score
 * gpumf_recommend reports for that user and item, so that a vector index
 * (pgvector's HNSW over vector_ip_ops, say) ranks items as gpumf does:
 *
 *   implicit models, explicit models without biases:   x_u       and y_i
 *   explicit models with biases:          [x_u, 1, mu + b_u] and [y_i, c_i, 1]
 *
 * so that u . v = x_u . y_i + c_i + mu + b_u, the predicted rating.  real[]
 * casts to pgvector's vector and halfvec without going through text
 * (array_to_vector copies the floats), yet nothing here needs pgvector.
 *
 * A user comes as gpumf_recommend serves one: the stored row, or (recompute
 * => true, or a user the model lacks) one least-squares solve from the
 * user's current rows in the model's source (serving.c); an unknown user or
 * item gives NULL.  The model is the current version as of the statement's
 * snapshot (model_cache.c), so a table of item vectors belongs to the
 * version it was filled from: refill it when the model is retrained.
 *
 * As in recommend.c, one C entry point serves each function's declarations
 * (the key argument as "any" and as text; the item keys as bigint and with
 * a type carrier).
 */
#include "gpumf_pg.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(gpumf_user_vector);
PG_FUNCTION_INFO_V1(gpumf_item_vector);
PG_FUNCTION_INFO_V1(gpumf_item_vectors);

/* The length of a model's vectors: its factors, and two more with biases. */
static int
vector_length(const GpumfServed *m)
{
	return m->k + (m->has_bias ? 2 : 0);
}

/*
 * A one-dimensional real[] of the k floats x followed, for a model with
 * biases, by the two floats a and b.
 */
static ArrayType *
vector_array(const GpumfServed *m, const float *x, float a, float b)
{
	int			n = vector_length(m);
	Size		nbytes = ARR_OVERHEAD_NONULLS(1) + sizeof(float4) * n;
	ArrayType  *arr = palloc0(nbytes);
	float4	   *dst;

	SET_VARSIZE(arr, nbytes);
	arr->ndim = 1;
	arr->dataoffset = 0;		/* no NULLs */
	arr->elemtype = FLOAT4OID;
	ARR_DIMS(arr)[0] = n;
	ARR_LBOUND(arr)[0] = 1;
	dst = (float4 *) ARR_DATA_PTR(arr);
	memcpy(dst, x, sizeof(float4) * m->k);
	if (m->has_bias)
	{
		dst[m->k] = a;
		dst[m->k + 1] = b;
	}
	return arr;
}

/* An item's vector: y_i, or [y_i, c_i, 1]. */
static ArrayType *
item_array(const GpumfServed *m, int32 i)
{
	return vector_array(m, m->Y + (size_t) i * m->k,
						m->item_bias ? m->item_bias[i] : 0.0f, 1.0f);
}

/*
 * gpumf_user_vector(model, user, recompute): the user's vector, NULL for a
 * user unknown to the model and to its source.
 */
Datum
gpumf_user_vector(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		recompute = PG_GETARG_BOOL(2);
	GpumfServed *m;
	GpumfUserFactors u;
	Datum		key;

	m = gpumf_served_get(model);
	if (!gpumf_key_from_arg(PG_GETARG_DATUM(1), get_fn_expr_argtype(fcinfo->flinfo, 1),
							m->user_type, &key))
		PG_RETURN_NULL();		/* no user can have that key */
	if (!gpumf_user_factors(m, model, key, recompute, &u))
		PG_RETURN_NULL();
	/* mu + b_u added as gpumf_recommend adds it to a score */
	PG_RETURN_ARRAYTYPE_P(vector_array(m, u.x, 1.0f,
									   (float) m->global_mean + u.bias));
}

/* gpumf_item_vector(model, item): the item's vector, NULL for an item the model lacks. */
Datum
gpumf_item_vector(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	GpumfServed *m;
	Datum		key;
	int32		i;

	m = gpumf_served_get(model);
	if (!gpumf_key_from_arg(PG_GETARG_DATUM(1), get_fn_expr_argtype(fcinfo->flinfo, 1),
							m->item_type, &key))
		PG_RETURN_NULL();
	i = gpumf_item_index(m, key, m->item_type);
	if (i < 0)
		PG_RETURN_NULL();
	PG_RETURN_ARRAYTYPE_P(item_array(m, i));
}

/*
 * gpumf_item_vectors(model [, item_type]): every item's key and vector, in
 * the order of the keys.  Materialized: the served model is only sure to
 * stay put during this call.
 */
Datum
gpumf_item_vectors(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *model;
	Oid			outtype;
	GpumfServed *m;
	MemoryContext row_cxt,
				old;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	if (PG_NARGS() == 2 && !PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("item_type only names the key type and must be NULL"),
				 errhint("Pass item_type => NULL::uuid (or NULL::text, NULL::integer, ...): its type is the type of the keys returned.")));
	model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;
	m = gpumf_served_get(model);
	gpumf_check_key_output(m->item_type, outtype, "item", model, PG_NARGS() == 2);

	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "gpumf_item_vectors row",
									ALLOCSET_SMALL_SIZES);
	for (int32 i = 0; i < m->n_items; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		CHECK_FOR_INTERRUPTS();
		old = MemoryContextSwitchTo(row_cxt);
		values[0] = gpumf_key_output(m->item_keys[i], m->item_type, outtype, "item");
		values[1] = PointerGetDatum(item_array(m, i));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
	}
	MemoryContextDelete(row_cxt);
	return (Datum) 0;
}
