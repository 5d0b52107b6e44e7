/*
 * test_score.c: unit tests of batch scoring and metrics (src/core/serve/score.c,
 * metrics.c, the key maps' lookups).
 *
 * Same harness as test_core.c: fresh random inputs every run (the seed from
 * the time and the pid, or GM_TEST_SEED to replay), "ok N - name" or
 * "not ok N - name: detail" per test, then "N passed, M failed".  The
 * references are written independently of the code under test, in float64.
 */
#include "gm_core.h"
#include "gm_score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------- a random problem */

typedef struct problem
{
	gm_score_problem p;
	float	   *X;
	float	   *Y;
	float	   *bias;
	int64_t    *seen_ptr;
	int32_t    *seen_idx;
	int			exact;			/* small-integer factors: float32 sums are exact */
} problem;

static void
problem_free(problem *q)
{
	free(q->X);
	free(q->Y);
	free(q->bias);
	free(q->seen_ptr);
	free(q->seen_idx);
	memset(q, 0, sizeof(*q));
}

/*
 * Random factors (or small integers, with exact ties), duplicated item rows
 * (ties), optional item biases, seen lists of every length up to all items.
 */
static void
problem_make(problem *q, int32_t nu, int32_t ni, int k, int n, int exact)
{
	int64_t		nseen = 0;

	memset(q, 0, sizeof(*q));
	q->exact = exact;
	q->X = xmalloc(sizeof(float) * (size_t) nu * k);
	q->Y = xmalloc(sizeof(float) * (size_t) ni * k);
	for (int64_t e = 0; e < (int64_t) nu * k; e++)
		q->X[e] = exact ? (float) rint_range(-3, 3) : (float) (runif() * 2 - 0.7);
	for (int64_t e = 0; e < (int64_t) ni * k; e++)
		q->Y[e] = exact ? (float) rint_range(-3, 3) : (float) (runif() * 2 - 0.7);
	for (int32_t i = 3; i < ni; i += 5)
		memcpy(q->Y + (size_t) i * k, q->Y + (size_t) (i - 3) * k, sizeof(float) * k);
	if (rint_range(0, 2) == 0)
	{
		q->bias = xmalloc(sizeof(float) * (ni > 0 ? ni : 1));
		for (int32_t i = 0; i < ni; i++)
			q->bias[i] = exact ? (float) rint_range(-2, 2) : (float) (runif() - 0.5);
	}
	if (rint_range(0, 3) != 0)
	{
		q->seen_ptr = xmalloc(sizeof(int64_t) * (nu + 1));
		q->seen_idx = xmalloc(sizeof(int32_t) * ((size_t) nu * ni + 1));
		q->seen_ptr[0] = 0;
		for (int32_t u = 0; u < nu; u++)
		{
			double		frac = u % 11 == 0 ? 1.0 : u % 7 == 0 ? 0.9 : runif() * 0.3;

			for (int32_t i = 0; i < ni; i++)
				if (runif() < frac)
					q->seen_idx[nseen++] = i;
			q->seen_ptr[u + 1] = nseen;
		}
	}
	q->p.n_users = nu;
	q->p.n_items = ni;
	q->p.k = k;
	q->p.X = q->X;
	q->p.Y = q->Y;
	q->p.item_bias = q->bias;
	q->p.seen_ptr = q->seen_ptr;
	q->p.seen_idx = q->seen_idx;
	q->p.n = n;
	q->p.threads = (int) rint_range(1, 3);
}

/* float64 score of (u, i) */
static double
ref_score(const problem *q, int32_t u, int32_t i)
{
	double		s = q->bias ? q->bias[i] : 0.0;

	for (int f = 0; f < q->p.k; f++)
		s += (double) q->X[(size_t) u * q->p.k + f] * (double) q->Y[(size_t) i * q->p.k + f];
	return s;
}

static const double *sort_scores;

static int
by_score(const void *a, const void *b)
{
	int32_t		i = *(const int32_t *) a,
				j = *(const int32_t *) b;

	if (sort_scores[i] != sort_scores[j])
		return sort_scores[i] > sort_scores[j] ? -1 : 1;
	return (i > j) - (i < j);
}

/*
 * The float64 reference list of user u: every unseen item sorted by score
 * (descending), ties to the lower index; *m gets its length.
 */
