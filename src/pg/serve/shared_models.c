/*
 * shared_models.c: served model versions shared through dynamic shared
 * memory (gpumf.shared_models), for the backend cache (model_cache.c).
 *
 * The first backend that loads a model version copies what serving reads
 * of it (item factors, their int8 copy and scales, item biases and keys)
 * into a dynamic shared memory segment,
 * pins it, and lists its handle in a small registry that lives in the main
 * shared memory segment (allocated on first use from the room PostgreSQL
 * keeps for extensions, so gpumf needs no shared_preload_libraries).  Other
 * backends find the version there, keyed by database, model id, version and
 * the item table's OID and file node, and attach to it instead of reading
 * the table: a new session's first call maps memory rather than reading and
 * quantizing the factors, and all sessions hold one copy.  A segment is
 * unpinned (and freed once the last backend detaches) when a backend sees a
 * newer version of its model, when its tables are gone, when the model is
 * dropped, or when a retraining or a switch to a kept version commits.  The
 * version such a transaction makes current is read into shared memory by a
 * background worker as soon as it commits (warm_worker.c), so that no
 * serving call has to (for a model nobody serves yet too, unless
 * gpumf.warm_new_models is off).  Parallel workers (and a leader in
 * parallel mode) attach to a listed version but never list one
 * (that needs a subtransaction).  Where sharing cannot be had (the registry
 * is full, no dynamic shared memory is left, a parallel worker finds no
 * listed version), the backend serves from its own copy.
 */
#include "gpumf_serve.h"

#include <sys/mman.h>
#include <unistd.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "parser/parse_relation.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "funcapi.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

/*
 * Set while a training reads its new version into shared memory before it
 * commits (warm_worker.c): the versions it replaces stay listed (the commit's
 * worker lets them go), and a version that cannot be shared is an ERROR (the
 * caller's subtransaction takes it) instead of the session's own copy.
 */
bool		gpumf_served_warming = false;

#define REGISTRY_NAME		"gpumf shared models"
#define REGISTRY_SLOTS		128
#define SEGMENT_MAGIC		UINT64CONST(0x67706d667365676d)	/* "gpmfsegm" */

/* A model version served from a shared segment; dbid InvalidOid: a free slot. */
typedef struct SharedEntry
{
	Oid			dbid;
	Oid			item_rel;
	Oid			item_node;		/* the item table's relfilenode */
	int32		version;
	int64		model_id;
	dsm_handle	handle;
	Size		bytes;
} SharedEntry;

typedef struct SharedRegistry
{
	slock_t		mutex;
	SharedEntry entry[REGISTRY_SLOTS];
} SharedRegistry;

/* The head of a shared segment; the arrays follow at the offsets given. */
typedef struct SharedItems
{
	uint64		magic;
	Oid			dbid;
	Oid			item_rel;
	Oid			item_node;
	Oid			item_type;
	int64		model_id;
	int32		version;
	int32		k;
	int32		n;
	bool		has_bias;
	Size		y_off;			/* n x k floats */
	Size		q_off;			/* the int8 copy: gm_qmat_size(n, k) bytes */
	Size		bias_off;		/* n floats, or 0 */
	Size		keys_off;		/* int keys: n int64; uuid: n x 16 bytes; text: n Size offsets */
	Size		text_off;		/* text keys: the varlenas the offsets point at */
	Size		total;
} SharedItems;

static SharedRegistry *registry = NULL;

/* The registry, created by the first backend that asks (ERRORs when no room is left). */
static SharedRegistry *
registry_get(void)
{
	if (registry == NULL)
		registry = gpumf_shmem_struct(REGISTRY_NAME, sizeof(SharedRegistry),
									  offsetof(SharedRegistry, mutex));
	return registry;
}

/*
 * Run fn(arg) in a subtransaction: an ERROR it raises (no shared memory
 * left, say) is logged at DEBUG1 and turns into false, leaving the caller's
 * transaction as it was.  Not in parallel mode (no subtransactions there).
 */
