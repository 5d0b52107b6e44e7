/*
 * train.c: gpumf_train and gpumf_drop_model.
 *
 * gpumf_train reads the source through the executor with the caller's
 * rights (privileges, row-level security and views all apply), maps keys to
 * dense indices, builds CSR/CSC, trains on the GPU or the CPU, and stores the
 * factors in new tables that replace the previous version of the model in
 * the same transaction: readers see the old model until commit, and an error
 * or a cancel leaves it untouched.
 */
#include "gpumf_pg.h"

#include <float.h>
#include <math.h>

#include "access/heapam.h"
#include "common/hashfn.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/dest.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/uuid.h"
#include "utils/varlena.h"
#include "utils/regproc.h"

PG_FUNCTION_INFO_V1(gpumf_train);
PG_FUNCTION_INFO_V1(gpumf_drop_model);

#define GPUMF_LOCK_CLASS 0x67706d66	/* advisory lock namespace: "gpmf" */

/* Everything malloc'd while training; freed by a memory-context callback. */
typedef struct TrainState
{
	GpumfKeyKind ukind;
	GpumfKeyKind ikind;
	bool		has_value;
	gm_keymap  *users;
	gm_keymap  *items;
	int32	   *rows;
	int32	   *cols;
	float	   *vals;
	int64		n;
	int64		cap;
	int64		rows_read;
	int64		null_keys;
	int64		null_values;
	gm_csr		C;
	gm_csr		Ct;
	float	   *X;
	float	   *Y;
	MemoryContextCallback cb;
} TrainState;

static void
train_state_free(void *arg)
{
	TrainState *ts = arg;

	gm_keymap_free(ts->users);
	gm_keymap_free(ts->items);
	free(ts->rows);
	free(ts->cols);
	free(ts->vals);
	gm_csr_free(&ts->C);
	gm_csr_free(&ts->Ct);
	free(ts->X);
	free(ts->Y);
	ts->users = ts->items = NULL;
	ts->rows = ts->cols = NULL;
	ts->vals = ts->X = ts->Y = NULL;
}

static void
free_coo(TrainState *ts)
{
	free(ts->rows);
	free(ts->cols);
	free(ts->vals);
	ts->rows = ts->cols = NULL;
	ts->vals = NULL;
}

/* ------------------------------------------------------------ checks */

static GpumfKeyKind
key_kind(Oid type, const char *col, const char *what)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return GPUMF_KEY_INT;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			return GPUMF_KEY_TEXT;
		case UUIDOID:
			return GPUMF_KEY_UUID;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("%s column \"%s\" has unsupported type %s", what, col,
					format_type_be(type)),
			 errhint("Key columns must be smallint, integer, bigint, text, varchar or uuid.")));
	return GPUMF_KEY_INT;		/* keep compiler quiet */
}

static void
check_value_type(Oid type, const char *col)
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
			 errmsg("value column \"%s\" has unsupported type %s", col,
					format_type_be(type)),
			 errhint("The value column must be numeric: smallint, integer, bigint, real, double precision or numeric.")));
}

/* The column's type; ERROR when it does not exist. */
static Oid
column_type(Oid relid, const char *col)
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
				 errmsg("cannot train on system column \"%s\"", col)));
	return get_atttype(relid, att);
}

static void
check_source(Oid relid)
{
	char		kind = get_rel_relkind(relid);

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
}

static void
check_int_range(const char *name, int32 v, int32 lo, int32 hi)
{
	if (v < lo || v > hi)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d, got %d", name, lo, hi, v)));
}

