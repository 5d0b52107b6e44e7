/*
 * mf_loop.c: the training loop every matrix-factorization algorithm runs in
 * (gm_mf_train).  The parameters' defaults, checks and names are
 * mf_params.c's (src/core/common: serving reads them too).
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
#include "gm_ccd_plan.h"
#include "gm_score.h"
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
		(R->nnz > 0 && (!R->indices || !R->data ||
						 (Rt->of == NULL && (!Rt->indices || !Rt->data)))) ||
		(Rt->of != NULL && (Rt->of != R || Rt->of_r0 != 0 || Rt->of_r1 != Rt->n_rows)))
	{
		snprintf(err, errlen,
				 "training data: R (%d x %d, %lld nonzeros) and Rt (%d x %d, %lld nonzeros) are not a matrix and its transpose",
				 R->n_rows, R->n_cols, (long long) R->nnz, Rt->n_rows, Rt->n_cols,
				 (long long) Rt->nnz);
		return GM_EINVAL;
	}
	/* a lean training: the CUDA module's implicit ALS, one training from its start */
	if ((d->start_on_device || Rt->of != NULL) &&
		(p->backend != GM_BACKEND_CUDA || p->algorithm != GM_ALG_ALS_IMPLICIT))
	{
		snprintf(err, errlen,
				 "training data: a lean training (factors drawn on the device, a transpose not formed) runs only as implicit ALS on the GPU");
		return GM_EINVAL;
	}
	/* graph_filter may go without X: its users are sums of item rows, formed when needed */
	if ((d->X == NULL && p->algorithm != GM_ALG_GRAPH_FILTER) || d->Y == NULL)
	{
		snprintf(err, errlen, "training data: the factor arrays X and Y are required");
		return GM_EINVAL;
	}
	if (gm_algorithm_is_explicit(p->algorithm) && p->biases &&
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
	if (d->start_on_device)
		;						/* the module draws them: X and Y stay untouched */
	else
	{
		if (d->X)
			gm_factors_init(d->X, d->R->n_rows, p->factors, p->seed, 0);
		gm_factors_init(d->Y, d->R->n_cols, p->factors, p->seed, 1);
	}
	d->global_mean = 0.0;
	if (gm_algorithm_is_explicit(p->algorithm) && p->biases)
	{
		double		sum = 0.0;

		memset(d->user_bias, 0, sizeof(float) * (size_t) d->R->n_rows);
		memset(d->item_bias, 0, sizeof(float) * (size_t) d->R->n_cols);
		for (int64_t e = 0; e < d->R->nnz; e++)
			sum += d->R->data[e];
		d->global_mean = d->R->nnz > 0 ? sum / (double) d->R->nnz : 0.0;
	}
}

/*
 * Touch n floats of F (zeroing them) with every thread, a few megabytes
 * each: a lean training's X and Y are first written by the download, whose
 * copy would otherwise take each page's first-touch fault one at a time.
 */
static void
prefault(float *F, int64_t n)
{
	const int64_t step = (int64_t) 1 << 20;	/* floats: 4 MB */

	if (F == NULL || n <= 0)
		return;
#pragma omp parallel for schedule(dynamic, 1)
	for (int64_t b = 0; b < n; b += step)
		memset(F + b, 0, sizeof(float) * (size_t) (n - b < step ? n - b : step));
}

/* Has the caller asked to stop? */
static int
stop_requested(const gm_callbacks *cb)
{
	return cb && cb->should_stop && cb->should_stop(cb->arg);
}

/* The work of sw's rows [b, e): row_work a row plus nnz_work a nonzero. */
static inline double
rows_work(const gm_sweep *sw, int32_t b, int32_t e)
{
	double		nnz = sw->indptr ? (double) (sw->indptr[e] - sw->indptr[b]) : 0.0;

	return sw->row_work * (double) (e - b) + sw->nnz_work * nnz;
}

