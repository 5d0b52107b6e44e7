/*
 * rank_scores.cu: every item's score for batches of users on the GPU, for
 * the core's ranking metrics (src/core/rank_eval.c, when training ran on
 * the GPU): S = X_batch Y^T by cuBLAS sgemm (FP32), copied to pinned host
 * memory batch by batch and handed to a callback that selects the top K.
 * Looked up by name (gm_cuda_symbol("gm_cuda_rank_scores")).
 *
 * (A batch scorer with the top-n selection on the GPU, cuda/score.cu, is
 * being written beside this one; this one is to give way to it.)
 */
#include "common.cuh"

#include <stdlib.h>
#include <string.h>

/* consume(arg, first, nb, S): S is nb x m row-major, users first .. first + nb - 1 */
typedef int (*gm_scores_consumer) (void *arg, int64_t first, int nb, const float *S);

typedef struct scorer
{
	float	   *dY,
			   *dX,
			   *dS,
			   *hX,
			   *hS;
	cublasHandle_t blas;
	int			have_blas;
} scorer;

/* Free what s holds; safe on a zeroed scorer. */
static void
scorer_free(scorer *s)
{
	gm_dev_free(s->dY);
	gm_dev_free(s->dX);
	gm_dev_free(s->dS);
	cudaFreeHost(s->hX);
	cudaFreeHost(s->hS);
	if (s->have_blas)
		cublasDestroy(s->blas);
	(void) cudaGetLastError();
}

/* The body of gm_cuda_rank_scores (GM_CHECK returns from here). */
static int
scores_inner(scorer *s, const float *X, const int32_t *users, int64_t n_users,
			 const float *Y, int32_t m, int k, int batch, gm_scores_consumer consume,
			 void *arg, char *err, size_t errlen)
{
	const float one = 1.0f,
				zero = 0.0f;

	GM_CHECK(cudaSetDevice(0));
	GM_CHECK(cublasCreate(&s->blas));
	s->have_blas = 1;
	GM_CHECK(cublasSetMathMode(s->blas, CUBLAS_PEDANTIC_MATH));
	GM_CHECK(gm_dev_malloc((void **) &s->dY, sizeof(float) * (size_t) m * k));
	GM_CHECK(gm_dev_malloc((void **) &s->dX, sizeof(float) * (size_t) batch * k));
	GM_CHECK(gm_dev_malloc((void **) &s->dS, sizeof(float) * (size_t) batch * m));
	GM_CHECK(cudaMallocHost((void **) &s->hX, sizeof(float) * (size_t) batch * k));
	GM_CHECK(cudaMallocHost((void **) &s->hS, sizeof(float) * (size_t) batch * m));
	GM_CHECK(cudaMemcpy(s->dY, Y, sizeof(float) * (size_t) m * k, cudaMemcpyHostToDevice));
	for (int64_t b0 = 0; b0 < n_users; b0 += batch)
	{
		int			nb = n_users - b0 < batch ? (int) (n_users - b0) : batch;
		int			rc;

		for (int j = 0; j < nb; j++)
			memcpy(s->hX + (size_t) j * k, X + (size_t) users[b0 + j] * k, sizeof(float) * k);
		GM_CHECK(cudaMemcpy(s->dX, s->hX, sizeof(float) * (size_t) nb * k, cudaMemcpyHostToDevice));
		/* column-major: S^T (m x nb) = Y (k x m)^T X_b (k x nb) */
		GM_CHECK(cublasSgemm(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, nb, k, &one, s->dY, k,
							 s->dX, k, &zero, s->dS, m));
		GM_CHECK(cudaMemcpy(s->hS, s->dS, sizeof(float) * (size_t) nb * m, cudaMemcpyDeviceToHost));
		if ((rc = consume(arg, b0, nb, s->hS)) != GM_OK)
		{
			snprintf(err, errlen, "training canceled");
			return rc;
		}
	}
	return GM_OK;
}

/*
 * Scores of the users listed (rows of X, n_users of them) against every
 * item of Y (m x k), in batches of `batch` users: consume gets each batch's
 * scores (nb x m).  Returns GM_OK, what consume returned, or GM_EDEVICE.
 */
extern "C" int
gm_cuda_rank_scores(const float *X, const int32_t *users, int64_t n_users,
					const float *Y, int32_t m, int k, int batch,
					gm_scores_consumer consume, void *arg, char *err, size_t errlen)
{
	scorer		s;
	int			rc;

	memset(&s, 0, sizeof(s));
	if (!X || !Y || !users || !consume || m < 1 || k < 1 || batch < 1 || n_users < 0)
	{
		snprintf(err, errlen, "invalid arguments to gm_cuda_rank_scores");
		return GM_EINVAL;
	}
	rc = scores_inner(&s, X, users, n_users, Y, m, k, batch, consume, arg, err, errlen);
	scorer_free(&s);
	return rc;
}
