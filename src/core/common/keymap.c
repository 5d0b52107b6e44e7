/*
 * keymap.c: open-addressing hash maps from user/item keys to dense indices,
 * with an optional direct-index array for integer keys in a dense range.
 *
 * Keys come from tables any role can fill, so every size here is checked at
 * its type's limits (at most INT32_MAX - 1 keys; the dense array's growth is
 * bounded before it loops), and the hash is seeded per map: keys chosen so
 * that their hashes collide (a flood that turns each insert and each rehash
 * into a scan of the whole table) cannot be computed in advance.
 */
#include "gm_core.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARENA_CHUNK (1 << 20)
#define SORT_RUN	65536		/* gm_keymap_sort: keys sorted at once between polls */

struct gm_keymap
{
	int			byte_keys;
	int32_t		n;				/* keys stored */
	int32_t		cap_keys;
	uint64_t	seed;			/* mixed into every hash */
	uint64_t	mask;			/* slots - 1 */
	int32_t    *slots;			/* index + 1, 0 = empty */
	uint64_t   *hashes;			/* per key, to rehash without rereading keys */
	int64_t    *ikeys;			/* integer keys */
	const char **bkeys;			/* byte keys (point into the arena) */
	uint32_t   *blens;
	char	  **chunks;			/* arena */
	int			nchunks;
	int			capchunks;
	size_t		used;			/* in the last chunk */
	size_t		chunksize;		/* of the last chunk */
	size_t		arena_bytes;	/* all chunks */
	int32_t    *dense;			/* gm_keymap_int_dense: key -> index, -1: not seen */
	int64_t		dense_n;		/* entries of dense (keys 0 .. dense_n - 1) */
	int			in_key_order;	/* gm_keymap_load_marked: indices are the key order */
};

static inline uint64_t
mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t
hash_bytes(const void *p, uint32_t len, uint64_t seed)
{
	const unsigned char *s = p;
	uint64_t	h = 0x9E3779B97F4A7C15ULL ^ len ^ seed;

	while (len >= 8)
	{
		uint64_t	w;

		memcpy(&w, s, 8);
		h = mix64(h ^ w) + 0x632BE59BD9B4E019ULL;
		s += 8;
		len -= 8;
	}
	if (len)
	{
		uint64_t	w = 0;

		memcpy(&w, s, len);
		h = mix64(h ^ w ^ 0xA5A5A5A5ULL);
	}
	return mix64(h);
}

static inline uint64_t
hash_int(int64_t key, uint64_t seed)
{
	return mix64(mix64((uint64_t) key ^ seed) + seed);
}

/*
 * A seed per map: the clock, the map's address and a counter, mixed.  Not a
 * secret in the cryptographic sense, but not known to whoever fills the
 * table in advance, which is what keeps colliding keys from being chosen.
 */
static uint64_t
new_seed(const void *m)
{
	static uint64_t counter;
	struct timespec ts;
	uint64_t	c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return mix64((uint64_t) (uintptr_t) m ^ ((uint64_t) ts.tv_nsec << 24) ^
				 (uint64_t) ts.tv_sec ^ (c * 0x9E3779B97F4A7C15ULL));
}

gm_keymap *
gm_keymap_create(int byte_keys)
{
	gm_keymap  *m = calloc(1, sizeof(gm_keymap));

	if (!m)
		return NULL;
	m->byte_keys = byte_keys;
	m->seed = new_seed(m);
	m->mask = 1023;
	m->slots = calloc(1024, sizeof(int32_t));
	if (!m->slots)
	{
		free(m);
		return NULL;
	}
	return m;
}

void
gm_keymap_free(gm_keymap *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->nchunks; i++)
		free(m->chunks[i]);
	free(m->chunks);
	free(m->slots);
	free(m->hashes);
	free(m->ikeys);
	free(m->bkeys);
	free(m->blens);
	free(m->dense);
	free(m);
}

