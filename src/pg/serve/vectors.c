/*
 * vectors.c: gpumf_user_vector, gpumf_item_vector and gpumf_item_vectors.
 *
 * A model's factors as real[] arrays whose inner product is the score
 * gpumf_recommend reports for that user and item, so that a vector index
 * (pgvector's HNSW, say) ranks items as gpumf does:
 *
 *   implicit models, explicit models without biases:   x_u       and y_i
 *   explicit models with biases:          [x_u, 1, mu + b_u] and [y_i, c_i, 1]
 *
 * so that u . v = x_u . y_i + c_i + mu + b_u, the predicted rating.  With
 * l2 => true each array gets one more element: 0 for users, and for items
 * sqrt(R^2 - |v_i|^2), R the largest |v_i| of the version (Bachrach et al.
 * 2014), so that every item's array has the norm R and
 *
 *   |u - v|^2 = |u|^2 + R^2 - 2 u . v:
 *
 * the nearest items by Euclidean distance (or by cosine) are the ones with
 * the largest inner product, which is still u . v.  A graph index built for
 * a metric finds them far better than one built on the inner product itself
 * when the items' norms spread over orders of magnitude, as the factors of
 * rarely seen items do.
 *
 * real[] casts to pgvector's vector and halfvec without going through text
 * (array_to_vector copies the floats), yet nothing here needs pgvector.
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
#include "gpumf_serve.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(gpumf_user_vector);
PG_FUNCTION_INFO_V1(gpumf_item_vector);
PG_FUNCTION_INFO_V1(gpumf_item_vectors);

/* At most the two bias elements and the l2 element follow the factors. */
#define VECTOR_TAIL_MAX 3

/*
 * A one-dimensional real[] of the k floats x followed by the ntail floats
 * tail.
 */
static ArrayType *
vector_array(const float *x, int k, const float *tail, int ntail)
{
	int			n = k + ntail;
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
	memcpy(dst, x, sizeof(float4) * k);
	memcpy(dst + k, tail, sizeof(float4) * ntail);
	return arr;
}

/* |[y_i, c_i, 1]|^2 (|y_i|^2 without biases), in double */
static double
item_norm_sq(const GpumfServed *m, int32 i)
{
	const float *y = m->Y + (size_t) i * m->k;
	double		s = 0.0;

	for (int f = 0; f < m->k; f++)
		s += (double) y[f] * y[f];
	if (m->item_bias)
		s += (double) m->item_bias[i] * m->item_bias[i] + 1.0;
	return s;
}

/* R^2: the largest squared norm of the version's item vectors, computed once. */
static double
item_radius_sq(GpumfServed *m)
{
	GpumfServing *sv = m->serving;

	if (sv->vector_radius_sq <= 0.0)
	{
		double		r2 = 0.0;

		for (int32 i = 0; i < m->n_items; i++)
		{
			if ((i & 65535) == 0)
				CHECK_FOR_INTERRUPTS();
			r2 = Max(r2, item_norm_sq(m, i));
		}
		sv->vector_radius_sq = r2;
	}
	return sv->vector_radius_sq;
}

/* An item's vector: y_i or [y_i, c_i, 1], then sqrt(R^2 - |v_i|^2) when l2. */
static ArrayType *
item_array(GpumfServed *m, int32 i, bool l2)
{
	float		tail[VECTOR_TAIL_MAX];
	int			nt = 0;

	if (m->has_bias)
	{
		tail[nt++] = m->item_bias ? m->item_bias[i] : 0.0f;
		tail[nt++] = 1.0f;
	}
	if (l2)
		tail[nt++] = (float) sqrt(Max(0.0, item_radius_sq(m) - item_norm_sq(m, i)));
	return vector_array(m->Y + (size_t) i * m->k, m->k, tail, nt);
}

/*
 * gpumf_user_vector(model, user, recompute, l2): the user's vector, NULL for
 * a user unknown to the model and to its source.
 */
Datum
gpumf_user_vector(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		recompute = PG_GETARG_BOOL(2);
	bool		l2 = PG_GETARG_BOOL(3);
	GpumfServed *m;
	GpumfUserFactors u;
	Datum		key;
	float		tail[VECTOR_TAIL_MAX];
	int			nt = 0;

	m = gpumf_served_get(model);
	if (!gpumf_key_from_arg(PG_GETARG_DATUM(1), get_fn_expr_argtype(fcinfo->flinfo, 1),
							m->user_type, &key))
		PG_RETURN_NULL();		/* no user can have that key */
	if (!gpumf_user_factors(m, model, key, recompute, &u))
		PG_RETURN_NULL();
	if (m->has_bias)
	{
		tail[nt++] = 1.0f;
		/* mu + b_u as gpumf_recommend adds it to a score */
		tail[nt++] = (float) m->global_mean + u.bias;
	}
	if (l2)
		tail[nt++] = 0.0f;
	PG_RETURN_ARRAYTYPE_P(vector_array(u.x, m->k, tail, nt));
}

/* gpumf_item_vector(model, item, l2): the item's vector, NULL for an item the model lacks. */
Datum
gpumf_item_vector(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		l2 = PG_GETARG_BOOL(2);
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
	PG_RETURN_ARRAYTYPE_P(item_array(m, i, l2));
}

/*
 * gpumf_item_vectors(model [, item_type], l2): every item's key and vector,
 * in the order of the keys.  Materialized: the served model is only sure to
 * stay put during this call.
 */
Datum
gpumf_item_vectors(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		carrier = PG_NARGS() == 3;
	int			l2_arg = carrier ? 2 : 1;
	char	   *model;
	bool		l2;
	Oid			outtype;
	GpumfServed *m;
	MemoryContext row_cxt,
				old;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(l2_arg))
		return (Datum) 0;
	if (carrier && !PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("item_type only names the key type and must be NULL"),
				 errhint("Pass item_type => NULL::uuid (or NULL::text, NULL::integer, ...): its type is the type of the keys returned.")));
	model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	l2 = PG_GETARG_BOOL(l2_arg);
	outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;
	m = gpumf_served_get(model);
	gpumf_check_key_output(m->item_type, outtype, "item", model, carrier);

	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "gpumf_item_vectors row",
									ALLOCSET_SMALL_SIZES);
	for (int32 i = 0; i < m->n_items; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		CHECK_FOR_INTERRUPTS();
		old = MemoryContextSwitchTo(row_cxt);
		values[0] = gpumf_key_output(m->item_keys[i], m->item_type, outtype, "item");
		values[1] = PointerGetDatum(item_array(m, i, l2));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
	}
	MemoryContextDelete(row_cxt);
	return (Datum) 0;
}
