/*
 * serve.c: exact top-n scoring for serving, with an int8 first pass.
 *
 * Scoring every item reads the whole item-factor matrix per call, so the
 * call is bound by memory bandwidth and by the arithmetic of the pass.  The
 * first pass reads an int8 copy of the item factors (a quarter of the bytes)
 * and an int8 copy of the query, and computes integer dot products (exact,
 * the same on every instruction set: AVX-512 VNNI, AVX2 or plain C).  Each
 * approximate score carries a bound on its distance from the float32 score;
 * the n-th best lower bound is a threshold no item below it can reach, and
 * only the items whose upper bound reaches it are scored in float32.  The
 * result is gm_topk over the float32 scores Y x.
 *
 * Bounds, per item i with scale s_i = max|y_i| / 127, q_i = round(y_i / s_i),
 * and the query x with scale t = max|x| / 127, p = round(x / t):
 *     y.x - s_i t (q_i.p) = s_i sum_f q_f (x_f - t p_f) + sum_f (y_f - s_i q_f) x_f
 *     |...| <= s_i (t / 2) |q_i|_1 + (s_i / 2) |x|_1
 * plus float rounding: of the quantisations (a few ulps of s_i per
 * component), of the float32 dot product the rescoring computes
 * (<= k u sum |y_f x_f| <= k u 127 s_i |x|_1, u = 2^-24), and of the
 * products forming the approximate score; the constants below cover each
 * with room to spare.  Integer sums are exact: |q.p| <= 127^2 k < 2^24 for
 * k <= 1040, so their float conversion is exact too.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GM_X86 1
#endif

/* rows of the int8 copy are padded with zeros to a multiple of this */
#define GM_QPAD 64
/* items per block of integer dot products */
#define GM_QBLOCK 256

/* k rounded up to a whole number of 64-byte vectors */
static int
qmat_kpad(int k)
{
	return (k + GM_QPAD - 1) / GM_QPAD * GM_QPAD;
}

/* Bytes of the arrays of an int8 copy of n x k: q, then scale, qabs, qsum. */
size_t
gm_qmat_size(int32_t n, int k)
{
	size_t		rows = (size_t) (n > 0 ? n : 0) + 1;

	return rows * qmat_kpad(k) + rows * (2 * sizeof(float) + sizeof(int32_t));
}

/* Point Q's arrays into mem (gm_qmat_size bytes, 64-byte aligned). */
int
gm_qmat_attach(void *mem, int32_t n, int k, gm_qmat *out)
{
	size_t		rows = (size_t) (n > 0 ? n : 0) + 1;
	char	   *p = mem;

	memset(out, 0, sizeof(*out));
	if (k < 1 || k > GM_QMAT_MAX_K || n < 0 || ((uintptr_t) mem % GM_QPAD) != 0)
		return GM_EINVAL;
	out->n = n;
	out->k = k;
	out->kpad = qmat_kpad(k);
	out->q = (int8_t *) p;
	p += rows * out->kpad;
	out->scale = (float *) p;
	p += rows * sizeof(float);
	out->qabs = (float *) p;
	p += rows * sizeof(float);
	out->qsum = (int32_t *) p;
	return GM_OK;
}

/*
 * One row's int8 copy, its scale and sums: q = round(y * 127 / max|y|),
 * rounding to nearest even as lrintf does.  Adding and subtracting
 * 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer in the
 * default rounding mode with no libm call, so the loops vectorise (a model
 * version's copy is built once, but on the first call that serves it).
 */
GM_HOT static void
quantize_row(const float *y, int k, int kpad, int8_t *q, float *scale, float *qabs,
			 int32_t *qsum)
{
	float		m = 0.0f;
	int32_t		sum = 0,
				abs = 0;

	for (int f = 0; f < k; f++)
	{
		float		a = fabsf(y[f]);

		m = a > m ? a : m;
	}
	*scale = m / 127.0f;
	for (int f = 0; f < k; f++)
	{
		int32_t		v = m > 0 ? (int32_t) ((y[f] * 127.0f / m + 12582912.0f) - 12582912.0f) : 0;

		v = v > 127 ? 127 : v < -127 ? -127 : v;
		q[f] = (int8_t) v;
		sum += v;
		abs += v < 0 ? -v : v;
	}
	memset(q + k, 0, kpad - k);
	*qsum = sum;
	*qabs = *scale * (float) abs;
}

