/*
 * ccd.c: CCD++ (Yu, Hsieh, Si, Dhillon 2012) for explicit ratings on the
 * CPU (OpenMP), the table gm_cpu_ccd_ops.
 *
 * Objective (gm_explicit.h): sum_(i,j) (r_ij - mu - b_i - c_j - w_i.h_j)^2
 * + lambda (sum_i n_i (|w_i|^2 + b_i^2) + sum_j n_j (|h_j|^2 + c_j^2)),
 * n_i and n_j the rows' numbers of ratings: the weighted lambda of explicit
 * ALS (als_explicit.c), so that one regularization means the same for both;
 * without biases, CCD++ with that penalty.  Every coordinate update of row
 * i therefore uses lambda n_i where plain CCD++ has lambda.
 * The order of work is gm_ccd_plan.h's (shared with cuda/train/ccd.cu): entries
 * (user biases, item biases, features 0 .. k-1) in turn, a CSR pass per
 * user-side update and a CSC pass per item-side update, each applying the
 * rank-one terms queued for its copy of the residual while it reads it.
 * evaluate() reports loss = objective / nnz and
 * rmse = sqrt(sum e_ij^2 / nnz) over the training ratings.
 *
 * Factors are kept feature-major (one contiguous vector per feature, as on
 * the GPU); download() writes them back row-major.
 */
#include "gm_explicit.h"
#include "gm_ccd_plan.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Loops over fewer elements than this run on one thread: a parallel region
 * costs more than they do (a CCD++ iteration has 2k of them).
 */
#define GM_CCD_PAR_MIN 65536

typedef struct ccd_cpu
{
	gm_ccd_plan plan;
	gm_ccd_step step;
	const gm_csr *A[2];			/* R (rows: users), Rt (rows: items) */
	int32_t		n[2];
	int64_t		nnz;
	int			k;
	float		lambda;
	int			threads;
	int			biases;
	double		mu;
	float	   *vec[2];			/* side s: k features, bias, slots; n[s] floats each */
	float	   *res[2];			/* the residual in CSR (0) and CSC (1) order */
	float	   *rowpack[2];		/* 4 floats per row of a pass's own side */
	float	   *colpack[2];		/* 4 floats per entry of the gathered side */
} ccd_cpu;

/* Live vector id on side s, or NULL for the all-ones vector. */
static inline float *
vec_of(ccd_cpu *c, int s, int id)
{
	return id == GM_CCD_ONES ? NULL : c->vec[s] + (size_t) id * c->n[s];
}

/* Free the state (safe on NULL and half-built states). */
static void
ccd_destroy(void *h)
{
	ccd_cpu    *c = h;

	if (c == NULL)
		return;
	for (int s = 0; s < 2; s++)
	{
		free(c->vec[s]);
		free(c->res[s]);
		free(c->rowpack[s]);
		free(c->colpack[s]);
	}
	free(c);
}

/*
 * The residual r - mu - b_i - c_j - x_i.y_j of every entry of A (rows of
 * side s), X the rows' factors and Y the columns', both row-major.
 */
static void
initial_residual(const gm_csr *A, const float *X, const float *Y, int k,
				 const float *brow, const float *bcol, double mu, float *res,
				 int nt)
{
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt)
	for (int32_t i = 0; i < A->n_rows; i++)
	{
		const float *x = X + (size_t) i * k;
		double		bi = brow ? brow[i] : 0.0;

		for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++)
		{
			int32_t		j = A->indices[e];
			const float *y = Y + (size_t) j * k;
			double		dot = 0.0;

			for (int f = 0; f < k; f++)
				dot += (double) x[f] * y[f];
			res[e] = (float) (A->data[e] - mu - bi - (bcol ? bcol[j] : 0.0) - dot);
		}
	}
}

