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
/*
 * Row cuts of a into n shares of about equal work, a row weighing its
 * entries plus row_weight: cut[0] = 0 .. cut[n] = rows (several GPUs,
 * gm_gpu_share_row_weight).
 */
void		gm_csr_cut_rows(const gm_csr *a, int n, double row_weight, int32_t *cut);
/*
 * ptr[0 .. a->n_cols] = the row pointers of a's transpose (column j's
 * entries counted, then summed), with threads threads (0: OpenMP's
 * default).  Each thread counts a share of the entries
 * into counters of its own (int32, at most half a byte an entry in all;
 * fewer threads where they would be more), so no two threads add to one
 * counter.  cb->should_stop is asked every 2^20 entries: GM_ECANCELED (ptr
 * then undefined) when it says stop, else GM_OK.
 */
int			gm_csr_column_pointers(const gm_csr *a, int threads, const gm_callbacks *cb,
								   int64_t *ptr);
/*
 * memcpy(dst, src, n) by the threads of an OpenMP team, 4 MB a piece (the
 * CUDA module fills pinned buffers with it: one thread copies at a fraction
 * of the memory's rate); gm_copy_threads with threads threads (0: OpenMP's
 * default).
 */
void		gm_copy_parallel(void *dst, const void *src, size_t n);
void		gm_copy_threads(void *dst, const void *src, size_t n, int threads);

/*
 * The pages of n arrays (entry sizes elem[]) holding entries [from, to)
 * mapped ahead of their writer by a thread of its own (populate.c;
 * MADV_POPULATE_WRITE: nothing in them is written), at most window entries
 * ahead of the writer's position (gm_populate_advance; window <= 0: no
 * limit).  NULL when it cannot start (an older kernel, an empty range): the
 * writer faults them itself.  gm_populate_stop stops it (finish: once every
 * page is mapped, the window lifted), waits for it and returns the entry up
 * to which pages were mapped; the arrays must not move or be freed before.
 */
#define GM_POPULATE_MAX 4
typedef struct gm_populator gm_populator;
gm_populator *gm_populate_start(char *const *arrays, const size_t *elem, int n, int64_t from,
								int64_t to, int64_t window);
void		gm_populate_advance(gm_populator *p, int64_t writer);
int64_t		gm_populate_stop(gm_populator *p, int finish);

/*
 * gm_lower_bound64 (row pointers) and gm_lower_bound32 (a row's columns, a
 * sorted list of items): the first i of [lo, hi) with a[i] >= v (hi when
 * none), a sorted ascending.
 */
#define GM_LOWER_BOUND(name, T) \
static inline int64_t \
name(const T *a, int64_t lo, int64_t hi, T v) \
{ \
	while (lo < hi) \
	{ \
		int64_t		mid = lo + (hi - lo) / 2; \
\
		if (a[mid] < v) \
			lo = mid + 1; \
		else \
			hi = mid; \
	} \
	return lo; \
}
GM_LOWER_BOUND(gm_lower_bound64, int64_t)
GM_LOWER_BOUND(gm_lower_bound32, int32_t)
#undef GM_LOWER_BOUND

/*
 * The degree-normalized values of a's entries, 1 / sqrt(d_row d_col) (every
 * entry counts 1; degrees from the row pointers of a and of its transpose
 * at), into v (a->nnz floats) with threads threads; returns the sum of
 * their squares in float64 (graph_filter's ||Rn||_F^2).
 */
double		gm_csr_normalized(const gm_csr *a, const gm_csr *at, float *v, int threads);
int			gm_csr_transpose(const gm_csr *a, gm_csr *out,
							 char *err, size_t errlen);
/*
 * The same two asking cb (may be NULL) every 2^20 entries or so:
 * GM_ECANCELED when it asked to stop (nothing is left allocated).
 */
int			gm_csr_from_coo_polled(int32_t n_rows, int32_t n_cols, int64_t nnz,
								   const int32_t *rows, const int32_t *cols,
								   const float *vals, const gm_callbacks *cb,
								   gm_csr *out, char *err, size_t errlen);
int			gm_csr_transpose_polled(const gm_csr *a, const gm_callbacks *cb,
									gm_csr *out, char *err, size_t errlen);
void		gm_csr_free(gm_csr *a);

