/*
 * gm_ccd_plan.h: the order of work in one CCD++ iteration, shared by the
 * CPU (src/core/train/ccd.c) and GPU (cuda/train/ccd.cu) implementations so that both
 * do the same arithmetic in the same order.  Header-only, plain C.
 *
 * The model  r_ij ~ mu + b_i + c_j + sum_t u_t[i] v_t[j]  is a sum of
 * "entries": the user biases (b, ones), the item biases (ones, c) when biases
 * are on, then the k features (u_t, v_t).  CCD++ (Yu et al. 2012) visits the
 * entries in turn.  For entry e, with the residual  R^e = R - mu - (every
 * entry but e), it minimises
 *     sum (R^e_ij - u[i] v[j])^2 + lambda (sum_i n_i u[i]^2 + sum_j n_j v[j]^2)
 * (n_i, n_j the rows' and columns' numbers of ratings: the weighted lambda
 * of explicit ALS) over u with v fixed (a pass over the rows of R^e, CSR),
 * then over v with u fixed (a pass over its columns, CSC), inner_iterations
 * times:
 *     u[i] = sum_j R^e_ij v[j] / (lambda n_i + sum_j v[j]^2).
 * A bias entry has one side fixed at ones, so it takes one pass (the other
 * is skipped).  R^e is kept twice, in CSR and in CSC order, so that both
 * passes read it contiguously.
 *
 * Moving from entry p to entry e changes the residual by two rank-one terms,
 * R^e = R^p - u_p v_p^T + u_e v_e^T.  Instead of a separate pass that adds
 * and subtracts them, each copy of the residual keeps a list of pending
 * rank-one terms, and the next pass over that copy adds them while it reads
 * (and writes the result back): each residual value is read and written once
 * per entry in each order, read once more per further inner iteration.  The
 * vectors a pending term refers to are snapshots (copies taken when the term
 * is queued, into numbered slots) because the live vectors change before
 * the other copy's pass applies the term.
 *
 * Vector ids: 0 .. k-1 the feature vectors, k the bias vector, k + 1 + q
 * snapshot slot q; GM_CCD_ONES the all-ones vector.  Side 0 is the user side
 * (vectors of n_users entries, the CSR pass), side 1 the item side.
 */
#ifndef GM_CCD_PLAN_H
#define GM_CCD_PLAN_H

#include <string.h>

#define GM_CCD_ONES			(-1)
#define GM_CCD_SLOTS		8	/* snapshot slots per side */
#define GM_CCD_MAX_TERMS	8	/* pending terms per copy */
#define GM_CCD_MAX_GENERAL	2	/* terms with two non-constant sides, per pass */

/* A rank-one term scale * u v^T (u: user-side vector id, v: item-side). */
typedef struct gm_ccd_term
{
	int			u;
	int			v;
	float		scale;
} gm_ccd_term;

typedef struct gm_ccd_copy
{
	int			side;
	int			src;			/* a live vector id */
	int			dst;			/* a slot's vector id */
} gm_ccd_copy;

/* What one sweep does: copies, then a pass over one side's residual. */
typedef struct gm_ccd_step
{
	int			entry;
	int			side;			/* 0: CSR pass updating a user-side vector; 1: CSC, item side */
	int			target;			/* vector id updated (on side) */
	int			cur;			/* the entry's vector on the other side (or ONES) */
	int			n_copies;
	gm_ccd_copy copies[4];		/* snapshots to take before the pass */
	int			n_terms;		/* terms the pass adds to this copy; it writes iff > 0 */
	gm_ccd_term terms[GM_CCD_MAX_TERMS];
} gm_ccd_step;

/*
 * A pass's terms sorted by what the pass must read: for a pass whose rows
 * are on side S ("fixed", index i) reading entries j of the other side
 * ("gathered"), the residual gains
 *     c0[i] + g0[j] + sum_m a_m[i] g_m[j]
 * where c0 sums terms whose gathered side is ones, g0 those whose fixed
 * side is ones, and the m are the general terms (both sides vectors).
 */
