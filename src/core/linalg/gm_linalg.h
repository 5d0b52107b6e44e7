/*
 * gm_linalg.h: gpumf's linear algebra beside matrix factorization.
 *
 *   - symmetric positive-definite sparse solves: a sparse matrix type built
 *     from (row, col, value) triplets, its checks, a multi-threaded CSR SpMV
 *     and a Jacobi-preconditioned conjugate-gradient solver (spmat.c,
 *     spmv.c, pcg.c);
 *   - ordinary least squares by an incremental Householder QR that can be
 *     fed row by row, batch by batch, merged, and finished at the end
 *     (ols.c; the fit itself ols_finish.c, its p values student_t.c);
 *   - the table of GPU operations the CUDA module exports for both
 *     (gm_linalg_ops, cuda/linalg/: spmv.cu, pcg.cu, ols.cu), found by
 *     gm_linalg_cuda_ops (linalg_backend.c).
 *
 * Pure C, no PostgreSQL.  Every function that can fail returns GM_OK or a
 * gm_errors.h code and writes a message a user can act on into err (at
 * least GM_ERRLEN bytes).  Indices inside are 0-based; functions that name
 * indices in messages add the caller's base (the numbering the user wrote).
 */
#ifndef GM_LINALG_H
#define GM_LINALG_H

#include <stddef.h>
#include <stdint.h>

#include "gm_errors.h"
#include "gm_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GM_LINALG_ABI_VERSION 1

/* ------------------------------------------------------------ sparse matrices */

/*
 * Coordinates as read: entry e is A(rows[e], cols[e]) += values[e].  Indices
 * are 0-based (the caller subtracts its base); base is added back to every
 * index a message names, so messages speak the user's numbering.  Entries are
 * numbered from 1 in messages.
 */
typedef struct gm_coo
{
	int64_t		nnz;
	const int64_t *rows;
	const int64_t *cols;
	const double *values;
	int64_t		base;
} gm_coo;

/* Which triangles the entries occupy (before duplicates are summed). */
typedef enum gm_triangle
{
	GM_TRI_DIAGONAL = 0,		/* diagonal entries only */
	GM_TRI_LOWER = 1,			/* diagonal and strictly lower entries */
	GM_TRI_UPPER = 2,			/* diagonal and strictly upper entries */
	GM_TRI_BOTH = 3				/* entries on both sides of the diagonal */
} gm_triangle;

/* What gm_coo_scan found. */
typedef struct gm_coo_info
{
	int64_t		n_rows;			/* 1 + the largest row index */
	int64_t		n_cols;			/* 1 + the largest column index */
	int64_t		n_lower;		/* entries with row > col */
	int64_t		n_upper;		/* entries with row < col */
	int64_t		n_diagonal;
	gm_triangle triangle;
} gm_coo_info;

/*
 * A square matrix in compressed sparse rows: 64-bit row pointers, columns
 * sorted and unique within each row, float64 values.  values32, when not
 * NULL, holds the same values rounded to float (gm_spmat_make_single).
 */
typedef struct gm_spmat
{
	int32_t		n;				/* rows = columns */
	int64_t		nnz;
	int64_t    *indptr;			/* n + 1 */
	int32_t    *indices;		/* nnz */
	double	   *values;			/* nnz */
	float	   *values32;		/* nnz, or NULL */
} gm_spmat;

/* The largest dimension a gm_spmat can have (indices are int32). */
#define GM_SPMAT_MAX_N		((int64_t) INT32_MAX - 1)

/* Relative tolerance under which A(i,j) and A(j,i) count as equal. */
#define GM_SYMMETRY_RTOL	1e-12

/*
 * Check triplets: at least one entry, every index >= 0 (i.e. not below the
 * user's base), below n when n > 0 (the dimension the caller knows, e.g. the
 * length of the right-hand side) and below GM_SPMAT_MAX_N otherwise, every
 * value finite.  Fills info (extents, triangle counts).
 */
int			gm_coo_scan(const gm_coo *c, int64_t n, gm_coo_info *info,
						char *err, size_t errlen);

/* GM_EINVAL unless the extents gm_coo_scan found make a square matrix. */
int			gm_coo_check_square(const gm_coo_info *info, int64_t base,
								char *err, size_t errlen);

/*
 * Build the n x n CSR matrix of the triplets (already scanned), summing
 * duplicates.  With mirror = GM_TRI_LOWER or GM_TRI_UPPER (the input holds
 * that triangle only, as gm_coo_scan reports) every off-diagonal entry is
 * also stored at its mirror position, giving the full symmetric matrix;
 * with GM_TRI_BOTH or GM_TRI_DIAGONAL the entries are stored as given.
 * threads <= 0: one per core.
 */
