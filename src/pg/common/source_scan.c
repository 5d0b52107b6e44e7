/*
 * source_scan.c: a source read by a direct scan of a plain table (or
 * materialized view), by parallel workers when it is large; the other way
 * to read is source_exec.c's.
 *
 * source.c takes a direct scan when nothing of the executor's is needed
 * (views, row-level security, inheritance): the caller has SELECT on the
 * table or the three columns, no row-level security applies to it, it has
 * no inheritance children and the transaction is not SERIALIZABLE.  Large
 * tables are then read by parallel workers as a parallel sequential scan
 * does (gpumf.read_workers; by default as many as PostgreSQL would give a
 * parallel SELECT of the table): each worker streams its rows through a
 * shared-memory queue.  An integer key 0 <= key < the read's raw limit
 * (row numbers, serial ids) goes as itself; any other key goes as its index
 * in the worker's own key map, with the keys the worker saw first.  The
 * leader merges those keys into the global key maps as they come and
 * copies the rows as they are.  Once every queue is done it numbers the
 * keys sent as themselves (a presence pass over the rows in parallel, then
 * one pass in key order: the map is loaded at once when no key came the
 * other way), and turns every entry into a global index with one array
 * lookup, in parallel (OpenMP), a batch of one worker at a time.  No key is
 * then looked up once per worker, by the worker and again by the leader:
 * with keys spread over the table each worker meets nearly all of them.
 * With fewer than LEADER_SCANS_BELOW workers the leader scans
 * its share of the table too; with more, merging is all it does (its own
 * rows would cost it a hash lookup a key, while it is the one process
 * every worker waits on).  Each process takes the visible tuples of a page
 * from the heap scan at once and reads their columns at fixed offsets when
 * it can (gpumf_scan_rows), rather than one slot at a time.
 */
#include "source_int.h"
#include "source_read.h"

#include <float.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "access/heapam.h"
#include "access/htup_details.h"
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

/*
 * Parallel workers for a table of `pages` pages, as the planner gives a
 * parallel sequential scan (compute_parallel_worker): the table's
 * parallel_workers option, or one more for each tripling of the size above
 * min_parallel_table_scan_size; at most max_parallel_workers_per_gather.
 * gpumf.read_workers >= 0 overrides it.
 */
static int
read_workers_for(Relation rel, BlockNumber pages)
{
	int			workers = RelationGetParallelWorkers(rel, -1);

	/* a temporary table lives in this backend's buffers, which workers cannot see */
	if (RelationUsesLocalBuffers(rel))
		return 0;
	if (gpumf_read_workers >= 0)
		return gpumf_read_workers;
	if (workers < 0)
	{
		double		threshold = Max(min_parallel_table_scan_size, 1);

		workers = 0;
		if (pages >= threshold)
		{
			workers = 1;
			while (pages >= threshold * 3)
			{
				workers++;
				threshold *= 3;
				if (threshold > INT_MAX / 3)
					break;
			}
		}
	}
	return Min(workers, max_parallel_workers_per_gather);
}

/*
 * Integer keys 0 <= key < this go from the workers as themselves
 * (ReadMessageKind): the dense range of the key maps (GM_KEYMAP_DENSE_MAX),
 * and no more than 256 a page of the table, so that numbering them (an
 * int32 a key of the range, gm_keymap_load_marked) stays within a quarter of
 * the table's size.  0 for other key types.
 */
static int64
raw_limit_for(Oid coltype, BlockNumber pages)
{
	if (coltype != INT2OID && coltype != INT4OID && coltype != INT8OID)
		return 0;
	return Min((int64) GM_KEYMAP_DENSE_MAX, Max((int64) GM_KEYMAP_DENSE_MIN, (int64) pages * 256));
}

/*
 * Where a heap scan's tuples hold the columns read, for the walk over a
 * page (read_page): the byte offset of each from the start of a tuple's
 * data, when it and every column before it have a fixed length (so that
 * in a tuple without NULLs it lies there).  False when the scan is not a
 * heap scan in page-at-a-time mode without keys (its visible tuples listed
 * in rs_vistuples) or a column read follows one of variable length.
 */
typedef struct PageWalk
{
	AttrNumber	att[3];			/* user, item, value (0: no value column) */
	int			off[3];
	int16		len[3];
	bool		byval[3];
	AttrNumber	last;
} PageWalk;

