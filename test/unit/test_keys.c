/*
 * test_keys.c: unit tests of the key maps and the COO -> CSR building at the
 * limits of what a table can hold: integer keys at the ends of int2, int4
 * and int8 (and 2^62, whose dense-array growth once doubled an int64 until
 * it overflowed and never returned), keys chosen so that an unseeded hash
 * would make every insert scan the table, and cancellation of the long
 * steps (sorting the keys, building and transposing the CSR).
 */
#include "harness.h"

#include <math.h>
#include <string.h>
#include <omp.h>

#include "gm_core.h"
#include "gm_linalg.h"

/* The keys a smallint, integer or bigint column can hold at its ends, and around them. */
static const int64_t extremes[] = {
	INT16_MIN, INT16_MIN + 1, -1, 0, 1, INT16_MAX - 1, INT16_MAX,
	(int64_t) 1 << 15, ((int64_t) 1 << 16) - 1, (int64_t) 1 << 16,
	GM_KEYMAP_DENSE_MAX - 1, GM_KEYMAP_DENSE_MAX, GM_KEYMAP_DENSE_MAX + 1,
	INT32_MIN, INT32_MIN + 1, INT32_MAX - 1, INT32_MAX, (int64_t) INT32_MAX + 1,
	(int64_t) 1 << 40, (int64_t) 1 << 62, ((int64_t) 1 << 62) + 1, ((int64_t) 1 << 62) - 1,
	INT64_MIN, INT64_MIN + 1, INT64_MAX - 1, INT64_MAX, -((int64_t) 1 << 62),
};

#define NEXT ((int) (sizeof(extremes) / sizeof(extremes[0])))

/* seconds since t0 */
static double
since(double t0)
{
	return gm_now() - t0;
}

/*
 * Each extreme key alone, then all of them with a dense range 0 .. 99999
 * between them, through gm_keymap_int_dense: every call returns at once,
 * the same key gets the same index, distinct keys distinct indices, and the
 * sorted map reads the keys back in order (the dense array follows).
 */
static int
test_dense_extremes(void)
{
	gm_keymap  *m = NULL;
	int32_t    *o2n = NULL;
	double		t0 = gm_now();

	for (int e = 0; e < NEXT; e++)
	{
		m = gm_keymap_create(0);
		CHECK(m, "create");
		CHECK(gm_keymap_int_dense(m, extremes[e]) == 0, "key %lld alone", (long long) extremes[e]);
		CHECK(gm_keymap_int_dense(m, extremes[e]) == 0, "key %lld again", (long long) extremes[e]);
		CHECK(gm_keymap_find_int(m, extremes[e]) == 0, "find %lld", (long long) extremes[e]);
		CHECK(gm_keymap_size(m) == 1, "size after one key");
		gm_keymap_free(m);
		m = NULL;
	}
	CHECK(since(t0) < 5, "single keys took %.1f s", since(t0));

	m = gm_keymap_create(0);
	CHECK(m, "create");
	for (int round = 0; round < 2; round++)
		for (int64_t k = 0; k < 100000; k++)
		{
			int32_t		got = gm_keymap_int_dense(m, k);

			CHECK(got == (int32_t) k, "dense key %lld -> %d (round %d)", (long long) k, got, round);
			if (round == 1 && k % 997 == 0)
			{
				int			e = (int) (k / 997) % NEXT;
				int32_t		a = gm_keymap_int_dense(m, extremes[e]),
							b = gm_keymap_int(m, extremes[e]);

				CHECK(a >= 0 && a == b, "extreme %lld: dense %d, hash %d",
					  (long long) extremes[e], a, b);
			}
		}
	CHECK(since(t0) < 10, "mapping took %.1f s", since(t0));
	{
		int32_t		n = gm_keymap_size(m);
		int64_t		prev = INT64_MIN;

		o2n = xmalloc(sizeof(int32_t) * (size_t) n);
		CHECK(gm_keymap_sort(m, o2n) == GM_OK, "sort");
		for (int32_t i = 0; i < n; i++)
		{
			int64_t		k = gm_keymap_int_at(m, i);

			CHECK(i == 0 || k > prev, "keys not ascending at %d", i);
			CHECK(gm_keymap_int_dense(m, k) == i, "dense lookup of %lld after the sort", (long long) k);
			CHECK(gm_keymap_find_int(m, k) == i, "find of %lld after the sort", (long long) k);
			prev = k;
		}
		CHECK(gm_keymap_size(m) == n, "lookups after the sort added keys");
		/* 100000 dense keys and the extremes above 99999 or below 0 */
		CHECK(gm_keymap_memory(m) > (size_t) n * 16, "memory %zu for %d keys", gm_keymap_memory(m), n);
	}
	free(o2n);
	gm_keymap_free(m);
	return 0;
fail:
	free(o2n);
	gm_keymap_free(m);
	return 1;
}

