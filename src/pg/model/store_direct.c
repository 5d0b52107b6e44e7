/*
 * store_direct.c: a factor table's pages formed by threads and written
 * straight to its files (gpumf.store_writes = direct).
 *
 * A factor table is new in the training's transaction: no other session can
 * see it before the commit, and no buffer holds its pages.  So, as an index
 * build writes a new index, the store forms whole heap pages in the backend's
 * memory and writes them to the relation's segment files itself, instead of
 * passing each row through table_multi_insert, the buffer manager (a buffer
 * lookup, a zero-filled extension write and a second write of each page) and
 * the bulk-write ring.  The rows and pages are what table_multi_insert makes
 * of them with TABLE_INSERT_FROZEN: frozen tuples, pages marked all-visible,
 * the visibility map's bits set, checksums when the cluster has them.
 *
 *  1. Each row's size is computed (threads), and rows are packed into pages
 *     in key order (one pass): a block's first row is known before any page
 *     is formed, so any thread can form any block.
 *  2. Rounds of chunks (256 pages each; the chunks of a round lie in
 *     different 1 GB segment files, which the kernel writes in parallel):
 *     the threads form the pages and write them (pwrite); then the backend
 *     asks the checkpointer to fsync the segments written (as md.c does for
 *     every write) and WAL-logs the pages as full-page images (log_newpages,
 *     as an index build does), and asks the WAL writer to flush behind.
 *  3. The visibility map's pages are written and logged the same way.
 *
 * Crash safety: a page is written and its segment's fsync requested before
 * the page's WAL record is inserted.  A checkpoint whose redo point lies
 * after that record was started after the request, and fsyncs the segment
 * before it completes; recovery from an earlier redo point replays the
 * image.  The commit flushes the WAL as for any insert (wal_level minimal,
 * or an unlogged table: no WAL; the commit's pending sync or the shutdown
 * checkpoint fsyncs the files).  An aborted training's files are removed
 * with its relation.
 *
 * A row longer than a page's TOAST target, which table_multi_insert would
 * TOAST, is left to the caller (its list of deferred rows), as are tables
 * whose layout this file does not form.  The first rows and a sample of the
 * others are formed by heap_form_tuple as well and compared byte for byte
 * before anything is written: a difference leaves the whole table to the
 * usual path, with a WARNING.
 */
#include "gpumf_model.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <omp.h>
#include <unistd.h>

#include "access/heaptoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "catalog/pg_type.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/checksum.h"
#include "storage/fd.h"
#include "storage/smgr.h"
#include "storage/sync.h"
#include "utils/array.h"
#include "utils/rel.h"
#include "utils/uuid.h"

#define CHUNK_PAGES		256		/* pages a thread forms and writes at once */
#define CHECK_FIRST		64		/* rows compared with heap_form_tuple: the first ... */
#define CHECK_EVERY		65521	/* ... and every this many */
#define MAX_THREADS		64		/* threads forming pages at most (2 x 2 MB of staging each) */
#define STAGE_ALIGN		4096	/* the pages written from memory aligned to a page of the kernel's */

#if PG_VERSION_NUM >= 160000
#define REL_LOCATOR(rel)	((rel)->rd_locator)
#define TAG_LOCATOR(tag)	((tag).rlocator)
#else
#define REL_LOCATOR(rel)	((rel)->rd_node)
#define TAG_LOCATOR(tag)	((tag).rnode)
#endif

typedef enum
{
	COL_KEY,					/* the user's or item's key */
	COL_INDEX,					/* items: the row number */
	COL_FACTORS,				/* float4[]: n1 from f1, then n2 from f2 */
	COL_SEEN,					/* users: int4[] of the seen items */
	COL_BIAS					/* float4, or NULL without biases */
} ColKind;

/* the columns of a users and of an items table, as model_store.c creates them */
static const ColKind user_cols[4] = {COL_KEY, COL_FACTORS, COL_SEEN, COL_BIAS};
static const ColKind item_cols[4] = {COL_INDEX, COL_KEY, COL_FACTORS, COL_BIAS};

