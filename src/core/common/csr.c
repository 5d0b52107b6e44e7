/*
 * csr.c: building compressed sparse rows from coordinates, transposing them,
 * and grouping rows by length for load-balanced GPU launches.
 */
#include "gm_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#endif
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
 * Cancellation inside the builders: the calling thread (thread 0 of every
 * team) asks cb every POLL_EVERY entries and raises stop; the other threads
 * see it at their next poll and leave their loop.  cb is never called from
 * another thread.
 */
#define POLL_EVERY	((int64_t) 1 << 20)

typedef struct poller
{
	const gm_callbacks *cb;
	int			stop;			/* read and written atomically */
} poller;

static int
poll_stop(poller *p)
{
	if (thread_num() == 0 && !__atomic_load_n(&p->stop, __ATOMIC_RELAXED) &&
		p->cb && p->cb->should_stop && p->cb->should_stop(p->cb->arg))
		__atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
	return __atomic_load_n(&p->stop, __ATOMIC_RELAXED);
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

/*
 * Sort (col, val) pairs of one row by col, stably (equal columns keep their
 * order, so duplicates are summed in input order): insertion sort for short
 * rows, else a merge sort with the comparison inline (a qsort callback a
 * comparison cost as much as the rest of the CSR build), through scratch of
 * 2n pairs.
 */
typedef struct
{
	int32_t		col;
	float		val;
} gm_pair;

#define SORT_RUN_PAIRS	16		/* runs insertion-sorted before merging */

static void
insertion_pairs(gm_pair *a, int64_t n)
{
	for (int64_t i = 1; i < n; i++)
	{
		gm_pair		p = a[i];
		int64_t		j = i - 1;

		while (j >= 0 && a[j].col > p.col)
		{
			a[j + 1] = a[j];
			j--;
		}
		a[j + 1] = p;
	}
}

static void
sort_row(int32_t *cols, float *vals, int64_t n, gm_pair *scratch)
{
	gm_pair    *a = scratch,
			   *b = scratch + n;

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
		a[i].col = cols[i];
		a[i].val = vals[i];
	}
	for (int64_t r = 0; r < n; r += SORT_RUN_PAIRS)
		insertion_pairs(a + r, n - r < SORT_RUN_PAIRS ? n - r : SORT_RUN_PAIRS);
	for (int64_t w = SORT_RUN_PAIRS; w < n; w *= 2)
	{
		gm_pair    *t;

		for (int64_t lo = 0; lo < n; lo += 2 * w)
		{
			int64_t		mid = lo + w < n ? lo + w : n,
						hi = lo + 2 * w < n ? lo + 2 * w : n,
						i = lo,
						j = mid,
						o = lo;

			while (i < mid && j < hi)
				b[o++] = a[j].col < a[i].col ? a[j++] : a[i++];
			while (i < mid)
				b[o++] = a[i++];
			while (j < hi)
				b[o++] = a[j++];
		}
		t = a;
		a = b;
		b = t;
	}
	for (int64_t i = 0; i < n; i++)
	{
		cols[i] = a[i].col;
		vals[i] = a[i].val;
	}
}

/*
 * Row [b, b + n) sorted by column (scratch: room for 2n pairs when n > 32)
 * and its duplicates summed in place; returns the row's new length.
 */
static int64_t
dedupe_row(int32_t *ind, float *dat, int64_t b, int64_t n, gm_pair *scratch)
{
	int64_t		w = b;

	sort_row(ind + b, dat + b, n, scratch);
	for (int64_t i = b; i < b + n; i++)
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
	return w - b;
}

/*
 * Rows [r0, r1) moved together from ptr[r] (fill[r] entries each) to w
 * onwards, ptr[r] made the row's start at base + its offset from w; returns
 * where they end.  Every move is to the left (or nowhere).
 */
static int64_t
compact_range(int64_t *ptr, const int64_t *fill, int32_t *ind, float *dat,
			  int32_t r0, int32_t r1, int64_t w, int64_t base)
{
	int64_t		w0 = w;

	for (int32_t r = r0; r < r1; r++)
	{
		int64_t		b = ptr[r],
					len = fill[r];

		if (b != w && len > 0)
		{
			memmove(ind + w, ind + b, (size_t) len * sizeof(int32_t));
			memmove(dat + w, dat + b, (size_t) len * sizeof(float));
		}
		ptr[r] = base + (w - w0);
		w += len;
	}
	return w;
}

#define COMPACT_PARALLEL_ROWS	(1 << 16)	/* rows from which threads compact */

/*
 * The deduplicated rows (fill[r] entries at ptr[r], rows in order) moved
 * together, in order, and ptr made their row pointers; returns the
 * entries, or -1 when a row's fill is -1 (its sort found no memory).
 *
 * With many rows, in parallel: each thread first compacts its share of the
 * rows within their own stretch (block t of L[t] entries at src[t]); then
 * each block moves to its place dst[t] (the earlier blocks' entries).  A
 * block's move may overwrite the last src[t] - dst[t] entries of the block
 * before it before that one has read them (and no more: that one's reads
 * end where this one's writes begin), so every block first copies that
 * many of its own last entries aside, and moves the rest after a barrier.
 * When those copies would be large (many duplicates), one thread moves
 * them all.
 */
