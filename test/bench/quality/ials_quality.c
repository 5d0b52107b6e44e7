/*
 * ials_quality: recommendation quality of gpumf's implicit ALS on public
 * benchmarks with fixed train/test splits (LightGCN's format: one line per
 * user, "user item item ..."), as LightGCN reports it: recall@20 and
 * NDCG@20 over all items, training items excluded.  No PostgreSQL: the
 * core (src/core) trains on the CPU, or on the GPU through the CUDA module
 * (--backend cuda), exactly as gpumf_train does.
 *
 *   ials_quality [options] run  key=value ... [-- key=value ...]
 *       train on train.txt with each configuration, report the test metrics
 *   ials_quality [options] tune key=value ...
 *       carve a validation split (holdout) out of train.txt, search on it
 *       (method local, random or both, `seeds` searches each), train the
 *       best setting on the whole of train.txt, report the test metrics.
 *       The test split is never looked at before that last step.
 *
 * Options: --data DIR (train.txt, test.txt), --name NAME (the table's
 * dataset column), --backend cpu|cuda, --module PATH (gpumf_cuda.so),
 * --threads N.
 * Keys: k, iters, reg, alpha, alpha0, nu, solver (cg|exact|block), block,
 * sweeps, cg, tf32 (-1 auto, 0, 1), seed, eval_every (run: print the test metrics every so many
 * iterations, for the learning curve only); tune: budget, method, seeds,
 * holdout, factors (e.g. 64,128,256), alpha0_lo/hi, reg_lo/hi, nu_lo/hi,
 * patience, every, metric (recall@20).
 */
#include "gm_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[GM_ERRLEN];

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(2); } while (0)

/* ------------------------------------------------------------ data */

typedef struct dataset
{
	gm_csr		train,
				train_t,
				test;
	int64_t		n_test;
} dataset;

/* Read a LightGCN file: each line "user item item ...". */
static void
read_lists(const char *path, int32_t **r, int32_t **c, int64_t *n, int32_t *max_u,
		   int32_t *max_i)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0,
				len = 0,
				alloc = 1 << 20;

	if (!f)
		DIE("cannot open %s", path);
	*r = malloc(sizeof(int32_t) * alloc);
	*c = malloc(sizeof(int32_t) * alloc);
	while (getline(&line, &cap, f) > 0)
	{
		char	   *p = line,
				   *end;
		long		u = strtol(p, &end, 10),
					i;

		if (end == p)
			continue;
		if (u > *max_u)
			*max_u = (int32_t) u;
		for (p = end;; p = end)
		{
			i = strtol(p, &end, 10);
			if (end == p)
				break;
			if (len == alloc)
			{
				alloc *= 2;
				*r = realloc(*r, sizeof(int32_t) * alloc);
				*c = realloc(*c, sizeof(int32_t) * alloc);
			}
			(*r)[len] = (int32_t) u;
			(*c)[len] = (int32_t) i;
			if (i > *max_i)
				*max_i = (int32_t) i;
			len++;
		}
	}
	free(line);
	fclose(f);
	*n = (int64_t) len;
}