static int32_t *
ref_list(const problem *q, int32_t u, double *s, int32_t *m)
{
	int32_t    *order = xmalloc(sizeof(int32_t) * (q->p.n_items + 1));
	int32_t		cnt = 0;

	for (int32_t i = 0; i < q->p.n_items; i++)
	{
		int			seen = 0;

		if (q->seen_ptr)
			for (int64_t e = q->seen_ptr[u]; e < q->seen_ptr[u + 1]; e++)
				seen |= q->seen_idx[e] == i;
		s[i] = ref_score(q, u, i);
		if (!seen)
			order[cnt++] = i;
	}
	sort_scores = s;
	qsort(order, cnt, sizeof(int32_t), by_score);
	*m = cnt;
	return order;
}

/*
 * r's lists against the float64 reference: the same length; scores within
 * tol of the reference's at every rank; a different item only where the two
 * items' reference scores are within tol (a near tie float32 may order
 * either way).  exact problems must match item for item and bit for bit.
 */
static int
check_lists(const problem *q, const gm_score_result *r, const char *what)
{
	int32_t		nu = q->p.n_users,
				ni = q->p.n_items;
	int			n = q->p.n;
	double	   *s = xmalloc(sizeof(double) * (ni + 1));
	int32_t    *ref = NULL;

	for (int32_t u = 0; u < nu; u++)
	{
		int32_t		m;
		int			want;
		double		scale = 0;

		ref = ref_list(q, u, s, &m);
		want = m < n ? m : n;
		for (int f = 0; f < q->p.k; f++)
			scale += fabs(q->X[(size_t) u * q->p.k + f]);
		CHECK(r->count[u] == want, "%s: user %d has %d entries, expected %d", what, u,
			  r->count[u], want);
		for (int e = 0; e < n; e++)
		{
			int32_t		got = r->idx[(size_t) u * n + e];
			float		gs = r->score[(size_t) u * n + e];

			if (e >= want)
			{
				CHECK(got == -1 && isnan(gs), "%s: user %d entry %d past the end is %d / %g",
					  what, u, e, got, gs);
				continue;
			}
			CHECK(got >= 0 && got < ni, "%s: user %d entry %d is item %d", what, u, e, got);
			if (q->exact)
			{
				CHECK(got == ref[e] && (double) gs == s[ref[e]],
					  "%s: user %d rank %d: item %d (%g), expected %d (%g)", what, u, e,
					  got, gs, ref[e], s[ref[e]]);
			}
			else
			{
				double		tol = 1e-5 * (1.0 + scale * 2.0);

				CHECK(fabs(gs - s[ref[e]]) <= tol,
					  "%s: user %d rank %d: score %.9g, reference %.9g", what, u, e, gs, s[ref[e]]);
				CHECK(got == ref[e] || fabs(s[got] - s[ref[e]]) <= tol,
					  "%s: user %d rank %d: item %d (%.9g), expected %d (%.9g)", what, u, e,
					  got, s[got], ref[e], s[ref[e]]);
				if (q->seen_ptr)
					for (int64_t j = q->seen_ptr[u]; j < q->seen_ptr[u + 1]; j++)
						CHECK(q->seen_idx[j] != got, "%s: user %d got seen item %d", what, u, got);
			}
		}
		free(ref);
		ref = NULL;
	}
	free(s);
	return 0;
fail:
	free(s);
	free(ref);
	return 1;
}

/* ------------------------------------------------------------ tests */

/* gm_score_topk on the CPU equals the float64 reference, lists and scores. */
static int
test_score_cpu(void)
{
	problem		q;
	gm_score_result r;
	char		err[GM_ERRLEN];

	memset(&q, 0, sizeof(q));
	memset(&r, 0, sizeof(r));
	for (int trial = 0; trial < 60; trial++)
	{
		int32_t		nu = (int32_t) rint_range(0, 90);
		int32_t		ni = (int32_t) rint_range(trial == 1 ? 0 : 1, trial % 9 == 0 ? 3000 : 300);
		int			k = (int) rint_range(1, 70);
		int			n = (int) rint_range(1, trial % 5 == 0 ? ni + 10 : 25);
		int			rc;

		problem_make(&q, nu, ni, k, n, trial % 3 == 0);
		r.idx = xmalloc(sizeof(int32_t) * ((size_t) nu * n + 1));
		r.score = xmalloc(sizeof(float) * ((size_t) nu * n + 1));
		r.count = xmalloc(sizeof(int32_t) * (nu + 1));
		for (size_t e = 0; e < (size_t) nu * n; e++)
		{
			r.idx[e] = -7;
			r.score[e] = 12345.0f;
		}
		rc = gm_score_topk(&q.p, GM_BACKEND_CPU, NULL, &r, err, sizeof(err));
		CHECK(rc == GM_OK, "trial %d: rc %d: %s", trial, rc, err);
		if (check_lists(&q, &r, "cpu"))
			goto fail;
		problem_free(&q);
		free(r.idx);
		free(r.score);
		free(r.count);
		memset(&r, 0, sizeof(r));
	}
	return 0;
fail:
	{
		char		save[sizeof(detail)];

		snprintf(save, sizeof(save), "%s", detail);
		snprintf(detail, sizeof(detail), "(%d users, %d items, k %d, n %d, bias %d, seen %d) %.900s",
				 q.p.n_users, q.p.n_items, q.p.k, q.p.n, q.bias != NULL, q.seen_ptr != NULL, save);
	}
	problem_free(&q);
	free(r.idx);
	free(r.score);
	free(r.count);
	return 1;
}

