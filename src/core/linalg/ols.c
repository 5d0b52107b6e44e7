/*
 * ols.c: ordinary least squares by an incremental Householder QR in float64.
 *
 * The state keeps the m x m upper-triangular factor R of the augmented
 * matrix [1, x - c, y - d] (no ones column without an intercept, and then
 * no shifts): R'R equals the augmented matrix's cross-product, so
 *
 *     the coefficients solve R_xx b = R_xy,
 *     the residual sum of squares is R_yy^2 (the last diagonal entry),
 *     the total sum of squares about the mean is the y column below row 0,
 *
 * and it never forms X'X, whose condition number is the square of X's (the
 * reason normal equations lose half the digits on data such as Longley's).
 * Rows are folded into R a block at a time: the Householder reflections of
 * [R; block] that annihilate the block, which is the same backward-stable
 * factorization as a QR of all rows at once.  Two states merge by folding
 * one's R into the other's.  The shifts c, d are the means of the first
 * block; with an intercept the model does not depend on them, and they take
 * the near-collinearity between the intercept and columns far from zero
 * (years, say) out of the factorization.
 *
 * This file folds rows in and merges states; ols_finish.c turns a state
 * into the fit (coefficients, errors, rank, condition number), with the p
 * values of student_t.c.
 */
#include "gm_linalg.h"
#include "linalg_int.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OLS_MAGIC		0x4F4C5331	/* "OLS1" */
#define BLOCK_ROWS		256			/* rows per fold in batch mode */

static int
buffer_rows_for(int k)
{
	int			cap = 2048 / (k + 1);

	return cap < 8 ? 8 : cap > 64 ? 64 : cap;
}

size_t
gm_ols_state_size(int k)
{
	size_t		m = (size_t) k + 2;		/* the larger width: with an intercept */

	return sizeof(gm_ols_state) +
		sizeof(double) * ((size_t) k + 1 + m * m + (size_t) buffer_rows_for(k) * (k + 1));
}

int
gm_ols_init(gm_ols_state *s, int k, int intercept, char *err, size_t errlen)
{
	if (k < 0 || k > 100000 || (k == 0 && !intercept))
	{
		snprintf(err, errlen, "a least-squares fit needs 1 to 100000 coefficients (got %d x "
				 "columns %s an intercept)", k, intercept ? "and" : "without");
		return GM_EINVAL;
	}
	memset(s, 0, gm_ols_state_size(k));
	s->magic = OLS_MAGIC;
	s->k = k;
	s->intercept = intercept ? 1 : 0;
	s->m = k + s->intercept + 1;
	s->buf_cap = buffer_rows_for(k);
	return GM_OK;
}

static int
check_state(const gm_ols_state *s, char *err, size_t errlen)
{
	if (s->magic != OLS_MAGIC || s->m != s->k + s->intercept + 1)
	{
		snprintf(err, errlen, "not a least-squares state (corrupt or from another version)");
		return GM_EINVAL;
	}
	return GM_OK;
}

/* ------------------------------------------------------------ the fold */

/*
 * R := the R factor of [R; W] where W is nb x m, column-major with leading
 * dimension ldw (destroyed).  Column j's reflection involves R's row j and
 * W's column j only (R is upper triangular), so each step is a dot product
 * and an update per later column, over nb + 1 entries.
 */
GM_HOT static void
qr_fold(double *R, int m, double *W, int64_t nb, int64_t ldw)
{
	for (int j = 0; j < m; j++)
	{
		double	   *wj = W + (size_t) j * ldw;
		double		xx = 0.0,
					alpha,
					beta,
					tau,
					scal,
					norm;

#pragma omp simd reduction(+:xx)
		for (int64_t i = 0; i < nb; i++)
			xx += wj[i] * wj[i];
		alpha = R[(size_t) j * m + j];
		norm = sqrt(alpha * alpha + xx);
		if (!isfinite(norm) || xx < 0x1p-900)
		{
			/*
			 * squares overflowed, or underflowed (entries below about
			 * 1e-150, whose squares lose digits or vanish): the same norm,
			 * scaled
			 */
			double		big = 0.0,
						acc = 0.0;

			for (int64_t i = 0; i < nb; i++)
				big = fmax(big, fabs(wj[i]));
			if (big == 0.0)
				continue;		/* nothing below the diagonal to annihilate */
			big = fmax(big, fabs(alpha));
			for (int64_t i = 0; i < nb; i++)
				acc += (wj[i] / big) * (wj[i] / big);
			norm = big * sqrt(acc + (alpha / big) * (alpha / big));
		}
		beta = alpha >= 0 ? -norm : norm;
		tau = (beta - alpha) / beta;
		scal = 1.0 / (alpha - beta);
#pragma omp simd
		for (int64_t i = 0; i < nb; i++)
			wj[i] *= scal;		/* v = (1, wj) */
		R[(size_t) j * m + j] = beta;
		for (int l = j + 1; l < m; l++)
		{
			double	   *wl = W + (size_t) l * ldw;
			double		dot = 0.0;

#pragma omp simd reduction(+:dot)
			for (int64_t i = 0; i < nb; i++)
				dot += wj[i] * wl[i];
			dot = tau * (R[(size_t) j * m + l] + dot);
			R[(size_t) j * m + l] -= dot;
#pragma omp simd
			for (int64_t i = 0; i < nb; i++)
				wl[i] -= dot * wj[i];
		}
	}
}