static bool
page_walk_setup(GpumfSource *src, TableScanDesc scan, TupleDesc desc, PageWalk *w)
{
	int			off = 0;

	if (scan->rs_rd->rd_tableam != GetHeapamTableAmRoutine() ||
		!(scan->rs_flags & SO_ALLOW_PAGEMODE) || scan->rs_nkeys != 0)
		return false;
	w->att[0] = src->uatt;
	w->att[1] = src->iatt;
	w->att[2] = src->vatt;
	w->last = Max(Max(src->uatt, src->iatt), src->vatt);
	for (AttrNumber a = 1; a <= w->last; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a - 1);

		if (att->attlen <= 0)
			return false;
		off = att_align_nominal(off, att->attalign);
		for (int c = 0; c < 3; c++)
			if (w->att[c] == a)
			{
				w->off[c] = off;
				w->len[c] = att->attlen;
				w->byval[c] = att->attbyval;
			}
		off += att->attlen;
	}
	return true;
}

/* Is any of a tuple's first `last` columns NULL? (those that place the columns read) */
static inline bool
nulls_upto(const bits8 *bits, AttrNumber last)
{
	for (int a = 0; a < last; a++)
		if (att_isnull(a, bits))
			return true;
	return false;
}

/*
 * The rest of the page of the tuple a heap scan has just returned: each
 * visible tuple from it on (the scan's rs_vistuples, from rs_cindex), its
 * columns fetched at their offsets, or by heap_getattr when one of its
 * columns up to the last read is NULL (a dropped column is NULL in the rows
 * written after the drop) or it has fewer columns (some were added since
 * it was written).  The scan is then left at the page's last visible tuple,
 * so that its next call starts the next page.  The scan holds its pin on
 * the page, and in page-at-a-time mode reads these tuples without the
 * page's lock as well.  Returns the tuples read.
 */
static int
read_page(GpumfSource *src, TableScanDesc scan, TupleDesc desc, const PageWalk *w)
{
	HeapScanDesc h = (HeapScanDesc) scan;
	Page		page = BufferGetPage(h->rs_cbuf);
	int			first = (int) h->rs_cindex,
				ntuples = (int) h->rs_ntuples;

	for (int x = first; x < ntuples; x++)
	{
		ItemId		lp = PageGetItemId(page, h->rs_vistuples[x]);
		HeapTupleHeader t = (HeapTupleHeader) PageGetItem(page, lp);
		Datum		d[3] = {0, 0, 0};
		bool		null[3] = {false, false, true};

		if (HeapTupleHeaderGetNatts(t) >= w->last &&
			(!(t->t_infomask & HEAP_HASNULL) || !nulls_upto(t->t_bits, w->last)))
		{
			const char *data = (const char *) t + t->t_hoff;

			for (int c = 0; c < 3; c++)
				if (w->att[c] != InvalidAttrNumber)
				{
					d[c] = fetch_att(data + w->off[c], w->byval[c], w->len[c]);
					null[c] = false;
				}
		}
		else
		{
			HeapTupleData tup;

			tup.t_data = t;
			tup.t_len = ItemIdGetLength(lp);
			tup.t_tableOid = RelationGetRelid(scan->rs_rd);
			ItemPointerSet(&tup.t_self, h->rs_cblock, h->rs_vistuples[x]);
			for (int c = 0; c < 3; c++)
				if (w->att[c] != InvalidAttrNumber)
					d[c] = heap_getattr(&tup, w->att[c], desc, &null[c]);
		}
		take_row(src, d[0], null[0], d[1], null[1], d[2], null[2]);
	}
	h->rs_cindex = ntuples - 1;
	return ntuples - first;
}

/*
 * Read the rows a scan returns (the leader's share of a parallel one: all
 * of it when done; with a limit, about that many, whole pages).  A heap
 * scan whose columns read lie at fixed offsets is walked a page at a time
 * (read_page): a tuple costs a few loads instead of a slot's store and a
 * deforming call (a worker reading rows of three int4/real columns took
 * 40% less time).
 */