static bool
try_quietly(void (*fn) (void *), void *arg)
{
	ErrorData  *e;

	if (IsInParallelMode() || !IsUnderPostmaster)
		return false;
	e = gpumf_try_subxact(fn, arg);
	if (e == NULL)
		return true;
	ereport(DEBUG1, (errmsg("gpumf: serving from backend memory: %s", e->message)));
	FreeErrorData(e);
	return false;
}

/*
 * Take the entries that `drop` selects out of the registry (under its lock)
 * and unpin their segments; each is freed when its last backend detaches.
 */
typedef bool (*EntryFilter) (const SharedEntry *e, const void *arg);

typedef struct ForgetArgs
{
	EntryFilter drop;
	const void *arg;
} ForgetArgs;

/*
 * The entries take_out_entries takes: of database db (any, if invalid), those
 * whose database is one of dbs, or (dbs NULL) whose handle is one of handles.
 */
typedef struct OidsOrHandles
{
	Oid			db;
	const Oid  *dbs;
	const dsm_handle *handles;
	int			n;
} OidsOrHandles;

/*
 * Take the entries w selects out of the registry (under its lock) and unpin
 * their segments; returns how many.  A listed segment is pinned, and the
 * backend that takes its entry out unpins it (it is freed when its last
 * backend detaches).  Entries another backend took out meanwhile are that
 * backend's to unpin.
 */
static int
take_out_entries(SharedRegistry *reg, const OidsOrHandles *w)
{
	dsm_handle	removed[REGISTRY_SLOTS];
	int			nremoved = 0;

	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS; i++)
	{
		SharedEntry *e = &reg->entry[i];

		if (e->dbid == InvalidOid || (OidIsValid(w->db) && e->dbid != w->db))
			continue;
		for (int g = 0; g < w->n; g++)
			if (w->dbs ? e->dbid == w->dbs[g] : e->handle == w->handles[g])
			{
				removed[nremoved++] = e->handle;
				memset(e, 0, sizeof(*e));
				break;
			}
	}
	SpinLockRelease(&reg->mutex);
	for (int g = 0; g < nremoved; g++)
		dsm_unpin_segment(removed[g]);
	return nremoved;
}

static void
forget_entries_in(void *p)
{
	ForgetArgs *a = p;
	SharedRegistry *reg = registry_get();
	SharedEntry mine[REGISTRY_SLOTS];
	dsm_handle	gone[REGISTRY_SLOTS];
	int			nmine = 0,
				ngone = 0;

	/* the filter may look at the catalog: not under the spinlock */
	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS; i++)
		if (reg->entry[i].dbid == MyDatabaseId)
			mine[nmine++] = reg->entry[i];
	SpinLockRelease(&reg->mutex);
	for (int i = 0; i < nmine; i++)
		if (a->drop(&mine[i], a->arg))
			gone[ngone++] = mine[i].handle;
	if (ngone > 0)
	{
		OidsOrHandles h = {MyDatabaseId, NULL, gone, ngone};

		(void) take_out_entries(reg, &h);
	}
}

/* Let go of the shared versions of this database that drop selects (errors only logged). */
static void
forget_entries(EntryFilter drop, const void *arg)
{
	ForgetArgs	a = {drop, arg};

	if (registry == NULL && !gpumf_shared_models)
		return;
	(void) try_quietly(forget_entries_in, &a);
}

/* entries of model *arg (every version) */
static bool
entry_of_model(const SharedEntry *e, const void *arg)
{
	return e->model_id == *(const int64 *) arg;
}

/* entries of the model whose version is older than the one given */
typedef struct ModelVersion
{
	int64		id;
	int32		version;
} ModelVersion;

static bool
entry_older(const SharedEntry *e, const void *arg)
{
	const ModelVersion *mv = arg;

	return e->model_id == mv->id && e->version < mv->version;
}

/* entries of the model with a version other than the one given */
static bool
entry_other_version(const SharedEntry *e, const void *arg)
{
	const ModelVersion *mv = arg;

	return e->model_id == mv->id && e->version != mv->version;
}

/* entries whose item table is gone */
static bool
entry_dropped(const SharedEntry *e, const void *arg)
{
	return !SearchSysCacheExists1(RELOID, ObjectIdGetDatum(e->item_rel));
}

