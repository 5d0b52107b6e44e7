/*
 * batch.c: gpumf_recommend_all, the top n of every user (or of the users
 * listed in a table) written into a new table (user, rank, item, score).
 *
 * The model's items come from the serving cache (model_cache.c: the same
 * lookup, locks and SELECT check as gpumf_recommend), its users from its
 * users table (model_load.c).  The core scores them all at once
 * (gm_score_topk: a blocked sgemm and a heap per user on the CPU, cuBLAS
 * and a selection kernel on the GPU), with the same ranking as
 * gpumf_recommend: scores x.y (+ the item bias, then mu + b_u added, for
 * explicit models), ties to the lower item key, seen items left out.
 *
 * The target table is created by the caller, in the caller's name (it owns
 * it), where an unqualified CREATE TABLE of the caller would put it; the
 * rows are written with multi-row heap inserts.  The users table, when
 * given, is read with the caller's rights.
 */
#include "gpumf_serve.h"

#include <math.h>

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(gpumf_recommend_all);

/* gpumf_recommend_all's arguments, by position */
enum
{
	ARG_MODEL, ARG_N, ARG_TARGET, ARG_USERS, ARG_USER_COL, ARG_EXCLUDE_SEEN
};

#define INSERT_BATCH 1000

/* The users to score: rows of u, in order; malloc'ed with a reset callback. */
typedef struct UserList
{
	int32	   *rows;
	int32		n;
	int64		unknown;		/* distinct keys not in the model */
	int64		nulls;
	MemoryContextCallback cb;
} UserList;

static void
user_list_free(void *arg)
{
	UserList   *l = arg;

	free(l->rows);
	l->rows = NULL;
}

/*
 * The distinct users of column col of relation relid (read with the
 * caller's rights) that the model knows, in order of first appearance.
 */
static UserList *
users_from_table(Oid relid, const char *col, GpumfUsers *u, GpumfServed *m, const char *model)
{
	UserList   *l = palloc0(sizeof(UserList));
	AttrNumber	att;
	Oid			coltype;
	char		kind;
	bool	   *taken;
	gm_keymap  *unknown;
	GpumfGuard	g;
	Portal		portal;
	char	   *relname;

	if (get_rel_relkind(relid) == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	kind = get_rel_relkind(relid);
	if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE && kind != RELKIND_VIEW &&
		kind != RELKIND_MATVIEW && kind != RELKIND_FOREIGN_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table, view or materialized view", get_rel_name(relid))));
	att = get_attnum(relid, col);
	if (att == InvalidAttrNumber || att < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist", col, get_rel_name(relid)),
				 errhint("Name the users' column in user_col (its default is the model's user column).")));
	coltype = getBaseType(get_atttype(relid, att));
	gpumf_check_key_column(coltype, m->user_type, col, "user", model);

	l->cb.func = user_list_free;
	l->cb.arg = l;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &l->cb);
	l->rows = malloc(sizeof(int32) * Max(u->n, 1));
	taken = palloc0(sizeof(bool) * Max(u->n, 1));
	unknown = gm_keymap_create(gpumf_key_kind(m->user_type) != GPUMF_KEY_INT);
	if (!l->rows || !unknown)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));

	relname = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
										 get_rel_name(relid));
	gpumf_guard_enter(&g, false);
	PG_TRY();
	{
		portal = SPI_cursor_open_with_args(NULL,
										   psprintf("SELECT %s FROM %s", quote_identifier(col), relname),
										   0, NULL, NULL, NULL, true, 0);
		for (;;)
		{
			SPI_cursor_fetch(portal, true, 10000);
			if (SPI_processed == 0)
				break;
			for (uint64 r = 0; r < SPI_processed; r++)
			{
				bool		isnull;
				Datum		d = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull);
				int32		row;

				if (isnull)
				{
					l->nulls++;
					continue;
				}
				row = gpumf_key_find(u->keys, coltype, d);
				if (row < 0)
				{
					int32		before = gm_keymap_size(unknown);

					if (gpumf_key_add(unknown, coltype, d) == before)
						l->unknown++;
					continue;
				}
				if (!taken[row])
				{
					taken[row] = true;
					l->rows[l->n++] = row;
				}
			}
			SPI_freetuptable(SPI_tuptable);
			CHECK_FOR_INTERRUPTS();
			/* the unknown keys are only counted, but each is kept once */
			gpumf_check_memory((double) gm_keymap_memory(unknown), "counting the users the model lacks");
		}
		SPI_cursor_close(portal);
	}
	PG_FINALLY();
	{
		gm_keymap_free(unknown);
	}
	PG_END_TRY();
	gpumf_guard_exit(&g);
	pfree(taken);
	return l;
}

