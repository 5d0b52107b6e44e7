/*
 * source_int.h: what the files that read a source share (source*.c;
 * internal to them): a row taken into the coordinates, its keys mapped to
 * dense indices.  Inline: it runs once a row.
 */
#ifndef GPUMF_SOURCE_INT_H
#define GPUMF_SOURCE_INT_H

#include "gpumf_pg.h"

#include <float.h>
#include <math.h>

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

/* source_rows.c */
extern void gpumf_source_bad_value(GpumfSource *src, Datum u, Datum i, double v);
extern void gpumf_source_grow(GpumfSource *src);
/* source_keys.c */
extern char *gpumf_key_text(Oid coltype, Datum d);
extern GM_NORETURN void gpumf_keymap_full(gm_keymap *m);
/* source_exec.c */
extern void gpumf_source_read_executor(GpumfSource *src);
/* source_scan.c */
extern void gpumf_source_read_direct(GpumfSource *src);

/*
 * A key's index in m.  Integer keys in a dense range (row numbers, serial
 * ids) are looked up in the map's direct-index array before its hash table
 * (gm_keymap_int_dense: bounded growth, any int2/int4/int8 value).
 */
static inline int32
map_key(gm_keymap *m, Oid coltype, Datum d)
{
	int32		idx;

	switch (coltype)
	{
		case INT2OID:
			idx = gm_keymap_int_dense(m, DatumGetInt16(d));
			break;
		case INT4OID:
			idx = gm_keymap_int_dense(m, DatumGetInt32(d));
			break;
		case INT8OID:
			idx = gm_keymap_int_dense(m, DatumGetInt64(d));
			break;
		case UUIDOID:
			idx = gm_keymap_bytes(m, DatumGetUUIDP(d)->data, UUID_LEN);
			break;
		default:
			{
				/* text, varchar; char(n) without its trailing blanks, as ::text does */
				text	   *t = DatumGetTextPP(d);
				int			len = VARSIZE_ANY_EXHDR(t);

				if (coltype == BPCHAROID)
					len = bpchartruelen(VARDATA_ANY(t), len);
				idx = gm_keymap_bytes(m, VARDATA_ANY(t), (uint32) len);
				if ((Pointer) t != DatumGetPointer(d))
					pfree(t);
				break;
			}
	}
	if (idx < 0)
		gpumf_keymap_full(m);
	return idx;
}

/*
 * A parallel read worker's entry for an integer key (source_scan.c): the key
 * itself when 0 <= key < limit (the leader numbers those keys after the
 * read, in parallel), else -1 - its index in the worker's own map.
 */
static inline int32
raw_key(gm_keymap *m, Oid coltype, Datum d, int64 limit, int32 *maxraw)
{
	int64		k = coltype == INT2OID ? DatumGetInt16(d) :
		coltype == INT4OID ? DatumGetInt32(d) : DatumGetInt64(d);

	if (k >= 0 && k < limit)
	{
		if (k > *maxraw)
			*maxraw = (int32) k;
		return (int32) k;
	}
	return -1 - map_key(m, coltype, d);
}

/*
 * One row of the source: NULLs counted and skipped, the value checked, the
 * keys mapped and the entry appended (a full batch is flushed by a parallel
 * worker, grown otherwise).
 */
static inline void
take_row(GpumfSource *src, Datum u, bool unull, Datum i, bool inull, Datum vd, bool vnull)
{
	double		v = 1.0;

	src->rows_read++;
	if (unull || inull)
	{
		src->null_keys++;
		return;
	}
	if (src->vcol)
	{
		if (vnull)
		{
			src->null_values++;
			return;
		}
		v = gpumf_datum_double(src->vcoltype, vd);
		if (isnan(v) || isinf(v) || fabs(v) > FLT_MAX ||
			(src->policy == GPUMF_VALUES_IMPLICIT && v < 0))
			gpumf_source_bad_value(src, u, i, v);
	}
	if (src->n == src->cap)
	{
		if (src->flush)
			src->flush(src);
		else
			gpumf_source_grow(src);
	}
	src->rows[src->n] = src->raw_ulimit > 0 ?
		raw_key(src->users, src->ucoltype, u, src->raw_ulimit, &src->raw_umax) :
		map_key(src->users, src->ucoltype, u);
	src->cols[src->n] = src->raw_ilimit > 0 ?
		raw_key(src->items, src->icoltype, i, src->raw_ilimit, &src->raw_imax) :
		map_key(src->items, src->icoltype, i);
	src->vals[src->n] = (float) v;
	if (v < src->vmin)
		src->vmin = v;
	if (v > src->vmax)
		src->vmax = v;
	src->vsum += v;
	src->n++;
}

#endif