/*
 * Fill W (column-major, ldw) with rows [r0, r0 + nb) of the augmented
 * matrix: [1, x - c, y - d] or [x, y].
 */
static void
fill_block(double *W, int64_t ldw, int k, int intercept, const double *shift,
		   const double *X, int64_t ldx, const double *y, int64_t nb)
{
	int			o = intercept;

	if (intercept)
		for (int64_t i = 0; i < nb; i++)
			W[i] = 1.0;
	for (int64_t i = 0; i < nb; i++)
	{
		const double *xi = X + (size_t) i * ldx;

		for (int j = 0; j < k; j++)
			W[(size_t) (j + o) * ldw + i] = xi[j] - shift[j];
		W[(size_t) (k + o) * ldw + i] = y[i] - shift[k];
	}
}

/* R := the R factor of [R; U] for another m x m upper-triangular U (row-major). */
static int
fold_upper(double *R, int m, const double *U)
{
	double	   *W = malloc(sizeof(double) * (size_t) m * m);

	if (W == NULL)
		return GM_ENOMEM;
	for (int i = 0; i < m; i++)
		for (int j = 0; j < m; j++)
			W[(size_t) j * m + i] = U[(size_t) i * m + j];
	qr_fold(R, m, W, m, m);
	free(W);
	return GM_OK;
}

/* Choose the shifts: the means of n rows (zero without an intercept); y[i * ldy]. */
static void
choose_shift(gm_ols_state *s, const double *X, int64_t ldx, const double *y, int64_t ldy,
			 int64_t n)
{
	double	   *c = st_shift(s);

	memset(c, 0, sizeof(double) * (size_t) (s->k + 1));
	if (s->intercept && n > 0)
	{
		for (int64_t i = 0; i < n; i++)
		{
			for (int j = 0; j < s->k; j++)
				c[j] += X[(size_t) i * ldx + j];
			c[s->k] += y[(size_t) i * ldy];
		}
		for (int j = 0; j <= s->k; j++)
			c[j] /= (double) n;
	}
	s->shifted = 1;
}

/* Fold n rows into R on this thread, BLOCK_ROWS at a time (W: BLOCK_ROWS x m). */
static void
fold_rows(double *R, int m, int k, int intercept, const double *shift,
		  const double *X, int64_t ldx, const double *y, int64_t n, double *W)
{
	for (int64_t r0 = 0; r0 < n; r0 += BLOCK_ROWS)
	{
		int64_t		nb = n - r0 < BLOCK_ROWS ? n - r0 : BLOCK_ROWS;

		fill_block(W, BLOCK_ROWS, k, intercept, shift, X + (size_t) r0 * ldx, ldx,
				   y + r0, nb);
		qr_fold(R, m, W, nb, BLOCK_ROWS);
	}
}

int
gm_ols_flush(gm_ols_state *s, char *err, size_t errlen)
{
	int			rc = check_state(s, err, errlen);
	double	   *W;
	int64_t		ld = s->k + 1;

	if (rc != GM_OK || s->buf_rows == 0)
		return rc;
	/* the buffer holds rows of k + 1 values: x then y */
	if (!s->shifted)
		choose_shift(s, st_buf(s), ld, st_buf(s) + s->k, ld, s->buf_rows);
	W = malloc(sizeof(double) * (size_t) s->buf_rows * s->m);
	if (W == NULL)
	{
		snprintf(err, errlen, "out of memory folding %d rows", s->buf_rows);
		return GM_ENOMEM;
	}
	{
		/* y is strided inside the buffer: gather it */
		double	   *yb = malloc(sizeof(double) * (size_t) s->buf_rows);

		if (yb == NULL)
		{
			free(W);
			snprintf(err, errlen, "out of memory folding %d rows", s->buf_rows);
			return GM_ENOMEM;
		}
		for (int i = 0; i < s->buf_rows; i++)
			yb[i] = st_buf(s)[(size_t) i * ld + s->k];
		fill_block(W, s->buf_rows, s->k, s->intercept, st_shift(s), st_buf(s), ld, yb,
				   s->buf_rows);
		free(yb);
	}
	qr_fold(st_R(s), s->m, W, s->buf_rows, s->buf_rows);
	free(W);
	s->buf_rows = 0;
	return GM_OK;
}

