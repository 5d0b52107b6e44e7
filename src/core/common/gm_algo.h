/*
 * gm_algo.h: how a matrix-factorization algorithm plugs into gpumf.
 *
 * Shared by src/core (C) and cuda/ (CUDA C++): plain C types, no other
 * includes than the error codes, no PostgreSQL.  An algorithm is one table of
 * operations per backend: the CPU table lives in the algorithm's file in
 * src/core (als_implicit.c, als_explicit.c, ccd.c), the CUDA table in its
 * .cu file in cuda/, handed out by the module's gm_cuda_algo_ops().  The
 * training loop (mf_loop.c) drives either table the same way:
 *
 *     create
 *     for each iteration:
 *         for s in 0 .. n_sweeps - 1:
 *             begin_sweep(s)            e.g. a Gram matrix, a rank-one residual update
 *             run(s, begin, end) ...    rows [begin, end) of the sweep, in slices sized
 *                                       by work so that cancellation is polled often;
 *                                       may be asynchronous
 *             end_sweep(s)
 *         sync; evaluate                loss (and training RMSE) after the iteration
 *     download; destroy                 (destroy also after any error or a cancel)
 *
 * A table with reset can start over on the same data with other parameters
 * (create ... download, reset, iterations ..., download, ... destroy): a
 * hyper-parameter search uploads the data once.
 *
 * When the structs below change, bump GM_ALGO_ABI_VERSION: the core refuses
 * a CUDA module built against another version.
 */
#ifndef GM_ALGO_H
#define GM_ALGO_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "gm_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GM_ALGO_ABI_VERSION 6

/*
 * Compressed sparse rows; columns sorted and unique within each row.
 *
 * A transpose not formed on the host (a lean upload, gm_mf_data): of is the
 * matrix this is the transpose of, indptr and nnz are set, indices and data
 * are NULL, and the entries are those of of's transpose in rows
 * [of_r0, of_r1) (a row view keeps n_rows and empties the other rows).
 * Only the CUDA module's upload takes such a matrix (gm_transposer builds
 * it there a slab at a time); of == NULL everywhere else.
 */
typedef struct gm_csr
{
	int32_t		n_rows;
	int32_t		n_cols;
	int64_t		nnz;
	int64_t    *indptr;			/* n_rows + 1 */
	int32_t    *indices;		/* nnz */
	float	   *data;			/* nnz */
	const struct gm_csr *of;	/* NULL, or see above */
	int32_t		of_r0;
	int32_t		of_r1;
} gm_csr;

typedef enum gm_backend_kind
{
	GM_BACKEND_CPU = 0,
	GM_BACKEND_CUDA = 1
} gm_backend_kind;

typedef enum gm_algorithm
{
	GM_ALG_ALS_IMPLICIT = 0,	/* SQL 'als': implicit feedback (Hu, Koren, Volinsky 2008;
								 * Rendle et al. 2022 with alpha0 and nu) */
	GM_ALG_ALS_EXPLICIT = 1,	/* SQL 'als_explicit': ratings, weighted-lambda ALS (Zhou 2008) */
	GM_ALG_CCD = 2,				/* SQL 'ccd': ratings, CCD++ (Yu et al. 2012) */
	GM_ALG_GRAPH_FILTER = 3,	/* SQL 'graph_filter': implicit feedback, a low-pass
								 * filter of the normalized item-item graph kept on
								 * its top eigenvectors (graph_filter.c) */
	GM_ALG_COUNT
} gm_algorithm;

/* Whether the CUDA module trains algorithm a on several GPUs (gm_mf_params.gpus). */
static inline int
gm_algorithm_multi_gpu(gm_algorithm a)
{
	return a == GM_ALG_ALS_IMPLICIT || a == GM_ALG_ALS_EXPLICIT || a == GM_ALG_CCD;
}

/*
 * Solvers of the implicit model's per-row systems A x = b (see
 * src/core/train/als_implicit.c for A and b).
 */
