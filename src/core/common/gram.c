/*
 * gram.c: the Gram matrix G = Y^T Y (+ a ridge) of a factor matrix, the
 * dense product implicit ALS's training (src/core/train/als_implicit.c) and
 * fold-in at serving time (src/pg/serve/serving.c) both start from: a
 * symmetric rank-k update (OpenBLAS's ssyrk when present, threaded loops
 * otherwise), in chunks so that a cancel is seen.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <stdlib.h>
#include <string.h>
#ifndef GM_NO_CBLAS
#include <cblas.h>
#endif

/* G += Y^T Y over rows [0, n) (upper triangle at least). */
static void
gram_add(const float *Y, int64_t n, int k, float *G, int nt, int first)
{
#ifndef GM_NO_CBLAS
	openblas_set_num_threads(nt);
	cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, k, (int) n, 1.0f,
				Y, k, first ? 0.0f : 1.0f, G, k);
#else
	if (first)
		memset(G, 0, sizeof(float) * k * k);
#pragma omp parallel num_threads(nt)
	{
		float	   *acc = calloc((size_t) k * k, sizeof(float));

#pragma omp for schedule(static)
		for (int64_t r = 0; r < n; r++)
		{
			const float *y = Y + r * k;

			for (int i = 0; i < k; i++)
			{
				float		yi = y[i];
				float	   *row = acc + (size_t) i * k;

				for (int j = i; j < k; j++)
					row[j] += yi * y[j];
			}
		}
#pragma omp critical
		for (int i = 0; i < k * k; i++)
			G[i] += acc[i];
		free(acc);
	}
#endif
}

/*
 * G = scale Y^T Y + reg I in chunks of ~2^27 multiply-adds, polling for a
 * cancel between them (at k = 1024 the whole product takes minutes on a
 * CPU).  scale = 1 leaves Y^T Y's bits as they are.
 */
int
gm_gram_polled(const float *Y, int64_t n, int k, float scale, float reg, float *G,
			int threads, const gm_callbacks *cb)
{
	int			nt = gm_resolve_threads(threads);
	int64_t		chunk = 134217728 / ((int64_t) k * k);

	if (chunk < 256)
		chunk = 256;
	if (n == 0)
		memset(G, 0, sizeof(float) * k * k);
	for (int64_t b = 0; b < n; b += chunk)
	{
		gram_add(Y + b * k, n - b < chunk ? n - b : chunk, k, G, nt, b == 0);
		if (cb && cb->should_stop && cb->should_stop(cb->arg))
			return GM_ECANCELED;
	}
	/* mirror the upper triangle, scale, add the ridge */
	for (int i = 0; i < k; i++)
	{
		if (scale != 1.0f)
			for (int j = i; j < k; j++)
				G[i * k + j] *= scale;
		for (int j = 0; j < i; j++)
			G[i * k + j] = G[j * k + i];
		G[i * k + i] += reg;
	}
	return GM_OK;
}

/* G = Y^T Y + reg I (see gm_core.h). */
void
gm_gram(const float *Y, int64_t n, int k, float reg, float *G, int threads)
{
	(void) gm_gram_polled(Y, n, k, 1.0f, reg, G, threads, NULL);
}