static int	stop_calls;

static int
stop_after_two(void *arg)
{
	return ++stop_calls > 2;
}

/* Bad problems are refused; a stop request cancels; CUDA without the module says so. */
static int
test_score_errors(void)
{
	problem		q;
	gm_score_result r;
	gm_callbacks cb = {stop_after_two, NULL, NULL};
	char		err[GM_ERRLEN] = "";
	int			rc;

	memset(&r, 0, sizeof(r));
	problem_make(&q, 3000, 500, 8, 5, 0);
	q.p.threads = 1;
	r.idx = xmalloc(sizeof(int32_t) * 3000 * 5);
	r.score = xmalloc(sizeof(float) * 3000 * 5);
	r.count = xmalloc(sizeof(int32_t) * 3000);
	q.p.n = 0;
	rc = gm_score_topk(&q.p, GM_BACKEND_CPU, NULL, &r, err, sizeof(err));
	CHECK(rc == GM_EINVAL && strstr(err, "n 0"), "n = 0: rc %d, %s", rc, err);
	q.p.n = 5;
	q.p.k = 0;
	rc = gm_score_topk(&q.p, GM_BACKEND_CPU, NULL, &r, err, sizeof(err));
	CHECK(rc == GM_EINVAL, "k = 0: rc %d", rc);
	q.p.k = 8;
	stop_calls = 0;
	rc = gm_score_topk(&q.p, GM_BACKEND_CPU, &cb, &r, err, sizeof(err));
	CHECK(rc == GM_ECANCELED, "stop request: rc %d, %s", rc, err);
	CHECK(stop_calls >= 3 && stop_calls < 3000 / 4, "should_stop called %d times", stop_calls);
	rc = gm_score_topk(&q.p, GM_BACKEND_CUDA, NULL, &r, err, sizeof(err));
	CHECK(rc == GM_ENODEVICE && strstr(err, "CUDA module"), "cuda without module: rc %d, %s", rc, err);
	problem_free(&q);
	free(r.idx);
	free(r.score);
	free(r.count);
	return 0;
fail:
	problem_free(&q);
	free(r.idx);
	free(r.score);
	free(r.count);
	return 1;
}

/* ------------------------------------------------------------ metrics */

/*
 * The reference, from the definitions rather than from implicit's loop:
 * AUC counts (positive, negative) pairs, a listed item above an unlisted
 * one, listed pairs by position, unlisted pairs one half; an empty list slot
 * stands for a listed negative (implicit counts it as a miss).
 */
