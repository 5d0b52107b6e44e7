/*
 * score_bench.cu: correctness and speed of gpumf's batch top-n scorer on the
 * GPU (cuda/serve/score.cu, reached through the core's gm_score_topk with the
 * module loaded by dlopen, as the server does) against a float64 reference
 * and the CPU scorer (src/core/serve/score.c), and of evaluation (the same top-k
 * lists + src/core/serve/metrics.c) on the GPU against the CPU.
 *
 * No PostgreSQL.  Usage:
 *   score_bench [--quick] [--module cuda/gpumf_cuda.so] [--out DIR]
 * --quick: the random-problem checks only.  The full run also builds the
 * ML-20M-shaped problem, times it, and writes it to DIR (X, Y, the seen
 * CSR, the GPU's lists) for score_cupy.py, the CuPy baseline.
 */
#include "../../../src/core/common/gm_core.h"
#include "../../../src/core/serve/gm_score.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_check.h"

static uint64_t rng_state;

static double
urand(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static double
nrand(void)
{
	double		u1 = urand() + 1e-300,
				u2 = urand();

	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double
median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? NAN : v[v.size() / 2];
}

/* ============================================================ problems */

struct problem
{
	gm_score_problem p;
	std::vector<float> X,
				Y,
				bias;
	std::vector<int64_t> seen_ptr;
	std::vector<int32_t> seen_idx;
	int			exact;
};

static void
problem_bind(problem *q)
{
	q->p.X = q->X.data();
	q->p.Y = q->Y.data();
	q->p.item_bias = q->bias.empty() ? NULL : q->bias.data();
	q->p.seen_ptr = q->seen_ptr.empty() ? NULL : q->seen_ptr.data();
	q->p.seen_idx = q->seen_idx.empty() ? NULL : q->seen_idx.data();
}

/* random factors (or small integers: exact float sums, exact ties), copies of items, seen lists */
static void
problem_make(problem *q, int32_t nu, int32_t ni, int k, int n, int exact, int with_bias,
			 int with_seen)
{
	memset(&q->p, 0, sizeof(q->p));
	q->exact = exact;
	q->X.resize((size_t) nu * k);
	q->Y.resize((size_t) ni * k);
	for (auto &x : q->X)
		x = exact ? (float) (int) (urand() * 7 - 3.5) : (float) nrand();
	for (auto &y : q->Y)
		y = exact ? (float) (int) (urand() * 7 - 3.5) : (float) nrand();
	for (int32_t i = 3; i < ni; i += 5)
		memcpy(&q->Y[(size_t) i * k], &q->Y[(size_t) (i - 3) * k], sizeof(float) * k);
	q->bias.clear();
	if (with_bias)
	{
		q->bias.resize(ni);
		for (auto &b : q->bias)
			b = exact ? (float) (int) (urand() * 5 - 2.5) : (float) nrand();
	}
	q->seen_ptr.clear();
	q->seen_idx.clear();
	if (with_seen)
	{
		q->seen_ptr.push_back(0);
		for (int32_t u = 0; u < nu; u++)
		{
			double		frac = u % 11 == 0 ? 1.0 : u % 7 == 0 ? 0.97 : urand() * 0.3;

			for (int32_t i = 0; i < ni; i++)
				if (urand() < frac)
					q->seen_idx.push_back(i);
			q->seen_ptr.push_back((int64_t) q->seen_idx.size());
		}
	}
	q->p.n_users = nu;
	q->p.n_items = ni;
	q->p.k = k;
	q->p.n = n;
	q->p.threads = 0;
	problem_bind(q);
}

struct lists
{
	std::vector<int32_t> idx,
				count;
	std::vector<float> score;
	gm_score_result r;

	void		alloc(int32_t nu, int n)
	{
		idx.assign((size_t) nu * n + 1, -7);
		score.assign((size_t) nu * n + 1, NAN);	/* poison */
		count.assign((size_t) nu + 1, -7);
		memset(&r, 0, sizeof(r));
		r.idx = idx.data();
		r.score = score.data();
		r.count = count.data();
	}
};

static double
ref_score(const problem *q, int32_t u, int32_t i)
{
	double		s = q->bias.empty() ? 0.0 : q->bias[i];

	for (int f = 0; f < q->p.k; f++)
		s += (double) q->X[(size_t) u * q->p.k + f] * (double) q->Y[(size_t) i * q->p.k + f];
	return s;
}

/*
 * Compare the lists of user u against the float64 reference (exact problems:
 * item for item and bit for bit; others: scores within tol, a different item
 * only in a near tie).  Returns a message or NULL.
 */
static const char *
check_user_ref(const problem *q, const lists *L, int32_t u, std::vector<double> &s,
			   std::vector<int32_t> &order, char *msg, size_t msglen)
{
	int32_t		ni = q->p.n_items;
	int			n = q->p.n;
	int32_t		m = 0;
	int			want;
	double		xl1 = 0;

	order.clear();
	for (int32_t i = 0; i < ni; i++)
		s[i] = ref_score(q, u, i);
	{
		int64_t		a = q->seen_ptr.empty() ? 0 : q->seen_ptr[u],
					b = q->seen_ptr.empty() ? 0 : q->seen_ptr[u + 1];
		int64_t		e = a;

		for (int32_t i = 0; i < ni; i++)
		{
			while (e < b && q->seen_idx[e] < i)
				e++;
			if (e < b && q->seen_idx[e] == i)
				continue;
			order.push_back(i);
		}
	}
	std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
		return s[a] > s[b] || (s[a] == s[b] && a < b);
	});
	m = (int32_t) order.size();
	want = m < n ? m : n;
	for (int f = 0; f < q->p.k; f++)
		xl1 += fabs(q->X[(size_t) u * q->p.k + f]);
	if (L->count[u] != want)
	{
		snprintf(msg, msglen, "user %d: %d entries, expected %d", u, L->count[u], want);
		return msg;
	}
	for (int e = 0; e < n; e++)
	{
		int32_t		got = L->idx[(size_t) u * n + e];
		float		gs = L->score[(size_t) u * n + e];
		double		tol = 2e-6 * (1.0 + xl1 * 4.0) * sqrt((double) q->p.k);

		if (e >= want)
		{
			if (got != -1 || !isnan(gs))
			{
				snprintf(msg, msglen, "user %d: entry %d past the count is %d / %g", u, e, got, gs);
				return msg;
			}
			continue;
		}
		if (got < 0 || got >= ni)
		{
			snprintf(msg, msglen, "user %d rank %d: item %d out of range", u, e, got);
			return msg;
		}
		if (q->exact ? (got != order[e] || (double) gs != s[order[e]]) :
			(fabs(gs - s[order[e]]) > tol ||
			 (got != order[e] && fabs(s[got] - s[order[e]]) > tol)))
		{
			snprintf(msg, msglen, "user %d rank %d: item %d (%.9g, ref %.9g), expected %d (%.9g)",
					 u, e, got, gs, s[got], order[e], s[order[e]]);
			return msg;
		}
	}
	return NULL;
}

