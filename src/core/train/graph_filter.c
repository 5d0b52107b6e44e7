/*
 * graph_filter.c: the graph-filter recommender (gm_algo.h, GM_ALG_GRAPH_FILTER)
 * on the CPU (OpenMP and OpenBLAS's BLAS and LAPACK), the table
 * gm_cpu_graph_filter_ops.
 *
 * The model.  R is the binary users x items matrix (every stored entry
 * counts as 1: the graph has an edge where a user has an item), d_u and d_i
 * the degrees, Rn = D_U^-1/2 R D_I^-1/2 and P = Rn^T Rn the normalized
 * item-item graph, whose eigenvalues lie in [0, 1].  With V the top
 * `factors` eigenvectors of P and lambda their eigenvalues,
 *
 *     score(u, i) = r_u D_I^-beta V diag(h(lambda)) V^T D_I^beta e_i,
 *
 * ChebyCF's polynomial low-pass h plus an ideal low-pass on the first
 * GM_GF_IDEAL columns (gm_gf_filter), truncated to rank `factors`.  As
 * factors: q_i = d_i^beta V_i (item i's row of V) and
 * p_u = sum_{i in u} d_i^-2beta (q_i o h), so that serving scores p_u . q_i
 * as for any other model, and a new user's p is the same sum over its items.
 *
 * Training is randomized subspace iteration (Halko, Martinsson, Tropp 2011)
 * on l = gm_gf_columns(factors) columns: Z starts as a seeded Gaussian
 * items x l matrix, orthonormalized; each iteration is two sweeps,
 *     sweep 0 (users):  Y = Rn Z           (users x l)
 *     sweep 1 (items):  Z = Rn^T Y = P Z   (items x l)
 * and then Z = orth(Z) by a shifted CholeskyQR (G = Z^T Z + s I = L L^T,
 * Z L^-T).  evaluate() reports loss = 1 - ||Rn Z||_F^2 / ||Rn||_F^2, the
 * share of the graph's energy outside span(Z) (it falls as the subspace
 * converges).  download() orthonormalizes once more (CholeskyQR2), then
 * Rayleigh-Ritz: M = (Rn Z)^T (Rn Z) = E diag(w) E^T, V = Z E (top factors
 * columns), lambda = w, and forms the factors above; the filter h goes to
 * gm_mf_data.filter.  cuda/train/graph_filter.cu does the same on the GPU.
 */
#include "gm_core.h"
#include "gm_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef GM_NO_CBLAS
#include <cblas.h>

/* LAPACK, from OpenBLAS (column-major; our matrices are symmetric) */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
extern void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a,
					const int *lda, double *w, double *work, const int *lwork,
					int *iwork, const int *liwork, int *info);
#endif

typedef struct gf_cpu
{
	const gm_csr *R;			/* users x items */
	const gm_csr *Rt;			/* items x users */
	int32_t		nu,
				ni;
	int			d;				/* factors */
	int			l;				/* columns of the subspace */
	int			threads;
	double		alpha;
	float	   *rv;				/* Rn's values in R's order */
	float	   *rtv;			/* Rn's values in Rt's order */
	float	   *Z;				/* ni x l, orthonormal columns between iterations */
	float	   *Zn;				/* ni x l: P Z */
	float	   *Y;				/* nu x l: Rn Z */
	int			y_fresh;		/* Y = Rn Z for the current Z */
	double		frob2;			/* ||Rn||_F^2 */
	float	   *Gf;				/* l x l */
	double	   *Gd;				/* l x l */
} gf_cpu;

/* Free the state (safe on NULL and half-built states). */
static void
gf_destroy(void *h)
{
	gf_cpu	   *c = h;

	if (c == NULL)
		return;
	free(c->rv);
	free(c->rtv);
	free(c->Z);
	free(c->Zn);
	free(c->Y);
	free(c->Gf);
	free(c->Gd);
	free(c);
}

/* out[r, :] = sum_e vals[e] B[idx[e], :] for rows [b, e) of A; B and out have l columns */
static void
spmm_rows(const gm_csr *A, const float *vals, const float *B, int l, float *out,
		  int32_t b, int32_t e, int nt)
{
#pragma omp parallel for schedule(dynamic, 16) num_threads(nt)
	for (int32_t r = b; r < e; r++)
	{
		float	   *o = out + (size_t) r * l;

		memset(o, 0, sizeof(float) * l);
		for (int64_t x = A->indptr[r]; x < A->indptr[r + 1]; x++)
		{
			const float *src = B + (size_t) A->indices[x] * l;
			float		v = vals[x];

#pragma omp simd
			for (int c = 0; c < l; c++)
				o[c] += v * src[c];
		}
	}
}

