/*
 * source_rows.c: what take_row (source_int.h), the per-row step of both ways
 * to read a source, calls out of line: a value as double, a value the
 * source's policy refuses (an ERROR naming the row's keys), and the
 * coordinate arrays grown.
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

/* A numeric Datum as double, by the column's type OID. */
double
gpumf_datum_double(Oid type, Datum d)
{
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		case INT8OID:
			return (double) DatumGetInt64(d);
		case FLOAT4OID:
			return DatumGetFloat4(d);
		case FLOAT8OID:
			return DatumGetFloat8(d);
		default:
			return DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow, d));
	}
}

/* ERROR naming the row's keys: v is not a value the source's policy takes. */
void
gpumf_source_bad_value(GpumfSource *src, Datum u, Datum i, double v)
{
	const char *what;
	const char *hint;

	if (isnan(v) || isinf(v))
		what = "non-finite";
	else if (fabs(v) > FLT_MAX)
		what = "out-of-range";
	else
		what = "negative";
	if (src->policy == GPUMF_VALUES_IMPLICIT)
		hint = "Values are implicit-feedback strengths: finite, >= 0 and within the range of real (|value| <= 3.4e38; confidence = 1 + alpha * value). Filter such rows with a view or a WHERE clause.";
	else
		hint = "Ratings must be finite and within the range of real (|value| <= 3.4e38). Filter such rows with a view or a WHERE clause.";
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s value %g for user %s, item %s", what, v,
					gpumf_key_text(src->ucoltype, u), gpumf_key_text(src->icoltype, i)),
			 errhint("%s", hint)));
}

/*
 * Room for twice the rows, counted against gpumf.max_memory first: the most
 * the rows at the new size will take as a matrix (12 bytes a row as read,
 * which the CSR build gives back as it goes, then 16 for the CSR and its
 * transpose) and the key maps as they are now.
 */
void
gpumf_source_grow(GpumfSource *src)
{
	int64		cap = src->cap ? src->cap * 2 : 1 << 20;
	int32	   *r;
	float	   *f;

	gpumf_check_memory((double) cap * 2 * (sizeof(int32) + sizeof(float)) +
					   (double) gm_keymap_memory(src->users) +
					   (double) gm_keymap_memory(src->items),
					   "reading the source");
	r = realloc(src->rows, sizeof(int32) * cap);
	if (r)
		src->rows = r;
	r = r ? realloc(src->cols, sizeof(int32) * cap) : NULL;
	if (r)
		src->cols = r;
	f = r ? realloc(src->vals, sizeof(float) * cap) : NULL;
	if (f)
		src->vals = f;
	if (!r || !f)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading " INT64_FORMAT " rows", src->n)));
	src->cap = cap;
}
