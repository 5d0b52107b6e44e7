/*
 * gpumf_serve.h: the serving line of the PostgreSQL layer (src/pg/serve):
 * serving and evaluating trained models.
 *
 *   model_cache.c    models served from backend memory: the cache
 *   served_tables.c  a served version's tables read directly; the snapshot
 *   shared_models.c  served versions shared through dynamic shared memory
 *   warm_worker.c    a new version read into shared memory when it commits
 *   serving.c        what serving builds on a served model: key lookups, users
 *                    for similarity, the state fold-in keeps
 *   fold_in.c        a user's factors from the source (as its owner), a basket's
 *   recommend.c      gpumf_recommend, gpumf_recommend_items
 *   similar.c        gpumf_similar_items, gpumf_similar_users
 *   predict.c        gpumf_predict, gpumf_rmse
 *   model_load.c     a served model's users in memory; scoring device; new tables
 *   batch.c          gpumf_recommend_all (every user's top n into a table)
 *   evaluate.c       gpumf_evaluate
 *   split.c          gpumf_split
 *   versions.c       gpumf_model_versions, gpumf_use_version (kept versions)
 *   vectors.c        gpumf_user_vector, gpumf_item_vector(s): factors for a vector index
 */
#ifndef GPUMF_SERVE_H
#define GPUMF_SERVE_H

#include "gpumf_model.h"
#include "gm_score.h"
#include "utils/relcache.h"

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
extern void gpumf_served_forget_local(const char *name);

/* ---------------------------------------------------- served_tables.c */

/*
 * The user's row: its stored factors (nx floats: k, or for graph_filter
 * none (x NULL) or its iALS part's; gpumf_user_factors forms the rest), seen
 * items (sorted), bias.  false when the user is not in the model.  Pointers
 * stay valid until the next call.
 */
extern bool gpumf_served_user(GpumfServed *m, Datum key, const float **x, int32 *nx,
							  const int32 **seen, int32 *nseen, float *bias);
/* the snapshot serving reads the model's tables with in this call */
extern Snapshot gpumf_served_snapshot(void);
/* this call retried after its tables were dropped: read with the latest snapshot */
extern bool gpumf_served_latest;

/*
 * Where gpumf_served_scan_items puts what it reads: the arrays hold cap
 * rows; private ones grow when a row's idx needs more, fixed ones (a shared
 * segment) make it return -1 instead.  Keys go to keys (Datums copied into
 * the current memory context) or, fixed-size ones, to ikeys (int64) or
 * ukeys (uuid bytes).
 */
typedef struct GpumfItemArrays
{
	int64		cap;
	bool		fixed;
	float	   *Y;
	float	   *bias;			/* NULL: no room for biases (implicit models) */
	Datum	   *keys;
	int64	   *ikeys;
	char	   *ukeys;
	bool		any_bias;		/* out: a row had a bias */
} GpumfItemArrays;

/*
 * Read the item table's rows, each straight to its place (rows are stored
 * in idx order); the number of rows, or -1 when fixed arrays are too small.
 * ERRORs for a damaged table, and for an empty unlogged one.
 */
extern int64 gpumf_served_scan_items(Relation rel, const GpumfModel *cat, GpumfServed *m,
									 GpumfItemArrays *d);

/*
 * A version's items as the training that wrote them still has them in
 * memory: its warming (gpumf_served_warm_now) copies them into the shared
 * segment instead of reading the table back.  Only for the version and
 * table named, n rows of k factors, fixed-size keys; anything else is read.
 */
typedef struct GpumfItemsAtHand
{
	int64		model_id;
	int32		version;
	const char *item_table;		/* the catalog's name of it */
	int32		n;
	int			k;
	const float *Y;				/* n x k, as the table's factors */
	const float *bias;			/* the table's biases; NULL: none */
	Datum		(*key) (void *arg, int32 i);	/* item i's key, of the model's item type */
	void	   *key_arg;
} GpumfItemsAtHand;
extern const GpumfItemsAtHand *gpumf_served_at_hand;
/* the items at hand into d's fixed arrays when they are this version's n; false: not */
extern bool gpumf_served_copy_at_hand(const GpumfServed *m, const GpumfModel *cat, int64 n,
									  GpumfItemArrays *d);