typedef struct DirectCol
{
	ColKind		kind;
	int16		attlen;
	char		attalign;
	bool		packable;		/* a short varlena header where it fits */
} DirectCol;

/* What a row of one table is made of: read by every thread, written by none. */
typedef struct DirectRows
{
	int			natts;
	DirectCol	col[4];
	const gm_csr *R;			/* users: the seen items */
	gm_keymap  *keys;
	GpumfKeyKind kkind;
	Oid			ktype;
	const float *f1;			/* factors: row r's n1 at f1 + r * n1 ... */
	int			n1;
	const float *f2;			/* ... then its n2 at f2 + r * n2 */
	int			n2;
	const float *bias;			/* NULL: the bias column is NULL */
	TransactionId xid;
	CommandId	cid;
} DirectRows;

/* A varlena value: its 4-byte-header size and the bytes after that header. */
typedef struct VarValue
{
	Size		vsz;
	int32		head[5];		/* an array's ndim, dataoffset, elemtype, dim, lbound */
	int			headlen;
	const void *p1;
	Size		l1;
	const void *p2;
	Size		l2;
} VarValue;

static void
array_value(VarValue *v, Oid elemtype, const void *p1, int n1, const void *p2, int n2)
{
	int			n = n1 + n2;

	/* as flat_array2 and construct_empty_array build it */
	v->head[0] = n > 0 ? 1 : 0;
	v->head[1] = 0;
	v->head[2] = (int32) elemtype;
	v->head[3] = n;
	v->head[4] = 1;
	v->headlen = (n > 0 ? 5 : 3) * sizeof(int32);
	v->vsz = n > 0 ? ARR_OVERHEAD_NONULLS(1) + (Size) n * 4 : sizeof(ArrayType);
	v->p1 = p1;
	v->l1 = (Size) Max(n1, 0) * 4;
	v->p2 = p2;
	v->l2 = (Size) Max(n2, 0) * 4;
}

/*
 * Place a varlena at data offset off as heap_fill_tuple does (a 1-byte header
 * without alignment where the column allows it and the value fits; otherwise
 * aligned, with a 4-byte header); data NULL: only the offset after it.
 */
static inline Size
put_var(char *data, Size off, const DirectCol *c, const VarValue *v)
{
	char	   *p = NULL;

	if (c->packable && v->vsz - VARHDRSZ + VARHDRSZ_SHORT <= VARATT_SHORT_MAX)
	{
		if (data)
		{
			p = data + off;
			SET_VARSIZE_SHORT(p, v->vsz - VARHDRSZ + VARHDRSZ_SHORT);
			p += VARHDRSZ_SHORT;
		}
		off += v->vsz - VARHDRSZ + VARHDRSZ_SHORT;
	}
	else
	{
		off = att_align_nominal(off, c->attalign);
		if (data)
		{
			p = data + off;
			SET_VARSIZE(p, v->vsz);
			p += VARHDRSZ;
		}
		off += v->vsz;
	}
	if (p)
	{
		memcpy(p, v->head, v->headlen);
		p += v->headlen;
		if (v->l1)
			memcpy(p, v->p1, v->l1);
		if (v->l2)
			memcpy(p + v->l1, v->p2, v->l2);
	}
	return off;
}

/* a fixed-width value by value (2, 4 or 8 bytes) at off */
static inline Size
put_fixed(char *data, Size off, const DirectCol *c, int64 val)
{
	off = att_align_nominal(off, c->attalign);
	if (data)
	{
		if (c->attlen == 2)
			*(int16 *) (data + off) = (int16) val;
		else if (c->attlen == 4)
			*(int32 *) (data + off) = (int32) val;
		else
			*(int64 *) (data + off) = val;
	}
	return off + c->attlen;
}

/*
 * Row r as a heap tuple at dst (NULL: only its length), with the header
 * heap_form_tuple and heap_prepare_insert (frozen) give it; t_ctid is set
 * by the caller.  Returns the tuple's length.
 */
