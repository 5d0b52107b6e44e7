/*
 * csr.c: building compressed sparse rows from coordinates, transposing them,
 * and grouping rows by length for load-balanced GPU launches.
 */
#include "gm_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/*
 * Threads for a bucket scatter of nnz entries into nb buckets: each thread
 * keeps a histogram of nb counters, so use one thread when those would
 * outweigh the entries.
 */
static int
scatter_threads(int64_t nnz, int64_t nb)
{
#ifdef _OPENMP
	int			nt = omp_get_max_threads();

	if (nt < 1 || nnz < 100000 || (int64_t) nt * nb > 2 * nnz)
		return 1;
	return nt;
#else
	return 1;
#endif
}

static inline int
thread_num(void)
{
#ifdef _OPENMP
	return omp_get_thread_num();
#else
	return 0;
#endif
}

/*
 * cnt holds nt histograms of nb counters (thread-major).  Turn them into
 * each thread's first destination per bucket (buckets in order, threads in
 * order within a bucket, so the scatter is stable) and ptr into the bucket
 * starts.  Returns the largest bucket.
 */
static int64_t
scatter_offsets(int64_t *cnt, int nt, int64_t nb, int64_t *ptr)
{
	int64_t		pos = 0,
				maxb = 0;

	for (int64_t b = 0; b < nb; b++)
	{
		int64_t		start = pos;

		ptr[b] = pos;
		for (int t = 0; t < nt; t++)
		{
			int64_t		c = cnt[(size_t) t * nb + b];

			cnt[(size_t) t * nb + b] = pos;
			pos += c;
		}
		if (pos - start > maxb)
			maxb = pos - start;
	}
	ptr[nb] = pos;
	return maxb;
}

void
gm_csr_free(gm_csr *a)
{
	if (a == NULL)
		return;
	free(a->indptr);
	free(a->indices);
	free(a->data);
	a->indptr = NULL;
	a->indices = NULL;
	a->data = NULL;
	a->nnz = 0;
}

/* Sort (col, val) pairs of one row by col: insertion sort for short rows, else qsort. */
typedef struct
{
	int32_t		col;
	float		val;
} gm_pair;

static int
pair_cmp(const void *a, const void *b)
{
	int32_t		x = ((const gm_pair *) a)->col;
	int32_t		y = ((const gm_pair *) b)->col;

	return (x > y) - (x < y);
}

static void
sort_row(int32_t *cols, float *vals, int64_t n, gm_pair *scratch)
{
	if (n <= 32)
	{
		for (int64_t i = 1; i < n; i++)
		{
			int32_t		c = cols[i];
			float		v = vals[i];
			int64_t		j = i - 1;

			while (j >= 0 && cols[j] > c)
			{
				cols[j + 1] = cols[j];
				vals[j + 1] = vals[j];
				j--;
			}
			cols[j + 1] = c;
			vals[j + 1] = v;
		}
		return;
	}
	for (int64_t i = 0; i < n; i++)
	{
		scratch[i].col = cols[i];
		scratch[i].val = vals[i];
	}
	qsort(scratch, (size_t) n, sizeof(gm_pair), pair_cmp);
	for (int64_t i = 0; i < n; i++)
	{
		cols[i] = scratch[i].col;
		vals[i] = scratch[i].val;
	}
}