/*
 * gm_csr_from_coo_polled for large inputs: takes the three coordinate
 * arrays (malloc'd; freed here, on errors too) and gives their pages back
 * to the system as it consumes them, so that it holds about 12 bytes an
 * entry at its peak (the coordinates, then the CSR with each entry's row)
 * instead of 20 plus a row histogram a thread.  The same CSR.
 */
int			gm_csr_from_coo_consume(int32_t n_rows, int32_t n_cols, int64_t nnz,
									int32_t *rows, int32_t *cols, float *vals,
									const gm_callbacks *cb, gm_csr *out,
									char *err, size_t errlen);

/*
 * The same CSR built on the GPU by the loaded CUDA module (one sort of the
 * pairs there; cuda/common/coo_csr.cu), when it is loaded: the arrays are
 * taken (set to NULL) once uploaded, the rows' freed, the columns' and
 * values' made out's entries.  An error with them still
 * set means nothing was uploaded (no module or device: GM_ENODEVICE, no
 * room: GM_ENOMEM, too many pairs: GM_ENOTSUP): build on the host.  keep: a
 * copy stays on the GPU, which the training's upload of out takes instead
 * of copying it (gm_csr_device_kept_bytes says how large; gm_csr_device_drop_kept
 * frees it).  row_map, col_map (row_map_n, col_map_n entries; NULL: none):
 * each entry's index is map[entry] (an entry outside the map, or mapped to
 * -1, is an error, GM_EINVAL).  col_ptr (n_cols + 1, may be NULL): the row
 * pointers of out's transpose, as gm_csr_column_pointers counts them.
 * seconds (3, may be NULL): up, sort and sums, down.
 */
int			gm_csr_from_coo_device(int32_t n_rows, int32_t n_cols, int64_t nnz,
								   int32_t **rows, int32_t **cols, float **vals,
								   const int32_t *row_map, int32_t row_map_n,
								   const int32_t *col_map, int32_t col_map_n, int keep,
								   const gm_callbacks *cb, gm_csr *out, int64_t *col_ptr,
								   double *seconds, char *err, size_t errlen);
int64_t		gm_csr_device_kept_bytes(void);
void		gm_csr_device_drop_kept(void);

/*
 * a's transpose a slab of its rows at a time, without holding it whole:
 * make counts a's columns (the transpose's row pointers, indptr: n_cols + 1,
 * owned by the transposer) and where each thread's entries go; rows writes
 * the transpose's rows [c0, c1) into ind and dat (indptr[c1] - indptr[c0]
 * entries, from index 0), exactly as gm_csr_transpose orders them; slabs
 * taken in order (each c0 the last c1) read each of a's entries once in
 * all.  a must stay as it is while the transposer lives.  It holds 4 bytes
 * a column a thread (with at most half a byte an entry's worth of threads)
 * and 8 a row.
 */
typedef struct gm_transposer gm_transposer;
int			gm_transposer_make(const gm_csr *a, gm_transposer **out,
							   char *err, size_t errlen);
const int64_t *gm_transposer_indptr(const gm_transposer *t);
int			gm_transposer_rows(gm_transposer *t, int32_t c0, int32_t c1,
							   int32_t *ind, float *dat);
void		gm_transposer_free(gm_transposer *t);

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
	int			iterations_run; /* < iterations when tolerance or a held-out metric stopped it */
	double		train_seconds;
	double		loss_seconds;	/* of train_seconds: evaluating the loss after each iteration */
	double		transfer_seconds;	/* setting up and copying back (host <-> device) */
	double		download_seconds;	/* of transfer_seconds: after the training (copying back) */
	char		device_name[128];
} gm_mf_result;

/* ------------------------------------------------- ranking metrics */

typedef enum gm_rank_metric
{
	GM_METRIC_RECALL = 0,		/* hits in the top K / the user's held-out items */
	GM_METRIC_NDCG = 1,			/* DCG of the top K / the best DCG possible */
	GM_METRIC_PRECISION = 2,	/* hits in the top K / K */
	GM_METRIC_COUNT
} gm_rank_metric;

/* Averages over the users with at least one held-out item. */
typedef struct gm_rank_result
{
	double		recall;
	double		ndcg;
	double		precision;
	int64_t		users;			/* users evaluated */
} gm_rank_result;

