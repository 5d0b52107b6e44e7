/*
 * student_t.c: the regularized incomplete beta function and the two-sided p
 * value of Student's t distribution, in float64, for the t statistics of a
 * least-squares fit (ols_finish.c).
 */
#include "gm_linalg.h"

#include <math.h>

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
