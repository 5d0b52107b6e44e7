/*
 * synth.c: a seeded MovieLens-shaped implicit dataset with planted structure,
 * used by the tests (held-out precision far above popularity) and the
 * benchmarks (the ML-20M shape: 138,493 x 26,744, 20,000,263 rows).
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct
{
	uint64_t	s;
} rng;

static inline double
rnd(rng *r)
{
	r->s += 0x9E3779B97F4A7C15ULL;
	return (gm_mix64(r->s) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double
rnd_normal(rng *r)
{
	double		u1 = rnd(r),
				u2 = rnd(r);

	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* first index with cdf[i] >= x */
static int32_t
search(const double *cdf, int32_t n, double x)
{
	int32_t		lo = 0,
				hi = n - 1;

	while (lo < hi)
	{
		int32_t		mid = lo + (hi - lo) / 2;

		if (cdf[mid] >= x)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void
gm_synth_free(gm_synth *g)
{
	free(g->counts);
	free(g->rank_item);
	free(g->cdf);
	free(g->cl_start);
	free(g->cl_rank);
	free(g->cl_cdf);
	g->counts = NULL;
	g->rank_item = g->cl_start = g->cl_rank = NULL;
	g->cdf = g->cl_cdf = NULL;
}

int
gm_synth_init(gm_synth *g, char *err, size_t errlen)
{
	int32_t		U = g->n_users,
				I = g->n_items,
				cap;
	double	   *w;
	double		wsum = 0.0;
	int64_t		extra,
				assigned = 0;
	rng			r;

	if (U < 1 || I < 1 || U > GM_SYNTH_MAX_USERS || I > GM_SYNTH_MAX_ITEMS ||
		g->n_rows > GM_SYNTH_MAX_ROWS || I > g->n_rows ||
		g->clusters < 1 || g->clusters > I ||
		g->min_per_user < 1 || !(g->affinity >= 0 && g->affinity <= 1))
	{
		snprintf(err, errlen, "invalid synthetic dataset parameters");
		return GM_EINVAL;
	}
	cap = I / 2 > g->min_per_user ? I / 2 : g->min_per_user;
	if (g->min_per_user > I || (int64_t) U * g->min_per_user > g->n_rows ||
		g->n_rows > (int64_t) U * cap)
	{
		snprintf(err, errlen, "rows must lie between users * min_per_user and users * max(items/2, min_per_user), with min_per_user <= items");
		return GM_EINVAL;
	}
	g->counts = calloc(U, sizeof(int32_t));
	g->rank_item = malloc(sizeof(int32_t) * I);
	g->cdf = malloc(sizeof(double) * I);
	g->cl_start = calloc(g->clusters + 1, sizeof(int32_t));
	g->cl_rank = malloc(sizeof(int32_t) * I);
	g->cl_cdf = malloc(sizeof(double) * I);
	w = malloc(sizeof(double) * (U > I ? U : I));
	if (!g->counts || !g->rank_item || !g->cdf || !g->cl_start || !g->cl_rank ||
		!g->cl_cdf || !w)
	{
		free(w);
		gm_synth_free(g);
		snprintf(err, errlen, "out of memory");
		return GM_ENOMEM;
	}

	/* user activity: min + lognormal share of the rest, capped */
	r.s = gm_mix64(g->seed ^ 0x5EED0001ULL);
	for (int32_t u = 0; u < U; u++)
	{
		w[u] = exp(1.2 * rnd_normal(&r));
		wsum += w[u];
		if ((u & 0xFFFFF) == 0xFFFFF && g->should_stop && g->should_stop(g->stop_arg))
		{
			free(w);
			gm_synth_free(g);
			snprintf(err, errlen, "canceled");
			return GM_ECANCELED;
		}
	}
	extra = g->n_rows - (int64_t) U * g->min_per_user;
	for (int32_t u = 0; u < U; u++)
	{
		int64_t		c = g->min_per_user + (int64_t) floor(extra * w[u] / wsum);

		if (c > cap)
			c = cap;
		g->counts[u] = (int32_t) c;
		assigned += c;
	}
	/* hand out what rounding and capping left, round-robin */
	for (int32_t u = 0; assigned < g->n_rows; u = (u + 1) % U)
		if (g->counts[u] < cap)
		{
			g->counts[u]++;
			assigned++;
		}
	g->max_count = 0;
	for (int32_t u = 0; u < U; u++)
		if (g->counts[u] > g->max_count)
			g->max_count = g->counts[u];

	/* item popularity: Zipf-like over ranks, ranks shuffled onto ids */
	for (int32_t i = 0; i < I; i++)
		g->rank_item[i] = i;
	r.s = gm_mix64(g->seed ^ 0x5EED0002ULL);
	for (int32_t i = I - 1; i > 0; i--)
	{
		int32_t		j = (int32_t) (rnd(&r) * (i + 1));
		int32_t		t = g->rank_item[i];

		g->rank_item[i] = g->rank_item[j];
		g->rank_item[j] = t;
	}
	wsum = 0.0;
	for (int32_t i = 0; i < I; i++)
	{
		wsum += pow(i + 10.0, -1.1);
		g->cdf[i] = wsum;
	}
	for (int32_t i = 0; i < I; i++)
		g->cdf[i] /= wsum;

	/* clusters: item id mod clusters; within each, ranks in order */
	for (int32_t i = 0; i < I; i++)
		g->cl_start[g->rank_item[i] % g->clusters + 1]++;
	for (int c = 0; c < g->clusters; c++)
		g->cl_start[c + 1] += g->cl_start[c];
	{
		int32_t    *fill = malloc(sizeof(int32_t) * g->clusters);

		if (!fill)
		{
			free(w);
			gm_synth_free(g);
			snprintf(err, errlen, "out of memory");
			return GM_ENOMEM;
		}
		memcpy(fill, g->cl_start, sizeof(int32_t) * g->clusters);
		for (int32_t i = 0; i < I; i++)
			g->cl_rank[fill[g->rank_item[i] % g->clusters]++] = i;
		free(fill);
	}
	for (int c = 0; c < g->clusters; c++)
	{
		double		s = 0.0;

		for (int32_t j = g->cl_start[c]; j < g->cl_start[c + 1]; j++)
		{
			s += pow(g->cl_rank[j] + 10.0, -1.1);
			g->cl_cdf[j] = s;
		}
		for (int32_t j = g->cl_start[c]; j < g->cl_start[c + 1]; j++)
			g->cl_cdf[j] /= s;
	}
	free(w);
	return GM_OK;
}

int32_t
gm_synth_user(const gm_synth *g, int32_t u, int32_t *items, float *values,
			  uint8_t *holdout, uint8_t *seen)
{
	rng			r;
	int32_t		n = g->counts[u];
	int			c;
	int32_t		cs,
				cn;

	r.s = gm_mix64(g->seed ^ gm_mix64(0xABCDEF12345ULL + (uint64_t) u));
	c = (int) (rnd(&r) * g->clusters);
	cs = g->cl_start[c];
	cn = g->cl_start[c + 1] - cs;
	/* seen: one byte per item, all zero on entry and on return */
	for (int32_t k = 0, misses = 0; k < n;)
	{
		int32_t		item;

		/* heavy users exhaust the head: after repeated misses draw uniformly */
		if (misses >= 8)
			item = (int32_t) (rnd(&r) * g->n_items);
		else if (rnd(&r) < g->affinity && k < cn / 2)
			item = g->rank_item[g->cl_rank[cs + search(g->cl_cdf + cs, cn, rnd(&r))]];
		else
			item = g->rank_item[search(g->cdf, g->n_items, rnd(&r))];
		if (seen[item])
		{
			misses++;
			continue;
		}
		misses = 0;
		seen[item] = 1;
		items[k] = item;
		values[k] = 0.5f * (float) (1 + (int) (rnd(&r) * 10.0));
		holdout[k] = rnd(&r) < 0.2;
		k++;
	}
	for (int32_t k = 0; k < n; k++)
		seen[items[k]] = 0;
	return n;
}