/* Copy the model feature-major, compute the residual in both orders. */
static int
ccd_create(void **h, const gm_mf_data *d, const gm_mf_params *p,
		   const gm_callbacks *cb, char *device, size_t devlen,
		   char *err, size_t errlen)
{
	ccd_cpu    *c;
	int			k = p->factors;
	int			nvec = k + 1 + GM_CCD_SLOTS;

	*h = NULL;
	if (gm_explicit_check("ccd", p, d, 1, err, errlen) != GM_OK)
		return GM_EINVAL;
	c = calloc(1, sizeof(ccd_cpu));
	if (c == NULL)
		goto oom;
	c->A[0] = d->R;
	c->A[1] = d->Rt;
	c->n[0] = d->R->n_rows;
	c->n[1] = d->R->n_cols;
	c->nnz = d->R->nnz;
	c->k = k;
	c->lambda = p->regularization;
	c->threads = gm_resolve_threads(p->threads);
	c->biases = p->biases ? 1 : 0;
	c->mu = c->biases ? d->global_mean : 0.0;
	gm_ccd_plan_init(&c->plan, k, p->inner_iterations, c->biases);
	for (int s = 0; s < 2; s++)
	{
		size_t		n = c->n[s] > 0 ? (size_t) c->n[s] : 1;

		c->vec[s] = calloc(n * nvec, sizeof(float));
		c->res[s] = malloc(sizeof(float) * (size_t) (c->nnz > 0 ? c->nnz : 1));
		c->rowpack[s] = malloc(sizeof(float) * 4 * n);
		c->colpack[s] = malloc(sizeof(float) * 4 * n);
		if (!c->vec[s] || !c->res[s] || !c->rowpack[s] || !c->colpack[s])
			goto oom;
	}

	/* feature-major copies of the factors, the biases after them */
	for (int s = 0; s < 2; s++)
	{
		const float *F = s == 0 ? d->X : d->Y;
		const float *bias = s == 0 ? d->user_bias : d->item_bias;
		float	   *V = c->vec[s];
		int32_t		n = c->n[s];

#pragma omp parallel for schedule(static) num_threads(c->threads)
		for (int32_t i = 0; i < n; i++)
		{
			for (int f = 0; f < k; f++)
				V[(size_t) f * n + i] = F[(size_t) i * k + f];
			V[(size_t) k * n + i] = c->biases ? bias[i] : 0.0f;
		}
	}
	initial_residual(d->R, d->X, d->Y, k, c->biases ? d->user_bias : NULL,
					 c->biases ? d->item_bias : NULL, c->mu, c->res[0], c->threads);
	initial_residual(d->Rt, d->Y, d->X, k, c->biases ? d->item_bias : NULL,
					 c->biases ? d->user_bias : NULL, c->mu, c->res[1], c->threads);
	snprintf(device, devlen, "cpu (%d threads)", c->threads);
	*h = c;
	return GM_OK;

oom:
	ccd_destroy(c);
	snprintf(err, errlen, "ccd: out of memory for %lld ratings at %d factors",
			 (long long) d->R->nnz, k);
	return GM_ENOMEM;
}

/* Sweeps per outer iteration (the plan's). */
static int
ccd_n_sweeps(void *h)
{
	return ((ccd_cpu *) h)->plan.n_sweeps;
}

/*
 * Fill the packs of a pass over side s's rows: rowpack[i] = (c0, a1, a2, 0)
 * for its rows, colpack[j] = (g0, g1, g2, cur) for the gathered side, so that
 * the residual gains c0[i] + g0[j] + a1[i] g1[j] + a2[i] g2[j].
 */
static void
fill_packs(ccd_cpu *c, int s, const gm_ccd_pack *pk)
{
	int			g = 1 - s;
	float	   *rp = c->rowpack[s],
			   *cp = c->colpack[g];
	const float *fixed[GM_CCD_MAX_GENERAL] = {NULL, NULL};
	const float *gath[GM_CCD_MAX_GENERAL] = {NULL, NULL};
	const float *cur = vec_of(c, g, pk->cur);

	for (int m = 0; m < pk->n_gen; m++)
	{
		fixed[m] = vec_of(c, s, pk->gen_fixed[m]);
		gath[m] = vec_of(c, g, pk->gen_gathered[m]);
	}
#pragma omp parallel num_threads(c->threads) if (c->n[s] + c->n[g] > GM_CCD_PAR_MIN)
	{
#pragma omp for schedule(static) nowait
		for (int32_t i = 0; i < c->n[s]; i++)
		{
			float		c0 = 0.0f;

			for (int m = 0; m < pk->n_c0; m++)
			{
				const float *v = vec_of(c, s, pk->c0_vec[m]);

				c0 += pk->c0_scale[m] * (v ? v[i] : 1.0f);
			}
			rp[4 * (size_t) i] = c0;
			rp[4 * (size_t) i + 1] = pk->n_gen > 0 ? pk->gen_scale[0] * fixed[0][i] : 0.0f;
			rp[4 * (size_t) i + 2] = pk->n_gen > 1 ? pk->gen_scale[1] * fixed[1][i] : 0.0f;
			rp[4 * (size_t) i + 3] = 0.0f;
		}
#pragma omp for schedule(static)
		for (int32_t j = 0; j < c->n[g]; j++)
		{
			float		g0 = 0.0f;

			for (int m = 0; m < pk->n_g0; m++)
				g0 += pk->g0_scale[m] * vec_of(c, g, pk->g0_vec[m])[j];
			cp[4 * (size_t) j] = g0;
			cp[4 * (size_t) j + 1] = pk->n_gen > 0 ? gath[0][j] : 0.0f;
			cp[4 * (size_t) j + 2] = pk->n_gen > 1 ? gath[1][j] : 0.0f;
			cp[4 * (size_t) j + 3] = cur ? cur[j] : 1.0f;
		}
	}
}