static int64_t
compact_rows(int64_t *ptr, const int64_t *fill, int32_t *ind, float *dat, int32_t n_rows)
{
	int			nt = 1,
				no_room = 0;
	int64_t		w = 0,
				aside = 0,
				src[65],
				dst[65],
				len[65];
	int32_t		first[65];

	for (int32_t r = 0; r < n_rows; r++)
		if (fill[r] < 0)
			return -1;
#ifdef _OPENMP
	if (n_rows >= COMPACT_PARALLEL_ROWS)
		nt = omp_get_max_threads() < 64 ? omp_get_max_threads() : 64;
#endif
	if (nt > 1)
	{
		for (int t = 0; t <= nt; t++)
			first[t] = (int32_t) ((int64_t) n_rows * t / nt);
		for (int t = 0; t < nt; t++)
		{
			src[t] = ptr[first[t]];
			len[t] = 0;
			for (int32_t r = first[t]; r < first[t + 1]; r++)
				len[t] += fill[r];
			dst[t] = w;
			w += len[t];
			/* the entries of block t its successor may overwrite */
			aside += src[t] - dst[t] < len[t] ? src[t] - dst[t] : len[t];
		}
		if (aside > (w >> 3) + (1 << 20))
			nt = 1;
	}
	if (nt == 1)
	{
		w = compact_range(ptr, fill, ind, dat, 0, n_rows, 0, 0);
		ptr[n_rows] = w;
		return w;
	}
#pragma omp parallel num_threads(nt)
	{
		int			t = thread_num();
		int64_t		k = src[t] - dst[t] < len[t] ? src[t] - dst[t] : len[t];
		int32_t    *si = k > 0 ? malloc(sizeof(int32_t) * (size_t) k) : NULL;
		float	   *sv = k > 0 ? malloc(sizeof(float) * (size_t) k) : NULL;

		/* within its own stretch, its rows' pointers made their final ones */
		compact_range(ptr, fill, ind, dat, first[t], first[t + 1], src[t], dst[t]);
		if (k > 0 && si && sv)
		{
			memcpy(si, ind + src[t] + len[t] - k, sizeof(int32_t) * (size_t) k);
			memcpy(sv, dat + src[t] + len[t] - k, sizeof(float) * (size_t) k);
		}
		else if (k > 0)
			__atomic_store_n(&no_room, 1, __ATOMIC_RELAXED);
#pragma omp barrier
		if (__atomic_load_n(&no_room, __ATOMIC_RELAXED))
		{
			/* no room aside: the blocks one after the other, in order */
#pragma omp for ordered schedule(static, 1)
			for (int u = 0; u < nt; u++)
			{
#pragma omp ordered
				{
					memmove(ind + dst[u], ind + src[u], sizeof(int32_t) * (size_t) len[u]);
					memmove(dat + dst[u], dat + src[u], sizeof(float) * (size_t) len[u]);
				}
			}
		}
		else
		{
			if (len[t] > k && dst[t] != src[t])
			{
				memmove(ind + dst[t], ind + src[t], sizeof(int32_t) * (size_t) (len[t] - k));
				memmove(dat + dst[t], dat + src[t], sizeof(float) * (size_t) (len[t] - k));
			}
			if (k > 0)
			{
				memcpy(ind + dst[t] + len[t] - k, si, sizeof(int32_t) * (size_t) k);
				memcpy(dat + dst[t] + len[t] - k, sv, sizeof(float) * (size_t) k);
			}
		}
		free(si);
		free(sv);
	}
	ptr[n_rows] = w;
	return w;
}

int
gm_csr_from_coo(int32_t n_rows, int32_t n_cols, int64_t nnz,
				const int32_t *rows, const int32_t *cols, const float *vals,
				gm_csr *out, char *err, size_t errlen)
{
	return gm_csr_from_coo_polled(n_rows, n_cols, nnz, rows, cols, vals, NULL,
								  out, err, errlen);
}

/* Thread t's share [b, e) of nnz entries split over nt threads (t = nt: b = nnz). */
static inline void
share(int64_t nnz, int t, int nt, int64_t *b, int64_t *e)
{
	/* no product nnz * t, which could overflow */
	int64_t		q = nnz / nt,
				r = nnz % nt;

	*b = q * t + (t < r ? t : r);
	*e = *b + q + (t < r ? 1 : 0);
}