bool
gpumf_scan_rows(GpumfSource *src, TableScanDesc scan, TupleTableSlot *slot, int64 limit)
{
	AttrNumber	last = Max(Max(src->uatt, src->iatt), src->vatt);
	int			u = src->uatt - 1,
				i = src->iatt - 1,
				v = src->vatt - 1;
	PageWalk	w = {{0}};
	bool		walk = page_walk_setup(src, scan, slot->tts_tupleDescriptor, &w);
	int64		since_check = 0;

	for (int64 r = 0; limit < 0 || r < limit;)
	{
		if (!table_scan_getnextslot(scan, ForwardScanDirection, slot))
			return false;
		if (walk)
		{
			int			n = read_page(src, scan, slot->tts_tupleDescriptor, &w);

			r += n;
			since_check += n;
		}
		else
		{
			slot_getsomeattrs(slot, last);
			take_row(src, slot->tts_values[u], slot->tts_isnull[u],
					 slot->tts_values[i], slot->tts_isnull[i],
					 v >= 0 ? slot->tts_values[v] : (Datum) 0, v >= 0 ? slot->tts_isnull[v] : true);
			r++;
			since_check++;
		}
		if (since_check >= 4096)
		{
			CHECK_FOR_INTERRUPTS();
			since_check = 0;
		}
	}
	return true;
}

/* "reading public.ratings" under an error raised while reading */
void
gpumf_read_error_context(void *arg)
{
	errcontext("reading %s", (const char *) arg);
}

/* ---------------------------------------------------- parallel workers */

#define LEADER_CHUNK_ROWS	4096	/* rows the leader scans between drains */
#define LEADER_SCANS_BELOW	3		/* workers from which the leader only merges */
#define TRANSLATE_CHUNK		((int64) 1 << 22)	/* rows translated between interrupt checks */

/* The leader's view of one worker's queue and its local-to-global key maps. */
typedef struct WorkerFeed
{
	int			index;			/* the worker's number */
	shm_mq_handle *mqh;
	bool		done;
	int32	   *umap;			/* local user index -> global */
	int32	   *imap;
	int32		nu,
				ni,
				ucap,
				icap;
} WorkerFeed;

/*
 * The workers' batches of rows as copied, still in local indices: batch b
 * is rows [start[b], start[b] + count[b]) of the source, from worker[b].
 */
typedef struct RowBatches
{
	int64	   *start;
	int32	   *count;
	int32	   *worker;
	int64		n,
				cap;
	int64		ulimit,			/* ReadShared's raw limits (entries as ReadMessageKind says) */
				ilimit;
	int32		umax,			/* the largest key any worker sent as itself; -1: none */
				imax;
	int64		prefaulted;		/* entries whose pages prefault touched */
	bool		populate;		/* the leader only merges: populator may run */
	int			populators;		/* populator threads started */
	uint64	   *present[2];		/* users, items: the workers' MSG_*_PRESENT, or'ed */
	int64		words[2];
} RowBatches;

static RowBatches batches;		/* of the read in progress */
static gm_populator *populator; /* the arrays' pages mapped ahead of the merges */

#define PREFAULT_ENTRIES	((int64) 1 << 24)	/* entries whose pages are touched at once */
#define POPULATE_AHEAD		((int64) 1 << 25)	/* entries the thread maps ahead of the merges */

/*
 * Make sure the pages of src's arrays hold entries up to upto (within their
 * capacity), touching them in parallel (OpenMP) a stretch of at least
 * PREFAULT_ENTRIES ahead: the kernel zeroes each fresh page at its first
 * write, one fault a page, about 6 GB at 500M rows; on every core at once
 * here rather than in the leader's copies, which every worker waits on.
 * Only entries not written yet (from batches.prefaulted on) are touched.
 * Not called while populate_begin's thread maps the pages instead.
 */
static void
prefault(GpumfSource *src, int64 upto)
{
	int64		from = batches.prefaulted,
				to = Min(src->cap, Max(upto, from + PREFAULT_ENTRIES));
	char	   *arrays[3] = {(char *) src->rows, (char *) src->cols, (char *) src->vals};

	if (upto <= from || to <= from)
		return;
	Assert(from >= src->n);
#pragma omp parallel for schedule(static) collapse(2) \
	num_threads(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs())
	for (int a = 0; a < 3; a++)
		for (int64 b = from * 4; b < to * 4; b += 4096)
			arrays[a][b] = 0;
	batches.prefaulted = to;
}

/*
 * While the leader only merges, a thread maps the pages of src's arrays up to
 * POPULATE_AHEAD entries past its copies (gm_populate_start: none for rows
 * that never come); where it cannot (an older kernel) prefault does.
 */
static void
populate_begin(GpumfSource *src)
{
	char	   *arrays[3] = {(char *) src->rows, (char *) src->cols, (char *) src->vals};
	size_t		elem[3] = {sizeof(int32), sizeof(int32), sizeof(float)};

	Assert(populator == NULL);
	populator = gm_populate_start(arrays, elem, 3, Max(batches.prefaulted, src->n), src->cap,
								  POPULATE_AHEAD);
	if (populator)
		batches.populators++;
}

