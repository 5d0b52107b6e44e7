/*
 * mf_params.c: what names a matrix-factorization model's algorithm and
 * hyper-parameters: the algorithms' SQL names, the parameters' defaults and
 * their range checks.  Training (src/core/train) and serving (fold-in reads
 * a model's parameters back from the catalog) both use them.
 */
#include "gm_core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const algorithm_names[GM_ALG_COUNT] = {
	[GM_ALG_ALS_IMPLICIT] = "als",
	[GM_ALG_ALS_EXPLICIT] = "als_explicit",
	[GM_ALG_CCD] = "ccd",
	[GM_ALG_GRAPH_FILTER] = "graph_filter",
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
int
gm_algorithm_is_explicit(gm_algorithm a)
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
	/*
	 * explicit: one weighted lambda for ALS and CCD++; 0.05 is within the
	 * best range on planted data (0.035-0.05) and scores 0.95-0.96 on
	 * MovieLens 100K, whose best is 0.12-0.15 (test/bench/README.md)
	 */
	p->regularization = gm_algorithm_is_explicit(a) ? 0.05f : 0.01f;
	p->seed = 42;
	p->threads = 0;
	p->tolerance = 0.0;
	p->alpha = 1.0f;
	p->cg_steps = 3;
	p->alpha0 = 1.0f;
	p->nu = 0.0f;
	p->solver = GM_SOLVER_CG;
	p->block_size = 0;
	p->block_sweeps = 1;
	p->tf32 = -1;
	p->inner_iterations = 3;
	p->biases = gm_algorithm_is_explicit(a) ? 1 : 0;
	p->gpus = 1;
	if (a == GM_ALG_GRAPH_FILTER)
	{
		p->factors = GM_GF_DEFAULT_FACTORS;
		p->iterations = GM_GF_DEFAULT_ITERATIONS;
		p->alpha = GM_GF_DEFAULT_ALPHA;
		p->regularization = 0.0f;
	}
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
	CHECK_INT("factors", p->factors, 1, p->algorithm == GM_ALG_GRAPH_FILTER ? GM_GF_MAXK : GM_MAXK);
	CHECK_INT("iterations", p->iterations, 1, 1000000);
	if (p->threads > 1024)
	{
		snprintf(err, errlen, "threads must be at most 1024 (0 or less: one per core), not %d",
				 p->threads);
		return GM_EINVAL;
	}
	CHECK_REAL("regularization", p->regularization, 0.0);
	CHECK_REAL("tolerance", p->tolerance, 0.0);
	CHECK_INT("gpus", p->gpus, 0, GM_MAX_GPUS);
	if (p->gpus > 1 && !gm_algorithm_multi_gpu(p->algorithm))
	{
		snprintf(err, errlen, "more than one GPU trains implicit ALS, explicit ALS and CCD++ only, not %s",
				 gm_algorithm_name(p->algorithm));
		return GM_ENOTSUP;
	}
	if (p->algorithm == GM_ALG_ALS_IMPLICIT)
	{
		CHECK_REAL("alpha", p->alpha, 0.0);
		CHECK_REAL("alpha0", p->alpha0, 0.0);
		CHECK_REAL("nu", p->nu, 0.0);
		if (p->nu > 1.0f)
		{
			snprintf(err, errlen, "nu must be between 0 and 1, not %g", p->nu);
			return GM_EINVAL;
		}
		CHECK_INT("tf32", p->tf32, -1, 1);
		if ((int) p->solver < 0 || p->solver >= GM_SOLVER_COUNT)
		{
			snprintf(err, errlen, "unknown solver %d", (int) p->solver);
			return GM_EINVAL;
		}
		if (p->solver == GM_SOLVER_CG)
			CHECK_INT("cg_steps", p->cg_steps, 1, 1024);
		if (p->solver == GM_SOLVER_BLOCK)
		{
			CHECK_INT("block_size", p->block_size, 0, p->factors);
			CHECK_INT("block_sweeps", p->block_sweeps, 1, 1000);
		}
	}
	else if (p->algorithm == GM_ALG_GRAPH_FILTER)
	{
		CHECK_REAL("alpha", p->alpha, 0.0);
		if (p->biases)
		{
			snprintf(err, errlen, "graph_filter has no biases");
			return GM_EINVAL;
		}
	}
	else
	{
		CHECK_INT("biases", p->biases, 0, 1);
		if (p->algorithm == GM_ALG_CCD)
			CHECK_INT("inner_iterations", p->inner_iterations, 1, 1000);
	}
	return GM_OK;
}
