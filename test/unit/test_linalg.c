/*
 * test_linalg.c: unit tests of the core's linear algebra (gm_linalg.h):
 * sparse matrices and their checks, SpMV, the conjugate-gradient solver and
 * least squares.
 *
 * Random inputs are fresh on every run: the seed comes from the time and the
 * pid (or GM_TEST_SEED to replay a run) and is printed first.  References
 * are float64 and independent of the code under test: dense products, a
 * dense Cholesky solve, a plain Householder QR of the whole design matrix,
 * and NIST's certified values for the Longley and Norris data (StRD linear
 * regression, public domain, transcribed from the NIST files).  Output:
 * "ok N - name" or "not ok N - name: detail", then "N passed, M failed".
 */
#include "gm_linalg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static char err[GM_ERRLEN];

static double
rnorm(void)
{
	double		u = runif() + 1e-300,
				v = runif();

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static double
relerr(const double *a, const double *b, int64_t n)
{
	double		d = 0.0,
				r = 0.0;

	for (int64_t i = 0; i < n; i++)
	{
		d += (a[i] - b[i]) * (a[i] - b[i]);
		r += b[i] * b[i];
	}
	return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* ------------------------------------------------------------ random SPD matrices */

/* Triplets of a random SPD matrix (as one triangle or both, with duplicates). */
typedef struct coo_buf
{
	int64_t		n,
				nnz,
				cap;
	int64_t    *r,
			   *c;
	double	   *v;
} coo_buf;

static void
coo_push(coo_buf *b, int64_t i, int64_t j, double v)
{
	if (b->nnz == b->cap)
	{
		b->cap = b->cap ? 2 * b->cap : 1024;
		b->r = realloc(b->r, sizeof(int64_t) * b->cap);
		b->c = realloc(b->c, sizeof(int64_t) * b->cap);
		b->v = realloc(b->v, sizeof(double) * b->cap);
		if (!b->r || !b->c || !b->v)
			exit(2);
	}
	b->r[b->nnz] = i;
	b->c[b->nnz] = j;
	b->v[b->nnz] = v;
	b->nnz++;
}

static void
coo_free(coo_buf *b)
{
	free(b->r);
	free(b->c);
	free(b->v);
	memset(b, 0, sizeof(*b));
}

/*
 * A random SPD matrix: a weighted graph Laplacian (PSD) plus a positive
 * diagonal, scaled symmetrically by random factors 10^[-decades, decades]
 * (so Jacobi matters).  which: 0 lower triangle, 1 upper, 2 both.
 * Duplicated entries (split values) are mixed in; the row order is shuffled.
 * Dense reference in D (n x n) if not NULL.
 */
static void
random_spd(coo_buf *b, int64_t n, int deg, int which, double diag_extra, double decades,
		   double *D)
{
	double	   *sc = xmalloc(sizeof(double) * n);
	double	   *dg = xcalloc(n, sizeof(double));

	memset(b, 0, sizeof(*b));
	b->n = n;
	for (int64_t i = 0; i < n; i++)
		sc[i] = pow(10.0, decades * (2.0 * runif() - 1.0));
	if (D)
		memset(D, 0, sizeof(double) * n * n);
	for (int64_t i = 0; i < n; i++)
	{
		int			d = (int) rint_range(0, deg);

		for (int t = 0; t < d; t++)
		{
			int64_t		j = rint_range(0, n - 1);
			double		w = 0.1 + runif(),
						v;

			if (j == i)
				continue;
			dg[i] += w;
			dg[j] += w;
			v = -w * sc[i] * sc[j];
			if (D)
			{
				D[i * n + j] += v;
				D[j * n + i] += v;
			}
			{
				/* sometimes the value comes in two pieces: duplicates to sum */
				int			pieces = runif() < 0.15 ? 2 : 1;
				int64_t		lo = i > j ? j : i,
							hi = i > j ? i : j;

				for (int q = 0; q < pieces; q++)
				{
					double		piece = pieces == 1 ? v : (q == 0 ? 0.25 * v : 0.75 * v);

					if (which == 0)
						coo_push(b, hi, lo, piece);
					else if (which == 1)
						coo_push(b, lo, hi, piece);
					else
					{
						coo_push(b, i, j, piece);
						coo_push(b, j, i, piece);
					}
				}
			}
		}
	}
	for (int64_t i = 0; i < n; i++)
	{
		double		v = (dg[i] + diag_extra * (0.5 + runif())) * sc[i] * sc[i];

		if (v <= 0)
			v = sc[i] * sc[i];
		if (D)
			D[i * n + i] += v;
		coo_push(b, i, i, v);
	}
	/* shuffle the entry order */
	for (int64_t e = b->nnz - 1; e > 0; e--)
	{
		int64_t		f = rint_range(0, e);
		int64_t		tr = b->r[e],
					tc = b->c[e];
		double		tv = b->v[e];

		b->r[e] = b->r[f];
		b->c[e] = b->c[f];
		b->v[e] = b->v[f];
		b->r[f] = tr;
		b->c[f] = tc;
		b->v[f] = tv;
	}
	free(sc);
	free(dg);
}

/* scan + build as the SQL layer will; returns GM_OK or the error */
static int
build(const coo_buf *b, int64_t n, gm_spmat *A, gm_coo_info *info, int threads)
{
	gm_coo		c = {b->nnz, b->r, b->c, b->v, 1};
	int			rc;

	if ((rc = gm_coo_scan(&c, n, info, err, sizeof(err))) != GM_OK)
		return rc;
	if ((rc = gm_coo_check_square(info, 1, err, sizeof(err))) != GM_OK)
		return rc;
	if ((rc = gm_spmat_from_coo(&c, n > 0 ? n : info->n_rows, info->triangle, threads,
								A, err, sizeof(err))) != GM_OK)
		return rc;
	if (info->triangle == GM_TRI_BOTH &&
		(rc = gm_spmat_check_symmetric(A, GM_SYMMETRY_RTOL, 1, threads, err, sizeof(err))) != GM_OK)
		gm_spmat_free(A);
	return rc;
}

/* Cholesky solve of the dense SPD D x = b (D destroyed). 0 on success. */
static int
dense_cholesky_solve(double *D, int64_t n, const double *b, double *x)
{
	for (int64_t j = 0; j < n; j++)
	{
		double		s = D[j * n + j];

		for (int64_t k = 0; k < j; k++)
			s -= D[j * n + k] * D[j * n + k];
		if (!(s > 0))
			return 1;
		D[j * n + j] = sqrt(s);
		for (int64_t i = j + 1; i < n; i++)
		{
			double		t = D[i * n + j];

			for (int64_t k = 0; k < j; k++)
				t -= D[i * n + k] * D[j * n + k];
			D[i * n + j] = t / D[j * n + j];
		}
	}
	for (int64_t i = 0; i < n; i++)
	{
		double		t = b[i];

		for (int64_t k = 0; k < i; k++)
			t -= D[i * n + k] * x[k];
		x[i] = t / D[i * n + i];
	}
	for (int64_t i = n - 1; i >= 0; i--)
	{
		double		t = x[i];

		for (int64_t k = i + 1; k < n; k++)
			t -= D[k * n + i] * x[k];
		x[i] = t / D[i * n + i];
	}
	return 0;
}

/* ------------------------------------------------------------ sparse tests */

/*
 * Triplets given as lower, upper or both triangles, with duplicates, build
 * the same matrix as the dense reference; the triangle is detected; SpMV in
 * float64 and float32 equals the dense product.
 */
static int
test_spmv_vs_dense(void)
{
	for (int trial = 0; trial < 30; trial++)
	{
		int64_t		n = rint_range(1, 400);
		int			which = trial % 3;
		double	   *D = xmalloc(sizeof(double) * n * n);
		double	   *x = xmalloc(sizeof(double) * n),
				   *y = xmalloc(sizeof(double) * n),
				   *yr = xmalloc(sizeof(double) * n);
		float	   *xf = xmalloc(sizeof(float) * n),
				   *yf = xmalloc(sizeof(float) * n);
		double	   *yfd = xmalloc(sizeof(double) * n);
		coo_buf		b;
		gm_spmat	A;
		gm_coo_info info;
		int			threads = (int) rint_range(1, 3);
		double		e;

		random_spd(&b, n, (int) rint_range(0, 12), which, 1.0, 1.0, D);
		CHECK(build(&b, n, &A, &info, threads) == GM_OK, "build: %s", err);
		if (info.n_lower + info.n_upper > 0)
			CHECK((int) info.triangle == (which == 0 ? GM_TRI_LOWER : which == 1 ? GM_TRI_UPPER : GM_TRI_BOTH),
				  "trial %d: triangle %d detected for input %d", trial, info.triangle, which);
		else
			CHECK(info.triangle == GM_TRI_DIAGONAL, "diagonal-only not detected");
		/* columns sorted and unique, and the entries equal the dense matrix */
		for (int64_t i = 0; i < n; i++)
			for (int64_t k = A.indptr[i]; k < A.indptr[i + 1]; k++)
			{
				CHECK(k == A.indptr[i] || A.indices[k] > A.indices[k - 1],
					  "row %lld not sorted/unique", (long long) i);
				CHECK(fabs(A.values[k] - D[i * n + A.indices[k]]) <=
					  1e-14 * fabs(D[i * n + A.indices[k]]) + 1e-300,
					  "A(%lld,%d) = %g, dense %g", (long long) i, A.indices[k],
					  A.values[k], D[i * n + A.indices[k]]);
			}
		for (int64_t i = 0; i < n; i++)
		{
			x[i] = rnorm();
			xf[i] = (float) x[i];
			y[i] = NAN;
			yf[i] = NAN;
		}
		for (int64_t i = 0; i < n; i++)
		{
			double		s = 0.0;

			for (int64_t j = 0; j < n; j++)
				s += D[i * n + j] * x[j];
			yr[i] = s;
		}
		gm_spmv(&A, x, y, threads);
		e = relerr(y, yr, n);
		CHECK(e <= 1e-13, "trial %d n %lld: float64 SpMV relative error %.3g", trial,
			  (long long) n, e);
		CHECK(gm_spmat_make_single(&A, err, sizeof(err)) == GM_OK, "%s", err);
		gm_spmv_single(&A, xf, yf, threads);
		for (int64_t i = 0; i < n; i++)
			yfd[i] = yf[i];
		e = relerr(yfd, yr, n);
		CHECK(e <= 1e-5, "trial %d: float32 SpMV relative error %.3g", trial, e);
		gm_spmat_free(&A);
		coo_free(&b);
		free(D);
		free(x);
		free(y);
		free(yr);
		free(xf);
		free(yf);
		free(yfd);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* A large matrix (multi-threaded paths: partitions, long rows) against one thread. */
static int
test_spmv_threads(void)
{
	int64_t		n = 200000;
	coo_buf		b;
	gm_spmat	A;
	gm_coo_info info;
	double	   *x = xmalloc(sizeof(double) * n),
			   *y1 = xmalloc(sizeof(double) * n),
			   *y2 = xmalloc(sizeof(double) * n);

	random_spd(&b, n, 6, 2, 1.0, 1.0, NULL);
	/* one long row and one long column */
	for (int64_t j = 1; j < n; j += 3)
	{
		coo_push(&b, 0, j, -1e-3);
		coo_push(&b, j, 0, -1e-3);
	}
	CHECK(build(&b, n, &A, &info, 2) == GM_OK, "build: %s", err);
	for (int64_t i = 0; i < n; i++)
		x[i] = rnorm();
	gm_spmv(&A, x, y1, 1);
	gm_spmv(&A, x, y2, 2);
	for (int64_t i = 0; i < n; i++)
		CHECK(y1[i] == y2[i], "row %lld: 1 thread %.17g, 2 threads %.17g", (long long) i,
			  y1[i], y2[i]);
	gm_spmat_free(&A);
	coo_free(&b);
	free(x);
	free(y1);
	free(y2);
	return 0;
fail:
	return 1;
}

/* Does err contain every one of the strings (NULL-terminated)? */
static int
err_has(const char *s1, const char *s2, const char *s3)
{
	return strstr(err, s1) && (!s2 || strstr(err, s2)) && (!s3 || strstr(err, s3));
}

/* Each bad input gives GM_EINVAL and a message naming the problem. */
static int
test_validation_errors(void)
{
	int64_t		r[8],
				c[8];
	double		v[8];
	gm_coo		co = {0, r, c, v, 1};
	gm_coo_info info;
	gm_spmat	A;
	int			rc;

	/* empty */
	co.nnz = 0;
	rc = gm_coo_scan(&co, 0, &info, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("empty", NULL, NULL), "empty: %d %s", rc, err);

	/* an index below the base (user wrote 0 with base 1) */
	r[0] = 0; c[0] = 0; v[0] = 1;
	r[1] = -1; c[1] = 0; v[1] = 2;
	co.nnz = 2;
	rc = gm_coo_scan(&co, 0, &info, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("entry 2", "row 0", "start at 1"), "below base: %s", err);

	/* outside an n given by the right-hand side */
	r[1] = 1; c[1] = 7; v[1] = 2;
	rc = gm_coo_scan(&co, 5, &info, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("entry 2 (row 2, column 8)", "5 x 5", NULL),
		  "outside: %s", err);

	/* NaN and Infinity, with their position */
	r[1] = 1; c[1] = 0; v[1] = NAN;
	rc = gm_coo_scan(&co, 0, &info, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("entry 2 (row 2, column 1) is NaN", NULL, NULL),
		  "NaN: %s", err);
	v[1] = -INFINITY;
	rc = gm_coo_scan(&co, 0, &info, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("is -Infinity", NULL, NULL), "Inf: %s", err);

	/* not square */
	r[1] = 1; c[1] = 2; v[1] = 1;
	rc = gm_coo_scan(&co, 0, &info, err, sizeof(err));
	CHECK(rc == GM_OK, "scan: %s", err);
	rc = gm_coo_check_square(&info, 1, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("not square", "2 rows", "3 columns"), "square: %s", err);

	/* not symmetric: both triangles given, one pair differs */
	r[0] = 0; c[0] = 0; v[0] = 4;
	r[1] = 1; c[1] = 1; v[1] = 4;
	r[2] = 0; c[2] = 1; v[2] = 1.5;
	r[3] = 1; c[3] = 0; v[3] = 1.25;
	co.nnz = 4;
	CHECK(gm_coo_scan(&co, 0, &info, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(info.triangle == GM_TRI_BOTH, "both triangles not detected");
	CHECK(gm_spmat_from_coo(&co, 2, info.triangle, 1, &A, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_spmat_check_symmetric(&A, GM_SYMMETRY_RTOL, 1, 1, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("A(1, 2) = 1.5", "A(2, 1) = 1.25", "not symmetric"),
		  "symmetric: %s", err);
	gm_spmat_free(&A);

	/* not symmetric: a counterpart missing */
	r[3] = 1; c[3] = 1; v[3] = 0;
	CHECK(gm_coo_scan(&co, 0, &info, err, sizeof(err)) == GM_OK, "%s", err);
	/* upper only: mirrored, so symmetric by construction */
	CHECK(info.triangle == GM_TRI_UPPER, "upper not detected: %d", info.triangle);
	CHECK(gm_spmat_from_coo(&co, 3, GM_TRI_BOTH, 1, &A, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_spmat_check_symmetric(&A, GM_SYMMETRY_RTOL, 1, 1, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("A(1, 2) = 1.5", "A(2, 1) is not given", NULL),
		  "missing counterpart: %s", err);
	CHECK(gm_spmat_check_diagonal(&A, 1, err, sizeof(err)) == GM_EINVAL &&
		  err_has("row 3 has no diagonal entry", NULL, NULL), "missing diagonal: %s", err);
	gm_spmat_free(&A);

	/* zero and negative diagonal entries (A(2,2) is entries 2 and 4 summed) */
	v[1] = 0;
	v[3] = 0;
	CHECK(gm_spmat_from_coo(&co, 2, GM_TRI_UPPER, 1, &A, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(gm_spmat_check_symmetric(&A, GM_SYMMETRY_RTOL, 1, 1, err, sizeof(err)) == GM_OK,
		  "mirrored not symmetric: %s", err);
	rc = gm_spmat_check_diagonal(&A, 1, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("A(2, 2) is 0", NULL, NULL), "zero diagonal: %s", err);
	gm_spmat_free(&A);
	v[1] = -3;
	CHECK(gm_spmat_from_coo(&co, 2, GM_TRI_UPPER, 1, &A, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_spmat_check_diagonal(&A, 1, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("A(2, 2) is -3", NULL, NULL), "negative diagonal: %s", err);

	/* and the solver refuses it with Jacobi */
	{
		double		bb[2] = {1, 1},
					xx[2] = {0, 0};
		gm_cg_params p;
		gm_cg_result res;

		gm_cg_params_default(&p);
		rc = gm_cg_solve(&A, bb, xx, &p, NULL, &res, err, sizeof(err));
		CHECK(rc == GM_EINVAL && err_has("A(2, 2) is -3", NULL, NULL), "solver: %d %s", rc, err);
		/* NaN in the right-hand side */
		bb[1] = NAN;
		v[1] = 3;
		gm_spmat_free(&A);
		CHECK(gm_spmat_from_coo(&co, 2, GM_TRI_UPPER, 1, &A, err, sizeof(err)) == GM_OK, "%s", err);
		rc = gm_cg_solve(&A, bb, xx, &p, NULL, &res, err, sizeof(err));
		CHECK(rc == GM_EINVAL && err_has("right-hand side element 2 is NaN", NULL, NULL),
			  "rhs NaN: %s", err);
	}
	gm_spmat_free(&A);

	/* a base of 0 speaks 0-based */
	co.base = 0;
	r[0] = 3; c[0] = 3; v[0] = NAN;
	co.nnz = 1;
	rc = gm_coo_scan(&co, 0, &info, err, sizeof(err));
	CHECK(rc == GM_EINVAL && err_has("entry 1 (row 3, column 3) is NaN", NULL, NULL),
		  "base 0: %s", err);
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ CG tests */

typedef struct cg_case
{
	int64_t		n;
	gm_spmat	A;
	double	   *D;				/* dense copy (n <= 600) */
	double	   *b;
	double	   *xref;
} cg_case;

static int
make_cg_case(cg_case *k, int64_t n, int deg, double diag_extra, double decades)
{
	coo_buf		b;
	gm_coo_info info;
	double	   *Dc;

	memset(k, 0, sizeof(*k));
	k->n = n;
	k->D = xmalloc(sizeof(double) * n * n);
	k->b = xmalloc(sizeof(double) * n);
	k->xref = xmalloc(sizeof(double) * n);
	random_spd(&b, n, deg, (int) rint_range(0, 2), diag_extra, decades, k->D);
	if (build(&b, n, &k->A, &info, 2) != GM_OK)
	{
		coo_free(&b);
		return 1;
	}
	coo_free(&b);
	for (int64_t i = 0; i < n; i++)
		k->b[i] = rnorm();
	Dc = xmalloc(sizeof(double) * n * n);
	memcpy(Dc, k->D, sizeof(double) * n * n);
	if (dense_cholesky_solve(Dc, n, k->b, k->xref))
	{
		free(Dc);
		snprintf(err, sizeof(err), "reference Cholesky failed: not SPD");
		return 1;
	}
	free(Dc);
	return 0;
}

static void
free_cg_case(cg_case *k)
{
	gm_spmat_free(&k->A);
	free(k->D);
	free(k->b);
	free(k->xref);
}

/* |b - D x| / |b| by the dense reference */
static double
dense_residual(const cg_case *k, const double *x)
{
	double		rn = 0.0,
				bn = 0.0;

	for (int64_t i = 0; i < k->n; i++)
	{
		double		s = k->b[i];

		for (int64_t j = 0; j < k->n; j++)
			s -= k->D[i * k->n + j] * x[j];
		rn += s * s;
		bn += k->b[i] * k->b[i];
	}
	return sqrt(rn / bn);
}

/*
 * CG (Jacobi and none, float64 and float32) converges on random SPD
 * matrices to the tolerance on the true residual, and x matches the dense
 * Cholesky solution as the residual and the condition allow.
 */
static int
test_cg_converges(void)
{
	for (int trial = 0; trial < 24; trial++)
	{
		cg_case		k;
		gm_cg_params p;
		gm_cg_result res;
		double	   *x;
		double		tol = trial % 4 == 3 ? 1e-6 : (trial / 2) % 2 ? 1e-7 : 1e-10,
					dres,
					e;
		int64_t		n = rint_range(2, 500);

		if (make_cg_case(&k, n, (int) rint_range(1, 10), trial % 5 == 0 ? 1e-3 : 0.5,
						 /* float32 without Jacobi needs a tamer scaling */
						 trial % 4 == 3 ? 0.3 : 1.0))
			FAIL("trial %d: %s", trial, err);
		x = xcalloc(n, sizeof(double));
		gm_cg_params_default(&p);
		p.tolerance = tol;
		p.max_iterations = 20000;
		p.preconditioner = trial % 2 ? GM_PRECOND_NONE : GM_PRECOND_JACOBI;
		p.precision = (trial / 2) % 2 ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
		p.threads = (int) rint_range(1, 2);
		p.check_every = (int) rint_range(1, 10);
		if (gm_cg_solve(&k.A, k.b, x, &p, NULL, &res, err, sizeof(err)) != GM_OK)
			FAIL("trial %d: %s", trial, err);
		dres = dense_residual(&k, x);
		e = relerr(x, k.xref, n);
		CHECK(res.converged, "trial %d (n %lld, %s, %s): not converged: residual %.3g after %d "
			  "iterations (stagnated %d)", trial, (long long) n,
			  p.preconditioner ? "jacobi" : "none", p.precision ? "single" : "double",
			  res.residual, res.iterations, res.stagnated);
		CHECK(res.residual <= tol && dres <= tol * 1.0001,
			  "trial %d: residual %.3g, dense %.3g, tolerance %.3g", trial, res.residual, dres, tol);
		/*
		 * the two residuals differ by the rounding of b - A x itself: about
		 * eps sqrt(n) |A| |x| / |b|, some 1e-12 on the 1e-3-scaled cases
		 * (1.7e-12 against 3.2e-12 seen), so 1e-11 absolute
		 */
		CHECK(fabs(res.residual - dres) <= 1e-2 * dres + 1e-11,
			  "trial %d: reported residual %.6g, dense %.6g", trial, res.residual, dres);
		/* forward error within the bound kappa * residual (kappa estimated generously) */
		CHECK(e <= 1e6 * tol + 1e-12, "trial %d: |x - x_chol| / |x_chol| = %.3g", trial, e);
		free(x);
		free_cg_case(&k);
		continue;
fail:
		return 1;
	}
	return 0;
}

/*
 * The tolerance holds on the true residual: float32 vectors cannot reach
 * 1e-9 on their own, so the solver must refine (replacements > 0) and still
 * report a float64 residual below the tolerance, or report not converged.
 * A tolerance below what float64 can reach stops as stagnated, converged = 0.
 */
static int
test_cg_true_residual(void)
{
	cg_case		k;
	gm_cg_params p;
	gm_cg_result res;
	int64_t		n = 400;
	double	   *x = xcalloc(n, sizeof(double));

	if (make_cg_case(&k, n, 8, 1e-4, 1.0))
		FAIL("%s", err);
	gm_cg_params_default(&p);
	p.precision = GM_PRECISION_SINGLE;
	p.tolerance = 1e-9;
	p.max_iterations = 50000;
	CHECK(gm_cg_solve(&k.A, k.b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(res.converged && res.residual <= 1e-9 && dense_residual(&k, x) <= 1e-9,
		  "float32 to 1e-9: converged %d residual %.3g", res.converged, res.residual);
	CHECK(res.replacements > 0, "float32 to 1e-9 needed no refinement (%d iterations)",
		  res.iterations);

	memset(x, 0, sizeof(double) * n);
	p.precision = GM_PRECISION_DOUBLE;
	p.tolerance = 1e-19;
	CHECK(gm_cg_solve(&k.A, k.b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(!res.converged && res.stagnated && res.iterations < p.max_iterations,
		  "tolerance 1e-19: converged %d stagnated %d after %d iterations", res.converged,
		  res.stagnated, res.iterations);
	CHECK(res.residual < 1e-9, "stagnated at residual %.3g", res.residual);
	free(x);
	free_cg_case(&k);
	return 0;
fail:
	return 1;
}

/*
 * Not converging in max_iterations: converged = 0, the iterations done, and
 * x the last iterate (its own residual is the one reported).
 */
static int
test_cg_not_converged(void)
{
	cg_case		k;
	gm_cg_params p;
	gm_cg_result res;
	int64_t		n = 300;
	double	   *x = xcalloc(n, sizeof(double));

	if (make_cg_case(&k, n, 8, 1e-3, 1.0))
		FAIL("%s", err);
	gm_cg_params_default(&p);
	p.max_iterations = 5;
	CHECK(gm_cg_solve(&k.A, k.b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(!res.converged && res.iterations == 5, "converged %d iterations %d", res.converged,
		  res.iterations);
	CHECK(res.residual > 1e-8 && isfinite(res.residual), "residual %.3g", res.residual);
	CHECK(fabs(dense_residual(&k, x) - res.residual) <= 1e-9 * res.residual,
		  "x is not the iterate reported: %.10g vs %.10g", dense_residual(&k, x), res.residual);
	/* continuing from it converges */
	p.max_iterations = 10000;
	CHECK(gm_cg_solve(&k.A, k.b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(res.converged, "warm start did not converge: %.3g", res.residual);
	free(x);
	free_cg_case(&k);
	return 0;
fail:
	return 1;
}

/* a diagonal matrix d (n entries) as a gm_spmat */
static int
diag_matrix(const double *d, int64_t n, gm_spmat *A)
{
	int64_t    *r = xmalloc(sizeof(int64_t) * n);
	double	   *v = xmalloc(sizeof(double) * n);
	gm_coo		co;
	int			rc;

	for (int64_t i = 0; i < n; i++)
	{
		r[i] = i;
		v[i] = d[i];
	}
	co.nnz = n;
	co.rows = r;
	co.cols = r;
	co.values = v;
	co.base = 1;
	rc = gm_spmat_from_coo(&co, n, GM_TRI_BOTH, 1, A, err, sizeof(err));
	free(r);
	free(v);
	return rc;
}

/*
 * Systems at the edges of double's range: a subnormal diagonal entry, a
 * right-hand side near the largest double, a random system scaled by
 * 2^+-1000 solve to the right x (the scaled solution), converged; a
 * solution beyond double's range is GM_ERANGE naming its element.
 */
static int
test_cg_range(void)
{
	gm_cg_params p;
	gm_cg_result res;
	gm_spmat	A;
	double		d1[2] = {4, 1e-320},
				d2[2] = {4, 1};

	memset(&A, 0, sizeof(A));
	for (int mode = 0; mode < 4; mode++)
	{
		double		b[2] = {1, 1e-20},
					x[2] = {0, 0};

		gm_cg_params_default(&p);
		p.precision = mode & 1 ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
		p.preconditioner = mode & 2 ? GM_PRECOND_NONE : GM_PRECOND_JACOBI;
		/* diagonal {4, 1e-320} (subnormal), b = {1, 1e-20}: x = {0.25, ~1e300} */
		CHECK(diag_matrix(d1, 2, &A) == GM_OK, "%s", err);
		if (p.preconditioner == GM_PRECOND_JACOBI)
		{
			/*
			 * float32 cannot hold the scaled residual's two components
			 * (1e-140 apart) at once: double only
			 */
			if (p.precision == GM_PRECISION_DOUBLE)
			{
				CHECK(gm_cg_solve(&A, b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "mode %d: %s",
					  mode, err);
				CHECK(res.converged && fabs(x[0] - 0.25) <= 1e-12 && fabs(x[1] / (1e-20 / d1[1]) - 1) <= 1e-12,
					  "mode %d: subnormal diagonal: converged %d x = {%.17g, %.17g}", mode,
					  res.converged, x[0], x[1]);
			}
			/* b = {1, 1}: x[2] = 1 / 1e-320 overflows double */
			b[1] = 1;
			x[0] = x[1] = 0;
			CHECK(gm_cg_solve(&A, b, x, &p, NULL, &res, err, sizeof(err)) == GM_ERANGE &&
				  err_has("overflows double precision", "x element 2 is about 1.0", "e+320"),
				  "mode %d: overflowing solution: %s", mode, err);
		}
		gm_spmat_free(&A);

		/* diagonal {4, 1}, b = {1e308, 1e308}: x = {2.5e307, 1e308} */
		CHECK(diag_matrix(d2, 2, &A) == GM_OK, "%s", err);
		b[0] = b[1] = 1e308;
		x[0] = x[1] = 0;
		CHECK(gm_cg_solve(&A, b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "mode %d: %s", mode, err);
		CHECK(res.converged && fabs(x[0] / 2.5e307 - 1) <= 1e-12 && fabs(x[1] / 1e308 - 1) <= 1e-12 &&
			  res.residual <= p.tolerance,
			  "mode %d: rhs 1e308: converged %d residual %.3g x = {%.17g, %.17g}", mode,
			  res.converged, res.residual, x[0], x[1]);
		gm_spmat_free(&A);
	}

	/* a random SPD system with b scaled by 2^1000 and 2^-1000: x scales with it */
	for (int trial = 0; trial < 4; trial++)
	{
		cg_case		k;
		int64_t		n = rint_range(20, 200);
		double	   *x = xcalloc(n, sizeof(double)),
				   *xs;
		int			e = trial & 1 ? -1000 : 1000;

		if (make_cg_case(&k, n, 6, 0.5, 1.0))
			FAIL("%s", err);
		gm_cg_params_default(&p);
		p.tolerance = 1e-10;
		p.preconditioner = trial & 2 ? GM_PRECOND_NONE : GM_PRECOND_JACOBI;
		CHECK(gm_cg_solve(&k.A, k.b, x, &p, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
		xs = xcalloc(n, sizeof(double));
		for (int64_t i = 0; i < n; i++)
			k.b[i] = ldexp(k.b[i], e);
		CHECK(gm_cg_solve(&k.A, k.b, xs, &p, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(res.converged && res.residual <= 1e-10, "2^%d: converged %d residual %.3g", e,
			  res.converged, res.residual);
		for (int64_t i = 0; i < n; i++)
			xs[i] = ldexp(xs[i], -e);
		CHECK(relerr(xs, x, n) <= 1e-8, "2^%d: |x_scaled / 2^e - x| / |x| = %.3g", e, relerr(xs, x, n));
		free(x);
		free(xs);
		free_cg_case(&k);
	}
	return 0;
fail:
	gm_spmat_free(&A);
	return 1;
}

static int	stop_after;
static int	stop_calls;

static int
stop_cb(void *arg)
{
	(void) arg;
	return ++stop_calls >= stop_after;
}

/* should_stop is polled and a stop returns GM_ECANCELED; an indefinite A is refused. */
static int
test_cg_cancel_and_indefinite(void)
{
	cg_case		k;
	gm_cg_params p;
	gm_cg_result res;
	gm_callbacks cb = {stop_cb, NULL, NULL};
	int64_t		n = 300;
	double	   *x = xcalloc(n, sizeof(double));
	int			rc;

	if (make_cg_case(&k, n, 8, 1e-5, 1.0))
		FAIL("%s", err);
	gm_cg_params_default(&p);
	p.tolerance = 1e-14;
	stop_after = 3;
	stop_calls = 0;
	rc = gm_cg_solve(&k.A, k.b, x, &p, &cb, &res, err, sizeof(err));
	CHECK(rc == GM_ECANCELED && stop_calls == 3, "rc %d after %d polls: %s", rc, stop_calls, err);
	free_cg_case(&k);

	/* symmetric, positive diagonal, indefinite: [[1, 2], [2, 1]] */
	{
		int64_t		r[4] = {0, 1, 0, 1},
					c[4] = {0, 1, 1, 0};
		double		v[4] = {1, 1, 2, 2},
					b[2] = {1, -1},
					x2[2] = {0, 0};
		gm_coo		co = {4, r, c, v, 1};
		gm_spmat	A;

		CHECK(gm_spmat_from_coo(&co, 2, GM_TRI_BOTH, 1, &A, err, sizeof(err)) == GM_OK, "%s", err);
		rc = gm_cg_solve(&A, b, x2, &p, NULL, &res, err, sizeof(err));
		CHECK(rc == GM_EINVAL && strstr(err, "not positive definite"), "indefinite: %d %s",
			  rc, err);
		/* b = 0: x = 0, converged at once */
		b[0] = b[1] = 0;
		x2[0] = 5;
		rc = gm_cg_solve(&A, b, x2, &p, NULL, &res, err, sizeof(err));
		CHECK(rc == GM_OK && res.converged && x2[0] == 0 && x2[1] == 0 && res.iterations == 0,
			  "b = 0: rc %d converged %d x %g %g", rc, res.converged, x2[0], x2[1]);
		gm_spmat_free(&A);
	}
	free(x);
	return 0;
fail:
	return 1;
}

/* A larger system on 1 and 2 threads: both converge, to the same x within the tolerance. */
static int
test_cg_large_threads(void)
{
	int64_t		n = 150000;
	coo_buf		b;
	gm_spmat	A;
	gm_coo_info info;
	gm_cg_params p;
	gm_cg_result r1,
				r2;
	double	   *rhs = xmalloc(sizeof(double) * n),
			   *x1 = xcalloc(n, sizeof(double)),
			   *x2 = xcalloc(n, sizeof(double));

	random_spd(&b, n, 6, 0, 0.05, 1.0, NULL);
	CHECK(build(&b, n, &A, &info, 2) == GM_OK, "%s", err);
	for (int64_t i = 0; i < n; i++)
		rhs[i] = rnorm();
	gm_cg_params_default(&p);
	p.threads = 1;
	CHECK(gm_cg_solve(&A, rhs, x1, &p, NULL, &r1, err, sizeof(err)) == GM_OK, "%s", err);
	p.threads = 2;
	CHECK(gm_cg_solve(&A, rhs, x2, &p, NULL, &r2, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(r1.converged && r2.converged, "converged %d %d (%.3g %.3g)", r1.converged,
		  r2.converged, r1.residual, r2.residual);
	CHECK(abs(r1.iterations - r2.iterations) <= 16, "iterations %d vs %d", r1.iterations,
		  r2.iterations);
	CHECK(relerr(x2, x1, n) < 1e-5, "1 vs 2 threads: %.3g", relerr(x2, x1, n));
	printf("# cg n=%lld nnz=%lld: %d iterations, %.3f s on 1 thread, %.3f s on 2\n",
		   (long long) n, (long long) A.nnz, r1.iterations, r1.seconds, r2.seconds);
	gm_spmat_free(&A);
	coo_free(&b);
	free(rhs);
	free(x1);
	free(x2);
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ least squares */

/* NIST StRD Longley: y, then x1 .. x6 (16 observations). */
static const double longley[16][7] = {
	{60323, 83.0, 234289, 2356, 1590, 107608, 1947},
	{61122, 88.5, 259426, 2325, 1456, 108632, 1948},
	{60171, 88.2, 258054, 3682, 1616, 109773, 1949},
	{61187, 89.5, 284599, 3351, 1650, 110929, 1950},
	{63221, 96.2, 328975, 2099, 3099, 112075, 1951},
	{63639, 98.1, 346999, 1932, 3594, 113270, 1952},
	{64989, 99.0, 365385, 1870, 3547, 115094, 1953},
	{63761, 100.0, 363112, 3578, 3350, 116219, 1954},
	{66019, 101.2, 397469, 2904, 3048, 117388, 1955},
	{67857, 104.6, 419180, 2822, 2857, 118734, 1956},
	{68169, 108.4, 442769, 2936, 2798, 120445, 1957},
	{66513, 110.8, 444546, 4681, 2637, 121950, 1958},
	{68655, 112.6, 482704, 3813, 2552, 123366, 1959},
	{69564, 114.2, 502601, 3931, 2514, 125368, 1960},
	{69331, 115.7, 518173, 4806, 2572, 127852, 1961},
	{70551, 116.9, 554894, 4007, 2827, 130081, 1962},
};

/* Certified estimates and standard deviations of B0 .. B6. */
static const double longley_cert[7][2] = {
	{-3482258.63459582, 890420.383607373},
	{15.0618722713733, 84.9149257747669},
	{-0.358191792925910e-01, 0.334910077722432e-01},
	{-2.02022980381683, 0.488399681651699},
	{-1.03322686717359, 0.214274163161675},
	{-0.511041056535807e-01, 0.226073200069370},
	{1829.15146461355, 455.478499142212},
};

/* NIST StRD Norris: y, x (36 observations). */
static const double norris[36][2] = {
	{0.1, 0.2}, {338.8, 337.4}, {118.1, 118.2}, {888.0, 884.6}, {9.2, 10.1},
	{228.1, 226.5}, {668.5, 666.3}, {998.5, 996.3}, {449.1, 448.6}, {778.9, 777.0},
	{559.2, 558.2}, {0.3, 0.4}, {0.1, 0.6}, {778.1, 775.5}, {668.8, 666.9},
	{339.3, 338.0}, {448.9, 447.5}, {10.8, 11.6}, {557.7, 556.0}, {228.3, 228.1},
	{998.0, 995.8}, {888.8, 887.6}, {119.6, 120.2}, {0.3, 0.3}, {0.6, 0.3},
	{557.6, 556.8}, {339.3, 339.1}, {888.0, 887.2}, {998.5, 999.0}, {778.9, 779.0},
	{10.2, 11.1}, {117.6, 118.3}, {228.9, 229.2}, {668.4, 669.1}, {449.2, 448.9},
	{0.2, 0.5},
};

typedef struct ols_out
{
	double		coef[64],
				se[64],
				t[64],
				pv[64];
	int			involved[64];
	gm_ols_result r;
} ols_out;

static void
ols_out_init(ols_out *o)
{
	memset(o, 0, sizeof(*o));
	o->r.coef = o->coef;
	o->r.std_err = o->se;
	o->r.t_stat = o->t;
	o->r.p_value = o->pv;
	o->r.involved = o->involved;
}

static gm_ols_state *
ols_new(int k, int intercept)
{
	gm_ols_state *s = xmalloc(gm_ols_state_size(k));

	if (gm_ols_init(s, k, intercept, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "gm_ols_init: %s\n", err);
		exit(2);
	}
	return s;
}

/* digits of agreement: -log10 |a - b| / |b| */
static double
lre(double a, double b)
{
	double		e = fabs(a - b) / fabs(b);

	return e == 0 ? 17 : -log10(e);
}

/* Longley: every coefficient and standard error to at least 8 (in fact ~11) digits. */
static int
test_ols_longley(void)
{
	double		X[16 * 6],
				y[16];
	ols_out		o;
	double		worst = 99;

	for (int i = 0; i < 16; i++)
	{
		y[i] = longley[i][0];
		for (int j = 0; j < 6; j++)
			X[i * 6 + j] = longley[i][j + 1];
	}
	for (int mode = 0; mode < 3; mode++)
	{
		gm_ols_state *s = ols_new(6, 1);

		ols_out_init(&o);
		if (mode == 0)
			for (int i = 0; i < 16; i++)
				CHECK(gm_ols_add_row(s, X + i * 6, y[i], err, sizeof(err)) == GM_OK, "%s", err);
		else if (mode == 1)
			CHECK(gm_ols_add_rows(s, 16, X, 6, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
		else
		{
			/* two states merged, the second with other shifts */
			gm_ols_state *s2 = ols_new(6, 1);

			for (int i = 0; i < 16; i++)
				CHECK(gm_ols_add_row(i % 3 ? s : s2, X + i * 6, y[i], err, sizeof(err)) == GM_OK,
					  "%s", err);
			CHECK(gm_ols_merge(s, s2, err, sizeof(err)) == GM_OK, "%s", err);
			free(s2);
		}
		CHECK(gm_ols_finalize(s, &o.r, err, sizeof(err)) == GM_OK, "%s", err);
		for (int j = 0; j < 7; j++)
		{
			double		a = lre(o.coef[j], longley_cert[j][0]),
						b = lre(o.se[j], longley_cert[j][1]);

			worst = fmin(worst, fmin(a, b));
			CHECK(a >= 8 && b >= 8, "mode %d B%d = %.15g (certified %.15g), SD %.15g "
				  "(certified %.15g): %.1f and %.1f digits", mode, j, o.coef[j],
				  longley_cert[j][0], o.se[j], longley_cert[j][1], a, b);
		}
		CHECK(lre(o.r.residual_se, 304.854073561965) >= 8, "residual SD %.15g",
			  o.r.residual_se);
		CHECK(lre(o.r.r2, 0.995479004577296) >= 8, "R^2 %.15g", o.r.r2);
		CHECK(o.r.rows_used == 16 && o.r.df_residual == 9, "rows %lld df %lld",
			  (long long) o.r.rows_used, (long long) o.r.df_residual);
		/* a famously ill-conditioned X: its 2-norm condition number is about 4.86e9 */
		CHECK(o.r.condition_number > 4.5e9 && o.r.condition_number < 5.2e9,
			  "condition number %.4g", o.r.condition_number);
		free(s);
	}
	printf("# longley: worst agreement with NIST %.1f digits (coefficients and SDs)\n", worst);
	return 0;
fail:
	return 1;
}

/*
 * Longley with y scaled by 2^+-520 (beyond 1e156 and below 1e-150, where
 * y's squares leave double's range): the same R^2 and adjusted R^2, and
 * the coefficients and residual standard error scaled by the same power.
 */
static int
test_ols_longley_scaled(void)
{
	double		X[16 * 6],
				y[16];
	ols_out		o;

	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 6; j++)
			X[i * 6 + j] = longley[i][j + 1];
	for (int mode = 0; mode < 2; mode++)
	{
		int			e = mode ? -520 : 520;
		gm_ols_state *s = ols_new(6, 1);

		for (int i = 0; i < 16; i++)
			y[i] = ldexp(longley[i][0], e);
		ols_out_init(&o);
		CHECK(gm_ols_add_rows(s, 16, X, 6, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_finalize(s, &o.r, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(lre(o.r.r2, 0.995479004577296) >= 8 && lre(o.r.adj_r2, 0.992465007628826) >= 8,
			  "y * 2^%d: R^2 %.15g adjusted %.15g", e, o.r.r2, o.r.adj_r2);
		CHECK(lre(ldexp(o.r.residual_se, -e), 304.854073561965) >= 8, "y * 2^%d: residual SD %.15g",
			  e, ldexp(o.r.residual_se, -e));
		for (int j = 0; j < 7; j++)
			CHECK(lre(ldexp(o.coef[j], -e), longley_cert[j][0]) >= 8, "y * 2^%d: B%d = %.15g", e, j,
				  ldexp(o.coef[j], -e));
		free(s);
	}
	return 0;
fail:
	return 1;
}

static int
test_ols_norris(void)
{
	double		X[36],
				y[36];
	ols_out		o;
	gm_ols_state *s = ols_new(1, 1);

	for (int i = 0; i < 36; i++)
	{
		y[i] = norris[i][0];
		X[i] = norris[i][1];
	}
	ols_out_init(&o);
	CHECK(gm_ols_add_rows(s, 36, X, 1, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(gm_ols_finalize(s, &o.r, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(lre(o.coef[0], -0.262323073774029) >= 9 && lre(o.coef[1], 1.00211681802045) >= 9,
		  "coef %.15g %.15g", o.coef[0], o.coef[1]);
	CHECK(lre(o.se[0], 0.232818234301152) >= 9 && lre(o.se[1], 0.429796848199937e-03) >= 9,
		  "SD %.15g %.15g", o.se[0], o.se[1]);
	CHECK(lre(o.r.residual_se, 0.884796396144373) >= 9 && lre(o.r.r2, 0.999993745883712) >= 9,
		  "residual SD %.15g R^2 %.15g", o.r.residual_se, o.r.r2);
	CHECK(lre(o.r.rss, 26.6173985294224) >= 9, "RSS %.15g", o.r.rss);
	free(s);
	return 0;
fail:
	free(s);
	return 1;
}

/*
 * The reference: Householder QR of the whole n x p design matrix A
 * (column-major), independent of ols.c; coefficients, standard errors.
 */
static void
ref_qr_fit(double *A, int64_t n, int p, double *y, double *coef, double *se, double *rss_out)
{
	double	   *Ri = xcalloc((size_t) p * p, sizeof(double));
	double		rss = 0.0;

	for (int j = 0; j < p; j++)
	{
		double	   *a = A + (size_t) j * n;
		double		nn = 0.0,
					alpha,
					v0;

		for (int64_t i = j; i < n; i++)
			nn += a[i] * a[i];
		nn = sqrt(nn);
		alpha = a[j] > 0 ? -nn : nn;
		v0 = a[j] - alpha;
		/* v = (v0, a[j+1..]) ; H = I - 2 v v' / v'v */
		{
			double		vv = v0 * v0;

			for (int64_t i = j + 1; i < n; i++)
				vv += a[i] * a[i];
			for (int l = j + 1; l <= p; l++)
			{
				double	   *b = l < p ? A + (size_t) l * n : y;
				double		d = v0 * b[j];

				for (int64_t i = j + 1; i < n; i++)
					d += a[i] * b[i];
				d = 2.0 * d / vv;
				b[j] -= d * v0;
				for (int64_t i = j + 1; i < n; i++)
					b[i] -= d * a[i];
			}
		}
		a[j] = alpha;
	}
	for (int i = p - 1; i >= 0; i--)
	{
		double		acc = y[i];

		for (int j = i + 1; j < p; j++)
			acc -= A[(size_t) j * n + i] * coef[j];
		coef[i] = acc / A[(size_t) i * n + i];
	}
	for (int64_t i = p; i < n; i++)
		rss += y[i] * y[i];
	for (int j = p - 1; j >= 0; j--)
	{
		Ri[j * p + j] = 1.0 / A[(size_t) j * n + j];
		for (int i = j - 1; i >= 0; i--)
		{
			double		acc = 0.0;

			for (int l = i + 1; l <= j; l++)
				acc += A[(size_t) l * n + i] * Ri[l * p + j];
			Ri[i * p + j] = -acc / A[(size_t) i * n + i];
		}
	}
	for (int j = 0; j < p; j++)
	{
		double		acc = 0.0;

		for (int l = j; l < p; l++)
			acc += Ri[j * p + l] * Ri[j * p + l];
		se[j] = sqrt(rss / (double) (n - p)) * sqrt(acc);
	}
	*rss_out = rss;
	free(Ri);
}

/*
 * Polynomial columns x, x^2, .., x^10 on [0, 1] (condition number ~1e8):
 * coefficients and standard errors match the reference QR to 1e-6
 * relative, with and without an intercept, one-shot and streamed.
 */
static int
test_ols_polynomial(void)
{
	for (int trial = 0; trial < 4; trial++)
	{
		int			intercept = trial % 2 == 0,
					k = 10,
					p = k + intercept;
		int64_t		n = rint_range(200, 3000);
		double	   *X = xmalloc(sizeof(double) * n * k),
				   *y = xmalloc(sizeof(double) * n),
				   *A = xmalloc(sizeof(double) * n * p),
				   *yc = xmalloc(sizeof(double) * n);
		double		coef[11],
					se[11],
					rss,
					worst = 0;
		double		truth[11];
		ols_out		o;
		gm_ols_state *s = ols_new(k, intercept);

		for (int j = 0; j < 11; j++)
			truth[j] = (runif() < 0.5 ? -1 : 1) * (0.5 + runif());
		for (int64_t i = 0; i < n; i++)
		{
			double		x = runif(),
						xp = 1.0,
						v = intercept ? truth[0] : 0.0;

			for (int j = 0; j < k; j++)
			{
				xp *= x;
				X[i * k + j] = xp;
				v += truth[j + intercept] * xp;
			}
			y[i] = v + 1e-7 * rnorm();
			yc[i] = y[i];
			if (intercept)
				A[i] = 1.0;
			for (int j = 0; j < k; j++)
				A[(size_t) (j + intercept) * n + i] = X[i * k + j];
		}
		ref_qr_fit(A, n, p, yc, coef, se, &rss);
		ols_out_init(&o);
		if (trial < 2)
			CHECK(gm_ols_add_rows(s, n, X, k, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
		else
			for (int64_t i = 0; i < n; i++)
				CHECK(gm_ols_add_row(s, X + i * k, y[i], err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_finalize(s, &o.r, err, sizeof(err)) == GM_OK, "trial %d: %s", trial, err);
		for (int j = 0; j < p; j++)
		{
			double		ec = fabs(o.coef[j] - coef[j]) / fabs(coef[j]),
						es = fabs(o.se[j] - se[j]) / fabs(se[j]);

			worst = fmax(worst, fmax(ec, es));
			CHECK(ec <= 1e-6 && es <= 1e-6, "trial %d (intercept %d, n %lld) coefficient %d: "
				  "%.12g vs %.12g, SE %.12g vs %.12g", trial, intercept, (long long) n, j,
				  o.coef[j], coef[j], o.se[j], se[j]);
		}
		CHECK(fabs(o.r.rss - rss) <= 1e-6 * rss, "RSS %.12g vs %.12g", o.r.rss, rss);
		if (trial == 0)
			printf("# polynomial degree 10 on [0,1]: condition number %.3g, worst relative "
				   "difference from the reference QR %.2g\n", o.r.condition_number, worst);
		free(s);
		free(X);
		free(y);
		free(A);
		free(yc);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* One-shot (many threads), row by row, random chunks and merged random splits agree. */
static int
test_ols_streaming_merge(void)
{
	for (int trial = 0; trial < 6; trial++)
	{
		int			k = (int) rint_range(1, 12),
					intercept = trial % 3 != 2,
					p = k + intercept;
		int64_t		n = rint_range(p + 2, trial == 0 ? 60000 : 5000);
		double	   *X = xmalloc(sizeof(double) * n * k),
				   *y = xmalloc(sizeof(double) * n);
		double		off[12];
		ols_out		a,
					b,
					c,
					d;
		gm_ols_state *s1 = ols_new(k, intercept),
				   *s2 = ols_new(k, intercept),
				   *s3 = ols_new(k, intercept),
				   *parts[4];
		gm_ols_exec ex = {2, NULL, NULL, 0};

		for (int j = 0; j < k; j++)
			off[j] = (runif() - 0.5) * 1e4;
		for (int64_t i = 0; i < n; i++)
		{
			double		v = 3.0;

			for (int j = 0; j < k; j++)
			{
				X[i * k + j] = off[j] + rnorm() * (1 + j);
				v += (j + 1) * 0.1 * X[i * k + j];
			}
			y[i] = v + rnorm();
		}
		ols_out_init(&a);
		ols_out_init(&b);
		ols_out_init(&c);
		ols_out_init(&d);
		CHECK(gm_ols_add_rows(s1, n, X, k, y, &ex, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_finalize(s1, &a.r, err, sizeof(err)) == GM_OK, "%s", err);
		for (int64_t i = 0; i < n; i++)
			CHECK(gm_ols_add_row(s2, X + i * k, y[i], err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_finalize(s2, &b.r, err, sizeof(err)) == GM_OK, "%s", err);
		for (int64_t i = 0; i < n;)
		{
			int64_t		len = rint_range(1, 3000);

			if (len > n - i)
				len = n - i;
			CHECK(gm_ols_add_rows(s3, len, X + i * k, k, y + i, &ex, err, sizeof(err)) == GM_OK,
				  "%s", err);
			i += len;
		}
		CHECK(gm_ols_finalize(s3, &c.r, err, sizeof(err)) == GM_OK, "%s", err);
		/* four partial states, rows dealt at random, merged in a tree */
		for (int q = 0; q < 4; q++)
			parts[q] = ols_new(k, intercept);
		for (int64_t i = 0; i < n; i++)
			CHECK(gm_ols_add_row(parts[rint_range(0, 3)], X + i * k, y[i], err, sizeof(err)) == GM_OK,
				  "%s", err);
		gm_ols_skip_rows(parts[2], 5);
		CHECK(gm_ols_merge(parts[0], parts[1], err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_merge(parts[3], parts[2], err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_merge(parts[3], parts[0], err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_finalize(parts[3], &d.r, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(d.r.rows_used == n && d.r.rows_skipped == 5, "merged rows %lld skipped %lld",
			  (long long) d.r.rows_used, (long long) d.r.rows_skipped);
		for (int j = 0; j < p; j++)
		{
			double		ref = a.coef[j],
						sref = a.se[j],
			/*
			 * Summation order moves a coefficient by rounding in proportion
			 * to how ill-determined it is, which its standard error
			 * measures: an intercept far from the data (offsets up to 5e3)
			 * can come out near 0 with an SE in the tens, and a bound
			 * relative to the coefficient alone is then no bound.
			 */
						tol = 1e-9 * (fabs(ref) + sref);

			CHECK(fabs(b.coef[j] - ref) <= tol && fabs(c.coef[j] - ref) <= tol
				  && fabs(d.coef[j] - ref) <= tol,
				  "trial %d coefficient %d (SE %.3g): one-shot %.15g, rows %.15g, chunks %.15g, merged %.15g",
				  trial, j, sref, ref, b.coef[j], c.coef[j], d.coef[j]);
			CHECK(fabs(b.se[j] - sref) <= 1e-9 * sref && fabs(d.se[j] - sref) <= 1e-9 * sref,
				  "trial %d SE %d: %.15g %.15g %.15g", trial, j, sref, b.se[j], d.se[j]);
		}
		CHECK(fabs(d.r.r2 - a.r.r2) <= 1e-12 && fabs(b.r.residual_se - a.r.residual_se) <= 1e-9 * a.r.residual_se,
			  "r2 %.15g vs %.15g", d.r.r2, a.r.r2);
		for (int q = 0; q < 4; q++)
			free(parts[q]);
		free(s1);
		free(s2);
		free(s3);
		free(X);
		free(y);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* Rank deficiency names the columns; other bad inputs give clear errors. */
static int
test_ols_rank_and_errors(void)
{
	int64_t		n = 50;
	int			k = 4;
	double	   *X = xmalloc(sizeof(double) * n * k),
			   *y = xmalloc(sizeof(double) * n);
	ols_out		o;
	gm_ols_state *s;
	int			rc;

	/* x3 = 2 x1 - x2 + 5 (collinear with x1, x2 and the intercept) */
	for (int64_t i = 0; i < n; i++)
	{
		X[i * k] = rnorm();
		X[i * k + 1] = rnorm();
		X[i * k + 2] = 2 * X[i * k] - X[i * k + 1] + 5;
		X[i * k + 3] = rnorm();
		y[i] = rnorm();
	}
	s = ols_new(k, 1);
	ols_out_init(&o);
	CHECK(gm_ols_add_rows(s, n, X, k, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_ols_finalize(s, &o.r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && o.r.n_involved == 4 && o.involved[0] == 3 && o.involved[1] == 0 &&
		  o.involved[2] == 1 && o.involved[3] == 2,
		  "collinear: rc %d involved %d [%d %d %d %d]: %s", rc, o.r.n_involved, o.involved[0],
		  o.involved[1], o.involved[2], o.involved[3], err);
	CHECK(strstr(err, "x column 3 is a linear combination of the intercept and x columns 1 and 2"),
		  "message: %s", err);
	free(s);

	/* without the constant: the intercept is not involved */
	for (int64_t i = 0; i < n; i++)
		X[i * k + 2] = 2 * X[i * k] - X[i * k + 1];
	s = ols_new(k, 0);
	ols_out_init(&o);
	CHECK(gm_ols_add_rows(s, n, X, k, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_ols_finalize(s, &o.r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && o.r.n_involved == 3 && o.involved[0] == 2 && o.involved[1] == 0 &&
		  o.involved[2] == 1 && strstr(err, "x column 3 is a linear combination of x columns 1 and 2"),
		  "no intercept: %d involved %d: %s", rc, o.r.n_involved, err);
	free(s);

	/* a constant column with an intercept; an all-zero column */
	for (int64_t i = 0; i < n; i++)
	{
		X[i * k + 2] = rnorm();
		X[i * k + 1] = 1954.0;
	}
	s = ols_new(k, 1);
	ols_out_init(&o);
	CHECK(gm_ols_add_rows(s, n, X, k, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_ols_finalize(s, &o.r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && strstr(err, "x column 2 is constant") && o.involved[0] == 2 &&
		  o.involved[1] == 0, "constant: %s", err);
	free(s);
	for (int64_t i = 0; i < n; i++)
		X[i * k + 1] = 0.0;
	s = ols_new(k, 0);
	ols_out_init(&o);
	CHECK(gm_ols_add_rows(s, n, X, k, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_ols_finalize(s, &o.r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && strstr(err, "x column 2 is all zeros"), "zeros: %s", err);
	free(s);

	/* NaN in a row; too few rows; no rows */
	s = ols_new(k, 1);
	X[7 * k + 3] = NAN;
	rc = gm_ols_add_rows(s, n, X, k, y, NULL, err, sizeof(err));
	CHECK(rc == GM_EINVAL && strstr(err, "x column 4 of row 8 is NaN"), "NaN: %s", err);
	CHECK(s->rows_used == 0, "rows added despite the error");
	ols_out_init(&o);
	gm_ols_skip_rows(s, 3);
	rc = gm_ols_finalize(s, &o.r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && strstr(err, "no rows") && strstr(err, "NULL"), "no rows: %s", err);
	X[7 * k + 3] = 1.0;
	CHECK(gm_ols_add_rows(s, 3, X, k, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
	rc = gm_ols_finalize(s, &o.r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && strstr(err, "3 rows cannot determine 5 coefficients"), "few: %s", err);
	free(s);
	free(X);
	free(y);
	return 0;
fail:
	return 1;
}

/*
 * Student t p-values and the incomplete beta: closed forms (df 1: Cauchy,
 * df 2), identities of I_x(a, b), and the normal limit.
 */
static int
test_pvalues(void)
{
	for (int trial = 0; trial < 200; trial++)
	{
		double		t = (runif() - 0.5) * 40.0 * runif(),
					a = 0.1 + 20 * runif(),
					b = 0.1 + 20 * runif(),
					x = runif(),
					p1 = 1.0 - 2.0 / M_PI * atan(fabs(t)),
					p2 = 1.0 - fabs(t) / sqrt(2.0 + t * t),
					g;

		g = gm_student_t_pvalue(t, 1);
		CHECK(fabs(g - p1) <= 1e-12 * p1 + 1e-300, "df 1 t %.6g: %.15g vs %.15g", t, g, p1);
		g = gm_student_t_pvalue(t, 2);
		CHECK(fabs(g - p2) <= 1e-12 * p2 + 1e-300, "df 2 t %.6g: %.15g vs %.15g", t, g, p2);
		g = gm_betainc(a, 1.0, x);
		CHECK(fabs(g - pow(x, a)) <= 1e-12 * pow(x, a) + 1e-300, "I_x(a, 1): %.15g vs %.15g",
			  g, pow(x, a));
		g = gm_betainc(1.0, b, x);
		CHECK(fabs(g - (-expm1(b * log1p(-x)))) <= 1e-12, "I_x(1, b): %.15g", g);
		g = gm_betainc(a, b, x) + gm_betainc(b, a, 1.0 - x);
		CHECK(fabs(g - 1.0) <= 1e-12, "symmetry a %.3g b %.3g x %.3g: sum %.15g", a, b, x, g);
	}
	/* large df: near the normal two-sided tail (they differ by O(t^4 / df)) */
	for (double t = 0.0; t < 6.0; t += 0.37)
	{
		double		g = gm_student_t_pvalue(t, 1e9),
					nrm = erfc(t / sqrt(2.0));

		CHECK(fabs(g - nrm) <= 1e-6 * nrm, "df 1e9 t %.2f: %.12g vs %.12g", t, g, nrm);
	}
	/* values computed with 40-digit arithmetic (mpmath's betainc) */
	{
		static const double ref[][3] = {
			{1e9, 4.81, 1.5093031774480447e-6},
			{1e9, 1.85, 0.064313549886031311},
			{1e7, 9.0, 2.257556165390743e-19},
			{1e7, 30.0, 1.00146136908178e-197},
			{5e6, 2.2, 0.027806940604763798},
			{5e6, 12.0, 3.5567008238796126e-33},
			{1e6, 0.7, 0.48392746728654142},
			{1e6, 20.0, 5.7330870473903718e-89},
			{1e5, 3.3, 0.00096718626232714202},
			{200, -1.0, 0.31851884790974667},
			{30, 2.5, 0.018115649068066694},
			{7, 0.3, 0.77289005040213427},
			{3.5, 12.0, 0.00057453419285612786},
		};

		for (int i = 0; i < (int) (sizeof(ref) / sizeof(ref[0])); i++)
		{
			double		g = gm_student_t_pvalue(ref[i][1], ref[i][0]);

			CHECK(fabs(g - ref[i][2]) <= 1e-9 * ref[i][2], "df %g t %g: %.15g vs %.15g",
				  ref[i][0], ref[i][1], g, ref[i][2]);
		}
	}
	/* a textbook value: t = 2.228 with 10 df is the 5% two-sided point */
	CHECK(fabs(gm_student_t_pvalue(2.228138851986, 10) - 0.05) < 1e-9, "t(10) 5%% point: %.12g",
		  gm_student_t_pvalue(2.228138851986, 10));
	return 0;
fail:
	return 1;
}

/* The condition number of X = G R_G^-1 diag(sigma) is max sigma / min sigma. */
static int
test_condition_number(void)
{
	int			ps[2] = {7, 300};

	for (int t = 0; t < 2; t++)
	{
		int			p = ps[t];
		int64_t		n = 2 * p + 50;
		double	   *G = xmalloc(sizeof(double) * n * p),
				   *Q = xmalloc(sizeof(double) * n * p),
				   *Xr = xmalloc(sizeof(double) * n * p),
				   *y = xmalloc(sizeof(double) * n),
				   *c0 = xmalloc(sizeof(double) * p),
				   *s0 = xmalloc(sizeof(double) * p);
		double		sig[300],
					smax = 0,
					smin = 1e300,
					rss;
		gm_ols_state *s = ols_new(p, 0);
		gm_ols_result r;
		double	   *co = xmalloc(sizeof(double) * 4 * p);
		int		   *inv = xmalloc(sizeof(int) * p);

		/* orthonormal columns by Gram-Schmidt twice on a random matrix */
		for (int64_t i = 0; i < n * p; i++)
			G[i] = rnorm();
		for (int j = 0; j < p; j++)
		{
			double	   *q = Q + (size_t) j * n;

			memcpy(q, G + (size_t) j * n, sizeof(double) * n);
			for (int pass = 0; pass < 2; pass++)
				for (int l = 0; l < j; l++)
				{
					double		d = 0;

					for (int64_t i = 0; i < n; i++)
						d += Q[(size_t) l * n + i] * q[i];
					for (int64_t i = 0; i < n; i++)
						q[i] -= d * Q[(size_t) l * n + i];
				}
			{
				double		nn = 0;

				for (int64_t i = 0; i < n; i++)
					nn += q[i] * q[i];
				nn = sqrt(nn);
				for (int64_t i = 0; i < n; i++)
					q[i] /= nn;
			}
			sig[j] = pow(10.0, 4.0 * runif());
			smax = fmax(smax, sig[j]);
			smin = fmin(smin, sig[j]);
		}
		for (int64_t i = 0; i < n; i++)
		{
			for (int j = 0; j < p; j++)
				Xr[i * p + j] = Q[(size_t) j * n + i] * sig[j];
			y[i] = rnorm();
		}
		memset(&r, 0, sizeof(r));
		r.coef = co;
		r.std_err = co + p;
		r.t_stat = co + 2 * p;
		r.p_value = co + 3 * p;
		r.involved = inv;
		CHECK(gm_ols_add_rows(s, n, Xr, p, y, NULL, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_ols_finalize(s, &r, err, sizeof(err)) == GM_OK, "%s", err);
		/* exact (Jacobi SVD) up to 256 coefficients, power iterations above */
		CHECK(fabs(r.condition_number - smax / smin) <= (p <= 256 ? 1e-9 : 1e-4) * smax / smin,
			  "p %d: condition number %.10g, expected %.10g", p, r.condition_number, smax / smin);
		(void) rss;
		free(G);
		free(Q);
		free(Xr);
		free(y);
		free(c0);
		free(s0);
		free(s);
		free(co);
		free(inv);
		continue;
fail:
		return 1;
	}
	return 0;
}

/* Without the module (or a GPU) the GPU table is NULL with a reason. */
static int
test_cuda_ops_absent(void)
{
	const gm_linalg_ops *ops;

	err[0] = '\0';
	ops = gm_linalg_cuda_ops("/nonexistent/gpumf_cuda.so", err, sizeof(err));
	CHECK(ops == NULL && err[0] != '\0', "ops %p, reason '%s'", (const void *) ops, err);
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ main */

static const gm_test tests[] = {
	{"sparse from triplets (triangles, duplicates) and SpMV equal the dense product", test_spmv_vs_dense},
	{"SpMV on 2 threads equals 1 thread (long rows)", test_spmv_threads},
	{"bad sparse input: each error names the problem", test_validation_errors},
	{"CG (jacobi/none, double/single) converges to the tolerance vs dense Cholesky", test_cg_converges},
	{"CG honours the tolerance on the true residual (refinement, stagnation)", test_cg_true_residual},
	{"CG not converging returns the last iterate, converged = 0", test_cg_not_converged},
	{"CG cancellation, indefinite matrix, b = 0", test_cg_cancel_and_indefinite},
	{"CG on 150k rows, 1 vs 2 threads", test_cg_large_threads},
	{"CG at the edges of double's range: subnormal diagonal, rhs 1e308, 2^+-1000, overflow", test_cg_range},
	{"OLS Longley (NIST certified, 8+ digits)", test_ols_longley},
	{"OLS Longley with y near double's limits (2^+-520): same R^2, scaled coefficients", test_ols_longley_scaled},
	{"OLS Norris (NIST certified)", test_ols_norris},
	{"OLS polynomial degree 10 on [0,1] vs float64 Householder QR to 1e-6", test_ols_polynomial},
	{"OLS streaming, chunked, merged = one-shot", test_ols_streaming_merge},
	{"OLS rank deficiency names the columns; bad rows", test_ols_rank_and_errors},
	{"Student t p-values and the incomplete beta", test_pvalues},
	{"OLS condition number of X", test_condition_number},
	{"no CUDA module: the GPU table is absent, with a reason", test_cuda_ops_absent},
};

int
main(void)
{
	uint64_t	seed = gm_test_seed();

	printf("# test_linalg seed %llu (replay with GM_TEST_SEED=%llu)\n",
		   (unsigned long long) seed, (unsigned long long) seed);
	return gm_test_run(tests, (int) (sizeof(tests) / sizeof(tests[0])), seed);
}
