/*
 * device_csr.cu: uploading sparse matrices, chunk lists and row bins
 * (device_csr.cuh).
 */
#include "device_csr.cuh"
#include "gm_core.h"			/* gm_csr_nnz_bins (csr.c is linked into the module) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_segmented_sort.cuh>

/* Entries of a slab of a transpose not formed (gm_csr's of): 16M, 128 MB a buffer */
#define GM_SLAB_ENTRIES	((int64_t) 1 << 24)

/*
 * a's entries, a transpose not formed, built a slab of rows at a time on
 * the host (gm_transposer) into two pinned buffers, one filled while the
 * other is copied, into d's indices and data.
 */
static int
upload_transpose(gm_dcsr *d, const gm_csr *a, char *err, size_t errlen)
{
	gm_transposer *t = NULL;
	const int64_t *cp;
	int64_t		cap = getenv("GM_TRANSPOSE_SLAB") ? atoll(getenv("GM_TRANSPOSE_SLAB")) : GM_SLAB_ENTRIES,
				base;
	int32_t    *si[2] = {NULL, NULL};
	float	   *sv[2] = {NULL, NULL};
	cudaStream_t st = NULL;
	cudaEvent_t ev[2] = {NULL, NULL};
	int			rc,
				used[2] = {0, 0},
				b = 0;
	cudaError_t e = cudaSuccess;

	if ((rc = gm_transposer_make(a->of, &t, err, errlen)) != GM_OK)
		return rc;
	cp = gm_transposer_indptr(t);
	base = a->of_r0 >= 0 && a->of_r0 <= a->of->n_cols ? cp[a->of_r0] : 0;
	if (a->of_r0 < 0 || a->of_r1 > a->of->n_cols || a->of_r0 > a->of_r1 ||
		cp[a->of_r1] - base != a->nnz)
	{
		gm_transposer_free(t);
		snprintf(err, errlen, "a transpose not formed: rows [%d, %d) do not hold its %lld entries",
				 a->of_r0, a->of_r1, (long long) a->nnz);
		return GM_EINVAL;
	}
	if (cap < 1)
		cap = GM_SLAB_ENTRIES;
	for (int32_t c = a->of_r0; c < a->of_r1; c++)
		if (cp[c + 1] - cp[c] > cap)
			cap = cp[c + 1] - cp[c];
	if (cap > a->nnz)
		cap = a->nnz > 0 ? a->nnz : 1;
	for (int i = 0; i < 2 && e == cudaSuccess; i++)
	{
		e = cudaMallocHost((void **) &si[i], sizeof(int32_t) * (size_t) cap);
		if (e == cudaSuccess)
			e = cudaMallocHost((void **) &sv[i], sizeof(float) * (size_t) cap);
	}
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	for (int i = 0; i < 2 && e == cudaSuccess; i++)
		e = cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming);
	for (int32_t c0 = a->of_r0; e == cudaSuccess && c0 < a->of_r1;)
	{
		int32_t		c1 = c0 + 1;
		int64_t		n;

		while (c1 < a->of_r1 && cp[c1 + 1] - cp[c0] <= cap)
			c1++;
		n = cp[c1] - cp[c0];
		/* buffer b was last copied two slabs ago: that copy ends first */
		if (used[b] && (e = cudaEventSynchronize(ev[b])) != cudaSuccess)
			break;
		if (gm_transposer_rows(t, c0, c1, si[b], sv[b]) != GM_OK)
		{
			rc = GM_ENOMEM;
			break;
		}
		if (n > 0)
		{
			e = cudaMemcpyAsync(d->indices + (cp[c0] - base), si[b], sizeof(int32_t) * (size_t) n,
								cudaMemcpyHostToDevice, st);
			if (e == cudaSuccess)
				e = cudaMemcpyAsync(d->data + (cp[c0] - base), sv[b], sizeof(float) * (size_t) n,
									cudaMemcpyHostToDevice, st);
		}
		if (e == cudaSuccess)
			e = cudaEventRecord(ev[b], st);
		used[b] = 1;
		c0 = c1;
		b = 1 - b;
	}
	if (st)
	{
		cudaError_t e2 = cudaStreamSynchronize(st);

		if (e == cudaSuccess)
			e = e2;
		cudaStreamDestroy(st);
	}
	for (int i = 0; i < 2; i++)
		if (ev[i])
			cudaEventDestroy(ev[i]);
	for (int i = 0; i < 2; i++)
	{
		cudaFreeHost(si[i]);
		cudaFreeHost(sv[i]);
	}
	gm_transposer_free(t);
	if (rc == GM_OK && e != cudaSuccess)
	{
		snprintf(err, errlen, "uploading a transpose: %s", cudaGetErrorString(e));
		rc = e == cudaErrorMemoryAllocation ? GM_ENOMEM : GM_EDEVICE;
	}
	else if (rc != GM_OK)
		snprintf(err, errlen, "out of host memory building a transpose");
	return rc;
}