/* Stop sharing every version of a model: it was retrained or dropped. */
void
gpumf_served_forget(int64 model_id)
{
	forget_entries(entry_of_model, &model_id);
}

/* Stop sharing the versions of this database whose item tables are gone. */
void
gpumf_served_forget_dropped(void)
{
	if (registry)
		forget_entries(entry_dropped, NULL);
}

/* Stop sharing the model's versions other than version (see gpumf_serve.h). */
void
gpumf_served_forget_other_versions(int64 model_id, int32 version)
{
	ModelVersion mv = {model_id, version};

	forget_entries(entry_other_version, &mv);
}

/* ------------------------------------------------------ shared segments */

/* the key a version is shared under */
typedef struct SharedKey
{
	Oid			item_rel;
	Oid			item_node;
	int64		model_id;
	int32		version;
} SharedKey;

/* Is e the entry of this database's version key? */
static bool
entry_matches(const SharedEntry *e, const SharedKey *key)
{
	return e->dbid == MyDatabaseId && e->item_rel == key->item_rel &&
		e->item_node == key->item_node && e->model_id == key->model_id &&
		e->version == key->version;
}

/*
 * The total the listed segments may hold (gpumf.shared_models_memory; -1: a
 * quarter of the machine's memory).
 */
static Size
shared_cap(void)
{
	if (gpumf_shared_models_memory_mb >= 0)
		return (Size) gpumf_shared_models_memory_mb * 1024 * 1024;
	{
		long		pages = sysconf(_SC_PHYS_PAGES);
		long		page = sysconf(_SC_PAGESIZE);

		if (pages <= 0 || page <= 0)
			return (Size) 1 << 38;
		return (Size) pages * (Size) page / 4;
	}
}

/*
 * Bytes of the segments listed now, less those of key's model's older
 * versions in this database (let go as soon as key's version is listed).
 * The caller holds the registry's spinlock.
 */
static Size
listed_bytes_locked(SharedRegistry *reg, const SharedKey *key)
{
	Size		total = 0;

	for (int i = 0; i < REGISTRY_SLOTS; i++)
	{
		const SharedEntry *e = &reg->entry[i];

		if (e->dbid == InvalidOid)
			continue;
		if (e->dbid == MyDatabaseId && e->model_id == key->model_id && e->version < key->version)
			continue;
		total = add_size(total, e->bytes);
	}
	return total;
}

/* What a refused segment needed, for the ERROR its caller raises. */
typedef struct CapRefusal
{
	bool		refused;
	Size		need;			/* the segment */
	Size		listed;			/* the listed segments */
	Size		cap;
} CapRefusal;

/* May a segment of bytes be listed beside the others?  Else *r says why not. */
static bool
cap_allows_locked(SharedRegistry *reg, const SharedKey *key, Size bytes, CapRefusal *r)
{
	Size		listed = listed_bytes_locked(reg, key),
				cap = shared_cap();

	if (bytes <= cap && listed <= cap - bytes)
		return true;
	r->refused = true;
	r->need = bytes;
	r->listed = listed;
	r->cap = cap;
	return false;
}

static bool
cap_allows(const SharedKey *key, Size bytes, CapRefusal *r)
{
	SharedRegistry *reg = registry_get();
	bool		ok;

	SpinLockAcquire(&reg->mutex);
	ok = cap_allows_locked(reg, key, bytes, r);
	SpinLockRelease(&reg->mutex);
	return ok;
}

/* The ERROR for a version whose segment would take the listed ones past the cap. */
static void
cap_refused(const CapRefusal *r, const char *model, int32 version)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("shared memory for models is full: model \"%s\" version %d needs %.1f MB, %.1f MB of gpumf.shared_models_memory (%.1f MB) are in use",
					model, version, r->need / 1048576.0, r->listed / 1048576.0, r->cap / 1048576.0),
			 errhint("A superuser can raise gpumf.shared_models_memory (in postgresql.conf or with ALTER SYSTEM, then reload), drop models nobody serves, or SET gpumf.shared_models = off to serve from each session's own memory; gpumf_shared_models() lists the segments.")));
}