static void
ref_metrics(int32_t nu, int32_t ni, int k, const int32_t *top, int stride,
			const int32_t *count, const gm_csr *test, double out[5], int64_t *users)
{
	double		hits_all = 0,
				div_all = 0,
				rec = 0,
				map = 0,
				ndcg = 0,
				auc = 0;
	int64_t		nusers = 0,
				nauc = 0;
	char	   *rel = xmalloc(ni + 1);

	for (int32_t u = 0; u < nu; u++)
	{
		int64_t		npos = test->indptr[u + 1] - test->indptr[u];
		int			m = (int) (npos < k ? npos : k);
		double		hits = 0,
					prec_sum = 0,
					dcg = 0,
					idcg = 0,
					pairs = 0;
		int			listed_neg = 0;

		if (npos == 0)
			continue;
		memset(rel, 0, ni + 1);
		for (int64_t e = test->indptr[u]; e < test->indptr[u + 1]; e++)
			rel[test->indices[e]] = 1;
		for (int i = 0; i < k; i++)
		{
			int32_t		it = i < count[u] ? top[(size_t) u * stride + i] : -1;

			if (it >= 0 && rel[it])
			{
				hits += 1;
				prec_sum += hits / (i + 1);
				dcg += 1.0 / log2(i + 2.0);
			}
			else
			{
				/* every positive listed above this negative wins a pair */
				pairs += hits;
				listed_neg++;
			}
		}
		for (int j = 0; j < m; j++)
			idcg += 1.0 / log2(j + 2.0);
		{
			double		nneg = (double) ni - npos;
			double		unlisted_neg = nneg - listed_neg;

			pairs += hits * unlisted_neg;	/* listed positive above an unlisted negative */
			pairs += 0.5 * (npos - hits) * unlisted_neg;	/* both unlisted: a coin */
			if (nneg > 0)
			{
				auc += pairs / (npos * nneg);
				nauc++;
			}
		}
		hits_all += hits;
		div_all += m;
		rec += hits / npos;
		map += prec_sum / m;
		ndcg += dcg / idcg;
		nusers++;
	}
	out[0] = hits_all / div_all;
	out[1] = rec / nusers;
	out[2] = map / nusers;
	out[3] = ndcg / nusers;
	out[4] = auc / nauc;
	*users = nusers;
	free(rel);
}

/* a small CSR from a dense 0/1 matrix */
static void
csr_from_dense(const char *d, int32_t nr, int32_t nc, gm_csr *c)
{
	int64_t		nnz = 0;

	memset(c, 0, sizeof(*c));
	c->n_rows = nr;
	c->n_cols = nc;
	c->indptr = xmalloc(sizeof(int64_t) * (nr + 1));
	c->indices = xmalloc(sizeof(int32_t) * ((size_t) nr * nc + 1));
	c->data = xmalloc(sizeof(float) * ((size_t) nr * nc + 1));
	c->indptr[0] = 0;
	for (int32_t r = 0; r < nr; r++)
	{
		for (int32_t j = 0; j < nc; j++)
			if (d[(size_t) r * nc + j])
			{
				c->indices[nnz] = j;
				c->data[nnz++] = (float) (d[(size_t) r * nc + j]);
			}
		c->indptr[r + 1] = nnz;
	}
	c->nnz = nnz;
}

/* gm_rank_metrics_at_k equals the reference on random lists and test sets. */
static int
test_rank_metrics(void)
{
	char	   *dense = NULL;
	int32_t    *top = NULL,
			   *count = NULL;
	gm_csr		test;
	char		err[GM_ERRLEN];

	memset(&test, 0, sizeof(test));
	for (int trial = 0; trial < 200; trial++)
	{
		int32_t		nu = (int32_t) rint_range(1, 60);
		int32_t		ni = (int32_t) rint_range(1, 80);
		int			k = (int) rint_range(1, 30);
		int			stride = k + (int) rint_range(0, 3);
		gm_rank_metrics got;
		double		want[5];
		int64_t		users;
		int			rc;

		dense = xmalloc((size_t) nu * ni + 1);
		top = xmalloc(sizeof(int32_t) * ((size_t) nu * stride + 1));
		count = xmalloc(sizeof(int32_t) * (nu + 1));
		for (int32_t u = 0; u < nu; u++)
		{
			double		p = u % 9 == 0 ? 0 : u % 13 == 0 ? 1.0 : runif() * 0.4;
			int32_t    *perm = xmalloc(sizeof(int32_t) * ni);

			for (int32_t i = 0; i < ni; i++)
				dense[(size_t) u * ni + i] = runif() < p;
			if (u == 1)			/* at least one user with a test item */
				dense[(size_t) u * ni] = 1;
			/* a list: distinct items, sometimes shorter than k */
			for (int32_t i = 0; i < ni; i++)
				perm[i] = i;
			for (int32_t i = ni - 1; i > 0; i--)
			{
				int32_t		j = (int32_t) rint_range(0, i),
							t = perm[i];

				perm[i] = perm[j];
				perm[j] = t;
			}
			count[u] = (int32_t) (runif() < 0.2 ? rint_range(0, k) : (k < ni ? k : ni));
			if (count[u] > ni)
				count[u] = ni;
			for (int i = 0; i < stride; i++)
				top[(size_t) u * stride + i] = i < count[u] ? perm[i] : -1;
			free(perm);
		}
		csr_from_dense(dense, nu, ni, &test);
		rc = gm_rank_metrics_at_k(nu, ni, k, top, stride, count, &test, &got, err, sizeof(err));
		CHECK(rc == GM_OK, "rc %d: %s", rc, err);
		ref_metrics(nu, ni, k, top, stride, count, &test, want, &users);
		CHECK(got.users == users, "users %lld, expected %lld", (long long) got.users,
			  (long long) users);
		{
			const double g[5] = {got.precision, got.recall, got.map, got.ndcg, got.auc};
			const char *names[5] = {"precision", "recall", "map", "ndcg", "auc"};

			for (int m = 0; m < 5; m++)
				CHECK((isnan(g[m]) && isnan(want[m])) || fabs(g[m] - want[m]) <= 1e-12,
					  "trial %d (%d users, %d items, k %d): %s %.15g, expected %.15g", trial,
					  nu, ni, k, names[m], g[m], want[m]);
		}
		free(dense);
		free(top);
		free(count);
		gm_csr_free(&test);
		dense = NULL;
		top = count = NULL;
	}
	return 0;
fail:
	free(dense);
	free(top);
	free(count);
	gm_csr_free(&test);
	return 1;
}

