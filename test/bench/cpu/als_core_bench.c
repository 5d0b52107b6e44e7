/*
 * als_core_bench: the CPU core's ALS iteration on the ML-20M-shaped dataset,
 * by step and thread count, without PostgreSQL (so without its read and
 * store phases), and the same iteration through the training loop
 * (gm_mf_train driving the CPU table of implicit ALS), whose time must match
 * the sum of the steps.  Prints a markdown table.
 *
 *   make -C test/bench/cpu && test/bench/cpu/als_core_bench [k ...]
 *
 * Environment: THREADS (default "1 2"), REPEAT (iterations timed per
 * configuration, fastest kept; default 2), USERS/ITEMS/ROWS (default the
 * ML-20M shape).  Each configuration starts from the same initial factors.
 */
#include "gm_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long
env_long(const char *name, long dflt)
{
	const char *v = getenv(name);

	return v && *v ? atol(v) : dflt;
}

/* the fastest iteration gm_mf_train reported (seconds are cumulative) */
typedef struct
{
	double		last,
				best;
} iter_clock;

static void
on_iteration(void *arg, int it, double loss, double rmse, double seconds)
{
	iter_clock *c = arg;

	(void) it;
	(void) loss;
	(void) rmse;
	if (seconds - c->last < c->best)
		c->best = seconds - c->last;
	c->last = seconds;
}

