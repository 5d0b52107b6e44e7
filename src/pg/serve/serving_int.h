/*
 * serving_int.h: what serving.c shares with fold_in.c (internal to the
 * serving line): a served version's GpumfServing, its item key map, and the
 * conversions between integer key types.
 */
#ifndef GPUMF_SERVING_INT_H
#define GPUMF_SERVING_INT_H

#include "gpumf_serve.h"

/* m->serving, made on first use */
extern GpumfServing *gpumf_serving(GpumfServed *m);
/* the map from item key to index (built once per version) */
extern gm_keymap *gpumf_serving_item_map(GpumfServed *m);
/* a key Datum of type type (a key type) looked up in map (add: inserted) */
extern int32 gpumf_serving_map_key(gm_keymap *map, Datum d, Oid type, bool add);
/* int2, int4, int8; a Datum of one as int64; a type's range; an int64 as a Datum of it */
extern bool gpumf_is_int_type(Oid t);
extern int64 gpumf_int_value(Datum d, Oid t);
extern void gpumf_int_range(Oid t, int64 *lo, int64 *hi);
extern Datum gpumf_int_datum(int64 v, Oid t);
/* may an array of elem hold keys of keytype? */
extern bool gpumf_elements_match(Oid elem, Oid keytype);

#endif
