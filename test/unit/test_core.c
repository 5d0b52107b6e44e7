/*
 * test_core.c: unit tests of the pure-C core (src/core).
 *
 * Random inputs are fresh on every run: the seed comes from the time and the
 * pid (or from GM_TEST_SEED to replay a run) and is printed first.  Output is
 * one line per test, "ok N - name" or "not ok N - name: detail", then
 * "N passed, M failed"; the exit status is non-zero when any test failed.
 */
#include "gm_core.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23	/* Linux 5.14; older headers lack the name */
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "harness.h"

/* a rating 0.5 .. 5.0: sums of these are exact in float */
static float
rrating(void)
{
	return 0.5f * (float) rint_range(1, 10);
}

/* A random COO with duplicates; rows in [0, n_rows) but some rows left empty. */
/*
 * gm_qmat_build_in: each row's scale is max|y| / 127, each q within half a
 * step of y / scale, qsum and qabs their sums, the padding zero (checked in
 * float64 on random rows, zero rows included); the result does not depend
 * on the thread count (1 vs all, on matrices large enough to run in
 * parallel) and equals gm_qmat_build's, byte for byte.
 */
static int
test_qmat_threads(void)
{
	for (int trial = 0; trial < 6; trial++)
	{
		int			k = (int) rint_range(1, 300);
		int32_t		n = trial < 3 ? (int32_t) rint_range(1, 50) : (int32_t) ((2 << 20) / k + 7);
		float	   *Y = xmalloc(sizeof(float) * (size_t) n * k);
		size_t		bytes = (gm_qmat_size(n, k) + 63) / 64 * 64;
		void	   *m1 = aligned_alloc(64, bytes),
				   *mn = aligned_alloc(64, bytes);
		gm_qmat		Q1,
					Qn,
					Q;

		for (int64_t i = 0; i < (int64_t) n * k; i++)
			Y[i] = (float) ((runif() - 0.5) * pow(10.0, rint_range(-3, 3)));
		memset(Y, 0, sizeof(float) * k);	/* a zero row */
		memset(m1, 0x55, bytes);
		memset(mn, 0x55, bytes);
		CHECK(gm_qmat_build_in(Y, n, k, m1, &Q1, 1) == GM_OK, "build_in, 1 thread");
		CHECK(gm_qmat_build_in(Y, n, k, mn, &Qn, 0) == GM_OK, "build_in, all threads");
		CHECK(gm_qmat_build(Y, n, k, &Q) == GM_OK, "qmat build");
		CHECK(memcmp(Q1.q, Qn.q, (size_t) n * Q1.kpad) == 0 &&
			  memcmp(Q1.scale, Qn.scale, sizeof(float) * n) == 0 &&
			  memcmp(Q1.qabs, Qn.qabs, sizeof(float) * n) == 0 &&
			  memcmp(Q1.qsum, Qn.qsum, sizeof(int32_t) * n) == 0,
			  "n %d k %d: 1 thread and all threads differ", n, k);
		CHECK(Q.kpad == Q1.kpad && memcmp(Q1.q, Q.q, (size_t) n * Q1.kpad) == 0 &&
			  memcmp(Q1.scale, Q.scale, sizeof(float) * n) == 0,
			  "n %d k %d: gm_qmat_build_in and gm_qmat_build differ", n, k);
		gm_qmat_free(&Q);
		for (int32_t i = 0; i < n; i++)
		{
			const int8_t *q = Q1.q + (size_t) i * Q1.kpad;
			double		m = 0,
						abs = 0;
			int64_t		sum = 0;

			for (int f = 0; f < k; f++)
				m = fmax(m, fabs((double) Y[(size_t) i * k + f]));
			CHECK(fabs(Q1.scale[i] - m / 127.0) <= 1e-6 * m, "row %d: scale %g, expected %g",
				  i, Q1.scale[i], m / 127.0);
			for (int f = 0; f < k; f++)
			{
				double		want = m > 0 ? Y[(size_t) i * k + f] * 127.0 / m : 0.0;

				CHECK(fabs(q[f] - want) <= 0.5 + 1e-4,
					  "row %d col %d: q %d for %g", i, f, q[f], want);
				sum += q[f];
				abs += fabs((double) q[f]);
			}
			for (int f = k; f < Q1.kpad; f++)
				CHECK(q[f] == 0, "row %d: padding %d is %d", i, f, q[f]);
			CHECK(Q1.qsum[i] == sum, "row %d: qsum %d, expected %lld", i, Q1.qsum[i],
				  (long long) sum);
			CHECK(fabs(Q1.qabs[i] - Q1.scale[i] * abs) <= 1e-6 * Q1.scale[i] * abs,
				  "row %d: qabs %g, expected %g", i, Q1.qabs[i], Q1.scale[i] * abs);
		}
		free(Y);
		free(m1);
		free(mn);
	}
	return 0;
fail:
	return 1;
}

/*
 * gm_topk_dot (int8 first pass + exact rescoring) returns the float32 top n:
 * compared with a float64 reference, position by position, on random factors
 * with skip lists, duplicated items (exact ties) and n up to m.
 */
static int
test_topk_dot(void)
{
	for (int trial = 0; trial < 200; trial++)
	{
		int32_t		m = (int32_t) rint_range(1, 3000);
		int			k = (int) rint_range(1, 160);
		int			n = (int) rint_range(1, trial % 10 == 0 ? m + 5 : 30);
		float	   *Y = malloc(sizeof(float) * (size_t) m * k);
		float	   *x = malloc(sizeof(float) * k);
		float	   *scratch;
		float	   *ref = malloc(sizeof(float) * m);
		int32_t    *skip = malloc(sizeof(int32_t) * m);
		int32_t    *oi = malloc(sizeof(int32_t) * (n + 1)),
				   *ri = malloc(sizeof(int32_t) * (n + 1));
		float	   *os = malloc(sizeof(float) * (n + 1)),
				   *rs = malloc(sizeof(float) * (n + 1));
		int32_t		nskip = 0,
					rescored = -1;
		gm_qmat		Q;
		int			got,
					want;

		for (int64_t i = 0; i < (int64_t) m * k; i++)
			Y[i] = (float) (runif() - 0.3) * (trial % 3 == 0 ? 100.0f : 1.0f);
		for (int32_t i = 1; i < m; i += 7)	/* exact duplicates: ties */
			memcpy(Y + (size_t) i * k, Y + (size_t) (i - 1) * k, sizeof(float) * k);
		for (int f = 0; f < k; f++)
			x[f] = (float) (runif() - 0.5);
		for (int32_t i = 0; i < m; i++)
			if (runif() < 0.1)
				skip[nskip++] = i;
		for (int32_t i = 0; i < m; i++)
		{
			double		d = 0;

			for (int f = 0; f < k; f++)
				d += (double) x[f] * Y[(size_t) i * k + f];
			ref[i] = (float) d;
		}
		CHECK(gm_qmat_build(Y, m, k, &Q) == GM_OK, "qmat build");
		scratch = malloc(sizeof(float) * gm_topk_dot_scratch(&Q));
		got = gm_topk_dot(Y, &Q, x, n, skip, nskip, scratch, oi, os, &rescored);
		want = gm_topk(ref, m, n, skip, nskip, ri, rs);
		gm_qmat_free(&Q);
		CHECK(got == want, "m %d k %d n %d: %d results, expected %d", m, k, n, got, want);
		/* every result was scored exactly, and not more items than there are */
		CHECK(rescored >= got && rescored <= m, "m %d n %d: %d rescored for %d results",
			  m, n, rescored, got);
		for (int r = 0; r < got; r++)
		{
			double		tol = 1e-5 * (1.0 + fabs(rs[r])) * (trial % 3 == 0 ? 100 : 1);

			CHECK(fabs(os[r] - rs[r]) <= tol,
				  "m %d k %d n %d: position %d score %g, reference %g (item %d vs %d)",
				  m, k, n, r, os[r], rs[r], oi[r], ri[r]);
			for (int32_t j = 0; j < nskip; j++)
				CHECK(skip[j] != oi[r], "skipped item %d returned", oi[r]);
			CHECK(r == 0 || os[r] < os[r - 1] || (os[r] == os[r - 1] && oi[r] > oi[r - 1]),
				  "not ordered at %d", r);
		}
		free(Y);
		free(x);
		free(scratch);
		free(ref);
		free(skip);
		free(oi);
		free(ri);
		free(os);
		free(rs);
	}
	return 0;
fail:
	return 1;
}

typedef struct
{
	int32_t		n_rows,
				n_cols;
	int64_t		nnz;
	int32_t    *r,
			   *c;
	float	   *v;
} coo;

static void
coo_random(coo *m, int32_t n_rows, int32_t n_cols, int64_t nnz)
{
	uint8_t    *empty = xcalloc(n_rows, 1);

	m->n_rows = n_rows;
	m->n_cols = n_cols;
	m->nnz = nnz;
	m->r = xmalloc(sizeof(int32_t) * nnz);
	m->c = xmalloc(sizeof(int32_t) * nnz);
	m->v = xmalloc(sizeof(float) * nnz);
	/* about a quarter of the rows stay empty (never row 0 if only one row) */
	for (int32_t i = 0; i < n_rows; i++)
		empty[i] = n_rows > 1 && runif() < 0.25;
	empty[0] = 0;
	for (int64_t e = 0; e < nnz; e++)
	{
		int32_t		row;

		do
			row = (int32_t) rint_range(0, n_rows - 1);
		while (empty[row]);
		m->r[e] = row;
		m->c[e] = (int32_t) rint_range(0, n_cols - 1);
		m->v[e] = rrating();
		/* force some exact duplicates */
		if (e > 0 && runif() < 0.2)
		{
			int64_t		o = rint_range(0, e - 1);

			m->r[e] = m->r[o];
			m->c[e] = m->c[o];
		}
	}
	free(empty);
}

static void
coo_free(coo *m)
{
	free(m->r);
	free(m->c);
	free(m->v);
}

/* structural checks of a CSR; returns NULL or a description of the defect */
static const char *
csr_valid(const gm_csr *a)
{
	static char buf[256];

	if (a->indptr == NULL)
		return "indptr is NULL";
	if (a->indptr[0] != 0)
		return "indptr[0] != 0";
	for (int32_t r = 0; r < a->n_rows; r++)
	{
		if (a->indptr[r + 1] < a->indptr[r])
		{
			snprintf(buf, sizeof(buf), "indptr not monotone at row %d", r);
			return buf;
		}
		for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
		{
			if (a->indices[e] < 0 || a->indices[e] >= a->n_cols)
			{
				snprintf(buf, sizeof(buf), "column %d out of range in row %d",
						 a->indices[e], r);
				return buf;
			}
			if (e > a->indptr[r] && a->indices[e] <= a->indices[e - 1])
			{
				snprintf(buf, sizeof(buf),
						 "columns not sorted/unique in row %d (%d after %d)",
						 r, a->indices[e], a->indices[e - 1]);
				return buf;
			}
		}
	}
	if (a->indptr[a->n_rows] != a->nnz)
	{
		snprintf(buf, sizeof(buf), "indptr[n_rows] = %lld but nnz = %lld",
				 (long long) a->indptr[a->n_rows], (long long) a->nnz);
		return buf;
	}
	return NULL;
}

/* dense (double) copy of a CSR, plus a presence mask */
static double *
csr_dense(const gm_csr *a, uint8_t **mask)
{
	double	   *d = xcalloc((size_t) a->n_rows * a->n_cols, sizeof(double));

	if (mask)
		*mask = xcalloc((size_t) a->n_rows * a->n_cols, 1);
	for (int32_t r = 0; r < a->n_rows; r++)
		for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
		{
			d[(size_t) r * a->n_cols + a->indices[e]] += a->data[e];
			if (mask)
				(*mask)[(size_t) r * a->n_cols + a->indices[e]] = 1;
		}
	return d;
}

/* random CSR of ratings (via gm_csr_from_coo) */
static void
csr_random(gm_csr *a, int32_t n_rows, int32_t n_cols, double density)
{
	coo			m;
	char		err[GM_ERRLEN];
	int64_t		nnz = (int64_t) (density * n_rows * n_cols) + 1;

	coo_random(&m, n_rows, n_cols, nnz);
	if (gm_csr_from_coo(n_rows, n_cols, nnz, m.r, m.c, m.v, a, err,
						sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "gm_csr_from_coo: %s\n", err);
		exit(2);
	}
	coo_free(&m);
}

static void
fill_uniform(float *x, int64_t n, double lo, double hi)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = (float) (lo + (hi - lo) * runif());
}

/* ------------------------------------------------------------ 1. csr */

static int
test_csr_from_coo(void)
{
	gm_csr		a = {0};
	coo			m = {0};
	double	   *ref = NULL,
			   *got = NULL;
	uint8_t    *present = NULL,
			   *mask = NULL;
	char		err[GM_ERRLEN];
	const char *why;

	for (int trial = 0; trial < 30; trial++)
	{
		int32_t		R = (int32_t) rint_range(1, 60),
					Cn = (int32_t) rint_range(1, 50);
		int64_t		nnz = rint_range(0, 3 * (int64_t) R * Cn);
		int64_t		distinct = 0;

		if (trial == 0)
			nnz = 0;
		coo_random(&m, R, Cn, nnz);
		ref = xcalloc((size_t) R * Cn, sizeof(double));
		present = xcalloc((size_t) R * Cn, 1);
		for (int64_t e = 0; e < nnz; e++)
		{
			ref[(size_t) m.r[e] * Cn + m.c[e]] += m.v[e];
			if (!present[(size_t) m.r[e] * Cn + m.c[e]])
				distinct++;
			present[(size_t) m.r[e] * Cn + m.c[e]] = 1;
		}
		CHECK(gm_csr_from_coo(R, Cn, nnz, m.r, m.c, m.v, &a, err, sizeof(err)) == GM_OK,
			  "gm_csr_from_coo failed: %s", err);
		CHECK(a.n_rows == R && a.n_cols == Cn, "dimensions %dx%d, expected %dx%d",
			  a.n_rows, a.n_cols, R, Cn);
		CHECK((why = csr_valid(&a)) == NULL, "%s (trial %d)", why, trial);
		CHECK(a.nnz == distinct, "nnz %lld, expected %lld distinct coordinates",
			  (long long) a.nnz, (long long) distinct);
		got = csr_dense(&a, &mask);
		for (size_t i = 0; i < (size_t) R * Cn; i++)
		{
			CHECK(mask[i] == present[i], "pattern differs at (%zu, %zu)",
				  i / Cn, i % Cn);
			CHECK(got[i] == ref[i], "value at (%zu, %zu) is %g, expected %g",
				  i / Cn, i % Cn, got[i], ref[i]);
		}
		free(ref);
		free(got);
		free(present);
		free(mask);
		ref = got = NULL;
		present = mask = NULL;
		gm_csr_free(&a);
		coo_free(&m);
		memset(&m, 0, sizeof(m));
	}

	/* nnz 0, including zero rows and zero columns */
	{
		int32_t		dims[][2] = {{5, 3}, {0, 4}, {4, 0}, {0, 0}};

		for (int i = 0; i < 4; i++)
		{
			CHECK(gm_csr_from_coo(dims[i][0], dims[i][1], 0, NULL, NULL, NULL,
								  &a, err, sizeof(err)) == GM_OK,
				  "nnz 0 (%dx%d) failed: %s", dims[i][0], dims[i][1], err);
			CHECK(a.nnz == 0 && a.n_rows == dims[i][0] && a.n_cols == dims[i][1],
				  "nnz 0 (%dx%d): got nnz %lld, %dx%d", dims[i][0], dims[i][1],
				  (long long) a.nnz, a.n_rows, a.n_cols);
			CHECK((why = csr_valid(&a)) == NULL, "nnz 0: %s", why);
			gm_csr_free(&a);
		}
	}

	/* a row that comes only from duplicates, and a long row (qsort path) */
	{
		int32_t		n = 200;
		int32_t    *r = xmalloc(sizeof(int32_t) * n),
				   *c = xmalloc(sizeof(int32_t) * n);
		float	   *v = xmalloc(sizeof(float) * n);
		double		sum0 = 0;

		for (int32_t i = 0; i < n; i++)
		{
			r[i] = i % 2 ? 2 : 0;
			c[i] = r[i] == 0 ? 7 : (n - i) % 97;	/* row 0: one column; row 2: many */
			v[i] = rrating();
			if (r[i] == 0)
				sum0 += v[i];
		}
		CHECK(gm_csr_from_coo(3, 100, n, r, c, v, &a, err, sizeof(err)) == GM_OK,
			  "long row: %s", err);
		free(r);
		free(c);
		free(v);
		CHECK((why = csr_valid(&a)) == NULL, "long row: %s", why);
		CHECK(a.indptr[1] == 1 && a.indices[0] == 7 && a.data[0] == (float) sum0,
			  "all-duplicate row: %lld entries, value %g, expected 1 entry %g",
			  (long long) a.indptr[1], a.indptr[1] ? a.data[0] : 0.0, sum0);
		CHECK(a.indptr[2] == a.indptr[1], "row 1 should be empty");
		CHECK(a.indptr[3] - a.indptr[2] == 97, "long row has %lld entries, expected 97",
			  (long long) (a.indptr[3] - a.indptr[2]));
		gm_csr_free(&a);
	}
	return 0;
fail:
	free(ref);
	free(got);
	free(present);
	free(mask);
	gm_csr_free(&a);
	coo_free(&m);
	return 1;
}

/* ------------------------------------------------------------ 2. csr errors */