/* Build the int8 copy of Y into mem (gm_qmat_size bytes), rows in parallel. */
int
gm_qmat_build_in(const float *Y, int32_t n, int k, void *mem, gm_qmat *out, int threads)
{
	int			rc = gm_qmat_attach(mem, n, k, out);
	int			nt = gm_resolve_threads(threads);

	if (rc != GM_OK)
		return rc;
	(void) nt;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t) n * k > (1 << 20))
	for (int32_t i = 0; i < n; i++)
		quantize_row(Y + (size_t) i * k, k, out->kpad, out->q + (size_t) i * out->kpad,
					 out->scale + i, out->qabs + i, out->qsum + i);
	return GM_OK;
}

/* The int8 copy of Y with its scales and sums, in memory of its own (see gm_core.h). */
int
gm_qmat_build(const float *Y, int32_t n, int k, gm_qmat *out)
{
	void	   *mem;
	int			rc;

	memset(out, 0, sizeof(*out));
	if (k < 1 || k > GM_QMAT_MAX_K || n < 0)
		return GM_EINVAL;
	mem = aligned_alloc(GM_QPAD, (gm_qmat_size(n, k) + GM_QPAD - 1) / GM_QPAD * GM_QPAD);
	if (mem == NULL)
		return GM_ENOMEM;
	rc = gm_qmat_build_in(Y, n, k, mem, out, 1);
	if (rc != GM_OK)
	{
		free(mem);
		return rc;
	}
	out->owned = mem;
	return GM_OK;
}

/* Free an int8 copy built by gm_qmat_build; safe twice, and on attached copies. */
void
gm_qmat_free(gm_qmat *Q)
{
	free(Q->owned);
	Q->owned = NULL;
	Q->q = NULL;
	Q->scale = NULL;
	Q->qabs = NULL;
	Q->qsum = NULL;
}

/* Floats of scratch the top-n scoring needs. */
size_t
gm_topk_dot_scratch(const gm_qmat *Q)
{
	/* upper bounds, candidates' indices and scores */
	return 3 * ((size_t) Q->n + 1);
}

/* ---------------------------------------------- the first pass, per ISA */

/* The query, quantised like the items, and the constants of its bounds. */
typedef struct query
{
	int8_t		p8[GM_QMAT_MAX_K + GM_QPAD];	/* round(x / t) */
	int16_t		p16[GM_QMAT_MAX_K + GM_QPAD];	/* the same as int16 */
	uint8_t		pu[GM_QMAT_MAX_K + GM_QPAD];	/* the same plus 128 (128 in the padding) */
	float		t;				/* max|x| / 127 */
	float		a;				/* bound_i = s_i a + qabs_i b + |approx_i| c */
	float		b;
	float		c;
} query;

/*
 * A block of the first pass: approx[r] and bound[r] for the items
 * only[start + r] (or start + r when only is NULL), r < cnt <= GM_QBLOCK;
 * when upper is not NULL, upper[r] = approx + bound and approx[r] becomes
 * the lower bound approx - bound.  One body, compiled once per instruction
 * set (the function attributes let the compiler vectorise the loops for it;
 * the integer sums d[] are the same on all).
 */
typedef void (*block_fn) (const gm_qmat *Q, const query *qy, const int32_t *only,
						  int32_t start, int32_t cnt, float *approx, float *bound,
						  float *upper);

