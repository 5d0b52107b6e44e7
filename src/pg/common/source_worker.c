/*
 * source_worker.c: a parallel read's worker (source_scan.c starts them): it
 * scans its share of the table's blocks and streams what it read to the
 * leader through its queue (the messages of source_read.h).
 */
#include "source_read.h"

#include <math.h>

#include "access/parallel.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "miscadmin.h"
#include "storage/shm_mq.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

/* A worker: a GpumfSource of one batch (its key maps local), and its queue. */
typedef struct ReadWorker
{
	GpumfSource src;			/* first: flush() gets it */
	shm_mq_handle *mqh;
	int32		users_sent;
	int32		items_sent;
	int			nworkers;		/* of the read */
	double		send_wait;		/* seconds in shm_mq_send */
	uint64	   *present[2];		/* users, items: the keys sent as themselves */
	int64		words[2];
	StringInfoData msg;
} ReadWorker;

PGDLLEXPORT void gpumf_read_worker_main(dsm_segment *seg, shm_toc *toc);

/* Send the message built in w->msg to the leader (waiting while its queue is full). */
static void
send_message(ReadWorker *w)
{
	double		t0 = gm_now();

	if (shm_mq_send(w->mqh, w->msg.len, w->msg.data, false, false) != SHM_MQ_SUCCESS)
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("gpumf: the leader of a parallel read went away")));
	w->send_wait += gm_now() - t0;
}

/* Send the keys of m that the leader has not seen yet (local indices *sent ..). */
static void
send_new_keys(ReadWorker *w, gm_keymap *m, bool bytes, int kind, int32 *sent)
{
	int32		n = gm_keymap_size(m);
	ReadMessageHeader h = {kind, n - *sent};

	if (n == *sent)
		return;
	resetStringInfo(&w->msg);
	appendBinaryStringInfo(&w->msg, (char *) &h, sizeof(h));
	for (int32 k = *sent; k < n; k++)
	{
		if (bytes)
		{
			uint32		len;
			const void *p = gm_keymap_bytes_at(m, k, &len);

			appendBinaryStringInfo(&w->msg, (char *) &len, sizeof(len));
			appendBinaryStringInfo(&w->msg, p, len);
		}
		else
		{
			int64		key = gm_keymap_int_at(m, k);

			appendBinaryStringInfo(&w->msg, (char *) &key, sizeof(key));
		}
	}
	send_message(w);
	*sent = n;
}

/*
 * Mark the keys of a batch's entries on one side that went as themselves
 * (entries >= 0), so that the leader need not look for them among all the
 * rows again (raw_ranks): a bit a key, in cache, while the batch is.
 */
static void
mark_present(ReadWorker *w, int side, const int32 *e, int32 n)
{
	for (int32 r = 0; r < n; r++)
	{
		int64		k = e[r];

		if (k < 0)
			continue;
		if ((k >> 6) >= w->words[side])
		{
			int64		want = Max((k >> 6) + 1, w->words[side] * 2);

			want = Max(want, 1024);
			w->present[side] = w->present[side] ?
				repalloc_huge(w->present[side], sizeof(uint64) * want) :
				MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint64) * want);
			memset(w->present[side] + w->words[side], 0,
				   sizeof(uint64) * (want - w->words[side]));
			w->words[side] = want;
		}
		w->present[side][k >> 6] |= UINT64CONST(1) << (k & 63);
	}
}

/* After the last rows: the keys sent as themselves, a side at a time. */
static void
send_present(ReadWorker *w)
{
	for (int side = 0; side < 2; side++)
	{
		ReadMessageHeader h = {side == 0 ? MSG_USER_PRESENT : MSG_ITEM_PRESENT, 0};
		int32		max = side == 0 ? w->src.raw_umax : w->src.raw_imax;

		if (max < 0)
			continue;
		h.count = (int32) (max >> 6) + 1;
		Assert(h.count <= w->words[side]);
		resetStringInfo(&w->msg);
		appendBinaryStringInfo(&w->msg, (char *) &h, sizeof(h));
		appendBinaryStringInfo(&w->msg, (char *) w->present[side], sizeof(uint64) * h.count);
		send_message(w);
	}
}