/*
 * The same list from two float32 scorers: same count, scores within tol,
 * items equal except in near ties.  Returns the number of users that differ
 * beyond that; *swaps counts near-tie swaps.
 */
static int64_t
compare_lists(const lists *a, const lists *b, int32_t nu, int n, double tol, int64_t *swaps,
			  int32_t *first_bad)
{
	int64_t		bad = 0,
				sw = 0;

	*first_bad = -1;
#pragma omp parallel for reduction(+:bad, sw) schedule(static)
	for (int32_t u = 0; u < nu; u++)
	{
		int			ok = a->count[u] == b->count[u];

		for (int e = 0; ok && e < a->count[u]; e++)
		{
			size_t		o = (size_t) u * n + e;
			double		scale = 1.0 + fabs(a->score[o]);

			if (fabs(a->score[o] - b->score[o]) > tol * scale)
				ok = 0;
			else if (a->idx[o] != b->idx[o])
				sw++;
		}
		if (!ok)
		{
			bad++;
#pragma omp critical
			if (*first_bad < 0 || u < *first_bad)
				*first_bad = u;
		}
	}
	*swaps = sw;
	return bad;
}

/* ==================================================== random problems */

static void
check_random(const char *module_name)
{
	struct shape
	{
		int32_t		nu,
					ni;
		int			k,
					n;
		int			exact,
					bias,
					seen;
		int64_t		batch_bytes;
	};
	const shape shapes[] = {
		{50, 1, 1, 1, 0, 0, 1, 0},
		{50, 3, 7, 10, 1, 1, 1, 0},
		{300, 1000, 64, 10, 0, 0, 1, 4000 * 7},
		{300, 1023, 64, 10, 1, 0, 1, 1024 * 4 * 5},
		{300, 1024, 128, 100, 0, 1, 1, 0},
		{300, 1025, 128, 10, 1, 1, 1, 1056 * 4 * 3},
		{200, 5000, 200, 1024, 0, 0, 1, 0},
		{200, 5000, 33, 1024, 1, 0, 0, 5024 * 4 * 9},
		{400, 3000, 96, 1, 0, 1, 0, 0},
		{400, 2100, 128, 37, 1, 1, 1, 2112 * 4 * 17},
		{64, 40000, 128, 10, 0, 0, 1, 0},
		{64, 40000, 128, 600, 1, 0, 1, 40000 * 4 * 5},
	};
	std::vector<double> s;
	std::vector<int32_t> order;
	char		msg[512];

	printf("\n== random problems: GPU (%s) and CPU lists against a float64 reference\n", module_name);
	for (const shape &sh : shapes)
	{
		problem		q;
		lists		G,
					C;
		int			rc;
		const char *why_g = NULL,
				   *why_c = NULL;
		char		msg_c[512];

		problem_make(&q, sh.nu, sh.ni, sh.k, sh.n, sh.exact, sh.bias, sh.seen);
		q.p.batch_bytes = sh.batch_bytes;
		G.alloc(sh.nu, sh.n);
		C.alloc(sh.nu, sh.n);
		rc = gm_score_topk(&q.p, GM_BACKEND_CUDA, NULL, &G.r, err, sizeof(err));
		if (rc != GM_OK)
		{
			CHECK(0, "gpu %d users x %d items k=%d n=%d: rc %d: %s", sh.nu, sh.ni, sh.k, sh.n, rc, err);
			continue;
		}
		rc = gm_score_topk(&q.p, GM_BACKEND_CPU, NULL, &C.r, err, sizeof(err));
		if (rc != GM_OK)
		{
			CHECK(0, "cpu: rc %d: %s", rc, err);
			continue;
		}
		s.resize(sh.ni + 1);
		for (int32_t u = 0; u < sh.nu && !why_g; u++)
			why_g = check_user_ref(&q, &G, u, s, order, msg, sizeof(msg));
		for (int32_t u = 0; u < sh.nu && !why_c; u++)
			why_c = check_user_ref(&q, &C, u, s, order, msg_c, sizeof(msg_c));
		CHECK(!why_g && !why_c && G.idx[(size_t) sh.nu * sh.n] == -7 && G.count[sh.nu] == -7,
			  "%4d users x %5d items, k=%3d, n=%4d, %s%s%s, %d batch(es): GPU and CPU lists %s %s%s%s",
			  sh.nu, sh.ni, sh.k, sh.n, sh.exact ? "integer factors (exact ties)" : "normal factors",
			  sh.bias ? ", item biases" : "", sh.seen ? ", seen items" : "", G.r.batches,
			  sh.exact ? "equal the reference exactly" : "match the reference",
			  why_g ? "| GPU: " : "", why_g ? why_g : "", why_c ? " | CPU failed" : "");
	}

	/* refusals and cancellation, with no device memory left behind */
	{
		problem		q;
		lists		G;
		size_t		free0,
					free1,
					total;
		int			calls = 0;
		gm_callbacks cb;
		int			rc;

		problem_make(&q, 5000, 2000, 64, 10, 0, 0, 1);
		q.p.batch_bytes = 2016 * 4 * 100;	/* 50 batches */
		G.alloc(5000, 1100);
		CK(cudaMemGetInfo(&free0, &total));
		q.p.n = 1100;
		rc = gm_score_topk(&q.p, GM_BACKEND_CUDA, NULL, &G.r, err, sizeof(err));
		CHECK(rc == GM_ENOTSUP, "n = 1100 > %d on the GPU: GM_ENOTSUP (%s)", GM_SCORE_GPU_MAX_N, err);
		q.p.n = 10;
		cb.should_stop = [](void *a) -> int { return ++*(int *) a > 3; };
		cb.on_iteration = NULL;
		cb.arg = &calls;
		rc = gm_score_topk(&q.p, GM_BACKEND_CUDA, &cb, &G.r, err, sizeof(err));
		CK(cudaMemGetInfo(&free1, &total));
		CHECK(rc == GM_ECANCELED && calls == 4 && free1 + (16 << 20) >= free0,
			  "should_stop after 3 of 50 batches: GM_ECANCELED (rc %d, %d polls), device memory freed (%zd MB not returned)",
			  rc, calls, ((ssize_t) free0 - (ssize_t) free1) >> 20);
	}
}

