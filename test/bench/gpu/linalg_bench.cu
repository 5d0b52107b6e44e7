/*
 * linalg_bench.cu: correctness and speed of gpumf's GPU linear algebra
 * (cuda/linalg/spmv.cu, pcg.cu, ols.cu) against the CPU core (src/core: float64
 * SpMV, the same PCG, the same QR) and against cuSPARSE; one run prints the
 * checks, then the tables the issue asks for, and ends with
 * "N passed, M failed" (the checks only; timings are not pass/fail).
 *
 * No PostgreSQL.  Usage:
 *   linalg_bench [--quick] [--dir D] [--cupy SCRIPT] [--ols-rows N] [--ols-cols K]
 *     --quick   correctness only
 *     --dir     where the benchmark matrices are written for the CuPy baseline
 *     --cupy    the CuPy script to run on them (skipped if absent)
 */
#include "gm_linalg.h"
#include "../../../cuda/linalg/linalg_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <omp.h>
#include <unistd.h>

#include "bench_check.h"

static uint64_t seed;
static const gm_linalg_ops *ops;


static double
now()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* counter-based random numbers: the same stream on any thread count */
static inline uint64_t
mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

static inline double
unif(uint64_t stream, uint64_t i)
{
	return (mix(seed ^ mix(stream * 0x100000001B3ULL + i)) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double
normal(uint64_t stream, uint64_t i)
{
	double		u = unif(stream, 2 * i) + 1e-300,
				v = unif(stream, 2 * i + 1);

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ------------------------------------------------------------ matrices */

/* CSR from triplets through the core (the path the SQL layer takes) */
static void
from_triplets(int64_t n, std::vector<int64_t> &r, std::vector<int64_t> &c,
			  std::vector<double> &v, gm_triangle mirror, gm_spmat *A)
{
	gm_coo		co = {(int64_t) r.size(), r.data(), c.data(), v.data(), 0};

	GM(gm_spmat_from_coo(&co, n, mirror, 0, A, err, sizeof(err)));
}

/* a general sparse matrix with given row lengths, random columns and values */
static void
general_matrix(int64_t n, const std::vector<int64_t> &len, uint64_t stream, gm_spmat *A)
{
	std::vector<int64_t> r,
				c;
	std::vector<double> v;

	for (int64_t i = 0; i < n; i++)
		for (int64_t t = 0; t < len[i]; t++)
		{
			uint64_t	k = (uint64_t) r.size();

			r.push_back(i);
			c.push_back((int64_t) (unif(stream, 3 * k) * n));
			v.push_back(unif(stream, 3 * k + 1) - 0.5);
		}
	from_triplets(n, r, c, v, GM_TRI_BOTH, A);
}

/*
 * A banded matrix for the diagonal layout: the given offsets, each entry
 * present with probability fill (a row may be empty), random values.
 */
static void
banded_matrix(int64_t n, const std::vector<int64_t> &offs, double fill, uint64_t stream,
			  gm_spmat *A)
{
	std::vector<int64_t> r,
				c;
	std::vector<double> v;

	for (int64_t i = 0; i < n; i++)
		for (size_t d = 0; d < offs.size(); d++)
		{
			int64_t		j = i + offs[d];
			uint64_t	k = (uint64_t) i * offs.size() + d;

			if (j < 0 || j >= n || unif(stream, 2 * k) >= fill)
				continue;
			r.push_back(i);
			c.push_back(j);
			v.push_back(unif(stream, 2 * k + 1) - 0.5);
		}
	from_triplets(n, r, c, v, GM_TRI_BOTH, A);
}

/*
 * A banded SPD matrix: a weighted graph Laplacian on an nx x ny grid (edges
 * to the right, below and, with probability 1/2, below-right; weights
 * 0.1 + U(0, 1)), plus diag_extra, under a random diagonal scaling 10^U(-1, 1)
 * (so Jacobi matters); seven diagonals.  Given as the lower triangle.
 */
static void
banded_spd(int64_t nx, int64_t ny, double diag_extra, uint64_t stream, gm_spmat *A)
{
	int64_t		n = nx * ny;
	std::vector<int64_t> r,
				c;
	std::vector<double> v,
				sc((size_t) n),
				dg((size_t) n, 0.0);

	for (int64_t i = 0; i < n; i++)
		sc[i] = pow(10.0, 2.0 * unif(stream, i) - 1.0);
	for (int64_t i = 0; i < n; i++)
	{
		int64_t		x = i % nx,
					y = i / nx;
		int64_t		nb[3] = {x < nx - 1 ? i + 1 : -1, y < ny - 1 ? i + nx : -1,
		(x < nx - 1 && y < ny - 1 && unif(stream + 1, i) < 0.5) ? i + nx + 1 : -1};

		for (int t = 0; t < 3; t++)
		{
			double		w = 0.1 + unif(stream + 2, 3 * (uint64_t) i + t);

			if (nb[t] < 0)
				continue;
			dg[i] += w;
			dg[nb[t]] += w;
			r.push_back(nb[t]);
			c.push_back(i);
			v.push_back(-w * sc[i] * sc[nb[t]]);
		}
	}
	for (int64_t i = 0; i < n; i++)
	{
		r.push_back(i);
		c.push_back(i);
		v.push_back((dg[i] + diag_extra) * sc[i] * sc[i]);
	}
	from_triplets(n, r, c, v, GM_TRI_LOWER, A);
}

/*
 * Power-law symmetric diagonally dominant (Chung-Lu): edge endpoints drawn
 * with probability ~ (rank + r0)^-a over a random relabelling, values
 * -U(0.1, 1.1), diagonal = sum |off-diagonal| + 1.  nnz ~ 2 edges + n.
 */
static void
powerlaw_spd(int64_t n, int64_t edges, double a, uint64_t stream, gm_spmat *A)
{
	std::vector<int64_t> r((size_t) 2 * edges + n),
				c((size_t) 2 * edges + n);
	std::vector<double> v((size_t) 2 * edges + n);
	std::vector<double> diag((size_t) n, 1.0);
	const double r0 = 20.0,
				lo = pow(r0, 1.0 - a),
				hi = pow(n + r0, 1.0 - a);
	/* a relabelling: i -> (i * P + Q) mod n with P coprime to n */
	int64_t		P = 1000003;

	while (std::__gcd(P, n) != 1)
		P += 2;
	auto		draw = [&](uint64_t k) {
		double		u = unif(stream, k);
		double		x = pow(lo + u * (hi - lo), 1.0 / (1.0 - a)) - r0;
		int64_t		rank = std::min<int64_t>(n - 1, std::max<int64_t>(0, (int64_t) x));

		return (int64_t) (((__int128) rank * P + 12345) % n);
	};

#pragma omp parallel for schedule(static)
	for (int64_t e = 0; e < edges; e++)
	{
		int64_t		i = draw(3 * e),
					j = draw(3 * e + 1);
		double		w = -(0.1 + unif(stream + 1, e));

		if (i == j)
			j = (j + 1) % n;
		r[2 * e] = i;
		c[2 * e] = j;
		v[2 * e] = w;
		r[2 * e + 1] = j;
		c[2 * e + 1] = i;
		v[2 * e + 1] = w;
	}
	for (int64_t e = 0; e < 2 * edges; e++)
		diag[r[e]] += -v[e];
	for (int64_t i = 0; i < n; i++)
	{
		r[2 * edges + i] = i;
		c[2 * edges + i] = i;
		v[2 * edges + i] = diag[i];
	}
	from_triplets(n, r, c, v, GM_TRI_BOTH, A);
}

/*
 * B = P A P^T with the rows renumbered by nonzero count, longest first
 * (ties in the old order): the most gathered entries of x sit together.
 * For measuring what the ordering is worth to the SpMVs (--spmv-only).
 */
static void
degree_ordered(const gm_spmat *A, gm_spmat *B)
{
	const int64_t n = A->n;
	std::vector<int32_t> order((size_t) n),
				pos((size_t) n);

	for (int64_t i = 0; i < n; i++)
		order[i] = (int32_t) i;
	std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
		return A->indptr[a + 1] - A->indptr[a] > A->indptr[b + 1] - A->indptr[b];
	});
	for (int64_t r = 0; r < n; r++)
		pos[order[r]] = (int32_t) r;
	B->n = A->n;
	B->nnz = A->nnz;
	B->indptr = (int64_t *) malloc(sizeof(int64_t) * (n + 1));
	B->indices = (int32_t *) malloc(sizeof(int32_t) * A->nnz);
	B->values = (double *) malloc(sizeof(double) * A->nnz);
	B->values32 = NULL;
	B->indptr[0] = 0;
	for (int64_t r = 0; r < n; r++)
		B->indptr[r + 1] = B->indptr[r] + A->indptr[order[r] + 1] - A->indptr[order[r]];
#pragma omp parallel for schedule(dynamic, 1024)
	for (int64_t r = 0; r < n; r++)
	{
		const int64_t i = order[r],
					o = B->indptr[r];
		std::vector<std::pair<int32_t, double>> row;

		for (int64_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
			row.push_back({pos[A->indices[k]], A->values[k]});
		std::sort(row.begin(), row.end());
		for (size_t k = 0; k < row.size(); k++)
		{
			B->indices[o + k] = row[k].first;
			B->values[o + k] = row[k].second;
		}
	}
}

/* 2-D Poisson, 5-point stencil on a side x side grid (Dirichlet): 4 on the diagonal */
static void
poisson2d(int64_t side, gm_spmat *A)
{
	int64_t		n = side * side;

	A->n = (int32_t) n;
	A->indptr = (int64_t *) malloc(sizeof(int64_t) * (n + 1));
	A->indptr[0] = 0;
	for (int64_t i = 0; i < n; i++)
	{
		int64_t		x = i % side,
					y = i / side;

		A->indptr[i + 1] = A->indptr[i] + 1 + (x > 0) + (x < side - 1) + (y > 0) + (y < side - 1);
	}
	A->nnz = A->indptr[n];
	A->indices = (int32_t *) malloc(sizeof(int32_t) * A->nnz);
	A->values = (double *) malloc(sizeof(double) * A->nnz);
	A->values32 = NULL;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++)
	{
		int64_t		x = i % side,
					y = i / side,
					e = A->indptr[i];

		if (y > 0)
		{
			A->indices[e] = (int32_t) (i - side);
			A->values[e++] = -1;
		}
		if (x > 0)
		{
			A->indices[e] = (int32_t) (i - 1);
			A->values[e++] = -1;
		}
		A->indices[e] = (int32_t) i;
		A->values[e++] = 4;
		if (x < side - 1)
		{
			A->indices[e] = (int32_t) (i + 1);
			A->values[e++] = -1;
		}
		if (y < side - 1)
		{
			A->indices[e] = (int32_t) (i + side);
			A->values[e++] = -1;
		}
	}
}

/*
 * The seed's case (~30,000 rows, ~1M nonzeros, a few hundred Jacobi-PCG
 * iterations): diffusion on a 31^3 grid with the 27-point stencil and
 * coefficients 10^U(-2, 2) per edge (a weighted graph Laplacian), a weak
 * Dirichlet boundary (5e-4 per missing neighbour) and 4 weak random
 * couplings (1e-5) per row; 29,791 rows, 991,681 nonzeros.  Tuned on the CPU
 * solver to need about as many iterations as the seed's (378 with Jacobi).
 */
static void
seed_case(gm_spmat *A)
{
	const int64_t s = 31,
				n = s * s * s;
	std::vector<int64_t> r,
				c;
	std::vector<double> v;
	std::vector<double> diag((size_t) n, 0.0);

	for (int64_t i = 0; i < n; i++)
	{
		int64_t		x = i % s,
					y = (i / s) % s,
					z = i / (s * s);

		for (int dz = -1; dz <= 1; dz++)
			for (int dy = -1; dy <= 1; dy++)
				for (int dx = -1; dx <= 1; dx++)
				{
					int64_t		xx = x + dx,
								yy = y + dy,
								zz = z + dz,
								j;
					double		w;

					if (!dx && !dy && !dz)
						continue;
					if (xx < 0 || yy < 0 || zz < 0 || xx >= s || yy >= s || zz >= s)
					{
						diag[i] += 5e-4;
						continue;
					}
					j = xx + s * (yy + s * zz);
					if (j < i)
						continue;
					w = pow(10.0, 2.0 * (2.0 * unif(5, (uint64_t) i * 27 + (dz + 1) * 9 + (dy + 1) * 3 + dx + 1) - 1.0));
					r.push_back(j);
					c.push_back(i);
					v.push_back(-w);
					diag[i] += w;
					diag[j] += w;
				}
		for (int t = 0; t < 4; t++)
		{
			int64_t		j = (int64_t) (unif(77, 4 * i + t) * n);

			if (j == i)
				continue;
			r.push_back(std::max(i, j));
			c.push_back(std::min(i, j));
			v.push_back(-1e-5);
			diag[i] += 1e-5;
			diag[j] += 1e-5;
		}
	}
	for (int64_t i = 0; i < n; i++)
	{
		r.push_back(i);
		c.push_back(i);
		v.push_back(diag[i]);
	}
	from_triplets(n, r, c, v, GM_TRI_LOWER, A);
}

/* a random SPD system like the unit tests' (graph Laplacian + diagonal, rescaled) */
static void
random_spd(int64_t n, int deg, double diag_extra, uint64_t stream, gm_spmat *A)
{
	std::vector<int64_t> r,
				c;
	std::vector<double> v;
	std::vector<double> sc((size_t) n),
				dg((size_t) n, 0.0);

	for (int64_t i = 0; i < n; i++)
		sc[i] = pow(10.0, 2.0 * unif(stream, i) - 1.0);
	for (int64_t i = 0; i < n; i++)
		for (int t = 0; t < deg; t++)
		{
			int64_t		j = (int64_t) (unif(stream + 1, (uint64_t) i * deg + t) * n);
			double		w = 0.1 + unif(stream + 2, (uint64_t) i * deg + t);

			if (j == i)
				continue;
			dg[i] += w;
			dg[j] += w;
			/* the lower triangle only: the core mirrors it */
			r.push_back(std::max(i, j));
			c.push_back(std::min(i, j));
			v.push_back(-w * sc[i] * sc[j]);
		}
	for (int64_t i = 0; i < n; i++)
	{
		r.push_back(i);
		c.push_back(i);
		v.push_back((dg[i] + diag_extra) * sc[i] * sc[i]);
	}
	from_triplets(n, r, c, v, GM_TRI_LOWER, A);
}

/* ------------------------------------------------------------ helpers */

static double
rel_err(const double *a, const double *b, int64_t n)
{
	double		d = 0.0,
				r = 0.0;

	for (int64_t i = 0; i < n; i++)
	{
		if (!std::isfinite(a[i]))
			return INFINITY;
		d += (a[i] - b[i]) * (a[i] - b[i]);
		r += b[i] * b[i];
	}
	return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* max_i |a_i - b_i| / (|A| |x|)_i: error relative to the row's own magnitude */
static double
row_err(const gm_spmat *A, const double *x, const double *a, const double *b)
{
	double		worst = 0.0;

	for (int64_t i = 0; i < A->n; i++)
	{
		double		s = 0.0;

		if (!std::isfinite(a[i]))
			return INFINITY;
		for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++)
			s += fabs(A->values[e] * x[A->indices[e]]);
		if (s > 0)
			worst = std::max(worst, fabs(a[i] - b[i]) / s);
		else if (a[i] != 0.0)
			return INFINITY;
	}
	return worst;
}

static double
median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? NAN : v[v.size() / 2];
}