/*
 * gm_keymap_drop_lookups (a training's maps once every key is in): the keys
 * read back by index as before, the map holds less, and adding, finding or
 * sorting is refused (-1, GM_EINVAL) instead of touching freed tables.
 */
static int
test_drop_lookups(void)
{
	gm_keymap  *m = NULL;
	int32_t		o2n[1];

	for (int bytes = 0; bytes < 2; bytes++)
	{
		size_t		before;
		int32_t		n = 0;
		char		key[32];

		m = gm_keymap_create(bytes);
		CHECK(m, "create");
		for (int64_t k = 0; k < 50000; k++)
		{
			int64_t		kk = k % 3 == 0 ? k * 1000003 : k;	/* dense and sparse keys */
			int32_t		got;

			if (bytes)
			{
				int			len = snprintf(key, sizeof(key), "k%lld", (long long) kk);

				got = gm_keymap_bytes(m, key, (uint32_t) len);
			}
			else
				got = gm_keymap_int_dense(m, kk);
			CHECK(got == n, "key %lld -> %d, expected %d", (long long) kk, got, n);
			n++;
		}
		before = gm_keymap_memory(m);
		gm_keymap_drop_lookups(m);
		CHECK(gm_keymap_size(m) == n, "size %d after the drop, %d before", gm_keymap_size(m), n);
		CHECK(gm_keymap_memory(m) < before * 3 / 4, "memory %zu after the drop, %zu before",
			  gm_keymap_memory(m), before);
		for (int32_t i = 0; i < n; i++)
		{
			int64_t		kk = i % 3 == 0 ? (int64_t) i * 1000003 : i;

			if (bytes)
			{
				uint32_t	len;
				const char *p = gm_keymap_bytes_at(m, i, &len);
				int			want = snprintf(key, sizeof(key), "k%lld", (long long) kk);

				CHECK(len == (uint32_t) want && memcmp(p, key, len) == 0, "byte key %d after the drop", i);
			}
			else
				CHECK(gm_keymap_int_at(m, i) == kk, "key %d after the drop", i);
		}
		if (bytes)
		{
			CHECK(gm_keymap_bytes(m, "k1", 2) == -1, "adding after the drop");
			CHECK(gm_keymap_find_bytes(m, "k1", 2) == -1, "finding after the drop");
		}
		else
		{
			CHECK(gm_keymap_int(m, 1) == -1 && gm_keymap_int_dense(m, 1) == -1, "adding after the drop");
			CHECK(gm_keymap_find_int(m, 1) == -1, "finding after the drop");
		}
		CHECK(gm_keymap_sort(m, o2n) == GM_EINVAL, "sorting after the drop");
		CHECK(gm_keymap_size(m) == n, "size changed by refused calls");
		gm_keymap_free(m);
		m = NULL;
	}
	return 0;
fail:
	gm_keymap_free(m);
	return 1;
}

