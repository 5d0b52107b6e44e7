/*
 * spmat.c: the sparse matrices of the SPD solver: built from (row, col,
 * value) triplets with duplicates summed, one triangle mirrored when only
 * one was given, and the checks whose messages become the SQL layer's
 * errors (index out of range, NaN/Inf, not square, not symmetric, a bad
 * diagonal, an empty matrix).
 */
#include "gm_linalg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int
nthreads(int threads)
{
#ifdef _OPENMP
	return threads > 0 ? threads : omp_get_max_threads();
#else
	(void) threads;
	return 1;
#endif
}

/* "NaN", "Infinity" or "-Infinity" for a non-finite value. */
static const char *
nonfinite_name(double v)
{
	if (isnan(v))
		return "NaN";
	return v > 0 ? "Infinity" : "-Infinity";
}

int
gm_coo_scan(const gm_coo *c, int64_t n, gm_coo_info *info,
			char *err, size_t errlen)
{
	int64_t		limit = n > 0 ? n : GM_SPMAT_MAX_N;
	int64_t		max_row = -1,
				max_col = -1,
				n_lower = 0,
				n_upper = 0;
	int64_t		bad = INT64_MAX;	/* first offending entry */

	memset(info, 0, sizeof(*info));
	if (c->nnz <= 0)
	{
		snprintf(err, errlen, "the matrix is empty: it has no entries");
		return GM_EINVAL;
	}

	/*
	 * One pass for the common case (everything valid); the first offending
	 * entry is found again in order below so the message names the first.
	 */
#pragma omp parallel for reduction(max:max_row, max_col) reduction(+:n_lower, n_upper) \
	reduction(min:bad) schedule(static)
	for (int64_t e = 0; e < c->nnz; e++)
	{
		int64_t		i = c->rows[e],
					j = c->cols[e];

		if (i < 0 || j < 0 || i >= limit || j >= limit || !isfinite(c->values[e]))
		{
			if (e < bad)
				bad = e;
			continue;
		}
		if (i > max_row)
			max_row = i;
		if (j > max_col)
			max_col = j;
		n_lower += (i > j);
		n_upper += (i < j);
	}
	if (bad < c->nnz)
	{
		int64_t		i = c->rows[bad],
					j = c->cols[bad],
					b = c->base,
					e = bad + 1;

		if (i < 0 || j < 0)
			snprintf(err, errlen,
					 "entry %lld (row %lld, column %lld) lies outside the matrix: "
					 "indices start at %lld",
					 (long long) e, (long long) (i + b), (long long) (j + b),
					 (long long) b);
		else if (i >= limit || j >= limit)
		{
			if (n > 0)
				snprintf(err, errlen,
						 "entry %lld (row %lld, column %lld) lies outside the %lld x %lld "
						 "matrix (indices %lld to %lld)",
						 (long long) e, (long long) (i + b), (long long) (j + b),
						 (long long) n, (long long) n, (long long) b,
						 (long long) (n - 1 + b));
			else
				snprintf(err, errlen,
						 "entry %lld (row %lld, column %lld) lies outside the largest "
						 "supported matrix (indices up to %lld)",
						 (long long) e, (long long) (i + b), (long long) (j + b),
						 (long long) (GM_SPMAT_MAX_N - 1 + b));
		}
		else
			snprintf(err, errlen, "entry %lld (row %lld, column %lld) is %s",
					 (long long) e, (long long) (i + b), (long long) (j + b),
					 nonfinite_name(c->values[bad]));
		return GM_EINVAL;
	}
	info->n_rows = max_row + 1;
	info->n_cols = max_col + 1;
	info->n_lower = n_lower;
	info->n_upper = n_upper;
	info->n_diagonal = c->nnz - n_lower - n_upper;
	if (n_lower > 0 && n_upper > 0)
		info->triangle = GM_TRI_BOTH;
	else if (n_lower > 0)
		info->triangle = GM_TRI_LOWER;
	else if (n_upper > 0)
		info->triangle = GM_TRI_UPPER;
	else
		info->triangle = GM_TRI_DIAGONAL;
	return GM_OK;
}

