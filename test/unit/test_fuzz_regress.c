/*
 * test_fuzz_regress.c: what fuzzing the core's input building found, and
 * the fuzz target's checks on inputs too slow to fuzz.  A child that runs
 * longer than 120 s (a loop that never ends) fails with SIGALRM.
 *
 * Each input runs through LLVMFuzzerTestOneInput of test/fuzz/fuzz_csr.c
 * (key maps, COO -> CSR with duplicates summed, transpose, each checked
 * against a naive reference) in a child process: a failed check aborts the
 * child, and the test says which input.  Output as test_core: "ok N - name"
 * or "not ok N - name: detail", then "N passed, M failed".  The random
 * large inputs are fresh on every run (seed printed; GM_TEST_SEED replays).
 */
#include "gm_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern int	fuzz_csr_large;

static char detail[512];

/*
 * Inputs kept from fuzzing: every crash libFuzzer finds is added here with
 * the bytes of its crash-* file.  (The first crash it found, the sort of an
 * empty key map, is a test of its own below: the target skips empty input.)
 */
static const struct
{
	const char *name;
	size_t		len;
	const uint8_t *data;
}			kept[] = {
	/* integer keys, duplicates of (-24, -24) and a raw int64 key */
	{"int keys with duplicates", 14,
	(const uint8_t *) "\x00\x00\x00\x00\x05\x30\x30\x07\xff\x01\x00\x00\x00\x00\x00"},
	/* byte keys of length 0 and 1 (the empty string is a key) */
	{"empty and short byte keys", 10,
	(const uint8_t *) "\x03\x21\x00\x00\x01\x01\x41\x01\x41\x02"},
	/* a coordinate out of range must be rejected (flag 4) */
	{"out-of-range coordinate rejected", 11,
	(const uint8_t *) "\x04\x07\x01\x02\x03\x04\x05\x06\x07\x08\x09"},
	/*
	 * the server's key kinds (flag 0x80): an item key of 2^62 + 1 in a
	 * bigint column, whose direct-index array's growth doubled an int64 past
	 * its range (UBSan: signed overflow; unsanitized: a loop that never
	 * ended).  Found by the extended target in its first seconds.
	 */
	{"one bigint key of 2^62 + 1 (dense-array growth)", 6,
	(const uint8_t *) "\xd0\xc1\x01\x08\xd0\x01"},
	/* every extreme as user (int8) and item (int2), and raw int64 keys */
	{"int8 and int2 extremes", 23,
	(const uint8_t *) "\x80\x00\x08\xa0\xa1\x01\xa1\xa8\x02\xa2\xa9\x03\xa3\xaa\x04\xd0\xdf\x05\xcf\xc0\x06\xae\xad"},
	/* long text keys sharing a prefix, and uuid items at both ends */
	{"long byte keys and uuids", 27,
	(const uint8_t *) "\x83\x00\x60\xc8\x40\x00\x6b\x01\x00\x01\xc8\x40\x00\x6b\x02\x7f\x02\xc8\x3f\xff\x6b\x6b\x40\x03\x00\x00\x04"},
};

/* Run one input in a child; 0 when it passed. */
static int
run_input(const uint8_t *data, size_t len)
{
	pid_t		pid;
	int			status;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
	{
		snprintf(detail, sizeof(detail), "fork failed");
		return 1;
	}
	if (pid == 0)
	{
		alarm(120);				/* a hang fails (SIGALRM) instead of hanging the tests */
		LLVMFuzzerTestOneInput(data, len);
		exit(0);				/* exit, not _exit: LeakSanitizer checks here */
	}
	if (waitpid(pid, &status, 0) < 0)
	{
		snprintf(detail, sizeof(detail), "waitpid failed");
		return 1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFSIGNALED(status))
		snprintf(detail, sizeof(detail), "killed by signal %d", WTERMSIG(status));
	else
		snprintf(detail, sizeof(detail), "exit status %d", WEXITSTATUS(status));
	return 1;
}