/* ------------------------------------------------------------ SpMV checks */

/*
 * Own SpMV and cuSPARSE, float64 and float32, against the CPU's float64
 * SpMV, elementwise relative to (|A||x|)_i.  The device output is poisoned
 * with NaN (all bits set) first, so an unwritten row fails.
 */
static void
check_spmv_shape(const char *name, gm_spmat *A)
{
	int64_t		n = A->n;
	std::vector<double> x((size_t) n),
				yref((size_t) n),
				y((size_t) n);

	for (int64_t i = 0; i < n; i++)
		x[i] = normal(901, i);
	gm_spmv(A, x.data(), yref.data(), 0);
	for (int pi = 0; pi < 2; pi++)
	{
		gm_precision prec = pi ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
		size_t		ts = pi ? sizeof(float) : sizeof(double);
		void	   *h = NULL,
				   *dx,
				   *dy;
		char		dev[128];
		std::vector<float> xf((size_t) n),
					yf((size_t) n);

		GM(ops->sparse_create(&h, A, prec, dev, sizeof(dev), err, sizeof(err)));
		CK(cudaMalloc(&dx, ts * (n + 4)));
		CK(cudaMalloc(&dy, ts * (n + 4)));
		for (int64_t i = 0; i < n; i++)
			xf[i] = (float) x[i];
		CK(cudaMemcpy(dx, pi ? (void *) xf.data() : (void *) x.data(), ts * n,
					  cudaMemcpyHostToDevice));
		for (int impl : {GM_SPMV_OWN, GM_SPMV_OWN_CSR, GM_SPMV_CUSPARSE, GM_SPMV_CUSPARSE_ALG2})
		{
			cudaStream_t st = (cudaStream_t) ops->sparse_stream(h);
			int			rc;
			double		e;

			CK(cudaMemsetAsync(dy, 0xFF, ts * n, st));
			rc = ops->sparse_spmv_device(h, (gm_spmv_impl) impl, dx, dy, err, sizeof(err));
			CK(cudaStreamSynchronize(st));
			CK(cudaGetLastError());
			if (rc != GM_OK)
			{
				CHECK(false, "%-22s %s %-9s: %s", name, pi ? "fp32" : "fp64",
					  impl == GM_SPMV_OWN ? "own" : impl == GM_SPMV_OWN_CSR ? "own-csr" : "cusparse", err);
				continue;
			}
			if (pi)
			{
				CK(cudaMemcpy(yf.data(), dy, ts * n, cudaMemcpyDeviceToHost));
				for (int64_t i = 0; i < n; i++)
					y[i] = yf[i];
			}
			else
				CK(cudaMemcpy(y.data(), dy, ts * n, cudaMemcpyDeviceToHost));
			e = row_err(A, x.data(), y.data(), yref.data());
			CHECK(e <= (pi ? 2e-5 : 1e-12), "%-22s %s %-13s max |y - y_cpu| / (|A||x|) = %.2e",
				  name, pi ? "fp32" : "fp64",
				  impl == GM_SPMV_OWN ? "own" : impl == GM_SPMV_OWN_CSR ? "own-csr"
				  : impl == GM_SPMV_CUSPARSE ? "cusparse" : "cusparse-alg2",
				  e);
		}
		/* the host-vector entry point too */
		std::fill(y.begin(), y.end(), NAN);
		GM(ops->sparse_spmv(h, GM_SPMV_OWN, x.data(), y.data(), err, sizeof(err)));
		if (pi == 0)
			CHECK(row_err(A, x.data(), y.data(), yref.data()) <= 1e-12,
				  "%-22s fp64 own (host vectors)", name);
		CK(cudaFree(dx));
		CK(cudaFree(dy));
		ops->sparse_destroy(h);
	}
}