#ifndef GM_NO_CBLAS
/* Gd = F^T F (n x l, row-major) in double, both triangles */
static void
gram(gf_cpu *c, const float *F, int64_t n)
{
	int			l = c->l;

	openblas_set_num_threads(c->threads);
	cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, l, (int) n, 1.0f, F, l, 0.0f, c->Gf, l);
	for (int i = 0; i < l; i++)
		for (int j = i; j < l; j++)
			c->Gd[(size_t) i * l + j] = c->Gd[(size_t) j * l + i] = c->Gf[(size_t) i * l + j];
}

/*
 * Z = Z L^-T where Z^T Z + s I = L L^T (s: GM_GF_SHIFT of the largest
 * diagonal element, 100 and 10000 times that if the factorization fails,
 * which keeps a rank-deficient Z factorizable; the span is Z's all the same).
 */
static int
orthonormalize(gf_cpu *c, float *Z, char *err, size_t errlen)
{
	int			l = c->l,
				info = 0;
	double		tr = 0.0,
				mx = 0.0,
				s;

	gram(c, Z, c->ni);
	for (int i = 0; i < l; i++)
	{
		tr += c->Gd[(size_t) i * l + i];
		if (c->Gd[(size_t) i * l + i] > mx)
			mx = c->Gd[(size_t) i * l + i];
	}
	if (!isfinite(tr))
	{
		snprintf(err, errlen, "graph_filter: the subspace has non-finite values");
		return GM_EINVAL;
	}
	/* a failed factorization is tried again with a 100 times larger shift, twice */
	for (int attempt = 0; attempt < 3; attempt++)
	{
		s = (mx > 0 ? GM_GF_SHIFT * mx : 1.0) * (attempt == 0 ? 1.0 : attempt == 1 ? 100.0 : 10000.0);
		if (attempt > 0)
			for (int i = 0; i < l; i++)
				for (int j = i; j < l; j++)
					c->Gd[(size_t) i * l + j] = c->Gd[(size_t) j * l + i] = c->Gf[(size_t) i * l + j];
		for (int i = 0; i < l; i++)
			c->Gd[(size_t) i * l + i] += s;
		/* lower L in column-major = upper L^T in row-major */
		dpotrf_("L", &l, c->Gd, &l, &info);
		if (info == 0)
			break;
	}
	if (info != 0)
	{
		snprintf(err, errlen, "graph_filter: the Cholesky factorization of the subspace's Gram matrix failed (%d)",
				 info);
		return GM_EINVAL;
	}
	for (int i = 0; i < l; i++)
		for (int j = 0; j < l; j++)
			c->Gf[(size_t) i * l + j] = j >= i ? (float) c->Gd[(size_t) i * l + j] : 0.0f;
	cblas_strsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit,
				c->ni, l, 1.0f, c->Gf, l, Z, l);
	return GM_OK;
}
#endif

/* Take the problem: degrees, Rn's values, the starting subspace. */
static int
gf_create(void **h, const gm_mf_data *d, const gm_mf_params *p,
		  const gm_callbacks *cb, char *device, size_t devlen,
		  char *err, size_t errlen)
{
	gf_cpu	   *c;
	const gm_csr *R = d->R,
			   *Rt = d->Rt;
	int64_t		l = gm_gf_columns(p->factors, R->n_cols);

	(void) cb;
	*h = NULL;
#ifdef GM_NO_CBLAS
	(void) l;
	(void) device;
	(void) devlen;
	snprintf(err, errlen, "graph_filter needs LAPACK: this gpumf was built without OpenBLAS (install libopenblas-dev and rebuild)");
	return GM_EINVAL;
#else
	if (p->factors > R->n_cols)
	{
		snprintf(err, errlen, "graph_filter: factors (%d) must be at most the number of items (%d)",
				 p->factors, R->n_cols);
		return GM_EINVAL;
	}
	c = calloc(1, sizeof(gf_cpu));
	if (c == NULL)
		goto oom;
	c->R = R;
	c->Rt = Rt;
	c->nu = R->n_rows;
	c->ni = R->n_cols;
	c->d = p->factors;
	c->l = (int) l;
	c->threads = gm_resolve_threads(p->threads);
	c->alpha = p->alpha;
	c->rv = malloc(sizeof(float) * (size_t) (R->nnz > 0 ? R->nnz : 1));
	c->rtv = malloc(sizeof(float) * (size_t) (R->nnz > 0 ? R->nnz : 1));
	c->Z = malloc(sizeof(float) * (size_t) c->ni * l);
	c->Zn = malloc(sizeof(float) * (size_t) c->ni * l);
	c->Y = malloc(sizeof(float) * (size_t) c->nu * l);
	c->Gf = malloc(sizeof(float) * (size_t) l * l);
	c->Gd = malloc(sizeof(double) * (size_t) l * l);
	if (!c->rv || !c->rtv || !c->Z || !c->Zn || !c->Y || !c->Gf || !c->Gd)
		goto oom;

	/* Rn = 1 / sqrt(d_u d_i) on R's entries, in both orders */
	c->frob2 = gm_csr_normalized(R, Rt, c->rv, c->threads);
	(void) gm_csr_normalized(Rt, R, c->rtv, c->threads);

	/* the seeded Gaussian start, orthonormalized */
#pragma omp parallel for schedule(static) num_threads(c->threads)
	for (int32_t i = 0; i < c->ni; i++)
		for (int j = 0; j < c->l; j++)
			c->Z[(size_t) i * c->l + j] = gm_gf_gauss(p->seed, i, j);
	if (orthonormalize(c, c->Z, err, errlen) != GM_OK)
	{
		gf_destroy(c);
		return GM_EINVAL;
	}
	snprintf(device, devlen, "cpu (%d threads)", c->threads);
	*h = c;
	return GM_OK;

oom:
	gf_destroy(c);
	snprintf(err, errlen, "graph_filter: out of memory at %d factors (%lld columns)", p->factors,
			 (long long) l);
	return GM_ENOMEM;
#endif
}