/* Each entry of src (a warp a row) into its column's next free place of t. */
__global__ void
transpose_scatter(const int64_t *__restrict__ ptr, const int32_t *__restrict__ ind,
				  const float *__restrict__ val, int32_t n_rows, const int64_t *__restrict__ tptr,
				  unsigned *__restrict__ fill, int32_t *__restrict__ tind, float *__restrict__ tval)
{
	int64_t		warp = ((int64_t) blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	int			lane = threadIdx.x & 31;

	for (int64_t r = warp; r < n_rows; r += ((int64_t) gridDim.x * blockDim.x) >> 5)
		for (int64_t e = ptr[r] + lane; e < ptr[r + 1]; e += 32)
		{
			int32_t		j = ind[e];
			int64_t		pos = tptr[j] + atomicAdd(&fill[j], 1u);

			tind[pos] = (int32_t) r;
			tval[pos] = val[e];
		}
}

/* rel[i] = ptr[c0 + i] - ptr[c0] for i <= n: a slab's column offsets from its start */
__global__ void
slab_offsets(const int64_t *__restrict__ ptr, int32_t c0, int32_t n, int64_t *__restrict__ rel)
{
	int64_t		i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;

	if (i <= n)
		rel[i] = ptr[c0 + i] - ptr[c0];
}

/*
 * d (allocated, its row pointers uploaded) given the entries of a, the
 * transpose not formed of a matrix whose every entry is on this device as
 * src: transposed there, with no host work and no copy over PCIe.  Each
 * entry goes to its column's next free place (an atomic counter a column);
 * then each slab of columns (at most GM_SLAB_ENTRIES entries, or one
 * longer column) is sorted by row with cub's segmented sort, into a
 * scratch slab and back.  A column's rows are unique, so the result is the
 * host transpose's exactly (rows ascending within a column).  Scratch: a
 * counter and an offset a column, two slabs' entries and the sort's.
 */
static int
transpose_on_device(gm_dcsr *d, const gm_csr *a, const gm_dcsr *src, char *err, size_t errlen)
{
	const int64_t *cp = a->indptr;
	int64_t		cap = getenv("GM_TRANSPOSE_SLAB") ? atoll(getenv("GM_TRANSPOSE_SLAB")) : GM_SLAB_ENTRIES;
	int32_t		n = a->n_rows;
	unsigned   *fill = NULL;
	int64_t    *rel = NULL;
	int32_t    *sind = NULL;
	float	   *sval = NULL;
	void	   *tmp = NULL;
	size_t		tmp_bytes = 0;
	int			rc = GM_OK;

	if (a->nnz == 0)
		return GM_OK;
	if (cap < 1)
		cap = GM_SLAB_ENTRIES;
	for (int32_t c = 0; c < n; c++)
		if (cp[c + 1] - cp[c] > cap)
			cap = cp[c + 1] - cp[c];
	if (cap > a->nnz)
		cap = a->nnz;
#define TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
		rc = e_ == cudaErrorMemoryAllocation ? GM_ENOMEM : GM_EDEVICE; \
		snprintf(err, errlen, "transposing on the device: %s failed: %s", #call, cudaGetErrorString(e_)); \
		goto done; } } while (0)
	TRY(gm_dev_malloc((void **) &fill, sizeof(unsigned) * ((size_t) n + 1)));
	TRY(gm_dev_malloc((void **) &rel, sizeof(int64_t) * ((size_t) n + 1)));
	TRY(gm_dev_malloc((void **) &sind, sizeof(int32_t) * (size_t) cap));
	TRY(gm_dev_malloc((void **) &sval, sizeof(float) * (size_t) cap));
	TRY(cudaMemset(fill, 0, sizeof(unsigned) * ((size_t) n + 1)));
	{
		int			blocks = (int) (((int64_t) src->n_rows * 32 + 255) / 256);

		if (blocks > 65535 * 8)
			blocks = 65535 * 8;
		if (blocks < 1)
			blocks = 1;
		transpose_scatter<<<blocks, 256>>>(src->indptr, src->indices, src->data, src->n_rows,
										   d->indptr, fill, d->indices, d->data);
		TRY(cudaGetLastError());
	}
	for (int32_t c0 = 0; c0 < n;)
	{
		int32_t		c1 = c0 + 1;
		int64_t		m;
		size_t		want = 0;

		while (c1 < n && cp[c1 + 1] - cp[c0] <= cap)
			c1++;
		m = cp[c1] - cp[c0];
		if (m > 1)
		{
			slab_offsets<<<(c1 - c0 + 256) / 256, 256>>>(d->indptr, c0, c1 - c0, rel);
			TRY(cudaGetLastError());
			TRY(cub::DeviceSegmentedSort::SortPairs(NULL, want, d->indices + cp[c0], sind,
													d->data + cp[c0], sval, m, c1 - c0,
													rel, rel + 1));
			if (want > tmp_bytes)
			{
				gm_dev_free(tmp);
				tmp = NULL;
				TRY(gm_dev_malloc(&tmp, want));
				tmp_bytes = want;
			}
			TRY(cub::DeviceSegmentedSort::SortPairs(tmp, tmp_bytes, d->indices + cp[c0], sind,
													d->data + cp[c0], sval, m, c1 - c0,
													rel, rel + 1));
			TRY(cudaMemcpyAsync(d->indices + cp[c0], sind, sizeof(int32_t) * (size_t) m,
								cudaMemcpyDeviceToDevice));
			TRY(cudaMemcpyAsync(d->data + cp[c0], sval, sizeof(float) * (size_t) m,
								cudaMemcpyDeviceToDevice));
		}
		c0 = c1;
	}
	TRY(cudaDeviceSynchronize());
#undef TRY
done:
	gm_dev_free(fill);
	gm_dev_free(rel);
	gm_dev_free(sind);
	gm_dev_free(sval);
	gm_dev_free(tmp);
	return rc;
}

