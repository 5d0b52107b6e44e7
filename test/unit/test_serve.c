/*
 * test_serve.c: unit tests of the core's serving pieces: the int8 first
 * pass (on every instruction set this CPU has), ranking among candidates,
 * cosine similarity, fold-in (against a float64 reference and against the
 * trainer itself), entry merging and key-map lookups.
 *
 * Random inputs are fresh on every run (GM_TEST_SEED replays one).  Output:
 * "ok N - name" or "not ok N - name: detail" per test, then
 * "N passed, M failed"; the exit status is non-zero when any test failed.
 */
#include "gm_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* a random sorted subset of [0, m) with probability p each */
static int32_t
random_subset(int32_t m, double p, int32_t *out)
{
	int32_t		n = 0;

	for (int32_t i = 0; i < m; i++)
		if (runif() < p)
			out[n++] = i;
	return n;
}

/* Solve A x = b (n x n, double) by Gaussian elimination with partial pivoting. */
static int
gauss_solve(double *A, double *b, int n)
{
	for (int c = 0; c < n; c++)
	{
		int			p = c;

		for (int r = c + 1; r < n; r++)
			if (fabs(A[(size_t) r * n + c]) > fabs(A[(size_t) p * n + c]))
				p = r;
		if (A[(size_t) p * n + c] == 0.0)
			return -1;
		if (p != c)
		{
			for (int j = 0; j < n; j++)
			{
				double		t = A[(size_t) c * n + j];

				A[(size_t) c * n + j] = A[(size_t) p * n + j];
				A[(size_t) p * n + j] = t;
			}
			{
				double		t = b[c];

				b[c] = b[p];
				b[p] = t;
			}
		}
		for (int r = c + 1; r < n; r++)
		{
			double		f = A[(size_t) r * n + c] / A[(size_t) c * n + c];

			for (int j = c; j < n; j++)
				A[(size_t) r * n + j] -= f * A[(size_t) c * n + j];
			b[r] -= f * b[c];
		}
	}
	for (int r = n - 1; r >= 0; r--)
	{
		double		s = b[r];

		for (int j = r + 1; j < n; j++)
			s -= A[(size_t) r * n + j] * b[j];
		b[r] = s / A[(size_t) r * n + r];
	}
	return 0;
}

/* ------------------------------------------------------ top n, int8 */

static const char *isas[] = {"plain", "avx2", "avx512vnni"};

/*
 * gm_topk_dot_among returns the float32 top n among the candidates (or all
 * items) on every instruction set: compared with a float64 reference
 * position by position, with skip lists, exact ties, n up to m, and factor
 * scales from 1e-3 to 1e3.
 */
static int
test_topk_among(void)
{
	for (int trial = 0; trial < 300; trial++)
	{
		int32_t		m = (int32_t) rint_range(1, 2500);
		int			k = (int) rint_range(1, trial % 17 == 0 ? GM_QMAT_MAX_K : 200);
		int			n = (int) rint_range(1, trial % 10 == 0 ? m + 5 : 30);
		double		scale = pow(10.0, (double) rint_range(-3, 3));
		float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
		float	   *x = xmalloc(sizeof(float) * k);
		float	   *ref = xmalloc(sizeof(float) * m);
		double	   *absdot = xmalloc(sizeof(double) * m);
		int32_t    *only = xmalloc(sizeof(int32_t) * m);
		int32_t    *skip = xmalloc(sizeof(int32_t) * m);
		int32_t    *oi = xmalloc(sizeof(int32_t) * (n + 1)),
				   *ri = xmalloc(sizeof(int32_t) * (n + 1));
		float	   *os = xmalloc(sizeof(float) * (n + 1)),
				   *rs = xmalloc(sizeof(float) * (n + 1));
		float	   *refonly = xmalloc(sizeof(float) * m);
		int32_t		nonly = 0,
					nskip,
					rescored;
		int			use_only = trial % 2;
		gm_qmat		Q;
		float	   *scratch;
		int			want;

		for (int64_t i = 0; i < (int64_t) m * k; i++)
			Y[i] = (float) ((runif() - 0.3) * scale);
		for (int32_t i = 1; i < m; i += 5)	/* exact duplicates: ties */
			memcpy(Y + (size_t) i * k, Y + (size_t) (i - 1) * k, sizeof(float) * k);
		if (m > 3)
			memset(Y + (size_t) 2 * k, 0, sizeof(float) * k);	/* a zero row */
		for (int f = 0; f < k; f++)
			x[f] = (float) (runif() - 0.5);
		if (trial % 3 == 1)
		{
			/*
			 * near ties: move every row along x so that its score is 1 plus
			 * noise far below the int8 step; the rows' quantisation errors
			 * stay independent, so the ranking rests on sound bounds
			 */
			double		xx = 0;

			for (int f = 0; f < k; f++)
				xx += (double) x[f] * x[f];
			for (int32_t i = 0; i < m; i++)
			{
				float	   *y = Y + (size_t) i * k;
				double		d = 0;

				for (int f = 0; f < k; f++)
					d += (double) x[f] * y[f];
				d = (scale * (1.0 + 1e-4 * runif()) - d) / xx;
				for (int f = 0; f < k; f++)
					y[f] = (float) (y[f] + d * x[f]);
			}
		}
		if (trial % 23 == 0)
			memset(x, 0, sizeof(float) * k);	/* everything ties at 0 */
		nskip = random_subset(m, 0.1, skip);
		if (use_only)
			nonly = random_subset(m, runif(), only);
		for (int32_t i = 0; i < m; i++)
		{
			double		d = 0,
						a = 0;

			for (int f = 0; f < k; f++)
			{
				d += (double) x[f] * Y[(size_t) i * k + f];
				a += fabs((double) x[f] * Y[(size_t) i * k + f]);
			}
			ref[i] = (float) d;
			absdot[i] = a;
		}
		/* the reference over the candidates: others get NaN (never rank) */
		for (int32_t i = 0; i < m; i++)
			refonly[i] = use_only ? NAN : ref[i];
		for (int32_t j = 0; j < nonly; j++)
			refonly[only[j]] = ref[only[j]];
		want = gm_topk(refonly, m, n, skip, nskip, ri, rs);

		CHECK(gm_qmat_build(Y, m, k, &Q) == GM_OK, "qmat build");
		scratch = xmalloc(sizeof(float) * gm_topk_dot_scratch(&Q));
		for (size_t a = 0; a < sizeof(isas) / sizeof(isas[0]); a++)
		{
			int			got;

			if (gm_serve_use_isa(isas[a]) != GM_OK)
				continue;		/* this CPU lacks it */
			got = gm_topk_dot_among(Y, &Q, x, n, use_only ? only : NULL, nonly,
									skip, nskip, scratch, oi, os, &rescored);
			CHECK(got == want, "%s m %d k %d n %d only %d: %d results, expected %d",
				  isas[a], m, k, n, nonly, got, want);
			CHECK(rescored >= got && rescored <= (use_only ? nonly : m),
				  "%s: %d rescored for %d results", isas[a], rescored, got);
			for (int r = 0; r < got; r++)
			{
				/*
				 * a float32 dot product of k terms, summed in any order, is
				 * within k u sum|x_f y_f| of the exact one (u = 2^-24), and
				 * the reference is the exact one rounded to float
				 */
				double		tol = (double) k * 0x1p-24 * 1.01 * fmax(absdot[oi[r]], absdot[ri[r]]) +
					0x1p-23 * fabs(rs[r]);

				CHECK(fabs(os[r] - rs[r]) <= tol,
					  "%s m %d k %d n %d: position %d score %.9g, reference %.9g (item %d vs %d)",
					  isas[a], m, k, n, r, os[r], rs[r], oi[r], ri[r]);
				CHECK(r == 0 || os[r] < os[r - 1] || (os[r] == os[r - 1] && oi[r] > oi[r - 1]),
					  "%s: not ordered at %d", isas[a], r);
				CHECK(!isnan(refonly[oi[r]]), "%s: item %d is no candidate", isas[a], oi[r]);
				for (int32_t j = 0; j < nskip; j++)
					CHECK(skip[j] != oi[r], "%s: skipped item %d returned", isas[a], oi[r]);
			}
		}
		gm_serve_use_isa(NULL);
		gm_qmat_free(&Q);
		free(scratch);
		free(Y);
		free(x);
		free(ref);
		free(absdot);
		free(refonly);
		free(only);
		free(skip);
		free(oi);
		free(ri);
		free(os);
		free(rs);
	}
	return 0;
fail:
	gm_serve_use_isa(NULL);
	return 1;
}