/*
 * gm_keymap_sort_final against gm_keymap_sort on the same keys, in the same
 * order of arrival: keys all in the dense array (the one-pass order), keys
 * with negative, large and sparse ones among them (the comparison sort), and
 * byte keys; the same renumbering and keys, and the lookups gone after it.
 */
static int
test_sort_final(void)
{
	gm_keymap  *a = NULL,
			   *b = NULL;
	int32_t    *o2n_a = NULL,
			   *o2n_b = NULL;

	for (int kind = 0; kind < 3; kind++)
	{
		int32_t		n;
		int64_t		nkeys = 20000 + rnext() % 20000;

		a = gm_keymap_create(kind == 2);
		b = gm_keymap_create(kind == 2);
		CHECK(a && b, "create");
		for (int64_t i = 0; i < nkeys; i++)
		{
			/* kind 0: a shuffled-ish dense range; 1: and outliers; 2: byte keys */
			int64_t		k = (int64_t) (rnext() % (uint64_t) (nkeys * 2));
			int32_t		x,
						y;

			if (kind == 1 && i % 50 == 0)
				k = i % 100 == 0 ? -k - 1 : k * 100003 + ((int64_t) 1 << 40);
			if (kind == 2)
			{
				char		key[32];
				int			len = snprintf(key, sizeof(key), "u%lld", (long long) k);

				x = gm_keymap_bytes(a, key, (uint32_t) len);
				y = gm_keymap_bytes(b, key, (uint32_t) len);
			}
			else
			{
				x = gm_keymap_int_dense(a, k);
				y = gm_keymap_int_dense(b, k);
			}
			CHECK(x >= 0 && x == y, "key %lld: %d and %d", (long long) k, x, y);
		}
		n = gm_keymap_size(a);
		o2n_a = xmalloc(sizeof(int32_t) * (size_t) n);
		o2n_b = xmalloc(sizeof(int32_t) * (size_t) n);
		CHECK(gm_keymap_sort(a, o2n_a) == GM_OK, "sort");
		CHECK(gm_keymap_sort_final(b, o2n_b, NULL) == GM_OK, "sort_final");
		CHECK(gm_keymap_size(b) == n, "size %d after sort_final, %d", gm_keymap_size(b), n);
		for (int32_t i = 0; i < n; i++)
		{
			CHECK(o2n_a[i] == o2n_b[i], "kind %d: key %d renumbered %d and %d", kind, i, o2n_a[i], o2n_b[i]);
			if (kind == 2)
			{
				uint32_t	la,
							lb;
				const char *pa = gm_keymap_bytes_at(a, i, &la),
						   *pb = gm_keymap_bytes_at(b, i, &lb);

				CHECK(la == lb && memcmp(pa, pb, la) == 0, "byte key %d", i);
			}
			else
				CHECK(gm_keymap_int_at(a, i) == gm_keymap_int_at(b, i), "kind %d: key at %d", kind, i);
		}
		CHECK(kind == 2 ? gm_keymap_find_bytes(b, "u1", 2) == -1 :
			  gm_keymap_find_int(b, gm_keymap_int_at(a, 0)) == -1, "lookups after sort_final");
		CHECK(gm_keymap_memory(b) < gm_keymap_memory(a), "memory %zu after sort_final, %zu after sort",
			  gm_keymap_memory(b), gm_keymap_memory(a));
		gm_keymap_free(a);
		gm_keymap_free(b);
		free(o2n_a);
		free(o2n_b);
		a = b = NULL;
		o2n_a = o2n_b = NULL;
	}
	return 0;
fail:
	gm_keymap_free(a);
	gm_keymap_free(b);
	free(o2n_a);
	free(o2n_b);
	return 1;
}

/*
 * gm_keymap_load_marked against adding the same keys one by one: marks
 * scattered over a range (a parallel read's presence array), the keys and
 * indices equal, sort_final the identity; refused on a map that is not
 * empty, a byte map and one loaded already, changing nothing.
 */