/*
 * Whether a transpose not formed whose matrix is on the device whole is
 * transposed there (1, the default) or on the host a slab at a time (0).
 */
int			gm_device_transpose_enabled = 1;

/* Whether src, on this device, holds every entry a (a transpose not formed) is made of. */
static bool
whole_source_on_device(const gm_csr *a, const gm_csr *of_host, const gm_dcsr *src)
{
	return a->of != NULL && src != NULL && a->of == of_host && a->of_r0 == 0 &&
		a->of_r1 == a->of->n_cols && a->n_rows == a->of->n_cols && src->nnz == a->of->nnz &&
		a->nnz == a->of->nnz && src->n_rows == a->of->n_rows && gm_device_transpose_enabled;
}

/* Tests and benchmarks: 1 = transposes on the device when they can be, 0 = on the host. */
extern "C" void
gm_cuda_set_device_transpose(int on)
{
	gm_device_transpose_enabled = on != 0;
}

/* Allocate d's arrays for a and upload a's row pointers. */
static int
dcsr_alloc(gm_dcsr *d, const gm_csr *a, char *err, size_t errlen)
{
	size_t		n1 = (size_t) a->n_rows + 1,
				nz = (size_t) (a->nnz > 0 ? a->nnz : 1);

	memset(d, 0, sizeof(*d));
	d->n_rows = a->n_rows;
	d->n_cols = a->n_cols;
	d->nnz = a->nnz;
	GM_CHECK(gm_dev_malloc((void **) &d->indptr, sizeof(int64_t) * n1));
	GM_CHECK(gm_dev_malloc((void **) &d->indices, sizeof(int32_t) * nz));
	GM_CHECK(gm_dev_malloc((void **) &d->data, sizeof(float) * nz));
	GM_CHECK(cudaMemcpy(d->indptr, a->indptr, sizeof(int64_t) * n1, cudaMemcpyHostToDevice));
	return GM_OK;
}

