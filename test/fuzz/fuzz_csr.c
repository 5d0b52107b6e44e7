/*
 * fuzz_csr.c: a libFuzzer target over the core's input building.
 *
 * The input is decoded into (user key, item key, value) records, the way
 * gpumf_train reads a table: keys are 64-bit integers or byte strings (text,
 * uuid), values are ratings.  The target then runs what the server runs:
 * key maps (gm_keymap_*), renumbering in key order (gm_keymap_sort), COO ->
 * CSR with duplicates summed (gm_csr_from_coo) and the transpose
 * (gm_csr_transpose), and checks every result against a naive reference:
 *
 *   - a key maps to one index, the same on every lookup, and distinct keys
 *     to distinct indices (reference: a sorted list of the distinct keys);
 *   - after the sort, indices follow key order and lookups return the new
 *     index; the keys read back are the keys put in;
 *   - the CSR is well formed (indptr from 0 to nnz, non-decreasing; columns
 *     in range, sorted and unique in each row), nnz is the number of distinct
 *     (user, item) pairs, and each entry is the sum of that pair's values
 *     (values are multiples of 0.5: sums are exact in float, so equal);
 *   - the transpose is well formed with the same entries, and the transpose
 *     of the transpose equals the original, array for array;
 *   - out-of-range coordinates are rejected with GM_EINVAL.
 *
 * An input without a whole record is skipped, as the server raises an ERROR
 * on empty input before building anything.
 *
 * Input layout (all of it optional; a short input is a small problem):
 *   byte 0: flags: bit 0 user keys are bytes, bit 1 item keys are bytes,
 *           bit 2 corrupt one coordinate (expect GM_EINVAL),
 *           bits 3-6 all set: replicate the records (up to MAX_REPL entries
 *           in all, each copy shifting integer keys by a byte of the input,
 *           so that the multi-threaded scatter and the key maps' growth are
 *           reached; rare, since such an input takes ~0.3 s under ASan),
 *           bit 7: the server's key kinds (a mode byte follows byte 1)
 *   byte 1: extra empty rows and columns (n & 15 each)
 *   [bit 7: the mode byte: bits 0-1 the user column's integer type, bits
 *           2-3 the item column's (0 or 3: bigint, 1: integer, 2: smallint;
 *           a key is cut to the type as the column would hold it), bit 4
 *           user byte keys are uuids (16 bytes), bit 5 item byte keys are
 *           uuids, bit 6 long byte keys]
 *   then records: user key, item key, value byte (rating 0.5 * (b % 10 + 1))
 *   an integer key: a tag byte t; t < 160 (t < 192 without bit 7): the
 *           small key t % 48 - 24 (collisions); with bit 7, t < 224: an
 *           extreme of extremes[] (type ends, 2^62, the dense array's
 *           bounds), plus t / 64 - 2 (its neighbours); else 8 bytes of a
 *           raw int64
 *   a byte key: a length byte (% 40), then that many bytes; with bit 7 and
 *           bit 6 a length byte >= 200 makes a long key: 2 bytes of length
 *           (up to 65535), a fill byte and a tail byte: that many fill bytes
 *           ending in the tail (long keys sharing prefixes); a uuid key: a
 *           tag byte t: t < 64 all zero but the last byte t, t < 128 all
 *           0xff but the last byte, else 16 raw bytes
 *
 * Integer keys go through gm_keymap_int_dense, the call gpumf_train's reader
 * makes (src/pg/common/source_int.h), with its direct-index array and growth policy:
 * a key of 2^62 once made that growth loop forever (a libFuzzer timeout).
 *
 * Build and run: test/fuzz/run.sh [seconds].  A crash or a failed check
 * aborts with a message; libFuzzer saves the input as crash-*.
 */
#include "gm_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RECORDS	8192
#define MAX_REPL	102400	/* just above the core's threaded-scatter threshold */
#define MAX_LONG	(4 << 20)	/* bytes of long keys per input */