/* Create the target table (as the caller) and return it opened for inserts. */
static Relation
create_target(const char *qname, Oid utype, Oid itype)
{
	GpumfGuard	g;
	Oid			relid;

	gpumf_guard_enter(&g, false);
	gpumf_spi_exec(psprintf("CREATE TABLE %s (\"user\" %s NOT NULL, rank pg_catalog.int4 NOT NULL, "
							"item %s NOT NULL, score pg_catalog.float4 NOT NULL)",
							qname, format_type_be_qualified(utype), format_type_be_qualified(itype)),
				   SPI_OK_UTILITY);
	gpumf_guard_exit(&g);
	relid = RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							 RowExclusiveLock, false);
	return table_open(relid, NoLock);
}

/* Write the lists: users rows[0 .. nu), n entries each. */
static int64
write_rows(Relation rel, GpumfServed *m, GpumfUsers *u, const int32 *rows, int32 nu, int n,
		   const gm_score_result *r)
{
	TupleTableSlot *slots[INSERT_BATCH];
	BulkInsertState bis = GetBulkInsertState();
	CommandId	cid = GetCurrentCommandId(true);
	MemoryContext tmp = AllocSetContextCreate(CurrentMemoryContext, "gpumf recommend_all rows",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old;
	int			used = 0;
	int64		written = 0;
	GpumfKeyKind ukind = gpumf_key_kind(m->user_type);

	for (int s = 0; s < INSERT_BATCH; s++)
		slots[s] = table_slot_create(rel, NULL);
	old = MemoryContextSwitchTo(tmp);
	for (int32 j = 0; j < nu; j++)
	{
		int32		row = rows ? rows[j] : j;
		Datum		ukey = gpumf_key_datum(u->keys, ukind, m->user_type, row);
		float		add = m->has_bias ? (float) m->global_mean + (u->bias ? u->bias[row] : 0.0f) : 0.0f;

		for (int e = 0; e < r->count[j]; e++)
		{
			TupleTableSlot *slot = slots[used];
			size_t		o = (size_t) j * n + e;

			ExecClearTuple(slot);
			slot->tts_values[0] = ukey;
			slot->tts_values[1] = Int32GetDatum(e + 1);
			slot->tts_values[2] = m->item_keys[r->idx[o]];
			slot->tts_values[3] = Float4GetDatum(r->score[o] + add);
			memset(slot->tts_isnull, 0, sizeof(bool) * 4);
			ExecStoreVirtualTuple(slot);
			if (++used == INSERT_BATCH)
			{
				table_multi_insert(rel, slots, used, cid, TABLE_INSERT_SKIP_FSM, bis);
				written += used;
				used = 0;
				MemoryContextReset(tmp);
				CHECK_FOR_INTERRUPTS();
				/* the user's key lived in tmp: make it again */
				ukey = gpumf_key_datum(u->keys, ukind, m->user_type, row);
			}
		}
	}
	if (used > 0)
	{
		table_multi_insert(rel, slots, used, cid, TABLE_INSERT_SKIP_FSM, bis);
		written += used;
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(tmp);
	for (int s = 0; s < INSERT_BATCH; s++)
		ExecDropSingleTupleTableSlot(slots[s]);
	table_finish_bulk_insert(rel, TABLE_INSERT_SKIP_FSM);
	FreeBulkInsertState(bis);
	return written;
}

Datum
gpumf_recommend_all(PG_FUNCTION_ARGS)
{
	char	   *model;
	int32		n;
	char	   *target;
	Oid			users_rel = InvalidOid;
	char	   *user_col = NULL;
	bool		exclude_seen;
	GpumfServed *m;
	GpumfUsers *u;
	UserList   *list = NULL;
	char	   *qtarget;
	gm_score_problem p;
	gm_score_result r;
	gm_backend_kind backend;
	char		devname[128] = "";
	int32		nu;
	float	   *Xs = NULL;
	int64	   *sp = NULL;
	int32	   *si = NULL;
	double		t,
				t_read,
				t_write;
	int64		written;
	Relation	rel;
	TupleDesc	tupdesc;
	Datum		values[9];
	bool		nulls[9] = {false};

	gpumf_check_catalog_version();
	gpumf_check_not_null(fcinfo, ARG_MODEL, "model");
	gpumf_check_not_null(fcinfo, ARG_N, "n");
	gpumf_check_not_null(fcinfo, ARG_TARGET, "target");
	gpumf_check_not_null(fcinfo, ARG_EXCLUDE_SEEN, "exclude_seen");
	model = text_to_cstring(PG_GETARG_TEXT_PP(ARG_MODEL));
	n = PG_GETARG_INT32(ARG_N);
	target = text_to_cstring(PG_GETARG_TEXT_PP(ARG_TARGET));
	exclude_seen = PG_GETARG_BOOL(ARG_EXCLUDE_SEEN);
	if (!PG_ARGISNULL(ARG_USERS))
		users_rel = PG_GETARG_OID(ARG_USERS);
	if (!PG_ARGISNULL(ARG_USER_COL))
		user_col = pstrdup(NameStr(*PG_GETARG_NAME(ARG_USER_COL)));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	gpumf_check_n(n);
	gpumf_check_model_name(model);
	if (user_col && !OidIsValid(users_rel))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("user_col is given without users"),
				 errhint("user_col names the column of the users table; without users every user of the model is scored.")));
	/* the target's name is checked (as the caller would see it) before any work */
	qtarget = gpumf_new_table_name(target, "target table");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	t = gm_now();
	m = gpumf_served_get(model);
	u = gpumf_users_read(m);
	if (OidIsValid(users_rel))
	{
		GpumfModel cat;

		if (user_col == NULL)
		{
			if (!gpumf_model_lookup(model, &cat) || cat.user_col == NULL)
				elog(ERROR, "gpumf: model \"%s\" has no user column", model);
			user_col = cat.user_col;
		}
		list = users_from_table(users_rel, user_col, u, m, model);
	}
	if (n > m->n_items)
		n = Max(m->n_items, 1);

	/* the problem: every user, or the listed ones gathered */
	nu = list ? list->n : u->n;
	{
		/* the results, the gathered users, and the CPU scorer's block (two rows per thread at least) */
		int			threads = gpumf_threads > 0 ? gpumf_threads : gm_default_threads();
		double		block = gm_score_cpu_memory(m->n_items, threads);

		gpumf_check_memory_threads(((double) nu * n * 8 + (list ? (double) nu * m->k * 4 : 0)) * 1.5 +
								   block, block / threads, threads, "recommending for every user");
	}
	memset(&p, 0, sizeof(p));
	p.n_users = nu;
	p.n_items = m->n_items;
	p.k = m->k;
	p.X = u->X;
	p.Y = m->Y;
	p.item_bias = m->item_bias;
	p.n = n;
	if (exclude_seen)
	{
		p.seen_ptr = u->seen_ptr;
		p.seen_idx = u->seen_idx;
	}
	if (list)
	{
		int64		total = 0;

		Xs = palloc_extended(sizeof(float) * Max((size_t) nu * m->k, 1), MCXT_ALLOC_HUGE);
		sp = palloc_extended(sizeof(int64) * ((size_t) nu + 1), MCXT_ALLOC_HUGE);
		for (int32 j = 0; j < nu; j++)
			total += u->seen_ptr[list->rows[j] + 1] - u->seen_ptr[list->rows[j]];
		si = palloc_extended(sizeof(int32) * Max(total, 1), MCXT_ALLOC_HUGE);
		sp[0] = 0;
		for (int32 j = 0; j < nu; j++)
		{
			int32		row = list->rows[j];
			int64		a = u->seen_ptr[row],
						b = u->seen_ptr[row + 1];

			memcpy(Xs + (size_t) j * m->k, u->X + (size_t) row * m->k, sizeof(float) * m->k);
			memcpy(si + sp[j], u->seen_idx + a, sizeof(int32) * (b - a));
			sp[j + 1] = sp[j] + (b - a);
		}
		p.X = Xs;
		if (exclude_seen)
		{
			p.seen_ptr = sp;
			p.seen_idx = si;
		}
	}
	t_read = gm_now() - t;

	memset(&r, 0, sizeof(r));
	r.idx = palloc_extended(sizeof(int32) * Max((size_t) nu * n, 1), MCXT_ALLOC_HUGE);
	r.score = palloc_extended(sizeof(float) * Max((size_t) nu * n, 1), MCXT_ALLOC_HUGE);
	r.count = palloc_extended(sizeof(int32) * Max((size_t) nu, 1), MCXT_ALLOC_HUGE);
	backend = gpumf_scoring_backend(devname, sizeof(devname));
	gpumf_score(&p, &backend, &r);

	t = gm_now();
	rel = create_target(qtarget, m->user_type, m->item_type);
	written = write_rows(rel, m, u, list ? list->rows : NULL, nu, n, &r);
	table_close(rel, NoLock);
	t_write = gm_now() - t;
	SPI_finish();

	values[0] = Int64GetDatum(nu);
	values[1] = Int64GetDatum(written);
	values[2] = Int64GetDatum(list ? list->unknown : 0);
	values[3] = CStringGetTextDatum(backend == GM_BACKEND_CUDA ? "cuda" : "cpu");
	values[4] = CStringGetTextDatum(r.device);
	values[5] = Float8GetDatum(t_read);
	values[6] = Float8GetDatum(r.transfer_seconds);
	values[7] = Float8GetDatum(r.compute_seconds);
	values[8] = Float8GetDatum(t_write);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