typedef enum gm_solver
{
	GM_SOLVER_CG = 0,			/* cg_steps conjugate-gradient steps, warm started */
	GM_SOLVER_BLOCK = 1,		/* block coordinate descent: exact block_size^2 solves
								 * of the coordinates block by block, block_sweeps
								 * passes (iALS++, Rendle et al. 2021) */
	GM_SOLVER_EXACT = 2,		/* exact k x k solve per row (Cholesky) */
	GM_SOLVER_COUNT
} gm_solver;

/* block_size 0 means this many coordinates per block (fewer when k is smaller) */
#define GM_DEFAULT_BLOCK_SIZE	32

/* tf32 = -1 (the default) puts CG's dense products on tensor cores from this many factors */
#define GM_TF32_MIN_FACTORS		512

/* Hyper-parameters.  Fields that do not apply to an algorithm are ignored by it. */
typedef struct gm_mf_params
{
	gm_algorithm algorithm;
	gm_backend_kind backend;
	int			factors;
	int			iterations;
	float		regularization;
	uint64_t	seed;
	int			threads;		/* CPU threads; <= 0 means one per core */
	double		tolerance;		/* stop once the loss changes by less than this, relatively (0: never) */

	/*
	 * implicit ALS: observed entries weigh c = 1 + alpha * value, unobserved
	 * ones alpha0; a row with n entries, against m rows on the other side,
	 * has the ridge regularization * (n + alpha0 * m)^nu
	 */
	float		alpha;
	int			cg_steps;
	float		alpha0;			/* weight of the unobserved entries (1: the 2008 form) */
	float		nu;				/* frequency-scaled regularisation exponent in [0, 1]
								 * (0: a fixed lambda) */
	gm_solver	solver;
	int			block_size;		/* GM_SOLVER_BLOCK: coordinates per block (0: the
								 * backend's default, gm_block_size) */
	int			block_sweeps;	/* GM_SOLVER_BLOCK: passes over the blocks per row */
	int			tf32;			/* GPU: products on tensor cores, TF32 inputs and FP32
								 * accumulation (1) or FP32 throughout (0): the block
								 * solver's b x b Grams, CG's dense products V G;
								 * -1: CG's products from GM_TF32_MIN_FACTORS factors
								 * (measured: 1.18x faster at 1024, same quality) */

	/* explicit models (ratings) */
	int			inner_iterations;	/* CCD++: updates of each feature per outer iteration */
	int			biases;			/* global mean and user/item biases on (1) or off (0) */

	/* the CUDA backend: GPUs a training spreads its rows over (0 or 1: one; gm_algorithm_multi_gpu) */
	int			gpus;
} gm_mf_params;

#define GM_MAX_GPUS		16

/* Functions below that the CUDA module's kernels call too */
#ifdef __CUDACC__
#define GM_HOST_DEVICE __host__ __device__
#else
#define GM_HOST_DEVICE
#endif

/* splitmix64's output function: a small, well-mixed, seekable generator. */
static inline GM_HOST_DEVICE uint64_t
gm_mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/*
 * The starting factors (gm_factors_init; drawn on the GPU by a lean
 * training): row r of side (0 users, 1 items) draws from its base, factor f
 * is a counter hash of it, uniform in [0, 0.01).  One definition for the
 * host and the GPU, so that both give the same floats.
 */
static inline GM_HOST_DEVICE uint64_t
gm_factor_row_base(uint64_t seed, int side, int64_t r)
{
	return gm_mix64(seed ^ ((uint64_t) side << 62)) ^
		gm_mix64((uint64_t) r * 0x632BE59BD9B4E019ULL + (uint64_t) side);
}

static inline GM_HOST_DEVICE float
gm_factor_start(uint64_t row_base, int f)
{
	uint64_t	z = gm_mix64(row_base + (uint64_t) f);

	return (float) ((z >> 40) * (1.0 / 16777216.0)) * 0.01f;
}

/* Does the GPU put its products on tensor cores (tf32, or its default)? */
static inline int
gm_use_tf32(const gm_mf_params *p)
{
	if (p->tf32 >= 0)
		return p->tf32 > 0;
	return p->solver == GM_SOLVER_CG && p->factors >= GM_TF32_MIN_FACTORS;
}

