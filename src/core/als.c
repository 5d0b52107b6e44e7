/*
 * als.c: implicit-feedback ALS (Hu, Koren, Volinsky 2008) with the
 * conjugate-gradient solver, on the CPU, and the training loop that drives
 * either backend (cpu or cuda) through one interface.
 */
#include "gm_core.h"
#include "gm_backend.h"
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
#pragma omp parallel for schedule(static)
	for (int64_t e = 0; e < a->nnz; e++)
		out->data[e] = 1.0f + alpha * a->data[e];
	return GM_OK;
}

void
gm_confidence_inplace(gm_csr *a, float alpha)
{
#pragma omp parallel for schedule(static)
	for (int64_t e = 0; e < a->nnz; e++)
		a->data[e] = 1.0f + alpha * a->data[e];
}

static int32_t slice_end(const gm_csr *A, int32_t begin, int k, double budget);

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
		int32_t		e = slice_end(C, b, k, 67108864.0 * nt);

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

double
gm_als_loss(const gm_csr *C, const float *X, const float *Y, int k, float reg,
			int threads)
{
	double		loss = NAN;

	(void) loss_polled(C, X, Y, k, reg, threads, NULL, &loss);
	return loss;
}

/* ------------------------------------------------------ the CPU backend */

typedef struct cpu_state
{
	const gm_csr *C;
	const gm_csr *Ct;
	float	   *X;
	float	   *Y;
	float	   *G;
	int			k;
	int			threads;
	const gm_callbacks *cb;		/* polled inside long CPU steps */
} cpu_state;

static int
cpu_prepare(void *h, int side, float reg, char *err, size_t errlen)
{
	cpu_state  *s = h;
	int			rc;

	if (side == 0)
		rc = gram_polled(s->Y, s->C->n_cols, s->k, reg, s->G, s->threads, s->cb);
	else
		rc = gram_polled(s->X, s->C->n_rows, s->k, reg, s->G, s->threads, s->cb);
	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	return rc;
}

static int
cpu_solve(void *h, int side, int cg_steps, int32_t begin, int32_t end,
		  char *err, size_t errlen)
{
	cpu_state  *s = h;

	(void) err;
	(void) errlen;
	if (side == 0)
		gm_als_cg_solve_rows(s->C, s->X, s->Y, s->G, s->k, cg_steps,
							 begin, end, s->threads);
	else
		gm_als_cg_solve_rows(s->Ct, s->Y, s->X, s->G, s->k, cg_steps,
							 begin, end, s->threads);
	return GM_OK;
}

static int
cpu_sync(void *h, char *err, size_t errlen)
{
	(void) h;
	(void) err;
	(void) errlen;
	return GM_OK;
}

static int
cpu_loss(void *h, float reg, double *loss, char *err, size_t errlen)
{
	cpu_state  *s = h;
	int			rc = loss_polled(s->C, s->X, s->Y, s->k, reg, s->threads, s->cb, loss);

	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	else if (rc != GM_OK)
		snprintf(err, errlen, "out of memory computing the loss");
	return rc;
}

static int
cpu_get(void *h, float *X, float *Y, char *err, size_t errlen)
{
	(void) h;
	(void) X;
	(void) Y;
	(void) err;
	(void) errlen;
	return GM_OK;				/* trained in place */
}

static void
cpu_destroy(void *h)
{
	cpu_state  *s = h;

	if (s)
		free(s->G);
	free(s);
}

static const gm_backend_ops cpu_ops = {
	"cpu", cpu_prepare, cpu_solve, cpu_sync, cpu_loss, cpu_get, cpu_destroy
};

/* ------------------------------------------------------ training loop */

/*
 * Rows [begin, end) whose work stays under budget (so cancellation is
 * polled often), at least one row.
 */
static int32_t
slice_end(const gm_csr *A, int32_t begin, int k, double budget)
{
	double		work = 0.0;
	int32_t		end = begin;

	while (end < A->n_rows && (end == begin || work < budget))
	{
		work += ((double) (A->indptr[end + 1] - A->indptr[end]) + k) * k;
		end++;
	}
	return end;
}