int
gm_csr_from_coo_polled(int32_t n_rows, int32_t n_cols, int64_t nnz,
					   const int32_t *rows, const int32_t *cols, const float *vals,
					   const gm_callbacks *cb, gm_csr *out, char *err, size_t errlen)
{
	int64_t    *ptr = NULL;
	int64_t    *fill = NULL;
	int32_t    *ind = NULL;
	float	   *dat = NULL;
	int64_t		maxrow = 0;
	int64_t		w;
	poller		pl = {cb, 0};

	memset(out, 0, sizeof(*out));
	if (n_rows < 0 || n_cols < 0 || nnz < 0)
	{
		snprintf(err, errlen, "negative matrix dimensions");
		return GM_EINVAL;
	}
	if ((uint64_t) nnz > SIZE_MAX / sizeof(int32_t))
	{
		snprintf(err, errlen, "a CSR of %lld entries is too large", (long long) nnz);
		return GM_ENOMEM;
	}
	ptr = calloc((size_t) n_rows + 1, sizeof(int64_t));
	ind = malloc((size_t) (nnz > 0 ? nnz : 1) * sizeof(int32_t));
	dat = malloc((size_t) (nnz > 0 ? nnz : 1) * sizeof(float));
	if (!ptr || !ind || !dat)
		goto oom;

	/* stable counting sort by row, in parallel over chunks of the input */
	for (int64_t e = 0; e < nnz; e++)
	{
		if (rows[e] < 0 || rows[e] >= n_rows || cols[e] < 0 || cols[e] >= n_cols)
		{
			snprintf(err, errlen, "coordinate (%d, %d) outside %d x %d",
					 rows[e], cols[e], n_rows, n_cols);
			free(ptr);
			free(ind);
			free(dat);
			return GM_EINVAL;
		}
		if ((e & (POLL_EVERY - 1)) == POLL_EVERY - 1 && poll_stop(&pl))
			goto canceled;
	}
	{
		int			nt = scatter_threads(nnz, n_rows);
		int64_t    *cnt = calloc((size_t) nt * n_rows + 1, sizeof(int64_t));

		if (!cnt)
			goto oom;
#pragma omp parallel num_threads(nt)
		{
			int			t = thread_num();
			int64_t		b,
						e;
			int64_t    *c = cnt + (size_t) t * n_rows;

			share(nnz, t, nt, &b, &e);
			for (int64_t i = b; i < e; i++)
			{
				c[rows[i]]++;
				if (((i - b) & (POLL_EVERY - 1)) == POLL_EVERY - 1 && poll_stop(&pl))
					break;
			}
#pragma omp barrier
#pragma omp single
			maxrow = scatter_offsets(cnt, nt, n_rows, ptr);
			/* after a stop the counts are partial: no scatter (it could overrun) */
			if (!poll_stop(&pl))
				for (int64_t i = b; i < e; i++)
				{
					int64_t		d = c[rows[i]]++;

					ind[d] = cols[i];
					dat[d] = vals[i];
					if (((i - b) & (POLL_EVERY - 1)) == POLL_EVERY - 1 && poll_stop(&pl))
						break;
				}
		}
		free(cnt);
		if (poll_stop(&pl))
			goto canceled;
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
		gm_pair    *scratch = malloc((size_t) (maxrow > 0 ? maxrow : 1) * 2 * sizeof(gm_pair));
		int64_t		done = 0;

#pragma omp for schedule(dynamic, 256)
		for (int32_t r = 0; r < n_rows; r++)
		{
			int64_t		b = ptr[r],
						e = ptr[r + 1];

			/* after a stop the remaining rows are skipped (the result is thrown away) */
			done += e - b + 1;
			if (done >= POLL_EVERY)
			{
				done = 0;
				if (poll_stop(&pl))
					continue;
			}
			else if (__atomic_load_n(&pl.stop, __ATOMIC_RELAXED))
				continue;
			fill[r] = scratch ? dedupe_row(ind, dat, b, e - b, scratch) : -1;
		}
		free(scratch);
	}
	if (poll_stop(&pl))
		goto canceled;
	if ((w = compact_rows(ptr, fill, ind, dat, n_rows)) < 0)
		goto oom;
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

canceled:
	free(ptr);
	free(fill);
	free(ind);
	free(dat);
	snprintf(err, errlen, "building a CSR of %lld entries canceled", (long long) nnz);
	return GM_ECANCELED;
}

/* first[t]: the first row of thread t of nt, so that each takes about equal entries of a */
static void
row_shares(const gm_csr *a, int nt, int32_t *first)
{
	for (int t = 0, r = 0; t <= nt; t++)
	{
		int64_t		target,
					end;

		share(a->nnz, t, nt, &target, &end);
		while (r < a->n_rows && a->indptr[r] < target)
			r++;
		first[t] = t == nt ? a->n_rows : r;
	}
}

int
gm_csr_transpose(const gm_csr *a, gm_csr *out, char *err, size_t errlen)
{
	return gm_csr_transpose_polled(a, NULL, out, err, errlen);
}