/* The head and array offsets of a segment for n items. */
static void
segment_layout(SharedItems *h, const SharedKey *key, const GpumfServed *m, int32 n,
			   bool bias, Size text_bytes)
{
	Size		off = MAXALIGN(sizeof(SharedItems));

	memset(h, 0, sizeof(*h));
	h->magic = SEGMENT_MAGIC;
	h->dbid = MyDatabaseId;
	h->item_rel = key->item_rel;
	h->item_node = key->item_node;
	h->item_type = m->item_type;
	h->model_id = key->model_id;
	h->version = key->version;
	h->k = m->k;
	h->n = n;
	h->has_bias = bias;
	/* 64-byte aligned arrays, as the scoring loops like them */
	h->y_off = off = TYPEALIGN(64, off);
	off += sizeof(float) * (Size) n * m->k;
	h->q_off = off = TYPEALIGN(64, off);
	off += gm_qmat_size(n, m->k);
	if (bias)
	{
		h->bias_off = off = TYPEALIGN(64, off);
		off += sizeof(float) * (Size) n;
	}
	h->keys_off = off = TYPEALIGN(64, off);
	if (m->item_type == UUIDOID)
		off += (Size) n * UUID_LEN;
	else if (m->item_type == TEXTOID)
	{
		off += sizeof(Size) * (Size) n;
		h->text_off = off = MAXALIGN(off);
		off += text_bytes;
	}
	else
		off += sizeof(int64) * (Size) n;
	h->total = off;
}

/*
 * Create a segment of `bytes` and map all its pages now, in one call
 * (MADV_POPULATE_WRITE, Linux 5.14): faulting 100 MB in page by page as the
 * arrays are written costs more than reading them.  Where the call is not
 * known the pages are faulted in as they are written.
 */
static dsm_segment *
segment_create(Size bytes)
{
	dsm_segment *seg = dsm_create(bytes, 0);

#ifdef MADV_POPULATE_WRITE
	(void) madvise((void *) TYPEALIGN_DOWN(sysconf(_SC_PAGESIZE), dsm_segment_address(seg)),
				   bytes, MADV_POPULATE_WRITE);
#endif
	return seg;
}

/* Point m at the arrays of a mapped segment; item keys as Datums into it. */
static void
use_segment(GpumfServed *m, dsm_segment *seg)
{
	char	   *base = dsm_segment_address(seg);
	SharedItems *h = (SharedItems *) base;

	m->seg = seg;
	m->n_items = h->n;
	m->Y = (float *) (base + h->y_off);
	m->item_bias = h->has_bias ? (float *) (base + h->bias_off) : NULL;
	if (gm_qmat_attach(base + h->q_off, h->n, h->k, &m->Q) != GM_OK)
		elog(ERROR, "gpumf: a shared segment of model \"%s\" is damaged", m->name);
	m->item_keys = MemoryContextAllocHuge(m->cxt, sizeof(Datum) * Max(h->n, 1));
	for (int32 i = 0; i < h->n; i++)
	{
		switch (h->item_type)
		{
			case INT2OID:
				m->item_keys[i] = Int16GetDatum((int16) ((int64 *) (base + h->keys_off))[i]);
				break;
			case INT4OID:
				m->item_keys[i] = Int32GetDatum((int32) ((int64 *) (base + h->keys_off))[i]);
				break;
			case INT8OID:
				m->item_keys[i] = Int64GetDatum(((int64 *) (base + h->keys_off))[i]);
				break;
			case UUIDOID:
				m->item_keys[i] = PointerGetDatum(base + h->keys_off + (Size) i * UUID_LEN);
				break;
			default:
				m->item_keys[i] = PointerGetDatum(base + h->text_off +
												  ((Size *) (base + h->keys_off))[i]);
				break;
		}
	}
}

typedef struct AttachArgs
{
	GpumfServed *m;
	const SharedKey *key;
	bool		attached;
} AttachArgs;

