/*
 * fold_in.c: the factors of a user the model lacks (or any user, with
 * recompute) from the user's current rows in the model's source, and of a
 * basket of items: one least-squares solve against the stored item factors
 * (src/core/serve/foldin.c), the solve the trainer's user half-step
 * converges to.  The source is the relation the model was trained on,
 * pinned by OID; it is read as its owner in a security-restricted
 * operation, after checking that the caller may read its columns, so that
 * no code of the source (a view's functions, a policy) ever runs with the
 * caller's rights (source_relation says exactly what is checked).  What
 * serving keeps per version (the Gram matrix, the work space) lives in
 * serving.c's GpumfServing; gpumf.fold_in off reads no source.
 */
#include "serving_int.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <math.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "catalog/pg_namespace.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

/*
 * Y^T Y as fold-in uses it (gm_gram, as the trainer computes it), once per
 * version; a graph_filter model with an iALS part: the Gram of that part's
 * columns (the last k - d of each row), summed over blocks of rows.
 */
static const double *
gram(GpumfServed *m)
{
	GpumfServing *sv = gpumf_serving(m);

	if (sv->gram == NULL)
	{
		int			d0 = sv->foldin.algorithm == GM_ALG_GRAPH_FILTER ? sv->foldin.gf_columns : 0;
		int			k = m->k - d0;
		int32		block = 4096;
		float	   *g = palloc(sizeof(float) * k * k);
		float	   *pack = d0 > 0 ? palloc(sizeof(float) * (Size) block * k) : NULL;
		double	   *d = MemoryContextAllocExtended(sv->cxt, sizeof(double) * k * k,
												   MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);

		if (pack == NULL)
		{
			gm_gram(m->Y, m->n_items, k, 0.0f, g, 1);
			for (int i = 0; i < k * k; i++)
				d[i] = g[i];
		}
		else
			for (int32 r0 = 0; r0 < m->n_items; r0 += block)
			{
				int32		n = Min(block, m->n_items - r0);

				for (int32 r = 0; r < n; r++)
					memcpy(pack + (Size) r * k, m->Y + (Size) (r0 + r) * m->k + d0,
						   sizeof(float) * k);
				gm_gram(pack, n, k, 0.0f, g, 1);
				for (int i = 0; i < k * k; i++)
					d[i] += g[i];
				CHECK_FOR_INTERRUPTS();
			}
		pfree(g);
		if (pack)
			pfree(pack);
		sv->gram = d;
	}
	return sv->gram;
}

/*
 * graph_filter's fold-in: its filter (params) and each item's weight
 * d_i^-2beta, the degrees counted from the users' seen lists once a
 * served version.
 */
static void
graph_filter_foldin(GpumfServed *m, const char *model, gm_foldin_params *p)
{
	GpumfServing *sv = gpumf_serving(m);

	if (sv->gf_filter == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("model \"%s\" lacks the filter of its %d factors in gpumf.models.params", model,
						sv->foldin.gf_columns),
				 errhint("Retrain the model.")));
	if (sv->gf_weight == NULL)
	{
		int64	   *deg = palloc(sizeof(int64) * Max(m->n_items, 1));
		float	   *w = MemoryContextAlloc(sv->cxt, sizeof(float) * Max(m->n_items, 1));

		gpumf_served_item_degrees(m, deg);
		for (int32 i = 0; i < m->n_items; i++)
			w[i] = deg[i] > 0 ? (float) pow((double) deg[i], -2.0 * GM_GF_BETA) : 0.0f;
		pfree(deg);
		sv->gf_weight = w;
	}
	p->filter = sv->gf_filter;
	p->item_weight = sv->gf_weight;
}

/* a graph_filter model with an iALS part? */
static inline bool
gf_has_ials(const gm_foldin_params *p, int k)
{
	return p->algorithm == GM_ALG_GRAPH_FILTER && p->gf_columns > 0 && p->gf_columns < k;
}

