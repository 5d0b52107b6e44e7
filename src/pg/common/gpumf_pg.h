/*
 * gpumf_pg.h: shared declarations of the PostgreSQL glue layer.
 *
 * One file per concept:
 *   ../gpumf.c       _PG_init: the GUCs' definitions, the service's registration
 *   guc.c            the GUCs' variables; what gpumf.max_memory means
 *   extension.c      the extension's owner and schema, shared memory structs,
 *                    subtransactions
 *   checks.c         named argument checks (one ereport each)
 *   device.c         what gpumf.device means; gpumf_device_info
 *   train_device.c   the device a training runs on; the GPU made ready meanwhile
 *   linalg_device.c  the device the linear algebra runs on
 *   guard.c          running internal queries safely (owner, pinned search_path)
 *   source.c         a table or view -> COO with key maps (NULL/NaN policy)
 *   model_catalog.c  the catalog gpumf.models: lookup, lock, permission, rows
 *   model_store.c    factor tables: create, fill, grants, retire, drop
 *   model_cache.c    models served from backend memory
 *   train.c          gpumf_train, gpumf_drop_model
 *   tune.c           gpumf_tune (hyper-parameter search)
 *   recommend.c      gpumf_recommend, gpumf_recommend_items
 *   similar.c        gpumf_similar_items, gpumf_similar_users
 *   serving.c        what serving builds on a served model: key lookups, fold-in
 *                    (a user's rows read from the source), users for similarity
 *   synth.c          gpumf_synthetic
 *   model_load.c     a served model's users in memory; scoring device; new tables
 *   batch.c          gpumf_recommend_all (every user's top n into a table)
 *   evaluate.c       gpumf_evaluate
 *   split.c          gpumf_split
 *   model_history.c  kept versions: gpumf_model_versions, gpumf_use_version
 *   predict.c        gpumf_predict, gpumf_rmse, gpumf_synthetic_ratings
 *   train_service.c  the training service: a worker that keeps the GPU warm
 *   solve.c          gpumf_cg_solve, gpumf_spmv (sparse SPD solves)
 *   ols.c            gpumf_linreg, gpumf_linreg_agg, gpumf_linreg_predict
 */
#ifndef GPUMF_PG_H
#define GPUMF_PG_H

#include "postgres.h"
#include "fmgr.h"
#include "access/attnum.h"
#include "access/tupdesc.h"
#include "tcop/dest.h"
#include "utils/jsonb.h"
#include "utils/snapshot.h"

#include "gm_core.h"
#include "gm_linalg.h"

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
extern bool gpumf_warm_new_models;
extern int	gpumf_keep_versions;	/* versions of a model kept, the current one included */
extern int	gpumf_spmv_choice;	/* gpumf.spmv: a gm_spmv_impl (auto, own, cusparse) */
extern int	gpumf_gpu_memory_limit_mb;	/* -1: no cap */

typedef enum
{
	GPUMF_SERVICE_OFF,
	GPUMF_SERVICE_GPU,			/* GPU trainings go through the training service */
	GPUMF_SERVICE_ALWAYS		/* every training (CPU ones too) */
} GpumfServiceMode;

extern int	gpumf_training_service;	/* GpumfServiceMode */
extern int	gpumf_training_service_idle_s;	/* the worker's idle exit, s (-1: never) */


/* ----------------------------------------------- guc.c, extension.c */

/* the extension's owner, who owns the catalog and the factor tables */
extern Oid	gpumf_owner(void);
/* schema gpumf (model catalog and factor tables) */
extern Oid	gpumf_schema(void);
/* "$libdir/gpumf_cuda.so" expanded */
extern const char *gpumf_cuda_module_path(void);
/*
 * A struct of the main shared memory found by name, made (zeroed, its
 * spinlock at mutex_offset initialised) by the first process that asks;
 * ERRORs when no room is left.
 */
