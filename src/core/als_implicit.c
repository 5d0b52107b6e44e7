/*
 * als_implicit.c: implicit-feedback ALS (Hu, Koren, Volinsky 2008) with the
 * conjugate-gradient solver on the CPU, and its table of operations
 * (gm_cpu_als_implicit_ops) that gm_mf_train drives.
 *
 * An iteration is two sweeps: the users (X against Y), then the items (Y
 * against X).  A sweep's begin builds G = F^T F + reg I of the other side;
 * its rows are solved independently, in the slices mf_loop.c cuts, in place
 * in the caller's X and Y.  Observed entries weigh c = 1 + alpha * value: the
 * confidences live in this algorithm's own copy of the values, R and Rt stay
 * as the caller gave them.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifndef GM_NO_CBLAS
#include <cblas.h>
#endif

/* out[e] = 1 + alpha * v[e] (out may be v). */
static void
confidence_values(const float *v, int64_t n, float alpha, float *out)
{
#pragma omp parallel for schedule(static)
	for (int64_t e = 0; e < n; e++)
		out[e] = 1.0f + alpha * v[e];
}

/* A copy of a with confidences for values. */
int
gm_confidence(const gm_csr *a, float alpha, gm_csr *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	out->indptr = malloc(((size_t) a->n_rows + 1) * sizeof(int64_t));
	out->indices = malloc((size_t) (a->nnz > 0 ? a->nnz : 1) * sizeof(int32_t));
	out->data = malloc((size_t) (a->nnz > 0 ? a->nnz : 1) * sizeof(float));
	if (!out->indptr || !out->indices || !out->data)
	{
		gm_csr_free(out);
		snprintf(err, errlen, "out of memory for the confidence matrix");
		return GM_ENOMEM;
	}
	out->n_rows = a->n_rows;
	out->n_cols = a->n_cols;
	out->nnz = a->nnz;
	memcpy(out->indptr, a->indptr, ((size_t) a->n_rows + 1) * sizeof(int64_t));
	memcpy(out->indices, a->indices, (size_t) a->nnz * sizeof(int32_t));
	confidence_values(a->data, a->nnz, alpha, out->data);
	return GM_OK;
}

/* a's values become confidences. */
void
gm_confidence_inplace(gm_csr *a, float alpha)
{
	confidence_values(a->data, a->nnz, alpha, a->data);
}

/* Has the caller asked to stop? */
static int
stop_requested(const gm_callbacks *cb)
{
	return cb && cb->should_stop && cb->should_stop(cb->arg);
}

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
 * G = Y^T Y + reg I in chunks of ~2^27 multiply-adds, polling for a cancel
 * between them (at k = 1024 the whole product takes minutes on a CPU).
 */
static int
gram_polled(const float *Y, int64_t n, int k, float reg, float *G, int threads,
			const gm_callbacks *cb)
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
		if (stop_requested(cb))
			return GM_ECANCELED;
	}
	/* mirror the upper triangle and add the ridge */
	for (int i = 0; i < k; i++)
	{
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
	(void) gram_polled(Y, n, k, reg, G, threads, NULL);
}

/*
 * The rows of Y that a row's entries touch are scattered over a matrix
 * larger than the caches; the loops below ask for the row GM_PF_AHEAD
 * entries ahead while they use the current one, so they wait on memory less
 * (measured: the item solve 1.8x faster at k = 64, test/bench/cpu).
 */
#ifndef GM_PF_AHEAD
#define GM_PF_AHEAD 6
#endif

/* Ask for a factor row (k floats) to be brought into the cache. */
static inline void
prefetch_row(const float *y, int k)
{
	for (int f = 0; f < k; f += 16)
		__builtin_prefetch(y + f, 0, 3);
}

/* out = G v (G symmetric k x k). */
static inline void
symv(const float *G, const float *v, float *out, int k)
{
	for (int i = 0; i < k; i++)
		out[i] = gm_dot(G + (size_t) i * k, v, k);
}

/*
 * One row's CG refinement: A = G + sum_i (c_i - 1) y_i y_i^T,
 * b = sum_i c_i y_i (preference 1 on observed entries), warm start x.
 */
