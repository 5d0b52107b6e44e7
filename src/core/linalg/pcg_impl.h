/*
 * pcg_impl.h: the CPU conjugate-gradient iteration in one working
 * precision, included by pcg.c twice: T = double, SFX = _d and T = float,
 * SFX = _s.  Dot products always accumulate in float64.
 *
 * The system solved is the symmetrically scaled one, Â ŷ = b̂ with
 * Â = S A S, b̂ = S b, x = S ŷ and S = D^-1/2 (Jacobi) or I (none): the
 * same iterates as Jacobi-preconditioned CG without reading D in the loop.
 * One iteration is two passes over the rows:
 *
 *   1.  q = Â p;  pq = p.q,  rq = r.q,  qq = q.q
 *       alpha = rr / pq;  rr' = rr - 2 alpha rq + alpha^2 qq  (= |r - alpha q|^2);
 *       beta = rr' / rr
 *   2.  y += alpha p;  r -= alpha q;  p = r + beta p;  rr = r.r (fresh)
 *       and, on check iterations, |S^-1 r|^2 = |b - A x|^2 by the recurrence
 *
 * so beta needs no separate reduction pass and alpha always uses a freshly
 * summed r.r (the expansion is of the actual vectors, not a CG identity).
 */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

/* Â's values: v_ij s_i s_j in the working precision. */
static void
FN(scale_values) (const gm_spmat *A, const double *s, T *vh, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4096)
	for (int64_t i = 0; i < A->n; i++)
		for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++)
			vh[e] = (T) (A->values[e] * s[i] * s[A->indices[e]]);
}

/*
 * r̂ = S rt from the float64 true residual rt; with init (a start or a
 * restart) also p = r̂ and y = 0.  Returns r̂.r̂.
 */
static double
FN(replace_residual) (cg_cpu *c, int init)
{
	T		   *r = c->r,
			   *p = c->p,
			   *y = c->y;
	double		rr = 0.0;

#pragma omp parallel for num_threads(c->nt) schedule(static) reduction(+:rr)
	for (int64_t i = 0; i < c->n; i++)
	{
		T			ri = (T) (c->s[i] * c->rt[i]);

		r[i] = ri;
		rr += (double) ri * (double) ri;
		if (init)
		{
			p[i] = ri;
			y[i] = 0;
		}
	}
	return rr;
}

/* x += S y; y = 0 (x float64). */
static void
FN(fold) (cg_cpu *c, double *x)
{
	T		   *y = c->y;

#pragma omp parallel for num_threads(c->nt) schedule(static)
	for (int64_t i = 0; i < c->n; i++)
	{
		x[i] += c->s[i] * (double) y[i];
		y[i] = 0;
	}
}

/*
 * One iteration (the two passes above).  rr in: r.r, out: the new r.r;
 * with check, *rru gets |S^-1 r|^2.  Returns 0, or 1 when p.Âp <= 0 or is
 * not finite (A is not positive definite) with *pq_out the value.
 */
GM_HOT static int
FN(iterate) (cg_cpu *c, double *rr, int check, double *rru, double *pq_out)
{
	const int64_t *ip = c->A->indptr;
	const int32_t *ix = c->A->indices;
	const T    *vh = c->vh;
	T		   *r = c->r,
			   *p = c->p,
			   *q = c->q,
			   *y = c->y;
	const double *dsq = c->dsq;
	double	   *part = c->part;
	const int64_t *bounds = c->bounds;
	int			nt = c->nt;
	double		rr0 = *rr;

#pragma omp parallel num_threads(nt)
	{
		double		alpha,
					beta;
		int			lbroke;

		for (int t = gm_la_thread_num(); t < nt; t += gm_la_num_threads())
		{
			double		pq = 0.0,
						rq = 0.0,
						qq = 0.0;

			for (int64_t i = bounds[t]; i < bounds[t + 1]; i++)
			{
				T			s = 0;
				double		qi;

				for (int64_t e = ip[i]; e < ip[i + 1]; e++)
					s += vh[e] * p[ix[e]];
				q[i] = s;
				qi = (double) s;
				pq += (double) p[i] * qi;
				rq += (double) r[i] * qi;
				qq += qi * qi;
			}
			part[4 * t] = pq;
			part[4 * t + 1] = rq;
			part[4 * t + 2] = qq;
		}
#pragma omp barrier
		{
			/* every thread sums the partials in the same order: same scalars */
			double		pq = 0.0,
						rq = 0.0,
						qq = 0.0,
						rrn;

			for (int t = 0; t < nt; t++)
			{
				pq += part[4 * t];
				rq += part[4 * t + 1];
				qq += part[4 * t + 2];
			}
			/* pq == 0: p underflowed (a recurrence run far below the tolerance) */
			lbroke = !(pq > 0.0) || !isfinite(pq);
			alpha = lbroke ? 0.0 : rr0 / pq;
			rrn = rr0 - 2.0 * alpha * rq + alpha * alpha * qq;
			beta = (rrn > 0.0 && rr0 > 0.0) ? rrn / rr0 : 0.0;
		}
#pragma omp barrier
		if (!lbroke)
		{
			for (int t = gm_la_thread_num(); t < nt; t += gm_la_num_threads())
			{
				double		rrs = 0.0,
							rus = 0.0;
				T			a = (T) alpha,
							b = (T) beta;

				if (check)
				{
					for (int64_t i = bounds[t]; i < bounds[t + 1]; i++)
					{
						T			pi = p[i],
									ri = r[i] - a * q[i];
						double		u = dsq[i] * (double) ri;

						y[i] += a * pi;
						r[i] = ri;
						p[i] = ri + b * pi;
						rrs += (double) ri * (double) ri;
						rus += u * u;
					}
				}
				else
				{
					for (int64_t i = bounds[t]; i < bounds[t + 1]; i++)
					{
						T			pi = p[i],
									ri = r[i] - a * q[i];

						y[i] += a * pi;
						r[i] = ri;
						p[i] = ri + b * pi;
						rrs += (double) ri * (double) ri;
					}
				}
				/* slots 2, 3: slot 0 keeps p.Âp for the breakdown test below */
				part[4 * t + 2] = rrs;
				part[4 * t + 3] = rus;
			}
		}
	}
	{
		double		pq = 0.0;

		for (int t = 0; t < nt; t++)
			pq += part[4 * t];
		if (!(pq > 0.0) || !isfinite(pq))
		{
			/* phase 2 was skipped: the partials still hold p.Âp */
			*pq_out = pq;
			return 1;
		}
	}
	{
		double		rrs = 0.0,
					rus = 0.0;

		for (int t = 0; t < nt; t++)
		{
			rrs += part[4 * t + 2];
			rus += part[4 * t + 3];
		}
		*rr = rrs;
		if (check)
			*rru = rus;
	}
	return 0;
}

#undef FN
#undef CAT
#undef CAT_