/* "recall@20" etc. -> metric and K (1 .. 1000); GM_EINVAL with a message otherwise */
int			gm_rank_metric_parse(const char *text, gm_rank_metric *m, int *K,
								 char *err, size_t errlen);
const char *gm_rank_metric_name(gm_rank_metric m);
double		gm_rank_value(const gm_rank_result *r, gm_rank_metric m);

/*
 * Top-K ranking quality of the model X (users x k), Y (items x k) on the
 * held-out entries test (users x items), scoring every item and leaving out
 * each user's items in train (both CSR over the same indices, columns
 * sorted), as LightGCN reports it: recall@K = hits / |test_u|, NDCG@K with
 * binary relevance and log2(rank + 1) discounts over min(K, |test_u|) ideal
 * positions, precision@K = hits / K.  Ties rank the lower item first.  cb
 * (may be NULL) is polled between batches of users: GM_ECANCELED.  With
 * backend GM_BACKEND_CUDA and the module loaded, the scores are computed on
 * the GPU (cuBLAS, FP32) and the top K on the CPU.
 */
int			gm_rank_eval(const gm_csr *train, const gm_csr *test, const float *X,
						 const float *Y, int k, int K, int threads,
						 gm_backend_kind backend, const gm_callbacks *cb,
						 gm_rank_result *out, char *err, size_t errlen);

/*
 * Split R (users x items) into train and test: each user with at least two
 * entries gives round(fraction * n) of them (at least one, at most n - 1),
 * drawn by a seeded generator keyed by (seed, user), to test.  Both share
 * R's shape; values are kept.
 */
int			gm_split_holdout(const gm_csr *R, double fraction, uint64_t seed,
							 gm_csr *train, gm_csr *test, char *err, size_t errlen);
/*
 * gm_split_holdout for a seeded sample of about max_users users (every user
 * when max_users is 0 or at least R's rows): the others keep all their
 * entries in train, so that a held-out evaluation scores only the sample.
 */
int			gm_split_holdout_users(const gm_csr *R, double fraction, uint64_t seed,
								   int32_t max_users, gm_csr *train, gm_csr *test,
								   char *err, size_t errlen);

/* ---------------------------------------------- held-out early stopping */

/*
 * gm_mf_train_eval evaluates the model on held-out entries every `every`
 * iterations (and after the last), and stops once `patience` evaluations in
 * a row did not beat the best one (0: never stops early).  With keep_best
 * the model left in d is the best evaluated one (else the last).
 */
typedef struct gm_mf_eval
{
	const gm_csr *test;			/* held-out entries, users x items */
	gm_rank_metric metric;
	int			K;
	int			every;			/* >= 1 */
	int			patience;
	int			keep_best;
	/* called after each evaluation (may be NULL; must not longjmp) */
	void		(*on_eval) (void *arg, int iteration, const gm_rank_result *r);
	void	   *arg;
	/* results */
	double		best;			/* the best value of metric (NaN if none) */
	int			best_iteration;
	gm_rank_result best_result;
	double		eval_seconds;	/* spent evaluating */
} gm_mf_eval;

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
 * Warm p->backend up for trainings like p: one iteration of p's algorithm,
 * solver and factors on a small built-in problem (96 x 320), so that a
 * backend's one-time costs (on a GPU: the context, the lazily loaded
 * kernels, the BLAS library's set-up) are paid here, on a thread of the
 * caller's choice, while the real problem is still being read.  Touches no
 * global state but the backend's; the result is thrown away.
 */
int			gm_mf_warmup(const gm_mf_params *p, char *err, size_t errlen);

/*
 * The end of the slice of sw's rows that gm_mf_train hands to run() from
 * begin: the first end > begin whose rows [begin, end) cost at least budget
 * (row_work a row, nnz_work a nonzero), or sw->n_rows, and never more
 * than sw->max_rows rows (when > 0); *work gets the slice's cost.  O(log n)
 * (a binary search over the row pointers).
 */
int32_t		gm_sweep_slice_end(const gm_sweep *sw, int32_t begin, double budget, double *work);

