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
 *
 * Two ways to read, with the same result: the executor (source_exec.c)
 * and a direct scan of a plain table, by parallel workers when it is large
 * (source_scan.c); both hand each row to take_row (source_int.h), which
 * maps its keys (source_keys.c) and appends it.  This file opens and checks
 * the relation and its columns, picks the way to read, turns the
 * coordinates into CSR and checks that summed duplicates stay finite.
 */
#include "source_int.h"

#include <float.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "access/parallel.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "optimizer/paths.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/shm_mq.h"
#include "storage/shm_toc.h"
#include "tcop/dest.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"

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
	src->uatt = get_attnum(relid, ucol);
	src->iatt = get_attnum(relid, icol);
	src->vatt = InvalidAttrNumber;
	if (vcol)
	{
		src->vcoltype = gpumf_column_type(relid, vcol, "train on");
		src->vatt = get_attnum(relid, vcol);
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

/* Rows the source probably has: the planner's statistics, else its size; -1: unknown (a view). */
double
gpumf_source_estimate_rows(const GpumfSource *src)
{
	char		kind = get_rel_relkind(src->relid);
	Relation	rel;
	double		rows;

	if (kind != RELKIND_RELATION && kind != RELKIND_MATVIEW)
		return -1;
	rel = table_open(src->relid, NoLock);	/* locked by gpumf_source_open */
	if (rel->rd_rel->reltuples >= 0 && rel->rd_rel->relpages > 0)
		rows = rel->rd_rel->reltuples;
	else						/* never analyzed: about 40 bytes a row of keys and a value */
		rows = (double) RelationGetNumberOfBlocks(rel) * (BLCKSZ / 40);
	table_close(rel, NoLock);
	return rows;
}

/*
 * Whether the executor would read exactly the table's heap with no check of
 * its own left out: a plain table (not another session's temporary one) or
 * a populated materialized view without inheritance children, the current
 * user may SELECT the three columns, no row-level security policy applies,
 * no executor permission hook (sepgsql) is loaded, and the transaction is
 * not SERIALIZABLE (whose predicate locks the executor takes).
 */
static bool
source_direct_scan_allowed(GpumfSource *src)
{
	Oid			relid = src->relid;
	Oid			user = GetUserId();
	char		kind = get_rel_relkind(relid);
	AttrNumber	atts[3] = {src->uatt, src->iatt, src->vatt};
	Relation	rel;
	bool		plain;

	if (kind != RELKIND_RELATION && kind != RELKIND_MATVIEW)
		return false;
	if (IsolationIsSerializable() || ExecutorCheckPerms_hook != NULL ||
		!IsUnderPostmaster || IsParallelWorker())
		return false;
	/* another session's temporary table, a matview never refreshed: the executor says why not */
	rel = table_open(relid, NoLock);	/* locked by gpumf_source_open */
	plain = !RELATION_IS_OTHER_TEMP(rel) && (kind != RELKIND_MATVIEW || RelationIsPopulated(rel));
	table_close(rel, NoLock);
	if (!plain)
		return false;
	if (kind == RELKIND_RELATION && has_subclass(relid))
		return false;
	if (check_enable_rls(relid, InvalidOid, true) == RLS_ENABLED)
		return false;
	if (pg_class_aclcheck(relid, user, ACL_SELECT) != ACLCHECK_OK)
	{
		for (int c = 0; c < 3; c++)
			if (atts[c] != InvalidAttrNumber &&
				pg_attribute_aclcheck(relid, atts[c], user, ACL_SELECT) != ACLCHECK_OK)
				return false;
	}
	return true;
}

void
gpumf_source_read(GpumfSource *src)
{
	src->read_workers = 0;
	if (source_direct_scan_allowed(src))
		gpumf_source_read_direct(src);
	else
		gpumf_source_read_executor(src);
}

/* the core's cancellation poll: a cancel, statement_timeout or termination is pending */
static int
interrupt_pending(void *arg)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

/* ERROR for a core step that returned rc (GM_ECANCELED: the pending interrupt's own) */
static void
core_step_failed(int rc, const char *err)
{
	if (rc == GM_ECANCELED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("%s", err)));
	}
	ereport(ERROR,
			(errcode(rc == GM_ENOMEM ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
			 errmsg("%s", err)));
}

