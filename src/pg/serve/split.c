/*
 * split.c: gpumf_split, a reproducible train/test split of a table into two
 * new tables.
 *
 * Which side a row goes to depends only on its content and the seed, never
 * on random() or the physical order: a seeded 64-bit hash of the row's keys
 * (the user and item columns when given, else the whole row) through
 * hash_record_extended, which hashes each column with its type's own hash
 * function (int4 and int8 keys hash alike).
 *
 *   by 'row'   each row independently: test when its hash falls in the
 *              lowest test_fraction of the 64-bit range.
 *   by 'user'  per user, round(test_fraction * rows) of its rows, at least
 *              one and never all: the rows with the lowest hashes go to test;
 *              users with a single row (and rows with a NULL user) stay in
 *              train.
 *   by 'time'  the same counts, but each user's latest rows by time_col
 *              (NULL times count as oldest; ties by the hash) go to test.
 *
 * Both tables are created by the caller (it owns them) with the source's
 * columns, and filled by one statement run with the caller's rights: the
 * source is read once, under one snapshot, so every row lands on exactly
 * one side.
 */
#include "gpumf_serve.h"

#include <math.h>

#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

PG_FUNCTION_INFO_V1(gpumf_split);

enum
{
	ARG_SOURCE, ARG_FRACTION, ARG_SEED, ARG_BY, ARG_TIME_COL, ARG_USER_COL, ARG_ITEM_COL,
	ARG_TRAIN, ARG_TEST
};

/* names gpumf_split's statement uses beside the source's columns */
static const char *const helper_names[] = {"gpumf_s", "gpumf_h", "gpumf_rn", "gpumf_t", "gpumf_split_test"};

/* ERROR unless relid has a column col (not a system column) */
static Oid
split_column(Oid relid, const char *col, const char *arg)
{
	AttrNumber	att = get_attnum(relid, col);

	if (att == InvalidAttrNumber || att < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist", col, get_rel_name(relid)),
				 errhint("%s names a column of the source.", arg)));
	return get_atttype(relid, att);
}

/*
 * ERROR unless a column of type type can be hashed by hash_record_extended
 * (json, xml, point, ... have no hash function).  what: "column" or the
 * argument that named it.
 */
static void
split_check_hashable(Oid type, const char *col, const char *what, bool whole_row)
{
	TypeCacheEntry *tc = lookup_type_cache(type, TYPECACHE_HASH_EXTENDED_PROC);

	if (OidIsValid(tc->hash_extended_proc))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_FUNCTION),
			 errmsg("%s \"%s\" has type %s, which has no hash function", what, col,
					format_type_be(type)),
			 whole_row ?
			 errdetail("Without user_col and item_col, gpumf_split hashes every column of a row to decide its side.") : 0,
			 whole_row ?
			 errhint("Name the key columns in user_col and item_col, or split a view that casts \"%s\" to a type with a hash function (jsonb or text for json).", col) :
			 errhint("Split a view that casts \"%s\" to a type with a hash function (jsonb or text for json).", col)));
}

/*
 * ERROR unless the user column can be partitioned (it needs equality and an
 * ordering) and every column has a binary output function (by 'user' and
 * 'time' break ties by a hash of the row's binary form).
 */
