/*
 * gm_score.h: batch top-n scoring and ranking metrics.
 *
 * Shared by src/core (C) and cuda/ (CUDA C++): plain C types, no other
 * includes than the error codes and the algorithm interface (for gm_csr and
 * gm_callbacks), no PostgreSQL.
 *
 * Batch scoring gives, for every row u of X, the n items i with the largest
 * s(u, i) = x_u . y_i (+ item_bias[i] when given), best first, ties to the
 * lower item index, leaving out the items listed for u in a CSR of "seen"
 * items (NaN scores never rank) -- the same list gm_topk gives for one user.
 * The CPU computes it with a blocked sgemm (OpenBLAS when present) and a heap
 * per user; the CUDA module (cuda/serve/score.cu) with cuBLAS in batches of users
 * and a selection kernel, reached through gm_cuda_symbol("gm_cuda_score_topk").
 *
 * When the structs below change, bump GM_SCORE_ABI_VERSION: the core refuses
 * a CUDA module built against another version.
 */
#ifndef GM_SCORE_H
#define GM_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "gm_errors.h"
#include "gm_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GM_SCORE_ABI_VERSION 1

/* The largest n the CUDA selection kernel takes (larger n: the CPU). */
#define GM_SCORE_GPU_MAX_N 1024

/* One batch top-n problem. */
typedef struct gm_score_problem
{
	int32_t		n_users;		/* rows of X */
	int32_t		n_items;		/* rows of Y */
	int			k;				/* factors */
	const float *X;				/* n_users x k, row-major */
	const float *Y;				/* n_items x k, row-major */
	const float *item_bias;		/* n_items added to every score, or NULL */
	const int64_t *seen_ptr;	/* n_users + 1 offsets into seen_idx, or NULL: none left out */
	const int32_t *seen_idx;	/* each user's items to leave out, sorted ascending */
	int			n;				/* list length, >= 1 */
	int			threads;		/* CPU threads; <= 0: one per core */
	int64_t		batch_bytes;	/* CUDA: bytes for one batch of scores (0: up to 1 GiB) */
} gm_score_problem;

/* What gm_score_topk writes and measures. */
typedef struct gm_score_result
{
	int32_t    *idx;			/* n_users x n (caller's): item indices, -1 past count */
	float	   *score;			/* n_users x n (caller's): scores, NaN past count */
	int32_t    *count;			/* n_users (caller's): entries found, <= n */
	double		compute_seconds;	/* scoring and selection (CUDA: device time, events) */
	double		transfer_seconds;	/* CUDA: allocation, uploads and the download */
	int			batches;		/* user batches (CUDA) or blocks (CPU) */
	char		device[128];	/* "cpu (2 threads)" or the GPU's name */
} gm_score_result;

/*
 * The top n of every user on backend b (GM_BACKEND_CPU or GM_BACKEND_CUDA,
 * the latter once gm_cuda_available succeeded).  cb (may be NULL) is polled
 * between blocks of users (CPU: by the calling thread; CUDA: between
 * batches); GM_ECANCELED when it asked to stop.  GM_ENOTSUP on CUDA for
 * n > GM_SCORE_GPU_MAX_N or k > GM_MAXK (1024); GM_ENODEVICE when the CUDA
 * module is not loaded or lacks the scorer; GM_ENOMEM when memory runs out.
 */
int			gm_score_topk(const gm_score_problem *p, gm_backend_kind b,
						  const gm_callbacks *cb, gm_score_result *r,
						  char *err, size_t errlen);

/*
 * Host bytes gm_score_topk allocates on the CPU backend for n_items items
 * with threads threads (<= 0: one per core): a block of scores, at least two
 * rows per thread (so it grows with the thread count).  The results are the
 * caller's.
 */
double		gm_score_cpu_memory(int32_t n_items, int threads);


/* The entry point cuda/serve/score.cu exports (looked up by name). */
typedef int (*gm_cuda_score_topk_fn) (const gm_score_problem *p,
									  const gm_callbacks *cb,
									  gm_score_result *r,
									  char *err, size_t errlen);
typedef int (*gm_cuda_score_abi_fn) (void);

/* ------------------------------------------------------------ metrics */

/*
 * Ranking metrics at k over the users with at least one test item, as the
 * implicit library's ranking_metrics_at_k defines them (a list shorter than
 * k counts its missing entries as misses):
 *
 *   precision  sum_u hits_u / sum_u min(k, |T_u|)        (pooled, as implicit)
 *   recall     mean_u hits_u / |T_u|
 *   map        mean_u (sum_{i: hit} hits_at_i / (i + 1)) / min(k, |T_u|)
 *   ndcg       mean_u sum_{i: hit} (1 / log2(i + 2)) / idcg_u,
 *              idcg_u = sum_{j < min(k, |T_u|)} 1 / log2(j + 2)
 *   auc        mean_u of implicit's AUC at k: walking the list, a miss adds
 *              the hits before it; then (hits + |T_u|) / 2 for each negative
 *              not in the list; over |T_u| (n_items - |T_u|).  Users whose
 *              test items are every item (no negatives) are left out of it.
 *
 * T_u = the user's test items (unique); hits are list entries in T_u.
 */
typedef struct gm_rank_metrics
{
	int			k;
	int64_t		users;			/* users with >= 1 test item */
	int64_t		auc_users;		/* of them, with >= 1 negative item */
	int64_t		hits;
	int64_t		test_items;		/* sum of |T_u| */
	double		precision;
	double		recall;
	double		map;
	double		ndcg;
	double		auc;
} gm_rank_metrics;

/*
 * Metrics of lists top (n_users x stride entries, the first count[u] of row u
 * valid, k <= stride) against test (n_users rows, columns sorted, unique)
 * with n_items items in all.  NaN metrics when no user has a test item.
 */
int			gm_rank_metrics_at_k(int32_t n_users, int32_t n_items, int k,
								 const int32_t *top, int stride,
								 const int32_t *count, const gm_csr *test,
								 gm_rank_metrics *out, char *err, size_t errlen);

/*
 * RMSE and MAE of predictions p_e = mu + b_u + c_i + x_u . y_i (in float64;
 * biases NULL = 0) against vals[e] over n rows (rows[e] index X, cols[e]
 * index Y; a pair may repeat).  NaN when n is 0.
 */
int			gm_rating_errors(int64_t n, const int32_t *rows, const int32_t *cols,
							 const float *vals, const float *X, const float *Y,
							 int k, const float *user_bias,
							 const float *item_bias, double global_mean,
							 double *rmse, double *mae, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif							/* GM_SCORE_H */
