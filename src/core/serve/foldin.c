/*
 * foldin.c: the factors one user (or one basket of items) gets against a
 * trained model's item factors, without retraining: one regularised least
 * squares solve, the one the trainer's user half-step converges to
 * (implicit's recalculate_user).
 *
 *   als (implicit feedback; Hu, Koren, Volinsky 2008, with alpha0 and nu):
 *       (alpha0 Y^T Y + sum_e (c_e - alpha0) y_e y_e^T + lambda_u I) x
 *           = sum_e c_e y_e,
 *       c_e = 1 + alpha v_e,  lambda_u = reg (n + alpha0 n_items)^nu
 *   als_explicit and ccd (ratings), z_e = (y_e, 1) and w = (x, b) with
 *   biases, z_e = y_e and w = x without:
 *       (sum_e z_e z_e^T + lambda_u I) w = sum_e (v_e - mu - c_e) z_e,
 *       lambda_u = reg n (the weighted lambda both trainers use)
 *
 * Sums and the Cholesky factorisation run in double.  A system that double
 * cannot resolve (a factorisation whose pivots span more than
 * FOLDIN_MAX_CONDITION, which is what confidences of 1e20 against a ridge
 * of 0.01 give) is an error that says so, never factors of noise; so are
 * factors beyond float's range.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef GM_NO_CBLAS
#include <cblas.h>
#endif

/*
 * The largest condition number (the ratio of the largest to the smallest
 * squared Cholesky pivot, an estimate from below) whose solve keeps float
 * precision: double's rounding (1.1e-16) times it stays below 1e-3.
 */
#define FOLDIN_MAX_CONDITION 1e13

/* ------------------------------------------------------------ entries */

/* qsort order of entries by index. */
static int
cmp_entry(const void *a, const void *b)
{
	int32_t		x = *(const int32_t *) a,
				y = *(const int32_t *) b;

	return (x > y) - (x < y);
}

/* Sort entries by index and sum duplicates (see gm_core.h). */
int32_t
gm_entries_merge(int32_t *idx, float *vals, int32_t n)
{
	typedef struct
	{
		int32_t		i;
		float		v;
	} entry;
	entry	   *e;
	int32_t		out = 0;

	if (n <= 1)
		return n;
	e = malloc(sizeof(entry) * (size_t) n);
	if (e == NULL)
		return -1;
	for (int32_t r = 0; r < n; r++)
	{
		e[r].i = idx[r];
		e[r].v = vals ? vals[r] : 0.0f;
	}
	/* stable enough: the sums are of equal keys, in any order */
	qsort(e, n, sizeof(entry), cmp_entry);
	for (int32_t r = 0; r < n; r++)
	{
		if (out > 0 && idx[out - 1] == e[r].i)
		{
			if (vals)
				vals[out - 1] += e[r].v;
			continue;
		}
		idx[out] = e[r].i;
		if (vals)
			vals[out] = e[r].v;
		out++;
	}
	free(e);
	return out;
}

/* ------------------------------------------------------------ solving */

/* Doubles of work gm_foldin needs: A, b and room for the bias row. */
size_t
gm_foldin_work(int k)
{
	return ((size_t) k + 1) * ((size_t) k + 3);
}

/*
 * A += sum_e w_e z_e z_e^T over the entries (lower triangle at least), z_e
 * being row idx[e] of Y followed by a 1 when kk > k: one dgemm, Z^T (W Z),
 * where a BLAS is there and the row has enough entries to pay for it;
 * returns 0 when it could not (out of memory, no BLAS), to add row by row.
 */