static void
split_check_user_split(Relation rel, Oid utype, const char *user_col, const char *by)
{
	TypeCacheEntry *tc = lookup_type_cache(utype, TYPECACHE_EQ_OPR | TYPECACHE_LT_OPR);
	TupleDesc	desc = RelationGetDescr(rel);

	if (!OidIsValid(tc->eq_opr) || !OidIsValid(tc->lt_opr))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("user_col \"%s\" has type %s, which has no %s", user_col,
						format_type_be(utype), OidIsValid(tc->eq_opr) ? "ordering" : "equality"),
				 errdetail("by => '%s' groups the rows by user.", by),
				 errhint("Split a view that casts \"%s\" to a type with equality and ordering (jsonb or text for json).", user_col)));
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		Oid			t = getBaseType(att->atttypid);
		Oid			elem = get_element_type(t);
		HeapTuple	tp;
		bool		has_send;

		if (att->attisdropped)
			continue;
		tp = SearchSysCache1(TYPEOID, ObjectIdGetDatum(OidIsValid(elem) ? getBaseType(elem) : t));
		if (!HeapTupleIsValid(tp))
			elog(ERROR, "cache lookup failed for type %u", t);
		has_send = OidIsValid(((Form_pg_type) GETSTRUCT(tp))->typsend);
		ReleaseSysCache(tp);
		if (!has_send)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("column \"%s\" has type %s, which has no binary output function",
							NameStr(att->attname), format_type_be(att->atttypid)),
					 errdetail("by => '%s' orders a user's rows by a hash of each row's binary form.", by),
					 errhint("Split a view that leaves \"%s\" out or casts it to text.", NameStr(att->attname))));
	}
}

static Oid
table_oid(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							NoLock, false);
}

/* "<source>_<suffix>" in the source's schema, quoted, for the default names */
static char *
default_name(Oid relid, const char *suffix, const char *arg)
{
	char	   *rel = psprintf("%s_%s", get_rel_name(relid), suffix);

	if (strlen(rel) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("the default name \"%s\" is too long", rel),
				 errhint("Name the table in %s.", arg)));
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)), rel);
}