/*
 * Pass 1 split over threads (a catalog of 16 MB of int8 codes or more)
 * gives what one thread gives, item for item and bit for bit: all items
 * and candidate lists, with skip lists, n from 1 to 3000, 2 to 7 threads
 * (stretches of blocks that do not divide evenly).
 */
static int
test_topk_among_threads(void)
{
	const int32_t m = 170003;
	const int	k = 100;
	float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
	float	   *x = xmalloc(sizeof(float) * k);
	int32_t    *only = xmalloc(sizeof(int32_t) * m);
	int32_t    *skip = xmalloc(sizeof(int32_t) * m);
	int32_t    *i1 = xmalloc(sizeof(int32_t) * 3000),
			   *i2 = xmalloc(sizeof(int32_t) * 3000);
	float	   *s1 = xmalloc(sizeof(float) * 3000),
			   *s2 = xmalloc(sizeof(float) * 3000);
	float	   *scratch = NULL;
	gm_qmat		Q;

	for (int64_t i = 0; i < (int64_t) m * k; i++)
		Y[i] = (float) (runif() - 0.4);
	CHECK(gm_qmat_build(Y, m, k, &Q) == GM_OK, "qmat build");
	CHECK((int64_t) m * Q.kpad >= ((int64_t) 1 << 24), "the catalog is below the threads' threshold");
	scratch = xmalloc(sizeof(float) * gm_topk_dot_scratch(&Q));
	for (int trial = 0; trial < 8; trial++)
	{
		int			n = trial == 0 ? 1 : trial == 1 ? 3000 : (int) rint_range(2, 200);
		int			threads = 2 + trial % 6;
		int			use_only = trial % 2;
		int32_t		nonly = use_only ? random_subset(m, 0.95, only) : 0,
					nskip = trial % 3 ? random_subset(m, 0.05, skip) : 0,
					r1,
					r2;
		int			g1,
					g2;

		for (int f = 0; f < k; f++)
			x[f] = (float) (runif() - 0.5);
		g1 = gm_topk_dot_among_threads(Y, &Q, x, n, use_only ? only : NULL, nonly,
									   nskip ? skip : NULL, nskip, scratch, i1, s1, &r1, 1);
		g2 = gm_topk_dot_among_threads(Y, &Q, x, n, use_only ? only : NULL, nonly,
									   nskip ? skip : NULL, nskip, scratch, i2, s2, &r2, threads);
		CHECK(g1 == g2 && r1 == r2, "n %d, %d threads: %d results (%d rescored), one thread %d (%d)",
			  n, threads, g2, r2, g1, r1);
		for (int r = 0; r < g1; r++)
			CHECK(i1[r] == i2[r] && memcmp(&s1[r], &s2[r], sizeof(float)) == 0,
				  "n %d, %d threads, position %d: item %d %.9g, one thread %d %.9g",
				  n, threads, r, i2[r], s2[r], i1[r], s1[r]);
	}
	gm_qmat_free(&Q);
	free(scratch);
	free(Y);
	free(x);
	free(only);
	free(skip);
	free(i1);
	free(i2);
	free(s1);
	free(s2);
	return 0;
fail:
	return 1;
}

/*
 * The first pass's bounds hold, on every instruction set, for adversarial
 * factors: every component half a quantisation step off (less a hair),
 * signed against the query so that the errors add up, and queries built
 * the same way against the rows' codes; the worst error must come close to
 * its bound (so the test can tell a bound that is too tight).
 */
static int
test_bounds_adversarial(void)
{
	for (int trial = 0; trial < 200; trial++)
	{
		int32_t		m = (int32_t) rint_range(1, 300);
		int			k = (int) rint_range(1, trial % 9 == 0 ? GM_QMAT_MAX_K : 160);
		double		scale = pow(10.0, (double) rint_range(-3, 3));
		float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
		float	   *x = xmalloc(sizeof(float) * k);
		float	   *approx = xmalloc(sizeof(float) * m),
				   *bound = xmalloc(sizeof(float) * m);
		int8_t	   *sx = xmalloc(k);
		gm_qmat		Q;
		double		worst = 0;

		/* the query: integer codes plus 0.49 of a step, with random signs */
		for (int f = 0; f < k; f++)
		{
			sx[f] = runif() < 0.5 ? -1 : 1;
			x[f] = (float) (rint_range(-120, 120) + 0.49 * sx[f]) / 127.0f;
		}
		x[0] = 1.0f;			/* max|x| = 1: the query's step is 1/127 */
		for (int32_t i = 0; i < m; i++)
		{
			float	   *y = Y + (size_t) i * k;
			double		sg = runif() < 0.5 ? -1.0 : 1.0;

			/* codes off by 0.49 of a step, against (or with) the query's signs */
			for (int f = 0; f < k; f++)
				y[f] = (float) ((rint_range(-120, 120) + 0.49 * sg * (x[f] < 0 ? -1 : 1)) * scale / 127.0);
			y[k - 1 > 0 ? 1 % k : 0] = (float) scale;	/* max|y| = scale */
		}
		CHECK(gm_qmat_build(Y, m, k, &Q) == GM_OK, "qmat build");
		for (size_t a = 0; a < sizeof(isas) / sizeof(isas[0]); a++)
		{
			if (gm_serve_use_isa(isas[a]) != GM_OK)
				continue;
			gm_qmat_scores(&Q, x, approx, bound);
			for (int32_t i = 0; i < m; i++)
			{
				float		exact = 0.0f;
				double		err;

				/* the float32 score as any summation order may give it */
				for (int f = 0; f < k; f++)
					exact += Y[(size_t) i * k + f] * x[f];
				err = fabs((double) exact - approx[i]);
				CHECK(err <= bound[i], "%s k %d item %d: |%.9g - %.9g| = %.4g > bound %.4g",
					  isas[a], k, i, exact, approx[i], err, bound[i]);
				if (bound[i] > 0)
					worst = fmax(worst, err / bound[i]);
			}
		}
		gm_serve_use_isa(NULL);
		CHECK(m < 20 || k < 8 || worst > 0.3, "k %d: the worst error is only %.3f of its bound", k, worst);
		gm_qmat_free(&Q);
		free(Y);
		free(x);
		free(approx);
		free(bound);
		free(sx);
	}
	return 0;
fail:
	gm_serve_use_isa(NULL);
	return 1;
}

