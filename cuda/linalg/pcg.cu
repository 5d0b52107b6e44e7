/*
 * pcg.cu: the Jacobi-preconditioned conjugate gradient on the GPU
 * (gm_linalg_ops.cg on a handle of sparse_handle.cu); its products are
 * spmv_kernels.cuh's SpMV in CG mode, or cuSPARSE's (spmv.cu).
 *
 * CG: the scaled system Â ŷ = b̂ (Â = S A S, S = D^-1/2 for Jacobi), two
 * kernels per iteration, no host round trip (pcg_impl.h has the algebra):
 *
 *   K1  q = Â p and the dots; the last block computes alpha, beta on the device
 *   K2  y += alpha p; r -= alpha q; p = r + beta p; r.r (and every m-th
 *       iteration |S^-1 r|^2, setting a "done" flag below the tolerance)
 *
 * In the diagonal layout the iteration is one fused kernel instead
 * (cg_fused_dia): K2 of iteration k and K1 of k + 1 in one pass, the
 * neighbours' new p formed on the fly, r, p, q double-buffered, 8 vector
 * words a row instead of 10; with Jacobi, Â's diagonal (all ones) is not
 * stored.  A first product (fused_first) follows each (re)start.
 *
 * A batch of m iterations is one CUDA graph; two batches are in flight while
 * the host reads the status of the older one (pinned memory), so the host
 * never waits on an iteration.  Once done, later kernels return at once.
 * The host then checks the true residual b - A x in float64 (float64 x, the
 * original values) and restarts from it if it is not below the tolerance.
 */
#include "spmv_kernels.cuh"

namespace gm_sparse
{

/*
 * The CG's device memory.  The vectors, Â's values, the pinned status and
 * the events are kept in the handle and reused by later solves (a solve of
 * a small system is otherwise mostly allocation); the graph and the
 * cuSPARSE descriptor belong to one solve (CgSolveGuard releases them).
 */
struct CgWork
{
	double	   *b = nullptr,
			   *x = nullptr,
			   *s = nullptr,
			   *dsq = nullptr,
			   *rt = nullptr;
	void	   *y = nullptr,
			   *r = nullptr,
			   *p = nullptr,
			   *q = nullptr,
			   *vh = nullptr,	/* Â's values: CSR (nnz + PAD) */
			   *vdia = nullptr,	/* or the diagonal layout (ndiag x npad) */
			   *r2 = nullptr,	/* the fused iteration's second r, p, q */
			   *p2 = nullptr,
			   *q2 = nullptr;
	CgState    *status = nullptr;	/* pinned, 2 slots */
	cudaEvent_t ev[2] = {nullptr, nullptr};
	cudaGraph_t graph = nullptr;
	cudaGraphExec_t exec = nullptr;
	cusparseSpMatDescr_t mat = nullptr;
	cudaStream_t stream = nullptr;

	bool		ready = false;	/* allocated and zeroed */

	void		release_solve()
	{
		if (stream)
			cudaStreamSynchronize(stream);
		if (exec)
			cudaGraphExecDestroy(exec);
		if (graph)
			cudaGraphDestroy(graph);
		if (mat)
			cusparseDestroySpMat(mat);
		exec = nullptr;
		graph = nullptr;
		mat = nullptr;
	}

	~CgWork()
	{
		release_solve();
		for (auto &e : ev)
			if (e)
				cudaEventDestroy(e);
		if (status)
			cudaFreeHost(status);
		for (void *ptr : {(void *) b, (void *) x, (void *) s, (void *) dsq, (void *) rt, y, r, p, q, vh, vdia, r2, p2, q2})
			if (ptr)
				gm_dev_free(ptr);
	}
};

}								/* namespace gm_sparse */