static int
half_step(const gm_backend_ops *ops, void *h, int side, const gm_csr *A,
		  const gm_als_params *p, double budget, const gm_callbacks *cb,
		  char *err, size_t errlen)
{
	int			rc;

	if ((rc = ops->prepare(h, side, p->regularization, err, errlen)) != GM_OK)
		return rc;
	for (int32_t b = 0; b < A->n_rows;)
	{
		int32_t		e = slice_end(A, b, p->factors, budget);

		if ((rc = ops->solve(h, side, p->cg_steps, b, e, err, errlen)) != GM_OK)
			return rc;
		/* wait for the slice, so a cancel is seen within one slice's time */
		if ((rc = ops->sync(h, err, errlen)) != GM_OK)
			return rc;
		b = e;
		if (cb && cb->should_stop && cb->should_stop(cb->arg))
		{
			ops->sync(h, err, errlen);
			snprintf(err, errlen, "training canceled");
			return GM_ECANCELED;
		}
	}
	return ops->sync(h, err, errlen);
}

int
gm_als_train(const gm_als_params *p, const gm_csr *C, const gm_csr *Ct,
			 float *X, float *Y, const gm_callbacks *cb, gm_als_result *res,
			 char *err, size_t errlen)
{
	const gm_backend_ops *ops;
	void	   *h = NULL;
	int			rc;
	double		t0,
				t1,
				budget;
	double		loss = NAN;

	memset(res, 0, sizeof(*res));
	if (p->factors < 1 || p->iterations < 1 || p->cg_steps < 1)
	{
		snprintf(err, errlen, "invalid ALS parameters");
		return GM_EINVAL;
	}

	t0 = gm_now();
	if (p->backend == GM_BACKEND_CUDA)
	{
		ops = gm_cuda_backend_ops();
		if (ops == NULL)
		{
			snprintf(err, errlen, "the CUDA module is not loaded");
			return GM_ENODEVICE;
		}
		rc = gm_cuda_backend_create(&h, C, Ct, X, Y, p->factors,
									res->device_name, sizeof(res->device_name),
									err, errlen);
		if (rc != GM_OK)
			return rc;
		/*
		 * ~2^32 multiply-adds a slice: about 15 slices per half-step at
		 * k = 256 on ML-20M, each a few milliseconds; smaller slices cost
		 * throughput (measured: 1.9x slower at 2^28).
		 */
		budget = 4294967296.0 / p->cg_steps;
	}
	else
	{
		cpu_state  *s = calloc(1, sizeof(cpu_state));

		ops = &cpu_ops;
		if (s)
			s->G = malloc(sizeof(float) * (size_t) p->factors * p->factors);
		if (!s || !s->G)
		{
			cpu_destroy(s);
			snprintf(err, errlen, "out of memory");
			return GM_ENOMEM;
		}
		s->C = C;
		s->Ct = Ct;
		s->X = X;
		s->Y = Y;
		s->k = p->factors;
		s->threads = gm_resolve_threads(p->threads);
		s->cb = cb;
		h = s;
		snprintf(res->device_name, sizeof(res->device_name), "cpu (%d threads)",
				 s->threads);
		/*
		 * ~2^26 multiply-adds per thread per slice (tens of ms): large enough
		 * that a popular item's long row shares its slice with others
		 */
		budget = 67108864.0 * s->threads / p->cg_steps;
	}
	t1 = gm_now();
	res->transfer_seconds = t1 - t0;

	for (int it = 0; it < p->iterations; it++)
	{
		if ((rc = half_step(ops, h, 0, C, p, budget, cb, err, errlen)) != GM_OK)
			goto done;
		if ((rc = half_step(ops, h, 1, Ct, p, budget, cb, err, errlen)) != GM_OK)
			goto done;
		if ((rc = ops->loss(h, p->regularization, &loss, err, errlen)) != GM_OK)
			goto done;
		if (cb && cb->on_iteration)
			cb->on_iteration(cb->arg, it + 1, loss, gm_now() - t1);
		if (cb && cb->should_stop && cb->should_stop(cb->arg))
		{
			snprintf(err, errlen, "training canceled");
			rc = GM_ECANCELED;
			goto done;
		}
	}
	res->train_seconds = gm_now() - t1;
	t0 = gm_now();
	rc = ops->get(h, X, Y, err, errlen);
	res->transfer_seconds += gm_now() - t0;
	res->final_loss = loss;

done:
	ops->destroy(h);
	return rc;
}