/* ======================================================= ML-20M shape */

struct dataset
{
	int32_t		nu,
				ni;
	gm_csr		R,
				Rt;				/* train values */
	gm_csr		test;			/* holdout: sorted per user, values 1 */
};

static void
make_dataset(dataset *d, int32_t users, int32_t items, int64_t rows, uint64_t seed)
{
	gm_synth	g;
	std::vector<int64_t> off(users + 1, 0);

	memset(&g, 0, sizeof(g));
	g.n_users = users;
	g.n_items = items;
	g.n_rows = rows;
	g.min_per_user = 20;
	g.clusters = 40;
	g.affinity = 0.5;
	g.seed = seed;
	GM(gm_synth_init(&g, err, sizeof(err)));
	for (int32_t u = 0; u < users; u++)
		off[u + 1] = off[u] + g.counts[u];
	std::vector<int32_t> it(off[users]);
	std::vector<float> val(off[users]);
	std::vector<uint8_t> ho(off[users]);
#pragma omp parallel
	{
		std::vector<uint8_t> seen(items, 0);

#pragma omp for schedule(dynamic, 256)
		for (int32_t u = 0; u < users; u++)
			gm_synth_user(&g, u, it.data() + off[u], val.data() + off[u], ho.data() + off[u],
						  seen.data());
	}
	gm_synth_free(&g);

	std::vector<int32_t> r,
				c,
				tr,
				tc;
	std::vector<float> v,
				tv;

	for (int32_t u = 0; u < users; u++)
		for (int64_t e = off[u]; e < off[u + 1]; e++)
		{
			if (ho[e])
			{
				tr.push_back(u);
				tc.push_back(it[e]);
				tv.push_back(1.0f);
			}
			else
			{
				r.push_back(u);
				c.push_back(it[e]);
				v.push_back(val[e]);
			}
		}
	d->nu = users;
	d->ni = items;
	GM(gm_csr_from_coo(users, items, (int64_t) r.size(), r.data(), c.data(), v.data(), &d->R,
					   err, sizeof(err)));
	GM(gm_csr_transpose(&d->R, &d->Rt, err, sizeof(err)));
	GM(gm_csr_from_coo(users, items, (int64_t) tr.size(), tr.data(), tc.data(), tv.data(),
					   &d->test, err, sizeof(err)));
}