int
gm_csr_transpose_polled(const gm_csr *a, const gm_callbacks *cb, gm_csr *out,
						char *err, size_t errlen)
{
	int64_t    *ptr;
	int32_t    *ind;
	float	   *dat;
	poller		pl = {cb, 0};

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
		row_shares(a, nt, first);
#pragma omp parallel num_threads(nt)
		{
			int			t = thread_num();
			int64_t    *c = cnt + (size_t) t * a->n_cols;
			int64_t		b = a->indptr[first[t]];

			for (int64_t e = b; e < a->indptr[first[t + 1]]; e++)
			{
				c[a->indices[e]]++;
				if (((e - b) & (POLL_EVERY - 1)) == POLL_EVERY - 1 && poll_stop(&pl))
					break;
			}
#pragma omp barrier
#pragma omp single
			scatter_offsets(cnt, nt, a->n_cols, ptr);
			/* after a stop the counts are partial: no scatter (it could overrun) */
			if (!poll_stop(&pl))
				for (int32_t r = first[t]; r < first[t + 1]; r++)
				{
					for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
					{
						int64_t		d = c[a->indices[e]]++;

						ind[d] = r;
						dat[d] = a->data[e];
					}
					if ((r & 4095) == 4095 && poll_stop(&pl))
						break;
				}
		}
		free(cnt);
		free(first);
		if (poll_stop(&pl))
		{
			free(ptr);
			free(ind);
			free(dat);
			snprintf(err, errlen, "transposing a CSR of %lld entries canceled",
					 (long long) a->nnz);
			return GM_ECANCELED;
		}
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

int
gm_csr_column_pointers(const gm_csr *a, int threads, const gm_callbacks *cb, int64_t *ptr)
{
	int64_t		nc = a->n_cols;
	int			nt = threads > 0 ? threads : 1;
	int32_t    *cnt = NULL;
	poller		pl = {cb, 0};

	memset(ptr, 0, sizeof(int64_t) * ((size_t) nc + 1));
#ifdef _OPENMP
	if (threads <= 0)
		nt = omp_get_max_threads();
#else
	nt = 1;
#endif
	/* counters a thread of at most half a byte an entry, a thread's count within int32 */
	while (nt > 1 && (double) nt * nc * sizeof(int32_t) > 0.5 * (double) a->nnz)
		nt--;
	if (nt > 1 && a->nnz / nt < INT32_MAX)
		cnt = calloc((size_t) nt * nc, sizeof(int32_t));
	if (cnt == NULL)
	{
		/* one thread (or no room for the counters): the counts straight into ptr */
		for (int64_t e = 0; e < a->nnz; e++)
		{
			if ((e & (POLL_EVERY - 1)) == 0 && poll_stop(&pl))
				return GM_ECANCELED;
			ptr[a->indices[e] + 1]++;
		}
	}
	else
	{
#pragma omp parallel num_threads(nt)
		{
			int			u = thread_num();
			int32_t    *c = cnt + (size_t) u * nc;
			int64_t		e1 = a->nnz / nt * (u + 1) + (u + 1 == nt ? a->nnz % nt : 0);

			for (int64_t b = a->nnz / nt * u; b < e1 && !poll_stop(&pl); b += POLL_EVERY)
			{
				int64_t		end = e1 - b < POLL_EVERY ? e1 : b + POLL_EVERY;

				for (int64_t e = b; e < end; e++)
					c[a->indices[e]]++;
			}
		}
		if (!pl.stop)
		{
#pragma omp parallel for schedule(static) num_threads(nt)
			for (int64_t j = 0; j < nc; j++)
			{
				int64_t		sum = 0;

				for (int u = 0; u < nt; u++)
					sum += cnt[(size_t) u * nc + j];
				ptr[j + 1] = sum;
			}
		}
		free(cnt);
		if (pl.stop)
			return GM_ECANCELED;
	}
	for (int64_t j = 0; j < nc; j++)
		ptr[j + 1] += ptr[j];
	return GM_OK;
}

void
gm_copy_parallel(void *dst, const void *src, size_t n)
{
	gm_copy_threads(dst, src, n, 0);
}

void
gm_copy_threads(void *dst, const void *src, size_t n, int threads)
{
	const size_t piece = (size_t) 4 << 20;
	int64_t		np = (int64_t) ((n + piece - 1) / piece);

#pragma omp parallel for schedule(dynamic, 1) if (np > 1) \
	num_threads(threads > 0 ? threads : omp_get_max_threads())
	for (int64_t i = 0; i < np; i++)
	{
		size_t		o = (size_t) i * piece;

		memcpy((char *) dst + o, (const char *) src + o, n - o < piece ? n - o : piece);
	}
}

void
gm_csr_cut_rows(const gm_csr *a, int n, double row_weight, int32_t *cut)
{
	double		total = (double) a->nnz + row_weight * a->n_rows;
	int32_t		r = 0;

	cut[0] = 0;
	for (int i = 1; i < n; i++)
	{
		double		want = total * i / n;

		while (r < a->n_rows && (double) a->indptr[r] + row_weight * r < want)
			r++;
		cut[i] = r > cut[i - 1] ? r : cut[i - 1];
	}
	cut[n] = a->n_rows;
}

double
gm_csr_normalized(const gm_csr *a, const gm_csr *at, float *v, int threads)
{
	double		sum = 0.0;

#pragma omp parallel for schedule(dynamic, 64) num_threads(threads > 0 ? threads : omp_get_max_threads()) reduction(+:sum)
	for (int32_t r = 0; r < a->n_rows; r++)
	{
		double		dr = (double) (a->indptr[r + 1] - a->indptr[r]);

		for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
		{
			int32_t		j = a->indices[e];
			double		dc = (double) (at->indptr[j + 1] - at->indptr[j]);

			v[e] = (float) (1.0 / sqrt(dr * dc));
			sum += 1.0 / (dr * dc);
		}
	}
	return sum;
}

/*
 * Give back the pages wholly inside [p, p + bytes) of a large array whose
 * contents are no longer read (the kernel maps zero pages there if they are
 * touched again).  Only arrays of GM_RELEASE_MIN bytes or more (which the C
 * library maps on their own) are given back; a smaller one stays until it
 * is freed.
 */
#define GM_RELEASE_MIN	((size_t) 64 << 20)

static void
release_range(void *base, size_t base_bytes, size_t from, size_t to)
{
#ifdef MADV_DONTNEED
	uintptr_t	b,
				e;

	if (base == NULL || base_bytes < GM_RELEASE_MIN || to <= from)
		return;
	b = ((uintptr_t) base + from + 4095) & ~(uintptr_t) 4095;
	e = ((uintptr_t) base + to) & ~(uintptr_t) 4095;
	if (e > b)
		(void) madvise((void *) b, e - b, MADV_DONTNEED);
#else
	(void) base;
	(void) base_bytes;
	(void) from;
	(void) to;
#endif
}

/*
 * Pass 1 of the lean build writes each thread's entries to about a thousand
 * places at once, three arrays each: one store an entry to a line of its
 * own would miss the cache nearly every time.  So a thread stages each
 * bucket's next WC_ENTRIES entries (a 64-byte line of each array) and
 * writes them together when they are complete (software write combining,
 * as radix partitioners do).
 */
#define WC_ENTRIES	16
#define WC_STRIDE	(3 * WC_ENTRIES)

/*
 * A row's bucket, looked up twice an entry: from the bucket of the first
 * row of its block (a table of a bucket number a block, in cache where one
 * a row of 8M rows would not be), then forward through the bucket starts
 * (bstart[nb] = n_rows ends the search).  Any two consecutive buckets hold
 * more than the target of at least nnz / 1024 entries, so there are at
 * most 2049 of them and uint16_t holds their numbers.  Blocks have
 * 2^BLOCK_SHIFT rows, or more where a histogram of blocks a thread would
 * outweigh the entries.
 */
#define BLOCK_SHIFT	6

static inline int32_t
bucket_at(const uint16_t *first_bucket, int shift, const int32_t *bstart, int32_t r)
{
	int32_t		k = first_bucket[r >> shift];

	while (bstart[k + 1] <= r)
		k++;
	return k;
}

/*
 * The lean build (gm_core.h).  Rows are grouped into buckets of
 * consecutive rows holding about `target` entries each (a longer row is a
 * bucket of its own).  The buckets are cut from the entries' counts by
 * block of 2^shift rows (a histogram a thread, small enough to stay in its
 * cache), and within a block of more than target entries from its rows'
 * counts; no count a row is kept for the whole matrix, whose random
 * updates would miss the cache at every entry.  Pass 1 moves every entry,
 * in input order, into its bucket's stretch of the output (its column and
 * value where the CSR keeps them, its row beside them), giving back the
 * input's pages as they are consumed; pass 2 counts each bucket's rows
 * (their row pointers), orders the bucket by row through a scratch of one
 * bucket a thread and gives back the rows' pages; the rows are then
 * sorted and their duplicates summed as gm_csr_from_coo does.  The order
 * within a row before that sort is the input order, as in
 * gm_csr_from_coo, so both give the same CSR.
 */
int
gm_csr_from_coo_consume(int32_t n_rows, int32_t n_cols, int64_t nnz,
						int32_t *rows, int32_t *cols, float *vals,
						const gm_callbacks *cb, gm_csr *out, char *err, size_t errlen)
{
	poller		pl = {cb, 0};
	int64_t    *ptr = NULL,
			   *fill = NULL,
			   *bcnt = NULL,
			   *bpos = NULL,
			   *blen = NULL,
			   *hlen = NULL;
	uint32_t   *tcnt = NULL;
	uint16_t   *first_bucket = NULL;
	int32_t    *brow = NULL,
			   *bstart = NULL,
			   *heavy_of = NULL,
			   *ind = NULL;
	float	   *dat = NULL;
	int64_t		bad = -1,
				target,
				nblk,
				nheavy = 0,
				w;
	int32_t		nb = 0;
	int			nt,
				shift,
				rc = GM_OK;
	size_t		in_bytes = (size_t) (nnz > 0 ? nnz : 1) * sizeof(int32_t);

	memset(out, 0, sizeof(*out));
	if (n_rows < 0 || n_cols < 0 || nnz < 0)
	{
		snprintf(err, errlen, "negative matrix dimensions");
		rc = GM_EINVAL;
		goto done;
	}
	if ((uint64_t) nnz > SIZE_MAX / sizeof(int32_t))
	{
		snprintf(err, errlen, "a CSR of %lld entries is too large", (long long) nnz);
		rc = GM_ENOMEM;
		goto done;
	}
#ifdef _OPENMP
	nt = nnz < 100000 ? 1 : omp_get_max_threads();
#else
	nt = 1;
#endif
	if (nt < 1)
		nt = 1;
	/* a thread's counts are uint32_t: no thread takes 2^32 entries */
	if (nnz / nt >= ((int64_t) 1 << 32) - 1)
		nt = (int) (nnz / (((int64_t) 1 << 32) - 1)) + 1;
	/* blocks of 2^shift rows, few enough for a histogram a thread beside the entries */
	shift = BLOCK_SHIFT;
	while (shift < 31 && (int64_t) nt * (((int64_t) n_rows >> shift) + 1) > (nnz / 4 > (1 << 16) ? nnz / 4 : (1 << 16)))
		shift++;
	nblk = n_rows > 0 ? ((n_rows - 1) >> shift) + 1 : 0;
	ptr = calloc((size_t) n_rows + 1, sizeof(int64_t));
	first_bucket = malloc(sizeof(uint16_t) * ((size_t) nblk + 1));
	blen = calloc((size_t) nblk + 1, sizeof(int64_t));
	tcnt = calloc((size_t) nt * (nblk > 0 ? nblk : 1), sizeof(uint32_t));
	if (!ptr || !first_bucket || !blen || !tcnt)
		goto oom;

	/* each thread's entries a block of rows, and the first bad coordinate */
#pragma omp parallel num_threads(nt)
	{
		int			t = thread_num();
		int64_t		b,
					e,
					mybad = -1;
		uint32_t   *c = tcnt + (size_t) t * nblk;

		share(nnz, t, nt, &b, &e);
		for (int64_t i = b; i < e; i++)
		{
			int32_t		r = rows[i];

			if (r < 0 || r >= n_rows || cols[i] < 0 || cols[i] >= n_cols)
			{
				mybad = i;
				break;
			}
			c[r >> shift]++;
			if (((i - b) & (POLL_EVERY - 1)) == POLL_EVERY - 1 && poll_stop(&pl))
				break;
		}
		if (mybad >= 0)
		{
#pragma omp critical(gm_csr_bad)
			if (bad < 0 || mybad < bad)
				bad = mybad;
		}
	}
	if (bad >= 0)
	{
		snprintf(err, errlen, "coordinate (%d, %d) outside %d x %d",
				 rows[bad], cols[bad], n_rows, n_cols);
		rc = GM_EINVAL;
		goto done;
	}
	if (poll_stop(&pl))
		goto canceled;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t k = 0; k < nblk; k++)
	{
		int64_t		n = 0;

		for (int u = 0; u < nt; u++)
			n += tcnt[(size_t) u * nblk + k];
		blen[k] = n;
	}
	free(tcnt);
	tcnt = NULL;

	/* buckets of consecutive rows, about target entries each */
	target = nnz / 1024;
	if (target < ((int64_t) 1 << 16))
		target = (int64_t) 1 << 16;

	/*
	 * A block of more than target entries is cut at rows, so that a long
	 * row is a bucket of its own as before: its rows are counted, a
	 * histogram a thread (one row may be most of the entries)
	 */
	for (int64_t k = 0; k < nblk; k++)
		if (blen[k] > target)
			nheavy++;
	if (nheavy > 0)
	{
		int64_t		hrows = nheavy << shift,
					mask = ((int64_t) 1 << shift) - 1;
		/* as many threads as have histograms small beside the entries */
		int64_t		most = (nnz / 2 > (1 << 20) ? nnz / 2 : (1 << 20)) / hrows;
		int			ht = most < 1 ? 1 : most < nt ? (int) most : nt;

		heavy_of = malloc(sizeof(int32_t) * (size_t) nblk);
		hlen = calloc((size_t) hrows * ht, sizeof(int64_t));
		if (!heavy_of || !hlen)
			goto oom;
		nheavy = 0;
		for (int64_t k = 0; k < nblk; k++)
			heavy_of[k] = blen[k] > target ? (int32_t) nheavy++ : -1;
#pragma omp parallel num_threads(ht)
		{
			int			t = thread_num();
			int64_t		b,
						e;
			int64_t    *c = hlen + (size_t) t * hrows;

			share(nnz, t, ht, &b, &e);
			for (int64_t i = b; i < e; i++)
			{
				int32_t		r = rows[i],
							h = heavy_of[r >> shift];

				if (h >= 0)
					c[((int64_t) h << shift) + (r & mask)]++;
			}
		}
		for (int u = 1; u < ht; u++)
			for (int64_t j = 0; j < hrows; j++)
				hlen[j] += hlen[(size_t) u * hrows + j];
	}
	bstart = malloc(sizeof(int32_t) * ((size_t) n_rows + 2));
	if (!bstart)
		goto oom;
	{
		int64_t		in_bucket = 0;

		for (int64_t k = 0; k < nblk; k++)
		{
			int32_t		r0 = (int32_t) (k << shift);

			if (blen[k] <= target)
			{
				/* a whole block joins the bucket, or starts one */
				if (nb == 0 || in_bucket + blen[k] > target)
				{
					bstart[nb++] = r0;
					in_bucket = 0;
				}
				in_bucket += blen[k];
				first_bucket[k] = (uint16_t) (nb - 1);
			}
			else
			{
				int32_t		r1 = (int32_t) ((int64_t) r0 + ((int64_t) 1 << shift) < n_rows ?
											 (int64_t) r0 + ((int64_t) 1 << shift) : n_rows);
				const int64_t *len = hlen + ((int64_t) heavy_of[k] << shift);

				for (int32_t r = r0; r < r1; r++)
				{
					if (nb == 0 || in_bucket + len[r - r0] > target)
					{
						bstart[nb++] = r;
						in_bucket = 0;
					}
					in_bucket += len[r - r0];
					if (r == r0)
						first_bucket[k] = (uint16_t) (nb - 1);
				}
			}
		}
	}
	bstart[nb] = n_rows;
	free(heavy_of);
	free(hlen);
	heavy_of = NULL;
	hlen = NULL;
	free(blen);
	blen = NULL;

	/* pass 1: each thread's entries of a bucket go after the earlier threads' */
	bcnt = calloc((size_t) nt * (nb > 0 ? nb : 1), sizeof(int64_t));
	bpos = malloc(sizeof(int64_t) * ((size_t) nb + 1));
	ind = malloc(sizeof(int32_t) * (size_t) (nnz > 0 ? nnz : 1));
	dat = malloc(sizeof(float) * (size_t) (nnz > 0 ? nnz : 1));
	brow = malloc(sizeof(int32_t) * (size_t) (nnz > 0 ? nnz : 1));
	if (!bcnt || !bpos || !ind || !dat || !brow)
		goto oom;
#pragma omp parallel num_threads(nt)
	{
		int			t = thread_num();
		int64_t		b,
					e,
					done;
		int64_t    *c = bcnt + (size_t) t * nb;

		/* a small staging area a bucket (see WC_ENTRIES); without it, entry by entry */
		int32_t    *wc = malloc(sizeof(int32_t) * WC_STRIDE * (size_t) nb);
		unsigned char *wn = calloc((size_t) nb, 1);

		if (!wc || !wn)
		{
			free(wc);
			wc = NULL;
		}
		share(nnz, t, nt, &b, &e);
		done = b;
		for (int64_t i = b; i < e; i++)
			c[bucket_at(first_bucket, shift, bstart, rows[i])]++;
#pragma omp barrier
#pragma omp single
		{
			int64_t		pos = 0;

			for (int32_t k = 0; k < nb; k++)
			{
				bpos[k] = pos;
				for (int u = 0; u < nt; u++)
				{
					int64_t		n = bcnt[(size_t) u * nb + k];

					bcnt[(size_t) u * nb + k] = pos;
					pos += n;
				}
			}
			bpos[nb] = pos;
		}
		for (int64_t i = b; i < e; i++)
		{
			int32_t		r = rows[i],
						k = bucket_at(first_bucket, shift, bstart, r);

			if (wc)
			{
				/* staged: a bucket's entries leave WC_ENTRIES at a time */
				int32_t    *wr = wc + (size_t) k * WC_STRIDE;
				int			n = wn[k];

				wr[n] = r;
				wr[WC_ENTRIES + n] = cols[i];
				memcpy(wr + 2 * WC_ENTRIES + n, vals + i, sizeof(float));
				if (++n == WC_ENTRIES)
				{
					int64_t		d = c[k];

					memcpy(brow + d, wr, sizeof(int32_t) * WC_ENTRIES);
					memcpy(ind + d, wr + WC_ENTRIES, sizeof(int32_t) * WC_ENTRIES);
					memcpy(dat + d, wr + 2 * WC_ENTRIES, sizeof(float) * WC_ENTRIES);
					c[k] = d + WC_ENTRIES;
					n = 0;
				}
				wn[k] = (unsigned char) n;
			}
			else
			{
				int64_t		d = c[k]++;

				ind[d] = cols[i];
				dat[d] = vals[i];
				brow[d] = r;
			}
			if (((i - b) & (POLL_EVERY - 1)) == POLL_EVERY - 1)
			{
				/* what this thread has consumed, back to the system */
				release_range(rows, in_bytes, (size_t) done * 4, (size_t) (i + 1) * 4);
				release_range(cols, in_bytes, (size_t) done * 4, (size_t) (i + 1) * 4);
				release_range(vals, in_bytes, (size_t) done * 4, (size_t) (i + 1) * 4);
				done = i + 1;
				if (poll_stop(&pl))
					break;
			}
		}
		for (int32_t k = 0; wc && k < nb; k++)
		{
			int32_t    *wr = wc + (size_t) k * WC_STRIDE;
			int64_t		d = c[k];

			memcpy(brow + d, wr, sizeof(int32_t) * wn[k]);
			memcpy(ind + d, wr + WC_ENTRIES, sizeof(int32_t) * wn[k]);
			memcpy(dat + d, wr + 2 * WC_ENTRIES, sizeof(float) * wn[k]);
		}
		free(wc);
		free(wn);
	}
	free(rows);
	free(cols);
	free(vals);
	rows = cols = NULL;
	vals = NULL;
	free(bcnt);
	bcnt = NULL;
	free(first_bucket);
	first_bucket = NULL;
	if (poll_stop(&pl))
		goto canceled;

	/*
	 * pass 2: each bucket in row order (a stable counting sort through a
	 * scratch), then each row sorted by column with its duplicates summed;
	 * fill[r] becomes the row's deduplicated length
	 */
	fill = malloc(((size_t) n_rows + 1) * sizeof(int64_t));
	if (!fill)
		goto oom;
#pragma omp parallel num_threads(nt)
	{
		int32_t    *sc = NULL;
		float	   *sv = NULL;
		int64_t    *cur = NULL;
		gm_pair    *scratch = NULL;
		int64_t		cap = 0,
					rcap = 0,
					pcap = 0;
		int			failed = 0;

#pragma omp for schedule(dynamic, 1)
		for (int32_t k = 0; k < nb; k++)
		{
			int32_t		r0 = bstart[k],
						r1 = bstart[k + 1];
			int64_t		s = bpos[k],
						e = bpos[k + 1];

			if (failed || __atomic_load_n(&pl.stop, __ATOMIC_RELAXED) ||
				(thread_num() == 0 && poll_stop(&pl)))
			{
				for (int32_t r = r0; r < r1; r++)
					fill[r] = -1;
				continue;
			}
			if (r1 - r0 == 1)
				ptr[r0] = s;
			else
			{
				int64_t		at = 0;

				if (r1 - r0 > rcap)
				{
					free(cur);
					rcap = r1 - r0;
					cur = malloc(sizeof(int64_t) * (size_t) rcap);
				}
				if (e - s > cap)
				{
					free(sc);
					free(sv);
					cap = e - s;
					sc = malloc(sizeof(int32_t) * (size_t) cap);
					sv = malloc(sizeof(float) * (size_t) cap);
				}
				if ((e > s && (!sc || !sv)) || !cur)
				{
					failed = 1;
					cap = rcap = 0;
					for (int32_t r = r0; r < r1; r++)
						fill[r] = -1;
					continue;
				}
				/* the bucket's row lengths: its rows' pointers */
				memset(cur, 0, sizeof(int64_t) * (size_t) (r1 - r0));
				for (int64_t i = s; i < e; i++)
					cur[brow[i] - r0]++;
				for (int32_t r = r0; r < r1; r++)
				{
					int64_t		n = cur[r - r0];

					cur[r - r0] = at;
					ptr[r] = s + at;
					at += n;
				}
				for (int64_t i = s; i < e; i++)
				{
					int64_t		d = cur[brow[i] - r0]++;

					sc[d] = ind[i];
					sv[d] = dat[i];
				}
				if (e > s)
				{
					memcpy(ind + s, sc, sizeof(int32_t) * (size_t) (e - s));
					memcpy(dat + s, sv, sizeof(float) * (size_t) (e - s));
				}
			}
			release_range(brow, in_bytes, (size_t) s * 4, (size_t) e * 4);
			for (int32_t r = r0; r < r1; r++)
			{
				int64_t		b = ptr[r],
							n = (r + 1 < r1 ? ptr[r + 1] : e) - b;

				if (n > 32 && n > pcap)
				{
					free(scratch);
					pcap = n;
					scratch = malloc(sizeof(gm_pair) * 2 * (size_t) pcap);
					if (!scratch)
					{
						pcap = 0;
						failed = 1;
					}
				}
				if (failed)
				{
					fill[r] = -1;
					continue;
				}
				fill[r] = dedupe_row(ind, dat, b, n, scratch);
			}
		}
		free(sc);
		free(sv);
		free(cur);
		free(scratch);
	}
	free(brow);
	brow = NULL;
	if (poll_stop(&pl))
		goto canceled;
	if ((w = compact_rows(ptr, fill, ind, dat, n_rows)) < 0)
		goto oom;
	free(fill);
	free(bstart);
	free(bpos);
	out->n_rows = n_rows;
	out->n_cols = n_cols;
	out->nnz = w;
	out->indptr = ptr;
	out->indices = ind;
	out->data = dat;
	return GM_OK;

oom:
	snprintf(err, errlen, "out of memory building a CSR of %lld entries", (long long) nnz);
	rc = GM_ENOMEM;
	goto done;
canceled:
	snprintf(err, errlen, "building a CSR of %lld entries canceled", (long long) nnz);
	rc = GM_ECANCELED;
done:
	free(rows);
	free(cols);
	free(vals);
	free(ptr);
	free(fill);
	free(bcnt);
	free(bpos);
	free(blen);
	free(tcnt);
	free(heavy_of);
	free(hlen);
	free(first_bucket);
	free(brow);
	free(bstart);
	free(ind);
	free(dat);
	return rc;
}

