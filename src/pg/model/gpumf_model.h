/*
 * gpumf_model.h: the model line of the PostgreSQL layer (src/pg/model): a
 * model as data, below training and serving.
 *
 *   model_catalog.c  the catalog gpumf.models: lookup, lock, permission, rows
 *   model_store.c    factor tables: create, fill, grants, retire, drop
 *   store_direct.c   a factor table's pages formed in threads, written to its files
 *   model_history.c  kept versions: their numbers, their catalog rows, pruning
 *   wal_ahead.c      the store's WAL segment files made while the training runs
 */
#ifndef GPUMF_MODEL_H
#define GPUMF_MODEL_H

#include "gpumf_pg.h"
#include "access/htup.h"
#include "utils/relcache.h"

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
	char	   *source;			/* its name when it was trained (for messages) */
	Oid			source_relid;	/* the source, pinned; InvalidOid: none recorded */
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
	Oid			source_relid;	/* gpumf.models.source_relid: the source by OID */
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
/*
 * ERROR unless the current user may serve model id (named name) from the
 * version whose factor tables are urel and irel: SELECT on both, or, for a
 * version replaced since the caller's snapshot, on the current version's
 * (access follows the current version; kept versions carry only the
 * owner's grant).
 */
extern void gpumf_model_check_read(const char *name, int64 id, Oid urel, Oid irel);
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
	const float *X;				/* NULL: graph_filter without an iALS part */
	int			xk;				/* X's columns (0: k; graph_filter: its iALS part's) */
	const float *Y;				/* items x k, or x (k - k2) with Y2 */
	const float *Y2;			/* NULL, or graph_filter's iALS part: items x k2, */
	int			k2;				/* stored after Y's factors in each item row */
	const float *user_bias;		/* NULL: no bias column values */
	const float *item_bias;
	const gm_csr *R;			/* seen items per user */
	gm_keymap  *users;
	gm_keymap  *items;
	GpumfKeyKind ukind;
	GpumfKeyKind ikind;
	Oid			utype;
	Oid			itype;
	int			read_workers;	/* parallel workers the training read with */
	/*
	 * Called (when set) once both tables are filled, before their indexes are
	 * built: the factors and R's arrays are not read again, and may go.
	 */
	void		(*filled) (void *arg);
	void	   *filled_arg;
} GpumfStoreInput;

extern GpumfFactorTables gpumf_store_write(const GpumfStoreInput *in);

/* ---------------------------------------------------- store_direct.c */

/*
 * Fill the new, empty factor table rel with rows 0 .. nrows - 1 of a users
 * (users) or items table, forming its pages in threads and writing them to
 * its files (gpumf.store_writes = direct).  false: nothing written, the table
 * is left to the usual path; else *deferred lists the *ndeferred rows left to
 * it (rows TOAST would move).  usual(arg, r): row r by heap_form_tuple.
 */
extern bool gpumf_store_fill_direct(Relation rel, const GpumfStoreInput *in, bool users,
									int32 nrows, HeapTuple (*usual) (void *arg, int32 r),
									void *usual_arg, int32 **deferred, int32 *ndeferred);
/*
 * A new version's tables t: the ACL of the version they replace (old; NULL
 * for a new model: the model's owner may read and share them), and old's
 * tables, kept or retired, keep only the owner's SELECT.
 */
extern void gpumf_store_grant(const GpumfFactorTables *t, const GpumfFactorTables *old,
							  Oid model_owner);
/*
 * A kept version's tables t made current again: they take the ACL of the
 * current version's tables (cur), which keep only the owner's SELECT.
 */
extern void gpumf_store_swap_grants(const GpumfFactorTables *t, const GpumfFactorTables *cur,
									Oid model_owner);
/* list replaced tables for a later drop; drop those no reader holds */
extern void gpumf_store_retire(const GpumfFactorTables *old);
extern void gpumf_store_drop_retired(void);
extern void gpumf_store_drop(const GpumfFactorTables *t);

/* --------------------------------------------------- model_history.c */

/* the number a new version of model id gets: above the current and every kept one */
extern int32 gpumf_history_next_version(int64 id, int32 current);
/* copy the model's current catalog row into gpumf.model_versions (as the owner) */
extern void gpumf_history_save(int64 id);
/* retire the tables of the versions beyond gpumf.keep_versions */
extern void gpumf_history_prune(int64 id);
/* drop every kept version of a model being dropped */
extern void gpumf_history_forget(int64 id);

/* ------------------------------------------------------- wal_ahead.c */

/* about the WAL a logged store of these tables writes (bytes) */
extern double gpumf_store_wal_bytes(double users, double items, double nnz, int k);
/* the store to come writes about bytes of WAL: its segment files made ahead */
extern void gpumf_wal_ahead(double bytes);

#endif