static int
add_outers_blas(double *A, int kk, int k, const float *Y, int ldy, const int32_t *idx,
				const double *w, int32_t n)
{
#ifndef GM_NO_CBLAS
	double	   *Z,
			   *WZ;

	if (n < 16)
		return 0;
	Z = malloc(sizeof(double) * (size_t) n * kk);
	WZ = malloc(sizeof(double) * (size_t) n * kk);
	if (Z == NULL || WZ == NULL)
	{
		free(Z);
		free(WZ);
		return 0;
	}
	for (int32_t e = 0; e < n; e++)
	{
		const float *y = Y + (size_t) idx[e] * ldy;
		double	   *z = Z + (size_t) e * kk,
				   *wz = WZ + (size_t) e * kk;

		for (int f = 0; f < k; f++)
		{
			z[f] = y[f];
			wz[f] = w[e] * y[f];
		}
		if (kk > k)
		{
			z[k] = 1.0;
			wz[k] = w[e];
		}
	}
	openblas_set_num_threads(1);
	cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk, kk, n, 1.0, Z, kk, WZ, kk,
				1.0, A, kk);
	free(Z);
	free(WZ);
	return 1;
#else
	return 0;
#endif
}

/* A += w z z^T (lower triangle), z of length kk where z[k] = 1 when kk > k */
static inline void
add_outer(double *A, int kk, int k, const float *y, double w)
{
	for (int a = 0; a < kk; a++)
	{
		double		wa = w * (a < k ? y[a] : 1.0);
		double	   *row = A + (size_t) a * kk;
		int			lim = a < k ? a + 1 : k;

#pragma omp simd
		for (int c = 0; c < lim; c++)
			row[c] += wa * y[c];
		if (a == k)
			row[k] += wa;
	}
}

/*
 * x[0..d) = filter o sum_e w[idx[e]] Y_idx[e][0..d) (graph_filter's user map),
 * Y's rows ldy apart (the filter's d columns come first in a row).
 */
static void
gf_user_vector(const int32_t *idx, int64_t n, const float *Y, int ldy, int d, const float *w,
			   const float *filter, float *x)
{
	memset(x, 0, sizeof(float) * d);
	for (int64_t e = 0; e < n; e++)
	{
		const float *y = Y + (size_t) idx[e] * ldy;
		float		we = w[idx[e]];

#pragma omp simd
		for (int f = 0; f < d; f++)
			x[f] += we * y[f];
	}
	for (int f = 0; f < d; f++)
		x[f] *= filter[f];
}

/* x *= s / |x| over n values (a zero x stays zero) */
static void
scale_to(float *x, int n, double s)
{
	double		q = 0.0;

	for (int f = 0; f < n; f++)
		q += (double) x[f] * x[f];
	if (q > 0.0)
	{
		float		c = (float) (s / sqrt(q));

		for (int f = 0; f < n; f++)
			x[f] *= c;
	}
}

void
gm_gf_blend_row(float *x, int d, int k, float blend)
{
	if (d >= k)
		return;
	scale_to(x, d, blend);
	scale_to(x + d, k - d, 1.0 - blend);
}

int
gm_gf_item_weights(const int64_t *ptr, const int32_t *idx, int32_t n_users, int32_t n_items,
				   float *item_weight)
{
	int64_t    *deg = calloc(n_items > 0 ? n_items : 1, sizeof(int64_t));

	if (deg == NULL)
		return GM_ENOMEM;
	for (int64_t e = 0; e < ptr[n_users]; e++)
		if (idx[e] >= 0 && idx[e] < n_items)
			deg[idx[e]]++;
	for (int32_t i = 0; i < n_items; i++)
		item_weight[i] = deg[i] > 0 ? (float) pow((double) deg[i], -2.0 * GM_GF_BETA) : 0.0f;
	free(deg);
	return GM_OK;
}

void
gm_gf_user_vectors(const int64_t *ptr, const int32_t *idx, int32_t n_users, const float *Y,
				   int k, int d, const float *item_weight, const float *filter, float blend,
				   float *X, int threads)
{
	int			nt = gm_resolve_threads(threads);

	if (d <= 0 || d > k)
		d = k;
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt)
	for (int32_t u = 0; u < n_users; u++)
	{
		float	   *x = X + (size_t) u * k;

		gf_user_vector(idx + ptr[u], ptr[u + 1] - ptr[u], Y, k, d, item_weight, filter, x);
		gm_gf_blend_row(x, d, k, blend);
	}
}