/*
 * The coordinates per block the block solver uses: block_size, or
 * GM_DEFAULT_BLOCK_SIZE for 0, at most factors (the exact solver: factors).
 */
static inline int
gm_block_size(const gm_mf_params *p)
{
	int			b = p->block_size > 0 ? p->block_size : GM_DEFAULT_BLOCK_SIZE;

	if (p->solver == GM_SOLVER_EXACT || b > p->factors)
		return p->factors;
	return b;
}

/*
 * The problem and the model.  R and Rt hold the values as read (ratings, or
 * implicit strengths; an algorithm that trains on something derived, such as
 * confidences, derives it in its own copy).  Factors are row-major, factors
 * columns; gm_mf_train initialises them (gm_factors_init), the biases to 0
 * and global_mean to the mean value when biases are on.
 */
typedef struct gm_mf_data
{
	const gm_csr *R;			/* n_users x n_items */
	const gm_csr *Rt;			/* its transpose, n_items x n_users */
	float	   *X;				/* n_users x factors (graph_filter: may be NULL, then
								 * download forms no user factors) */
	float	   *Y;				/* n_items x factors */
	float	   *user_bias;		/* n_users, or NULL when biases are off */
	float	   *item_bias;		/* n_items, or NULL */
	double		global_mean;	/* 0 when biases are off */
	float	   *filter;			/* graph_filter: download writes the filter of each
								 * factor column here (factors floats) when not NULL */

	/*
	 * Lean (the CUDA module's implicit ALS only; gm_mf_train refuses it
	 * elsewhere): the module draws the starting factors itself (the values
	 * gm_factors_init would give) and X and Y are first written by download,
	 * so their pages are not touched before; Rt may be a transpose not formed
	 * (gm_csr's of).  After the upload gm_mf_train calls uploaded(arg), so
	 * that the caller may free what only the upload read (R's values); R's
	 * values are not read after that call.
	 */
	int			start_on_device;
	void		(*uploaded) (void *arg);
	void	   *uploaded_arg;
} gm_mf_data;

/*
 * Hooks the caller gives the trainer.  should_stop is polled between slices
 * of work (every few milliseconds) and inside long CPU steps; when it returns
 * non-zero the trainer frees what it holds and returns GM_ECANCELED.
 * on_iteration must not longjmp (the PostgreSQL layer catches its errors).
 */
typedef struct gm_callbacks
{
	int			(*should_stop) (void *arg);
	void		(*on_iteration) (void *arg, int iteration, double loss,
								 double rmse, double seconds);
	void	   *arg;
} gm_callbacks;

/* What evaluate reports after an iteration. */
typedef struct gm_mf_metrics
{
	double		loss;			/* the algorithm's objective, normalised as it documents */
	double		rmse;			/* training RMSE (explicit models); NaN for implicit ones */
} gm_mf_metrics;

/* One sweep over the rows of a side, as begin_sweep describes it. */
typedef struct gm_sweep
{
	int32_t		n_rows;			/* run() is called on [begin, end) slices of 0 .. n_rows */
	const int64_t *indptr;		/* host row pointers giving each row's nonzeros, or NULL */
	double		row_work;		/* cost of a row, in multiply-adds (for slicing) */
	double		nnz_work;		/* cost of a nonzero */
	int32_t		max_rows;		/* rows a slice may have at most (0: no limit) */
} gm_sweep;