static void
check_nonneg(const char *name, float4 v)
{
	if (isnan(v) || isinf(v) || v < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite number >= 0, got %g", name, v)));
}

/* ------------------------------------------------------------ reading */

typedef struct TrainReceiver
{
	DestReceiver pub;
	TrainState *ts;
} TrainReceiver;

static char *
key_text(GpumfKeyKind kind, Datum d)
{
	switch (kind)
	{
		case GPUMF_KEY_INT:
			return psprintf(INT64_FORMAT, DatumGetInt64(d));
		case GPUMF_KEY_TEXT:
			return quote_literal_cstr(TextDatumGetCString(d));
		case GPUMF_KEY_UUID:
			return DatumGetCString(DirectFunctionCall1(uuid_out, d));
	}
	return "?";
}

static int32
map_key(gm_keymap *m, GpumfKeyKind kind, Datum d)
{
	int32		idx;

	switch (kind)
	{
		case GPUMF_KEY_INT:
			idx = gm_keymap_int(m, DatumGetInt64(d));
			break;
		case GPUMF_KEY_TEXT:
			{
				text	   *t = DatumGetTextPP(d);

				idx = gm_keymap_bytes(m, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
				if ((Pointer) t != DatumGetPointer(d))
					pfree(t);
				break;
			}
		default:
			idx = gm_keymap_bytes(m, DatumGetUUIDP(d)->data, UUID_LEN);
			break;
	}
	if (idx < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory mapping keys")));
	return idx;
}

static bool
train_receive(TupleTableSlot *slot, DestReceiver *self)
{
	TrainState *ts = ((TrainReceiver *) self)->ts;
	double		v = 1.0;

	slot_getallattrs(slot);
	ts->rows_read++;
	if (slot->tts_isnull[0] || slot->tts_isnull[1])
	{
		ts->null_keys++;
		return true;
	}
	if (ts->has_value)
	{
		if (slot->tts_isnull[2])
		{
			ts->null_values++;
			return true;
		}
		v = DatumGetFloat8(slot->tts_values[2]);
		if (isnan(v) || isinf(v) || v < 0 || v > FLT_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s value %g for user %s, item %s",
							v < 0 ? "negative" : "non-finite", v,
							key_text(ts->ukind, slot->tts_values[0]),
							key_text(ts->ikind, slot->tts_values[1])),
					 errhint("Values are implicit-feedback strengths: finite and >= 0 (confidence = 1 + alpha * value). Filter such rows with a view or a WHERE clause.")));
	}
	if (ts->n == ts->cap)
	{
		int64		cap = ts->cap ? ts->cap * 2 : 1 << 20;
		int32	   *r = realloc(ts->rows, sizeof(int32) * cap);

		if (r)
			ts->rows = r;
		r = r ? realloc(ts->cols, sizeof(int32) * cap) : NULL;
		if (r)
			ts->cols = r;
		if (r)
		{
			float	   *f = realloc(ts->vals, sizeof(float) * cap);

			if (f)
				ts->vals = f;
			else
				r = NULL;
		}
		if (!r)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory reading " INT64_FORMAT " rows", ts->n)));
		ts->cap = cap;
	}
	ts->rows[ts->n] = map_key(ts->users, ts->ukind, slot->tts_values[0]);
	ts->cols[ts->n] = map_key(ts->items, ts->ikind, slot->tts_values[1]);
	ts->vals[ts->n] = (float) v;
	ts->n++;
	return true;
}

static void
train_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
train_shutdown(DestReceiver *self)
{
}

static void
train_destroy(DestReceiver *self)
{
}

static const char *
key_cast(GpumfKeyKind kind)
{
	return kind == GPUMF_KEY_INT ? "int8" : kind == GPUMF_KEY_TEXT ? "text" : "uuid";
}

/* Run SELECT user, item[, value] FROM source as the caller, into ts. */
static void
read_source(TrainState *ts, Oid relid, const char *ucol, const char *icol,
			const char *vcol)
{
	StringInfoData q;
	TrainReceiver recv;
	SPIExecuteOptions opts;
	int			rc;
	char	   *relname = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
													 get_rel_name(relid));

	initStringInfo(&q);
	appendStringInfo(&q, "SELECT (%s)::%s, (%s)::%s",
					 quote_identifier(ucol), key_cast(ts->ukind),
					 quote_identifier(icol), key_cast(ts->ikind));
	if (vcol)
		appendStringInfo(&q, ", (%s)::float8", quote_identifier(vcol));
	appendStringInfo(&q, " FROM %s", relname);

	memset(&recv, 0, sizeof(recv));
	recv.pub.receiveSlot = train_receive;
	recv.pub.rStartup = train_startup;
	recv.pub.rShutdown = train_shutdown;
	recv.pub.rDestroy = train_destroy;
	recv.pub.mydest = DestNone;
	recv.ts = ts;

	memset(&opts, 0, sizeof(opts));
	opts.read_only = false;
	opts.dest = (DestReceiver *) &recv;
	rc = SPI_execute_extended(q.data, &opts);
	/* with a DestReceiver of our own, SPI reports SPI_OK_UTILITY */
	if (rc < 0)
		elog(ERROR, "reading the source failed: %s", SPI_result_code_string(rc));
}

