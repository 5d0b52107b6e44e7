/*
 * als_explicit.c: ALS for explicit ratings with weighted-lambda
 * regularisation (Zhou, Wilkinson, Schreiber, Pan 2008) on the CPU (OpenMP),
 * the table gm_cpu_als_explicit_ops.
 *
 * Objective (gm_explicit.h): sum_(i,j) (r_ij - mu - b_i - c_j - w_i.h_j)^2
 * + lambda (sum_i n_i (|w_i|^2 + b_i^2) + sum_j n_j (|h_j|^2 + c_j^2)).
 * Sweep 0 solves every user with the items fixed, sweep 1 every item: one
 * exact solve per row,
 *     (sum_j y_j y_j^T + lambda n_i I) x_i = sum_j (r_ij - mu - c_j) y_j,
 * where, with biases on, x_i = (w_i, b_i) and y_j = (h_j, 1): the augmented
 * vector trick, so the bias is solved jointly with the factors and
 * regularised with the same weight.  A accumulates in float32 (as on the
 * GPU), the Cholesky factorisation and solve run in float64.
 * evaluate() reports loss = objective / nnz and rmse = sqrt(sum e^2 / nnz).
 *
 * Factors are kept row-major with k + 1 columns, the last holding the bias
 * (zero when biases are off).
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

typedef struct als_cpu
{
	const gm_csr *A[2];			/* R (rows: users), Rt (rows: items) */
	int32_t		n[2];
	int64_t		nnz;
	int			k;
	int			kk;				/* unknowns per row: k, or k + 1 with biases */
	int			ld;				/* k + 1 */
	float		lambda;
	int			threads;
	int			biases;
	double		mu;
	float	   *F[2];			/* n[s] x ld */
	float	   *fwork;			/* per thread: kk * (kk + 2) */
	double	   *dwork;			/* per thread: kk * (kk + 1) */
} als_cpu;

/* This thread's number in the enclosing parallel region. */
static inline int
thread_num(void)
{
#ifdef _OPENMP
	return omp_get_thread_num();
#else
	return 0;
#endif
}

GM_HOT int
gm_als_explicit_solve_row(const int32_t *idx, const float *vals, int64_t n,
						  const float *Y, int ldy, int k, int kk,
						  const float *offset, double shift, double reg,
						  float *x, float *fwork, double *dwork)
{
	float	   *A = fwork,
			   *b = fwork + (size_t) kk * kk,
			   *y = b + kk;
	double	   *Ad = dwork,
			   *bd = dwork + (size_t) kk * kk;

	memset(A, 0, sizeof(float) * (size_t) kk * kk);
	memset(b, 0, sizeof(float) * kk);
	for (int64_t e = 0; e < n; e++)
	{
		const float *yr = Y + (size_t) idx[e] * ldy;
		float		t = (float) (vals[e] - shift - (offset ? offset[(size_t) idx[e] * ldy] : 0.0f));

		memcpy(y, yr, sizeof(float) * k);
		if (kk > k)
			y[k] = 1.0f;
		/* the upper triangle of A += y y^T, and b += t y */
		for (int a = 0; a < kk; a++)
		{
			float		ya = y[a];
			float	   *row = A + (size_t) a * kk;

			b[a] += t * ya;
#pragma omp simd
			for (int c = a; c < kk; c++)
				row[c] += ya * y[c];
		}
	}
	for (int a = 0; a < kk; a++)
	{
		for (int c = 0; c <= a; c++)
			Ad[(size_t) a * kk + c] = A[(size_t) c * kk + a];
		Ad[(size_t) a * kk + a] += reg;
		bd[a] = b[a];
	}
	if (gm_cholesky_solve(Ad, bd, kk) != 0)
	{
		memset(x, 0, sizeof(float) * kk);
		return -1;
	}
	for (int a = 0; a < kk; a++)
		x[a] = (float) bd[a];
	return 0;
}

