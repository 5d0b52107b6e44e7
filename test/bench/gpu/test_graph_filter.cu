/*
 * test_graph_filter.cu: the GPU graph filter (cuda/train/graph_filter.cu,
 * gm_cuda_graph_filter_ops) against the CPU reference
 * (src/core/train/graph_filter.c, gm_cpu_graph_filter_ops) on small random
 * implicit problems.  No PostgreSQL.
 *
 *   1. gm_mf_train on both backends, 300 users x 200 items, ~5% density
 *      (one user and one item without entries), factors 32, 4 iterations:
 *      the loss of every iteration within 1e-6 + 1e-4 relative, the scores X Y^T
 *      within 1e-3 of the largest |score| (a column's sign is the
 *      eigensolver's choice and cancels in the scores), the filters within
 *      1e-4, every value finite.
 *   2. Both tables driven directly, sweeps cut into random slices, a
 *      download after iteration 2 (training then goes on) and after
 *      iteration 4: both downloads agree as in 1.
 *   3. factors = number of items (the subspace is the whole space):
 *      120 x 40, factors 40, 3 iterations, scores and filters as in 1.
 *   4. factors > number of items: GM_EINVAL with the CPU's message.
 *
 * Ends with "N passed, M failed"; exit status 1 when a check failed.
 *
 * Build and run from the repository root, on a machine with a GPU:
 *     make -C cuda graph-filter-test && ./test/bench/gpu/test_graph_filter
 * Options: --seed N (the problem's), --module PATH (cuda/gpumf_cuda.so),
 * --large (also 5.: 20,000 x 5,000, factors 256, scores of every 97th user,
 * both trainings timed).
 */
#include "../../../src/core/common/gm_core.h"
#include "../../../cuda/common/common.cuh"	/* the module's exported entry points */

#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench_check.h"

typedef struct problem
{
	gm_csr		R,
				Rt;
} problem;