/* Stop the thread (before the arrays move or are read as a whole). */
static void
populate_end(void)
{
	if (populator)
	{
		int64		done = gm_populate_stop(populator, 0);

		populator = NULL;
		batches.prefaulted = Max(batches.prefaulted, done);
	}
}

static void
add_batch(int64 start, int32 count, int32 worker)
{
	if (batches.n == batches.cap)
	{
		int64		want = batches.cap ? batches.cap * 2 : 1024;

		if (batches.cap == 0)
		{
			batches.start = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int64) * want);
			batches.count = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int32) * want);
			batches.worker = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int32) * want);
		}
		else
		{
			batches.start = repalloc_huge(batches.start, sizeof(int64) * want);
			batches.count = repalloc_huge(batches.count, sizeof(int32) * want);
			batches.worker = repalloc_huge(batches.worker, sizeof(int32) * want);
		}
		batches.cap = want;
	}
	batches.start[batches.n] = start;
	batches.count[batches.n] = count;
	batches.worker[batches.n] = worker;
	batches.n++;
}


/*
 * The batches [b0, b1) and how many rows they have, b1 chosen so that they
 * have about `chunk` rows (at least one batch).
 */
static int64
batch_run(int64 b0, int64 chunk, int64 *rows)
{
	int64		b1 = b0;

	*rows = 0;
	while (b1 < batches.n && *rows < chunk)
		*rows += batches.count[b1++];
	return b1;
}

/*
 * The indices of the keys the workers sent as themselves on one side (keys
 * 0 .. max): rank[key], NULL when none was.  The keys present are the bits
 * the workers sent (MSG_*_PRESENT); then, in key order, they are loaded
 * into the empty map at once
 * (gm_keymap_load_marked: already in key order, the way the build wants
 * them) or, when keys came the other way too (through the workers' maps or
 * the leader's own scan), added one by one.
 */
static int32 *
raw_ranks(GpumfSource *src, bool users)
{
	gm_keymap  *m = users ? src->users : src->items;
	int32		max = users ? batches.umax : batches.imax;
	int32	   *rank;
	int64		n = (int64) max + 1;

	if (max < 0)
		return NULL;
	gpumf_check_memory((double) src->n * (sizeof(int32) * 2 + sizeof(float)) +
					   (double) n * (sizeof(int32) + sizeof(int64)) +
					   gm_keymap_memory(src->users) + gm_keymap_memory(src->items),
					   "numbering the keys read in parallel");
	rank = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int32) * (Size) n);
	{
		const uint64 *bits = batches.present[users ? 0 : 1];
		int64		words = batches.words[users ? 0 : 1];

#pragma omp parallel for schedule(static) if (n > 1000000) \
	num_threads(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs())
		for (int64 k = 0; k < n; k++)
			rank[k] = (k >> 6) < words && (bits[k >> 6] >> (k & 63)) & 1 ? 0 : -1;
	}
	CHECK_FOR_INTERRUPTS();
	if (gm_keymap_size(m) == 0)
	{
		int			rc = gm_keymap_load_marked(m, rank, n);

		if (rc == GM_ENOMEM)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory mapping keys")));
		if (rc != GM_OK)
			elog(ERROR, "gpumf: could not number the keys read in parallel");
	}
	else
		for (int64 k = 0; k < n; k++)
		{
			if (rank[k] == 0 && (rank[k] = gm_keymap_int_dense(m, k)) < 0)
				gpumf_keymap_full(m);
			if ((k & 0xFFFFF) == 0xFFFFF)
				CHECK_FOR_INTERRUPTS();
		}
	return rank;
}

/*
 * One entry's global index: a key sent as itself through rank (raw side,
 * entry >= 0), else a local index through the worker's map; false when the
 * entry names no key the worker sent.
 */
static inline bool
global_index(int32 e, bool raw, const int32 *rank, int32 max, const int32 *map, int32 n,
			 int32 *out)
{
	if (raw && e >= 0)
	{
		if (e > max)
			return false;
		*out = rank[e];
		return true;
	}
	if (raw)
		e = -1 - e;				/* e < 0: no overflow */
	if (e < 0 || e >= n)
		return false;
	*out = map[e];
	return true;
}

/*
 * Whether one side's entries are their global indices already: every key
 * came as itself (no worker sent one through its map) and keys 0 .. max
 * are all there, numbered in order (rank[k] = k).  Entries lie in 0 .. max.
 */
