/*
 * csr.c: building compressed sparse rows from coordinates.
 */
#include "gm_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	fill = malloc(((size_t) n_rows + 1) * sizeof(int64_t));
	ind = malloc((size_t) (nnz > 0 ? nnz : 1) * sizeof(int32_t));
	dat = malloc((size_t) (nnz > 0 ? nnz : 1) * sizeof(float));
	if (!ptr || !fill || !ind || !dat)
		goto oom;

	/* counting sort by row */
	for (int64_t e = 0; e < nnz; e++)
	{
		if (rows[e] < 0 || rows[e] >= n_rows || cols[e] < 0 || cols[e] >= n_cols)
		{
			snprintf(err, errlen, "coordinate (%d, %d) outside %d x %d",
					 rows[e], cols[e], n_rows, n_cols);
			free(ptr);
			free(fill);
			free(ind);
			free(dat);
			return GM_EINVAL;
		}
		ptr[rows[e] + 1]++;
	}
	for (int32_t r = 0; r < n_rows; r++)
	{
		if (ptr[r + 1] > maxrow)
			maxrow = ptr[r + 1];
		ptr[r + 1] += ptr[r];
	}
	memcpy(fill, ptr, ((size_t) n_rows + 1) * sizeof(int64_t));
	for (int64_t e = 0; e < nnz; e++)
	{
		int64_t		d = fill[rows[e]]++;

		ind[d] = cols[e];
		dat[d] = vals[e];
	}
	free(fill);
	fill = NULL;

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
	int64_t    *fill;
	int32_t    *ind;
	float	   *dat;

	memset(out, 0, sizeof(*out));
	ptr = calloc((size_t) a->n_cols + 1, sizeof(int64_t));
	fill = malloc(((size_t) a->n_cols + 1) * sizeof(int64_t));
	ind = malloc((size_t) (a->nnz > 0 ? a->nnz : 1) * sizeof(int32_t));
	dat = malloc((size_t) (a->nnz > 0 ? a->nnz : 1) * sizeof(float));
	if (!ptr || !fill || !ind || !dat)
	{
		free(ptr);
		free(fill);
		free(ind);
		free(dat);
		snprintf(err, errlen, "out of memory transposing a CSR of %lld entries",
				 (long long) a->nnz);
		return GM_ENOMEM;
	}
	for (int64_t e = 0; e < a->nnz; e++)
		ptr[a->indices[e] + 1]++;
	for (int32_t c = 0; c < a->n_cols; c++)
		ptr[c + 1] += ptr[c];
	memcpy(fill, ptr, ((size_t) a->n_cols + 1) * sizeof(int64_t));
	/* rows visited in order, so each output row's columns come out sorted */
	for (int32_t r = 0; r < a->n_rows; r++)
		for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
		{
			int64_t		d = fill[a->indices[e]]++;

			ind[d] = r;
			dat[d] = a->data[e];
		}
	free(fill);
	out->n_rows = a->n_cols;
	out->n_cols = a->n_rows;
	out->nnz = a->nnz;
	out->indptr = ptr;
	out->indices = ind;
	out->data = dat;
	return GM_OK;
}
