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

/* What a batch of scores needs to become metrics. */
typedef struct rank_state
{
	const gm_csr *train;
	const gm_csr *test;
	const int32_t *users;		/* the users with test entries */
	int32_t		m;
	int			K;
	int			nt;
	const double *disc;			/* 1 / log2(r + 2) */
	int32_t    *top;			/* batch x K */
	float	   *topsc;
	double	   *vals;			/* batch x 3 */
	double		rec,
				ndcg,
				prec;
	const gm_callbacks *cb;
} rank_state;

/*
 * The metrics of users first .. first + nb - 1 (of st->users) from their
 * scores S (nb x m), added to the sums; GM_ECANCELED when cb asks to stop.
 */
static int
rank_batch(void *arg, int64_t first, int nb, const float *S)
{
	rank_state *st = arg;
	const gm_csr *test = st->test,
			   *train = st->train;
	int			K = st->K;
	int32_t		m = st->m;

	/* per-user values summed in user order afterwards: the same bits for any threads */
#pragma omp parallel for num_threads(st->nt) schedule(dynamic, 8)
	for (int j = 0; j < nb; j++)
	{
		int32_t		u = st->users[first + j];
		int64_t		tb = test->indptr[u],
					tn = test->indptr[u + 1] - tb,
					rb = train->indptr[u];
		int			got,
					hits = 0;
		double		dcg = 0.0,
					idcg = 0.0;

		got = gm_topk(S + (size_t) j * m, m, K, train->indices + rb,
					  (int32_t) (train->indptr[u + 1] - rb), st->top + (size_t) j * K,
					  st->topsc + (size_t) j * K);
		for (int r = 0; r < got; r++)
			if (sorted_has(test->indices + tb, tn, st->top[(size_t) j * K + r]))
			{
				hits++;
				dcg += st->disc[r];
			}
		for (int r = 0; r < K && r < tn; r++)
			idcg += st->disc[r];
		st->vals[3 * j] = (double) hits / (double) tn;
		st->vals[3 * j + 1] = dcg / idcg;
		st->vals[3 * j + 2] = (double) hits / (double) K;
	}
	for (int j = 0; j < nb; j++)
	{
		st->rec += st->vals[3 * j];
		st->ndcg += st->vals[3 * j + 1];
		st->prec += st->vals[3 * j + 2];
	}
	if (st->cb && st->cb->should_stop && st->cb->should_stop(st->cb->arg))
		return GM_ECANCELED;
	return GM_OK;
}

typedef int (*gpu_scores_fn) (const float *, const int32_t *, int64_t, const float *,
							  int32_t, int, int, int (*) (void *, int64_t, int, const float *),
							  void *, char *, size_t);

/* Ranking metrics (see gm_core.h). */
int
gm_rank_eval(const gm_csr *train, const gm_csr *test, const float *X,
			 const float *Y, int k, int K, int threads, gm_backend_kind backend,
			 const gm_callbacks *cb, gm_rank_result *out, char *err, size_t errlen)
{
	int32_t		nu = test->n_rows,
				m = test->n_cols;
	int			batch,
				rc = GM_OK;
	int64_t		n = 0;
	int32_t    *users = NULL;
	float	   *Xb = NULL,
			   *S = NULL;
	double	   *disc = NULL;
	rank_state	st;
	gpu_scores_fn gpu = NULL;

	memset(out, 0, sizeof(*out));
	memset(&st, 0, sizeof(st));
	if (train->n_rows != nu || train->n_cols != m || K < 1)
	{
		snprintf(err, errlen, "ranking metrics: train (%d x %d) and test (%d x %d) differ in shape",
				 train->n_rows, train->n_cols, nu, m);
		return GM_EINVAL;
	}
	if (K > m)
		K = m;
	if (backend == GM_BACKEND_CUDA)
		*(void **) &gpu = gm_cuda_symbol("gm_cuda_rank_scores");
	/* batches of users whose scores take at most ~64 MB */
	batch = (int) (16777216 / (m > 0 ? m : 1));
	batch = batch < 1 ? 1 : batch > 1024 ? 1024 : batch;
	users = malloc(sizeof(int32_t) * (size_t) (nu > 0 ? nu : 1));
	disc = malloc(sizeof(double) * (size_t) (K + 1));
	st.top = malloc(sizeof(int32_t) * (size_t) batch * K);
	st.topsc = malloc(sizeof(float) * (size_t) batch * K);
	st.vals = malloc(sizeof(double) * 3 * (size_t) batch);
	if (gpu == NULL)
	{
		Xb = malloc(sizeof(float) * (size_t) batch * k);
		S = malloc(sizeof(float) * (size_t) batch * (m > 0 ? m : 1));
	}
	if (!users || !disc || !st.top || !st.topsc || !st.vals || (gpu == NULL && (!Xb || !S)))
	{
		snprintf(err, errlen, "out of memory for ranking metrics (%d items)", m);
		rc = GM_ENOMEM;
		goto done;
	}
	for (int r = 0; r < K; r++)
		disc[r] = 1.0 / log2((double) r + 2.0);
	for (int32_t u = 0; u < nu; u++)
		if (test->indptr[u + 1] > test->indptr[u])
			users[n++] = u;
	st.train = train;
	st.test = test;
	st.users = users;
	st.m = m;
	st.K = K;
	st.nt = gm_resolve_threads(threads);
	st.disc = disc;
	st.cb = cb;

	if (gpu != NULL)
		rc = gpu(X, users, n, Y, m, k, batch, rank_batch, &st, err, errlen);
	else
		for (int64_t b0 = 0; b0 < n && rc == GM_OK; b0 += batch)
		{
			int			nb = n - b0 < batch ? (int) (n - b0) : batch;

			for (int j = 0; j < nb; j++)
				memcpy(Xb + (size_t) j * k, X + (size_t) users[b0 + j] * k, sizeof(float) * k);
			score_batch(Xb, nb, Y, m, k, S, st.nt);
			rc = rank_batch(&st, b0, nb, S);
		}
	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	if (rc == GM_OK && n > 0)
	{
		out->recall = st.rec / n;
		out->ndcg = st.ndcg / n;
		out->precision = st.prec / n;
	}
	out->users = n;

done:
	free(users);
	free(Xb);
	free(S);
	free(st.top);
	free(st.topsc);
	free(st.vals);
	free(disc);
	return rc;
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