/* Free the state (safe on NULL and half-built states). */
static void
als_destroy(void *h)
{
	als_cpu    *c = h;

	if (c == NULL)
		return;
	free(c->F[0]);
	free(c->F[1]);
	free(c->fwork);
	free(c->dwork);
	free(c);
}

/* Take the problem: factors with their biases as a last column. */
static int
als_create(void **h, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_cpu    *c;
	int			k = p->factors;

	*h = NULL;
	if (gm_explicit_check("als_explicit", p, d, 0, err, errlen) != GM_OK)
		return GM_EINVAL;
	c = calloc(1, sizeof(als_cpu));
	if (c == NULL)
		goto oom;
	c->A[0] = d->R;
	c->A[1] = d->Rt;
	c->n[0] = d->R->n_rows;
	c->n[1] = d->R->n_cols;
	c->nnz = d->R->nnz;
	c->k = k;
	c->biases = p->biases ? 1 : 0;
	c->kk = k + c->biases;
	c->ld = k + 1;
	c->lambda = p->regularization;
	c->threads = gm_resolve_threads(p->threads);
	c->mu = c->biases ? d->global_mean : 0.0;
	for (int s = 0; s < 2; s++)
	{
		c->F[s] = malloc(sizeof(float) * (size_t) (c->n[s] > 0 ? c->n[s] : 1) * c->ld);
		if (c->F[s] == NULL)
			goto oom;
	}
	c->fwork = malloc(sizeof(float) * (size_t) c->threads * c->kk * (c->kk + 2));
	c->dwork = malloc(sizeof(double) * (size_t) c->threads * c->kk * (c->kk + 1));
	if (!c->fwork || !c->dwork)
		goto oom;
	for (int s = 0; s < 2; s++)
	{
		const float *F = s == 0 ? d->X : d->Y;
		const float *bias = s == 0 ? d->user_bias : d->item_bias;

		for (int32_t i = 0; i < c->n[s]; i++)
		{
			memcpy(c->F[s] + (size_t) i * c->ld, F + (size_t) i * k, sizeof(float) * k);
			c->F[s][(size_t) i * c->ld + k] = c->biases ? bias[i] : 0.0f;
		}
	}
	snprintf(device, devlen, "cpu (%d threads)", c->threads);
	*h = c;
	return GM_OK;

oom:
	als_destroy(c);
	snprintf(err, errlen, "als_explicit: out of memory at %d factors", k);
	return GM_ENOMEM;
}

/* Two sweeps: users, then items. */
static int
als_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

/* Describe sweep s's rows (users or items) and their cost. */
static int
als_begin_sweep(void *h, int s, gm_sweep *sw, char *err, size_t errlen)
{
	als_cpu    *c = h;
	double		kk = c->kk;

	if (s < 0 || s > 1)
	{
		snprintf(err, errlen, "als_explicit: no sweep %d", s);
		return GM_EINVAL;
	}
	sw->n_rows = c->n[s];
	sw->indptr = c->A[s]->indptr;
	sw->row_work = kk * kk * kk / 3.0 + kk * kk;
	sw->nnz_work = kk * (kk + 1) / 2.0 + kk;
	return GM_OK;
}

