/*
 * shared_segment.c: the dynamic shared memory segments of served versions
 * (shared_models.c), created with every page mapped, and one made ahead.
 *
 * Creating a segment zero-fills its pages: 0.6 s for the 1.3 GB of a model
 * of 2M items at 128 factors.  A training that warms its new version
 * (warm_worker.c) has it made ahead, while its store waits on the WAL of the
 * tables it has just filled (gpumf_shared_segment_premake): the disk stays
 * busy with that WAL meanwhile, and the warming takes the segment made
 * ahead when it asks for one of that size.  A segment made ahead and not
 * taken is detached at the end of the transaction, and so freed.
 */
#include "gpumf_serve.h"

#include <sys/mman.h>
#include <unistd.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/dsm.h"

static dsm_segment *premade;	/* mapped for the session, owned by no resource owner */
static Size premade_bytes;
static bool premade_callback_set;

static void
drop_premade(void)
{
	if (premade)
		dsm_detach(premade);	/* never pinned: freed */
	premade = NULL;
	premade_bytes = 0;
}

static void
premade_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		drop_premade();
}

/*
 * A segment of bytes with its pages mapped in one call (MADV_POPULATE_WRITE,
 * Linux 5.14: faulting 100 MB in page by page as the arrays are written costs
 * more than reading them; where the call is not known the pages are faulted
 * in as they are written), or dsm_create's NULL with DSM_CREATE_NULL_IF_MAXSEGMENTS.
 */
static dsm_segment *
create_mapped(Size bytes, int flags)
{
	dsm_segment *seg = dsm_create(bytes, flags);

#ifdef MADV_POPULATE_WRITE
	if (seg)
		(void) madvise((void *) TYPEALIGN_DOWN(sysconf(_SC_PAGESIZE), dsm_segment_address(seg)),
					   bytes, MADV_POPULATE_WRITE);
#endif
	return seg;
}

/*
 * A new segment of bytes owned by the current resource owner, as dsm_create
 * makes it: the one made ahead when its size is bytes.
 */
dsm_segment *
gpumf_shared_segment_create(Size bytes)
{
	if (premade && premade_bytes == bytes)
	{
		dsm_segment *seg = premade;

		premade = NULL;
		premade_bytes = 0;
		dsm_unpin_mapping(seg); /* the current resource owner's now */
		return seg;
	}
	return create_mapped(bytes, 0);
}

/*
 * Make a segment of bytes ahead, for this transaction's
 * gpumf_shared_segment_create.  Nothing when bytes is 0, when shared models
 * are off or no segment can be had (the warming creates its own or fails as
 * it would have).
 */
void
gpumf_shared_segment_premake(Size bytes)
{
	drop_premade();
	if (bytes == 0 || !gpumf_shared_models || !IsUnderPostmaster || IsInParallelMode())
		return;
	if (!premade_callback_set)
	{
		RegisterXactCallback(premade_xact_callback, NULL);
		premade_callback_set = true;
	}
	premade = create_mapped(bytes, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (premade)
	{
		dsm_pin_mapping(premade);
		premade_bytes = bytes;
	}
}