/*
 * The end of the slice of sw's rows that starts at begin (gm_core.h): a
 * slice's work reaches the budget unless the sweep ends.  The work of a
 * range comes from the row pointers in O(1), so the end is a binary
 * search: walking the rows one by one cost the host about 1 ms a sweep of
 * 480k rows, more than the GPU's time for a CCD++ pass.
 */
int32_t
gm_sweep_slice_end(const gm_sweep *sw, int32_t begin, double budget, double *work)
{
	int32_t		lo = begin + 1,
				hi = sw->n_rows;

	if (sw->max_rows > 0 && hi - begin > sw->max_rows)
		hi = begin + sw->max_rows;	/* the backend's work arrays hold no more */
	if (begin >= sw->n_rows)
	{
		*work = 0.0;
		return begin;
	}
	if (rows_work(sw, begin, hi) < budget)
		lo = hi;				/* the rest of the sweep */
	else
		while (lo < hi)
		{
			/* rows_work grows with the end: the first end reaching the budget */
			int32_t		mid = lo + (hi - lo) / 2;

			if (rows_work(sw, begin, mid) >= budget)
				hi = mid;
			else
				lo = mid + 1;
		}
	*work = rows_work(sw, begin, lo);
	return lo;
}

/* Waits for the backend and asks the caller whether to stop. */
static int
sync_and_poll(const gm_algo_ops *ops, void *h, const gm_callbacks *cb,
			  char *err, size_t errlen)
{
	int			rc = ops->sync ? ops->sync(h, err, errlen) : GM_OK;

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
			int32_t		e = gm_sweep_slice_end(&sw, b, budget, &work);

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
		if (ops->end_sweep && (rc = ops->end_sweep(h, s, err, errlen)) != GM_OK)
			return rc;
	}
	*since_poll = 0.0;
	return sync_and_poll(ops, h, cb, err, errlen);
}

/* ------------------------------------------------------------ sessions */

struct gm_mf_session
{
	const gm_algo_ops *ops;
	void	   *h;				/* the backend's state, or NULL */
	gm_algorithm algorithm;
	gm_backend_kind backend;
	const gm_csr *R;			/* the data h was created on */
	const gm_csr *Rt;
	int			reuses;
	int			lean;			/* h was created lean: never reset (R's values may be gone) */
	float	   *best;			/* keep_best copies of X and Y */
	size_t		best_len;
};

/* An empty session (see gm_core.h). */
gm_mf_session *
gm_mf_session_create(void)
{
	return calloc(1, sizeof(gm_mf_session));
}

/* Drop the backend's state. */
static void
session_drop(gm_mf_session *s)
{
	if (s->ops && s->h)
		s->ops->destroy(s->h);
	s->h = NULL;
	s->ops = NULL;
}

/* Free a session and what it holds; safe on NULL. */
void
gm_mf_session_free(gm_mf_session *s)
{
	if (s == NULL)
		return;
	session_drop(s);
	free(s->best);
	free(s);
}

/* Trainings that reused the backend's state. */
int
gm_mf_session_reuses(const gm_mf_session *s)
{
	return s ? s->reuses : 0;
}

/*
 * The backend's state for p on d: reset when the session holds one for the
 * same algorithm, backend and data and the table can reset, else created.
 */
static int
session_prepare(gm_mf_session *s, const gm_algo_ops *ops, const gm_mf_params *p,
				gm_mf_data *d, const gm_callbacks *cb, char *device, size_t devlen,
				char *err, size_t errlen)
{
	int			rc,
				lean = d->start_on_device || d->Rt->of != NULL;

	if (s->h && !s->lean && !lean && s->ops == ops && ops->reset && s->algorithm == p->algorithm &&
		s->backend == p->backend && s->R == d->R && s->Rt == d->Rt)
	{
		rc = ops->reset(s->h, d, p, err, errlen);
		if (rc == GM_OK)
		{
			s->reuses++;
			return GM_OK;
		}
		session_drop(s);		/* a failed reset leaves only destroy */
		return rc;
	}
	session_drop(s);
	rc = ops->create(&s->h, d, p, cb, device, devlen, err, errlen);
	if (rc != GM_OK)
	{
		s->h = NULL;
		return rc;
	}
	s->ops = ops;
	s->algorithm = p->algorithm;
	s->backend = p->backend;
	s->R = d->R;
	s->Rt = d->Rt;
	s->lean = lean;
	return GM_OK;
}

