/*
 * mf_loop.c: the training loop every matrix-factorization algorithm runs in
 * (gm_mf_train), and the parameters' defaults, checks and names.
 *
 * The loop drives an algorithm's table of operations (gm_algo.h) the same way
 * on either backend.  A sweep's rows are handed to run() in slices whose work
 * stays under a budget, so that a cancel is seen quickly: after the slices
 * that bring the work since the last poll up to the budget, the loop waits for
 * the backend (sync) and polls should_stop; and at the end of every
 * iteration.  A sweep's short last slice carries its work into the next
 * sweep, so algorithms with many small sweeps (CCD++'s rank-one updates) do
 * not wait on the GPU after each of them.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Multiply-adds between polls.  CPU: ~2^26 per thread (tens of ms), large
 * enough that a popular item's long row shares its slice with others.
 * CUDA: ~2^32, about 15 slices per sweep at k = 256 on ML-20M, each a few
 * milliseconds; smaller slices underfill the GPU (measured: 1.9x slower at
 * 2^28, test/bench/gpu/README.md).
 */
#define GM_CPU_BUDGET_PER_THREAD	67108864.0
#define GM_CUDA_BUDGET				4294967296.0

static const char *const algorithm_names[GM_ALG_COUNT] = {
	[GM_ALG_ALS_IMPLICIT] = "als",
	[GM_ALG_ALS_EXPLICIT] = "als_explicit",
	[GM_ALG_CCD] = "ccd",
};

/* The SQL name of an algorithm, or NULL. */
const char *
gm_algorithm_name(gm_algorithm a)
{
	if ((int) a < 0 || a >= GM_ALG_COUNT)
		return NULL;
	return algorithm_names[a];
}

/* The algorithm an SQL name stands for. */
int
gm_algorithm_from_name(const char *name, gm_algorithm *a)
{
	for (int i = 0; name != NULL && i < GM_ALG_COUNT; i++)
		if (strcmp(name, algorithm_names[i]) == 0)
		{
			*a = (gm_algorithm) i;
			return GM_OK;
		}
	return GM_EINVAL;
}

/* Does the algorithm fit ratings (and so have biases and an RMSE)? */
static int
is_explicit(gm_algorithm a)
{
	return a == GM_ALG_ALS_EXPLICIT || a == GM_ALG_CCD;
}

/* Defaults (see gm_core.h). */
void
gm_mf_params_defaults(gm_mf_params *p, gm_algorithm a)
{
	memset(p, 0, sizeof(*p));
	p->algorithm = a;
	p->backend = GM_BACKEND_CPU;
	p->factors = 64;
	p->iterations = 15;
	p->regularization = is_explicit(a) ? 0.05f : 0.01f;
	p->seed = 42;
	p->threads = 0;
	p->tolerance = 0.0;
	p->alpha = 1.0f;
	p->cg_steps = 3;
	p->alpha0 = 1.0f;
	p->nu = 0.0f;
	p->solver = GM_SOLVER_CG;
	p->block_size = 0;
	p->inner_iterations = 3;
	p->biases = is_explicit(a) ? 1 : 0;
}

/* Writes the message for an integer out of [lo, hi]; returns GM_EINVAL. */
static int
bad_int(const char *name, int v, int lo, int hi, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s must be between %d and %d, not %d", name, lo, hi, v);
	return GM_EINVAL;
}

/* Writes the message for a real that must be finite and >= lo; returns GM_EINVAL. */
static int
bad_real(const char *name, double v, double lo, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s must be a finite number >= %g, not %g", name, lo, v);
	return GM_EINVAL;
}

#define CHECK_INT(name, v, lo, hi) \
	do { if ((v) < (lo) || (v) > (hi)) return bad_int(name, v, lo, hi, err, errlen); } while (0)
#define CHECK_REAL(name, v, lo) \
	do { if (!isfinite(v) || (v) < (lo)) return bad_real(name, v, lo, err, errlen); } while (0)