/* Two sweeps: Y = Rn Z over the users, then Z = Rn^T Y over the items. */
static int
gf_n_sweeps(void *h)
{
	(void) h;
	return 2;
}

static int
gf_begin_sweep(void *h, int s, gm_sweep *sw, char *err, size_t errlen)
{
	gf_cpu	   *c = h;

	if (s < 0 || s > 1)
	{
		snprintf(err, errlen, "graph_filter: no sweep %d", s);
		return GM_EINVAL;
	}
	sw->n_rows = s == 0 ? c->nu : c->ni;
	sw->indptr = s == 0 ? c->R->indptr : c->Rt->indptr;
	sw->row_work = c->l;
	sw->nnz_work = c->l;
	return GM_OK;
}

static int
gf_run(void *h, int s, int32_t begin, int32_t end, char *err, size_t errlen)
{
	gf_cpu	   *c = h;

	if (s < 0 || s > 1 || begin < 0 || end > (s == 0 ? c->nu : c->ni) || begin > end)
	{
		snprintf(err, errlen, "graph_filter: rows [%d, %d) outside sweep %d", begin, end, s);
		return GM_EINVAL;
	}
	if (s == 0)
	{
		if (!c->y_fresh)
			spmm_rows(c->R, c->rv, c->Z, c->l, c->Y, begin, end, c->threads);
	}
	else
		spmm_rows(c->Rt, c->rtv, c->Y, c->l, c->Zn, begin, end, c->threads);
	return GM_OK;
}

/* After the items' sweep: Z = orth(P Z). */
static int
gf_end_sweep(void *h, int s, char *err, size_t errlen)
{
	gf_cpu	   *c = h;

	if (s == 0)
	{
		c->y_fresh = 1;
		return GM_OK;
	}
#ifndef GM_NO_CBLAS
	{
		float	   *t = c->Z;

		c->Z = c->Zn;
		c->Zn = t;
		c->y_fresh = 0;
		return orthonormalize(c, c->Z, err, errlen);
	}
#else
	(void) err;
	(void) errlen;
	return GM_EINVAL;
#endif
}

/* Y = Rn Z for the current Z (once per Z). */
static void
fresh_y(gf_cpu *c)
{
	if (!c->y_fresh)
		spmm_rows(c->R, c->rv, c->Z, c->l, c->Y, 0, c->nu, c->threads);
	c->y_fresh = 1;
}

/* loss = 1 - ||Rn Z||^2 / ||Rn||^2: the energy span(Z) misses */
static int
gf_evaluate(void *h, gm_mf_metrics *m, char *err, size_t errlen)
{
	gf_cpu	   *c = h;
	double		y2 = 0.0;
	size_t		n = (size_t) c->nu * c->l;

	(void) err;
	(void) errlen;
	fresh_y(c);
#pragma omp parallel for reduction(+:y2) schedule(static) num_threads(c->threads)
	for (size_t x = 0; x < n; x++)
		y2 += (double) c->Y[x] * c->Y[x];
	m->loss = gm_gf_loss(y2, c->frob2);
	m->rmse = NAN;
	return GM_OK;
}