int			gm_spmat_from_coo(const gm_coo *c, int64_t n, gm_triangle mirror,
							  int threads, gm_spmat *out,
							  char *err, size_t errlen);
/*
 * The same, asking cb (may be NULL) every 2^20 entries or so (from the
 * calling thread only): GM_ECANCELED when it asked to stop, nothing left
 * allocated.
 */
int			gm_spmat_from_coo_polled(const gm_coo *c, int64_t n, gm_triangle mirror,
									 int threads, const gm_callbacks *cb, gm_spmat *out,
									 char *err, size_t errlen);

/*
 * GM_EINVAL, naming one offending pair (i, j) and both values, unless
 * |A(i,j) - A(j,i)| <= rtol * max(|A(i,j)|, |A(j,i)|) for every pair.  The
 * pair named is the first in row order.
 */
int			gm_spmat_check_symmetric(const gm_spmat *A, double rtol,
									 int64_t base, int threads,
									 char *err, size_t errlen);

/* GM_EINVAL naming the first row whose diagonal entry is absent, zero or negative. */
int			gm_spmat_check_diagonal(const gm_spmat *A, int64_t base,
									char *err, size_t errlen);

/* Fill A->values32 (float copy of the values). */
int			gm_spmat_make_single(gm_spmat *A, char *err, size_t errlen);

/* Copy the diagonal into d (n values; 0 where a row has none). */
void		gm_spmat_diagonal(const gm_spmat *A, double *d);

/* Free the arrays (safe on a zeroed or partly built matrix). */
void		gm_spmat_free(gm_spmat *A);

/* ------------------------------------------------------------ SpMV (CPU) */

/* y = A x in float64, multi-threaded (threads <= 0: one per core). */
void		gm_spmv(const gm_spmat *A, const double *x, double *y, int threads);

/* y = A x in float32 (A->values32 must be filled). */
void		gm_spmv_single(const gm_spmat *A, const float *x, float *y,
						   int threads);

/* ------------------------------------------------------------ the GPU's ops */

typedef enum gm_precision
{
	GM_PRECISION_DOUBLE = 0,	/* float64 vectors, values and sums */
	GM_PRECISION_SINGLE = 1		/* float32 vectors and values, float64 dot products */
} gm_precision;

typedef enum gm_precond
{
	GM_PRECOND_NONE = 0,
	GM_PRECOND_JACOBI = 1
} gm_precond;

/* Which SpMV the GPU uses (SQL: gpumf.spmv). */
typedef enum gm_spmv_impl
{
	GM_SPMV_AUTO = 0,			/* the faster of the two on this matrix (timed once) */
	GM_SPMV_OWN = 1,			/* gpumf's kernel: the diagonal layout where the
								 * matrix has few diagonals, else row blocks */
	GM_SPMV_CUSPARSE = 2,		/* cusparseSpMV (its default algorithm) */
	GM_SPMV_CUSPARSE_ALG2 = 3,	/* cusparseSpMV, CUSPARSE_SPMV_CSR_ALG2 (for comparisons) */
	GM_SPMV_OWN_CSR = 4			/* gpumf's row-block kernel even where the diagonal
								 * layout applies (for comparisons) */
} gm_spmv_impl;

typedef struct gm_linalg_ops gm_linalg_ops;

/* ------------------------------------------------------------ conjugate gradient */

typedef struct gm_cg_params
{
	double		tolerance;		/* stop when ||b - A x|| <= tolerance ||b|| (true residual) */
	int			max_iterations;
	gm_precond	preconditioner;
	gm_precision precision;
	int			check_every;	/* iterations between convergence checks (<= 0: 8) */
	int			threads;		/* CPU threads (<= 0: one per core) */
	gm_spmv_impl spmv;			/* GPU only */
	const gm_linalg_ops *gpu;	/* NULL: solve on the CPU */
	int64_t		base;			/* first index, for messages naming a row */
} gm_cg_params;

/* Default parameters: 1e-8, 10000 iterations, Jacobi, double, CPU, base 1. */
void		gm_cg_params_default(gm_cg_params *p);

typedef struct gm_cg_result
{
	int			iterations;
	double		residual;		/* ||b - A x|| / ||b||, computed afresh in float64 at the end */
	int			converged;		/* residual <= tolerance */
	int			replacements;	/* times the recurrence claimed convergence too early */
	int			stagnated;		/* stopped because the true residual no longer fell */
	double		seconds;
	char		device[128];	/* "cpu (N threads)", or the GPU's name and the SpMV used */
} gm_cg_result;

