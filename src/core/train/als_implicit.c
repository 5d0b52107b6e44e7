/*
 * als_implicit.c: implicit-feedback ALS on the CPU, and its table of
 * operations (gm_cpu_als_implicit_ops) that gm_mf_train drives.
 *
 * The model.  For users u with factors x_u, items i with factors y_i, the
 * observed pairs S (c_ui = 1 + alpha * value) and s_ui = x_u . y_i,
 *
 *   L = sum_(u,i) in S  c_ui (1 - s_ui)^2  +  alpha0 sum_(u,i) not in S  s_ui^2
 *     + sum_u lambda_u |x_u|^2  +  sum_i lambda_i |y_i|^2,
 *   lambda_u = regularization * (|I_u| + alpha0 |I|)^nu,
 *   lambda_i = regularization * (|U_i| + alpha0 |U|)^nu.
 *
 * alpha0 = 1, nu = 0 is Hu, Koren and Volinsky's 2008 model exactly.
 * Rendle et al. ("Revisiting the Performance of iALS on Item Recommendation
 * Benchmarks", 2022) weigh every pair, observed ones included, by alpha0
 * in the "all items" term and give observed pairs weight 1 on (1 - s)^2:
 * for an observed pair (1 - s)^2 + alpha0 s^2 = (1 + alpha0)(s - t)^2 + const
 * with t = 1 / (1 + alpha0), so his model is this one with c = 1 + alpha0
 * (alpha = alpha0 on 0/1 data), targets t instead of 1, i.e. factors scaled
 * by sqrt(t), and the regularization multiplied by 1 + alpha0: the same
 * rankings.  This form is kept because the 2008 model is its exact special
 * case and because values other than 1 (counts) keep their meaning.
 *
 * Fixing Y, each user's factors solve A x = b with
 *
 *   A = alpha0 Y^T Y + sum_(i in I_u) (c_ui - alpha0) y_i y_i^T + lambda_u I,
 *   b = sum_(i in I_u) c_ui y_i,
 *
 * and the items the same against X.  G = alpha0 Y^T Y (+ lambda I when
 * nu = 0, the ridge then being the same for every row) is formed once per
 * sweep; a row's own part touches only its entries.  Three solvers:
 *
 *   CG     cg_steps conjugate-gradient steps from the previous x, never
 *          forming A: A p = G p + sum (c - alpha0)(y.p) y + lambda_u p;
 *   EXACT  A formed (k^2 per entry), Cholesky in double: the exact minimiser;
 *   BLOCK  block coordinate descent (iALS++, Rendle et al. 2021): the
 *          coordinates in blocks of b, each block's b x b system solved
 *          exactly with the others fixed, block_sweeps passes; with the
 *          predictions s_e = y_e . x and G x kept up to date, a block costs
 *          b^2 per entry instead of k^2.  b = k is the exact solve; more
 *          passes converge to it (block Gauss-Seidel on an SPD system).
 *
 * An iteration is two sweeps: the users (X against Y), then the items.  The
 * rows of a sweep are independent and solved in place in the caller's X and
 * Y, in the slices mf_loop.c cuts.  The confidences live in this
 * algorithm's own copy of the values; R and Rt stay as the caller gave them.
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

/* Per-row ridges (see gm_core.h). */
void
gm_als_row_reg(const gm_csr *A, float regularization, float alpha0, float nu,
			   float *out)
{
	double		other = (double) alpha0 * A->n_cols;

	for (int32_t r = 0; r < A->n_rows; r++)
		out[r] = (float) (regularization *
						  pow((double) (A->indptr[r + 1] - A->indptr[r]) + other, nu));
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
 * One row's CG refinement of A x = b (the file's comment), warm started
 * from x: A = G + sum_i (c_i - alpha0) y_i y_i^T + reg I, b = sum_i c_i y_i.
 * reg = 0 adds nothing (G then holds the ridge), so that alpha0 = 1, reg = 0
 * computes bit for bit what the 2008 model's solver did.
 */