/*
 * A hand-computed example (the same one sql/evaluate.sql checks through SQL):
 * 6 items, k = 3.  User 0 likes {1, 4}, list (4, 2, 1): hits at ranks 1 and
 * 3.  User 1 likes {5}, list (0, 3): no hit, one empty slot.  User 2 has no
 * test items (left out).
 *   precision = (2 + 0) / (min(3,2) + min(3,1)) = 2/3
 *   recall    = (2/2 + 0/1) / 2 = 1/2
 *   map       = ((1/1 + 2/3) / 2 + 0) / 2 = 5/12
 *   ndcg      = ((1 + 1/log2 4) / (1 + 1/log2 3) + 0) / 2
 *   auc: user 0: miss at rank 2 adds 1; then (2 + 2)/2 * (4 - 1) = 6; 7/8.
 *        user 1: misses add 0; (0 + 1)/2 * (5 - 3) = 1; 1/5.  mean 43/80.
 */
static int
test_rank_metrics_example(void)
{
	int32_t		top[9] = {4, 2, 1, 0, 3, -1, 0, 1, 2};
	int32_t		count[3] = {3, 2, 3};
	int64_t		indptr[4] = {0, 2, 3, 3};
	int32_t		indices[3] = {1, 4, 5};
	float		data[3] = {1, 1, 1};
	gm_csr		test = {3, 6, 3, indptr, indices, data, NULL, 0, 0};
	gm_rank_metrics m;
	char		err[GM_ERRLEN];
	double		ndcg = ((1 + 1 / log2(4.0)) / (1 + 1 / log2(3.0))) / 2;

	CHECK(gm_rank_metrics_at_k(3, 6, 3, top, 3, count, &test, &m, err, sizeof(err)) == GM_OK,
		  "%s", err);
	CHECK(m.users == 2 && m.hits == 2 && m.test_items == 3, "users %lld hits %lld",
		  (long long) m.users, (long long) m.hits);
	CHECK(fabs(m.precision - 2.0 / 3) < 1e-15, "precision %.17g", m.precision);
	CHECK(fabs(m.recall - 0.5) < 1e-15, "recall %.17g", m.recall);
	CHECK(fabs(m.map - 5.0 / 12) < 1e-15, "map %.17g", m.map);
	CHECK(fabs(m.ndcg - ndcg) < 1e-15, "ndcg %.17g, expected %.17g", m.ndcg, ndcg);
	CHECK(fabs(m.auc - 43.0 / 80) < 1e-15, "auc %.17g", m.auc);
	return 0;
fail:
	return 1;
}

