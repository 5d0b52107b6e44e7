/*
 * rank_eval.c: top-K ranking metrics of a factor model on held-out entries
 * (recall@K, NDCG@K and precision@K over all items, training items left
 * out, as LightGCN and its successors report them), and a seeded per-user
 * holdout split, for early stopping and hyper-parameter search.
 *
 * The metrics themselves are gpumf_evaluate's (metrics.c), on top lists
 * from the batch scorer (score.c); this file adds LightGCN's precision, the
 * metric names and the split.
 */
#include "gm_core.h"
#include "gm_score.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const metric_names[GM_METRIC_COUNT] = {
	[GM_METRIC_RECALL] = "recall",
	[GM_METRIC_NDCG] = "ndcg",
	[GM_METRIC_PRECISION] = "precision",
};

/* The metric's name ("recall"), or NULL. */
const char *
gm_rank_metric_name(gm_rank_metric m)
{
	if ((int) m < 0 || m >= GM_METRIC_COUNT)
		return NULL;
	return metric_names[m];
}

/* "recall@20", "NDCG@10", "precision@5" -> metric and K. */
int
gm_rank_metric_parse(const char *text, gm_rank_metric *m, int *K, char *err,
					 size_t errlen)
{
	const char *at = text ? strchr(text, '@') : NULL;

	if (at != NULL)
	{
		size_t		len = (size_t) (at - text);

		for (int i = 0; i < GM_METRIC_COUNT; i++)
			if (strlen(metric_names[i]) == len && strncasecmp(text, metric_names[i], len) == 0)
			{
				char	   *end;
				long		k = strtol(at + 1, &end, 10);

				if (end != at + 1 && *end == '\0' && k >= 1 && k <= 1000)
				{
					*m = (gm_rank_metric) i;
					*K = (int) k;
					return GM_OK;
				}
			}
	}
	snprintf(err, errlen, "metric must be recall@K, ndcg@K or precision@K with K between 1 and 1000, not \"%s\"",
			 text ? text : "(null)");
	return GM_EINVAL;
}

/* The value of metric m in r. */
double
gm_rank_value(const gm_rank_result *r, gm_rank_metric m)
{
	switch (m)
	{
		case GM_METRIC_NDCG:
			return r->ndcg;
		case GM_METRIC_PRECISION:
			return r->precision;
		default:
			return r->recall;
	}
}

/*
 * Ranking metrics (see gm_core.h): the users with test entries get their top
 * K from the batch scorer (gm_score_topk: a blocked sgemm and a heap per
 * user on the CPU, cuBLAS and a selection kernel on the GPU), training items
 * left out, and gm_rank_metrics_at_k (metrics.c, gpumf_evaluate's metrics)
 * turns the lists into recall and NDCG; precision is LightGCN's, hits / K
 * averaged over the users (gm_rank_metrics_at_k's precision divides by
 * min(K, |test|) instead, as the implicit library does).  On the GPU a scorer
 * that is missing or cannot take the problem hands it to the CPU.
 */
