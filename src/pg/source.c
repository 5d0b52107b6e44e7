/*
 * source.c: reading a table or view into coordinates (COO) with key maps.
 *
 * The source is read through the executor with the caller's rights, so
 * privileges, column privileges, row-level security and views all apply.
 * The query gpumf builds names only the relation and its columns (quoted
 * identifiers): no type, function or operator, so nothing of the caller's
 * can stand in for one; values are converted in C by the columns' type OIDs.
 * The relation is locked before its columns are checked, so a concurrent
 * ALTER COLUMN ... TYPE cannot slip in between the check and the read.
 *
 * Policy: rows with a NULL user or item are skipped and counted, and so are
 * rows with a NULL value; NaN, infinite and out-of-range values are an ERROR
 * naming the row's keys; implicit strengths must also be >= 0.
 */
#include "gpumf_pg.h"

#include <float.h>
#include <math.h>

#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "tcop/dest.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/uuid.h"

typedef struct SourceReceiver
{
	DestReceiver pub;
	GpumfSource *src;
} SourceReceiver;

GpumfKeyKind
gpumf_key_kind(Oid type)
{
	switch (type)
	{
		case TEXTOID:
			return GPUMF_KEY_TEXT;
		case UUIDOID:
			return GPUMF_KEY_UUID;
		default:
			return GPUMF_KEY_INT;
	}
}

Oid
gpumf_key_store_type(Oid coltype, const char *col, const char *what)
{
	switch (coltype)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case TEXTOID:
		case UUIDOID:
			return coltype;
		case VARCHAROID:
		case BPCHAROID:
			return TEXTOID;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("%s column \"%s\" has unsupported type %s", what, col,
					format_type_be(coltype)),
			 errhint("Key columns must be smallint, integer, bigint, text, varchar, char or uuid.")));
	return InvalidOid;			/* keep compiler quiet */
}

/* ERROR unless type is one of the numeric types gpumf converts to double. */
void
gpumf_check_numeric_type(Oid type, const char *col, const char *what)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case FLOAT4OID:
		case FLOAT8OID:
		case NUMERICOID:
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("%s column \"%s\" has unsupported type %s", what, col,
					format_type_be(type)),
			 errhint("The %s column must be numeric: smallint, integer, bigint, real, double precision or numeric.",
					 what)));
}

/* The column's type (the base type of a domain); ERROR when it does not exist. */
Oid
gpumf_column_type(Oid relid, const char *col, const char *use)
{
	AttrNumber	att = get_attnum(relid, col);

	if (att == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						col, get_rel_name(relid))));
	if (att < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot %s system column \"%s\"", use, col)));
	return getBaseType(get_atttype(relid, att));
}

static void
source_free(void *arg)
{
	GpumfSource *src = arg;

	gm_keymap_free(src->users);
	gm_keymap_free(src->items);
	free(src->rows);
	free(src->cols);
	free(src->vals);
	src->users = src->items = NULL;
	src->rows = src->cols = NULL;
	src->vals = NULL;
}

/*
 * Lock the relation for reading first (the checks that follow must still
 * hold when its rows are read), then check it exists and can be read as a
 * table.  Returns its schema-qualified, quoted name.
 */
char *
gpumf_relation_open(Oid relid)
{
	char		kind;

	if (get_rel_relkind(relid) == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	LockRelationOid(relid, AccessShareLock);
	kind = get_rel_relkind(relid);
	if (kind == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE &&
		kind != RELKIND_VIEW && kind != RELKIND_MATVIEW &&
		kind != RELKIND_FOREIGN_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table, view or materialized view",
						get_rel_name(relid))));
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

GpumfSource *
gpumf_source_open(Oid relid, const char *ucol, const char *icol,
				  const char *vcol, GpumfValuePolicy policy)
{
	/* palloc'd: its reset callback frees the malloc'ed arrays on any exit */
	GpumfSource *src = palloc0(sizeof(GpumfSource));

	src->relname = gpumf_relation_open(relid);
	src->relid = relid;
	src->ucol = pstrdup(ucol);
	src->icol = pstrdup(icol);
	src->vcol = vcol ? pstrdup(vcol) : NULL;
	src->policy = policy;
	src->ucoltype = gpumf_column_type(relid, ucol, "train on");
	src->icoltype = gpumf_column_type(relid, icol, "train on");
	if (vcol)
	{
		src->vcoltype = gpumf_column_type(relid, vcol, "train on");
		gpumf_check_numeric_type(src->vcoltype, vcol, "value");
	}
	src->utype = gpumf_key_store_type(src->ucoltype, ucol, "user");
	src->itype = gpumf_key_store_type(src->icoltype, icol, "item");
	src->ukind = gpumf_key_kind(src->utype);
	src->ikind = gpumf_key_kind(src->itype);
	src->vmin = INFINITY;
	src->vmax = -INFINITY;

	src->cb.func = source_free;
	src->cb.arg = src;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &src->cb);
	src->users = gm_keymap_create(src->ukind != GPUMF_KEY_INT);
	src->items = gm_keymap_create(src->ikind != GPUMF_KEY_INT);
	if (!src->users || !src->items)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	return src;
}

