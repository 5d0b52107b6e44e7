/*
 * pg_compat.h: every difference between the PostgreSQL majors gpumf builds
 * against, in one place, behind PG_VERSION_NUM.
 *
 * Tested: 15 (Debian 12), 16.2 and 18.6 (binary builds with PGXS).  17 is
 * not built here: each switch below was checked against the release that
 * made the change, so 17 takes the branch its API has.  The rest of the
 * source calls only the gm_ names below where the majors differ; it never
 * tests PG_VERSION_NUM itself.
 *
 * Included by gpumf_pg.h after postgres.h.
 */
#ifndef GPUMF_PG_COMPAT_H
#define GPUMF_PG_COMPAT_H

#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "gpumf needs PostgreSQL 15 or later"
#endif

/*
 * A function that never returns: 18 replaced pg_attribute_noreturn(), which
 * came after a declaration's specifiers, with pg_noreturn before them
 */
#if PG_VERSION_NUM >= 180000
#define GM_NORETURN pg_noreturn
#else
#define GM_NORETURN pg_attribute_noreturn()
#endif

/*
 * A qualified name ("schema.table", quoted or not) as a List of String
 * nodes.  16 added a soft-error context argument; NULL keeps the old
 * behaviour (a malformed name is an ERROR).
 */
#if PG_VERSION_NUM >= 160000
#define gm_qualified_name_list(s)	stringToQualifiedNameList((s), NULL)
#else
#define gm_qualified_name_list(s)	stringToQualifiedNameList(s)
#endif

/*
 * The relation's file number (what TRUNCATE, CLUSTER and VACUUM FULL
 * change): 16 renamed RelFileNode rd_node.relNode to RelFileLocator
 * rd_locator.relNumber (a RelFileNumber, an Oid either way).
 */
#if PG_VERSION_NUM >= 160000
#define gm_rel_filenumber(rel)		((Oid) (rel)->rd_locator.relNumber)
#else
#define gm_rel_filenumber(rel)		((Oid) (rel)->rd_node.relNode)
#endif

/*
 * A schema's ACL check: 16 folded pg_namespace_aclcheck and its siblings
 * into object_aclcheck(class, oid, role, mode).
 */
#if PG_VERSION_NUM >= 160000
#define gm_namespace_aclcheck(nsp, role, mode) \
	object_aclcheck(NamespaceRelationId, (nsp), (role), (mode))
#else
#define gm_namespace_aclcheck(nsp, role, mode) \
	pg_namespace_aclcheck((nsp), (role), (mode))
#endif

/*
 * An index scan with no EXPLAIN instrumentation: 18 added the
 * IndexScanInstrumentation argument (NULL: none).
 */
#if PG_VERSION_NUM >= 180000
#define gm_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define gm_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * The wait event of a process waiting on a shared message queue: 17
 * generates the wait events from wait_event_names.txt, under longer names.
 */
#if PG_VERSION_NUM >= 170000
#define GM_WAIT_EVENT_MQ_RECEIVE	WAIT_EVENT_MESSAGE_QUEUE_RECEIVE
#else
#define GM_WAIT_EVENT_MQ_RECEIVE	WAIT_EVENT_MQ_RECEIVE
#endif

/*
 * search_path = "pg_catalog, pg_temp" until the current GUC nest level ends
 * (the caller made it with NewGUCNestLevel).  17 has this as
 * RestrictSearchPath(), the same setting that maintenance commands use; 15
 * and 16 set it by hand, with the same source and action.
 */
static inline void
gm_restrict_search_path(void)
{
#if PG_VERSION_NUM >= 170000
	RestrictSearchPath();
#else
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
#endif
}

/*
 * A named piece of shared memory that the first backend to ask creates
 * (init runs once, on the new memory) and every later one finds (*found
 * true),
 * without shared_preload_libraries.
 *
 * 17+: the DSM registry (GetNamedDSMSegment), a segment of its own, made
 * when first asked for.  15 and 16 have no such registry: the struct comes
 * from the main segment's small reserve (ShmemInitStruct after start-up),
 * which other extensions share and which can run out; the caller treats
 * that ERROR as "no shared memory" (served models then stay in backend
 * memory).
 */
#if PG_VERSION_NUM >= 170000
#include "storage/dsm_registry.h"
#endif

static inline void *
gm_named_shmem(const char *name, Size size, void (*init) (void *ptr), bool *found)
{
#if PG_VERSION_NUM >= 170000
	return GetNamedDSMSegment(name, size, init, found);
#else
	void	   *p;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	p = ShmemInitStruct(name, size, found);
	if (!*found)
		init(p);
	LWLockRelease(AddinShmemInitLock);
	return p;
#endif
}

#endif							/* GPUMF_PG_COMPAT_H */
