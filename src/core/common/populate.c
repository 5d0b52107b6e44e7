/*
 * populate.c: the pages of growing arrays mapped ahead of the thread that
 * writes them, by a thread of its own (gm_populate_start).
 *
 * A fresh page of anonymous memory costs its first writer a fault: the
 * kernel allocates and zeroes it.  At 500M rows a parallel read's leader
 * copies 6 GB of rows into new pages while every worker waits on it; faulting
 * them in OpenMP bursts on the leader's own time stalls the leader and the
 * queues behind it.  Here one thread asks the kernel to map the pages ahead
 * (madvise MADV_POPULATE_WRITE, Linux 5.14: no fault a page, and nothing
 * written: a page already mapped, or written by the leader meanwhile, is
 * left as it is), while the writer goes on.  Where the writer overtakes the
 * thread it faults its pages itself, as it would without it.  The thread
 * keeps at most a window of entries ahead of the writer (gm_populate_advance
 * says where the writer is): arrays grown to twice their rows keep no more
 * mapped pages than the writer's own and that window.
 *
 * Only whole pages inside the entries' range are asked for, so nothing
 * outside the arrays is touched.  The arrays must stay where they are until
 * gm_populate_stop returns (stop the thread before a realloc or a free).
 */
#include "gm_core.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if !defined(MADV_POPULATE_WRITE) && defined(__linux__)
#define MADV_POPULATE_WRITE 23	/* Linux 5.14; older headers lack the name */
#endif

#define POPULATE_CHUNK	((int64_t) 1 << 22)	/* entries a step, between looks at stop */

struct gm_populator
{
	pthread_t	thread;
	char	   *arrays[GM_POPULATE_MAX];
	size_t		elem[GM_POPULATE_MAX];
	int			n;
	int64_t		from,
				to,
				window;			/* entries mapped ahead of the writer at most (0: any) */
	int			stop;			/* __atomic: set by gm_populate_stop */
	int64_t		writer;			/* __atomic: the writer's next entry (gm_populate_advance) */
	int64_t		done;			/* __atomic: entries [from, done) mapped */
};

/* Map the whole pages of [e0, e1) of an array of elem-byte entries; 0, or -1 */
static int
populate_range(char *base, size_t elem, int64_t e0, int64_t e1)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t	ps = (uintptr_t) sysconf(_SC_PAGESIZE);
	uintptr_t	s = ((uintptr_t) (base + (size_t) e0 * elem) + ps - 1) & ~(ps - 1);
	uintptr_t	e = (uintptr_t) (base + (size_t) e1 * elem) & ~(ps - 1);

	if (e <= s)
		return 0;
	return madvise((void *) s, e - s, MADV_POPULATE_WRITE) == 0 || errno == EINTR ? 0 : -1;
#else
	return -1;
#endif
}

static void *
populate_main(void *arg)
{
	gm_populator *p = (gm_populator *) arg;
	int64_t		e = p->from;

	while (e < p->to && !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
	{
		int64_t		limit = p->to,
					e1;

		if (p->window > 0)
		{
			int64_t		w = __atomic_load_n(&p->writer, __ATOMIC_ACQUIRE);

			if (w < p->to - p->window)
				limit = w + p->window;
			if (e >= limit)
			{
				/*
				 * a window ahead of the writer: wait for it (1 ms: a writer
				 * at 2.4 GB/s takes 2.4 MB of a 384 MB window meanwhile)
				 */
				struct timespec nap = {0, 1000000};

				nanosleep(&nap, NULL);
				continue;
			}
		}
		e1 = limit - e < POPULATE_CHUNK ? limit : e + POPULATE_CHUNK;
		for (int a = 0; a < p->n; a++)
			if (populate_range(p->arrays[a], p->elem[a], e, e1) != 0)
				return NULL;	/* no memory to be had: the writer faults the rest */
		__atomic_store_n(&p->done, e1, __ATOMIC_RELEASE);
		e = e1;
	}
	return NULL;
}

/*
 * Does this kernel know MADV_POPULATE_WRITE?  An empty range at a page's
 * start: the advice is checked, nothing else is done.
 */
static int
populate_supported(const char *addr)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t	ps = (uintptr_t) sysconf(_SC_PAGESIZE);

	return madvise((void *) ((uintptr_t) addr & ~(ps - 1)), 0, MADV_POPULATE_WRITE) == 0;
#else
	return 0;
#endif
}

gm_populator *
gm_populate_start(char *const *arrays, const size_t *elem, int n, int64_t from, int64_t to,
				  int64_t window)
{
	gm_populator *p;
	sigset_t	all,
				old;
	int			rc;

	/* GM_POPULATE_OFF in the environment: the writer faults its pages (for comparisons) */
	if (n < 1 || n > GM_POPULATE_MAX || from < 0 || to <= from || arrays[0] == NULL ||
		getenv("GM_POPULATE_OFF") != NULL ||
		!populate_supported(arrays[0]))
		return NULL;
	p = (gm_populator *) calloc(1, sizeof(gm_populator));
	if (p == NULL)
		return NULL;
	for (int a = 0; a < n; a++)
	{
		if (arrays[a] == NULL || elem[a] == 0)
		{
			free(p);
			return NULL;
		}
		p->arrays[a] = arrays[a];
		p->elem[a] = elem[a];
	}
	p->n = n;
	p->from = p->done = p->writer = from;
	p->to = to;
	p->window = window > 0 ? window : 0;
	/* the thread takes no signal: they stay the caller's */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&p->thread, NULL, populate_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		free(p);
		return NULL;
	}
	return p;
}

void
gm_populate_advance(gm_populator *p, int64_t writer)
{
	if (p != NULL)
		__atomic_store_n(&p->writer, writer, __ATOMIC_RELEASE);
}

int64_t
gm_populate_stop(gm_populator *p, int finish)
{
	int64_t		done;

	if (p == NULL)
		return 0;
	if (finish)
		__atomic_store_n(&p->writer, p->to, __ATOMIC_RELEASE);	/* no window left */
	else
		__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	pthread_join(p->thread, NULL);
	done = __atomic_load_n(&p->done, __ATOMIC_ACQUIRE);
	free(p);
	return done;
}