extern void *gpumf_shmem_struct(const char *name, Size size, Size mutex_offset);
/*
 * fn(arg) in a subtransaction: NULL when it returned, else its ERROR
 * (copied, flushed: the caller's transaction, memory context and resource
 * owner are as before).  Not in parallel mode.
 */
extern ErrorData *gpumf_try_subxact(void (*fn) (void *), void *arg);
/* bytes gpumf may allocate for one operation (gpumf.max_memory) */
extern Size gpumf_memory_limit(void);
/* ERROR naming what when need exceeds gpumf.max_memory */
extern void gpumf_check_memory(double need_bytes, const char *what);

/* ---------------------------------------------------------- device.c */

/* gpumf.device = gpu and no usable GPU: an ERROR; doing: "train", "compute" */
extern void gpumf_no_gpu_error(const char *err, const char *doing);
/* gpumf.device = auto and no usable GPU: a NOTICE, once per session; doing: "training" */
extern void gpumf_gpu_fallback_notice(const char *err, const char *doing);
/* gm_cuda_available under the probe thread's lock (the thread holds it throughout) */
extern int	gpumf_cuda_available(char *name, size_t namelen, char *err, size_t errlen);
extern void gpumf_probe_lock(void);
extern void gpumf_probe_unlock(void);

/* ---------------------------------------------------- train_device.c */

/* the backend training uses under gpumf.device (may ERROR) */
extern gm_backend_kind gpumf_training_backend(char *name, size_t namelen);
/*
 * Get the GPU ready while the caller reads a source of about est_rows rows
 * (-1: unknown): start the training service's worker, or look for a GPU on
 * a thread of this process.  True when the training should go to the
 * service (gpumf_train_backend's try_service).
 */
extern bool gpumf_device_prefetch(const gm_mf_params *p, double est_rows);
/*
 * gpumf_training_backend for gpumf_train: with try_service, *service says
 * the training goes to the training service (train_service.c), whose worker
 * then probed the GPU instead of this process.
 */
extern gm_backend_kind gpumf_train_backend(char *name, size_t namelen, bool try_service,
										   bool *service);
/* --------------------------------------------------- linalg_device.c */

/*
 * The GPU's linear-algebra operations when gpumf.device picks the GPU (*name
 * gets its name), NULL for the CPU; may ERROR (gpu without a usable GPU).
 */
extern const gm_linalg_ops *gpumf_linalg_device(char *name, size_t namelen);

/* --------------------------------------------------- train_service.c */

/* _PG_init in the postmaster (shared_preload_libraries): the worker starts with the server */
extern void gpumf_service_register_at_start(void);
/* start the service's worker if it will be used (no wait); false: it will not, or is busy */
extern bool gpumf_service_prefetch(bool gpu);
/*
 * Wait for the worker (starting it): GM_OK with *name when it has a GPU,
 * another GM_ code with *why when its probe failed, -1 when there is no
 * service to use (gpumf.training_service, no worker slot, no start-up).
 */
extern int	gpumf_service_device(char *name, size_t namelen, char *why, size_t whylen);
/*
 * Train on the service's worker: NULL when it cannot take the job now (busy,
 * no shared memory: train in this process); else *rc, err, *res and ev's
 * results are set, d's factor and bias pointers point into the returned
 * segment, which gpumf_service_release (or the transaction's end) detaches.
 * cb's progress is forwarded; should_stop turns into a stop request.
 */
extern void *gpumf_service_train(const gm_mf_params *p, gm_mf_data *d,
								 const gm_callbacks *cb, gm_mf_eval *ev,
								 gm_mf_result *res, int *rc, char *err, size_t errlen);
extern void gpumf_service_release(void *seg);

/* ----------------------------------------------------------- guard.c */