/*
 * Solve A x = b for symmetric positive-definite A (full storage, both
 * triangles).  x holds the initial guess on entry (zeros are fine) and the
 * last iterate on return.  Jacobi preconditioning is applied as the
 * symmetric scaling D^-1/2 A D^-1/2 (the same iterates as preconditioned
 * CG, with cheaper iterations).  Convergence is tested on the true
 * residual: when the recurrence says converged, b - A x is recomputed in
 * float64, and iteration continues from it if it is not below the
 * tolerance (three restarts in a row that do not halve the residual stop
 * the solve as stagnated, except with tolerance 0, which runs exactly
 * max_iterations).  Returns GM_OK also when not converged (result->converged = 0,
 * x the last iterate); GM_EINVAL when A is found not positive definite;
 * GM_ECANCELED when cb->should_stop asked (polled every few milliseconds of
 * work); GPU errors as GM_EDEVICE and friends.
 */
int			gm_cg_solve(const gm_spmat *A, const double *b, double *x,
						const gm_cg_params *p, const gm_callbacks *cb,
						gm_cg_result *result, char *err, size_t errlen);

/* ||b - A x|| / ||b|| in float64 (||b|| = 0: ||A x||). */
double		gm_relative_residual(const gm_spmat *A, const double *b,
								 const double *x, int threads);

/* ------------------------------------------------------------ least squares */

/*
 * The state of a least-squares fit of y on k columns x (plus an intercept),
 * fed rows in any order and in any grouping.  It holds the upper-triangular
 * factor R of the augmented matrix [1, x - c, y - d] (Householder QR, float64)
 * where c, d are shifts taken from the first rows (the means of the first
 * buffer): a model with an intercept is invariant to them, and they keep the
 * intercept column from costing digits on data far from the origin.  Rows
 * wait in a buffer and are folded into R a block at a time.
 *
 * The state is one flat block of gm_ols_state_size(k) bytes without
 * pointers: copy it with memcpy, store it, ship it between processes.
 */
typedef struct gm_ols_state
{
	int32_t		magic;
	int32_t		k;				/* x columns */
	int32_t		intercept;		/* 0 or 1 */
	int32_t		m;				/* k + intercept + 1: the augmented width */
	int32_t		buf_cap;		/* rows the buffer holds */
	int32_t		buf_rows;		/* rows waiting in it */
	int32_t		shifted;		/* shifts chosen (after the first fold) */
	int32_t		pad;
	int64_t		rows_used;		/* rows folded or buffered */
	int64_t		rows_skipped;	/* rows the caller skipped (NULLs), for reporting */
	/* then: double shift[k + 1], R[m * m] (row-major), buf[buf_cap * (k + 1)] */
} gm_ols_state;

/* Bytes a state for k columns takes. */
size_t		gm_ols_state_size(int k);

/* Initialise the state in a block of gm_ols_state_size(k) bytes. */
int			gm_ols_init(gm_ols_state *s, int k, int intercept,
						char *err, size_t errlen);

/* Add one row (x: k values).  GM_EINVAL on a non-finite value. */
int			gm_ols_add_row(gm_ols_state *s, const double *x, double y,
						   char *err, size_t errlen);

/* Count a row the caller skipped (a NULL in it). */
void		gm_ols_skip_rows(gm_ols_state *s, int64_t n);

/*
 * How a batch of rows is folded: threads for the CPU, or the GPU's ops (with
 * a handle from ops->ols_create) for batches of at least gpu_min_rows rows.
 */
typedef struct gm_ols_exec
{
	int			threads;		/* <= 0: one per core */
	const gm_linalg_ops *gpu;	/* NULL: the CPU */
	void	   *gpu_handle;
	int64_t		gpu_min_rows;	/* smaller batches go to the CPU (<= 0: 65536) */
} gm_ols_exec;

/*
 * Add n rows: X row-major (row i at X + i * ldx, k values), y n values.
 * ex may be NULL (the CPU, all cores).
 */
int			gm_ols_add_rows(gm_ols_state *s, int64_t n, const double *X,
							int64_t ldx, const double *y,
							const gm_ols_exec *ex, char *err, size_t errlen);

/* Fold the buffered rows into R (before copying a state out, optional). */
int			gm_ols_flush(gm_ols_state *s, char *err, size_t errlen);

/*
 * dst += src: afterwards dst describes the rows of both (src is flushed
 * first, so it is not const).  Both must have the same k and intercept.
 */
int			gm_ols_merge(gm_ols_state *dst, gm_ols_state *src,
						 char *err, size_t errlen);

/* Rank tolerance: column j is dependent when |R_jj| <= this * its norm. */
#define GM_OLS_RANK_RTOL	1e-10