static Size
form_row(const DirectRows *d, int32 r, char *dst)
{
	bool		hasnull = d->bias == NULL;
	Size		hoff = MAXALIGN(hasnull ? offsetof(HeapTupleHeaderData, t_bits) + BITMAPLEN(d->natts) :
								offsetof(HeapTupleHeaderData, t_bits));
	char	   *data = dst ? dst + hoff : NULL;
	Size		off = 0;
	bool		varwidth = false;

	for (int a = 0; a < d->natts; a++)
	{
		const DirectCol *c = &d->col[a];
		VarValue	v;

		switch (c->kind)
		{
			case COL_INDEX:
				off = put_fixed(data, off, c, r);
				break;
			case COL_KEY:
				if (d->kkind == GPUMF_KEY_INT)
					off = put_fixed(data, off, c, gm_keymap_int_at(d->keys, r));
				else
				{
					uint32		len;
					const void *p = gm_keymap_bytes_at(d->keys, r, &len);

					if (d->kkind == GPUMF_KEY_UUID)
					{
						/* fixed-width by reference, char-aligned */
						off = att_align_nominal(off, c->attalign);
						if (data)
							memcpy(data + off, p, UUID_LEN);
						off += UUID_LEN;
					}
					else
					{
						v.vsz = VARHDRSZ + len;
						v.headlen = 0;
						v.p1 = p;
						v.l1 = len;
						v.l2 = 0;
						off = put_var(data, off, c, &v);
						varwidth = true;
					}
				}
				break;
			case COL_FACTORS:
				array_value(&v, FLOAT4OID, d->f1 + (size_t) r * d->n1, d->n1,
							d->f2 ? d->f2 + (size_t) r * d->n2 : NULL, d->f2 ? d->n2 : 0);
				off = put_var(data, off, c, &v);
				varwidth = true;
				break;
			case COL_SEEN:
				{
					int64		b = d->R->indptr[r];

					array_value(&v, INT4OID, d->R->indices + b, (int) (d->R->indptr[r + 1] - b),
								NULL, 0);
					off = put_var(data, off, c, &v);
					varwidth = true;
				}
				break;
			case COL_BIAS:
				if (d->bias)
				{
					float4		f = d->bias[r];
					int32		bits;

					memcpy(&bits, &f, sizeof(bits));
					off = put_fixed(data, off, c, bits);
				}
				break;
		}
	}
	if (dst)
	{
		HeapTupleHeader td = (HeapTupleHeader) dst;

		memset(dst, 0, hoff);
		HeapTupleHeaderSetNatts(td, d->natts);
		td->t_hoff = hoff;
		td->t_infomask = (hasnull ? HEAP_HASNULL : 0) | (varwidth ? HEAP_HASVARWIDTH : 0) |
			HEAP_XMAX_INVALID | HEAP_XMIN_FROZEN;
		HeapTupleHeaderSetXmin(td, d->xid);
		HeapTupleHeaderSetCmin(td, d->cid);
		HeapTupleHeaderSetXmax(td, InvalidTransactionId);
		if (hasnull)
		{
			/* every column but the last (the bias) is set */
			for (int a = 0; a < d->natts - 1; a++)
				td->t_bits[a >> 3] |= 1 << (a & 7);
		}
	}
	return hoff + off;
}

/* Form block blk (rows first[blk] .. first[blk + 1] - 1, the deferred skipped) at page. */
static void
form_page(const DirectRows *d, const int32 *len, int32 limit, const int32 *first, BlockNumber blk,
		  char *page, bool checksums)
{
	PageHeader	ph = (PageHeader) page;
	OffsetNumber n = 0;

	PageInit(page, BLCKSZ, 0);
	for (int32 r = first[blk]; r < first[blk + 1]; r++)
	{
		Size		upper;
		HeapTupleHeader td;

		if (len[r] > limit)
			continue;
		upper = ph->pd_upper - MAXALIGN(len[r]);
		td = (HeapTupleHeader) (page + upper);
		form_row(d, r, (char *) td);
		ItemPointerSet(&td->t_ctid, blk, n + 1);
		ItemIdSetNormal(&ph->pd_linp[n], upper, len[r]);
		ph->pd_lower += sizeof(ItemIdData);
		ph->pd_upper = upper;
		n++;
	}
	PageSetAllVisible(page);
	if (checksums)
		ph->pd_checksum = pg_checksum_page(page, blk);
}