/*
 * The solve of gm_foldin (an als, als_explicit or ccd row) against Y's
 * first k columns, its rows ldy apart; x and bias are zero on entry and the
 * entries are checked.
 */
static int
foldin_solve(const gm_foldin_params *p, const float *Y, int ldy, const float *item_bias,
			 int32_t n_items, int k, const double *G, const int32_t *idx,
			 const float *vals, int32_t n, float *x, float *bias, double *work,
			 char *err, size_t errlen)
{
	int			implicit = p->algorithm == GM_ALG_ALS_IMPLICIT;
	int			biases = !implicit && p->biases;
	int			kk = biases ? k + 1 : k;
	double	   *A = work,
			   *b = work + (size_t) kk * kk;
	double		ridge,
				cmax = 0.0,		/* implicit: the largest confidence */
				lmin,
				lmax;

	if (implicit && G == NULL)
	{
		snprintf(err, errlen, "fold-in: implicit models need Y^T Y");
		return GM_EINVAL;
	}
	if (!implicit && n == 0)
		return GM_OK;			/* no ratings: nothing to fit (the trainer leaves such rows at 0) */

	memset(A, 0, sizeof(double) * (size_t) kk * kk);
	memset(b, 0, sizeof(double) * kk);
	if (implicit)
	{
		double		alpha0 = p->alpha0;
		double	   *w = calloc(n > 0 ? n : 1, sizeof(double));
		int			blas;

		for (int a = 0; a < k; a++)
			for (int c = 0; c <= a; c++)
				A[(size_t) a * k + c] = alpha0 * G[(size_t) a * k + c];
		ridge = p->regularization;
		if (p->nu != 0.0f)
			ridge *= pow((double) n + alpha0 * (double) n_items, (double) p->nu);

		if (w == NULL)
		{
			snprintf(err, errlen, "fold-in: out of memory");
			return GM_ENOMEM;
		}
		for (int32_t e = 0; e < n; e++)
		{
			w[e] = (double) p->alpha * (vals ? vals[e] : 1.0f) + 1.0 - alpha0;	/* c_e - alpha0 */
			cmax = fmax(cmax, w[e] + alpha0);
		}
		blas = add_outers_blas(A, k, k, Y, ldy, idx, w, n);
		for (int32_t e = 0; e < n; e++)
		{
			const float *y = Y + (size_t) idx[e] * ldy;
			double		c = 1.0 + (double) p->alpha * (vals ? vals[e] : 1.0f);

			if (!blas)
				add_outer(A, k, k, y, w[e]);
			for (int f = 0; f < k; f++)
				b[f] += c * y[f];
		}
		free(w);
	}
	else
	{
		double		mu = biases ? p->global_mean : 0.0;
		double	   *w = calloc(n > 0 ? n : 1, sizeof(double));
		int			blas;

		ridge = (double) p->regularization * n;

		if (w == NULL)
		{
			snprintf(err, errlen, "fold-in: out of memory");
			return GM_ENOMEM;
		}
		for (int32_t e = 0; e < n; e++)
			w[e] = 1.0;
		blas = add_outers_blas(A, kk, k, Y, ldy, idx, w, n);
		free(w);
		for (int32_t e = 0; e < n; e++)
		{
			const float *y = Y + (size_t) idx[e] * ldy;
			double		t = (vals ? vals[e] : 1.0f) - mu - (biases && item_bias ? item_bias[idx[e]] : 0.0);

			if (!blas)
				add_outer(A, kk, k, y, 1.0);
			for (int f = 0; f < k; f++)
				b[f] += t * y[f];
			if (biases)
				b[k] += t;
		}
	}
	for (int a = 0; a < kk; a++)
		A[(size_t) a * kk + a] += ridge;
	if (gm_cholesky_solve(A, b, kk) != 0)
	{
		if (cmax > ridge * FOLDIN_MAX_CONDITION)
			snprintf(err, errlen, "fold-in: the values are too large for a double-precision solve: "
					 "the largest confidence 1 + alpha * value is %g, %.1e times the ridge %g; "
					 "scale the values down", cmax, cmax / ridge, ridge);
		else
			snprintf(err, errlen, "fold-in: the least-squares system is not positive definite (regularization %g)",
					 (double) p->regularization);
		return GM_EINVAL;
	}
	/* the pivots (A's diagonal now holds L's) bound the condition number from below */
	lmin = lmax = A[0];
	for (int a = 1; a < kk; a++)
	{
		lmin = fmin(lmin, A[(size_t) a * kk + a]);
		lmax = fmax(lmax, A[(size_t) a * kk + a]);
	}
	if ((lmax / lmin) * (lmax / lmin) > FOLDIN_MAX_CONDITION)
	{
		if (cmax > ridge * FOLDIN_MAX_CONDITION)
			snprintf(err, errlen, "fold-in: the values are too large for a double-precision solve: "
					 "the largest confidence 1 + alpha * value is %g, %.1e times the ridge %g; "
					 "scale the values down", cmax, cmax / ridge, ridge);
		else
			snprintf(err, errlen, "fold-in: the least-squares system is too ill-conditioned for double precision "
					 "(condition number at least %.1e, ridge %g)", (lmax / lmin) * (lmax / lmin), ridge);
		return GM_EINVAL;
	}
	for (int f = 0; f < kk; f++)
		if (!isfinite(b[f]) || fabs(b[f]) > FLT_MAX)
		{
			snprintf(err, errlen, "fold-in: the values give factors beyond the range of real (%g); "
					 "scale the values down", b[f]);
			return GM_EINVAL;
		}
	for (int f = 0; f < k; f++)
		x[f] = (float) b[f];
	if (biases)
		*bias = (float) b[k];
	return GM_OK;
}