typedef struct gm_ccd_pack
{
	int			n_c0;
	int			c0_vec[GM_CCD_MAX_TERMS];	/* fixed-side vector or ONES */
	float		c0_scale[GM_CCD_MAX_TERMS];
	int			n_g0;
	int			g0_vec[GM_CCD_MAX_TERMS];	/* gathered-side vector */
	float		g0_scale[GM_CCD_MAX_TERMS];
	int			n_gen;
	int			gen_fixed[GM_CCD_MAX_GENERAL];
	int			gen_gathered[GM_CCD_MAX_GENERAL];
	float		gen_scale[GM_CCD_MAX_GENERAL];
	int			cur;			/* gathered-side vector the update uses (or ONES) */
} gm_ccd_pack;

typedef struct gm_ccd_plan
{
	int			k;
	int			inner;			/* inner iterations of a feature entry */
	int			biases;
	int			n_entries;
	int			n_sweeps;		/* per outer iteration */
	int			cur_entry;		/* the entry last started, -1 before the first */
	int			step_entry;		/* sweep -> (entry, pass) walk */
	int			step_pass;
	int			n_pending[2];
	gm_ccd_term pending[2][GM_CCD_MAX_TERMS];
	int			refs[2][GM_CCD_SLOTS];	/* pending terms that use a slot */
} gm_ccd_plan;

/* The entry's user-side and item-side vector ids. */
static inline void
gm_ccd_entry_vecs(const gm_ccd_plan *p, int e, int *u, int *v)
{
	if (p->biases && e == 0)
	{
		*u = p->k;
		*v = GM_CCD_ONES;
	}
	else if (p->biases && e == 1)
	{
		*u = GM_CCD_ONES;
		*v = p->k;
	}
	else
	{
		*u = *v = e - (p->biases ? 2 : 0);
	}
}

/* Passes of an entry: one for a bias, 2 * inner for a feature. */
static inline int
gm_ccd_entry_passes(const gm_ccd_plan *p, int e)
{
	return p->biases && e < 2 ? 1 : 2 * p->inner;
}

static inline void
gm_ccd_plan_init(gm_ccd_plan *p, int k, int inner, int biases)
{
	memset(p, 0, sizeof(*p));
	p->k = k;
	p->inner = inner < 1 ? 1 : inner;
	p->biases = biases ? 1 : 0;
	p->n_entries = k + 2 * p->biases;
	p->n_sweeps = 2 * p->biases + 2 * p->inner * k;
	p->cur_entry = -1;
}

static inline int
gm_ccd_is_slot(const gm_ccd_plan *p, int id)
{
	return id > p->k;
}

/* A free slot of side s as a vector id, or -1. */
static inline int
gm_ccd_take_slot(gm_ccd_plan *p, int s, const int *taken)
{
	for (int q = 0; q < GM_CCD_SLOTS; q++)
		if (p->refs[s][q] == 0 && !taken[q])
			return p->k + 1 + q;
	return -1;
}

/*
 * Queue "scale * (u, v)" on both copies, snapshotting the live vectors u
 * (side 0) and v (side 1) into fresh slots.  Returns 0 or -1 when slots or
 * term room ran out (a bug in the plan, reported as such).
 */
static inline int
gm_ccd_queue(gm_ccd_plan *p, gm_ccd_step *st, int u, int v, float scale,
			 int taken[2][GM_CCD_SLOTS])
{
	int			id[2] = {u, v};
	gm_ccd_term t;

	for (int s = 0; s < 2; s++)
	{
		if (id[s] == GM_CCD_ONES)
			continue;
		{
			int			slot = gm_ccd_take_slot(p, s, taken[s]);

			if (slot < 0 || st->n_copies >= 4)
				return -1;
			taken[s][slot - p->k - 1] = 1;
			st->copies[st->n_copies].side = s;
			st->copies[st->n_copies].src = id[s];
			st->copies[st->n_copies].dst = slot;
			st->n_copies++;
			id[s] = slot;
		}
	}
	t.u = id[0];
	t.v = id[1];
	t.scale = scale;
	for (int s = 0; s < 2; s++)
	{
		if (p->n_pending[s] >= GM_CCD_MAX_TERMS)
			return -1;
		p->pending[s][p->n_pending[s]++] = t;
		if (gm_ccd_is_slot(p, id[0]))
			p->refs[0][id[0] - p->k - 1]++;
		if (gm_ccd_is_slot(p, id[1]))
			p->refs[1][id[1] - p->k - 1]++;
	}
	return 0;
}