/* Attach to the version's segment if the registry lists it. */
static void
attach_in(void *p)
{
	AttachArgs *a = p;
	SharedRegistry *reg = registry_get();
	dsm_handle	handle = DSM_HANDLE_INVALID;
	dsm_segment *seg;
	SharedItems *h;

	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS; i++)
		if (entry_matches(&reg->entry[i], a->key))
		{
			handle = reg->entry[i].handle;
			break;
		}
	SpinLockRelease(&reg->mutex);
	if (handle == DSM_HANDLE_INVALID)
		return;
	/* NULL: unpinned and freed since we looked */
	if ((seg = dsm_attach(handle)) == NULL)
		return;
	h = dsm_segment_address(seg);
	if (dsm_segment_map_length(seg) < sizeof(SharedItems) || h->magic != SEGMENT_MAGIC ||
		h->dbid != MyDatabaseId || h->item_rel != a->key->item_rel ||
		h->item_node != a->key->item_node || h->model_id != a->key->model_id ||
		h->version != a->key->version || h->k != a->m->k ||
		h->item_type != a->m->item_type || h->total > dsm_segment_map_length(seg))
	{
		dsm_detach(seg);
		return;
	}
	dsm_pin_mapping(seg);
	use_segment(a->m, seg);
	a->attached = true;
}

/*
 * Pin a filled segment and list it: true when listed (pinned, mapped for the
 * backend's life).  Not listed (another backend listed the version
 * meanwhile, or no slot is free): unpinned and detached, so freed.
 */
static bool
list_segment(dsm_segment *seg, const SharedKey *key, CapRefusal *r)
{
	SharedRegistry *reg = registry_get();
	SharedItems *h = dsm_segment_address(seg);
	int			slot = -1;

	/* pinned before it is listed: a listed segment outlives its creator */
	dsm_pin_segment(seg);
	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS; i++)
	{
		if (entry_matches(&reg->entry[i], key))
		{
			slot = -1;
			break;
		}
		if (slot < 0 && reg->entry[i].dbid == InvalidOid)
			slot = i;
	}
	/* the cap, counted again under the lock: two backends may have looked at once */
	if (slot >= 0 && !cap_allows_locked(reg, key, h->total, r))
		slot = -1;
	if (slot >= 0)
	{
		SharedEntry *e = &reg->entry[slot];

		e->dbid = MyDatabaseId;
		e->item_rel = key->item_rel;
		e->item_node = key->item_node;
		e->model_id = key->model_id;
		e->version = key->version;
		e->handle = dsm_segment_handle(seg);
		e->bytes = h->total;
	}
	SpinLockRelease(&reg->mutex);
	if (slot < 0)
	{
		dsm_unpin_segment(dsm_segment_handle(seg));
		dsm_detach(seg);
		return false;
	}
	dsm_pin_mapping(seg);
	return true;
}

/* whether the registry has a free slot now */
static bool
registry_has_room(SharedRegistry *reg)
{
	bool		room = false;

	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS && !room; i++)
		room = reg->entry[i].dbid == InvalidOid;
	SpinLockRelease(&reg->mutex);
	return room;
}

/*
 * Take out the entries of databases that no longer exist and unpin their
 * segments.  Entries are otherwise released only by backends of their own
 * database, so a dropped database's versions would stay listed (and their
 * memory pinned) until the server restarts: no backend can be connected to
 * a database that is gone.
 */
static void
forget_dropped_databases(SharedRegistry *reg)
{
	Oid			dbs[REGISTRY_SLOTS];
	Oid			gone[REGISTRY_SLOTS];
	int			ndbs = 0,
				ngone = 0,
				n;
	OidsOrHandles w = {InvalidOid, gone, NULL, 0};

	/* the catalog is not looked at under the spinlock */
	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS; i++)
	{
		Oid			db = reg->entry[i].dbid;
		bool		seen = db == InvalidOid || db == MyDatabaseId;

		for (int j = 0; j < ndbs && !seen; j++)
			seen = dbs[j] == db;
		if (!seen)
			dbs[ndbs++] = db;
	}
	SpinLockRelease(&reg->mutex);
	for (int j = 0; j < ndbs; j++)
		if (!SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dbs[j])))
			gone[ngone++] = dbs[j];
	if (ngone == 0)
		return;
	w.n = ngone;
	n = take_out_entries(reg, &w);
	ereport(DEBUG1,
			(errmsg("gpumf: released %d shared model versions of %d dropped databases", n, ngone)));
}

