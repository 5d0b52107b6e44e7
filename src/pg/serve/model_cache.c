/*
 * model_cache.c: models served from backend memory.
 *
 * A model's item factors (and an int8 copy for the first scoring pass) are
 * read once per backend and model version.  Each call looks the model up in
 * the catalog as of the statement's snapshot (to notice a retraining, and so
 * that one statement sees one version), locks its factor tables, checks the
 * caller's SELECT privilege on them, and reads the user's row through the
 * users table's primary key.  Everything is read directly (heap and index
 * scans, the key type's own btree equality), not through SQL, so nothing of
 * the caller's search_path or temp schema is ever consulted.
 *
 * Entries whose tables were dropped (a dropped model, a replaced version
 * whose retired tables were dropped) are freed: a relcache invalidation
 * marks the cache for a sweep on the next call.
 *
 * This file is the cache itself (a hash table by model name, its sweep,
 * the lookup, locks and privilege check of gpumf_served_get).  Reading a
 * version's tables is served_tables.c's, sharing it through shared memory
 * shared_models.c's, and warming a version when its training commits
 * warm_worker.c's; what serving builds on a version is serving.c's.
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

static HTAB *served = NULL;
static bool sweep_pending = false;

/* ------------------------------------------------------ cache entries */

static void
relcache_changed(Datum arg, Oid relid)
{
	sweep_pending = true;
}

static void
served_release(GpumfServed *m)
{
	gpumf_serving_free(m);
	if (m->cxt)
		MemoryContextDelete(m->cxt);
	if (m->seg)
		dsm_detach(m->seg);		/* Y and Q live in the segment */
	gm_qmat_free(&m->Q);		/* frees nothing: Q's memory was the context's or the segment's */
	memset(&m->Q, 0, sizeof(m->Q));
	m->seg = NULL;
	m->cxt = NULL;
	m->Y = NULL;
	m->item_bias = NULL;
	m->item_keys = NULL;
	m->scratch = NULL;
	m->id = -1;
	m->user_rel = m->item_rel = InvalidOid;
}

static bool
rel_exists(Oid relid)
{
	return OidIsValid(relid) && SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid));
}

/*
 * Free the entries whose factor tables no longer exist, and unpin the
 * shared segments of this database whose item tables are gone.
 */
static void
sweep(void)
{
	HASH_SEQ_STATUS st;
	GpumfServed *m;

	sweep_pending = false;
	hash_seq_init(&st, served);
	while ((m = hash_seq_search(&st)) != NULL)
	{
		if (m->id >= 0 && rel_exists(m->item_rel) && rel_exists(m->user_rel))
			continue;
		served_release(m);
		hash_search(served, m->name, HASH_REMOVE, NULL);
	}
	gpumf_served_forget_dropped();
}

static Oid
table_oid(const char *qname)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(gm_qualified_name_list(qname)),
							NoLock, true);
}

/* Lock a factor table for reading; false when it was dropped meanwhile. */
static bool
lock_table(Oid relid)
{
	if (!OidIsValid(relid))
		return false;
	LockRelationOid(relid, AccessShareLock);
	if (!rel_exists(relid))
	{
		UnlockRelationOid(relid, AccessShareLock);
		return false;
	}
	return true;
}

/*
 * Take a model out of this backend's cache (what it holds of the version:
 * its mapping of the shared segment, or its own copy).  A shared segment
 * stays listed for the other sessions.
 */
void
gpumf_served_forget_local(const char *name)
{
	GpumfServed *m;

	if (served == NULL)
		return;
	m = hash_search(served, name, HASH_FIND, NULL);
	if (m)
	{
		served_release(m);
		hash_search(served, name, HASH_REMOVE, NULL);
	}
}

/* The model's current version, loaded if needed (see gpumf_serve.h). */
GpumfServed *
gpumf_served_get(const char *name)
{
	GpumfServed *m = NULL;

	if (served == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = GPUMF_MODEL_NAME_MAX + 1;
		ctl.entrysize = sizeof(GpumfServed);
		served = hash_create("gpumf served models", 16, &ctl, HASH_ELEM | HASH_STRINGS);
		CacheRegisterRelcacheCallback(relcache_changed, (Datum) 0);
		/* a backend's first call looks for shared versions whose tables are gone */
		sweep_pending = true;
	}
	if (sweep_pending)
		sweep();
	gpumf_check_model_name(name);

	/* a retraining that commits between our catalog read and the lock: retry */
	for (int attempt = 0;; attempt++)
	{
		GpumfModel	cat;
		Oid			urel,
					irel;
		bool		found;

		if (attempt > 10 || (attempt > 0 && IsInParallelMode()))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("model \"%s\" kept changing while being read", name),
					 errhint("The statement might succeed if retried.")));
		gpumf_served_latest = attempt > 0;
		if (!gpumf_model_lookup_as_of(name, &cat, gpumf_served_snapshot()))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("model \"%s\" does not exist", name),
					 errhint("SELECT name FROM gpumf.models lists the models.")));
		urel = table_oid(cat.user_table);
		irel = table_oid(cat.item_table);
		if (!lock_table(urel) || !lock_table(irel))
			continue;
		/* at every call: a role that lost access is not served from memory */
		gpumf_model_check_read(name, cat.id, urel, irel);
		m = hash_search(served, cat.name, HASH_ENTER, &found);
		if (!found)
		{
			memset(((char *) m) + sizeof(m->name), 0, sizeof(GpumfServed) - sizeof(m->name));
			m->id = -1;
		}
		if (m->id != cat.id || m->version != cat.version || m->user_rel != urel ||
			m->item_rel != irel)
		{
			served_release(m);
			m->k = cat.factors;
			m->user_type = cat.user_type;
			m->item_type = cat.item_type;
			m->user_rel = urel;
			m->item_rel = irel;
			m->has_bias = cat.has_bias;
			m->global_mean = cat.has_bias ? cat.global_mean : 0.0;
			PG_TRY();
			{
				gpumf_served_load_version(m, &cat);
				gpumf_served_prepare_user_lookup(m, &cat);
				m->scratch = MemoryContextAllocHuge(m->cxt, sizeof(float) *
													gm_topk_dot_scratch(&m->Q));
				gpumf_serving_reset(m, &cat);
			}
			PG_CATCH();
			{
				served_release(m);
				hash_search(served, cat.name, HASH_REMOVE, NULL);
				PG_RE_THROW();
			}
			PG_END_TRY();
			m->id = cat.id;
			m->version = cat.version;
		}
		return m;
	}
}