/*
 * The first pass is worth it: on factors shaped like a trained model's
 * (a few strong directions plus noise), the top 10 of 20,000 items at
 * k = 64 needs exact scores for few items, on every instruction set.
 */
static int
test_topk_prunes(void)
{
	int32_t		m = 20000;
	int			k = 64,
				n = 10;
	float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
	float	   *x = xmalloc(sizeof(float) * k);
	int32_t		oi[10];
	float		os[10];
	gm_qmat		Q;
	float	   *scratch;

	for (int32_t i = 0; i < m; i++)
	{
		double		pop = 1.0 / sqrt(1.0 + i % 977);

		for (int f = 0; f < k; f++)
			Y[(size_t) i * k + f] = (float) (pop * (runif() - 0.5 + (f < 4 ? 0.8 : 0.0)));
	}
	for (int f = 0; f < k; f++)
		x[f] = (float) (runif() - 0.5 + (f < 4 ? 1.0 : 0.0));
	CHECK(gm_qmat_build(Y, m, k, &Q) == GM_OK, "qmat build");
	scratch = xmalloc(sizeof(float) * gm_topk_dot_scratch(&Q));
	for (size_t a = 0; a < sizeof(isas) / sizeof(isas[0]); a++)
	{
		int32_t		rescored;

		if (gm_serve_use_isa(isas[a]) != GM_OK)
			continue;
		CHECK(gm_topk_dot(Y, &Q, x, n, NULL, 0, scratch, oi, os, &rescored) == n,
			  "%s: fewer than %d results", isas[a], n);
		CHECK(rescored < m / 20, "%s: %d of %d items rescored", isas[a], rescored, m);
	}
	gm_serve_use_isa(NULL);
	gm_qmat_free(&Q);
	free(scratch);
	free(Y);
	free(x);
	return 0;
fail:
	gm_serve_use_isa(NULL);
	return 1;
}

/*
 * An int8 copy built in caller-owned memory (as in shared memory), and one
 * attached to that memory later, equal the one gm_qmat_build makes, byte
 * for byte, and rank the same.
 */