int
main(int argc, char **argv)
{
	gm_synth	g = {0};
	char		err[GM_ERRLEN];
	gm_csr		R0 = {0},
				Rt0 = {0},
				C = {0},
				Ct = {0};
	int32_t    *R,
			   *I,
			   *items;
	float	   *V,
			   *vals;
	uint8_t    *hold,
			   *scratch;
	int64_t		n = 0;
	int			nk = argc > 1 ? argc - 1 : 2;
	int			ks[64] = {64, 128};
	int			threads[8],
				nt = 0;
	int			repeat = (int) env_long("REPEAT", 2);
	char		tl[256];
	double		t0;

	for (int i = 1; i < argc && i <= 64; i++)
		ks[i - 1] = atoi(argv[i]);
	snprintf(tl, sizeof(tl), "%s", getenv("THREADS") ? getenv("THREADS") : "1 2");
	for (char *s = strtok(tl, " ,"); s && nt < 8; s = strtok(NULL, " ,"))
		threads[nt++] = atoi(s);

	g.n_users = (int32_t) env_long("USERS", 138493);
	g.n_items = (int32_t) env_long("ITEMS", 26744);
	g.n_rows = env_long("ROWS", 20000263);
	g.min_per_user = 20;
	g.clusters = 32;
	g.affinity = 0.5;
	g.seed = 20;
	if (gm_synth_init(&g, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	t0 = gm_now();
	R = malloc(sizeof(int32_t) * (size_t) (g.n_rows + g.max_count));
	I = malloc(sizeof(int32_t) * (size_t) (g.n_rows + g.max_count));
	V = malloc(sizeof(float) * (size_t) (g.n_rows + g.max_count));
	items = malloc(sizeof(int32_t) * (size_t) g.max_count);
	vals = malloc(sizeof(float) * (size_t) g.max_count);
	hold = malloc((size_t) g.max_count);
	scratch = malloc((size_t) g.n_items + 64);
	if (!R || !I || !V || !items || !vals || !hold || !scratch)
	{
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (int32_t u = 0; u < g.n_users; u++)
	{
		int32_t		c = gm_synth_user(&g, u, items, vals, hold, scratch);

		for (int32_t i = 0; i < c; i++, n++)
		{
			R[n] = u;
			I[n] = items[i];
			V[n] = vals[i];
		}
	}
	/* R0, Rt0: the values (gm_mf_train's input); C, Ct: confidences, alpha 1 */
	if (gm_csr_from_coo(g.n_users, g.n_items, n, R, I, V, &R0, err, sizeof(err)) != GM_OK ||
		gm_csr_transpose(&R0, &Rt0, err, sizeof(err)) != GM_OK ||
		gm_confidence(&R0, 1.0f, &C, err, sizeof(err)) != GM_OK ||
		gm_confidence(&Rt0, 1.0f, &Ct, err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	free(R);
	free(I);
	free(V);
	printf("## gpumf CPU core: one ALS iteration by step (seconds, fastest of %d)\n\n", repeat);
	printf("%d users, %d items, %lld nonzeros (generated and built in %.1f s); cg_steps 3, alpha 1, reg 0.01\n\n",
		   C.n_rows, C.n_cols, (long long) C.nnz, gm_now() - t0);
	printf("| factors | threads | gram(Y) | user solve | gram(X) | item solve | loss | iteration | vs 1 thread | gm_mf_train iteration |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	for (int ki = 0; ki < nk; ki++)
	{
		int			k = ks[ki];
		float	   *X = malloc(sizeof(float) * (size_t) C.n_rows * k);
		float	   *Y = malloc(sizeof(float) * (size_t) C.n_cols * k);
		float	   *G = malloc(sizeof(float) * (size_t) k * k);
		double		base = 0.0;

		if (!X || !Y || !G)
		{
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		for (int ti = 0; ti < nt; ti++)
		{
			double		best[6];

			for (int s = 0; s < 6; s++)
				best[s] = 1e300;
			gm_factors_init(X, C.n_rows, k, 42, 0);
			gm_factors_init(Y, C.n_cols, k, 42, 1);
			for (int r = 0; r < repeat; r++)
			{
				double		t[6];

				t[0] = gm_now();
				gm_gram(Y, C.n_cols, k, 0.01f, G, threads[ti]);
				t[1] = gm_now();
				gm_als_cg_solve_rows(&C, X, Y, G, k, 3, 0, C.n_rows, threads[ti]);
				t[2] = gm_now();
				gm_gram(X, C.n_rows, k, 0.01f, G, threads[ti]);
				t[3] = gm_now();
				gm_als_cg_solve_rows(&Ct, Y, X, G, k, 3, 0, Ct.n_rows, threads[ti]);
				t[4] = gm_now();
				(void) gm_als_loss(&C, X, Y, k, 0.01f, threads[ti]);
				t[5] = gm_now();
				for (int s = 0; s < 5; s++)
					if (t[s + 1] - t[s] < best[s])
						best[s] = t[s + 1] - t[s];
				if (t[5] - t[0] < best[5])
					best[5] = t[5] - t[0];
			}
			if (ti == 0)
				base = best[5];
			/* the same iteration through the training loop and the CPU ops table */
			{
				gm_mf_params p;
				gm_mf_data	d = {0};
				gm_mf_result res;
				iter_clock	clk = {0.0, INFINITY};
				gm_callbacks cb = {NULL, on_iteration, &clk};

				gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
				p.factors = k;
				p.iterations = repeat;
				p.cg_steps = 3;
				p.alpha = 1.0f;
				p.regularization = 0.01f;
				p.seed = 42;
				p.threads = threads[ti];
				d.R = &R0;
				d.Rt = &Rt0;
				d.X = X;
				d.Y = Y;
				if (gm_mf_train(&p, &d, &cb, &res, err, sizeof(err)) != GM_OK)
				{
					fprintf(stderr, "gm_mf_train: %s\n", err);
					return 1;
				}
				printf("| %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2fx | %.3f |\n",
					   k, threads[ti], best[0], best[1], best[2], best[3], best[4], best[5],
					   base / best[5], clk.best);
			}
			fflush(stdout);
		}
		free(X);
		free(Y);
		free(G);
	}
	gm_csr_free(&R0);
	gm_csr_free(&Rt0);
	gm_csr_free(&C);
	gm_csr_free(&Ct);
	gm_synth_free(&g);
	return 0;
}