/* Plan sweep s: take its snapshots, pack its terms, describe its rows. */
static int
ccd_begin_sweep(void *h, int s, gm_sweep *sw, char *err, size_t errlen)
{
	ccd_cpu    *c = h;
	gm_ccd_step *st = &c->step;
	gm_ccd_pack pk;

	if (gm_ccd_plan_step(&c->plan, s, st) != 0 ||
		gm_ccd_make_pack(st->terms, st->n_terms, st->side, st->cur, &pk) != 0)
	{
		snprintf(err, errlen, "ccd: internal error planning sweep %d", s);
		return GM_EINVAL;
	}
	for (int m = 0; m < st->n_copies; m++)
		memcpy(vec_of(c, st->copies[m].side, st->copies[m].dst),
			   vec_of(c, st->copies[m].side, st->copies[m].src),
			   sizeof(float) * c->n[st->copies[m].side]);
	fill_packs(c, st->side, &pk);

	sw->n_rows = c->n[st->side];
	sw->indptr = c->A[st->side]->indptr;
	sw->row_work = 8.0;
	sw->nnz_work = st->n_terms > 0 ? 6.0 : 2.0;
	return GM_OK;
}

/*
 * One pass over rows [b, e) of A: add the packed terms to the residual (when
 * write), then the closed-form update with the weighted lambda
 *     target[i] = sum_j res_ij cur_j / (lambda n_i + sum_j cur_j^2),
 * n_i the row's number of entries (an empty row gets 0).
 */
GM_HOT static void
ccd_rows(const gm_csr *A, float *res, const float *rp, const float *cp,
		 int write, float lambda, float *target, int32_t b, int32_t e, int nt)
{
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt) \
	if (A->indptr[e] - A->indptr[b] + (e - b) > GM_CCD_PAR_MIN)
	for (int32_t i = b; i < e; i++)
	{
		const int32_t *idx = A->indices;
		double		num = 0.0,
					den = (double) lambda * (double) (A->indptr[i + 1] - A->indptr[i]);

		if (write)
		{
			float		c0 = rp[4 * (size_t) i],
						a1 = rp[4 * (size_t) i + 1],
						a2 = rp[4 * (size_t) i + 2];

			for (int64_t x = A->indptr[i]; x < A->indptr[i + 1]; x++)
			{
				const float *g = cp + 4 * (size_t) idx[x];
				float		r = res[x] + (c0 + g[0] + a1 * g[1] + a2 * g[2]);

				res[x] = r;
				num += (double) r * g[3];
				den += (double) g[3] * g[3];
			}
		}
		else
		{
			for (int64_t x = A->indptr[i]; x < A->indptr[i + 1]; x++)
			{
				const float *g = cp + 4 * (size_t) idx[x];

				num += (double) res[x] * g[3];
				den += (double) g[3] * g[3];
			}
		}
		target[i] = den > 0.0 ? (float) (num / den) : 0.0f;
	}
}

/* Rows [begin, end) of the current sweep's pass. */
static int
ccd_run(void *h, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	ccd_cpu    *c = h;
	gm_ccd_step *st = &c->step;
	int			side = st->side;

	(void) s;
	if (begin < 0 || end > c->n[side] || begin > end)
	{
		snprintf(err, errlen, "ccd: rows [%d, %d) outside the sweep", begin, end);
		return GM_EINVAL;
	}
	ccd_rows(c->A[side], c->res[side], c->rowpack[side], c->colpack[1 - side],
			 st->n_terms > 0, c->lambda, vec_of(c, side, st->target),
			 begin, end, c->threads);
	return GM_OK;
}