static int
test_load_marked(void)
{
	const int64_t n = 300000;
	gm_keymap  *a = gm_keymap_create(0),
			   *b = gm_keymap_create(0),
			   *c = gm_keymap_create(1);
	int32_t    *mark = malloc(sizeof(int32_t) * (size_t) n);
	int32_t    *o2n = malloc(sizeof(int32_t) * (size_t) n);
	uint64_t	x = 88172645463325252ULL;
	int32_t		want = 0;

	CHECK(a && b && c && mark && o2n, "create");
	for (int64_t k = 0; k < n; k++)
	{
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		mark[k] = (x % 5 == 0 || k == 0 || k == n - 1) ? 0 : -1;
		if (mark[k] == 0)
			CHECK(gm_keymap_int(a, k) == want++, "key %lld added", (long long) k);
	}
	CHECK(gm_keymap_load_marked(b, mark, n) == GM_OK, "load");
	CHECK(gm_keymap_size(b) == want, "size %d, expected %d", gm_keymap_size(b), want);
	for (int64_t k = 0; k < n; k++)
		if (mark[k] >= 0)
		{
			CHECK(gm_keymap_int_at(b, mark[k]) == k, "key %lld at its mark", (long long) k);
			CHECK(gm_keymap_find_int(a, k) == mark[k], "key %lld: index %d, added as %d",
				  (long long) k, mark[k], gm_keymap_find_int(a, k));
		}
	CHECK(gm_keymap_sort_final(b, o2n, NULL) == GM_OK, "sort_final after the load");
	for (int32_t i = 0; i < want; i++)
		CHECK(o2n[i] == i, "sort_final moved key %d to %d", i, o2n[i]);
	CHECK(gm_keymap_sort(b, o2n) == GM_EINVAL, "sort keeping lookups after the load");
	CHECK(gm_keymap_find_int(b, 0) == -1 && gm_keymap_int(b, 1) == -1, "lookups after the load");
	CHECK(gm_keymap_load_marked(b, mark, n) == GM_EINVAL, "loading twice");
	CHECK(gm_keymap_load_marked(a, mark, n) == GM_EINVAL, "loading a map with keys");
	CHECK(gm_keymap_size(a) == want && gm_keymap_find_int(a, n - 1) == want - 1, "refused load changed the map");
	CHECK(gm_keymap_load_marked(c, mark, n) == GM_EINVAL, "loading a byte map");
	CHECK(gm_keymap_size(c) == 0, "refused load changed the byte map");
	gm_keymap_free(a);
	gm_keymap_free(b);
	gm_keymap_free(c);
	free(mark);
	free(o2n);
	return 0;
fail:
	gm_keymap_free(a);
	gm_keymap_free(b);
	gm_keymap_free(c);
	free(mark);
	free(o2n);
	return 1;
}

/* the inverse of x -> x * c (mod 2^64) for odd c */
static uint64_t
inverse_mod64(uint64_t c)
{
	uint64_t	x = c;

	for (int i = 0; i < 6; i++)
		x *= 2 - c * x;
	return x;
}

/* the inverse of the murmur3 finalizer the key maps hashed integers with (unseeded) */
static uint64_t
unmix64(uint64_t x)
{
	x ^= x >> 33;
	x *= inverse_mod64(0xc4ceb9fe1a85ec53ULL);
	x ^= x >> 33;
	x *= inverse_mod64(0xff51afd7ed558ccdULL);
	x ^= x >> 33;
	return x;
}

/*
 * 200,000 keys whose unseeded hashes agree in their low 32 bits, as a table
 * could be filled to flood the map (every insert and every rehash a scan of
 * all keys: minutes, with no way to cancel).  With a seeded hash they map
 * in milliseconds; the same for byte keys of one length.
 */