/* Solve for the factors of the entries idx/vals (sorted, distinct). */
static void
solve(GpumfServed *m, const char *model, const int32 *idx, const float *vals, int32 n,
	  GpumfUserFactors *u)
{
	GpumfServing *sv = gpumf_serving(m);
	gm_foldin_params *p = &sv->foldin;
	char		err[GM_ERRLEN];
	float	   *x = palloc(sizeof(float) * m->k);

	if (p->algorithm == GM_ALG_COUNT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("model \"%s\" was trained with an algorithm fold-in does not know", model)));
	if (p->algorithm == GM_ALG_GRAPH_FILTER)
		graph_filter_foldin(m, model, p);
	if (sv->work == NULL &&
		(p->algorithm != GM_ALG_GRAPH_FILTER || gf_has_ials(p, m->k)))
		sv->work = MemoryContextAllocHuge(sv->cxt, sizeof(double) * gm_foldin_work(m->k));
	if (gm_foldin(p, m->Y, m->item_bias, m->n_items, m->k,
				  p->algorithm == GM_ALG_ALS_IMPLICIT || gf_has_ials(p, m->k) ? gram(m) : NULL,
				  idx, vals, n, x, &u->bias, sv->work, err, sizeof(err)) != GM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("computing the factors for model \"%s\" failed: %s", model, err)));
	u->x = x;
	u->seen = idx;
	u->nseen = n;
	u->folded = true;
}

/*
 * A stored graph_filter user's factors: the filter's part formed from its
 * seen items (u->seen), as loading forms every user's (gpumf_gf_form_users),
 * and the iALS part, when the model has one, from tail (its k - d stored
 * factors), the two scaled by the blend.
 */
static void
gf_stored_user(GpumfServed *m, const char *model, const float *tail, GpumfUserFactors *u)
{
	GpumfServing *sv = gpumf_serving(m);
	int			d = sv->foldin.gf_columns;
	float	   *x = palloc(sizeof(float) * m->k);
	int64		ptr[2] = {0, u->nseen};

	for (int32 e = 0; e < u->nseen; e++)
		if (u->seen[e] < 0 || u->seen[e] >= m->n_items)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: the seen items of a user of model \"%s\" are damaged", m->name)));
	graph_filter_foldin(m, model, &sv->foldin);
	if (d < m->k)
		memcpy(x + d, tail, sizeof(float) * (m->k - d));
	gm_gf_user_vectors(ptr, u->seen, 1, m->Y, m->k, d, sv->gf_weight, sv->gf_filter,
					   sv->foldin.blend, x, 1);
	u->x = x;
	u->folded = false;
}

static char *key_text(Oid type, Datum d);

/*
 * Sort and sum duplicates (as training does); ERROR naming the item when a
 * sum leaves real's range.  userkey: the user whose source rows these are,
 * NULL for a basket.
 */
static int32
merge_entries(GpumfServed *m, int32 *idx, float *vals, int32 n, const char *model,
			  const Datum *userkey)
{
	int32		got = gm_entries_merge(idx, vals, n);

	if (got < 0)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	for (int32 e = 0; e < got; e++)
		if (isinf(vals[e]))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 userkey ?
					 errmsg("the values of user %s's rows for item %s in the source of model \"%s\" add up beyond the range of real (%g)",
							key_text(m->user_type, *userkey),
							key_text(m->item_type, m->item_keys[idx[e]]), model, (double) FLT_MAX) :
					 errmsg("the values given for item %s add up beyond the range of real (%g)",
							key_text(m->item_type, m->item_keys[idx[e]]), (double) FLT_MAX),
					 errhint("The values of one item are summed, as training sums duplicate rows: scale them down.")));
	return got;
}

/* The factors of a basket of items (merged like source rows). */
void
gpumf_basket_factors(GpumfServed *m, const char *model, int32 *idx, float *vals,
					 int32 n, GpumfUserFactors *u)
{
	n = merge_entries(m, idx, vals, n, model, NULL);
	solve(m, model, idx, vals, n, u);
}

/* the key Datum (of type keytype) as a value of the column type coltype */
static bool
key_as_column(Datum key, Oid keytype, Oid coltype, Datum *out)
{
	if (coltype == keytype ||
		(keytype == TEXTOID && (coltype == VARCHAROID || coltype == BPCHAROID)))
	{
		*out = key;				/* text bytes are a valid varchar / char(n) too */
		return true;
	}
	if (gpumf_is_int_type(keytype) && gpumf_is_int_type(coltype))
	{
		int64		v = gpumf_int_value(key, keytype),
					lo,
					hi;

		gpumf_int_range(coltype, &lo, &hi);
		if (v < lo || v > hi)
			return false;		/* no row can have it */
		*out = gpumf_int_datum(v, coltype);
		return true;
	}
	return false;
}

/* A key as text for messages. */
static char *
key_text(Oid type, Datum d)
{
	Oid			outfunc;
	bool		varlena;

	getTypeOutputInfo(type, &outfunc, &varlena);
	return OidOutputFunctionCall(outfunc, d);
}