static uint64_t
mix(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/*
 * nu x ni, each entry present with probability density (value 1); user
 * empty_user and item empty_item get none (-1: no such).  Every other user
 * gets at least one item.
 */
static void
make_problem(problem *pb, int32_t nu, int32_t ni, double density, int32_t empty_user,
			 int32_t empty_item, uint64_t seed)
{
	std::vector<int32_t> us,
				is;
	std::vector<float> vs;

	for (int32_t u = 0; u < nu; u++)
	{
		int			any = 0;

		if (u == empty_user)
			continue;
		for (int32_t i = 0; i < ni; i++)
		{
			uint64_t	h = mix(seed ^ mix((uint64_t) u * 1000003ULL + (uint64_t) i));

			if (i == empty_item || (double) (h >> 11) / 9007199254740992.0 >= density)
				continue;
			us.push_back(u);
			is.push_back(i);
			vs.push_back(1.0f);
			any = 1;
		}
		if (!any)
		{
			int32_t		i = (int32_t) (mix(seed + (uint64_t) u) % (uint64_t) ni);

			if (i == empty_item)
				i = (i + 1) % ni;
			us.push_back(u);
			is.push_back(i);
			vs.push_back(1.0f);
		}
	}
	GM(gm_csr_from_coo(nu, ni, (int64_t) us.size(), us.data(), is.data(), vs.data(), &pb->R,
					   err, sizeof(err)));
	GM(gm_csr_transpose(&pb->R, &pb->Rt, err, sizeof(err)));
}

typedef struct model
{
	int			k;
	std::vector<float> X,
				Y,
				h;
	std::vector<double> loss;
	int			rc;
	char		msg[GM_ERRLEN];
	char		device[128];
} model;

static void
on_iteration(void *arg, int it, double loss, double rmse, double seconds)
{
	(void) it;
	(void) rmse;
	(void) seconds;
	((model *) arg)->loss.push_back(loss);
}

static void
model_alloc(model *m, const problem *pb, int k)
{
	m->k = k;
	/* poisoned: whatever download leaves unwritten shows as NaN */
	m->X.assign((size_t) pb->R.n_rows * k, NAN);
	m->Y.assign((size_t) pb->R.n_cols * k, NAN);
	m->h.assign((size_t) k, NAN);
	m->loss.clear();
	m->rc = GM_OK;
	m->msg[0] = '\0';
	m->device[0] = '\0';
}

static void
params(gm_mf_params *p, gm_backend_kind backend, int k, int iterations)
{
	gm_mf_params_defaults(p, GM_ALG_GRAPH_FILTER);
	p->backend = backend;
	p->factors = k;
	p->iterations = iterations;
	p->seed = 7;
	p->tolerance = 0.0;
}

/* Train through gm_mf_train (the CPU table, or the module's through dlopen). */
static void
train(gm_backend_kind backend, const problem *pb, int k, int iterations, model *m)
{
	gm_mf_params p;
	gm_mf_data	d;
	gm_mf_result out;
	gm_callbacks cb;

	model_alloc(m, pb, k);
	params(&p, backend, k, iterations);
	memset(&d, 0, sizeof(d));
	d.R = &pb->R;
	d.Rt = &pb->Rt;
	d.X = m->X.data();
	d.Y = m->Y.data();
	d.filter = m->h.data();
	memset(&cb, 0, sizeof(cb));
	cb.on_iteration = on_iteration;
	cb.arg = m;
	m->rc = gm_mf_train(&p, &d, &cb, &out, m->msg, sizeof(m->msg));
	snprintf(m->device, sizeof(m->device), "%s", out.device_name);
}

/*
 * Drive a table as the loop does, but in random slices with a sync after
 * each, downloading after iteration `mid` into mid_model (and going on) and
 * after the last into m.
 */
static void
train_driven(const gm_algo_ops *ops, gm_backend_kind backend, const problem *pb, int k,
			 int iterations, int mid, model *mid_model, model *m, uint64_t seed)
{
	gm_mf_params p;
	gm_mf_data	d;
	void	   *h = NULL;
	uint64_t	st = seed;
	int			rc;
	char	   *msg = m->msg;
	size_t		ml = sizeof(m->msg);

	model_alloc(m, pb, k);
	model_alloc(mid_model, pb, k);
	params(&p, backend, k, iterations);
	memset(&d, 0, sizeof(d));
	d.R = &pb->R;
	d.Rt = &pb->Rt;
	d.X = m->X.data();
	d.Y = m->Y.data();
	d.filter = m->h.data();
	rc = ops ? ops->create(&h, &d, &p, NULL, m->device, sizeof(m->device), msg, ml) : GM_ENOTSUP;
	for (int it = 0; it < iterations && rc == GM_OK; it++)
	{
		gm_mf_metrics mt;

		for (int s = 0; s < ops->n_sweeps(h) && rc == GM_OK; s++)
		{
			gm_sweep	sw;

			memset(&sw, 0, sizeof(sw));
			rc = ops->begin_sweep(h, s, &sw, msg, ml);
			for (int32_t b = 0; b < sw.n_rows && rc == GM_OK;)
			{
				int32_t		e;

				st = st * 6364136223846793005ULL + 1442695040888963407ULL;
				e = b + 1 + (int32_t) ((st >> 33) % (uint64_t) (sw.n_rows / 3 + 1));
				if (e > sw.n_rows)
					e = sw.n_rows;
				rc = ops->run(h, s, b, e, msg, ml);
				if (rc == GM_OK && ops->sync)
					rc = ops->sync(h, msg, ml);
				b = e;
			}
			if (rc == GM_OK && ops->end_sweep)
				rc = ops->end_sweep(h, s, msg, ml);
		}
		if (rc == GM_OK && ops->sync)
			rc = ops->sync(h, msg, ml);
		if (rc == GM_OK)
			rc = ops->evaluate(h, &mt, msg, ml);
		if (rc == GM_OK)
			m->loss.push_back(mt.loss);
		if (rc == GM_OK && it + 1 == mid)
		{
			gm_mf_data	dm = d;

			dm.X = mid_model->X.data();
			dm.Y = mid_model->Y.data();
			dm.filter = mid_model->h.data();
			rc = ops->download(h, &dm, msg, ml);
		}
	}
	if (rc == GM_OK)
		rc = ops->download(h, &d, msg, ml);
	snprintf(mid_model->device, sizeof(mid_model->device), "%s", m->device);
	if (ops)
		ops->destroy(h);
	m->rc = rc;
}

static bool
all_finite(const model *m)
{
	for (float v : m->X)
		if (!isfinite(v))
			return false;
	for (float v : m->Y)
		if (!isfinite(v))
			return false;
	for (float v : m->h)
		if (!isfinite(v))
			return false;
	return true;
}

/* max |S_a - S_b| / max |S_b| over the scores S = X Y^T (every stride-th user) */
static double
score_diff(const model *a, const model *b, int32_t nu, int32_t ni, int32_t stride, double *smax)
{
	double		dmax = 0.0,
				bmax = 0.0;
	int			k = a->k;

	for (int32_t u = 0; u < nu; u += stride)
		for (int32_t i = 0; i < ni; i++)
		{
			double		sa = 0.0,
						sb = 0.0;

			for (int f = 0; f < k; f++)
			{
				sa += (double) a->X[(size_t) u * k + f] * a->Y[(size_t) i * k + f];
				sb += (double) b->X[(size_t) u * k + f] * b->Y[(size_t) i * k + f];
			}
			if (!(fabs(sa - sb) <= dmax))
				dmax = isnan(sa - sb) ? INFINITY : fabs(sa - sb);
			if (fabs(sb) > bmax)
				bmax = fabs(sb);
		}
	*smax = bmax;
	return bmax > 0 ? dmax / bmax : dmax;
}

/* max |h_a - h_b| */
static double
filter_diff(const model *a, const model *b)
{
	double		m = 0.0;

	for (size_t j = 0; j < a->h.size(); j++)
	{
		double		d = fabs((double) a->h[j] - b->h[j]);

		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/*
 * max |l_a - l_b| over the iterations (INFINITY if the counts differ); *ok
 * whether every one is within 1e-6 + 1e-4 |l_b| (the loss is 1 - a ratio
 * near 1 once span(Z) holds the graph: rounding, absolutely)
 */
static double
loss_diff(const model *a, const model *b, bool *ok)
{
	double		m = 0.0;

	*ok = false;
	if (a->loss.size() != b->loss.size() || a->loss.empty())
		return INFINITY;
	*ok = true;
	for (size_t j = 0; j < a->loss.size(); j++)
	{
		double		d = fabs(a->loss[j] - b->loss[j]);

		if (!(d <= 1e-6 + 1e-4 * fabs(b->loss[j])))
			*ok = false;
		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/* The checks of a GPU model against the CPU's. */
static void
compare(const char *what, const model *gpu, const model *cpu, const problem *pb, bool losses)
{
	double		smax = 0.0,
				sd;

	CHECK(cpu->rc == GM_OK, "%s: CPU trains (%s)", what, cpu->rc == GM_OK ? "ok" : cpu->msg);
	CHECK(gpu->rc == GM_OK, "%s: GPU trains (%s)", what, gpu->rc == GM_OK ? gpu->device : gpu->msg);
	if (cpu->rc != GM_OK || gpu->rc != GM_OK)
		return;
	CHECK(all_finite(gpu), "%s: every downloaded GPU value (X, Y, filter) is finite", what);
	if (losses)
	{
		bool		ok;
		double		ld = loss_diff(gpu, cpu, &ok);

		CHECK(ok, "%s: loss per iteration within 1e-6 + 1e-4 relative (max |diff| %.3g; last CPU %.8f GPU %.8f)",
			  what, ld, cpu->loss.empty() ? NAN : cpu->loss.back(),
			  gpu->loss.empty() ? NAN : gpu->loss.back());
	}
	sd = score_diff(gpu, cpu, pb->R.n_rows, pb->R.n_cols, pb->R.n_rows > 2000 ? 97 : 1, &smax);
	CHECK(sd < 1e-3 && smax > 0, "%s: scores X Y^T agree: max |diff| / max |score| = %.3g (max |score| %.4g)",
		  what, sd, smax);
	{
		double		fd = filter_diff(gpu, cpu);

		CHECK(fd < 1e-4, "%s: filters agree: max |diff| = %.3g (h[0] CPU %.6f GPU %.6f, h[k-1] CPU %.6f GPU %.6f)",
			  what, fd, cpu->h[0], gpu->h[0], cpu->h.back(), gpu->h.back());
	}
}

int
main(int argc, char **argv)
{
	const char *module = "cuda/gpumf_cuda.so";
	uint64_t	seed = 20240611;
	int			large = 0;
	char		name[256];
	const gm_algo_ops *cpu_ops,
			   *gpu_ops;

	for (int a = 1; a < argc; a++)
	{
		if (strcmp(argv[a], "--seed") == 0 && a + 1 < argc)
			seed = strtoull(argv[++a], NULL, 10);
		else if (strcmp(argv[a], "--module") == 0 && a + 1 < argc)
			module = argv[++a];
		else if (strcmp(argv[a], "--large") == 0)
			large = 1;
		else
		{
			fprintf(stderr, "usage: %s [--seed N] [--module path] [--large]\n", argv[0]);
			return 2;
		}
	}
	printf("# test_graph_filter: seed %llu, module %s\n", (unsigned long long) seed, module);
	if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
	{
		CHECK(0, "gm_cuda_available(%s): %s", module, err);
		printf("\n%d passed, %d failed\n", checks - failures, failures);
		return 1;
	}
	cpu_ops = gm_algo_ops_get(GM_ALG_GRAPH_FILTER, GM_BACKEND_CPU, err, sizeof(err));
	gpu_ops = gm_algo_ops_get(GM_ALG_GRAPH_FILTER, GM_BACKEND_CUDA, err, sizeof(err));
	CHECK(gm_cuda_abi_version() == GM_ALGO_ABI_VERSION && gpu_ops != NULL &&
		  gpu_ops == gm_cuda_algo_ops(GM_ALG_GRAPH_FILTER) && cpu_ops != NULL,
		  "the module (%s, on %s) registers graph_filter", module, name);
	if (gpu_ops == NULL || cpu_ops == NULL)
	{
		printf("\n%d passed, %d failed\n", checks - failures, failures);
		return 1;
	}

	{
		problem		pb;
		model		cpu,
					gpu,
					cpu_mid,
					gpu_mid;

		make_problem(&pb, 300, 200, 0.05, 17, 23, seed);
		printf("\n== 1. gm_mf_train, %d x %d, %lld entries, factors 32, 4 iterations\n",
			   pb.R.n_rows, pb.R.n_cols, (long long) pb.R.nnz);
		train(GM_BACKEND_CPU, &pb, 32, 4, &cpu);
		train(GM_BACKEND_CUDA, &pb, 32, 4, &gpu);
		compare("gm_mf_train", &gpu, &cpu, &pb, true);
		if (cpu.rc == GM_OK && gpu.rc == GM_OK)
		{
			for (size_t j = 0; j < cpu.loss.size(); j++)
				printf("    iteration %zu: loss CPU %.8f GPU %.8f\n", j + 1, cpu.loss[j],
					   j < gpu.loss.size() ? gpu.loss[j] : NAN);
		}

		printf("\n== 2. the tables driven in random slices, a download after iteration 2 and 4\n");
		train_driven(cpu_ops, GM_BACKEND_CPU, &pb, 32, 4, 2, &cpu_mid, &cpu, seed + 1);
		train_driven(gpu_ops, GM_BACKEND_CUDA, &pb, 32, 4, 2, &gpu_mid, &gpu, seed + 2);
		cpu_mid.rc = cpu.rc;
		gpu_mid.rc = gpu.rc;
		compare("download after iteration 2", &gpu_mid, &cpu_mid, &pb, false);
		compare("download after iteration 4", &gpu, &cpu, &pb, true);
		gm_csr_free(&pb.R);
		gm_csr_free(&pb.Rt);
	}

	{
		problem		pb;
		model		cpu,
					gpu;

		make_problem(&pb, 120, 40, 0.15, -1, -1, seed + 3);
		printf("\n== 3. factors = items: %d x %d, %lld entries, factors 40, 3 iterations\n",
			   pb.R.n_rows, pb.R.n_cols, (long long) pb.R.nnz);
		train(GM_BACKEND_CPU, &pb, 40, 3, &cpu);
		train(GM_BACKEND_CUDA, &pb, 40, 3, &gpu);
		compare("factors = items", &gpu, &cpu, &pb, true);

		printf("\n== 4. factors > items is refused\n");
		train(GM_BACKEND_CPU, &pb, 41, 1, &cpu);
		train(GM_BACKEND_CUDA, &pb, 41, 1, &gpu);
		CHECK(gpu.rc == GM_EINVAL && cpu.rc == GM_EINVAL && strcmp(gpu.msg, cpu.msg) == 0,
			  "factors 41 of 40 items: GPU %d \"%s\", CPU %d \"%s\"", gpu.rc, gpu.msg, cpu.rc, cpu.msg);
		gm_csr_free(&pb.R);
		gm_csr_free(&pb.Rt);
	}

	if (large)
	{
		problem		pb;
		model		cpu,
					gpu;
		double		t0;

		make_problem(&pb, 20000, 5000, 0.002, -1, -1, seed + 4);
		printf("\n== 5. larger: %d x %d, %lld entries, factors 256, 4 iterations (scores of every 97th user)\n",
			   pb.R.n_rows, pb.R.n_cols, (long long) pb.R.nnz);
		t0 = gm_now();
		train(GM_BACKEND_CPU, &pb, 256, 4, &cpu);
		printf("    CPU %.3f s\n", gm_now() - t0);
		t0 = gm_now();
		train(GM_BACKEND_CUDA, &pb, 256, 4, &gpu);
		printf("    GPU %.3f s (the first GPU training of the process pays the libraries' set-up)\n", gm_now() - t0);
		compare("larger", &gpu, &cpu, &pb, true);
		gm_csr_free(&pb.R);
		gm_csr_free(&pb.Rt);
	}

	printf("\n%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