/*
 * Allocate d and copy a into it (a may be a transpose not formed: gm_csr's
 * of; when of_host is a->of and src its copy on this device, whole, it is
 * transposed on the device).
 */
int
gm_dcsr_upload_of(gm_dcsr *d, const gm_csr *a, const gm_csr *of_host, const gm_dcsr *src,
				  char *err, size_t errlen)
{
	int			rc;

	if (!whole_source_on_device(a, of_host, src))
		return gm_dcsr_upload(d, a, err, errlen);
	if ((rc = dcsr_alloc(d, a, err, errlen)) != GM_OK)
		return rc;
	return transpose_on_device(d, a, src, err, errlen);
}

/*
 * Tests: a's transpose formed on the device from a's upload (through a
 * transpose not formed, as a lean training has it) equals at, formed on
 * the host, entry for entry.  GM_OK when equal; GM_EINVAL with the first
 * difference in err.
 */
extern "C" int
gm_cuda_check_device_transpose(const gm_csr *a, const gm_csr *at, char *err, size_t errlen)
{
	gm_dcsr		da,
				dt;
	gm_csr		v = *at;
	int			rc;
	int32_t    *ind = NULL;
	float	   *dat = NULL;

	memset(&da, 0, sizeof(da));
	memset(&dt, 0, sizeof(dt));
	v.indices = NULL;
	v.data = NULL;
	v.of = a;
	v.of_r0 = 0;
	v.of_r1 = a->n_cols;
	if ((rc = gm_dcsr_upload(&da, a, err, errlen)) == GM_OK &&
		(rc = gm_dcsr_upload_of(&dt, &v, a, &da, err, errlen)) == GM_OK)
	{
		size_t		nz = (size_t) (at->nnz > 0 ? at->nnz : 1);

		ind = (int32_t *) malloc(sizeof(int32_t) * nz);
		dat = (float *) malloc(sizeof(float) * nz);
		if (!ind || !dat)
			rc = GM_ENOMEM;
		else if (cudaMemcpy(ind, dt.indices, sizeof(int32_t) * nz, cudaMemcpyDeviceToHost) != cudaSuccess ||
				 cudaMemcpy(dat, dt.data, sizeof(float) * nz, cudaMemcpyDeviceToHost) != cudaSuccess)
			rc = GM_EDEVICE;
		for (int64_t e = 0; rc == GM_OK && e < at->nnz; e++)
			if (ind[e] != at->indices[e] || memcmp(&dat[e], &at->data[e], sizeof(float)) != 0)
			{
				snprintf(err, errlen, "entry %lld: row %d value %g on the device, row %d value %g on the host",
						 (long long) e, ind[e], dat[e], at->indices[e], at->data[e]);
				rc = GM_EINVAL;
			}
	}
	free(ind);
	free(dat);
	gm_dcsr_free(&da);
	gm_dcsr_free(&dt);
	return rc;
}

/* Allocate d and copy a into it (a may be a transpose not formed: gm_csr's of). */
int
gm_dcsr_upload(gm_dcsr *d, const gm_csr *a, char *err, size_t errlen)
{
	int			rc;

	if ((rc = dcsr_alloc(d, a, err, errlen)) != GM_OK)
		return rc;
	if (a->of != NULL)
		return upload_transpose(d, a, err, errlen);
	if (a->nnz > 0)
	{
		GM_CHECK(cudaMemcpy(d->indices, a->indices, sizeof(int32_t) * (size_t) a->nnz,
							cudaMemcpyHostToDevice));
		GM_CHECK(cudaMemcpy(d->data, a->data, sizeof(float) * (size_t) a->nnz,
							cudaMemcpyHostToDevice));
	}
	return GM_OK;
}