/* a view with the security_invoker option (its tables are checked against its user) */
static bool
view_is_security_invoker(Oid relid)
{
#if PG_VERSION_NUM >= 150000
	Relation	rel = relation_open(relid, NoLock);
	bool		invoker = RelationHasSecurityInvoker(rel);

	relation_close(rel, NoLock);
	return invoker;
#else
	return false;
#endif
}

/*
 * The model's source as fold-in reads it: its OID and owner (the read runs
 * as the owner), or why it cannot be read (for an ERROR under recompute:
 * code, message, hint).
 */
typedef struct SourceRel
{
	Oid			relid;
	Oid			owner;
	const char *why;
	int			code;
	const char *hint;
} SourceRel;

/* may role read the columns cols (NULL entries: none) of relid? */
static bool
may_read_columns(Oid relid, Oid role, const char *const *cols, int ncols)
{
	if (pg_class_aclcheck(relid, role, ACL_SELECT) == ACLCHECK_OK)
		return true;
	for (int c = 0; c < ncols; c++)
	{
		AttrNumber	att = cols[c] ? get_attnum(relid, cols[c]) : InvalidAttrNumber;

		if (cols[c] && (att == InvalidAttrNumber ||
						pg_attribute_aclcheck(relid, att, role, ACL_SELECT) != ACLCHECK_OK))
			return false;
	}
	return true;
}

/* r cannot be read: the ERROR's code, message and hint (NULL: none) */
static void
source_refused(SourceRel *r, int code, const char *why, const char *hint)
{
	r->code = code;
	r->why = why;
	r->hint = hint;
}

/*
 * The model's source, locked, when fold-in may read it for the caller.
 *
 * The source is the relation the model was trained on, by OID (a rename
 * follows it; a dropped source is never looked up by name, so nobody can
 * put another relation in its place).  It is read as its owner, in a
 * security-restricted operation (source_user_rows): whatever code the
 * source runs (a view's functions, its row-level-security policies) runs
 * with the rights of the role that wrote or chose it, never the caller's.
 * What the caller's own privileges would hide stays hidden: the caller
 * needs USAGE on the source's schema and SELECT on the user, item and value
 * columns, and row-level security that applies to the caller (and not to
 * the owner) on the source, or a security_invoker view (whose tables would
 * be checked against the caller), refuses fold-in to anyone but the
 * source's owner.  What depends on who reads (a view's WHERE current_user
 * = ...) sees the owner: the README says so.  The owner must be able to
 * read the columns too.
 */
static SourceRel
source_relation(GpumfServing *sv)
{
	SourceRel	r = {InvalidOid, InvalidOid, NULL, 0, NULL};
	Oid			user = GetUserId();
	const char *cols[3] = {sv->user_col, sv->item_col, sv->value_col};
	HeapTuple	tup;
	Form_pg_class form;
	Oid			nsp;
	char		relkind;
	bool		rowsec;

	if (!gpumf_fold_in)
	{
		source_refused(&r, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "gpumf.fold_in is off",
					   "SET gpumf.fold_in = on to fold users in from the model's source (its owner's code, if any, then runs in your session as its owner).");
		return r;
	}
	if (!OidIsValid(sv->source_relid))
	{
		source_refused(&r, ERRCODE_UNDEFINED_TABLE,
					   sv->source ? "the model has no pinned source (it was trained before gpumf 0.3 and its source was gone when gpumf was updated)" :
					   "the model records no source",
					   "Retrain the model to fold users in from a source.");
		return r;
	}
	LockRelationOid(sv->source_relid, AccessShareLock);
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(sv->source_relid));
	if (!HeapTupleIsValid(tup))
	{
		UnlockRelationOid(sv->source_relid, AccessShareLock);
		source_refused(&r, ERRCODE_UNDEFINED_TABLE, "it was dropped",
					   "A model keeps the relation it was trained on (a rename follows it), never one that takes its name later; retrain the model on its new source to fold users in again.");
		return r;
	}
	form = (Form_pg_class) GETSTRUCT(tup);
	r.relid = sv->source_relid;
	r.owner = form->relowner;
	nsp = form->relnamespace;
	relkind = form->relkind;
	rowsec = form->relrowsecurity;
	ReleaseSysCache(tup);

	if (isOtherTempNamespace(nsp))
		source_refused(&r, ERRCODE_UNDEFINED_TABLE, "it is another session's temporary table", NULL);
	else if (gm_namespace_aclcheck(nsp, user, ACL_USAGE) != ACLCHECK_OK ||
			 !may_read_columns(r.relid, user, cols, 3))
		source_refused(&r, ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied",
					   "Fold-in needs USAGE on the source's schema and SELECT on its user, item and value columns.");
	else if (user != r.owner && rowsec &&
			 check_enable_rls(r.relid, user, true) == RLS_ENABLED)
		source_refused(&r, ERRCODE_INSUFFICIENT_PRIVILEGE,
					   "row-level security applies to you on it, and fold-in reads the source as its owner",
					   "gpumf_recommend_items(model, items, ...) ranks for the rows you can read yourself.");
	else if (user != r.owner && relkind == RELKIND_VIEW && view_is_security_invoker(r.relid))
		source_refused(&r, ERRCODE_INSUFFICIENT_PRIVILEGE,
					   "it is a security_invoker view (its tables would be checked against you), and fold-in reads the source as its owner",
					   "gpumf_recommend_items(model, items, ...) ranks for the rows you can read yourself.");
	else if (gm_namespace_aclcheck(nsp, r.owner, ACL_USAGE) != ACLCHECK_OK ||
			 !may_read_columns(r.relid, r.owner, cols, 3))
		source_refused(&r, ERRCODE_INSUFFICIENT_PRIVILEGE,
					   "its owner may not read its user, item and value columns, and fold-in reads the source as its owner",
					   NULL);
	if (r.why)
	{
		UnlockRelationOid(r.relid, AccessShareLock);
		r.relid = InvalidOid;
	}
	return r;
}