static void
write_file(const char *dir, const char *name, const void *p, size_t bytes)
{
	char		path[1024];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, bytes, f) != bytes)
	{
		fprintf(stderr, "cannot write %s\n", path);
		exit(2);
	}
	fclose(f);
}

static double sgemm_tflops,
			d2d_gbs;

/* the device's FP32 sgemm rate and copy bandwidth, measured */
static void
measure_ceilings(void)
{
	const int	n = 8192;
	float	   *a,
			   *b,
			   *c;
	cublasHandle_t h;
	cudaEvent_t e0,
				e1;
	const float one = 1.0f,
				zero = 0.0f;
	std::vector<double> t;
	size_t		bytes = (size_t) 1 << 31;

	CK(cudaMalloc(&a, 4 * (size_t) n * n));
	CK(cudaMalloc(&b, 4 * (size_t) n * n));
	CK(cudaMalloc(&c, 4 * (size_t) n * n));
	{
		std::vector<float> hv((size_t) n * n);

		for (auto &x : hv)
			x = (float) (urand() - 0.5);
		CK(cudaMemcpy(a, hv.data(), 4 * hv.size(), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(b, hv.data(), 4 * hv.size(), cudaMemcpyHostToDevice));
	}
	CB(cublasCreate(&h));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < 8; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 2)
			t.push_back(ms);
	}
	sgemm_tflops = 2.0 * n * (double) n * n / (median(t) * 1e-3) / 1e12;
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
	CK(cudaMalloc(&a, bytes));
	CK(cudaMalloc(&b, bytes));
	CK(cudaMemset(a, 1, bytes));
	t.clear();
	for (int r = 0; r < 8; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 2)
			t.push_back(ms);
	}
	d2d_gbs = 2.0 * bytes / (median(t) * 1e-3) / 1e9;
	cudaFree(a);
	cudaFree(b);
	cublasDestroy(h);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	printf("ceilings: FP32 sgemm (8192^3) %.1f TFLOP/s; device-to-device copy %.0f GB/s (read + write)\n",
		   sgemm_tflops, d2d_gbs);
}