/*
 * Host bytes gm_mf_train_eval allocates for p, at most, beside d's arrays
 * (R, Rt, the factors and biases): the algorithm's copies and scratch on
 * the CPU backend with gm_resolve_threads(p->threads) threads, a copy of
 * the best model (keep_best) and the held-out evaluation's (eval_K > 0: its
 * K).  *per_thread (may be NULL) gets what each thread's scratch adds (the
 * exact and block solvers' systems grow with factors^2, the block solver's
 * with the longest row too): the callers check the total against their
 * memory limit before training.
 */
double		gm_mf_memory(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
						 int eval_K, int keep_best, double *per_thread);

/*
 * The device memory the CUDA backend allocates to train p on R and Rt, in
 * bytes (on each GPU, with p->gpus > 1), by part: the two matrices as uploaded (row pointers, indices,
 * values, the chunk lists), the factors (padded rows, biases, ridges), and
 * the solver's own arrays (CG's work rows, the block solver's per-entry
 * predictions and permutation, explicit ALS's batch of systems, CCD++'s
 * feature-major copies).  It follows cuda/train/'s allocations; what the
 * module allocates beside them (cuBLAS's workspace, the CUDA context) is
 * not counted.  Callers compare it with the card's free memory before the
 * upload (gpumf_check_gpu_memory).  total is the parts' sum, or the peak of
 * the upload when that is higher (a lean implicit ALS upload on one GPU
 * transposes R there, with scratch, before the factors exist).
 */
typedef struct gm_device_need
{
	double		matrices;
	double		factors;
	double		solver;
	double		total;
} gm_device_need;

void		gm_mf_device_memory(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
								gm_device_need *need);

/* gm_mf_train with a held-out evaluation (ev may be NULL: gm_mf_train). */
int			gm_mf_train_eval(const gm_mf_params *p, gm_mf_data *d,
							 const gm_callbacks *cb, gm_mf_eval *ev,
							 gm_mf_result *res, char *err, size_t errlen);

/*
 * A session trains one dataset (the same d->R and d->Rt) many times with
 * different parameters, keeping what the backend built from the data (on a
 * GPU: the uploaded matrices) between trainings when the algorithm's table
 * has reset.  Each gm_mf_session_train is a gm_mf_train_eval.
 */
typedef struct gm_mf_session gm_mf_session;

gm_mf_session *gm_mf_session_create(void);
int			gm_mf_session_train(gm_mf_session *s, const gm_mf_params *p,
								gm_mf_data *d, const gm_callbacks *cb,
								gm_mf_eval *ev, gm_mf_result *res,
								char *err, size_t errlen);
/* how many trainings reused the backend's state instead of creating it anew */
int			gm_mf_session_reuses(const gm_mf_session *s);
void		gm_mf_session_free(gm_mf_session *s);

/*
 * Defaults for algorithm a (backend cpu, threads 0, tolerance 0, seed 42,
 * factors 64, iterations 15).  Implicit ALS: regularization 0.01, alpha 1,
 * cg_steps 3, alpha0 1, nu 0, solver CG, block_size 0, block_sweeps 1,
 * tf32 -1 (GPU: tensor cores for CG's products from 512 factors), biases off.
 * Explicit ALS and CCD++: regularization 0.05, biases on, inner_iterations 3
 * (used by CCD++); their implicit-only fields keep the implicit defaults.
 */
void		gm_mf_params_defaults(gm_mf_params *p, gm_algorithm a);

/* Range checks of the fields that apply to p->algorithm; the message names the parameter. */
int			gm_mf_params_check(const gm_mf_params *p, char *err, size_t errlen);

/* "als", "als_explicit", "ccd" (NULL for an unknown value) and back (GM_EINVAL if unknown). */
const char *gm_algorithm_name(gm_algorithm a);
int			gm_algorithm_from_name(const char *name, gm_algorithm *a);
/* Does the algorithm fit ratings (and so have biases and an RMSE)? */
int			gm_algorithm_is_explicit(gm_algorithm a);

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
 * started from X[u].  G = Y^T Y + reg I.  (The 2008 model: alpha0 = 1, nu = 0.)
 */
void		gm_als_cg_solve_rows(const gm_csr *C, float *X, const float *Y,
								 const float *G, int k, int cg_steps,
								 int32_t begin, int32_t end, int threads);