GM_HOT static void
cg_solve_row(const int32_t *idx, const float *conf, int64_t n, float *x,
			 const float *Y, const float *G, int k, int cg_steps,
			 float *r, float *p, float *Ap)
{
	float		rsold,
				rsnew;

	symv(G, x, r, k);
	for (int f = 0; f < k; f++)
		r[f] = -r[f];
	for (int64_t e = 0; e < n; e++)
	{
		const float *y = Y + (size_t) idx[e] * k;
		float		c = conf[e];
		float		w;

		if (e + GM_PF_AHEAD < n)
			prefetch_row(Y + (size_t) idx[e + GM_PF_AHEAD] * k, k);
		w = c - (c - 1.0f) * gm_dot(y, x, k);

		for (int f = 0; f < k; f++)
			r[f] += w * y[f];
	}
	memcpy(p, r, sizeof(float) * k);
	rsold = gm_dot(r, r, k);

	for (int it = 0; it < cg_steps; it++)
	{
		float		a;

		if (rsold < 1e-20f)
			break;
		symv(G, p, Ap, k);
		for (int64_t e = 0; e < n; e++)
		{
			const float *y = Y + (size_t) idx[e] * k;
			float		w;

			if (e + GM_PF_AHEAD < n)
				prefetch_row(Y + (size_t) idx[e + GM_PF_AHEAD] * k, k);
			w = (conf[e] - 1.0f) * gm_dot(y, p, k);

			for (int f = 0; f < k; f++)
				Ap[f] += w * y[f];
		}
		a = rsold / gm_dot(p, Ap, k);
		for (int f = 0; f < k; f++)
		{
			x[f] += a * p[f];
			r[f] -= a * Ap[f];
		}
		rsnew = gm_dot(r, r, k);
		if (rsnew < 1e-20f)
			break;
		for (int f = 0; f < k; f++)
			p[f] = r[f] + (rsnew / rsold) * p[f];
		rsold = rsnew;
	}
}

/* CG refinement of rows [begin, end) of X (see gm_core.h), rows in parallel. */
void
gm_als_cg_solve_rows(const gm_csr *C, float *X, const float *Y, const float *G,
					 int k, int cg_steps, int32_t begin, int32_t end,
					 int threads)
{
	int			nt = gm_resolve_threads(threads);

#pragma omp parallel num_threads(nt)
	{
		float	   *buf = malloc(sizeof(float) * 3 * (size_t) k);

#pragma omp for schedule(dynamic, 2)
		for (int32_t u = begin; u < end; u++)
		{
			int64_t		b = C->indptr[u];

			cg_solve_row(C->indices + b, C->data + b, C->indptr[u + 1] - b,
						 X + (size_t) u * k, Y, G, k, cg_steps,
						 buf, buf + k, buf + 2 * k);
		}
		free(buf);
	}
}

/* One row's terms of the loss (see gm_als_loss). */
GM_HOT static void
loss_row(const gm_csr *C, int32_t u, const float *X, const float *Y,
		 const float *G0, int k, float *r, double *loss, double *total_conf,
		 double *normx)
{
	const float *x = X + (size_t) u * k;
	double		l = 0.0,
				tc = 0.0;

	symv(G0, x, r, k);
	l += gm_dot(x, r, k);
	for (int64_t e = C->indptr[u]; e < C->indptr[u + 1]; e++)
	{
		double		c = C->data[e];
		double		s;

		if (e + GM_PF_AHEAD < C->indptr[u + 1])
			prefetch_row(Y + (size_t) C->indices[e + GM_PF_AHEAD] * k, k);
		s = gm_dot(x, Y + (size_t) C->indices[e] * k, k);

		l += c * (1.0 - s) * (1.0 - s) - s * s;
		tc += c;
	}
	*loss += l;
	*total_conf += tc;
	*normx += gm_dot(x, x, k);
}

/*
 * Rows [begin, end) of C whose loss terms cost under budget multiply-adds
 * ((len + k) k per row), at least one row.
 */
