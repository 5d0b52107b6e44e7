/*
 * util.c: clocks, thread counts and the seeded initial factors every
 * algorithm starts from.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>

#include <time.h>
#include <unistd.h>

/* Monotonic seconds. */
double
gm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One thread per online core. */
int
gm_default_threads(void)
{
	long		n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int) n : 1;
}

/* The thread count a "threads" parameter means (<= 0: one per core). */
int
gm_resolve_threads(int threads)
{
	return threads > 0 ? threads : gm_default_threads();
}

/*
 * F (n x k) uniform in [0, 0.01), keyed by (seed, side, row, f): independent
 * of threads and of n, so a row's start does not depend on the data size.
 */
void
gm_factors_init(float *F, int64_t n, int k, uint64_t seed, int side)
{
	/* rows are independent: in parallel (84M values at 20M rows, factors 512) */
#pragma omp parallel for schedule(static) if (n * (int64_t) k > (1 << 20))
	for (int64_t r = 0; r < n; r++)
	{
		uint64_t	base = gm_factor_row_base(seed, side, r);

		for (int f = 0; f < k; f++)
			F[r * k + f] = gm_factor_start(base, f);
	}
}

/* a . b over n doubles ("omp simd" vectorises the sum without -ffast-math) */
static inline double
ddot(const double *a, const double *b, int n)
{
	double		s = 0.0;

#pragma omp simd reduction(+:s)
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/*
 * Solve A x = b in place (b becomes x) by Cholesky: A is n x n symmetric,
 * row-major with leading dimension n, of which the lower triangle is read
 * and overwritten by L (A = L L^T).  Returns 0, or -1 (b untouched) when a
 * pivot is not positive and finite: A is not (numerically) positive definite.
 */
int
gm_cholesky_solve(double *A, double *b, int n)
{
	for (int j = 0; j < n; j++)
	{
		double	   *lj = A + (size_t) j * n;
		double		d = lj[j] - ddot(lj, lj, j);

		if (!(d > 0.0) || !isfinite(d))
			return -1;
		d = sqrt(d);
		lj[j] = d;
		for (int i = j + 1; i < n; i++)
		{
			double	   *li = A + (size_t) i * n;

			li[j] = (li[j] - ddot(li, lj, j)) / d;
		}
	}
	for (int i = 0; i < n; i++)		/* L y = b */
		b[i] = (b[i] - ddot(A + (size_t) i * n, b, i)) / A[(size_t) i * n + i];
	for (int i = n - 1; i >= 0; i--)	/* L^T x = y */
	{
		double		s = b[i];

		for (int p = i + 1; p < n; p++)
			s -= A[(size_t) p * n + i] * b[p];
		b[i] = s / A[(size_t) i * n + i];
	}
	return 0;
}