/* the cuBLAS products alone, in the scorer's batches: what the selection adds to */
static double
sgemm_only_ms(const std::vector<float> &X, const std::vector<float> &Y, int32_t nu, int32_t ni,
			  int k, int batches)
{
	int64_t		ld = ((int64_t) ni + 31) / 32 * 32;
	int64_t		B = (nu + batches - 1) / batches;
	float	   *dX,
			   *dY,
			   *dS;
	cublasHandle_t h;
	cudaEvent_t e0,
				e1;
	const float one = 1.0f,
				zero = 0.0f;
	std::vector<double> t;

	CK(cudaMalloc(&dX, sizeof(float) * X.size()));
	CK(cudaMalloc(&dY, sizeof(float) * Y.size()));
	CK(cudaMalloc(&dS, sizeof(float) * (size_t) B * ld));
	CK(cudaMemcpy(dX, X.data(), sizeof(float) * X.size(), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dY, Y.data(), sizeof(float) * Y.size(), cudaMemcpyHostToDevice));
	CB(cublasCreate(&h));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < 6; r++)
	{
		float		ms;

		CK(cudaEventRecord(e0));
		for (int64_t u0 = 0; u0 < nu; u0 += B)
		{
			int			nb = (int) (nu - u0 < B ? nu - u0 : B);

			CB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, ni, nb, k, &one, dY, k,
						   dX + (size_t) u0 * k, k, &zero, dS, (int) ld));
		}
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 1)
			t.push_back(ms);
	}
	cudaFree(dX);
	cudaFree(dY);
	cudaFree(dS);
	cublasDestroy(h);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return median(t);
}