/* Solve rows [begin, end) of sweep s. */
static int
als_run(void *h, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_cpu    *c = h;
	const gm_csr *A;
	const float *Y;
	float	   *X;
	int			failed = 0;

	if (s < 0 || s > 1 || begin < 0 || end > c->n[s] || begin > end)
	{
		snprintf(err, errlen, "als_explicit: rows [%d, %d) outside sweep %d", begin, end, s);
		return GM_EINVAL;
	}
	A = c->A[s];
	Y = c->F[1 - s];
	X = c->F[s];
#pragma omp parallel for schedule(dynamic, 8) num_threads(c->threads) reduction(+:failed)
	for (int32_t i = begin; i < end; i++)
	{
		int			t = thread_num();
		int64_t		b = A->indptr[i],
					n = A->indptr[i + 1] - b;
		double		reg = (double) c->lambda * (n > 0 ? n : 1);

		if (gm_als_explicit_solve_row(A->indices + b, A->data + b, n, Y, c->ld,
									  c->k, c->kk, c->biases ? Y + c->k : NULL,
									  c->mu, reg, X + (size_t) i * c->ld,
									  c->fwork + (size_t) t * c->kk * (c->kk + 2),
									  c->dwork + (size_t) t * c->kk * (c->kk + 1)) != 0)
			failed++;
	}
	if (failed > 0)
	{
		snprintf(err, errlen, "als_explicit: %d rows had no positive-definite system (non-finite factors)",
				 failed);
		return GM_EINVAL;
	}
	return GM_OK;
}

/* Loss and training RMSE (gm_explicit.h) of the current model. */
static int
als_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	als_cpu    *c = h;
	const gm_csr *R = c->A[0];
	const float *X = c->F[0],
			   *Y = c->F[1];
	int			k = c->k,
				ld = c->ld;
	double		sse = 0.0,
				pen = 0.0;

	(void) err;
	(void) errlen;
#pragma omp parallel for reduction(+:sse,pen) schedule(dynamic, 64) num_threads(c->threads)
	for (int32_t i = 0; i < R->n_rows; i++)
	{
		const float *x = X + (size_t) i * ld;
		double		nx = 0.0;

		for (int64_t e = R->indptr[i]; e < R->indptr[i + 1]; e++)
		{
			const float *y = Y + (size_t) R->indices[e] * ld;
			double		r = R->data[e] - c->mu - (double) gm_dot(x, y, k);

			if (c->biases)
				r -= (double) x[k] + y[k];
			sse += r * r;
		}
		for (int f = 0; f < c->kk; f++)
			nx += (double) x[f] * x[f];
		pen += nx * (double) (R->indptr[i + 1] - R->indptr[i]);
	}
#pragma omp parallel for reduction(+:pen) schedule(static) num_threads(c->threads)
	for (int32_t j = 0; j < c->n[1]; j++)
	{
		const float *y = Y + (size_t) j * ld;
		double		ny = 0.0;

		for (int f = 0; f < c->kk; f++)
			ny += (double) y[f] * y[f];
		pen += ny * (double) (c->A[1]->indptr[j + 1] - c->A[1]->indptr[j]);
	}
	m->loss = (sse + c->lambda * pen) / (double) (c->nnz > 0 ? c->nnz : 1);
	m->rmse = sqrt(sse / (double) (c->nnz > 0 ? c->nnz : 1));
	return GM_OK;
}

/* Write the model back into d's arrays. */
static int
als_download(void *h, gm_mf_data *d, char *err, size_t errlen)
{
	als_cpu    *c = h;

	(void) err;
	(void) errlen;
	for (int s = 0; s < 2; s++)
	{
		float	   *F = s == 0 ? d->X : d->Y;
		float	   *bias = s == 0 ? d->user_bias : d->item_bias;

		for (int32_t i = 0; i < c->n[s]; i++)
		{
			memcpy(F + (size_t) i * c->k, c->F[s] + (size_t) i * c->ld,
				   sizeof(float) * c->k);
			if (c->biases && bias)
				bias[i] = c->F[s][(size_t) i * c->ld + c->k];
		}
	}
	return GM_OK;
}

const gm_algo_ops gm_cpu_als_explicit_ops = {
	"cpu",
	als_create,
	als_n_sweeps,
	als_begin_sweep,
	als_run,
	NULL,						/* end_sweep: nothing to finish */
	NULL,						/* sync: nothing queued on the CPU */
	als_evaluate,
	als_download,
	als_destroy,
	NULL						/* reset: none (the loop destroys and creates instead) */
};