/* RMSE and MAE against a dense float64 product, repeated pairs included. */
static int
test_rating_errors(void)
{
	for (int trial = 0; trial < 50; trial++)
	{
		int32_t		nu = (int32_t) rint_range(1, 40),
					ni = (int32_t) rint_range(1, 50);
		int			k = (int) rint_range(1, 20);
		int64_t		n = trial == 0 ? 0 : rint_range(1, 400);
		float	   *X = xmalloc(sizeof(float) * nu * k),
				   *Y = xmalloc(sizeof(float) * ni * k),
				   *bu = xmalloc(sizeof(float) * nu),
				   *bi = xmalloc(sizeof(float) * ni),
				   *vals = xmalloc(sizeof(float) * (n + 1));
		int32_t    *rows = xmalloc(sizeof(int32_t) * (n + 1)),
				   *cols = xmalloc(sizeof(int32_t) * (n + 1));
		double	   *P = xmalloc(sizeof(double) * nu * ni);
		double		mu = runif() * 4,
					se = 0,
					ae = 0,
					rmse,
					mae;
		char		err[GM_ERRLEN];
		int			biases = trial % 2;
		int			ok;

		for (int e = 0; e < nu * k; e++)
			X[e] = (float) (runif() - 0.5);
		for (int e = 0; e < ni * k; e++)
			Y[e] = (float) (runif() - 0.5);
		for (int e = 0; e < nu; e++)
			bu[e] = (float) (runif() - 0.5);
		for (int e = 0; e < ni; e++)
			bi[e] = (float) (runif() - 0.5);
		for (int64_t e = 0; e < n; e++)
		{
			rows[e] = (int32_t) rint_range(0, nu - 1);
			cols[e] = (int32_t) rint_range(0, ni - 1);
			vals[e] = 0.5f * (float) rint_range(1, 10);
		}
		/* P = X Y^T in float64, then the biases */
		for (int u = 0; u < nu; u++)
			for (int i = 0; i < ni; i++)
			{
				double		s = 0;

				for (int f = 0; f < k; f++)
					s += (double) X[u * k + f] * Y[i * k + f];
				P[u * ni + i] = s + (biases ? mu + bu[u] + bi[i] : 0);
			}
		for (int64_t e = 0; e < n; e++)
		{
			double		d = P[rows[e] * ni + cols[e]] - vals[e];

			se += d * d;
			ae += fabs(d);
		}
		ok = gm_rating_errors(n, rows, cols, vals, X, Y, k, biases ? bu : NULL,
							  biases ? bi : NULL, biases ? mu : 0, &rmse, &mae, err,
							  sizeof(err)) == GM_OK &&
			((n == 0 && isnan(rmse) && isnan(mae)) ||
			 (fabs(rmse - sqrt(se / n)) < 1e-12 && fabs(mae - ae / n) < 1e-12));
		if (!ok)
			snprintf(detail, sizeof(detail), "trial %d: rmse %.15g mae %.15g, expected %.15g %.15g",
					 trial, rmse, mae, n ? sqrt(se / n) : NAN, n ? ae / n : NAN);
		free(X);
		free(Y);
		free(bu);
		free(bi);
		free(vals);
		free(rows);
		free(cols);
		free(P);
		if (!ok)
			return 1;
	}
	return 0;
}

/* gm_keymap_find_* find what was added, nothing else, and add nothing. */
static int
test_keymap_find(void)
{
	gm_keymap  *mi = gm_keymap_create(0),
			   *mb = gm_keymap_create(1);
	int			n = (int) rint_range(1, 5000);
	char		buf[32];

	for (int i = 0; i < n; i++)
	{
		snprintf(buf, sizeof(buf), "key %d", i * 3);
		CHECK(gm_keymap_int(mi, (int64_t) i * 3 - 1000) == i, "int insert %d", i);
		CHECK(gm_keymap_bytes(mb, buf, (uint32_t) strlen(buf)) == i, "bytes insert %d", i);
	}
	for (int i = -5; i < 3 * n + 5; i++)
	{
		int32_t		want = (i >= 0 && i % 3 == 0 && i / 3 < n) ? i / 3 : -1;

		snprintf(buf, sizeof(buf), "key %d", i);
		CHECK(gm_keymap_find_int(mi, (int64_t) i - 1000) == want, "find int %d", i);
		CHECK(gm_keymap_find_bytes(mb, buf, (uint32_t) strlen(buf)) == want, "find bytes %d", i);
	}
	CHECK(gm_keymap_find_int(mb, 0) == -1 && gm_keymap_find_bytes(mi, "x", 1) == -1,
		  "lookups of the other kind");
	CHECK(gm_keymap_size(mi) == n && gm_keymap_size(mb) == n, "lookups added keys");
	gm_keymap_free(mi);
	gm_keymap_free(mb);
	return 0;
fail:
	gm_keymap_free(mi);
	gm_keymap_free(mb);
	return 1;
}

/* ------------------------------------------------------------ main */

static const gm_test tests[] = {
	{"score_topk (cpu) equals a float64 reference", test_score_cpu},
	{"score_topk refuses bad input, cancels, needs the module for cuda", test_score_errors},
	{"rank metrics at k equal a reference from the definitions", test_rank_metrics},
	{"rank metrics on the hand-computed example", test_rank_metrics_example},
	{"rating errors (RMSE, MAE) vs a dense float64 product", test_rating_errors},
	{"keymap find without insert", test_keymap_find},
};

int
main(void)
{
	return gm_test_main(tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
