/*
 * synth_ratings.c: a seeded ratings dataset from a planted low-rank model
 * with Gaussian noise of known sigma, for the explicit models' tests (held-out
 * RMSE close to sigma) and benchmarks (the Netflix shape: 480,189 x 17,770,
 * about 99M ratings, rank 10, sigma 0.5).  See gm_explicit.h.
 */
#include "gm_explicit.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct
{
	uint64_t	s;
} rng;

/* Uniform [0, 1) from the generator r. */
static inline double
rnd(rng *r)
{
	r->s += 0x9E3779B97F4A7C15ULL;
	return (gm_mix64(r->s) >> 11) * (1.0 / 9007199254740992.0);
}

/* A standard normal draw (Box-Muller). */
static inline double
rnd_normal(rng *r)
{
	double		u1 = rnd(r),
				u2 = rnd(r);

	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* a generator keyed by (seed, stream, index) */
static inline rng
rng_at(uint64_t seed, uint64_t stream, uint64_t index)
{
	rng			r;

	r.s = gm_mix64(seed ^ gm_mix64(stream * 0x9E3779B97F4A7C15ULL + index));
	return r;
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

/* rows of a planted factor matrix (n x rank, N(0, sd^2)) and biases (n) */
static void
planted_side(uint64_t seed, int side, int32_t n, int rank, double sd,
			 double bias_sd, float *F, float *bias)
{
#pragma omp parallel for schedule(static)
	for (int32_t i = 0; i < n; i++)
	{
		rng			r = rng_at(seed, 10 + side, (uint64_t) i);

		for (int f = 0; f < rank; f++)
			F[(size_t) i * rank + f] = (float) (sd * rnd_normal(&r));
		bias[i] = (float) (bias_sd * rnd_normal(&r));
	}
}

/* Range checks of a spec; the message names the field. */
static int
check_spec(const gm_ratings_spec *s, char *err, size_t errlen)
{
	int64_t		cap;

	if (s->n_users < 1 || s->n_items < 2)
	{
		snprintf(err, errlen, "n_users must be at least 1 and n_items at least 2");
		return GM_EINVAL;
	}
	if (s->rank < 1 || s->rank > 1024)
	{
		snprintf(err, errlen, "rank must lie between 1 and 1024");
		return GM_EINVAL;
	}
	if (!(s->noise >= 0) || !(s->bias_sd >= 0) || !isfinite(s->mean) ||
		!isfinite(s->noise) || !isfinite(s->bias_sd))
	{
		snprintf(err, errlen, "noise and bias_sd must be finite and non-negative, mean finite");
		return GM_EINVAL;
	}
	if (!(s->holdout >= 0 && s->holdout < 1))
	{
		snprintf(err, errlen, "holdout must lie in [0, 1)");
		return GM_EINVAL;
	}
	if (!(s->popularity_exponent >= 0 && s->popularity_exponent <= 4))
	{
		snprintf(err, errlen, "popularity_exponent must lie between 0 and 4");
		return GM_EINVAL;
	}
	cap = s->n_items / 2;
	if (s->min_per_user < 1 || s->min_per_user > cap)
	{
		snprintf(err, errlen, "min_per_user must lie between 1 and n_items / 2");
		return GM_EINVAL;
	}
	if (s->n_ratings < (int64_t) s->n_users * s->min_per_user ||
		s->n_ratings > (int64_t) s->n_users * cap)
	{
		snprintf(err, errlen,
				 "n_ratings must lie between n_users * min_per_user and n_users * n_items / 2");
		return GM_EINVAL;
	}
	return GM_OK;
}

/*
 * Ratings per user: min_per_user plus a lognormal share of the rest, capped
 * at half the items; what rounding and capping leave goes round-robin.
 */
static void
user_counts(const gm_ratings_spec *s, double *w, int32_t *counts)
{
	int32_t		U = s->n_users;
	int32_t		cap = s->n_items / 2;
	int64_t		extra = s->n_ratings - (int64_t) U * s->min_per_user,
				assigned = 0;
	double		wsum = 0.0;

	for (int32_t u = 0; u < U; u++)
	{
		rng			r = rng_at(s->seed, 1, (uint64_t) u);

		w[u] = exp(rnd_normal(&r));
		wsum += w[u];
	}
	for (int32_t u = 0; u < U; u++)
	{
		int64_t		c = s->min_per_user + (int64_t) floor(extra * w[u] / wsum);

		if (c > cap)
			c = cap;
		counts[u] = (int32_t) c;
		assigned += c;
	}
	for (int32_t u = 0; assigned < s->n_ratings; u = (u + 1) % U)
		if (counts[u] < cap)
		{
			counts[u]++;
			assigned++;
		}
}

/* Generate the planted ratings (see gm_explicit.h). */
int
gm_synth_ratings(const gm_ratings_spec *s, int32_t *users, int32_t *items,
				 float *ratings, uint8_t *holdout, char *err, size_t errlen)
{
	int32_t		U = s->n_users,
				I = s->n_items;
	int			r_ = s->rank;
	int			nt;
	int32_t    *counts = NULL,
			   *rank_item = NULL;
	int64_t    *offset = NULL;
	double	   *cdf = NULL,
			   *w = NULL;
	float	   *W = NULL,
			   *H = NULL,
			   *bu = NULL,
			   *bi = NULL;
	double		sd,
				csum = 0.0;
	int			rc;
	int			oom = 0;

	if ((rc = check_spec(s, err, errlen)) != GM_OK)
		return rc;
	nt = gm_resolve_threads(s->threads);
	counts = malloc(sizeof(int32_t) * U);
	offset = malloc(sizeof(int64_t) * ((size_t) U + 1));
	w = malloc(sizeof(double) * U);
	rank_item = malloc(sizeof(int32_t) * I);
	cdf = malloc(sizeof(double) * I);
	W = malloc(sizeof(float) * (size_t) U * r_);
	H = malloc(sizeof(float) * (size_t) I * r_);
	bu = malloc(sizeof(float) * U);
	bi = malloc(sizeof(float) * I);
	if (!counts || !offset || !w || !rank_item || !cdf || !W || !H || !bu || !bi)
	{
		snprintf(err, errlen, "out of memory generating %lld ratings",
				 (long long) s->n_ratings);
		rc = GM_ENOMEM;
		goto done;
	}

	user_counts(s, w, counts);
	offset[0] = 0;
	for (int32_t u = 0; u < U; u++)
		offset[u + 1] = offset[u] + counts[u];

	/* item popularity: a power law over ranks, ranks shuffled onto ids */
	{
		rng			r = rng_at(s->seed, 2, 0);

		for (int32_t i = 0; i < I; i++)
			rank_item[i] = i;
		for (int32_t i = I - 1; i > 0; i--)
		{
			int32_t		j = (int32_t) (rnd(&r) * (i + 1));
			int32_t		t = rank_item[i];

			rank_item[i] = rank_item[j];
			rank_item[j] = t;
		}
		for (int32_t i = 0; i < I; i++)
		{
			csum += pow(i + 10.0, -s->popularity_exponent);
			cdf[i] = csum;
		}
		for (int32_t i = 0; i < I; i++)
			cdf[i] /= csum;
	}

	/* the planted model: w . h has unit variance */
	sd = pow((double) r_, -0.25);
	planted_side(s->seed, 0, U, r_, sd, s->bias_sd, W, bu);
	planted_side(s->seed, 1, I, r_, sd, s->bias_sd, H, bi);

#pragma omp parallel num_threads(nt)
	{
		uint8_t    *seen = calloc(I, 1);

		if (!seen)
		{
#pragma omp atomic write
			oom = 1;
		}
#pragma omp for schedule(dynamic, 64)
		for (int32_t u = 0; u < U; u++)
		{
			rng			r = rng_at(s->seed, 3, (uint64_t) u);
			int64_t		o = offset[u];
			const float *wu = W + (size_t) u * r_;

			if (!seen)
				continue;
			for (int32_t k = 0, misses = 0; k < counts[u];)
			{
				int32_t		item;
				double		dot = 0.0;

				/* a heavy user exhausts the head: after misses draw uniformly */
				if (misses >= 8)
					item = (int32_t) (rnd(&r) * I);
				else
					item = rank_item[search(cdf, I, rnd(&r))];
				if (seen[item])
				{
					misses++;
					continue;
				}
				misses = 0;
				seen[item] = 1;
				for (int f = 0; f < r_; f++)
					dot += (double) wu[f] * H[(size_t) item * r_ + f];
				users[o + k] = u;
				items[o + k] = item;
				ratings[o + k] = (float) (s->mean + bu[u] + bi[item] + dot +
										  s->noise * rnd_normal(&r));
				holdout[o + k] = rnd(&r) < s->holdout;
				k++;
			}
			for (int32_t k = 0; k < counts[u]; k++)
				seen[items[o + k]] = 0;
		}
		free(seen);
	}
	if (oom)
	{
		snprintf(err, errlen, "out of memory generating %lld ratings",
				 (long long) s->n_ratings);
		rc = GM_ENOMEM;
	}
	else
		rc = GM_OK;

done:
	free(counts);
	free(offset);
	free(w);
	free(rank_item);
	free(cdf);
	free(W);
	free(H);
	free(bu);
	free(bi);
	return rc;
}