/* GM_EINVAL naming the first non-finite value among n rows. */
static int
check_finite(const gm_ols_state *s, int64_t n, const double *X, int64_t ldx,
			 const double *y, char *err, size_t errlen)
{
	int64_t		bad = INT64_MAX;

#pragma omp parallel for schedule(static) reduction(min:bad) if(n > 100000)
	for (int64_t i = 0; i < n; i++)
	{
		int			ok = isfinite(y[i]);

		for (int j = 0; j < s->k; j++)
			ok &= isfinite(X[(size_t) i * ldx + j]) != 0;
		if (!ok && i < bad)
			bad = i;
	}
	if (bad < n)
	{
		long long	row = (long long) (s->rows_used + s->rows_skipped + bad + 1);
		double		v = y[bad];
		int			col = -1;

		for (int j = 0; j < s->k && isfinite(v); j++)
			if (!isfinite(X[(size_t) bad * ldx + j]))
			{
				col = j;
				v = X[(size_t) bad * ldx + j];
			}
		if (col < 0)
			snprintf(err, errlen, "y of row %lld is %s", row,
					 isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
		else
			snprintf(err, errlen, "x column %d of row %lld is %s", col + 1, row,
					 isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
		return GM_EINVAL;
	}
	return GM_OK;
}

int
gm_ols_add_row(gm_ols_state *s, const double *x, double y, char *err, size_t errlen)
{
	int			rc = check_state(s, err, errlen);
	double	   *b;

	if (rc == GM_OK)
		rc = check_finite(s, 1, x, s->k, &y, err, errlen);
	if (rc != GM_OK)
		return rc;
	b = st_buf(s) + (size_t) s->buf_rows * (s->k + 1);
	memcpy(b, x, sizeof(double) * (size_t) s->k);
	b[s->k] = y;
	s->buf_rows++;
	s->rows_used++;
	if (s->buf_rows == s->buf_cap)
		return gm_ols_flush(s, err, errlen);
	return GM_OK;
}

void
gm_ols_skip_rows(gm_ols_state *s, int64_t n)
{
	s->rows_skipped += n;
}

int
gm_ols_add_rows(gm_ols_state *s, int64_t n, const double *X, int64_t ldx,
				const double *y, const gm_ols_exec *ex, char *err, size_t errlen)
{
	int			rc = check_state(s, err, errlen);
	int			m = s->m;
	int			nt,
				use_gpu;
	int64_t		gpu_min;

	if (rc != GM_OK)
		return rc;
	if (n <= 0)
		return GM_OK;
	if (ldx < s->k)
	{
		snprintf(err, errlen, "row stride %lld is below the %d columns", (long long) ldx, s->k);
		return GM_EINVAL;
	}
	if ((rc = check_finite(s, n, X, ldx, y, err, errlen)) != GM_OK)
		return rc;

	gpu_min = ex && ex->gpu_min_rows > 0 ? ex->gpu_min_rows : 65536;
	use_gpu = ex && ex->gpu && ex->gpu_handle && n >= gpu_min;

	/* a few rows: through the buffer */
	if (!use_gpu && n < 4 * (int64_t) s->buf_cap)
	{
		for (int64_t i = 0; i < n; i++)
		{
			double	   *b = st_buf(s) + (size_t) s->buf_rows * (s->k + 1);

			memcpy(b, X + (size_t) i * ldx, sizeof(double) * (size_t) s->k);
			b[s->k] = y[i];
			s->buf_rows++;
			s->rows_used++;
			if (s->buf_rows == s->buf_cap && (rc = gm_ols_flush(s, err, errlen)) != GM_OK)
				return rc;
		}
		return GM_OK;
	}

	if ((rc = gm_ols_flush(s, err, errlen)) != GM_OK)
		return rc;
	if (!s->shifted)
		choose_shift(s, X, ldx, y, 1, n < 4096 ? n : 4096);

	if (use_gpu)
	{
		rc = ex->gpu->ols_fold(ex->gpu_handle, n, X, ldx, y, st_shift(s), st_R(s),
							   err, errlen);
		if (rc == GM_OK)
			s->rows_used += n;
		return rc;
	}

	/* each thread folds its share into its own R; then they fold into s's, in order */
	nt = gm_la_threads(ex ? ex->threads : 0);
	if (n < (int64_t) nt * 4 * BLOCK_ROWS)
		nt = (int) (n / (4 * BLOCK_ROWS)) > 1 ? (int) (n / (4 * BLOCK_ROWS)) : 1;
	{
		double	   *Rt = calloc((size_t) nt * m * m, sizeof(double));
		double	   *Wt = malloc(sizeof(double) * (size_t) nt * BLOCK_ROWS * m);
		int64_t		per = (n + nt - 1) / nt;

		/* whole blocks per thread, so the split does not depend on timing */
		per = (per + BLOCK_ROWS - 1) / BLOCK_ROWS * BLOCK_ROWS;
		if (Rt == NULL || Wt == NULL)
		{
			free(Rt);
			free(Wt);
			snprintf(err, errlen, "out of memory folding %lld rows of %d columns",
					 (long long) n, m);
			return GM_ENOMEM;
		}
#pragma omp parallel num_threads(nt)
		for (int t = gm_la_thread_num(); t < nt; t += gm_la_num_threads())
		{
			int64_t		b = (int64_t) t * per,
						e = b + per < n ? b + per : n;

			if (b < e)
				fold_rows(Rt + (size_t) t * m * m, m, s->k, s->intercept, st_shift(s),
						  X + (size_t) b * ldx, ldx, y + b, e - b,
						  Wt + (size_t) t * BLOCK_ROWS * m);
		}
		for (int t = 0; t < nt && rc == GM_OK; t++)
			rc = fold_upper(st_R(s), m, Rt + (size_t) t * m * m);
		free(Rt);
		free(Wt);
		if (rc != GM_OK)
		{
			snprintf(err, errlen, "out of memory merging least-squares factors");
			return rc;
		}
	}
	s->rows_used += n;
	return GM_OK;
}

int
gm_ols_merge(gm_ols_state *dst, gm_ols_state *src, char *err, size_t errlen)
{
	int			rc;
	int			m = dst->m;

	if ((rc = check_state(dst, err, errlen)) != GM_OK ||
		(rc = check_state(src, err, errlen)) != GM_OK)
		return rc;
	if (dst->k != src->k || dst->intercept != src->intercept)
	{
		snprintf(err, errlen, "cannot merge least-squares states of %d and %d columns",
				 dst->k + dst->intercept, src->k + src->intercept);
		return GM_EINVAL;
	}
	if ((rc = gm_ols_flush(src, err, errlen)) != GM_OK)
		return rc;
	dst->rows_skipped += src->rows_skipped;
	if (src->rows_used == 0)
		return GM_OK;
	if (dst->rows_used == 0)
	{
		memcpy(st_shift(dst), st_shift(src), sizeof(double) * (size_t) (dst->k + 1));
		memcpy(st_R(dst), st_R(src), sizeof(double) * (size_t) m * m);
		dst->shifted = src->shifted;
		dst->rows_used = src->rows_used;
		return GM_OK;
	}
	if ((rc = gm_ols_flush(dst, err, errlen)) != GM_OK)
		return rc;
	{
		double	   *U = malloc(sizeof(double) * (size_t) m * m);
		const double *cs = st_shift(src),
				   *cd = st_shift(dst);

		if (U == NULL)
		{
			snprintf(err, errlen, "out of memory merging least-squares states");
			return GM_ENOMEM;
		}
		memcpy(U, st_R(src), sizeof(double) * (size_t) m * m);

		/*
		 * src's rows in dst's shifts: [1, x - cd] = [1, x - cs] T with T the
		 * identity plus (cs - cd) in row 0, so only R's row 0 changes.
		 */
		if (dst->intercept)
			for (int j = 1; j < m; j++)
				U[j] += U[0] * (cs[j - 1] - cd[j - 1]);
		rc = fold_upper(st_R(dst), m, U);
		free(U);
		if (rc != GM_OK)
		{
			snprintf(err, errlen, "out of memory merging least-squares states");
			return rc;
		}
	}
	dst->rows_used += src->rows_used;
	return GM_OK;
}