/*
 * The transpose a slab at a time (gm_core.h): thread t of nt takes a's
 * rows [first[t], first[t + 1]) (about equal entries), and off[t][j] is
 * where its entries of column j start within that column, so that each
 * slab is the same stable scatter as gm_csr_transpose, restricted to the
 * slab's columns.
 */
struct gm_transposer
{
	const gm_csr *a;
	int			nt;
	int32_t    *first;			/* nt + 1 */
	int32_t    *off;			/* nt x n_cols */
	int64_t    *ptr;			/* n_cols + 1: the transpose's row pointers */
	int64_t    *cur;			/* n_rows: each row's first entry of column next_c or later */
	int32_t		next_c;
};

void
gm_transposer_free(gm_transposer *t)
{
	if (t == NULL)
		return;
	free(t->first);
	free(t->off);
	free(t->ptr);
	free(t->cur);
	free(t);
}

int
gm_transposer_make(const gm_csr *a, gm_transposer **out, char *err, size_t errlen)
{
	gm_transposer *t = calloc(1, sizeof(gm_transposer));
	int			nt = 1;
	int64_t		nc = a->n_cols > 0 ? a->n_cols : 1;

	*out = NULL;
#ifdef _OPENMP
	nt = omp_get_max_threads();
#endif
	/* the offsets at most half a byte an entry */
	while (nt > 1 && (a->nnz < 100000 || (double) nt * nc * sizeof(int32_t) > 0.5 * a->nnz))
		nt--;
	if (t)
	{
		t->a = a;
		t->nt = nt;
		t->first = malloc(sizeof(int32_t) * (nt + 1));
		t->off = calloc((size_t) nt * nc, sizeof(int32_t));
		t->ptr = calloc((size_t) nc + 1, sizeof(int64_t));
		t->cur = malloc(sizeof(int64_t) * ((size_t) a->n_rows + 1));
		t->next_c = -1;
	}
	if (!t || !t->first || !t->off || !t->ptr || !t->cur)
	{
		gm_transposer_free(t);
		snprintf(err, errlen, "out of memory transposing a CSR of %lld entries",
				 (long long) a->nnz);
		return GM_ENOMEM;
	}
	row_shares(a, nt, t->first);
#pragma omp parallel num_threads(nt)
	{
		int			u = thread_num();
		int32_t    *c = t->off + (size_t) u * nc;

		for (int64_t e = a->indptr[t->first[u]]; e < a->indptr[t->first[u + 1]]; e++)
			c[a->indices[e]]++;
	}
	/* column lengths, then each thread's start within a column */
	for (int32_t j = 0; j < a->n_cols; j++)
	{
		int32_t		pos = 0;

		for (int u = 0; u < nt; u++)
		{
			int32_t		n = t->off[(size_t) u * nc + j];

			t->off[(size_t) u * nc + j] = pos;
			pos += n;
		}
		t->ptr[j + 1] = t->ptr[j] + pos;
	}
	*out = t;
	return GM_OK;
}

