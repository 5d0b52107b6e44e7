/*
 * metrics.c: ranking metrics at k and rating errors, in float64.
 *
 * The ranking metrics follow the implicit library's ranking_metrics_at_k
 * (gm_score.h spells out each definition); recall is added as the mean of
 * hits / |test items| per user.
 */
#include "gm_core.h"
#include "gm_score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* is item in the sorted list a[0 .. n)? */
static int
contains(const int32_t *a, int64_t n, int32_t item)
{
	int64_t		i = gm_lower_bound32(a, 0, n, item);

	return i < n && a[i] == item;
}

/* Ranking metrics at k (see gm_score.h). */
int
gm_rank_metrics_at_k(int32_t n_users, int32_t n_items, int k, const int32_t *top,
					 int stride, const int32_t *count, const gm_csr *test,
					 gm_rank_metrics *out, char *err, size_t errlen)
{
	double	   *cg;
	double	   *cg_sum;
	double		relevant = 0,
				pr_div = 0,
				recall = 0,
				map = 0,
				ndcg = 0,
				auc_sum = 0;
	int64_t		users = 0,
				auc_users = 0,
				test_items = 0;

	if (k < 1 || stride < k || n_users < 0 || test->n_rows != n_users)
	{
		snprintf(err, errlen, "invalid metrics problem: k %d, stride %d, %d users, test rows %d",
				 k, stride, n_users, test->n_rows);
		return GM_EINVAL;
	}
	cg = malloc(sizeof(double) * k);
	cg_sum = malloc(sizeof(double) * k);
	if (!cg || !cg_sum)
	{
		free(cg);
		free(cg_sum);
		snprintf(err, errlen, "out of memory for metrics");
		return GM_ENOMEM;
	}
	for (int i = 0; i < k; i++)
	{
		cg[i] = 1.0 / log2((double) i + 2.0);
		cg_sum[i] = cg[i] + (i > 0 ? cg_sum[i - 1] : 0.0);
	}

	for (int32_t u = 0; u < n_users; u++)
	{
		const int32_t *likes = test->indices + test->indptr[u];
		int64_t		nlikes = test->indptr[u + 1] - test->indptr[u];
		const int32_t *ids = top + (size_t) u * stride;
		int			got = count ? count[u] : k;
		double		hit = 0,
					miss = 0,
					ap = 0,
					auc = 0,
					udcg = 0,
					npos,
					nneg;
		int64_t		kk;

		if (nlikes == 0)
			continue;
		kk = nlikes < k ? nlikes : k;
		npos = (double) nlikes;
		nneg = (double) n_items - npos;
		for (int i = 0; i < k; i++)
		{
			if (i < got && ids[i] >= 0 && contains(likes, nlikes, ids[i]))
			{
				hit += 1;
				ap += hit / (i + 1);
				udcg += cg[i];
			}
			else
			{
				miss += 1;
				auc += hit;
			}
		}
		auc += ((hit + npos) / 2.0) * (nneg - miss);
		relevant += hit;
		pr_div += (double) kk;
		recall += hit / npos;
		map += ap / (double) kk;
		ndcg += udcg / cg_sum[kk - 1];
		if (nneg > 0)
		{
			auc_sum += auc / (npos * nneg);
			auc_users++;
		}
		test_items += nlikes;
		users++;
	}
	out->k = k;
	out->users = users;
	out->auc_users = auc_users;
	out->hits = (int64_t) relevant;
	out->test_items = test_items;
	out->precision = users ? relevant / pr_div : NAN;
	out->recall = users ? recall / (double) users : NAN;
	out->map = users ? map / (double) users : NAN;
	out->ndcg = users ? ndcg / (double) users : NAN;
	out->auc = auc_users ? auc_sum / (double) auc_users : NAN;
	free(cg);
	free(cg_sum);
	return GM_OK;
}

/*
 * RMSE and MAE of mu + b_u + c_i + x_u . y_i against vals.  The sums are
 * taken over RATING_CHUNKS fixed ranges, each in order, then added in
 * order: the same result to the last bit whatever the thread count or the
 * order threads finish in (an OpenMP reduction's combining order is not
 * fixed, and the SQL result is compared across sessions).
 */
#define RATING_CHUNKS 256

int
gm_rating_errors(int64_t n, const int32_t *rows, const int32_t *cols, const float *vals,
				 const float *X, const float *Y, int k, const float *user_bias,
				 const float *item_bias, double global_mean, double *rmse, double *mae,
				 char *err, size_t errlen)
{
	double		se_part[RATING_CHUNKS],
				ae_part[RATING_CHUNKS],
				se = 0,
				ae = 0;

	if (k < 1 || n < 0 || (n > 0 && (!rows || !cols || !vals || !X || !Y)))
	{
		snprintf(err, errlen, "invalid rating-error problem");
		return GM_EINVAL;
	}
#pragma omp parallel for schedule(static)
	for (int c = 0; c < RATING_CHUNKS; c++)
	{
		const int64_t e0 = n * c / RATING_CHUNKS,
					e1 = n * (c + 1) / RATING_CHUNKS;
		double		cse = 0,
					cae = 0;

		for (int64_t e = e0; e < e1; e++)
		{
			const float *x = X + (size_t) rows[e] * k;
			const float *y = Y + (size_t) cols[e] * k;
			double		p = global_mean,
						d;

			if (user_bias)
				p += user_bias[rows[e]];
			if (item_bias)
				p += item_bias[cols[e]];
			for (int f = 0; f < k; f++)
				p += (double) x[f] * (double) y[f];
			d = p - (double) vals[e];
			cse += d * d;
			cae += fabs(d);
		}
		se_part[c] = cse;
		ae_part[c] = cae;
	}
	for (int c = 0; c < RATING_CHUNKS; c++)
	{
		se += se_part[c];
		ae += ae_part[c];
	}
	*rmse = n > 0 ? sqrt(se / (double) n) : NAN;
	*mae = n > 0 ? ae / (double) n : NAN;
	return GM_OK;
}