/*
 * Evaluate the model on ev's held-out entries after iteration it (1-based):
 * bring the factors into d, score, remember the best.  *stop is set when
 * the patience ran out.
 */
static int
evaluate_heldout(gm_mf_session *s, const gm_mf_params *p, gm_mf_data *d,
				 const gm_callbacks *cb, gm_mf_eval *ev, int it, int *since_best,
				 int *stop, char *err, size_t errlen)
{
	gm_rank_result r;
	double		t0 = gm_now(),
				v;
	int			rc;

	if ((rc = s->ops->download(s->h, d, err, errlen)) != GM_OK)
		return rc;
	rc = gm_rank_eval(d->R, ev->test, d->X, d->Y, p->factors, ev->K, p->threads, p->backend,
					  cb, &r, err, errlen);
	ev->eval_seconds += gm_now() - t0;
	if (rc != GM_OK)
		return rc;
	v = gm_rank_value(&r, ev->metric);
	if (ev->on_eval)
		ev->on_eval(ev->arg, it, &r);
	if (isnan(ev->best) || v > ev->best)
	{
		ev->best = v;
		ev->best_iteration = it;
		ev->best_result = r;
		*since_best = 0;
		if (ev->keep_best && s->best)
		{
			size_t		nx = (size_t) d->R->n_rows * p->factors;

			memcpy(s->best, d->X, sizeof(float) * nx);
			memcpy(s->best + nx, d->Y, sizeof(float) * (size_t) d->R->n_cols * p->factors);
		}
	}
	else
		(*since_best)++;
	*stop = ev->patience > 0 && *since_best >= ev->patience;
	return GM_OK;
}