int32_t
gm_keymap_size(const gm_keymap *m)
{
	return m->n;
}

size_t
gm_keymap_memory(const gm_keymap *m)
{
	size_t		per_key = (m->hashes ? sizeof(uint64_t) : 0) +
		(m->byte_keys ? sizeof(char *) + sizeof(uint32_t) : sizeof(int64_t));

	return sizeof(*m) + (m->slots ? (size_t) (m->mask + 1) * sizeof(int32_t) : 0) +
		(size_t) m->cap_keys * per_key + (size_t) m->capchunks * sizeof(char *) +
		m->arena_bytes + (size_t) m->dense_n * sizeof(int32_t);
}

void
gm_keymap_drop_lookups(gm_keymap *m)
{
	free(m->slots);
	free(m->hashes);
	free(m->dense);
	m->slots = NULL;
	m->hashes = NULL;
	m->dense = NULL;
	m->dense_n = 0;
}

static int
grow_slots(gm_keymap *m)
{
	uint64_t	nslots = (m->mask + 1) * 2;
	int32_t    *s = calloc(nslots, sizeof(int32_t));

	if (!s)
		return -1;
	for (int32_t i = 0; i < m->n; i++)
	{
		uint64_t	pos = m->hashes[i] & (nslots - 1);

		while (s[pos])
			pos = (pos + 1) & (nslots - 1);
		s[pos] = i + 1;
	}
	free(m->slots);
	m->slots = s;
	m->mask = nslots - 1;
	return 0;
}

static int
grow_keys(gm_keymap *m)
{
	/* doubled in 64 bits, at most INT32_MAX (reserve stops at INT32_MAX - 1 keys) */
	int64_t		cap64 = m->cap_keys ? (int64_t) m->cap_keys * 2 : 1024;
	int32_t		cap = cap64 > INT32_MAX ? INT32_MAX : (int32_t) cap64;
	void	   *h = realloc(m->hashes, sizeof(uint64_t) * (size_t) cap);

	if (!h)
		return -1;
	m->hashes = h;
	if (m->byte_keys)
	{
		void	   *k = realloc(m->bkeys, sizeof(char *) * (size_t) cap);

		if (!k)
			return -1;
		m->bkeys = k;
		k = realloc(m->blens, sizeof(uint32_t) * (size_t) cap);
		if (!k)
			return -1;
		m->blens = k;
	}
	else
	{
		void	   *k = realloc(m->ikeys, sizeof(int64_t) * (size_t) cap);

		if (!k)
			return -1;
		m->ikeys = k;
	}
	m->cap_keys = cap;
	return 0;
}

/* room for a new key: key array and slot table (load <= 1/2) */
static int
reserve(gm_keymap *m)
{
	if (m->n >= INT32_MAX - 1)
		return -1;
	if (m->n >= m->cap_keys && grow_keys(m) != 0)
		return -1;
	if ((uint64_t) (m->n + 1) * 2 > m->mask + 1 && grow_slots(m) != 0)
		return -1;
	return 0;
}

int32_t
gm_keymap_int(gm_keymap *m, int64_t key)
{
	uint64_t	h = hash_int(key, m->seed);
	uint64_t	pos = h & m->mask;
	int32_t		s;

	if (m->slots == NULL)
		return -1;				/* gm_keymap_drop_lookups */
	while ((s = m->slots[pos]) != 0)
	{
		if (m->ikeys[s - 1] == key)
			return s - 1;
		pos = (pos + 1) & m->mask;
	}
	if (reserve(m) != 0)
		return -1;
	pos = h & m->mask;
	while (m->slots[pos])
		pos = (pos + 1) & m->mask;
	m->slots[pos] = m->n + 1;
	m->hashes[m->n] = h;
	m->ikeys[m->n] = key;
	return m->n++;
}