static bool
side_is_identity(const int32 *rank, int32 max, const WorkerFeed *feeds, int nfeeds, bool users)
{
	bool		same = true;

	if (rank == NULL)
		return false;
	for (int w = 0; w < nfeeds; w++)
		if ((users ? feeds[w].nu : feeds[w].ni) > 0)
			return false;
#pragma omp parallel for schedule(static) reduction(&&:same) if (max > 1000000) \
	num_threads(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs())
	for (int64 k = 0; k <= max; k++)
		same = same && rank[k] == k;
	return same;
}

/*
 * Every batch's entries into global indices, batches in parallel; an entry
 * naming a key its worker never sent is an ERROR.  A side whose entries
 * are their indices already (side_is_identity: integer keys 0 .. n - 1, the
 * usual serial ids) is left as it is.
 */
static void
translate_batches(GpumfSource *src, const WorkerFeed *feeds, int nfeeds, bool all_batches)
{
	int32	   *urank = raw_ranks(src, true);
	int32	   *irank = raw_ranks(src, false);
	bool		uskip = side_is_identity(urank, batches.umax, feeds, nfeeds, true),
				iskip = side_is_identity(irank, batches.imax, feeds, nfeeds, false);

	/*
	 * src->defer_maps, every row a worker's: a side whose keys all came as
	 * themselves keeps them, its rank map going to the matrix's build
	 */
	for (int side = 0; side < 2 && src->defer_maps && all_batches; side++)
	{
		int32	   *rank = side == 0 ? urank : irank;
		bool		raw_only = rank != NULL && !(side == 0 ? uskip : iskip);

		for (int w = 0; w < nfeeds && raw_only; w++)
			raw_only = (side == 0 ? feeds[w].nu : feeds[w].ni) == 0;
		if (!raw_only)
			continue;
		src->map[side] = rank;
		src->map_n[side] = (side == 0 ? batches.umax : batches.imax) + 1;
		if (side == 0)
		{
			uskip = true;
			urank = NULL;
		}
		else
		{
			iskip = true;
			irank = NULL;
		}
	}

	for (int64 b0 = 0; b0 < batches.n && !(uskip && iskip);)
	{
		int64		rows;
		int64		b1 = batch_run(b0, TRANSLATE_CHUNK, &rows);
		bool		bad = false;

#pragma omp parallel for schedule(dynamic, 4) reduction(||:bad) if (rows > 1000000) \
	num_threads(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs())
		for (int64 b = b0; b < b1; b++)
		{
			const WorkerFeed *f = &feeds[batches.worker[b]];
			int32	   *ru = src->rows + batches.start[b];
			int32	   *ri = src->cols + batches.start[b];

			for (int32 r = 0; r < batches.count[b]; r++)
			{
				if ((!uskip &&
					 !global_index(ru[r], batches.ulimit > 0, urank, batches.umax, f->umap, f->nu, &ru[r])) ||
					(!iskip &&
					 !global_index(ri[r], batches.ilimit > 0, irank, batches.imax, f->imap, f->ni, &ri[r])))
				{
					bad = true;
					break;
				}
			}
		}
		if (bad)
			elog(ERROR, "gpumf: a parallel read worker sent an unknown key");
		CHECK_FOR_INTERRUPTS();
		b0 = b1;
	}
	if (urank)
		pfree(urank);
	if (irank)
		pfree(irank);
}

/* Append v to a growing local-to-global index map (at most PG_INT32_MAX entries). */
static int32 *
append_index(int32 *map, int32 *n, int32 *cap, int32 v)
{
	if (*n == *cap)
	{
		int64		want = *cap ? (int64) *cap * 2 : 4096;
		Size		bytes;

		if (*n == PG_INT32_MAX)
			elog(ERROR, "gpumf: a parallel read worker sent more than %d keys", PG_INT32_MAX);
		want = Min(want, PG_INT32_MAX);
		bytes = sizeof(int32) * (Size) want;
		map = map ? repalloc_huge(map, bytes) :
			MemoryContextAllocHuge(CurrentMemoryContext, bytes);
		*cap = (int32) want;
	}
	map[(*n)++] = v;
	return map;
}