/* Train within a session (see gm_core.h). */
int
gm_mf_session_train(gm_mf_session *s, const gm_mf_params *p, gm_mf_data *d,
					const gm_callbacks *cb, gm_mf_eval *ev, gm_mf_result *res,
					char *err, size_t errlen)
{
	const gm_algo_ops *ops;
	int			rc,
				n_sweeps,
				since_best = 0,
				last_eval = 0,
				downloaded = 0,
				early = 0,
				each_loss;
	double		t0,
				t1,
				t_eval,
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
	if (ev && d->X == NULL)
	{
		snprintf(err, errlen, "training data: ranking evaluation needs the users' factors X");
		return GM_EINVAL;
	}
	if (ev)
	{
		if (ev->test == NULL || ev->test->n_rows != d->R->n_rows ||
			ev->test->n_cols != d->R->n_cols || ev->K < 1 || ev->every < 1 ||
			ev->patience < 0 || (int) ev->metric < 0 || ev->metric >= GM_METRIC_COUNT)
		{
			snprintf(err, errlen, "held-out evaluation: the test matrix must have the training's shape, K and every be >= 1");
			return GM_EINVAL;
		}
		ev->best = NAN;
		ev->best_iteration = 0;
		memset(&ev->best_result, 0, sizeof(ev->best_result));
		ev->eval_seconds = 0.0;
		if (ev->keep_best)
		{
			size_t		len = ((size_t) d->R->n_rows + d->R->n_cols) * p->factors;

			if (s->best_len < len)
			{
				free(s->best);
				s->best = malloc(sizeof(float) * len);
				s->best_len = s->best ? len : 0;
			}
			if (s->best == NULL)
			{
				snprintf(err, errlen, "out of memory for a copy of the best model");
				return GM_ENOMEM;
			}
		}
	}
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
	rc = session_prepare(s, ops, p, d, cb, res->device_name, sizeof(res->device_name),
						 err, errlen);
	t1 = gm_now();
	res->transfer_seconds = t1 - t0;
	if (rc != GM_OK)
		return rc;
	if (d->uploaded)
		d->uploaded(d->uploaded_arg);
	n_sweeps = ops->n_sweeps(s->h);
	/*
	 * An iteration's loss is read by a tolerance, a progress callback and
	 * held-out evaluation; without them, implicit ALS (whose evaluate
	 * leaves nothing the next iteration uses: each side's first sweep forms
	 * its Gram matrix again) evaluates only after the last iteration
	 */
	each_loss = p->tolerance > 0.0 || (cb && cb->on_iteration) || ev ||
		p->algorithm != GM_ALG_ALS_IMPLICIT;

	for (int it = 0; it < p->iterations; it++)
	{
		gm_mf_metrics m;
		int			converged = 0,
					stop = 0;

		/*
		 * the last iteration, unless a cancel ends it (no tolerance, no
		 * held-out evaluation): the backend may copy a side back as soon as
		 * it is solved (and then prefaults what it copies later itself)
		 */
		if (it + 1 == p->iterations && ops->final_iteration && ev == NULL &&
			!(p->tolerance > 0.0))
			early = ops->final_iteration(s->h, d);
		if ((rc = iteration(ops, s->h, n_sweeps, budget, &since_poll, cb, err, errlen)) != GM_OK)
			goto fail;
		res->iterations_run = it + 1;
		if (each_loss || it + 1 == p->iterations)
		{
			t_eval = gm_now();
			rc = ops->evaluate(s->h, &m, err, errlen);
			res->loss_seconds += gm_now() - t_eval;
			if (rc != GM_OK)
				goto fail;
			res->final = m;
			if (cb && cb->on_iteration)
				cb->on_iteration(cb->arg, it + 1, m.loss, m.rmse, gm_now() - t1);
			converged = p->tolerance > 0.0 && it > 0 &&
				fabs(prev_loss - m.loss) < p->tolerance * fabs(prev_loss);
			prev_loss = m.loss;
		}
		if (stop_requested(cb))
		{
			snprintf(err, errlen, "training canceled");
			rc = GM_ECANCELED;
			goto fail;
		}
		if (ev && ((it + 1) % ev->every == 0 || it + 1 == p->iterations || converged))
		{
			rc = evaluate_heldout(s, p, d, cb, ev, it + 1, &since_best, &stop, err, errlen);
			if (rc != GM_OK)
				goto fail;
			last_eval = it + 1;
			downloaded = 1;
		}
		else
			downloaded = 0;
		if (converged || stop)
			break;
	}
	res->train_seconds = gm_now() - t1 - (ev ? ev->eval_seconds : 0.0);
	t0 = gm_now();
	if (!early && !downloaded && d->start_on_device)
	{
		prefault(d->X, (int64_t) d->R->n_rows * p->factors);
		prefault(d->Y, (int64_t) d->R->n_cols * p->factors);
	}
	if (!downloaded)
		rc = ops->download(s->h, d, err, errlen);
	res->download_seconds = gm_now() - t0;
	res->transfer_seconds += res->download_seconds;
	if (rc == GM_OK && ev && ev->keep_best && ev->best_iteration > 0 &&
		ev->best_iteration != last_eval)
	{
		size_t		nx = (size_t) d->R->n_rows * p->factors;

		memcpy(d->X, s->best, sizeof(float) * nx);
		memcpy(d->Y, s->best + nx, sizeof(float) * (size_t) d->R->n_cols * p->factors);
	}
	if (rc != GM_OK)
		session_drop(s);
	return rc;

fail:
	/* the state may be mid-sweep (or the device in error): never reuse it */
	session_drop(s);
	return rc;
}

/* Train with a held-out evaluation (see gm_core.h). */
int
gm_mf_train_eval(const gm_mf_params *p, gm_mf_data *d, const gm_callbacks *cb,
				 gm_mf_eval *ev, gm_mf_result *res, char *err, size_t errlen)
{
	gm_mf_session *s = gm_mf_session_create();
	int			rc;

	if (s == NULL)
	{
		memset(res, 0, sizeof(*res));
		res->final.loss = NAN;
		res->final.rmse = NAN;
		snprintf(err, errlen, "out of memory for a training session");
		return GM_ENOMEM;
	}
	rc = gm_mf_session_train(s, p, d, cb, ev, res, err, errlen);
	gm_mf_session_free(s);
	return rc;
}

