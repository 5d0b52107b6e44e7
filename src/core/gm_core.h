/*
 * gm_core.h: the pure-C core of gpumf (no PostgreSQL headers).
 *
 * Sparse matrices, the matrix-factorization trainer (gm_mf_train) that drives
 * any algorithm of gm_algo.h on the cpu or cuda backend, the CPU kernels of
 * implicit ALS, top-k selection, key maps and synthetic data.  Every function
 * that can fail returns GM_OK or an error code (gm_errors.h) and writes a
 * message into a caller-supplied buffer; nothing here longjmps.
 */
#ifndef GM_CORE_H
#define GM_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "gm_errors.h"
#include "gm_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- CSR */

/* Build CSR from coordinates, summing duplicate (row, col) entries. */
int			gm_csr_from_coo(int32_t n_rows, int32_t n_cols, int64_t nnz,
							const int32_t *rows, const int32_t *cols,
							const float *vals, gm_csr *out,
							char *err, size_t errlen);
/* out = transpose(a) (CSR of the transpose, i.e. CSC of a). */
int			gm_csr_transpose(const gm_csr *a, gm_csr *out,
							 char *err, size_t errlen);
void		gm_csr_free(gm_csr *a);

/*
 * Group a's rows by their number of nonzeros, for load-balanced launches:
 * bin b holds the rows with upper[b-1] < nnz <= upper[b] (upper[-1] = -1).
 * upper has nbins strictly increasing entries >= 0; a row longer than
 * upper[nbins - 1] is an error (pass INT64_MAX last to take every row).
 * perm (n_rows) gets the rows bin by bin, ascending within a bin;
 * bin_start (nbins + 1) the offset of each bin in perm.
 */
int			gm_csr_nnz_bins(const gm_csr *a, int nbins, const int64_t *upper,
							int32_t *perm, int32_t *bin_start,
							char *err, size_t errlen);

/* ------------------------------------------------------------ training */

/* What gm_mf_train reports. */
typedef struct gm_mf_result
{
	gm_mf_metrics final;		/* after the last iteration run */
	int			iterations_run; /* < iterations when tolerance stopped it */
	double		train_seconds;
	double		loss_seconds;	/* of train_seconds: evaluating the loss after each iteration */
	double		transfer_seconds;	/* setting up and copying back (host <-> device) */
	char		device_name[128];
} gm_mf_result;

/*
 * Train p->algorithm on p->backend.  d->R and d->Rt hold the values as read;
 * d->X and d->Y (and the bias arrays when p->biases is on for an explicit
 * algorithm) must be allocated by the caller.  gm_mf_train initialises the
 * factors (gm_factors_init with p->seed, side 0 for X and 1 for Y), the
 * biases to 0 and d->global_mean to the mean of R's values (explicit
 * algorithms with biases; 0 otherwise), runs up to p->iterations iterations
 * (fewer when p->tolerance stops it) and leaves the trained model in d.
 * cb may be NULL.  GM_ECANCELED when cb->should_stop asked to stop;
 * GM_ENOTSUP when the algorithm or an option of it is not available on the
 * backend; GM_ENODEVICE when the cuda backend is asked for and the CUDA
 * module is not loaded (gm_cuda_available).
 */
int			gm_mf_train(const gm_mf_params *p, gm_mf_data *d,
						const gm_callbacks *cb, gm_mf_result *res,
						char *err, size_t errlen);

/*
 * Defaults for algorithm a (backend cpu, threads 0, tolerance 0, seed 42,
 * factors 64, iterations 15).  Implicit ALS: regularization 0.01, alpha 1,
 * cg_steps 3, alpha0 1, nu 0, solver CG, block_size 0, biases off.
 * Explicit ALS and CCD++: regularization 0.05, biases on, inner_iterations 3
 * (used by CCD++); their implicit-only fields keep the implicit defaults.
 */
void		gm_mf_params_defaults(gm_mf_params *p, gm_algorithm a);

/* Range checks of the fields that apply to p->algorithm; the message names the parameter. */
int			gm_mf_params_check(const gm_mf_params *p, char *err, size_t errlen);

