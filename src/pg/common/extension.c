/*
 * extension.c: what the SQL functions share about the extension itself: its
 * schema and owner, the path of its CUDA module, structs in the main shared
 * memory, and running a function in a subtransaction.
 */
#include "gpumf_pg.h"

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
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/fmgroids.h"
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