/*
 * Grow the dense array so that it covers key (0 <= key <
 * GM_KEYMAP_DENSE_MAX): by doubling from GM_KEYMAP_DENSE_MIN, to at most
 * GM_KEYMAP_DENSE_MAX entries and to no more than GM_KEYMAP_DENSE_SLACK
 * times the keys in the map.  -1 when the policy says no or memory runs
 * out: the key then goes to the hash table alone.
 */
static int
dense_grow(gm_keymap *m, int64_t key)
{
	int64_t		want = m->dense_n > 0 ? m->dense_n * 2 : GM_KEYMAP_DENSE_MIN;
	int64_t		room = (int64_t) GM_KEYMAP_DENSE_SLACK * m->n;
	int32_t    *a;

	/* key < GM_KEYMAP_DENSE_MAX = 2^26 and want >= 1: at most 26 doublings */
	while (want <= key)
		want *= 2;
	if (want > GM_KEYMAP_DENSE_MAX ||
		want > (room > GM_KEYMAP_DENSE_MIN ? room : GM_KEYMAP_DENSE_MIN))
		return -1;
	a = realloc(m->dense, sizeof(int32_t) * (size_t) want);
	if (a == NULL)
		return -1;
	memset(a + m->dense_n, 0xff, sizeof(int32_t) * (size_t) (want - m->dense_n));	/* -1 */
	m->dense = a;
	m->dense_n = want;
	return 0;
}

int32_t
gm_keymap_int_dense(gm_keymap *m, int64_t key)
{
	int32_t		idx;

	if (m->slots == NULL)
		return -1;				/* gm_keymap_drop_lookups */

	if (key < 0 || key >= GM_KEYMAP_DENSE_MAX ||
		(key >= m->dense_n && dense_grow(m, key) != 0))
		return gm_keymap_int(m, key);
	if ((idx = m->dense[key]) >= 0)
		return idx;
	idx = gm_keymap_int(m, key);
	if (idx >= 0)
		m->dense[key] = idx;
	return idx;
}

static const char *
arena_copy(gm_keymap *m, const void *p, uint32_t len)
{
	char	   *dst;

	if (m->nchunks == 0 || len > m->chunksize - m->used)
	{
		size_t		size = len > ARENA_CHUNK ? len : ARENA_CHUNK;

		if (m->nchunks == m->capchunks)
		{
			int			cap = m->capchunks ? m->capchunks * 2 : 16;
			char	  **c;

			if (m->capchunks > INT32_MAX / 2)
				return NULL;
			c = realloc(m->chunks, sizeof(char *) * (size_t) cap);
			if (!c)
				return NULL;
			m->chunks = c;
			m->capchunks = cap;
		}
		if ((m->chunks[m->nchunks] = malloc(size)) == NULL)
			return NULL;
		m->nchunks++;
		m->used = 0;
		m->chunksize = size;
		m->arena_bytes += size;
	}
	dst = m->chunks[m->nchunks - 1] + m->used;
	if (len)
		memcpy(dst, p, len);
	m->used += len;
	return dst;
}

int32_t
gm_keymap_bytes(gm_keymap *m, const void *key, uint32_t len)
{
	uint64_t	h = hash_bytes(key, len, m->seed);
	uint64_t	pos = h & m->mask;
	int32_t		s;
	const char *copy;

	if (m->slots == NULL)
		return -1;				/* gm_keymap_drop_lookups */
	while ((s = m->slots[pos]) != 0)
	{
		if (m->hashes[s - 1] == h && m->blens[s - 1] == len &&
			memcmp(m->bkeys[s - 1], key, len) == 0)
			return s - 1;
		pos = (pos + 1) & m->mask;
	}
	if (reserve(m) != 0 || (copy = arena_copy(m, key, len)) == NULL)
		return -1;
	pos = h & m->mask;
	while (m->slots[pos])
		pos = (pos + 1) & m->mask;
	m->slots[pos] = m->n + 1;
	m->hashes[m->n] = h;
	m->bkeys[m->n] = copy;
	m->blens[m->n] = len;
	return m->n++;
}