/*
 * A free slot now (one may still be gone when the segment is listed).  The
 * versions of dropped databases are released first: a version is listed
 * once per server, so the look at pg_database is rare.
 */
static void
check_registry_room(void)
{
	SharedRegistry *reg = registry_get();

	forget_dropped_databases(reg);
	if (!registry_has_room(reg))
		elog(ERROR, "the registry of shared models is full (%d versions)", REGISTRY_SLOTS);
}

typedef struct PublishArgs
{
	GpumfServed *m;
	const GpumfModel *cat;
	Relation	rel;
	const SharedKey *key;
	dsm_segment *seg;			/* out: listed and mapped */
	CapRefusal	refusal;		/* out: not listed for gpumf.shared_models_memory */
	double		t_create;		/* out: seconds creating the segment, */
	double		t_scan;			/* reading the table into it, */
	double		t_int8;			/* building the int8 copy */
	bool		at_hand;		/* out: the items copied from gpumf_served_at_hand */
} PublishArgs;

/*
 * Read the items straight into a new segment sized by the table's row count
 * (fixed-size keys), build the int8 copy there and list it.  PublishArgs.seg
 * stays NULL when the count was off or the version could not be listed.
 */
static void
publish_direct_in(void *p)
{
	PublishArgs *a = p;
	GpumfServed *m = a->m;
	int64		n = (int64) a->rel->rd_rel->reltuples;
	SharedItems hdr;
	GpumfItemArrays d;
	gm_qmat		Q;
	dsm_segment *seg;
	char	   *base;

	double		t0 = gm_now(),
				t1,
				t2;

	check_registry_room();
	segment_layout(&hdr, a->key, m, (int32) n, a->cat->has_bias, 0);
	if (!cap_allows(a->key, hdr.total, &a->refusal))
		return;
	seg = segment_create(hdr.total);
	base = dsm_segment_address(seg);
	memcpy(base, &hdr, sizeof(hdr));
	t1 = gm_now();
	memset(&d, 0, sizeof(d));
	d.cap = n;
	d.fixed = true;
	d.Y = (float *) (base + hdr.y_off);
	d.bias = hdr.has_bias ? (float *) (base + hdr.bias_off) : NULL;
	if (m->item_type == UUIDOID)
		d.ukeys = base + hdr.keys_off;
	else
		d.ikeys = (int64 *) (base + hdr.keys_off);
	if (gpumf_served_copy_at_hand(m, a->cat, n, &d))
		a->at_hand = true;
	else if (gpumf_served_scan_items(a->rel, a->cat, m, &d) != n)
	{
		dsm_detach(seg);		/* never pinned: freed */
		return;
	}
	t2 = gm_now();
	if (gm_qmat_build_in(d.Y, (int32) n, m->k, base + hdr.q_off, &Q, 0) != GM_OK)
		elog(ERROR, "gpumf: cannot quantize the item factors of model \"%s\"", a->cat->name);
	a->t_create = t1 - t0;
	a->t_scan = t2 - t1;
	a->t_int8 = gm_now() - t2;
	if (list_segment(seg, a->key, &a->refusal))
		a->seg = seg;
}

