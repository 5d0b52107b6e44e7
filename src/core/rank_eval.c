/*
 * rank_eval.c: top-K ranking metrics of a factor model on held-out entries
 * (recall@K, NDCG@K and precision@K over all items, training items left
 * out, as LightGCN and its successors report them), and a seeded per-user
 * holdout split, for early stopping and hyper-parameter search.
 *
 * (A gpumf_evaluate metrics module is being written beside this one; the
 * two are to become one file.)
 */
#include "gm_core.h"
#include "gm_util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifndef GM_NO_CBLAS
#include <cblas.h>
#endif

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

/* Is v in the sorted list a[0 .. n)? */
static int
sorted_has(const int32_t *a, int64_t n, int32_t v)
{
	int64_t		lo = 0,
				hi = n;

	while (lo < hi)
	{
		int64_t		mid = (lo + hi) / 2;

		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && a[lo] == v;
}

/*
 * Scores S (nb x m, row-major) = Xb (nb x k) Y^T for a batch of users
 * gathered in Xb.
 */
static void
score_batch(const float *Xb, int nb, const float *Y, int32_t m, int k, float *S,
			int nt)
{
#ifndef GM_NO_CBLAS
	openblas_set_num_threads(nt);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, m, k, 1.0f, Xb, k,
				Y, k, 0.0f, S, m);
#else
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int32_t i = 0; i < m; i++)
		for (int j = 0; j < nb; j++)
			S[(size_t) j * m + i] = gm_dot(Xb + (size_t) j * k, Y + (size_t) i * k, k);
#endif
}

/* Ranking metrics (see gm_core.h). */
int
gm_rank_eval(const gm_csr *train, const gm_csr *test, const float *X,
			 const float *Y, int k, int K, int threads, const gm_callbacks *cb,
			 gm_rank_result *out, char *err, size_t errlen)
{
	int			nt = gm_resolve_threads(threads);
	int32_t		nu = test->n_rows,
				m = test->n_cols;
	int			batch;
	int32_t    *users = NULL,
			   *top = NULL;
	float	   *Xb = NULL,
			   *S = NULL,
			   *topsc = NULL;
	double		rec = 0.0,
				ndcg = 0.0,
				prec = 0.0,
			   *disc = NULL,
			   *vals = NULL;
	int64_t		n = 0;

	memset(out, 0, sizeof(*out));
	if (train->n_rows != nu || train->n_cols != m || K < 1)
	{
		snprintf(err, errlen, "ranking metrics: train (%d x %d) and test (%d x %d) differ in shape",
				 train->n_rows, train->n_cols, nu, m);
		return GM_EINVAL;
	}
	if (K > m)
		K = m;
	/* batches of users whose scores take at most ~64 MB */
	batch = (int) (16777216 / (m > 0 ? m : 1));
	batch = batch < 1 ? 1 : batch > 1024 ? 1024 : batch;
	users = malloc(sizeof(int32_t) * (size_t) (nu > 0 ? nu : 1));
	Xb = malloc(sizeof(float) * (size_t) batch * k);
	S = malloc(sizeof(float) * (size_t) batch * (m > 0 ? m : 1));
	top = malloc(sizeof(int32_t) * (size_t) batch * K);
	topsc = malloc(sizeof(float) * (size_t) batch * K);
	disc = malloc(sizeof(double) * (size_t) (K + 1));
	vals = malloc(sizeof(double) * 3 * (size_t) batch);
	if (!users || !Xb || !S || !top || !topsc || !disc || !vals)
	{
		free(vals);
		free(users);
		free(Xb);
		free(S);
		free(top);
		free(topsc);
		free(disc);
		snprintf(err, errlen, "out of memory for ranking metrics (%d items)", m);
		return GM_ENOMEM;
	}
	for (int r = 0; r < K; r++)
		disc[r] = 1.0 / log2((double) r + 2.0);
	for (int32_t u = 0; u < nu; u++)
		if (test->indptr[u + 1] > test->indptr[u])
			users[n++] = u;

	for (int64_t b0 = 0; b0 < n; b0 += batch)
	{
		int			nb = n - b0 < batch ? (int) (n - b0) : batch;

		for (int j = 0; j < nb; j++)
			memcpy(Xb + (size_t) j * k, X + (size_t) users[b0 + j] * k, sizeof(float) * k);
		score_batch(Xb, nb, Y, m, k, S, nt);
		/* per-user values summed in user order afterwards: the same bits for any threads */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 8)
		for (int j = 0; j < nb; j++)
		{
			int32_t		u = users[b0 + j];
			int64_t		tb = test->indptr[u],
						tn = test->indptr[u + 1] - tb,
						rb = train->indptr[u];
			int			got,
						hits = 0;
			double		dcg = 0.0,
						idcg = 0.0;

			got = gm_topk(S + (size_t) j * m, m, K, train->indices + rb,
						  (int32_t) (train->indptr[u + 1] - rb), top + (size_t) j * K,
						  topsc + (size_t) j * K);
			for (int r = 0; r < got; r++)
				if (sorted_has(test->indices + tb, tn, top[(size_t) j * K + r]))
				{
					hits++;
					dcg += disc[r];
				}
			for (int r = 0; r < K && r < tn; r++)
				idcg += disc[r];
			vals[3 * j] = (double) hits / (double) tn;
			vals[3 * j + 1] = dcg / idcg;
			vals[3 * j + 2] = (double) hits / (double) K;
		}
		for (int j = 0; j < nb; j++)
		{
			rec += vals[3 * j];
			ndcg += vals[3 * j + 1];
			prec += vals[3 * j + 2];
		}
		if (cb && cb->should_stop && cb->should_stop(cb->arg))
		{
			free(users);
			free(Xb);
			free(S);
			free(top);
			free(topsc);
			free(disc);
			free(vals);
			snprintf(err, errlen, "training canceled");
			return GM_ECANCELED;
		}
	}
	if (n > 0)
	{
		out->recall = rec / n;
		out->ndcg = ndcg / n;
		out->precision = prec / n;
	}
	out->users = n;
	free(users);
	free(Xb);
	free(S);
	free(top);
	free(topsc);
	free(disc);
	free(vals);
	return GM_OK;
}

/* Holdout split (see gm_core.h). */
int
gm_split_holdout(const gm_csr *R, double fraction, uint64_t seed, gm_csr *train,
				 gm_csr *test, char *err, size_t errlen)
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