/* A key as text for error messages, through its type's output function. */
static char *
key_text(Oid coltype, Datum d)
{
	Oid			outfunc;
	bool		varlena;
	char	   *s;

	getTypeOutputInfo(coltype, &outfunc, &varlena);
	s = OidOutputFunctionCall(outfunc, d);
	return coltype == INT2OID || coltype == INT4OID || coltype == INT8OID ||
		coltype == UUIDOID ? s : quote_literal_cstr(s);
}

static int32
map_key(gm_keymap *m, Oid coltype, Datum d)
{
	int32		idx;

	switch (coltype)
	{
		case INT2OID:
			idx = gm_keymap_int(m, DatumGetInt16(d));
			break;
		case INT4OID:
			idx = gm_keymap_int(m, DatumGetInt32(d));
			break;
		case INT8OID:
			idx = gm_keymap_int(m, DatumGetInt64(d));
			break;
		case UUIDOID:
			idx = gm_keymap_bytes(m, DatumGetUUIDP(d)->data, UUID_LEN);
			break;
		default:
			{
				/* text, varchar; char(n) without its trailing blanks, as ::text does */
				text	   *t = DatumGetTextPP(d);
				int			len = VARSIZE_ANY_EXHDR(t);

				if (coltype == BPCHAROID)
					len = bpchartruelen(VARDATA_ANY(t), len);
				idx = gm_keymap_bytes(m, VARDATA_ANY(t), (uint32) len);
				if ((Pointer) t != DatumGetPointer(d))
					pfree(t);
				break;
			}
	}
	if (idx < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory mapping keys")));
	return idx;
}

/* A numeric Datum as double, by the column's type OID. */
double
gpumf_datum_double(Oid type, Datum d)
{
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		case INT8OID:
			return (double) DatumGetInt64(d);
		case FLOAT4OID:
			return DatumGetFloat4(d);
		case FLOAT8OID:
			return DatumGetFloat8(d);
		default:
			return DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow, d));
	}
}

static void
bad_value(GpumfSource *src, TupleTableSlot *slot, double v)
{
	const char *what;
	const char *hint;

	if (isnan(v) || isinf(v))
		what = "non-finite";
	else if (fabs(v) > FLT_MAX)
		what = "out-of-range";
	else
		what = "negative";
	if (src->policy == GPUMF_VALUES_IMPLICIT)
		hint = "Values are implicit-feedback strengths: finite, >= 0 and within the range of real (|value| <= 3.4e38; confidence = 1 + alpha * value). Filter such rows with a view or a WHERE clause.";
	else
		hint = "Ratings must be finite and within the range of real (|value| <= 3.4e38). Filter such rows with a view or a WHERE clause.";
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s value %g for user %s, item %s", what, v,
					key_text(src->ucoltype, slot->tts_values[0]),
					key_text(src->icoltype, slot->tts_values[1])),
			 errhint("%s", hint)));
}

static void
grow(GpumfSource *src)
{
	int64		cap = src->cap ? src->cap * 2 : 1 << 20;
	int32	   *r;
	float	   *f;

	/* the COO, then the CSR and its transpose built from it */
	gpumf_check_memory((double) cap * 3 * (sizeof(int32) * 2 + sizeof(float)),
					   "reading the source");
	r = realloc(src->rows, sizeof(int32) * cap);
	if (r)
		src->rows = r;
	r = r ? realloc(src->cols, sizeof(int32) * cap) : NULL;
	if (r)
		src->cols = r;
	f = r ? realloc(src->vals, sizeof(float) * cap) : NULL;
	if (f)
		src->vals = f;
	if (!r || !f)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading " INT64_FORMAT " rows", src->n)));
	src->cap = cap;
}

static bool
source_receive(TupleTableSlot *slot, DestReceiver *self)
{
	GpumfSource *src = ((SourceReceiver *) self)->src;
	double		v = 1.0;

	slot_getallattrs(slot);
	src->rows_read++;
	if (slot->tts_isnull[0] || slot->tts_isnull[1])
	{
		src->null_keys++;
		return true;
	}
	if (src->vcol)
	{
		if (slot->tts_isnull[2])
		{
			src->null_values++;
			return true;
		}
		v = gpumf_datum_double(src->vcoltype, slot->tts_values[2]);
		if (isnan(v) || isinf(v) || fabs(v) > FLT_MAX ||
			(src->policy == GPUMF_VALUES_IMPLICIT && v < 0))
			bad_value(src, slot, v);
	}
	if (src->n == src->cap)
		grow(src);
	src->rows[src->n] = map_key(src->users, src->ucoltype, slot->tts_values[0]);
	src->cols[src->n] = map_key(src->items, src->icoltype, slot->tts_values[1]);
	src->vals[src->n] = (float) v;
	if (v < src->vmin)
		src->vmin = v;
	if (v > src->vmax)
		src->vmax = v;
	src->vsum += v;
	src->n++;
	return true;
}