/* Copy a version loaded into backend memory into a new segment and list it. */
static void
publish_copy_in(void *p)
{
	PublishArgs *a = p;
	GpumfServed *m = a->m;
	int32		n = m->n_items;
	Size		text_bytes = 0;
	SharedItems hdr;
	gm_qmat		Q;
	dsm_segment *seg;
	char	   *base;

	check_registry_room();
	if (m->item_type == TEXTOID)
		for (int32 i = 0; i < n; i++)
			text_bytes += INTALIGN(VARSIZE_ANY_EXHDR(DatumGetPointer(m->item_keys[i])) + VARHDRSZ);
	segment_layout(&hdr, a->key, m, n, m->item_bias != NULL, text_bytes);
	if (!cap_allows(a->key, hdr.total, &a->refusal))
		return;
	seg = segment_create(hdr.total);
	base = dsm_segment_address(seg);
	memcpy(base, &hdr, sizeof(hdr));
	memcpy(base + hdr.y_off, m->Y, sizeof(float) * (Size) n * m->k);
	if (gm_qmat_build_in((float *) (base + hdr.y_off), n, m->k, base + hdr.q_off, &Q, 0) != GM_OK)
		elog(ERROR, "gpumf: cannot quantize the item factors of model \"%s\"", a->cat->name);
	if (m->item_bias)
		memcpy(base + hdr.bias_off, m->item_bias, sizeof(float) * (Size) n);
	if (m->item_type == TEXTOID)
	{
		Size		t = 0;

		for (int32 i = 0; i < n; i++)
		{
			Pointer		v = DatumGetPointer(m->item_keys[i]);
			Size		len = VARSIZE_ANY_EXHDR(v);

			/* a 4-byte header, so that a Datum pointing here is a plain text */
			((Size *) (base + hdr.keys_off))[i] = t;
			SET_VARSIZE(base + hdr.text_off + t, len + VARHDRSZ);
			memcpy(VARDATA(base + hdr.text_off + t), VARDATA_ANY(v), len);
			t += INTALIGN(len + VARHDRSZ);
		}
	}
	else if (m->item_type == UUIDOID)
	{
		for (int32 i = 0; i < n; i++)
			memcpy(base + hdr.keys_off + (Size) i * UUID_LEN,
				   DatumGetUUIDP(m->item_keys[i])->data, UUID_LEN);
	}
	else
	{
		for (int32 i = 0; i < n; i++)
			((int64 *) (base + hdr.keys_off))[i] =
				m->item_type == INT2OID ? DatumGetInt16(m->item_keys[i]) :
				m->item_type == INT4OID ? DatumGetInt32(m->item_keys[i]) :
				DatumGetInt64(m->item_keys[i]);
	}
	if (list_segment(seg, a->key, &a->refusal))
		a->seg = seg;
}

/*
 * Load the model's current version: attach to its shared segment if one is
 * listed; else read the table, into a new shared segment when sharing is on
 * (straight into it when the keys have a fixed size), into backend memory
 * otherwise.
 */
