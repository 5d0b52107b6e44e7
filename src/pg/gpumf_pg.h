/*
 * gpumf_pg.h: shared declarations of the PostgreSQL glue layer.
 *
 * One file per concept:
 *   gpumf.c          _PG_init, GUCs, the extension's owner and schema
 *   checks.c         named argument checks (one ereport each)
 *   device.c         what gpumf.device means; gpumf_device_info
 *   guard.c          running internal queries safely (owner, pinned search_path)
 *   source.c         a table or view -> COO with key maps (NULL/NaN policy)
 *   model_catalog.c  the catalog gpumf.models: lookup, lock, permission, rows
 *   model_store.c    factor tables: create, fill, grants, retire, drop
 *   model_cache.c    models served from backend memory
 *   train.c          gpumf_train, gpumf_drop_model
 *   recommend.c      gpumf_recommend and its variants
 *   synth.c          gpumf_synthetic
 */
#ifndef GPUMF_PG_H
#define GPUMF_PG_H

#include "postgres.h"
#include "fmgr.h"
#include "access/attnum.h"
#include "access/tupdesc.h"
#include "utils/jsonb.h"

#include "gm_core.h"

/* ------------------------------------------------------------- GUCs */

typedef enum
{
	GPUMF_DEVICE_AUTO,
	GPUMF_DEVICE_CPU,
	GPUMF_DEVICE_GPU
} GpumfDevice;

extern int	gpumf_device;
extern int	gpumf_threads;
extern bool gpumf_progress;
extern int	gpumf_max_memory_mb;	/* -1: half the machine's memory */
extern bool gpumf_unlogged_models;
extern int	gpumf_read_workers;	/* -1: as for a parallel SELECT of the source */
extern bool gpumf_shared_models;

/* ----------------------------------------------------------- gpumf.c */

/* the extension's owner, who owns the catalog and the factor tables */
extern Oid	gpumf_owner(void);
/* schema gpumf (model catalog and factor tables) */
extern Oid	gpumf_schema(void);
/* "$libdir/gpumf_cuda.so" expanded */
extern const char *gpumf_cuda_module_path(void);
/* bytes gpumf may allocate for one operation (gpumf.max_memory) */
extern Size gpumf_memory_limit(void);
/* ERROR naming what when need exceeds gpumf.max_memory */
extern void gpumf_check_memory(double need_bytes, const char *what);

/* ---------------------------------------------------------- device.c */

/* the backend training uses under gpumf.device (may ERROR) */
extern gm_backend_kind gpumf_training_backend(char *name, size_t namelen);
/* start looking for a GPU on a thread, while the caller does other work */
extern void gpumf_device_prefetch(void);

/* ----------------------------------------------------------- guard.c */

/*
 * Internal queries run under a pinned search_path ("pg_catalog, pg_temp":
 * the caller's temp schema last, no schema the caller can write before
 * pg_catalog), optionally as the extension's owner.  Every SQL text gpumf
 * builds still qualifies its types, functions and operators.
 */
typedef struct GpumfGuard
{
	int			nest;
	Oid			save_user;
	int			save_sec;
	bool		as_owner;
} GpumfGuard;

extern void gpumf_guard_enter(GpumfGuard *g, bool as_owner);
extern void gpumf_guard_exit(GpumfGuard *g);
/* SPI_execute of a statement gpumf built; ERROR unless it returns expect */
extern void gpumf_spi_exec(const char *sql, int expect);

/* ----------------------------------------------------------- checks.c */

#define GPUMF_MODEL_NAME_MAX 200	/* bytes */

extern void gpumf_check_not_null(FunctionCallInfo fcinfo, int argno, const char *name);
extern void gpumf_check_int_range(const char *name, int32 v, int32 lo, int32 hi);
extern void gpumf_check_positive(const char *name, float8 v);
extern void gpumf_check_nonneg(const char *name, float8 v);
extern void gpumf_check_model_name(const char *name);
extern void gpumf_check_n(int32 n);

/* ----------------------------------------------------------- source.c */