static int
test_hash_flood(void)
{
	gm_keymap  *m = gm_keymap_create(0);
	gm_keymap  *b = gm_keymap_create(1);
	const int32_t n = 200000;
	double		t0 = gm_now();

	CHECK(m && b, "create");
	for (int32_t i = 0; i < n; i++)
	{
		int64_t		key = (int64_t) unmix64((uint64_t) (i + 1) << 32);

		CHECK(gm_keymap_int_dense(m, key) == i, "key %d", i);
	}
	CHECK(since(t0) < 3, "200000 colliding keys took %.1f s", since(t0));
	for (int32_t i = 0; i < n; i++)
	{
		char		k[16];

		memset(k, 'x', sizeof(k));
		memcpy(k + 4, &i, sizeof(i));
		CHECK(gm_keymap_bytes(b, k, sizeof(k)) == i, "byte key %d", i);
	}
	CHECK(since(t0) < 6, "byte keys took %.1f s", since(t0));
	gm_keymap_free(m);
	gm_keymap_free(b);
	return 0;
fail:
	gm_keymap_free(m);
	gm_keymap_free(b);
	return 1;
}

/* Stops at the count-th poll. */
typedef struct
{
	int			polls;
	int			stop_at;
} stopper;

static int
stop_after(void *arg)
{
	stopper    *s = arg;

	return ++s->polls >= s->stop_at;
}

/*
 * Sorting the keys, building the CSR and transposing it stop when asked,
 * leave nothing allocated (sanitizers watch) and the map usable; asked and
 * never stopped, they give what the unpolled calls give.
 */