/* Train (see gm_core.h). */
int
gm_mf_train(const gm_mf_params *p, gm_mf_data *d, const gm_callbacks *cb,
			gm_mf_result *res, char *err, size_t errlen)
{
	return gm_mf_train_eval(p, d, cb, NULL, res, err, errlen);
}

/*
 * Warm the backend up for p (see gm_core.h): one iteration on a small
 * problem whose rows range from 1 to all of the columns, so that the
 * launches of every row-length class, the solver's kernels for p's factors
 * and the BLAS handles are loaded and created once.
 */
int
gm_mf_warmup(const gm_mf_params *p0, char *err, size_t errlen)
{
	enum
	{
		WU_ROWS = 96,
		WU_COLS = 320
	};
	gm_mf_params p = *p0;
	gm_csr		R,
				Rt;
	gm_mf_data	d;
	gm_mf_result res;
	int64_t		nnz = 0;
	int			rc = GM_ENOMEM;

	if (err && errlen)
		err[0] = '\0';
	memset(&R, 0, sizeof(R));
	memset(&Rt, 0, sizeof(Rt));
	memset(&d, 0, sizeof(d));
	p.iterations = 1;
	p.tolerance = 0;
	p.threads = 1;
	if (p.algorithm == GM_ALG_GRAPH_FILTER && p.factors > WU_COLS)
		p.factors = WU_COLS;	/* at most the items */
	R.n_rows = WU_ROWS;
	R.n_cols = WU_COLS;
	R.indptr = malloc(sizeof(int64_t) * (WU_ROWS + 1));
	R.indices = malloc(sizeof(int32_t) * WU_ROWS * WU_COLS);
	R.data = malloc(sizeof(float) * WU_ROWS * WU_COLS);
	if (!R.indptr || !R.indices || !R.data)
		goto done;
	R.indptr[0] = 0;
	for (int r = 0; r < WU_ROWS; r++)
	{
		/* lengths 1 .. 8, then 40 .. 288, then whole rows */
		int			len = r < 48 ? 1 + r % 8 : r < 80 ? 40 + (r - 48) * 8 : WU_COLS;

		/* len columns spread over the row, ascending and distinct (len <= WU_COLS) */
		for (int c = 0; c < len; c++)
		{
			R.indices[nnz] = (int32_t) ((int64_t) c * WU_COLS / len);
			R.data[nnz] = (float) (1 + (r + c) % 5);
			nnz++;
		}
		R.indptr[r + 1] = nnz;
	}
	R.nnz = nnz;
	if ((rc = gm_csr_transpose(&R, &Rt, err, errlen)) != GM_OK)
		goto done;
	rc = GM_ENOMEM;
	d.R = &R;
	d.Rt = &Rt;
	d.X = malloc(sizeof(float) * (size_t) WU_ROWS * p.factors);
	d.Y = malloc(sizeof(float) * (size_t) WU_COLS * p.factors);
	d.user_bias = malloc(sizeof(float) * WU_ROWS);
	d.item_bias = malloc(sizeof(float) * WU_COLS);
	if (!d.X || !d.Y || !d.user_bias || !d.item_bias)
		goto done;
	rc = gm_mf_train(&p, &d, NULL, &res, err, errlen);
done:
	if (rc == GM_ENOMEM && err && errlen && err[0] == '\0')
		snprintf(err, errlen, "out of memory for the warm-up");
	free(d.X);
	free(d.Y);
	free(d.user_bias);
	free(d.item_bias);
	gm_csr_free(&Rt);
	free(R.indptr);
	free(R.indices);
	free(R.data);
	return rc;
}