/* "als", "als_explicit", "ccd" (NULL for an unknown value) and back (GM_EINVAL if unknown). */
const char *gm_algorithm_name(gm_algorithm a);
int			gm_algorithm_from_name(const char *name, gm_algorithm *a);

/* Deterministic initial factors: uniform [0, 0.01) keyed by (seed, side, row). */
void		gm_factors_init(float *F, int64_t n, int k, uint64_t seed, int side);

/* ------------------------------------------------- implicit ALS, CPU parts */

/* Confidence matrix c = 1 + alpha * v (same pattern as a). */
int			gm_confidence(const gm_csr *a, float alpha, gm_csr *out,
						  char *err, size_t errlen);

/* The same, overwriting a's values. */
void		gm_confidence_inplace(gm_csr *a, float alpha);

/* G = Y^T Y + reg * I (k x k, row-major, full), Y is n x k row-major. */
void		gm_gram(const float *Y, int64_t n, int k, float reg, float *G,
					int threads);

/*
 * For rows [begin, end) of C (confidences), refine X[u] with cg_steps
 * conjugate-gradient steps on (Y^T C_u Y + reg I) x = Y^T C_u p(u), warm
 * started from X[u].  G = Y^T Y + reg I.
 */
void		gm_als_cg_solve_rows(const gm_csr *C, float *X, const float *Y,
								 const float *G, int k, int cg_steps,
								 int32_t begin, int32_t end, int threads);

/*
 * The implicit-ALS training loss, as the implicit library defines it:
 * [sum_ui c_ui (p_ui - x_u.y_i)^2 + reg (|X|^2 + |Y|^2)] /
 * (sum c_ui over observed + n_users * n_items - nnz).
 */
double		gm_als_loss(const gm_csr *C, const float *X, const float *Y, int k,
						float reg, int threads);

/* ----------------------------------------------------------- backends */

/*
 * Load the CUDA module (a shared object built from cuda/) and probe for a
 * device, once per process.  Returns GM_OK and the device name,
 * GM_ENOMODULE when gpumf was built without the module, GM_ENODEVICE when
 * there is no driver or GPU, the module fails to load or was built for
 * another GM_ALGO_ABI_VERSION (err says which).
 */
int			gm_cuda_available(const char *module_path, char *name,
							  size_t namelen, char *err, size_t errlen);

/*
 * The operations of algorithm a on backend b, or NULL with a message
 * ("algorithm ccd is not available on the cpu backend"; on cuda also when
 * the module is not loaded).  gm_mf_train calls this; tests and benchmarks
 * may drive a table themselves.
 */
const gm_algo_ops *gm_algo_ops_get(gm_algorithm a, gm_backend_kind b,
								   char *err, size_t errlen);

/*
 * A symbol of the loaded CUDA module (another ABI group: sparse solvers,
 * batch scoring), or NULL when the module is not loaded or lacks it.
 */
void	   *gm_cuda_symbol(const char *name);

/*
 * Cap the device memory the CUDA module allocates (bytes; negative: no cap),
 * now and whenever the module loads later.  An allocation over the cap fails
 * as on a full card: GM_ENOMEM with what was asked for and what is held.
 */
void		gm_cuda_memory_cap(int64_t bytes);

/* Device memory the CUDA module's own allocations hold now (0 when not loaded). */
int64_t		gm_cuda_memory_held(void);

/* ----------------------------------------------------------- serving */

/* Indices of the n largest scores, best first; ties broken by lower index.
 * skip (may be NULL) is a sorted list of nskip indices to leave out.
 * Returns the number written (<= n). */
int			gm_topk(const float *scores, int32_t m, int n,
					const int32_t *skip, int32_t nskip,
					int32_t *out_idx, float *out_score);



/* ------------------------------------------------------------ fold-in */

/*
 * Sort (idx, vals) by idx and sum the values of equal indices, in place
 * (vals may be NULL); returns the new count, -1 when out of memory.
 */
int32_t		gm_entries_merge(int32_t *idx, float *vals, int32_t n);

/* What a model was trained with, as fold-in needs it (foldin.c). */
typedef struct gm_foldin_params
{
	gm_algorithm algorithm;
	float		regularization;
	float		alpha;			/* als */
	float		alpha0;			/* als: 1 for the 2008 form */
	float		nu;				/* als: 0 for a fixed lambda */
	int			biases;			/* als_explicit, ccd */
	double		global_mean;	/* with biases */
} gm_foldin_params;