int
gm_rank_eval(const gm_csr *train, const gm_csr *test, const float *X,
			 const float *Y, int k, int K, int threads, gm_backend_kind backend,
			 const gm_callbacks *cb, gm_rank_result *out, char *err, size_t errlen)
{
	int32_t		nu = test->n_rows,
				m = test->n_cols,
				n = 0;
	int32_t    *users = NULL;
	float	   *Xg = NULL;
	int64_t    *seen_ptr = NULL;
	int32_t    *seen_idx = NULL;
	gm_csr		T;
	gm_score_problem sp;
	gm_score_result sr;
	gm_rank_metrics rm;
	int64_t		nseen = 0,
				ntest = 0;
	int			rc = GM_OK;

	memset(out, 0, sizeof(*out));
	memset(&T, 0, sizeof(T));
	memset(&sr, 0, sizeof(sr));
	if (train->n_rows != nu || train->n_cols != m || K < 1 || k < 1)
	{
		snprintf(err, errlen, "ranking metrics: train (%d x %d) and test (%d x %d) differ in shape",
				 train->n_rows, train->n_cols, nu, m);
		return GM_EINVAL;
	}
	if (K > m)
		K = m;
	if (K < 1)
		return GM_OK;

	/* the users with test entries, their factors, training items and test items */
	users = malloc(sizeof(int32_t) * (size_t) (nu > 0 ? nu : 1));
	if (users == NULL)
		goto oom;
	for (int32_t u = 0; u < nu; u++)
		if (test->indptr[u + 1] > test->indptr[u])
		{
			users[n++] = u;
			nseen += train->indptr[u + 1] - train->indptr[u];
			ntest += test->indptr[u + 1] - test->indptr[u];
		}
	if (n == 0)
		goto done;
	Xg = malloc(sizeof(float) * (size_t) n * k);
	seen_ptr = malloc(sizeof(int64_t) * ((size_t) n + 1));
	seen_idx = malloc(sizeof(int32_t) * (size_t) (nseen > 0 ? nseen : 1));
	T.indptr = malloc(sizeof(int64_t) * ((size_t) n + 1));
	T.indices = malloc(sizeof(int32_t) * (size_t) ntest);
	sr.idx = malloc(sizeof(int32_t) * (size_t) n * K);
	sr.score = malloc(sizeof(float) * (size_t) n * K);
	sr.count = malloc(sizeof(int32_t) * (size_t) n);
	if (!Xg || !seen_ptr || !seen_idx || !T.indptr || !T.indices || !sr.idx || !sr.score ||
		!sr.count)
		goto oom;
	seen_ptr[0] = 0;
	T.indptr[0] = 0;
	for (int32_t j = 0; j < n; j++)
	{
		int32_t		u = users[j];
		int64_t		rb = train->indptr[u],
					rn = train->indptr[u + 1] - rb,
					tb = test->indptr[u],
					tn = test->indptr[u + 1] - tb;

		memcpy(Xg + (size_t) j * k, X + (size_t) u * k, sizeof(float) * k);
		memcpy(seen_idx + seen_ptr[j], train->indices + rb, sizeof(int32_t) * rn);
		seen_ptr[j + 1] = seen_ptr[j] + rn;
		memcpy(T.indices + T.indptr[j], test->indices + tb, sizeof(int32_t) * tn);
		T.indptr[j + 1] = T.indptr[j] + tn;
	}
	T.n_rows = n;
	T.n_cols = m;
	T.nnz = ntest;

	memset(&sp, 0, sizeof(sp));
	sp.n_users = n;
	sp.n_items = m;
	sp.k = k;
	sp.X = Xg;
	sp.Y = Y;
	sp.seen_ptr = seen_ptr;
	sp.seen_idx = seen_idx;
	sp.n = K;
	sp.threads = threads;
	rc = gm_score_topk(&sp, backend, cb, &sr, err, errlen);
	if (backend == GM_BACKEND_CUDA &&
		(rc == GM_ENODEVICE || rc == GM_ENOTSUP || rc == GM_ENOMEM))
		rc = gm_score_topk(&sp, GM_BACKEND_CPU, cb, &sr, err, errlen);
	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	if (rc != GM_OK)
		goto done;
	rc = gm_rank_metrics_at_k(n, m, K, sr.idx, K, sr.count, &T, &rm, err, errlen);
	if (rc != GM_OK)
		goto done;
	out->recall = rm.recall;
	out->ndcg = rm.ndcg;
	out->precision = (double) rm.hits / ((double) rm.users * K);
	out->users = rm.users;
	goto done;

oom:
	snprintf(err, errlen, "out of memory for ranking metrics (%d users, %d items, K %d)", nu, m, K);
	rc = GM_ENOMEM;
done:
	free(users);
	free(Xg);
	free(seen_ptr);
	free(seen_idx);
	free(T.indptr);
	free(T.indices);
	free(sr.idx);
	free(sr.score);
	free(sr.count);
	return rc;
}

/* Holdout split (see gm_core.h). */
int
gm_split_holdout(const gm_csr *R, double fraction, uint64_t seed, gm_csr *train,
				 gm_csr *test, char *err, size_t errlen)
{
	return gm_split_holdout_users(R, fraction, seed, 0, train, test, err, errlen);
}