/* Free d's device arrays. */
void
gm_dcsr_free(gm_dcsr *d)
{
	gm_dev_free(d->indptr);
	gm_dev_free(d->indices);
	gm_dev_free(d->data);
	d->indptr = NULL;
	d->indices = NULL;
	d->data = NULL;
}

/* The chunk list of rows with the given row pointers (device_csr.cuh). */
int
gm_dchunks_build(gm_dchunks *c, const int64_t *indptr, int32_t n_rows,
				 char *err, size_t errlen)
{
	int64_t		total = 0;
	int2	   *h;
	cudaError_t e;

	memset(c, 0, sizeof(*c));
	c->n_rows = n_rows;
	c->ptr = (int32_t *) malloc(sizeof(int32_t) * ((size_t) n_rows + 1));
	if (!c->ptr)
		goto oom;
	for (int32_t r = 0; r < n_rows; r++)
	{
		int64_t		len = indptr[r + 1] - indptr[r];

		c->ptr[r] = (int32_t) total;
		total += len > GM_CHUNK ? (len + GM_CHUNK - 1) / GM_CHUNK : 1;
		if (total > INT32_MAX / 2)
		{
			snprintf(err, errlen, "too many nonzeros for the CUDA module");
			return GM_EINVAL;
		}
	}
	c->ptr[n_rows] = (int32_t) total;
	h = (int2 *) malloc(sizeof(int2) * (size_t) (total > 0 ? total : 1));
	if (!h)
		goto oom;
	for (int32_t r = 0; r < n_rows; r++)
		for (int32_t j = 0; j < c->ptr[r + 1] - c->ptr[r]; j++)
			h[c->ptr[r] + j] = make_int2(r, j);
	e = gm_dev_malloc((void **) &c->chunks, sizeof(int2) * (size_t) (total > 0 ? total : 1));
	if (e == cudaSuccess && total > 0)
		e = cudaMemcpy(c->chunks, h, sizeof(int2) * (size_t) total, cudaMemcpyHostToDevice);
	free(h);
	GM_CHECK(e);
	return GM_OK;
oom:
	snprintf(err, errlen, "out of host memory for the chunk list");
	return GM_ENOMEM;
}

/* Free the chunk list. */
void
gm_dchunks_free(gm_dchunks *c)
{
	gm_dev_free(c->chunks);
	free(c->ptr);
	c->chunks = NULL;
	c->ptr = NULL;
}

/* Upload bins computed on the host. */
int
gm_dbins_upload(gm_dbins *b, const int32_t *perm, int32_t n_rows,
				const int32_t *bin_start, int nbins, char *err, size_t errlen)
{
	memset(b, 0, sizeof(*b));
	if (nbins < 1 || n_rows < 0 || bin_start[nbins] != n_rows)
	{
		snprintf(err, errlen, "invalid row bins (%d bins, %d rows)", nbins, n_rows);
		return GM_EINVAL;
	}
	b->nbins = nbins;
	b->n_rows = n_rows;
	b->bin_start = (int32_t *) malloc(sizeof(int32_t) * ((size_t) nbins + 1));
	if (!b->bin_start)
	{
		snprintf(err, errlen, "out of host memory for the row bins");
		return GM_ENOMEM;
	}
	memcpy(b->bin_start, bin_start, sizeof(int32_t) * ((size_t) nbins + 1));
	GM_CHECK(gm_dev_malloc((void **) &b->perm, sizeof(int32_t) * (size_t) (n_rows > 0 ? n_rows : 1)));
	if (n_rows > 0)
		GM_CHECK(cudaMemcpy(b->perm, perm, sizeof(int32_t) * (size_t) n_rows,
							cudaMemcpyHostToDevice));
	return GM_OK;
}