const int64_t *
gm_transposer_indptr(const gm_transposer *t)
{
	return t->ptr;
}

/*
 * Slabs in order (c0 the last slab's c1) continue from each row's cursor,
 * so that all of them together read each entry once; any other c0 first
 * moves the cursors there (a binary search a row: a row's columns are
 * sorted).
 */
int
gm_transposer_rows(gm_transposer *t, int32_t c0, int32_t c1, int32_t *ind, float *dat)
{
	const gm_csr *a = t->a;
	int64_t		base = t->ptr[c0];
	int32_t    *cur = malloc(sizeof(int32_t) * (size_t) t->nt * (c1 > c0 ? c1 - c0 : 1));
	int			seek = c0 != t->next_c;

	if (cur == NULL)
		return GM_ENOMEM;
#pragma omp parallel num_threads(t->nt)
	{
		int			u = thread_num();
		int32_t    *c = cur + (size_t) u * (c1 - c0);
		const int32_t *o = t->off + (size_t) u * (a->n_cols > 0 ? a->n_cols : 1);

		for (int32_t j = c0; j < c1; j++)
			c[j - c0] = o[j];
		for (int32_t r = t->first[u]; r < t->first[u + 1]; r++)
		{
			int64_t		e = t->cur[r],
						end = a->indptr[r + 1];

			if (seek)
				e = gm_lower_bound32(a->indices, a->indptr[r], end, c0);
			for (; e < end && a->indices[e] < c1; e++)
			{
				int32_t		j = a->indices[e];
				int64_t		d = t->ptr[j] - base + c[j - c0]++;

				ind[d] = r;
				dat[d] = a->data[e];
			}
			t->cur[r] = e;
		}
	}
	free(cur);
	t->next_c = c1;
	return GM_OK;
}