typedef struct gm_algo_ops
{
	const char *name;			/* "cpu" or "cuda" */
	/* Take the problem (upload it), using p; device gets the device's name. */
	int			(*create) (void **h, const gm_mf_data *d, const gm_mf_params *p,
						   const gm_callbacks *cb, char *device, size_t devlen,
						   char *err, size_t errlen);
	int			(*n_sweeps) (void *h);
	int			(*begin_sweep) (void *h, int s, gm_sweep *sw, char *err, size_t errlen);
	int			(*run) (void *h, int s, int32_t begin, int32_t end, char *err, size_t errlen);
	/* optional (NULL: nothing to finish) */
	int			(*end_sweep) (void *h, int s, char *err, size_t errlen);
	/* wait for queued work; reports asynchronous errors (NULL: nothing is queued) */
	int			(*sync) (void *h, char *err, size_t errlen);
	int			(*evaluate) (void *h, gm_mf_metrics *m, char *err, size_t errlen);
	/* copy the model (factors, biases) back into d's arrays */
	int			(*download) (void *h, gm_mf_data *d, char *err, size_t errlen);
	/* free everything; safe on NULL and after errors */
	void		(*destroy) (void *h);

	/*
	 * Optional (NULL: the loop destroys and creates instead).  Start over on
	 * the data create took, with parameters p (any factors; same algorithm)
	 * and the starting factors in d->X and d->Y, keeping what depends only
	 * on the data (on a GPU: the uploaded matrices), so that many trainings
	 * of one dataset (a hyper-parameter search) upload it once.  On an error
	 * the handle may only be destroyed.
	 */
	int			(*reset) (void *h, const gm_mf_data *d, const gm_mf_params *p,
						  char *err, size_t errlen);

	/*
	 * Optional.  The iteration about to run is the training's last, and
	 * nothing reads or writes d->X and d->Y on the host before download: a
	 * side's factors may be copied into d as soon as its last sweep is done,
	 * while the device works on (download copies what is left).  1: it
	 * will, and every page of d->X and d->Y is touched before download
	 * returns (the caller need not prefault them); 0: download copies all.
	 */
	int			(*final_iteration) (void *h, gm_mf_data *d);
} gm_algo_ops;

/*
 * What the CUDA module runs on device 0 (the module's gm_cuda_device_caps):
 * the card, the code the driver loaded for it, and which architecture-
 * specific fast paths that code and the card's shared memory allow.  Each
 * fast path has a fallback: the same arithmetic done another way (four
 * float atomics, fewer warps a block, cuSOLVER), or for TF32 the FP32 that
 * it approximates.
 */
#define GM_FAST_TF32_TENSOR_CORES	0x1 /* TF32 wmma for the block solver's Grams
										 * (tf32 on; code for 8.0 and newer) */
#define GM_FAST_VECTOR_ATOMICS		0x2 /* 16-byte float4 atomicAdd in the CG
										 * kernel (code for 9.0 and newer) */
#define GM_FAST_LARGE_SMEM			0x4 /* every kernel's widest shared-memory
										 * shape fits (160 KB a block: 8.0, 9.0,
										 * 10.0) */

typedef struct gm_gpu_caps
{
	int			cc;				/* compute capability, 10 major + minor (90: 9.0) */
	int			code_arch;		/* the architecture the running kernels were
								 * compiled for, 10 major + minor (75 when the
								 * driver compiled compute_75 PTX for the card) */
	int			smem_optin;		/* shared memory a block may use, bytes */
	int			sms;			/* multiprocessors */
	unsigned	fast;			/* GM_FAST_* */
	char		archs[96];		/* what the module was built for, e.g.
								 * "sm_75 sm_80 ... sm_120 compute_120" */
} gm_gpu_caps;

/*
 * Factors live on the GPU row-major with the row length padded to kp, a
 * multiple of 32 (of 128 above 256); padded columns stay exactly zero.
 * Returns kp, or 0 if k is out of range.
 */
#define GM_MAXK			1024

static inline int
gm_padded_k(int k)
{
	if (k < 1 || k > GM_MAXK)
		return 0;
	if (k <= 256)
		return (k + 31) / 32 * 32;
	return (k + 127) / 128 * 128;
}

/* block widths the GPU's block solver supports: 32 and 64 coordinates */
#define GM_BLOCK_MIN	32
#define GM_BLOCK_MAX	64

/*
 * The block width the GPU uses for p at padded width kp: the exact solver
 * is one block (kp <= 64, else 0: not available); the block solver takes
 * 64 when asked for more than 32 and kp is a multiple of 64, else 32.
 * Returns -1 for CG.
 */
static inline int
gm_gpu_block_width(const gm_mf_params *p, int kp)
{
	if (p->solver == GM_SOLVER_CG)
		return -1;
	if (p->solver == GM_SOLVER_EXACT)
		return kp <= GM_BLOCK_MAX ? kp : 0;
	if (gm_block_size(p) >= p->factors && kp <= GM_BLOCK_MAX)
		return kp;
	return gm_block_size(p) > GM_BLOCK_MIN && kp % GM_BLOCK_MAX == 0 ? GM_BLOCK_MAX : GM_BLOCK_MIN;
}

