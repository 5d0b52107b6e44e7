/*
 * csr_bench: the lean CSR build (gm_csr_from_coo_consume, what a training
 * builds its matrix with after the read) alone, without PostgreSQL, on two
 * shapes of input, and a check that it gives gm_csr_from_coo's CSR:
 *   uniform   every entry's row and column drawn at random
 *   grouped   rows in order, each row's columns at random (as the scale
 *             bench's source comes from the read: a session's users in
 *             turn), row lengths with a heavy tail
 * Prints a markdown table (the fastest of REPEAT builds a shape).
 *
 *   make -C test/bench/cpu csr_bench && test/bench/cpu/csr_bench [rows users items]
 *
 * Defaults: 20M entries, 320,000 x 80,000 (the 500M bench's shape scaled
 * down).  Environment: REPEAT (default 3), CHECK=0 skips the comparison
 * (which needs twice the memory).  Threads: OMP_NUM_THREADS.
 */
#include "gm_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static inline uint64_t
mix(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* the input of one shape: malloc'd arrays (the build takes them), the entries made */
static int64_t
make_input(int grouped, int64_t nnz, int32_t nu, int32_t ni, int32_t **r, int32_t **c, float **v)
{
	int64_t		n = 0;

	*r = malloc(sizeof(int32_t) * (size_t) nnz);
	*c = malloc(sizeof(int32_t) * (size_t) nnz);
	*v = malloc(sizeof(float) * (size_t) nnz);
	if (!*r || !*c || !*v)
	{
		fprintf(stderr, "csr_bench: out of memory for %lld entries\n", (long long) nnz);
		exit(1);
	}
	if (!grouped)
	{
#pragma omp parallel for schedule(static)
		for (int64_t i = 0; i < nnz; i++)
		{
			uint64_t	s = mix((uint64_t) i);

			(*r)[i] = (int32_t) ((s >> 11) % (uint64_t) nu);
			(*c)[i] = (int32_t) ((s >> 40) % (uint64_t) ni);
			(*v)[i] = 1.0f;
		}
		return nnz;
	}
	for (int32_t u = 0; u < nu && n < nnz; u++)
	{
		double		x = (double) (mix((uint64_t) u * 7 + 1) >> 11) / 9007199254740992.0;
		int64_t		len = (int64_t) ((double) nnz / nu * 0.41 / pow(1 - x * 0.999, 0.6));

		if (len < 1)
			len = 1;
		if (n + len > nnz)
			len = nnz - n;
		for (int64_t k = 0; k < len; k++)
		{
			(*r)[n + k] = u;
			(*c)[n + k] = (int32_t) ((mix((uint64_t) (n + k)) >> 20) % (uint64_t) ni);
			(*v)[n + k] = 1.0f;
		}
		n += len;
	}
	return n;
}

int
main(int argc, char **argv)
{
	int64_t		nnz = argc > 1 ? atoll(argv[1]) : 20000000;
	int32_t		nu = argc > 2 ? atoi(argv[2]) : 320000,
				ni = argc > 3 ? atoi(argv[3]) : 80000;
	const char *e = getenv("REPEAT");
	int			repeat = e && *e ? atoi(e) : 3,
				check = !(getenv("CHECK") && strcmp(getenv("CHECK"), "0") == 0),
				threads = 1,
				failed = 0;
	static const char *const shapes[2] = {"uniform", "grouped"};

#ifdef _OPENMP
	threads = omp_get_max_threads();
#endif
	if (nnz < 1 || nu < 1 || ni < 1 || repeat < 1)
	{
		fprintf(stderr, "usage: csr_bench [rows users items] (all >= 1)\n");
		return 2;
	}
	printf("### gm_csr_from_coo_consume: %lld rows, %d x %d, %d threads\n\n",
		   (long long) nnz, nu, ni, threads);
	printf("| input | entries | after summing duplicates | build s (fastest of %d) | M entries/s | the same CSR as gm_csr_from_coo |\n",
		   repeat);
	printf("|---|---|---|---|---|---|\n");
	for (int g = 0; g < 2; g++)
	{
		double		best = INFINITY;
		int64_t		n = 0,
					out_nnz = 0;
		const char *same = "not checked";

		for (int rep = 0; rep < repeat; rep++)
		{
			int32_t    *r,
					   *c;
			float	   *v;
			gm_csr		a = {0},
						b = {0};
			char		err[GM_ERRLEN];
			double		t0;

			n = make_input(g, nnz, nu, ni, &r, &c, &v);
			if (check && rep == 0 &&
				gm_csr_from_coo(nu, ni, n, r, c, v, &b, err, sizeof(err)) != GM_OK)
			{
				fprintf(stderr, "csr_bench: gm_csr_from_coo: %s\n", err);
				return 1;
			}
			t0 = gm_now();
			if (gm_csr_from_coo_consume(nu, ni, n, r, c, v, NULL, &a, err, sizeof(err)) != GM_OK)
			{
				fprintf(stderr, "csr_bench: %s\n", err);
				return 1;
			}
			if (gm_now() - t0 < best)
				best = gm_now() - t0;
			out_nnz = a.nnz;
			if (check && rep == 0)
			{
				int			eq = a.nnz == b.nnz &&
					memcmp(a.indptr, b.indptr, sizeof(int64_t) * ((size_t) nu + 1)) == 0 &&
					memcmp(a.indices, b.indices, sizeof(int32_t) * (size_t) a.nnz) == 0 &&
					memcmp(a.data, b.data, sizeof(float) * (size_t) a.nnz) == 0;

				same = eq ? "yes" : "NO";
				failed += !eq;
				gm_csr_free(&b);
			}
			gm_csr_free(&a);
		}
		printf("| %s | %lld | %lld | %.3f | %.0f | %s |\n", shapes[g], (long long) n,
			   (long long) out_nnz, best, n / best / 1e6, same);
	}
	return failed ? 1 : 0;
}