/* Holdout split of a sample of the users (see gm_core.h). */
int
gm_split_holdout_users(const gm_csr *R, double fraction, uint64_t seed, int32_t max_users,
					   gm_csr *train, gm_csr *test, char *err, size_t errlen)
{
	int64_t		ntest = 0,
				maxlen = 0;
	uint8_t    *pick = NULL;
	int32_t    *perm = NULL;

	memset(train, 0, sizeof(*train));
	memset(test, 0, sizeof(*test));
	if (!(fraction >= 0.0 && fraction < 1.0))
	{
		snprintf(err, errlen, "holdout must be at least 0 and below 1, not %g", fraction);
		return GM_EINVAL;
	}
	pick = calloc((size_t) (R->nnz > 0 ? R->nnz : 1), 1);
	for (int32_t u = 0; u < R->n_rows; u++)
		if (R->indptr[u + 1] - R->indptr[u] > maxlen)
			maxlen = R->indptr[u + 1] - R->indptr[u];
	perm = malloc(sizeof(int32_t) * (size_t) (maxlen > 0 ? maxlen : 1));
	if (!pick || !perm)
		goto oom;
	for (int32_t u = 0; u < R->n_rows; u++)
	{
		int64_t		b = R->indptr[u],
					n = R->indptr[u + 1] - b,
					take;
		uint64_t	st = gm_mix64(seed ^ ((uint64_t) u * 0x9E3779B97F4A7C15ULL));

		if (n < 2 || fraction <= 0.0)
			continue;
		/* a seeded sample of about max_users users (all of them when 0 or more) */
		if (max_users > 0 && R->n_rows > max_users &&
			gm_mix64(seed ^ 0x5A3D1EULL ^ ((uint64_t) u * 0xD1B54A32D192ED03ULL)) % (uint64_t) R->n_rows >=
			(uint64_t) max_users)
			continue;
		take = (int64_t) llround(fraction * (double) n);
		take = take < 1 ? 1 : take > n - 1 ? n - 1 : take;
		for (int64_t i = 0; i < n; i++)
			perm[i] = (int32_t) i;
		/* the first `take` of a seeded Fisher-Yates shuffle */
		for (int64_t i = 0; i < take; i++)
		{
			int64_t		j = i + (int64_t) (gm_mix64(st + (uint64_t) i) % (uint64_t) (n - i));
			int32_t		t = perm[i];

			perm[i] = perm[j];
			perm[j] = t;
			pick[b + perm[i]] = 1;
		}
		ntest += take;
	}
	free(perm);
	perm = NULL;

	train->n_rows = test->n_rows = R->n_rows;
	train->n_cols = test->n_cols = R->n_cols;
	train->nnz = R->nnz - ntest;
	test->nnz = ntest;
	train->indptr = malloc(sizeof(int64_t) * ((size_t) R->n_rows + 1));
	test->indptr = malloc(sizeof(int64_t) * ((size_t) R->n_rows + 1));
	train->indices = malloc(sizeof(int32_t) * (size_t) (train->nnz > 0 ? train->nnz : 1));
	train->data = malloc(sizeof(float) * (size_t) (train->nnz > 0 ? train->nnz : 1));
	test->indices = malloc(sizeof(int32_t) * (size_t) (ntest > 0 ? ntest : 1));
	test->data = malloc(sizeof(float) * (size_t) (ntest > 0 ? ntest : 1));
	if (!train->indptr || !test->indptr || !train->indices || !train->data ||
		!test->indices || !test->data)
		goto oom;
	{
		int64_t		a = 0,
					t = 0;

		train->indptr[0] = test->indptr[0] = 0;
		for (int32_t u = 0; u < R->n_rows; u++)
		{
			for (int64_t e = R->indptr[u]; e < R->indptr[u + 1]; e++)
			{
				if (pick[e])
				{
					test->indices[t] = R->indices[e];
					test->data[t++] = R->data[e];
				}
				else
				{
					train->indices[a] = R->indices[e];
					train->data[a++] = R->data[e];
				}
			}
			train->indptr[u + 1] = a;
			test->indptr[u + 1] = t;
		}
	}
	free(pick);
	return GM_OK;

oom:
	free(pick);
	free(perm);
	gm_csr_free(train);
	gm_csr_free(test);
	snprintf(err, errlen, "out of memory splitting %lld entries", (long long) R->nnz);
	return GM_ENOMEM;
}