/*
 * Several GPUs: a side's rows are cut into shares of about equal work, a
 * row weighing as many entries as its own work costs (the GPU's per-row and
 * per-entry costs of the sweep: implicit ALS's CG k^2 against k a step, the
 * block solver's b (2 kp + b^2 / 3) against b (b + 2); explicit ALS's
 * kk^3 / 3 + kk^2 against kk (kk + 1) / 2 + kk; CCD++'s pack and update of
 * a row against the read, update and write of an entry, about one); 0
 * for the other algorithms (entries alone).
 */
static inline double
gm_gpu_share_row_weight(const gm_mf_params *p)
{
	double		k = p->factors;

	if (p->algorithm == GM_ALG_CCD)
		return 1.0;
	if (p->algorithm == GM_ALG_ALS_IMPLICIT)
	{
		int			kp = gm_padded_k(p->factors),
					b = gm_gpu_block_width(p, kp);

		if (b <= 0)
			return k;
		return (2.0 * kp + (double) b * b / 3.0) / (b + 2.0);
	}
	if (p->algorithm == GM_ALG_ALS_EXPLICIT)
	{
		double		kk = k + (p->biases ? 1 : 0);

		return (kk * kk * kk / 3.0 + kk * kk) / (kk * (kk + 1) / 2.0 + kk);
	}
	return 0.0;
}

/*
 * Rows of the CUDA implicit ALS solver's work arrays (CG: R, P, AP and rs;
 * block: H, D and the scratch of rows longer than a chunk; the loss: X G),
 * and so the rows a slice may have (gm_sweep.max_rows): enough that the
 * arrays take about GM_ALS_WORK_BYTES however many rows the sides have,
 * never fewer than GM_ALS_WORK_MIN_ROWS (a slice that fills the GPU).  The
 * block solver counts the worst case of its scratch, b^2 + b floats a row.
 * kp: the padded factors; block: the block width, 0 for CG.
 */
#define GM_ALS_WORK_BYTES		((int64_t) 512 << 20)
#define GM_ALS_WORK_MIN_ROWS	16384

static inline int32_t
gm_als_work_rows(int64_t nmax, int kp, int block)
{
	int64_t		per = block > 0 ?
		(int64_t) ((2 * block > kp ? 2 * block : kp) + block * block + block) * 4 :
		(int64_t) (3 * kp + 1) * 4;
	int64_t		w = GM_ALS_WORK_BYTES / (per > 0 ? per : 1);

	if (w < GM_ALS_WORK_MIN_ROWS)
		w = GM_ALS_WORK_MIN_ROWS;
	if (w > nmax)
		w = nmax;
	return (int32_t) (w > 0 ? w : 1);
}

#ifdef __cplusplus
}
#endif

/*
 * graph_filter (src/core/train/graph_filter.c, cuda/train/graph_filter.cu):
 * ChebyCF's low-pass filter (Kim et al., SIGIR 2025) of the normalized
 * item-item graph P = Rn^T Rn, Rn = D_U^-1/2 R D_I^-1/2, plus an ideal
 * low-pass on its top GM_GF_IDEAL eigenvectors (weight p->alpha), kept on
 * the top `factors` eigenvectors V of P, so that the model is a
 * factorization: item i's factors q_i = d_i^beta V_i, user u's
 * p_u = sum over u's items of d_i^-2beta (q_i o h), h the filter of each
 * column.  Constants chosen on Gowalla's validation split
 * (test/bench/quality/graphfilter).
 */
#define GM_GF_MAXK			8192	/* factors at most (serving keeps up to this) */
#define GM_GF_BETA			0.4		/* degree exponent of the item factors */
#define GM_GF_IDEAL			512		/* columns the ideal low-pass adds alpha to */
#define GM_GF_ORDER			8		/* Chebyshev order (phi 1.5 plateau target) */
#define GM_GF_SHIFT			1e-7	/* CholeskyQR's first shift, of the Gram matrix's largest
										 * diagonal element; 100 and 10000 times that when the
										 * factorization fails (a rank-deficient subspace, whose
										 * float32 Gram rounds below zero) */