/* The longest row of a. */
static int64_t
longest_row(const gm_csr *a)
{
	int64_t		m = 0;

	for (int32_t r = 0; r < a->n_rows; r++)
		if (a->indptr[r + 1] - a->indptr[r] > m)
			m = a->indptr[r + 1] - a->indptr[r];
	return m;
}

/*
 * What the CPU tables allocate beside d's arrays, kept in step with their
 * create functions (als_implicit.c: the confidence copies, G, the ridges,
 * each thread's row_work; als_explicit.c: the padded factor copies and each
 * thread's fwork and dwork; ccd.c: the feature-major copies, residuals and
 * packs), and with gm_mf_train_eval (a copy of the best model, the ranking's
 * gathers and its block of scores).  In double: no product can overflow.
 */
double
gm_mf_memory(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt, int eval_K,
			 int keep_best, double *per_thread)
{
	double		k = p->factors,
				nu = R->n_rows,
				ni = R->n_cols,
				nnz = (double) R->nnz,
				shared = 0,
				thread = 0;
	int			nt = gm_resolve_threads(p->threads);

	if (p->backend == GM_BACKEND_CPU)
	{
		switch (p->algorithm)
		{
			case GM_ALG_ALS_IMPLICIT:
				{
					double		bs = p->solver == GM_SOLVER_CG ? 1 : gm_block_size(p);
					double		maxlen = 1;

					if (p->solver == GM_SOLVER_BLOCK)
					{
						int64_t		a = longest_row(R),
									b = longest_row(Rt);

						maxlen = (double) (a > b ? a : b);
					}
					/* confidences of both sides, G and the loss's copy, the ridges */
					shared = 2 * nnz * sizeof(float) + 2 * k * k * sizeof(float) +
						(p->nu != 0.0f ? (nu + ni) * sizeof(float) : 0);
					/* row_work: f1..f3, A (b^2 floats), M (b^2 doubles), v, s (the longest row) */
					thread = 3 * k * sizeof(float) + bs * bs * (sizeof(float) + sizeof(double)) +
						bs * sizeof(double) + maxlen * sizeof(float);
#ifdef GM_NO_CBLAS
					/* the Gram matrix's per-thread accumulators */
					if (k * k * sizeof(float) > thread)
						thread = k * k * sizeof(float);
#endif
					break;
				}
			case GM_ALG_ALS_EXPLICIT:
				{
					double		kk = k + (p->biases ? 1 : 0);

					shared = (nu + ni) * (k + 1) * sizeof(float);
					thread = kk * (kk + 2) * sizeof(float) + kk * (kk + 1) * sizeof(double);
					break;
				}
			case GM_ALG_CCD:
				shared = (nu + ni) * (k + 1 + GM_CCD_SLOTS) * sizeof(float) +
					2 * nnz * sizeof(float) + (nu + ni) * 8 * sizeof(float);
				break;
			case GM_ALG_GRAPH_FILTER:
				{
					double		l = (double) gm_gf_columns(p->factors, R->n_cols);

					/* Rn's values twice, Z and P Z, Y, the l x l Grams, E, LAPACK's work */
					shared = 2 * nnz * sizeof(float) + (2 * ni + nu) * l * sizeof(float) +
						l * l * (sizeof(float) + 2 * sizeof(double)) + l * k * sizeof(float);
					break;
				}
			default:
				break;
		}
	}
	if (keep_best)
		shared += (nu + ni) * (k + 1) * sizeof(float);
	if (eval_K > 0)
	{
		/* gm_rank_eval: gathered factors and seen lists, the top K of every user, its scores */
		shared += nu * (k * sizeof(float) + 3 * sizeof(int64_t) + eval_K * 2 * sizeof(float)) +
			nnz * sizeof(int32_t);
		if (p->backend == GM_BACKEND_CPU)
		{
			/*
			 * a block of scores: two rows of every item per thread at least
			 * (then per thread; the solvers' scratch is freed by then)
			 */
			double		block = gm_score_cpu_memory(R->n_cols, nt);

			if (block > gm_score_cpu_memory(R->n_cols, 1))
			{
				if (block / nt > thread)
					thread = block / nt;
			}
			else
				shared += block;
		}
	}
	if (per_thread)
		*per_thread = thread;
	return shared + thread * nt;
}

