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
 *       with gm_tune (gpumf_tune's search; method local, bayes, random, a
 *       comma list of them, both = local,random or all; `seeds` searches
 *       each, every method and seed on the same validation split and with
 *       the same budget), train the best setting on the whole of train.txt,
 *       report the test metrics, and summarise each method against random
 *       (mean, standard deviation, wins per seed, the best validation
 *       metric after a third, two thirds and all of the budget).  The test
 *       split is never looked at before that last step.
 *
 * Options: --data DIR (train.txt, test.txt), --users N (keep a seeded
 * sample of N users of the split, and the items they touch; --sample-seed
 * S), --ratings FILE (instead of --data: "user item ..." lines such as
 * MovieLens' u.data, every row an interaction; the test split is a seeded
 * --test-fraction, default 0.2, of each user's items), --synthetic USERS
 * (instead of --data: the ML-20M-shaped synthetic data of the GPU
 * benchmark, 138493 users for the full size, rows scaled with the users;
 * its ratings are the values, its holdout marks the test split), --name NAME (the
 * table's dataset column), --backend cpu|cuda, --module PATH
 * (gpumf_cuda.so), --threads N.
 * Keys: k, iters, reg, alpha, alpha0, nu, solver (cg|exact|block), block,
 * sweeps, cg, tf32 (-1 auto, 0, 1), seed, eval_every (run: print the test metrics every so many
 * iterations, for the learning curve only); tune: budget, method, seeds,
 * seed0 (the first seed's number, 1: seeds 4..6 are seed0=4 seeds=3),
 * holdout, factors (e.g. 64,128,256), alpha0_lo/hi, reg_lo/hi, nu_lo/hi,
 * patience, every, metric (recall@20).
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stddef.h>
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

static int	g_users = 0;			/* --users: 0 = all */
static uint64_t g_sample_seed = 1;
static double g_test_fraction = 0.2;

/*
 * Keep a seeded sample of n_keep users (of those with training rows) and
 * renumber users and items compactly (items: those the kept users touch in
 * either split).  The lists are filtered in place; *mu, *mi become counts.
 */
static void
subsample(int32_t *r1, int32_t *c1, int64_t *n1, int32_t *r2, int32_t *c2,
		  int64_t *n2, int32_t *mu, int32_t *mi, int n_keep)
{
	int32_t    *umap = malloc(sizeof(int32_t) * ((size_t) *mu + 1)),
			   *imap = malloc(sizeof(int32_t) * ((size_t) *mi + 1)),
			   *users = malloc(sizeof(int32_t) * ((size_t) *mu + 1));
	int32_t		n_users = 0,
				nu = 0,
				ni = 0;
	int64_t		o;

	for (int32_t u = 0; u <= *mu; u++)
		umap[u] = -1;
	for (int64_t e = 0; e < *n1; e++)
		umap[r1[e]] = 0;
	for (int32_t u = 0; u <= *mu; u++)
		if (umap[u] == 0)
			users[n_users++] = u;
	/* the first n_keep of a seeded shuffle, kept in id order */
	for (int32_t i = 0; i < n_users && i < n_keep; i++)
	{
		int32_t		j = i + (int32_t) (gm_mix64(g_sample_seed * 0x9E3779B97F4A7C15ULL + i) %
									   (uint64_t) (n_users - i));
		int32_t		t = users[i];

		users[i] = users[j];
		users[j] = t;
	}
	for (int32_t u = 0; u <= *mu; u++)
		umap[u] = -1;
	for (int32_t i = 0; i < n_users && i < n_keep; i++)
		umap[users[i]] = 1;
	for (int32_t u = 0; u <= *mu; u++)
		if (umap[u] == 1)
			umap[u] = nu++;
	for (int32_t i = 0; i <= *mi; i++)
		imap[i] = -1;
	for (int64_t e = 0; e < *n1; e++)
		if (umap[r1[e]] >= 0)
			imap[c1[e]] = 0;
	for (int64_t e = 0; e < *n2; e++)
		if (r2[e] <= *mu && umap[r2[e]] >= 0)
			imap[c2[e]] = 0;
	for (int32_t i = 0; i <= *mi; i++)
		if (imap[i] == 0)
			imap[i] = ni++;
	o = 0;
	for (int64_t e = 0; e < *n1; e++)
		if (umap[r1[e]] >= 0)
		{
			r1[o] = umap[r1[e]];
			c1[o++] = imap[c1[e]];
		}
	*n1 = o;
	o = 0;
	for (int64_t e = 0; e < *n2; e++)
		if (r2[e] <= *mu && umap[r2[e]] >= 0)
		{
			r2[o] = umap[r2[e]];
			c2[o++] = imap[c2[e]];
		}
	*n2 = o;
	*mu = nu - 1;
	*mi = ni - 1;
	free(umap);
	free(imap);
	free(users);
}

/*
 * A ratings file ("user item ..." per line, e.g. MovieLens' u.data): every
 * row an interaction (0/1), users and items renumbered compactly, the test
 * split a seeded g_test_fraction of each user's items (gm_split_holdout,
 * seed 7; the validation split is carved later from the rest).
 */
static void
load_ratings(const char *path, dataset *d)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0;
	int64_t		n = 0,
				alloc = 1 << 16;
	int32_t    *r = malloc(sizeof(int32_t) * alloc),
			   *c = malloc(sizeof(int32_t) * alloc),
				mu = -1,
				mi = -1,
				nu = 0,
				ni = 0,
			   *umap,
			   *imap;
	float	   *v;
	gm_csr		all;

	if (!f)
		DIE("cannot open %s", path);
	while (getline(&line, &cap, f) > 0)
	{
		long		u,
					i;

		if (sscanf(line, "%ld %ld", &u, &i) != 2 || u < 0 || i < 0 || u > INT32_MAX - 1 ||
			i > INT32_MAX - 1)
			continue;
		if (n == alloc)
		{
			alloc *= 2;
			r = realloc(r, sizeof(int32_t) * alloc);
			c = realloc(c, sizeof(int32_t) * alloc);
		}
		r[n] = (int32_t) u;
		c[n++] = (int32_t) i;
		mu = u > mu ? (int32_t) u : mu;
		mi = i > mi ? (int32_t) i : mi;
	}
	free(line);
	fclose(f);
	if (n == 0)
		DIE("no \"user item\" lines in %s", path);
	umap = malloc(sizeof(int32_t) * ((size_t) mu + 1));
	imap = malloc(sizeof(int32_t) * ((size_t) mi + 1));
	for (int32_t u = 0; u <= mu; u++)
		umap[u] = -1;
	for (int32_t i = 0; i <= mi; i++)
		imap[i] = -1;
	for (int64_t e = 0; e < n; e++)
		umap[r[e]] = imap[c[e]] = 0;
	for (int32_t u = 0; u <= mu; u++)
		if (umap[u] == 0)
			umap[u] = nu++;
	for (int32_t i = 0; i <= mi; i++)
		if (imap[i] == 0)
			imap[i] = ni++;
	for (int64_t e = 0; e < n; e++)
	{
		r[e] = umap[r[e]];
		c[e] = imap[c[e]];
	}
	v = malloc(sizeof(float) * (size_t) n);
	for (int64_t e = 0; e < n; e++)
		v[e] = 1.0f;
	if (gm_csr_from_coo(nu, ni, n, r, c, v, &all, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	for (int64_t e = 0; e < all.nnz; e++)
		all.data[e] = 1.0f;
	if (gm_split_holdout(&all, g_test_fraction, 7, &d->train, &d->test, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&d->train, &d->train_t, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	d->n_test = d->test.nnz;
	gm_csr_free(&all);
	free(r);
	free(c);
	free(v);
	free(umap);
	free(imap);
}

/*
 * A synthetic dataset of the ML-20M shape (gm_synth as the GPU benchmark
 * makes it: 26,744 items, 144.4 rows per user on average, at least 20,
 * 40 planted clusters, affinity 0.5, seed 2024) with n_users users and the
 * rows scaled with them; values are the generator's ratings (0.5 .. 5),
 * the test split the generator's holdout marks (about one row in five).
 */
static void
load_synthetic(int32_t n_users, dataset *d)
{
	gm_synth	g;
	int64_t    *off;
	int32_t    *it,
			   *r,
			   *c,
			   *rt,
			   *ct;
	float	   *val,
			   *v,
			   *vt;
	uint8_t    *ho;
	int64_t		ntr = 0,
				nte = 0;

	memset(&g, 0, sizeof(g));
	g.n_users = n_users;
	g.n_items = 26744;
	g.n_rows = (int64_t) llround(20000263.0 * n_users / 138493.0);
	g.min_per_user = 20;
	g.clusters = 40;
	g.affinity = 0.5;
	g.seed = 2024;
	if (gm_synth_init(&g, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	off = calloc((size_t) n_users + 1, sizeof(int64_t));
	for (int32_t u = 0; u < n_users; u++)
		off[u + 1] = off[u] + g.counts[u];
	it = malloc(sizeof(int32_t) * (size_t) off[n_users]);
	val = malloc(sizeof(float) * (size_t) off[n_users]);
	ho = malloc((size_t) off[n_users]);
#pragma omp parallel
	{
		uint8_t    *seen = calloc((size_t) g.n_items, 1);

#pragma omp for schedule(dynamic, 256)
		for (int32_t u = 0; u < n_users; u++)
			gm_synth_user(&g, u, it + off[u], val + off[u], ho + off[u], seen);
		free(seen);
	}
	for (int64_t e = 0; e < off[n_users]; e++)
		ho[e] ? nte++ : ntr++;
	r = malloc(sizeof(int32_t) * (size_t) ntr);
	c = malloc(sizeof(int32_t) * (size_t) ntr);
	v = malloc(sizeof(float) * (size_t) ntr);
	rt = malloc(sizeof(int32_t) * (size_t) nte);
	ct = malloc(sizeof(int32_t) * (size_t) nte);
	vt = malloc(sizeof(float) * (size_t) nte);
	ntr = nte = 0;
	for (int32_t u = 0; u < n_users; u++)
		for (int64_t e = off[u]; e < off[u + 1]; e++)
			if (ho[e])
			{
				rt[nte] = u;
				ct[nte] = it[e];
				vt[nte++] = 1.0f;
			}
			else
			{
				r[ntr] = u;
				c[ntr] = it[e];
				v[ntr++] = val[e];
			}
	if (gm_csr_from_coo(n_users, g.n_items, ntr, r, c, v, &d->train, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&d->train, &d->train_t, err, sizeof(err)) != GM_OK ||
		gm_csr_from_coo(n_users, g.n_items, nte, rt, ct, vt, &d->test, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	d->n_test = d->test.nnz;
	gm_synth_free(&g);
	free(off);
	free(it);
	free(val);
	free(ho);
	free(r);
	free(c);
	free(v);
	free(rt);
	free(ct);
	free(vt);
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
	if (g_users > 0)
		subsample(r1, c1, &n1, r2, c2, &n2, &mu, &mi, g_users);
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
				seed0,			/* the first seed's number (1) */
				patience,
				every;
	double		holdout;
	gm_tune_method methods[GM_TUNE_COUNT];
	int			n_methods;
	gm_tune_space space;
	gm_rank_metric metric;
	int			K;
	/* auto */
	double		seconds;
	int			kmax,
				trials,
				ref_budget;		/* auto: a gm_tune search of this budget beside it (0: none) */
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
	c->seed0 = 1;
	c->patience = 2;
	c->every = 1;
	c->holdout = 0.2;
	c->methods[0] = GM_TUNE_LOCAL;
	c->n_methods = 1;
	gm_tune_space_defaults(&c->space);
	c->metric = GM_METRIC_RECALL;
	c->K = 20;
	c->seconds = 60;
	c->kmax = 1024;
	c->trials = 32;
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

/* method=local|bayes|random|both|all or a comma list (no repeats) */
static void
parse_methods(config *c, const char *v)
{
	char		buf[256];

	snprintf(buf, sizeof(buf), "%s", !strcmp(v, "both") ? "local,random" :
			 !strcmp(v, "all") ? "local,bayes,random" : v);
	c->n_methods = 0;
	for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
	{
		gm_tune_method m;

		if (gm_tune_method_from_name(t, &m) != GM_OK)
			DIE("method: local, bayes, random, a comma list of them, both or all; not %s", t);
		for (int i = 0; i < c->n_methods; i++)
			if (c->methods[i] == m)
				DIE("method %s given twice", t);
		c->methods[c->n_methods++] = m;
	}
	if (c->n_methods == 0)
		DIE("method: name at least one");
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
	else if (!strcmp(key, "seed0"))
		c->seed0 = atoi(v);
	else if (!strcmp(key, "patience"))
		c->patience = atoi(v);
	else if (!strcmp(key, "every"))
		c->every = atoi(v);
	else if (!strcmp(key, "holdout"))
		c->holdout = atof(v);
	else if (!strcmp(key, "method"))
		parse_methods(c, v);
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
	else if (!strcmp(key, "seconds"))
		c->seconds = atof(v);
	else if (!strcmp(key, "kmax"))
		c->kmax = atoi(v);
	else if (!strcmp(key, "trials"))
		c->trials = atoi(v);
	else if (!strcmp(key, "ref_budget"))
		c->ref_budget = atoi(v);
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

/*
 * Train p on the whole of train.txt; the test metrics of the last
 * iteration (recall and NDCG at 20; *p10 precision at 10).
 */
static void
train_and_test(const dataset *d, const gm_mf_params *p, int eval_every,
			   gm_rank_result *out, double *p10, double *seconds, char *device,
			   size_t devlen)
{
	gm_rank_result r10;
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
					 sizeof(err)) != GM_OK ||
		gm_rank_eval(&d->train, &d->test, X, Y, p->factors, 10, p->threads, p->backend, NULL, &r10, err,
					 sizeof(err)) != GM_OK)
		DIE("%s", err);
	*p10 = r10.precision;
	free(X);
	free(Y);
}

static void
print_header(void)
{
	printf("| dataset | solver | k | reg | alpha | alpha0 | nu | iterations | recall@20 | NDCG@20 | p@10 | train s | s / iteration | device |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

static void
print_row(const gm_mf_params *p, const gm_rank_result *r, double p10, double seconds,
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
	printf("| %s | %s | %d | %.4g | %.4g | %.4g | %.3g | %d | %.4f | %.4f | %.4f | %.2f | %.3f | %s |\n",
		   g_name, solver, p->factors, p->regularization, p->alpha, p->alpha0, p->nu,
		   p->iterations, r->recall, r->ndcg, p10, seconds, seconds / p->iterations, device);
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

/* one search's outcome, for the summary */
typedef struct outcome
{
	double		val;			/* best validation metric */
	double		test_recall,
				test_ndcg,
				test_p10;
	double		search_s;
	double		at[3];			/* best validation after a third, two thirds, all trials */
} outcome;

static double
mean_of(const outcome *o, int n, size_t off)
{
	double		s = 0.0;

	for (int i = 0; i < n; i++)
		s += *(const double *) ((const char *) &o[i] + off);
	return n > 0 ? s / n : 0.0;
}

static double
sd_of(const outcome *o, int n, size_t off)
{
	double		m = mean_of(o, n, off),
				s = 0.0;

	for (int i = 0; i < n; i++)
	{
		double		x = *(const double *) ((const char *) &o[i] + off) - m;

		s += x * x;
	}
	return n > 1 ? sqrt(s / (n - 1)) : 0.0;
}

/*
 * The searches: every method in c->methods, c->seeds searches each, all on
 * the same validation split (holdout of train.txt, seed 20240101) with the
 * same budget; a row per search, then a summary per method and each
 * method against random, seed by seed.
 */
static void
tune(const dataset *d, config *c)
{
	gm_csr		tr,
				va,
				trt;
	int			nm = c->n_methods,
				rnd = -1,
				marks[3];
	outcome    *out = calloc((size_t) nm * c->seeds, sizeof(outcome));
	char		mname[32];

	if (c->seeds < 1 || c->seed0 < 1)
		DIE("tune: seeds and seed0 must be at least 1");

	if (gm_split_holdout(&d->train, c->holdout, 20240101, &tr, &va, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&tr, &trt, err, sizeof(err)) != GM_OK)
		DIE("%s", err);
	snprintf(mname, sizeof(mname), "%s@%d", gm_rank_metric_name(c->metric), c->K);
	marks[0] = (c->budget + 2) / 3;
	marks[1] = (2 * c->budget + 2) / 3;
	marks[2] = c->budget;
	printf("validation split: %.0f%% of each user's training items (%lld of %lld), carved from the training part; the test split is used only for the test columns, after each search\n",
		   100 * c->holdout, (long long) va.nnz, (long long) d->train.nnz);
	printf("search: budget %d trainings, factors {", c->budget);
	for (int i = 0; i < c->space.n_factors; i++)
		printf("%s%d", i ? "," : "", c->space.factors[i]);
	printf("}, alpha0 [%g, %g], ridge of an average user [%g, %g], nu [%g, %g], up to %d iterations (evaluated every %d, patience %d), solver %s; trial 1 the defaults for every method\n\n",
		   c->space.alpha0_lo, c->space.alpha0_hi, c->space.reg_lo, c->space.reg_hi,
		   c->space.nu_lo, c->space.nu_hi, c->p.iterations, c->every, c->patience,
		   solver_name(c->p.solver));
	printf("| dataset | method | seed | budget | best validation %s | trial | k | reg | alpha0 | nu | iterations | test recall@20 | test NDCG@20 | test p@10 | search s | final train s |\n",
		   mname);
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int mi = 0; mi < nm; mi++)
	{
		if (c->methods[mi] == GM_TUNE_RANDOM)
			rnd = mi;
		for (int sd = 0; sd < c->seeds; sd++)
		{
			gm_tune_config tc;
			gm_tune_trial *trials = calloc(c->budget, sizeof(gm_tune_trial));
			outcome    *o = &out[mi * c->seeds + sd];
			int			best;
			double		t0 = gm_now(),
						run_best = -INFINITY;
			gm_rank_result r;
			gm_mf_params p;
			char		device[128];

			memset(&tc, 0, sizeof(tc));
			tc.base = c->p;
			tc.space = c->space;
			tc.method = c->methods[mi];
			tc.budget = c->budget;
			tc.seed = 1000 + (c->seed0 - 1) + sd;
			tc.base.seed = tc.seed;	/* as gpumf_tune does */
			tc.metric = c->metric;
			tc.K = c->K;
			tc.eval_every = c->every;
			tc.patience = c->patience;
			tc.on_trial = getenv("VERBOSE") ? on_trial : NULL;
			if (gm_tune(&tc, &tr, &trt, &va, NULL, trials, &best, err, sizeof(err)) != GM_OK)
				DIE("tune: %s", err);
			o->search_s = gm_now() - t0;
			for (int t = 0, m = 0; t < c->budget; t++)
			{
				if (trials[t].metric > run_best)
					run_best = trials[t].metric;
				while (m < 3 && t + 1 == marks[m])
					o->at[m++] = run_best;
			}
			p = trials[best].p;
			if (p.iterations < 1)
				p.iterations = 1;
			train_and_test(d, &p, 0, &r, &o->test_p10, &t0, device, sizeof(device));
			o->val = trials[best].metric;
			o->test_recall = r.recall;
			o->test_ndcg = r.ndcg;
			printf("| %s | %s | %d | %d | %.4f | %d | %d | %.4g | %.4g | %.3g | %d | %.4f | %.4f | %.4f | %.0f | %.2f |\n",
				   g_name, gm_tune_method_name(tc.method), c->seed0 + sd, c->budget, o->val,
				   best + 1, p.factors, p.regularization, p.alpha0, p.nu, p.iterations,
				   r.recall, r.ndcg, o->test_p10, o->search_s, t0);
			fflush(stdout);
			free(trials);
		}
	}

	printf("\n| dataset | method | searches | best validation %s (mean +- sd) | after %d / %d / %d trials | test recall@20 | test NDCG@20 | search s |\n",
		   mname, marks[0], marks[1], marks[2]);
	printf("|---|---|---|---|---|---|---|---|\n");
	for (int mi = 0; mi < nm; mi++)
	{
		const outcome *o = &out[mi * c->seeds];
		int			n = c->seeds;

		printf("| %s | %s | %d | %.4f +- %.4f | %.4f / %.4f / %.4f | %.4f +- %.4f | %.4f +- %.4f | %.0f |\n",
			   g_name, gm_tune_method_name(c->methods[mi]), n,
			   mean_of(o, n, offsetof(outcome, val)), sd_of(o, n, offsetof(outcome, val)),
			   mean_of(o, n, offsetof(outcome, at[0])), mean_of(o, n, offsetof(outcome, at[1])),
			   mean_of(o, n, offsetof(outcome, at[2])),
			   mean_of(o, n, offsetof(outcome, test_recall)),
			   sd_of(o, n, offsetof(outcome, test_recall)),
			   mean_of(o, n, offsetof(outcome, test_ndcg)),
			   sd_of(o, n, offsetof(outcome, test_ndcg)),
			   mean_of(o, n, offsetof(outcome, search_s)));
	}
	if (rnd >= 0)
	{
		printf("\nagainst random, seed by seed (the same seed, budget and validation split):\n\n");
		printf("| dataset | method | validation: wins / ties / losses | mean difference | test recall@20: wins / ties / losses | mean difference |\n");
		printf("|---|---|---|---|---|---|\n");
		for (int mi = 0; mi < nm; mi++)
		{
			int			w[2] = {0, 0},
						tie[2] = {0, 0},
						l[2] = {0, 0};
			double		dv = 0.0,
						dt = 0.0;

			if (mi == rnd)
				continue;
			for (int sd = 0; sd < c->seeds; sd++)
			{
				const outcome *a = &out[mi * c->seeds + sd],
						   *b = &out[rnd * c->seeds + sd];
				double		x[2] = {a->val - b->val, a->test_recall - b->test_recall};

				for (int q = 0; q < 2; q++)
				{
					if (fabs(x[q]) < 5e-5)
						tie[q]++;
					else if (x[q] > 0)
						w[q]++;
					else
						l[q]++;
				}
				dv += x[0];
				dt += x[1];
			}
			printf("| %s | %s | %d / %d / %d | %+.4f | %d / %d / %d | %+.4f |\n",
				   g_name, gm_tune_method_name(c->methods[mi]), w[0], tie[0], l[0],
				   dv / c->seeds, w[1], tie[1], l[1], dt / c->seeds);
		}
	}
	free(out);
	gm_csr_free(&tr);
	gm_csr_free(&va);
	gm_csr_free(&trt);
}

/* ------------------------------------------------------------ auto */

/*
 * What a bare gpumf_train does (gm_auto_tune, the block solver), on a
 * validation split carved from train.txt as gpumf_train carves it (20% of
 * each user's rows, the training's seed), then the chosen setting trained
 * on the whole of train.txt and measured on the test split.
 */
static void
auto_mode(const dataset *d, config *c)
{
	gm_csr		tr,
				va,
				trt;
	gm_auto_config ac;
	gm_auto_result ar;
	gm_tune_trial *trials = calloc(c->trials, sizeof(gm_tune_trial));
	gm_rank_result r_def,
				r_auto,
				r_ref;
	gm_mf_params p_def;
	double		p10,
				s_def,
				s_auto,
				s_ref = 0,
				ref_search = 0;
	char		device[128];
	int			ref_k = 0;

	memset(&r_ref, 0, sizeof(r_ref));
	/* as gpumf_train's search carves it: at most 50,000 users hold rows out */
	if (gm_split_holdout_users(&d->train, c->holdout, c->p.seed, 50000, &tr, &va, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&tr, &trt, err, sizeof(err)) != GM_OK)
		DIE("%s", err);

	/* 1. the fixed defaults (gpumf 0.3's bare call; autotune => false) */
	gm_mf_params_defaults(&p_def, GM_ALG_ALS_IMPLICIT);
	p_def.backend = c->p.backend;
	p_def.threads = c->p.threads;
	print_header();
	train_and_test(d, &p_def, 0, &r_def, &p10, &s_def, device, sizeof(device));
	print_row(&p_def, &r_def, p10, s_def, device);

	/* 2. the automatic search (a bare call), then its choice on every training row */
	memset(&ac, 0, sizeof(ac));
	ac.base = c->p;
	ac.base.solver = GM_SOLVER_BLOCK;
	ac.metric = c->metric;
	ac.K = c->K;
	ac.eval_every = c->every;
	ac.max_iterations = c->p.iterations > 15 ? c->p.iterations : 20;
	ac.max_factors = c->kmax;
	ac.max_trials = c->trials;
	ac.seconds = c->seconds;
	ac.on_trial = on_trial;
	if (gm_auto_tune(&ac, &tr, &trt, &va, NULL, trials, &ar, err, sizeof(err)) != GM_OK)
		DIE("auto: %s", err);
	train_and_test(d, &ar.best, 0, &r_auto, &p10, &s_auto, device, sizeof(device));
	print_row(&ar.best, &r_auto, p10, s_auto, device);
	printf("auto: %d trials in %.1f s%s (budget %.0f s, %d trials, factors up to %d); best: trial %d, validation %s@%d %.4f\n",
		   ar.trials, ar.seconds, ar.stopped_by_time ? ", stopped by the time budget" : "",
		   c->seconds, c->trials, c->kmax, ar.best_trial + 1, gm_rank_metric_name(c->metric), c->K,
		   ar.metric);

	/* 3. the reference: gpumf_tune's local search (c->space, ref_budget trials) on the same split */
	if (c->ref_budget > 0)
	{
		gm_tune_config tc;
		gm_tune_trial *rt = calloc(c->ref_budget, sizeof(gm_tune_trial));
		gm_mf_params p;
		int			best;
		double		t0 = gm_now();

		memset(&tc, 0, sizeof(tc));
		tc.base = c->p;
		tc.space = c->space;
		tc.method = GM_TUNE_LOCAL;
		tc.budget = c->ref_budget;
		tc.seed = 1001;
		tc.base.seed = c->p.seed;
		tc.metric = c->metric;
		tc.K = c->K;
		tc.eval_every = c->every;
		tc.patience = 2;
		tc.on_trial = getenv("VERBOSE") ? on_trial : NULL;
		if (gm_tune(&tc, &tr, &trt, &va, NULL, rt, &best, err, sizeof(err)) != GM_OK)
			DIE("tune: %s", err);
		ref_search = gm_now() - t0;
		p = rt[best].p;
		if (p.iterations < 1)
			p.iterations = 1;
		train_and_test(d, &p, 0, &r_ref, &p10, &s_ref, device, sizeof(device));
		print_row(&p, &r_ref, p10, s_ref, device);
		printf("reference: gm_tune local, %d trials in %.1f s, factors {", c->ref_budget, ref_search);
		for (int i = 0; i < c->space.n_factors; i++)
			printf("%s%d", i ? "," : "", c->space.factors[i]);
		printf("}; best validation %.4f\n", rt[best].metric);
		ref_k = p.factors;
		free(rt);
	}

	printf("\n| dataset | fixed defaults recall@20 / NDCG@20 | bare call (autotune) recall@20 / NDCG@20 | its k | search s | final train s | tuned (gm_tune local, %d trials) recall@20 / NDCG@20 | its k | search s | bare / tuned recall |\n",
		   c->ref_budget);
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	printf("| %s | %.4f / %.4f | %.4f / %.4f | %d | %.1f | %.2f | ", g_name, r_def.recall, r_def.ndcg,
		   r_auto.recall, r_auto.ndcg, ar.best.factors, ar.seconds, s_auto);
	if (c->ref_budget > 0)
		printf("%.4f / %.4f | %d | %.1f | %.3f |\n", r_ref.recall, r_ref.ndcg, ref_k, ref_search,
			   r_auto.recall / r_ref.recall);
	else
		printf("| | | |\n");
	free(trials);
	gm_csr_free(&tr);
	gm_csr_free(&va);
	gm_csr_free(&trt);
}

int
main(int argc, char **argv)
{
	const char *dir = NULL,
			   *ratings = NULL,
			   *module = "cuda/gpumf_cuda.so";
	int			a = 1,
				synthetic = 0;
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
		else if (!strcmp(argv[a], "--users") && a + 1 < argc)
			g_users = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--sample-seed") && a + 1 < argc)
			g_sample_seed = strtoull(argv[++a], NULL, 10);
		else if (!strcmp(argv[a], "--ratings") && a + 1 < argc)
			ratings = argv[++a];
		else if (!strcmp(argv[a], "--test-fraction") && a + 1 < argc)
			g_test_fraction = atof(argv[++a]);
		else if (!strcmp(argv[a], "--synthetic") && a + 1 < argc)
			synthetic = atoi(argv[++a]);
		else
			DIE("unknown option %s", argv[a]);
	}
	if ((dir != NULL) + (ratings != NULL) + (synthetic > 0) != 1 || a >= argc)
		DIE("usage: ials_quality --data DIR [--users N] [--sample-seed S] | --ratings FILE [--test-fraction F] | --synthetic USERS; [--name N] [--backend cpu|cuda] [--module so] [--threads n] run|tune key=value ...");
	if (g_backend == GM_BACKEND_CUDA)
	{
		char		name[128];

		if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
			DIE("no GPU: %s", err);
		printf("device: %s\n", name);
	}
	memset(&d, 0, sizeof(d));
	if (ratings)
		load_ratings(ratings, &d);
	else if (synthetic > 0)
		load_synthetic(synthetic, &d);
	else
		load(dir, &d);
	printf("%s: %d users x %d items, %lld training and %lld test interactions", g_name,
		   d.train.n_rows, d.train.n_cols, (long long) d.train.nnz, (long long) d.n_test);
	if (ratings)
		printf(" (%s, every row an interaction; test: %.0f%% of each user's items, seed 7)",
			   ratings, 100 * g_test_fraction);
	else if (synthetic > 0)
		printf(" (synthetic, the ML-20M shape with %d users: gm_synth seed 2024, 40 clusters, affinity 0.5, ratings 0.5 .. 5 as values; test: the generator's holdout rows)",
			   synthetic);
	else if (g_users > 0)
		printf(" (%d users sampled with seed %llu from %s, and the items they touch)", g_users,
			   (unsigned long long) g_sample_seed, dir);
	printf("\n\n");
	if (!strcmp(argv[a], "run"))
	{
		print_header();
		for (a++; a <= argc;)
		{
			config		c;
			gm_rank_result r;
			double		secs,
						p10;
			char		device[128];

			config_defaults(&c);
			for (; a < argc && strcmp(argv[a], "--"); a++)
				set_key(&c, argv[a]);
			a++;
			if (gm_mf_params_check(&c.p, err, sizeof(err)) != GM_OK)
				DIE("%s", err);
			train_and_test(&d, &c.p, c.eval_every, &r, &p10, &secs, device, sizeof(device));
			print_row(&c.p, &r, p10, secs, device);
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
	else if (!strcmp(argv[a], "auto"))
	{
		config		c;

		config_defaults(&c);
		c.every = 2;
		for (a++; a < argc; a++)
			set_key(&c, argv[a]);
		auto_mode(&d, &c);
	}
	else
		DIE("mode must be run, tune or auto");
	return 0;
}