#define RENUMBER_CHUNK	((int64) 1 << 22)	/* entries renumbered between interrupt checks */

/* whether map[i] == i for every i < n */
static bool
identity(const int32 *map, int32 n)
{
	for (int32 i = 0; i < n; i++)
		if (map[i] != i)
			return false;
	return true;
}

/*
 * e[j] = map[e[j]] for j < n, in parallel for large inputs; nothing when map
 * is NULL.  An entry outside the map's m entries, or mapped to -1 (a key the
 * read never numbered), is an ERROR.
 */
static void
renumber(int32 *e, int64 n, const int32 *map, int32 m)
{
	if (map == NULL)
		return;
	for (int64 b = 0; b < n; b += RENUMBER_CHUNK)
	{
		int64		e_end = Min(n, b + RENUMBER_CHUNK);
		bool		bad = false;

#pragma omp parallel for schedule(static) reduction(||:bad) if (e_end - b > 1000000) \
	num_threads(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs())
		for (int64 j = b; j < e_end; j++)
		{
			int32		v = (uint32) e[j] < (uint32) m ? map[e[j]] : -1;

			bad = bad || v < 0;
			e[j] = v;
		}
		if (bad)
			elog(ERROR, "gpumf: a row names a key the read did not number");
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * A side's map from its entries to its indices in key order (*m entries):
 * the read's deferred map (raw keys to indices; GpumfSource.map) followed by
 * the sort's, or the sort's alone; NULL when the entries are those already
 * (a parallel read numbers integer keys in key order).
 */
static int32 *
side_map(GpumfSource *src, int side, const int32 *sorted, int32 n, int32 *m)
{
	int32	   *d = src->map[side];
	bool		same = identity(sorted, n);

	if (d == NULL)
	{
		*m = n;
		return same ? NULL : (int32 *) sorted;
	}
	if (!same)
		for (int32 k = 0; k < src->map_n[side]; k++)
			d[k] = d[k] >= 0 && d[k] < n ? sorted[d[k]] : -1;
	*m = src->map_n[side];
	return d;
}

/*
 * The row pointers of the transpose of the last R the GPU built, counted
 * there (gpu_col_ptr, malloc'd), for gpumf_csr_transpose_for of that R (its
 * indices' address): each gpumf_source_to_csr lets the previous ones go.
 */
static int64 *gpu_col_ptr;
static const int32 *gpu_col_ptr_of;

/*
 * R from src's rows, their keys renumbered in key order.  The rows' arrays
 * are taken (src no longer holds them) and given back as the CSR is built
 * (gm_csr_from_coo_consume): the peak is about 12 bytes an entry.  The key
 * maps keep their keys, in key order, and nothing else: no key is looked up
 * after this (gm_keymap_sort_final).  Entries a parallel read left raw go
 * through their maps here (GpumfSource.map), before the sort's.
 *
 * gpu (GPUMF_CSR_GPU, _KEEP: a training on one GPU in this process): the
 * CSR is built on the GPU instead (gm_csr_from_coo_device, the same CSR),
 * where that takes no more of its memory than 20 bytes an entry, the
 * factors of factors columns and 256 MB would; the host builds it when the
 * GPU lacks the room.  _KEEP leaves a copy there for the training's upload.
 */
void
gpumf_source_to_csr(GpumfSource *src, gm_csr *R, int gpu, int factors)
{
	int32		nu = gm_keymap_size(src->users),
				ni = gm_keymap_size(src->items);
	int32	   *umap,
			   *imap,
			   *map[2],
				map_n[2];
	gm_callbacks cb;
	char		err[GM_ERRLEN];
	int			rc;
	double		t0,
				t1,
				t2,
				t_ren = 0;

	memset(&cb, 0, sizeof(cb));
	cb.should_stop = interrupt_pending;
	/* palloc'd: an interrupt between the steps frees them with the context */
	/* the rows (then the CSR and each entry's row, as the rows are given back) and the key maps */
	gpumf_check_memory((double) src->n * (sizeof(int32) * 2 + sizeof(float)) * 1.1 +
					   (double) gm_keymap_memory(src->users) + gm_keymap_memory(src->items) +
					   ((double) nu + ni + 2) * (sizeof(int64) + sizeof(int32)),
					   "building the matrix");
	umap = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int32) * (Size) Max(nu, 1));
	imap = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int32) * (Size) Max(ni, 1));
	/*
	 * every key is in: renumbered, the maps keep their keys (the store writes
	 * them) and drop their lookups, which nothing after the read uses
	 */
	t0 = gm_now();
	rc = gm_keymap_sort_final(src->users, umap, &cb);
	if (rc == GM_OK)
		rc = gm_keymap_sort_final(src->items, imap, &cb);
	if (rc != GM_OK)
		core_step_failed(rc, rc == GM_ECANCELED ? "sorting the keys canceled" :
						 "out of memory sorting the keys");
	t1 = gm_now();
	map[0] = side_map(src, 0, umap, nu, &map_n[0]);
	map[1] = side_map(src, 1, imap, ni, &map_n[1]);
	gpu = gpu != GPUMF_CSR_HOST &&
		4.0 * src->n <= ((double) nu + ni) * factors * sizeof(float) + 256.0 * 1048576 ? gpu :
		GPUMF_CSR_HOST;
	t2 = gm_now();
	{
		int32	   *r = src->rows,
				   *c = src->cols;
		float	   *v = src->vals;

		double		sec[3];

		/* taken by the build, which frees them */
		src->rows = src->cols = NULL;
		src->vals = NULL;
		src->cap = 0;
		rc = GM_ENOTSUP;
		free(gpu_col_ptr);
		gpu_col_ptr = NULL;
		gpu_col_ptr_of = NULL;
		if (gpu != GPUMF_CSR_HOST)
		{
			int64	   *cp = malloc(sizeof(int64) * ((Size) ni + 1));

			/* the GPU renumbers the entries as it packs them */
			rc = gm_csr_from_coo_device(nu, ni, src->n, &r, &c, &v, map[0], map_n[0], map[1],
										map_n[1], gpu == GPUMF_CSR_GPU_KEEP, &cb, R, cp, sec,
										err, sizeof(err));
			if (rc == GM_OK)
			{
				elog(DEBUG1, "gpumf: the matrix built on the GPU: up %.3f s, sorted and summed %.3f s, down %.3f s%s",
					 sec[0], sec[1], sec[2], gm_csr_device_kept_bytes() > 0 ? ", a copy kept for the upload" : "");
				gpu_col_ptr = cp;
				gpu_col_ptr_of = R->indices;
				cp = NULL;
			}
			else if (r != NULL)
				elog(DEBUG1, "gpumf: the matrix built on the host: %s", err);
			free(cp);
		}
		if (rc != GM_OK && r != NULL)
		{
			/* renumbered in place: one lookup an entry, in parallel for large inputs */
			t_ren = gm_now();
			renumber(r, src->n, map[0], map_n[0]);
			renumber(c, src->n, map[1], map_n[1]);
			t_ren = gm_now() - t_ren;
			rc = gm_csr_from_coo_consume(nu, ni, src->n, r, c, v, &cb, R, err, sizeof(err));
		}
	}
	pfree(umap);
	pfree(imap);
	if (rc != GM_OK)
		core_step_failed(rc, err);
	elog(DEBUG1, "gpumf: the matrix: keys sorted in %.3f s, rows renumbered in %.3f s, CSR built in %.3f s",
		 t1 - t0, t2 - t1 + t_ren, gm_now() - t2 - t_ren);
	CHECK_FOR_INTERRUPTS();
}