Datum
gpumf_split(PG_FUNCTION_ARGS)
{
	Oid			source;
	float4		fraction;
	int64		seed;
	char	   *by;
	const char *time_col = NULL,
			   *user_col = NULL,
			   *item_col = NULL;
	char	   *train,
			   *test;
	char		kind;
	Relation	rel;
	TupleDesc	desc;
	StringInfoData cols,
				keys,
				order,
				q;
	char	   *relname;
	int64		threshold;
	GpumfGuard	g;
	Oid			types[3] = {FLOAT8OID, INT8OID, INT8OID};
	Datum		args[3];
	int64		ntrain,
				ntest;
	bool		isnull;
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	gpumf_check_not_null(fcinfo, ARG_SOURCE, "source");
	gpumf_check_not_null(fcinfo, ARG_FRACTION, "test_fraction");
	gpumf_check_not_null(fcinfo, ARG_SEED, "seed");
	gpumf_check_not_null(fcinfo, ARG_BY, "by");
	source = PG_GETARG_OID(ARG_SOURCE);
	fraction = PG_GETARG_FLOAT4(ARG_FRACTION);
	seed = PG_GETARG_INT64(ARG_SEED);
	by = text_to_cstring(PG_GETARG_TEXT_PP(ARG_BY));
	if (!PG_ARGISNULL(ARG_TIME_COL))
		time_col = NameStr(*PG_GETARG_NAME(ARG_TIME_COL));
	if (!PG_ARGISNULL(ARG_USER_COL))
		user_col = NameStr(*PG_GETARG_NAME(ARG_USER_COL));
	if (!PG_ARGISNULL(ARG_ITEM_COL))
		item_col = NameStr(*PG_GETARG_NAME(ARG_ITEM_COL));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	/* ---- arguments */
	if (isnan(fraction) || !(fraction > 0.0f && fraction < 1.0f))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("test_fraction must be between 0 and 1 (both excluded), got %g", fraction)));
	if (strcmp(by, "row") != 0 && strcmp(by, "user") != 0 && strcmp(by, "time") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("by must be 'row', 'user' or 'time', got '%s'", by),
				 errhint("'row': each row on its own; 'user': a fraction of each user's rows; 'time': each user's latest rows.")));
	if (strcmp(by, "row") != 0 && user_col == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("by => '%s' needs user_col", by),
				 errhint("Name the user column: user_col => 'user_id'.")));
	if (strcmp(by, "time") == 0 && time_col == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("by => 'time' needs time_col"),
				 errhint("Name the column that orders each user's rows: time_col => 'rated_at'.")));
	if (strcmp(by, "time") != 0 && time_col != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time_col applies only to by => 'time'")));

	/* ---- the source, locked before its columns are checked */
	if (get_rel_relkind(source) == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", source)));
	rel = relation_open(source, AccessShareLock);
	kind = rel->rd_rel->relkind;
	if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE && kind != RELKIND_VIEW &&
		kind != RELKIND_MATVIEW && kind != RELKIND_FOREIGN_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table, view or materialized view", get_rel_name(source))));
	/* the rows are read with the caller's rights: say so before any work */
	if (pg_class_aclcheck(source, GetUserId(), ACL_SELECT) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(source, GetUserId(), ACL_SELECT, ACLMASK_ALL) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(kind), get_rel_name(source));
	if (user_col)
	{
		Oid			ut = split_column(source, user_col, "user_col");

		split_check_hashable(ut, user_col, "user_col", false);
		if (strcmp(by, "row") != 0)
			split_check_user_split(rel, ut, user_col, by);
	}
	if (item_col)
		split_check_hashable(split_column(source, item_col, "item_col"), item_col, "item_col",
							 false);
	if (time_col)
	{
		Oid			tt = split_column(source, time_col, "time_col");
		TypeCacheEntry *tc = lookup_type_cache(tt, TYPECACHE_LT_OPR);

		if (!OidIsValid(tc->lt_opr))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("time_col \"%s\" has type %s, which has no ordering", time_col,
							format_type_be(tt)),
					 errhint("Use a timestamp, date or number column.")));
	}
	desc = RelationGetDescr(rel);
	initStringInfo(&cols);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (att->attisdropped)
			continue;
		for (int h = 0; h < lengthof(helper_names); h++)
			if (strcmp(NameStr(att->attname), helper_names[h]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("the source has a column named \"%s\", a name gpumf_split uses itself",
								helper_names[h]),
						 errhint("Split a view that renames it.")));
		/* without key columns the whole row is hashed */
		if (user_col == NULL && item_col == NULL)
			split_check_hashable(att->atttypid, NameStr(att->attname), "column", true);
		appendStringInfo(&cols, "%s%s", cols.len ? ", " : "", quote_identifier(NameStr(att->attname)));
	}
	relation_close(rel, NoLock);
	relname = quote_qualified_identifier(get_namespace_name(get_rel_namespace(source)),
										 get_rel_name(source));

	/* ---- the new tables' names, as the caller would resolve them */
	train = PG_ARGISNULL(ARG_TRAIN) ? default_name(source, "train", "train_table") :
		text_to_cstring(PG_GETARG_TEXT_PP(ARG_TRAIN));
	test = PG_ARGISNULL(ARG_TEST) ? default_name(source, "test", "test_table") :
		text_to_cstring(PG_GETARG_TEXT_PP(ARG_TEST));
	train = gpumf_new_table_name(train, "train table");
	test = gpumf_new_table_name(test, "test table");
	if (strcmp(train, test) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the train and test tables have the same name %s", train)));

	/* ---- the statement */
	initStringInfo(&keys);
	if (user_col || item_col)
	{
		appendStringInfoString(&keys, "ROW(");
		if (user_col)
			appendStringInfo(&keys, "gpumf_s.%s", quote_identifier(user_col));
		if (item_col)
			appendStringInfo(&keys, "%sgpumf_s.%s", user_col ? ", " : "", quote_identifier(item_col));
		appendStringInfoString(&keys, ")");
	}
	else
		appendStringInfoString(&keys, "gpumf_s.*");
	/* the lowest hashes (a fraction of the signed 64-bit range) go to test */
	threshold = (int64) ((uint64) ldexp((double) fraction, 64) + (uint64) PG_INT64_MIN);

	initStringInfo(&q);
	if (strcmp(by, "row") == 0)
		appendStringInfo(&q,
						 "WITH src AS MATERIALIZED (SELECT %s, (pg_catalog.hash_record_extended(%s, $2) "
						 "OPERATOR(pg_catalog.<) $3) AS gpumf_split_test FROM %s gpumf_s), ",
						 cols.data, keys.data, relname);
	else
	{
		const char *u = quote_identifier(user_col);

		initStringInfo(&order);
		if (time_col)
			appendStringInfo(&order, "gpumf_s.%s DESC NULLS LAST, ", quote_identifier(time_col));
		/*
		 * equal hashes (every row of a user when only user_col is given): a
		 * seeded SHA-256 of the row's binary form decides, which no session
		 * setting changes (the text form depends on DateStyle,
		 * extra_float_digits, TimeZone, ...) and which picks a user's test
		 * rows at random rather than by their text's order
		 */
		appendStringInfo(&order, "pg_catalog.hash_record_extended(%s, $2), "
						 "pg_catalog.sha256(pg_catalog.record_send(gpumf_s.*) OPERATOR(pg_catalog.||) "
						 "pg_catalog.int8send($2))", keys.data);
		appendStringInfo(&q,
						 "WITH src AS MATERIALIZED (SELECT %s, (gpumf_s.%s IS NOT NULL AND gpumf_s.gpumf_rn "
						 "OPERATOR(pg_catalog.<=) gpumf_s.gpumf_t) AS gpumf_split_test FROM ("
						 "SELECT gpumf_s.*, pg_catalog.row_number() OVER (PARTITION BY gpumf_s.%s ORDER BY %s) AS gpumf_rn, "
						 "CASE WHEN pg_catalog.count(*) OVER w OPERATOR(pg_catalog.<) 2 THEN 0 "
						 "ELSE LEAST(pg_catalog.count(*) OVER w OPERATOR(pg_catalog.-) 1, GREATEST(1, "
						 "CAST(pg_catalog.round($1 OPERATOR(pg_catalog.*) CAST(pg_catalog.count(*) OVER w AS pg_catalog.float8)) "
						 "AS pg_catalog.int8))) END AS gpumf_t "
						 "FROM %s gpumf_s WINDOW w AS (PARTITION BY gpumf_s.%s)) gpumf_s), ",
						 cols.data, u, u, order.data, relname, u);
	}
	appendStringInfo(&q,
					 "gpumf_test AS (INSERT INTO %s SELECT %s FROM src WHERE gpumf_split_test RETURNING 1), "
					 "gpumf_train AS (INSERT INTO %s SELECT %s FROM src WHERE NOT gpumf_split_test RETURNING 1) "
					 "SELECT (SELECT pg_catalog.count(*) FROM gpumf_train), (SELECT pg_catalog.count(*) FROM gpumf_test)",
					 test, cols.data, train, cols.data);

	/* ---- create and fill, as the caller, under a pinned search_path */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	gpumf_guard_enter(&g, false);
	gpumf_spi_exec(psprintf("CREATE TABLE %s AS SELECT %s FROM %s WITH NO DATA", train, cols.data, relname),
				   SPI_OK_UTILITY);
	gpumf_spi_exec(psprintf("CREATE TABLE %s AS SELECT %s FROM %s WITH NO DATA", test, cols.data, relname),
				   SPI_OK_UTILITY);
	args[0] = Float8GetDatum((double) fraction);
	args[1] = Int64GetDatum(seed);
	args[2] = Int64GetDatum(threshold);
	if (SPI_execute_with_args(q.data, 3, types, args, NULL, false, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "gpumf: splitting failed: %s", q.data);
	ntrain = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	ntest = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	gpumf_guard_exit(&g);

	values[0] = ObjectIdGetDatum(table_oid(train));
	values[1] = ObjectIdGetDatum(table_oid(test));
	values[2] = Int64GetDatum(ntrain);
	values[3] = Int64GetDatum(ntest);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
