/*
 * ols_finish.c: a least-squares state (ols.c) turned into the fit: the
 * coefficients from R, their standard errors, t statistics and p values,
 * R^2, the rank (a rank-deficient X names the columns involved) and the
 * condition number of the scaled X (an exact one-sided Jacobi SVD up to
 * JACOBI_MAX_P columns); and a prediction from coefficients.
 */
#include "gm_linalg.h"
#include "linalg_int.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JACOBI_MAX_P	256			/* exact SVD for the condition number up to this */

/* 2-norm condition number of the p x p upper-triangular U (row-major). */
static double
condition_number(const double *U, int p)
{
	double	   *A = malloc(sizeof(double) * (size_t) p * p);
	double	   *Us = NULL;
	double		smax = 0.0,
				smin = INFINITY,
				umax = 0.0;
	int			F;

	if (A == NULL)
		return NAN;
	/* scale-free: U far from 1 (columns beyond about 1e100) is scaled by 2^-F first */
	for (size_t i = 0; i < (size_t) p * p; i++)
		umax = fmax(umax, fabs(U[i]));
	F = umax > 0 && isfinite(umax) ? ilogb(umax) : 0;
	if (F < -300 || F > 300)
	{
		Us = malloc(sizeof(double) * (size_t) p * p);
		if (Us == NULL)
		{
			free(A);
			return NAN;
		}
		for (size_t i = 0; i < (size_t) p * p; i++)
			Us[i] = ldexp(U[i], -F);
		U = Us;
	}
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
	free(Us);
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
		if (!isfinite(nn) || nn < 0x1p-900)
		{
			/* a column beyond about 1e154 (or below 1e-150): its norm, scaled */
			double		big = 0.0;

			nn = 0.0;
			for (int i = 0; i <= j; i++)
				big = fmax(big, fabs(R[(size_t) i * m + j]));
			for (int i = 0; i <= j && big > 0; i++)
				nn += (R[(size_t) i * m + j] / big) * (R[(size_t) i * m + j] / big);
			colnorm[j] = big * sqrt(nn);
		}
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
	if (isfinite(tss) && tss >= 0x1p-900)
	{
		res->r2 = 1.0 - rss / tss;
		sigma = df > 0 ? sqrt(rss / df) : NAN;
	}
	else
	{
		/* y beyond about 1e154 (or below 1e-150): the squares left double's range */
		double		big = 0.0,
					t = 0.0,
					r;

		for (int i = o; i < m; i++)
			big = fmax(big, fabs(R[(size_t) i * m + m - 1]));
		for (int i = o; i < m && big > 0; i++)
			t += (R[(size_t) i * m + m - 1] / big) * (R[(size_t) i * m + m - 1] / big);
		r = big > 0 ? R[(size_t) (m - 1) * m + m - 1] / big : 0.0;
		res->r2 = t > 0 ? 1.0 - r * r / t : NAN;
		sigma = df > 0 ? fabs(R[(size_t) (m - 1) * m + m - 1]) / sqrt(df) : NAN;
	}
	res->adj_r2 = df > 0 ? 1.0 - (1.0 - res->r2) * ((double) (n - o) / df) : NAN;
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
