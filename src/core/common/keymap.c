/*
 * keymap.c: open-addressing hash maps from user/item keys to dense indices.
 */
#include "gm_core.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK (1 << 20)

struct gm_keymap
{
	int			byte_keys;
	int32_t		n;				/* keys stored */
	int32_t		cap_keys;
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
hash_bytes(const void *p, uint32_t len)
{
	const unsigned char *s = p;
	uint64_t	h = 0x9E3779B97F4A7C15ULL ^ len;

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

gm_keymap *
gm_keymap_create(int byte_keys)
{
	gm_keymap  *m = calloc(1, sizeof(gm_keymap));

	if (!m)
		return NULL;
	m->byte_keys = byte_keys;
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
	free(m);
}

int32_t
gm_keymap_size(const gm_keymap *m)
{
	return m->n;
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
	int32_t		cap = m->cap_keys ? m->cap_keys * 2 : 1024;
	void	   *h = realloc(m->hashes, sizeof(uint64_t) * cap);

	if (!h)
		return -1;
	m->hashes = h;
	if (m->byte_keys)
	{
		void	   *k = realloc(m->bkeys, sizeof(char *) * cap);

		if (!k)
			return -1;
		m->bkeys = k;
		k = realloc(m->blens, sizeof(uint32_t) * cap);
		if (!k)
			return -1;
		m->blens = k;
	}
	else
	{
		void	   *k = realloc(m->ikeys, sizeof(int64_t) * cap);

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
	if (m->n == INT32_MAX - 1)
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
	uint64_t	h = mix64((uint64_t) key);
	uint64_t	pos = h & m->mask;
	int32_t		s;

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

static const char *
arena_copy(gm_keymap *m, const void *p, uint32_t len)
{
	char	   *dst;

	if (m->nchunks == 0 || m->used + len > m->chunksize)
	{
		size_t		size = len > ARENA_CHUNK ? len : ARENA_CHUNK;

		if (m->nchunks == m->capchunks)
		{
			int			cap = m->capchunks ? m->capchunks * 2 : 16;
			char	  **c = realloc(m->chunks, sizeof(char *) * cap);

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
	uint64_t	h = hash_bytes(key, len);
	uint64_t	pos = h & m->mask;
	int32_t		s;
	const char *copy;

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

int
gm_keymap_sort(gm_keymap *m, int32_t *old_to_new)
{
	int32_t    *order;
	void	   *tmp;

	if (m->n == 0)
		return GM_OK;			/* nothing to renumber (and no key arrays yet) */
	order = malloc(sizeof(int32_t) * m->n);
	tmp = malloc(sizeof(int64_t) * m->n);

	if (!order || !tmp)
	{
		free(order);
		free(tmp);
		return GM_ENOMEM;
	}
	for (int32_t i = 0; i < m->n; i++)
		order[i] = i;
	sort_map = m;				/* qsort has no context argument in C99 */
	qsort(order, m->n, sizeof(int32_t), m->byte_keys ? cmp_bytes : cmp_int);
	sort_map = NULL;
	for (int32_t r = 0; r < m->n; r++)
		old_to_new[order[r]] = r;
	/* permute the key arrays into sorted order, then rebuild the slots */
	if (m->byte_keys)
	{
		const char **bk = tmp;
		uint32_t   *bl = (uint32_t *) order;	/* reuse after reading */

		for (int32_t r = 0; r < m->n; r++)
			bk[r] = m->bkeys[order[r]];
		memcpy(m->bkeys, bk, sizeof(char *) * m->n);
		for (int32_t i = 0; i < m->n; i++)
			bl[old_to_new[i]] = m->blens[i];
		memcpy(m->blens, bl, sizeof(uint32_t) * m->n);
		for (int32_t i = 0; i < m->n; i++)
			m->hashes[i] = hash_bytes(m->bkeys[i], m->blens[i]);
	}
	else
	{
		int64_t    *ik = tmp;

		for (int32_t r = 0; r < m->n; r++)
			ik[r] = m->ikeys[order[r]];
		memcpy(m->ikeys, ik, sizeof(int64_t) * m->n);
		for (int32_t i = 0; i < m->n; i++)
			m->hashes[i] = mix64((uint64_t) m->ikeys[i]);
	}
	free(order);
	free(tmp);
	memset(m->slots, 0, sizeof(int32_t) * (m->mask + 1));
	for (int32_t i = 0; i < m->n; i++)
	{
		uint64_t	pos = m->hashes[i] & m->mask;

		while (m->slots[pos])
			pos = (pos + 1) & m->mask;
		m->slots[pos] = i + 1;
	}
	return GM_OK;
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
	uint64_t	pos = mix64((uint64_t) key) & m->mask;
	int32_t		s;

	if (m->byte_keys)
		return -1;
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
	uint64_t	h = hash_bytes(key, len);
	uint64_t	pos = h & m->mask;
	int32_t		s;

	if (!m->byte_keys)
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