/*
 * One side of the implicit model's sweep (src/core/train/als_implicit.c): row u
 * of X solves A x = b with A = G + sum_(i in row u) (c_i - alpha0) y_i y_i^T
 * + reg[u] I, b = sum c_i y_i, where G = alpha0 Y^T Y (+ regularization I
 * when reg is NULL: a ridge the same for every row, nu = 0).
 */
typedef struct gm_als_side
{
	const gm_csr *C;			/* this side's rows, values = confidences */
	float	   *X;				/* this side's factors, solved in place */
	const float *Y;				/* the other side's factors */
	const float *G;				/* k x k */
	const float *reg;			/* per-row ridge, or NULL (in G) */
	float		alpha0;
	int			k;
} gm_als_side;

/*
 * Solve rows [begin, end) of a side with a solver (gm_solver): CG with
 * cg_steps steps from the current x, the exact solve, or block_sweeps
 * passes of block coordinate descent over blocks of block_size.  A row
 * whose system (or a block of it) is not positive definite keeps its
 * factors.  GM_ENOMEM when the scratch cannot be allocated.
 */
int			gm_als_solve_rows(const gm_als_side *s, gm_solver solver, int cg_steps,
							  int block_size, int block_sweeps, int32_t begin,
							  int32_t end, int threads);

/*
 * out[r] = regularization * (nnz of row r + alpha0 * A->n_cols)^nu for the
 * rows of A: the frequency-scaled ridges of one side.
 */
void		gm_als_row_reg(const gm_csr *A, float regularization, float alpha0,
						   float nu, float *out);

/*
 * The implicit-ALS training loss, as the implicit library defines it:
 * [sum_ui c_ui (p_ui - x_u.y_i)^2 + reg (|X|^2 + |Y|^2)] /
 * (sum c_ui over observed + n_users * n_items - nnz).
 */
double		gm_als_loss(const gm_csr *C, const float *X, const float *Y, int k,
						float reg, int threads);

/*
 * The same with the unobserved weight alpha0 and per-row ridges: the
 * objective of src/core/train/als_implicit.c,
 * [sum_S c (1 - s)^2 + alpha0 sum_(not S) s^2 + sum_u reg_x[u] |x_u|^2 +
 * sum_i reg_y[i] |y_i|^2] / (sum_S c + alpha0 (n_users n_items - nnz));
 * reg_x, reg_y NULL: reg for every row.
 */
double		gm_als_objective(const gm_csr *C, const float *X, const float *Y, int k,
							 float alpha0, float reg, const float *reg_x,
							 const float *reg_y, int threads);

/* --------------------------------------------- hyper-parameter search */

typedef enum gm_tune_method
{
	GM_TUNE_LOCAL = 0,			/* Latin-hypercube start, then local moves around the best */
	GM_TUNE_RANDOM = 1,			/* uniform random draws (the baseline) */
	GM_TUNE_BAYES = 2,			/* Latin-hypercube start, then Gaussian-process expected
								 * improvement */
	GM_TUNE_COUNT
} gm_tune_method;

/*
 * What the implicit-ALS search varies.  The ridge is searched as the ridge
 * of an average user, reg_eff = regularization * (mean n_u + alpha0 |I|)^nu,
 * so that nu does not shift its scale; alpha is not searched (on 0/1 data
 * only (1 + alpha) / alpha0 matters).
 */
typedef struct gm_tune_space
{
	int			factors[16];	/* candidates, ascending */
	int			n_factors;
	double		alpha0_lo,
				alpha0_hi;		/* log-uniform */
	double		reg_lo,
				reg_hi;			/* reg_eff, log-uniform */
	double		nu_lo,
				nu_hi;			/* uniform */
} gm_tune_space;

/* One trial: what was trained, and how it scored at its best iteration. */
typedef struct gm_tune_trial
{
	int			trial;			/* 1-based */
	gm_mf_params p;				/* p.iterations: the best iteration */
	double		reg_eff;
	double		metric;			/* the searched metric at the best iteration */
	gm_rank_result result;
	int			iterations_run;
	double		seconds;		/* training and evaluating */
} gm_tune_trial;

