/*
 * serve.c: exact top-n scoring for serving, with an int8 first pass.
 *
 * Scoring every item reads the whole item-factor matrix per call, so the
 * call is bound by memory bandwidth.  The first pass reads an int8 copy
 * (a quarter of the bytes); each approximate score carries a bound on its
 * error, and only items whose bound lets them reach the top n are rescored
 * in float32.  The result is the float32 top n.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/*
 * One row's int8 copy: scale = max|y| / 127, q = round(y * 127 / max|y|),
 * rounding to nearest even as lrintf does: adding and subtracting 1.5 * 2^23
 * rounds a float of magnitude below 2^22 to an integer in the default
 * rounding mode, with no libm call, so the loop vectorises on any x86-64.
 */
GM_HOT static void
quantize_row(const float *y, int k, int8_t *q, float *scale)
{
	float		m = 0.0f;

	for (int f = 0; f < k; f++)
	{
		float		a = fabsf(y[f]);

		m = a > m ? a : m;
	}
	*scale = m / 127.0f;
	for (int f = 0; f < k; f++)
		q[f] = m > 0 ? (int8_t) (int) ((y[f] * 127.0f / m + 12582912.0f) - 12582912.0f) : 0;
}

void
gm_qmat_fill(const float *Y, int32_t n, int k, int8_t *q, float *scale, int threads)
{
	int			nt = gm_resolve_threads(threads);

	(void) nt;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t) n * k > (1 << 20))
	for (int32_t i = 0; i < n; i++)
		quantize_row(Y + (size_t) i * k, k, q + (size_t) i * k, scale + i);
}

int
gm_qmat_build(const float *Y, int32_t n, int k, gm_qmat *out)
{
	out->n = n;
	out->k = k;
	out->q = malloc((size_t) n * k + 1);
	out->scale = malloc(sizeof(float) * ((size_t) n + 1));
	if (!out->q || !out->scale)
	{
		gm_qmat_free(out);
		return GM_ENOMEM;
	}
	gm_qmat_fill(Y, n, k, out->q, out->scale, 0);
	return GM_OK;
}

void
gm_qmat_free(gm_qmat *Q)
{
	free(Q->q);
	free(Q->scale);
	Q->q = NULL;
	Q->scale = NULL;
}

/* approx[i] = scale_i * (q_i . x) for every item */
static void
approx_scores_plain(const gm_qmat *Q, const float *x, float *approx)
{
	int			k = Q->k;

	for (int32_t i = 0; i < Q->n; i++)
	{
		const int8_t *q = Q->q + (size_t) i * k;
		float		s = 0.0f;

#pragma omp simd reduction(+:s)
		for (int f = 0; f < k; f++)
			s += x[f] * (float) q[f];
		approx[i] = s * Q->scale[i];
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* the same with AVX2: 8 int8 widened to float per step, two accumulators */
__attribute__((target("avx2,fma"))) static void
approx_scores_avx2(const gm_qmat *Q, const float *x, float *approx)
{
	int			k = Q->k;
	int			k16 = k & ~15;

	for (int32_t i = 0; i < Q->n; i++)
	{
		const int8_t *q = Q->q + (size_t) i * k;
		__m256		a0 = _mm256_setzero_ps(),
					a1 = _mm256_setzero_ps();
		float		s;
		int			f;

		for (f = 0; f < k16; f += 16)
		{
			__m128i		b = _mm_loadu_si128((const __m128i *) (q + f));
			__m256		lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
			__m256		hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));

			a0 = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x + f), a0);
			a1 = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + f + 8), a1);
		}
		a0 = _mm256_add_ps(a0, a1);
		{
			__m128		h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));

			h = _mm_add_ps(h, _mm_movehl_ps(h, h));
			h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
			s = _mm_cvtss_f32(h);
		}
		for (; f < k; f++)
			s += x[f] * (float) q[f];
		approx[i] = s * Q->scale[i];
	}
}
#endif

static void
approx_scores(const gm_qmat *Q, const float *x, float *approx)
{
#if defined(__x86_64__) && defined(__GNUC__)
	static int	have_avx2 = -1;

	if (have_avx2 < 0)
		have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	if (have_avx2)
	{
		approx_scores_avx2(Q, x, approx);
		return;
	}
#endif
	approx_scores_plain(Q, x, approx);
}

GM_HOT static float
exact_dot(const float *y, const float *x, int k)
{
	return gm_dot(x, y, k);
}

/*
 * The float32 top n of Y x: an int8 pass over every item, then exact scores
 * for the items whose bound can reach the top n.
 */
int
gm_topk_dot(const float *Y, const gm_qmat *Q, const float *x, int n,
			const int32_t *skip, int32_t nskip, float *scratch,
			int32_t *out_idx, float *out_score, int32_t *rescored)
{
	int32_t		m = Q->n;
	int			k = Q->k;
	float	   *approx = scratch;
	float	   *lower = scratch + m;
	float		xl1 = 0.0f;
	float		threshold = -INFINITY;
	int32_t		nrescored = 0;
	int			got;

	if (rescored)
		*rescored = 0;
	if (n <= 0 || m == 0)
		return 0;
	if (n > m)
		n = m;
	for (int f = 0; f < k; f++)
		xl1 += fabsf(x[f]);

	/*
	 * |y_f - q_f scale| <= scale / 2, so |exact - approx| <= xl1 * scale / 2,
	 * plus float rounding in both sums (< k * 2^-23 * xl1 * 127 * scale).
	 */
	approx_scores(Q, x, approx);
	{
		float		slack = 0.5f + 127.0f * (float) k * 2.4e-7f;

		for (int32_t i = 0; i < m; i++)
			lower[i] = approx[i] - xl1 * Q->scale[i] * slack;
		/* the n-th best lower bound: no item below it can make the top n */
		got = gm_topk(lower, m, n, skip, nskip, out_idx, out_score);
		if (got == n)
			threshold = out_score[n - 1];
		/* rescore the candidates exactly; everything else becomes NaN (never ranks) */
		for (int32_t i = 0; i < m; i++)
		{
			float		upper = approx[i] + xl1 * Q->scale[i] * slack;

			if (upper >= threshold)
			{
				lower[i] = exact_dot(Y + (size_t) i * k, x, k);
				nrescored++;
			}
			else
				lower[i] = NAN;
		}
	}
	if (rescored)
		*rescored = nrescored;
	return gm_topk(lower, m, n, skip, nskip, out_idx, out_score);
}