int
gm_csr_from_coo(int32_t n_rows, int32_t n_cols, int64_t nnz,
				const int32_t *rows, const int32_t *cols, const float *vals,
				gm_csr *out, char *err, size_t errlen)
{
	int64_t    *ptr = NULL;
	int64_t    *fill = NULL;
	int32_t    *ind = NULL;
	float	   *dat = NULL;
	int64_t		maxrow = 0;
	int64_t		w;

	memset(out, 0, sizeof(*out));
	if (n_rows < 0 || n_cols < 0 || nnz < 0)
	{
		snprintf(err, errlen, "negative matrix dimensions");
		return GM_EINVAL;
	}
	ptr = calloc((size_t) n_rows + 1, sizeof(int64_t));
	ind = malloc((size_t) (nnz > 0 ? nnz : 1) * sizeof(int32_t));
	dat = malloc((size_t) (nnz > 0 ? nnz : 1) * sizeof(float));
	if (!ptr || !ind || !dat)
		goto oom;

	/* stable counting sort by row, in parallel over chunks of the input */
	for (int64_t e = 0; e < nnz; e++)
		if (rows[e] < 0 || rows[e] >= n_rows || cols[e] < 0 || cols[e] >= n_cols)
		{
			snprintf(err, errlen, "coordinate (%d, %d) outside %d x %d",
					 rows[e], cols[e], n_rows, n_cols);
			free(ptr);
			free(ind);
			free(dat);
			return GM_EINVAL;
		}
	{
		int			nt = scatter_threads(nnz, n_rows);
		int64_t    *cnt = calloc((size_t) nt * n_rows + 1, sizeof(int64_t));

		if (!cnt)
			goto oom;
#pragma omp parallel num_threads(nt)
		{
			int			t = thread_num();
			int64_t		b = nnz * t / nt,
						e = nnz * (t + 1) / nt;
			int64_t    *c = cnt + (size_t) t * n_rows;

			for (int64_t i = b; i < e; i++)
				c[rows[i]]++;
#pragma omp barrier
#pragma omp single
			maxrow = scatter_offsets(cnt, nt, n_rows, ptr);
			for (int64_t i = b; i < e; i++)
			{
				int64_t		d = c[rows[i]]++;

				ind[d] = cols[i];
				dat[d] = vals[i];
			}
		}
		free(cnt);
	}

	/*
	 * Sort each row by column and sum duplicates within the row (rows in
	 * parallel); fill[r] becomes the row's deduplicated length.  Then
	 * compact the rows in order.
	 */
	fill = malloc(((size_t) n_rows + 1) * sizeof(int64_t));
	if (!fill)
		goto oom;
#pragma omp parallel
	{
		gm_pair    *scratch = malloc((size_t) (maxrow > 0 ? maxrow : 1) * sizeof(gm_pair));

#pragma omp for schedule(dynamic, 256)
		for (int32_t r = 0; r < n_rows; r++)
		{
			int64_t		b = ptr[r],
						e = ptr[r + 1],
						w = b;

			if (scratch)
				sort_row(ind + b, dat + b, e - b, scratch);
			for (int64_t i = b; i < e; i++)
			{
				if (w > b && ind[w - 1] == ind[i])
					dat[w - 1] += dat[i];
				else
				{
					ind[w] = ind[i];
					dat[w] = dat[i];
					w++;
				}
			}
			fill[r] = scratch ? w - b : -1;
		}
		free(scratch);
	}
	w = 0;
	for (int32_t r = 0; r < n_rows; r++)
	{
		int64_t		b = ptr[r],
					len = fill[r];

		if (len < 0)
			goto oom;
		if (b != w && len > 0)
		{
			memmove(ind + w, ind + b, (size_t) len * sizeof(int32_t));
			memmove(dat + w, dat + b, (size_t) len * sizeof(float));
		}
		ptr[r] = w;
		w += len;
	}
	ptr[n_rows] = w;
	free(fill);
	fill = NULL;

	out->n_rows = n_rows;
	out->n_cols = n_cols;
	out->nnz = w;
	out->indptr = ptr;
	out->indices = ind;
	out->data = dat;
	return GM_OK;

oom:
	free(ptr);
	free(fill);
	free(ind);
	free(dat);
	snprintf(err, errlen, "out of memory building a CSR of %lld entries",
			 (long long) nnz);
	return GM_ENOMEM;
}