static void
spmv_checks()
{
	gm_spmat	A;
	std::vector<int64_t> len;

	printf("\n== SpMV: own and cuSPARSE against the CPU's float64 SpMV (many shapes)\n");
	/* uniform rows */
	len.assign(100000, 0);
	for (int64_t i = 0; i < 100000; i++)
		len[i] = (int64_t) (unif(11, i) * 20);
	general_matrix(100000, len, 12, &A);
	check_spmv_shape("uniform 0..19/row", &A);
	gm_spmat_free(&A);
	/* empty rows */
	len.assign(100003, 0);
	for (int64_t i = 0; i < 100003; i++)
		len[i] = unif(13, i) < 0.6 ? 0 : (int64_t) (unif(14, i) * 40);
	general_matrix(100003, len, 15, &A);
	check_spmv_shape("60% empty rows", &A);
	gm_spmat_free(&A);
	/* one huge row (many chunks) among short ones */
	len.assign(200001, 3);
	len[17] = 1500000;
	general_matrix(200001, len, 16, &A);
	check_spmv_shape("one row of 1.5M", &A);
	gm_spmat_free(&A);
	/* every row of length 1 */
	len.assign(300002, 1);
	general_matrix(300002, len, 17, &A);
	check_spmv_shape("all rows length 1", &A);
	gm_spmat_free(&A);
	/* lengths at the block boundaries */
	len.assign(5001, 0);
	for (int64_t i = 0; i < 5001; i++)
	{
		static const int64_t L[] = {2047, 2048, 2049, 4096, 4097, 1, 0, 1024, 6000, 3};

		len[i] = L[i % 10];
	}
	general_matrix(5001, len, 18, &A);
	check_spmv_shape("rows of 2047..6000", &A);
	gm_spmat_free(&A);
	/* tiny */
	len.assign(1, 1);
	general_matrix(1, len, 19, &A);
	check_spmv_shape("1 x 1", &A);
	gm_spmat_free(&A);
	len.assign(3, 2);
	len[1] = 0;
	general_matrix(3, len, 20, &A);
	check_spmv_shape("3 x 3, an empty row", &A);
	gm_spmat_free(&A);
	/* power-law */
	powerlaw_spd(200000, 3000000, 0.6, 21, &A);
	check_spmv_shape("power-law 200k", &A);
	gm_spmat_free(&A);
	/* the diagonal layout: a stencil, scattered offsets near both ends, one diagonal */
	poisson2d(300, &A);
	check_spmv_shape("Poisson 300^2 (dia)", &A);
	gm_spmat_free(&A);
	{
		std::vector<int64_t> offs = {0};
		const int64_t n = 100003;

		/* 27 near the diagonal, 2 a third of the way out, 2 at the corners */
		for (int d = 0; d < 40 && offs.size() < 28; d++)
		{
			int64_t		o = (int64_t) (unif(22, d) * 101) - 50;

			if (std::find(offs.begin(), offs.end(), o) == offs.end())
				offs.push_back(o);
		}
		for (int64_t o : {n / 3, -n / 3 - 7, n - 1, -(n - 1)})
			offs.push_back(o);
		banded_matrix(n, offs, 0.9, 23, &A);
		check_spmv_shape("32 diagonals (dia)", &A);
		gm_spmat_free(&A);
	}
	banded_matrix(200001, std::vector<int64_t>{0}, 1.0, 24, &A);
	check_spmv_shape("diagonal only (dia)", &A);
	gm_spmat_free(&A);
	banded_matrix(7, std::vector<int64_t>{-6, -1, 0, 2}, 1.0, 25, &A);
	check_spmv_shape("7 x 7 banded (dia)", &A);
	gm_spmat_free(&A);
}

/* ------------------------------------------------------------ PCG checks */

static int	stop_polls;

static int
stop_after_three(void *arg)
{
	(void) arg;
	return ++stop_polls >= 3;
}

