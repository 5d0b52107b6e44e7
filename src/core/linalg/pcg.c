/*
 * pcg.c: Jacobi-preconditioned conjugate gradient for sparse symmetric
 * positive-definite systems, on the CPU (multi-threaded, float64 or float32
 * vectors) or through the CUDA module's table, with the same algorithm and
 * the same stopping rule on both:
 *
 *   - the iteration of pcg_impl.h (two passes per iteration);
 *   - every check_every iterations the recurrence's ||b - A x|| is compared
 *     with tolerance ||b||; when it is below, b - A x is computed afresh in
 *     float64 from the float64 x.  Below the tolerance too: converged.  If
 *     not, the iteration restarts from the fresh residual (in float32 this
 *     is iterative refinement: x itself is float64);
 *     three fresh residuals in a row that do not halve the previous one
 *     mean the working precision cannot get further (stagnated).
 */
#include "gm_linalg.h"
#include "linalg_int.h"
#include "gm_util.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_CHECK_EVERY 8
#define STALL_LIMIT			3

typedef struct cg_cpu
{
	const gm_spmat *A;
	int64_t		n;
	int			nt;
	int64_t    *bounds;			/* nt + 1 row ranges */
	double	   *s;				/* the scaling S (1/sqrt(d) or 1) */
	double	   *dsq;			/* 1 / s, times 2^-F (the recurrence's scale) */
	double	   *rt;				/* float64 true residual b - A x */
	void	   *vh;				/* Â's values, working precision */
	void	   *y,
			   *r,
			   *p,
			   *q;				/* working precision */
	double	   *part;			/* 4 partial sums per range */
} cg_cpu;

#define T double
#define SFX _d
#include "pcg_impl.h"
#undef T
#undef SFX
#define T float
#define SFX _s
#include "pcg_impl.h"
#undef T
#undef SFX

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void
gm_cg_params_default(gm_cg_params *p)
{
	memset(p, 0, sizeof(*p));
	p->tolerance = 1e-8;
	p->max_iterations = 10000;
	p->preconditioner = GM_PRECOND_JACOBI;
	p->precision = GM_PRECISION_DOUBLE;
	p->check_every = DEFAULT_CHECK_EVERY;
	p->threads = 0;
	p->spmv = GM_SPMV_AUTO;
	p->gpu = NULL;
	p->base = 1;
}

/*
 * ||v|| in float64 from its sum of squares ss: when the squares left
 * double's range (ss infinite, or so small that they underflowed), again
 * with v scaled by its largest element, so that any finite v has a finite,
 * accurate norm.
 */
static double
norm2_rescue(const double *v, int64_t n, int nt, double ss)
{
	double		big = 0.0,
				s = 0.0;

	if (isfinite(ss) && ss >= 0x1p-900)
		return sqrt(ss);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(max:big)
	for (int64_t i = 0; i < n; i++)
		big = fmax(big, fabs(v[i]));
	if (big == 0.0 || !isfinite(big))
		return big;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+:s)
	for (int64_t i = 0; i < n; i++)
		s += (v[i] / big) * (v[i] / big);
	return big * sqrt(s);
}

/* ||v|| in float64 (finite for any finite v) */
static double
norm2(const double *v, int64_t n, int nt)
{
	double		s = 0.0;

#pragma omp parallel for num_threads(nt) schedule(static) reduction(+:s)
	for (int64_t i = 0; i < n; i++)
		s += v[i] * v[i];
	return norm2_rescue(v, n, nt, s);
}

/* rt = b - A x; returns ||rt|| */
static double
true_residual(const gm_spmat *A, const double *b, const double *x, double *rt,
			  int nt)
{
	double		s = 0.0;

	gm_spmv(A, x, rt, nt);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+:s)
	for (int64_t i = 0; i < A->n; i++)
	{
		rt[i] = b[i] - rt[i];
		s += rt[i] * rt[i];
	}
	return norm2_rescue(rt, A->n, nt, s);
}

double
gm_relative_residual(const gm_spmat *A, const double *b, const double *x,
					 int threads)
{
	int			nt = gm_la_threads(threads);
	double	   *rt = malloc(sizeof(double) * (size_t) A->n);
	double		bn,
				rn;

	if (rt == NULL)
		return NAN;
	rn = true_residual(A, b, x, rt, nt);
	bn = norm2(b, A->n, nt);
	if (bn == 0.0)
	{
		free(rt);
		return rn;				/* ||A x||, as b = 0 */
	}
	free(rt);
	return rn / bn;
}