/* gm_keymap_sort of an empty map: no key, nothing to copy (sanitizers watch). */
static int
test_empty_keymap_sort(void)
{
	for (int bytes = 0; bytes <= 1; bytes++)
	{
		gm_keymap  *m = gm_keymap_create(bytes);
		int32_t		dummy = -1;

		if (!m)
		{
			snprintf(detail, sizeof(detail), "gm_keymap_create failed");
			return 1;
		}
		if (gm_keymap_sort(m, &dummy) != GM_OK || gm_keymap_size(m) != 0 || dummy != -1)
		{
			snprintf(detail, sizeof(detail), "sorting an empty %s map", bytes ? "byte" : "int");
			gm_keymap_free(m);
			return 1;
		}
		/* the map still works after the sort */
		if ((bytes ? gm_keymap_bytes(m, "k", 1) : gm_keymap_int(m, 7)) != 0)
		{
			snprintf(detail, sizeof(detail), "adding a key after sorting an empty map");
			gm_keymap_free(m);
			return 1;
		}
		gm_keymap_free(m);
	}
	return 0;
}

static int
test_kept_inputs(void)
{
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		if (run_input(kept[i].data, kept[i].len) != 0)
		{
			char		d[sizeof(detail)];

			snprintf(d, sizeof(d), "%s", detail);
			snprintf(detail, sizeof(detail), "input \"%s\": %.200s", kept[i].name, d);
			return 1;
		}
	return 0;
}

static uint64_t rng_state;

static uint64_t
rnext(void)
{
	uint64_t	z = (rng_state += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/*
 * Replicated inputs of about 100,000 entries: the core's threaded bucket
 * scatter, long rows of duplicates (qsort within a row) and key maps that
 * grow past their first tables.
 */
static int
test_large_inputs(void)
{
	fuzz_csr_large = 1;
	for (int t = 0; t < 4; t++)
	{
		size_t		len = 64 + rnext() % 2000;
		uint8_t    *in = malloc(len);

		if (!in)
			return 1;
		for (size_t i = 0; i < len; i++)
			in[i] = (uint8_t) rnext();
		/* replicate on; key kinds (the server's too), shift and extra rows at random */
		in[0] = (uint8_t) (0x78 | (in[0] & 0x83));
		if (run_input(in, len) != 0)
		{
			char		d[sizeof(detail)];

			snprintf(d, sizeof(d), "%s", detail);
			snprintf(detail, sizeof(detail), "random large input %d (%zu bytes): %.200s", t, len, d);
			free(in);
			return 1;
		}
		free(in);
	}
	fuzz_csr_large = 0;
	return 0;
}

static const struct
{
	const char *name;
	int			(*fn) (void);
}			tests[] = {
	{"fuzz inputs kept as regressions", test_kept_inputs},
	{"fuzz checks on replicated inputs (threaded CSR build)", test_large_inputs},
	{"keymap_sort of an empty map", test_empty_keymap_sort},
};

int
main(void)
{
	const char *env = getenv("GM_TEST_SEED");
	uint64_t	seed;
	int			passed = 0,
				failed = 0;

	if (env && *env)
		seed = strtoull(env, NULL, 10);
	else
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = ((uint64_t) ts.tv_sec * 1000000007ULL) ^ (uint64_t) ts.tv_nsec ^
			((uint64_t) getpid() << 32);
	}
	printf("# seed %llu (replay with GM_TEST_SEED=%llu)\n",
		   (unsigned long long) seed, (unsigned long long) seed);
	rng_state = seed;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
	{
		detail[0] = '\0';
		if (tests[i].fn() == 0)
		{
			printf("ok %zu - %s\n", i + 1, tests[i].name);
			passed++;
		}
		else
		{
			printf("not ok %zu - %s: %s\n", i + 1, tests[i].name, detail);
			failed++;
		}
		fflush(stdout);
	}
	printf("%d passed, %d failed\n", passed, failed);
	fflush(stdout);
	return failed ? 1 : 0;
}
