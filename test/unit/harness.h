/*
 * harness.h: what every C unit test program of the core shares: the failure
 * macros, one seeded random stream (splitmix64) per test, allocation that
 * exits when memory runs out, and the runner that prints a line per test
 * and "N passed, M failed".  Header-only: each test program includes it
 * once and keeps its own table of tests and its own main.
 *
 * A test is an int (*)(void) that returns 0 when it passes; on a failed
 * CHECK it jumps to its label fail: with the message in detail.  The seed
 * comes from GM_TEST_SEED (a replay) or the clock; test i draws from its
 * own stream, so one test's draws never shift another's.
 */
#ifndef GM_TEST_HARNESS_H
#define GM_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char detail[1024];

#define FAIL(...) \
	do { snprintf(detail, sizeof(detail), __VA_ARGS__); goto fail; } while (0)
#define CHECK(cond, ...) \
	do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static uint64_t rng_state;

/* the next 64 random bits (splitmix64) */
static inline uint64_t
rnext(void)
{
	uint64_t	z = (rng_state += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* uniform [0, 1) */
static inline double
runif(void)
{
	return (rnext() >> 11) * (1.0 / 9007199254740992.0);
}

/* uniform integer in [lo, hi] */
static inline int64_t
rint_range(int64_t lo, int64_t hi)
{
	return lo + (int64_t) (rnext() % (uint64_t) (hi - lo + 1));
}

/* malloc that exits the program when memory runs out (n = 0 is fine) */
static inline void *
xmalloc(size_t n)
{
	void	   *p = malloc(n > 0 ? n : 1);

	if (!p)
	{
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

/* calloc that exits the program when memory runs out */
static inline void *
xcalloc(size_t n, size_t s)
{
	void	   *p = calloc(n > 0 ? n : 1, s > 0 ? s : 1);

	if (!p)
	{
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

/* one entry of a program's table of tests */
typedef struct
{
	const char *name;
	int			(*fn) (void);
} gm_test;

/* The run's seed: GM_TEST_SEED when set (a replay), else from the clock. */
static inline uint64_t
gm_test_seed(void)
{
	const char *env = getenv("GM_TEST_SEED");
	struct timespec ts;

	if (env && *env)
		return strtoull(env, NULL, 10);
	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t) ts.tv_sec * 1000000007ULL) ^ (uint64_t) ts.tv_nsec ^
		((uint64_t) getpid() << 32);
}

/*
 * Run every test of the table, each from its own stream of the seed; print
 * "ok"/"not ok" lines and "N passed, M failed".  Returns main's exit code.
 */
static inline int
gm_test_run(const gm_test *tests, int ntests, uint64_t seed)
{
	int			passed = 0,
				failed = 0;

	fflush(stdout);
	for (int i = 0; i < ntests; i++)
	{
		rng_state = seed ^ (0xD1B54A32D192ED03ULL * (uint64_t) (i + 1));
		detail[0] = '\0';
		if (tests[i].fn() == 0)
		{
			printf("ok %d - %s\n", i + 1, tests[i].name);
			passed++;
		}
		else
		{
			printf("not ok %d - %s: %s\n", i + 1, tests[i].name, detail);
			failed++;
		}
		fflush(stdout);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}

/*
 * The whole main() of a test file: draws (or takes GM_TEST_SEED) the seed,
 * prints how to replay it and runs the table.
 */
static inline int
gm_test_main(const gm_test *tests, int ntests)
{
	uint64_t	seed = gm_test_seed();

	printf("# seed %llu (replay with GM_TEST_SEED=%llu)\n",
		   (unsigned long long) seed, (unsigned long long) seed);
	return gm_test_run(tests, ntests, seed);
}

#endif							/* GM_TEST_HARNESS_H */
