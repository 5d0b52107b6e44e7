/*
 * recommend.c: gpumf_recommend and its variants.
 *
 * The model comes from the backend's cache (model_cache.c); each call reads
 * the user's row by primary key and scores every item: an int8 first pass
 * with error bounds, then float32 rescoring of the few items that can reach
 * the top n (gm_topk_dot), so the result is the exact float32 top n.
 * Explicit models (ratings) score with the predicted rating
 * mu + b_u + c_i + x_u . y_i: the same ranking plus the item biases.
 */
#include "gpumf_pg.h"

#include <ctype.h>
#include <limits.h>

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(gpumf_recommend);

/*
 * Parse an integer written as text; false when it is outside [lo, hi] (no
 * such user), ERROR when it is no integer at all.
 */
static bool
parse_int_key(const char *s, int64 lo, int64 hi, int64 *out, Oid keytype)
{
	const char *p = s;
	bool		neg = false;
	uint64		v = 0;
	bool		overflow = false;
	bool		digits = false;

	while (isspace((unsigned char) *p))
		p++;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	while (isdigit((unsigned char) *p))
	{
		digits = true;
		if (v > (UINT64_MAX - 9) / 10)
			overflow = true;
		else
			v = v * 10 + (uint64) (*p - '0');
		p++;
	}
	while (isspace((unsigned char) *p))
		p++;
	if (!digits || *p != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid input syntax for type %s: \"%s\"", format_type_be(keytype), s)));
	if (overflow || v > (uint64) INT64_MAX + (neg ? 1 : 0))
		return false;
	*out = neg ? (int64) (0 - v) : (int64) v;
	return *out >= lo && *out <= hi;
}

/*
 * The user argument converted to the model's user key type; *ok false when
 * no user can have that key (a value outside the key type's range).
 */
static Datum
user_key(Datum d, Oid argtype, Oid keytype, bool *ok)
{
	bool		int_key = keytype == INT2OID || keytype == INT4OID || keytype == INT8OID;
	int64		lo = keytype == INT2OID ? PG_INT16_MIN : keytype == INT4OID ? PG_INT32_MIN : PG_INT64_MIN;
	int64		hi = keytype == INT2OID ? PG_INT16_MAX : keytype == INT4OID ? PG_INT32_MAX : PG_INT64_MAX;
	int64		v;

	*ok = true;
	if (argtype == keytype)
		return d;
	if (int_key && (argtype == INT2OID || argtype == INT4OID || argtype == INT8OID))
		v = argtype == INT2OID ? DatumGetInt16(d) :
			argtype == INT4OID ? DatumGetInt32(d) : DatumGetInt64(d);
	else
	{
		/* through text: '42' for an integer key, a uuid as text, ... */
		Oid			outfunc,
					infunc,
					ioparam;
		bool		varlena;
		char	   *s;

		getTypeOutputInfo(argtype, &outfunc, &varlena);
		s = OidOutputFunctionCall(outfunc, d);
		if (!int_key)
		{
			getTypeInputInfo(keytype, &infunc, &ioparam);
			return OidInputFunctionCall(infunc, s, ioparam, -1);
		}
		if (!parse_int_key(s, lo, hi, &v, keytype))
		{
			*ok = false;
			return (Datum) 0;
		}
	}
	if (v < lo || v > hi)
	{
		*ok = false;			/* out of the key type's range: no such user */
		return (Datum) 0;
	}
	return keytype == INT8OID ? Int64GetDatum(v) :
		keytype == INT4OID ? Int32GetDatum((int32) v) : Int16GetDatum((int16) v);
}

static Datum
item_out(GpumfServed *m, int32 idx, Oid outtype, const char *model)
{
	Datum		d = m->item_keys[idx];

	if (outtype == INT8OID)
	{
		if (m->item_type == INT8OID)
			return d;
		if (m->item_type == INT4OID)
			return Int64GetDatum(DatumGetInt32(d));
		if (m->item_type == INT2OID)
			return Int64GetDatum(DatumGetInt16(d));
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("model \"%s\" has %s item keys", model, format_type_be(m->item_type)),
				 errhint("Use gpumf_recommend_%s().", m->item_type == UUIDOID ? "uuid" : "text")));
	}
	if (outtype == UUIDOID)
	{
		if (m->item_type == UUIDOID)
			return d;
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("model \"%s\" has %s item keys", model, format_type_be(m->item_type)),
				 errhint("Use gpumf_recommend() for integer keys, gpumf_recommend_text() for others.")));
	}
	if (m->item_type == TEXTOID)
		return d;
	{
		Oid			outfunc;
		bool		varlena;

		getTypeOutputInfo(m->item_type, &outfunc, &varlena);
		return CStringGetTextDatum(OidOutputFunctionCall(outfunc, d));
	}
}

Datum
gpumf_recommend(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Datum		user = PG_GETARG_DATUM(1);
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, 1);
	int32		n = PG_GETARG_INT32(2);
	bool		exclude_seen = PG_GETARG_BOOL(3);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GpumfServed *m;
	Oid			outtype;
	Datum		key;
	bool		ok;
	const float *x;
	const int32 *seen;
	int32		nseen;
	float		ubias;
	int32	   *idx;
	float	   *sc;
	int			got;

	gpumf_check_n(n);
	InitMaterializedSRF(fcinfo, 0);
	outtype = TupleDescAttr(rsinfo->setDesc, 0)->atttypid;
	m = gpumf_served_get(model);

	key = user_key(user, argtype, m->user_type, &ok);
	if (!ok || !gpumf_served_user(m, key, &x, &seen, &nseen, &ubias))
		return (Datum) 0;		/* unknown user: no rows */
	if (n > m->n_items)
		n = m->n_items;
	idx = palloc(sizeof(int32) * Max(n, 1));
	sc = palloc(sizeof(float) * Max(n, 1));
	if (m->item_bias)
	{
		/* explicit models: rank by x.y + c_i (mu + b_u is the same for every item) */
		float	   *s = palloc(sizeof(float) * Max(m->n_items, 1));

		for (int32 i = 0; i < m->n_items; i++)
		{
			const float *y = m->Y + (size_t) i * m->k;
			float		d = 0.0f;

			for (int f = 0; f < m->k; f++)
				d += x[f] * y[f];
			s[i] = d + m->item_bias[i];
		}
		got = gm_topk(s, m->n_items, n, exclude_seen ? seen : NULL, exclude_seen ? nseen : 0,
					  idx, sc);
	}
	else
		got = gm_topk_dot(m->Y, &m->Q, x, n, exclude_seen ? seen : NULL,
						  exclude_seen ? nseen : 0, m->scratch, idx, sc, NULL);
	for (int r = 0; r < got; r++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		float		score = sc[r];

		if (m->has_bias)
			score += (float) m->global_mean + ubias;
		values[0] = item_out(m, idx[r], outtype, model);
		values[1] = Float4GetDatum(score);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
