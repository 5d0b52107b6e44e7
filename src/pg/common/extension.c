/*
 * extension.c: what the SQL functions share about the extension itself: its
 * schema, the version of its catalog this library serves, its owner, the
 * path of its CUDA module, structs in shared memory, and running a function
 * in a subtransaction.
 */
#include "gpumf_pg.h"

#include <ctype.h>
#include <errno.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/sinval.h"
#include "storage/spin.h"
#include "utils/fmgroids.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"

/* The schema gpumf: the model catalog and the factor tables. */
Oid
gpumf_schema(void)
{
	/* gpumf.control fixes the schema (the extension is not relocatable) */
	return get_namespace_oid("gpumf", false);
}

/* the current top-level transaction's local id (a field renamed in 17) */
#if PG_VERSION_NUM >= 170000
#define MY_LXID (MyProc->vxid.lxid)
#else
#define MY_LXID (MyProc->lxid)
#endif

/*
 * The last successful catalog-version check.  It stays good while this
 * backend has processed no shared invalidation message since (another
 * session's ALTER, DROP or CREATE EXTENSION changes catalog entries that
 * other backends cache, and their invalidations reach us before our next
 * statement reads anything) and, within the transaction that made the
 * check, while the command counter has not moved (this transaction's own
 * DDL).  A failed check is never cached.
 */
static struct
{
	bool		valid;
	uint64		inval_count;
	LocalTransactionId lxid;
	CommandId	cid;
} catalog_checked;

#define VERSION_PARTS 8

/* "0.2" as {0, 2, 0, ...}; false unless dotted non-negative integers */
static bool
version_parse(const char *v, long parts[VERSION_PARTS])
{
	memset(parts, 0, sizeof(long) * VERSION_PARTS);
	for (int i = 0; i < VERSION_PARTS; i++)
	{
		char	   *end;

		if (!isdigit((unsigned char) *v))
			return false;
		errno = 0;
		parts[i] = strtol(v, &end, 10);
		if (errno != 0)
			return false;
		if (*end == '\0')
			return true;
		if (*end != '.')
			return false;
		v = end + 1;
	}
	return false;
}

/* a's order to b ("0.2" < "0.10" = "0.10.0"): -1, 0, 1; 2 when either is not a version */
static int
version_cmp(const char *a, const char *b)
{
	long		pa[VERSION_PARTS],
				pb[VERSION_PARTS];

	if (!version_parse(a, pa) || !version_parse(b, pb))
		return 2;
	for (int i = 0; i < VERSION_PARTS; i++)
		if (pa[i] != pb[i])
			return pa[i] < pb[i] ? -1 : 1;
	return 0;
}

/* pg_extension.extversion of gpumf in this database (palloc'd); NULL: not installed */
static char *
installed_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("gpumf"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/* ERROR unless the installed extension is the version this library serves (see gpumf_pg.h). */
void
gpumf_check_catalog_version(void)
{
	char	   *installed;
	int			cmp;

	if (catalog_checked.valid &&
		catalog_checked.inval_count == SharedInvalidMessageCounter &&
		(catalog_checked.lxid != MY_LXID ||
		 catalog_checked.cid == GetCurrentCommandId(false)))
		return;
	catalog_checked.valid = false;

	installed = installed_version();
	if (installed == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"gpumf\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION gpumf.")));
	cmp = version_cmp(installed, GPUMF_CATALOG_VERSION);
	if (cmp < 0 || cmp == 2)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"gpumf\" is installed at version %s, but the gpumf library needs version %s",
						installed, GPUMF_CATALOG_VERSION),
				 errdetail("The model catalog and the functions of version %s differ from what this library reads and writes.",
						   installed),
				 errhint("Run ALTER EXTENSION gpumf UPDATE in this database (as the extension's owner or a superuser): it converts the model catalog in place and keeps every model.")));
	if (cmp > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"gpumf\" is installed at version %s, newer than version %s that the gpumf library loaded by this session serves",
						installed, GPUMF_CATALOG_VERSION),
				 errhint("Reconnect: this session loaded the library before the extension was updated.  If a new session fails too, install the gpumf library that came with version %s.",
						 installed)));
	pfree(installed);

	catalog_checked.valid = true;
	catalog_checked.inval_count = SharedInvalidMessageCounter;
	catalog_checked.lxid = MY_LXID;
	catalog_checked.cid = GetCurrentCommandId(false);
}

/* The owner of the extension: model tables belong to it. */
Oid
gpumf_owner(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			owner = InvalidOid;
	Oid			ext = get_extension_oid("gpumf", false);

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(owner))
		elog(ERROR, "could not find the owner of extension gpumf");
	return owner;
}

/* "$libdir/gpumf_cuda.so" expanded, computed once. */
const char *
gpumf_cuda_module_path(void)
{
	static char path[MAXPGPATH];

	if (path[0] == '\0')
		snprintf(path, sizeof(path), "%s/gpumf_cuda.so", pkglib_path);
	return path;
}

/* what shmem_struct_init sets up: gm_named_shmem calls it back at once */
static Size shmem_init_size;
static Size shmem_init_mutex_offset;

static void
shmem_struct_init(void *p)
{
	memset(p, 0, shmem_init_size);
	SpinLockInit((slock_t *) ((char *) p + shmem_init_mutex_offset));
}

/* A struct in shared memory by name, made zeroed by the first caller (see gpumf_pg.h). */
void *
gpumf_shmem_struct(const char *name, Size size, Size mutex_offset)
{
	bool		found;

	shmem_init_size = size;
	shmem_init_mutex_offset = mutex_offset;
	return gm_named_shmem(name, size, shmem_struct_init, &found);
}

/* fn(arg) in a subtransaction: NULL, or the ERROR it raised (see gpumf_pg.h). */
ErrorData *
gpumf_try_subxact(void (*fn) (void *), void *arg)
{
	MemoryContext mcx = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile e = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(mcx);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(mcx);
	CurrentResourceOwner = owner;
	return e;
}