#define FIRST_PASS_BLOCK(...) \
	int32_t		d[GM_QBLOCK]; \
	float		t = qy->t, a = qy->a, b = qy->b, c = qy->c; \
	\
	__VA_ARGS__; \
	if (only) \
	{ \
		for (int32_t r = 0; r < cnt; r++) \
		{ \
			int32_t		i = only[start + r]; \
			float		ap = (float) d[r] * (Q->scale[i] * t); \
			\
			approx[r] = ap; \
			bound[r] = Q->scale[i] * a + Q->qabs[i] * b + fabsf(ap) * c; \
		} \
	} \
	else \
	{ \
		const float *scale = Q->scale + start, *qabs = Q->qabs + start; \
		\
		_Pragma("omp simd") \
		for (int32_t r = 0; r < cnt; r++) \
		{ \
			float		ap = (float) d[r] * (scale[r] * t); \
			\
			approx[r] = ap; \
			bound[r] = scale[r] * a + qabs[r] * b + fabsf(ap) * c; \
		} \
	} \
	if (upper) \
	{ \
		_Pragma("omp simd") \
		for (int32_t r = 0; r < cnt; r++) \
		{ \
			upper[r] = approx[r] + bound[r]; \
			approx[r] = approx[r] - bound[r]; \
		} \
	}

/* the row of the r-th item of the block */
#define BLOCK_ROW(r) (Q->q + (size_t) (only ? only[start + (r)] : start + (r)) * Q->kpad)

/* The first pass's block in plain C. */
static void
block_plain(const gm_qmat *Q, const query *qy, const int32_t *only, int32_t start,
			int32_t cnt, float *approx, float *bound, float *upper)
{
	FIRST_PASS_BLOCK(
		for (int32_t r = 0; r < cnt; r++)
		{
			const int8_t *q = BLOCK_ROW(r);
			int32_t		s = 0;

			for (int f = 0; f < Q->k; f++)
				s += (int32_t) q[f] * qy->p8[f];
			d[r] = s;
		});
}

#ifdef GM_X86
/* AVX2: 16 int8 widened to int16, multiplied and summed in pairs (vpmaddwd) */
__attribute__((target("avx2,fma"))) static inline int32_t
dot_avx2(const int8_t *q, const int16_t *p16, int kpad)
{
	__m256i		a0 = _mm256_setzero_si256(),
				a1 = _mm256_setzero_si256();
	__m128i		h;

	for (int f = 0; f < kpad; f += 32)
	{
		__m256i		q0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (q + f)));
		__m256i		q1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (q + f + 16)));

		a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(q0, _mm256_loadu_si256((const __m256i *) (p16 + f))));
		a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(q1, _mm256_loadu_si256((const __m256i *) (p16 + f + 16))));
	}
	a0 = _mm256_add_epi32(a0, a1);
	h = _mm_add_epi32(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1));
	h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
	h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
	return _mm_cvtsi128_si32(h);
}

/* The first pass's block with AVX2. */
__attribute__((target("avx2,fma"))) static void
block_avx2(const gm_qmat *Q, const query *qy, const int32_t *only, int32_t start,
		   int32_t cnt, float *approx, float *bound, float *upper)
{
	FIRST_PASS_BLOCK(
		for (int32_t r = 0; r < cnt; r++)
			d[r] = dot_avx2(BLOCK_ROW(r), qy->p16, Q->kpad));
}

/*
 * AVX-512 VNNI: vpdpbusd multiplies 64 uint8 by 64 int8 and sums each four
 * into 16 int32 lanes.  The query is made unsigned (p + 128), so
 * q.p = q.(p + 128) - 128 sum_f q_f.
 */
#define GM_VNNI "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"

/* The 16 lanes of q . (p + 128) for one item. */
__attribute__((target(GM_VNNI))) static inline __m512i
dot_vnni(const int8_t *q, const uint8_t *pu, int kpad)
{
	__m512i		a = _mm512_setzero_si512();

	for (int f = 0; f < kpad; f += 64)
		a = _mm512_dpbusd_epi32(a, _mm512_loadu_si512((const void *) (pu + f)),
								_mm512_loadu_si512((const void *) (q + f)));
	return a;
}