typedef struct gm_tune_config
{
	gm_mf_params base;			/* everything not searched; iterations = the most per trial */
	gm_tune_space space;
	gm_tune_method method;
	int			budget;			/* trials, 1 .. 1000 */
	uint64_t	seed;
	gm_rank_metric metric;
	int			K;
	int			eval_every;		/* evaluate every this many iterations */
	int			patience;		/* evaluations without improvement that end a trial */
	/* after each trial (may be NULL; must not longjmp) */
	void		(*on_trial) (void *arg, const gm_tune_trial *t);
	void	   *arg;
} gm_tune_config;

/* The default space: factors {32, 64, 128}, alpha0 1e-3 .. 1, reg_eff 1e-3 .. 1e3, nu 0 .. 1. */
void		gm_tune_space_defaults(gm_tune_space *s);

/*
 * Search cfg->space for the setting that scores best on the held-out
 * entries valid after training on R (Rt its transpose), cfg->budget
 * trainings in one session (the data stays on the device between them),
 * each stopped early on the metric; trial 1 is the defaults
 * (gm_mf_params_defaults: alpha0 1, nu 0, regularization 0.01, factors 64
 * or the nearest candidate).  trials gets cfg->budget entries, *best the
 * index of the best.  cb is polled as in gm_mf_train.
 */
int			gm_tune(const gm_tune_config *cfg, const gm_csr *R, const gm_csr *Rt,
					const gm_csr *valid, const gm_callbacks *cb,
					gm_tune_trial *trials, int *best, char *err, size_t errlen);

/* ------------------------------------- the automatic choice (auto.c) */

/*
 * Where the automatic search starts (implicit ALS: factors, alpha0, nu and
 * the ridge of an average user; explicit: the weighted lambda), chosen from
 * the searches of test/bench/README.md ("Good without tuning").
 */
#define GM_AUTO_START_FACTORS	64
#define GM_AUTO_START_ALPHA0	0.05
#define GM_AUTO_START_NU		0.8
#define GM_AUTO_START_REG_EFF	3.0
#define GM_AUTO_START_LAMBDA	0.05

/* fields of gm_auto_config.base the search keeps (given explicitly) */
#define GM_AUTO_FIX_FACTORS		0x01
#define GM_AUTO_FIX_REG			0x02
#define GM_AUTO_FIX_ALPHA0		0x04
#define GM_AUTO_FIX_NU			0x08

typedef struct gm_auto_config
{
	gm_mf_params base;			/* algorithm, backend, threads, seed, solver; fixed values */
	unsigned	fixed;			/* GM_AUTO_FIX_* */
	gm_rank_metric metric;		/* implicit: the held-out metric */
	int			K;
	int			eval_every;		/* implicit: evaluate every this many iterations */
	int			max_iterations; /* per trial (implicit: stopped early on the metric) */
	int			max_factors;	/* the ladder's ceiling */
	int			max_trials;		/* trials has room for this many */
	double		seconds;		/* no trial starts that would end after this */
	void		(*on_trial) (void *arg, const gm_tune_trial *t);	/* may be NULL */
	void	   *arg;
} gm_auto_config;

typedef struct gm_auto_result
{
	gm_mf_params best;			/* the best trial's (implicit: iterations its best one) */
	double		reg_eff;
	double		metric;			/* implicit: metric@K; explicit: RMSE (held out) */
	gm_rank_result rank;
	int			best_trial;		/* index into trials */
	int			trials;
	double		seconds;
	int			stopped_by_time;
} gm_auto_result;

/*
 * Choose the hyper-parameters cfg->fixed leaves free on the held-out rows
 * valid after training on R (Rt its transpose): a structured search of
 * auto.c's comment, in one session, within cfg->seconds and
 * cfg->max_trials.  trials gets each trial; out the best.
 */
int			gm_auto_tune(const gm_auto_config *cfg, const gm_csr *R, const gm_csr *Rt,
						 const gm_csr *valid, const gm_callbacks *cb,
						 gm_tune_trial *trials, gm_auto_result *out,
						 char *err, size_t errlen);

/* "local" / "random" (NULL for an unknown value) and back (GM_EINVAL). */
const char *gm_tune_method_name(gm_tune_method m);
int			gm_tune_method_from_name(const char *name, gm_tune_method *m);

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
 * gm_algo_ops_get's CUDA half: whether the CUDA module is loaded (0 with
 * the reason in err when not), and its table of algorithm a (the module's
 * gm_cuda_algo_ops; NULL when not loaded or the module lacks a).
 */