/* ----------------------------------------------------------- training */

typedef struct ProgressArg
{
	int			iterations;
	ErrorData  *error;			/* an ERROR raised while reporting progress */
} ProgressArg;

static int
should_stop(void *arg)
{
	ProgressArg *pa = arg;

	return pa->error != NULL ||
		(InterruptPending && (QueryCancelPending || ProcDiePending));
}

/*
 * Called by the core between iterations.  The core holds malloc'ed and GPU
 * memory that only its own exit path frees, so nothing may longjmp out of
 * here: an ERROR raised while sending the NOTICE (out of memory, say) is
 * caught, stops the training through should_stop(), and is re-thrown by the
 * caller once gm_mf_train() has returned and freed everything.
 */
static void
on_iteration(void *arg, int it, double loss, double rmse, double seconds)
{
	ProgressArg *pa = arg;
	MemoryContext mcx = CurrentMemoryContext;

	if (!gpumf_progress || pa->error)
		return;
	PG_TRY();
	{
		ereport(NOTICE,
				(errmsg("iteration %d/%d: loss %.6g, %.3f s", it, pa->iterations,
						loss, seconds)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		pa->error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
}

/* ------------------------------------------------------------ storing */

static Datum
key_datum(gm_keymap *m, GpumfKeyKind kind, Oid type, int32 idx)
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

static Datum
float_array(const float *v, int k)
{
	Datum	   *d = palloc(sizeof(Datum) * k);

	for (int i = 0; i < k; i++)
		d[i] = Float4GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, k, FLOAT4OID, sizeof(float4),
										   true, TYPALIGN_INT));
}

static Datum
int_array(const int32 *v, int64 n)
{
	Datum	   *d = palloc(sizeof(Datum) * (n > 0 ? n : 1));

	for (int64 i = 0; i < n; i++)
		d[i] = Int32GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, (int) n, INT4OID, sizeof(int32),
										   true, TYPALIGN_INT));
}