/* One decoded key: an integer or a byte string pointing into the input (or the pool). */
typedef struct
{
	int64_t		i;
	const uint8_t *b;
	uint32_t	len;
} Key;

/*
 * Integer keys at the limits of smallint, integer and bigint columns, and
 * of the key map's direct-index array (GM_KEYMAP_DENSE_MIN/MAX); each tag
 * also reaches a neighbour (-2 .. +1).
 */
static const int64_t extremes[] = {
	INT64_C(4611686018427387904),	/* 2^62: the one key of the issue */
	INT64_MIN, INT64_MAX, -INT64_C(4611686018427387904),
	INT32_MIN, INT32_MAX, (int64_t) INT32_MAX + 1, (int64_t) INT32_MIN - 1,
	INT16_MIN, INT16_MAX, (int64_t) INT16_MAX + 1, 0,
	GM_KEYMAP_DENSE_MIN, GM_KEYMAP_DENSE_MAX, (int64_t) GM_KEYMAP_DENSE_MAX * 2, INT64_C(1) << 40,
};

#define NEXTREMES ((int) (sizeof(extremes) / sizeof(extremes[0])))

/* How the keys of one side are decoded. */
typedef struct
{
	int			bytes;			/* byte keys (text, uuid) */
	int			server;			/* flag bit 7: the server's key kinds */
	int			int_bits;		/* 64, 32 or 16: the column's integer type */
	int			uuid;			/* byte keys are uuids */
	int			long_keys;		/* byte keys may be long */
} KeyKind;

/* Long keys and uuids built from the input (allocated once, reused by every input). */
static uint8_t *pool;
static size_t pool_used;

typedef struct
{
	Key			u;
	Key			it;
	float		v;
} Record;

/* A (row, col, value) triple of the reference. */
typedef struct
{
	int32_t		r;
	int32_t		c;
	double		v;
} Triple;

static void
die(const char *what)
{
	fprintf(stderr, "fuzz_csr: check failed: %s\n", what);
	abort();
}

#define REQUIRE(cond, what) do { if (!(cond)) die(what); } while (0)

/* A cursor over the input. */
typedef struct
{
	const uint8_t *p;
	size_t		n;
} Cursor;

static int
take(Cursor *c, uint8_t *out)
{
	if (c->n == 0)
		return 0;
	*out = *c->p++;
	c->n--;
	return 1;
}

/* v as a column of int_bits bits holds it (what DatumGetInt16/32 give back) */
static int64_t
narrow(int64_t v, int int_bits)
{
	if (int_bits == 16)
		return (int16_t) (uint16_t) (uint64_t) v;
	if (int_bits == 32)
		return (int32_t) (uint32_t) (uint64_t) v;
	return v;
}

static int
take_key(Cursor *c, const KeyKind *kk, Key *k)
{
	uint8_t		t;

	memset(k, 0, sizeof(*k));
	if (!take(c, &t))
		return 0;
	if (kk->bytes && kk->uuid)
	{
		uint8_t    *u;

		if (t >= 128)
		{
			if (c->n < 16)
				return 0;
			k->b = c->p;
			k->len = 16;
			c->p += 16;
			c->n -= 16;
			return 1;
		}
		if (pool_used + 16 > MAX_LONG)
			return 0;
		u = pool + pool_used;
		memset(u, t < 64 ? 0x00 : 0xff, 15);
		u[15] = t;
		pool_used += 16;
		k->b = u;
		k->len = 16;
		return 1;
	}
	if (kk->bytes)
	{
		uint32_t	len = t % 40;

		if (kk->long_keys && t >= 200)
		{
			uint8_t		l1,
						l2,
						fill,
						tail;
			uint32_t	n;

			if (!take(c, &l1) || !take(c, &l2) || !take(c, &fill) || !take(c, &tail))
				return 0;
			n = (uint32_t) l1 << 8 | l2;
			if (n == 0 || pool_used + n > MAX_LONG)
				return 0;
			memset(pool + pool_used, fill, n);
			pool[pool_used + n - 1] = tail;
			k->b = pool + pool_used;
			k->len = n;
			pool_used += n;
			return 1;
		}
		if (c->n < len)
			return 0;
		k->b = c->p;
		k->len = len;
		c->p += len;
		c->n -= len;
		return 1;
	}
	if (t < (kk->server ? 160 : 192))
		k->i = (int64_t) (t % 48) - 24;
	else if (kk->server && t < 224)
	{
		int			e = (t - 160) % NEXTREMES;

		k->i = (int64_t) ((uint64_t) extremes[e] + (uint64_t) ((t - 160) / NEXTREMES) - 2);
	}
	else
	{
		if (c->n < 8)
			return 0;
		memcpy(&k->i, c->p, 8);
		c->p += 8;
		c->n -= 8;
	}
	k->i = narrow(k->i, kk->int_bits);
	return 1;
}

