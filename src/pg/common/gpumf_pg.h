/*
 * gpumf_pg.h: what every file of the PostgreSQL glue layer shares (the
 * common line, src/pg/common); each product line adds its own header on top:
 * model/gpumf_model.h, serve/gpumf_serve.h, train/gpumf_train.h,
 * linalg/gpumf_linalg.h.  A file includes its own line's header.
 *
 *   ../gpumf.c       _PG_init: the GUCs' definitions, the service's registration
 *   guc.c            the GUCs' variables; what gpumf.max_memory means
 *   extension.c      the extension's owner and schema, shared memory structs,
 *                    subtransactions
 *   device.c         what gpumf.device means; gpumf_device_info
 *   guard.c          running internal queries safely (owner, pinned search_path)
 *   checks.c         named argument checks (one ereport each); the backend's private memory
 *   source.c         a table or view -> COO with key maps (NULL/NaN policy):
 *                    the relation's checks, the choice of reader, CSR
 *   source_exec.c    ... read through the executor (gpumf_read_query)
 *   source_scan.c    ... read by a direct scan, in parallel when large
 *   source_rows.c    ... a row's value converted, refused, the arrays grown
 *   source_keys.c    key types, keys as text and back as Datums
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

#include "pg_compat.h"

#include "gm_core.h"

/* ------------------------------------------------------------- GUCs */

typedef enum
{
	GPUMF_DEVICE_AUTO,
	GPUMF_DEVICE_CPU,
	GPUMF_DEVICE_GPU
} GpumfDevice;

extern int	gpumf_device;
extern int	gpumf_threads;		/* gpumf.threads at most gpumf.max_threads; 0: one per core */
extern int	gpumf_max_threads;	/* 0: the machine's cores */
extern bool gpumf_progress;
extern bool gpumf_autotune;	/* a bare gpumf_train searches its hyper-parameters */
extern double gpumf_autotune_seconds;	/* the search's time budget */
extern int	gpumf_autotune_max_factors;	/* the largest factors it tries */
extern int	gpumf_max_memory_mb;	/* -1: half the machine's memory */
extern bool gpumf_unlogged_models;
extern int	gpumf_wal_ahead_workers;	/* workers making the store's WAL segment files ahead; 0: none */
extern bool gpumf_lean_training;	/* a GPU implicit ALS training holds less host memory */
extern int	gpumf_read_workers;	/* -1: as for a parallel SELECT of the source */
extern int	gpumf_gpu_build_rows;	/* rows from which the GPU builds a training's CSR; -1: never */
extern int	gpumf_store_writes;	/* gpumf.store_writes: how the store's pages reach disk */

typedef enum
{
	GPUMF_STORE_RING,			/* a 16 MB bulk-write ring, as COPY */
	GPUMF_STORE_RING_AHEAD,		/* the ring, the WAL writer flushing behind each batch */
	GPUMF_STORE_SHARED,			/* through shared_buffers, flushing behind each batch */
	GPUMF_STORE_DIRECT			/* pages formed in threads, written to the files */
} GpumfStoreWrites;
extern bool gpumf_shared_models;
extern int	gpumf_shared_models_memory_mb;	/* -1: a quarter of the machine's memory */
extern bool gpumf_warm_new_models;
extern bool gpumf_warm_at_start;	/* preloaded: every model read into shared memory at start */
extern int	gpumf_keep_versions;	/* versions of a model kept, the current one included */
extern bool gpumf_fold_in;		/* serving may read a model's source (fold-in) */
extern int	gpumf_gpu_memory_limit_mb;	/* -1: no cap */
extern int	gpumf_gpus;			/* gpumf.gpus: GPUs an ALS or CCD++ training uses */

typedef enum
{
	GPUMF_SERVICE_OFF,
	GPUMF_SERVICE_GPU,			/* GPU trainings go through the training service */
	GPUMF_SERVICE_ALWAYS		/* every training (CPU ones too) */
} GpumfServiceMode;

extern int	gpumf_training_service;	/* GpumfServiceMode */
extern int	gpumf_training_service_idle_s;	/* the worker's idle exit, s (-1: never) */

/* ----------------------------------------------- guc.c, extension.c */

/*
 * The version of the extension's SQL objects (pg_extension.extversion) whose
 * model catalog this library reads and writes: the newest version, the
 * default_version of gpumf.control.  Bump both together.
 */
#define GPUMF_CATALOG_VERSION "0.5"