static int
test_polled_cancel(void)
{
	const int64_t nnz = (int64_t) 3 << 20;
	const int32_t nu = 400000,
				ni = 50000;
	int32_t    *rows = xmalloc(sizeof(int32_t) * nnz),
			   *cols = xmalloc(sizeof(int32_t) * nnz);
	float	   *vals = xmalloc(sizeof(float) * nnz);
	int32_t    *o2n = xmalloc(sizeof(int32_t) * nu);
	gm_keymap  *m = gm_keymap_create(0);
	gm_csr		A,
				B,
				T;
	gm_callbacks cb;
	stopper		st;
	char		err[GM_ERRLEN];
	int			rc;

	memset(&A, 0, sizeof(A));
	memset(&B, 0, sizeof(B));
	memset(&T, 0, sizeof(T));
	for (int64_t e = 0; e < nnz; e++)
	{
		rows[e] = (int32_t) (rnext() % nu);
		cols[e] = (int32_t) (rnext() % ni);
		vals[e] = 1.0f;
	}
	memset(&cb, 0, sizeof(cb));
	cb.should_stop = stop_after;
	cb.arg = &st;

	/* the key sort: 400000 keys, runs of 65536 */
	for (int32_t i = 0; i < nu; i++)
		CHECK(gm_keymap_int(m, (int64_t) rnext()) == i, "insert %d", i);
	st.polls = 0;
	st.stop_at = 2;
	rc = gm_keymap_sort_polled(m, o2n, &cb);
	CHECK(rc == GM_ECANCELED, "sort: rc %d after %d polls", rc, st.polls);
	CHECK(gm_keymap_find_int(m, gm_keymap_int_at(m, 7)) == 7, "map unusable after a canceled sort");
	st.polls = 0;
	st.stop_at = 1 << 30;
	CHECK(gm_keymap_sort_polled(m, o2n, &cb) == GM_OK && st.polls > 6, "sort: %d polls", st.polls);
	for (int32_t i = 1; i < nu; i++)
		CHECK(gm_keymap_int_at(m, i - 1) < gm_keymap_int_at(m, i), "not sorted at %d", i);

	/* the CSR: stopped at the first poll, then at a later one, then never */
	for (int at = 1; at <= 3; at += 2)
	{
		st.polls = 0;
		st.stop_at = at;
		rc = gm_csr_from_coo_polled(nu, ni, nnz, rows, cols, vals, &cb, &A, err, sizeof(err));
		CHECK(rc == GM_ECANCELED, "csr (stop at poll %d): rc %d", at, rc);
		CHECK(A.indptr == NULL && A.indices == NULL && A.data == NULL, "a canceled build left arrays");
	}
	st.polls = 0;
	st.stop_at = 1 << 30;
	CHECK(gm_csr_from_coo_polled(nu, ni, nnz, rows, cols, vals, &cb, &A, err, sizeof(err)) == GM_OK,
		  "csr: %s", err);
	CHECK(st.polls >= 3, "csr: only %d polls", st.polls);
	CHECK(gm_csr_from_coo(nu, ni, nnz, rows, cols, vals, &B, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(A.nnz == B.nnz && memcmp(A.indptr, B.indptr, sizeof(int64_t) * (nu + 1)) == 0 &&
		  memcmp(A.indices, B.indices, sizeof(int32_t) * A.nnz) == 0, "polled CSR differs");
	st.polls = 0;
	st.stop_at = 1;
	rc = gm_csr_transpose_polled(&A, &cb, &T, err, sizeof(err));
	CHECK(rc == GM_ECANCELED && T.indptr == NULL, "transpose: rc %d", rc);

	/*
	 * the transpose's row pointers alone (a lean GPU training): those of
	 * the formed transpose, with every thread counting and with one;
	 * stopped at the first poll
	 */
	{
		int64_t    *ptr = xmalloc(sizeof(int64_t) * ((size_t) ni + 1));
		int			threads = omp_get_max_threads();

		CHECK(gm_csr_transpose(&A, &T, err, sizeof(err)) == GM_OK, "%s", err);
		/* OpenMP's default (0), every thread and one */
		for (int c = 0; c < 3; c++)
		{
			int			nt = c == 0 ? 0 : c == 1 ? threads : 1;

			st.polls = 0;
			st.stop_at = 1 << 30;
			memset(ptr, 0x5a, sizeof(int64_t) * ((size_t) ni + 1));
			rc = gm_csr_column_pointers(&A, nt, &cb, ptr);
			CHECK(rc == GM_OK && memcmp(ptr, T.indptr, sizeof(int64_t) * ((size_t) ni + 1)) == 0 &&
				  st.polls >= 1, "column pointers with %d threads: rc %d, %d polls, ptr[%d] %lld against %lld",
				  nt, rc, st.polls, ni, (long long) ptr[ni], (long long) T.indptr[ni]);
			st.polls = 0;
			st.stop_at = 1;
			rc = gm_csr_column_pointers(&A, nt, &cb, ptr);
			CHECK(rc == GM_ECANCELED, "column pointers with %d threads, stopped: rc %d", nt, rc);
		}
		gm_csr_free(&T);
		free(ptr);
	}

	/* the linear algebra's matrix (gpumf_cg_solve): stopped, then not */
	{
		int64_t    *r64 = xmalloc(sizeof(int64_t) * nnz),
				   *c64 = xmalloc(sizeof(int64_t) * nnz);
		double	   *v64 = xmalloc(sizeof(double) * nnz);
		gm_coo		co = {nnz, r64, c64, v64, 1};
		gm_spmat	S;

		for (int64_t e = 0; e < nnz; e++)
		{
			r64[e] = rows[e] % ni;
			c64[e] = cols[e];
			v64[e] = 1.0;
		}
		memset(&S, 0, sizeof(S));
		st.polls = 0;
		st.stop_at = 2;
		rc = gm_spmat_from_coo_polled(&co, ni, GM_TRI_BOTH, 0, &cb, &S, err, sizeof(err));
		CHECK(rc == GM_ECANCELED && S.indptr == NULL, "spmat: rc %d", rc);
		st.stop_at = 1 << 30;
		rc = gm_spmat_from_coo_polled(&co, ni, GM_TRI_BOTH, 0, &cb, &S, err, sizeof(err));
		CHECK(rc == GM_OK && S.n == ni && S.nnz > 0, "spmat: rc %d %s", rc, err);
		gm_spmat_free(&S);
		free(r64);
		free(c64);
		free(v64);
	}
	gm_csr_free(&A);
	gm_csr_free(&B);
	gm_keymap_free(m);
	free(rows);
	free(cols);
	free(vals);
	free(o2n);
	return 0;
fail:
	gm_csr_free(&A);
	gm_csr_free(&B);
	gm_csr_free(&T);
	gm_keymap_free(m);
	free(rows);
	free(cols);
	free(vals);
	free(o2n);
	return 1;
}

/*
 * gm_mf_memory counts what grows with threads: at factors 1024 the exact
 * solver's and explicit ALS's systems are about 12 MB a thread, the block
 * solver's scratch grows with the longest row too, and the total is the
 * shared part plus threads x the per-thread part.
 */
static int
test_mf_memory(void)
{
	gm_csr		R,
				Rt;
	gm_mf_params p;
	int32_t		rows[6] = {0, 0, 0, 0, 1, 2},
				cols[6] = {0, 1, 2, 3, 0, 0};
	float		vals[6] = {1, 1, 1, 1, 1, 1};
	char		err[GM_ERRLEN];
	double		pt1,
				pt2,
				m1,
				m200;

	memset(&R, 0, sizeof(R));
	memset(&Rt, 0, sizeof(Rt));
	CHECK(gm_csr_from_coo(3, 4, 6, rows, cols, vals, &R, err, sizeof(err)) == GM_OK, "%s", err);
	CHECK(gm_csr_transpose(&R, &Rt, err, sizeof(err)) == GM_OK, "%s", err);
	gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
	p.factors = 1024;
	p.solver = GM_SOLVER_EXACT;
	p.threads = 1;
	m1 = gm_mf_memory(&p, &R, &Rt, 0, 0, &pt1);
	p.threads = 200;
	m200 = gm_mf_memory(&p, &R, &Rt, 0, 0, &pt2);
	CHECK(pt1 == pt2 && pt1 > 12.0 * 1024 * 1024 && pt1 < 13.0 * 1024 * 1024,
		  "exact, factors 1024: %.0f bytes a thread", pt1);
	CHECK(fabs(m200 - m1 - 199 * pt1) < 1, "200 threads: %.0f, 1 thread %.0f", m200, m1);
	p.solver = GM_SOLVER_CG;
	CHECK(gm_mf_memory(&p, &R, &Rt, 0, 0, &pt1) < m1 && pt1 < 16 * 1024, "cg: %.0f a thread", pt1);
	p.solver = GM_SOLVER_BLOCK;
	p.block_size = 32;
	(void) gm_mf_memory(&p, &R, &Rt, 0, 0, &pt2);
	CHECK(pt2 >= 4 * sizeof(float) + 32 * 32 * 12, "block: %.0f a thread", pt2);
	gm_mf_params_defaults(&p, GM_ALG_ALS_EXPLICIT);
	p.factors = 1024;
	p.threads = 4;
	(void) gm_mf_memory(&p, &R, &Rt, 0, 0, &pt1);
	CHECK(pt1 > 12.0 * 1024 * 1024, "als_explicit, factors 1024: %.0f a thread", pt1);
	gm_csr_free(&R);
	gm_csr_free(&Rt);
	return 0;
fail:
	gm_csr_free(&R);
	gm_csr_free(&Rt);
	return 1;
}

static const gm_test tests[] = {
	{"keymap: int2/int4/int8 extremes and 2^62 through the dense array", test_dense_extremes},
	{"keymap: keys colliding under an unseeded hash map in linear time", test_hash_flood},
	{"keymap: dropping the lookups keeps the keys, refuses lookups", test_drop_lookups},
	{"keymap: sort_final renumbers as sort does (dense pass, comparison sort, bytes)", test_sort_final},
	{"keymap: load_marked equals adding in key order, sorts as the identity", test_load_marked},
	{"keymap sort, csr and sparse-matrix builds, transpose stop when asked", test_polled_cancel},
	{"mf_memory counts every thread's scratch", test_mf_memory},
};

int
main(void)
{
	return gm_test_main(tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