static void
spi_exec(const char *sql, int expect)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != expect)
		elog(ERROR, "gpumf: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

/* The values of row r of a factor table. */
typedef void (*RowFormer) (TrainState *ts, Oid keytype, int k, int32 r, Datum *values);

static void
user_row(TrainState *ts, Oid keytype, int k, int32 u, Datum *values)
{
	int64		b = ts->C.indptr[u];

	values[0] = key_datum(ts->users, ts->ukind, keytype, u);
	values[1] = float_array(ts->X + (size_t) u * k, k);
	values[2] = int_array(ts->C.indices + b, ts->C.indptr[u + 1] - b);
}

static void
item_row(TrainState *ts, Oid keytype, int k, int32 i, Datum *values)
{
	values[0] = Int32GetDatum(i);
	values[1] = key_datum(ts->items, ts->ikind, keytype, i);
	values[2] = float_array(ts->Y + (size_t) i * k, k);
}

/* Fill a new factor table with heap inserts (indexes are built afterwards). */
static void
fill_table(const char *qname, TrainState *ts, int32 nrows, RowFormer form,
		   Oid keytype, int k)
{
	Oid			relid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(qname)),
										 NoLock, false);
	Relation	rel = table_open(relid, RowExclusiveLock);
	BulkInsertState bis = GetBulkInsertState();
	CommandId	cid = GetCurrentCommandId(true);
	MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "gpumf store",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(tmp);

	for (int32 r = 0; r < nrows; r++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		form(ts, keytype, k, r, values);
		heap_insert(rel, heap_form_tuple(RelationGetDescr(rel), values, nulls),
					cid, 0, bis);
		MemoryContextReset(tmp);
		if ((r & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(tmp);
	FreeBulkInsertState(bis);
	table_close(rel, RowExclusiveLock);
}

/* Re-issue the grants of an old factor table on its replacement. */
static void
copy_grants(const char *oldq, const char *newq)
{
	StringInfoData q;
	int			rc;

	initStringInfo(&q);
	appendStringInfo(&q,
					 "SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END, a.is_grantable "
					 "FROM pg_class c, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee "
					 "WHERE c.oid = %s::regclass AND a.grantee <> c.relowner",
					 quote_literal_cstr(oldq));
	rc = SPI_execute(q.data, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading grants failed");
	if (SPI_processed > 0)
	{
		SPITupleTable *tt = SPI_tuptable;
		uint64		n = SPI_processed;
		char	  **stmts = palloc(sizeof(char *) * n);

		for (uint64 i = 0; i < n; i++)
		{
			char	   *priv = SPI_getvalue(tt->vals[i], tt->tupdesc, 1);
			char	   *who = SPI_getvalue(tt->vals[i], tt->tupdesc, 2);
			char	   *gopt = SPI_getvalue(tt->vals[i], tt->tupdesc, 3);

			stmts[i] = psprintf("GRANT %s ON %s TO %s%s", priv, newq, who,
								strcmp(gopt, "t") == 0 ? " WITH GRANT OPTION" : "");
		}
		for (uint64 i = 0; i < n; i++)
			spi_exec(stmts[i], SPI_OK_UTILITY);
	}
}

/* Serialise training and dropping of one model (transaction-scoped lock). */
static void
lock_model(const char *model)
{
	DirectFunctionCall2(pg_advisory_xact_lock_int4, Int32GetDatum(GPUMF_LOCK_CLASS),
						hash_any((const unsigned char *) model, strlen(model)));
}

/*
 * Drop factor tables retired by earlier, committed trainings that no reader
 * holds now (the rest wait for a later training).  Runs as the owner.
 */
static void
drop_retired_tables(void)
{
	int			rc;
	uint64		n;
	char	  **names;

	rc = SPI_execute("SELECT name FROM gpumf.retired_tables WHERE retired_by <> pg_current_xact_id() ORDER BY name",
					 false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading retired tables failed");
	n = SPI_processed;
	names = palloc(sizeof(char *) * (n + 1));
	for (uint64 i = 0; i < n; i++)
		names[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
	for (uint64 i = 0; i < n; i++)
	{
		Oid			relid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(names[i])),
											 NoLock, true);
		Oid			t1[1] = {TEXTOID};
		Datum		a1[1] = {CStringGetTextDatum(names[i])};

		if (OidIsValid(relid))
		{
			if (!ConditionalLockRelationOid(relid, AccessExclusiveLock))
				continue;		/* a reader still has it */
			spi_exec(psprintf("DROP TABLE IF EXISTS %s", names[i]), SPI_OK_UTILITY);
		}
		if (SPI_execute_with_args("DELETE FROM gpumf.retired_tables WHERE name = $1",
								  1, t1, a1, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "gpumf: forgetting a retired table failed");
	}
}

/*
 * Run what follows as the extension's owner with a safe search_path, so that
 * no object of the caller's (a function or type shadowing a built-in one)
 * runs with the owner's rights.  Returns the GUC nest level to pop.
 */
static int
become_owner(Oid *save_user, int *save_sec)
{
	int			nest;

	GetUserIdAndSecContext(save_user, save_sec);
	SetUserIdAndSecContext(gpumf_owner(), *save_sec | SECURITY_LOCAL_USERID_CHANGE);
	nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

static void
become_caller(Oid save_user, int save_sec, int nest)
{
	AtEOXact_GUC(true, nest);
	SetUserIdAndSecContext(save_user, save_sec);
}

static double
elapsed(double *t)
{
	double		now = gm_now(),
				d = now - *t;

	*t = now;
	return d;
}

Datum
gpumf_train(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *ucol,
			   *icol,
			   *vcol = NULL,
			   *model;
	int32		factors,
				iterations,
				cg_steps;
	float4		reg,
				alpha;
	int64		seed;
	Oid			utype,
				itype,
				vtype = InvalidOid,
				ustore,
				istore;
	TrainState *ts;
	gm_mf_params params;
	gm_mf_result res;
	gm_mf_data	data;
	gm_callbacks cbs;
	ProgressArg pa;
	char		err[GM_ERRLEN];
	char		devname[128] = "";
	int			rc;
	double		t,
				t_read,
				t_csr,
				t_store;
	Oid			caller = GetUserId();
	Oid			save_user;
	int			save_sec;
	int			nest;
	int64		model_id = 0,
				version = 1;
	char	   *old_users = NULL,
			   *old_items = NULL;
	const char *schema;
	char	   *users_tab,
			   *items_tab;
	HeapTupleHeader result;
	TupleDesc	tupdesc;
	bool		exists;
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	/* ---- arguments */
	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("source must not be NULL")));
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("user_col and item_col must not be NULL")));
	for (int a = 4; a <= 10; a++)
		if (a != 5 && PG_ARGISNULL(a))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("training parameters must not be NULL")));
	relid = PG_GETARG_OID(0);
	ucol = NameStr(*PG_GETARG_NAME(1));
	icol = NameStr(*PG_GETARG_NAME(2));
	if (!PG_ARGISNULL(3))
		vcol = NameStr(*PG_GETARG_NAME(3));
	factors = PG_GETARG_INT32(4);
	iterations = PG_GETARG_INT32(6);
	reg = PG_GETARG_FLOAT4(7);
	alpha = PG_GETARG_FLOAT4(8);
	cg_steps = PG_GETARG_INT32(9);
	seed = PG_GETARG_INT64(10);

	check_source(relid);
	model = PG_ARGISNULL(5) ? get_rel_name(relid) : text_to_cstring(PG_GETARG_TEXT_PP(5));
	if (model[0] == '\0')
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("model name must not be empty")));
	check_int_range("factors", factors, 1, 1024);
	check_int_range("iterations", iterations, 1, 100000);
	check_int_range("cg_steps", cg_steps, 1, 1024);
	check_nonneg("regularization", reg);
	check_nonneg("alpha", alpha);

	utype = column_type(relid, ucol);
	itype = column_type(relid, icol);
	if (vcol)
	{
		vtype = column_type(relid, vcol);
		check_value_type(vtype, vcol);
	}

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "gpumf_train must return a composite type");

	ts = palloc0(sizeof(TrainState));
	ts->ukind = key_kind(utype, ucol, "user");
	ts->ikind = key_kind(itype, icol, "item");
	ustore = ts->ukind == GPUMF_KEY_TEXT ? TEXTOID : utype;
	istore = ts->ikind == GPUMF_KEY_TEXT ? TEXTOID : itype;
	ts->has_value = vcol != NULL;
	ts->cb.func = train_state_free;
	ts->cb.arg = ts;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &ts->cb);
	ts->users = gm_keymap_create(ts->ukind != GPUMF_KEY_INT);
	ts->items = gm_keymap_create(ts->ikind != GPUMF_KEY_INT);
	if (!ts->users || !ts->items)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* ---- one training per model at a time; the retrainer must own it */
	lock_model(model);
	args[0] = CStringGetTextDatum(model);
	rc = SPI_execute_with_args("SELECT id, version, trained_by, user_table, item_table FROM gpumf.models WHERE name = $1",
							   1, argtypes, args, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading the model catalog failed");
	exists = SPI_processed == 1;
	if (exists)
	{
		bool		isnull;
		char	   *owner_name;
		Oid			owner;

		model_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)) + 1;
		owner_name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
		old_users = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
		old_items = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5);
		owner = get_role_oid(owner_name, true);
		if (!superuser() && !(OidIsValid(owner) && has_privs_of_role(caller, owner)))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to retrain model \"%s\"", model),
					 errdetail("The model belongs to role \"%s\".", owner_name),
					 errhint("Choose another model name, or ask its owner to retrain or drop it.")));
	}

	/* ---- read: the executor, as the caller */
	t = gm_now();
	read_source(ts, relid, ucol, icol, vcol);
	t_read = elapsed(&t);
	if (ts->null_keys > 0)
		ereport(NOTICE,
				(errmsg("skipped " INT64_FORMAT " rows with a NULL user or item", ts->null_keys)));
	if (ts->null_values > 0)
		ereport(NOTICE,
				(errmsg("skipped " INT64_FORMAT " rows with a NULL value", ts->null_values)));
	if (ts->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("no rows to train on in \"%s\"", get_rel_name(relid)),
				 errdetail(INT64_FORMAT " rows read, " INT64_FORMAT " with a NULL key, " INT64_FORMAT " with a NULL value.",
						   ts->rows_read, ts->null_keys, ts->null_values),
				 errhint("The source must have at least one row with a non-NULL user and item.")));

	/* ---- CSR / CSC, keys renumbered in key order */
	{
		int32		nu = gm_keymap_size(ts->users),
					ni = gm_keymap_size(ts->items);
		int32	   *umap = malloc(sizeof(int32) * nu),
				   *imap = malloc(sizeof(int32) * ni);
		gm_csr		R;

		if (!umap || !imap || gm_keymap_sort(ts->users, umap) != GM_OK ||
			gm_keymap_sort(ts->items, imap) != GM_OK)
		{
			free(umap);
			free(imap);
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
		}
		for (int64 e = 0; e < ts->n; e++)
		{
			ts->rows[e] = umap[ts->rows[e]];
			ts->cols[e] = imap[ts->cols[e]];
		}
		free(umap);
		free(imap);
		CHECK_FOR_INTERRUPTS();
		rc = gm_csr_from_coo(nu, ni, ts->n, ts->rows, ts->cols, ts->vals, &R, err, sizeof(err));
		free_coo(ts);
		if (rc != GM_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
		/* the values as read: the algorithm derives its confidences */
		ts->C = R;
		rc = gm_csr_transpose(&ts->C, &ts->Ct, err, sizeof(err));
		if (rc != GM_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
	}
	t_csr = elapsed(&t);

	/* ---- device */
	gm_mf_params_defaults(&params, GM_ALG_ALS_IMPLICIT);
	params.backend = gpumf_training_backend(devname, sizeof(devname));

	/* ---- train */
	params.factors = factors;
	params.iterations = iterations;
	params.cg_steps = cg_steps;
	params.regularization = reg;
	params.alpha = alpha;
	params.seed = (uint64_t) seed;
	params.threads = gpumf_threads;
	ts->X = malloc(sizeof(float) * (size_t) ts->C.n_rows * factors);
	ts->Y = malloc(sizeof(float) * (size_t) ts->C.n_cols * factors);
	if (!ts->X || !ts->Y)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory for factors")));
	memset(&data, 0, sizeof(data));
	data.R = &ts->C;
	data.Rt = &ts->Ct;
	data.X = ts->X;
	data.Y = ts->Y;
	pa.iterations = iterations;
	cbs.should_stop = should_stop;
	cbs.on_iteration = on_iteration;
	cbs.arg = &pa;
	pa.error = NULL;
	rc = gm_mf_train(&params, &data, &cbs, &res, err, sizeof(err));
	if (pa.error)
		ReThrowError(pa.error);
	if (rc == GM_ECANCELED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("training canceled")));
	}
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("training failed: %s", err)));
	if (isnan(res.final.loss) || isinf(res.final.loss))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("training diverged: the loss is not finite"),
				 errhint("Use a larger regularization or a smaller alpha.")));
	t = gm_now();

	/* ---- store, as the extension's owner */
	nest = become_owner(&save_user, &save_sec);
	schema = quote_identifier(get_namespace_name(gpumf_schema()));
	if (!exists)
	{
		rc = SPI_execute("SELECT nextval('gpumf.models_id_seq')", false, 1);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "gpumf: allocating a model id failed");
		model_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &exists));
		exists = false;
	}
	users_tab = psprintf("%s.m" INT64_FORMAT "_v" INT64_FORMAT "_users", schema, model_id, version);
	items_tab = psprintf("%s.m" INT64_FORMAT "_v" INT64_FORMAT "_items", schema, model_id, version);
	spi_exec(psprintf("CREATE TABLE %s (key %s NOT NULL, factors real[] NOT NULL, seen integer[] NOT NULL)",
					  users_tab, format_type_be(ustore)), SPI_OK_UTILITY);
	spi_exec(psprintf("CREATE TABLE %s (idx integer NOT NULL, key %s NOT NULL, factors real[] NOT NULL)",
					  items_tab, format_type_be(istore)), SPI_OK_UTILITY);
	fill_table(users_tab, ts, ts->C.n_rows, user_row, ustore, factors);
	fill_table(items_tab, ts, ts->Ct.n_rows, item_row, istore, factors);
	CommandCounterIncrement();
	spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (key)", users_tab), SPI_OK_UTILITY);
	spi_exec(psprintf("ALTER TABLE %s ADD PRIMARY KEY (idx), ADD UNIQUE (key)", items_tab), SPI_OK_UTILITY);
	if (exists)
	{
		copy_grants(old_users, users_tab);
		copy_grants(old_items, items_tab);
	}
	/* the trainer may read, and share, its model */
	{
		const char *role = quote_identifier(GetUserNameFromId(caller, false));

		if (caller != gpumf_owner())
		{
			spi_exec(psprintf("GRANT SELECT ON %s TO %s WITH GRANT OPTION", users_tab, role), SPI_OK_UTILITY);
			spi_exec(psprintf("GRANT SELECT ON %s TO %s WITH GRANT OPTION", items_tab, role), SPI_OK_UTILITY);
		}
	}
	t_store = gm_now() - t;

	{
		Oid			types[27] = {INT8OID, TEXTOID, INT4OID, INT4OID, INT4OID, FLOAT4OID,
			FLOAT4OID, INT4OID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID,
			INT4OID, INT4OID, INT8OID, INT8OID, TEXTOID, TEXTOID, FLOAT8OID, FLOAT8OID,
		FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID};
		Datum		v[27];
		char		n[27];
		char	   *src = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
													 get_rel_name(relid));
		const char *sql;

		memset(n, ' ', sizeof(n));
		v[0] = Int64GetDatum(model_id);
		v[1] = CStringGetTextDatum(model);
		v[2] = Int32GetDatum((int32) version);
		v[3] = Int32GetDatum(factors);
		v[4] = Int32GetDatum(iterations);
		v[5] = Float4GetDatum(reg);
		v[6] = Float4GetDatum(alpha);
		v[7] = Int32GetDatum(cg_steps);
		v[8] = Int64GetDatum(seed);
		v[9] = CStringGetTextDatum(src);
		v[10] = CStringGetTextDatum(ucol);
		v[11] = CStringGetTextDatum(icol);
		v[12] = vcol ? CStringGetTextDatum(vcol) : (Datum) 0;
		n[12] = vcol ? ' ' : 'n';
		v[13] = CStringGetTextDatum(format_type_be(ustore));
		v[14] = CStringGetTextDatum(format_type_be(istore));
		v[15] = Int32GetDatum(ts->C.n_rows);
		v[16] = Int32GetDatum(ts->C.n_cols);
		v[17] = Int64GetDatum(ts->rows_read);
		v[18] = Int64GetDatum(ts->C.nnz);
		v[19] = CStringGetTextDatum(params.backend == GM_BACKEND_CUDA ? "cuda" : "cpu");
		v[20] = CStringGetTextDatum(res.device_name);
		v[21] = Float8GetDatum(res.final.loss);
		v[22] = Float8GetDatum(t_read);
		v[23] = Float8GetDatum(t_csr);
		v[24] = Float8GetDatum(res.transfer_seconds);
		v[25] = Float8GetDatum(res.train_seconds);
		v[26] = Float8GetDatum(t_store);
		/* users_tab / items_tab are formatted identically from id and version */
		if (exists)
			sql = "UPDATE gpumf.models SET version = $3, factors = $4, iterations = $5, "
				"regularization = $6, alpha = $7, cg_steps = $8, seed = $9, source = $10, "
				"user_col = $11, item_col = $12, value_col = $13, user_type = $14, item_type = $15, "
				"n_users = $16, n_items = $17, n_rows = $18, nnz = $19, backend = $20, device = $21, "
				"final_loss = $22, read_seconds = $23, build_seconds = $24, transfer_seconds = $25, "
				"train_seconds = $26, store_seconds = $27, "
				"user_table = format('%s.m%s_v%s_users', $28, $1, $3), item_table = format('%s.m%s_v%s_items', $28, $1, $3), "
				"trained_by = $29, created_at = now() WHERE id = $1 AND name = $2";
		else
			sql = "INSERT INTO gpumf.models (id, name, version, factors, iterations, regularization, alpha, "
				"cg_steps, seed, source, user_col, item_col, value_col, user_type, item_type, n_users, n_items, "
				"n_rows, nnz, backend, device, final_loss, read_seconds, build_seconds, transfer_seconds, "
				"train_seconds, store_seconds, user_table, item_table, trained_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
				"$9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, "
				"format('%s.m%s_v%s_users', $28, $1, $3), format('%s.m%s_v%s_items', $28, $1, $3), $29)";
		{
			Oid			types2[29];
			Datum		v2[29];
			char		n2[30];

			memcpy(types2, types, sizeof(types));
			memcpy(v2, v, sizeof(v));
			memcpy(n2, n, sizeof(n));
			types2[27] = TEXTOID;
			v2[27] = CStringGetTextDatum(schema);
			n2[27] = ' ';
			/* trained_by: the caller, not the owner we run as */
			types2[28] = TEXTOID;
			v2[28] = CStringGetTextDatum(GetUserNameFromId(caller, false));
			n2[28] = ' ';
			n2[29] = '\0';
			rc = SPI_execute_with_args(sql, 29, types2, v2, n2, false, 0);
		}
		if (rc != SPI_OK_UPDATE && rc != SPI_OK_INSERT)
			elog(ERROR, "gpumf: writing the model catalog failed: %s", SPI_result_code_string(rc));
	}
	if (exists)
	{
		Oid			t2[2] = {TEXTOID, TEXTOID};
		Datum		a2[2] = {CStringGetTextDatum(old_users), CStringGetTextDatum(old_items)};

		rc = SPI_execute_with_args("INSERT INTO gpumf.retired_tables (name) VALUES ($1), ($2) ON CONFLICT DO NOTHING",
								   2, t2, a2, NULL, false, 0);
		if (rc != SPI_OK_INSERT)
			elog(ERROR, "gpumf: retiring the old factor tables failed");
	}
	drop_retired_tables();
	become_caller(save_user, save_sec, nest);

	args[0] = Int64GetDatum(model_id);
	argtypes[0] = INT8OID;
	rc = SPI_execute_with_args("SELECT * FROM gpumf.models WHERE id = $1", 1, argtypes, args,
							   NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "gpumf: reading back the model failed");
	result = SPI_returntuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
	SPI_finish();
	train_state_free(ts);
	PG_RETURN_HEAPTUPLEHEADER(result);
}