/*
 * Internal queries run under a pinned search_path ("pg_catalog, pg_temp":
 * the caller's temp schema last, no schema the caller can write before
 * pg_catalog), optionally as the extension's owner (then with floats
 * printed exactly whatever the caller's extra_float_digits).  Every SQL text
 * gpumf builds still qualifies its types, functions and operators.
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
/* a finite value in [0, 1] */
extern void gpumf_check_unit(const char *name, float8 v);
/* a holdout fraction: above 0, at most 0.9 */
extern void gpumf_check_holdout(float8 v);
/* 'cg', 'block', 'exact' and back; ERROR naming the valid ones */
extern gm_solver gpumf_solver_from_text(const char *s);
extern const char *gpumf_solver_name(gm_solver s);

/* ----------------------------------------------------------- train.c */

/* What gpumf_train was asked for (gpumf_tune builds one for its best setting). */
typedef struct TrainArgs
{
	Oid			relid;
	char	   *ucol;
	char	   *icol;
	char	   *vcol;				/* NULL: every row counts 1 */
	char	   *model;
	gm_mf_params p;
	double		holdout;			/* > 0: early stopping on held-out rows */
	gm_rank_metric metric;
	int			K;
} TrainArgs;

/* Train and store a model (the body of gpumf_train); returns the catalog row. */
extern Datum gpumf_train_args(const TrainArgs *a);
/* 'recall@20' etc.; ERROR with a hint otherwise */
extern void gpumf_metric_from_text(const char *s, gm_rank_metric *m, int *K);

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

/* lock a relation for reading and check its kind; its quoted qualified name */
extern char *gpumf_relation_open(Oid relid);
/* a column's type (base type of a domain); ERROR naming use ("train on") for system columns */
extern Oid	gpumf_column_type(Oid relid, const char *col, const char *use);
/* ERROR unless type is numeric (int2/4/8, float4/8, numeric); what: "value", "y", ... */
extern void gpumf_check_numeric_type(Oid type, const char *col, const char *what);
/* a numeric Datum as double (a numeric beyond double's range: +-Infinity) */
extern double gpumf_datum_double(Oid type, Datum d);
/* run a SELECT gpumf built with the caller's rights (pinned search_path) into dest */
extern void gpumf_read_query(const char *sql, DestReceiver *dest, bool read_only,
							 const char *what);

extern GpumfKeyKind gpumf_key_kind(Oid type);
/* key type stored for a column type (varchar, bpchar -> text); ERROR if unsupported */
extern Oid	gpumf_key_store_type(Oid coltype, const char *col, const char *what);
/* lock the source, check relkind, columns and types (palloc'd result) */
extern GpumfSource *gpumf_source_open(Oid relid, const char *ucol,
									  const char *icol, const char *vcol,
									  GpumfValuePolicy policy);
/* read every row with the caller's rights */
extern void gpumf_source_read(GpumfSource *src);
/* rows the source probably has (statistics, else its size); -1: unknown */
extern double gpumf_source_estimate_rows(const GpumfSource *src);
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
	Jsonb	   *params;			/* the hyper-parameters (NULL if none) */
} GpumfModel;

/* everything gpumf_train writes into the catalog */
typedef struct GpumfModelRow
{
	GpumfModel	m;
	Jsonb	   *params;
	Jsonb	   *metrics;		/* NULL: none */
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

/*
 * serialise trainings, switches and drops of one model name (a transaction
 * advisory lock: class GPUMF_LOCK_CLASS, key gpumf_model_lock_key(name))
 */
#define GPUMF_LOCK_CLASS 0x67706d66	/* advisory lock namespace: "gpmf" */
extern void gpumf_model_lock(const char *name);
extern int32 gpumf_model_lock_key(const char *name);
/* the model's row (palloc'd strings); false when there is none */
extern bool gpumf_model_lookup(const char *name, GpumfModel *m);
/* the same as of snap (serving reads the model as of the statement) */
extern bool gpumf_model_lookup_as_of(const char *name, GpumfModel *m, Snapshot snap);
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
/* set gpumf.models.metrics of the model's version (owner only; as the extension's owner) */
extern void gpumf_model_record_metrics(const char *name, int64 id, int32 version, Jsonb *metrics);

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

struct GpumfServing;

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
	float	   *scratch;		/* gm_topk_dot_scratch(&Q) floats */
	AttrNumber	user_att_factors;
	AttrNumber	user_att_seen;
	AttrNumber	user_att_bias;	/* InvalidAttrNumber: none */
	FmgrInfo	key_eq;			/* equality of the user key type */
	struct dsm_segment *seg;	/* Y, Q, biases and keys live here; NULL: in cxt */
	struct GpumfServing *serving;	/* serving.c's, built on first use */
} GpumfServed;