static void
cg_cpu_free(cg_cpu *c)
{
	free(c->bounds);
	free(c->s);
	free(c->dsq);
	free(c->rt);
	free(c->vh);
	free(c->y);
	free(c->r);
	free(c->p);
	free(c->q);
	free(c->part);
}

static int
cg_cpu_solve(const gm_spmat *A, const double *b, double *x,
			 const gm_cg_params *prm, const gm_callbacks *cb,
			 gm_cg_result *res, char *err, size_t errlen)
{
	cg_cpu		c;
	int			single = prm->precision == GM_PRECISION_SINGLE;
	size_t		w = single ? sizeof(float) : sizeof(double);
	int64_t		n = A->n;
	int			m = prm->check_every > 0 ? prm->check_every : DEFAULT_CHECK_EVERY;
	double		bn,
				target,
				nr,
				last_true,
				rr;
	int			it = 0,
				since = 0,
				stall = 0,
				F = 0,
				rc = GM_OK;

	memset(&c, 0, sizeof(c));
	c.A = A;
	c.n = n;
	c.nt = gm_la_threads(prm->threads);
	if (n < 4096)
		c.nt = 1;
	c.bounds = malloc(sizeof(int64_t) * (size_t) (c.nt + 1));
	c.part = calloc((size_t) c.nt * 4, sizeof(double));
	c.s = malloc(sizeof(double) * (size_t) n);
	c.dsq = malloc(sizeof(double) * (size_t) n);
	c.rt = malloc(sizeof(double) * (size_t) n);
	c.vh = malloc(w * (size_t) (A->nnz > 0 ? A->nnz : 1));
	c.y = malloc(w * (size_t) n);
	c.r = malloc(w * (size_t) n);
	c.p = malloc(w * (size_t) n);
	c.q = malloc(w * (size_t) n);
	if (!c.bounds || !c.part || !c.s || !c.dsq || !c.rt || !c.vh || !c.y ||
		!c.r || !c.p || !c.q)
	{
		cg_cpu_free(&c);
		snprintf(err, errlen, "out of memory for the conjugate-gradient vectors (%lld rows)",
				 (long long) n);
		return GM_ENOMEM;
	}
	/* pass 1 streams the matrix, pass 2 about seven vector words a row */
	gm_spmv_partition(A, c.nt, 4, c.bounds);

	if (prm->preconditioner == GM_PRECOND_JACOBI)
	{
		double		dmax = 0.0;

		gm_spmat_diagonal(A, c.dsq);
#pragma omp parallel for num_threads(c.nt) schedule(static) reduction(max:dmax)
		for (int64_t i = 0; i < n; i++)
		{
			c.dsq[i] = sqrt(c.dsq[i]);
			c.s[i] = 1.0 / c.dsq[i];
			dmax = fmax(dmax, c.dsq[i]);
		}

		/*
		 * The recurrence's |S^-1 r|^2 sums squares of dsq_i r_i: for a
		 * diagonal far from 1 they are taken with dsq scaled by 2^-F (and
		 * the target with it), exactly, so that they stay within range.
		 */
		F = ilogb(dmax);
		if (F >= -400 && F <= 400)
			F = 0;
		for (int64_t i = 0; i < n && F != 0; i++)
			c.dsq[i] = ldexp(c.dsq[i], -F);
	}
	else
	{
		for (int64_t i = 0; i < n; i++)
			c.s[i] = c.dsq[i] = 1.0;
	}
	if (single)
		scale_values_s(A, c.s, c.vh, c.nt);
	else
		scale_values_d(A, c.s, c.vh, c.nt);

	bn = norm2(b, n, c.nt);
	target = prm->tolerance * bn;
	nr = true_residual(A, b, x, c.rt, c.nt);
	last_true = nr;
	rr = single ? replace_residual_s(&c, 1) : replace_residual_d(&c, 1);

	res->replacements = 0;
	res->stagnated = 0;
	res->converged = nr <= target;
	while (!res->converged)
	{
		int			verify = 0;

		if (rr == 0.0)
			verify = 1;			/* r is exactly zero: nothing left to iterate on */
		else
		{
			int			check = (++since == m) || (it + 1 == prm->max_iterations);
			double		rru = 0.0,
						pq = 0.0;
			int			broke;

			if (it >= prm->max_iterations)
				break;
			broke = single ? iterate_s(&c, &rr, check, &rru, &pq)
				: iterate_d(&c, &rr, check, &rru, &pq);
			if (broke && pq == 0.0)
				verify = 1;		/* p underflowed: nothing to learn from the recurrence */
			else if (broke)
			{
				snprintf(err, errlen,
						 "the matrix is not positive definite: p'Ap = %.6g at iteration %d of "
						 "the conjugate gradient", pq, it + 1);
				rc = GM_EINVAL;
				break;
			}
			else
			{
				it++;
				if (check)
				{
					since = 0;
					verify = sqrt(rru) <= ldexp(target, -F);
				}
			}
		}
		if (verify)
		{
			/* the recurrence says converged: ask the float64 x */
			if (single)
				fold_s(&c, x);
			else
				fold_d(&c, x);
			nr = true_residual(A, b, x, c.rt, c.nt);
			if (nr <= target)
			{
				res->converged = 1;
				break;
			}
			res->replacements++;
			stall = nr > 0.5 * last_true ? stall + 1 : 0;
			last_true = nr;

			/*
			 * restart from the fresh residual: the old direction p can be
			 * far smaller than the new residual (a float32 recurrence runs
			 * on below what float32 x can hold), and keeping it gives a
			 * huge first step
			 */
			rr = single ? replace_residual_s(&c, 1) : replace_residual_d(&c, 1);
			if ((stall >= STALL_LIMIT && prm->tolerance > 0.0) || rr == 0.0)
			{
				/* no progress, or a residual the working precision rounds to 0 */
				res->stagnated = 1;
				break;
			}
		}
		if (cb && cb->should_stop && cb->should_stop(cb->arg))
		{
			snprintf(err, errlen, "the conjugate-gradient solve was canceled");
			rc = GM_ECANCELED;
			break;
		}
	}
	if (single)
		fold_s(&c, x);
	else
		fold_d(&c, x);
	res->iterations = it;
	cg_cpu_free(&c);
	snprintf(res->device, sizeof(res->device), "cpu (%d threads)", gm_la_threads(prm->threads));
	return rc;
}