static int
test_csr_rejects(void)
{
	gm_csr		a;
	char		err[GM_ERRLEN];
	int32_t		R = (int32_t) rint_range(2, 20),
				Cn = (int32_t) rint_range(2, 20);
	int32_t		bad[][2] = {{R, 0}, {0, Cn}, {-1, 0}, {0, -1},
	{R + 1000, Cn + 1000}, {INT32_MAX, 0}, {INT32_MIN, 0}};

	for (size_t t = 0; t < sizeof(bad) / sizeof(bad[0]); t++)
	{
		int64_t		nnz = rint_range(2, 50);
		int64_t		at = rint_range(0, nnz - 1);
		int32_t    *r = xmalloc(sizeof(int32_t) * nnz),
				   *c = xmalloc(sizeof(int32_t) * nnz);
		float	   *v = xmalloc(sizeof(float) * nnz);
		int			rc;

		for (int64_t e = 0; e < nnz; e++)
		{
			r[e] = (int32_t) rint_range(0, R - 1);
			c[e] = (int32_t) rint_range(0, Cn - 1);
			v[e] = 1.0f;
		}
		r[at] = bad[t][0];
		c[at] = bad[t][1];
		err[0] = '\0';
		rc = gm_csr_from_coo(R, Cn, nnz, r, c, v, &a, err, sizeof(err));
		free(r);
		free(c);
		free(v);
		if (rc == GM_OK)
			gm_csr_free(&a);
		CHECK(rc == GM_EINVAL, "coordinate (%d, %d) in %dx%d: rc %d, expected GM_EINVAL",
			  bad[t][0], bad[t][1], R, Cn, rc);
		CHECK(err[0] != '\0', "coordinate (%d, %d): empty error message",
			  bad[t][0], bad[t][1]);
		CHECK(a.indptr == NULL && a.indices == NULL && a.data == NULL,
			  "output not cleared on error");
	}
	/* negative dimensions */
	err[0] = '\0';
	CHECK(gm_csr_from_coo(-1, 3, 0, NULL, NULL, NULL, &a, err, sizeof(err)) == GM_EINVAL,
		  "negative n_rows accepted");
	CHECK(err[0] != '\0', "negative n_rows: empty error message");
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ 3. transpose */

static int
test_csr_transpose(void)
{
	gm_csr		a = {0},
				t = {0},
				tt = {0};
	double	   *da = NULL,
			   *dt = NULL;
	uint8_t    *ma = NULL,
			   *mt = NULL;
	char		err[GM_ERRLEN];
	const char *why;

	for (int trial = 0; trial < 30; trial++)
	{
		int32_t		R = (int32_t) rint_range(1, 70),
					Cn = (int32_t) rint_range(1, 70);

		if (trial == 0)
			CHECK(gm_csr_from_coo(R, Cn, 0, NULL, NULL, NULL, &a, err,
								  sizeof(err)) == GM_OK, "%s", err);
		else
			csr_random(&a, R, Cn, runif() * 0.5);
		CHECK(gm_csr_transpose(&a, &t, err, sizeof(err)) == GM_OK, "transpose: %s", err);
		CHECK(t.n_rows == Cn && t.n_cols == R && t.nnz == a.nnz,
			  "transpose is %dx%d nnz %lld, expected %dx%d nnz %lld",
			  t.n_rows, t.n_cols, (long long) t.nnz, Cn, R, (long long) a.nnz);
		CHECK((why = csr_valid(&t)) == NULL, "transpose: %s", why);
		da = csr_dense(&a, &ma);
		dt = csr_dense(&t, &mt);
		for (int32_t i = 0; i < R; i++)
			for (int32_t j = 0; j < Cn; j++)
			{
				CHECK(ma[(size_t) i * Cn + j] == mt[(size_t) j * R + i],
					  "pattern of (%d, %d) differs from the transpose", i, j);
				CHECK(da[(size_t) i * Cn + j] == dt[(size_t) j * R + i],
					  "a[%d][%d] = %g but t[%d][%d] = %g", i, j,
					  da[(size_t) i * Cn + j], j, i, dt[(size_t) j * R + i]);
			}
		CHECK(gm_csr_transpose(&t, &tt, err, sizeof(err)) == GM_OK, "transpose 2: %s", err);
		CHECK(tt.n_rows == a.n_rows && tt.n_cols == a.n_cols && tt.nnz == a.nnz,
			  "transpose twice changed the shape");
		CHECK(memcmp(tt.indptr, a.indptr, sizeof(int64_t) * (a.n_rows + 1)) == 0,
			  "transpose twice: indptr differs");
		CHECK(memcmp(tt.indices, a.indices, sizeof(int32_t) * a.nnz) == 0,
			  "transpose twice: indices differ");
		CHECK(memcmp(tt.data, a.data, sizeof(float) * a.nnz) == 0,
			  "transpose twice: data differs");
		free(da);
		free(dt);
		free(ma);
		free(mt);
		da = dt = NULL;
		ma = mt = NULL;
		gm_csr_free(&a);
		gm_csr_free(&t);
		gm_csr_free(&tt);
	}
	return 0;
fail:
	free(da);
	free(dt);
	free(ma);
	free(mt);
	gm_csr_free(&a);
	gm_csr_free(&t);
	gm_csr_free(&tt);
	return 1;
}

/* ------------------------------------------------------------ 4. confidence */

/* (row, column, input position) order, for coo_reference_equal's qsort */
static const int32_t *coo_ref_r,
		   *coo_ref_c;

static int
coo_ref_cmp(const void *x, const void *y)
{
	int64_t		a = *(const int64_t *) x,
				b = *(const int64_t *) y;

	if (coo_ref_r[a] != coo_ref_r[b])
		return coo_ref_r[a] < coo_ref_r[b] ? -1 : 1;
	if (coo_ref_c[a] != coo_ref_c[b])
		return coo_ref_c[a] < coo_ref_c[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

/*
 * Whether m is the CSR of the coordinates, computed another way: every
 * entry sorted by (row, column, position) and equal coordinates summed in
 * that order (so the sums are the same floats, bit for bit).
 */
static int
coo_reference_equal(const gm_csr *m, int32_t n_rows, int64_t nnz, const int32_t *r,
					const int32_t *c, const float *v)
{
	int64_t    *o = xmalloc(sizeof(int64_t) * (size_t) (nnz > 0 ? nnz : 1));
	int64_t		w = 0;
	int			same = 1;

	for (int64_t i = 0; i < nnz; i++)
		o[i] = i;
	coo_ref_r = r;
	coo_ref_c = c;
	qsort(o, (size_t) nnz, sizeof(int64_t), coo_ref_cmp);
	for (int64_t i = 0; i < nnz && same;)
	{
		int64_t		j = i + 1;
		float		sum = v[o[i]];

		while (j < nnz && r[o[j]] == r[o[i]] && c[o[j]] == c[o[i]])
			sum += v[o[j++]];
		same = w < m->nnz && m->indices[w] == c[o[i]] && memcmp(&m->data[w], &sum, sizeof(float)) == 0 &&
			m->indptr[r[o[i]]] <= w && w < m->indptr[r[o[i]] + 1];
		w++;
		i = j;
	}
	same = same && w == m->nnz && m->indptr[0] == 0 && m->indptr[n_rows] == w;
	free(o);
	return same;
}



/*
 * The lean builders against the plain ones: gm_csr_from_coo_consume gives
 * the same CSR as gm_csr_from_coo (bit for bit: the same entry order before
 * the per-row sort) on random inputs with duplicates, empty rows, a row
 * longer than a bucket and inputs large enough for several threads, buckets
 * and (the largest) pages given back, blocks of more than 64 rows, and
 * every block cut at its rows; a bad coordinate is refused and the
 * arrays freed.  gm_transposer's slabs, cut at random, equal the rows of
 * gm_csr_transpose.
 */
static int
test_csr_lean(void)
{
	gm_csr		a = {0},
				b = {0},
				t = {0};
	gm_transposer *tr = NULL;
	int32_t    *r = NULL,
			   *c = NULL,
			   *si = NULL;
	float	   *v = NULL,
			   *sv = NULL;
	char		err[GM_ERRLEN];
#ifdef _OPENMP
	int			threads = omp_get_max_threads();
#endif

	for (int trial = 0; trial < 16; trial++)
	{
		int64_t		nnz = trial == 0 ? 0 : trial < 8 ? rint_range(1, 2000) :
			trial < 12 ? rint_range(100000, 1200000) : trial == 12 ? 3000000 :
			trial == 13 ? 17000000 : trial == 14 ? 2000000 : 3000000;
		/*
		 * 14: 4M rows for 2M entries, 8 threads (blocks of more than 64
		 * rows); 15: 3M entries on 2000 rows, 3 threads (every block is cut
		 * at its rows)
		 */
		int32_t		R = trial == 14 ? 1 << 22 : trial == 15 ? 2000 :
			(int32_t) rint_range(1, trial < 8 ? 80 : 200000),
					Cn = (int32_t) rint_range(1, trial < 8 ? 60 : 50000);
		int32_t		longrow = (int32_t) rint_range(0, R - 1);

#ifdef _OPENMP
		omp_set_num_threads(trial == 14 ? 8 : trial == 15 ? 3 : threads);
#endif

		r = xmalloc(sizeof(int32_t) * (size_t) (nnz > 0 ? nnz : 1));
		c = xmalloc(sizeof(int32_t) * (size_t) (nnz > 0 ? nnz : 1));
		v = xmalloc(sizeof(float) * (size_t) (nnz > 0 ? nnz : 1));
		for (int64_t e = 0; e < nnz; e++)
		{
			/* a fifth of the entries in one row (longer than a bucket), columns crowded for duplicates */
			r[e] = runif() < 0.2 ? longrow : (int32_t) rint_range(0, R - 1);
			c[e] = (int32_t) rint_range(0, trial % 2 ? Cn - 1 : (Cn + 3) / 4 - 1);
			v[e] = (float) (runif() * 4 - 1);
		}
		CHECK(gm_csr_from_coo(R, Cn, nnz, r, c, v, &a, err, sizeof(err)) == GM_OK, "%s", err);
		/* against a sort of every entry (the rows compacted in parallel from 65,536 rows) */
		CHECK(nnz > 3000000 || coo_reference_equal(&a, R, nnz, r, c, v),
			  "trial %d (%lld entries, %d rows): the CSR differs from the reference", trial,
			  (long long) nnz, R);
		CHECK(gm_csr_from_coo_consume(R, Cn, nnz, r, c, v, NULL, &b, err, sizeof(err)) == GM_OK,
			  "consume: %s", err);
		r = c = NULL;
		v = NULL;
		CHECK(a.n_rows == b.n_rows && a.n_cols == b.n_cols && a.nnz == b.nnz,
			  "trial %d: %dx%d nnz %lld, expected %dx%d nnz %lld", trial, b.n_rows, b.n_cols,
			  (long long) b.nnz, a.n_rows, a.n_cols, (long long) a.nnz);
		CHECK(memcmp(a.indptr, b.indptr, sizeof(int64_t) * ((size_t) R + 1)) == 0 &&
			  memcmp(a.indices, b.indices, sizeof(int32_t) * (size_t) a.nnz) == 0 &&
			  memcmp(a.data, b.data, sizeof(float) * (size_t) a.nnz) == 0,
			  "trial %d (%lld entries): the lean CSR differs", trial, (long long) nnz);

		/* the transpose in random slabs */
		CHECK(gm_csr_transpose(&a, &t, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_transposer_make(&a, &tr, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(memcmp(gm_transposer_indptr(tr), t.indptr, sizeof(int64_t) * ((size_t) Cn + 1)) == 0,
			  "trial %d: the transposer's row pointers differ", trial);
		si = xmalloc(sizeof(int32_t) * (size_t) (a.nnz > 0 ? a.nnz : 1));
		sv = xmalloc(sizeof(float) * (size_t) (a.nnz > 0 ? a.nnz : 1));
		for (int32_t c0 = 0; c0 < Cn;)
		{
			int32_t		c1 = c0 + (int32_t) rint_range(1, Cn - c0);
			int64_t		n = t.indptr[c1] - t.indptr[c0];

			CHECK(gm_transposer_rows(tr, c0, c1, si, sv) == GM_OK, "slab");
			CHECK(memcmp(si, t.indices + t.indptr[c0], sizeof(int32_t) * (size_t) n) == 0 &&
				  memcmp(sv, t.data + t.indptr[c0], sizeof(float) * (size_t) n) == 0,
				  "trial %d: slab [%d, %d) differs from the transpose", trial, c0, c1);
			c0 = c1;
		}
		for (int rep = 0; rep < 3 && Cn > 0; rep++)
		{
			/* out of order: the cursors seek */
			int32_t		c0 = (int32_t) rint_range(0, Cn - 1),
						c1 = c0 + (int32_t) rint_range(1, Cn - c0);
			int64_t		n = t.indptr[c1] - t.indptr[c0];

			CHECK(gm_transposer_rows(tr, c0, c1, si, sv) == GM_OK, "slab");
			CHECK(memcmp(si, t.indices + t.indptr[c0], sizeof(int32_t) * (size_t) n) == 0 &&
				  memcmp(sv, t.data + t.indptr[c0], sizeof(float) * (size_t) n) == 0,
				  "trial %d: slab [%d, %d) out of order differs from the transpose", trial, c0, c1);
		}
		free(si);
		free(sv);
		si = NULL;
		sv = NULL;
		gm_transposer_free(tr);
		tr = NULL;
		gm_csr_free(&a);
		gm_csr_free(&b);
		gm_csr_free(&t);
	}

#ifdef _OPENMP
	omp_set_num_threads(threads);
#endif

	/* a bad coordinate: refused, the input freed (the sanitizer build sees leaks) */
	for (int bad = 0; bad < 2; bad++)
	{
		int64_t		nnz = 200000;

		r = xmalloc(sizeof(int32_t) * nnz);
		c = xmalloc(sizeof(int32_t) * nnz);
		v = xmalloc(sizeof(float) * nnz);
		for (int64_t e = 0; e < nnz; e++)
		{
			r[e] = (int32_t) (e % 100);
			c[e] = (int32_t) (e % 7);
			v[e] = 1;
		}
		if (bad)
			r[150001] = 100;
		else
			c[7] = -1;
		CHECK(gm_csr_from_coo_consume(100, 7, nnz, r, c, v, NULL, &b, err, sizeof(err)) == GM_EINVAL,
			  "a bad coordinate was taken");
		r = c = NULL;
		v = NULL;
		CHECK(strstr(err, bad ? "(100, " : ", -1)") != NULL && b.indptr == NULL,
			  "error: %s", err);
	}
	return 0;
fail:
	free(r);
	free(c);
	free(v);
	free(si);
	free(sv);
	gm_transposer_free(tr);
	gm_csr_free(&a);
	gm_csr_free(&b);
	gm_csr_free(&t);
#ifdef _OPENMP
	omp_set_num_threads(threads);
#endif
	return 1;
}

static int
test_confidence(void)
{
	gm_csr		a = {0},
				c = {0};
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 10; trial++)
	{
		float		alpha = trial == 0 ? 0.0f : (float) (runif() * 50.0);

		csr_random(&a, (int32_t) rint_range(1, 50), (int32_t) rint_range(1, 50),
				   runif() * 0.3);
		CHECK(gm_confidence(&a, alpha, &c, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(c.n_rows == a.n_rows && c.n_cols == a.n_cols && c.nnz == a.nnz,
			  "shape changed");
		CHECK(memcmp(c.indptr, a.indptr, sizeof(int64_t) * (a.n_rows + 1)) == 0,
			  "indptr differs");
		CHECK(memcmp(c.indices, a.indices, sizeof(int32_t) * a.nnz) == 0,
			  "indices differ");
		for (int64_t e = 0; e < a.nnz; e++)
		{
			double		want = 1.0 + (double) alpha * a.data[e];

			CHECK(fabs(c.data[e] - want) <= 1e-6 * want,
				  "alpha %g, v %g: c = %.9g, expected %.9g", alpha, a.data[e],
				  c.data[e], want);
		}
		gm_csr_free(&a);
		gm_csr_free(&c);
	}
	return 0;
fail:
	gm_csr_free(&a);
	gm_csr_free(&c);
	return 1;
}

/* ------------------------------------------------------------ 5. gram */

static int
test_gram(void)
{
	int			ks[] = {1, 3, 8, 17, 32, 64};
	float	   *Y = NULL,
			   *G = NULL;
	double	   *ref = NULL;

	for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
		for (int threads = 0; threads <= 2; threads++)
		{
			int			k = ks[ki];
			int64_t		n = rint_range(1, 500);
			float		reg = (float) (runif() * 2.0);
			double		maxref = 0,
						maxerr = 0;

			Y = xmalloc(sizeof(float) * n * k);
			G = xmalloc(sizeof(float) * k * k);
			ref = xcalloc((size_t) k * k, sizeof(double));
			fill_uniform(Y, n * k, -1.0, 1.0);
			for (int i = 0; i < k * k; i++)
				G[i] = NAN;		/* must be fully overwritten */
			for (int64_t r = 0; r < n; r++)
				for (int i = 0; i < k; i++)
					for (int j = 0; j < k; j++)
						ref[i * k + j] += (double) Y[r * k + i] * Y[r * k + j];
			for (int i = 0; i < k; i++)
				ref[i * k + i] += reg;
			for (int i = 0; i < k * k; i++)
			{
				if (fabs(ref[i]) > maxref)
					maxref = fabs(ref[i]);
			}
			gm_gram(Y, n, k, reg, G, threads);
			for (int i = 0; i < k; i++)
				for (int j = 0; j < k; j++)
				{
					double		d = fabs(G[i * k + j] - ref[i * k + j]);

					CHECK(G[i * k + j] == G[i * k + j], "G[%d][%d] is NaN (k %d)", i, j, k);
					CHECK(G[i * k + j] == G[j * k + i],
						  "G not symmetric at (%d, %d), k %d", i, j, k);
					if (d > maxerr)
						maxerr = d;
				}
			CHECK(maxerr <= 1e-5 * maxref,
				  "k %d, n %lld: max error %.3g relative to max |G| %.3g", k,
				  (long long) n, maxerr, maxref);
			free(Y);
			free(G);
			free(ref);
			Y = G = NULL;
			ref = NULL;
		}
	return 0;
fail:
	free(Y);
	free(G);
	free(ref);
	return 1;
}

/* ------------------------------------------------------------ 6. CG solve */

/* Solve A x = b in place (A k x k SPD, row-major, double) by Cholesky. */
static int
cholesky_solve(double *A, double *b, int k)
{
	for (int j = 0; j < k; j++)
	{
		double		s = A[j * k + j];

		for (int p = 0; p < j; p++)
			s -= A[j * k + p] * A[j * k + p];
		if (s <= 0)
			return -1;
		A[j * k + j] = sqrt(s);
		for (int i = j + 1; i < k; i++)
		{
			double		t = A[i * k + j];

			for (int p = 0; p < j; p++)
				t -= A[i * k + p] * A[j * k + p];
			A[i * k + j] = t / A[j * k + j];
		}
	}
	for (int i = 0; i < k; i++)		/* L z = b */
	{
		for (int p = 0; p < i; p++)
			b[i] -= A[i * k + p] * b[p];
		b[i] /= A[i * k + i];
	}
	for (int i = k - 1; i >= 0; i--)	/* L^T x = z */
	{
		for (int p = i + 1; p < k; p++)
			b[i] -= A[p * k + i] * b[p];
		b[i] /= A[i * k + i];
	}
	return 0;
}

static int
test_cg_solve(void)
{
	int			ks[] = {8, 16, 32};
	gm_csr		R = {0},
				C = {0};
	float	   *X = NULL,
			   *X0 = NULL,
			   *Y = NULL,
			   *G = NULL;
	double	   *A = NULL,
			   *b = NULL;
	char		err[GM_ERRLEN];

	for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
		for (int trial = 0; trial < 4; trial++)
		{
			int			k = ks[ki];
			int32_t		U = 6,
						I = (int32_t) rint_range(150, 300);
			int32_t		u = (int32_t) rint_range(0, U - 1);
			float		reg = 0.1f,
						alpha = (float) (0.5 + runif() * 3.0);
			double		num = 0,
						den = 0;

			csr_random(&R, U, I, 0.1);
			/* row 0 is never empty; trial 3 solves an empty row (x -> 0) */
			if (trial < 3)
				while (R.indptr[u + 1] == R.indptr[u])
					u = (u + 1) % U;
			else
			{
				/* shift later rows' entries down over row u's */
				{
					int64_t		gone = R.indptr[u + 1] - R.indptr[u];

					for (int64_t e = R.indptr[u + 1]; e < R.nnz; e++)
					{
						R.indices[e - gone] = R.indices[e];
						R.data[e - gone] = R.data[e];
					}
					for (int32_t v = u + 1; v <= U; v++)
						R.indptr[v] -= gone;
					R.nnz -= gone;
				}
			}
			CHECK(gm_confidence(&R, alpha, &C, err, sizeof(err)) == GM_OK, "%s", err);
			Y = xmalloc(sizeof(float) * I * k);
			X = xmalloc(sizeof(float) * U * k);
			X0 = xmalloc(sizeof(float) * U * k);
			G = xmalloc(sizeof(float) * k * k);
			A = xcalloc((size_t) k * k, sizeof(double));
			b = xcalloc(k, sizeof(double));
			/* zero-mean factors: Y^T Y ~ (I / 12k) I, well conditioned */
			fill_uniform(Y, (int64_t) I * k, -0.5 / sqrt(k), 0.5 / sqrt(k));
			fill_uniform(X, (int64_t) U * k, -1.0, 1.0);
			memcpy(X0, X, sizeof(float) * U * k);
			gm_gram(Y, I, k, reg, G, 1);

			/* reference: (Y^T C_u Y + reg I) x = Y^T C_u p_u, in double */
			for (int32_t i = 0; i < I; i++)
				for (int p = 0; p < k; p++)
					for (int q = 0; q < k; q++)
						A[p * k + q] += (double) Y[i * k + p] * Y[i * k + q];
			for (int p = 0; p < k; p++)
				A[p * k + p] += reg;
			for (int64_t e = C.indptr[u]; e < C.indptr[u + 1]; e++)
			{
				const float *y = Y + (size_t) C.indices[e] * k;
				double		c = C.data[e];

				for (int p = 0; p < k; p++)
				{
					b[p] += c * y[p];
					for (int q = 0; q < k; q++)
						A[p * k + q] += (c - 1.0) * y[p] * y[q];
				}
			}
			CHECK(cholesky_solve(A, b, k) == 0, "reference system not SPD (k %d)", k);

			gm_als_cg_solve_rows(&C, X, Y, G, k, k, u, u + 1, 1);
			for (int p = 0; p < k; p++)
			{
				double		d = X[u * k + p] - b[p];

				num += d * d;
				den += b[p] * b[p];
			}
			if (C.indptr[u + 1] == C.indptr[u])
			{
				/* exact answer 0: measure against the warm start's size */
				den = 0;
				for (int p = 0; p < k; p++)
					den += (double) X0[u * k + p] * X0[u * k + p];
			}
			CHECK(sqrt(num) <= 1e-4 * sqrt(den),
				  "k %d, %lld items: relative error %.3g (|x| %.3g)", k,
				  (long long) (C.indptr[u + 1] - C.indptr[u]), sqrt(num / den),
				  sqrt(den));
			for (int32_t v = 0; v < U; v++)
				if (v != u)
					CHECK(memcmp(X + v * k, X0 + v * k, sizeof(float) * k) == 0,
						  "row %d changed though only row %d was solved", v, u);
			free(X);
			free(X0);
			free(Y);
			free(G);
			free(A);
			free(b);
			X = X0 = Y = G = NULL;
			A = b = NULL;
			gm_csr_free(&R);
			gm_csr_free(&C);
		}
	return 0;
fail:
	free(X);
	free(X0);
	free(Y);
	free(G);
	free(A);
	free(b);
	gm_csr_free(&R);
	gm_csr_free(&C);
	return 1;
}

/* ------------------------------------------------------------ 7. loss */

static double
brute_loss(const gm_csr *C, const float *X, const float *Y, int k, float reg)
{
	int32_t		U = C->n_rows,
				I = C->n_cols;
	double	   *cm = xcalloc((size_t) U * I, sizeof(double));
	double		loss = 0,
				conf = 0,
				nx = 0,
				ny = 0;

	for (int32_t u = 0; u < U; u++)
		for (int64_t e = C->indptr[u]; e < C->indptr[u + 1]; e++)
		{
			cm[(size_t) u * I + C->indices[e]] = C->data[e];
			conf += C->data[e];
		}
	for (int32_t u = 0; u < U; u++)
		for (int32_t i = 0; i < I; i++)
		{
			double		s = 0,
						c = cm[(size_t) u * I + i],
						p = c != 0 ? 1.0 : 0.0;

			for (int f = 0; f < k; f++)
				s += (double) X[u * k + f] * Y[i * k + f];
			if (c == 0)
				c = 1.0;
			loss += c * (p - s) * (p - s);
		}
	for (int64_t i = 0; i < (int64_t) U * k; i++)
		nx += (double) X[i] * X[i];
	for (int64_t i = 0; i < (int64_t) I * k; i++)
		ny += (double) Y[i] * Y[i];
	free(cm);
	return (loss + reg * (nx + ny)) / (conf + (double) U * I - C->nnz);
}

static int
test_loss(void)
{
	gm_csr		R = {0},
				C = {0};
	float	   *X = NULL,
			   *Y = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 12; trial++)
	{
		int32_t		U = (int32_t) rint_range(1, 60),
					I = (int32_t) rint_range(1, 60);
		int			k = (int) rint_range(1, 20);
		float		reg = (float) (runif() * 1.0),
					alpha = (float) (runif() * 40.0);
		double		want,
					got;
		double		scale = trial % 2 ? 1.0 : 0.2;

		csr_random(&R, U, I, runif() * 0.4);
		CHECK(gm_confidence(&R, alpha, &C, err, sizeof(err)) == GM_OK, "%s", err);
		X = xmalloc(sizeof(float) * U * k);
		Y = xmalloc(sizeof(float) * I * k);
		fill_uniform(X, (int64_t) U * k, -scale, scale);
		fill_uniform(Y, (int64_t) I * k, -scale, scale);
		want = brute_loss(&C, X, Y, k, reg);
		for (int threads = 0; threads <= 3; threads++)
		{
			got = gm_als_loss(&C, X, Y, k, reg, threads);
			CHECK(fabs(got - want) <= 1e-5 * fabs(want),
				  "%dx%d k %d nnz %lld threads %d: loss %.10g, expected %.10g (rel %.3g)",
				  U, I, k, (long long) C.nnz, threads, got, want,
				  fabs(got - want) / fabs(want));
		}
		free(X);
		free(Y);
		X = Y = NULL;
		gm_csr_free(&R);
		gm_csr_free(&C);
	}
	return 0;
fail:
	free(X);
	free(Y);
	gm_csr_free(&R);
	gm_csr_free(&C);
	return 1;
}

/* ------------------------------------------------------------ 8. training */

typedef struct
{
	int			n;
	double		loss[64];
	double		rmse[64];
	int			iters[64];
	int			stop_after;		/* should_stop returns 1 on this call; 0: never */
	int			stop_calls;
} train_log;

static void
log_iteration(void *arg, int iteration, double loss, double rmse, double seconds)
{
	train_log  *l = arg;

	(void) seconds;
	if (l->n < 64)
	{
		l->iters[l->n] = iteration;
		l->loss[l->n] = loss;
		l->rmse[l->n] = rmse;
	}
	l->n++;
}

static int
stop_after_n(void *arg)
{
	train_log  *l = arg;

	l->stop_calls++;
	return l->stop_after > 0 && l->stop_calls >= l->stop_after;
}

/* R random ratings U x I, Rt its transpose, C and Ct their confidences */
typedef struct
{
	gm_csr		R,
				Rt,
				C,
				Ct;
} train_data;

static void
train_data_make(train_data *t, int32_t U, int32_t I, double density, float alpha)
{
	char		err[GM_ERRLEN];

	csr_random(&t->R, U, I, density);
	if (gm_csr_transpose(&t->R, &t->Rt, err, sizeof(err)) != GM_OK ||
		gm_confidence(&t->R, alpha, &t->C, err, sizeof(err)) != GM_OK ||
		gm_confidence(&t->Rt, alpha, &t->Ct, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "train_data_make: %s\n", err);
		exit(2);
	}
}

static void
train_data_free(train_data *t)
{
	gm_csr_free(&t->R);
	gm_csr_free(&t->Rt);
	gm_csr_free(&t->C);
	gm_csr_free(&t->Ct);
}

/* gm_mf_data over t with the factor arrays X, Y */
static gm_mf_data
mf_data(const train_data *t, float *X, float *Y)
{
	gm_mf_data	d;

	memset(&d, 0, sizeof(d));
	d.R = &t->R;
	d.Rt = &t->Rt;
	d.X = X;
	d.Y = Y;
	return d;
}

/* implicit-ALS parameters on the CPU */
static gm_mf_params
als_params(int factors, int cg_steps, float reg, float alpha, int iterations)
{
	gm_mf_params p;

	gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
	p.factors = factors;
	p.cg_steps = cg_steps;
	p.regularization = reg;
	p.alpha = alpha;
	p.iterations = iterations;
	p.seed = rnext();
	p.backend = GM_BACKEND_CPU;
	return p;
}

static int
test_train_monotone(void)
{
	struct
	{
		int			factors,
					cg_steps;
		float		reg,
					alpha;
	}			cfg[] = {{8, 3, 0.1f, 2.0f}, {32, 3, 0.1f, 2.0f},
	{8, 3, 0.01f, 40.0f}, {32, 3, 1.0f, 10.0f}, {16, 16, 0.1f, 5.0f}};
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL,
			   *Rv = NULL,
			   *Rtv = NULL;
	char		err[GM_ERRLEN];

	for (size_t ci = 0; ci < sizeof(cfg) / sizeof(cfg[0]); ci++)
	{
		int32_t		U = (int32_t) rint_range(100, 400),
					I = (int32_t) rint_range(80, 300);
		gm_mf_params p = als_params(cfg[ci].factors, cfg[ci].cg_steps, cfg[ci].reg,
									cfg[ci].alpha, 10);
		gm_mf_result res;
		gm_mf_data	d;
		train_log	log = {0};
		gm_callbacks cb = {stop_after_n, log_iteration, &log};
		double		prev;
		int			rc;

		p.threads = (int) rint_range(0, 4);
		train_data_make(&t, U, I, 0.02 + runif() * 0.05, p.alpha);
		X = xmalloc(sizeof(float) * U * p.factors);
		Y = xmalloc(sizeof(float) * I * p.factors);
		/* the loss of the start gm_mf_train makes */
		gm_factors_init(X, U, p.factors, p.seed, 0);
		gm_factors_init(Y, I, p.factors, p.seed, 1);
		prev = gm_als_loss(&t.C, X, Y, p.factors, p.regularization, 0);
		fill_uniform(X, (int64_t) U * p.factors, -1.0, 1.0);	/* overwritten */
		fill_uniform(Y, (int64_t) I * p.factors, -1.0, 1.0);
		d = mf_data(&t, X, Y);
		Rv = xmalloc(sizeof(float) * t.R.nnz);
		Rtv = xmalloc(sizeof(float) * t.Rt.nnz);
		memcpy(Rv, t.R.data, sizeof(float) * t.R.nnz);
		memcpy(Rtv, t.Rt.data, sizeof(float) * t.Rt.nnz);

		rc = gm_mf_train(&p, &d, &cb, &res, err, sizeof(err));
		CHECK(rc == GM_OK, "config %zu: rc %d: %s", ci, rc, err);
		CHECK(log.n == p.iterations && res.iterations_run == p.iterations,
			  "config %zu: %d iteration callbacks, iterations_run %d, expected %d",
			  ci, log.n, res.iterations_run, p.iterations);
		for (int i = 0; i < log.n; i++)
		{
			CHECK(log.iters[i] == i + 1, "config %zu: callback %d reported iteration %d",
				  ci, i, log.iters[i]);
			CHECK(isfinite(log.loss[i]), "config %zu: loss %d not finite", ci, i + 1);
			CHECK(isnan(log.rmse[i]), "config %zu: implicit ALS reported an RMSE %g",
				  ci, log.rmse[i]);
			CHECK(log.loss[i] <= prev * (1.0 + 1e-6),
				  "config %zu (k %d, cg %d, reg %g, alpha %g, %dx%d): loss rose at iteration %d: %.10g -> %.10g",
				  ci, p.factors, p.cg_steps, p.regularization, p.alpha, U, I,
				  i + 1, prev, log.loss[i]);
			prev = log.loss[i];
		}
		CHECK(log.loss[log.n - 1] < log.loss[0],
			  "config %zu: loss did not decrease over training (%.10g -> %.10g)",
			  ci, log.loss[0], log.loss[log.n - 1]);
		CHECK(res.final.loss == log.loss[log.n - 1],
			  "config %zu: final loss %.10g, last reported %.10g", ci,
			  res.final.loss, log.loss[log.n - 1]);
		CHECK(isnan(res.final.rmse), "config %zu: final rmse %g for implicit ALS", ci,
			  res.final.rmse);
		CHECK(strncmp(res.device_name, "cpu", 3) == 0, "config %zu: device \"%s\"", ci,
			  res.device_name);
		{
			double		again = gm_als_loss(&t.C, X, Y, p.factors, p.regularization, 0);

			CHECK(fabs(again - res.final.loss) <= 1e-6 * fabs(again),
				  "config %zu: loss of the returned factors %.10g, final loss %.10g",
				  ci, again, res.final.loss);
		}
		/* R and Rt are left as they were: the confidences are the trainer's own */
		CHECK(memcmp(Rv, t.R.data, sizeof(float) * t.R.nnz) == 0 &&
			  memcmp(Rtv, t.Rt.data, sizeof(float) * t.Rt.nnz) == 0,
			  "config %zu: training changed the values of R or Rt", ci);
		free(Rv);
		free(Rtv);
		Rv = Rtv = NULL;
		free(X);
		free(Y);
		X = Y = NULL;
		train_data_free(&t);
	}
	return 0;
fail:
	free(X);
	free(Y);
	free(Rv);
	free(Rtv);
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------------------ 9. cancel */

static int
test_train_cancel(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL;
	char		err[GM_ERRLEN];
	int32_t		U = 300,
				I = 200;
	int			k = 8;

	train_data_make(&t, U, I, 0.05, 2.0f);
	X = xmalloc(sizeof(float) * U * k);
	Y = xmalloc(sizeof(float) * I * k);

	for (int trial = 0; trial < 6; trial++)
	{
		gm_mf_params p = als_params(k, 3, 0.1f, 2.0f, 50);
		gm_mf_result res;
		gm_mf_data	d = mf_data(&t, X, Y);
		train_log	log = {0};
		gm_callbacks cb = {stop_after_n, log_iteration, &log};
		int			rc;

		p.threads = 2;
		log.stop_after = trial == 0 ? 1 : (int) rint_range(1, 8);
		err[0] = '\0';
		rc = gm_mf_train(&p, &d, &cb, &res, err, sizeof(err));
		CHECK(rc == GM_ECANCELED, "stop after %d polls: rc %d, expected GM_ECANCELED",
			  log.stop_after, rc);
		CHECK(err[0] != '\0', "stop after %d polls: empty error message", log.stop_after);
		CHECK(log.stop_calls == log.stop_after,
			  "should_stop polled %d times, but it asked to stop on poll %d",
			  log.stop_calls, log.stop_after);
		CHECK(log.n < p.iterations, "all %d iterations ran despite cancellation", log.n);
	}

	/* invalid parameters */
	{
		gm_mf_params p = als_params(8, 3, 0.1f, 1.0f, 5);
		gm_mf_result res;
		gm_mf_data	d = mf_data(&t, X, Y);
		gm_mf_params bad[3];

		bad[0] = p;
		bad[0].factors = 0;
		bad[1] = p;
		bad[1].iterations = 0;
		bad[2] = p;
		bad[2].cg_steps = 0;
		for (int i = 0; i < 3; i++)
		{
			err[0] = '\0';
			CHECK(gm_mf_train(&bad[i], &d, NULL, &res, err, sizeof(err)) == GM_EINVAL,
				  "invalid parameters %d accepted", i);
			CHECK(err[0] != '\0', "invalid parameters %d: empty message", i);
		}
		/* and no callbacks at all is fine */
		CHECK(gm_mf_train(&p, &d, NULL, &res, err, sizeof(err)) == GM_OK,
			  "training without callbacks failed: %s", err);
	}
	free(X);
	free(Y);
	train_data_free(&t);
	return 0;
fail:
	free(X);
	free(Y);
	train_data_free(&t);
	return 1;
}

/*
 * Without a progress callback, a tolerance or held-out evaluation, implicit
 * ALS computes the loss after its last iteration only: the same factors,
 * bit for bit, and the same final loss as a training that reports every
 * iteration's (whose last report is that loss); and with a should_stop
 * alone it is still polled, and still stops.
 */
static int
test_train_last_loss(void)
{
	train_data	t = {0};
	int32_t		U = 400,
				I = 250;
	int			k = 12;
	float	   *X[2],
			   *Y[2];
	char		err[GM_ERRLEN];

	train_data_make(&t, U, I, 0.04, 3.0f);
	for (int r = 0; r < 2; r++)
	{
		X[r] = xmalloc(sizeof(float) * U * k);
		Y[r] = xmalloc(sizeof(float) * I * k);
	}
	for (int trial = 0; trial < 3; trial++)
	{
		gm_mf_params p = als_params(k, 3, 0.1f, 2.0f, (int) rint_range(2, 6));
		gm_mf_result res[2];
		train_log	log = {0};
		gm_callbacks cb = {NULL, log_iteration, &log};

		p.threads = 2;
		for (int r = 0; r < 2; r++)
		{
			gm_mf_data	d = mf_data(&t, X[r], Y[r]);

			CHECK(gm_mf_train(&p, &d, r == 0 ? &cb : NULL, &res[r], err, sizeof(err)) == GM_OK,
				  "training %d: %s", r, err);
		}
		CHECK(log.n == p.iterations, "%d progress reports for %d iterations", log.n, p.iterations);
		CHECK(res[1].iterations_run == p.iterations && res[0].iterations_run == p.iterations,
			  "iterations run %d and %d of %d", res[0].iterations_run, res[1].iterations_run, p.iterations);
		CHECK(memcmp(X[0], X[1], sizeof(float) * U * k) == 0 && memcmp(Y[0], Y[1], sizeof(float) * I * k) == 0,
			  "%d iterations: the factors differ without the callback", p.iterations);
		CHECK(isfinite(res[1].final.loss) &&
			  fabs(res[1].final.loss - log.loss[log.n - 1]) <= 1e-12 * fabs(log.loss[log.n - 1]) &&
			  fabs(res[1].final.loss - res[0].final.loss) <= 1e-12 * fabs(res[0].final.loss),
			  "final loss %.17g without the callback, %.17g with it (last report %.17g)",
			  res[1].final.loss, res[0].final.loss, log.loss[log.n - 1]);
	}
	{
		/* a should_stop alone: polled, and the training stops */
		gm_mf_params p = als_params(k, 3, 0.1f, 2.0f, 6);
		gm_mf_result res;
		gm_mf_data	d = mf_data(&t, X[0], Y[0]);
		train_log	log = {0};
		gm_callbacks cb = {stop_after_n, NULL, &log};
		int			rc;

		p.threads = 2;
		log.stop_after = 3;
		rc = gm_mf_train(&p, &d, &cb, &res, err, sizeof(err));
		CHECK(rc == GM_ECANCELED && log.stop_calls == 3,
			  "a should_stop alone asking on poll 3: rc %d after %d polls", rc, log.stop_calls);
	}
	for (int r = 0; r < 2; r++)
	{
		free(X[r]);
		free(Y[r]);
	}
	train_data_free(&t);
	return 0;
fail:
	for (int r = 0; r < 2; r++)
	{
		free(X[r]);
		free(Y[r]);
	}
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------------------ 10. threads */

static int
test_threads(void)
{
	gm_csr		R = {0},
				C = {0};
	float	   *X1 = NULL,
			   *X2 = NULL,
			   *X4 = NULL,
			   *Y = NULL,
			   *G = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 3; trial++)
	{
		int32_t		U = (int32_t) rint_range(200, 1000),
					I = (int32_t) rint_range(100, 400);
		int			k = (int) rint_range(4, 40);
		int			cg = (int) rint_range(1, 6);
		int32_t		b = (int32_t) rint_range(0, U / 4),
					e = (int32_t) rint_range(U / 2, U);

		csr_random(&R, U, I, 0.03);
		CHECK(gm_confidence(&R, 5.0f, &C, err, sizeof(err)) == GM_OK, "%s", err);
		X1 = xmalloc(sizeof(float) * U * k);
		X2 = xmalloc(sizeof(float) * U * k);
		X4 = xmalloc(sizeof(float) * U * k);
		Y = xmalloc(sizeof(float) * I * k);
		G = xmalloc(sizeof(float) * k * k);
		fill_uniform(X1, (int64_t) U * k, -0.1, 0.1);
		fill_uniform(Y, (int64_t) I * k, -0.1, 0.1);
		memcpy(X2, X1, sizeof(float) * U * k);
		memcpy(X4, X1, sizeof(float) * U * k);
		gm_gram(Y, I, k, 0.1f, G, 1);
		gm_als_cg_solve_rows(&C, X1, Y, G, k, cg, b, e, 1);
		gm_als_cg_solve_rows(&C, X2, Y, G, k, cg, b, e, 2);
		gm_als_cg_solve_rows(&C, X4, Y, G, k, cg, b, e, 4);
		for (int64_t i = 0; i < (int64_t) U * k; i++)
		{
			CHECK(memcmp(&X1[i], &X2[i], sizeof(float)) == 0,
				  "k %d: X[%lld][%lld] threads=1 %.9g, threads=2 %.9g", k,
				  (long long) (i / k), (long long) (i % k), X1[i], X2[i]);
			CHECK(memcmp(&X1[i], &X4[i], sizeof(float)) == 0,
				  "k %d: X[%lld][%lld] threads=1 %.9g, threads=4 %.9g", k,
				  (long long) (i / k), (long long) (i % k), X1[i], X4[i]);
		}
		free(X1);
		free(X2);
		free(X4);
		free(Y);
		free(G);
		X1 = X2 = X4 = Y = G = NULL;
		gm_csr_free(&R);
		gm_csr_free(&C);
	}
	return 0;
fail:
	free(X1);
	free(X2);
	free(X4);
	free(Y);
	free(G);
	gm_csr_free(&R);
	gm_csr_free(&C);
	return 1;
}

/* ------------------------------------------------------------ 11. top-k */

static const float *cmp_scores;

static int
ref_cmp(const void *a, const void *b)
{
	int32_t		i = *(const int32_t *) a,
				j = *(const int32_t *) b;

	if (cmp_scores[i] > cmp_scores[j])
		return -1;
	if (cmp_scores[i] < cmp_scores[j])
		return 1;
	return (i > j) - (i < j);
}

static int
test_topk(void)
{
	float	   *s = NULL,
			   *os = NULL;
	int32_t    *skip = NULL,
			   *oi = NULL,
			   *ref = NULL;

	for (int trial = 0; trial < 300; trial++)
	{
		int32_t		m = (int32_t) rint_range(0, 300);
		int			n = (int) rint_range(0, m + 20);
		int32_t		nskip = 0,
					nref = 0;
		int			use_skip = rint_range(0, 3) != 0;
		int			levels = (int) rint_range(1, 20);	/* few levels: many ties */
		int			got;

		if (trial == 0)
			n = 0;
		s = xmalloc(sizeof(float) * m);
		skip = xmalloc(sizeof(int32_t) * (m + 1));
		oi = xmalloc(sizeof(int32_t) * (n + 1));
		os = xmalloc(sizeof(float) * (n + 1));
		ref = xmalloc(sizeof(int32_t) * (m + 1));
		for (int32_t i = 0; i < m; i++)
		{
			double		x = runif();

			if (x < 0.05)
				s[i] = NAN;
			else if (x < 0.07)
				s[i] = (x < 0.06 ? 1 : -1) * INFINITY;
			else
				s[i] = (float) rint_range(-levels, levels) / (float) levels;
			if (use_skip && runif() < 0.2)
				skip[nskip++] = i;
		}
		/* occasionally skip past the end */
		if (use_skip && runif() < 0.3)
			skip[nskip++] = m + 5;
		for (int32_t i = 0, sp = 0; i < m; i++)
		{
			while (use_skip && sp < nskip && skip[sp] < i)
				sp++;
			if (use_skip && sp < nskip && skip[sp] == i)
				continue;
			if (isnan(s[i]))
				continue;
			ref[nref++] = i;
		}
		cmp_scores = s;
		qsort(ref, nref, sizeof(int32_t), ref_cmp);
		for (int i = 0; i < n + 1; i++)
			oi[i] = -7;
		got = gm_topk(s, m, n, use_skip ? skip : NULL, nskip, oi, os);
		CHECK(got == (n < nref ? n : nref), "m %d n %d: returned %d, expected %d",
			  m, n, got, n < nref ? n : nref);
		for (int i = 0; i < got; i++)
		{
			CHECK(oi[i] == ref[i], "m %d n %d: position %d is index %d (%g), expected %d (%g)",
				  m, n, i, oi[i], oi[i] >= 0 && oi[i] < m ? s[oi[i]] : NAN,
				  ref[i], s[ref[i]]);
			CHECK(memcmp(&os[i], &s[ref[i]], sizeof(float)) == 0,
				  "m %d n %d: position %d score %g, expected %g", m, n, i, os[i],
				  s[ref[i]]);
		}
		CHECK(oi[n] == -7, "wrote past n");
		free(s);
		free(skip);
		free(oi);
		free(os);
		free(ref);
		s = os = NULL;
		skip = oi = ref = NULL;
	}
	return 0;
fail:
	free(s);
	free(skip);
	free(oi);
	free(os);
	free(ref);
	return 1;
}

/* ------------------------------------------------------------ 12. synth */

typedef struct
{
	int64_t		rows;
	int32_t    *items;
	float	   *values;
	uint8_t    *holdout;
	int32_t    *start;			/* per user, n_users + 1 */
} synth_out;

static void
synth_out_free(synth_out *o)
{
	free(o->items);
	free(o->values);
	free(o->holdout);
	free(o->start);
	memset(o, 0, sizeof(*o));
}

/* generate all users (in the given order: +1 or -1), return 0 or set detail */
static int
synth_all(const gm_synth *g, synth_out *o, int order)
{
	uint8_t    *seen = xcalloc(g->n_items, 1);

	o->items = xmalloc(sizeof(int32_t) * g->n_rows);
	o->values = xmalloc(sizeof(float) * g->n_rows);
	o->holdout = xmalloc(g->n_rows);
	o->start = xmalloc(sizeof(int32_t) * (g->n_users + 1));
	o->start[0] = 0;
	for (int32_t u = 0; u < g->n_users; u++)
	{
		o->start[u + 1] = o->start[u] + g->counts[u];
		if (o->start[u + 1] > g->n_rows)
		{
			snprintf(detail, sizeof(detail), "counts sum past n_rows at user %d", u);
			free(seen);
			return 1;
		}
	}
	for (int32_t j = 0; j < g->n_users; j++)
	{
		int32_t		u = order > 0 ? j : g->n_users - 1 - j;
		int32_t		n = gm_synth_user(g, u, o->items + o->start[u],
									  o->values + o->start[u],
									  o->holdout + o->start[u], seen);

		if (n != g->counts[u])
		{
			snprintf(detail, sizeof(detail), "user %d: %d rows, counts says %d",
					 u, n, g->counts[u]);
			free(seen);
			return 1;
		}
		for (int32_t i = 0; i < g->n_items; i++)
			if (seen[i])
			{
				snprintf(detail, sizeof(detail),
						 "user %d: scratch not all zero on return (item %d)", u, i);
				free(seen);
				return 1;
			}
	}
	o->rows = o->start[g->n_users];
	free(seen);
	return 0;
}

static int
test_synth(void)
{
	gm_synth	g = {0},
				h = {0};
	synth_out	a = {0},
				b = {0};
	uint8_t    *mark = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 4; trial++)
	{
		int32_t		U = (int32_t) rint_range(200, 800),
					I = (int32_t) rint_range(100, 1000);
		int			minpu = (int) rint_range(1, 20);
		int32_t		cap = I / 2 > minpu ? I / 2 : minpu;
		int64_t		lo = (int64_t) U * minpu,
					hi = (int64_t) U * cap;
		int64_t		hold = 0;
		double		frac;

		memset(&g, 0, sizeof(g));
		g.n_users = U;
		g.n_items = I;
		g.min_per_user = minpu;
		/* mostly ~30 per user, sometimes at the bounds */
		g.n_rows = trial == 1 ? lo : trial == 2 ? hi :
			(lo + 30 * (int64_t) U < hi ? lo + 30 * (int64_t) U : hi);
		/* gm_synth_init wants at least as many rows as items */
		if (g.n_rows < I)
			g.n_rows = I;
		g.clusters = (int) rint_range(1, 20);
		g.affinity = runif();
		g.seed = rnext();
		h = g;
		CHECK(gm_synth_init(&g, err, sizeof(err)) == GM_OK,
			  "init %dx%d rows %lld min %d: %s", U, I, (long long) g.n_rows, minpu, err);
		CHECK(gm_synth_init(&h, err, sizeof(err)) == GM_OK, "init 2: %s", err);
		CHECK(memcmp(g.counts, h.counts, sizeof(int32_t) * U) == 0,
			  "counts differ between two inits with one seed");
		if (synth_all(&g, &a, 1) || synth_all(&h, &b, -1))
			goto fail;
		CHECK(a.rows == g.n_rows, "total rows %lld, expected %lld",
			  (long long) a.rows, (long long) g.n_rows);
		CHECK(memcmp(a.items, b.items, sizeof(int32_t) * a.rows) == 0 &&
			  memcmp(a.values, b.values, sizeof(float) * a.rows) == 0 &&
			  memcmp(a.holdout, b.holdout, a.rows) == 0,
			  "not deterministic for seed %llu (or depends on the user order)",
			  (unsigned long long) g.seed);
		mark = xcalloc(I, 1);
		for (int32_t u = 0; u < U; u++)
		{
			CHECK(g.counts[u] >= minpu, "user %d has %d rows < min_per_user %d",
				  u, g.counts[u], minpu);
			CHECK(g.counts[u] <= cap, "user %d has %d rows > cap %d", u, g.counts[u], cap);
			for (int32_t r = a.start[u]; r < a.start[u + 1]; r++)
			{
				float		v = a.values[r];
				int32_t		it = a.items[r];

				CHECK(it >= 0 && it < I, "user %d: item %d out of range", u, it);
				CHECK(!mark[it], "user %d: item %d repeated", u, it);
				mark[it] = 1;
				CHECK(v >= 0.5f && v <= 5.0f && v * 2.0f == floorf(v * 2.0f),
					  "user %d: value %g not in {0.5, 1.0, .., 5.0}", u, v);
				CHECK(a.holdout[r] <= 1, "holdout flag %d", a.holdout[r]);
				hold += a.holdout[r];
			}
			for (int32_t r = a.start[u]; r < a.start[u + 1]; r++)
				mark[a.items[r]] = 0;
		}
		free(mark);
		mark = NULL;
		frac = (double) hold / a.rows;
		if (a.rows >= 2000)
			CHECK(frac >= 0.15 && frac <= 0.25, "holdout fraction %.4f over %lld rows",
				  frac, (long long) a.rows);
		/* another seed gives another dataset */
		{
			gm_synth	o = g;
			synth_out	c = {0};

			o.counts = NULL;
			o.seed = g.seed + 1;
			CHECK(gm_synth_init(&o, err, sizeof(err)) == GM_OK, "init 3: %s", err);
			if (synth_all(&o, &c, 1))
			{
				gm_synth_free(&o);
				goto fail;
			}
			{
				int			same = c.rows == a.rows &&
					memcmp(c.items, a.items, sizeof(int32_t) * a.rows) == 0 &&
					memcmp(c.values, a.values, sizeof(float) * a.rows) == 0;

				synth_out_free(&c);
				gm_synth_free(&o);
				CHECK(!same, "seeds %llu and %llu give the same dataset",
					  (unsigned long long) g.seed, (unsigned long long) g.seed + 1);
			}
		}
		synth_out_free(&a);
		synth_out_free(&b);
		gm_synth_free(&g);
		gm_synth_free(&h);
	}

	/* a tiny one where every user takes every item */
	{
		memset(&g, 0, sizeof(g));
		g.n_users = 3;
		g.n_items = 4;
		g.min_per_user = 4;
		g.n_rows = 12;
		g.clusters = 2;
		g.affinity = 0.5;
		g.seed = rnext();
		CHECK(gm_synth_init(&g, err, sizeof(err)) == GM_OK, "tiny: %s", err);
		if (synth_all(&g, &a, 1))
			goto fail;
		for (int32_t u = 0; u < 3; u++)
		{
			int			sum = 0;

			for (int r = a.start[u]; r < a.start[u + 1]; r++)
				sum += a.items[r];
			CHECK(g.counts[u] == 4 && sum == 0 + 1 + 2 + 3,
				  "tiny: user %d does not hold all four items", u);
		}
		synth_out_free(&a);
		gm_synth_free(&g);
	}

	/* invalid parameters */
	{
		gm_synth	ok = {0};

		ok.n_users = 100;
		ok.n_items = 50;
		ok.min_per_user = 5;
		ok.n_rows = 1000;
		ok.clusters = 5;
		ok.affinity = 0.7;
		ok.seed = 1;
		for (int t = 0; t < 11; t++)
		{
			gm_synth	bad = ok;
			int			rc;

			switch (t)
			{
				case 0: bad.n_users = 0; break;
				case 1: bad.n_items = 0; break;
				case 2: bad.clusters = 0; break;
				case 3: bad.clusters = 51; break;
				case 4: bad.min_per_user = 0; break;
				case 5: bad.affinity = -0.1; break;
				case 6: bad.affinity = 1.1; break;
				case 7: bad.min_per_user = 51; break;
				case 8: bad.n_rows = 499; break;		/* < users * min */
				case 9: bad.n_rows = 2501; break;		/* > users * items/2 */
				case 10: bad.n_users = -5; break;
			}
			err[0] = '\0';
			rc = gm_synth_init(&bad, err, sizeof(err));
			if (rc == GM_OK)
				gm_synth_free(&bad);
			CHECK(rc == GM_EINVAL, "invalid parameter set %d: rc %d, expected GM_EINVAL",
				  t, rc);
			CHECK(err[0] != '\0', "invalid parameter set %d: empty message", t);
		}
		/* the bounds themselves are valid */
		{
			gm_synth	edge = ok;

			edge.n_rows = 500;
			CHECK(gm_synth_init(&edge, err, sizeof(err)) == GM_OK,
				  "n_rows = users * min rejected: %s", err);
			gm_synth_free(&edge);
			edge = ok;
			edge.n_rows = 2500;
			CHECK(gm_synth_init(&edge, err, sizeof(err)) == GM_OK,
				  "n_rows = users * items/2 rejected: %s", err);
			gm_synth_free(&edge);
		}
	}
	return 0;
fail:
	free(mark);
	synth_out_free(&a);
	synth_out_free(&b);
	gm_synth_free(&g);
	gm_synth_free(&h);
	return 1;
}

/* ------------------------------------------------------------ 14. nnz bins */

/*
 * gm_csr_nnz_bins against a direct reference: every row in the first bin
 * whose bound holds it, bins in order, rows ascending within a bin.
 */
static int
test_nnz_bins(void)
{
	gm_csr		a = {0};
	int32_t    *perm = NULL,
			   *start = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 40; trial++)
	{
		int32_t		R = (int32_t) rint_range(0, 300),
					Cn = (int32_t) rint_range(1, 200);
		int			nbins = (int) rint_range(1, 7);
		int64_t		upper[8];
		int64_t		longest = 0;
		int			rc;

		if (R == 0)
			CHECK(gm_csr_from_coo(0, Cn, 0, NULL, NULL, NULL, &a, err, sizeof(err)) == GM_OK,
				  "%s", err);
		else
			csr_random(&a, R, Cn, runif() * runif() * 0.5);
		for (int32_t r = 0; r < R; r++)
			if (a.indptr[r + 1] - a.indptr[r] > longest)
				longest = a.indptr[r + 1] - a.indptr[r];
		/* random increasing bounds; the last one catches every row on most trials */
		upper[0] = rint_range(0, 3);
		for (int b = 1; b < nbins; b++)
			upper[b] = upper[b - 1] + rint_range(1, 1 + longest / 2);
		if (trial % 4 != 3)
			upper[nbins - 1] = trial % 2 ? INT64_MAX : longest + rint_range(0, 2) +
				(nbins > 1 ? upper[nbins - 2] + 1 : 0);
		perm = xmalloc(sizeof(int32_t) * (R + 1));
		start = xmalloc(sizeof(int32_t) * (nbins + 1));
		for (int32_t i = 0; i <= R; i++)
			perm[i] = -7;
		err[0] = '\0';
		rc = gm_csr_nnz_bins(&a, nbins, upper, perm, start, err, sizeof(err));
		if (longest > upper[nbins - 1])
		{
			CHECK(rc == GM_EINVAL && err[0] != '\0',
				  "a row of %lld nonzeros over the last bound %lld: rc %d", (long long) longest,
				  (long long) upper[nbins - 1], rc);
		}
		else
		{
			int32_t		pos = 0;

			CHECK(rc == GM_OK, "%d rows, %d bins: %s", R, nbins, err);
			CHECK(start[0] == 0 && start[nbins] == R, "bin_start[0] %d, bin_start[%d] %d, rows %d",
				  start[0], nbins, start[nbins], R);
			CHECK(perm[R] == -7, "wrote past perm[n_rows]");
			for (int b = 0; b < nbins; b++)
			{
				int64_t		lo = b == 0 ? -1 : upper[b - 1];

				CHECK(start[b + 1] >= start[b], "bin_start decreases at bin %d", b);
				/* the reference: the rows of bin b in ascending order */
				for (int32_t r = 0; r < R; r++)
				{
					int64_t		len = a.indptr[r + 1] - a.indptr[r];

					if (len > lo && len <= upper[b])
					{
						CHECK(pos < start[b + 1] && perm[pos] == r,
							  "bin %d (%lld, %lld]: position %d holds row %d, expected row %d (%lld nonzeros)",
							  b, (long long) lo, (long long) upper[b], pos,
							  pos < R ? perm[pos] : -1, r, (long long) len);
						pos++;
					}
				}
				CHECK(pos == start[b + 1], "bin %d ends at %d, expected %d", b, start[b + 1], pos);
			}
		}
		free(perm);
		free(start);
		perm = start = NULL;
		gm_csr_free(&a);
	}
	/* bad bounds */
	{
		int64_t		dec[2] = {5, 5},
					neg[1] = {-1};
		int32_t		p1[4],
					s1[3];

		csr_random(&a, 3, 4, 0.5);
		CHECK(gm_csr_nnz_bins(&a, 2, dec, p1, s1, err, sizeof(err)) == GM_EINVAL,
			  "equal bounds accepted");
		CHECK(gm_csr_nnz_bins(&a, 1, neg, p1, s1, err, sizeof(err)) == GM_EINVAL,
			  "a negative bound accepted");
		CHECK(gm_csr_nnz_bins(&a, 0, dec, p1, s1, err, sizeof(err)) == GM_EINVAL,
			  "zero bins accepted");
		gm_csr_free(&a);
	}
	return 0;
fail:
	free(perm);
	free(start);
	gm_csr_free(&a);
	return 1;
}

/* ------------------------------------------------------------ 15. tolerance */

/*
 * With tolerance > 0, training stops after the first iteration whose loss
 * changed by less than tolerance relative to the previous one.
 */
static int
test_train_tolerance(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL;
	char		err[GM_ERRLEN];
	int			stopped = 0;

	for (int trial = 0; trial < 4; trial++)
	{
		int32_t		U = (int32_t) rint_range(100, 300),
					I = (int32_t) rint_range(80, 200);
		gm_mf_params p = als_params((int) rint_range(4, 24), 3, 0.1f, 5.0f, 60);
		gm_mf_result res;
		gm_mf_data	d;
		train_log	log = {0};
		gm_callbacks cb = {NULL, log_iteration, &log};
		int			rc,
					stop_at = -1;

		p.tolerance = trial == 0 ? 0.0 : 1e-3 * pow(10.0, runif() * 2.0);
		p.threads = (int) rint_range(1, 3);
		train_data_make(&t, U, I, 0.05, p.alpha);
		X = xmalloc(sizeof(float) * U * p.factors);
		Y = xmalloc(sizeof(float) * I * p.factors);
		d = mf_data(&t, X, Y);
		rc = gm_mf_train(&p, &d, &cb, &res, err, sizeof(err));
		CHECK(rc == GM_OK, "tolerance %g: %s", p.tolerance, err);
		CHECK(res.iterations_run == log.n, "iterations_run %d, %d callbacks",
			  res.iterations_run, log.n);
		CHECK(res.final.loss == log.loss[log.n - 1], "final loss is not the last reported");
		/* the reference: the first iteration i >= 1 with |l[i-1] - l[i]| < tol |l[i-1]| */
		for (int i = 1; i < log.n && stop_at < 0 && p.tolerance > 0; i++)
			if (fabs(log.loss[i - 1] - log.loss[i]) < p.tolerance * fabs(log.loss[i - 1]))
				stop_at = i + 1;
		if (stop_at < 0)
			CHECK(res.iterations_run == p.iterations,
				  "tolerance %g: ran %d of %d iterations, the losses never say stop",
				  p.tolerance, res.iterations_run, p.iterations);
		else
		{
			CHECK(res.iterations_run == stop_at,
				  "tolerance %g (k %d): ran %d iterations, the losses say stop after %d",
				  p.tolerance, p.factors, res.iterations_run, stop_at);
			stopped++;
		}
		free(X);
		free(Y);
		X = Y = NULL;
		train_data_free(&t);
	}
	CHECK(stopped >= 2, "only %d of 3 trainings with a tolerance stopped early", stopped);
	return 0;
fail:
	free(X);
	free(Y);
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------------------ 16. same as the loop */

/*
 * gm_mf_train with the CPU table gives, with one thread, exactly the factors
 * of the plain loop: per iteration gm_gram(Y), gm_als_cg_solve_rows over the
 * users, gm_gram(X), the same over the items; and the loss of those factors.
 */
static int
test_train_matches_loop(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL,
			   *X2 = NULL,
			   *Y2 = NULL,
			   *G = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 4; trial++)
	{
		int32_t		U = (int32_t) rint_range(50, 600),
					I = (int32_t) rint_range(50, 400);
		gm_mf_params p = als_params((int) rint_range(3, 40), (int) rint_range(1, 5),
									(float) (0.01 + runif()), (float) (runif() * 20.0),
									(int) rint_range(1, 4));
		gm_mf_result res;
		gm_mf_data	d;
		int			k = p.factors;
		double		loss;

		p.threads = 1;
		train_data_make(&t, U, I, 0.01 + runif() * 0.1, p.alpha);
		X = xmalloc(sizeof(float) * U * k);
		Y = xmalloc(sizeof(float) * I * k);
		X2 = xmalloc(sizeof(float) * U * k);
		Y2 = xmalloc(sizeof(float) * I * k);
		G = xmalloc(sizeof(float) * k * k);
		d = mf_data(&t, X, Y);
		CHECK(gm_mf_train(&p, &d, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);

		gm_factors_init(X2, U, k, p.seed, 0);
		gm_factors_init(Y2, I, k, p.seed, 1);
		for (int it = 0; it < p.iterations; it++)
		{
			gm_gram(Y2, I, k, p.regularization, G, 1);
			gm_als_cg_solve_rows(&t.C, X2, Y2, G, k, p.cg_steps, 0, U, 1);
			gm_gram(X2, U, k, p.regularization, G, 1);
			gm_als_cg_solve_rows(&t.Ct, Y2, X2, G, k, p.cg_steps, 0, I, 1);
		}
		loss = gm_als_loss(&t.C, X2, Y2, k, p.regularization, 1);
		for (int64_t i = 0; i < (int64_t) U * k; i++)
			CHECK(memcmp(&X[i], &X2[i], sizeof(float)) == 0,
				  "k %d cg %d, %d iterations: X[%lld][%lld] %.9g, the plain loop %.9g",
				  k, p.cg_steps, p.iterations, (long long) (i / k), (long long) (i % k),
				  X[i], X2[i]);
		for (int64_t i = 0; i < (int64_t) I * k; i++)
			CHECK(memcmp(&Y[i], &Y2[i], sizeof(float)) == 0,
				  "k %d cg %d, %d iterations: Y[%lld][%lld] %.9g, the plain loop %.9g",
				  k, p.cg_steps, p.iterations, (long long) (i / k), (long long) (i % k),
				  Y[i], Y2[i]);
		CHECK(res.final.loss == loss, "final loss %.17g, loss of the plain loop's factors %.17g",
			  res.final.loss, loss);
		free(X);
		free(Y);
		free(X2);
		free(Y2);
		free(G);
		X = Y = X2 = Y2 = G = NULL;
		train_data_free(&t);
	}
	return 0;
fail:
	free(X);
	free(Y);
	free(X2);
	free(Y2);
	free(G);
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------------------ 17. cancel latency */

/*
 * How much work runs between two polls of should_stop: at every poll, the
 * rows of X and Y that changed since the last poll are counted at the cost
 * the CPU slices by ((len + k) k cg_steps multiply-adds), and must stay
 * within one slice: the budget (2^26 per thread) plus one row.  Once
 * should_stop says stop, nothing changes any more.
 */
typedef struct
{
	const train_data *t;
	const float *X,
			   *Y;
	float	   *Xs,
			   *Ys;				/* the factors at the last poll */
	int			k,
				cg;
	int			polls,
				stop_at;		/* 0: never */
	double		max_work,
				max_row;
} poll_watch;

static double
changed_work(const gm_csr *A, const float *F, float *snap, int k, int cg)
{
	double		w = 0.0;

	for (int32_t r = 0; r < A->n_rows; r++)
		if (memcmp(F + (size_t) r * k, snap + (size_t) r * k, sizeof(float) * k) != 0)
		{
			w += ((double) (A->indptr[r + 1] - A->indptr[r]) + k) * k * cg;
			memcpy(snap + (size_t) r * k, F + (size_t) r * k, sizeof(float) * k);
		}
	return w;
}

static int
watch_poll(void *arg)
{
	poll_watch *w = arg;
	double		work = changed_work(&w->t->R, w->X, w->Xs, w->k, w->cg) +
		changed_work(&w->t->Rt, w->Y, w->Ys, w->k, w->cg);

	if (work > w->max_work)
		w->max_work = work;
	w->polls++;
	return w->stop_at > 0 && w->polls >= w->stop_at;
}

static int
test_cancel_latency(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL,
			   *Xs = NULL,
			   *Ys = NULL;
	char		err[GM_ERRLEN];
	int32_t		U = 20000,
				I = 2000;
	int			k = 64;
	const double budget = 67108864.0;	/* mf_loop.c: 2^26 per thread, 1 thread */
	int			polls_one = 0;

	train_data_make(&t, U, I, 0.01, 2.0f);
	X = xmalloc(sizeof(float) * U * k);
	Y = xmalloc(sizeof(float) * I * k);
	Xs = xmalloc(sizeof(float) * U * k);
	Ys = xmalloc(sizeof(float) * I * k);
	for (int run = 0; run < 2; run++)
	{
		gm_mf_params p = als_params(k, 3, 0.1f, 2.0f, run == 0 ? 1 : 3);
		gm_mf_result res;
		gm_mf_data	d = mf_data(&t, X, Y);
		poll_watch	w = {0};
		gm_callbacks cb = {watch_poll, NULL, &w};
		double		total = 0.0;
		int			rc;

		p.threads = 1;
		w.t = &t;
		w.X = X;
		w.Y = Y;
		w.Xs = Xs;
		w.Ys = Ys;
		w.k = k;
		w.cg = p.cg_steps;
		/* the first run counts the polls of an iteration; the second stops in its second */
		w.stop_at = run == 0 ? 0 : polls_one + (int) rint_range(1, polls_one);
		for (int32_t r = 0; r < U; r++)
		{
			double		row = ((double) (t.R.indptr[r + 1] - t.R.indptr[r]) + k) * k * p.cg_steps;

			total += row;
			if (row > w.max_row)
				w.max_row = row;
		}
		for (int32_t i = 0; i < I; i++)
		{
			double		row = ((double) (t.Rt.indptr[i + 1] - t.Rt.indptr[i]) + k) * k * p.cg_steps;

			total += row;
			if (row > w.max_row)
				w.max_row = row;
		}
		/* the start gm_mf_train makes, so the first poll sees only trained rows */
		gm_factors_init(Xs, U, k, p.seed, 0);
		gm_factors_init(Ys, I, k, p.seed, 1);
		rc = gm_mf_train(&p, &d, &cb, &res, err, sizeof(err));
		if (run == 0)
		{
			CHECK(rc == GM_OK, "%s", err);
			polls_one = w.polls;
			CHECK(total > 4 * budget && w.polls >= total / (budget + w.max_row),
				  "%d polls for %.3g multiply-adds (one slice: %.3g)", w.polls, total,
				  budget + w.max_row);
		}
		else
		{
			CHECK(rc == GM_ECANCELED, "stop at poll %d of %d: rc %d", w.stop_at, w.polls, rc);
			CHECK(w.polls == w.stop_at, "polled %d times after stopping at %d", w.polls,
				  w.stop_at);
			/* nothing ran after the poll that said stop */
			CHECK(memcmp(X, Xs, sizeof(float) * U * k) == 0 &&
				  memcmp(Y, Ys, sizeof(float) * I * k) == 0,
				  "the factors changed after should_stop returned 1 (poll %d)", w.stop_at);
		}
		CHECK(w.max_work <= budget + w.max_row,
			  "run %d: %.4g multiply-adds between two polls, more than one slice (%.4g + a row of %.4g)",
			  run, w.max_work, budget, w.max_row);
	}
	free(X);
	free(Y);
	free(Xs);
	free(Ys);
	train_data_free(&t);
	return 0;
fail:
	free(X);
	free(Y);
	free(Xs);
	free(Ys);
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------------------ 18. parameters */

/* Defaults, names, range checks naming the parameter, and what is not available. */
static int
test_params_and_ops(void)
{
	char		err[GM_ERRLEN];
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL;
	const gm_algo_ops *ops;

	for (int a = 0; a < GM_ALG_COUNT; a++)
	{
		gm_mf_params p;
		gm_algorithm back;
		const char *name = gm_algorithm_name((gm_algorithm) a);

		gm_mf_params_defaults(&p, (gm_algorithm) a);
		CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_OK,
			  "defaults of %s rejected: %s", name, err);
		CHECK(name != NULL && gm_algorithm_from_name(name, &back) == GM_OK && (int) back == a,
			  "algorithm %d: name %s does not map back", a, name ? name : "(null)");
		if (a == GM_ALG_GRAPH_FILTER)
		{
			CHECK(p.factors == GM_GF_DEFAULT_FACTORS && p.iterations == GM_GF_DEFAULT_ITERATIONS &&
				  p.seed == 42 && p.backend == GM_BACKEND_CPU && p.tolerance == 0.0 &&
				  p.alpha == GM_GF_DEFAULT_ALPHA && p.biases == 0,
				  "%s: unexpected defaults", name);
			continue;
		}
		CHECK(p.factors == 64 && p.iterations == 15 && p.seed == 42 &&
			  p.backend == GM_BACKEND_CPU && p.tolerance == 0.0,
			  "%s: unexpected common defaults", name);
		if (a == GM_ALG_ALS_IMPLICIT)
			CHECK(p.regularization == 0.01f && p.alpha == 1.0f && p.cg_steps == 3 &&
				  p.alpha0 == 1.0f && p.nu == 0.0f && p.solver == GM_SOLVER_CG &&
				  p.block_size == 0 && p.block_sweeps == 1 && p.tf32 == -1 && p.biases == 0,
				  "implicit ALS defaults differ from today's");
		else
			CHECK(p.regularization == 0.05f && p.biases == 1 && p.inner_iterations == 3,
				  "%s: explicit defaults", name);
	}
	CHECK(strcmp(gm_algorithm_name(GM_ALG_ALS_IMPLICIT), "als") == 0 &&
		  strcmp(gm_algorithm_name(GM_ALG_ALS_EXPLICIT), "als_explicit") == 0 &&
		  strcmp(gm_algorithm_name(GM_ALG_CCD), "ccd") == 0, "algorithm names");
	{
		gm_algorithm a;

		CHECK(gm_algorithm_from_name("bpr", &a) == GM_EINVAL &&
			  gm_algorithm_from_name(NULL, &a) == GM_EINVAL &&
			  gm_algorithm_name(GM_ALG_COUNT) == NULL, "unknown names accepted");
	}

	/* every bad value is refused with a message naming its parameter */
	{
		struct
		{
			gm_algorithm alg;
			const char *param;
			int			which;
		}			bad[] = {
			{GM_ALG_ALS_IMPLICIT, "factors", 0}, {GM_ALG_CCD, "factors", 1},
			{GM_ALG_ALS_IMPLICIT, "iterations", 2}, {GM_ALG_ALS_IMPLICIT, "regularization", 3},
			{GM_ALG_ALS_EXPLICIT, "regularization", 4}, {GM_ALG_ALS_IMPLICIT, "alpha", 5},
			{GM_ALG_ALS_IMPLICIT, "cg_steps", 6}, {GM_ALG_ALS_IMPLICIT, "tolerance", 7},
			{GM_ALG_CCD, "inner_iterations", 8}, {GM_ALG_ALS_EXPLICIT, "biases", 9},
			{GM_ALG_ALS_IMPLICIT, "block_size", 10}, {GM_ALG_ALS_IMPLICIT, "threads", 11},
			{GM_ALG_ALS_IMPLICIT, "alpha0", 12}, {GM_ALG_ALS_IMPLICIT, "nu", 13},
			{GM_ALG_ALS_IMPLICIT, "nu", 14}, {GM_ALG_ALS_IMPLICIT, "block_sweeps", 15},
			{GM_ALG_ALS_IMPLICIT, "block_size", 16}, {GM_ALG_ALS_IMPLICIT, "tf32", 17},
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		{
			gm_mf_params p;

			gm_mf_params_defaults(&p, bad[i].alg);
			switch (bad[i].which)
			{
				case 0: p.factors = 0; break;
				case 1: p.factors = 1025; break;
				case 2: p.iterations = 0; break;
				case 3: p.regularization = -0.5f; break;
				case 4: p.regularization = NAN; break;
				case 5: p.alpha = INFINITY; break;
				case 6: p.cg_steps = 0; break;
				case 7: p.tolerance = -1e-3; break;
				case 8: p.inner_iterations = 0; break;
				case 9: p.biases = 2; break;
				case 10: p.solver = GM_SOLVER_BLOCK; p.block_size = p.factors + 1; break;
				case 11: p.threads = 5000; break;
				case 12: p.alpha0 = -1.0f; break;
				case 13: p.nu = NAN; break;
				case 14: p.nu = 1.5f; break;
				case 15: p.solver = GM_SOLVER_BLOCK; p.block_sweeps = 0; break;
				case 16: p.solver = GM_SOLVER_BLOCK; p.block_size = -1; break;
				case 17: p.tf32 = 2; break;
			}
			err[0] = '\0';
			CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_EINVAL,
				  "bad %s (case %d) accepted", bad[i].param, bad[i].which);
			CHECK(strstr(err, bad[i].param) == err, "bad %s: message \"%s\" does not start with its name",
				  bad[i].param, err);
		}
		/* fields of other algorithms are ignored */
		{
			gm_mf_params p;

			gm_mf_params_defaults(&p, GM_ALG_CCD);
			p.cg_steps = 0;
			p.alpha = NAN;
			CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_OK,
				  "ccd checked implicit-only fields: %s", err);
			gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
			p.biases = 7;
			p.inner_iterations = -1;
			CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_OK,
				  "implicit ALS checked explicit-only fields: %s", err);
		}
	}

	/* tables: every algorithm on the CPU (a missing one says so); no CUDA module here */
	ops = gm_algo_ops_get(GM_ALG_ALS_IMPLICIT, GM_BACKEND_CPU, err, sizeof(err));
	CHECK(ops != NULL && strcmp(ops->name, "cpu") == 0, "no CPU table for implicit ALS: %s", err);
	for (int a = 0; a < GM_ALG_COUNT; a++)
	{
		ops = gm_algo_ops_get((gm_algorithm) a, GM_BACKEND_CPU, err, sizeof(err));
		if (ops == NULL)
		{
			char		want[128];

			snprintf(want, sizeof(want), "algorithm %s is not available on the cpu backend",
					 gm_algorithm_name((gm_algorithm) a));
			CHECK(strcmp(err, want) == 0, "message \"%s\"", err);
		}
	}
	CHECK(gm_algo_ops_get(GM_ALG_COUNT, GM_BACKEND_CPU, err, sizeof(err)) == NULL,
		  "a table for an unknown algorithm");
	CHECK(gm_cuda_symbol("gm_cuda_algo_ops") == NULL, "a CUDA symbol without the module");
	{
		char		name[128];

		CHECK(gm_cuda_available("/nonexistent/gpumf_cuda.so", name, sizeof(name), err,
								sizeof(err)) == GM_ENOMODULE && name[0] == '\0' &&
			  strstr(err, "/nonexistent/gpumf_cuda.so") != NULL,
			  "a missing module: %s", err);
		CHECK(gm_algo_ops_get(GM_ALG_ALS_IMPLICIT, GM_BACKEND_CUDA, err, sizeof(err)) == NULL &&
			  strstr(err, "not loaded") != NULL, "a CUDA table without the module: %s", err);
	}
	/* the GPU's capabilities: none without the module; the fast paths' names */
	{
		gm_gpu_caps caps;
		char		buf[64],
					tiny[20];

		memset(&caps, 0x7f, sizeof(caps));
		CHECK(gm_cuda_caps(&caps, err, sizeof(err)) == GM_ENODEVICE && caps.cc == 0 &&
			  caps.fast == 0 && strstr(err, "not loaded") != NULL, "caps without the module: %s", err);
		gm_gpu_fast_paths(0, buf, sizeof(buf));
		CHECK(strcmp(buf, "") == 0, "no fast path: \"%s\"", buf);
		gm_gpu_fast_paths(GM_FAST_TF32_TENSOR_CORES | GM_FAST_VECTOR_ATOMICS | GM_FAST_LARGE_SMEM,
						  buf, sizeof(buf));
		CHECK(strcmp(buf, "tf32_tensor_cores,vector_atomics,large_smem") == 0, "all: \"%s\"", buf);
		gm_gpu_fast_paths(GM_FAST_LARGE_SMEM, buf, sizeof(buf));
		CHECK(strcmp(buf, "large_smem") == 0, "one: \"%s\"", buf);
		/* a short buffer keeps the whole names that fit, terminated */
		gm_gpu_fast_paths(GM_FAST_TF32_TENSOR_CORES | GM_FAST_VECTOR_ATOMICS, tiny, sizeof(tiny));
		CHECK(strcmp(tiny, "tf32_tensor_cores") == 0, "short buffer: \"%s\"", tiny);
	}

	/* gm_mf_train says what is missing, and changes nothing of the model then */
	{
		int32_t		U = 40,
					I = 30;
		gm_mf_result res;
		gm_mf_data	d;

		train_data_make(&t, U, I, 0.2, 1.0f);
		X = xmalloc(sizeof(float) * U * 8);
		Y = xmalloc(sizeof(float) * I * 8);
		d = mf_data(&t, X, Y);
		for (int c = 0; c < 6; c++)
		{
			gm_mf_params p = als_params(8, 3, 0.1f, 1.0f, 2);
			int			want = GM_ENOTSUP,
						rc;

			switch (c)
			{
				case 0: p.solver = (gm_solver) 7; want = GM_EINVAL; break;
				case 1: p.nu = -0.5f; want = GM_EINVAL; break;
				case 2: p.solver = GM_SOLVER_BLOCK; p.block_size = 9; want = GM_EINVAL; break;
				case 3:			/* biases on (ccd's default) without bias arrays */
					gm_mf_params_defaults(&p, GM_ALG_CCD);
					p.factors = 8;
					want = GM_EINVAL;
					break;
				case 4: p.backend = GM_BACKEND_CUDA; want = GM_ENODEVICE; break;
				case 5: d.Rt = &t.R; want = GM_EINVAL; break;	/* not the transpose */
			}
			err[0] = '\0';
			rc = gm_mf_train(&p, &d, NULL, &res, err, sizeof(err));
			CHECK(rc == want && err[0] != '\0', "case %d: rc %d, expected %d (%s)", c, rc, want, err);
			CHECK(res.iterations_run == 0, "case %d: %d iterations ran", c, res.iterations_run);
			d.Rt = &t.Rt;
		}
	}
	free(X);
	free(Y);
	train_data_free(&t);
	return 0;
fail:
	free(X);
	free(Y);
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------ 19. the implicit model's forms */

/*
 * A float64 reference of one exact ALS half-step of a dense weighted model:
 * every row x of X (n x k) becomes the minimiser of
 * sum_j W[r][j] (P[r][j] - x . y_j)^2 + lam[r] |x|^2, Y (m x k) fixed.
 * Written from the objective, not from gpumf's normal equations.
 */
static int
ref_half_step(int n, int m, int k, const double *W, const double *P,
			  const double *lam, double *X, const double *Y, double *kappa)
{
	double	   *A = xmalloc(sizeof(double) * k * k),
			   *b = xmalloc(sizeof(double) * k);
	int			rc = 0;

	for (int r = 0; r < n && rc == 0; r++)
	{
		memset(A, 0, sizeof(double) * k * k);
		memset(b, 0, sizeof(double) * k);
		for (int j = 0; j < m; j++)
		{
			double		w = W[(size_t) r * m + j],
						t = P[(size_t) r * m + j];

			for (int p = 0; p < k; p++)
			{
				b[p] += w * t * Y[(size_t) j * k + p];
				for (int q = 0; q < k; q++)
					A[p * k + q] += w * Y[(size_t) j * k + p] * Y[(size_t) j * k + q];
			}
		}
		for (int p = 0; p < k; p++)
			A[p * k + p] += lam[r];
		{
			/* trace(A) / lambda bounds A's condition number (its least eigenvalue is >= lambda) */
			double		tr = 0;

			for (int p = 0; p < k; p++)
				tr += A[p * k + p];
			if (lam[r] > 0 && tr / lam[r] > *kappa)
				*kappa = tr / lam[r];
		}
		rc = cholesky_solve(A, b, k);
		memcpy(X + (size_t) r * k, b, sizeof(double) * k);
	}
	free(A);
	free(b);
	return rc;
}

/* the transpose of a dense n x m matrix */
static double *
dense_t(const double *a, int n, int m)
{
	double	   *t = xmalloc(sizeof(double) * (size_t) n * m);

	for (int i = 0; i < n; i++)
		for (int j = 0; j < m; j++)
			t[(size_t) j * n + i] = a[(size_t) i * m + j];
	return t;
}

/* max |a - scale b| / max |scale b| over n values */
static double
rel_diff(const float *a, const double *b, int64_t n, double scale)
{
	double		num = 0,
				den = 0;

	for (int64_t i = 0; i < n; i++)
	{
		double		d = fabs(a[i] - scale * b[i]);

		if (!(d <= num))
			num = d;
		if (fabs(scale * b[i]) > den)
			den = fabs(scale * b[i]);
	}
	return den > 0 ? num / den : num;
}

/*
 * Training the general model with the exact solver gives the factors of a
 * float64 reference of the dense weighted model, from the same start:
 * form 0, the 2008 model (alpha0 = 1, nu = 0: weight c, target 1 on the
 * observed pairs, weight 1 target 0 elsewhere, a fixed lambda); form 1,
 * Rendle et al.'s (0/1 data; observed pairs (1 - s)^2 + alpha0 s^2, the
 * rest alpha0 s^2, lambda_R (n + alpha0 m)^nu), which is gpumf's model with
 * alpha = alpha0, regularization lambda_R (1 + alpha0), factors
 * sqrt(1 + alpha0) times Rendle's; form 2, gpumf's own general form.
 */
static int
test_model_forms(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL;
	double	   *W = NULL,
			   *P = NULL,
			   *Wt = NULL,
			   *Pt = NULL,
			   *Xr = NULL,
			   *Yr = NULL,
			   *lu = NULL,
			   *li = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 6; trial++)
	{
		int			form = trial % 3;
		int32_t		U = (int32_t) rint_range(20, 50),
					I = (int32_t) rint_range(15, 40);
		int			k = (int) rint_range(2, 12);
		float		alpha0 = form == 0 ? 1.0f : (float) (0.05 + runif() * 1.5),
					nu = form == 0 ? 0.0f : (float) (0.1 + 0.9 * runif()),
					lam = (float) (0.02 + runif() * 0.5),
					alpha = form == 1 ? alpha0 : (float) (runif() * 4.0);
		int			iters = 3;
		gm_mf_params p = als_params(k, 3, form == 1 ? lam * (1.0f + alpha0) : lam, alpha, iters);
		gm_mf_result res;
		gm_mf_data	d;
		double		scale = form == 1 ? sqrt(1.0 + alpha0) : 1.0,
					kappa = 1.0,
					tol,
					ex,
					ey;

		p.solver = GM_SOLVER_EXACT;
		p.alpha0 = alpha0;
		p.nu = nu;
		p.threads = (int) rint_range(1, 3);
		csr_random(&t.R, U, I, 0.05 + runif() * 0.2);
		if (form == 1)
			for (int64_t e = 0; e < t.R.nnz; e++)
				t.R.data[e] = 1.0f;
		CHECK(gm_csr_transpose(&t.R, &t.Rt, err, sizeof(err)) == GM_OK, "%s", err);
		X = xmalloc(sizeof(float) * U * k);
		Y = xmalloc(sizeof(float) * I * k);
		d = mf_data(&t, X, Y);
		CHECK(gm_mf_train(&p, &d, NULL, &res, err, sizeof(err)) == GM_OK, "form %d: %s", form, err);

		/* the reference, from the start gm_mf_train makes (divided by scale) */
		W = xmalloc(sizeof(double) * U * I);
		P = xmalloc(sizeof(double) * U * I);
		Xr = xmalloc(sizeof(double) * U * k);
		Yr = xmalloc(sizeof(double) * I * k);
		lu = xmalloc(sizeof(double) * U);
		li = xmalloc(sizeof(double) * I);
		{
			float	   *x0 = xmalloc(sizeof(float) * U * k),
					   *y0 = xmalloc(sizeof(float) * I * k);
			uint8_t    *mask;
			double	   *val = csr_dense(&t.R, &mask);

			gm_factors_init(x0, U, k, p.seed, 0);
			gm_factors_init(y0, I, k, p.seed, 1);
			for (int64_t i = 0; i < (int64_t) U * k; i++)
				Xr[i] = x0[i] / scale;
			for (int64_t i = 0; i < (int64_t) I * k; i++)
				Yr[i] = y0[i] / scale;
			for (int32_t u = 0; u < U; u++)
				for (int32_t i = 0; i < I; i++)
				{
					size_t		o = (size_t) u * I + i;

					if (form == 1)
					{
						W[o] = mask[o] ? 1.0 + alpha0 : alpha0;
						P[o] = mask[o] ? 1.0 / (1.0 + alpha0) : 0.0;
					}
					else
					{
						W[o] = mask[o] ? 1.0 + (double) alpha * (float) val[o] : alpha0;
						P[o] = mask[o] ? 1.0 : 0.0;
					}
				}
			for (int32_t u = 0; u < U; u++)
				lu[u] = (double) lam * pow((double) (t.R.indptr[u + 1] - t.R.indptr[u]) +
										   (double) alpha0 * I, nu);
			for (int32_t i = 0; i < I; i++)
				li[i] = (double) lam * pow((double) (t.Rt.indptr[i + 1] - t.Rt.indptr[i]) +
										   (double) alpha0 * U, nu);
			free(x0);
			free(y0);
			free(mask);
			free(val);
		}
		Wt = dense_t(W, U, I);
		Pt = dense_t(P, U, I);
		for (int it = 0; it < iters; it++)
		{
			CHECK(ref_half_step(U, I, k, W, P, lu, Xr, Yr, &kappa) == 0, "reference not SPD");
			CHECK(ref_half_step(I, U, k, Wt, Pt, li, Yr, Xr, &kappa) == 0, "reference not SPD");
		}
		ex = rel_diff(X, Xr, (int64_t) U * k, scale);
		ey = rel_diff(Y, Yr, (int64_t) I * k, scale);
		/*
		 * float32 solves lose about kappa * eps: 2e-4, or 0.1 kappa eps where
		 * the reference's systems are worse conditioned (kappa bounded by
		 * trace / lambda), at most 1e-2.  Measured over 72 draws: where kappa
		 * > 1000 (up to 3e5), error / (kappa eps) at most 0.08; the largest
		 * error of all 4.4e-5; the draw that failed, kappa 3.4e5, 5.4e-4
		 */
		tol = fmin(1e-2, fmax(2e-4, 0.1 * kappa * FLT_EPSILON));
		CHECK(ex < tol && ey < tol,
			  "form %d (%dx%d, k %d, alpha %g, alpha0 %g, nu %g, lambda %g): "
			  "X differs from the reference by %.3g, Y by %.3g (relative; tolerance %.3g, "
			  "condition number <= %.3g)",
			  form, U, I, k, alpha, alpha0, nu, lam, ex, ey, tol, kappa);
		/* the objective it reports is the reference's */
		{
			float	   *rx = xmalloc(sizeof(float) * U),
					   *ry = xmalloc(sizeof(float) * I);
			gm_csr		C;
			double		want = 0,
						wsum = 0,
						got;

			CHECK(gm_confidence(&t.R, alpha, &C, err, sizeof(err)) == GM_OK, "%s", err);
			gm_als_row_reg(&t.R, p.regularization, alpha0, nu, rx);
			gm_als_row_reg(&t.Rt, p.regularization, alpha0, nu, ry);
			for (int32_t u = 0; u < U; u++)
				CHECK(fabs(rx[u] - lu[u] * (form == 1 ? 1.0 + alpha0 : 1.0)) <= 1e-5 * rx[u],
					  "row ridge %d: %g", u, rx[u]);
			got = gm_als_objective(&C, X, Y, k, alpha0, p.regularization,
								   nu != 0.0f ? rx : NULL, nu != 0.0f ? ry : NULL, p.threads);
			for (int32_t u = 0; u < U; u++)
				for (int32_t i = 0; i < I; i++)
				{
					double		s = 0,
								w = form == 1 ? (P[(size_t) u * I + i] > 0 ? 1.0 + alpha : alpha0) :
						W[(size_t) u * I + i],
								tg = P[(size_t) u * I + i] > 0 ? 1.0 : 0.0;

					for (int f = 0; f < k; f++)
						s += (double) X[u * k + f] * Y[i * k + f];
					want += w * (tg - s) * (tg - s);
					wsum += w;
				}
			for (int32_t u = 0; u < U; u++)
				for (int f = 0; f < k; f++)
					want += rx[u] * (double) X[u * k + f] * X[u * k + f];
			for (int32_t i = 0; i < I; i++)
				for (int f = 0; f < k; f++)
					want += ry[i] * (double) Y[i * k + f] * Y[i * k + f];
			want /= wsum;
			free(rx);
			free(ry);
			gm_csr_free(&C);
			CHECK(fabs(got - want) <= 1e-5 * fabs(want) &&
				  fabs(res.final.loss - got) <= 1e-12 * fabs(got),
				  "form %d: objective %.10g, brute force %.10g, reported %.10g", form,
				  got, want, res.final.loss);
		}
		free(X);
		free(Y);
		free(W);
		free(P);
		free(Wt);
		free(Pt);
		free(Xr);
		free(Yr);
		free(lu);
		free(li);
		X = Y = NULL;
		W = P = Wt = Pt = Xr = Yr = lu = li = NULL;
		gm_csr_free(&t.R);
		gm_csr_free(&t.Rt);
	}
	return 0;
fail:
	free(X);
	free(Y);
	free(W);
	free(P);
	free(Wt);
	free(Pt);
	free(Xr);
	free(Yr);
	free(lu);
	free(li);
	gm_csr_free(&t.R);
	gm_csr_free(&t.Rt);
	return 1;
}

/* f(x) = 1/2 x^T A x - b^T x of a row's system (double), for the descent check */
static double
row_objective(const double *A, const double *b, const float *x, int k)
{
	double		f = 0;

	for (int p = 0; p < k; p++)
	{
		double		ax = 0;

		for (int q = 0; q < k; q++)
			ax += A[p * k + q] * x[q];
		f += 0.5 * x[p] * ax - b[p] * x[p];
	}
	return f;
}

/*
 * One row's solves against a float64 Cholesky of A = alpha0 Y^T Y +
 * sum (c - alpha0) y y^T + reg I: the exact solver; the block solver with
 * one block (exact too); the block solver with smaller blocks, whose error
 * shrinks as the sweeps grow and whose row objective never rises; CG with
 * k steps.  Random, well-conditioned Y; a fresh random start each time.
 */
static int
test_row_solvers(void)
{
	gm_csr		R = {0},
				C = {0};
	float	   *X = NULL,
			   *X0 = NULL,
			   *Y = NULL,
			   *G = NULL,
			   *reg = NULL;
	double	   *A = NULL,
			   *Af = NULL,
			   *b = NULL,
			   *bf = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 8; trial++)
	{
		int			k = (int) rint_range(3, 40);
		int32_t		U = 5,
					I = (int32_t) rint_range(120, 300);
		int32_t		u = (int32_t) rint_range(0, U - 1);
		float		alpha0 = (float) (0.05 + runif() * 2.0),
					alpha = (float) (runif() * 4.0),
					lam = (float) (0.05 + runif()),
					nu = trial % 2 ? (float) runif() : 0.0f;
		gm_als_side sd;
		double		den = 0,
					step = 0;

		csr_random(&R, U, I, 0.15);
		if (trial == 7)			/* an empty row: x -> 0 */
		{
			int64_t		gone = R.indptr[u + 1] - R.indptr[u];

			for (int64_t e = R.indptr[u + 1]; e < R.nnz; e++)
			{
				R.indices[e - gone] = R.indices[e];
				R.data[e - gone] = R.data[e];
			}
			for (int32_t v = u + 1; v <= U; v++)
				R.indptr[v] -= gone;
			R.nnz -= gone;
		}
		CHECK(gm_confidence(&R, alpha, &C, err, sizeof(err)) == GM_OK, "%s", err);
		Y = xmalloc(sizeof(float) * I * k);
		X = xmalloc(sizeof(float) * U * k);
		X0 = xmalloc(sizeof(float) * U * k);
		G = xmalloc(sizeof(float) * k * k);
		reg = xmalloc(sizeof(float) * U);
		A = xcalloc((size_t) k * k, sizeof(double));
		Af = xcalloc((size_t) k * k, sizeof(double));
		b = xcalloc(k, sizeof(double));
		bf = xcalloc(k, sizeof(double));
		fill_uniform(Y, (int64_t) I * k, -0.5 / sqrt(k), 0.5 / sqrt(k));
		fill_uniform(X0, (int64_t) U * k, -1.0, 1.0);
		gm_als_row_reg(&R, lam, alpha0, nu, reg);

		/* the reference system and its solution */
		for (int32_t i = 0; i < I; i++)
			for (int p = 0; p < k; p++)
				for (int q = 0; q < k; q++)
					A[p * k + q] += alpha0 * (double) Y[i * k + p] * Y[i * k + q];
		for (int p = 0; p < k; p++)
			for (int q = 0; q < k; q++)
				G[p * k + q] = (float) A[p * k + q] + (nu == 0.0f && p == q ? lam : 0.0f);
		for (int p = 0; p < k; p++)
			A[p * k + p] += reg[u];
		for (int64_t e = C.indptr[u]; e < C.indptr[u + 1]; e++)
		{
			const float *y = Y + (size_t) C.indices[e] * k;
			double		c = C.data[e];

			for (int p = 0; p < k; p++)
			{
				b[p] += c * y[p];
				for (int q = 0; q < k; q++)
					A[p * k + q] += (c - alpha0) * y[p] * y[q];
			}
		}
		memcpy(Af, A, sizeof(double) * k * k);
		memcpy(bf, b, sizeof(double) * k);
		CHECK(cholesky_solve(A, b, k) == 0, "reference system not SPD (k %d)", k);
		for (int p = 0; p < k; p++)
			den += b[p] * b[p];
		if (C.indptr[u + 1] == C.indptr[u])
			for (int p = 0; p < k; p++)
				den += (double) X0[u * k + p] * X0[u * k + p];
		den = sqrt(den);
		/*
		 * The block solver and CG go from the start x0 by steps computed in
		 * float32 from the residual b - A x0, so their floor is relative to
		 * the step x* - x0 rather than to x*: with a large ridge (nu near 1)
		 * x* is small against x0 (uniform in [-1, 1]), and one block's exact
		 * step was seen 1.4e-4 from x* relative to |x*| (1.7e-7 relative to
		 * the step).  In training x0 is the previous factors, near x*.
		 */
		for (int p = 0; p < k; p++)
			step += ((double) X0[u * k + p] - b[p]) * ((double) X0[u * k + p] - b[p]);
		step = sqrt(step) > den ? sqrt(step) : den;

		sd.C = &C;
		sd.X = X;
		sd.Y = Y;
		sd.G = G;
		sd.reg = nu == 0.0f ? NULL : reg;
		sd.alpha0 = alpha0;
		sd.k = k;
		/* solver, block size, sweeps: exact; one block; CG with k steps; then sweeps */
		for (int v = 0; v < 11; v++)
		{
			int			bs = v == 1 ? k : (int) rint_range(1, (k + 1) / 2),
						sweeps = v < 3 ? 1 : 1 << (v - 3);
			gm_solver	solver = v == 0 ? GM_SOLVER_EXACT : v == 2 ? GM_SOLVER_CG : GM_SOLVER_BLOCK;
			static double prev_err,
						prev_f;
			static int	prev_bs;
			double		e2 = 0,
						e_step,
						f;

			if (v >= 4)
				bs = prev_bs;	/* the same blocks, more sweeps */
			memcpy(X, X0, sizeof(float) * U * k);
			CHECK(gm_als_solve_rows(&sd, solver, k, bs, sweeps, u, u + 1,
									(int) rint_range(1, 2)) == GM_OK, "solve failed");
			for (int p = 0; p < k; p++)
				e2 += (X[u * k + p] - b[p]) * (X[u * k + p] - b[p]);
			e_step = sqrt(e2) / step;
			e2 = sqrt(e2) / den;
			f = row_objective(Af, bf, X + u * k, k);
			for (int32_t w = 0; w < U; w++)
				if (w != u)
					CHECK(memcmp(X + w * k, X0 + w * k, sizeof(float) * k) == 0,
						  "row %d changed though only row %d was solved", w, u);
			if (v <= 2)
				CHECK((v == 0 ? e2 : e_step) < 1e-4,
					  "%s (k %d, alpha0 %g, nu %g, %lld entries): relative error %.3g (%.3g of the step from x0)",
					  v == 0 ? "exact" : v == 1 ? "one block" : "CG k steps", k, alpha0, nu,
					  (long long) (C.indptr[u + 1] - C.indptr[u]), e2, e_step);
			else if (v > 3)
			{
				/*
				 * monotone down to the float32 floor: near it (cond * 6e-8,
				 * some 1e-6 here) the error moves by rounding (8e-7 -> 2e-6
				 * seen), hence 1e-5 absolute; the objective below is exact
				 */
				CHECK(e2 <= prev_err * 1.001 + 1e-5,
					  "block %d (k %d): error rose from %.3g to %.3g going to %d sweeps",
					  bs, k, prev_err, e2, sweeps);
				CHECK(f <= prev_f + 1e-9 * fabs(prev_f) + 1e-12,
					  "block %d (k %d): objective rose from %.10g to %.10g going to %d sweeps",
					  bs, k, prev_f, f, sweeps);
			}
			if (v == 10)
				CHECK(e_step < 1e-4, "block %d (k %d, alpha0 %g): %d sweeps leave a relative error %.3g of the step from x0",
					  bs, k, alpha0, sweeps, e_step);
			prev_err = e2;
			prev_f = f;
			prev_bs = bs;
		}
		free(X);
		free(X0);
		free(Y);
		free(G);
		free(reg);
		free(A);
		free(Af);
		free(b);
		free(bf);
		X = X0 = Y = G = reg = NULL;
		A = Af = b = bf = NULL;
		gm_csr_free(&R);
		gm_csr_free(&C);
	}
	return 0;
fail:
	free(X);
	free(X0);
	free(Y);
	free(G);
	free(reg);
	free(A);
	free(Af);
	free(b);
	free(bf);
	gm_csr_free(&R);
	gm_csr_free(&C);
	return 1;
}

/*
 * gm_mf_train with every solver and random alpha0, nu: the loss never rises
 * for the exact and block solvers (each step minimises the objective over
 * a row, or a block of it, exactly), and it is the objective of the
 * returned factors.
 */
static int
test_train_solvers(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 6; trial++)
	{
		int32_t		U = (int32_t) rint_range(80, 250),
					I = (int32_t) rint_range(60, 200);
		gm_mf_params p = als_params((int) rint_range(4, 24), 3, (float) (0.01 + runif() * 0.2),
									(float) (runif() * 5.0), 6);
		gm_mf_result res;
		gm_mf_data	d;
		train_log	log = {0};
		gm_callbacks cb = {NULL, log_iteration, &log};
		double		again;

		p.solver = (gm_solver) (trial % 3);
		p.alpha0 = (float) (0.02 + runif());
		p.nu = trial < 3 ? 0.0f : (float) runif();
		p.block_size = (int) rint_range(0, p.factors);
		p.block_sweeps = (int) rint_range(1, 3);
		p.threads = (int) rint_range(1, 3);
		train_data_make(&t, U, I, 0.03 + runif() * 0.05, p.alpha);
		X = xmalloc(sizeof(float) * U * p.factors);
		Y = xmalloc(sizeof(float) * I * p.factors);
		d = mf_data(&t, X, Y);
		CHECK(gm_mf_train(&p, &d, &cb, &res, err, sizeof(err)) == GM_OK, "%s", err);
		for (int i = 1; i < log.n && p.solver != GM_SOLVER_CG; i++)
			CHECK(log.loss[i] <= log.loss[i - 1] * (1.0 + 1e-6),
				  "solver %d (k %d, block %d x %d, alpha0 %g, nu %g): loss rose at iteration %d: %.10g -> %.10g",
				  p.solver, p.factors, p.block_size, p.block_sweeps, p.alpha0, p.nu, i + 1,
				  log.loss[i - 1], log.loss[i]);
		CHECK(log.loss[log.n - 1] < log.loss[0], "solver %d: loss did not decrease", p.solver);
		{
			float	   *rx = xmalloc(sizeof(float) * U),
					   *ry = xmalloc(sizeof(float) * I);

			gm_als_row_reg(&t.R, p.regularization, p.alpha0, p.nu, rx);
			gm_als_row_reg(&t.Rt, p.regularization, p.alpha0, p.nu, ry);
			again = gm_als_objective(&t.C, X, Y, p.factors, p.alpha0, p.regularization,
									 p.nu != 0.0f ? rx : NULL, p.nu != 0.0f ? ry : NULL, 0);
			free(rx);
			free(ry);
		}
		CHECK(fabs(again - res.final.loss) <= 1e-6 * fabs(again),
			  "solver %d: objective of the factors %.10g, final loss %.10g", p.solver, again,
			  res.final.loss);
		free(X);
		free(Y);
		X = Y = NULL;
		train_data_free(&t);
	}
	return 0;
fail:
	free(X);
	free(Y);
	train_data_free(&t);
	return 1;
}

/* ------------------------------------------------ 20. ranking metrics */

/*
 * gm_rank_eval against a brute force: small integer factors (exact float
 * scores, so ties are exact and go to the lower item), a full sort per
 * user, recall / NDCG / precision as LightGCN computes them.
 */
static int
test_rank_eval(void)
{
	gm_csr		tr = {0},
				te = {0};
	float	   *X = NULL,
			   *Y = NULL;
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 10; trial++)
	{
		int32_t		U = (int32_t) rint_range(1, 60),
					I = (int32_t) rint_range(2, 80);
		int			k = (int) rint_range(1, 6),
					K = (int) rint_range(1, 25);
		gm_rank_result got;
		double		rec = 0,
					nd = 0,
					pr = 0;
		int64_t		n = 0;
		uint8_t    *mtr,
				   *mte;
		double	   *dtr,
				   *dte;

		csr_random(&tr, U, I, runif() * 0.3);
		csr_random(&te, U, I, runif() * 0.2);
		X = xmalloc(sizeof(float) * U * k);
		Y = xmalloc(sizeof(float) * I * k);
		for (int64_t i = 0; i < (int64_t) U * k; i++)
			X[i] = (float) rint_range(-3, 3);
		for (int64_t i = 0; i < (int64_t) I * k; i++)
			Y[i] = (float) rint_range(-3, 3);
		CHECK(gm_rank_eval(&tr, &te, X, Y, k, K, (int) rint_range(0, 3), GM_BACKEND_CPU, NULL, &got, err,
						   sizeof(err)) == GM_OK, "%s", err);
		dtr = csr_dense(&tr, &mtr);
		dte = csr_dense(&te, &mte);
		for (int32_t u = 0; u < U; u++)
		{
			int32_t    *order = xmalloc(sizeof(int32_t) * I);
			double	   *sc = xmalloc(sizeof(double) * I);
			int			m = 0,
						hits = 0,
						ntest = 0;
			double		dcg = 0,
						idcg = 0;

			for (int32_t i = 0; i < I; i++)
				ntest += mte[(size_t) u * I + i];
			if (ntest > 0)
			{
				for (int32_t i = 0; i < I; i++)
				{
					double		s = 0;

					for (int f = 0; f < k; f++)
						s += (double) X[u * k + f] * Y[i * k + f];
					sc[i] = s;
					if (!mtr[(size_t) u * I + i])
						order[m++] = i;
				}
				/* insertion sort: score descending, index ascending */
				for (int a = 1; a < m; a++)
					for (int c = a; c > 0 && (sc[order[c]] > sc[order[c - 1]] ||
											  (sc[order[c]] == sc[order[c - 1]] &&
											   order[c] < order[c - 1])); c--)
					{
						int32_t		tmp = order[c];

						order[c] = order[c - 1];
						order[c - 1] = tmp;
					}
				for (int r = 0; r < K && r < m; r++)
					if (mte[(size_t) u * I + order[r]])
					{
						hits++;
						dcg += 1.0 / log2(r + 2.0);
					}
				for (int r = 0; r < K && r < ntest && r < I; r++)
					idcg += 1.0 / log2(r + 2.0);
				rec += (double) hits / ntest;
				nd += dcg / idcg;
				pr += (double) hits / (K < I ? K : I);
				n++;
			}
			free(order);
			free(sc);
		}
		free(mtr);
		free(mte);
		free(dtr);
		free(dte);
		if (n > 0)
		{
			rec /= n;
			nd /= n;
			pr /= n;
		}
		CHECK(got.users == n && fabs(got.recall - rec) < 1e-12 && fabs(got.ndcg - nd) < 1e-12 &&
			  fabs(got.precision - pr) < 1e-12,
			  "%dx%d k %d K %d: users %lld/%lld recall %.12g/%.12g ndcg %.12g/%.12g precision %.12g/%.12g",
			  U, I, k, K, (long long) got.users, (long long) n, got.recall, rec, got.ndcg, nd,
			  got.precision, pr);
		free(X);
		free(Y);
		X = Y = NULL;
		gm_csr_free(&tr);
		gm_csr_free(&te);
	}
	{
		gm_rank_metric m;
		int			K;

		CHECK(gm_rank_metric_parse("recall@20", &m, &K, err, sizeof(err)) == GM_OK &&
			  m == GM_METRIC_RECALL && K == 20, "recall@20");
		CHECK(gm_rank_metric_parse("NDCG@5", &m, &K, err, sizeof(err)) == GM_OK &&
			  m == GM_METRIC_NDCG && K == 5, "NDCG@5");
		CHECK(gm_rank_metric_parse("precision@1000", &m, &K, err, sizeof(err)) == GM_OK &&
			  m == GM_METRIC_PRECISION && K == 1000, "precision@1000");
		CHECK(gm_rank_metric_parse("recall@0", &m, &K, err, sizeof(err)) == GM_EINVAL &&
			  gm_rank_metric_parse("recall", &m, &K, err, sizeof(err)) == GM_EINVAL &&
			  gm_rank_metric_parse("mrr@10", &m, &K, err, sizeof(err)) == GM_EINVAL &&
			  gm_rank_metric_parse("recall@10x", &m, &K, err, sizeof(err)) == GM_EINVAL &&
			  strstr(err, "recall@10x") != NULL, "bad metrics accepted: %s", err);
	}
	return 0;
fail:
	free(X);
	free(Y);
	gm_csr_free(&tr);
	gm_csr_free(&te);
	return 1;
}

/*
 * The bare call's search (gm_auto_tune) on planted implicit data and on
 * ratings: it runs trials, keeps what is fixed, reports its best, and beats
 * the fixed defaults' held-out metric.
 */
static int
test_auto_tune(void)
{
	gm_csr		R = {0},
				Rt = {0},
				tr = {0},
				trt = {0},
				va = {0};
	gm_tune_trial trials[40];
	gm_auto_config c;
	gm_auto_result r;
	char		err[GM_ERRLEN];

	/* planted: 300 users in 6 groups, each group on its own 30 of 180 items */
	{
		coo			m;
		int64_t		n = 0;

		m.r = malloc(sizeof(int32_t) * 300 * 30);
		m.c = malloc(sizeof(int32_t) * 300 * 30);
		m.v = malloc(sizeof(float) * 300 * 30);
		for (int32_t u = 0; u < 300; u++)
			for (int32_t j = 0; j < 30; j++)
				if (runif() < 0.4)
				{
					m.r[n] = u;
					m.c[n] = (u % 6) * 30 + j;
					m.v[n++] = 1.0f;
				}
		CHECK(gm_csr_from_coo(300, 180, n, m.r, m.c, m.v, &R, err, sizeof(err)) == GM_OK, "%s", err);
		free(m.r);
		free(m.c);
		free(m.v);
	}
	CHECK(gm_split_holdout(&R, 0.2, 5, &tr, &va, err, sizeof(err)) == GM_OK &&
		  gm_csr_transpose(&tr, &trt, err, sizeof(err)) == GM_OK, "%s", err);
	memset(&c, 0, sizeof(c));
	gm_mf_params_defaults(&c.base, GM_ALG_ALS_IMPLICIT);
	c.base.solver = GM_SOLVER_BLOCK;
	c.base.threads = 2;
	c.metric = GM_METRIC_RECALL;
	c.K = 10;
	c.eval_every = 2;
	c.max_iterations = 10;
	c.max_factors = 32;
	c.max_trials = 40;
	c.seconds = 60;
	CHECK(gm_auto_tune(&c, &tr, &trt, &va, NULL, trials, &r, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(r.trials >= 5 && r.best_trial >= 0 && r.best_trial < r.trials &&
		  r.metric == trials[r.best_trial].metric && r.best.factors <= 32 &&
		  r.best.iterations >= 1 && r.best.iterations <= 10,
		  "implicit search: %d trials, best %d, factors %d, iterations %d", r.trials,
		  r.best_trial, r.best.factors, r.best.iterations);
	for (int t = 0; t < r.trials; t++)
		CHECK(trials[t].metric <= r.metric, "trial %d beats the reported best", t + 1);
	/*
	 * planted groups: a model that finds them ranks the user's group first
	 * (recall@10 about 10 / 20 unseen items of the group, 0.5), one that
	 * does not about 10 / 170 (0.06)
	 */
	CHECK(r.metric > 0.3, "held-out recall@10 %.3f on planted groups", r.metric);

	/* fixed fields stay as given */
	c.fixed = GM_AUTO_FIX_FACTORS | GM_AUTO_FIX_NU;
	c.base.factors = 8;
	c.base.nu = 0.25f;
	CHECK(gm_auto_tune(&c, &tr, &trt, &va, NULL, trials, &r, err, sizeof(err)) == GM_OK, "%s", err);
	for (int t = 0; t < r.trials; t++)
		CHECK(trials[t].p.factors == 8 && trials[t].p.nu == 0.25f,
			  "trial %d moved a fixed field: factors %d, nu %g", t + 1, trials[t].p.factors,
			  trials[t].p.nu);

	/* ratings: lambda and factors by held-out RMSE, finite */
	for (int64_t e = 0; e < R.nnz; e++)
		R.data[e] = (float) (1 + (R.indices[e] % 5));
	gm_csr_free(&tr);
	gm_csr_free(&trt);
	gm_csr_free(&va);
	CHECK(gm_split_holdout(&R, 0.2, 5, &tr, &va, err, sizeof(err)) == GM_OK &&
		  gm_csr_transpose(&tr, &trt, err, sizeof(err)) == GM_OK, "%s", err);
	memset(&c, 0, sizeof(c));
	gm_mf_params_defaults(&c.base, GM_ALG_ALS_EXPLICIT);
	c.base.threads = 2;
	c.max_iterations = 8;
	c.max_factors = 32;
	c.max_trials = 40;
	c.seconds = 60;
	CHECK(gm_auto_tune(&c, &tr, &trt, &va, NULL, trials, &r, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(r.trials >= 3 && isfinite(r.metric) && r.metric < 1.0,
		  "explicit search: %d trials, held-out RMSE %g", r.trials, r.metric);
	for (int t = 0; t < r.trials; t++)
		CHECK(trials[t].metric >= r.metric, "trial %d has a lower RMSE than the best", t + 1);
	gm_csr_free(&R);
	gm_csr_free(&Rt);
	gm_csr_free(&tr);
	gm_csr_free(&trt);
	gm_csr_free(&va);
	return 0;
fail:
	gm_csr_free(&R);
	gm_csr_free(&Rt);
	gm_csr_free(&tr);
	gm_csr_free(&trt);
	gm_csr_free(&va);
	return 1;
}

/* The holdout split: a partition of R, per-user counts, seeded. */
static int
test_split(void)
{
	gm_csr		R = {0},
				a = {0},
				b = {0},
				a2 = {0},
				b2 = {0};
	char		err[GM_ERRLEN];

	for (int trial = 0; trial < 8; trial++)
	{
		int32_t		U = (int32_t) rint_range(1, 80),
					I = (int32_t) rint_range(1, 60);
		double		frac = trial == 0 ? 0.0 : runif() * 0.9;
		uint64_t	seed = rnext();
		uint8_t    *mr,
				   *ma,
				   *mb;
		double	   *dr,
				   *da,
				   *db;

		csr_random(&R, U, I, runif() * 0.5);
		CHECK(gm_split_holdout(&R, frac, seed, &a, &b, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(csr_valid(&a) == NULL && csr_valid(&b) == NULL, "invalid CSR: %s %s",
			  csr_valid(&a) ? csr_valid(&a) : "", csr_valid(&b) ? csr_valid(&b) : "");
		CHECK(a.nnz + b.nnz == R.nnz, "entries lost: %lld + %lld != %lld", (long long) a.nnz,
			  (long long) b.nnz, (long long) R.nnz);
		dr = csr_dense(&R, &mr);
		da = csr_dense(&a, &ma);
		db = csr_dense(&b, &mb);
		for (int64_t i = 0; i < (int64_t) U * I; i++)
			CHECK(mr[i] == (ma[i] | mb[i]) && !(ma[i] & mb[i]) &&
				  dr[i] == (ma[i] ? da[i] : db[i]), "not a partition of R at %lld", (long long) i);
		free(mr);
		free(ma);
		free(mb);
		free(dr);
		free(da);
		free(db);
		for (int32_t u = 0; u < U; u++)
		{
			int64_t		n = R.indptr[u + 1] - R.indptr[u],
						want = n < 2 || frac == 0.0 ? 0 : llround(frac * n);

			if (n >= 2 && frac > 0.0)
				want = want < 1 ? 1 : want > n - 1 ? n - 1 : want;
			CHECK(b.indptr[u + 1] - b.indptr[u] == want, "user %d: %lld of %lld held out, expected %lld",
				  u, (long long) (b.indptr[u + 1] - b.indptr[u]), (long long) n, (long long) want);
		}
		CHECK(gm_split_holdout(&R, frac, seed, &a2, &b2, err, sizeof(err)) == GM_OK &&
			  b2.nnz == b.nnz && memcmp(b2.indices, b.indices, sizeof(int32_t) * b.nnz) == 0,
			  "the same seed split differently");
		gm_csr_free(&a);
		gm_csr_free(&b);
		gm_csr_free(&a2);
		gm_csr_free(&b2);
		gm_csr_free(&R);
	}
	CHECK(gm_split_holdout(&R, 1.0, 1, &a, &b, err, sizeof(err)) == GM_EINVAL &&
		  strstr(err, "holdout") != NULL, "holdout 1 accepted");

	/*
	 * a sample of the users: about max_users of them hold rows out (as many
	 * as the full split gives them), the others keep every row
	 */
	csr_random(&R, 2000, 40, 0.3);
	CHECK(gm_split_holdout(&R, 0.25, 9, &a, &b, err, sizeof(err)) == GM_OK &&
		  gm_split_holdout_users(&R, 0.25, 9, 200, &a2, &b2, err, sizeof(err)) == GM_OK, "%s", err);
	{
		int32_t		held_users = 0,
					eligible = 0;	/* users with two rows or more */
		double		expect;

		CHECK(a2.nnz + b2.nnz == R.nnz, "sampled split lost entries");
		for (int32_t u = 0; u < R.n_rows; u++)
		{
			int64_t		n2 = b2.indptr[u + 1] - b2.indptr[u];

			CHECK(n2 == 0 || n2 == b.indptr[u + 1] - b.indptr[u],
				  "user %d: %lld held out in the sample, %lld in the full split", u,
				  (long long) n2, (long long) (b.indptr[u + 1] - b.indptr[u]));
			held_users += n2 > 0;
			eligible += R.indptr[u + 1] - R.indptr[u] >= 2;
		}
		expect = 200.0 * eligible / R.n_rows;
		CHECK(held_users >= 0.6 * expect && held_users <= 1.4 * expect,
			  "%d users sampled for about %.0f (200 of %d users, %d with two rows or more)",
			  held_users, expect, R.n_rows, eligible);
	}
	gm_csr_free(&a);
	gm_csr_free(&b);
	gm_csr_free(&a2);
	gm_csr_free(&b2);
	CHECK(gm_split_holdout_users(&R, 0.25, 9, 5000, &a2, &b2, err, sizeof(err)) == GM_OK &&
		  gm_split_holdout(&R, 0.25, 9, &a, &b, err, sizeof(err)) == GM_OK &&
		  b2.nnz == b.nnz && memcmp(b2.indices, b.indices, sizeof(int32_t) * b.nnz) == 0,
		  "max_users above the users' count is not the full split");
	gm_csr_free(&a);
	gm_csr_free(&b);
	gm_csr_free(&a2);
	gm_csr_free(&b2);
	gm_csr_free(&R);
	return 0;
fail:
	gm_csr_free(&R);
	gm_csr_free(&a);
	gm_csr_free(&b);
	gm_csr_free(&a2);
	gm_csr_free(&b2);
	return 1;
}

/* ------------------------------------------------ 21. early stop, sessions */

typedef struct
{
	int			n;
	int			iters[64];
	double		value[64];
	gm_rank_metric metric;
} eval_log;

static void
log_eval(void *arg, int iteration, const gm_rank_result *r)
{
	eval_log   *l = arg;

	if (l->n < 64)
	{
		l->iters[l->n] = iteration;
		l->value[l->n] = gm_rank_value(r, l->metric);
	}
	l->n++;
}

/*
 * gm_mf_train_eval: evaluations every `every` iterations and after the
 * last; stops once `patience` evaluations did not beat the best; with
 * keep_best the factors returned score the best value.  Planted data
 * (gm_synth) so that the metric means something.
 */
static int
test_train_eval(void)
{
	gm_synth	g;
	gm_csr		R = {0},
				Rt = {0},
				tr = {0},
				te = {0},
				trt = {0};
	float	   *X = NULL,
			   *Y = NULL;
	char		err[GM_ERRLEN];
	int			stopped = 0;

	memset(&g, 0, sizeof(g));
	g.n_users = 400;
	g.n_items = 150;
	g.n_rows = 12000;
	g.min_per_user = 5;
	g.clusters = 6;
	g.affinity = 0.8;
	g.seed = rnext();
	CHECK(gm_synth_init(&g, err, sizeof(err)) == GM_OK, "%s", err);
	{
		int64_t		cap = 0;
		int32_t    *r,
				   *c;
		float	   *v;
		uint8_t    *ho,
				   *seen = xcalloc(g.n_items, 1);
		int64_t		n = 0;

		for (int32_t u = 0; u < g.n_users; u++)
			cap += g.counts[u];
		r = xmalloc(sizeof(int32_t) * cap);
		c = xmalloc(sizeof(int32_t) * cap);
		v = xmalloc(sizeof(float) * cap);
		ho = xmalloc(cap);
		for (int32_t u = 0; u < g.n_users; u++)
		{
			int32_t		m = gm_synth_user(&g, u, c + n, v + n, ho + n, seen);

			for (int32_t j = 0; j < m; j++)
				r[n + j] = u;
			n += m;
		}
		CHECK(gm_csr_from_coo(g.n_users, g.n_items, n, r, c, v, &R, err, sizeof(err)) == GM_OK, "%s", err);
		free(r);
		free(c);
		free(v);
		free(ho);
		free(seen);
	}
	gm_synth_free(&g);
	CHECK(gm_split_holdout(&R, 0.25, rnext(), &tr, &te, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(gm_csr_transpose(&tr, &trt, err, sizeof(err)) == GM_OK, "%s", err);
	(void) Rt;

	/*
	 * trials 0-3 draw their settings; should none of them have stopped on
	 * the patience (a drawn setting can keep improving to the end), up to six
	 * more with a check every iteration and a patience of 1 make sure the
	 * stopping path is taken
	 */
	for (int trial = 0; trial < 4 || (stopped == 0 && trial < 10); trial++)
	{
		gm_mf_params p = als_params(16, 3, 0.05f, 2.0f, 12);
		gm_mf_data	d;
		gm_mf_result res;
		gm_mf_eval	ev;
		eval_log	el = {0};
		gm_rank_result check;

		memset(&ev, 0, sizeof(ev));
		ev.test = &te;
		ev.metric = el.metric = (gm_rank_metric) (trial % 3);
		ev.K = (int) rint_range(3, 20);
		ev.every = (int) rint_range(1, 3);
		ev.patience = trial == 0 ? 0 : (int) rint_range(1, 2);
		ev.keep_best = trial != 3;
		if (trial >= 4)
		{
			ev.every = 1;
			ev.patience = 1;
		}
		ev.on_eval = log_eval;
		ev.arg = &el;
		/* a large ridge late makes the metric fall and the patience run out */
		p.regularization = trial >= 2 ? 30.0f : 0.05f;
		p.solver = GM_SOLVER_EXACT;
		p.threads = 2;
		X = xmalloc(sizeof(float) * tr.n_rows * p.factors);
		Y = xmalloc(sizeof(float) * tr.n_cols * p.factors);
		memset(&d, 0, sizeof(d));
		d.R = &tr;
		d.Rt = &trt;
		d.X = X;
		d.Y = Y;
		CHECK(gm_mf_train_eval(&p, &d, NULL, &ev, &res, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(el.n >= 1, "no evaluation");
		for (int i = 0; i < el.n; i++)
			CHECK(el.iters[i] % ev.every == 0 || el.iters[i] == res.iterations_run,
				  "evaluated after iteration %d, every %d", el.iters[i], ev.every);
		CHECK(el.iters[el.n - 1] == res.iterations_run || res.iterations_run % ev.every != 0 ||
			  el.iters[el.n - 1] == res.iterations_run, "the last iteration was not evaluated");
		{
			double		best = -1;
			int			bi = 0,
						since = 0,
						want_stop = 0;

			for (int i = 0; i < el.n; i++)
			{
				if (el.value[i] > best)
				{
					best = el.value[i];
					bi = el.iters[i];
					since = 0;
				}
				else
					since++;
				if (ev.patience > 0 && since >= ev.patience)
				{
					want_stop = 1;
					CHECK(i == el.n - 1, "went on after the patience ran out");
				}
			}
			CHECK(ev.best == best && ev.best_iteration == bi,
				  "best %.6g at %d, the log says %.6g at %d", ev.best, ev.best_iteration, best, bi);
			if (want_stop)
			{
				CHECK(res.iterations_run < p.iterations || el.iters[el.n - 1] == p.iterations,
					  "did not stop");
				stopped++;
			}
			else
				CHECK(res.iterations_run == p.iterations, "stopped at %d of %d without cause",
					  res.iterations_run, p.iterations);
		}
		CHECK(gm_rank_eval(&tr, &te, X, Y, p.factors, ev.K, p.threads, GM_BACKEND_CPU, NULL, &check, err,
						   sizeof(err)) == GM_OK, "%s", err);
		if (ev.keep_best)
			CHECK(gm_rank_value(&check, ev.metric) == ev.best,
				  "keep_best: the returned model scores %.8g, the best was %.8g",
				  gm_rank_value(&check, ev.metric), ev.best);
		else
			CHECK(gm_rank_value(&check, ev.metric) == el.value[el.n - 1],
				  "the returned model scores %.8g, the last evaluation %.8g",
				  gm_rank_value(&check, ev.metric), el.value[el.n - 1]);
		CHECK(trial >= 2 || ev.best > 0.05, "the planted structure was not learnt: %s %.4g",
			  gm_rank_metric_name(ev.metric), ev.best);
		free(X);
		free(Y);
		X = Y = NULL;
	}
	CHECK(stopped >= 1, "the patience never stopped a training");
	gm_csr_free(&R);
	gm_csr_free(&tr);
	gm_csr_free(&te);
	gm_csr_free(&trt);
	return 0;
fail:
	free(X);
	free(Y);
	gm_csr_free(&R);
	gm_csr_free(&tr);
	gm_csr_free(&te);
	gm_csr_free(&trt);
	return 1;
}

/*
 * A session trains one dataset many times: with the CPU table (which can
 * reset) each training gives bit for bit what a fresh gm_mf_train gives,
 * whatever the previous one's factors, solver or alpha were.
 */
static int
test_session(void)
{
	train_data	t = {0};
	float	   *X = NULL,
			   *Y = NULL,
			   *X2 = NULL,
			   *Y2 = NULL;
	char		err[GM_ERRLEN];
	gm_mf_session *s = gm_mf_session_create();
	int32_t		U = 150,
				I = 90;

	CHECK(s != NULL, "no session");
	train_data_make(&t, U, I, 0.06, 1.0f);
	for (int trial = 0; trial < 5; trial++)
	{
		gm_mf_params p = als_params((int) rint_range(2, 20), 2, (float) (0.01 + runif()),
									(float) (runif() * 5.0), (int) rint_range(1, 4));
		gm_mf_result r1,
					r2;
		gm_mf_data	d;

		p.solver = (gm_solver) rint_range(0, 2);
		p.alpha0 = (float) (0.1 + runif());
		p.nu = (float) runif();
		p.threads = 1;
		X = xmalloc(sizeof(float) * U * p.factors);
		Y = xmalloc(sizeof(float) * I * p.factors);
		X2 = xmalloc(sizeof(float) * U * p.factors);
		Y2 = xmalloc(sizeof(float) * I * p.factors);
		d = mf_data(&t, X, Y);
		CHECK(gm_mf_session_train(s, &p, &d, NULL, NULL, &r1, err, sizeof(err)) == GM_OK, "%s", err);
		d = mf_data(&t, X2, Y2);
		CHECK(gm_mf_train(&p, &d, NULL, &r2, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(memcmp(X, X2, sizeof(float) * U * p.factors) == 0 &&
			  memcmp(Y, Y2, sizeof(float) * I * p.factors) == 0 && r1.final.loss == r2.final.loss,
			  "training %d in a session differs from a fresh one", trial + 1);
		CHECK(gm_mf_session_reuses(s) == trial, "%d reuses after %d trainings",
			  gm_mf_session_reuses(s), trial + 1);
		free(X);
		free(Y);
		free(X2);
		free(Y2);
		X = Y = X2 = Y2 = NULL;
	}
	gm_mf_session_free(s);
	train_data_free(&t);
	return 0;
fail:
	gm_mf_session_free(s);
	free(X);
	free(Y);
	free(X2);
	free(Y2);
	train_data_free(&t);
	return 1;
}

/*
 * gm_mf_warmup builds a valid problem and trains it for every algorithm and
 * solver (on the CPU here; on a GPU it loads the kernels the same training
 * uses), factors above the problem's rows and columns included.
 */
static int
test_warmup(void)
{
	char		err[GM_ERRLEN];
	const int	factors[3] = {8, 64, 512};

	for (int a = 0; a < GM_ALG_COUNT; a++)
		for (int s = 0; s < (a == GM_ALG_ALS_IMPLICIT ? GM_SOLVER_COUNT : 1); s++)
			for (int f = 0; f < 3; f++)
			{
				gm_mf_params p;

				gm_mf_params_defaults(&p, (gm_algorithm) a);
				p.backend = GM_BACKEND_CPU;
				p.factors = factors[f];
				p.solver = (gm_solver) s;
				p.iterations = 50;	/* the warm-up trains one */
				CHECK(gm_mf_warmup(&p, err, sizeof(err)) == GM_OK,
					  "%s, solver %d, factors %d: %s", gm_algorithm_name(p.algorithm), s,
					  p.factors, err);
			}
	/* a bad parameter fails the warm-up as it would fail the training */
	{
		gm_mf_params p;

		gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
		p.backend = GM_BACKEND_CPU;
		p.factors = 0;
		CHECK(gm_mf_warmup(&p, err, sizeof(err)) != GM_OK && err[0] != '\0',
			  "factors 0 warmed up");
	}
	return 0;
fail:
	return 1;
}

/*
 * gm_mf_device_memory: the CUDA backend's bytes by part, against the sizes
 * the issue of scale sets: the CG solver within 20 bytes an interaction
 * beside the factors and a fixed work area, for any number of rows; the
 * block solver 12 bytes an interaction more (two predictions, a 4-byte
 * permutation); explicit ALS and CCD++ within 20.
 */
static int
test_gpus_param(void)
{
	gm_mf_params p;
	char		err[GM_ERRLEN];

	gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
	CHECK(p.gpus == 1, "one GPU by default, not %d", p.gpus);
	p.gpus = 2;
	CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_OK, "two GPUs for implicit ALS: %s", err);
	p.gpus = GM_MAX_GPUS + 1;
	CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_EINVAL && strstr(err, "gpus") != NULL,
		  "more GPUs than GM_MAX_GPUS refused: %s", err);
	p.gpus = -1;
	CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_EINVAL, "negative gpus refused");
	gm_mf_params_defaults(&p, GM_ALG_ALS_EXPLICIT);
	p.gpus = 2;
	CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_OK, "two GPUs for explicit ALS: %s", err);
	gm_mf_params_defaults(&p, GM_ALG_CCD);
	p.gpus = 2;
	CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_OK, "two GPUs for CCD++: %s", err);
	gm_mf_params_defaults(&p, GM_ALG_GRAPH_FILTER);
	p.gpus = 2;
	CHECK(gm_mf_params_check(&p, err, sizeof(err)) == GM_ENOTSUP &&
		  strstr(err, "implicit ALS, explicit ALS and CCD++ only") != NULL,
		  "graph_filter on two GPUs refused: %s", err);
	return 0;
fail:
	return 1;
}

/*
 * gm_csr_cut_rows: shares of about equal work, a row weighing its entries
 * plus row_weight; contiguous, covering every row.
 */
static int
test_cut_rows(void)
{
	int32_t		nr = (int32_t) rint_range(200, 2000),
				cut[GM_MAX_GPUS + 1];
	int64_t		n = 0;
	int32_t    *u,
			   *c;
	float	   *v;
	gm_csr		A;
	char		err[GM_ERRLEN];

	/* the first tenth of the rows hold most entries (popular items first) */
	u = xmalloc(sizeof(int32_t) * (size_t) nr * 60);
	c = xmalloc(sizeof(int32_t) * (size_t) nr * 60);
	v = xmalloc(sizeof(float) * (size_t) nr * 60);
	for (int32_t r = 0; r < nr; r++)
	{
		int			len = r < nr / 10 ? 50 : 1 + (int) rint_range(0, 2);

		for (int j = 0; j < len; j++)
		{
			u[n] = r;
			c[n] = j;
			v[n] = 1.0f;
			n++;
		}
	}
	CHECK(gm_csr_from_coo(nr, 64, n, u, c, v, &A, err, sizeof(err)) == GM_OK, "%s", err);
	for (int ndev = 1; ndev <= 4; ndev++)
		for (int wi = 0; wi < 3; wi++)
		{
			double		w = wi == 0 ? 0 : wi == 1 ? 20 : 1e6,
						total = (double) A.nnz + w * nr,
						most = 0;

			gm_csr_cut_rows(&A, ndev, w, cut);
			CHECK(cut[0] == 0 && cut[ndev] == nr, "cuts cover the rows");
			for (int i = 0; i < ndev; i++)
			{
				double		work = (double) (A.indptr[cut[i + 1]] - A.indptr[cut[i]]) +
					w * (cut[i + 1] - cut[i]);

				CHECK(cut[i] <= cut[i + 1], "cuts ascend");
				most = work > most ? work : most;
			}
			/* within a row's work (50 entries + w) of an even share */
			CHECK(most <= total / ndev + 50 + w, "%d shares, row weight %g: the largest has %g of %g",
				  ndev, w, most, total);
		}
	gm_csr_free(&A);
	free(u);
	free(c);
	free(v);
	return 0;
fail:
	return 1;
}

static int
test_device_memory(void)
{
	int32_t		shapes[3][2] = {{3000, 500}, {200000, 40000}, {2000000, 100000}};

	for (int sh = 0; sh < 3; sh++)
	{
		int32_t		nu = shapes[sh][0],
					ni = shapes[sh][1];
		int64_t		nnz = (int64_t) nu * 25;
		gm_csr		R,
					Rt;
		char		err[GM_ERRLEN];
		int32_t    *r = xmalloc(sizeof(int32_t) * (size_t) nnz),
				   *c = xmalloc(sizeof(int32_t) * (size_t) nnz);
		float	   *v = xmalloc(sizeof(float) * (size_t) nnz);

		for (int64_t e = 0; e < nnz; e++)
		{
			r[e] = (int32_t) (e / 25);
			/* a popular head: a tenth of the entries on 20 items (rows longer than a chunk) */
			c[e] = (int32_t) (e % 10 == 0 ? e % 20 : (e * 7919) % ni);
			v[e] = 1.0f;
		}
		CHECK(gm_csr_from_coo(nu, ni, nnz, r, c, v, &R, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_csr_transpose(&R, &Rt, err, sizeof(err)) == GM_OK, "%s", err);
		free(r);
		free(c);
		free(v);
		for (int f = 0; f < 3; f++)
		{
			int			k = (int[]) {32, 128, 1024}[f],
						kp = gm_padded_k(k);
			double		per_row = 8 + 8 + 4 + 4;	/* pointers, a chunk, a slot, a counter */
			gm_mf_params p;
			gm_device_need cg,
						blk,
						ex,
						ccd;

			gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
			p.backend = GM_BACKEND_CUDA;
			p.factors = k;
			gm_mf_device_memory(&p, &R, &Rt, &cg);
			CHECK(fabs(cg.total - (cg.matrices + cg.factors + cg.solver)) < 1.0, "total is the parts' sum");
			CHECK(cg.factors >= ((double) nu + ni) * kp * 4, "the padded factors are counted");
			CHECK(cg.matrices <= 16.0 * R.nnz + per_row * ((double) nu + ni) + 8.0 * R.nnz / 256 + 64,
				  "shape %d, k %d: the matrices take %.0f bytes, more than 16 an interaction", sh, k,
				  cg.matrices);
			CHECK(cg.solver <= (double) GM_ALS_WORK_BYTES + 4.0 * (3 * kp + 1) * GM_ALS_WORK_MIN_ROWS,
				  "shape %d, k %d: CG's work %.0f bytes grows with the rows", sh, k, cg.solver);
			p.solver = GM_SOLVER_BLOCK;
			gm_mf_device_memory(&p, &R, &Rt, &blk);
			CHECK(blk.solver >= 12.0 * R.nnz, "the block solver's per-entry arrays are counted");
			CHECK(blk.matrices == cg.matrices, "the matrices do not depend on the solver");
			/* two GPUs: each holds every row pointer and about half the entries, all the factors */
			{
				gm_device_need two;

				p.solver = GM_SOLVER_CG;
				p.gpus = 2;
				gm_mf_device_memory(&p, &R, &Rt, &two);
				CHECK(two.factors == cg.factors && two.solver == cg.solver,
					  "two GPUs: each holds the same factors and work arrays");
				CHECK(two.matrices < cg.matrices && two.matrices >= cg.matrices / 2,
					  "shape %d, k %d: two GPUs hold %.0f bytes of matrices each, one %.0f", sh, k,
					  two.matrices, cg.matrices);
				p.gpus = 1;
			}
			gm_mf_params_defaults(&p, GM_ALG_ALS_EXPLICIT);
			p.backend = GM_BACKEND_CUDA;
			p.factors = k;
			gm_mf_device_memory(&p, &R, &Rt, &ex);
			CHECK(ex.matrices <= 16.0 * R.nnz + per_row * ((double) nu + ni) + 64,
				  "explicit ALS: the matrices take more than 16 bytes an interaction");
			CHECK(ex.solver <= (1 << 30) + 1e6 + 64.0 * ((double) nu + ni), "explicit ALS: its batch is bounded");
			gm_mf_params_defaults(&p, GM_ALG_CCD);
			p.backend = GM_BACKEND_CUDA;
			p.factors = k;
			gm_mf_device_memory(&p, &R, &Rt, &ccd);
			CHECK(ccd.matrices + ccd.solver <= 20.0 * R.nnz + 128.0 * ((double) nu + ni),
				  "CCD++: more than 20 bytes an interaction beside the factors");
		}
		gm_csr_free(&R);
		gm_csr_free(&Rt);
	}
	return 0;
fail:
	return 1;
}

/*
 * gm_populate_start: its thread maps the arrays' pages (mincore sees them
 * resident) while this thread writes them, and leaves every entry as
 * written; a stop before the end gives a point within the range; empty or
 * bad ranges start nothing.
 */
static int
test_populate(void)
{
	const int64_t n = ((int64_t) 24 << 20) + 4097;	/* entries: not a whole page */
	size_t		elem[3] = {4, 4, 8};
	char	   *a[3] = {NULL, NULL, NULL};
	unsigned char *vec = NULL;
	long		ps = sysconf(_SC_PAGESIZE);
	gm_populator *p;
	int64_t		done;
	int			rc = 1;

	for (int i = 0; i < 3; i++)
	{
		a[i] = mmap(NULL, (size_t) n * elem[i], PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(a[i] != MAP_FAILED, "mmap failed");
	}
	CHECK(gm_populate_start(a, elem, 3, 10, 10, 0) == NULL, "an empty range started a thread");
	CHECK(gm_populate_start(a, elem, 0, 0, n, 0) == NULL, "no arrays started a thread");
	CHECK(gm_populate_start(a, elem, GM_POPULATE_MAX + 1, 0, n, 0) == NULL, "too many arrays");
	p = gm_populate_start(a, elem, 3, 0, n, 0);
	if (p == NULL)
	{
		/* only a kernel without MADV_POPULATE_WRITE (before 5.14) may say no */
		CHECK(madvise(a[0], 0, MADV_POPULATE_WRITE) != 0, "no thread although the kernel maps pages ahead");
		rc = 0;
		goto fail;
	}
	/* write the first half while the thread maps pages */
	for (int64_t e = 0; e < n / 2; e++)
	{
		((int32_t *) a[0])[e] = (int32_t) e;
		((float *) a[1])[e] = (float) e;
		((int64_t *) a[2])[e] = -e;
	}
	done = gm_populate_stop(p, 1);
	CHECK(done == n, "the thread stopped at %lld of %lld", (long long) done, (long long) n);
	vec = xmalloc((size_t) ((size_t) n * 8 / ps + 2));
	for (int i = 0; i < 3; i++)
	{
		size_t		pages = (size_t) n * elem[i] / ps;	/* the whole pages inside */

		CHECK(mincore(a[i], (size_t) pages * ps, vec) == 0, "mincore failed");
		for (size_t g = 0; g < pages; g++)
			CHECK(vec[g] & 1, "array %d: page %zu of %zu not mapped", i, g, pages);
	}
	for (int64_t e = 0; e < n; e++)
		CHECK(((int32_t *) a[0])[e] == (e < n / 2 ? (int32_t) e : 0) &&
			  ((float *) a[1])[e] == (e < n / 2 ? (float) e : 0.0f) &&
			  ((int64_t *) a[2])[e] == (e < n / 2 ? -e : 0),
			  "entry %lld changed", (long long) e);
	/* stopped at once: somewhere in [from, to] */
	p = gm_populate_start(a, elem, 3, 1000, n, 0);
	CHECK(p != NULL, "no second thread");
	done = gm_populate_stop(p, 0);
	CHECK(done >= 1000 && done <= n, "stopped at %lld, outside [1000, %lld]", (long long) done,
		  (long long) n);
	/* a window: never more than it past the writer, then all of it once finished */
	for (int i = 0; i < 3; i++)
	{
		munmap(a[i], (size_t) n * elem[i]);
		a[i] = mmap(NULL, (size_t) n * elem[i], PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(a[i] != MAP_FAILED, "mmap failed");
	}
	{
		const int64_t window = (int64_t) 1 << 20;

		p = gm_populate_start(a, elem, 3, 0, n, window);
		CHECK(p != NULL, "no windowed thread");
		for (int64_t w = 0; w <= n / 2; w += n / 8)
		{
			gm_populate_advance(p, w);
			usleep(20000);
			CHECK(mincore(a[0] + ((size_t) (w + window) * 4 / ps + 2) * ps,
						  (size_t) ps, vec) == 0, "mincore failed");
			CHECK(!(vec[0] & 1), "a page past the writer %lld and the window mapped", (long long) w);
		}
		done = gm_populate_stop(p, 1);
		CHECK(done == n, "the windowed thread finished at %lld of %lld", (long long) done, (long long) n);
		CHECK(mincore(a[0] + ((size_t) n * 4 / ps - 1) * ps, (size_t) ps, vec) == 0 && (vec[0] & 1),
			  "the last page not mapped after a finish");
	}
	rc = 0;
fail:
	free(vec);
	for (int i = 0; i < 3; i++)
		if (a[i] && a[i] != MAP_FAILED)
			munmap(a[i], (size_t) n * elem[i]);
	return rc;
}

/* ------------------------------------------------------------ main */

static const gm_test tests[] = {
	{"csr_from_coo matches a dense reference", test_csr_from_coo},
	{"csr_from_coo rejects bad coordinates", test_csr_rejects},
	{"csr_transpose", test_csr_transpose},
	{"lean CSR build and slab transpose equal the plain ones", test_csr_lean},
	{"confidence = 1 + alpha * v", test_confidence},
	{"gram = Y^T Y + reg I", test_gram},
	{"cg solve of one row vs Cholesky", test_cg_solve},
	{"als_loss vs dense brute force", test_loss},
	{"mf_train (implicit ALS) loss non-increasing", test_train_monotone},
	{"mf_train cancellation", test_train_cancel},
	{"mf_train without progress reports: the last loss only, the same factors and loss", test_train_last_loss},
	{"cg_solve_rows independent of threads", test_threads},
	{"topk vs full sort", test_topk},
	{"topk_dot (int8 first pass) equals the float top n", test_topk_dot},
	{"qmat_build_in: int8 rows within half a step, any thread count", test_qmat_threads},
	{"synth dataset", test_synth},
	{"csr_nnz_bins vs a reference", test_nnz_bins},
	{"mf_train tolerance stop", test_train_tolerance},
	{"mf_train (cpu ops) equals the plain ALS loop bit for bit", test_train_matches_loop},
	{"mf_train polls within one slice and stops at once", test_cancel_latency},
	{"params defaults, checks, names; ops tables", test_params_and_ops},
	{"2008 and Rendle forms: trained factors vs a float64 reference", test_model_forms},
	{"row solves (exact, one block, CG, block sweeps) vs float64 Cholesky", test_row_solvers},
	{"mf_train every solver: loss non-increasing, objective of the factors", test_train_solvers},
	{"rank_eval (recall, ndcg, precision @K) vs brute force", test_rank_eval},
	{"holdout split", test_split},
	{"automatic search (the bare call)", test_auto_tune},
	{"mf_train_eval: held-out early stopping, keep_best", test_train_eval},
	{"session trainings equal fresh ones", test_session},
	{"mf_warmup trains its small problem for every algorithm and solver", test_warmup},
	{"device memory of a training, by part, within 20 bytes an interaction", test_device_memory},
	{"gpus: one by default, implicit ALS, explicit ALS and CCD++ only, at most GM_MAX_GPUS", test_gpus_param},
	{"several GPUs: rows cut into shares of equal work, a row weighing its cost", test_cut_rows},
	{"populate: pages mapped ahead of their writer, nothing written", test_populate},
};

int
main(void)
{
	return gm_test_main(tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