/*
 * ERROR (with a hint to ALTER EXTENSION gpumf UPDATE) unless the extension
 * installed in this database is at GPUMF_CATALOG_VERSION.  Every
 * SQL-callable function that reads or writes the model catalog calls it
 * first; reading the catalog (model_catalog.c) calls it too.  Cached: a
 * repeated call costs a few comparisons until a catalog change arrives.
 */
extern void gpumf_check_catalog_version(void);

/* the extension's owner, who owns the catalog and the factor tables */
extern Oid	gpumf_owner(void);
/* schema gpumf (model catalog and factor tables) */
extern Oid	gpumf_schema(void);
/* "$libdir/gpumf_cuda.so" expanded */
extern const char *gpumf_cuda_module_path(void);
/*
 * A struct in shared memory found by name, made (zeroed, its spinlock at
 * mutex_offset initialised) by the first process that asks (gm_named_shmem:
 * the main segment's reserve before 17, the DSM registry from 17 on);
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
/* the same, saying how much of it threads threads' scratch (per_thread each) is */
extern void gpumf_check_memory_threads(double need_bytes, double per_thread, int threads,
									   const char *what);

/* ---------------------------------------------------------- device.c */

/* gpumf.device = gpu and no usable GPU: an ERROR; doing: "train", "compute" */
extern void gpumf_no_gpu_error(const char *err, const char *doing);
/* gpumf.device = auto and no usable GPU: a NOTICE, once per session; doing: "training" */
extern void gpumf_gpu_fallback_notice(const char *err, const char *doing);
/* gm_cuda_available under the probe thread's lock (the thread holds it throughout) */
extern int	gpumf_cuda_available(char *name, size_t namelen, char *err, size_t errlen);
extern void gpumf_probe_lock(void);
extern void gpumf_probe_unlock(void);

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
	bool		as_owner;		/* the user changed: restore it at exit */
	bool		undo_settings;	/* roll back what was SET inside (gpumf_guard_enter_as) */
} GpumfGuard;

extern void gpumf_guard_enter(GpumfGuard *g, bool as_owner);
/*
 * As role (the owner of a relation gpumf reads for a caller) in a
 * security-restricted operation under the pinned search_path; settings
 * changed inside, even by a plain SET, are rolled back by gpumf_guard_exit.
 */
extern void gpumf_guard_enter_as(GpumfGuard *g, Oid role);
extern void gpumf_guard_exit(GpumfGuard *g);
/* SPI_execute of a statement gpumf built; ERROR unless it returns expect */
extern void gpumf_spi_exec(const char *sql, int expect);

/* ----------------------------------------------------------- checks.c */
extern double gpumf_private_memory_mb(void);	/* RssAnon in MB, -1 when unknown */

#define GPUMF_MODEL_NAME_MAX 200	/* bytes */

extern void gpumf_check_not_null(FunctionCallInfo fcinfo, int argno, const char *name);
/* ERROR unless the array argument name has at most one dimension (never flattened) */
struct ArrayType;
extern void gpumf_check_array_1d(struct ArrayType *a, const char *name);
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
	/*
	 * A parallel read worker's integer keys 0 <= key < raw_*limit go to the
	 * leader as they are (0: every key through the worker's own map); the
	 * largest sent so far (-1: none).
	 */
	int64		raw_ulimit;
	int64		raw_ilimit;
	int32		raw_umax;
	int32		raw_imax;
	/*
	 * defer_maps (set before the read; gpumf_source_to_csr then applies the
	 * maps): a parallel read whose every row came from a worker with a side's
	 * keys as themselves leaves that side's entries raw, and map[0] (users),
	 * map[1] (items) their indices (map_n entries, palloc'd), for the GPU to
	 * apply as it builds the matrix; NULL: the entries are indices
	 */
	bool		defer_maps;
	int32	   *map[2];
	int32		map_n[2];
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
#define GPUMF_CSR_HOST		0	/* where gpumf_source_to_csr builds: the host */
#define GPUMF_CSR_GPU		1	/* the GPU where it has the room */
#define GPUMF_CSR_GPU_KEEP	2	/* the same, a copy kept there for the upload */
extern void gpumf_source_to_csr(GpumfSource *src, gm_csr *R, int gpu, int factors);
/* ERROR naming the keys when duplicate rows summed to a value beyond real's range */
extern void gpumf_check_summed_values(const GpumfSource *src, const gm_csr *R);
extern void gpumf_csr_transpose_for(const gm_csr *R, gm_csr *Rt, bool form);
/* bytes a CSR holds */
extern double gpumf_csr_bytes(const gm_csr *a);
/* the key of index idx as a Datum of type (the stored key type) */
extern Datum gpumf_key_datum(gm_keymap *m, GpumfKeyKind kind, Oid type, int32 idx);

#endif