static void
pcg_checks()
{
	gm_spmat	A;
	int64_t		n = 200000;
	std::vector<double> b((size_t) n),
				xc((size_t) n, 0.0);
	gm_cg_params p;
	gm_cg_result rc_cpu,
				r;
	double		t;

	printf("\n== PCG: GPU against the CPU core (same algorithm), random SPD, n = %lld\n",
		   (long long) n);
	random_spd(n, 8, 0.01, 31, &A);
	for (int64_t i = 0; i < n; i++)
		b[i] = normal(32, i);
	gm_cg_params_default(&p);
	p.tolerance = 1e-10;
	p.max_iterations = 20000;
	t = now();
	GM(gm_cg_solve(&A, b.data(), xc.data(), &p, NULL, &rc_cpu, err, sizeof(err)));
	printf("  cpu fp64: %d iterations, residual %.2e, %.3f s (%s)\n", rc_cpu.iterations,
		   rc_cpu.residual, now() - t, rc_cpu.device);
	CHECK(rc_cpu.converged, "CPU converged to 1e-10");
	for (int v = 0; v < 4; v++)
	{
		std::vector<double> x((size_t) n, 0.0);
		const char *what[] = {"gpu fp64 own", "gpu fp64 cusparse", "gpu fp32 own (to 1e-10 by refinement)",
		"gpu fp32 cusparse"};

		p.gpu = ops;
		p.precision = v >= 2 ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
		p.spmv = v % 2 ? GM_SPMV_CUSPARSE : GM_SPMV_OWN;
		t = now();
		GM(gm_cg_solve(&A, b.data(), x.data(), &p, NULL, &r, err, sizeof(err)));
		t = now() - t;
		CHECK(r.converged && r.residual <= 1e-10,
			  "%s: %d iterations (cpu %d), %d restarts, residual %.2e (float64, host), %.3f s",
			  what[v], r.iterations, rc_cpu.iterations, r.replacements, r.residual, t);
		CHECK(rel_err(x.data(), xc.data(), n) < 1e-6, "%s: |x - x_cpu| / |x_cpu| = %.2e",
			  what[v], rel_err(x.data(), xc.data(), n));
		if (v < 2)
			CHECK(abs(r.iterations - rc_cpu.iterations) <= rc_cpu.iterations / 20 + 16,
				  "%s: iterations %d vs cpu %d", what[v], r.iterations, rc_cpu.iterations);
	}
	/* not converging: the last iterate, converged = 0 */
	{
		std::vector<double> x((size_t) n, 0.0);

		p.precision = GM_PRECISION_DOUBLE;
		p.spmv = GM_SPMV_OWN;
		p.max_iterations = 13;
		GM(gm_cg_solve(&A, b.data(), x.data(), &p, NULL, &r, err, sizeof(err)));
		CHECK(!r.converged && r.iterations == 13 && r.residual > 1e-10 &&
			  fabs(gm_relative_residual(&A, b.data(), x.data(), 0) - r.residual) <= 1e-12,
			  "13 iterations: converged %d, %d iterations, residual %.3e", r.converged,
			  r.iterations, r.residual);
	}
	/* cancel */
	{
		std::vector<double> x((size_t) n, 0.0);
		gm_callbacks cb = {stop_after_three, NULL, NULL};
		int			rc;

		p.max_iterations = 20000;
		stop_polls = 0;
		rc = gm_cg_solve(&A, b.data(), x.data(), &p, &cb, &r, err, sizeof(err));
		CHECK(rc == GM_ECANCELED && stop_polls == 3, "cancel after 3 polls: rc %d (%s)", rc,
			  err);
	}
	gm_spmat_free(&A);

	/*
	 * the diagonal layout: banded SPD systems, Jacobi (Â's unit diagonal not
	 * stored) and no preconditioner; against the CPU and the row blocks
	 */
	for (int pc = 0; pc < 2; pc++)
	{
		const int64_t nx = pc ? 100 : 400,
					ny = pc ? 120 : 500,
					nb = nx * ny;
		std::vector<double> bb((size_t) nb),
					xcpu((size_t) nb, 0.0);
		gm_cg_params q;
		gm_cg_result rb;

		banded_spd(nx, ny, pc ? 1.0 : 0.01, 41 + pc, &A);
		for (int64_t i = 0; i < nb; i++)
			bb[i] = normal(43, i);
		gm_cg_params_default(&q);
		q.tolerance = 1e-10;
		q.max_iterations = 50000;
		q.preconditioner = pc ? GM_PRECOND_NONE : GM_PRECOND_JACOBI;
		GM(gm_cg_solve(&A, bb.data(), xcpu.data(), &q, NULL, &rb, err, sizeof(err)));
		printf("  banded %lld x %lld, %s, cpu fp64: %d iterations, residual %.2e\n",
			   (long long) nx, (long long) ny, pc ? "no preconditioner" : "Jacobi",
			   rb.iterations, rb.residual);
		CHECK(rb.converged, "banded, %s: CPU converged", pc ? "none" : "Jacobi");
		for (int v = 0; v < 3; v++)
		{
			std::vector<double> x((size_t) nb, 0.0);
			const char *what[] = {"fp64 own (diagonal layout)", "fp64 own-csr",
			"fp32 own (diagonal layout)"};
			const bool	want_dia = v != 1;

			q.gpu = ops;
			q.precision = v == 2 ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
			q.spmv = v == 1 ? GM_SPMV_OWN_CSR : GM_SPMV_OWN;
			GM(gm_cg_solve(&A, bb.data(), x.data(), &q, NULL, &r, err, sizeof(err)));
			CHECK(r.converged && r.residual <= 1e-10 &&
				  (strstr(r.device, "diagonal layout") != NULL) == want_dia,
				  "banded, %s, %s: %d iterations (cpu %d), %d restarts, residual %.2e; %s",
				  pc ? "none" : "Jacobi", what[v], r.iterations, rb.iterations,
				  r.replacements, r.residual, r.device);
			CHECK(rel_err(x.data(), xcpu.data(), nb) < 1e-6,
				  "banded, %s, %s: |x - x_cpu| / |x_cpu| = %.2e", pc ? "none" : "Jacobi",
				  what[v], rel_err(x.data(), xcpu.data(), nb));
			if (v < 2)
				CHECK(abs(r.iterations - rb.iterations) <= rb.iterations / 20 + 16,
					  "banded, %s, %s: iterations %d vs cpu %d", pc ? "none" : "Jacobi",
					  what[v], r.iterations, rb.iterations);
		}
		for (int every : {3, 5, 7})
		{
			/*
			 * checks every 3, 5 or 7 iterations: float32's restarts then
			 * start from odd and even iteration counts (the fused
			 * iteration's two sets of buffers)
			 */
			std::vector<double> x((size_t) nb, 0.0);

			q.precision = GM_PRECISION_SINGLE;
			q.spmv = GM_SPMV_OWN;
			q.check_every = every;
			GM(gm_cg_solve(&A, bb.data(), x.data(), &q, NULL, &r, err, sizeof(err)));
			CHECK(r.converged && r.residual <= 1e-10 && r.replacements > 0 &&
				  rel_err(x.data(), xcpu.data(), nb) < 1e-6,
				  "banded, %s, fp32 own, a check every %d: %d iterations, %d restarts, residual %.2e, "
				  "|x - x_cpu| / |x_cpu| = %.2e", pc ? "none" : "Jacobi", every, r.iterations,
				  r.replacements, r.residual, rel_err(x.data(), xcpu.data(), nb));
		}
		q.check_every = 0;
		gm_spmat_free(&A);
	}
	/* indefinite: [[1, 2], [2, 1]] */
	{
		std::vector<int64_t> rr = {0, 1, 0, 1},
					cc = {0, 1, 1, 0};
		std::vector<double> vv = {1, 1, 2, 2};
		double		bb[2] = {1, -1},
					xx[2] = {0, 0};
		int			rc;

		from_triplets(2, rr, cc, vv, GM_TRI_BOTH, &A);
		rc = gm_cg_solve(&A, bb, xx, &p, NULL, &r, err, sizeof(err));
		CHECK(rc == GM_EINVAL && strstr(err, "not positive definite"), "indefinite on the GPU: %s",
			  err);
		gm_spmat_free(&A);
	}
	/*
	 * indefinite, met at the first product (the diagonal layout's fused
	 * iteration and cuSPARSE's first batch run outside the graph report it
	 * from there): tridiagonal 1, 2, 1 on 1000 rows (the diagonal layout),
	 * and [-1] without a preconditioner
	 */
	for (int k = 0; k < 2; k++)
	{
		std::vector<int64_t> rr,
					cc;
		std::vector<double> vv;
		const int64_t nn = k ? 1 : 1000;
		std::vector<double> bb((size_t) nn),
					xx((size_t) nn, 0.0);
		int			rc;

		for (int64_t i = 0; i < nn; i++)
		{
			bb[i] = i % 2 ? -1.0 : 1.0;		/* b.Ab = -3 n + 2 < 0 */
			rr.push_back(i);
			cc.push_back(i);
			vv.push_back(k ? -1.0 : 1.0);
			if (i > 0)
			{
				rr.push_back(i);
				cc.push_back(i - 1);
				vv.push_back(2.0);
			}
		}
		from_triplets(nn, rr, cc, vv, GM_TRI_LOWER, &A);
		for (int impl : {GM_SPMV_OWN, GM_SPMV_OWN_CSR, GM_SPMV_CUSPARSE})
		{
			p.spmv = (gm_spmv_impl) impl;
			p.preconditioner = k ? GM_PRECOND_NONE : GM_PRECOND_JACOBI;
			std::fill(xx.begin(), xx.end(), 0.0);
			rc = gm_cg_solve(&A, bb.data(), xx.data(), &p, NULL, &r, err, sizeof(err));
			CHECK(rc == GM_EINVAL && strstr(err, "not positive definite"),
				  "indefinite %s on the GPU, %s: %s", k ? "[-1]" : "tridiagonal 1, 2, 1",
				  impl == GM_SPMV_OWN ? "own" : impl == GM_SPMV_OWN_CSR ? "own-csr" : "cusparse",
				  err);
		}
		p.preconditioner = GM_PRECOND_JACOBI;
		gm_spmat_free(&A);
	}
}

/* ------------------------------------------------------------ OLS checks */