static void
bench_ml20m(const char *outdir)
{
	const int32_t nu = 138493,
				ni = 26744;
	const int	k = 128,
				n = 10;
	dataset		d;
	std::vector<float> X((size_t) nu * k),
				Y((size_t) ni * k);
	gm_mf_params prm;
	gm_mf_data	md;
	gm_mf_result mr;
	problem		q;
	lists		G,
				C;
	std::vector<double> comp,
				xfer,
				wall;
	double		t0,
				cpu_s,
				sg_ms;

	printf("\n== ML-20M shape: %d users x %d items, factors %d, n = %d, seen (training) items excluded\n",
		   nu, ni, k, n);
	t0 = now();
	memset(&d, 0, sizeof(d));
	make_dataset(&d, nu, ni, 20000263, 2024);
	printf("data: %lld training nonzeros (seen), %lld holdout rows, built in %.1f s\n",
		   (long long) d.R.nnz, (long long) d.test.nnz, now() - t0);

	/* real factors: 15 iterations of implicit ALS on the GPU */
	t0 = now();
	gm_mf_params_defaults(&prm, GM_ALG_ALS_IMPLICIT);
	prm.backend = GM_BACKEND_CUDA;
	prm.factors = k;
	prm.iterations = 15;
	prm.regularization = 0.05f;
	prm.alpha = 2.0f;
	memset(&md, 0, sizeof(md));
	md.R = &d.R;
	md.Rt = &d.Rt;
	md.X = X.data();
	md.Y = Y.data();
	GM(gm_mf_train(&prm, &md, NULL, &mr, err, sizeof(err)));
	printf("factors: implicit ALS on %s, %d iterations, loss %.6f, %.2f s\n", mr.device_name,
		   mr.iterations_run, mr.final.loss, now() - t0);

	memset(&q.p, 0, sizeof(q.p));
	q.exact = 0;
	q.X = X;
	q.Y = Y;
	q.seen_ptr.assign(d.R.indptr, d.R.indptr + nu + 1);
	q.seen_idx.assign(d.R.indices, d.R.indices + d.R.nnz);
	q.p.n_users = nu;
	q.p.n_items = ni;
	q.p.k = k;
	q.p.n = n;
	q.p.threads = 0;
	problem_bind(&q);

	/* GPU: a warm-up (cuBLAS set-up, module loading), then 7 timed runs */
	G.alloc(nu, n);
	for (int r = 0; r < 8; r++)
	{
		double		w = now();

		std::fill(G.score.begin(), G.score.end(), NAN);
		GM(gm_score_topk(&q.p, GM_BACKEND_CUDA, NULL, &G.r, err, sizeof(err)));
		if (r == 0)
			continue;
		wall.push_back(now() - w);
		comp.push_back(G.r.compute_seconds);
		xfer.push_back(G.r.transfer_seconds);
	}
	sg_ms = sgemm_only_ms(X, Y, nu, ni, k, G.r.batches);

	/* CPU: every user, all cores */
	C.alloc(nu, n);
	t0 = now();
	GM(gm_score_topk(&q.p, GM_BACKEND_CPU, NULL, &C.r, err, sizeof(err)));
	cpu_s = now() - t0;

	{
		int64_t		swaps;
		int32_t		first_bad;
		int64_t		bad = compare_lists(&G, &C, nu, n, 2e-5, &swaps, &first_bad);
		std::vector<double> s(ni + 1);
		std::vector<int32_t> order;
		char		msg[512];
		const char *why = NULL;
		int			sample = 0;

		CHECK(bad == 0, "GPU lists equal the CPU scorer's for all %d users (scores within 2e-5 relative; %lld near-tie swaps)%s",
			  nu, (long long) swaps, bad ? "" : "");
		if (bad)
			printf("    %lld users differ; first: user %d\n", (long long) bad, first_bad);
		for (int32_t u = 0; u < nu && !why; u += 691, sample++)
			why = check_user_ref(&q, &G, u, s, order, msg, sizeof(msg));
		CHECK(why == NULL, "GPU lists of %d sampled users match the float64 reference%s%s", sample,
			  why ? ": " : "", why ? why : "");
	}

	{
		double		flops = 2.0 * nu * (double) ni * k;
		double		ld = ((double) ni + 31) / 32 * 32;
		double		bytes = 2.0 * nu * ld * 4;	/* S written by the products, read by the selection */
		double		flop_ms = flops / (sgemm_tflops * 1e12) * 1e3;
		double		byte_ms = bytes / (d2d_gbs * 1e9) * 1e3;
		double		gpu_ms = median(comp) * 1e3;

		printf("\n#### gpumf_recommend_all's scorer on the ML-20M shape (%d users x %d items, factors %d, n = %d, seen excluded)\n\n",
			   nu, ni, k, n);
		printf("| scorer | compute ms | transfers ms | total ms | batches | vs CuPy target (100 ms) |\n");
		printf("|---|---|---|---|---|---|\n");
		printf("| GPU: cuBLAS sgemm + select_topk (median of 7) | %.2f | %.2f | %.2f | %d | %s |\n",
			   gpu_ms, median(xfer) * 1e3, median(wall) * 1e3, G.r.batches,
			   gpu_ms <= 100 ? "within" : "OVER");
		printf("| of which the cuBLAS products alone (same batches) | %.2f | | | | |\n", sg_ms);
		printf("| CPU scorer, %s | %.1f | | %.1f | %d | |\n", C.r.device, C.r.compute_seconds * 1e3,
			   cpu_s * 1e3, C.r.batches);
		printf("\nfloor: %.2f ms = max(FLOPs %.0f G / %.1f TFLOP/s = %.2f ms, bytes %.2f GB (S written and read once) / %.0f GB/s = %.2f ms); products + selection at memory speed: %.2f ms; measured / floor %.2fx\n",
			   std::max(flop_ms, byte_ms), flops / 1e9, sgemm_tflops, flop_ms, bytes / 1e9, d2d_gbs,
			   byte_ms, flop_ms + byte_ms, gpu_ms / std::max(flop_ms, byte_ms));
		CHECK(gpu_ms <= 100.0, "GPU compute %.2f ms <= 100 ms", gpu_ms);
	}

	/* evaluation: the holdout as the test set, k = 10, one pass over all users */
	{
		gm_rank_metrics mg,
					mc;
		double		tg,
					tc,
					tg_metrics;
		lists		EG,
					EC;

		EG.alloc(nu, n);
		EC.alloc(nu, n);
		t0 = now();
		GM(gm_score_topk(&q.p, GM_BACKEND_CUDA, NULL, &EG.r, err, sizeof(err)));
		tg_metrics = now();
		GM(gm_rank_metrics_at_k(nu, ni, n, EG.idx.data(), n, EG.count.data(), &d.test, &mg, err,
								sizeof(err)));
		tg_metrics = now() - tg_metrics;
		tg = now() - t0;
		t0 = now();
		GM(gm_score_topk(&q.p, GM_BACKEND_CPU, NULL, &EC.r, err, sizeof(err)));
		GM(gm_rank_metrics_at_k(nu, ni, n, EC.idx.data(), n, EC.count.data(), &d.test, &mc, err,
								sizeof(err)));
		tc = now() - t0;
		printf("\n#### Evaluation at k = 10 on the holdout (%lld users with test items, %lld test rows)\n\n",
			   (long long) mg.users, (long long) mg.test_items);
		printf("| backend | seconds | of which GPU compute | precision | recall | map | ndcg | auc |\n");
		printf("|---|---|---|---|---|---|---|---|\n");
		printf("| GPU top-k + metrics | %.3f | %.3f | %.6f | %.6f | %.6f | %.6f | %.6f |\n", tg,
			   EG.r.compute_seconds, mg.precision, mg.recall, mg.map, mg.ndcg, mg.auc);
		printf("| CPU (%s) | %.3f | | %.6f | %.6f | %.6f | %.6f | %.6f |\n", EC.r.device, tc,
			   mc.precision, mc.recall, mc.map, mc.ndcg, mc.auc);
		printf("\n(metrics from the lists: %.3f s on the host)\n", tg_metrics);
		CHECK(fabs(mg.precision - mc.precision) < 1e-4 && fabs(mg.map - mc.map) < 1e-4 &&
			  fabs(mg.ndcg - mc.ndcg) < 1e-4 && fabs(mg.auc - mc.auc) < 1e-4 &&
			  fabs(mg.recall - mc.recall) < 1e-4 && mg.users == mc.users,
			  "evaluation on the GPU equals the CPU's (every metric within 1e-4; near ties may swap a hit)");
		CHECK(mg.precision > 0.02, "the planted structure is found: precision@10 %.4f > 0.02", mg.precision);
	}

	if (outdir)
	{
		int64_t		hdr[5] = {nu, ni, k, n, d.R.nnz};

		write_file(outdir, "shape.bin", hdr, sizeof(hdr));
		write_file(outdir, "X.bin", X.data(), sizeof(float) * X.size());
		write_file(outdir, "Y.bin", Y.data(), sizeof(float) * Y.size());
		write_file(outdir, "seen_ptr.bin", d.R.indptr, sizeof(int64_t) * (nu + 1));
		write_file(outdir, "seen_idx.bin", d.R.indices, sizeof(int32_t) * d.R.nnz);
		write_file(outdir, "gpu_idx.bin", G.idx.data(), sizeof(int32_t) * (size_t) nu * n);
		write_file(outdir, "gpu_score.bin", G.score.data(), sizeof(float) * (size_t) nu * n);
		{
			double		ms = median(comp) * 1e3;

			write_file(outdir, "gpu_ms.bin", &ms, sizeof(ms));
		}
		printf("\nwrote the problem and the GPU's lists to %s for score_cupy.py\n", outdir);
	}
	gm_csr_free(&d.R);
	gm_csr_free(&d.Rt);
	gm_csr_free(&d.test);
}