GM_HOT static void
cg_solve_row(const int32_t *idx, const float *conf, int64_t n, float *x,
			 const float *Y, const float *G, int k, int cg_steps, float alpha0,
			 float reg, float *r, float *p, float *Ap)
{
	float		rsold,
				rsnew;

	symv(G, x, r, k);
	if (reg != 0.0f)
		for (int f = 0; f < k; f++)
			r[f] += reg * x[f];
	for (int f = 0; f < k; f++)
		r[f] = -r[f];
	for (int64_t e = 0; e < n; e++)
	{
		const float *y = Y + (size_t) idx[e] * k;
		float		c = conf[e];
		float		w;

		if (e + GM_PF_AHEAD < n)
			prefetch_row(Y + (size_t) idx[e + GM_PF_AHEAD] * k, k);
		w = c - (c - alpha0) * gm_dot(y, x, k);

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
		if (reg != 0.0f)
			for (int f = 0; f < k; f++)
				Ap[f] += reg * p[f];
		for (int64_t e = 0; e < n; e++)
		{
			const float *y = Y + (size_t) idx[e] * k;
			float		w;

			if (e + GM_PF_AHEAD < n)
				prefetch_row(Y + (size_t) idx[e + GM_PF_AHEAD] * k, k);
			w = (conf[e] - alpha0) * gm_dot(y, p, k);

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

/*
 * Accumulate w y y^T into the lower triangle of the n x n float matrix A
 * (leading dimension n) and t y into v.
 */
static inline void
rank1_lower(float *A, float *v, const float *y, int n, float w, float t)
{
	for (int i = 0; i < n; i++)
	{
		float		wyi = w * y[i];
		float	   *row = A + (size_t) i * n;

		v[i] += t * y[i];
#pragma omp simd
		for (int j = 0; j <= i; j++)
			row[j] += wyi * y[j];
	}
}

/* Scratch a solver needs per thread. */
typedef struct row_work
{
	float	   *f1,				/* k (CG: r; others: b or G x) */
			   *f2,				/* k (CG: p) */
			   *f3,				/* k (CG: Ap) */
			   *A;				/* b^2 floats (exact: k^2) */
	double	   *M,				/* b^2 doubles */
			   *v;				/* b doubles */
	float	   *s;				/* the longest row's predictions (block) */
} row_work;

static void
row_work_free(row_work *w)
{
	free(w->f1);
	free(w->f2);
	free(w->f3);
	free(w->A);
	free(w->M);
	free(w->v);
	free(w->s);
	memset(w, 0, sizeof(*w));
}

/* Scratch for k factors, blocks of b and rows of up to maxlen entries; -1 when out of memory. */
static int
row_work_alloc(row_work *w, int k, int b, int64_t maxlen)
{
	memset(w, 0, sizeof(*w));
	w->f1 = malloc(sizeof(float) * k);
	w->f2 = malloc(sizeof(float) * k);
	w->f3 = malloc(sizeof(float) * k);
	w->A = malloc(sizeof(float) * (size_t) b * b);
	w->M = malloc(sizeof(double) * (size_t) b * b);
	w->v = malloc(sizeof(double) * b);
	w->s = malloc(sizeof(float) * (size_t) (maxlen > 0 ? maxlen : 1));
	if (!w->f1 || !w->f2 || !w->f3 || !w->A || !w->M || !w->v || !w->s)
	{
		row_work_free(w);
		return -1;
	}
	return 0;
}

/*
 * One row's exact solve: A assembled in float (G, the ridge, then the
 * entries' rank-one terms, lower triangle), factored and solved in double.
 * A matrix that is not positive definite leaves x as it was.
 */
GM_HOT static void
exact_solve_row(const int32_t *idx, const float *conf, int64_t n, float *x,
				const float *Y, const float *G, int k, float alpha0, float reg,
				row_work *w)
{
	float	   *A = w->A,
			   *b = w->f1;

	for (int i = 0; i < k; i++)
	{
		memcpy(A + (size_t) i * k, G + (size_t) i * k, sizeof(float) * (i + 1));
		A[(size_t) i * k + i] += reg;
		b[i] = 0.0f;
	}
	for (int64_t e = 0; e < n; e++)
	{
		const float *y = Y + (size_t) idx[e] * k;

		if (e + GM_PF_AHEAD < n)
			prefetch_row(Y + (size_t) idx[e + GM_PF_AHEAD] * k, k);
		rank1_lower(A, b, y, k, conf[e] - alpha0, conf[e]);
	}
	for (int i = 0; i < k; i++)
	{
		for (int j = 0; j <= i; j++)
			w->M[(size_t) i * k + j] = A[(size_t) i * k + j];
		w->v[i] = b[i];
	}
	if (gm_cholesky_solve(w->M, w->v, k) == 0)
		for (int i = 0; i < k; i++)
			x[i] = (float) w->v[i];
}

/*
 * One row's block coordinate descent (the file's comment): for each block
 * B of bs coordinates (the last may be shorter), with the others fixed,
 *
 *   A_BB d = r_B,   A_BB = G_BB + reg I + sum_e (c_e - alpha0) y_eB y_eB^T,
 *   r_B = sum_e (c_e - (c_e - alpha0) s_e) y_eB - (G x)_B - reg x_B,
 *
 * then x_B += d, s_e += y_eB . d and G x += G_(:,B) d.  A block whose
 * matrix is not positive definite is left as it was.
 */
GM_HOT static void
block_solve_row(const int32_t *idx, const float *conf, int64_t n, float *x,
				const float *Y, const float *G, int k, float alpha0, float reg,
				int bs, int sweeps, row_work *w)
{
	float	   *s = w->s,
			   *Gx = w->f1,
			   *A = w->A,
			   *rv = w->f2;

	for (int64_t e = 0; e < n; e++)
	{
		if (e + GM_PF_AHEAD < n)
			prefetch_row(Y + (size_t) idx[e + GM_PF_AHEAD] * k, k);
		s[e] = gm_dot(Y + (size_t) idx[e] * k, x, k);
	}
	symv(G, x, Gx, k);
	for (int sw = 0; sw < sweeps; sw++)
		for (int b0 = 0; b0 < k; b0 += bs)
		{
			int			nb = k - b0 < bs ? k - b0 : bs;

			for (int i = 0; i < nb; i++)
			{
				memcpy(A + (size_t) i * nb, G + (size_t) (b0 + i) * k + b0,
					   sizeof(float) * (i + 1));
				A[(size_t) i * nb + i] += reg;
				rv[i] = -(Gx[b0 + i] + reg * x[b0 + i]);
			}
			for (int64_t e = 0; e < n; e++)
			{
				float		c = conf[e],
							wc = c - alpha0;

				rank1_lower(A, rv, Y + (size_t) idx[e] * k + b0, nb, wc, c - wc * s[e]);
			}
			for (int i = 0; i < nb; i++)
			{
				for (int j = 0; j <= i; j++)
					w->M[(size_t) i * nb + j] = A[(size_t) i * nb + j];
				w->v[i] = rv[i];
			}
			if (gm_cholesky_solve(w->M, w->v, nb) != 0)
				continue;
			for (int i = 0; i < nb; i++)
			{
				rv[i] = (float) w->v[i];	/* d */
				x[b0 + i] += rv[i];
			}
			for (int64_t e = 0; e < n; e++)
				s[e] += gm_dot(Y + (size_t) idx[e] * k + b0, rv, nb);
			for (int i = 0; i < k; i++)
				Gx[i] += gm_dot(G + (size_t) i * k + b0, rv, nb);
		}
}

/* Solve rows [begin, end) of a side (see gm_core.h), rows in parallel. */
int
gm_als_solve_rows(const gm_als_side *sd, gm_solver solver, int cg_steps,
				  int block_size, int block_sweeps, int32_t begin, int32_t end,
				  int threads)
{
	const gm_csr *C = sd->C;
	int			nt = gm_resolve_threads(threads),
				k = sd->k,
				bs = solver == GM_SOLVER_EXACT ? k :
		solver == GM_SOLVER_BLOCK ? (block_size < k ? block_size : k) : 1;
	int64_t		maxlen = 0;
	int			failed = 0;

	if (solver == GM_SOLVER_BLOCK)
		for (int32_t u = begin; u < end; u++)
			if (C->indptr[u + 1] - C->indptr[u] > maxlen)
				maxlen = C->indptr[u + 1] - C->indptr[u];

#pragma omp parallel num_threads(nt) reduction(|:failed)
	{
		row_work	w;

		if (row_work_alloc(&w, k, bs, maxlen) != 0)
			failed = 1;
		else
		{
#pragma omp for schedule(dynamic, 2)
			for (int32_t u = begin; u < end; u++)
			{
				int64_t		b = C->indptr[u],
							n = C->indptr[u + 1] - b;
				float		reg = sd->reg ? sd->reg[u] : 0.0f;
				float	   *x = sd->X + (size_t) u * k;

				switch (solver)
				{
					case GM_SOLVER_EXACT:
						exact_solve_row(C->indices + b, C->data + b, n, x, sd->Y,
										sd->G, k, sd->alpha0, reg, &w);
						break;
					case GM_SOLVER_BLOCK:
						block_solve_row(C->indices + b, C->data + b, n, x, sd->Y,
										sd->G, k, sd->alpha0, reg, bs, block_sweeps, &w);
						break;
					default:
						cg_solve_row(C->indices + b, C->data + b, n, x, sd->Y, sd->G,
									 k, cg_steps, sd->alpha0, reg, w.f1, w.f2, w.f3);
						break;
				}
			}
			row_work_free(&w);
		}
	}
	return failed ? GM_ENOMEM : GM_OK;
}

/* CG refinement of rows [begin, end) of X, the 2008 model (see gm_core.h). */
void
gm_als_cg_solve_rows(const gm_csr *C, float *X, const float *Y, const float *G,
					 int k, int cg_steps, int32_t begin, int32_t end,
					 int threads)
{
	gm_als_side sd = {C, X, Y, G, NULL, 1.0f, k};

	(void) gm_als_solve_rows(&sd, GM_SOLVER_CG, cg_steps, 0, 0, begin, end, threads);
}

/* One row's terms of the loss (see loss_polled); wx weighs |x|^2. */
GM_HOT static void
loss_row(const gm_csr *C, int32_t u, const float *X, const float *Y,
		 const float *G0, int k, float alpha0, double wx, float *r, double *loss,
		 double *total_conf, double *normx)
{
	const float *x = X + (size_t) u * k;
	double		l = 0.0,
				tc = 0.0;

	symv(G0, x, r, k);
	l += alpha0 * (double) gm_dot(x, r, k);
	for (int64_t e = C->indptr[u]; e < C->indptr[u + 1]; e++)
	{
		double		c = C->data[e];
		double		s;

		if (e + GM_PF_AHEAD < C->indptr[u + 1])
			prefetch_row(Y + (size_t) C->indices[e + GM_PF_AHEAD] * k, k);
		s = gm_dot(x, Y + (size_t) C->indices[e] * k, k);

		l += c * (1.0 - s) * (1.0 - s) - alpha0 * s * s;
		tc += c;
	}
	*loss += l;
	*total_conf += tc;
	*normx += wx * gm_dot(x, x, k);
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

/*
 * The loss (the file's comment), normalised by the total weight
 * sum_S c + alpha0 (n_users n_items - nnz), in slices of users, polling for
 * a cancel.  The ridges are reg_x[u] and reg_y[i], or reg for every row when
 * they are NULL.
 */
static int
loss_polled(const gm_csr *C, const float *X, const float *Y, int k,
			float alpha0, float reg, const float *reg_x, const float *reg_y,
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
	if ((rc = gm_gram_polled(Y, C->n_cols, k, 1.0f, 0.0f, G0, threads, cb)) != GM_OK)
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
				loss_row(C, u, X, Y, G0, k, alpha0, reg_x ? reg_x[u] : 1.0, r,
						 &loss, &total_conf, &normx);
			free(r);
		}
		b = e;
		if (stop_requested(cb))
		{
			free(G0);
			return GM_ECANCELED;
		}
	}
	if (reg_y == NULL)
		for (int64_t i = 0; i < (int64_t) C->n_cols * k; i++)
			normy += (double) Y[i] * Y[i];
	else
		for (int32_t i = 0; i < C->n_cols; i++)
		{
			double		ny = 0.0;

			for (int f = 0; f < k; f++)
				ny += (double) Y[(size_t) i * k + f] * Y[(size_t) i * k + f];
			normy += reg_y[i] * ny;
		}
	free(G0);
	if (reg_x)
		loss += normx + normy;
	else
		loss += reg * (normx + normy);
	*out = loss / (total_conf + alpha0 * ((double) C->n_rows * C->n_cols - (double) C->nnz));
	return GM_OK;
}

/* The 2008 model's loss (see gm_core.h). */
double
gm_als_loss(const gm_csr *C, const float *X, const float *Y, int k, float reg,
			int threads)
{
	double		loss = NAN;

	(void) loss_polled(C, X, Y, k, 1.0f, reg, NULL, NULL, threads, NULL, &loss);
	return loss;
}

/* The loss with alpha0 and per-row ridges (see gm_core.h). */
double
gm_als_objective(const gm_csr *C, const float *X, const float *Y, int k,
				 float alpha0, float reg, const float *reg_x, const float *reg_y,
				 int threads)
{
	double		loss = NAN;

	(void) loss_polled(C, X, Y, k, alpha0, reg, reg_x, reg_y, threads, NULL, &loss);
	return loss;
}

/* ------------------------------------------------ the operations table */

typedef struct als_cpu
{
	gm_csr		C;				/* R's pattern (shared) with confidences (own) */
	gm_csr		Ct;				/* the same for Rt */
	const float *V;				/* the values as read (R's, then Rt's) */
	const float *Vt;
	float	   *X;				/* the caller's factors, trained in place */
	float	   *Y;
	float	   *G;				/* k x k */
	float	   *reg_x;			/* per-row ridges when nu > 0, else NULL */
	float	   *reg_y;
	int			k;
	int			g_size;			/* k of G's allocation */
	gm_mf_params p;
	int			block;			/* the block solver's block size */
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
	free(s->reg_x);
	free(s->reg_y);
	free(s);
}

/*
 * Take parameters p and the factors of d (create and reset): confidences
 * for p->alpha, G for p->factors, the ridges for p->nu.
 */
static int
als_setup(als_cpu *s, const gm_mf_data *d, const gm_mf_params *p, char *err,
		  size_t errlen)
{
	int			k = p->factors;

	if (p->algorithm != GM_ALG_ALS_IMPLICIT)
	{
		snprintf(err, errlen, "the implicit ALS table cannot train algorithm %d",
				 (int) p->algorithm);
		return GM_EINVAL;
	}
	if (s->g_size != k)
	{
		free(s->G);
		s->G = malloc(sizeof(float) * (size_t) k * k);
		s->g_size = s->G ? k : 0;
	}
	free(s->reg_x);
	free(s->reg_y);
	s->reg_x = s->reg_y = NULL;
	if (p->nu != 0.0f)
	{
		s->reg_x = malloc(sizeof(float) * (size_t) s->C.n_rows);
		s->reg_y = malloc(sizeof(float) * (size_t) s->Ct.n_rows);
	}
	if (!s->G || (p->nu != 0.0f && (!s->reg_x || !s->reg_y)))
	{
		snprintf(err, errlen, "out of memory for implicit ALS (%lld nonzeros, %d factors)",
				 (long long) s->C.nnz, k);
		return GM_ENOMEM;
	}
	if (p->nu != 0.0f)
	{
		gm_als_row_reg(&s->C, p->regularization, p->alpha0, p->nu, s->reg_x);
		gm_als_row_reg(&s->Ct, p->regularization, p->alpha0, p->nu, s->reg_y);
	}
	confidence_values(s->V, s->C.nnz, p->alpha, s->C.data);
	confidence_values(s->Vt, s->Ct.nnz, p->alpha, s->Ct.data);
	s->X = d->X;
	s->Y = d->Y;
	s->k = k;
	s->p = *p;
	s->block = gm_block_size(p);
	s->threads = gm_resolve_threads(p->threads);
	return GM_OK;
}

/* Take the problem: the confidence copies and G; the factors stay the caller's. */
static int
als_create(void **h, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	als_cpu    *s;
	int			rc;

	*h = NULL;
	s = calloc(1, sizeof(als_cpu));
	if (s == NULL)
		goto oom;
	s->C = *d->R;
	s->Ct = *d->Rt;
	s->V = d->R->data;
	s->Vt = d->Rt->data;
	s->C.data = malloc(sizeof(float) * (size_t) (d->R->nnz > 0 ? d->R->nnz : 1));
	s->Ct.data = malloc(sizeof(float) * (size_t) (d->Rt->nnz > 0 ? d->Rt->nnz : 1));
	if (!s->C.data || !s->Ct.data)
		goto oom;
	s->cb = cb;
	if ((rc = als_setup(s, d, p, err, errlen)) != GM_OK)
	{
		als_destroy(s);
		return rc;
	}
	snprintf(device, devlen, "cpu (%d threads)", s->threads);
	*h = s;
	return GM_OK;

oom:
	als_destroy(s);
	snprintf(err, errlen, "out of memory for implicit ALS (%lld nonzeros, %d factors)",
			 (long long) d->R->nnz, p->factors);
	return GM_ENOMEM;
}

/* Start over with parameters p on the same data (gm_algo_ops.reset). */
static int
als_reset(void *h, const gm_mf_data *d, const gm_mf_params *p, char *err,
		  size_t errlen)
{
	als_cpu    *s = h;

	if (s == NULL || d == NULL || p == NULL || d->R == NULL ||
		d->R->n_rows != s->C.n_rows || d->R->nnz != s->C.nnz)
	{
		snprintf(err, errlen, "invalid arguments to the CPU implicit ALS reset");
		return GM_EINVAL;
	}
	return als_setup(s, d, p, err, errlen);
}

/* Two sweeps an iteration: the users, then the items. */
static int
als_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

/*
 * Sweep 0 solves the users against G = alpha0 Y^T Y (+ reg I when nu = 0),
 * sweep 1 the items against X.  What a row costs, in multiply-adds: CG
 * (len + k) k per pass; exact len k^2 / 2 + k^3 / 6; block, per pass over
 * the blocks, len k (b / 2 + 2) + k (2 k + b^2 / 6).
 */
static int
als_begin_sweep(void *h, int side, gm_sweep *sw, char *err, size_t errlen)
{
	als_cpu    *s = h;
	const gm_csr *A = side == 0 ? &s->C : &s->Ct;
	double		k = s->k,
				b = s->block;
	int			rc;

	rc = gm_gram_polled(side == 0 ? s->Y : s->X, side == 0 ? s->C.n_cols : s->C.n_rows,
					 s->k, s->p.alpha0, s->p.nu == 0.0f ? s->p.regularization : 0.0f,
					 s->G, s->threads, s->cb);
	if (rc == GM_ECANCELED)
		snprintf(err, errlen, "training canceled");
	sw->n_rows = A->n_rows;
	sw->indptr = A->indptr;
	switch (s->p.solver)
	{
		case GM_SOLVER_EXACT:
			sw->row_work = k * k * k / 6.0 + k * k;
			sw->nnz_work = k * k / 2.0;
			break;
		case GM_SOLVER_BLOCK:
			sw->row_work = s->p.block_sweeps * k * (2.0 * k + b * b / 6.0);
			sw->nnz_work = s->p.block_sweeps * k * (b / 2.0 + 2.0);
			break;
		default:
			sw->row_work = k * k * s->p.cg_steps;
			sw->nnz_work = k * s->p.cg_steps;
			break;
	}
	return rc;
}

/* Solve rows [begin, end) of the sweep's side. */
static int
als_run(void *h, int side, int32_t begin, int32_t end, char *err, size_t errlen)
{
	als_cpu    *s = h;
	gm_als_side sd;
	int			rc;

	sd.C = side == 0 ? &s->C : &s->Ct;
	sd.X = side == 0 ? s->X : s->Y;
	sd.Y = side == 0 ? s->Y : s->X;
	sd.G = s->G;
	sd.reg = side == 0 ? s->reg_x : s->reg_y;
	sd.alpha0 = s->p.alpha0;
	sd.k = s->k;
	rc = gm_als_solve_rows(&sd, s->p.solver, s->p.cg_steps, s->block,
						   s->p.block_sweeps, begin, end, s->threads);
	if (rc != GM_OK)
		snprintf(err, errlen, "out of memory for the row solves (%d factors)", s->k);
	return rc;
}

/* The loss (the file's comment); implicit feedback has no RMSE. */
static int
als_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	als_cpu    *s = h;
	int			rc = loss_polled(&s->C, s->X, s->Y, s->k, s->p.alpha0,
								 s->p.regularization, s->reg_x, s->reg_y,
								 s->threads, s->cb, &m->loss);

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
	/* end_sweep, sync: none (the CPU works synchronously) */
	.evaluate = als_evaluate,
	.download = als_download,
	.destroy = als_destroy,
	.reset = als_reset,
};