int			gm_cuda_loaded(char *err, size_t errlen);
const gm_algo_ops *gm_cuda_algo_table(gm_algorithm a);

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

/*
 * The cards' free and total memory now (cudaMemGetInfo on devices 0 ..
 * ndev - 1: the least of them), and the cap gm_cuda_memory_cap set (-1:
 * none).  GM_ENODEVICE when the module
 * is not loaded or predates the query.
 */
int			gm_cuda_device_memory(int ndev, int64_t *free_bytes, int64_t *total_bytes, int64_t *cap);

/*
 * The GPU as the loaded CUDA module runs on it (gm_gpu_caps of gm_algo.h:
 * compute capability, the architecture of the code loaded, the fast paths
 * on).  GM_ENODEVICE when the module is not loaded (gm_cuda_available
 * first), GM_ENOTSUP when it predates the query.
 */
int			gm_cuda_caps(gm_gpu_caps *caps, char *err, size_t errlen);

/* The names of caps->fast's bits, comma-separated ("" when none; whole names that fit len). */
void		gm_gpu_fast_paths(unsigned fast, char *buf, size_t len);

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
	const float *filter;		/* graph_filter: each filter column's filter (gf_columns) */
	const float *item_weight;	/* graph_filter: each item's d_i^-2beta (n_items) */
	int			gf_columns;		/* graph_filter: the filter's columns d, first in each
								 * row (0: all k); the last k - d are an iALS model's,
								 * solved as an als row with regularization, alpha,
								 * alpha0 and nu (G: their Gram, (k-d) x (k-d)) */
	float		blend;			/* graph_filter with an iALS part: the filter's share a
								 * (gm_gf_blend_row) */
} gm_foldin_params;

/*
 * graph_filter models store no user factors for the filter: a user's are the
 * sum over its items of item_weight[i] Y_i times filter, column by column
 * (as the trainer forms them, graph_filter.c).  A graph_filter model with
 * an iALS part (gpumf_train's ials_factors) has k = d + f columns: the
 * filter's d, then the iALS model's f, whose user factors are stored; a
 * user's row is [a p/|p|, (1 - a) x/|x|] (p the filter's part, x the iALS
 * part, a the blend), so that one dot product scores the blend.
 * gm_gf_item_weights: each item's d_i^-2beta from the users' item lists
 * (ptr/idx, a CSR of n_users rows); gm_gf_user_vectors: X (n_users x k)
 * from the same lists, the filter's first d columns (d = k: all) formed,
 * the rest, already in X, scaled as above.  gm_gf_blend_row: one row's
 * scaling (nothing when d >= k).  GM_ENOMEM.
 */
int			gm_gf_item_weights(const int64_t *ptr, const int32_t *idx, int32_t n_users,
							   int32_t n_items, float *item_weight);
void		gm_gf_user_vectors(const int64_t *ptr, const int32_t *idx, int32_t n_users,
							   const float *Y, int k, int d, const float *item_weight,
							   const float *filter, float blend, float *X, int threads);
void		gm_gf_blend_row(float *x, int d, int k, float blend);

/* doubles of work gm_foldin needs for k factors */
size_t		gm_foldin_work(int k);

/*
 * The factors x (k floats) and bias (0 without biases) that one row with
 * the entries idx/vals (sorted, distinct item indices) gets against the
 * fixed item factors Y (n_items x k) and item_bias (explicit models with
 * biases): the exact solve of the trainer's per-row least squares (see
 * foldin.c for each algorithm's system); for graph_filter the trainer's own
 * sum, x = filter o sum over the entries of item_weight[i] Y_i (values
 * ignored).  G = Y^T Y (k x k, double) for
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
 * and so seeded initial factors, do not depend on the scan order.  At most
 * INT32_MAX - 1 keys.  The hash is seeded per map (keys chosen to collide
 * cannot be computed in advance).
 */
typedef struct gm_keymap gm_keymap;

gm_keymap  *gm_keymap_create(int byte_keys);
/* index of key, adding it if new; -1 when out of memory or full */
int32_t		gm_keymap_int(gm_keymap *m, int64_t key);
int32_t		gm_keymap_bytes(gm_keymap *m, const void *key, uint32_t len);