/* Merge one message of a worker into the source. */
static void
merge_message(GpumfSource *src, WorkerFeed *f, const char *data, Size len)
{
	ReadMessageHeader h;
	const char *p = data + sizeof(h);
	const char *end = data + len;
	bool		users;

	if (len < sizeof(h))
		elog(ERROR, "gpumf: short message from a parallel read worker");
	memcpy(&h, data, sizeof(h));
	switch (h.kind)
	{
		case MSG_USER_KEYS_INT:
		case MSG_ITEM_KEYS_INT:
			users = h.kind == MSG_USER_KEYS_INT;
			if (len != sizeof(h) + sizeof(int64) * (Size) h.count)
				elog(ERROR, "gpumf: bad key message from a parallel read worker");
			for (int32 k = 0; k < h.count; k++)
			{
				int64		key;
				int32		g;

				memcpy(&key, p + sizeof(int64) * k, sizeof(int64));
				/* a key every worker sends: the dense cache answers all but the first */
				g = gm_keymap_int_dense(users ? src->users : src->items, key);
				if (g < 0)
					ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
									errmsg("out of memory mapping keys")));
				if (users)
					f->umap = append_index(f->umap, &f->nu, &f->ucap, g);
				else
					f->imap = append_index(f->imap, &f->ni, &f->icap, g);
			}
			break;
		case MSG_USER_KEYS_BYTES:
		case MSG_ITEM_KEYS_BYTES:
			users = h.kind == MSG_USER_KEYS_BYTES;
			for (int32 k = 0; k < h.count; k++)
			{
				uint32		klen;
				int32		g;

				if (end - p < (Size) sizeof(klen))
					elog(ERROR, "gpumf: bad key message from a parallel read worker");
				memcpy(&klen, p, sizeof(klen));
				p += sizeof(klen);
				if (end - p < klen)
					elog(ERROR, "gpumf: bad key message from a parallel read worker");
				g = gm_keymap_bytes(users ? src->users : src->items, p, klen);
				p += klen;
				if (g < 0)
					ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
									errmsg("out of memory mapping keys")));
				if (users)
					f->umap = append_index(f->umap, &f->nu, &f->ucap, g);
				else
					f->imap = append_index(f->imap, &f->ni, &f->icap, g);
			}
			break;
		case MSG_ROWS:
			{
				const int32 *maxes = (const int32 *) p;
				const int32 *lu = maxes + 2;
				const int32 *li = lu + h.count;
				const float *lv = (const float *) (li + h.count);

				if (h.count < 0 ||
					len != sizeof(h) + sizeof(int32) * 2 +
					(sizeof(int32) * 2 + sizeof(float)) * (Size) h.count ||
					maxes[0] < -1 || maxes[0] >= Max(batches.ulimit, 0) ||
					maxes[1] < -1 || maxes[1] >= Max(batches.ilimit, 0))
					elog(ERROR, "gpumf: bad row message from a parallel read worker");
				batches.umax = Max(batches.umax, maxes[0]);
				batches.imax = Max(batches.imax, maxes[1]);
				if (src->n + h.count > src->cap)
				{
					populate_end();
					while (src->n + h.count > src->cap)
						gpumf_source_grow(src);
					if (batches.populate)
						populate_begin(src);
				}
				batches.prefaulted = Max(batches.prefaulted, src->n);
				if (populator == NULL)
					prefault(src, src->n + h.count);
				/* as sent: translate_batches makes the indices global at the end */
				memcpy(src->rows + src->n, lu, sizeof(int32) * (Size) h.count);
				memcpy(src->cols + src->n, li, sizeof(int32) * (Size) h.count);
				memcpy(src->vals + src->n, lv, sizeof(float) * (Size) h.count);
				add_batch(src->n, h.count, f->index);
				src->n += h.count;
				gm_populate_advance(populator, src->n);
				break;
			}
		case MSG_USER_PRESENT:
		case MSG_ITEM_PRESENT:
			{
				int			side = h.kind == MSG_USER_PRESENT ? 0 : 1;
				int64		limit = side == 0 ? batches.ulimit : batches.ilimit;

				if (h.count < 1 || (int64) h.count > (limit + 63) / 64 ||
					len != sizeof(h) + sizeof(uint64) * (Size) h.count)
					elog(ERROR, "gpumf: bad key message from a parallel read worker");
				if (h.count > batches.words[side])
				{
					batches.present[side] = batches.present[side] ?
						repalloc_huge(batches.present[side], sizeof(uint64) * h.count) :
						MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint64) * h.count);
					memset(batches.present[side] + batches.words[side], 0,
						   sizeof(uint64) * (h.count - batches.words[side]));
					batches.words[side] = h.count;
				}
				for (int32 k = 0; k < h.count; k++)
				{
					uint64		bits;

					memcpy(&bits, p + sizeof(uint64) * k, sizeof(bits));
					batches.present[side][k] |= bits;
				}
				break;
			}
		default:
			elog(ERROR, "gpumf: unknown message from a parallel read worker");
	}
}

