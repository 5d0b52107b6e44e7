/*
 * source_keys.c: the keys of a source: which key types a model stores, a key
 * as text for messages, and a key index back as a Datum of the stored type.
 * Mapping a key to its index while reading is source_int.h's (inline, once a
 * row).
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

GpumfKeyKind
gpumf_key_kind(Oid type)
{
	switch (type)
	{
		case TEXTOID:
			return GPUMF_KEY_TEXT;
		case UUIDOID:
			return GPUMF_KEY_UUID;
		default:
			return GPUMF_KEY_INT;
	}
}

Oid
gpumf_key_store_type(Oid coltype, const char *col, const char *what)
{
	switch (coltype)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case TEXTOID:
		case UUIDOID:
			return coltype;
		case VARCHAROID:
		case BPCHAROID:
			return TEXTOID;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("%s column \"%s\" has unsupported type %s", what, col,
					format_type_be(coltype)),
			 errhint("Key columns must be smallint, integer, bigint, text, varchar, char or uuid.")));
	return InvalidOid;			/* keep compiler quiet */
}

/* A key as text for error messages, through its type's output function. */
char *
gpumf_key_text(Oid coltype, Datum d)
{
	Oid			outfunc;
	bool		varlena;
	char	   *s;

	getTypeOutputInfo(coltype, &outfunc, &varlena);
	s = OidOutputFunctionCall(outfunc, d);
	return coltype == INT2OID || coltype == INT4OID || coltype == INT8OID ||
		coltype == UUIDOID ? s : quote_literal_cstr(s);
}

/* ERROR for a key m could not take: more keys than an index holds, or no memory. */
void
gpumf_keymap_full(gm_keymap *m)
{
	if (gm_keymap_size(m) >= PG_INT32_MAX - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("more than %d distinct users or items", PG_INT32_MAX - 1),
				 errhint("Train on a view that keeps fewer distinct keys.")));
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("out of memory mapping keys (%d distinct keys, %zu MB of key maps)",
					gm_keymap_size(m), gm_keymap_memory(m) >> 20)));
}

Datum
gpumf_key_datum(gm_keymap *m, GpumfKeyKind kind, Oid type, int32 idx)
{
	if (kind == GPUMF_KEY_INT)
	{
		int64		v = gm_keymap_int_at(m, idx);

		return type == INT2OID ? Int16GetDatum((int16) v) :
			type == INT4OID ? Int32GetDatum((int32) v) : Int64GetDatum(v);
	}
	else
	{
		uint32		len;
		const void *p = gm_keymap_bytes_at(m, idx, &len);

		if (kind == GPUMF_KEY_TEXT)
			return PointerGetDatum(cstring_to_text_with_len(p, len));
		else
		{
			pg_uuid_t  *u = palloc(sizeof(pg_uuid_t));

			memcpy(u->data, p, UUID_LEN);
			return UUIDPGetDatum(u);
		}
	}
}