/* The bytes [from, from + len) of a tuple, compared with the usual tuple's. */
static bool
same_row(const DirectRows *d, int32 r, HeapTuple usual, char *scratch)
{
	Size		len;
	HeapTupleHeader td = (HeapTupleHeader) scratch;
	uint16		layout = HEAP_HASNULL | HEAP_HASVARWIDTH | HEAP_HASEXTERNAL;
	Size		bits = offsetof(HeapTupleHeaderData, t_bits);

	len = form_row(d, r, NULL);
	if (len != usual->t_len)
		return false;
	memset(scratch, 0, MaxHeapTupleSize);	/* the padding, as palloc0 leaves it */
	form_row(d, r, scratch);
	return td->t_hoff == usual->t_data->t_hoff &&
		(td->t_infomask & layout) == (usual->t_data->t_infomask & layout) &&
		HeapTupleHeaderGetNatts(td) == HeapTupleHeaderGetNatts(usual->t_data) &&
		memcmp(scratch + bits, (char *) usual->t_data + bits, len - bits) == 0;
}

typedef struct Chunk
{
	BlockNumber start;
	BlockNumber end;
	int			err;			/* errno of a failed write, 0 */
} Chunk;

/* write a whole chunk at its place in its segment file */
static int
write_chunk(int fd, const char *buf, Size bytes, off_t at)
{
	while (bytes > 0)
	{
		ssize_t		w = pwrite(fd, buf, bytes, at);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : ENOSPC;
		buf += w;
		bytes -= w;
		at += w;
	}
	return 0;
}