/* Rayleigh-Ritz on span(Z), then the factors (see the top of the file). */
static int
gf_download(void *h, gm_mf_data *d, char *err, size_t errlen)
{
#ifdef GM_NO_CBLAS
	(void) h;
	(void) d;
	snprintf(err, errlen, "graph_filter needs LAPACK");
	return GM_EINVAL;
#else
	gf_cpu	   *c = h;
	int			l = c->l,
				k = c->d,
				info = 0,
				lwork = -1,
				liwork = -1,
				iw;
	double		wq;
	double	   *w = NULL,
			   *work = NULL;
	int		   *iwork = NULL;
	float	   *E = NULL,
			   *hf = NULL,
			   *V;
	int			rc = GM_ENOMEM;

	/* CholeskyQR2: one more pass; then Y = Rn Z and M = Y^T Y */
	if (orthonormalize(c, c->Z, err, errlen) != GM_OK)
		return GM_EINVAL;
	c->y_fresh = 0;
	fresh_y(c);
	gram(c, c->Y, c->nu);
	w = malloc(sizeof(double) * l);
	E = malloc(sizeof(float) * (size_t) l * k);
	hf = malloc(sizeof(float) * k);
	if (!w || !E || !hf)
		goto out;
	dsyevd_("V", "L", &l, c->Gd, &l, w, &wq, &lwork, &iw, &liwork, &info);
	if (info != 0)
		goto eig;
	lwork = (int) wq;
	liwork = iw;
	work = malloc(sizeof(double) * (size_t) lwork);
	iwork = malloc(sizeof(int) * (size_t) liwork);
	if (!work || !iwork)
		goto out;
	dsyevd_("V", "L", &l, c->Gd, &l, w, work, &lwork, iwork, &liwork, &info);
	if (info != 0)
		goto eig;

	/*
	 * eigenvalues ascending; eigenvector j is column j (column-major), so
	 * row j of Gd read row-major.  E (l x k): column c = eigenvector l-1-c.
	 */
	for (int col = 0; col < k; col++)
	{
		int			j = l - 1 - col;

		hf[col] = gm_gf_column_filter(w[j], col, c->alpha);
		for (int m = 0; m < l; m++)
			E[(size_t) m * k + col] = (float) c->Gd[(size_t) j * l + m];
	}

	/* V = Z E into Zn (ni x k, ld k), then the factors */
	V = c->Zn;
	openblas_set_num_threads(c->threads);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->ni, k, l, 1.0f, c->Z, l,
				E, k, 0.0f, V, k);
#pragma omp parallel for schedule(dynamic, 64) num_threads(c->threads)
	for (int32_t i = 0; i < c->ni; i++)
	{
		int64_t		di = c->Rt->indptr[i + 1] - c->Rt->indptr[i];
		float		s = di > 0 ? (float) pow((double) di, GM_GF_BETA) : 0.0f;
		float	   *q = d->Y + (size_t) i * k;
		const float *v = V + (size_t) i * k;

		for (int f = 0; f < k; f++)
			q[f] = s * v[f];
	}
	/* the users' factors, unless the caller forms them itself (d->X NULL) */
	if (d->X != NULL)
#pragma omp parallel for schedule(dynamic, 64) num_threads(c->threads)
	for (int32_t u = 0; u < c->nu; u++)
	{
		float	   *x = d->X + (size_t) u * k;

		memset(x, 0, sizeof(float) * k);
		for (int64_t e = c->R->indptr[u]; e < c->R->indptr[u + 1]; e++)
		{
			int32_t		i = c->R->indices[e];
			int64_t		di = c->Rt->indptr[i + 1] - c->Rt->indptr[i];
			float		s = (float) pow((double) di, -GM_GF_BETA);
			const float *v = V + (size_t) i * k;

#pragma omp simd
			for (int f = 0; f < k; f++)
				x[f] += s * v[f];
		}
		for (int f = 0; f < k; f++)
			x[f] *= hf[f];
	}
	if (d->filter)
		memcpy(d->filter, hf, sizeof(float) * k);
	rc = GM_OK;
	goto out;

eig:
	snprintf(err, errlen, "graph_filter: the eigendecomposition of the %d x %d Rayleigh-Ritz matrix failed (%d)",
			 l, l, info);
	rc = GM_EINVAL;
out:
	if (rc == GM_ENOMEM)
		snprintf(err, errlen, "graph_filter: out of memory in the Rayleigh-Ritz step");
	free(w);
	free(work);
	free(iwork);
	free(E);
	free(hf);
	return rc;
#endif
}

const gm_algo_ops gm_cpu_graph_filter_ops = {
	"cpu",
	gf_create,
	gf_n_sweeps,
	gf_begin_sweep,
	gf_run,
	gf_end_sweep,
	NULL,						/* sync: nothing queued on the CPU */
	gf_evaluate,
	gf_download,
	gf_destroy,
	NULL						/* reset: none */
};