Datum
gpumf_drop_model(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		if_exists = PG_NARGS() > 1 && PG_GETARG_BOOL(1);
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	int			rc;
	Oid			save_user;
	int			save_sec;
	int			nest;
	char	   *users_tab,
			   *items_tab,
			   *owner_name;
	Oid			owner;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	lock_model(model);
	args[0] = CStringGetTextDatum(model);
	rc = SPI_execute_with_args("SELECT trained_by, user_table, item_table FROM gpumf.models WHERE name = $1",
							   1, argtypes, args, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "gpumf: reading the model catalog failed");
	if (SPI_processed == 0)
	{
		if (if_exists)
		{
			ereport(NOTICE,
					(errmsg("model \"%s\" does not exist, skipping", model)));
			SPI_finish();
			PG_RETURN_BOOL(false);
		}
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("model \"%s\" does not exist", model),
				 errhint("SELECT name FROM gpumf.models lists the models; if_exists => true skips a missing model.")));
	}
	owner_name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	users_tab = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	items_tab = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	owner = get_role_oid(owner_name, true);
	if (!superuser() && !(OidIsValid(owner) && has_privs_of_role(GetUserId(), owner)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to drop model \"%s\"", model),
				 errdetail("The model belongs to role \"%s\".", owner_name)));
	nest = become_owner(&save_user, &save_sec);
	rc = SPI_execute_with_args("DELETE FROM gpumf.models WHERE name = $1", 1, argtypes, args,
							   NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "gpumf: deleting the model failed");
	spi_exec(psprintf("DROP TABLE IF EXISTS %s, %s", users_tab, items_tab), SPI_OK_UTILITY);
	drop_retired_tables();
	become_caller(save_user, save_sec, nest);
	SPI_finish();
	PG_RETURN_BOOL(true);
}