#define GM_GF_DEFAULT_FACTORS	1024
#define GM_GF_DEFAULT_ITERATIONS	6
#define GM_GF_DEFAULT_ALPHA		0.2f

/* Columns of the subspace iteration for d factors and n items: d + d/4, at most n. */
static inline int64_t
gm_gf_columns(int d, int64_t n_items)
{
	int64_t		l = (int64_t) d + ((int64_t) d + 3) / 4;

	return l < n_items ? l : n_items;
}

/*
 * The filter of the column with eigenvalue lambda (in [0, 1]) at rank j
 * (0: the largest): sum_k c_k T_k(1 - 2 lambda), plus alpha for j <
 * GM_GF_IDEAL.  c: ChebyCF's interpolation of the plateau 0.5 -/+ 0.5|x|^1.5
 * at order 8.
 */
static inline double
gm_gf_filter(double lambda, int j, double alpha)
{
	static const double c[GM_GF_ORDER + 1] = {
		0.5, -0.49267887685291178, 0.0, -0.032331615074619097, 0.0,
		0.021115259731685501, 0.0, -0.0011070975442090249, 0.0
	};
	double		x = 1.0 - 2.0 * lambda,
				t0 = 1.0,
				t1 = x,
				h = c[0] + c[1] * x;

	for (int k = 2; k <= GM_GF_ORDER; k++)
	{
		double		t2 = 2.0 * x * t1 - t0;

		h += c[k] * t2;
		t0 = t1;
		t1 = t2;
	}
	return h + (j < GM_GF_IDEAL ? alpha : 0.0);
}

/*
 * The filter of factor column col from its Rayleigh-Ritz value w (an
 * eigenvalue of P, clamped to [0, 1] against rounding).
 */
static inline float
gm_gf_column_filter(double w, int col, double alpha)
{
	double		lam = w >= 0 ? (w > 1 ? 1.0 : w) : 0.0;	/* NaN: 0 */

	return (float) gm_gf_filter(lam, col, alpha);
}

/* The loss: the share of ||Rn||_F^2 outside span(Z), from y2 = ||Rn Z||_F^2. */
static inline double
gm_gf_loss(double y2, double frob2)
{
	double		loss = frob2 > 0 ? 1.0 - y2 / frob2 : 0.0;

	return loss > 0 ? loss : 0.0;	/* rounding: span(Z) holds all of it */
}

/*
 * The starting subspace: a standard normal value for (row, column), seeded.
 * A pure function of its arguments, so the CUDA module draws it on the GPU.
 * The values match the host's up to CUDA's double-precision log and cos
 * (within 1 and 2 ulp of exact, like the C library's): a value may differ
 * by one float ulp where the double lands on a rounding boundary.
 */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float
gm_gf_gauss(uint64_t seed, int64_t row, int64_t col)
{
	uint64_t	z = seed ^ ((uint64_t) row * 0x9E3779B97F4A7C15ULL) ^
		((uint64_t) col * 0xC2B2AE3D27D4EB4FULL);
	uint64_t	a,
				b;
	double		u1,
				u2;

	z += 0x9E3779B97F4A7C15ULL;
	a = z;
	a = (a ^ (a >> 30)) * 0xBF58476D1CE4E5B9ULL;
	a = (a ^ (a >> 27)) * 0x94D049BB133111EBULL;
	a ^= a >> 31;
	z += 0x9E3779B97F4A7C15ULL;
	b = z;
	b = (b ^ (b >> 30)) * 0xBF58476D1CE4E5B9ULL;
	b = (b ^ (b >> 27)) * 0x94D049BB133111EBULL;
	b ^= b >> 31;
	u1 = ((double) (a >> 11) + 1.0) * (1.0 / 9007199254740993.0);
	u2 = (double) (b >> 11) * (1.0 / 9007199254740992.0);
	return (float) (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif							/* GM_ALGO_H */
