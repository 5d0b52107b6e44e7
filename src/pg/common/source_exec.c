/*
 * source_exec.c: a source read through the executor (SELECT u, i, v FROM
 * source through SPI, rows handed to a DestReceiver): any relation, views,
 * row-level security, inheritance, with the caller's rights.  Also the
 * executor read of other SELECTs gpumf builds (gpumf_read_query).
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

typedef struct SourceReceiver
{
	DestReceiver pub;
	GpumfSource *src;
} SourceReceiver;

/* A row from the executor: user, item and value are its columns 1, 2, 3. */
static bool
source_receive(TupleTableSlot *slot, DestReceiver *self)
{
	GpumfSource *src = ((SourceReceiver *) self)->src;

	slot_getallattrs(slot);
	take_row(src, slot->tts_values[0], slot->tts_isnull[0],
			 slot->tts_values[1], slot->tts_isnull[1],
			 src->vcol ? slot->tts_values[2] : (Datum) 0,
			 src->vcol ? slot->tts_isnull[2] : true);
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

/* SELECT u, i, v FROM source through the executor, as the caller. */
void
gpumf_source_read_executor(GpumfSource *src)
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
	elog(DEBUG1, "gpumf: read %s through the executor", src->relname);
}