static const double longley[16][7] = {
	{60323, 83.0, 234289, 2356, 1590, 107608, 1947},
	{61122, 88.5, 259426, 2325, 1456, 108632, 1948},
	{60171, 88.2, 258054, 3682, 1616, 109773, 1949},
	{61187, 89.5, 284599, 3351, 1650, 110929, 1950},
	{63221, 96.2, 328975, 2099, 3099, 112075, 1951},
	{63639, 98.1, 346999, 1932, 3594, 113270, 1952},
	{64989, 99.0, 365385, 1870, 3547, 115094, 1953},
	{63761, 100.0, 363112, 3578, 3350, 116219, 1954},
	{66019, 101.2, 397469, 2904, 3048, 117388, 1955},
	{67857, 104.6, 419180, 2822, 2857, 118734, 1956},
	{68169, 108.4, 442769, 2936, 2798, 120445, 1957},
	{66513, 110.8, 444546, 4681, 2637, 121950, 1958},
	{68655, 112.6, 482704, 3813, 2552, 123366, 1959},
	{69564, 114.2, 502601, 3931, 2514, 125368, 1960},
	{69331, 115.7, 518173, 4806, 2572, 127852, 1961},
	{70551, 116.9, 554894, 4007, 2827, 130081, 1962},
};
static const double longley_cert[7][2] = {
	{-3482258.63459582, 890420.383607373},
	{15.0618722713733, 84.9149257747669},
	{-0.358191792925910e-01, 0.334910077722432e-01},
	{-2.02022980381683, 0.488399681651699},
	{-1.03322686717359, 0.214274163161675},
	{-0.511041056535807e-01, 0.226073200069370},
	{1829.15146461355, 455.478499142212},
};

struct Fit
{
	std::vector<double> coef,
				se,
				t,
				pv;
	std::vector<int> inv;
	gm_ols_result r;

	explicit Fit(int p) : coef(p), se(p), t(p), pv(p), inv(p)
	{
		memset(&r, 0, sizeof(r));
		r.coef = coef.data();
		r.std_err = se.data();
		r.t_stat = t.data();
		r.p_value = pv.data();
		r.involved = inv.data();
	}
};

/* fit n rows (X row-major n x k) on the CPU or through the GPU fold */
static int
fit(int k, int intercept, int64_t n, const double *X, const double *y, void *gpu_h,
	Fit &f, double *seconds)
{
	std::vector<char> mem(gm_ols_state_size(k));
	gm_ols_state *s = (gm_ols_state *) mem.data();
	gm_ols_exec ex = {0, gpu_h ? ops : NULL, gpu_h, 1};
	double		t = now();
	int			rc;

	GM(gm_ols_init(s, k, intercept, err, sizeof(err)));
	rc = gm_ols_add_rows(s, n, X, k, y, &ex, err, sizeof(err));
	if (rc == GM_OK)
		rc = gm_ols_finalize(s, &f.r, err, sizeof(err));
	if (seconds)
		*seconds = now() - t;
	return rc;
}

static double
lre(double a, double b)
{
	double		e = fabs(a - b) / fabs(b);

	return e == 0 ? 17 : -log10(e);
}

static void
ols_checks()
{
	void	   *g = NULL;

	printf("\n== OLS: the GPU fold (cuSOLVER QR) against the CPU fold and NIST\n");
	/* Longley through the GPU */
	{
		std::vector<double> X(16 * 6),
					y(16);
		Fit			f(7);
		double		worst = 99;

		for (int i = 0; i < 16; i++)
		{
			y[i] = longley[i][0];
			for (int j = 0; j < 6; j++)
				X[i * 6 + j] = longley[i][j + 1];
		}
		GM(ops->ols_create(&g, 6, 1, 1 << 16, err, sizeof(err)));
		/* the first 4096 rows choose the shifts on the host; here all 16 go to the GPU */
		GM(fit(6, 1, 16, X.data(), y.data(), g, f, NULL));
		for (int j = 0; j < 7; j++)
			worst = std::min(worst, std::min(lre(f.coef[j], longley_cert[j][0]),
											 lre(f.se[j], longley_cert[j][1])));
		CHECK(worst >= 8, "Longley on the GPU: worst agreement with NIST %.1f digits", worst);
		ops->ols_destroy(g);
	}
	/* polynomial degree 10 and a random tall problem: GPU vs CPU */
	for (int c = 0; c < 2; c++)
	{
		int			k = c == 0 ? 10 : 24;
		int64_t		n = c == 0 ? 300000 : 2000003;
		std::vector<double> X((size_t) n * k),
					y((size_t) n);
		Fit			fc(k + 1),
					fg(k + 1);
		double		tc,
					tg,
					worst = 0;

#pragma omp parallel for schedule(static)
		for (int64_t i = 0; i < n; i++)
		{
			double		x = unif(41 + c, i),
						xp = 1.0,
						v = 0.7;

			for (int j = 0; j < k; j++)
			{
				if (c == 0)
				{
					xp *= x;
					X[(size_t) i * k + j] = xp;
				}
				else
					X[(size_t) i * k + j] = 1000.0 * j + normal(43 + j, i);
				v += (j % 3 - 1 + 0.25) * X[(size_t) i * k + j];
			}
			y[i] = v + (c == 0 ? 1e-7 : 1.0) * normal(999, i);	/* a stream no column uses */
		}
		GM(ops->ols_create(&g, k, 1, 1 << 18, err, sizeof(err)));
		GM(fit(k, 1, n, X.data(), y.data(), NULL, fc, &tc));
		GM(fit(k, 1, n, X.data(), y.data(), g, fg, &tg));
		/*
		 * slopes and their SEs relative to themselves; the intercept (and its
		 * SE) relative to the size of what cancels in it, sum |b_j mean_j|
		 */
		{
			double		scale = fabs(fc.coef[0]),
						sescale = fc.se[0];

			for (int j = 1; j <= k; j++)
			{
				double		mean = 0.0;

				for (int64_t i = 0; i < n; i += 97)
					mean += X[(size_t) i * k + j - 1];
				mean /= (double) ((n + 96) / 97);
				scale += fabs(fc.coef[j] * mean);
				sescale += fc.se[j] * fabs(mean);
			}
			worst = std::max(fabs(fg.coef[0] - fc.coef[0]) / scale, fabs(fg.se[0] - fc.se[0]) / sescale);
		}
		for (int j = 1; j <= k; j++)
			worst = std::max(worst, std::max(fabs(fg.coef[j] - fc.coef[j]) / fabs(fc.coef[j]),
											 fabs(fg.se[j] - fc.se[j]) / fabs(fc.se[j])));
		CHECK(worst <= 1e-7, "%s, %lld x %d: GPU vs CPU coefficients and SEs within %.2e "
			  "(condition number of X %.3g)", c == 0 ? "polynomial x..x^10" : "random, offsets 1e3 j",
			  (long long) n, k, worst, fc.r.condition_number);
		ops->ols_destroy(g);
	}
}

/* ------------------------------------------------------------ benchmarks */

static double copy_gbs;			/* measured device copy bandwidth, GB/s */

static void
measure_copy()
{
	size_t		bytes = (size_t) 1 << 30;
	void	   *a,
			   *b;
	cudaEvent_t e0,
				e1;
	std::vector<double> t;

	CK(cudaMalloc(&a, bytes));
	CK(cudaMalloc(&b, bytes));
	CK(cudaMemset(a, 1, bytes));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 25; i++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 5)
			t.push_back(ms);
	}
	copy_gbs = 2.0 * bytes / (median(t) * 1e-3) / 1e9;
	printf("device-to-device copy: %.0f GB/s (bytes read + written, median of 20, 1 GiB)\n",
		   copy_gbs);
	CK(cudaFree(a));
	CK(cudaFree(b));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
}

/* median ms of launch() on stream st over 50 runs after 10 to warm up */
template <typename F>
static double
time_launch(cudaStream_t st, F launch)
{
	cudaEvent_t e0,
				e1;
	std::vector<double> t;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 60; i++)
	{
		float		ms;

		CK(cudaEventRecord(e0, st));
		launch();
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 10)
			t.push_back(ms);
	}
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return median(t);
}

/* median ms of one SpMV on device vectors */
static double
time_spmv(void *h, gm_spmv_impl impl, void *dx, void *dy)
{
	return time_launch((cudaStream_t) ops->sparse_stream(h), [&]() {
		GM(ops->sparse_spmv_device(h, impl, dx, dy, err, sizeof(err)));
	});
}