/*
 * gm_keymap_int for a source's integer keys (what gpumf_train reads with):
 * keys 0 .. GM_KEYMAP_DENSE_MAX - 1 are looked up first in a direct-index
 * array the map keeps beside its hash table (one load instead of a hash
 * probe into tables larger than the caches, for row numbers and serial
 * ids).  The array grows by doubling from GM_KEYMAP_DENSE_MIN entries, to
 * at most GM_KEYMAP_DENSE_MAX and to no more than GM_KEYMAP_DENSE_SLACK
 * times the keys in the map (a few large keys never make it large); other
 * keys (negative, large, sparse) go to the hash table alone.  The same
 * index as gm_keymap_int for every key; -1 when out of memory or full.
 */
#define GM_KEYMAP_DENSE_MIN		(1 << 16)
#define GM_KEYMAP_DENSE_MAX		(1 << 26)
#define GM_KEYMAP_DENSE_SLACK	8
int32_t		gm_keymap_int_dense(gm_keymap *m, int64_t key);

/*
 * Free what only lookups use (the hash table and the dense array), keeping
 * the keys: afterwards gm_keymap_size, gm_keymap_*_at, gm_keymap_memory and
 * gm_keymap_free work as before; adding or finding a key returns -1 and
 * gm_keymap_sort GM_EINVAL.  For a training whose keys are all in (a fifth
 * to a half of a map's memory; gm_keymap_sort_final).
 */
void		gm_keymap_drop_lookups(gm_keymap *m);

int32_t		gm_keymap_size(const gm_keymap *m);
/* bytes the map holds: its tables, keys and dense array */
size_t		gm_keymap_memory(const gm_keymap *m);
/* index of key without adding it: -1 when absent (or of the other kind) */
int32_t		gm_keymap_find_int(const gm_keymap *m, int64_t key);
int32_t		gm_keymap_find_bytes(const gm_keymap *m, const void *key, uint32_t len);
/* renumber in key order; old_to_new has gm_keymap_size entries */
int			gm_keymap_sort(gm_keymap *m, int32_t *old_to_new);
/*
 * The same, asking cb (may be NULL) between runs of keys:  GM_ECANCELED
 * when it asked to stop (the map is then as it was), GM_ENOMEM.
 */
int			gm_keymap_sort_polled(gm_keymap *m, int32_t *old_to_new,
								  const gm_callbacks *cb);
/*
 * gm_keymap_sort_polled for a map no key is added to or looked up in again
 * (a training's, once every row is read): the lookups are dropped instead of
 * rebuilt (gm_keymap_drop_lookups).  Integer keys that all lie in the dense
 * array (row numbers, serial ids) are ordered by one pass over it either way.
 */
int			gm_keymap_sort_final(gm_keymap *m, int32_t *old_to_new,
								 const gm_callbacks *cb);
/*
 * Load an empty integer map at once with the keys k in [0, n) for which
 * mark[k] >= 0 (a presence array a parallel pass filled), in key order, and
 * set each such mark[k] to its key's index: the same keys and indices as
 * adding them in order with gm_keymap_int, without building lookups.  The
 * map then holds its keys as after gm_keymap_drop_lookups, and
 * gm_keymap_sort_final is the identity on it.  GM_EINVAL for a byte map,
 * one not empty or with its lookups dropped, or more than INT32_MAX - 1
 * keys (nothing changed); GM_ENOMEM.
 */
int			gm_keymap_load_marked(gm_keymap *m, int32_t *mark, int64_t n);
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
#define GM_QMAT_MAX_K GM_GF_MAXK	/* graph_filter models: up to 8192 */

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
 * The same with pass 1 (the int8 bounds of every item) split over threads
 * (gm_resolve_threads; 1: this thread alone) when the int8 copy scanned
 * holds 16 MB or more; the same result.
 */
int			gm_topk_dot_among_threads(const float *Y, const gm_qmat *Q, const float *x, int n,
									  const int32_t *only, int32_t nonly,
									  const int32_t *skip, int32_t nskip, float *scratch,
									  int32_t *out_idx, float *out_score, int32_t *rescored,
									  int threads);
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