int
gm_coo_check_square(const gm_coo_info *info, int64_t base,
					char *err, size_t errlen)
{
	if (info->n_rows != info->n_cols)
	{
		snprintf(err, errlen,
				 "the matrix is not square: it has %lld rows (indices up to %lld) but "
				 "%lld columns (indices up to %lld)",
				 (long long) info->n_rows, (long long) (info->n_rows - 1 + base),
				 (long long) info->n_cols, (long long) (info->n_cols - 1 + base));
		return GM_EINVAL;
	}
	return GM_OK;
}

/* A column and its value, sorted by column within a row. */
typedef struct colval
{
	int32_t		col;
	int32_t		pad;
	double		val;
} colval;

static int
colval_cmp(const void *a, const void *b)
{
	int32_t		x = ((const colval *) a)->col,
				y = ((const colval *) b)->col;

	return (x > y) - (x < y);
}

/* Sort a row by column (stable for short rows; duplicates are summed after). */
static void
sort_row(colval *r, int64_t len)
{
	if (len <= 32)
	{
		for (int64_t i = 1; i < len; i++)
		{
			colval		t = r[i];
			int64_t		j = i - 1;

			while (j >= 0 && r[j].col > t.col)
			{
				r[j + 1] = r[j];
				j--;
			}
			r[j + 1] = t;
		}
	}
	else
		qsort(r, (size_t) len, sizeof(colval), colval_cmp);
}

int
gm_spmat_from_coo(const gm_coo *c, int64_t n, gm_triangle mirror, int threads,
				  gm_spmat *out, char *err, size_t errlen)
{
	return gm_spmat_from_coo_polled(c, n, mirror, threads, NULL, out, err, errlen);
}

#define POLL_EVERY	((int64_t) 1 << 20)

/* Has cb asked to stop?  Called by the calling thread (thread 0 of a team) only. */
static int
asked_stop(const gm_callbacks *cb, int *stop)
{
#ifdef _OPENMP
	if (omp_get_thread_num() != 0)
		return __atomic_load_n(stop, __ATOMIC_RELAXED);
#endif
	if (!__atomic_load_n(stop, __ATOMIC_RELAXED) && cb && cb->should_stop &&
		cb->should_stop(cb->arg))
		__atomic_store_n(stop, 1, __ATOMIC_RELAXED);
	return __atomic_load_n(stop, __ATOMIC_RELAXED);
}