/* Ask the checkpointer to fsync segment seg (md.c's register_dirty_segment). */
static void
request_fsync(Relation rel, ForkNumber fork, uint32 seg, int fd, const char *path)
{
	FileTag		tag;

	memset(&tag, 0, sizeof(tag));
	tag.handler = SYNC_HANDLER_MD;
	tag.forknum = fork;
	TAG_LOCATOR(tag) = REL_LOCATOR(rel);
	tag.segno = seg;
	if (!RegisterSyncRequest(&tag, SYNC_REQUEST, false /* retryOnError */ ) &&
		pg_fsync(fd) < 0)
		ereport(data_sync_elevel(ERROR),
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", path)));
}

/* The visibility map of blocks 0 .. nblocks - 1: all visible, all frozen. */
static void
write_vm(Relation rel, BlockNumber nblocks, bool wal, bool checksums)
{
	/* as visibilitymap.c lays it out: two bits a heap block after the page header */
	const BlockNumber per_page = (BLCKSZ - MAXALIGN(SizeOfPageHeaderData)) * 4;
	SMgrRelation sm = RelationGetSmgr(rel);
	PGAlignedBlock page;

	if (!smgrexists(sm, VISIBILITYMAP_FORKNUM))
		smgrcreate(sm, VISIBILITYMAP_FORKNUM, false);
	for (BlockNumber v = 0; v * per_page < nblocks; v++)
	{
		BlockNumber n = Min(per_page, nblocks - v * per_page);
		uint8	   *map;

		PageInit(page.data, BLCKSZ, 0);
		map = (uint8 *) PageGetContents(page.data);
		memset(map, 0xFF, n / 4);
		for (BlockNumber b = n / 4 * 4; b < n; b++)
			map[b / 4] |= 3 << ((b % 4) * 2);
		if (checksums)
			((PageHeader) page.data)->pd_checksum = pg_checksum_page(page.data, v);
		/* written (its fsync requested) before its WAL record, as the heap's pages */
		smgrextend(RelationGetSmgr(rel), VISIBILITYMAP_FORKNUM, v, page.data, false);
		if (wal)
			log_newpage(&REL_LOCATOR(rel), VISIBILITYMAP_FORKNUM, v, page.data, false);
	}
}

/*
 * The threads that form and write the chunks: they call nothing of
 * PostgreSQL's that allocates, reports or takes a lock (form_page, pwrite),
 * and block every signal (the backend's handlers run in the backend's own
 * thread).  A round is started by pool_round and waited for by pool_wait;
 * pool_stop ends the threads, also on an ERROR.
 */
typedef struct Pool Pool;
struct Pool
{
	pthread_mutex_t mu;
	pthread_cond_t go;
	pthread_cond_t done;
	int64		round;			/* the round asked for (0: none yet) */
	int			pending;		/* threads still working on it */
	bool		stop;
	int64		c0;				/* the round: chunks c0 .. c0 + nc - 1 */
	int			nc;
	char	   *stage;			/* chunk j's pages at stage + j * CHUNK_PAGES * BLCKSZ */
	const DirectRows *d;
	const int32 *len;
	int32		limit;
	const int32 *first;
	bool		checksums;
	const int  *fds;
	Chunk	   *chunks;
	int			nthreads;
	int			started;
	pthread_t	tid[MAX_THREADS];
	struct PoolThread
	{
		Pool	   *pool;
		int			me;
	}			thread[MAX_THREADS];
};

static void *
pool_main(void *arg)
{
	Pool	   *p = ((struct PoolThread *) arg)->pool;
	int			me = ((struct PoolThread *) arg)->me;
	int64		seen = 0;

	for (;;)
	{
		Chunk	   *ch = NULL;
		char	   *buf = NULL;

		pthread_mutex_lock(&p->mu);
		while (p->round == seen && !p->stop)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop)
		{
			pthread_mutex_unlock(&p->mu);
			break;
		}
		seen = p->round;
		if (me < p->nc)
		{
			ch = &p->chunks[p->c0 + me];
			buf = p->stage + (Size) me * CHUNK_PAGES * BLCKSZ;
		}
		pthread_mutex_unlock(&p->mu);
		if (ch)
		{
			uint32		s = ch->start / RELSEG_SIZE;

			for (BlockNumber b = ch->start; b < ch->end; b++)
				form_page(p->d, p->len, p->limit, p->first, b,
						  buf + (Size) (b - ch->start) * BLCKSZ, p->checksums);
			ch->err = write_chunk(p->fds[s], buf, (Size) (ch->end - ch->start) * BLCKSZ,
								  (off_t) (ch->start % RELSEG_SIZE) * BLCKSZ);
		}
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
	return NULL;
}

static void
pool_start(Pool *p)
{
	sigset_t	all,
				old;

	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);	/* the threads inherit the mask */
	for (int i = 0; i < p->nthreads; i++)
	{
		p->thread[i].pool = p;
		p->thread[i].me = i;
		if (pthread_create(&p->tid[i], NULL, pool_main, &p->thread[i]) != 0)
			break;
		p->started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (p->started == 0)
	{
		pthread_cond_destroy(&p->go);
		pthread_cond_destroy(&p->done);
		pthread_mutex_destroy(&p->mu);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("gpumf: could not start threads to write the factor tables")));
	}
	p->nthreads = p->started;
}

/* start the round of chunks c0 .. c0 + nc - 1, formed into stage */
static void
pool_round(Pool *p, int64 c0, int nc, char *stage)
{
	pthread_mutex_lock(&p->mu);
	p->c0 = c0;
	p->nc = nc;
	p->stage = stage;
	p->pending = p->nthreads;
	p->round++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
}