/* doubles of work gm_foldin needs for k factors */
size_t		gm_foldin_work(int k);

/*
 * The factors x (k floats) and bias (0 without biases) that one row with
 * the entries idx/vals (sorted, distinct item indices) gets against the
 * fixed item factors Y (n_items x k) and item_bias (explicit models with
 * biases): the exact solve of the trainer's per-row least squares (see
 * foldin.c for each algorithm's system).  G = Y^T Y (k x k, double) for
 * implicit models, NULL otherwise.  GM_EINVAL for bad entries or a system
 * that is not positive definite.
 */
int			gm_foldin(const gm_foldin_params *p, const float *Y, const float *item_bias,
					  int32_t n_items, int k, const double *G, const int32_t *idx,
					  const float *vals, int32_t n, float *x, float *bias,
					  double *work, char *err, size_t errlen);

/* ------------------------------------------------------------ key maps */

/*
 * Maps arbitrary keys (64-bit integers or byte strings) to dense indices in
 * order of first appearance; gm_keymap_sort renumbers them in key order
 * (integers ascending, byte strings by memcmp then length) so that indices,
 * and so seeded initial factors, do not depend on the scan order.
 */
typedef struct gm_keymap gm_keymap;

gm_keymap  *gm_keymap_create(int byte_keys);
/* index of key, adding it if new; -1 when out of memory */
int32_t		gm_keymap_int(gm_keymap *m, int64_t key);
int32_t		gm_keymap_bytes(gm_keymap *m, const void *key, uint32_t len);
int32_t		gm_keymap_size(const gm_keymap *m);
/* index of key without adding it: -1 when absent (or of the other kind) */
int32_t		gm_keymap_find_int(const gm_keymap *m, int64_t key);
int32_t		gm_keymap_find_bytes(const gm_keymap *m, const void *key, uint32_t len);
/* renumber in key order; old_to_new has gm_keymap_size entries */
int			gm_keymap_sort(gm_keymap *m, int32_t *old_to_new);
int64_t		gm_keymap_int_at(const gm_keymap *m, int32_t idx);
const void *gm_keymap_bytes_at(const gm_keymap *m, int32_t idx, uint32_t *len);
void		gm_keymap_free(gm_keymap *m);

/* ---------------------------------------------------------- synthetic data */

/*
 * An implicit-feedback dataset shaped like MovieLens: lognormal user
 * activity (at least min_per_user distinct items per user), power-law item
 * popularity, and a planted structure: items fall into `clusters` groups,
 * each user prefers one, and draws from it with probability `affinity`.
 * Values are ratings 0.5 .. 5.0.  About one row in five is marked holdout.
 * Deterministic in seed; rows of user u depend only on (seed, u).
 */
typedef struct gm_synth
{
	int32_t		n_users;
	int32_t		n_items;
	int64_t		n_rows;
	int			min_per_user;
	int			clusters;
	double		affinity;
	uint64_t	seed;
	/* polled during gm_synth_init (may be NULL); non-zero stops it */
	int			(*should_stop) (void *arg);
	void	   *stop_arg;
	/* derived by gm_synth_init */
	int32_t    *counts;			/* rows per user */
	int32_t    *rank_item;		/* popularity rank -> item id */
	double	   *cdf;			/* global popularity CDF over ranks */
	int32_t    *cl_start;		/* cluster c's ranks: cl_rank[cl_start[c] ..] */
	int32_t    *cl_rank;
	double	   *cl_cdf;
	int32_t		max_count;
} gm_synth;

/* Limits gm_synth_init enforces (the SQL layer checks them first, by name). */
#define GM_SYNTH_MAX_USERS	50000000
#define GM_SYNTH_MAX_ITEMS	10000000
#define GM_SYNTH_MAX_ROWS	INT64_C(2000000000)
int			gm_synth_init(gm_synth *g, char *err, size_t errlen);
/* Rows of user u (distinct items); returns the count written. */
int32_t		gm_synth_user(const gm_synth *g, int32_t u, int32_t *items,
						  float *values, uint8_t *holdout, uint8_t *scratch);