#define SUMMED_CHECK_BLOCK	((int64) 1 << 26)	/* values checked between interrupt checks */

/* a key of the source's key map as text, for messages */
static char *
source_key_text(gm_keymap *map, GpumfKeyKind kind, Oid type, int32 idx)
{
	Oid			outfunc;
	bool		varlena;

	getTypeOutputInfo(type, &outfunc, &varlena);
	return OidOutputFunctionCall(outfunc, gpumf_key_datum(map, kind, type, idx));
}

/*
 * Rows with the same user and item are summed: an ERROR naming the first
 * pair whose sum is not finite (beyond real's range).
 */
void
gpumf_check_summed_values(const GpumfSource *src, const gm_csr *R)
{
	int64		first = R->nnz;		/* the first value that is not finite */
	int32		r;

	/* in parallel, a block at a time (an interrupt is looked at between blocks) */
	for (int64 b = 0; b < R->nnz && first == R->nnz; b += SUMMED_CHECK_BLOCK)
	{
		int64		end = Min(R->nnz, b + SUMMED_CHECK_BLOCK);

#pragma omp parallel for schedule(static) reduction(min:first) if (end - b > 1000000) \
	num_threads(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs())
		for (int64 e = b; e < end; e++)
			if (!isfinite(R->data[e]) && e < first)
				first = e;
		CHECK_FOR_INTERRUPTS();
	}
	if (first == R->nnz)
		return;
	/* its row: the last whose first entry is at or before it */
	{
		int32		lo = 0,
					hi = R->n_rows - 1;

		while (lo < hi)
		{
			int32		mid = lo + (hi - lo + 1) / 2;

			if (R->indptr[mid] <= first)
				lo = mid;
			else
				hi = mid - 1;
		}
		r = lo;
	}
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("the values of the rows for user %s, item %s add up beyond the range of real (%g)",
					source_key_text(src->users, src->ukind, src->utype, r),
					source_key_text(src->items, src->ikind, src->itype, R->indices[first]),
					(double) FLT_MAX),
			 errhint("Rows with the same user and item are summed: scale the values down, or aggregate them in a view.")));
}

