/*
 * gm_explicit.h: explicit-feedback (ratings) matrix factorization in the
 * core: CCD++ (ccd.c) and weighted-lambda ALS (als_explicit.c) behind the
 * gm_algo_ops interface, and a planted ratings generator (synth_ratings.c)
 * for the tests and benchmarks.
 *
 * Both models fit  r_ij ~ mu + b_i + c_j + w_i . h_j  (mu, b, c only when
 * biases are on) and report, after each iteration,
 *     rmse = sqrt(sum_(i,j) e_ij^2 / nnz)        on the training ratings,
 *     loss = (sum e_ij^2 + penalty) / nnz        e = r - prediction,
 * where the penalty, the same for both, is the weighted lambda of Zhou et
 * al. 2008:
 *     lambda (sum_i n_i (|w_i|^2 + b_i^2) + sum_j n_j (|h_j|^2 + c_j^2))
 * with n_i, n_j the numbers of ratings of user i and item j (so one
 * regularization means the same for both, and CCD++'s coordinate updates
 * use lambda n_i where plain CCD++ has lambda).  mu is fixed (the mean
 * rating, set by the caller) and not penalised.
 */
#ifndef GM_EXPLICIT_H
#define GM_EXPLICIT_H

#include "gm_core.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What every explicit model's create checks, on either backend: factors,
 * the regularization (positive, or non-negative when zero_reg_ok), R and Rt
 * a matrix and its transpose, the bias arrays when biases are on.  GM_OK,
 * or GM_EINVAL with err naming the algorithm (name) and the problem.
 */
static inline int
gm_explicit_check(const char *name, const gm_mf_params *p, const gm_mf_data *d,
				  int zero_reg_ok, char *err, size_t errlen)
{
	if (p->factors < 1 || !(zero_reg_ok ? p->regularization >= 0 : p->regularization > 0) ||
		d->R == NULL || d->Rt == NULL ||
		d->R->n_rows != d->Rt->n_cols || d->R->n_cols != d->Rt->n_rows ||
		d->R->nnz != d->Rt->nnz)
	{
		snprintf(err, errlen, "%s: invalid parameters or data%s", name,
				 zero_reg_ok ? "" : " (regularization must be positive)");
		return GM_EINVAL;
	}
	if (p->biases && (d->user_bias == NULL || d->item_bias == NULL))
	{
		snprintf(err, errlen, "%s: biases are on but the bias arrays are missing", name);
		return GM_EINVAL;
	}
	return GM_OK;
}

/* The CPU tables (the CUDA ones live in cuda/train/ccd.cu and cuda/train/als_explicit.cu). */
extern const gm_algo_ops gm_cpu_ccd_ops;
extern const gm_algo_ops gm_cpu_als_explicit_ops;

/*
 * One row of explicit ALS: solve
 *     (sum_e y_e y_e^T + reg I) x = sum_e t_e y_e
 * for the kk-vector x (kk = k, or k + 1 with the bias coordinate), where
 * y_e is the first k entries of row idx[e] of Y (ldy floats apart) followed,
 * when kk = k + 1, by a 1, and t_e = vals[e] - shift - offset[idx[e] * ldy]
 * (offset may be NULL: no term).  A accumulates in float32 like the GPU;
 * the Cholesky factorisation and the solve run in float64.  fwork holds
 * kk * (kk + 2) floats, dwork kk * (kk + 1) doubles.  Returns 0, or -1 when
 * the system is not positive definite (x is then zero).
 */
int			gm_als_explicit_solve_row(const int32_t *idx, const float *vals,
									  int64_t n, const float *Y, int ldy, int k,
									  int kk, const float *offset, double shift,
									  double reg, float *x, float *fwork,
									  double *dwork);

/* ----------------------------------------------------- planted ratings */

/*
 * A ratings dataset from a planted model:
 *     r_ij = mean + b_i + c_j + w_i . h_j + noise * N(0, 1)
 * with w_i, h_j ~ N(0, rank^(-1/2) I) (so w . h has unit variance) and
 * b_i, c_j ~ N(0, bias_sd^2).  User activity is lognormal around
 * n_ratings / n_users (at least min_per_user, at most half the items);
 * each user's items are distinct, drawn with probability proportional to
 * (popularity rank + 10)^(-popularity_exponent).  Each rating is held out
 * with probability holdout.  Deterministic in seed and independent of the
 * number of threads: the ratings of user u depend only on (seed, u).
 */
typedef struct gm_ratings_spec
{
	int32_t		n_users;
	int32_t		n_items;
	int64_t		n_ratings;		/* total, exactly */
	int			rank;
	double		noise;
	double		mean;
	double		bias_sd;
	double		holdout;
	double		popularity_exponent;
	int			min_per_user;
	uint64_t	seed;
	int			threads;		/* <= 0: one per core */
} gm_ratings_spec;

/*
 * Fill users, items, ratings and holdout (n_ratings entries each, user by
 * user).  Returns GM_OK, GM_EINVAL (err names the bad field) or GM_ENOMEM.
 */
int			gm_synth_ratings(const gm_ratings_spec *s, int32_t *users,
							 int32_t *items, float *ratings, uint8_t *holdout,
							 char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif							/* GM_EXPLICIT_H */