namespace
{

/* ------------------------------------------------------------ kernels */

/* r' = r - alpha q, p' = r' + beta p: one expression wherever it is formed */
template <typename T>
__device__ __forceinline__ void
cg_step(T r, T q, T p, T a, T b, T &rn, T &pn)
{
	rn = fma(-a, q, r);
	pn = fma(b, p, rn);
}

/*
 * One fused CG iteration in the diagonal layout (the update of iteration k
 * and the product of iteration k + 1 in one pass; pcg_impl.h's algebra):
 *
 *   y += alpha p; r' = r - alpha q; p' = r' + beta p      (own rows)
 *   q' = Â p', p' of the neighbours formed on the fly from their r, q, p
 *   p'.q', r'.q', q'.q', r'.r' (and |S^-1 r'|^2 with CHECK)
 *
 * r, p, q are double-buffered (index st->iter & 1 read, the other written),
 * because a block forms its neighbours' p' from their old values while
 * their own block writes the new ones; cg_step makes both bit-identical.
 * The last block counts the iteration, checks as cg_update does, and sets
 * alpha and beta for the next.  Eight vector words a row instead of ten,
 * and one grid-wide sum an iteration instead of two.
 */
template <typename T, bool UNIT, bool CHECK, int R>
__global__ void __launch_bounds__(TPB)
cg_fused_dia(int n, int64_t npad, int ndiag, const int *__restrict__ off,
			 const T *__restrict__ vals, T *__restrict__ y, T *r0, T *r1, T *p0, T *p1,
			 T *q0, T *q1, const double *__restrict__ dsq, CgState *st, double *partials)
{
	/* four loads a neighbour (value, r, q, p): half spmv_dia's diagonals in flight */
	constexpr int G = DIA_GROUP / R / 2 > 0 ? DIA_GROUP / R / 2 : 1;
	__shared__ int soff[DIA_MAX];
	__shared__ double red[5 * (TPB / 32)];
	__shared__ bool am_last;
	double		acc[5] = {0, 0, 0, 0, 0},
				out[5];

	if (st->done)
		return;

	const int	par = st->iter & 1;
	const T    *__restrict__ ro = par ? r1 : r0;
	const T    *__restrict__ po = par ? p1 : p0;
	const T    *__restrict__ qo = par ? q1 : q0;
	T		   *__restrict__ rn = par ? r0 : r1;
	T		   *__restrict__ pn = par ? p0 : p1;
	T		   *__restrict__ qn = par ? q0 : q1;
	const T		a = (T) st->alpha,
				b = (T) st->beta;

	if (threadIdx.x < ndiag)
		soff[threadIdx.x] = off[threadIdx.x];
	__syncthreads();
	for (int64_t base = blockIdx.x * (int64_t) (R * TPB) + threadIdx.x; base < n;
		 base += (int64_t) gridDim.x * (R * TPB))
	{
		T			s[R],
					rni[R],
					pni[R];

#pragma unroll
		for (int u = 0; u < R; u++)
		{
			const int64_t i = base + u * TPB;

			rni[u] = pni[u] = s[u] = 0;
			if (i < n)
			{
				const T		pi = po[i];

				cg_step(ro[i], qo[i], pi, a, b, rni[u], pni[u]);
				y[i] = fma(a, pi, y[i]);
				rn[i] = rni[u];
				pn[i] = pni[u];
				if (UNIT)
					s[u] = pni[u];
			}
		}
		dia_accumulate<T, R, G>(base, n, npad, ndiag, soff, vals, s,
								[&](int64_t j, bool in) {
									T			rj = 0,
												qj = 0,
												pjo = 0,
												rnj,
												pnj;

									if (in)
									{
										rj = ro[j];
										qj = qo[j];
										pjo = po[j];
									}
									cg_step(rj, qj, pjo, a, b, rnj, pnj);
									return pnj;
								});
#pragma unroll
		for (int u = 0; u < R; u++)
		{
			const int64_t i = base + u * TPB;

			if (i >= n)
				break;

			const double qi = (double) s[u],
						ri = (double) rni[u];

			qn[i] = s[u];
			acc[0] += (double) pni[u] * qi;
			acc[1] += ri * qi;
			acc[2] += qi * qi;
			acc[3] += ri * ri;
			if (CHECK)
			{
				const double w = dsq[i] * ri;

				acc[4] += w * w;
			}
		}
	}
	if (grid_sum<5>(acc, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
	{
		end_iteration<CHECK>(st, out[3], out[4]);
		if (!st->done)
			cg_scalars(st, out[0], out[1], out[2]);
	}
}

/* p.q, r.q, q.q and the scalars: the CG step after cuSPARSE's SpMV */
template <typename T>
__global__ void __launch_bounds__(TPB)
cg_dots(int64_t n, const T *__restrict__ p, const T *__restrict__ r,
		const T *__restrict__ q, CgState *st, double *partials)
{
	__shared__ double red[3 * (TPB / 32)];
	__shared__ bool am_last;
	double		dots[3] = {0, 0, 0};

	if (st->done)
		return;
	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
		dots_add(dots, (double) p[i], (double) r[i], (double) q[i]);
	dots_close(dots, st, partials, red, &am_last);
}

/*
 * K2: y += alpha p; r -= alpha q; p = r + beta p; r.r; with CHECK also
 * |S^-1 r|^2 (dsq = 1/s).  n4: vectors of 4 (the arrays are padded to a
 * multiple of 4 with zeros).  The last block counts the iteration and sets
 * done when the check passes, r is 0, or the iterations are spent.
 */
template <typename T, bool CHECK>
__global__ void __launch_bounds__(TPB, GM_MIN_BLOCKS(TPB, 6))
cg_update(int64_t n4, T *__restrict__ y, T *__restrict__ r, T *__restrict__ p,
		  const T *__restrict__ q, const double *__restrict__ dsq, CgState *st,
		  double *partials)
{
	__shared__ double red[2 * (TPB / 32)];
	__shared__ bool am_last;
	double		v[2] = {0, 0},
				out[2];

	if (st->done)
		return;

	const T		a = (T) st->alpha,
				b = (T) st->beta;

	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n4;
		 i += (int64_t) gridDim.x * TPB)
	{
		T			pv[4],
					rv[4],
					qv[4],
					yv[4];

		load4(p + 4 * i, pv);
		load4(r + 4 * i, rv);
		load4(q + 4 * i, qv);
		load4(y + 4 * i, yv);
#pragma unroll
		for (int u = 0; u < 4; u++)
		{
			yv[u] += a * pv[u];
			rv[u] -= a * qv[u];
			pv[u] = rv[u] + b * pv[u];
			v[0] += (double) rv[u] * (double) rv[u];
		}
		if (CHECK)
		{
			double		dv[4];

			load4(dsq + 4 * i, dv);
#pragma unroll
			for (int u = 0; u < 4; u++)
			{
				double		w = dv[u] * (double) rv[u];

				v[1] += w * w;
			}
		}
		store4(y + 4 * i, yv);
		store4(r + 4 * i, rv);
		store4(p + 4 * i, pv);
	}
	if (grid_sum<2>(v, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
		end_iteration<CHECK>(st, out[0], out[1]);
}

/* s = 1/sqrt(A_ii) (Jacobi) or 1, dsq = 1/s; a warp per row */
template <typename OT>
__global__ void __launch_bounds__(TPB)
jacobi_scaling(int n, int jacobi, const OT *__restrict__ indptr,
			   const int *__restrict__ indices, const double *__restrict__ vals,
			   double *s, double *dsq)
{
	const int	lane = threadIdx.x & 31;

	for (int64_t i = (blockIdx.x * (int64_t) TPB + threadIdx.x) >> 5; i < n;
		 i += ((int64_t) gridDim.x * TPB) >> 5)
	{
		double		d = 0.0;

		if (jacobi)
		{
			for (OT e = indptr[i] + lane; e < indptr[i + 1]; e += 32)
				if (indices[e] == i)
					d += vals[e];
			d = warp_sum(d);
		}
		if (lane == 0)
		{
			double		sq = jacobi ? sqrt(d) : 1.0;

			s[i] = 1.0 / sq;	/* d <= 0 gives NaN or Inf: a breakdown later */
			dsq[i] = sq;
		}
	}
}

/* vh = s_i v_ij s_j in the working precision; a warp per row */
template <typename T, typename OT>
__global__ void __launch_bounds__(TPB)
scale_values(int n, const OT *__restrict__ indptr, const int *__restrict__ indices,
			 const double *__restrict__ vals, const double *__restrict__ s, T *vh)
{
	const int	lane = threadIdx.x & 31;

	for (int64_t i = (blockIdx.x * (int64_t) TPB + threadIdx.x) >> 5; i < n;
		 i += ((int64_t) gridDim.x * TPB) >> 5)
	{
		const double si = s[i];

		for (OT e = indptr[i] + lane; e < indptr[i + 1]; e += 32)
			vh[e] = (T) (vals[e] * si * s[indices[e]]);
	}
}

/* rt = b - rt (rt held A x); st->tmp = |rt|^2 */
__global__ void __launch_bounds__(TPB)
residual_from_ax(int64_t n, const double *__restrict__ b, double *rt, CgState *st,
				 double *partials)
{
	__shared__ double red[TPB / 32];
	__shared__ bool am_last;
	double		v[1] = {0},
				out[1];

	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
	{
		double		ri = b[i] - rt[i];

		rt[i] = ri;
		v[0] += ri * ri;
	}
	if (grid_sum<1>(v, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
		st->tmp = out[0];
}

/* (re)start: r = S rt in the working precision, p = r, y = 0, rr = r.r, done = 0 */
template <typename T>
__global__ void __launch_bounds__(TPB)
cg_restart(int64_t n, const double *__restrict__ s, const double *__restrict__ rt,
		   T *r, T *p, T *y, CgState *st, double *partials)
{
	__shared__ double red[TPB / 32];
	__shared__ bool am_last;
	double		v[1] = {0},
				out[1];

	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
	{
		T			ri = (T) (s[i] * rt[i]);

		r[i] = ri;
		p[i] = ri;
		y[i] = 0;
		v[0] += (double) ri * (double) ri;
	}
	if (grid_sum<1>(v, partials, &st->ticket, out, red, &am_last) && threadIdx.x == 0)
	{
		st->rr = out[0];
		st->done = 0;
		st->reason = 0;
	}
}

/* x += S y; y = 0 */
template <typename T>
__global__ void __launch_bounds__(TPB)
cg_fold(int64_t n, const double *__restrict__ s, T *y, double *x)
{
	for (int64_t i = blockIdx.x * (int64_t) TPB + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * TPB)
	{
		x[i] += s[i] * (double) y[i];
		y[i] = 0;
	}
}

/* ------------------------------------------------------------ host side */

/*
 * grid of the update kernel: one wave of resident blocks (each block's
 * closing reduction is paid once, not once per wave)
 */
template <typename T>
int
update_grid(const SparseHandle *h)
{
	static int	per_sm = 0;

	if (per_sm == 0 &&
		(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cg_update<T, true>, TPB, 0)
		 != cudaSuccess || per_sm < 1))
		per_sm = 1;
	return (int) std::max<int64_t>(1, std::min<int64_t>((h->n4 + TPB - 1) / TPB,
														  (int64_t) per_sm * h->nsm));
}

/* releases one solve's graph and descriptor on every way out */
struct CgSolveGuard
{
	CgWork	   *w;

	~CgSolveGuard()
	{
		w->release_solve();
	}
};

/* grid of the fused iteration: one wave of resident blocks */
template <typename T, bool UNIT, bool CHECK, int R>
int
fused_grid(const SparseHandle *h)
{
	static int	per_sm = 0;

	if (per_sm == 0 &&
		(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cg_fused_dia<T, UNIT, CHECK, R>,
													   TPB, 0) != cudaSuccess || per_sm < 1))
		per_sm = 1;
	return (int) std::max<int64_t>(1, std::min<int64_t>((h->n + R * TPB - 1) / (R * TPB),
														  (int64_t) per_sm * h->nsm));
}

template <typename T, bool UNIT, bool CHECK, int R>
void
launch_fused_r(SparseHandle *h, CgWork &w)
{
	cg_fused_dia<T, UNIT, CHECK, R><<<fused_grid<T, UNIT, CHECK, R>(h), TPB, 0, h->stream>>>(
		h->n, h->npad, UNIT ? h->ndiag_nz : h->ndiag, UNIT ? h->dia_off_nz : h->dia_off,
		(const T *) w.vdia, (T *) w.y, (T *) w.r, (T *) w.r2, (T *) w.p, (T *) w.p2,
		(T *) w.q, (T *) w.q2, w.dsq, h->st, h->partials);
}

template <typename T, bool UNIT, bool CHECK>
void
launch_fused(SparseHandle *h, CgWork &w)
{
	if (h->fused_rows == 4)
		launch_fused_r<T, UNIT, CHECK, 4>(h, w);
	else if (h->fused_rows == 2)
		launch_fused_r<T, UNIT, CHECK, 2>(h, w);
	else
		launch_fused_r<T, UNIT, CHECK, 1>(h, w);
}

/* the launch shapes of the fused iteration, asked for outside a graph capture */
template <typename T>
void
fused_grids(const SparseHandle *h)
{
	(void) fused_grid<T, true, true, 1>(h);
	(void) fused_grid<T, true, true, 2>(h);
	(void) fused_grid<T, true, true, 4>(h);
	(void) fused_grid<T, true, false, 1>(h);
	(void) fused_grid<T, true, false, 2>(h);
	(void) fused_grid<T, true, false, 4>(h);
	(void) fused_grid<T, false, true, 1>(h);
	(void) fused_grid<T, false, true, 2>(h);
	(void) fused_grid<T, false, true, 4>(h);
	(void) fused_grid<T, false, false, 1>(h);
	(void) fused_grid<T, false, false, 2>(h);
	(void) fused_grid<T, false, false, 4>(h);
}

/*
 * The fused iteration's start (after cg_restart): q = Â p and the scalars,
 * on the buffers of index cur = st.iter & 1
 */
template <typename T>
int
fused_first(SparseHandle *h, CgWork &w, int dia, int cur, char *err, size_t errlen)
{
	const T    *p = (const T *) (cur ? w.p2 : w.p),
			   *r = (const T *) (cur ? w.r2 : w.r);
	T		   *q = (T *) (cur ? w.q2 : w.q);

	if (dia == 2)
		launch_dia<T, true, true>(h, h->ndiag_nz, h->dia_off_nz, (const T *) w.vdia, p, q, r);
	else
		launch_dia<T, true, false>(h, h->ndiag, h->dia_off, (const T *) w.vdia, p, q, r);
	GM_CHECK_LAUNCH();
	return GM_OK;
}

/*
 * The iterations of one batch (m of them, the last with the check), queued
 * on the stream.  fused: m fused iterations (cg_fused_dia; the diagonal
 * layout, after fused_first); else an SpMV with its dots and cg_update each.
 */
template <typename T, typename OT>
int
enqueue_batch(SparseHandle *h, CgWork &w, int m, bool use_cusparse, cusparseSpMVAlg_t alg,
			  int dia, bool fused, char *err, size_t errlen)
{
	const int	g1 = spmv_grid<T, OT, true>(h),
				g2 = update_grid<T>(h);

	if (fused)
	{
		for (int it = 0; it < m; it++)
		{
			if (dia == 2 && it == m - 1)
				launch_fused<T, true, true>(h, w);
			else if (dia == 2)
				launch_fused<T, true, false>(h, w);
			else if (it == m - 1)
				launch_fused<T, false, true>(h, w);
			else
				launch_fused<T, false, false>(h, w);
			GM_CHECK_LAUNCH();
		}
		return GM_OK;
	}
	for (int it = 0; it < m; it++)
	{
		if (dia == 2)
			launch_dia<T, true, true>(h, h->ndiag_nz, h->dia_off_nz, (const T *) w.vdia,
									  (const T *) w.p, (T *) w.q, (const T *) w.r);
		else if (dia == 1)
			launch_dia<T, true, false>(h, h->ndiag, h->dia_off, (const T *) w.vdia,
									   (const T *) w.p, (T *) w.q, (const T *) w.r);
		else if (use_cusparse)
		{
			int			rc = cusparse_spmv(h, w.mat, alg, w.p, w.q, err, errlen);

			if (rc != GM_OK)
				return rc;
			cg_dots<T><<<grid_for(h->n, h), TPB, 0, h->stream>>>(
				h->n, (const T *) w.p, (const T *) w.r, (const T *) w.q, h->st, h->partials);
		}
		else
			spmv_rowblocks<T, OT, true><<<g1, TPB, 0, h->stream>>>(
				h->nblocks, h->blocks, h->longinfo, (const OT *) h->indptr, h->indices,
				(const T *) w.vh, (const T *) w.p, (T *) w.q, (T *) h->longpart, h->longcnt,
				(const T *) w.r, h->st, h->partials);
		GM_CHECK_LAUNCH();
		if (it == m - 1)
			cg_update<T, true><<<g2, TPB, 0, h->stream>>>(
				h->n4, (T *) w.y, (T *) w.r, (T *) w.p, (const T *) w.q, w.dsq, h->st,
				h->partials);
		else
			cg_update<T, false><<<g2, TPB, 0, h->stream>>>(
				h->n4, (T *) w.y, (T *) w.r, (T *) w.p, (const T *) w.q, w.dsq, h->st,
				h->partials);
		GM_CHECK_LAUNCH();
	}
	return GM_OK;
}

/* rt = b - A x in float64 with the original values; returns |rt| */
template <typename OT>
int
true_residual(SparseHandle *h, CgWork &w, double *norm, char *err, size_t errlen)
{
	CgState		st;
	int			rc = own_spmv<double, OT>(h, h->vals64, w.x, w.rt, err, errlen);

	if (rc != GM_OK)
		return rc;
	residual_from_ax<<<grid_for(h->n, h), TPB, 0, h->stream>>>(h->n, w.b, w.rt, h->st,
																  h->partials);
	GM_CHECK_LAUNCH();
	GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	*norm = sqrt(st.tmp);
	return GM_OK;
}

/* the error of a breakdown (p.Âp <= 0 or not finite) */
int
breakdown_error(const CgState &st, char *err, size_t errlen)
{
	snprintf(err, errlen,
			 "the matrix is not positive definite: p'Ap = %.6g at iteration %d of the "
			 "conjugate gradient", st.pq, st.iter + 1);
	return GM_EINVAL;
}

template <typename T, typename OT>
int
cg_solve_t(SparseHandle *h, const double *b, double *x, const gm_cg_params *prm,
		   const gm_callbacks *cb, gm_cg_result *res, char *err, size_t errlen)
{
	if (h->cgw == nullptr && (h->cgw = new(std::nothrow) CgWork()) == nullptr)
	{
		snprintf(err, errlen, "out of memory");
		return GM_ENOMEM;
	}

	CgWork	   &w = *h->cgw;
	CgSolveGuard guard = {&w};
	const int64_t n = h->n;
	const size_t vb = sizeof(double) * (size_t) h->npad,
				tb = sizeof(T) * (size_t) h->npad;
	const int	m = prm->check_every > 0 ? prm->check_every : DEFAULT_CHECK_EVERY;
	const gm_spmv_impl impl = resolve_impl(h, prm->spmv);
	const bool	use_cusparse = impl == GM_SPMV_CUSPARSE || impl == GM_SPMV_CUSPARSE_ALG2;
	const cusparseSpMVAlg_t alg = cusparse_alg(impl);
	/*
	 * the diagonal layout where the matrix has one (gpumf.spmv = 'own' or
	 * 'auto' resolved to it); 2: with Jacobi, Â's diagonal is 1 and not stored
	 */
	const int	dia = impl != GM_SPMV_OWN || h->ndiag == 0 ? 0
		: prm->preconditioner == GM_PRECOND_JACOBI && h->ndiag_nz < h->ndiag ? 2 : 1;
	/* the diagonal layout iterates fused (cg_fused_dia); GPUMF_CG_FUSED=0 for comparisons */
	const char *fv = getenv("GPUMF_CG_FUSED");
	const bool	fused = dia && !(fv && atoi(fv) == 0);
	bool		use_graph = true;
	double		bn = 0.0,
				target,
				nr,
				last_true;
	int			stall = 0,
				rc;
	CgState		st;

	w.stream = h->stream;
	snprintf(res->device, sizeof(res->device), "%s, %s", h->devname,
			 use_cusparse ? "cuSPARSE SpMV" : dia ? "gpumf's SpMV (diagonal layout)"
			 : "gpumf's SpMV");
	for (int64_t i = 0; i < n; i++)
		bn += b[i] * b[i];
	bn = sqrt(bn);
	target = prm->tolerance * bn;

	if (!w.ready)
	{
		GM_CHECK(gm_dev_malloc(&w.b, vb));
		GM_CHECK(gm_dev_malloc(&w.x, vb));
		GM_CHECK(gm_dev_malloc(&w.s, vb));
		GM_CHECK(gm_dev_malloc(&w.dsq, vb));
		GM_CHECK(gm_dev_malloc(&w.rt, vb));
		GM_CHECK(gm_dev_malloc(&w.y, tb));
		GM_CHECK(gm_dev_malloc(&w.r, tb));
		GM_CHECK(gm_dev_malloc(&w.p, tb));
		GM_CHECK(gm_dev_malloc(&w.q, tb));
		GM_CHECK(cudaHostAlloc((void **) &w.status, 2 * sizeof(CgState), cudaHostAllocDefault));
		GM_CHECK(cudaEventCreateWithFlags(&w.ev[0], cudaEventDisableTiming));
		GM_CHECK(cudaEventCreateWithFlags(&w.ev[1], cudaEventDisableTiming));

		/*
		 * padding zero once: no kernel writes a pad but the 4-wide update,
		 * which keeps it zero (0 + alpha 0)
		 */
		for (void *ptr : {(void *) w.b, (void *) w.x, (void *) w.s, (void *) w.dsq, (void *) w.rt})
			GM_CHECK(cudaMemsetAsync(ptr, 0, vb, h->stream));
		for (void *ptr : {w.y, w.r, w.p, w.q})
			GM_CHECK(cudaMemsetAsync(ptr, 0, tb, h->stream));
		w.ready = true;
	}
	/* Â's values, in the layout this solve uses (allocated on first use) */
	if (!dia && w.vh == nullptr)
	{
		GM_CHECK(gm_dev_malloc(&w.vh, sizeof(T) * (size_t) (h->nnz + PAD)));
		GM_CHECK(cudaMemsetAsync(w.vh, 0, sizeof(T) * (size_t) (h->nnz + PAD), h->stream));
	}
	if (dia && w.vdia == nullptr)
		GM_CHECK(gm_dev_malloc(&w.vdia, sizeof(T) * (size_t) h->ndiag * (size_t) h->npad));
	if (fused && w.r2 == nullptr)
	{
		GM_CHECK(gm_dev_malloc(&w.r2, tb));
		GM_CHECK(gm_dev_malloc(&w.p2, tb));
		GM_CHECK(gm_dev_malloc(&w.q2, tb));
		for (void *ptr : {w.r2, w.p2, w.q2})
			GM_CHECK(cudaMemsetAsync(ptr, 0, tb, h->stream));
	}
	GM_CHECK(cudaMemcpyAsync(w.b, b, sizeof(double) * n, cudaMemcpyHostToDevice, h->stream));
	GM_CHECK(cudaMemcpyAsync(w.x, x, sizeof(double) * n, cudaMemcpyHostToDevice, h->stream));

	/* S and Â */
	jacobi_scaling<OT><<<grid_for(32 * n, h), TPB, 0, h->stream>>>(
		h->n, prm->preconditioner == GM_PRECOND_JACOBI, (const OT *) h->indptr, h->indices,
		h->vals64, w.s, w.dsq);
	GM_CHECK_LAUNCH();
	if (dia)
	{
		GM_CHECK(cudaMemsetAsync(w.vdia, 0, sizeof(T) * (size_t) h->ndiag * (size_t) h->npad,
								 h->stream));
		dia_fill<T, OT><<<grid_for(32 * n, h), TPB, 0, h->stream>>>(
			h->n, h->npad, (const OT *) h->indptr, h->indices, h->vals64, w.s,
			dia == 2 ? h->ndiag_nz : h->ndiag, dia == 2 ? h->dia_off_nz : h->dia_off,
			(T *) w.vdia);
	}
	else
		scale_values<T, OT><<<grid_for(32 * n, h), TPB, 0, h->stream>>>(
			h->n, (const OT *) h->indptr, h->indices, h->vals64, w.s, (T *) w.vh);
	GM_CHECK_LAUNCH();
	if (use_cusparse)
	{
		if (h->idx64)
		{
			snprintf(err, errlen, "cuSPARSE SpMV is used here with 32-bit indices only: set "
					 "gpumf.spmv = 'own' for %lld nonzeros", (long long) h->nnz);
			return GM_ENOTSUP;
		}
		GM_CHECK(cusparseCreateCsr(&w.mat, n, n, h->nnz, h->indptr, h->indices, w.vh,
								   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
								   CUSPARSE_INDEX_BASE_ZERO, cuda_type(h->prec)));
		h->sp_for = nullptr;	/* a new descriptor may reuse a freed one's address */
	}

	/* the initial residual */
	if ((rc = true_residual<OT>(h, w, &nr, err, errlen)) != GM_OK)
		return rc;
	last_true = nr;
	res->converged = nr <= target;
	res->replacements = 0;
	res->stagnated = 0;
	st = CgState();
	st.target2 = target * target;
	st.max_iter = prm->max_iterations;
	st.done = 1;				/* cg_restart clears it */
	GM_CHECK(cudaMemcpyAsync(h->st, &st, sizeof(st), cudaMemcpyHostToDevice, h->stream));
	cg_restart<T><<<grid_for(n, h), TPB, 0, h->stream>>>(n, w.s, w.rt, (T *) w.r, (T *) w.p,
														  (T *) w.y, h->st, h->partials);
	GM_CHECK_LAUNCH();
	if (fused && (rc = fused_first<T>(h, w, dia, 0, err, errlen)) != GM_OK)
		return rc;
	GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
	GM_CHECK(cudaStreamSynchronize(h->stream));
	/* the fused iteration's first product may already have met p.Âp <= 0 */
	if (st.done && st.reason == REASON_BREAKDOWN && prm->max_iterations > 0)
		return breakdown_error(st, err, errlen);

	/* one batch as a graph (the first one, with cuSPARSE, is run directly: it preprocesses) */
	if (use_cusparse)
	{
		if ((rc = enqueue_batch<T, OT>(h, w, m, true, alg, 0, false, err, errlen)) != GM_OK)
			return rc;
		GM_CHECK(cudaStreamSynchronize(h->stream));
		GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
		GM_CHECK(cudaStreamSynchronize(h->stream));
		if (st.done && st.reason == REASON_BREAKDOWN)
			return breakdown_error(st, err, errlen);
	}
	/* launch shapes are asked for outside the capture */
	(void) spmv_grid<T, OT, true>(h);
	(void) dia_grid<T, true, true, 1>(h);
	(void) dia_grid<T, true, true, 2>(h);
	(void) dia_grid<T, true, true, 4>(h);
	(void) dia_grid<T, true, false, 1>(h);
	(void) dia_grid<T, true, false, 2>(h);
	(void) dia_grid<T, true, false, 4>(h);
	fused_grids<T>(h);
	(void) update_grid<T>(h);
	(void) spmv_grid<double, OT, false>(h);
	if (cudaStreamBeginCapture(h->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess)
	{
		rc = enqueue_batch<T, OT>(h, w, m, use_cusparse, alg, dia, fused, err, errlen);
		if (cudaStreamEndCapture(h->stream, &w.graph) != cudaSuccess || rc != GM_OK ||
			cudaGraphInstantiate(&w.exec, w.graph, 0) != cudaSuccess)
		{
			use_graph = false;
			(void) cudaGetLastError();	/* capture failures are not errors here */
		}
	}
	else
	{
		use_graph = false;
		(void) cudaGetLastError();
	}

	while (!res->converged && !st.done && prm->max_iterations > 0)
	{
		int			slot = 0;

		/* two batches in flight; read the older one's status */
		for (int k = 0; k < 2; k++)
		{
			if (use_graph)
				GM_CHECK(cudaGraphLaunch(w.exec, h->stream));
			else if ((rc = enqueue_batch<T, OT>(h, w, m, use_cusparse, alg, dia,
												fused, err, errlen)) != GM_OK)
				return rc;
			GM_CHECK(cudaMemcpyAsync(&w.status[k], h->st, sizeof(CgState),
									 cudaMemcpyDeviceToHost, h->stream));
			GM_CHECK(cudaEventRecord(w.ev[k], h->stream));
		}
		for (;;)
		{
			GM_CHECK(cudaEventSynchronize(w.ev[slot]));
			st = w.status[slot];
			if (st.done)
				break;
			if (cb && cb->should_stop && cb->should_stop(cb->arg))
			{
				snprintf(err, errlen, "the conjugate-gradient solve was canceled");
				return GM_ECANCELED;
			}
			if (use_graph)
				GM_CHECK(cudaGraphLaunch(w.exec, h->stream));
			else if ((rc = enqueue_batch<T, OT>(h, w, m, use_cusparse, alg, dia,
												fused, err, errlen)) != GM_OK)
				return rc;
			GM_CHECK(cudaMemcpyAsync(&w.status[slot], h->st, sizeof(CgState),
									 cudaMemcpyDeviceToHost, h->stream));
			GM_CHECK(cudaEventRecord(w.ev[slot], h->stream));
			slot ^= 1;
		}
		/* done: the batch still queued returns at once; then the final state */
		GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
		GM_CHECK(cudaStreamSynchronize(h->stream));
		if (st.reason == REASON_BREAKDOWN)
			return breakdown_error(st, err, errlen);
		if (st.reason != REASON_CONVERGED)
			break;				/* iterations spent */

		/* the recurrence says converged: ask the float64 x */
		cg_fold<T><<<grid_for(n, h), TPB, 0, h->stream>>>(n, w.s, (T *) w.y, w.x);
		GM_CHECK_LAUNCH();
		if ((rc = true_residual<OT>(h, w, &nr, err, errlen)) != GM_OK)
			return rc;
		if (nr <= target)
		{
			res->converged = 1;
			break;
		}
		res->replacements++;
		stall = nr > 0.5 * last_true ? stall + 1 : 0;
		last_true = nr;
		{
			/* the fused iteration's current buffers are those of index iter & 1 */
			const int	cur = fused ? (st.iter & 1) : 0;

			cg_restart<T><<<grid_for(n, h), TPB, 0, h->stream>>>(
				n, w.s, w.rt, (T *) (cur ? w.r2 : w.r), (T *) (cur ? w.p2 : w.p), (T *) w.y,
				h->st, h->partials);
			GM_CHECK_LAUNCH();
			if (fused && (rc = fused_first<T>(h, w, dia, cur, err, errlen)) != GM_OK)
				return rc;
		}
		GM_CHECK(cudaMemcpyAsync(&st, h->st, sizeof(st), cudaMemcpyDeviceToHost, h->stream));
		GM_CHECK(cudaStreamSynchronize(h->stream));
		if (st.done && st.reason == REASON_BREAKDOWN)
			return breakdown_error(st, err, errlen);
		if ((stall >= STALL_LIMIT && prm->tolerance > 0.0) || st.rr == 0.0)
		{
			res->stagnated = 1;
			break;
		}
		if (st.iter >= prm->max_iterations)
			break;
	}
	cg_fold<T><<<grid_for(n, h), TPB, 0, h->stream>>>(n, w.s, (T *) w.y, w.x);
	GM_CHECK_LAUNCH();
	GM_CHECK(cudaMemcpyAsync(x, w.x, sizeof(double) * n, cudaMemcpyDeviceToHost, h->stream));
	if ((rc = true_residual<OT>(h, w, &nr, err, errlen)) != GM_OK)
		return rc;
	res->iterations = st.iter;
	res->residual = bn > 0 ? nr / bn : nr;
	res->converged = nr <= target;
	return GM_OK;
}

}								/* namespace */

namespace gm_sparse
{

/* Free a handle's CG buffers (kept between solves). */
void
cg_work_free(CgWork *w)
{
	delete w;
}

/* Solve A x = b by CG on an uploaded matrix (gm_linalg_ops.cg). */
int
sparse_cg(void *vh, const double *b, double *x, const gm_cg_params *p,
		  const gm_callbacks *cb, gm_cg_result *res, char *err, size_t errlen)
{
	SparseHandle *h = (SparseHandle *) vh;

	if (p->precision != h->prec)
	{
		snprintf(err, errlen, "the matrix was uploaded for another precision");
		return GM_EINVAL;
	}
	if (h->prec == GM_PRECISION_SINGLE)
		return h->idx64 ? cg_solve_t<float, long long>(h, b, x, p, cb, res, err, errlen)
			: cg_solve_t<float, int>(h, b, x, p, cb, res, err, errlen);
	return h->idx64 ? cg_solve_t<double, long long>(h, b, x, p, cb, res, err, errlen)
		: cg_solve_t<double, int>(h, b, x, p, cb, res, err, errlen);
}

}								/* namespace gm_sparse */