/* Compute a's bins (gm_csr_nnz_bins) and upload them. */
int
gm_dbins_build(gm_dbins *b, const gm_csr *a, int nbins, const int64_t *upper,
			   char *err, size_t errlen)
{
	int32_t    *perm = (int32_t *) malloc(sizeof(int32_t) * ((size_t) a->n_rows + 1));
	int32_t    *start = (int32_t *) malloc(sizeof(int32_t) * ((size_t) (nbins > 0 ? nbins : 0) + 1));
	int			rc;

	memset(b, 0, sizeof(*b));
	if (!perm || !start)
	{
		free(perm);
		free(start);
		snprintf(err, errlen, "out of host memory for the row bins");
		return GM_ENOMEM;
	}
	rc = gm_csr_nnz_bins(a, nbins, upper, perm, start, err, errlen);
	if (rc == GM_OK)
		rc = gm_dbins_upload(b, perm, a->n_rows, start, nbins, err, errlen);
	free(perm);
	free(start);
	return rc;
}

/* Free the bins. */
void
gm_dbins_free(gm_dbins *b)
{
	gm_dev_free(b->perm);
	free(b->bin_start);
	b->perm = NULL;
	b->bin_start = NULL;
}

/*
 * Whether warp-per-chunk kernels take chunks from a queue (device_csr.cuh):
 * on by default (H100, ML-20M shape, k 64-1024: block 32 1.17-1.20x and CG
 * 1.04-1.18x faster per iteration, same losses; test/bench/README.md, "With
 * the chunk queue").
 */
int			gm_chunk_queue_enabled = 1;

/* Tests and benchmarks: 1 = chunks from a queue, 0 = a warp per chunk. */
extern "C" void
gm_cuda_set_chunk_queue(int on)
{
	gm_chunk_queue_enabled = on != 0;
}

/* ------------------------------------------------ rows over several GPUs */

int
gm_csr_row_view(const gm_csr *A, int32_t r0, int32_t r1, gm_csr *v, int64_t **ptr)
{
	int64_t		e0 = A->indptr[r0],
				e1 = A->indptr[r1];
	int64_t    *q = (int64_t *) malloc(sizeof(int64_t) * ((size_t) A->n_rows + 1));

	if (!q)
		return GM_ENOMEM;
	for (int32_t r = 0; r <= A->n_rows; r++)
		q[r] = r <= r0 ? 0 : r >= r1 ? e1 - e0 : A->indptr[r] - e0;
	*v = *A;
	v->indptr = q;
	v->indices = A->indices ? A->indices + e0 : NULL;
	v->data = A->data ? A->data + e0 : NULL;
	v->nnz = e1 - e0;
	if (A->of)
	{
		/* a transpose not formed: the view's entries are those of its rows [r0, r1) */
		v->of_r0 = r0;
		v->of_r1 = r1;
	}
	*ptr = q;
	return GM_OK;
}

int
gm_enable_peers(int dev, int n, char *err, size_t errlen)
{
	GM_CHECK(cudaSetDevice(dev));
	for (int j = 0; j < n; j++)
	{
		int			can = 0;

		if (j != dev && cudaDeviceCanAccessPeer(&can, dev, j) == cudaSuccess && can)
		{
			cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);

			if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
				GM_CHECK(e);
			(void) cudaGetLastError();
		}
	}
	return GM_OK;
}

int
gm_share_allgather(const gm_share *sh, int n, size_t row_floats, char *err, size_t errlen)
{
	for (int i = 0; i < n; i++)
	{
		GM_CHECK(cudaSetDevice(sh[i].dev));
		GM_CHECK(cudaStreamSynchronize(sh[i].stream));
	}
	for (int i = 0; i < n; i++)
	{
		size_t		rows = (size_t) (sh[i].own1 - sh[i].own0),
					off = (size_t) sh[i].own0 * row_floats;

		if (rows == 0)
			continue;
		GM_CHECK(cudaSetDevice(sh[i].dev));
		for (int j = 0; j < n; j++)
			if (j != i && sh[j].F != sh[i].F)
				GM_CHECK(cudaMemcpyPeerAsync(sh[j].F + off, sh[j].dev, sh[i].F + off, sh[i].dev,
											 sizeof(float) * rows * row_floats, sh[i].stream));
	}
	for (int i = 0; i < n; i++)
	{
		GM_CHECK(cudaSetDevice(sh[i].dev));
		GM_CHECK(cudaStreamSynchronize(sh[i].stream));
	}
	return GM_OK;
}