/* Key order of gm_keymap_sort: integers ascending; bytes by memcmp, then length. */
static int
key_cmp(const Key *a, const Key *b, int bytes)
{
	if (!bytes)
		return (a->i > b->i) - (a->i < b->i);
	{
		uint32_t	l = a->len < b->len ? a->len : b->len;
		int			c = l ? memcmp(a->b, b->b, l) : 0;

		if (c)
			return c < 0 ? -1 : 1;
		return (a->len > b->len) - (a->len < b->len);
	}
}

static int	cmp_bytes_mode;

static int
key_qsort_cmp(const void *a, const void *b)
{
	return key_cmp(a, b, cmp_bytes_mode);
}

static int
triple_cmp(const void *a, const void *b)
{
	const Triple *x = a,
			   *y = b;

	if (x->r != y->r)
		return x->r < y->r ? -1 : 1;
	return (x->c > y->c) - (x->c < y->c);
}

/* the calls the server's reader makes: gm_keymap_int_dense for integers */
static int32_t
map_key(gm_keymap *m, int bytes, const Key *k)
{
	return bytes ? gm_keymap_bytes(m, k->b, k->len) : gm_keymap_int_dense(m, k->i);
}

/* Index of k in the sorted distinct keys (binary search); -1 if absent. */
static int32_t
ref_find(const Key *sorted, int32_t n, const Key *k, int bytes)
{
	int32_t		lo = 0,
				hi = n - 1;

	while (lo <= hi)
	{
		int32_t		mid = lo + (hi - lo) / 2;
		int			c = key_cmp(&sorted[mid], k, bytes);

		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/*
 * Map the keys of one side, check the map against the reference and sort
 * it; idx[e] becomes each record's index in key order.  Returns the number
 * of distinct keys.
 */
static int32_t
build_side(const Key *keys, int64_t n, int bytes, int32_t *idx)
{
	gm_keymap  *m = gm_keymap_create(bytes);
	Key		   *sorted = malloc(sizeof(Key) * (n > 0 ? n : 1));
	int32_t    *first = malloc(sizeof(int32_t) * (n > 0 ? n : 1));	/* ref index -> map index */
	int32_t    *old_to_new;
	int32_t		nd = 0,
				size;

	REQUIRE(m && sorted && first, "allocation");
	/* reference: the distinct keys, sorted */
	memcpy(sorted, keys, sizeof(Key) * n);
	cmp_bytes_mode = bytes;
	qsort(sorted, (size_t) n, sizeof(Key), key_qsort_cmp);
	for (int64_t e = 0; e < n; e++)
		if (nd == 0 || key_cmp(&sorted[nd - 1], &sorted[e], bytes) != 0)
			sorted[nd++] = sorted[e];
	for (int32_t d = 0; d < nd; d++)
		first[d] = -1;

	/* indices in order of first appearance; the same key, the same index */
	for (int64_t e = 0; e < n; e++)
	{
		int32_t		got = map_key(m, bytes, &keys[e]);
		int32_t		d = ref_find(sorted, nd, &keys[e], bytes);

		REQUIRE(got >= 0, "keymap returned -1 (out of memory)");
		REQUIRE(d >= 0, "reference lost a key");
		if (first[d] < 0)
		{
			REQUIRE(got == gm_keymap_size(m) - 1, "a new key must get the next index");
			first[d] = got;
		}
		else
			REQUIRE(got == first[d], "a key mapped to two indices");
		REQUIRE((bytes ? gm_keymap_find_bytes(m, keys[e].b, keys[e].len) :
				 gm_keymap_find_int(m, keys[e].i)) == got, "find disagrees with the mapping");
		idx[e] = got;
	}
	size = gm_keymap_size(m);
	REQUIRE(size == nd, "keymap size differs from the number of distinct keys");

	old_to_new = malloc(sizeof(int32_t) * (size > 0 ? size : 1));
	REQUIRE(old_to_new, "allocation");
	REQUIRE(gm_keymap_sort(m, old_to_new) == GM_OK, "gm_keymap_sort failed");
	for (int32_t d = 0; d < nd; d++)
	{
		int32_t		now = old_to_new[first[d]];

		/* key order: the d-th smallest key gets index d */
		REQUIRE(now == d, "sorted index is not the key's rank");
		if (bytes)
		{
			uint32_t	len;
			const void *p = gm_keymap_bytes_at(m, now, &len);

			REQUIRE(len == sorted[d].len && (len == 0 || memcmp(p, sorted[d].b, len) == 0),
					"bytes_at returned another key");
		}
		else
			REQUIRE(gm_keymap_int_at(m, now) == sorted[d].i, "int_at returned another key");
		/* lookups after the sort find the new index, and add nothing */
		REQUIRE(map_key(m, bytes, &sorted[d]) == d, "lookup after sort");
	}
	REQUIRE(gm_keymap_size(m) == nd, "lookup after sort added a key");
	for (int64_t e = 0; e < n; e++)
		idx[e] = old_to_new[idx[e]];

	free(old_to_new);
	free(first);
	free(sorted);
	gm_keymap_free(m);
	return nd;
}

/* Well-formed CSR: indptr 0 .. nnz non-decreasing, columns in range, sorted, unique. */
static void
check_csr(const gm_csr *a)
{
	REQUIRE(a->indptr != NULL && a->indptr[0] == 0, "indptr[0] != 0");
	REQUIRE(a->indptr[a->n_rows] == a->nnz, "indptr[n_rows] != nnz");
	for (int32_t r = 0; r < a->n_rows; r++)
	{
		REQUIRE(a->indptr[r] <= a->indptr[r + 1], "indptr decreases");
		for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
		{
			REQUIRE(a->indices[e] >= 0 && a->indices[e] < a->n_cols, "column out of range");
			if (e > a->indptr[r])
				REQUIRE(a->indices[e - 1] < a->indices[e], "columns not sorted and unique");
		}
	}
}

/* The entries of a (transposed when t) equal the reference triples. */
static void
check_entries(const gm_csr *a, int t, const Triple *ref, int64_t nref)
{
	Triple	   *got = malloc(sizeof(Triple) * (a->nnz > 0 ? a->nnz : 1));
	int64_t		n = 0;

	REQUIRE(got, "allocation");
	REQUIRE(a->nnz == nref, "nnz differs from the number of distinct pairs");
	for (int32_t r = 0; r < a->n_rows; r++)
		for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
		{
			got[n].r = t ? a->indices[e] : r;
			got[n].c = t ? r : a->indices[e];
			got[n].v = a->data[e];
			n++;
		}
	if (t)
		qsort(got, (size_t) n, sizeof(Triple), triple_cmp);
	for (int64_t e = 0; e < n; e++)
	{
		REQUIRE(got[e].r == ref[e].r && got[e].c == ref[e].c, "entry at another position");
		REQUIRE(got[e].v == ref[e].v, "duplicate sum differs from the reference");
	}
	free(got);
}

static void
check_equal(const gm_csr *a, const gm_csr *b)
{
	REQUIRE(a->n_rows == b->n_rows && a->n_cols == b->n_cols && a->nnz == b->nnz,
			"transpose of transpose: shape");
	REQUIRE(memcmp(a->indptr, b->indptr, sizeof(int64_t) * (a->n_rows + 1)) == 0,
			"transpose of transpose: indptr");
	REQUIRE(a->nnz == 0 || memcmp(a->indices, b->indices, sizeof(int32_t) * a->nnz) == 0,
			"transpose of transpose: indices");
	REQUIRE(a->nnz == 0 || memcmp(a->data, b->data, sizeof(float) * a->nnz) == 0,
			"transpose of transpose: data");
}

/*
 * Replicated inputs (~0.3 s each under ASan) are off while fuzzing, where
 * they would slow every other input down: FUZZ_CSR_LARGE=1 turns them on
 * (test/unit/test_fuzz_regress.c runs a few).
 */
int			fuzz_csr_large = 0;

int			LLVMFuzzerInitialize(int *argc, char ***argv);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *e = getenv("FUZZ_CSR_LARGE");

	fuzz_csr_large = e != NULL && e[0] == '1';
	return 0;
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Cursor		c = {data, size};
	uint8_t		flags = 0,
				extra = 0,
				mode = 0,
				b;
	KeyKind		ukind,
				ikind;
	int			ubytes,
				ibytes;
	Record	   *rec;
	int64_t		nrec = 0,
				n;
	Key		   *uk,
			   *ik;
	float	   *vals;
	int32_t    *rows,
			   *cols;
	int32_t		nu,
				ni,
				n_rows,
				n_cols;
	Triple	   *ref;
	int64_t		nref = 0;
	gm_csr		A,
				T,
				TT;
	char		err[GM_ERRLEN];
	int			rc;

	take(&c, &flags);
	take(&c, &extra);
	ubytes = flags & 1;
	ibytes = (flags >> 1) & 1;
	memset(&ukind, 0, sizeof(ukind));
	memset(&ikind, 0, sizeof(ikind));
	ukind.bytes = ubytes;
	ikind.bytes = ibytes;
	ukind.int_bits = ikind.int_bits = 64;
	if (flags & 0x80)
	{
		static const int bits[4] = {64, 32, 16, 64};

		take(&c, &mode);
		ukind.server = ikind.server = 1;
		ukind.int_bits = bits[mode & 3];
		ikind.int_bits = bits[(mode >> 2) & 3];
		ukind.uuid = (mode >> 4) & 1;
		ikind.uuid = (mode >> 5) & 1;
		ukind.long_keys = ikind.long_keys = (mode >> 6) & 1;
	}
	if (pool == NULL)
		pool = malloc(MAX_LONG);
	pool_used = 0;
	REQUIRE(pool, "allocation");

	rec = malloc(sizeof(Record) * MAX_RECORDS);
	REQUIRE(rec, "allocation");
	while (nrec < MAX_RECORDS)
	{
		Record		r;

		if (!take_key(&c, &ukind, &r.u) || !take_key(&c, &ikind, &r.it) || !take(&c, &b))
			break;
		r.v = 0.5f * (float) (b % 10 + 1);
		rec[nrec++] = r;
	}
	if (nrec == 0)
	{
		/*
		 * The server never builds from an empty input (no usable row is an
		 * ERROR before any key map is sorted).  gm_keymap_sort of an empty
		 * map is covered by test/unit/test_fuzz_regress.c.
		 */
		free(rec);
		return 0;
	}

	/*
	 * replicate: copy j shifts integer user keys by (extra >> 4) * j and item
	 * keys by j % 3; byte keys repeat (so do all keys when the shift is 0:
	 * long rows of duplicates)
	 */
	n = nrec;
	if (fuzz_csr_large && (flags & 0x78) == 0x78 && nrec > 0)
	{
		int64_t		copies = MAX_REPL / nrec;

		n = nrec * (copies > 1 ? copies : 1);
	}
	uk = malloc(sizeof(Key) * (n > 0 ? n : 1));
	ik = malloc(sizeof(Key) * (n > 0 ? n : 1));
	vals = malloc(sizeof(float) * (n > 0 ? n : 1));
	rows = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
	cols = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
	ref = malloc(sizeof(Triple) * (n > 0 ? n : 1));
	REQUIRE(uk && ik && vals && rows && cols && ref, "allocation");
	for (int64_t e = 0; e < n; e++)
	{
		const Record *r = &rec[e % (nrec > 0 ? nrec : 1)];
		int64_t		j = e / (nrec > 0 ? nrec : 1);
		int64_t		shift = (int64_t) (extra >> 4);

		uk[e] = r->u;
		ik[e] = r->it;
		if (!ubytes)
			uk[e].i = narrow((int64_t) ((uint64_t) r->u.i + (uint64_t) (shift * j)), ukind.int_bits);
		if (!ibytes)
			ik[e].i = narrow((int64_t) ((uint64_t) r->it.i + (uint64_t) (j % 3)), ikind.int_bits);
		vals[e] = r->v;
	}
	free(rec);

	nu = build_side(uk, n, ubytes, rows);
	ni = build_side(ik, n, ibytes, cols);
	n_rows = nu + (extra & 15);
	n_cols = ni + ((extra >> 4) & 15);

	/* reference: sort the triples, sum equal (row, col) in double */
	for (int64_t e = 0; e < n; e++)
	{
		ref[e].r = rows[e];
		ref[e].c = cols[e];
		ref[e].v = vals[e];
	}
	qsort(ref, (size_t) n, sizeof(Triple), triple_cmp);
	for (int64_t e = 0; e < n; e++)
	{
		if (nref > 0 && ref[nref - 1].r == ref[e].r && ref[nref - 1].c == ref[e].c)
			ref[nref - 1].v += ref[e].v;
		else
			ref[nref++] = ref[e];
	}

	if ((flags & 4) && n > 0)
	{
		/* one coordinate out of range: rejected, nothing leaked */
		int64_t		e = (int64_t) (extra % (uint64_t) n);
		int32_t		save = rows[e];

		rows[e] = (extra & 1) ? n_rows : -1 - (int32_t) (extra >> 1);
		rc = gm_csr_from_coo(n_rows, n_cols, n, rows, cols, vals, &A, err, sizeof(err));
		REQUIRE(rc == GM_EINVAL, "an out-of-range coordinate was accepted");
		REQUIRE(A.indptr == NULL && A.indices == NULL && A.data == NULL,
				"a rejected build left arrays behind");
		rows[e] = save;
	}

	rc = gm_csr_from_coo(n_rows, n_cols, n, rows, cols, vals, &A, err, sizeof(err));
	REQUIRE(rc == GM_OK, "gm_csr_from_coo failed on valid input");
	REQUIRE(A.n_rows == n_rows && A.n_cols == n_cols, "CSR shape");
	check_csr(&A);
	check_entries(&A, 0, ref, nref);

	rc = gm_csr_transpose(&A, &T, err, sizeof(err));
	REQUIRE(rc == GM_OK, "gm_csr_transpose failed");
	REQUIRE(T.n_rows == n_cols && T.n_cols == n_rows && T.nnz == A.nnz, "transpose shape");
	check_csr(&T);
	check_entries(&T, 1, ref, nref);
	rc = gm_csr_transpose(&T, &TT, err, sizeof(err));
	REQUIRE(rc == GM_OK, "gm_csr_transpose (twice) failed");
	check_equal(&A, &TT);

	gm_csr_free(&A);
	gm_csr_free(&T);
	gm_csr_free(&TT);
	free(uk);
	free(ik);
	free(vals);
	free(rows);
	free(cols);
	free(ref);
	return 0;
}