int
gm_csr_transpose(const gm_csr *a, gm_csr *out, char *err, size_t errlen)
{
	int64_t    *ptr;
	int32_t    *ind;
	float	   *dat;

	memset(out, 0, sizeof(*out));
	ptr = calloc((size_t) a->n_cols + 1, sizeof(int64_t));
	ind = malloc((size_t) (a->nnz > 0 ? a->nnz : 1) * sizeof(int32_t));
	dat = malloc((size_t) (a->nnz > 0 ? a->nnz : 1) * sizeof(float));
	if (!ptr || !ind || !dat)
	{
		free(ptr);
		free(ind);
		free(dat);
		snprintf(err, errlen, "out of memory transposing a CSR of %lld entries",
				 (long long) a->nnz);
		return GM_ENOMEM;
	}
	/*
	 * Stable bucket scatter by column: threads take consecutive row ranges
	 * of about equal nnz, so each output row's columns come out sorted.
	 */
	{
		int			nt = scatter_threads(a->nnz, a->n_cols);
		int64_t    *cnt = calloc((size_t) nt * a->n_cols + 1, sizeof(int64_t));
		int32_t    *first = malloc(sizeof(int32_t) * (nt + 1));

		if (!cnt || !first)
		{
			free(cnt);
			free(first);
			free(ptr);
			free(ind);
			free(dat);
			snprintf(err, errlen, "out of memory transposing a CSR of %lld entries",
					 (long long) a->nnz);
			return GM_ENOMEM;
		}
		/* first[t]: the first row of thread t */
		for (int t = 0, r = 0; t <= nt; t++)
		{
			int64_t		target = a->nnz * t / nt;

			while (r < a->n_rows && a->indptr[r] < target)
				r++;
			first[t] = t == nt ? a->n_rows : r;
		}
#pragma omp parallel num_threads(nt)
		{
			int			t = thread_num();
			int64_t    *c = cnt + (size_t) t * a->n_cols;

			for (int64_t e = a->indptr[first[t]]; e < a->indptr[first[t + 1]]; e++)
				c[a->indices[e]]++;
#pragma omp barrier
#pragma omp single
			scatter_offsets(cnt, nt, a->n_cols, ptr);
			for (int32_t r = first[t]; r < first[t + 1]; r++)
				for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
				{
					int64_t		d = c[a->indices[e]]++;

					ind[d] = r;
					dat[d] = a->data[e];
				}
		}
		free(cnt);
		free(first);
	}
	out->n_rows = a->n_cols;
	out->n_cols = a->n_rows;
	out->nnz = a->nnz;
	out->indptr = ptr;
	out->indices = ind;
	out->data = dat;
	return GM_OK;
}

/* The first bin whose upper bound is >= len, or nbins when none is. */
static int
bin_of(int64_t len, int nbins, const int64_t *upper)
{
	int			lo = 0,
				hi = nbins;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (upper[mid] >= len)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * Rows grouped by nonzero count (see gm_core.h): a counting sort by bin,
 * stable, so rows keep their order within a bin.
 */
int
gm_csr_nnz_bins(const gm_csr *a, int nbins, const int64_t *upper,
				int32_t *perm, int32_t *bin_start, char *err, size_t errlen)
{
	if (nbins < 1 || upper == NULL || perm == NULL || bin_start == NULL)
	{
		snprintf(err, errlen, "nnz bins: need at least one bin and output arrays");
		return GM_EINVAL;
	}
	for (int b = 0; b < nbins; b++)
		if (upper[b] < 0 || (b > 0 && upper[b] <= upper[b - 1]))
		{
			snprintf(err, errlen,
					 "nnz bins: upper bounds must be >= 0 and strictly increasing (bin %d: %lld)",
					 b, (long long) upper[b]);
			return GM_EINVAL;
		}
	for (int b = 0; b <= nbins; b++)
		bin_start[b] = 0;
	for (int32_t r = 0; r < a->n_rows; r++)
	{
		int64_t		len = a->indptr[r + 1] - a->indptr[r];
		int			b = bin_of(len, nbins, upper);

		if (b == nbins)
		{
			snprintf(err, errlen,
					 "nnz bins: row %d has %lld nonzeros, more than the last bound %lld",
					 r, (long long) len, (long long) upper[nbins - 1]);
			return GM_EINVAL;
		}
		bin_start[b + 1]++;
	}
	for (int b = 0; b < nbins; b++)
		bin_start[b + 1] += bin_start[b];
	/* scatter, using bin_start[b] as bin b's cursor, then shift back */
	for (int32_t r = 0; r < a->n_rows; r++)
	{
		int			b = bin_of(a->indptr[r + 1] - a->indptr[r], nbins, upper);

		perm[bin_start[b]++] = r;
	}
	for (int b = nbins; b > 0; b--)
		bin_start[b] = bin_start[b - 1];
	bin_start[0] = 0;
	return GM_OK;
}