/* the 16 lanes of a summed into 8 */
__attribute__((target(GM_VNNI))) static inline __m256i
halve(__m512i a)
{
	return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

/* The first pass's block with AVX-512 VNNI. */
__attribute__((target(GM_VNNI))) static void
block_vnni(const gm_qmat *Q, const query *qy, const int32_t *only, int32_t start,
		   int32_t cnt, float *approx, float *bound, float *upper)
{
	FIRST_PASS_BLOCK(
		int32_t		r = 0;

		/* four items at a time, their lane sums reduced together */
		for (; r + 4 <= cnt; r += 4)
		{
			__m256i		h0 = halve(dot_vnni(BLOCK_ROW(r), qy->pu, Q->kpad)),
						h1 = halve(dot_vnni(BLOCK_ROW(r + 1), qy->pu, Q->kpad)),
						h2 = halve(dot_vnni(BLOCK_ROW(r + 2), qy->pu, Q->kpad)),
						h3 = halve(dot_vnni(BLOCK_ROW(r + 3), qy->pu, Q->kpad));
			__m256i		v = _mm256_hadd_epi32(_mm256_hadd_epi32(h0, h1),
											  _mm256_hadd_epi32(h2, h3));

			_mm_storeu_si128((__m128i *) (d + r),
							 _mm_add_epi32(_mm256_castsi256_si128(v),
										   _mm256_extracti128_si256(v, 1)));
		}
		for (; r < cnt; r++)
			d[r] = _mm512_reduce_add_epi32(dot_vnni(BLOCK_ROW(r), qy->pu, Q->kpad));
		for (r = 0; r < cnt; r++)
			d[r] -= 128 * Q->qsum[only ? only[start + r] : start + r]);
}
#endif

/* positions r < m with upper[r] >= threshold, in order; returns their count */
#define COLLECT_BODY \
	int32_t		nc = 0; \
	\
	for (int32_t r = 0; r < m; r++) \
	{ \
		cand[nc] = r; \
		nc += upper[r] >= threshold; \
	} \
	return nc;

typedef int32_t (*collect_fn) (const float *upper, int32_t m, float threshold, int32_t *cand);

/* Candidates in plain C. */
static int32_t
collect_plain(const float *upper, int32_t m, float threshold, int32_t *cand)
{
COLLECT_BODY}

#ifdef GM_X86
/* Candidates, compiled for AVX2. */
__attribute__((target("avx2,fma"))) static int32_t
collect_avx2(const float *upper, int32_t m, float threshold, int32_t *cand)
{
COLLECT_BODY}

/* AVX-512: sixteen comparisons into a mask, the positions compressed out */
__attribute__((target(GM_VNNI))) static int32_t
collect_vnni(const float *upper, int32_t m, float threshold, int32_t *cand)
{
	__m512		th = _mm512_set1_ps(threshold);
	__m512i		pos = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	__m512i		sixteen = _mm512_set1_epi32(16);
	int32_t		nc = 0,
				r = 0;

	for (; r + 16 <= m; r += 16)
	{
		__mmask16	k = _mm512_cmp_ps_mask(_mm512_loadu_ps(upper + r), th, _CMP_GE_OQ);

		if (k)
		{
			_mm512_mask_compressstoreu_epi32(cand + nc, k, pos);
			nc += __builtin_popcount((unsigned) k);
		}
		pos = _mm512_add_epi32(pos, sixteen);
	}
	for (; r < m; r++)
	{
		cand[nc] = r;
		nc += upper[r] >= threshold;
	}
	return nc;
}
#endif

typedef struct isa_ops
{
	const char *name;
	block_fn	block;
	collect_fn	collect;
} isa_ops;

static const isa_ops isa_plain = {"plain", block_plain, collect_plain};
#ifdef GM_X86
static const isa_ops isa_avx2 = {"avx2", block_avx2, collect_avx2};
static const isa_ops isa_vnni = {"avx512vnni", block_vnni, collect_vnni};
#endif
static const isa_ops *isa_chosen = NULL;

/* The kernels named isa, when this CPU runs them. */
static const isa_ops *
isa_named(const char *isa)
{
	if (strcmp(isa, "plain") == 0)
		return &isa_plain;
#ifdef GM_X86
	__builtin_cpu_init();
	if (strcmp(isa, "avx2") == 0 && __builtin_cpu_supports("avx2") &&
		__builtin_cpu_supports("fma"))
		return &isa_avx2;
	if (strcmp(isa, "avx512vnni") == 0 && __builtin_cpu_supports("avx512f") &&
		__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") &&
		__builtin_cpu_supports("fma"))
		return &isa_vnni;
#endif
	return NULL;
}

/* The fastest kernels this CPU runs, unless gm_serve_use_isa chose others. */
static const isa_ops *
pick_isa(void)
{
	if (isa_chosen == NULL)
	{
		isa_chosen = isa_named("avx512vnni");
		if (isa_chosen == NULL)
			isa_chosen = isa_named("avx2");
		if (isa_chosen == NULL)
			isa_chosen = &isa_plain;
	}
	return isa_chosen;
}

/* Use the kernels named isa (tests, benchmarks); NULL: the fastest. */
int
gm_serve_use_isa(const char *isa)
{
	const isa_ops *ops;

	if (isa == NULL)
	{
		isa_chosen = NULL;
		return GM_OK;
	}
	ops = isa_named(isa);
	if (ops == NULL)
		return GM_ENOTSUP;
	isa_chosen = ops;
	return GM_OK;
}

/* The name of the kernels in use. */
const char *
gm_serve_isa(void)
{
	return pick_isa()->name;
}

/* ------------------------------------------------------------ top n */

/*
 * y . x in float32: the score every path ranks by (plain code on every
 * machine, so that scores do not depend on the instruction set)
 */
static float
exact_dot(const float *y, const float *x, int k)
{
	return gm_dot(y, x, k);
}

/* a min-heap of the n best lower bounds: h[0] is the n-th best so far */
static inline void
heap_offer(float *h, int *size, int n, float v)
{
	int			i;

	if (*size < n)
	{
		i = (*size)++;
		while (i > 0 && h[(i - 1) / 2] > v)
		{
			h[i] = h[(i - 1) / 2];
			i = (i - 1) / 2;
		}
		h[i] = v;
		return;
	}
	if (!(v > h[0]))
		return;
	/* replace the root, sift down */
	i = 0;
	for (;;)
	{
		int			l = 2 * i + 1,
					m = i;
		float		mv = v;

		if (l < n && h[l] < mv)
		{
			m = l;
			mv = h[l];
		}
		if (l + 1 < n && h[l + 1] < mv)
			m = l + 1;
		if (m == i)
			break;
		h[i] = h[m];
		i = m;
	}
	h[i] = v;
}

/* Quantise the query and set its bound constants. */
static void
query_prepare(const gm_qmat *Q, const float *x, query *qy)
{
	int			k = Q->k;
	float		xmax = 0.0f,
				xl1 = 0.0f;

	for (int f = 0; f < k; f++)
	{
		xmax = fmaxf(xmax, fabsf(x[f]));
		xl1 += fabsf(x[f]);
	}
	qy->t = xmax / 127.0f;
	for (int f = 0; f < Q->kpad; f++)
	{
		long		v = f < k && xmax > 0 ? lrintf(x[f] * 127.0f / xmax) : 0;

		v = v > 127 ? 127 : v < -127 ? -127 : v;
		qy->p8[f] = (int8_t) v;
		qy->p16[f] = (int16_t) v;
		qy->pu[f] = (uint8_t) (v + 128);
	}
	/* see the top of the file: the y and x quantisation terms, then rounding */
	qy->a = xl1 * (0.5f + 2.4e-7f * (127.0f * (float) k + 512.0f)) *
		(1.0f + 2.4e-7f * (float) k) * 1.00001f;
	qy->b = 0.5f * qy->t * 1.00001f;
	qy->c = 4.8e-7f;
}

/* The first pass alone, over every item (see gm_core.h). */
void
gm_qmat_scores(const gm_qmat *Q, const float *x, float *approx, float *bound)
{
	query		qy;
	const isa_ops *ops = pick_isa();

	query_prepare(Q, x, &qy);
	for (int32_t start = 0; start < Q->n; start += GM_QBLOCK)
		ops->block(Q, &qy, NULL, start, Q->n - start < GM_QBLOCK ? Q->n - start : GM_QBLOCK,
				   approx + start, bound + start, NULL);
}

/* The first index of skip[0 .. nskip) that is >= v (nskip when none). */
static int32_t
skip_from(const int32_t *skip, int32_t nskip, int32_t v)
{
	return (int32_t) gm_lower_bound32(skip, 0, nskip, v);
}

/*
 * Pass 1 over the items [b, e) of m (block-aligned b): their upper bounds,
 * and the n best lower bounds in heap (of *hsize).  Left-out items get no
 * upper bound (never a candidate) and no lower bound.
 */
static void
pass1_range(const isa_ops *ops, const gm_qmat *Q, const query *qy, const int32_t *only,
			const int32_t *skip, int32_t nskip, int32_t b, int32_t e, float *upper,
			float *heap, int *hsize, int n)
{
	int32_t		s = skip ? skip_from(skip, nskip, only ? (b < e ? only[b] : 0) : b) : 0;

	for (int32_t start = b; start < e; start += GM_QBLOCK)
	{
		int32_t		cnt = e - start < GM_QBLOCK ? e - start : GM_QBLOCK;
		float		lower[GM_QBLOCK],
					bound[GM_QBLOCK];

		ops->block(Q, qy, only, start, cnt, lower, bound, upper + start);
		if (skip)
		{
			if (only)
			{
				for (int32_t r = 0; r < cnt && s < nskip; r++)
				{
					while (s < nskip && skip[s] < only[start + r])
						s++;
					if (s < nskip && skip[s] == only[start + r])
					{
						upper[start + r] = -INFINITY;
						lower[r] = -INFINITY;
					}
				}
			}
			else
			{
				while (s < nskip && skip[s] < start)
					s++;
				for (; s < nskip && skip[s] < start + cnt; s++)
				{
					upper[skip[s]] = -INFINITY;
					lower[skip[s] - start] = -INFINITY;
				}
			}
		}
		/* the heap's root only rises: most items fall below it at once */
		for (int32_t r = 0; r < cnt; r++)
			if (*hsize < n ? lower[r] > -INFINITY : lower[r] > heap[0])
				heap_offer(heap, hsize, n, lower[r]);
	}
}

/* Items (times the padded width) from which pass 1 is split over threads. */
#define GM_QPARALLEL_BYTES	((int64_t) 1 << 24)

/* The exact float32 top n among the candidates (or all items), see gm_core.h. */
int
gm_topk_dot_among_threads(const float *Y, const gm_qmat *Q, const float *x, int n,
						  const int32_t *only, int32_t nonly,
						  const int32_t *skip, int32_t nskip, float *scratch,
						  int32_t *out_idx, float *out_score, int32_t *rescored, int threads)
{
	int32_t		m = only ? nonly : Q->n;
	int			k = Q->k;
	float	   *upper = scratch;
	int32_t    *cand = (int32_t *) (scratch + m + 1);
	float	   *cscore = scratch + 2 * ((size_t) m + 1);
	float	   *heap = out_score;	/* the lower bounds' heap, n floats */
	int			hsize = 0;
	float		threshold;
	int32_t		ncand;
	int			got,
				nt = 1;
	float	   *heaps = NULL;
	query		qy;
	const isa_ops *ops = pick_isa();

	if (rescored)
		*rescored = 0;
	if (n <= 0 || m == 0)
		return 0;
	if (n > m)
		n = m;
	query_prepare(Q, x, &qy);

	/*
	 * pass 1: upper bounds, and the n best lower bounds in a heap; over
	 * threads for a large catalog, each a stretch of whole blocks with a heap
	 * of its own, the heaps merged after (their n best hold the n best)
	 */
#ifdef _OPENMP
	if (threads != 1 && (int64_t) m * Q->kpad >= GM_QPARALLEL_BYTES)
	{
		nt = gm_resolve_threads(threads);
		if (nt > (m + GM_QBLOCK - 1) / GM_QBLOCK)
			nt = (m + GM_QBLOCK - 1) / GM_QBLOCK;
		if (nt > 1 && (heaps = malloc(sizeof(float) * (size_t) n * nt + sizeof(int) * nt)) == NULL)
			nt = 1;
	}
#endif
	if (nt <= 1)
		pass1_range(ops, Q, &qy, only, skip, nskip, 0, m, upper, heap, &hsize, n);
	else
	{
		int		   *sizes = (int *) (heaps + (size_t) n * nt);
		int32_t		blocks = (m + GM_QBLOCK - 1) / GM_QBLOCK;

#pragma omp parallel num_threads(nt)
		{
			int			t = omp_get_thread_num();
			int32_t		b = (int32_t) ((int64_t) blocks * t / nt) * GM_QBLOCK,
						e = (int32_t) ((int64_t) blocks * (t + 1) / nt) * GM_QBLOCK;

			if (e > m)
				e = m;
			sizes[t] = 0;
			if (b < e)
				pass1_range(ops, Q, &qy, only, skip, nskip, b, e, upper,
							heaps + (size_t) n * t, &sizes[t], n);
		}
		for (int t = 0; t < nt; t++)
			for (int j = 0; j < sizes[t]; j++)
			{
				float		v = heaps[(size_t) n * t + j];

				if (hsize < n ? v > -INFINITY : v > heap[0])
					heap_offer(heap, &hsize, n, v);
			}
		free(heaps);
	}
	/* no item whose upper bound is below the n-th best lower bound can make the top n */
	threshold = hsize == n ? heap[0] : -FLT_MAX;

	/* pass 2: the float32 scores of the candidates, and their top n */
	ncand = ops->collect(upper, m, threshold, cand);
	for (int32_t c = 0; c < ncand; c++)
	{
		int32_t		i = only ? only[cand[c]] : cand[c];

		cand[c] = i;
		cscore[c] = exact_dot(Y + (size_t) i * k, x, k);
	}
	if (rescored)
		*rescored = ncand;
	got = gm_topk(cscore, ncand, n, NULL, 0, out_idx, out_score);
	for (int r = 0; r < got; r++)
		out_idx[r] = cand[out_idx[r]];
	return got;
}

int
gm_topk_dot_among(const float *Y, const gm_qmat *Q, const float *x, int n,
				  const int32_t *only, int32_t nonly,
				  const int32_t *skip, int32_t nskip, float *scratch,
				  int32_t *out_idx, float *out_score, int32_t *rescored)
{
	return gm_topk_dot_among_threads(Y, Q, x, n, only, nonly, skip, nskip, scratch, out_idx,
									 out_score, rescored, 1);
}

/* The exact float32 top n over every item. */
int
gm_topk_dot(const float *Y, const gm_qmat *Q, const float *x, int n,
			const int32_t *skip, int32_t nskip, float *scratch,
			int32_t *out_idx, float *out_score, int32_t *rescored)
{
	return gm_topk_dot_among(Y, Q, x, n, NULL, 0, skip, nskip, scratch, out_idx,
							 out_score, rescored);
}

/* ------------------------------------------------------ cosine top n */

/* The Euclidean norm of every row. */
void
gm_row_norms(const float *F, int64_t n, int k, float *norms)
{
	for (int64_t i = 0; i < n; i++)
	{
		const float *f = F + (size_t) i * k;
		double		s = 0.0;

		for (int j = 0; j < k; j++)
			s += (double) f[j] * f[j];
		norms[i] = (float) sqrt(s);
	}
}

/* The top n rows by cosine similarity to x (see gm_core.h). */
int
gm_topk_cosine(const float *F, const float *norms, int32_t m, int k,
			   const float *x, int n, const int32_t *skip, int32_t nskip,
			   float *scratch, int32_t *out_idx, float *out_score)
{
	double		xx = 0.0;
	float		xn;

	for (int f = 0; f < k; f++)
		xx += (double) x[f] * x[f];
	xn = (float) sqrt(xx);
	if (!(xn > 0.0f))
		return 0;				/* a zero vector is similar to nothing */
	for (int32_t i = 0; i < m; i++)
	{
		/* rows with a zero norm get NaN, which never ranks */
		float		c = norms[i] > 0.0f ? exact_dot(F + (size_t) i * k, x, k) / (norms[i] * xn) : NAN;

		/* rounding can take |c| a hair past 1 */
		scratch[i] = c > 1.0f ? 1.0f : c < -1.0f ? -1.0f : c;
	}
	return gm_topk(scratch, m, n, skip, nskip, out_idx, out_score);
}