void
gpumf_served_load_version(GpumfServed *m, const GpumfModel *cat)
{
	bool		keep_older = gpumf_served_warming;
	Relation	rel = table_open(m->item_rel, NoLock);
	SharedKey	key;
	ModelVersion mv = {cat->id, cat->version};
	PublishArgs pub = {m, cat, rel, &key, NULL, {false, 0, 0, 0}, 0, 0, 0, false};
	double		t0 = gm_now(),
				t1;

	m->cxt = AllocSetContextCreate(TopMemoryContext, "gpumf served model",
								   ALLOCSET_DEFAULT_SIZES);
	memset(&key, 0, sizeof(key));
	key.item_rel = m->item_rel;
	key.item_node = gm_rel_filenumber(rel);
	key.model_id = cat->id;
	key.version = cat->version;
	if (gpumf_shared_models)
	{
		AttachArgs	a = {m, &key, false};

		/*
		 * In parallel mode (a parallel plan's workers and leader) there are
		 * no subtransactions: attach without one (its errors are rare: no
		 * slot for another mapping), but never publish.
		 */
		if (IsInParallelMode())
			attach_in(&a);
		else
			(void) try_quietly(attach_in, &a);
		if (a.attached)
		{
			table_close(rel, NoLock);
			if (!keep_older)
				forget_entries(entry_older, &mv);
			elog(DEBUG1, "gpumf: model \"%s\" version %d attached in %.3f s",
				 cat->name, cat->version, gm_now() - t0);
			return;
		}
		if (m->item_type != TEXTOID && rel->rd_rel->reltuples >= 1 &&
			(double) rel->rd_rel->reltuples <= (double) PG_INT32_MAX &&
			try_quietly(publish_direct_in, &pub) && pub.seg)
		{
			table_close(rel, NoLock);
			use_segment(m, pub.seg);
			if (!keep_older)
				forget_entries(entry_older, &mv);
			elog(DEBUG1, "gpumf: model \"%s\" version %d read into shared memory in %.3f s "
				 "(segment created in %.3f s, %s in %.3f s, int8 copy in %.3f s)",
				 cat->name, cat->version, gm_now() - t0, pub.t_create,
				 pub.at_hand ? "items copied from the training" : "table read", pub.t_scan, pub.t_int8);
			return;
		}
		if (pub.refusal.refused)
		{
			/* the replaced versions go all the same: this one is current */
			table_close(rel, NoLock);
			if (!keep_older)
				forget_entries(entry_older, &mv);
			cap_refused(&pub.refusal, cat->name, cat->version);
		}
	}
	gpumf_served_load_private(m, cat, rel);
	table_close(rel, NoLock);
	t1 = gm_now();
	if (gpumf_shared_models && pub.seg == NULL && try_quietly(publish_copy_in, &pub) && pub.seg)
	{
		/* serve from the segment; the backend's copy goes */
		MemoryContextReset(m->cxt);
		use_segment(m, pub.seg);
		if (!keep_older)
			forget_entries(entry_older, &mv);
		elog(DEBUG1, "gpumf: model \"%s\" version %d read in %.3f s, shared in %.3f s",
			 cat->name, cat->version, t1 - t0, gm_now() - t1);
		return;
	}
	if (pub.refusal.refused)
	{
		if (!keep_older)
			forget_entries(entry_older, &mv);
		cap_refused(&pub.refusal, cat->name, cat->version);
	}
	if (keep_older)				/* warming before the commit: a copy of its own is of no use */
		ereport(ERROR,
				(errmsg("model \"%s\" version %d could not be shared", cat->name, cat->version)));
	{
		/* the int8 copy in the version's context, 64-byte aligned, built by every core */
		char	   *mem = MemoryContextAllocHuge(m->cxt, gm_qmat_size(m->n_items, m->k) + 64);

		if (gm_qmat_build_in(m->Y, m->n_items, m->k, (void *) TYPEALIGN(64, mem), &m->Q, 0) != GM_OK)
			elog(ERROR, "gpumf: cannot quantize the item factors of model \"%s\"", cat->name);
	}
	elog(DEBUG1, "gpumf: model \"%s\" version %d read in %.3f s, quantized in %.3f s",
		 cat->name, cat->version, t1 - t0, gm_now() - t1);
}

PG_FUNCTION_INFO_V1(gpumf_shared_models_list);

/*
 * gpumf_shared_models(): the model versions of this database served from
 * shared memory, with the segment's size.
 */
Datum
gpumf_shared_models_list(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SharedEntry mine[REGISTRY_SLOTS];
	int			n = 0;

	InitMaterializedSRF(fcinfo, 0);
	/* versions whose tables are gone (a DROP EXTENSION, say) are let go first */
	forget_entries(entry_dropped, NULL);
	(void) registry_get();
	if (registry)
	{
		SpinLockAcquire(&registry->mutex);
		for (int i = 0; i < REGISTRY_SLOTS; i++)
			if (registry->entry[i].dbid == MyDatabaseId)
				mine[n++] = registry->entry[i];
		SpinLockRelease(&registry->mutex);
	}
	for (int i = 0; i < n; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = Int64GetDatum(mine[i].model_id);
		values[1] = Int32GetDatum(mine[i].version);
		values[2] = ObjectIdGetDatum(mine[i].item_rel);
		values[3] = Int64GetDatum((int64) mine[i].bytes);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ------------------------------------------- who serves a model */

/* Is a version of the model listed in the registry (someone serves it)? */
typedef struct SharedQuery
{
	int64		model_id;
	bool		found;
} SharedQuery;

static void
model_is_shared_in(void *p)
{
	SharedQuery *a = p;
	SharedRegistry *reg = registry_get();

	SpinLockAcquire(&reg->mutex);
	for (int i = 0; i < REGISTRY_SLOTS && !a->found; i++)
		a->found = reg->entry[i].dbid == MyDatabaseId && reg->entry[i].model_id == a->model_id;
	SpinLockRelease(&reg->mutex);
}

bool
gpumf_served_model_is_shared(int64 model_id)
{
	SharedQuery a = {model_id, false};

	/* the registry may have to be made (an ERROR there is no reason to fail the caller) */
	return try_quietly(model_is_shared_in, &a) && a.found;
}