void		gm_synth_free(gm_synth *g);

/*
 * Serving: an int8 copy of the item factors (one scale per item) for a first
 * pass over every item, then exact float32 rescoring of the items whose
 * error bound lets them reach the top n.  The result equals gm_topk over the
 * float32 scores Y·x, with a quarter of the bytes read per call.
 */
#define GM_QMAT_MAX_K 1024

typedef struct gm_qmat
{
	int32_t		n;
	int			k;
	int			kpad;			/* k rounded up to 64; rows are zero-padded */
	int8_t	   *q;				/* n x kpad, round(y_i / scale_i) */
	float	   *scale;			/* max|y_i| / 127 */
	float	   *qabs;			/* scale_i * sum_f |q_if| (for the error bound) */
	int32_t    *qsum;			/* sum_f q_if */
	void	   *owned;			/* the memory gm_qmat_build allocated (NULL: the caller's) */
} gm_qmat;

/* GM_EINVAL unless 1 <= k <= GM_QMAT_MAX_K; GM_ENOMEM */
int			gm_qmat_build(const float *Y, int32_t n, int k, gm_qmat *out);
/*
 * The same in caller-owned memory (shared memory, say): gm_qmat_size bytes,
 * 64-byte aligned, rows built in parallel over threads (<= 0: one per
 * core); gm_qmat_attach points a gm_qmat at such memory built before.
 */
size_t		gm_qmat_size(int32_t n, int k);
int			gm_qmat_build_in(const float *Y, int32_t n, int k, void *mem, gm_qmat *out,
							 int threads);
int			gm_qmat_attach(void *mem, int32_t n, int k, gm_qmat *out);
/* free what gm_qmat_build allocated (nothing for caller-owned memory) */
void		gm_qmat_free(gm_qmat *Q);
/* floats of scratch gm_topk_dot and gm_topk_dot_among need */
size_t		gm_topk_dot_scratch(const gm_qmat *Q);
/*
 * Exact top-n of Y x leaving out skip (sorted); scratch: gm_topk_dot_scratch.
 * *rescored (may be NULL) gets the number of items scored exactly.
 */
int			gm_topk_dot(const float *Y, const gm_qmat *Q, const float *x, int n,
						const int32_t *skip, int32_t nskip, float *scratch,
						int32_t *out_idx, float *out_score, int32_t *rescored);
/* The same among the items only[0 .. nonly) (sorted, distinct) alone. */
int			gm_topk_dot_among(const float *Y, const gm_qmat *Q, const float *x, int n,
							  const int32_t *only, int32_t nonly,
							  const int32_t *skip, int32_t nskip, float *scratch,
							  int32_t *out_idx, float *out_score, int32_t *rescored);
/*
 * The first pass alone: approx[i] and bound[i] with |y_i . x - approx[i]| <=
 * bound[i] for every item, y_i . x being the float32 score the rescoring
 * computes.
 */
void		gm_qmat_scores(const gm_qmat *Q, const float *x, float *approx, float *bound);
/* The instruction set the first pass uses: "avx512vnni", "avx2" or "plain". */
const char *gm_serve_isa(void);
/*
 * Use the first pass for isa ("plain", "avx2", "avx512vnni"; NULL: the
 * fastest again), for tests and benchmarks: all give the same integer sums.
 * GM_ENOTSUP when this CPU lacks it.
 */
int			gm_serve_use_isa(const char *isa);

/* norms[i] = |F_i| (F is n x k row-major), summed in double */
void		gm_row_norms(const float *F, int64_t n, int k, float *norms);
/*
 * Top n of the cosine similarity (F_i . x) / (|F_i| |x|) over the m rows of F,
 * leaving out skip (sorted); rows of norm 0 never rank, and a zero x ranks
 * nothing.  scratch: m floats.
 */
int			gm_topk_cosine(const float *F, const float *norms, int32_t m, int k,
						   const float *x, int n, const int32_t *skip, int32_t nskip,
						   float *scratch, int32_t *out_idx, float *out_score);

/* Monotonic seconds. */
double		gm_now(void);
int			gm_default_threads(void);

#ifdef __cplusplus
}
#endif

#endif							/* GM_CORE_H */