/* Range checks of the fields that apply to p->algorithm. */
int
gm_mf_params_check(const gm_mf_params *p, char *err, size_t errlen)
{
	if ((int) p->algorithm < 0 || p->algorithm >= GM_ALG_COUNT)
	{
		snprintf(err, errlen, "unknown algorithm %d", (int) p->algorithm);
		return GM_EINVAL;
	}
	if (p->backend != GM_BACKEND_CPU && p->backend != GM_BACKEND_CUDA)
	{
		snprintf(err, errlen, "unknown backend %d", (int) p->backend);
		return GM_EINVAL;
	}
	CHECK_INT("factors", p->factors, 1, 1024);
	CHECK_INT("iterations", p->iterations, 1, 1000000);
	if (p->threads > 1024)
	{
		snprintf(err, errlen, "threads must be at most 1024 (0 or less: one per core), not %d",
				 p->threads);
		return GM_EINVAL;
	}
	CHECK_REAL("regularization", p->regularization, 0.0);
	CHECK_REAL("tolerance", p->tolerance, 0.0);
	if (p->algorithm == GM_ALG_ALS_IMPLICIT)
	{
		CHECK_REAL("alpha", p->alpha, 0.0);
		CHECK_REAL("alpha0", p->alpha0, 0.0);
		CHECK_REAL("nu", p->nu, 0.0);
		if (p->solver != GM_SOLVER_CG && p->solver != GM_SOLVER_BLOCK &&
			p->solver != GM_SOLVER_EXACT)
		{
			snprintf(err, errlen, "unknown solver %d", (int) p->solver);
			return GM_EINVAL;
		}
		if (p->solver == GM_SOLVER_CG)
			CHECK_INT("cg_steps", p->cg_steps, 1, 1024);
		if (p->solver == GM_SOLVER_BLOCK)
			CHECK_INT("block_size", p->block_size, 1, p->factors);
	}
	else
	{
		CHECK_INT("biases", p->biases, 0, 1);
		if (p->algorithm == GM_ALG_CCD)
			CHECK_INT("inner_iterations", p->inner_iterations, 1, 1000);
	}
	return GM_OK;
}

/* Shapes and arrays of d that p needs. */
static int
check_data(const gm_mf_params *p, const gm_mf_data *d, char *err, size_t errlen)
{
	const gm_csr *R = d ? d->R : NULL,
			   *Rt = d ? d->Rt : NULL;

	if (R == NULL || Rt == NULL || R->indptr == NULL || Rt->indptr == NULL)
	{
		snprintf(err, errlen, "training data: R and its transpose are required");
		return GM_EINVAL;
	}
	if (R->n_rows < 1 || R->n_cols < 1 || Rt->n_rows != R->n_cols ||
		Rt->n_cols != R->n_rows || Rt->nnz != R->nnz || R->nnz < 0 ||
		R->indptr[R->n_rows] != R->nnz || Rt->indptr[Rt->n_rows] != Rt->nnz ||
		(R->nnz > 0 && (!R->indices || !R->data || !Rt->indices || !Rt->data)))
	{
		snprintf(err, errlen,
				 "training data: R (%d x %d, %lld nonzeros) and Rt (%d x %d, %lld nonzeros) are not a matrix and its transpose",
				 R->n_rows, R->n_cols, (long long) R->nnz, Rt->n_rows, Rt->n_cols,
				 (long long) Rt->nnz);
		return GM_EINVAL;
	}
	if (d->X == NULL || d->Y == NULL)
	{
		snprintf(err, errlen, "training data: the factor arrays X and Y are required");
		return GM_EINVAL;
	}
	if (is_explicit(p->algorithm) && p->biases &&
		(d->user_bias == NULL || d->item_bias == NULL))
	{
		snprintf(err, errlen, "training data: biases are on but the bias arrays are missing");
		return GM_EINVAL;
	}
	return GM_OK;
}

/* The starting model (see gm_mf_train). */
static void
init_model(const gm_mf_params *p, gm_mf_data *d)
{
	gm_factors_init(d->X, d->R->n_rows, p->factors, p->seed, 0);
	gm_factors_init(d->Y, d->R->n_cols, p->factors, p->seed, 1);
	d->global_mean = 0.0;
	if (is_explicit(p->algorithm) && p->biases)
	{
		double		sum = 0.0;

		memset(d->user_bias, 0, sizeof(float) * (size_t) d->R->n_rows);
		memset(d->item_bias, 0, sizeof(float) * (size_t) d->R->n_cols);
		for (int64_t e = 0; e < d->R->nnz; e++)
			sum += d->R->data[e];
		d->global_mean = d->R->nnz > 0 ? sum / (double) d->R->nnz : 0.0;
	}
}

/* Has the caller asked to stop? */
static int
stop_requested(const gm_callbacks *cb)
{
	return cb && cb->should_stop && cb->should_stop(cb->arg);
}

/*
 * The end of the slice of sw's rows that starts at begin: rows are added
 * while the work is under budget (so a slice's work reaches the budget
 * unless the sweep ends), at least one row.  *work gets the slice's work.
 */
static int32_t
slice_end(const gm_sweep *sw, int32_t begin, double budget, double *work)
{
	double		w = 0.0;
	int32_t		end = begin;

	while (end < sw->n_rows && (end == begin || w < budget))
	{
		double		len = sw->indptr ? (double) (sw->indptr[end + 1] - sw->indptr[end]) : 0.0;

		w += sw->row_work + sw->nnz_work * len;
		end++;
	}
	*work = w;
	return end;
}