static const gm_keymap *sort_map;

static int
cmp_int(const void *a, const void *b)
{
	int64_t		x = sort_map->ikeys[*(const int32_t *) a];
	int64_t		y = sort_map->ikeys[*(const int32_t *) b];

	return (x > y) - (x < y);
}

static int
cmp_bytes(const void *a, const void *b)
{
	int32_t		i = *(const int32_t *) a,
				j = *(const int32_t *) b;
	uint32_t	li = sort_map->blens[i],
				lj = sort_map->blens[j];
	int			c = memcmp(sort_map->bkeys[i], sort_map->bkeys[j], li < lj ? li : lj);

	if (c)
		return c;
	return (li > lj) - (li < lj);
}

static int
stop_requested(const gm_callbacks *cb)
{
	return cb && cb->should_stop && cb->should_stop(cb->arg);
}

/*
 * Merge the sorted runs a[lo, mid) and a[mid, hi) into b[lo, hi), asking cb
 * every 2^20 keys; 1 when it asked to stop.
 */
static int
merge_runs(const int32_t *a, int32_t *b, int64_t lo, int64_t mid, int64_t hi,
		   int (*cmp) (const void *, const void *), const gm_callbacks *cb)
{
	int64_t		i = lo,
				j = mid,
				o = lo;

	while (i < mid && j < hi)
	{
		b[o] = cmp(&a[j], &a[i]) < 0 ? a[j++] : a[i++];
		if ((++o & 0xFFFFF) == 0 && stop_requested(cb))
			return 1;
	}
	memcpy(b + o, a + i, sizeof(int32_t) * (size_t) (mid - i));
	o += mid - i;
	memcpy(b + o, a + j, sizeof(int32_t) * (size_t) (hi - j));
	return 0;
}

/*
 * order[0 .. n) sorted by key: runs of SORT_RUN keys by qsort, then merged
 * pairwise (bottom up) through buf (n entries), asking cb between runs and
 * during merges so that sorting 10^8 keys can be stopped.  The sorted order
 * ends in order.  GM_ECANCELED when cb asked to stop.
 */
static int
sort_order(int32_t *order, int32_t *buf, int64_t n,
		   int (*cmp) (const void *, const void *), const gm_callbacks *cb)
{
	int32_t    *a = order,
			   *b = buf;

	for (int64_t lo = 0; lo < n; lo += SORT_RUN)
	{
		int64_t		len = n - lo < SORT_RUN ? n - lo : SORT_RUN;

		qsort(order + lo, (size_t) len, sizeof(int32_t), cmp);
		if (stop_requested(cb))
			return GM_ECANCELED;
	}
	for (int64_t width = SORT_RUN; width < n; width *= 2)
	{
		int32_t    *t;

		for (int64_t lo = 0; lo < n; lo += 2 * width)
		{
			int64_t		mid = lo + width < n ? lo + width : n,
						hi = lo + 2 * width < n ? lo + 2 * width : n;

			if (merge_runs(a, b, lo, mid, hi, cmp, cb))
				return GM_ECANCELED;
		}
		t = a;
		a = b;
		b = t;
	}
	if (a != order)
		memcpy(order, a, sizeof(int32_t) * (size_t) n);
	return GM_OK;
}

/*
 * Renumber in key order (gm_keymap_sort_polled); keep_lookups 0: the lookups
 * are dropped instead of rebuilt (gm_keymap_sort_final).  Integer keys that
 * all sit in the dense array are in key order along it: one pass over it
 * orders them, without a comparison sort.
 */