static int32_t
loss_slice_end(const gm_csr *C, int32_t begin, int k, double budget)
{
	double		work = 0.0;
	int32_t		end = begin;

	while (end < C->n_rows && (end == begin || work < budget))
	{
		work += ((double) (C->indptr[end + 1] - C->indptr[end]) + k) * k;
		end++;
	}
	return end;
}

/* The loss (gm_als_loss) in slices of users, polling for a cancel. */
static int
loss_polled(const gm_csr *C, const float *X, const float *Y, int k, float reg,
			int threads, const gm_callbacks *cb, double *out)
{
	int			nt = gm_resolve_threads(threads);
	float	   *G0 = malloc(sizeof(float) * (size_t) k * k);
	double		loss = 0.0,
				total_conf = 0.0,
				normx = 0.0,
				normy = 0.0;
	int			rc;

	if (!G0)
		return GM_ENOMEM;
	if ((rc = gram_polled(Y, C->n_cols, k, 0.0f, G0, threads, cb)) != GM_OK)
	{
		free(G0);
		return rc;
	}
	for (int32_t b = 0; b < C->n_rows;)
	{
		int32_t		e = loss_slice_end(C, b, k, 67108864.0 * nt);

#pragma omp parallel num_threads(nt) reduction(+:loss,total_conf,normx)
		{
			float	   *r = malloc(sizeof(float) * (size_t) k);

#pragma omp for schedule(dynamic, 16)
			for (int32_t u = b; u < e; u++)
				loss_row(C, u, X, Y, G0, k, r, &loss, &total_conf, &normx);
			free(r);
		}
		b = e;
		if (stop_requested(cb))
		{
			free(G0);
			return GM_ECANCELED;
		}
	}
	for (int64_t i = 0; i < (int64_t) C->n_cols * k; i++)
		normy += (double) Y[i] * Y[i];
	free(G0);
	loss += reg * (normx + normy);
	*out = loss / (total_conf + (double) C->n_rows * C->n_cols - (double) C->nnz);
	return GM_OK;
}

/* The implicit-ALS loss (see gm_core.h). */
double
gm_als_loss(const gm_csr *C, const float *X, const float *Y, int k, float reg,
			int threads)
{
	double		loss = NAN;

	(void) loss_polled(C, X, Y, k, reg, threads, NULL, &loss);
	return loss;
}


/* ------------------------------------------------ the operations table */

typedef struct als_cpu
{
	gm_csr		C;				/* R's pattern (shared) with confidences (own) */
	gm_csr		Ct;				/* the same for Rt */
	float	   *X;				/* the caller's factors, trained in place */
	float	   *Y;
	float	   *G;				/* k x k */
	int			k;
	int			cg_steps;
	float		reg;
	int			threads;
	const gm_callbacks *cb;		/* polled inside the Gram product and the loss */
} als_cpu;

/* Free the state; safe on NULL. */
static void
als_destroy(void *h)
{
	als_cpu    *s = h;

	if (s == NULL)
		return;
	free(s->C.data);
	free(s->Ct.data);
	free(s->G);
	free(s);
}

/* Take the problem: the confidence copies and G; the factors stay the caller's. */
static int
als_create(void **h, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_cpu    *s;

	*h = NULL;
	if (p->solver != GM_SOLVER_CG || p->alpha0 != 1.0f || p->nu != 0.0f)
	{
		snprintf(err, errlen,
				 "implicit ALS supports only the CG solver with alpha0 = 1 and nu = 0 so far");
		return GM_ENOTSUP;
	}
	s = calloc(1, sizeof(als_cpu));
	if (s == NULL)
		goto oom;
	s->C = *d->R;
	s->Ct = *d->Rt;
	s->C.data = malloc(sizeof(float) * (size_t) (d->R->nnz > 0 ? d->R->nnz : 1));
	s->Ct.data = malloc(sizeof(float) * (size_t) (d->Rt->nnz > 0 ? d->Rt->nnz : 1));
	s->G = malloc(sizeof(float) * (size_t) p->factors * p->factors);
	if (!s->C.data || !s->Ct.data || !s->G)
		goto oom;
	confidence_values(d->R->data, d->R->nnz, p->alpha, s->C.data);
	confidence_values(d->Rt->data, d->Rt->nnz, p->alpha, s->Ct.data);
	s->X = d->X;
	s->Y = d->Y;
	s->k = p->factors;
	s->cg_steps = p->cg_steps;
	s->reg = p->regularization;
	s->threads = gm_resolve_threads(p->threads);
	s->cb = cb;
	snprintf(device, devlen, "cpu (%d threads)", s->threads);
	*h = s;
	return GM_OK;

oom:
	als_destroy(s);
	snprintf(err, errlen, "out of memory for implicit ALS (%lld nonzeros, %d factors)",
			 (long long) d->R->nnz, p->factors);
	return GM_ENOMEM;
}