/* Chunks of at most chunk nonzeros a row (at least one a row), as the GPU lists them. */
static double
chunk_count(const gm_csr *a, int64_t chunk)
{
	double		n = 0;

	for (int32_t r = 0; r < a->n_rows; r++)
	{
		int64_t		len = a->indptr[r + 1] - a->indptr[r];

		n += len > chunk ? (double) ((len + chunk - 1) / chunk) : 1.0;
	}
	return n;
}

/* The most rows longer than chunk among any w consecutive rows of a. */
static double
long_rows_in_window(const gm_csr *a, int64_t chunk, int32_t w)
{
	int32_t		in = 0,
				most = 0;

	for (int32_t r = 0; r < a->n_rows; r++)
	{
		in += a->indptr[r + 1] - a->indptr[r] > chunk;
		if (r >= w)
			in -= a->indptr[r - w + 1] - a->indptr[r - w] > chunk;
		if (in > most)
			most = in;
	}
	return most;
}

/*
 * The sizes below are those of cuda/train/als_implicit.cu, als_explicit.cu
 * and ccd.cu (GM_CHUNK 256 and ALS_CHUNK 2048 nonzeros a chunk, explicit
 * ALS's 1 GB of batched systems); a change there changes them here.
 */
#define GPU_CHUNK		256
#define GPU_ALS_CHUNK	2048
#define GPU_ALS_WS		((double) (1 << 30))