/* key kinds the model tables store */
typedef enum
{
	GPUMF_KEY_INT,				/* int2, int4, int8 */
	GPUMF_KEY_TEXT,				/* text, varchar, bpchar (stored as text) */
	GPUMF_KEY_UUID
} GpumfKeyKind;

/* what values mean: implicit strengths (finite, >= 0) or ratings (finite) */
typedef enum
{
	GPUMF_VALUES_IMPLICIT,
	GPUMF_VALUES_RATINGS
} GpumfValuePolicy;

/* dense integer keys -> key map index (-1: not seen), before the hash map */
typedef struct KeyCache
{
	int32	   *idx;			/* malloc'ed */
	int64		n;
} KeyCache;

typedef struct GpumfSource
{
	Oid			relid;
	AttrNumber	uatt;			/* the columns' numbers in the relation */
	AttrNumber	iatt;
	AttrNumber	vatt;			/* InvalidAttrNumber: no value column */
	char	   *relname;		/* schema-qualified, quoted */
	char	   *ucol;
	char	   *icol;
	char	   *vcol;			/* NULL: every row counts 1 */
	Oid			ucoltype;		/* the columns' types (base types of domains) */
	Oid			icoltype;
	Oid			vcoltype;
	Oid			utype;			/* key types the model stores: int2/int4/int8/text/uuid */
	Oid			itype;
	GpumfKeyKind ukind;
	GpumfKeyKind ikind;
	GpumfValuePolicy policy;
	/* filled by gpumf_source_read; malloc'ed, freed with the memory context */
	gm_keymap  *users;
	gm_keymap  *items;
	KeyCache	ucache;
	KeyCache	icache;
	int32	   *rows;
	int32	   *cols;
	float	   *vals;
	int64		n;
	int64		cap;
	int64		rows_read;
	int64		null_keys;
	int64		null_values;
	double		vmin;
	double		vmax;
	double		vsum;
	int			read_workers;	/* parallel workers that read it (0: read alone) */
	/* a full COO batch: a parallel worker sends it; NULL: the arrays grow */
	void		(*flush) (struct GpumfSource *src);
	MemoryContextCallback cb;
} GpumfSource;

extern GpumfKeyKind gpumf_key_kind(Oid type);
/* key type stored for a column type (varchar, bpchar -> text); ERROR if unsupported */
extern Oid	gpumf_key_store_type(Oid coltype, const char *col, const char *what);
/* lock the source, check relkind, columns and types (palloc'd result) */
extern GpumfSource *gpumf_source_open(Oid relid, const char *ucol,
									  const char *icol, const char *vcol,
									  GpumfValuePolicy policy);
/* read every row with the caller's rights */
extern void gpumf_source_read(GpumfSource *src);
/* keys renumbered in key order, CSR and its transpose; frees the COO */
extern void gpumf_source_to_csr(GpumfSource *src, gm_csr *R, gm_csr *Rt);
/* the key of index idx as a Datum of type (the stored key type) */
extern Datum gpumf_key_datum(gm_keymap *m, GpumfKeyKind kind, Oid type, int32 idx);

/* ---------------------------------------------------- model_catalog.c */

/* A model's catalog row, as gpumf reads it. */
typedef struct GpumfModel
{
	int64		id;
	char	   *name;
	int32		version;
	char	   *algorithm;
	int32		factors;
	Oid			user_type;
	Oid			item_type;
	char	   *user_table;		/* schema-qualified, quoted */
	char	   *item_table;
	Oid			owner;
	bool		has_bias;		/* explicit models with biases */
	double		global_mean;
	double		value_min;
	double		value_max;
	bool		explicit_values;	/* ratings (explicit models) */
	char	   *source;
	char	   *user_col;
	char	   *item_col;
	char	   *value_col;
} GpumfModel;

/* everything gpumf_train writes into the catalog */
typedef struct GpumfModelRow
{
	GpumfModel	m;
	Jsonb	   *params;
	Oid			source_relid;
	int64		n_rows;
	int64		nnz;
	int32		n_users;
	int32		n_items;
	const char *backend;
	const char *device;
	int32		iterations_run;
	double		final_loss;
	double		train_rmse;		/* NaN: NULL */
	double		read_seconds;
	double		build_seconds;
	double		transfer_seconds;
	double		train_seconds;
	double		loss_seconds;	/* of train_seconds */
	double		store_seconds;
} GpumfModelRow;

