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
/* source_exec.c */
extern void gpumf_source_read_executor(GpumfSource *src);
/* source_scan.c */
extern bool gpumf_source_direct_scan_allowed(GpumfSource *src);
extern void gpumf_source_read_direct(GpumfSource *src);

/*
 * Integer keys in a dense range (row numbers, serial ids) are looked up in
 * an array indexed by the key before the hash map: one load instead of a
 * hash probe into tables larger than the caches, the most of a read's time
 * otherwise.  The array covers keys 0 .. n-1 and grows to at most
 * DENSE_MAX entries, and to no more than DENSE_SLACK times the distinct keys
 * seen (a few large keys never make it large).
 */
#define DENSE_MIN		(1 << 16)
#define DENSE_MAX		(1 << 26)
#define DENSE_SLACK		8

static inline int32
map_int_key(gm_keymap *m, KeyCache *c, int64 key)
{
	int32		idx;

	if (key < 0)
		return gm_keymap_int(m, key);
	if (key >= c->n)
	{
		int64		want = Max(c->n * 2, DENSE_MIN);
		int32	   *a;

		while (want <= key)
			want *= 2;
		if (want > DENSE_MAX ||
			want > Max((int64) DENSE_SLACK * gm_keymap_size(m), DENSE_MIN))
			return gm_keymap_int(m, key);
		a = realloc(c->idx, sizeof(int32) * want);
		if (a == NULL)
			return gm_keymap_int(m, key);
		memset(a + c->n, 0xff, sizeof(int32) * (want - c->n));	/* -1: not seen */
		c->idx = a;
		c->n = want;
	}
	if ((idx = c->idx[key]) >= 0)
		return idx;
	idx = gm_keymap_int(m, key);
	c->idx[key] = idx;
	return idx;
}

static inline int32
map_key(gm_keymap *m, KeyCache *c, Oid coltype, Datum d)
{
	int32		idx;

	switch (coltype)
	{
		case INT2OID:
			idx = map_int_key(m, c, DatumGetInt16(d));
			break;
		case INT4OID:
			idx = map_int_key(m, c, DatumGetInt32(d));
			break;
		case INT8OID:
			idx = map_int_key(m, c, DatumGetInt64(d));
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
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory mapping keys")));
	return idx;
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
	src->rows[src->n] = map_key(src->users, &src->ucache, src->ucoltype, u);
	src->cols[src->n] = map_key(src->items, &src->icache, src->icoltype, i);
	src->vals[src->n] = (float) v;
	if (v < src->vmin)
		src->vmin = v;
	if (v > src->vmax)
		src->vmax = v;
	src->vsum += v;
	src->n++;
}

#endif