/*
 * Rt, R's transpose: formed (form), or only its row pointers, the entries
 * being built a slab at a time by the CUDA module as it uploads them
 * (gm_csr's of; a lean GPU training, gpumf.lean_training).
 */
void
gpumf_csr_transpose_for(const gm_csr *R, gm_csr *Rt, bool form)
{
	gm_callbacks cb;
	char		err[GM_ERRLEN];
	int			rc;
	double		t0;

	memset(&cb, 0, sizeof(cb));
	cb.should_stop = interrupt_pending;
	if (form)
	{
		free(gpu_col_ptr);		/* formed whole: its row pointers with it */
		gpu_col_ptr = NULL;
		gpu_col_ptr_of = NULL;
		gpumf_check_memory(gpumf_csr_bytes(R) * 2, "transposing the matrix");
		rc = gm_csr_transpose_polled(R, &cb, Rt, err, sizeof(err));
		if (rc != GM_OK)
			core_step_failed(rc, err);
		return;
	}
	/* the row pointers, and each thread's counters: at most half a byte an entry */
	gpumf_check_memory(gpumf_csr_bytes(R) + 0.5 * (double) R->nnz, "counting the transpose's rows");
	memset(Rt, 0, sizeof(*Rt));
	Rt->n_rows = R->n_cols;
	Rt->n_cols = R->n_rows;
	Rt->nnz = R->nnz;
	Rt->of = R;
	Rt->of_r0 = 0;
	Rt->of_r1 = R->n_cols;
	if (gpu_col_ptr && gpu_col_ptr_of == R->indices)
	{
		/* counted by the GPU that built R */
		Rt->indptr = gpu_col_ptr;
		gpu_col_ptr = NULL;
		gpu_col_ptr_of = NULL;
		return;
	}
	Rt->indptr = calloc((size_t) R->n_cols + 1, sizeof(int64));
	if (Rt->indptr == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
						errmsg("out of memory for the row pointers of a transpose")));
	t0 = gm_now();
	rc = gm_csr_column_pointers(R, gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs(), &cb,
								Rt->indptr);
	if (rc != GM_OK)
	{
		free(Rt->indptr);
		Rt->indptr = NULL;
		core_step_failed(rc, "counting the transpose's rows canceled");
	}
	elog(DEBUG1, "gpumf: the transpose's row pointers counted in %.3f s", gm_now() - t0);
}

double
gpumf_csr_bytes(const gm_csr *a)
{
	return (double) a->nnz * (sizeof(int32) + sizeof(float)) +
		((double) a->n_rows + 1) * sizeof(int64);
}