struct Bench
{
	const char *name;
	gm_spmat	A;
	double		spmv_ms[2][3];	/* [fp64, fp32][own, own-csr, cusparse best] */
	double		spmv_gbs[2][3];	/* GB/s of the CSR minimum bytes */
	double		gather_ms[2];	/* the gathers alone (gather_only) */
	const char *cus_alg[2];
	double		cg_ms[2][3];	/* [fp64, fp32][own, own-csr, cusparse] ms per iteration */
	int			iters[2];		/* to 1e-8, [fp64, fp32] */
	double		solve_s[2];
	double		resid[2];
	double		floor_ms[2];	/* the CSR's bytes */
	double		floor_own_ms[2];	/* the bytes of the layout gpumf's SpMV uses */
	double		cupy_ms[2];		/* [fp64, fp32] */
	int			ndiag;			/* the diagonal layout's diagonals (0: row blocks) */
	bool		has_diag;		/* offset 0 among them (Jacobi leaves it out) */
};

/*
 * The diagonals the diagonal layout would take (the rule of
 * cuda/linalg/spmv.cu's find_diagonals: at most 32 offsets, no more bytes
 * than the CSR's values and indices), for the bytes of the floors; 0 if none.
 */
static int
diagonals_of(const gm_spmat *A, size_t ts, bool *has_diag)
{
	std::vector<int64_t> offs;

	*has_diag = false;
	for (int64_t i = 0; i < A->n; i++)
		for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++)
		{
			int64_t		o = A->indices[e] - i;

			if (std::find(offs.begin(), offs.end(), o) == offs.end())
			{
				if (offs.size() == 32)
					return 0;
				offs.push_back(o);
			}
		}
	if ((double) offs.size() * ((A->n + 3) / 4 * 4) * ts >
		(double) A->nnz * (ts + 4) + 4.0 * (A->n + 1))
		return 0;
	*has_diag = std::find(offs.begin(), offs.end(), 0) != offs.end();
	return (int) offs.size();
}

/*
 * The gathers an SpMV of A cannot avoid, alone: every column index read
 * (16-byte vectors, in CSR order) and x[col] gathered, summed per thread;
 * no values, no rows.  Its time bounds from below any CSR SpMV that reads x
 * through the caches once per nonzero.
 */
template <typename T>
__global__ void
gather_only(int64_t nnz4, const int4 *__restrict__ idx, const T *__restrict__ x, T *out)
{
	T			acc = 0;

	for (int64_t k = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; k < nnz4;
		 k += (int64_t) gridDim.x * blockDim.x)
	{
		int4		c = __ldg(idx + k);

		acc += __ldg(x + c.x) + __ldg(x + c.y) + __ldg(x + c.z) + __ldg(x + c.w);
	}
	out[blockIdx.x * (int64_t) blockDim.x + threadIdx.x] = acc;
}

/* median ms of gather_only over A's indices with x of ts bytes */
static double
time_gather(const gm_spmat *A, size_t ts)
{
	int64_t		nnz4 = (A->nnz + 3) / 4;
	int		   *idx;
	void	   *x,
			   *out;
	int			nsm,
				grid;
	double		ms;

	CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
	grid = 8 * nsm;
	CK(cudaMalloc(&idx, sizeof(int) * 4 * nnz4));
	CK(cudaMemset(idx, 0, sizeof(int) * 4 * nnz4));
	CK(cudaMemcpy(idx, A->indices, sizeof(int) * A->nnz, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&x, ts * A->n));
	CK(cudaMemset(x, 0, ts * A->n));
	CK(cudaMalloc(&out, ts * grid * 256));
	ms = time_launch((cudaStream_t) 0, [&]() {
		if (ts == sizeof(float))
			gather_only<float><<<grid, 256>>>(nnz4, (const int4 *) idx, (const float *) x,
											  (float *) out);
		else
			gather_only<double><<<grid, 256>>>(nnz4, (const int4 *) idx, (const double *) x,
											   (double *) out);
		CK(cudaGetLastError());
	});
	CK(cudaFree(idx));
	CK(cudaFree(x));
	CK(cudaFree(out));
	return ms;
}

/* write A (int32 indptr, int32 indices, float64 values) and b for the CuPy script */
static void
write_matrix(const char *dir, const char *name, const gm_spmat *A, const std::vector<double> &b)
{
	std::string path = std::string(dir) + "/" + name + ".bin";
	FILE	   *f = fopen(path.c_str(), "wb");
	std::vector<int32_t> ip((size_t) A->n + 1);
	int64_t		hdr[2] = {A->n, A->nnz};

	if (f == NULL)
	{
		perror(path.c_str());
		return;
	}
	for (int64_t i = 0; i <= A->n; i++)
		ip[i] = (int32_t) A->indptr[i];
	fwrite(hdr, sizeof(hdr), 1, f);
	fwrite(ip.data(), sizeof(int32_t), ip.size(), f);
	fwrite(A->indices, sizeof(int32_t), A->nnz, f);
	fwrite(A->values, sizeof(double), A->nnz, f);
	fwrite(b.data(), sizeof(double), b.size(), f);
	fclose(f);
}

/*
 * ms per iteration: the difference of the fastest of three 220-iteration
 * runs and the fastest of three 20-iteration runs (tolerance 0), after one
 * of each to warm up: linalg_cupy.py's estimator for cupyx
 */
static double
cg_ms_per_iteration(const gm_spmat *A, const std::vector<double> &b, gm_precision prec,
					gm_spmv_impl impl, void *h)
{
	gm_cg_params p;
	gm_cg_result r;
	std::vector<double> x((size_t) A->n);
	const int	its[2] = {20, 220};
	double		best[2] = {1e300, 1e300};

	gm_cg_params_default(&p);
	p.precision = prec;
	p.spmv = impl;
	p.tolerance = 0.0;
	for (int rep = 0; rep < 4; rep++)
		for (int k = 0; k < 2; k++)
		{
			std::fill(x.begin(), x.end(), 0.0);
			p.max_iterations = its[k];
			double		t0 = now();

			GM(ops->sparse_cg(h, b.data(), x.data(), &p, NULL, &r, err, sizeof(err)));
			if (rep > 0)
				best[k] = std::min(best[k], now() - t0);
			if (r.iterations != its[k])
				printf("  (warning: %d iterations run, %d asked)\n", r.iterations, its[k]);
		}
	return (best[1] - best[0]) * 1e3 / (its[1] - its[0]);
}