/* serialise trainings and drops of one model name (transaction lock) */
extern void gpumf_model_lock(const char *name);
/* the model's row (palloc'd strings); false when there is none */
extern bool gpumf_model_lookup(const char *name, GpumfModel *m);
/* ERROR unless the current user may retrain or drop the model */
extern void gpumf_model_check_owner(const GpumfModel *m, const char *action);
/* ERROR (serialization failure) when a concurrent transaction changed the model */
extern void gpumf_model_check_current(const char *name, bool exists, int32 version);
/* a new model id from gpumf.models_id_seq (as the owner) */
extern int64 gpumf_model_next_id(void);
/* insert or update the catalog row (run as the owner) */
extern void gpumf_model_write(const GpumfModelRow *row, bool exists);
extern void gpumf_model_delete(int64 id);
/* the model's catalog row as the function's result (gpumf.models' row type) */
extern Datum gpumf_model_row_datum(const char *name);

/* ------------------------------------------------------ model_store.c */

typedef struct GpumfFactorTables
{
	char	   *users;			/* schema-qualified names */
	char	   *items;
} GpumfFactorTables;

/* the names a model version's factor tables get */
extern GpumfFactorTables gpumf_store_names(int64 id, int32 version);
/* create and fill both tables (as the owner); returns their names */
typedef struct GpumfStoreInput
{
	int64		id;
	int32		version;
	int			k;
	const float *X;
	const float *Y;
	const float *user_bias;		/* NULL: no bias column values */
	const float *item_bias;
	const gm_csr *R;			/* seen items per user */
	gm_keymap  *users;
	gm_keymap  *items;
	GpumfKeyKind ukind;
	GpumfKeyKind ikind;
	Oid			utype;
	Oid			itype;
} GpumfStoreInput;

extern GpumfFactorTables gpumf_store_write(const GpumfStoreInput *in);
/* the model's owner may read and share its tables (grants carried over) */
extern void gpumf_store_grant(const GpumfFactorTables *t, const GpumfFactorTables *old,
							  Oid model_owner);
/* list replaced tables for a later drop; drop those no reader holds */
extern void gpumf_store_retire(const GpumfFactorTables *old);
extern void gpumf_store_drop_retired(void);
extern void gpumf_store_drop(const GpumfFactorTables *t);

/* ------------------------------------------------------ model_cache.c */

/* One served model version, in backend memory. */
typedef struct GpumfServed
{
	char		name[GPUMF_MODEL_NAME_MAX + 1];	/* hash key */
	int64		id;
	int32		version;
	int			k;
	int32		n_items;
	Oid			user_type;
	Oid			item_type;
	Oid			user_rel;
	Oid			item_rel;
	Oid			user_index;		/* primary key of the users table */
	bool		has_bias;
	double		global_mean;
	MemoryContext cxt;
	float	   *Y;				/* n_items x k */
	float	   *item_bias;		/* n_items, or NULL */
	Datum	   *item_keys;		/* in item_type */
	gm_qmat		Q;				/* int8 copy of Y for the first pass */
	float	   *scratch;		/* 2 * n_items */
	AttrNumber	user_att_factors;
	AttrNumber	user_att_seen;
	AttrNumber	user_att_bias;	/* InvalidAttrNumber: none */
	FmgrInfo	key_eq;			/* equality of the user key type */
	struct dsm_segment *seg;	/* Y, Q, biases and keys live here; NULL: in cxt */
} GpumfServed;

/* the model's current version, loaded if needed; ERRORs for unknown/forbidden */
extern GpumfServed *gpumf_served_get(const char *name);
/*
 * The user's row: factors (k floats), seen items (sorted), bias.  false when
 * the user is not in the model.  Pointers stay valid until the next call.
 */
extern bool gpumf_served_user(GpumfServed *m, Datum key, const float **x,
							  const int32 **seen, int32 *nseen, float *bias);
/* stop sharing every version of the model (it was dropped or replaced) */
extern void gpumf_served_forget(int64 model_id);

#endif
