/*
 * algorithms.c: which table of operations runs a matrix-factorization
 * algorithm on a backend (gm_algo_ops_get, which gm_mf_train calls).
 *
 * CPU tables are linked into the core (each algorithm's file defines its
 * gm_cpu_<alg>_ops); CUDA tables come from the CUDA module's
 * gm_cuda_algo_ops (src/core/common/backend.c loads it).  A new algorithm
 * adds one line to GM_CPU_ALGORITHMS here, its name to mf_params.c and its
 * CUDA table to cuda/module.cu.
 */
#include "gm_core.h"

#include <stdio.h>

/*
 * The CPU implementations: one line per algorithm (its ops are defined in
 * its own file, e.g. X(GM_ALG_CCD, gm_cpu_ccd_ops) for ccd.c).
 */
#define GM_CPU_ALGORITHMS(X) \
	X(GM_ALG_ALS_IMPLICIT, gm_cpu_als_implicit_ops) \
	X(GM_ALG_ALS_EXPLICIT, gm_cpu_als_explicit_ops) \
	X(GM_ALG_CCD, gm_cpu_ccd_ops) \
	X(GM_ALG_GRAPH_FILTER, gm_cpu_graph_filter_ops)

#define GM_DECLARE_OPS(alg, ops) extern const gm_algo_ops ops;
GM_CPU_ALGORITHMS(GM_DECLARE_OPS)
#undef GM_DECLARE_OPS

static const gm_algo_ops *const cpu_ops[GM_ALG_COUNT] = {
#define GM_OPS_ENTRY(alg, ops) [alg] = &ops,
	GM_CPU_ALGORITHMS(GM_OPS_ENTRY)
#undef GM_OPS_ENTRY
};

/* The operations of algorithm a on backend b (see gm_core.h). */
const gm_algo_ops *
gm_algo_ops_get(gm_algorithm a, gm_backend_kind b, char *err, size_t errlen)
{
	const gm_algo_ops *ops = NULL;
	const char *name = gm_algorithm_name(a);

	if (name == NULL)
	{
		snprintf(err, errlen, "unknown algorithm %d", (int) a);
		return NULL;
	}
	if (b == GM_BACKEND_CPU)
		ops = cpu_ops[a];
	else if (b == GM_BACKEND_CUDA)
	{
		if (!gm_cuda_loaded(err, errlen))
			return NULL;
		ops = gm_cuda_algo_table(a);
	}
	else
	{
		snprintf(err, errlen, "unknown backend %d", (int) b);
		return NULL;
	}
	if (ops == NULL)
		snprintf(err, errlen, "algorithm %s is not available on the %s backend",
				 name, b == GM_BACKEND_CPU ? "cpu" : "cuda");
	return ops;
}