/* the item table read into arrays in m->cxt (m->Y, m->item_keys, m->item_bias) */
extern void gpumf_served_load_private(GpumfServed *m, const GpumfModel *cat, Relation rel);
/* the users table's unique index on key and the key type's equality, into m */
extern void gpumf_served_prepare_user_lookup(GpumfServed *m, const GpumfModel *cat);

/* ---------------------------------------------------- shared_models.c */

/*
 * Load the model's current version into m: attach to its shared segment if
 * one is listed, else read the item table (into a new shared segment when
 * gpumf.shared_models is on), else into backend memory.
 */
extern void gpumf_served_load_version(GpumfServed *m, const GpumfModel *cat);
/* stop sharing every version of the model (it was dropped or replaced) */
extern void gpumf_served_forget(int64 model_id);
/* stop sharing this database's versions whose item tables are gone */
extern void gpumf_served_forget_dropped(void);
/* stop sharing the model's versions other than version */
extern void gpumf_served_forget_other_versions(int64 model_id, int32 version);
/* is a version of the model listed in the registry (someone serves it)? */
extern bool gpumf_served_model_is_shared(int64 model_id);
extern bool gpumf_served_warming;	/* a training warms its version before its commit */


/* ------------------------------------------------------ warm_worker.c */

/*
 * When this transaction commits, have a background worker read the model's
 * version into shared memory (gpumf.shared_models), so that no serving call
 * has to.
 */
extern void gpumf_served_warm_on_commit(int64 model_id, int32 version);
extern bool gpumf_served_warms(int64 model_id);
extern void gpumf_served_warm_now(const char *name, int64 model_id, const GpumfItemsAtHand *at_hand);
extern void gpumf_warm_register_at_start(void);

/* ---------------------------------------------------------- serving.c */

/* What serving builds on a served model version, on first use. */
typedef struct GpumfServing
{
	MemoryContext cxt;			/* everything below */
	/* from the catalog row of the served version */
	gm_foldin_params foldin;
	char	   *source;			/* qualified name as trained (for messages) */
	Oid			source_relid;	/* the source, pinned at training; InvalidOid: none */
	char	   *user_col;
	char	   *item_col;
	char	   *value_col;		/* NULL: every row counts 1 */
	/* built on first use */
	gm_keymap  *item_map;		/* item key -> index */
	double	   *gram;			/* Y^T Y, for implicit fold-in (graph_filter with an iALS
								 * part: of its columns) */
	double	   *work;			/* gm_foldin_work(k) doubles */
	float	   *gf_filter;		/* graph_filter: params' filter (foldin.gf_columns), NULL:
								 * absent or damaged */
	float	   *gf_weight;		/* graph_filter: each item's d_i^-2beta, built on first use */
	float	   *item_norms;
	double		vector_radius_sq;	/* vectors.c's l2 form: the largest item's; 0: not yet */
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

/* the index of a user in the loaded users (gpumf_load_users); -1: none */
extern int32 gpumf_user_index(GpumfServed *m, Datum key);
/* the norms of the item factors (built once per version) */
extern const float *gpumf_item_norms(GpumfServed *m);
/* the users' factors, keys and norms (loaded once per version) */
extern void gpumf_load_users(GpumfServed *m);

/* ---------------------------------------------------------- fold_in.c */

/*
 * The user's factors: the stored row, or (recompute, or a user the model
 * lacks) one least-squares solve from the user's current rows in the
 * model's source (pinned by OID), read as the source's owner in a
 * security-restricted operation after checking the caller's SELECT on its
 * columns.  false: no factors (the user is unknown to both, or the source
 * cannot be read and !recompute).
 */
extern bool gpumf_user_factors(GpumfServed *m, const char *model, Datum userkey,
							   bool recompute, GpumfUserFactors *u);
/* The factors of "someone with these items" (a basket): idx/vals merged. */
extern void gpumf_basket_factors(GpumfServed *m, const char *model, int32 *idx, float *vals,
								 int32 n, GpumfUserFactors *u);
/* was the model trained on implicit feedback (values are strengths, not ratings)? */
extern bool gpumf_served_implicit(GpumfServed *m);

/* ------------------------------------------------------- model_load.c */

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
extern void gpumf_served_item_degrees(GpumfServed *m, int64 *deg);
extern void gpumf_gf_form_users(GpumfServed *m, bool all, const int64 *ptr, const int32 *idx,
								int32 n, float *X);
/* factors a stored user row of m has: k, or graph_filter's iALS part's (0: none) */
extern int	gpumf_stored_user_factors(GpumfServed *m);
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

#endif