static int
keymap_sort(gm_keymap *m, int32_t *old_to_new, const gm_callbacks *cb, int keep_lookups)
{
	int32_t    *order;
	void	   *tmp;
	int64_t		in_dense = 0;
	int			rc = GM_OK;

	if (m->n == 0)
	{
		if (!keep_lookups)
			gm_keymap_drop_lookups(m);
		return GM_OK;			/* nothing to renumber (and no key arrays yet) */
	}
	if (m->slots == NULL)
	{
		/* gm_keymap_load_marked: already in key order, and final */
		if (m->in_key_order && !keep_lookups)
		{
			for (int32_t i = 0; i < m->n; i++)
				old_to_new[i] = i;
			return GM_OK;
		}
		return GM_EINVAL;		/* gm_keymap_drop_lookups: the slots cannot be rebuilt */
	}
	order = malloc(sizeof(int32_t) * (size_t) m->n);
	tmp = malloc(sizeof(int64_t) * (size_t) m->n);

	if (!order || !tmp)
	{
		free(order);
		free(tmp);
		return GM_ENOMEM;
	}
	if (!m->byte_keys)
	{
		int64_t		maxk = -1,
					covered = 0;

		/*
		 * The dense array holds the keys met through gm_keymap_int_dense once
		 * it covered them: it is grown to the largest key when the map's
		 * bounds allow, and given every key it covers.  When that is every
		 * key, a pass along it is the key order.
		 */
		for (int32_t i = 0; i < m->n; i++)
			if (m->ikeys[i] >= 0 && m->ikeys[i] < GM_KEYMAP_DENSE_MAX && m->ikeys[i] > maxk)
				maxk = m->ikeys[i];
		if (maxk >= m->dense_n)
			(void) dense_grow(m, maxk);
		for (int32_t i = 0; i < m->n; i++)
			if (m->ikeys[i] >= 0 && m->ikeys[i] < m->dense_n)
			{
				m->dense[m->ikeys[i]] = i;
				covered++;
			}
		if (covered == m->n)
			for (int64_t key = 0; key < m->dense_n && in_dense < m->n; key++)
				if (m->dense[key] >= 0)
					order[in_dense++] = m->dense[key];
	}
	if (in_dense < m->n)
	{
		/* keys outside the dense array (negative, large, sparse, bytes): sorted */
		for (int32_t i = 0; i < m->n; i++)
			order[i] = i;
		sort_map = m;			/* qsort has no context argument in C99 */
		rc = sort_order(order, tmp, m->n, m->byte_keys ? cmp_bytes : cmp_int, cb);
		sort_map = NULL;
	}
	if (rc != GM_OK)
	{
		/* the map is as it was */
		free(order);
		free(tmp);
		return rc;
	}
	for (int32_t r = 0; r < m->n; r++)
		old_to_new[order[r]] = r;
	/* permute the key arrays into sorted order, then rebuild the slots */
	if (m->byte_keys)
	{
		const char **bk = tmp;
		uint32_t   *bl = (uint32_t *) order;	/* reuse after reading */

		for (int32_t r = 0; r < m->n; r++)
			bk[r] = m->bkeys[order[r]];
		memcpy(m->bkeys, bk, sizeof(char *) * (size_t) m->n);
		for (int32_t i = 0; i < m->n; i++)
			bl[old_to_new[i]] = m->blens[i];
		memcpy(m->blens, bl, sizeof(uint32_t) * (size_t) m->n);
		if (keep_lookups)
			for (int32_t i = 0; i < m->n; i++)
				m->hashes[i] = hash_bytes(m->bkeys[i], m->blens[i], m->seed);
	}
	else
	{
		int64_t    *ik = tmp;

		for (int32_t r = 0; r < m->n; r++)
			ik[r] = m->ikeys[order[r]];
		memcpy(m->ikeys, ik, sizeof(int64_t) * (size_t) m->n);
		if (keep_lookups)
			for (int32_t i = 0; i < m->n; i++)
				m->hashes[i] = hash_int(m->ikeys[i], m->seed);
	}
	free(order);
	free(tmp);
	if (!keep_lookups)
	{
		gm_keymap_drop_lookups(m);
		return GM_OK;
	}
	memset(m->slots, 0, sizeof(int32_t) * (size_t) (m->mask + 1));
	for (int32_t i = 0; i < m->n; i++)
	{
		uint64_t	pos = m->hashes[i] & m->mask;

		while (m->slots[pos])
			pos = (pos + 1) & m->mask;
		m->slots[pos] = i + 1;
	}
	/* the dense array follows the renumbering */
	for (int64_t key = 0; key < m->dense_n; key++)
		if (m->dense[key] >= 0)
			m->dense[key] = old_to_new[m->dense[key]];
	return GM_OK;
}