int
gm_spmat_from_coo_polled(const gm_coo *c, int64_t n, gm_triangle mirror, int threads,
						 const gm_callbacks *cb, gm_spmat *out, char *err, size_t errlen)
{
	int			nt = nthreads(threads);
	int			stop = 0;
	int			mirrored = (mirror == GM_TRI_LOWER || mirror == GM_TRI_UPPER);
	int64_t    *start = NULL,
			   *uniq = NULL;
	colval	   *cv = NULL;
	int64_t		total = 0;

	memset(out, 0, sizeof(*out));
	if (n <= 0 || n > GM_SPMAT_MAX_N)
	{
		snprintf(err, errlen, "matrix dimension %lld is out of range (1 to %lld)",
				 (long long) n, (long long) GM_SPMAT_MAX_N);
		return GM_EINVAL;
	}
	start = calloc((size_t) n + 1, sizeof(int64_t));
	uniq = calloc((size_t) n + 1, sizeof(int64_t));
	if (!start || !uniq)
		goto nomem;

	/* counts per row (the mirror of an off-diagonal entry lands in its column's row) */
	for (int64_t e = 0; e < c->nnz; e++)
	{
		if (c->rows[e] < 0 || c->rows[e] >= n || c->cols[e] < 0 || c->cols[e] >= n)
		{
			free(start);
			free(uniq);
			snprintf(err, errlen,
					 "entry %lld (row %lld, column %lld) lies outside the %lld x %lld matrix",
					 (long long) (e + 1), (long long) (c->rows[e] + c->base),
					 (long long) (c->cols[e] + c->base), (long long) n, (long long) n);
			return GM_EINVAL;
		}
		start[c->rows[e] + 1]++;
		if (mirrored && c->rows[e] != c->cols[e])
			start[c->cols[e] + 1]++;
		if ((e & (POLL_EVERY - 1)) == POLL_EVERY - 1 && asked_stop(cb, &stop))
			goto canceled;
	}
	for (int64_t i = 0; i < n; i++)
		start[i + 1] += start[i];
	total = start[n];
	cv = malloc(sizeof(colval) * (size_t) (total > 0 ? total : 1));
	if (!cv)
		goto nomem;

	/* scatter in input order (uniq[] serves as the fill pointer for now) */
	memcpy(uniq, start, sizeof(int64_t) * (size_t) n);
	for (int64_t e = 0; e < c->nnz; e++)
	{
		int64_t		i = c->rows[e],
					j = c->cols[e];
		colval	   *d = &cv[uniq[i]++];

		d->col = (int32_t) j;
		d->pad = 0;
		d->val = c->values[e];
		if (mirrored && i != j)
		{
			d = &cv[uniq[j]++];
			d->col = (int32_t) i;
			d->pad = 0;
			d->val = c->values[e];
		}
		if ((e & (POLL_EVERY - 1)) == POLL_EVERY - 1 && asked_stop(cb, &stop))
			goto canceled;
	}

	/* sort each row and sum its duplicates in place; uniq[i] = unique count */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1024)
	for (int64_t i = 0; i < n; i++)
	{
		colval	   *r = cv + start[i];
		int64_t		len = start[i + 1] - start[i],
					u = 0;

		/* after a stop the rows left are skipped (the result is thrown away) */
		if (((i & 1023) == 0 && asked_stop(cb, &stop)) || __atomic_load_n(&stop, __ATOMIC_RELAXED))
			continue;
		sort_row(r, len);
		for (int64_t t = 0; t < len; t++)
		{
			if (u > 0 && r[u - 1].col == r[t].col)
				r[u - 1].val += r[t].val;
			else
				r[u++] = r[t];
		}
		uniq[i] = u;
	}
	if (asked_stop(cb, &stop))
		goto canceled;

	out->indptr = malloc(sizeof(int64_t) * ((size_t) n + 1));
	if (!out->indptr)
		goto nomem;
	out->indptr[0] = 0;
	for (int64_t i = 0; i < n; i++)
		out->indptr[i + 1] = out->indptr[i] + uniq[i];
	out->n = (int32_t) n;
	out->nnz = out->indptr[n];
	out->indices = malloc(sizeof(int32_t) * (size_t) (out->nnz > 0 ? out->nnz : 1));
	out->values = malloc(sizeof(double) * (size_t) (out->nnz > 0 ? out->nnz : 1));
	if (!out->indices || !out->values)
		goto nomem;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1024)
	for (int64_t i = 0; i < n; i++)
	{
		const colval *r = cv + start[i];
		int64_t		o = out->indptr[i];

		for (int64_t t = 0; t < uniq[i]; t++)
		{
			out->indices[o + t] = r[t].col;
			out->values[o + t] = r[t].val;
		}
	}
	free(cv);
	free(start);
	free(uniq);
	return GM_OK;

nomem:
	free(cv);
	free(start);
	free(uniq);
	gm_spmat_free(out);
	snprintf(err, errlen, "out of memory building a %lld x %lld sparse matrix of %lld entries",
			 (long long) n, (long long) n, (long long) (total ? total : c->nnz));
	return GM_ENOMEM;

canceled:
	free(cv);
	free(start);
	free(uniq);
	gm_spmat_free(out);
	snprintf(err, errlen, "building a %lld x %lld sparse matrix canceled", (long long) n,
			 (long long) n);
	return GM_ECANCELED;
}