/*
 * The model's current version as of the statement's snapshot, loaded if
 * needed; ERRORs for unknown/forbidden.
 */
extern GpumfServed *gpumf_served_get(const char *name);
/*
 * The user's row: factors (k floats), seen items (sorted), bias.  false when
 * the user is not in the model.  Pointers stay valid until the next call.
 */
extern bool gpumf_served_user(GpumfServed *m, Datum key, const float **x,
							  const int32 **seen, int32 *nseen, float *bias);
/* stop sharing every version of the model (it was dropped or replaced) */
extern void gpumf_served_forget(int64 model_id);
/*
 * When this transaction commits, have a background worker read the model's
 * version into shared memory (gpumf.shared_models), so that no serving call
 * has to.
 */
extern void gpumf_served_warm_on_commit(int64 model_id, int32 version);

/* the snapshot serving reads the model's tables with in this call */
extern Snapshot gpumf_served_snapshot(void);

/* ---------------------------------------------------------- serving.c */

/* What serving builds on a served model version, on first use. */
typedef struct GpumfServing
{
	MemoryContext cxt;			/* everything below */
	/* from the catalog row of the served version */
	gm_foldin_params foldin;
	char	   *source;			/* qualified name as stored */
	char	   *user_col;
	char	   *item_col;
	char	   *value_col;		/* NULL: every row counts 1 */
	/* built on first use */
	gm_keymap  *item_map;		/* item key -> index */
	double	   *gram;			/* Y^T Y, for implicit fold-in */
	double	   *work;			/* gm_foldin_work(k) doubles */
	float	   *item_norms;
	/* the users, loaded by gpumf_similar_users */
	int32		n_users;
	float	   *X;
	Datum	   *user_keys;
	float	   *user_norms;
	gm_keymap  *user_map;
	float	   *user_scratch;
} GpumfServing;

/* A user's factors as serving uses them (stored, or folded in). */
typedef struct GpumfUserFactors
{
	const float *x;
	float		bias;
	const int32 *seen;			/* sorted item indices */
	int32		nseen;
	bool		folded;			/* computed from the source or a basket */
} GpumfUserFactors;

/* what the catalog row of a newly loaded version says (model_cache.c calls it) */
extern void gpumf_serving_reset(GpumfServed *m, const GpumfModel *cat);
/* free everything of m->serving (model_cache.c calls it) */
extern void gpumf_serving_free(GpumfServed *m);

/* the model's item index of a key Datum of type keytype (a key type); -1: none */
extern int32 gpumf_item_index(GpumfServed *m, Datum key, Oid keytype);
/*
 * A key argument (of type argtype, any type: converted as text if need be)
 * as a Datum of the key type keytype; false when no key can equal it.
 */
extern bool gpumf_key_from_arg(Datum d, Oid argtype, Oid keytype, Datum *out);
/*
 * The item indices of the elements of an array argument of item keys (its
 * type argtype, possibly unknown: a literal), in array order, -1 for a NULL
 * element or a key the model lacks; returns the number of elements.  ERROR
 * naming the types when the elements are not the model's item keys.
 */
extern int32 gpumf_item_indices(GpumfServed *m, Datum arr, Oid argtype, const char *argname,
								const char *model, int32 **idx);
/* sort idx[0 .. n), drop -1 and duplicates; the new count */
extern int32 gpumf_index_set(int32 *idx, int32 n);
/* ERROR unless outtype can hold the model's item (or user) keys */
extern void gpumf_check_key_output(Oid keytype, Oid outtype, const char *what,
								   const char *model, bool carrier);