/* solves whose scaled residual stays within 2^+-RHS_SCALE_BAND are left as they are */
#define RHS_SCALE_BAND 400

/*
 * The exponent E that brings max_i |s_i b_i| (s_i = 1/sqrt(A_ii) with
 * Jacobi, else 1) near 1, and *bs = b / 2^E (a new array; b itself when E
 * is 0, as for any system whose scale is within 2^+-RHS_SCALE_BAND: those
 * solve exactly as without scaling).  INT_MIN when out of memory.
 */
static int
rhs_scale(const gm_spmat *A, const double *b, int jacobi, int nt, const double **bs)
{
	double	   *d = NULL,
			   *out;
	int			e = INT_MIN;

	*bs = b;
	if (jacobi)
	{
		d = malloc(sizeof(double) * (size_t) A->n);
		if (d == NULL)
			return INT_MIN;
		gm_spmat_diagonal(A, d);
	}
	for (int64_t i = 0; i < A->n; i++)
	{
		int			ei;

		if (b[i] == 0.0)
			continue;
		/* |s_i b_i| in [2^ei / 2, 2^ei * 2]: ilogb is exact, sqrt halves it */
		ei = ilogb(b[i]) + 1 - (d ? ilogb(d[i]) / 2 : 0);
		if (ei > e)
			e = ei;
	}
	free(d);
	if (e == INT_MIN || (e >= -RHS_SCALE_BAND && e <= RHS_SCALE_BAND))
		return 0;
	out = malloc(sizeof(double) * (size_t) A->n);
	if (out == NULL)
		return INT_MIN;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < A->n; i++)
		out[i] = ldexp(b[i], -e);
	*bs = out;
	return e;
}

