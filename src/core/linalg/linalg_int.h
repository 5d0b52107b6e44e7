/*
 * linalg_int.h: helpers shared by spmv.c, pcg.c, ols.c and ols_finish.c
 * (not part of the core's API).
 */
#ifndef GM_LINALG_INT_H
#define GM_LINALG_INT_H

#include "gm_linalg.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Threads to use: threads > 0 as asked, otherwise one per core. */
static inline int
gm_la_threads(int threads)
{
#ifdef _OPENMP
	return threads > 0 ? threads : omp_get_max_threads();
#else
	(void) threads;
	return 1;
#endif
}

/* Threads in the current parallel region. */
static inline int
gm_la_num_threads(void)
{
#ifdef _OPENMP
	return omp_get_num_threads();
#else
	return 1;
#endif
}

static inline int
gm_la_thread_num(void)
{
#ifdef _OPENMP
	return omp_get_thread_num();
#else
	return 0;
#endif
}

/*
 * Split A's rows into nt ranges [bounds[t], bounds[t+1]) of about equal
 * work, a row costing its nonzeros plus row_weight.
 */
void		gm_spmv_partition(const gm_spmat *A, int nt, int64_t row_weight,
							  int64_t *bounds);

/* y[b..e) = A x for rows b..e, float64 */
void		gm_spmv_rows(const gm_spmat *A, const double *x, double *y,
						 int64_t b, int64_t e);

/* The arrays behind a least-squares state: the shifts, R, the row buffer. */

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

#endif
