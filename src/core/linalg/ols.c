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
#define JACOBI_MAX_P	256			/* exact SVD for the condition number up to this */

/* ------------------------------------------------------------ state layout */

static inline double *
st_shift(gm_ols_state *s)
{
	return (double *) (s + 1);
}

static inline double *
st_R(gm_ols_state *s)
{
	return st_shift(s) + s->k + 1;
}

static inline double *
st_buf(gm_ols_state *s)
{
	return st_R(s) + (size_t) s->m * s->m;
}

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
		if (xx == 0.0)
			continue;			/* nothing below the diagonal to annihilate */
		alpha = R[(size_t) j * m + j];
		norm = sqrt(alpha * alpha + xx);
		if (!isfinite(norm))
		{
			/* squares overflowed: the same norm, scaled */
			double		big = fabs(alpha),
						acc = 0.0;

			for (int64_t i = 0; i < nb; i++)
				big = fmax(big, fabs(wj[i]));
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

/* Choose the shifts: the means of n rows (zero without an intercept). */
static void
choose_shift(gm_ols_state *s, const double *X, int64_t ldx, const double *y, int64_t n)
{
	double	   *c = st_shift(s);

	memset(c, 0, sizeof(double) * (size_t) (s->k + 1));
	if (s->intercept && n > 0)
	{
		for (int64_t i = 0; i < n; i++)
		{
			for (int j = 0; j < s->k; j++)
				c[j] += X[(size_t) i * ldx + j];
			c[s->k] += y[i];
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
		choose_shift(s, st_buf(s), ld, st_buf(s) + s->k, s->buf_rows);
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
		choose_shift(s, X, ldx, y, n < 4096 ? n : 4096);

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

/* ------------------------------------------------------------ t distribution */

/* log Gamma(a + b) - log Gamma(a), accurate also for large a and small b. */
static double
lgamma_shift(double a, double b)
{
	if (a > 1000.0)
	{
		/* Stirling's series for both, with the leading terms combined */
		double		z = a + b;
		double		s = (a - 0.5) * log1p(b / a) + b * log(z) - b;
		double		iz = 1.0 / z,
					ia = 1.0 / a;

		s += (iz - ia) / 12.0 - (iz * iz * iz - ia * ia * ia) / 360.0 +
			(pow(iz, 5) - pow(ia, 5)) / 1260.0;
		return s;
	}
	return lgamma(a + b) - lgamma(a);
}

/* log B(a, b), the large argument's Gamma ratio taken without cancellation */
static double
lbeta(double a, double b)
{
	double		big = a > b ? a : b,
				small = a > b ? b : a;

	return lgamma(small) - lgamma_shift(big, small);
}

/* I_x(a, b) by its continued fraction (modified Lentz), for x < (a+1)/(a+b+2) */
static double
betainc_cf(double a, double b, double x, double y)
{
	const double tiny = 1e-300;
	double		lfront,
				f,
				C,
				D;

	/* x^a y^b / (a B(a, b)); log of the one near 1 through log1p of the other */
	lfront = a * (x > 0.5 ? log1p(-y) : log(x)) + b * (y > 0.5 ? log1p(-x) : log(y)) -
		lbeta(a, b) - log(a);
	f = 1.0;
	C = 1.0;
	D = 0.0;
	/*
	 * near the switch point x = (a+1)/(a+b+2) the fraction needs about
	 * sqrt(a + b) terms: tens of thousands for a t with 1e9 degrees of freedom
	 */
	for (int i = 1; i <= 400000; i++)
	{
		int			mm = i / 2;
		double		d,
					delta;

		if (i % 2)
			d = -(a + mm) * (a + b + mm) * x / ((a + 2 * mm) * (a + 2 * mm + 1));
		else
			d = mm * (b - mm) * x / ((a + 2 * mm - 1) * (a + 2 * mm));
		D = 1.0 + d * D;
		if (fabs(D) < tiny)
			D = tiny;
		C = 1.0 + d / C;
		if (fabs(C) < tiny)
			C = tiny;
		D = 1.0 / D;
		delta = C * D;
		f *= delta;
		if (fabs(delta - 1.0) < 2e-16)
			break;
	}
	return exp(lfront) / f;
}

/* I_x(a, b) with y = 1 - x given separately (so neither loses digits) */
static double
betainc2(double a, double b, double x, double y)
{
	if (!(a > 0) || !(b > 0) || isnan(x) || isnan(y))
		return NAN;
	if (x <= 0.0)
		return 0.0;
	if (y <= 0.0)
		return 1.0;
	if (x < (a + 1.0) / (a + b + 2.0))
		return betainc_cf(a, b, x, y);
	return 1.0 - betainc_cf(b, a, y, x);
}

double
gm_betainc(double a, double b, double x)
{
	return betainc2(a, b, x, 1.0 - x);
}

double
gm_student_t_pvalue(double t, double df)
{
	double		t2;

	if (isnan(t) || !(df > 0))
		return NAN;
	if (isinf(t))
		return 0.0;
	t2 = t * t;

	/*
	 * Many degrees of freedom: the continued fraction needs ~sqrt(df) terms
	 * and its rounding reaches 1e-8; Temme's large-a expansion of I_x(a, b)
	 * for b = 1/2, erfc(sqrt((a - 1/4) log(1 + t^2/df))), is then accurate
	 * to O(1/df^2) (1e-10 relative at df = 1e7, t = 30).
	 */
	if (df >= 1e7)
		return erfc(sqrt((df / 2.0 - 0.25) * log1p(t2 / df)));
	/* P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2) */
	return betainc2(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2));
}

/* ------------------------------------------------------------ finishing */

/* 2-norm condition number of the p x p upper-triangular U (row-major). */
static double
condition_number(const double *U, int p)
{
	double	   *A = malloc(sizeof(double) * (size_t) p * p);
	double		smax = 0.0,
				smin = INFINITY;

	if (A == NULL)
		return NAN;
	if (p <= JACOBI_MAX_P)
	{
		/* one-sided Jacobi on the columns of U: they converge to U V = W Sigma */
		for (int i = 0; i < p; i++)
			for (int j = 0; j < p; j++)
				A[(size_t) j * p + i] = U[(size_t) i * p + j];	/* column-major */
		for (int sweep = 0; sweep < 60; sweep++)
		{
			double		off = 0.0;

			for (int i = 0; i < p - 1; i++)
				for (int j = i + 1; j < p; j++)
				{
					double	   *ci = A + (size_t) i * p,
							   *cj = A + (size_t) j * p;
					double		a = 0.0,
								b = 0.0,
								g = 0.0,
								zeta,
								tt,
								c,
								s;

					for (int r = 0; r < p; r++)
					{
						a += ci[r] * ci[r];
						b += cj[r] * cj[r];
						g += ci[r] * cj[r];
					}
					if (g == 0.0 || fabs(g) <= 1e-15 * sqrt(a * b))
						continue;
					off = fmax(off, fabs(g) / sqrt(a * b));
					zeta = (b - a) / (2.0 * g);
					tt = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
					c = 1.0 / sqrt(1.0 + tt * tt);
					s = c * tt;
					for (int r = 0; r < p; r++)
					{
						double		x = ci[r],
									y = cj[r];

						ci[r] = c * x - s * y;
						cj[r] = s * x + c * y;
					}
				}
			if (off <= 1e-15)
				break;
		}
		for (int j = 0; j < p; j++)
		{
			double		nn = 0.0;

			for (int r = 0; r < p; r++)
				nn += A[(size_t) j * p + r] * A[(size_t) j * p + r];
			nn = sqrt(nn);
			smax = fmax(smax, nn);
			smin = fmin(smin, nn);
		}
	}
	else
	{
		/* power iteration on U'U for sigma_max, on (U'U)^-1 for sigma_min */
		double	   *v = A,
				   *w = A + p;

		for (int pass = 0; pass < 2; pass++)
		{
			double		lam = 0.0;

			for (int i = 0; i < p; i++)
				v[i] = 1.0 + 0.01 * (i % 7);
			for (int it = 0; it < 1000; it++)
			{
				double		nv = 0.0,
							prev = lam;

				if (pass == 0)
				{
					for (int i = 0; i < p; i++)		/* w = U v */
					{
						double		acc = 0.0;

						for (int j = i; j < p; j++)
							acc += U[(size_t) i * p + j] * v[j];
						w[i] = acc;
					}
					for (int j = p - 1; j >= 0; j--)	/* v = U' w */
					{
						double		acc = 0.0;

						for (int i = 0; i <= j; i++)
							acc += U[(size_t) i * p + j] * w[i];
						v[j] = acc;
					}
				}
				else
				{
					for (int j = 0; j < p; j++)		/* U' w = v */
					{
						double		acc = v[j];

						for (int i = 0; i < j; i++)
							acc -= U[(size_t) i * p + j] * w[i];
						w[j] = acc / U[(size_t) j * p + j];
					}
					for (int i = p - 1; i >= 0; i--)	/* U v = w */
					{
						double		acc = w[i];

						for (int j = i + 1; j < p; j++)
							acc -= U[(size_t) i * p + j] * v[j];
						v[i] = acc / U[(size_t) i * p + i];
					}
				}
				for (int i = 0; i < p; i++)
					nv += v[i] * v[i];
				nv = sqrt(nv);
				if (!(nv > 0) || !isfinite(nv))
					break;
				for (int i = 0; i < p; i++)
					v[i] /= nv;
				lam = nv;
				if (it > 10 && fabs(lam - prev) <= 1e-14 * lam)
					break;
			}
			if (pass == 0)
				smax = sqrt(lam);
			else
				smin = lam > 0 ? 1.0 / sqrt(lam) : 0.0;
		}
	}
	free(A);
	return smin > 0 ? smax / smin : INFINITY;
}

/*
 * Column j of the p x p factor is dependent on the earlier ones: fill
 * involved[] (in coefficient numbering) and the message.
 */
static void
describe_dependency(const gm_ols_state *s, const double *R, int m, int j,
					const double *colnorm, gm_ols_result *res, char *err, size_t errlen)
{
	const double *c = st_shift((gm_ols_state *) s);
	int			o = s->intercept;
	double	   *w = malloc(sizeof(double) * (size_t) (j > 0 ? j : 1));
	size_t		len;
	int			nx = 0,
				with_intercept = 0;

	res->involved[0] = j;
	res->n_involved = 1;
	if (colnorm[j] == 0.0 && (!o || j == 0 || c[j - 1] == 0.0))
	{
		snprintf(err, errlen, "x column %d is all zeros: its coefficient cannot be estimated",
				 j - o + 1);
		free(w);
		return;
	}
	if (w == NULL)
	{
		snprintf(err, errlen, "x column %d is collinear with earlier columns", j - o + 1);
		return;
	}
	/* R[0..j, 0..j] w = R[0..j, j]: column j as a combination of the earlier ones */
	for (int i = j - 1; i >= 0; i--)
	{
		double		acc = R[(size_t) i * m + j];

		for (int l = i + 1; l < j; l++)
			acc -= R[(size_t) i * m + l] * w[l];
		w[i] = acc / R[(size_t) i * m + i];
	}
	/* in the original columns the constant absorbs the shifts */
	if (o)
	{
		double		cst = w[0] + (j >= 1 ? c[j - 1] : 0.0);

		for (int i = 1; i < j; i++)
			cst -= w[i] * c[i - 1];
		w[0] = cst;
	}
	for (int i = 0; i < j; i++)
	{
		double		scale = colnorm[i];

		if (o && i == 0)
			scale = sqrt((double) s->rows_used);
		else if (o)
			scale = fmax(colnorm[i], fabs(c[i - 1]) * sqrt((double) s->rows_used));
		if (fabs(w[i]) * scale > 1e-8 * fmax(colnorm[j], o ? fabs(c[j - 1]) * sqrt((double) s->rows_used) : 0.0))
		{
			res->involved[res->n_involved++] = i;
			if (o && i == 0)
				with_intercept = 1;
			else
				nx++;
		}
	}
	free(w);
	if (nx == 0 && with_intercept)
	{
		snprintf(err, errlen, "x column %d is constant: it is collinear with the intercept",
				 j - o + 1);
		return;
	}
	if (nx == 0)
	{
		snprintf(err, errlen, "x column %d is numerically collinear with the earlier columns: "
				 "X is rank-deficient", j - o + 1);
		return;
	}
	len = (size_t) snprintf(err, errlen, "x column %d is a linear combination of %s",
							j - o + 1, with_intercept ? "the intercept and " : "");
	for (int t = 1 + with_intercept, printed = 0; t < res->n_involved && len < errlen; t++)
	{
		int			col = res->involved[t] - o + 1;

		len += (size_t) snprintf(err + len, errlen - len, "%s%s%d",
								 printed == 0 ? (nx > 1 ? "x columns " : "x column ") : "",
								 printed == 0 ? "" : (t == res->n_involved - 1 ? " and " : ", "),
								 col);
		printed++;
	}
	if (len < errlen)
		snprintf(err + len, errlen - len, ": X is rank-deficient; drop one of these columns");
}

int
gm_ols_finalize(gm_ols_state *s, gm_ols_result *res, char *err, size_t errlen)
{
	int			rc;
	int			m = s->m,
				p = s->k + s->intercept,
				o = s->intercept;
	int64_t		n;
	double	   *R,
			   *Ri = NULL,
			   *colnorm = NULL,
			   *U = NULL;
	const double *c;
	double		rss,
				tss = 0.0,
				sigma,
				df;

	if ((rc = gm_ols_flush(s, err, errlen)) != GM_OK)
		return rc;
	R = st_R(s);
	c = st_shift(s);
	n = s->rows_used;
	res->p = p;
	res->rows_used = n;
	res->rows_skipped = s->rows_skipped;
	res->n_involved = 0;
	if (n == 0)
	{
		snprintf(err, errlen, "no rows to fit%s",
				 s->rows_skipped ? ": every row has a NULL" : "");
		return GM_EINVAL;
	}
	if (n < p)
	{
		snprintf(err, errlen, "%lld rows cannot determine %d coefficients: a fit needs at "
				 "least as many rows as coefficients", (long long) n, p);
		return GM_EINVAL;
	}

	colnorm = malloc(sizeof(double) * (size_t) p);
	Ri = calloc((size_t) p * p, sizeof(double));
	U = malloc(sizeof(double) * (size_t) p * p);
	if (!colnorm || !Ri || !U)
	{
		rc = GM_ENOMEM;
		snprintf(err, errlen, "out of memory finishing a fit of %d coefficients", p);
		goto done;
	}

	/* rank: |R_jj| against the column's norm (for shifted columns, the unshifted scale) */
	for (int j = 0; j < p; j++)
	{
		double		nn = 0.0,
					scale;

		for (int i = 0; i <= j; i++)
			nn += R[(size_t) i * m + j] * R[(size_t) i * m + j];
		colnorm[j] = sqrt(nn);
		scale = colnorm[j];
		if (o && j >= 1)
			scale = fmax(scale, fabs(c[j - 1]) * sqrt((double) n));
		if (!(fabs(R[(size_t) j * m + j]) > GM_OLS_RANK_RTOL * scale))
		{
			describe_dependency(s, R, m, j, colnorm, res, err, errlen);
			rc = GM_EINVAL;
			goto done;
		}
	}

	/* coefficients in the shifted model: R_xx b = R_xy */
	for (int i = p - 1; i >= 0; i--)
	{
		double		acc = R[(size_t) i * m + m - 1];

		for (int j = i + 1; j < p; j++)
			acc -= R[(size_t) i * m + j] * res->coef[j];
		res->coef[i] = acc / R[(size_t) i * m + i];
	}
	if (o)
	{
		double		b0 = res->coef[0] + c[s->k];

		for (int j = 1; j < p; j++)
			b0 -= res->coef[j] * c[j - 1];
		res->coef[0] = b0;
	}

	rss = R[(size_t) (m - 1) * m + m - 1] * R[(size_t) (m - 1) * m + m - 1];
	for (int i = o; i < m; i++)
		tss += R[(size_t) i * m + m - 1] * R[(size_t) i * m + m - 1];
	df = (double) (n - p);
	res->df_residual = n - p;
	res->rss = rss;
	res->r2 = tss > 0 ? 1.0 - rss / tss : NAN;
	res->adj_r2 = df > 0 ? 1.0 - (1.0 - res->r2) * ((double) (n - o) / df) : NAN;
	sigma = df > 0 ? sqrt(rss / df) : NAN;
	res->residual_se = sigma;

	/* R_xx^-1 (upper triangular), row by row of the identity */
	for (int j = p - 1; j >= 0; j--)
	{
		Ri[(size_t) j * p + j] = 1.0 / R[(size_t) j * m + j];
		for (int i = j - 1; i >= 0; i--)
		{
			double		acc = 0.0;

			for (int l = i + 1; l <= j; l++)
				acc += R[(size_t) i * m + l] * Ri[(size_t) l * p + j];
			Ri[(size_t) i * p + j] = -acc / R[(size_t) i * m + i];
		}
	}
	/* var(b_j) = sigma^2 |row j of R^-1|^2 */
	for (int j = 0; j < p; j++)
	{
		double		acc = 0.0;

		for (int l = j; l < p; l++)
			acc += Ri[(size_t) j * p + l] * Ri[(size_t) j * p + l];
		res->std_err[j] = sigma * sqrt(acc);
	}
	if (o)
	{
		/* the intercept is g'b with g = (1, -c): var = sigma^2 |R^-T g|^2 */
		double		acc = 0.0;

		for (int l = 0; l < p; l++)
		{
			double		v = Ri[l];	/* row 0 */

			for (int j = 1; j <= l; j++)
				v -= c[j - 1] * Ri[(size_t) j * p + l];
			acc += v * v;
		}
		res->std_err[0] = sigma * sqrt(acc);
	}
	for (int j = 0; j < p; j++)
	{
		res->t_stat[j] = res->coef[j] / res->std_err[j];
		res->p_value[j] = df > 0 ? gm_student_t_pvalue(res->t_stat[j], df) : NAN;
	}

	/* condition number of X itself: undo the shifts in R's row 0 */
	for (int i = 0; i < p; i++)
		for (int j = 0; j < p; j++)
			U[(size_t) i * p + j] = R[(size_t) i * m + j];
	if (o)
		for (int j = 1; j < p; j++)
			U[j] += U[0] * c[j - 1];
	res->condition_number = condition_number(U, p);
	rc = GM_OK;

done:
	free(colnorm);
	free(Ri);
	free(U);
	return rc;
}

double
gm_ols_predict(const double *coef, int p, const double *x, int k)
{
	int			o = p - k;		/* 1 with an intercept */
	double		s = o ? coef[0] : 0.0;

	for (int j = 0; j < k; j++)
		s += coef[j + o] * x[j];
	return s;
}