/*
 * The step of sweep s (0 .. n_sweeps - 1, called in order, every outer
 * iteration).  Returns 0, or -1 on an internal inconsistency.
 */
static inline int
gm_ccd_plan_step(gm_ccd_plan *p, int s, gm_ccd_step *st)
{
	int			e,
				pass,
				u,
				v;
	int			taken[2][GM_CCD_SLOTS];

	memset(st, 0, sizeof(*st));
	memset(taken, 0, sizeof(taken));
	if (s == 0)
	{
		p->step_entry = 0;
		p->step_pass = 0;
	}
	e = p->step_entry;
	pass = p->step_pass;
	if (e >= p->n_entries)
		return -1;
	gm_ccd_entry_vecs(p, e, &u, &v);

	if (pass == 0)
	{
		/* leave the previous entry (its final values), take up this one */
		if (p->cur_entry >= 0)
		{
			int			pu,
						pv;

			gm_ccd_entry_vecs(p, p->cur_entry, &pu, &pv);
			if (gm_ccd_queue(p, st, pu, pv, -1.0f, taken) != 0)
				return -1;
		}
		if (gm_ccd_queue(p, st, u, v, 1.0f, taken) != 0)
			return -1;
		p->cur_entry = e;
	}

	st->entry = e;
	if (p->biases && e == 0)
		st->side = 0;
	else if (p->biases && e == 1)
		st->side = 1;
	else
		st->side = pass % 2;
	st->target = st->side == 0 ? u : v;
	st->cur = st->side == 0 ? v : u;

	/* the pass applies (and so consumes) its copy's pending terms */
	st->n_terms = p->n_pending[st->side];
	for (int m = 0; m < st->n_terms; m++)
	{
		gm_ccd_term t = p->pending[st->side][m];

		st->terms[m] = t;
		if (gm_ccd_is_slot(p, t.u))
			p->refs[0][t.u - p->k - 1]--;
		if (gm_ccd_is_slot(p, t.v))
			p->refs[1][t.v - p->k - 1]--;
	}
	p->n_pending[st->side] = 0;

	if (++p->step_pass >= gm_ccd_entry_passes(p, e))
	{
		p->step_entry++;
		p->step_pass = 0;
	}
	return 0;
}

/*
 * Terms that turn the CSR copy into the full residual
 * e = r - mu - b - c - W H^T (read-only, for the loss): what it has pending,
 * less the current entry's live vectors.  Returns the count.
 */
static inline int
gm_ccd_plan_eval(const gm_ccd_plan *p, gm_ccd_term *terms)
{
	int			n = p->n_pending[0];

	memcpy(terms, p->pending[0], sizeof(gm_ccd_term) * n);
	if (p->cur_entry >= 0)
	{
		gm_ccd_entry_vecs(p, p->cur_entry, &terms[n].u, &terms[n].v);
		terms[n].scale = -1.0f;
		n++;
	}
	return n;
}

/*
 * Sort terms for a pass whose rows are on side `side` (0: users).  Returns 0,
 * or -1 when more than GM_CCD_MAX_GENERAL general terms (never, by the plan).
 */
static inline int
gm_ccd_make_pack(const gm_ccd_term *terms, int n_terms, int side, int cur,
				 gm_ccd_pack *pk)
{
	memset(pk, 0, sizeof(*pk));
	pk->cur = cur;
	for (int m = 0; m < n_terms; m++)
	{
		int			f = side == 0 ? terms[m].u : terms[m].v;
		int			g = side == 0 ? terms[m].v : terms[m].u;

		if (g == GM_CCD_ONES)
		{
			pk->c0_vec[pk->n_c0] = f;
			pk->c0_scale[pk->n_c0++] = terms[m].scale;
		}
		else if (f == GM_CCD_ONES)
		{
			pk->g0_vec[pk->n_g0] = g;
			pk->g0_scale[pk->n_g0++] = terms[m].scale;
		}
		else
		{
			if (pk->n_gen >= GM_CCD_MAX_GENERAL)
				return -1;
			pk->gen_fixed[pk->n_gen] = f;
			pk->gen_gathered[pk->n_gen] = g;
			pk->gen_scale[pk->n_gen++] = terms[m].scale;
		}
	}
	return 0;
}

#endif							/* GM_CCD_PLAN_H */
