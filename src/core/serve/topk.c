/*
 * topk.c: exact top-n selection with a min-heap; ties go to the lower index.
 */
#include "gm_core.h"

/* a ranks above b */
static inline int
better(float sa, int32_t ia, float sb, int32_t ib)
{
	return sa > sb || (sa == sb && ia < ib);
}

static void
sift_down(float *hs, int32_t *hi, int n, int i)
{
	for (;;)
	{
		int			l = 2 * i + 1,
					r = l + 1,
					m = i;

		/* heap root is the worst of the kept set */
		if (l < n && better(hs[m], hi[m], hs[l], hi[l]))
			m = l;
		if (r < n && better(hs[m], hi[m], hs[r], hi[r]))
			m = r;
		if (m == i)
			return;
		{
			float		ts = hs[i];
			int32_t		ti = hi[i];

			hs[i] = hs[m];
			hi[i] = hi[m];
			hs[m] = ts;
			hi[m] = ti;
		}
		i = m;
	}
}

int
gm_topk(const float *scores, int32_t m, int n, const int32_t *skip,
		int32_t nskip, int32_t *out_idx, float *out_score)
{
	int			size = 0;
	int32_t		s = 0;

	if (n <= 0)
		return 0;
	for (int32_t i = 0; i < m; i++)
	{
		float		sc = scores[i];

		if (skip)
		{
			while (s < nskip && skip[s] < i)
				s++;
			if (s < nskip && skip[s] == i)
				continue;
		}
		if (sc != sc)			/* NaN never ranks */
			continue;
		if (size < n)
		{
			/* insert, sift up */
			int			j = size++;

			out_score[j] = sc;
			out_idx[j] = i;
			while (j > 0)
			{
				int			parent = (j - 1) / 2;

				if (!better(out_score[parent], out_idx[parent], out_score[j], out_idx[j]))
					break;
				{
					float		ts = out_score[j];
					int32_t		ti = out_idx[j];

					out_score[j] = out_score[parent];
					out_idx[j] = out_idx[parent];
					out_score[parent] = ts;
					out_idx[parent] = ti;
				}
				j = parent;
			}
		}
		else if (better(sc, i, out_score[0], out_idx[0]))
		{
			out_score[0] = sc;
			out_idx[0] = i;
			sift_down(out_score, out_idx, size, 0);
		}
	}
	/* heap-sort in place: repeatedly move the worst to the end */
	for (int end = size - 1; end > 0; end--)
	{
		float		ts = out_score[0];
		int32_t		ti = out_idx[0];

		out_score[0] = out_score[end];
		out_idx[0] = out_idx[end];
		out_score[end] = ts;
		out_idx[end] = ti;
		sift_down(out_score, out_idx, end, 0);
	}
	return size;
}