static void
load(const char *dir, dataset *d)
{
	char		path[4096];
	int32_t    *r1,
			   *c1,
			   *r2,
			   *c2,
				mu = -1,
				mi = -1;
	int64_t		n1,
				n2;
	float	   *v;

	snprintf(path, sizeof(path), "%s/train.txt", dir);
	read_lists(path, &r1, &c1, &n1, &mu, &mi);
	snprintf(path, sizeof(path), "%s/test.txt", dir);
	read_lists(path, &r2, &c2, &n2, &mu, &mi);
	v = malloc(sizeof(float) * (size_t) (n1 > n2 ? n1 : n2));
	for (int64_t e = 0; e < (n1 > n2 ? n1 : n2); e++)
		v[e] = 1.0f;
	if (gm_csr_from_coo(mu + 1, mi + 1, n1, r1, c1, v, &d->train, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&d->train, &d->train_t, err, sizeof(err)) != GM_OK ||
		gm_csr_from_coo(mu + 1, mi + 1, n2, r2, c2, v, &d->test, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	/* duplicates were summed: back to 0/1 */
	for (int64_t e = 0; e < d->train.nnz; e++)
		d->train.data[e] = 1.0f;
	for (int64_t e = 0; e < d->train_t.nnz; e++)
		d->train_t.data[e] = 1.0f;
	d->n_test = d->test.nnz;
	free(r1);
	free(c1);
	free(r2);
	free(c2);
	free(v);
}

/* ------------------------------------------------------------ options */

static const char *g_name = "data";
static gm_backend_kind g_backend = GM_BACKEND_CPU;
static int	g_threads = 0;

typedef struct config
{
	gm_mf_params p;
	int			eval_every;
	/* tune */
	int			budget,
				seeds,
				patience,
				every;
	double		holdout;
	gm_tune_method method;
	int			both;
	gm_tune_space space;
	gm_rank_metric metric;
	int			K;
} config;

static void
config_defaults(config *c)
{
	memset(c, 0, sizeof(*c));
	gm_mf_params_defaults(&c->p, GM_ALG_ALS_IMPLICIT);
	c->p.backend = g_backend;
	c->p.threads = g_threads;
	c->budget = 30;
	c->seeds = 1;
	c->patience = 2;
	c->every = 1;
	c->holdout = 0.2;
	c->method = GM_TUNE_LOCAL;
	gm_tune_space_defaults(&c->space);
	c->metric = GM_METRIC_RECALL;
	c->K = 20;
}

static void
parse_factors(const char *v, gm_tune_space *s)
{
	char		buf[256];

	snprintf(buf, sizeof(buf), "%s", v);
	s->n_factors = 0;
	for (char *t = strtok(buf, ","); t && s->n_factors < 16; t = strtok(NULL, ","))
		s->factors[s->n_factors++] = atoi(t);
}

/* key=value into c */
static void
set_key(config *c, const char *kv)
{
	const char *eq = strchr(kv, '=');
	char		key[64];
	const char *v;

	if (!eq || eq - kv >= (long) sizeof(key))
		DIE("expected key=value, not %s", kv);
	memcpy(key, kv, eq - kv);
	key[eq - kv] = '\0';
	v = eq + 1;
	if (!strcmp(key, "k"))
		c->p.factors = atoi(v);
	else if (!strcmp(key, "iters"))
		c->p.iterations = atoi(v);
	else if (!strcmp(key, "reg"))
		c->p.regularization = (float) atof(v);
	else if (!strcmp(key, "alpha"))
		c->p.alpha = (float) atof(v);
	else if (!strcmp(key, "alpha0"))
		c->p.alpha0 = (float) atof(v);
	else if (!strcmp(key, "nu"))
		c->p.nu = (float) atof(v);
	else if (!strcmp(key, "cg"))
		c->p.cg_steps = atoi(v);
	else if (!strcmp(key, "block"))
		c->p.block_size = atoi(v);
	else if (!strcmp(key, "sweeps"))
		c->p.block_sweeps = atoi(v);
	else if (!strcmp(key, "tf32"))
		c->p.tf32 = atoi(v);
	else if (!strcmp(key, "seed"))
		c->p.seed = strtoull(v, NULL, 10);
	else if (!strcmp(key, "solver"))
		c->p.solver = !strcmp(v, "exact") ? GM_SOLVER_EXACT :
			!strcmp(v, "block") ? GM_SOLVER_BLOCK : GM_SOLVER_CG;
	else if (!strcmp(key, "eval_every"))
		c->eval_every = atoi(v);
	else if (!strcmp(key, "budget"))
		c->budget = atoi(v);
	else if (!strcmp(key, "seeds"))
		c->seeds = atoi(v);
	else if (!strcmp(key, "patience"))
		c->patience = atoi(v);
	else if (!strcmp(key, "every"))
		c->every = atoi(v);
	else if (!strcmp(key, "holdout"))
		c->holdout = atof(v);
	else if (!strcmp(key, "method"))
	{
		c->both = !strcmp(v, "both");
		if (!c->both && gm_tune_method_from_name(v, &c->method) != GM_OK)
			DIE("method: local, random or both");
	}
	else if (!strcmp(key, "factors"))
		parse_factors(v, &c->space);
	else if (!strcmp(key, "alpha0_lo"))
		c->space.alpha0_lo = atof(v);
	else if (!strcmp(key, "alpha0_hi"))
		c->space.alpha0_hi = atof(v);
	else if (!strcmp(key, "reg_lo"))
		c->space.reg_lo = atof(v);
	else if (!strcmp(key, "reg_hi"))
		c->space.reg_hi = atof(v);
	else if (!strcmp(key, "nu_lo"))
		c->space.nu_lo = atof(v);
	else if (!strcmp(key, "nu_hi"))
		c->space.nu_hi = atof(v);
	else if (!strcmp(key, "metric"))
	{
		if (gm_rank_metric_parse(v, &c->metric, &c->K, err, sizeof(err)) != GM_OK)
			DIE("%s", err);
	}
	else
		DIE("unknown key %s", key);
}

static const char *
solver_name(gm_solver s)
{
	return s == GM_SOLVER_EXACT ? "exact" : s == GM_SOLVER_BLOCK ? "block" : "cg";
}

/* ------------------------------------------------------------ run */

typedef struct curve
{
	const dataset *d;
	int			every;
	double		t0;
} curve;

static void
on_iter(void *arg, int it, double loss, double rmse, double seconds)
{
	(void) arg;
	(void) rmse;
	fprintf(stderr, "    iteration %d: loss %.6g, %.2f s\n", it, loss, seconds);
}

static void
on_eval_curve(void *arg, int it, const gm_rank_result *r)
{
	(void) arg;
	printf("    (curve) iteration %d: test recall@20 %.4f ndcg@20 %.4f\n", it, r->recall,
		   r->ndcg);
}

/* Train p on the whole of train.txt; the test metrics of the last iteration. */
static void
train_and_test(const dataset *d, const gm_mf_params *p, int eval_every,
			   gm_rank_result *out, double *seconds, char *device, size_t devlen)
{
	gm_mf_data	md;
	gm_mf_result res;
	gm_callbacks cb = {NULL, getenv("VERBOSE") ? on_iter : NULL, NULL};
	float	   *X = malloc(sizeof(float) * (size_t) d->train.n_rows * p->factors),
			   *Y = malloc(sizeof(float) * (size_t) d->train.n_cols * p->factors);
	int			rc;

	memset(&md, 0, sizeof(md));
	md.R = &d->train;
	md.Rt = &d->train_t;
	md.X = X;
	md.Y = Y;
	if (eval_every > 0)
	{
		gm_mf_eval	ev;

		/* the learning curve on the test split, printed only: it chooses nothing */
		memset(&ev, 0, sizeof(ev));
		ev.test = &d->test;
		ev.metric = GM_METRIC_RECALL;
		ev.K = 20;
		ev.every = eval_every;
		ev.on_eval = on_eval_curve;
		rc = gm_mf_train_eval(p, &md, &cb, &ev, &res, err, sizeof(err));
	}
	else
		rc = gm_mf_train(p, &md, &cb, &res, err, sizeof(err));
	if (rc != GM_OK)
		DIE("training failed: %s", err);
	*seconds = res.train_seconds;
	snprintf(device, devlen, "%s", res.device_name);
	if (gm_rank_eval(&d->train, &d->test, X, Y, p->factors, 20, p->threads, p->backend, NULL, out, err,
					 sizeof(err)) != GM_OK)
		DIE("%s", err);
	free(X);
	free(Y);
}

static void
print_header(void)
{
	printf("| dataset | solver | k | reg | alpha | alpha0 | nu | iterations | recall@20 | NDCG@20 | train s | s / iteration | device |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

static void
print_row(const gm_mf_params *p, const gm_rank_result *r, double seconds,
		  const char *device)
{
	char		solver[32];

	if (p->solver == GM_SOLVER_BLOCK)
		snprintf(solver, sizeof(solver), "block %dx%d%s", gm_block_size(p), p->block_sweeps,
				 p->backend == GM_BACKEND_CUDA && gm_use_tf32(p) ? " tf32" : "");
	else if (p->solver == GM_SOLVER_CG)
		snprintf(solver, sizeof(solver), "cg %d%s", p->cg_steps,
				 p->backend == GM_BACKEND_CUDA && gm_use_tf32(p) ? " tf32" : "");
	else
		snprintf(solver, sizeof(solver), "%s", solver_name(p->solver));
	printf("| %s | %s | %d | %.4g | %.4g | %.4g | %.3g | %d | %.4f | %.4f | %.2f | %.3f | %s |\n",
		   g_name, solver, p->factors, p->regularization, p->alpha, p->alpha0, p->nu,
		   p->iterations, r->recall, r->ndcg, seconds, seconds / p->iterations, device);
	fflush(stdout);
}

/* ------------------------------------------------------------ tune */

static void
on_trial(void *arg, const gm_tune_trial *t)
{
	(void) arg;
	fprintf(stderr, "    trial %d: k %d reg %.4g (eff %.4g) alpha0 %.4g nu %.3g -> %s %.4f at iteration %d of %d, %.1f s\n",
			t->trial, t->p.factors, t->p.regularization, t->reg_eff, t->p.alpha0, t->p.nu,
			"metric", t->metric, t->p.iterations, t->iterations_run, t->seconds);
}

static void
tune(const dataset *d, config *c)
{
	gm_csr		tr,
				va,
				trt;
	int			nm = c->both ? 2 : 1;
	double		sum_val[2] = {0, 0},
				sum_test[2] = {0, 0};

	if (gm_split_holdout(&d->train, c->holdout, 20240101, &tr, &va, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&tr, &trt, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	printf("validation split: %.0f%% of each user's training items (%lld of %lld), carved from train.txt; the test split is used only for the last column\n\n",
		   100 * c->holdout, (long long) va.nnz, (long long) d->train.nnz);
	printf("| dataset | method | seed | budget | best validation %s@%d | trial | k | reg | alpha0 | nu | iterations | test recall@20 | test NDCG@20 | search s | final train s |\n",
		   gm_rank_metric_name(c->metric), c->K);
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int mi = 0; mi < nm; mi++)
		for (int sd = 0; sd < c->seeds; sd++)
		{
			gm_tune_config tc;
			gm_tune_trial *trials = calloc(c->budget, sizeof(gm_tune_trial));
			int			best;
			double		t0 = gm_now(),
						secs;
			gm_rank_result r;
			gm_mf_params p;
			char		device[128];

			memset(&tc, 0, sizeof(tc));
			tc.base = c->p;
			tc.space = c->space;
			tc.method = c->both ? (gm_tune_method) mi : c->method;
			tc.budget = c->budget;
			tc.seed = 1000 + sd;
			tc.metric = c->metric;
			tc.K = c->K;
			tc.eval_every = c->every;
			tc.patience = c->patience;
			tc.on_trial = getenv("VERBOSE") ? on_trial : NULL;
			if (gm_tune(&tc, &tr, &trt, &va, NULL, trials, &best, err, sizeof(err)) != GM_OK)
				DIE("tune: %s", err);
			secs = gm_now() - t0;
			p = trials[best].p;
			if (p.iterations < 1)
				p.iterations = 1;
			train_and_test(d, &p, 0, &r, &t0, device, sizeof(device));
			printf("| %s | %s | %d | %d | %.4f | %d | %d | %.4g | %.4g | %.3g | %d | %.4f | %.4f | %.0f | %.2f |\n",
				   g_name, gm_tune_method_name(tc.method), sd + 1, c->budget, trials[best].metric,
				   best + 1, p.factors, p.regularization, p.alpha0, p.nu, p.iterations,
				   r.recall, r.ndcg, secs, t0);
			fflush(stdout);
			sum_val[mi] += trials[best].metric;
			sum_test[mi] += r.recall;
			free(trials);
		}
	printf("\n");
	for (int mi = 0; mi < nm; mi++)
		printf("mean over %d searches, %s: best validation %s@%d %.4f, test recall@20 %.4f\n",
			   c->seeds, gm_tune_method_name(c->both ? (gm_tune_method) mi : c->method),
			   gm_rank_metric_name(c->metric), c->K, sum_val[mi] / c->seeds,
			   sum_test[mi] / c->seeds);
	gm_csr_free(&tr);
	gm_csr_free(&va);
	gm_csr_free(&trt);
}

int
main(int argc, char **argv)
{
	const char *dir = NULL,
			   *module = "cuda/gpumf_cuda.so";
	int			a = 1;
	dataset		d;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (; a < argc && argv[a][0] == '-' && argv[a][1] == '-'; a++)
	{
		if (!strcmp(argv[a], "--data") && a + 1 < argc)
			dir = argv[++a];
		else if (!strcmp(argv[a], "--name") && a + 1 < argc)
			g_name = argv[++a];
		else if (!strcmp(argv[a], "--backend") && a + 1 < argc)
			g_backend = !strcmp(argv[++a], "cuda") ? GM_BACKEND_CUDA : GM_BACKEND_CPU;
		else if (!strcmp(argv[a], "--module") && a + 1 < argc)
			module = argv[++a];
		else if (!strcmp(argv[a], "--threads") && a + 1 < argc)
			g_threads = atoi(argv[++a]);
		else
			DIE("unknown option %s", argv[a]);
	}
	if (!dir || a >= argc)
		DIE("usage: ials_quality --data DIR [--name N] [--backend cpu|cuda] [--module so] [--threads n] run|tune key=value ...");
	if (g_backend == GM_BACKEND_CUDA)
	{
		char		name[128];

		if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
			DIE("no GPU: %s", err);
		printf("device: %s\n", name);
	}
	memset(&d, 0, sizeof(d));
	load(dir, &d);
	printf("%s: %d users x %d items, %lld training and %lld test interactions\n\n", g_name,
		   d.train.n_rows, d.train.n_cols, (long long) d.train.nnz, (long long) d.n_test);
	if (!strcmp(argv[a], "run"))
	{
		print_header();
		for (a++; a <= argc;)
		{
			config		c;
			gm_rank_result r;
			double		secs;
			char		device[128];

			config_defaults(&c);
			for (; a < argc && strcmp(argv[a], "--"); a++)
				set_key(&c, argv[a]);
			a++;
			if (gm_mf_params_check(&c.p, err, sizeof(err)) != GM_OK)
				DIE("%s", err);
			train_and_test(&d, &c.p, c.eval_every, &r, &secs, device, sizeof(device));
			print_row(&c.p, &r, secs, device);
		}
	}
	else if (!strcmp(argv[a], "tune"))
	{
		config		c;

		config_defaults(&c);
		for (a++; a < argc; a++)
			set_key(&c, argv[a]);
		tune(&d, &c);
	}
	else
		DIE("mode must be run or tune");
	return 0;
}
