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
 *           reached; rare, since such an input takes ~0.3 s under ASan)
 *   byte 1: extra empty rows and columns (n & 15 each)
 *   then records: user key, item key, value byte (rating 0.5 * (b % 10 + 1))
 *   an integer key: a tag byte t; t < 192: the small key t % 48 - 24
 *           (collisions), else 8 bytes of a raw int64
 *   a byte key: a length byte (% 40), then that many bytes
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

/* One decoded key: an integer or a byte string pointing into the input. */
typedef struct
{
	int64_t		i;
	const uint8_t *b;
	uint32_t	len;
} Key;

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

static int
take_key(Cursor *c, int bytes, Key *k)
{
	uint8_t		t;

	memset(k, 0, sizeof(*k));
	if (!take(c, &t))
		return 0;
	if (bytes)
	{
		uint32_t	len = t % 40;

		if (c->n < len)
			return 0;
		k->b = c->p;
		k->len = len;
		c->p += len;
		c->n -= len;
		return 1;
	}
	if (t < 192)
	{
		k->i = (int64_t) (t % 48) - 24;
		return 1;
	}
	if (c->n < 8)
		return 0;
	memcpy(&k->i, c->p, 8);
	c->p += 8;
	c->n -= 8;
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

static int32_t
map_key(gm_keymap *m, int bytes, const Key *k)
{
	return bytes ? gm_keymap_bytes(m, k->b, k->len) : gm_keymap_int(m, k->i);
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
				b;
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

	rec = malloc(sizeof(Record) * MAX_RECORDS);
	REQUIRE(rec, "allocation");
	while (nrec < MAX_RECORDS)
	{
		Record		r;

		if (!take_key(&c, ubytes, &r.u) || !take_key(&c, ibytes, &r.it) || !take(&c, &b))
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
			uk[e].i = (int64_t) ((uint64_t) r->u.i + (uint64_t) (shift * j));
		if (!ibytes)
			ik[e].i = (int64_t) ((uint64_t) r->it.i + (uint64_t) (j % 3));
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