/* Two sweeps an iteration: the users, then the items. */
static int
als_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

/*
 * Sweep 0 solves the users against G = Y^T Y + reg I, sweep 1 the items
 * against X^T X + reg I.  A row costs (len + k) k multiply-adds per CG pass.
 */
static int
als_begin_sweep(void *h, int side, gm_sweep *sw, char *err, size_t errlen)
{
	als_cpu    *s = h;
	const gm_csr *A = side == 0 ? &s->C : &s->Ct;
	int			rc;

	if (side == 0)
		rc = gram_polled(s->Y, s->C.n_cols, s->k, s->reg, s->G, s->threads, s->cb);
	else
		rc = gram_polled(s->X, s->C.n_rows, s->k, s->reg, s->G, s->threads, s->cb);
	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	sw->n_rows = A->n_rows;
	sw->indptr = A->indptr;
	sw->row_work = (double) s->k * s->k * s->cg_steps;
	sw->nnz_work = (double) s->k * s->cg_steps;
	return rc;
}

/* CG solve of rows [begin, end) of the sweep's side. */
static int
als_run(void *h, int side, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_cpu    *s = h;

	(void) err;
	(void) errlen;
	if (side == 0)
		gm_als_cg_solve_rows(&s->C, s->X, s->Y, s->G, s->k, s->cg_steps,
							 begin, end, s->threads);
	else
		gm_als_cg_solve_rows(&s->Ct, s->Y, s->X, s->G, s->k, s->cg_steps,
							 begin, end, s->threads);
	return GM_OK;
}

/* Nothing to finish or wait for: the CPU works synchronously. */
static int
als_nothing(void *h, char *err, size_t errlen)
{
	(void) h;
	(void) err;
	(void) errlen;
	return GM_OK;
}

/* Nothing to finish at a sweep's end. */
static int
als_end_sweep(void *h, int side, char *err, size_t errlen)
{
	(void) side;
	return als_nothing(h, err, errlen);
}

/* The loss (gm_als_loss); implicit feedback has no RMSE. */
static int
als_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	als_cpu    *s = h;
	int			rc = loss_polled(&s->C, s->X, s->Y, s->k, s->reg, s->threads,
								 s->cb, &m->loss);

	m->rmse = NAN;
	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	else if (rc != GM_OK)
		snprintf(err, errlen, "out of memory computing the loss");
	return rc;
}

/* The factors were trained in the caller's arrays; copy only if d has others. */
static int
als_download(void *h, gm_mf_data *d, char *err, size_t errlen)
{
	als_cpu    *s = h;

	(void) err;
	(void) errlen;
	if (d->X && d->X != s->X)
		memcpy(d->X, s->X, sizeof(float) * (size_t) s->C.n_rows * s->k);
	if (d->Y && d->Y != s->Y)
		memcpy(d->Y, s->Y, sizeof(float) * (size_t) s->C.n_cols * s->k);
	return GM_OK;
}

const gm_algo_ops gm_cpu_als_implicit_ops = {
	.name = "cpu",
	.create = als_create,
	.n_sweeps = als_n_sweeps,
	.begin_sweep = als_begin_sweep,
	.run = als_run,
	.end_sweep = als_end_sweep,
	.sync = als_nothing,
	.evaluate = als_evaluate,
	.download = als_download,
	.destroy = als_destroy,
};