static void
source_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
source_shutdown(DestReceiver *self)
{
}

static void
source_destroy(DestReceiver *self)
{
}

/*
 * Run sql, a SELECT gpumf built from quoted identifiers, through the
 * executor as the caller (its privileges, row-level security), under the
 * pinned search_path, sending the rows to dest.  SPI must be connected.
 */
void
gpumf_read_query(const char *sql, DestReceiver *dest, bool read_only, const char *what)
{
	SPIExecuteOptions opts;
	GpumfGuard	guard;
	int			rc;

	memset(&opts, 0, sizeof(opts));
	opts.read_only = read_only;
	opts.dest = dest;
	gpumf_guard_enter(&guard, false);
	rc = SPI_execute_extended(sql, &opts);
	gpumf_guard_exit(&guard);
	/* with a DestReceiver of our own, SPI reports SPI_OK_UTILITY */
	if (rc < 0)
		elog(ERROR, "reading %s failed: %s", what, SPI_result_code_string(rc));
}

void
gpumf_source_read(GpumfSource *src)
{
	StringInfoData q;
	SourceReceiver recv;

	initStringInfo(&q);
	appendStringInfo(&q, "SELECT %s, %s", quote_identifier(src->ucol),
					 quote_identifier(src->icol));
	if (src->vcol)
		appendStringInfo(&q, ", %s", quote_identifier(src->vcol));
	appendStringInfo(&q, " FROM %s", src->relname);

	memset(&recv, 0, sizeof(recv));
	recv.pub.receiveSlot = source_receive;
	recv.pub.rStartup = source_startup;
	recv.pub.rShutdown = source_shutdown;
	recv.pub.rDestroy = source_destroy;
	recv.pub.mydest = DestNone;
	recv.src = src;

	/* as the caller (its rights), but under a pinned search_path */
	gpumf_read_query(q.data, (DestReceiver *) &recv, false, "the source");
}

void
gpumf_source_to_csr(GpumfSource *src, gm_csr *R, gm_csr *Rt)
{
	int32		nu = gm_keymap_size(src->users),
				ni = gm_keymap_size(src->items);
	int32	   *umap,
			   *imap;
	char		err[GM_ERRLEN];
	int			rc;

	umap = malloc(sizeof(int32) * (nu > 0 ? nu : 1));
	imap = malloc(sizeof(int32) * (ni > 0 ? ni : 1));
	if (!umap || !imap || gm_keymap_sort(src->users, umap) != GM_OK ||
		gm_keymap_sort(src->items, imap) != GM_OK)
	{
		free(umap);
		free(imap);
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	}
	for (int64 e = 0; e < src->n; e++)
	{
		src->rows[e] = umap[src->rows[e]];
		src->cols[e] = imap[src->cols[e]];
	}
	free(umap);
	free(imap);
	CHECK_FOR_INTERRUPTS();
	rc = gm_csr_from_coo(nu, ni, src->n, src->rows, src->cols, src->vals, R, err, sizeof(err));
	free(src->rows);
	free(src->cols);
	free(src->vals);
	src->rows = src->cols = NULL;
	src->vals = NULL;
	if (rc != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
	CHECK_FOR_INTERRUPTS();
	rc = gm_csr_transpose(R, Rt, err, sizeof(err));
	if (rc != GM_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
}

Datum
gpumf_key_datum(gm_keymap *m, GpumfKeyKind kind, Oid type, int32 idx)
{
	if (kind == GPUMF_KEY_INT)
	{
		int64		v = gm_keymap_int_at(m, idx);

		return type == INT2OID ? Int16GetDatum((int16) v) :
			type == INT4OID ? Int32GetDatum((int32) v) : Int64GetDatum(v);
	}
	else
	{
		uint32		len;
		const void *p = gm_keymap_bytes_at(m, idx, &len);

		if (kind == GPUMF_KEY_TEXT)
			return PointerGetDatum(cstring_to_text_with_len(p, len));
		else
		{
			pg_uuid_t  *u = palloc(sizeof(pg_uuid_t));

			memcpy(u->data, p, UUID_LEN);
			return UUIDPGetDatum(u);
		}
	}
}