int
gm_shares_plan(gm_shares *s, const gm_mf_data *d, int ndev, double row_weight, char *err,
			   size_t errlen)
{
	int			visible = 0;

	memset(s, 0, sizeof(*s));
	s->one_device = getenv("GM_GPUS_SHARE_DEVICE") != NULL;
	if (ndev < 1 || ndev > GM_MAX_GPUS)
	{
		snprintf(err, errlen, "between 1 and %d GPUs, not %d", GM_MAX_GPUS, ndev);
		return GM_EINVAL;
	}
	GM_CHECK(cudaGetDeviceCount(&visible));
	if (ndev > visible && !s->one_device)
	{
		snprintf(err, errlen, "%d GPUs asked for, %d visible", ndev, visible);
		return GM_ENODEVICE;
	}
	s->ndev = ndev;
	gm_csr_cut_rows(d->R, ndev, row_weight, s->cut[0]);
	gm_csr_cut_rows(d->Rt, ndev, row_weight, s->cut[1]);
	for (int side = 0; side < 2 && ndev > 1; side++)
	{
		const int32_t *cut = s->cut[side];
		const int64_t *indptr = side == 0 ? d->R->indptr : d->Rt->indptr;
		int64_t    *v;

		for (int i = 0; i < ndev; i++)
			if (cut[i + 1] - cut[i] > s->vn[side])
				s->vn[side] = cut[i + 1] - cut[i];
		v = (int64_t *) malloc(sizeof(int64_t) * ((size_t) s->vn[side] + 1));
		if (!v)
		{
			snprintf(err, errlen, "out of host memory for the shares' rows");
			return GM_ENOMEM;
		}
		v[0] = 0;
		for (int32_t r = 0; r < s->vn[side]; r++)
		{
			int64_t		e = 0;

			for (int i = 0; i < ndev; i++)
				if (cut[i] + r < cut[i + 1])
					e += indptr[cut[i] + r + 1] - indptr[cut[i] + r];
			v[r + 1] = v[r] + e;
		}
		s->vrow[side] = v;
	}
	return GM_OK;
}

int
gm_shares_view(gm_shares *s, int i, const gm_mf_data *d, gm_mf_data *dv, gm_csr *v, int *dev,
			   char *err, size_t errlen)
{
	int			rc;

	*dv = *d;
	*dev = s->one_device ? 0 : i;
	if (s->ndev > 1)
	{
		if (gm_csr_row_view(d->R, s->cut[0][i], s->cut[0][i + 1], &v[0], &s->vptr[i][0]) != GM_OK ||
			gm_csr_row_view(d->Rt, s->cut[1][i], s->cut[1][i + 1], &v[1], &s->vptr[i][1]) != GM_OK)
		{
			snprintf(err, errlen, "out of host memory for the row views");
			return GM_ENOMEM;
		}
		dv->R = &v[0];
		dv->Rt = &v[1];
		/* each device reaches the others directly where it can (NVLink, PCIe peer) */
		if (!s->one_device && (rc = gm_enable_peers(i, s->ndev, err, errlen)) != GM_OK)
			return rc;
	}
	GM_CHECK(cudaSetDevice(*dev));
	return GM_OK;
}

int
gm_shares_make_all(gm_shares *s, const gm_mf_data *d, int ndev, double row_weight,
				   gm_share_make make, void *top, int *made, char *err, size_t errlen)
{
	int			rc = gm_shares_plan(s, d, ndev, row_weight, err, errlen);

	for (int i = 0; i < s->ndev && rc == GM_OK; i++)
	{
		gm_mf_data	dv;
		gm_csr		v[2];
		int32_t		own0[2],
					own1[2];
		int			dev;

		gm_shares_own(s, i, own0, own1);
		*made = i + 1;
		if ((rc = gm_shares_view(s, i, d, &dv, v, &dev, err, errlen)) == GM_OK)
			rc = make(top, i, &dv, dev, own0, own1, err, errlen);
	}
	return rc;
}