static void
pool_wait(Pool *p)
{
	pthread_mutex_lock(&p->mu);
	while (p->pending > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* end the threads (a round in progress is finished first) */
static void
pool_stop(Pool *p)
{
	if (p->started == 0)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->started; i++)
		pthread_join(p->tid[i], NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mu);
	p->started = 0;
}

/*
 * Fill the empty table rel (created by this transaction) with rows 0 ..
 * nrows - 1 of a users (users) or items table.  Returns false, having written
 * nothing, when this file does not form its rows; otherwise the rows it left
 * to the caller (longer than a page's TOAST target) are in *deferred
 * (*ndeferred of them, in order).  usual(arg, r) forms row r as the usual
 * path does, for the comparison.
 */
bool
gpumf_store_fill_direct(Relation rel, const GpumfStoreInput *in, bool users, int32 nrows,
						HeapTuple (*usual) (void *arg, int32 r), void *usual_arg,
						int32 **deferred, int32 *ndeferred)
{
	TupleDesc	desc = RelationGetDescr(rel);
	DirectRows	d;
	int32	   *len,
			   *first;
	int32		limit = Min(RelationGetToastTupleTarget(rel, TOAST_TUPLE_TARGET), MaxHeapTupleSize);
	int64		nblocks = 0,
				ndef = 0;
	int			threads = Min(gpumf_threads > 0 ? gpumf_threads : omp_get_num_procs(), MAX_THREADS);
	bool		checksums = DataChecksumsEnabled();
	bool		wal = RelationNeedsWAL(rel);
	char	   *scratch;
	char	   *relpath_main;
	Chunk	   *chunks;
	int64		nchunks = 0;
	char	   *stage_mem,
			   *stage;
	int		   *fds;
	char	  **paths;
	uint32		nseg;
	BlockNumber *blknos;
	char	  **pages;
	Pool		pool;
	double		t0 = gm_now(),
				t_pages = 0,
				t_wal = 0,
				t;

	if (RelationGetNumberOfBlocks(rel) != 0 || desc->natts != 4 || nrows <= 0)
		return false;
	memset(&d, 0, sizeof(d));
	d.natts = 4;
	d.R = in->R;
	d.keys = users ? in->users : in->items;
	d.kkind = users ? in->ukind : in->ikind;
	d.ktype = users ? in->utype : in->itype;
	for (int a = 0; a < 4; a++)
		d.col[a].kind = users ? user_cols[a] : item_cols[a];
	if (users)
	{
		d.f1 = in->X;
		d.n1 = in->X == NULL ? 0 : in->xk > 0 ? in->xk : in->k;
		d.bias = in->user_bias;
	}
	else
	{
		d.f1 = in->Y;
		d.n1 = in->Y2 ? in->k - in->k2 : in->k;
		d.f2 = in->Y2;
		d.n2 = in->Y2 ? in->k2 : 0;
		d.bias = in->item_bias;
	}
	for (int a = 0; a < 4; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (att->attisdropped)
			return false;
		d.col[a].attlen = att->attlen;
		d.col[a].attalign = att->attalign;
		d.col[a].packable = att->attlen == -1 && att->attstorage != TYPSTORAGE_PLAIN;
		/* the types the rows are formed for: anything else goes the usual way */
		if (att->attlen != (d.col[a].kind == COL_FACTORS || d.col[a].kind == COL_SEEN ? -1 :
							d.col[a].kind == COL_INDEX || d.col[a].kind == COL_BIAS ? 4 :
							d.kkind == GPUMF_KEY_INT ? (d.ktype == INT2OID ? 2 :
														d.ktype == INT4OID ? 4 : 8) :
							d.kkind == GPUMF_KEY_UUID ? UUID_LEN : -1))
			return false;
	}
	d.xid = GetCurrentTransactionId();
	d.cid = GetCurrentCommandId(true);

	/* the comparison with heap_form_tuple, before anything is written */
	scratch = palloc(MaxHeapTupleSize);
	for (int32 r = 0; r < nrows; r = r < CHECK_FIRST ? r + 1 : r + CHECK_EVERY)
	{
		HeapTuple	t = usual(usual_arg, r);
		bool		same;

		if (t->t_len > (uint32) limit)
			continue;			/* TOASTed: deferred */
		same = same_row(&d, r, t, scratch);
		heap_freetuple(t);
		if (!same)
		{
			ereport(WARNING,
					(errmsg("gpumf: row %d of %s is formed differently by the direct store; the table is written through the buffer pool",
							r, RelationGetRelationName(rel)),
					 errhint("Report this; SET gpumf.store_writes = 'ring_ahead' avoids the check.")));
			pfree(scratch);
			return false;
		}
	}
	pfree(scratch);

	/* 1. sizes (threads), then the packing (one pass) */
	len = palloc_extended((Size) nrows * sizeof(int32), MCXT_ALLOC_HUGE);
#pragma omp parallel for schedule(static) num_threads(threads) if (nrows > 100000)
	for (int32 r = 0; r < nrows; r++)
		len[r] = (int32) form_row(&d, r, NULL);
	CHECK_FOR_INTERRUPTS();
	{
		Size		avail = 0;
		int			count = 0;
		int64		cap = nrows / 2 + 16;

		first = palloc_extended((Size) cap * sizeof(int32), MCXT_ALLOC_HUGE);
		for (int32 r = 0; r < nrows; r++)
		{
			Size		need = MAXALIGN(len[r]) + sizeof(ItemIdData);

			if (len[r] > limit)
			{
				ndef++;
				continue;
			}
			if (nblocks == 0 || need > avail || count == MaxHeapTuplesPerPage)
			{
				if (nblocks + 2 > cap)
				{
					cap = cap * 2;
					first = repalloc_huge(first, (Size) cap * sizeof(int32));
				}
				first[nblocks++] = r;
				avail = BLCKSZ - SizeOfPageHeaderData;
				count = 0;
			}
			avail -= need;
			count++;
		}
		first[nblocks] = nrows;
		if (nblocks > (int64) MaxBlockNumber)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("gpumf: the factor table %s would take %lld pages, more than a table holds",
							RelationGetRelationName(rel), (long long) nblocks)));
	}
	*ndeferred = (int32) ndef;
	*deferred = NULL;
	if (ndef > 0)
	{
		int64		j = 0;

		*deferred = palloc_extended((Size) ndef * sizeof(int32), MCXT_ALLOC_HUGE);
		for (int32 r = 0; r < nrows; r++)
			if (len[r] > limit)
				(*deferred)[j++] = r;
	}

	/* 2. the chunks, segment-interleaved: a round's chunks lie in different files */
	nseg = (uint32) ((nblocks + RELSEG_SIZE - 1) / RELSEG_SIZE);
	chunks = palloc_extended(sizeof(Chunk) * (nblocks / CHUNK_PAGES + nseg + 1), MCXT_ALLOC_HUGE);
	for (int64 p = 0; (int64) p * CHUNK_PAGES < RELSEG_SIZE; p++)
		for (uint32 s = 0; s < nseg; s++)
		{
			int64		start = (int64) s * RELSEG_SIZE + p * CHUNK_PAGES;
			int64		end = Min(Min(start + CHUNK_PAGES, (int64) (s + 1) * RELSEG_SIZE), nblocks);

			if (start < end)
			{
				chunks[nchunks].start = (BlockNumber) start;
				chunks[nchunks].end = (BlockNumber) end;
				chunks[nchunks].err = 0;
				nchunks++;
			}
		}
