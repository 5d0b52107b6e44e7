/*
 * spmv.c: y = A x for CSR matrices on the CPU, multi-threaded, in float64
 * and float32.  Rows are split among threads by nonzeros so that a few long
 * rows do not leave the other threads idle.
 */
#include "gm_linalg.h"
#include "linalg_int.h"
#include "gm_util.h"

#include <stdlib.h>

void
gm_spmv_partition(const gm_spmat *A, int nt, int64_t row_weight, int64_t *bounds)
{
	int64_t		n = A->n;
	int64_t		total = A->indptr[n] + row_weight * n;

	bounds[0] = 0;
	for (int t = 1; t < nt; t++)
	{
		/* first row i whose cumulative work indptr[i] + w i reaches t/nt of the total */
		int64_t		target = (int64_t) ((double) total * t / nt);
		int64_t		lo = bounds[t - 1],
					hi = n;

		while (lo < hi)
		{
			int64_t		mid = lo + (hi - lo) / 2;

			if (A->indptr[mid] + row_weight * mid < target)
				lo = mid + 1;
			else
				hi = mid;
		}
		bounds[t] = lo;
	}
	bounds[nt] = n;
}

GM_HOT void
gm_spmv_rows(const gm_spmat *A, const double *x, double *y, int64_t b, int64_t e)
{
	const int64_t *ip = A->indptr;
	const int32_t *ix = A->indices;
	const double *v = A->values;

	for (int64_t i = b; i < e; i++)
	{
		double		s = 0.0;

		for (int64_t k = ip[i]; k < ip[i + 1]; k++)
			s += v[k] * x[ix[k]];
		y[i] = s;
	}
}

void
gm_spmv(const gm_spmat *A, const double *x, double *y, int threads)
{
	int			nt = gm_la_threads(threads);
	int64_t		one[2],
			   *bounds;

	if (A->n < 4096)
		nt = 1;
	bounds = nt > 1 ? malloc(sizeof(int64_t) * (size_t) (nt + 1)) : NULL;
	if (bounds == NULL)
	{
		nt = 1;
		bounds = one;
	}
	gm_spmv_partition(A, nt, 2, bounds);
#pragma omp parallel num_threads(nt)
	{
		/* ranges by index, in case the region got fewer threads than asked */
		for (int t = gm_la_thread_num(); t < nt; t += gm_la_num_threads())
			gm_spmv_rows(A, x, y, bounds[t], bounds[t + 1]);
	}
	if (bounds != one)
		free(bounds);
}

GM_HOT static void
spmv_rows_single(const gm_spmat *A, const float *x, float *y, int64_t b, int64_t e)
{
	const int64_t *ip = A->indptr;
	const int32_t *ix = A->indices;
	const float *v = A->values32;

	for (int64_t i = b; i < e; i++)
	{
		float		s = 0.0f;

		for (int64_t k = ip[i]; k < ip[i + 1]; k++)
			s += v[k] * x[ix[k]];
		y[i] = s;
	}
}

void
gm_spmv_single(const gm_spmat *A, const float *x, float *y, int threads)
{
	int			nt = gm_la_threads(threads);
	int64_t		one[2],
			   *bounds;

	if (A->n < 4096)
		nt = 1;
	bounds = nt > 1 ? malloc(sizeof(int64_t) * (size_t) (nt + 1)) : NULL;
	if (bounds == NULL)
	{
		nt = 1;
		bounds = one;
	}
	gm_spmv_partition(A, nt, 2, bounds);
#pragma omp parallel num_threads(nt)
	{
		for (int t = gm_la_thread_num(); t < nt; t += gm_la_num_threads())
			spmv_rows_single(A, x, y, bounds[t], bounds[t + 1]);
	}
	if (bounds != one)
		free(bounds);
}
