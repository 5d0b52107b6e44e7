/*
 * source_read.h: the parallel read's shared memory and messages, between its
 * leader (source_scan.c) and its workers (source_worker.c).
 */
#ifndef GPUMF_SOURCE_READ_H
#define GPUMF_SOURCE_READ_H

#include "source_int.h"

#include "access/tableam.h"
#include "executor/tuptable.h"
#include "storage/dsm.h"
#include "storage/shm_toc.h"

#define PARALLEL_KEY_SHARED		UINT64CONST(0x67706d6600000001)
#define PARALLEL_KEY_SCAN		UINT64CONST(0x67706d6600000002)
#define PARALLEL_KEY_QUEUES		UINT64CONST(0x67706d6600000003)

#define WORKER_QUEUE_SIZE	(1024 * 1024)	/* bytes of each worker's queue */
#define WORKER_BATCH_ROWS	8192	/* rows a worker sends at once */

/* what a worker counted; filled when it is done */
typedef struct ReadWorkerStats
{
	int64		rows_read;
	int64		null_keys;
	int64		null_values;
	double		vmin;
	double		vmax;
	double		vsum;
	double		seconds;		/* from its start to its last message */
	double		send_wait;		/* of which sending (waiting while its queue was full) */
} ReadWorkerStats;

/* the read's description, in the parallel context's shared memory */
typedef struct ReadShared
{
	Oid			relid;
	Oid			ucoltype;
	Oid			icoltype;
	Oid			vcoltype;
	AttrNumber	uatt;
	AttrNumber	iatt;
	AttrNumber	vatt;			/* InvalidAttrNumber: no value column */
	GpumfValuePolicy policy;
	int			nworkers;
	int64		raw_ulimit;		/* integer keys below these go as themselves (0: none) */
	int64		raw_ilimit;
	ReadWorkerStats stats[FLEXIBLE_ARRAY_MEMBER];
} ReadShared;

/*
 * Messages on a worker's queue: an 8-byte header (kind, count) and then
 *  MSG_*_KEYS_INT: count int64 keys, local indices sent .. sent + count - 1
 *  MSG_*_KEYS_BYTES: count (uint32 length, bytes) keys, packed
 *  MSG_ROWS: int32 umax, int32 imax (the largest keys sent as themselves so
 *    far, -1: none), then count int32 users, count int32 items (each a key
 *    sent as itself, >= 0, or -1 - a local index on a side with a raw limit;
 *    a local index otherwise), count floats
 *  MSG_*_PRESENT: count uint64 words, bit k set when the worker sent key k
 *    as itself (sent once, after its last rows)
 * A worker sends the keys it saw first in a batch before the batch's rows.
 */
typedef enum
{
	MSG_USER_KEYS_INT = 1,
	MSG_USER_KEYS_BYTES,
	MSG_ITEM_KEYS_INT,
	MSG_ITEM_KEYS_BYTES,
	MSG_ROWS,
	MSG_USER_PRESENT,
	MSG_ITEM_PRESENT
} ReadMessageKind;

typedef struct ReadMessageHeader
{
	int32		kind;
	int32		count;
} ReadMessageHeader;

/* source_scan.c: a scan's rows into src; the error context of a read */
extern bool gpumf_scan_rows(GpumfSource *src, TableScanDesc scan, TupleTableSlot *slot, int64 limit);
extern void gpumf_read_error_context(void *arg);

#endif							/* GPUMF_SOURCE_READ_H */