#if PG_VERSION_NUM >= 180000
	relpath_main = pstrdup(relpathperm(REL_LOCATOR(rel), MAIN_FORKNUM).str);
#else
	relpath_main = relpathperm(REL_LOCATOR(rel), MAIN_FORKNUM);
#endif
	fds = palloc(sizeof(int) * nseg);
	paths = palloc(sizeof(char *) * nseg);
	for (uint32 s = 0; s < nseg; s++)
	{
		paths[s] = s == 0 ? relpath_main : psprintf("%s.%u", relpath_main, s);
		fds[s] = OpenTransientFile(paths[s], O_RDWR | O_CREAT | PG_BINARY);
		if (fds[s] < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", paths[s])));
	}
	threads = (int) Min((int64) threads, nchunks);
	stage_mem = palloc_extended((Size) 2 * threads * CHUNK_PAGES * BLCKSZ + STAGE_ALIGN,
								MCXT_ALLOC_HUGE);
	stage = (char *) TYPEALIGN(STAGE_ALIGN, stage_mem);
	blknos = palloc(sizeof(BlockNumber) * CHUNK_PAGES);
	pages = palloc(sizeof(char *) * CHUNK_PAGES);

	/*
	 * Round r's chunks are formed and written by the pool into half r % 2 of
	 * the staging memory; while the pool forms round r + 1 into the other
	 * half, this backend requests round r's fsyncs and inserts its WAL.
	 */
	memset(&pool, 0, sizeof(pool));
	pool.d = &d;
	pool.len = len;
	pool.limit = limit;
	pool.first = first;
	pool.checksums = checksums;
	pool.fds = fds;
	pool.chunks = chunks;
	pool.nthreads = threads;
	if (nchunks > 0)
	{
		pool_start(&pool);
		threads = pool.nthreads;	/* fewer, where fewer threads could start */
		PG_TRY();
		{
			int64		rounds = (nchunks + threads - 1) / threads;

			t = gm_now();
			pool_round(&pool, 0, Min((int64) threads, nchunks), stage);
			for (int64 r = 0; r < rounds; r++)
			{
				int64		c0 = r * threads;
				int			nc = (int) Min((int64) threads, nchunks - c0);
				char	   *half = stage + (Size) (r % 2) * threads * CHUNK_PAGES * BLCKSZ;
				bool		touched[64];

				pool_wait(&pool);
				t_pages += gm_now() - t;
				for (int j = 0; j < nc; j++)
					if (chunks[c0 + j].err != 0)
					{
						errno = chunks[c0 + j].err;
						ereport(ERROR,
								(errcode_for_file_access(),
								 errmsg("could not write blocks %u to %u in file \"%s\": %m",
										chunks[c0 + j].start, chunks[c0 + j].end - 1,
										paths[chunks[c0 + j].start / RELSEG_SIZE]),
								 errhint("Check free disk space.")));
					}
				t = gm_now();
				if (r + 1 < rounds)
					pool_round(&pool, c0 + threads, (int) Min((int64) threads, nchunks - c0 - threads),
							   stage + (Size) ((r + 1) % 2) * threads * CHUNK_PAGES * BLCKSZ);
				/* the fsync requests, then the WAL (see the file's comment) */
				memset(touched, 0, sizeof(touched));
				for (int j = 0; j < nc; j++)
				{
					uint32		sg = chunks[c0 + j].start / RELSEG_SIZE;

					if (sg >= 64 || !touched[sg])
						request_fsync(rel, MAIN_FORKNUM, sg, fds[sg], paths[sg]);
					if (sg < 64)
						touched[sg] = true;
				}
				for (int j = 0; j < nc && wal; j++)
				{
					Chunk	   *ch = &chunks[c0 + j];
					int			n = (int) (ch->end - ch->start);

					for (int i = 0; i < n; i++)
					{
						blknos[i] = ch->start + i;
						pages[i] = half + ((Size) j * CHUNK_PAGES + i) * BLCKSZ;
					}
					log_newpages(&REL_LOCATOR(rel), MAIN_FORKNUM, n, blknos, pages, true);
					/* the WAL writer writes it while more is inserted */
					XLogSetAsyncXactLSN(GetXLogInsertRecPtr());
				}
				t_wal += gm_now() - t;
				CHECK_FOR_INTERRUPTS();
				t = gm_now();
			}
		}
		PG_FINALLY();
		{
			pool_stop(&pool);
		}
		PG_END_TRY();
	}
	for (uint32 s = 0; s < nseg; s++)
		CloseTransientFile(fds[s]);

	/* 3. the visibility map */
	if (nblocks > 0)
		write_vm(rel, (BlockNumber) nblocks, wal, checksums);
	pgstat_count_heap_insert(rel, nrows - ndef);
	elog(DEBUG1, "gpumf: %s written directly in %.3f s: %lld pages formed and written by %d threads (%.3f s waited for them), their fsync requests and WAL in %.3f s, %lld rows left to TOAST",
		 RelationGetRelationName(rel), gm_now() - t0, (long long) nblocks, threads, t_pages, t_wal,
		 (long long) ndef);
	pfree(len);
	pfree(first);
	pfree(chunks);
	pfree(stage_mem);
	pfree(blknos);
	pfree(pages);
	return true;
}