/* One row's factors against fixed item factors (see the top of the file). */
int
gm_foldin(const gm_foldin_params *p, const float *Y, const float *item_bias,
		  int32_t n_items, int k, const double *G, const int32_t *idx,
		  const float *vals, int32_t n, float *x, float *bias, double *work,
		  char *err, size_t errlen)
{
	*bias = 0.0f;
	memset(x, 0, sizeof(float) * k);
	for (int32_t e = 0; e < n; e++)
	{
		if (idx[e] < 0 || idx[e] >= n_items || (e > 0 && idx[e] <= idx[e - 1]))
		{
			snprintf(err, errlen, "fold-in: entry %d has item index %d (must be sorted, distinct, in [0, %d))",
					 (int) e, (int) idx[e], (int) n_items);
			return GM_EINVAL;
		}
		if (vals != NULL && !isfinite(vals[e]))
		{
			snprintf(err, errlen, "fold-in: entry %d has a non-finite value", (int) e);
			return GM_EINVAL;
		}
	}
	if (p->algorithm == GM_ALG_GRAPH_FILTER)
	{
		int			d = p->gf_columns > 0 && p->gf_columns < k ? p->gf_columns : k;

		/* the user map of graph_filter.c: every entry counts 1 */
		if (p->filter == NULL || p->item_weight == NULL)
		{
			snprintf(err, errlen, "fold-in: graph_filter models need the filter and the item weights");
			return GM_EINVAL;
		}
		gf_user_vector(idx, n, Y, k, d, p->item_weight, p->filter, x);
		if (d < k)
		{
			/* the iALS part: an als row against the last k - d columns */
			gm_foldin_params ip = *p;
			float		b0;
			int			rc;

			ip.algorithm = GM_ALG_ALS_IMPLICIT;
			ip.biases = 0;
			if (G == NULL)
			{
				snprintf(err, errlen, "fold-in: graph_filter models with an iALS part need its Y^T Y");
				return GM_EINVAL;
			}
			rc = foldin_solve(&ip, Y + d, k, NULL, n_items, k - d, G, idx, vals, n, x + d, &b0,
							  work, err, errlen);
			if (rc != GM_OK)
				return rc;
			gm_gf_blend_row(x, d, k, p->blend);
		}
		return GM_OK;
	}
	return foldin_solve(p, Y, k, item_bias, n_items, k, G, idx, vals, n, x, bias, work,
						err, errlen);
}