static void
run_bench(Bench &B, const char *dir, const char *cupy)
{
	const gm_spmat *A = &B.A;
	int64_t		n = A->n;
	std::vector<double> b((size_t) n);

	for (int64_t i = 0; i < n; i++)
		b[i] = normal(501, i);
	printf("\n== %s: %lld rows, %lld nonzeros\n", B.name, (long long) n, (long long) A->nnz);
	B.cupy_ms[0] = B.cupy_ms[1] = NAN;
	if (dir && cupy && access(cupy, R_OK) == 0)
	{
		/* the CuPy baseline first, alone on the GPU */
		char		cmd[2048];
		FILE	   *pp;
		char		line[512];

		write_matrix(dir, B.name, A, b);
		snprintf(cmd, sizeof(cmd), "python3 %s %s/%s.bin 2>&1", cupy, dir, B.name);
		pp = popen(cmd, "r");
		while (pp && fgets(line, sizeof(line), pp))
		{
			double		ms;

			fputs("  cupy| ", stdout);
			fputs(line, stdout);
			if (sscanf(line, "cupyx fp64 ms_per_iteration %lf", &ms) == 1)
				B.cupy_ms[0] = ms;
			if (sscanf(line, "cupyx fp32 ms_per_iteration %lf", &ms) == 1)
				B.cupy_ms[1] = ms;
		}
		if (pp)
			pclose(pp);
	}
	for (int pi = 0; pi < 2; pi++)
	{
		gm_precision prec = pi ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
		size_t		ts = pi ? sizeof(float) : sizeof(double);
		void	   *h,
				   *dx,
				   *dy;
		char		dev[128];
		double		bytes = (double) A->nnz * (ts + 4) + 4.0 * (n + 1) + 2.0 * ts * n;
		double		ms_own,
					ms_csr,
					ms_c1,
					ms_c2;
		bool		has_diag;
		const int	nd = diagonals_of(A, ts, &has_diag);
		std::vector<float> xf((size_t) n);
		std::vector<double> xd((size_t) n);

		GM(ops->sparse_create(&h, A, prec, dev, sizeof(dev), err, sizeof(err)));
		CK(cudaMalloc(&dx, ts * (n + 4)));
		CK(cudaMalloc(&dy, ts * (n + 4)));
		for (int64_t i = 0; i < n; i++)
		{
			xd[i] = normal(502, i);
			xf[i] = (float) xd[i];
		}
		CK(cudaMemcpy(dx, pi ? (void *) xf.data() : (void *) xd.data(), ts * n,
					  cudaMemcpyHostToDevice));
		ms_own = time_spmv(h, GM_SPMV_OWN, dx, dy);
		ms_csr = time_spmv(h, GM_SPMV_OWN_CSR, dx, dy);
		ms_c1 = time_spmv(h, GM_SPMV_CUSPARSE, dx, dy);
		ms_c2 = time_spmv(h, GM_SPMV_CUSPARSE_ALG2, dx, dy);
		B.ndiag = nd;
		B.has_diag = has_diag;
		B.spmv_ms[pi][0] = ms_own;
		B.spmv_ms[pi][1] = ms_csr;
		B.spmv_ms[pi][2] = std::min(ms_c1, ms_c2);
		for (int k = 0; k < 3; k++)
			B.spmv_gbs[pi][k] = bytes / (B.spmv_ms[pi][k] * 1e-3) / 1e9;
		B.cus_alg[pi] = ms_c1 <= ms_c2 ? "default" : "alg2";
		B.gather_ms[pi] = time_gather(A, ts);
		printf("  SpMV %s: own %.4f ms (%s), own-csr %.4f ms, cuSPARSE default %.4f ms, alg2 %.4f ms "
			   "(%.0f MB minimum); the gathers alone %.4f ms\n",
			   pi ? "fp32" : "fp64", ms_own, nd ? "diagonal layout" : "row blocks", ms_csr, ms_c1,
			   ms_c2, bytes / 1e6, B.gather_ms[pi]);
		CK(cudaFree(dx));
		CK(cudaFree(dy));

		/* PCG: ms per iteration (own and cuSPARSE), iterations and time to 1e-8 */
		B.cg_ms[pi][0] = cg_ms_per_iteration(A, b, prec, GM_SPMV_OWN, h);
		B.cg_ms[pi][1] = cg_ms_per_iteration(A, b, prec, GM_SPMV_OWN_CSR, h);
		B.cg_ms[pi][2] = cg_ms_per_iteration(A, b, prec, GM_SPMV_CUSPARSE, h);
		/* floor: the matrix once, 10 vector words a row (pcg_impl.h), 4-byte row pointers */
		B.floor_ms[pi] = ((double) A->nnz * (ts + 4) + 4.0 * (n + 1) + 10.0 * ts * n) /
			(copy_gbs * 1e9) * 1e3;
		/*
		 * the diagonal layout's: its stored diagonals (Jacobi's unit one left
		 * out) and the fused iteration's 8 vector words a row
		 */
		B.floor_own_ms[pi] = nd == 0 ? B.floor_ms[pi]
			: ((double) (nd - has_diag) * ((n + 3) / 4 * 4) * ts + 8.0 * ts * n) /
			(copy_gbs * 1e9) * 1e3;
		{
			gm_cg_params p;
			gm_cg_result r;
			std::vector<double> x((size_t) n, 0.0);
			double		t0;

			gm_cg_params_default(&p);
			p.precision = prec;
			p.max_iterations = 30000;
			p.gpu = ops;
			t0 = now();
			GM(ops->sparse_cg(h, b.data(), x.data(), &p, NULL, &r, err, sizeof(err)));
			B.solve_s[pi] = now() - t0;
			B.iters[pi] = r.iterations;
			B.resid[pi] = gm_relative_residual(A, b.data(), x.data(), 0);
			printf("  PCG %s to 1e-8: %d iterations, %d restarts, %.3f s, residual %.2e (host float64); default: %s\n",
				   pi ? "fp32" : "fp64", r.iterations, r.replacements, B.solve_s[pi], B.resid[pi], r.device);
			CHECK(r.converged && B.resid[pi] <= 1e-8, "%s PCG %s converged to 1e-8 (host residual %.2e)",
				  B.name, pi ? "fp32" : "fp64", B.resid[pi]);
		}
		ops->sparse_destroy(h);
	}
}

static void
seed_bench()
{
	gm_spmat	A;
	gm_cg_params p;
	gm_cg_result r;
	void	   *h;
	char		dev[128];
	std::vector<double> t;
	int			its = 0;

	seed_case(&A);
	std::vector<double> b((size_t) A.n), x((size_t) A.n);
	for (int64_t i = 0; i < A.n; i++)
		b[i] = normal(701, i);
	GM(ops->sparse_create(&h, &A, GM_PRECISION_SINGLE, dev, sizeof(dev), err, sizeof(err)));
	gm_cg_params_default(&p);
	p.precision = GM_PRECISION_SINGLE;
	p.tolerance = 1e-6;
	for (int rep = 0; rep < 12; rep++)
	{
		double		t0;

		std::fill(x.begin(), x.end(), 0.0);
		t0 = now();
		GM(ops->sparse_cg(h, b.data(), x.data(), &p, NULL, &r, err, sizeof(err)));
		if (rep >= 2)
			t.push_back(now() - t0);
		its = r.iterations;
	}
	double		res = gm_relative_residual(&A, b.data(), x.data(), 0);
	double		per = cg_ms_per_iteration(&A, b, GM_PRECISION_SINGLE, GM_SPMV_OWN, h);

	printf("\n== the seed's case (SEEDS.md 5): %d rows, %lld nonzeros, fp32 Jacobi PCG to 1e-6\n",
		   A.n, (long long) A.nnz);
	printf("  whole solve (the matrix already on the GPU; b and x copied in and out): %.2f ms "
		   "median of 10, %d iterations, %.4f ms per iteration (fixed-count runs), residual %.2e\n",
		   median(t) * 1e3, its, per, res);
	printf("  the seed: 46 ms (378 iterations) on a GTX 1080, from 440 ms (677 unpreconditioned)\n");
	CHECK(r.converged && res <= 1e-6, "seed case converged to 1e-6");
	ops->sparse_destroy(h);
	gm_spmat_free(&A);
}

static void
ols_bench(int64_t n, int k)
{
	std::vector<double> X, y;
	double		tgen = now(),
				tc,
				tg,
				xfer = 0,
				comp = 0,
				worst = 0;
	void	   *g;

	printf("\n== OLS %lld x %d (+ intercept), float64: GPU (cuSOLVER QR, chunks of 1M rows) vs CPU (%d threads)\n",
		   (long long) n, k, omp_get_max_threads());
	X.resize((size_t) n * k);
	y.resize((size_t) n);
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++)
	{
		double		v = 1.5;

		for (int j = 0; j < k; j++)
		{
			double		xv = 10.0 * (j % 7) + 2.0 * unif(800 + j % 16, i * 7 + j) - 1.0;

			X[(size_t) i * k + j] = xv;
			v += 0.01 * ((j % 5) - 2.5) * xv;
		}
		y[i] = v + unif(900, i) - 0.5;
	}
	tgen = now() - tgen;
	Fit			fc(k + 1),
				fgpu(k + 1);

	GM(fit(k, 1, n, X.data(), y.data(), NULL, fc, &tc));
	GM(ops->ols_create(&g, k, 1, 1 << 20, err, sizeof(err)));
	GM(fit(k, 1, n, X.data(), y.data(), g, fgpu, &tg));
	ops->ols_timing(g, &xfer, &comp);
	ops->ols_destroy(g);
	for (int j = 0; j <= k; j++)
		worst = std::max(worst, fabs(fgpu.coef[j] - fc.coef[j]) / std::max(1e-300, fabs(fc.coef[j])));
	printf("  rows made in memory: %.2f s (reading a table is timed by the SQL benchmark)\n", tgen);
	printf("  CPU  compute: %.3f s\n", tc);
	printf("  GPU  total:   %.3f s = factorization %.3f s + copying/packing not hidden %.3f s\n",
		   tg, comp, xfer);
	CHECK(worst <= 1e-8, "OLS %lld x %d: GPU coefficients match the CPU's within %.2e",
		  (long long) n, k, worst);
}