void
gm_mf_device_memory(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
					gm_device_need *need)
{
	double		nu = R->n_rows,
				ni = R->n_cols,
				nnz = (double) R->nnz,
				nmax = nu > ni ? nu : ni,
				k = p->factors,
				f = sizeof(float);

	int			ndev = gm_algorithm_multi_gpu(p->algorithm) && p->gpus > 1 ? p->gpus : 1;

	memset(need, 0, sizeof(*need));
	/*
	 * both matrices: int64 row pointers, int32 indices, float values; with
	 * several GPUs each holds every row pointer and a share of the entries
	 * (rows cut where the entries are shared evenly: a share and the
	 * longest row at most)
	 */
	if (ndev > 1)
	{
		/* the GPU whose shares of R and Rt hold the most entries (the module's cuts) */
		int32_t		cr[GM_MAX_GPUS + 1],
					ct[GM_MAX_GPUS + 1];
		double		w = gm_gpu_share_row_weight(p),
					most = 0;

		gm_csr_cut_rows(R, ndev, w, cr);
		gm_csr_cut_rows(Rt, ndev, w, ct);
		for (int i = 0; i < ndev; i++)
		{
			double		e = (double) (R->indptr[cr[i + 1]] - R->indptr[cr[i]]) +
				(double) (Rt->indptr[ct[i + 1]] - Rt->indptr[ct[i]]);

			if (e > most)
				most = e;
		}
		nnz = most / 2;			/* counted twice below, as R and Rt */
	}
	need->matrices = (nu + ni + 2) * sizeof(int64_t) + 2 * nnz * (sizeof(int32_t) + f);
	switch (p->algorithm)
	{
		case GM_ALG_ALS_IMPLICIT:
			{
				int			kp = gm_padded_k(p->factors),
							bw = gm_gpu_block_width(p, kp);
				int32_t		w = gm_als_work_rows((int64_t) nmax, kp, bw > 0 ? bw : 0);

				/* chunk lists (int2), scratch slots and the pass counters (int32) */
				need->matrices += (chunk_count(R, GPU_CHUNK) + chunk_count(Rt, GPU_CHUNK)) * 8 +
					(nu + ni) * sizeof(int32_t) + (nmax + 2) * sizeof(int32_t);
				need->factors = (nu + ni) * kp * f + (p->nu != 0.0f ? (nu + ni) * f : 0) +
					(double) kp * kp * f;
				if (bw <= 0)
					need->solver = (double) w * (3.0 * kp + 1) * f;
				else
				{
					double		b = bw,
								slots = long_rows_in_window(R, GPU_CHUNK, w),
								t = long_rows_in_window(Rt, GPU_CHUNK, w);

					if (t > slots)
						slots = t;
					/* predictions of both sides, the permutation, H and D, the long rows' scratch, the loss's X G */
					need->solver = 2 * nnz * f + nnz * (R->nnz > INT32_MAX ? 8 : 4) +
						(double) w * 2 * b * f + (slots > 0 ? slots : 1) * (b * b + b) * f +
						(double) w * kp * f;
				}
				break;
			}
		case GM_ALG_ALS_EXPLICIT:
			{
				double		kk = k + (p->biases ? 1 : 0),
							per = kk * kk * f,
							batch = floor(GPU_ALS_WS / per);

				if (batch > nmax)
					batch = nmax;
				if (batch < 1)
					batch = 1;
				need->matrices += (chunk_count(R, GPU_ALS_CHUNK) + chunk_count(Rt, GPU_ALS_CHUNK)) * 8;
				need->factors = (nu + ni) * (k + 1) * f;
				need->solver = batch * (per + kk * f + sizeof(int) + 2 * sizeof(float *));
				break;
			}
		case GM_ALG_GRAPH_FILTER:
			{
				double		l = (double) gm_gf_columns(p->factors, R->n_cols);

				/* the factors it returns; Z, P Z and Y; the l x l Grams and the eigensolver's work */
				need->factors = (nu + ni) * k * f;
				need->solver = (2 * ni + nu) * l * f + l * l * (2 * f + 3 * sizeof(double)) +
					l * k * f + nnz * f;
				break;
			}
		case GM_ALG_CCD:
			/* both copies (the values become residuals), their schedules, packs and sums */
			need->matrices += (chunk_count(R, GPU_CHUNK) + chunk_count(Rt, GPU_CHUNK)) * 16;
			need->factors = (nu + ni) * (2 * k + 1 + 1 + GM_CCD_SLOTS) * f;
			need->solver = (nu + ni) * (2 * 16 + 16 + 4);
			break;
		default:
			break;
	}
	need->total = need->matrices + need->factors + need->solver;
	if (p->algorithm == GM_ALG_ALS_IMPLICIT && Rt->of != NULL)
	{
		/*
		 * a lean upload transposes R on the GPU (device_csr.cu) before the
		 * factors are there: a counter and an offset a column, two slabs of
		 * at most 2^24 entries (or the longest column) and the segmented
		 * sort's scratch, about as much again; with several GPUs also two
		 * chunks of 2^22 entries (or the longest row) of the other GPUs'
		 * rows, streamed from the host (a row pointer, an index, a value)
		 */
		double		slab = 0,
					chunk = 0,
					transient;

		for (int32_t j = 0; j < Rt->n_rows; j++)
			if ((double) (Rt->indptr[j + 1] - Rt->indptr[j]) > slab)
				slab = (double) (Rt->indptr[j + 1] - Rt->indptr[j]);
		if (slab < (double) (1 << 24))
			slab = (double) (1 << 24);
		if (slab > (double) R->nnz)
			slab = (double) R->nnz;
		if (ndev > 1)
		{
			for (int32_t r = 0; r < R->n_rows; r++)
				if ((double) (R->indptr[r + 1] - R->indptr[r]) > chunk)
					chunk = (double) (R->indptr[r + 1] - R->indptr[r]);
			if (chunk < (double) (1 << 22))
				chunk = (double) (1 << 22);
		}
		transient = need->matrices + (ni + 1) * (sizeof(int32_t) + sizeof(int64_t)) +
			2 * slab * (sizeof(int32_t) + f) + 2 * chunk * (sizeof(int64_t) + sizeof(int32_t) + f) +
			(double) (1 << 20);
		if (transient > need->total)
			need->total = transient;
	}
}