int
main(int argc, char **argv)
{
	const char *module = "cuda/gpumf_cuda.so";
	const char *outdir = NULL;
	int			quick = 0;
	char		name[128];

	for (int a = 1; a < argc; a++)
	{
		if (strcmp(argv[a], "--quick") == 0)
			quick = 1;
		else if (strcmp(argv[a], "--module") == 0 && a + 1 < argc)
			module = argv[++a];
		else if (strcmp(argv[a], "--out") == 0 && a + 1 < argc)
			outdir = argv[++a];
		else
		{
			fprintf(stderr, "usage: %s [--quick] [--module gpumf_cuda.so] [--out DIR]\n", argv[0]);
			return 2;
		}
	}
	{
		const char *env = getenv("GM_TEST_SEED");

		rng_state = env && *env ? strtoull(env, NULL, 10) :
			((uint64_t) time(NULL) * 1000003ULL) ^ (uint64_t) clock();
		printf("# seed %llu (replay with GM_TEST_SEED)\n", (unsigned long long) rng_state);
	}
	if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
	{
		printf("the CUDA module %s is not usable: %s\n", module, err);
		printf("0 passed, 1 failed\n");
		return 1;
	}
	printf("device: %s (module %s)\n", name, module);
	check_random(module);
	if (!quick)
	{
		measure_ceilings();
		bench_ml20m(outdir);
	}
	printf("\n%s\n", failures ? "SOME CHECKS FAILED" : "all checks passed");
	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