int
main(int argc, char **argv)
{
	bool		quick = false,
				spmv_only = false,
				profile = false;
	const char *dir = "/tmp/gpumf_linalg";
	const char *cupy = NULL;
	int64_t		ols_rows = 10000000;
	int			ols_cols = 100;
	cudaDeviceProp prop;
	const char *env = getenv("GM_TEST_SEED");

	for (int i = 1; i < argc; i++)
	{
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--spmv-only"))
			spmv_only = true;
		else if (!strcmp(argv[i], "--profile"))
			profile = true;
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--cupy") && i + 1 < argc)
			cupy = argv[++i];
		else if (!strcmp(argv[i], "--ols-rows") && i + 1 < argc)
			ols_rows = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--ols-cols") && i + 1 < argc)
			ols_cols = atoi(argv[++i]);
	}
	seed = env && *env ? strtoull(env, NULL, 10)
		: (uint64_t) std::chrono::system_clock::now().time_since_epoch().count() ^ ((uint64_t) getpid() << 32);
	printf("# linalg_bench seed %llu (replay with GM_TEST_SEED=%llu)\n",
		   (unsigned long long) seed, (unsigned long long) seed);
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s, %d SMs, %.0f MB L2, %.1f GB; host: %d threads\n", prop.name,
		   prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.totalGlobalMem / 1e9,
		   omp_get_max_threads());
	ops = gm_cuda_linalg_ops();
	if (ops == NULL || ops->abi_version != GM_LINALG_ABI_VERSION)
	{
		printf("the CUDA module's linear-algebra table is missing or of another ABI\n0 passed, 1 failed\n");
		return 1;
	}

	if (spmv_only || profile)
	{
		gm_spmat	P,
					Q,
					R;

		poisson2d(2048, &P);
		powerlaw_spd(1000000, 15500000, 0.55, 601, &Q);
		if (!profile)
			degree_ordered(&Q, &R);
		for (gm_spmat *A : {&P, &Q, &R})
			for (int pi = 0; pi < 2; pi++)
			{
				size_t		ts = pi ? 4 : 8;
				void	   *h,
						   *dx,
						   *dy;
				char		dev[128];
				double		bytes = (double) A->nnz * (ts + 4) + 4.0 * (A->n + 1) + 2.0 * ts * A->n;

				if (A == &R && profile)
					continue;
				GM(ops->sparse_create(&h, A, pi ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE, dev,
									  sizeof(dev), err, sizeof(err)));
				CK(cudaMalloc(&dx, ts * (A->n + 4)));
				CK(cudaMalloc(&dy, ts * (A->n + 4)));
				CK(cudaMemset(dx, 0x3c, ts * (A->n + 4)));
				if (profile)
				{
					std::vector<double> b((size_t) A->n, 1.0),
								x((size_t) A->n, 0.0);
					gm_cg_params p;
					gm_cg_result r;

					for (int i = 0; i < 2; i++)
						GM(ops->sparse_spmv_device(h, GM_SPMV_OWN, dx, dy, err, sizeof(err)));
					gm_cg_params_default(&p);
					p.precision = pi ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
					p.tolerance = 0;
					p.max_iterations = 2;
					GM(ops->sparse_cg(h, b.data(), x.data(), &p, NULL, &r, err, sizeof(err)));
				}
				else
				{
					double		o = time_spmv(h, GM_SPMV_OWN, dx, dy),
								oc = time_spmv(h, GM_SPMV_OWN_CSR, dx, dy),
								c = time_spmv(h, GM_SPMV_CUSPARSE, dx, dy),
								g = time_gather(A, ts);

					printf("%s %s own %.4f ms %.0f GB/s, own-csr %.4f ms %.0f GB/s, cusparse %.4f ms %.0f GB/s, gathers alone %.4f ms\n",
						   A == &P ? "poisson" : A == &Q ? "powerlaw" : "powerlaw, degree-ordered",
						   pi ? "fp32" : "fp64", o, bytes / o / 1e6, oc, bytes / oc / 1e6,
						   c, bytes / c / 1e6, g);
					if (A == &P)
					{
						std::vector<double> b((size_t) A->n, 1.0);
						gm_precision prec = pi ? GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;

						printf("poisson %s PCG ms per iteration: own %.4f, own-csr %.4f\n",
							   pi ? "fp32" : "fp64",
							   cg_ms_per_iteration(A, b, prec, GM_SPMV_OWN, h),
							   cg_ms_per_iteration(A, b, prec, GM_SPMV_OWN_CSR, h));
					}
				}
				CK(cudaDeviceSynchronize());
				CK(cudaFree(dx));
				CK(cudaFree(dy));
				ops->sparse_destroy(h);
			}
		return 0;
	}
	spmv_checks();
	pcg_checks();
	ols_checks();

	if (!quick)
	{
		Bench		B[2];
		double		t0 = now();

		printf("\n== benchmarks\n");
		measure_copy();
		if (dir)
		{
			std::string mk = std::string("mkdir -p ") + dir;

			if (system(mk.c_str()) != 0)
				dir = NULL;
		}
		memset(B, 0, sizeof(B));
		B[0].name = "poisson2d_2048";
		poisson2d(2048, &B[0].A);
		B[1].name = "powerlaw_1M";
		powerlaw_spd(1000000, 15500000, 0.55, 601, &B[1].A);
		printf("matrices made in %.1f s\n", now() - t0);
		for (auto &b : B)
			run_bench(b, dir, cupy);
		seed_bench();
		ols_bench(ols_rows, ols_cols);

		printf("\n== SpMV: ms, and GB/s of the CSR's minimum bytes (values, indices, 32-bit row pointers, x once, y once); copy ceiling %.0f GB/s\n",
			   copy_gbs);
		printf("(own: the diagonal layout where the matrix has one, else row blocks; own-csr: row blocks;\n"
			   " gathers: column indices read and x gathered, nothing else: a bound under any SpMV gathering x per nonzero)\n");
		printf("%-16s %-5s %-6s %8s %7s %8s %7s %8s %7s %-8s %7s %7s %8s\n", "matrix", "prec", "own is",
			   "own ms", "GB/s", "csr ms", "GB/s", "cus ms", "GB/s", "(alg)", "own/cus", "csr/cus",
			   "gathers");
		for (auto &b : B)
			for (int pi = 1; pi >= 0; pi--)
				printf("%-16s %-5s %-6s %8.4f %7.0f %8.4f %7.0f %8.4f %7.0f %-8s %6.2fx %6.2fx %8.4f\n",
					   b.name, pi ? "fp32" : "fp64", b.ndiag ? "dia" : "csr", b.spmv_ms[pi][0],
					   b.spmv_gbs[pi][0], b.spmv_ms[pi][1], b.spmv_gbs[pi][1], b.spmv_ms[pi][2],
					   b.spmv_gbs[pi][2], b.cus_alg[pi], b.spmv_ms[pi][2] / b.spmv_ms[pi][0],
					   b.spmv_ms[pi][2] / b.spmv_ms[pi][1], b.gather_ms[pi]);
		printf("\n== Jacobi PCG: ms per iteration; floor = bytes an iteration moves / copy bandwidth: csr floor = the CSR once\n"
			   "   + 10 vector words a row; own floor = what gpumf's iteration moves (diagonal layout: the stored diagonals\n"
			   "   + 8 words, fused; else the csr floor); per iteration: (fastest of 3 x 220 - fastest of 3 x 20) / 200\n");
		printf("%-16s %-5s %8s %9s %6s %9s %6s %8s %10s %8s %7s %7s %9s\n", "matrix", "prec", "own",
			   "own floor", "/floor", "csr floor", "/floor", "own-csr", "w/cuSPARSE", "cupyx",
			   "speedup", "iters", "solve s");
		for (auto &b : B)
			for (int pi = 1; pi >= 0; pi--)
				printf("%-16s %-5s %8.4f %9.4f %5.2fx %9.4f %5.2fx %8.4f %10.4f %8.4f %6.1fx %7d %9.3f\n",
					   b.name, pi ? "fp32" : "fp64", b.cg_ms[pi][0], b.floor_own_ms[pi],
					   b.cg_ms[pi][0] / b.floor_own_ms[pi], b.floor_ms[pi],
					   b.cg_ms[pi][0] / b.floor_ms[pi], b.cg_ms[pi][1], b.cg_ms[pi][2],
					   b.cupy_ms[pi], b.cupy_ms[pi] / b.cg_ms[pi][0], b.iters[pi], b.solve_s[pi]);
		printf("(iters and solve s: to a true residual of 1e-8; fp32 reaches it by restarts from the float64 residual)\n");
		for (auto &b : B)
			gm_spmat_free(&b.A);
	}
	printf("\n%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