/* x *= 2^E; GM_ERANGE naming the first element beyond double's range */
static int
rhs_unscale(double *x, int64_t n, int e, char *err, size_t errlen)
{
	for (int64_t i = 0; i < n; i++)
	{
		double		v = ldexp(x[i], e);

		if (!isfinite(v))
		{
			if (isfinite(x[i]))
			{
				/* its size in decimal, from the scaled value */
				double		l10 = log10(fabs(x[i])) + e * log10(2.0);
				double		ip = floor(l10);

				snprintf(err, errlen, "the solution overflows double precision: x element %lld is about %s%.3fe+%.0f "
						 "(the largest double is about 1.8e+308)",
						 (long long) (i + 1), x[i] < 0 ? "-" : "", pow(10.0, l10 - ip), ip);
			}
			else
				snprintf(err, errlen, "the conjugate-gradient iteration left double precision's range: "
						 "x element %lld is %s", (long long) (i + 1), isnan(x[i]) ? "NaN" : "infinite");
			return GM_ERANGE;
		}
		x[i] = v;
	}
	return GM_OK;
}

int
gm_cg_solve(const gm_spmat *A, const double *b, double *x,
			const gm_cg_params *p, const gm_callbacks *cb,
			gm_cg_result *res, char *err, size_t errlen)
{
	double		t0 = now_seconds();
	int			nt = gm_la_threads(p->threads);
	int			rc;
	int			E;
	const double *bs;

	memset(res, 0, sizeof(*res));
	if (A->n <= 0 || A->nnz <= 0)
	{
		snprintf(err, errlen, "the matrix is empty: it has no entries");
		return GM_EINVAL;
	}
	if (!(p->tolerance >= 0.0) || !isfinite(p->tolerance))
	{
		snprintf(err, errlen, "tolerance must be a finite number >= 0, not %g", p->tolerance);
		return GM_EINVAL;
	}
	if (p->max_iterations < 0)
	{
		snprintf(err, errlen, "max_iterations must be >= 0, not %d", p->max_iterations);
		return GM_EINVAL;
	}
	for (int64_t i = 0; i < A->n; i++)
	{
		if (!isfinite(b[i]) || !isfinite(x[i]))
		{
			snprintf(err, errlen, "%s element %lld is %s",
					 isfinite(b[i]) ? "initial guess" : "right-hand side",
					 (long long) (i + 1), isnan(isfinite(b[i]) ? x[i] : b[i]) ? "NaN" : "infinite");
			return GM_EINVAL;
		}
	}
	if (p->preconditioner == GM_PRECOND_JACOBI &&
		(rc = gm_spmat_check_diagonal(A, p->base, err, errlen)) != GM_OK)
		return rc;
	if (norm2(b, A->n, nt) == 0.0)
	{
		/* b = 0: x = 0 exactly */
		memset(x, 0, sizeof(double) * (size_t) A->n);
		res->converged = 1;
		res->seconds = now_seconds() - t0;
		snprintf(res->device, sizeof(res->device), "none (b = 0)");
		return GM_OK;
	}

	/*
	 * The solve's scale: b and x divided by 2^E (exactly) so that the
	 * residual the iteration works on, S b with S = D^-1/2 (Jacobi) or I,
	 * is of order 1, when it would otherwise come near double's range.
	 */
	E = rhs_scale(A, b, p->preconditioner == GM_PRECOND_JACOBI, nt, &bs);
	if (E == INT_MIN)
	{
		snprintf(err, errlen, "out of memory for the right-hand side (%lld rows)",
				 (long long) A->n);
		return GM_ENOMEM;
	}
	for (int64_t i = 0; i < A->n && E != 0; i++)
		x[i] = ldexp(x[i], -E);

	if (p->gpu != NULL)
	{
		void	   *h = NULL;

		char		devname[128];

		rc = p->gpu->sparse_create(&h, A, p->precision, devname, sizeof(devname), err, errlen);
		if (rc == GM_OK)
			rc = p->gpu->sparse_cg(h, bs, x, p, cb, res, err, errlen);
		if (h)
			p->gpu->sparse_destroy(h);
	}
	else
		rc = cg_cpu_solve(A, bs, x, p, cb, res, err, errlen);
	if (rc == GM_OK)
	{
		/* the answer's own float64 residual, whatever computed it (scale-free) */
		res->residual = gm_relative_residual(A, bs, x, p->threads);
		res->converged = res->residual <= p->tolerance;
		rc = rhs_unscale(x, A->n, E, err, errlen);
	}
	else
		for (int64_t i = 0; i < A->n && E != 0; i++)
			x[i] = ldexp(x[i], E);	/* the last iterate, as far as it goes */
	if (bs != b)
		free((double *) bs);
	res->seconds = now_seconds() - t0;
	return rc;
}