/* the type of column col of relid (the base type of a domain); ERROR when it is gone */
static Oid
source_column(Oid relid, const char *col, const char *model)
{
	AttrNumber	att = get_attnum(relid, col);

	if (att <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("the source of model \"%s\" has no column \"%s\" any more", model, col),
				 errhint("Retrain the model on its current source.")));
	return getBaseType(get_atttype(relid, att));
}

/* A column type that cannot hold the model's keys any more. */
static void
changed_column(const char *model, const char *col, Oid coltype, Oid keytype)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("column \"%s\" of the source of model \"%s\" is %s now, but the model has %s keys",
					col, model, format_type_be(coltype), format_type_be(keytype)),
			 errhint("Retrain the model on its current source.")));
}

/*
 * The user's current rows in the model's source (read as the source's
 * owner once the caller may read it: source_relation; as of the
 * statement's snapshot), as item indices and values, sorted, duplicates
 * summed, items the model lacks left out.  Returns the count, or -1 when
 * the source cannot be read (*why says why).
 */
static int32
source_user_rows(GpumfServed *m, const char *model, Datum userkey, int32 **idx_out,
				 float **vals_out, SourceRel *why)
{
	GpumfServing *sv = gpumf_serving(m);
	SourceRel	src = source_relation(sv);
	Oid			ucoltype,
				icoltype,
				vcoltype = InvalidOid;
	Datum		param;
	StringInfoData q;
	GpumfGuard	guard;
	SPIPlanPtr	plan;
	int			rc;
	int32	   *idx;
	float	   *vals;
	int32		n = 0;
	bool		implicit = !gm_algorithm_is_explicit(sv->foldin.algorithm);

	*why = src;
	if (!OidIsValid(src.relid))
		return -1;
	ucoltype = source_column(src.relid, sv->user_col, model);
	icoltype = source_column(src.relid, sv->item_col, model);
	if (sv->value_col)
		vcoltype = source_column(src.relid, sv->value_col, model);
	if (!gpumf_elements_match(icoltype, m->item_type))
		changed_column(model, sv->item_col, icoltype, m->item_type);
	if (OidIsValid(vcoltype) && vcoltype != INT2OID && vcoltype != INT4OID &&
		vcoltype != INT8OID && vcoltype != FLOAT4OID && vcoltype != FLOAT8OID &&
		vcoltype != NUMERICOID)
		changed_column(model, sv->value_col, vcoltype, FLOAT8OID);
	if (!gpumf_elements_match(ucoltype, m->user_type))
		changed_column(model, sv->user_col, ucoltype, m->user_type);
	if (!key_as_column(userkey, m->user_type, ucoltype, &param))
	{
		*idx_out = NULL;
		*vals_out = NULL;
		return 0;				/* the column cannot hold this key: no rows */
	}

	/* quoted identifiers and a typed parameter; the operator from pg_catalog */
	initStringInfo(&q);
	appendStringInfo(&q, "SELECT %s", quote_identifier(sv->item_col));
	if (sv->value_col)
		appendStringInfo(&q, ", %s", quote_identifier(sv->value_col));
	appendStringInfo(&q, " FROM %s WHERE %s OPERATOR(pg_catalog.=) $1",
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(src.relid)),
												get_rel_name(src.relid)),
					 quote_identifier(sv->user_col));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/*
	 * as the source's owner in a security-restricted operation, under a
	 * pinned search_path, read-only, settings changed inside undone
	 * (source_relation says why); planned without parallel workers (no
	 * cursor options): this runs once per user, perhaps inside a parallel
	 * query already
	 */
	gpumf_guard_enter_as(&guard, src.owner);
	plan = SPI_prepare_cursor(q.data, 1, &ucoltype, 0);
	if (plan == NULL)
		elog(ERROR, "gpumf: planning the read of the source of model \"%s\" failed: %s", model,
			 SPI_result_code_string(SPI_result));
	rc = SPI_execute_plan(plan, &param, NULL, true, 0);
	gpumf_guard_exit(&guard);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading the source of model \"%s\" failed: %s", model,
			 SPI_result_code_string(rc));
	idx = SPI_palloc(sizeof(int32) * Max(SPI_processed, 1));
	vals = SPI_palloc(sizeof(float) * Max(SPI_processed, 1));
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		item = SPI_getbinval(tup, desc, 1, &isnull);
		double		v = 1.0;
		int32		i;

		if (isnull)
			continue;			/* skipped, as training skips it */
		if (sv->value_col)
		{
			Datum		d = SPI_getbinval(tup, desc, 2, &isnull);

			if (isnull)
				continue;
			v = gpumf_datum_double(vcoltype, d);
			if (isnan(v) || isinf(v) || fabs(v) > FLT_MAX || (implicit && v < 0))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s value %g for user %s, item %s in the source of model \"%s\"",
								isnan(v) || isinf(v) ? "non-finite" :
								fabs(v) > FLT_MAX ? "out-of-range" : "negative", v,
								key_text(m->user_type, userkey), key_text(icoltype, item), model),
						 errhint("Values must be finite%s, as training requires.",
								 implicit ? " and >= 0" : "")));
		}
		i = gpumf_serving_map_key(gpumf_serving_item_map(m), item, icoltype, false);
		if (i < 0)
			continue;			/* an item the model does not have */
		idx[n] = i;
		vals[n] = (float) v;
		n++;
		if ((r & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	SPI_finish();
	*idx_out = idx;
	*vals_out = vals;
	return merge_entries(m, idx, vals, n, model, &userkey);
}

/* A user's factors: stored, or folded in from the source (see gpumf_serve.h). */
bool
gpumf_user_factors(GpumfServed *m, const char *model, Datum userkey, bool recompute,
				   GpumfUserFactors *u)
{
	int32	   *idx;
	float	   *vals;
	int32		n,
				nx;
	SourceRel	why;

	memset(u, 0, sizeof(*u));
	if (!recompute &&
		gpumf_served_user(m, userkey, &u->x, &nx, &u->seen, &u->nseen, &u->bias))
	{
		GpumfServing *sv = gpumf_serving(m);

		if (sv->foldin.algorithm == GM_ALG_GRAPH_FILTER)
		{
			/* the filter's part: the sum over its seen items; the iALS part stored */
			if (nx != m->k - sv->foldin.gf_columns)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("gpumf: user factors of model \"%s\" are damaged", m->name)));
			gf_stored_user(m, model, u->x, u);
		}
		else if (nx != m->k)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("gpumf: user factors of model \"%s\" are damaged", m->name)));
		return true;
	}
	n = source_user_rows(m, model, userkey, &idx, &vals, &why);
	if (n < 0)
	{
		if (!recompute)
			return false;		/* unknown to the model, and its source is out of reach */
		ereport(ERROR,
				(errcode(why.code),
				 errmsg("cannot fold a user into model \"%s\" from its source %s: %s",
						model, gpumf_serving(m)->source ? gpumf_serving(m)->source : "(none)", why.why),
				 why.hint ? errhint("%s", why.hint) : 0));
	}
	if (n == 0)
		return false;			/* no rows with items the model knows */
	solve(m, model, idx, vals, n, u);
	return true;
}

/* Was the served model trained on implicit feedback? */
bool
gpumf_served_implicit(GpumfServed *m)
{
	return !gm_algorithm_is_explicit(gpumf_serving(m)->foldin.algorithm);
}