/*
 * The fit.  The caller points coef, std_err, t_stat and p_value at arrays of
 * p = k + intercept values (intercept first) and involved at p ints.
 */
typedef struct gm_ols_result
{
	int			p;				/* coefficients */
	double	   *coef;
	double	   *std_err;
	double	   *t_stat;
	double	   *p_value;		/* two-sided, Student t with df_residual */
	double		r2;				/* with an intercept about the mean, without about 0 (as R's lm) */
	double		adj_r2;
	double		residual_se;	/* sqrt(RSS / df_residual) */
	double		rss;
	double		condition_number;	/* 2-norm condition number of X (intercept column
									 * included); an estimate (power iterations) above 256
									 * coefficients */
	int64_t		rows_used;
	int64_t		rows_skipped;
	int64_t		df_residual;
	/* rank deficiency: coefficient involved[0] is a combination of involved[1 ..] */
	int		   *involved;
	int			n_involved;
} gm_ols_result;

/*
 * Finish the fit (the state is flushed, otherwise unchanged).  GM_EINVAL
 * with no rows, fewer rows than coefficients, or a rank-deficient X: then
 * result->involved names the dependent coefficient first and the ones it
 * depends on after it (coefficient numbering: the intercept 0 when present,
 * then the x columns), and err says it in words (x columns numbered from 1).
 * With as many rows as coefficients the statistics that need a residual
 * degree of freedom are NaN.
 */
int			gm_ols_finalize(gm_ols_state *s, gm_ols_result *result,
							char *err, size_t errlen);

/* Fitted value: coef . (1, x) with an intercept, coef . x without. */
double		gm_ols_predict(const double *coef, int p, const double *x, int k);

/* Regularised incomplete beta function I_x(a, b). */
double		gm_betainc(double a, double b, double x);

/* Two-sided p-value of Student's t with df degrees of freedom. */
double		gm_student_t_pvalue(double t, double df);

/* ------------------------------------------------------------ GPU operations */

/*
 * The CUDA module's table (cuda/linalg/sparse_handle.cu), returned by its
 * gm_cuda_linalg_ops().  Each call writes a message into err on failure.
 */
struct gm_linalg_ops
{
	int			abi_version;	/* GM_LINALG_ABI_VERSION */
	const char *name;

	/*
	 * Upload A (full symmetric storage) for SpMV and CG in the given
	 * precision; device gets the GPU's name.
	 */
	int			(*sparse_create) (void **h, const gm_spmat *A, gm_precision prec,
								  char *device, size_t devlen,
								  char *err, size_t errlen);
	/* y = A x on host vectors (converted to and from the handle's precision) */
	int			(*sparse_spmv) (void *h, gm_spmv_impl impl, const double *x,
								double *y, char *err, size_t errlen);
	/* y = A x on device vectors of the handle's precision, queued on its stream */
	int			(*sparse_spmv_device) (void *h, gm_spmv_impl impl, const void *x,
									   void *y, char *err, size_t errlen);
	void	   *(*sparse_stream) (void *h);	/* its cudaStream_t */
	/* gm_cg_solve on the device (result->residual is the device's float64 check) */
	int			(*sparse_cg) (void *h, const double *b, double *x,
							  const gm_cg_params *p, const gm_callbacks *cb,
							  gm_cg_result *result, char *err, size_t errlen);
	void		(*sparse_destroy) (void *h);

	/* least squares: device buffers for blocks of up to max_rows rows, m = k + intercept + 1 */
	int			(*ols_create) (void **h, int k, int intercept, int64_t max_rows,
							   char *err, size_t errlen);
	/*
	 * R (m x m upper triangular, row-major, in and out) := the R factor of
	 * [R; rows of [1, x - shift, y - shift_y]] for n rows of X (row-major,
	 * ldx) and y, as the CPU's fold does.
	 */
	int			(*ols_fold) (void *h, int64_t n, const double *X, int64_t ldx,
							 const double *y, const double *shift, double *R,
							 char *err, size_t errlen);
	/* seconds spent copying to the device and computing there, so far */
	void		(*ols_timing) (void *h, double *transfer, double *compute);
	void		(*ols_destroy) (void *h);
};

/* The module exports this (extern "C"). */
typedef const gm_linalg_ops *(*gm_cuda_linalg_ops_fn) (void);

/*
 * The module's table, or NULL with the reason in err: no module, no GPU,
 * an ABI mismatch.  module_path is the CUDA module's file.
 */
const gm_linalg_ops *gm_linalg_cuda_ops(const char *module_path,
										char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif							/* GM_LINALG_H */