/* A worker's batch is full (or the scan ended): send its new keys, then its rows. */
static void
worker_flush(GpumfSource *src)
{
	ReadWorker *w = (ReadWorker *) src;
	bool		ubytes = src->ukind != GPUMF_KEY_INT,
				ibytes = src->ikind != GPUMF_KEY_INT;
	ReadMessageHeader h = {MSG_ROWS, (int32) src->n};

	/* each worker keeps key maps of its own: its share of gpumf.max_memory */
	gpumf_check_memory(((double) gm_keymap_memory(src->users) + gm_keymap_memory(src->items)) *
					   (w->nworkers + 1), "reading the source in parallel (the key maps)");
	send_new_keys(w, src->users, ubytes,
				  ubytes ? MSG_USER_KEYS_BYTES : MSG_USER_KEYS_INT, &w->users_sent);
	send_new_keys(w, src->items, ibytes,
				  ibytes ? MSG_ITEM_KEYS_BYTES : MSG_ITEM_KEYS_INT, &w->items_sent);
	if (src->n == 0)
		return;
	if (src->raw_ulimit > 0)
		mark_present(w, 0, src->rows, (int32) src->n);
	if (src->raw_ilimit > 0)
		mark_present(w, 1, src->cols, (int32) src->n);
	resetStringInfo(&w->msg);
	appendBinaryStringInfo(&w->msg, (char *) &h, sizeof(h));
	appendBinaryStringInfo(&w->msg, (char *) &src->raw_umax, sizeof(int32));
	appendBinaryStringInfo(&w->msg, (char *) &src->raw_imax, sizeof(int32));
	appendBinaryStringInfo(&w->msg, (char *) src->rows, sizeof(int32) * src->n);
	appendBinaryStringInfo(&w->msg, (char *) src->cols, sizeof(int32) * src->n);
	appendBinaryStringInfo(&w->msg, (char *) src->vals, sizeof(float) * src->n);
	send_message(w);
	src->n = 0;
}

/*
 * A parallel worker's entry point (by name, from CreateParallelContext): it
 * runs with the leader's user, snapshot, GUCs and locks, scans its share of
 * the table's blocks and streams what it read to the leader.
 */
void
gpumf_read_worker_main(dsm_segment *seg, shm_toc *toc)
{
	ReadShared *shared = shm_toc_lookup(toc, PARALLEL_KEY_SHARED, false);
	ParallelTableScanDesc pscan = shm_toc_lookup(toc, PARALLEL_KEY_SCAN, false);
	char	   *queues = shm_toc_lookup(toc, PARALLEL_KEY_QUEUES, false);
	shm_mq	   *mq = (shm_mq *) (queues + (Size) ParallelWorkerNumber * WORKER_QUEUE_SIZE);
	ReadWorker *w = palloc0(sizeof(ReadWorker));
	GpumfSource *src = &w->src;
	ReadWorkerStats *st = &shared->stats[ParallelWorkerNumber];
	double		t0 = gm_now();
	Relation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	ErrorContextCallback errctx;

	shm_mq_set_sender(mq, MyProc);
	w->mqh = shm_mq_attach(mq, seg, NULL);
	w->nworkers = shared->nworkers;
	initStringInfo(&w->msg);

	src->relid = shared->relid;
	src->ucoltype = shared->ucoltype;
	src->icoltype = shared->icoltype;
	src->vcoltype = shared->vcoltype;
	src->uatt = shared->uatt;
	src->iatt = shared->iatt;
	src->vatt = shared->vatt;
	/* take_row only asks whether there is a value column */
	src->vcol = shared->vatt != InvalidAttrNumber ? "value" : NULL;
	src->policy = shared->policy;
	src->raw_ulimit = shared->raw_ulimit;
	src->raw_ilimit = shared->raw_ilimit;
	src->raw_umax = src->raw_imax = -1;
	src->ukind = gpumf_key_kind(gpumf_key_store_type(src->ucoltype, "", "user"));
	src->ikind = gpumf_key_kind(gpumf_key_store_type(src->icoltype, "", "item"));
	src->vmin = INFINITY;
	src->vmax = -INFINITY;
	src->users = gm_keymap_create(src->ukind != GPUMF_KEY_INT);
	src->items = gm_keymap_create(src->ikind != GPUMF_KEY_INT);
	src->cap = WORKER_BATCH_ROWS;
	src->rows = palloc(sizeof(int32) * src->cap);
	src->cols = palloc(sizeof(int32) * src->cap);
	src->vals = palloc(sizeof(float) * src->cap);
	src->flush = worker_flush;
	if (!src->users || !src->items)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));

	/* the leader holds AccessShareLock; a worker of its lock group gets it at once */
	rel = table_open(shared->relid, AccessShareLock);
	errctx.callback = gpumf_read_error_context;
	errctx.arg = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											RelationGetRelationName(rel));
	errctx.previous = error_context_stack;
	error_context_stack = &errctx;
	scan = table_beginscan_parallel(rel, pscan);
	slot = table_slot_create(rel, NULL);
	gpumf_scan_rows(src, scan, slot, -1);
	worker_flush(src);
	send_present(w);
	st->seconds = gm_now() - t0;
	st->send_wait = w->send_wait;
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	error_context_stack = errctx.previous;
	table_close(rel, AccessShareLock);

	st->rows_read = src->rows_read;
	st->null_keys = src->null_keys;
	st->null_values = src->null_values;
	st->vmin = src->vmin;
	st->vmax = src->vmax;
	st->vsum = src->vsum;
	/* the keys maps are malloc'ed: this process ends here, but free them anyway */
	gm_keymap_free(src->users);
	gm_keymap_free(src->items);
	shm_mq_detach(w->mqh);
}