/*
 * sum_i n_i sum_f V[f * n + i]^2 in float64 over nvec feature-major vectors
 * of n entries, n_i = indptr[i + 1] - indptr[i]: the weighted penalty of one
 * side.
 */
static double
weighted_squares(const float *V, int32_t n, int nvec, const int64_t *indptr, int nt)
{
	double		s = 0.0;

#pragma omp parallel for reduction(+:s) schedule(static) num_threads(nt) \
	if ((int64_t) n * nvec > GM_CCD_PAR_MIN)
	for (int32_t i = 0; i < n; i++)
	{
		double		sq = 0.0;

		for (int f = 0; f < nvec; f++)
			sq += (double) V[(size_t) f * n + i] * V[(size_t) f * n + i];
		s += sq * (double) (indptr[i + 1] - indptr[i]);
	}
	return s;
}

/* Loss and training RMSE (gm_explicit.h) of the current model. */
static int
ccd_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	ccd_cpu    *c = h;
	gm_ccd_term terms[GM_CCD_MAX_TERMS + 1];
	gm_ccd_pack pk;
	int			n_terms = gm_ccd_plan_eval(&c->plan, terms);
	const gm_csr *A = c->A[0];
	const float *rp = c->rowpack[0],
			   *cp = c->colpack[1];
	double		sse = 0.0,
				pen;

	if (gm_ccd_make_pack(terms, n_terms, 0, GM_CCD_ONES, &pk) != 0)
	{
		snprintf(err, errlen, "ccd: internal error evaluating the loss");
		return GM_EINVAL;
	}
	fill_packs(c, 0, &pk);
#pragma omp parallel for reduction(+:sse) schedule(dynamic, 64) num_threads(c->threads) \
	if (c->nnz > GM_CCD_PAR_MIN)
	for (int32_t i = 0; i < A->n_rows; i++)
	{
		float		c0 = rp[4 * (size_t) i],
					a1 = rp[4 * (size_t) i + 1],
					a2 = rp[4 * (size_t) i + 2];

		for (int64_t x = A->indptr[i]; x < A->indptr[i + 1]; x++)
		{
			const float *g = cp + 4 * (size_t) A->indices[x];
			double		r = c->res[0][x] + (c0 + g[0] + a1 * g[1] + a2 * g[2]);

			sse += r * r;
		}
	}
	pen = weighted_squares(c->vec[0], c->n[0], c->k + c->biases, c->A[0]->indptr, c->threads) +
		weighted_squares(c->vec[1], c->n[1], c->k + c->biases, c->A[1]->indptr, c->threads);
	m->loss = (sse + c->lambda * pen) / (double) (c->nnz > 0 ? c->nnz : 1);
	m->rmse = sqrt(sse / (double) (c->nnz > 0 ? c->nnz : 1));
	return GM_OK;
}

/* Write the model back row-major into d's arrays. */
static int
ccd_download(void *h, gm_mf_data *d, char *err, size_t errlen)
{
	ccd_cpu    *c = h;
	int			k = c->k;

	(void) err;
	(void) errlen;
	for (int s = 0; s < 2; s++)
	{
		float	   *F = s == 0 ? d->X : d->Y;
		float	   *bias = s == 0 ? d->user_bias : d->item_bias;
		const float *V = c->vec[s];
		int32_t		n = c->n[s];

#pragma omp parallel for schedule(static) num_threads(c->threads)
		for (int32_t i = 0; i < n; i++)
		{
			for (int f = 0; f < k; f++)
				F[(size_t) i * k + f] = V[(size_t) f * n + i];
			if (c->biases && bias)
				bias[i] = V[(size_t) k * n + i];
		}
	}
	return GM_OK;
}

const gm_algo_ops gm_cpu_ccd_ops = {
	"cpu",
	ccd_create,
	ccd_n_sweeps,
	ccd_begin_sweep,
	ccd_run,
	NULL,						/* end_sweep: nothing to finish */
	NULL,						/* sync: nothing queued on the CPU */
	ccd_evaluate,
	ccd_download,
	ccd_destroy,
	NULL						/* reset: none (the loop destroys and creates instead) */
};