static int
test_qmat_in_memory(void)
{
	for (int trial = 0; trial < 20; trial++)
	{
		int32_t		m = (int32_t) rint_range(0, 3000);
		int			k = (int) rint_range(1, 300);
		float	   *Y = xmalloc(sizeof(float) * ((size_t) m * k + 1));
		float		x[300];
		gm_qmat		A,
					B,
					C;
		void	   *mem = aligned_alloc(64, (gm_qmat_size(m, k) + 63) / 64 * 64);
		int32_t		ia[5],
					ic[5];
		float		sa[5],
					sc[5];
		float	   *scratch;

		for (int64_t i = 0; i < (int64_t) m * k; i++)
			Y[i] = (float) (runif() - 0.5);
		for (int f = 0; f < k; f++)
			x[f] = (float) (runif() - 0.5);
		CHECK(gm_qmat_build(Y, m, k, &A) == GM_OK, "build");
		CHECK(gm_qmat_build_in(Y, m, k, mem, &B, 0) == GM_OK, "build_in");
		CHECK(gm_qmat_attach(mem, m, k, &C) == GM_OK, "attach");
		CHECK(gm_qmat_attach((char *) mem + 1, m, k, &C) == GM_EINVAL, "misaligned memory accepted");
		CHECK(gm_qmat_attach(mem, m, k, &C) == GM_OK, "attach");
		CHECK(A.kpad == C.kpad && memcmp(A.q, C.q, (size_t) m * A.kpad) == 0 &&
			  memcmp(A.scale, C.scale, sizeof(float) * m) == 0 &&
			  memcmp(A.qabs, C.qabs, sizeof(float) * m) == 0 &&
			  memcmp(A.qsum, C.qsum, sizeof(int32_t) * m) == 0, "m %d k %d: the copies differ", m, k);
		scratch = xmalloc(sizeof(float) * gm_topk_dot_scratch(&A));
		CHECK(gm_topk_dot(Y, &A, x, 5, NULL, 0, scratch, ia, sa, NULL) ==
			  gm_topk_dot(Y, &C, x, 5, NULL, 0, scratch, ic, sc, NULL), "counts differ");
		for (int r = 0; r < (m < 5 ? m : 5); r++)
			CHECK(ia[r] == ic[r] && sa[r] == sc[r], "rank %d differs", r);
		gm_qmat_free(&A);
		gm_qmat_free(&C);		/* frees nothing: the memory is the caller's */
		free(mem);
		free(scratch);
		free(Y);
	}
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ cosine */

/*
 * gm_topk_cosine equals the float64 cosine top n, leaving out skip, with
 * zero rows (never ranked) and a zero query (nothing ranks).
 */
static int
test_cosine(void)
{
	for (int trial = 0; trial < 100; trial++)
	{
		int32_t		m = (int32_t) rint_range(1, 1500);
		int			k = (int) rint_range(1, 100);
		int			n = (int) rint_range(1, trial % 10 == 0 ? m + 3 : 25);
		float	   *F = xmalloc(sizeof(float) * (size_t) m * k);
		float	   *norms = xmalloc(sizeof(float) * m);
		float	   *x = xmalloc(sizeof(float) * k);
		float	   *ref = xmalloc(sizeof(float) * m);
		float	   *scratch = xmalloc(sizeof(float) * m);
		int32_t    *skip = xmalloc(sizeof(int32_t) * m);
		int32_t    *oi = xmalloc(sizeof(int32_t) * (n + 1)),
				   *ri = xmalloc(sizeof(int32_t) * (n + 1));
		float	   *os = xmalloc(sizeof(float) * (n + 1)),
				   *rs = xmalloc(sizeof(float) * (n + 1));
		int32_t		nskip = random_subset(m, 0.05, skip);
		double		xx = 0;
		int			got,
					want;

		for (int64_t i = 0; i < (int64_t) m * k; i++)
			F[i] = (float) (runif() - 0.4) * (float) (1 + i % 7);
		for (int32_t i = 0; i < m; i += 11)
			memset(F + (size_t) i * k, 0, sizeof(float) * k);
		for (int f = 0; f < k; f++)
			x[f] = trial % 13 == 0 ? 0.0f : (float) (runif() - 0.5);
		for (int f = 0; f < k; f++)
			xx += (double) x[f] * x[f];
		for (int32_t i = 0; i < m; i++)
		{
			double		d = 0,
						nn = 0;

			for (int f = 0; f < k; f++)
			{
				d += (double) x[f] * F[(size_t) i * k + f];
				nn += (double) F[(size_t) i * k + f] * F[(size_t) i * k + f];
			}
			ref[i] = nn > 0 && xx > 0 ? (float) (d / sqrt(nn * xx)) : NAN;
		}
		gm_row_norms(F, m, k, norms);
		for (int32_t i = 0; i < m; i++)
		{
			double		nn = 0;

			for (int f = 0; f < k; f++)
				nn += (double) F[(size_t) i * k + f] * F[(size_t) i * k + f];
			CHECK(fabs(norms[i] - sqrt(nn)) <= 1e-6 * (1 + sqrt(nn)), "norm of row %d", i);
		}
		got = gm_topk_cosine(F, norms, m, k, x, n, skip, nskip, scratch, oi, os);
		want = gm_topk(ref, m, n, skip, nskip, ri, rs);
		CHECK(got == want, "m %d k %d n %d: %d results, expected %d", m, k, n, got, want);
		for (int r = 0; r < got; r++)
		{
			CHECK(fabs(os[r] - rs[r]) <= 1e-5, "position %d: %.8g, reference %.8g (item %d vs %d)",
				  r, os[r], rs[r], oi[r], ri[r]);
			CHECK(os[r] <= 1.0001f && os[r] >= -1.0001f, "cosine %g out of [-1, 1]", os[r]);
			CHECK(!isnan(ref[oi[r]]), "zero row %d ranked", oi[r]);
			for (int32_t j = 0; j < nskip; j++)
				CHECK(skip[j] != oi[r], "skipped row %d returned", oi[r]);
		}
		free(F);
		free(norms);
		free(x);
		free(ref);
		free(scratch);
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

/* ------------------------------------------------------------ fold-in */

/* gm_entries_merge sorts and sums duplicates like a dense accumulation. */
static int
test_entries_merge(void)
{
	for (int trial = 0; trial < 200; trial++)
	{
		int32_t		n = (int32_t) rint_range(0, 300),
					range = (int32_t) rint_range(1, 400);
		int32_t    *idx = xmalloc(sizeof(int32_t) * n);
		float	   *vals = xmalloc(sizeof(float) * n);
		double	   *dense = xcalloc(range, sizeof(double));
		uint8_t    *present = xcalloc(range, 1);
		int32_t		got,
					want = 0;

		for (int32_t e = 0; e < n; e++)
		{
			idx[e] = (int32_t) rint_range(0, range - 1);
			vals[e] = 0.5f * (float) rint_range(0, 10);	/* exact sums */
			dense[idx[e]] += vals[e];
			present[idx[e]] = 1;
		}
		for (int32_t i = 0; i < range; i++)
			want += present[i];
		got = gm_entries_merge(idx, vals, n);
		CHECK(got == want, "%d entries after merging, expected %d", got, want);
		for (int32_t e = 0; e < got; e++)
		{
			CHECK(e == 0 || idx[e] > idx[e - 1], "not sorted at %d", e);
			CHECK(present[idx[e]] && vals[e] == (float) dense[idx[e]],
				  "index %d: %g, expected %g", idx[e], vals[e], dense[idx[e]]);
		}
		free(idx);
		free(vals);
		free(dense);
		free(present);
	}
	return 0;
fail:
	return 1;
}

/* random distinct sorted entries over [0, m) with positive values */
static int32_t
random_entries(int32_t m, int32_t want, int32_t *idx, float *vals, int ratings)
{
	int32_t		n = 0;

	for (int32_t i = 0; i < m && n < want; i++)
		if (runif() < (double) (want - n) / (m - i))
		{
			idx[n] = i;
			vals[n] = ratings ? 0.5f * (float) rint_range(1, 10) : (float) (runif() * 5.0);
			n++;
		}
	return n;
}

/*
 * Implicit fold-in equals the float64 solution of its normal equations,
 * built from their definition (all items, not Y^T Y), solved by Gaussian
 * elimination, for alpha0 = 1 / nu = 0 and for other alpha0 and nu.
 */
static int
test_foldin_implicit(void)
{
	for (int trial = 0; trial < 60; trial++)
	{
		int			k = (int) rint_range(1, 48);
		int32_t		m = (int32_t) rint_range(k + 1, 400);
		int32_t		want = (int32_t) rint_range(0, m < 60 ? m : 60);
		float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
		double	   *G = xcalloc((size_t) k * k, sizeof(double));
		double	   *A = xcalloc((size_t) k * k, sizeof(double));
		double	   *b = xcalloc(k, sizeof(double));
		double	   *work = xmalloc(sizeof(double) * gm_foldin_work(k));
		int32_t    *idx = xmalloc(sizeof(int32_t) * m);
		float	   *vals = xmalloc(sizeof(float) * m);
		float	   *x = xmalloc(sizeof(float) * k);
		float		bias;
		uint8_t    *obs = xcalloc(m, 1);
		/* odd trials: a graph_filter model with this als model as its iALS part */
		int			blend = trial % 2;
		int			d = blend ? (int) rint_range(1, 40) : 0;
		int			kw = d + k;
		float	   *Yw = xmalloc(sizeof(float) * (size_t) m * kw);
		float	   *filter = xmalloc(sizeof(float) * (d + 1));
		float	   *iw = xmalloc(sizeof(float) * m);
		float	   *xw = xmalloc(sizeof(float) * kw);
		double	   *ref = xcalloc(kw, sizeof(double));
		double		share = 0.05 + 0.9 * runif();
		gm_foldin_params p;
		char		err[GM_ERRLEN];
		int32_t		n;
		double		ridge,
					xnorm = 0;

		memset(&p, 0, sizeof(p));
		p.algorithm = GM_ALG_ALS_IMPLICIT;
		p.regularization = (float) (0.01 + runif());
		p.alpha = (float) (runif() * 10.0);
		p.alpha0 = trial % 3 == 0 ? (float) (0.1 + runif()) : 1.0f;
		p.nu = trial % 4 == 0 ? (float) runif() : 0.0f;
		for (int64_t i = 0; i < (int64_t) m * k; i++)
			Y[i] = (float) ((runif() - 0.5) / sqrt(k));
		n = random_entries(m, want, idx, vals, 0);
		for (int32_t e = 0; e < n; e++)
			obs[idx[e]] = 1;
		for (int32_t i = 0; i < m; i++)
			for (int a = 0; a < k; a++)
				for (int c = 0; c < k; c++)
					G[(size_t) a * k + c] += (double) Y[(size_t) i * k + a] * Y[(size_t) i * k + c];

		/* reference: every item with its weight, in double */
		ridge = p.regularization * pow(n + (double) p.alpha0 * m, p.nu);
		for (int32_t i = 0, e = 0; i < m; i++)
		{
			double		c = 0.0,
						w = p.alpha0;

			if (e < n && idx[e] == i)
			{
				c = 1.0 + (double) p.alpha * vals[e++];
				w = c;
			}
			for (int a = 0; a < k; a++)
			{
				for (int d = 0; d < k; d++)
					A[(size_t) a * k + d] += w * Y[(size_t) i * k + a] * Y[(size_t) i * k + d];
				b[a] += c * Y[(size_t) i * k + a];
			}
		}
		for (int a = 0; a < k; a++)
			A[(size_t) a * k + a] += ridge;
		CHECK(gauss_solve(A, b, k) == 0, "reference solve failed");
		CHECK(gm_foldin(&p, Y, NULL, m, k, G, idx, vals, n, x, &bias, work, err, sizeof(err)) == GM_OK,
			  "%s", err);
		for (int f = 0; f < k; f++)
			xnorm = fmax(xnorm, fabs(b[f]));
		for (int f = 0; f < k; f++)
			CHECK(fabs(x[f] - b[f]) <= 1e-5 * (1.0 + xnorm),
				  "k %d m %d n %d alpha0 %g nu %g: x[%d] = %.8g, reference %.8g",
				  k, m, n, p.alpha0, p.nu, f, x[f], b[f]);
		if (blend)
		{
			/*
			 * The same rows after d filter columns: the filter's part is its
			 * weighted sum, the iALS part the solve above, each scaled to
			 * its share of a unit vector
			 */
			gm_foldin_params q = p;
			double		s0 = 0.0,
						s1 = 0.0;

			for (int f = 0; f < d; f++)
				filter[f] = (float) runif();
			for (int32_t i = 0; i < m; i++)
			{
				iw[i] = (float) (0.1 + runif());
				for (int f = 0; f < kw; f++)
					Yw[(size_t) i * kw + f] = f < d ? (float) (runif() - 0.5) : Y[(size_t) i * k + f - d];
			}
			for (int32_t e = 0; e < n; e++)
				for (int f = 0; f < d; f++)
					ref[f] += (double) iw[idx[e]] * Yw[(size_t) idx[e] * kw + f];
			for (int f = 0; f < d; f++)
			{
				ref[f] *= filter[f];
				s0 += ref[f] * ref[f];
			}
			for (int f = 0; f < k; f++)
			{
				ref[d + f] = b[f];
				s1 += b[f] * b[f];
			}
			for (int f = 0; f < kw; f++)
				ref[f] *= f < d ? (s0 > 0 ? share / sqrt(s0) : 0.0) : (s1 > 0 ? (1.0 - share) / sqrt(s1) : 0.0);
			q.algorithm = GM_ALG_GRAPH_FILTER;
			q.filter = filter;
			q.item_weight = iw;
			q.gf_columns = d;
			q.blend = (float) share;
			CHECK(gm_foldin(&q, Yw, NULL, m, kw, G, idx, vals, n, xw, &bias, work, err, sizeof(err)) == GM_OK,
				  "%s", err);
			for (int f = 0; f < kw; f++)
				CHECK(fabs(xw[f] - ref[f]) <= 1e-5,
					  "graph_filter with an iALS part, d %d k %d n %d: x[%d] = %.8g, reference %.8g",
					  d, k, n, f, xw[f], ref[f]);
			/* and without its Gram it is refused */
			CHECK(gm_foldin(&q, Yw, NULL, m, kw, NULL, idx, vals, n, xw, &bias, work, err, sizeof(err)) == GM_EINVAL,
				  "an iALS part without its Y^T Y was accepted");
		}
		CHECK(bias == 0.0f, "implicit models have no bias");
		if (n > 0)
		{
			/* bad entries are refused */
			int32_t		save = idx[0];

			idx[0] = m;
			CHECK(gm_foldin(&p, Y, NULL, m, k, G, idx, vals, n, x, &bias, work, err, sizeof(err)) == GM_EINVAL,
				  "an index out of range was accepted");
			idx[0] = save;
		}
		free(Y);
		free(G);
		free(A);
		free(b);
		free(work);
		free(idx);
		free(vals);
		free(x);
		free(obs);
		free(Yw);
		free(filter);
		free(iw);
		free(xw);
		free(ref);
	}
	return 0;
fail:
	return 1;
}

/*
 * Explicit fold-in (als_explicit and ccd alike: lambda_u = lambda n_u) with
 * and without biases equals the float64 solution of
 *     min sum_e (v_e - mu - c_e - x.y_e - b)^2 + lambda_u (|x|^2 + b^2).
 */
static int
test_foldin_explicit(void)
{
	for (int trial = 0; trial < 60; trial++)
	{
		int			k = (int) rint_range(1, 40);
		int32_t		m = (int32_t) rint_range(2, 300);
		int			biases = trial % 2;
		int			kk = biases ? k + 1 : k;
		int32_t		want = (int32_t) rint_range(1, m < 50 ? m : 50);
		float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
		float	   *cb = xmalloc(sizeof(float) * m);
		double	   *A = xcalloc((size_t) kk * kk, sizeof(double));
		double	   *b = xcalloc(kk, sizeof(double));
		double	   *work = xmalloc(sizeof(double) * gm_foldin_work(k));
		int32_t    *idx = xmalloc(sizeof(int32_t) * m);
		float	   *vals = xmalloc(sizeof(float) * m);
		float	   *x = xmalloc(sizeof(float) * k);
		float		bias;
		gm_foldin_params p;
		char		err[GM_ERRLEN];
		int32_t		n;
		double		ridge,
					mu = biases ? 3.0 + runif() : 0.0,
					big = 0;

		memset(&p, 0, sizeof(p));
		p.algorithm = trial % 4 < 2 ? GM_ALG_ALS_EXPLICIT : GM_ALG_CCD;
		p.regularization = (float) (0.01 + runif() * 0.5);
		p.biases = biases;
		p.global_mean = mu;
		for (int64_t i = 0; i < (int64_t) m * k; i++)
			Y[i] = (float) (runif() - 0.5);
		for (int32_t i = 0; i < m; i++)
			cb[i] = (float) (runif() - 0.5);
		n = random_entries(m, want, idx, vals, 1);
		ridge = p.regularization * (double) n;
		for (int32_t e = 0; e < n; e++)
		{
			const float *y = Y + (size_t) idx[e] * k;
			double		t = vals[e] - mu - (biases ? cb[idx[e]] : 0.0);

			for (int a = 0; a < kk; a++)
			{
				double		za = a < k ? y[a] : 1.0;

				for (int c = 0; c < kk; c++)
					A[(size_t) a * kk + c] += za * (c < k ? y[c] : 1.0);
				b[a] += t * za;
			}
		}
		for (int a = 0; a < kk; a++)
			A[(size_t) a * kk + a] += ridge;
		CHECK(gauss_solve(A, b, kk) == 0, "reference solve failed");
		CHECK(gm_foldin(&p, Y, biases ? cb : NULL, m, k, NULL, idx, vals, n, x, &bias, work,
						err, sizeof(err)) == GM_OK, "%s", err);
		for (int a = 0; a < kk; a++)
			big = fmax(big, fabs(b[a]));
		for (int f = 0; f < k; f++)
			CHECK(fabs(x[f] - b[f]) <= 1e-5 * (1 + big), "%s biases %d k %d n %d: x[%d] = %.8g, reference %.8g",
				  p.algorithm == GM_ALG_CCD ? "ccd" : "als_explicit", biases, k, n, f, x[f], b[f]);
		if (biases)
			CHECK(fabs(bias - b[k]) <= 1e-5 * (1 + big), "bias %.8g, reference %.8g", bias, b[k]);
		else
			CHECK(bias == 0.0f, "bias %g without biases", bias);
		free(Y);
		free(cb);
		free(A);
		free(b);
		free(work);
		free(idx);
		free(vals);
		free(x);
	}
	return 0;
fail:
	return 1;
}

/*
 * Fold-in equals what the trainer computes: train implicit ALS for N
 * iterations, and again for N + 1 from the same seed; the (N + 1)-th
 * iteration's user half-step solves every user against the first run's
 * final item factors (with enough CG steps to converge), which is what
 * fold-in computes from the same rows.  Within 1e-4.
 */
static int
test_foldin_matches_trainer(void)
{
	for (int trial = 0; trial < 4; trial++)
	{
		int			k = (int) rint_range(2, 16);
		int32_t		U = (int32_t) rint_range(20, 80),
					I = (int32_t) rint_range(30, 120);
		int			N = (int) rint_range(1, 4);
		int64_t		nnz = (int64_t) (U * (int64_t) I * 0.15) + 1;
		int32_t    *r = xmalloc(sizeof(int32_t) * nnz),
				   *c = xmalloc(sizeof(int32_t) * nnz);
		float	   *v = xmalloc(sizeof(float) * nnz);
		gm_csr		R = {0},
					Rt = {0};
		gm_mf_params p;
		gm_mf_data	d1,
					d2;
		gm_mf_result res;
		gm_foldin_params fp;
		float	   *X1 = xmalloc(sizeof(float) * (size_t) U * k),
				   *Y1 = xmalloc(sizeof(float) * (size_t) I * k),
				   *X2 = xmalloc(sizeof(float) * (size_t) U * k),
				   *Y2 = xmalloc(sizeof(float) * (size_t) I * k);
		float	   *Gf = xmalloc(sizeof(float) * k * k);
		double	   *G = xmalloc(sizeof(double) * k * k);
		double	   *work = xmalloc(sizeof(double) * gm_foldin_work(k));
		float	   *x = xmalloc(sizeof(float) * k);
		float		bias;
		char		err[GM_ERRLEN];
		double		worst = 0;

		for (int64_t e = 0; e < nnz; e++)
		{
			r[e] = (int32_t) rint_range(0, U - 1);
			c[e] = (int32_t) rint_range(0, I - 1);
			v[e] = (float) rint_range(1, 5);
		}
		CHECK(gm_csr_from_coo(U, I, nnz, r, c, v, &R, err, sizeof(err)) == GM_OK, "%s", err);
		CHECK(gm_csr_transpose(&R, &Rt, err, sizeof(err)) == GM_OK, "%s", err);
		gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
		p.factors = k;
		p.iterations = N;
		p.regularization = (float) (0.05 + runif() * 0.5);
		p.alpha = (float) (0.5 + runif() * 4);
		p.cg_steps = 4 * k;		/* CG converges: the half-step is the exact solve */
		p.threads = 1;
		p.seed = rnext();
		memset(&d1, 0, sizeof(d1));
		d1.R = &R;
		d1.Rt = &Rt;
		d1.X = X1;
		d1.Y = Y1;
		CHECK(gm_mf_train(&p, &d1, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
		d2 = d1;
		d2.X = X2;
		d2.Y = Y2;
		p.iterations = N + 1;
		CHECK(gm_mf_train(&p, &d2, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);

		/* fold every user into the first model's items */
		gm_gram(Y1, I, k, 0.0f, Gf, 1);
		for (int i = 0; i < k * k; i++)
			G[i] = Gf[i];
		memset(&fp, 0, sizeof(fp));
		fp.algorithm = GM_ALG_ALS_IMPLICIT;
		fp.regularization = p.regularization;
		fp.alpha = p.alpha;
		fp.alpha0 = 1.0f;
		for (int32_t u = 0; u < U; u++)
		{
			int64_t		b = R.indptr[u];

			CHECK(gm_foldin(&fp, Y1, NULL, I, k, G, R.indices + b, R.data + b,
							(int32_t) (R.indptr[u + 1] - b), x, &bias, work, err,
							sizeof(err)) == GM_OK, "%s", err);
			for (int f = 0; f < k; f++)
			{
				double		want = X2[(size_t) u * k + f];

				worst = fmax(worst, fabs(x[f] - want) / fmax(1.0, fabs(want)));
				CHECK(fabs(x[f] - want) <= 1e-4 * fmax(1.0, fabs(want)),
					  "k %d N %d user %d (%lld items): x[%d] = %.7g, the trainer's %.7g",
					  k, N, u, (long long) (R.indptr[u + 1] - b), f, x[f], want);
			}
		}
		gm_csr_free(&R);
		gm_csr_free(&Rt);
		free(r);
		free(c);
		free(v);
		free(X1);
		free(Y1);
		free(X2);
		free(Y2);
		free(Gf);
		free(G);
		free(work);
		free(x);
	}
	return 0;
fail:
	return 1;
}

/* a random ratings matrix (values 1 .. 5) and its transpose */
static void
random_ratings(int32_t U, int32_t I, double density, gm_csr *R, gm_csr *Rt)
{
	int64_t		nnz = (int64_t) (U * (int64_t) I * density) + 1;
	int32_t    *r = xmalloc(sizeof(int32_t) * nnz),
			   *c = xmalloc(sizeof(int32_t) * nnz);
	float	   *v = xmalloc(sizeof(float) * nnz);
	char		err[GM_ERRLEN];

	for (int64_t e = 0; e < nnz; e++)
	{
		r[e] = (int32_t) rint_range(0, U - 1);
		c[e] = (int32_t) rint_range(0, I - 1);
		v[e] = (float) rint_range(1, 5);
	}
	if (gm_csr_from_coo(U, I, nnz, r, c, v, R, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(R, Rt, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "%s\n", err);
		exit(2);
	}
	free(r);
	free(c);
	free(v);
}

/*
 * Explicit ALS fold-in equals what the trainer computes: its user half-step
 * is an exact solve per user, so the (N + 1)-th iteration's users (factors
 * and biases) are fold-in against the N-iteration run's items, item biases
 * and global mean.  Within 1e-4, with biases on and off.
 */
static int
test_foldin_explicit_matches_trainer(void)
{
	for (int trial = 0; trial < 6; trial++)
	{
		int			k = (int) rint_range(2, 12);
		int			biases = trial % 2;
		int32_t		U = (int32_t) rint_range(20, 70),
					I = (int32_t) rint_range(20, 90);
		int			N = (int) rint_range(1, 4);
		gm_csr		R = {0},
					Rt = {0};
		gm_mf_params p;
		gm_mf_data	d1,
					d2;
		gm_mf_result res;
		gm_foldin_params fp;
		float	   *X1 = xmalloc(sizeof(float) * (size_t) U * k),
				   *Y1 = xmalloc(sizeof(float) * (size_t) I * k),
				   *X2 = xmalloc(sizeof(float) * (size_t) U * k),
				   *Y2 = xmalloc(sizeof(float) * (size_t) I * k),
				   *ub1 = xmalloc(sizeof(float) * U),
				   *ib1 = xmalloc(sizeof(float) * I),
				   *ub2 = xmalloc(sizeof(float) * U),
				   *ib2 = xmalloc(sizeof(float) * I);
		double	   *work = xmalloc(sizeof(double) * gm_foldin_work(k));
		float	   *x = xmalloc(sizeof(float) * k);
		float		bias;
		char		err[GM_ERRLEN];

		random_ratings(U, I, 0.2, &R, &Rt);
		gm_mf_params_defaults(&p, GM_ALG_ALS_EXPLICIT);
		p.factors = k;
		p.iterations = N;
		p.regularization = (float) (0.02 + runif() * 0.3);
		p.biases = biases;
		p.threads = 1;
		p.seed = rnext();
		memset(&d1, 0, sizeof(d1));
		d1.R = &R;
		d1.Rt = &Rt;
		d1.X = X1;
		d1.Y = Y1;
		d1.user_bias = biases ? ub1 : NULL;
		d1.item_bias = biases ? ib1 : NULL;
		CHECK(gm_mf_train(&p, &d1, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
		d2 = d1;
		d2.X = X2;
		d2.Y = Y2;
		d2.user_bias = biases ? ub2 : NULL;
		d2.item_bias = biases ? ib2 : NULL;
		p.iterations = N + 1;
		CHECK(gm_mf_train(&p, &d2, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);

		memset(&fp, 0, sizeof(fp));
		fp.algorithm = GM_ALG_ALS_EXPLICIT;
		fp.regularization = p.regularization;
		fp.biases = biases;
		fp.global_mean = d1.global_mean;
		for (int32_t u = 0; u < U; u++)
		{
			int64_t		b = R.indptr[u];

			CHECK(gm_foldin(&fp, Y1, biases ? ib1 : NULL, I, k, NULL, R.indices + b, R.data + b,
							(int32_t) (R.indptr[u + 1] - b), x, &bias, work, err, sizeof(err)) == GM_OK,
				  "%s", err);
			for (int f = 0; f < k; f++)
				CHECK(fabs(x[f] - X2[(size_t) u * k + f]) <= 1e-4 * fmax(1.0, fabs(X2[(size_t) u * k + f])),
					  "biases %d k %d N %d user %d: x[%d] = %.7g, the trainer's %.7g",
					  biases, k, N, u, f, x[f], X2[(size_t) u * k + f]);
			if (biases)
				CHECK(fabs(bias - ub2[u]) <= 1e-4 * fmax(1.0, fabs(ub2[u])),
					  "user %d: bias %.7g, the trainer's %.7g", u, bias, ub2[u]);
		}
		gm_csr_free(&R);
		gm_csr_free(&Rt);
		free(X1);
		free(Y1);
		free(X2);
		free(Y2);
		free(ub1);
		free(ib1);
		free(ub2);
		free(ib2);
		free(work);
		free(x);
	}
	return 0;
fail:
	return 1;
}

/*
 * One user's term of the CCD++ objective at (x, b) against Y, c, mu: its
 * squared errors + lambda n_u (|x|^2 + b^2), n_u its number of ratings (the
 * weighted lambda).
 */
static double
ccd_objective(const gm_csr *R, int32_t u, const float *Y, const float *c, double mu,
			  int k, double lambda, const float *x, double b, int biases)
{
	double		obj = 0.0,
				n_u;

	for (int64_t e = R->indptr[u]; e < R->indptr[u + 1]; e++)
	{
		double		pred = mu + (biases ? b + c[R->indices[e]] : 0.0);

		for (int f = 0; f < k; f++)
			pred += (double) x[f] * Y[(size_t) R->indices[e] * k + f];
		obj += (R->data[e] - pred) * (R->data[e] - pred);
	}
	n_u = (double) (R->indptr[u + 1] - R->indptr[u]);
	for (int f = 0; f < k; f++)
		obj += lambda * n_u * x[f] * x[f];
	return obj + lambda * n_u * b * b;
}

/*
 * CCD++ fold-in is the exact minimiser of a user's term of the CCD++
 * objective given the items: never above the trainer's user (which CCD++
 * reaches by coordinate steps), and at a stationary point (perturbing it
 * raises the objective).
 */
static int
test_foldin_ccd_minimises(void)
{
	for (int trial = 0; trial < 4; trial++)
	{
		int			k = (int) rint_range(2, 10);
		int			biases = trial % 2;
		int32_t		U = (int32_t) rint_range(20, 60),
					I = (int32_t) rint_range(20, 80);
		gm_csr		R = {0},
					Rt = {0};
		gm_mf_params p;
		gm_mf_data	d;
		gm_mf_result res;
		gm_foldin_params fp;
		float	   *X = xmalloc(sizeof(float) * (size_t) U * k),
				   *Y = xmalloc(sizeof(float) * (size_t) I * k),
				   *ub = xmalloc(sizeof(float) * U),
				   *ib = xmalloc(sizeof(float) * I);
		double	   *work = xmalloc(sizeof(double) * gm_foldin_work(k));
		float	   *x = xmalloc(sizeof(float) * k),
				   *xp = xmalloc(sizeof(float) * k);
		float		bias;
		char		err[GM_ERRLEN];

		random_ratings(U, I, 0.25, &R, &Rt);
		gm_mf_params_defaults(&p, GM_ALG_CCD);
		p.factors = k;
		p.iterations = 3;
		p.regularization = (float) (0.05 + runif() * 0.3);
		p.biases = biases;
		p.threads = 1;
		p.seed = rnext();
		memset(&d, 0, sizeof(d));
		d.R = &R;
		d.Rt = &Rt;
		d.X = X;
		d.Y = Y;
		d.user_bias = biases ? ub : NULL;
		d.item_bias = biases ? ib : NULL;
		CHECK(gm_mf_train(&p, &d, NULL, &res, err, sizeof(err)) == GM_OK, "%s", err);
		memset(&fp, 0, sizeof(fp));
		fp.algorithm = GM_ALG_CCD;
		fp.regularization = p.regularization;
		fp.biases = biases;
		fp.global_mean = d.global_mean;
		for (int32_t u = 0; u < U; u++)
		{
			int64_t		b = R.indptr[u];
			double		mine,
						trainer;

			if (R.indptr[u + 1] == b)
				continue;
			CHECK(gm_foldin(&fp, Y, biases ? ib : NULL, I, k, NULL, R.indices + b, R.data + b,
							(int32_t) (R.indptr[u + 1] - b), x, &bias, work, err, sizeof(err)) == GM_OK,
				  "%s", err);
			mine = ccd_objective(&R, u, Y, ib, d.global_mean, k, p.regularization, x, bias, biases);
			trainer = ccd_objective(&R, u, Y, ib, d.global_mean, k, p.regularization,
									X + (size_t) u * k, biases ? ub[u] : 0.0, biases);
			CHECK(mine <= trainer * (1 + 1e-6) + 1e-9, "user %d: fold-in objective %.9g above the trainer's %.9g",
				  u, mine, trainer);
			for (int f = 0; f < k; f++)
			{
				memcpy(xp, x, sizeof(float) * k);
				xp[f] += 1e-2f;
				CHECK(ccd_objective(&R, u, Y, ib, d.global_mean, k, p.regularization, xp, bias, biases) > mine,
					  "user %d: moving x[%d] lowers the objective", u, f);
			}
		}
		gm_csr_free(&R);
		gm_csr_free(&Rt);
		free(X);
		free(Y);
		free(ub);
		free(ib);
		free(work);
		free(x);
		free(xp);
	}
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ key maps */

/* Lookups find every key added and nothing else, and add nothing. */
static int
test_keymap_find(void)
{
	for (int bytes = 0; bytes < 2; bytes++)
	{
		gm_keymap  *m = gm_keymap_create(bytes);
		int32_t		n = (int32_t) rint_range(1, 5000);
		int64_t    *keys = xmalloc(sizeof(int64_t) * n);

		CHECK(m != NULL, "create");
		for (int32_t i = 0; i < n; i++)
		{
			keys[i] = (int64_t) (rnext() >> 20) * 2;	/* even: odd keys are absent */
			if (bytes)
				gm_keymap_bytes(m, &keys[i], 3 + (uint32_t) (keys[i] % 5));
			else
				gm_keymap_int(m, keys[i]);
		}
		for (int32_t i = 0; i < n; i++)
		{
			int64_t		odd = keys[i] + 1;
			int32_t		got = bytes ? gm_keymap_find_bytes(m, &keys[i], 3 + (uint32_t) (keys[i] % 5)) :
				gm_keymap_find_int(m, keys[i]);
			int32_t		absent = bytes ? gm_keymap_find_bytes(m, &odd, 8) : gm_keymap_find_int(m, odd);

			CHECK(got >= 0 && got < gm_keymap_size(m), "key %d not found", i);
			if (bytes)
			{
				uint32_t	len;
				const void *p = gm_keymap_bytes_at(m, got, &len);

				CHECK(len == 3 + (uint32_t) (keys[i] % 5) && memcmp(p, &keys[i], len) == 0,
					  "key %d maps to another key", i);
			}
			else
				CHECK(gm_keymap_int_at(m, got) == keys[i], "key %d maps to another key", i);
			CHECK(absent == -1, "an absent key was found");
		}
		CHECK(gm_keymap_size(m) <= n, "lookups added keys");
		gm_keymap_free(m);
		free(keys);
	}
	return 0;
fail:
	return 1;
}

/* ------------------------------------------------------------ main */

/*
 * Fold-in at the edges of double's range: confidences of 1e20 and 3e38
 * against a ridge of 0.01 (which double cannot resolve) are refused with a
 * message that says the values are too large, never answered with factors
 * of noise; 1e6 still solves, to the float64 reference; ratings of 3e38
 * whose factors leave float's range are refused too.
 */
static int
test_foldin_range(void)
{
	int			k = 8;
	int32_t		m = 40;
	float	   *Y = xmalloc(sizeof(float) * (size_t) m * k);
	double	   *G = xcalloc((size_t) k * k, sizeof(double));
	double	   *work = xmalloc(sizeof(double) * gm_foldin_work(k));
	int32_t		idx[3] = {3, 11, 30};
	float		vals[3];
	float		x[8],
				bias;
	gm_foldin_params p;
	char		err[GM_ERRLEN];
	const double big[3] = {1e20, 3e38, 1e6};

	for (int64_t i = 0; i < (int64_t) m * k; i++)
		Y[i] = (float) ((runif() - 0.5) / sqrt(k));
	for (int32_t i = 0; i < m; i++)
		for (int a = 0; a < k; a++)
			for (int c = 0; c < k; c++)
				G[(size_t) a * k + c] += (double) Y[(size_t) i * k + a] * Y[(size_t) i * k + c];
	memset(&p, 0, sizeof(p));
	p.algorithm = GM_ALG_ALS_IMPLICIT;
	p.regularization = 0.01f;
	p.alpha = 1.0f;
	p.alpha0 = 1.0f;
	for (int t = 0; t < 3; t++)
	{
		int			rc;

		vals[0] = vals[1] = (float) big[t];
		vals[2] = 1.0f;
		rc = gm_foldin(&p, Y, NULL, m, k, G, idx, vals, 3, x, &bias, work, err, sizeof(err));
		if (big[t] > 1e10)
			CHECK(rc == GM_EINVAL && strstr(err, "too large for a double-precision solve") &&
				  strstr(err, "scale the values down"), "values %g: rc %d: %s", big[t], rc, err);
		else
		{
			CHECK(rc == GM_OK, "values %g: %s", big[t], err);
			for (int f = 0; f < k; f++)
				CHECK(isfinite(x[f]), "values %g: x[%d] = %g", big[t], f, x[f]);
		}
	}
	/*
	 * ratings: one rating of 3e38 on an item whose factors are 0.001 e_1,
	 * ridge 1e-6: x_1 = 3e38 * 1e-3 / (1e-6 + 1e-6), beyond float's range
	 */
	p.algorithm = GM_ALG_CCD;
	p.regularization = 1e-6f;
	for (int f = 0; f < k; f++)
		Y[(size_t) idx[0] * k + f] = f == 0 ? 1e-3f : 0.0f;
	vals[0] = 3e38f;
	err[0] = '\0';
	CHECK(gm_foldin(&p, Y, NULL, m, k, NULL, idx, vals, 1, x, &bias, work, err, sizeof(err)) == GM_EINVAL &&
		  strstr(err, "beyond the range of real"), "ratings 3e38: %s", err);
	free(Y);
	free(G);
	free(work);
	return 0;
fail:
	free(Y);
	free(G);
	free(work);
	return 1;
}

static const gm_test tests[] = {
	{"topk_dot_among equals the float top n on every instruction set", test_topk_among},
	{"topk_dot_among over threads equals one thread's, bit for bit", test_topk_among_threads},
	{"the first pass's error bounds hold on adversarial factors", test_bounds_adversarial},
	{"the int8 first pass rescores few items", test_topk_prunes},
	{"int8 copies in caller-owned memory equal gm_qmat_build's", test_qmat_in_memory},
	{"cosine top n equals the float64 reference", test_cosine},
	{"entries_merge sorts and sums duplicates", test_entries_merge},
	{"implicit fold-in equals the float64 solution (alpha0, nu), alone and as graph_filter's iALS part", test_foldin_implicit},
	{"explicit fold-in equals the float64 solution (als_explicit, ccd, biases)", test_foldin_explicit},
	{"implicit fold-in equals the trainer's next user half-step", test_foldin_matches_trainer},
	{"explicit ALS fold-in equals the trainer's next user half-step (biases on, off)", test_foldin_explicit_matches_trainer},
	{"CCD++ fold-in minimises the user's objective, below the trainer's user", test_foldin_ccd_minimises},
	{"fold-in refuses values double cannot resolve, and factors beyond float", test_foldin_range},
	{"keymap lookups find what was added and add nothing", test_keymap_find},
};

int
main(void)
{
	uint64_t	seed = gm_test_seed();

	printf("# seed %llu (replay with GM_TEST_SEED=%llu); first pass: %s\n",
		   (unsigned long long) seed, (unsigned long long) seed, gm_serve_isa());
	return gm_test_run(tests, (int) (sizeof(tests) / sizeof(tests[0])), seed);
}