void
gm_shares_device_name(const gm_shares *s, char *device, size_t devlen)
{
	(void) cudaSetDevice(0);
	gm_device_name(device, devlen);
	if (s->ndev > 1 && device && devlen > 0)
	{
		size_t		l = strlen(device);

		snprintf(device + l, devlen - l, " x %d", s->ndev);
	}
}

void
gm_shares_free(gm_shares *s)
{
	for (int i = 0; i < GM_MAX_GPUS; i++)
	{
		free(s->vptr[i][0]);
		free(s->vptr[i][1]);
		s->vptr[i][0] = s->vptr[i][1] = NULL;
	}
	free(s->vrow[0]);
	free(s->vrow[1]);
	s->vrow[0] = s->vrow[1] = NULL;
}

int
gm_share_links_open(gm_share_links *l, const gm_shares *s, int *push, char *err, size_t errlen)
{
	const char *env = getenv("GM_SHARE_PUSH");

	memset(l, 0, sizeof(*l));
	*push = 0;
	if (s->ndev < 2 || (env != NULL && strcmp(env, "0") == 0))
		return GM_OK;
	for (int i = 0; i < s->ndev; i++)
	{
		l->dev[i] = s->one_device ? 0 : i;	/* as gm_shares_view places share i */
		GM_CHECK(cudaSetDevice(l->dev[i]));
		GM_CHECK(cudaStreamCreateWithFlags(&l->copy[i], cudaStreamNonBlocking));
		if (cudaEventCreateWithFlags(&l->slice[i], cudaEventDisableTiming) != cudaSuccess)
		{
			cudaStreamDestroy(l->copy[i]);
			GM_CHECK(cudaGetLastError());
		}
		if (cudaEventCreateWithFlags(&l->done[i], cudaEventDisableTiming) != cudaSuccess)
		{
			cudaEventDestroy(l->slice[i]);
			cudaStreamDestroy(l->copy[i]);
			GM_CHECK(cudaGetLastError());
		}
		l->n = i + 1;
	}
	*push = 1;
	return GM_OK;
}

void
gm_share_links_free(gm_share_links *l)
{
	for (int i = 0; i < l->n; i++)
	{
		(void) cudaSetDevice(l->dev[i]);
		cudaStreamSynchronize(l->copy[i]);
		cudaEventDestroy(l->slice[i]);
		cudaEventDestroy(l->done[i]);
		cudaStreamDestroy(l->copy[i]);
	}
	(void) cudaGetLastError();
	l->n = 0;
}

int
gm_share_push(gm_share_links *l, const gm_share *sh, int n, int i, int32_t b, int32_t e,
			  size_t row_floats, char *err, size_t errlen)
{
	size_t		off = (size_t) b * row_floats,
				bytes = sizeof(float) * (size_t) (e - b) * row_floats;

	if (e <= b)
		return GM_OK;
	GM_CHECK(cudaSetDevice(sh[i].dev));
	GM_CHECK(cudaEventRecord(l->slice[i], sh[i].stream));
	GM_CHECK(cudaStreamWaitEvent(l->copy[i], l->slice[i], 0));
	for (int j = 0; j < n; j++)
		if (j != i && sh[j].F != sh[i].F)
			GM_CHECK(cudaMemcpyPeerAsync(sh[j].F + off, sh[j].dev, sh[i].F + off, sh[i].dev, bytes,
										 l->copy[i]));
	return GM_OK;
}

int
gm_share_join(gm_share_links *l, const gm_share *sh, int n, char *err, size_t errlen)
{
	for (int i = 0; i < n; i++)
	{
		GM_CHECK(cudaSetDevice(sh[i].dev));
		GM_CHECK(cudaEventRecord(l->done[i], l->copy[i]));
	}
	for (int j = 0; j < n; j++)
	{
		GM_CHECK(cudaSetDevice(sh[j].dev));
		for (int i = 0; i < n; i++)
			GM_CHECK(cudaStreamWaitEvent(sh[j].stream, l->done[i], 0));
	}
	return GM_OK;
}