/* Merge what the workers have sent; true when anything came. */
static bool
drain_queues(GpumfSource *src, WorkerFeed *feeds, int nfeeds, int *active)
{
	bool		got = false;

	for (int w = 0; w < nfeeds; w++)
	{
		WorkerFeed *f = &feeds[w];

		/* a bounded number per queue, so that no worker starves the others */
		for (int m = 0; !f->done && m < 64; m++)
		{
			Size		len;
			void	   *data;
			shm_mq_result rc = shm_mq_receive(f->mqh, &len, &data, true);

			if (rc == SHM_MQ_WOULD_BLOCK)
				break;
			if (rc == SHM_MQ_DETACHED)
			{
				f->done = true;
				(*active)--;
				break;
			}
			merge_message(src, f, data, len);
			got = true;
		}
	}
	return got;
}

/*
 * Read the table with a scan of our own: parallel when workers are asked
 * for and start, the leader scanning its share between merges; alone
 * otherwise.
 */
void
gpumf_source_read_direct(GpumfSource *src)
{
	Relation	rel = table_open(src->relid, NoLock);	/* locked by gpumf_source_open */
	BlockNumber pages = RelationGetNumberOfBlocks(rel);
	int			nworkers = read_workers_for(rel, pages);
	Snapshot	snap;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ParallelContext *pcxt = NULL;
	WorkerFeed *feeds = NULL;
	ReadShared *shared = NULL;
	int			active = 0,
				active_at_start = 0;
	TableScanDesc scan;
	ErrorContextCallback errctx;
	double		t_read = gm_now(),
				merging = 0,
				waiting = 0,
				numbering = 0;
	int			populators = 0;

	errctx.callback = gpumf_read_error_context;
	errctx.arg = src->relname;
	errctx.previous = error_context_stack;
	error_context_stack = &errctx;

	/* what the executor does first: make the caller's earlier commands visible */
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetTransactionSnapshot());
	PushActiveSnapshot(snap);

	if (nworkers > 0)
	{
		Size		sshared = add_size(offsetof(ReadShared, stats),
									   mul_size(sizeof(ReadWorkerStats), nworkers));
		Size		sscan = table_parallelscan_estimate(rel, snap);
		Size		squeues = mul_size(WORKER_QUEUE_SIZE, nworkers);
		ParallelTableScanDesc pscan;
		char	   *queues;

		EnterParallelMode();
		pcxt = CreateParallelContext("gpumf", "gpumf_read_worker_main", nworkers);
		shm_toc_estimate_chunk(&pcxt->estimator, sshared);
		shm_toc_estimate_chunk(&pcxt->estimator, sscan);
		shm_toc_estimate_chunk(&pcxt->estimator, squeues);
		shm_toc_estimate_keys(&pcxt->estimator, 3);
		InitializeParallelDSM(pcxt);
		if (pcxt->seg == NULL)
		{
			/* no dynamic shared memory to be had: read alone */
			DestroyParallelContext(pcxt);
			ExitParallelMode();
			pcxt = NULL;
			nworkers = 0;
		}
		else
		{
			shared = shm_toc_allocate(pcxt->toc, sshared);
			memset(shared, 0, sshared);
			shared->relid = src->relid;
			shared->ucoltype = src->ucoltype;
			shared->icoltype = src->icoltype;
			shared->vcoltype = src->vcoltype;
			shared->uatt = src->uatt;
			shared->iatt = src->iatt;
			shared->vatt = src->vatt;
			shared->policy = src->policy;
			shared->nworkers = nworkers;
			shared->raw_ulimit = raw_limit_for(src->ucoltype, pages);
			shared->raw_ilimit = raw_limit_for(src->icoltype, pages);
			shm_toc_insert(pcxt->toc, PARALLEL_KEY_SHARED, shared);
			pscan = shm_toc_allocate(pcxt->toc, sscan);
			table_parallelscan_initialize(rel, pscan, snap);
			shm_toc_insert(pcxt->toc, PARALLEL_KEY_SCAN, pscan);
			queues = shm_toc_allocate(pcxt->toc, squeues);
			shm_toc_insert(pcxt->toc, PARALLEL_KEY_QUEUES, queues);
			feeds = palloc0(sizeof(WorkerFeed) * nworkers);
			for (int w = 0; w < nworkers; w++)
			{
				shm_mq	   *mq = shm_mq_create(queues + (Size) w * WORKER_QUEUE_SIZE,
											   WORKER_QUEUE_SIZE);

				shm_mq_set_receiver(mq, MyProc);
				feeds[w].mqh = shm_mq_attach(mq, pcxt->seg, NULL);
			}
			LaunchParallelWorkers(pcxt);
			for (int w = 0; w < nworkers; w++)
			{
				if (w < pcxt->nworkers_launched)
				{
					shm_mq_set_handle(feeds[w].mqh, pcxt->worker[w].bgwhandle);
					active++;
				}
				else
					feeds[w].done = true;
			}
			scan = table_beginscan_parallel(rel, pscan);
		}
	}
	if (pcxt == NULL)
		scan = table_beginscan(rel, snap, 0, NULL);
	src->read_workers = active;

	if (active == 0)
		gpumf_scan_rows(src, scan, slot, -1);
	else
	{
		/* with enough workers the leader only merges (LEADER_SCANS_BELOW) */
		bool		scanning = active < LEADER_SCANS_BELOW;

		active_at_start = active;

		memset(&batches, 0, sizeof(batches));
		batches.ulimit = shared->raw_ulimit;
		batches.ilimit = shared->raw_ilimit;
		batches.umax = batches.imax = -1;
		for (int w = 0; w < nworkers; w++)
			feeds[w].index = w;
		batches.populate = !scanning;	/* a leader's own scan grows the arrays too */
		if (batches.populate && src->cap > 0)
			populate_begin(src);

		/* scan a little, merge what came, until the table and every queue are done */
		PG_TRY();
		{
			while (scanning || active > 0)
			{
				double		t = gm_now();
				bool		got = drain_queues(src, feeds, nworkers, &active);

				merging += gm_now() - t;
				if (scanning)
					scanning = gpumf_scan_rows(src, scan, slot, LEADER_CHUNK_ROWS);
				else if (!got && active > 0)
				{
					t = gm_now();
					(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1,
									 GM_WAIT_EVENT_MQ_RECEIVE);
					ResetLatch(MyLatch);
					waiting += gm_now() - t;
				}
				CHECK_FOR_INTERRUPTS();
			}
		}
		PG_FINALLY();
		{
			/* before the arrays are read whole, or freed with the source */
			populate_end();
		}
		PG_END_TRY();
		numbering = gm_now();
		translate_batches(src, feeds, nworkers, active_at_start >= LEADER_SCANS_BELOW);
		numbering = gm_now() - numbering;
		populators = batches.populators;
		memset(&batches, 0, sizeof(batches));
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	elog(DEBUG1, "gpumf: read %s with a scan of its own, %d parallel workers",
		 src->relname, src->read_workers);

	if (pcxt)
	{
		/* a worker's ERROR is raised here if it was not already */
		double		wsec = 0,
					wsend = 0;

		WaitForParallelWorkersToFinish(pcxt);
		for (int w = 0; w < pcxt->nworkers_launched; w++)
		{
			ReadWorkerStats *st = &shared->stats[w];

			wsec += st->seconds / Max(pcxt->nworkers_launched, 1);
			wsend += st->send_wait / Max(pcxt->nworkers_launched, 1);
			src->rows_read += st->rows_read;
			src->null_keys += st->null_keys;
			src->null_values += st->null_values;
			src->vmin = Min(src->vmin, st->vmin);
			src->vmax = Max(src->vmax, st->vmax);
			src->vsum += st->vsum;
		}
		/* where the time went: the leader merging or waiting, the workers scanning or sending */
		elog(DEBUG1, "gpumf: the parallel read: %.3f s, the leader %.3f s merging, %.3f s waiting, %.3f s numbering the keys and translating; a worker %.3f s on average, %.3f s of it sending; the arrays' pages %s",
			 gm_now() - t_read, merging, waiting, numbering, wsec, wsend,
			 populators > 0 ? psprintf("mapped ahead by a thread (%d starts)", populators) :
			 "touched by the leader's team");
		for (int w = 0; w < nworkers; w++)
			shm_mq_detach(feeds[w].mqh);
		DestroyParallelContext(pcxt);
		ExitParallelMode();
	}
	PopActiveSnapshot();
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	error_context_stack = errctx.previous;
}