/*
 * An empty integer map given the keys k in [0, n) whose mark[k] >= 0, in
 * key order, each mark[k] set to its key's index; the map keeps no lookups.
 */
int
gm_keymap_load_marked(gm_keymap *m, int32_t *mark, int64_t n)
{
	int64_t		count = 0;
	int32_t		idx = 0;

	if (m->byte_keys || m->n != 0 || m->slots == NULL || n < 0)
		return GM_EINVAL;
	for (int64_t k = 0; k < n; k++)
		count += mark[k] >= 0;
	if (count > INT32_MAX - 1)
		return GM_EINVAL;
	if (count > 0)
	{
		int64_t    *keys = malloc(sizeof(int64_t) * (size_t) count);

		if (keys == NULL)
			return GM_ENOMEM;
		free(m->ikeys);
		m->ikeys = keys;
		m->cap_keys = (int32_t) count;
		for (int64_t k = 0; k < n; k++)
			if (mark[k] >= 0)
			{
				keys[idx] = k;
				mark[k] = idx++;
			}
	}
	gm_keymap_drop_lookups(m);
	m->n = idx;
	m->in_key_order = 1;
	return GM_OK;
}

int
gm_keymap_sort_polled(gm_keymap *m, int32_t *old_to_new, const gm_callbacks *cb)
{
	return keymap_sort(m, old_to_new, cb, 1);
}

int
gm_keymap_sort_final(gm_keymap *m, int32_t *old_to_new, const gm_callbacks *cb)
{
	return keymap_sort(m, old_to_new, cb, 0);
}

int
gm_keymap_sort(gm_keymap *m, int32_t *old_to_new)
{
	return gm_keymap_sort_polled(m, old_to_new, NULL);
}

int64_t
gm_keymap_int_at(const gm_keymap *m, int32_t idx)
{
	return m->ikeys[idx];
}

const void *
gm_keymap_bytes_at(const gm_keymap *m, int32_t idx, uint32_t *len)
{
	*len = m->blens[idx];
	return m->bkeys[idx];
}

/* The index of an integer key, or -1 when it is not in the map. */
int32_t
gm_keymap_find_int(const gm_keymap *m, int64_t key)
{
	uint64_t	pos;
	int32_t		s;

	if (m->byte_keys || m->slots == NULL)
		return -1;
	if (key >= 0 && key < m->dense_n && m->dense[key] >= 0)
		return m->dense[key];
	pos = hash_int(key, m->seed) & m->mask;
	while ((s = m->slots[pos]) != 0)
	{
		if (m->ikeys[s - 1] == key)
			return s - 1;
		pos = (pos + 1) & m->mask;
	}
	return -1;
}

/* The index of a byte-string key, or -1 when it is not in the map. */
int32_t
gm_keymap_find_bytes(const gm_keymap *m, const void *key, uint32_t len)
{
	uint64_t	h = hash_bytes(key, len, m->seed);
	uint64_t	pos = h & m->mask;
	int32_t		s;

	if (!m->byte_keys || m->slots == NULL)
		return -1;
	while ((s = m->slots[pos]) != 0)
	{
		if (m->hashes[s - 1] == h && m->blens[s - 1] == len &&
			memcmp(m->bkeys[s - 1], key, len) == 0)
			return s - 1;
		pos = (pos + 1) & m->mask;
	}
	return -1;
}