/* Position of column j in row i of A, or -1. */
static int64_t
find_entry(const gm_spmat *A, int64_t i, int32_t j)
{
	int64_t		lo = A->indptr[i],
				hi = A->indptr[i + 1] - 1;

	while (lo <= hi)
	{
		int64_t		mid = lo + (hi - lo) / 2;

		if (A->indices[mid] == j)
			return mid;
		if (A->indices[mid] < j)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

int
gm_spmat_check_symmetric(const gm_spmat *A, double rtol, int64_t base,
						 int threads, char *err, size_t errlen)
{
	int			nt = nthreads(threads);
	int64_t		bad = INT64_MAX;	/* first offending entry, in row order */

#pragma omp parallel for num_threads(nt) schedule(dynamic, 4096) reduction(min:bad)
	for (int64_t i = 0; i < A->n; i++)
	{
		for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++)
		{
			int32_t		j = A->indices[e];
			int64_t		m;
			double		a,
						b;

			if (j == i)
				continue;
			m = find_entry(A, j, (int32_t) i);
			a = A->values[e];
			b = m >= 0 ? A->values[m] : 0.0;
			if (!(fabs(a - b) <= rtol * fmax(fabs(a), fabs(b))))
			{
				if (e < bad)
					bad = e;
				break;
			}
		}
	}
	if (bad < A->nnz)
	{
		int64_t		i = 0,
					lo = 0,
					hi = A->n - 1;
		int32_t		j = A->indices[bad];
		int64_t		m;

		/* the row holding entry bad */
		while (lo <= hi)
		{
			int64_t		mid = lo + (hi - lo) / 2;

			if (A->indptr[mid] <= bad)
			{
				i = mid;
				lo = mid + 1;
			}
			else
				hi = mid - 1;
		}
		m = find_entry(A, j, (int32_t) i);
		if (m >= 0)
			snprintf(err, errlen,
					 "the matrix is not symmetric: A(%lld, %lld) = %.17g but "
					 "A(%lld, %lld) = %.17g",
					 (long long) (i + base), (long long) (j + base), A->values[bad],
					 (long long) (j + base), (long long) (i + base), A->values[m]);
		else
			snprintf(err, errlen,
					 "the matrix is not symmetric: A(%lld, %lld) = %.17g but "
					 "A(%lld, %lld) is not given (0)",
					 (long long) (i + base), (long long) (j + base), A->values[bad],
					 (long long) (j + base), (long long) (i + base));
		return GM_EINVAL;
	}
	return GM_OK;
}

int
gm_spmat_check_diagonal(const gm_spmat *A, int64_t base, char *err, size_t errlen)
{
	int64_t		bad = INT64_MAX;

#pragma omp parallel for schedule(static) reduction(min:bad)
	for (int64_t i = 0; i < A->n; i++)
	{
		int64_t		m = find_entry(A, i, (int32_t) i);

		if (m < 0 || !(A->values[m] > 0))
		{
			if (i < bad)
				bad = i;
		}
	}
	if (bad < A->n)
	{
		int64_t		m = find_entry(A, bad, (int32_t) bad);
		long long	r = (long long) (bad + base);

		if (m < 0)
			snprintf(err, errlen,
					 "row %lld has no diagonal entry: A(%lld, %lld) is 0, but a symmetric "
					 "positive-definite matrix has every diagonal entry positive",
					 r, r, r);
		else
			snprintf(err, errlen,
					 "the diagonal entry A(%lld, %lld) is %.17g, but a symmetric "
					 "positive-definite matrix has every diagonal entry positive",
					 r, r, A->values[m]);
		return GM_EINVAL;
	}
	return GM_OK;
}

int
gm_spmat_make_single(gm_spmat *A, char *err, size_t errlen)
{
	if (A->values32 == NULL)
	{
		A->values32 = malloc(sizeof(float) * (size_t) (A->nnz > 0 ? A->nnz : 1));
		if (A->values32 == NULL)
		{
			snprintf(err, errlen, "out of memory for a float copy of %lld values",
					 (long long) A->nnz);
			return GM_ENOMEM;
		}
	}
#pragma omp parallel for schedule(static)
	for (int64_t e = 0; e < A->nnz; e++)
		A->values32[e] = (float) A->values[e];
	return GM_OK;
}

void
gm_spmat_diagonal(const gm_spmat *A, double *d)
{
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < A->n; i++)
	{
		int64_t		m = find_entry(A, i, (int32_t) i);

		d[i] = m >= 0 ? A->values[m] : 0.0;
	}
}

void
gm_spmat_free(gm_spmat *A)
{
	free(A->indptr);
	free(A->indices);
	free(A->values);
	free(A->values32);
	memset(A, 0, sizeof(*A));
}