/* Waits for the backend and asks the caller whether to stop. */
static int
sync_and_poll(const gm_algo_ops *ops, void *h, const gm_callbacks *cb,
			  char *err, size_t errlen)
{
	int			rc = ops->sync(h, err, errlen);

	if (rc != GM_OK)
		return rc;
	if (stop_requested(cb))
	{
		snprintf(err, errlen, "training canceled");
		return GM_ECANCELED;
	}
	return GM_OK;
}

/* One iteration: every sweep, its rows in slices; *since_poll carries over. */
static int
iteration(const gm_algo_ops *ops, void *h, int n_sweeps, double budget,
		  double *since_poll, const gm_callbacks *cb, char *err, size_t errlen)
{
	int			rc;

	for (int s = 0; s < n_sweeps; s++)
	{
		gm_sweep	sw;

		memset(&sw, 0, sizeof(sw));
		if ((rc = ops->begin_sweep(h, s, &sw, err, errlen)) != GM_OK)
			return rc;
		for (int32_t b = 0; b < sw.n_rows;)
		{
			double		work;
			int32_t		e = slice_end(&sw, b, budget, &work);

			if ((rc = ops->run(h, s, b, e, err, errlen)) != GM_OK)
				return rc;
			b = e;
			*since_poll += work;
			/* wait for the work, so a cancel is seen within one budget's time */
			if (*since_poll >= budget)
			{
				*since_poll = 0.0;
				if ((rc = sync_and_poll(ops, h, cb, err, errlen)) != GM_OK)
					return rc;
			}
		}
		if ((rc = ops->end_sweep(h, s, err, errlen)) != GM_OK)
			return rc;
	}
	*since_poll = 0.0;
	return sync_and_poll(ops, h, cb, err, errlen);
}

/* Train (see gm_core.h). */
int
gm_mf_train(const gm_mf_params *p, gm_mf_data *d, const gm_callbacks *cb,
			gm_mf_result *res, char *err, size_t errlen)
{
	const gm_algo_ops *ops;
	void	   *h = NULL;
	int			rc,
				n_sweeps;
	double		t0,
				t1,
				budget,
				since_poll = 0.0,
				prev_loss = NAN;

	memset(res, 0, sizeof(*res));
	res->final.loss = NAN;
	res->final.rmse = NAN;
	if ((rc = gm_mf_params_check(p, err, errlen)) != GM_OK)
		return rc;
	if ((rc = check_data(p, d, err, errlen)) != GM_OK)
		return rc;
	ops = gm_algo_ops_get(p->algorithm, p->backend, err, errlen);
	if (ops == NULL)
		return p->backend == GM_BACKEND_CUDA && gm_cuda_symbol("gm_cuda_algo_ops") == NULL ?
			GM_ENODEVICE : GM_ENOTSUP;
	init_model(p, d);
	if (p->backend == GM_BACKEND_CUDA)
		budget = GM_CUDA_BUDGET;
	else
		budget = GM_CPU_BUDGET_PER_THREAD * gm_resolve_threads(p->threads);

	t0 = gm_now();
	rc = ops->create(&h, d, p, cb, res->device_name, sizeof(res->device_name),
					 err, errlen);
	t1 = gm_now();
	res->transfer_seconds = t1 - t0;
	if (rc != GM_OK)
		goto done;
	n_sweeps = ops->n_sweeps(h);

	for (int it = 0; it < p->iterations; it++)
	{
		gm_mf_metrics m;
		int			converged;

		if ((rc = iteration(ops, h, n_sweeps, budget, &since_poll, cb, err, errlen)) != GM_OK)
			goto done;
		t0 = gm_now();
		rc = ops->evaluate(h, &m, err, errlen);
		res->loss_seconds += gm_now() - t0;
		if (rc != GM_OK)
			goto done;
		res->final = m;
		res->iterations_run = it + 1;
		if (cb && cb->on_iteration)
			cb->on_iteration(cb->arg, it + 1, m.loss, m.rmse, gm_now() - t1);
		converged = p->tolerance > 0.0 && it > 0 &&
			fabs(prev_loss - m.loss) < p->tolerance * fabs(prev_loss);
		prev_loss = m.loss;
		if (stop_requested(cb))
		{
			snprintf(err, errlen, "training canceled");
			rc = GM_ECANCELED;
			goto done;
		}
		if (converged)
			break;
	}
	res->train_seconds = gm_now() - t1;
	t0 = gm_now();
	rc = ops->download(h, d, err, errlen);
	res->transfer_seconds += gm_now() - t0;

done:
	ops->destroy(h);
	return rc;
}