/* a key Datum as a Datum of the output type outtype (checked before) */
extern Datum gpumf_key_output(Datum key, Oid keytype, Oid outtype, const char *what);

/*
 * The user's factors: the stored row, or (recompute, or a user the model
 * lacks) one least-squares solve from the user's current rows in the
 * model's source, read with the caller's rights.  false: no factors (the
 * user is unknown to both, or the source cannot be read and !recompute).
 */
extern bool gpumf_user_factors(GpumfServed *m, const char *model, Datum userkey,
							   bool recompute, GpumfUserFactors *u);
/* The factors of "someone with these items" (a basket): idx/vals merged. */
extern void gpumf_basket_factors(GpumfServed *m, const char *model, int32 *idx, float *vals,
								 int32 n, GpumfUserFactors *u);
/* was the model trained on implicit feedback (values are strengths, not ratings)? */
extern bool gpumf_served_implicit(GpumfServed *m);
/* the index of a user in the loaded users (gpumf_load_users); -1: none */
extern int32 gpumf_user_index(GpumfServed *m, Datum key);
/* the norms of the item factors (built once per version) */
extern const float *gpumf_item_norms(GpumfServed *m);
/* the users' factors, keys and norms (loaded once per version) */
extern void gpumf_load_users(GpumfServed *m);

/* ------------------------------------------------------- model_load.c */

#include "gm_score.h"

/* Every user of a served model version, in memory (malloc'ed, freed with the context). */
typedef struct GpumfUsers
{
	int32		n;
	int			k;
	float	   *X;				/* n x k */
	float	   *bias;			/* n, or NULL */
	int64	   *seen_ptr;		/* n + 1 */
	int32	   *seen_idx;		/* sorted per user */
	gm_keymap  *keys;			/* user key -> row */
	GpumfKeyKind kind;
	Oid			type;
	MemoryContextCallback cb;
} GpumfUsers;

/* read the users table of m's version (m's tables are locked by gpumf_served_get) */
extern GpumfUsers *gpumf_users_read(GpumfServed *m);
/* the item keys of m -> their indexes (freed with the context) */
extern gm_keymap *gpumf_items_keymap(GpumfServed *m);
/* add d (a value of column type coltype) to map / find it (-1 when absent) */
extern int32 gpumf_key_add(gm_keymap *map, Oid coltype, Datum d);
extern int32 gpumf_key_find(gm_keymap *map, Oid coltype, Datum d);
/* ERROR unless a column of type coltype can hold keys of the model's key type */
extern void gpumf_check_key_column(Oid coltype, Oid keytype, const char *col, const char *what,
								   const char *model);
/* the backend scoring runs on under gpumf.device; *name: the device */
extern gm_backend_kind gpumf_scoring_backend(char *name, size_t namelen);
/* gm_score_topk with cancellation polled; falls back to the CPU where auto allows */
extern void gpumf_score(gm_score_problem *p, gm_backend_kind *backend, gm_score_result *r);
/*
 * A table the caller is about to create, named by text (a possibly
 * qualified identifier, parsed as SQL would): its quoted, schema-qualified
 * name.  ERROR when the name is invalid, the table exists, or the caller may
 * not create in that schema.  Resolved with the caller's search_path.
 */
extern char *gpumf_new_table_name(const char *name, const char *argname);

/* --------------------------------------------------- model_history.c */

/* the number a new version of model id gets: above the current and every kept one */
extern int32 gpumf_history_next_version(int64 id, int32 current);
/* copy the model's current catalog row into gpumf.model_versions (as the owner) */
extern void gpumf_history_save(int64 id);
/* retire the tables of the versions beyond gpumf.keep_versions */
extern void gpumf_history_prune(int64 id);
/* drop every kept version of a model being dropped */
extern void gpumf_history_forget(int64 id);

#endif
