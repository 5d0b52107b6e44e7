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

/*
 * Each entry of rows [0, n_rows) (ptr[r] - ptr[0] their offsets in ind and
 * val; a warp a row) whose column is in [c0, c1) into its column's next
 * free place of t, as row r_first + r.
 */
__global__ void
transpose_scatter(const int64_t *__restrict__ ptr, const int32_t *__restrict__ ind,
				  const float *__restrict__ val, int32_t n_rows, int32_t r_first, int32_t c0,
				  int32_t c1, const int64_t *__restrict__ tptr, unsigned *__restrict__ fill,
				  int32_t *__restrict__ tind, float *__restrict__ tval)
{
	int64_t		warp = ((int64_t) blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	int64_t		base = ptr[0];
	int			lane = threadIdx.x & 31;

	for (int64_t r = warp; r < n_rows; r += ((int64_t) gridDim.x * blockDim.x) >> 5)
		for (int64_t e = ptr[r] + lane; e < ptr[r + 1]; e += 32)
		{
			int32_t		j = ind[e - base];
			int64_t		pos;

			if (j < c0 || j >= c1)
				continue;
			pos = tptr[j] + atomicAdd(&fill[j], 1u);
			tind[pos] = r_first + (int32_t) r;
			tval[pos] = val[e - base];
		}
}

/* Blocks for a warp a row over n rows. */
static int
scatter_blocks(int64_t n)
{
	int64_t		blocks = (n * 32 + 255) / 256;

	return (int) (blocks > 65535 * 8 ? 65535 * 8 : blocks < 1 ? 1 : blocks);
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
 * Where a transpose not formed (a) finds its matrix's entries on this
 * device: src, the copy of of_host, is the matrix (one GPU) or a row view
 * of it (a share: whole rows [*r0, *r1) of it).  Returns 0 when it is
 * neither (the host then transposes: upload_transpose).
 */
static int
source_on_device(const gm_csr *a, const gm_csr *of_host, const gm_dcsr *src, int32_t *r0,
				 int32_t *r1)
{
	const gm_csr *m = a->of;
	int64_t		off;

	/* GM_HOST_TRANSPOSE in the environment: the host's slab transpose, for comparisons */
	if (m == NULL || of_host == NULL || src == NULL || getenv("GM_HOST_TRANSPOSE") != NULL ||
		of_host->n_rows != m->n_rows || of_host->n_cols != m->n_cols ||
		src->n_rows != m->n_rows || src->nnz != of_host->nnz || a->n_rows != m->n_cols ||
		a->of_r0 < 0 || a->of_r1 > m->n_cols || a->of_r0 > a->of_r1)
		return 0;
	if (of_host == m)
		off = 0;
	else if (of_host->nnz == 0 || m->indices == NULL || of_host->indices == NULL ||
			 of_host->indices < m->indices || of_host->indices > m->indices + m->nnz ||
			 of_host->data != m->data + (of_host->indices - m->indices))
		return 0;
	else
		off = of_host->indices - m->indices;
	if (off + of_host->nnz > m->nnz)
		return 0;
	/* the rows the view holds: [r0, r1), whole (the first row starting at e0, the first at e1) */
	*r0 = (int32_t) gm_lower_bound64(m->indptr, 0, m->n_rows, off);
	*r1 = (int32_t) gm_lower_bound64(m->indptr, *r0, m->n_rows, off + of_host->nnz);
	return m->indptr[*r0] == off && m->indptr[*r1] == off + of_host->nnz;
}

/* Entries of the host rows a stream chunk holds at most (and rows): 4M, 64 MB a buffer */
#define GM_STREAM_ENTRIES	((int64_t) 1 << 22)

/*
 * d (allocated, its row pointers uploaded) given the entries of a, the
 * transpose not formed of a matrix m = a->of of whose entries src, on this
 * device, holds rows [r0, r1) (all of them on one GPU; a share's rows on
 * several): transposed here, with no host transpose.  Each entry whose
 * column is one of d's rows [a->of_r0, a->of_r1) goes to its column's next
 * free place (an atomic counter a column): src's entries from the device,
 * the other rows' from the host, streamed through two pinned buffers and
 * two device buffers of GM_STREAM_ENTRIES (one chunk scattered while the
 * next is copied).  Then each slab of columns (at most GM_SLAB_ENTRIES
 * entries, or one longer column) is sorted by row with cub's segmented
 * sort, into a scratch slab and back.  A column's rows are unique, so the
 * result is the host transpose's exactly (rows ascending within a column).
 * Scratch: a counter and an offset a column, two slabs' entries and the
 * sort's, and with a share the stream's buffers.
 */
static int
transpose_on_device(gm_dcsr *d, const gm_csr *a, const gm_dcsr *src, int32_t r0, int32_t r1,
					char *err, size_t errlen)
{
	const gm_csr *mat = a->of;
	const int64_t *cp = a->indptr;
	int64_t		cap = getenv("GM_TRANSPOSE_SLAB") ? atoll(getenv("GM_TRANSPOSE_SLAB")) : GM_SLAB_ENTRIES,
				scap = getenv("GM_TRANSPOSE_STREAM") ? atoll(getenv("GM_TRANSPOSE_STREAM")) : GM_STREAM_ENTRIES;
	int32_t		n = a->n_rows;
	unsigned   *fill = NULL;
	int64_t    *rel = NULL;
	int32_t    *sind = NULL;
	float	   *sval = NULL;
	void	   *tmp = NULL;
	size_t		tmp_bytes = 0;
	char	   *hbuf[2] = {NULL, NULL},
			   *dbuf[2] = {NULL, NULL};
	cudaEvent_t ev[2] = {NULL, NULL};
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
	if (scap < 1)
		scap = GM_STREAM_ENTRIES;
	/* a row longer than a chunk is a chunk of its own */
	for (int32_t r = 0; r < mat->n_rows; r++)
		if ((r < r0 || r >= r1) && mat->indptr[r + 1] - mat->indptr[r] > scap)
			scap = mat->indptr[r + 1] - mat->indptr[r];
#define TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
		rc = e_ == cudaErrorMemoryAllocation ? GM_ENOMEM : GM_EDEVICE; \
		snprintf(err, errlen, "transposing on the device: %s failed: %s", #call, cudaGetErrorString(e_)); \
		goto done; } } while (0)
	TRY(gm_dev_malloc((void **) &fill, sizeof(unsigned) * ((size_t) n + 1)));
	TRY(gm_dev_malloc((void **) &rel, sizeof(int64_t) * ((size_t) n + 1)));
	TRY(gm_dev_malloc((void **) &sind, sizeof(int32_t) * (size_t) cap));
	TRY(gm_dev_malloc((void **) &sval, sizeof(float) * (size_t) cap));
	TRY(cudaMemset(fill, 0, sizeof(unsigned) * ((size_t) n + 1)));
	transpose_scatter<<<scatter_blocks(src->n_rows), 256>>>(src->indptr, src->indices, src->data,
															src->n_rows, 0, a->of_r0, a->of_r1,
															d->indptr, fill, d->indices, d->data);
	TRY(cudaGetLastError());
	/* entries outside src's rows (the rows beyond may all be empty: nothing to stream) */
	if (mat->indptr[r0] > 0 || mat->indptr[r1] < mat->nnz)
	{
		/* a chunk: rows' pointers (scap + 1), then their columns and values (scap each) */
		size_t		bytes = sizeof(int64_t) * ((size_t) scap + 1) + (sizeof(int32_t) + sizeof(float)) * (size_t) scap;
		int			used[2] = {0, 0},
					b = 0;

		for (int i = 0; i < 2; i++)
		{
			TRY(cudaHostAlloc((void **) &hbuf[i], bytes, cudaHostAllocDefault));
			TRY(gm_dev_malloc((void **) &dbuf[i], bytes));
			TRY(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
		}
		for (int32_t c0 = 0; c0 < mat->n_rows;)
		{
			int32_t		c1;
			int64_t		e0,
						ne;
			int64_t    *hp = (int64_t *) hbuf[b];
			int32_t    *hi = (int32_t *) (hp + scap + 1);
			float	   *hv = (float *) (hi + scap);
			int64_t    *dp = (int64_t *) dbuf[b];
			int32_t    *di = (int32_t *) (dp + scap + 1);
			float	   *dv = (float *) (di + scap);

			if (c0 >= r0 && c0 < r1)
			{
				c0 = r1;
				continue;
			}
			c1 = c0 + 1;
			while (c1 < mat->n_rows && c1 != r0 && c1 - c0 < scap && mat->indptr[c1 + 1] - mat->indptr[c0] <= scap)
				c1++;
			e0 = mat->indptr[c0];
			ne = mat->indptr[c1] - e0;
			/* buffer b was last scattered two chunks ago: that scatter ends first */
			if (used[b])
				TRY(cudaEventSynchronize(ev[b]));
			gm_copy_parallel(hp, mat->indptr + c0, sizeof(int64_t) * ((size_t) (c1 - c0) + 1));
			gm_copy_parallel(hi, mat->indices + e0, sizeof(int32_t) * (size_t) ne);
			gm_copy_parallel(hv, mat->data + e0, sizeof(float) * (size_t) ne);
			TRY(cudaMemcpyAsync(dp, hp, sizeof(int64_t) * ((size_t) (c1 - c0) + 1), cudaMemcpyHostToDevice));
			if (ne > 0)
			{
				TRY(cudaMemcpyAsync(di, hi, sizeof(int32_t) * (size_t) ne, cudaMemcpyHostToDevice));
				TRY(cudaMemcpyAsync(dv, hv, sizeof(float) * (size_t) ne, cudaMemcpyHostToDevice));
				transpose_scatter<<<scatter_blocks(c1 - c0), 256>>>(dp, di, dv, c1 - c0, c0, a->of_r0,
																	a->of_r1, d->indptr, fill,
																	d->indices, d->data);
				TRY(cudaGetLastError());
			}
			TRY(cudaEventRecord(ev[b]));
			used[b] = 1;
			b = 1 - b;
			c0 = c1;
		}
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
	if (rc != GM_OK)
		(void) cudaDeviceSynchronize();
	for (int i = 0; i < 2; i++)
	{
		if (ev[i])
			cudaEventDestroy(ev[i]);
		cudaFreeHost(hbuf[i]);
		gm_dev_free(dbuf[i]);
	}
	gm_dev_free(fill);
	gm_dev_free(rel);
	gm_dev_free(sind);
	gm_dev_free(sval);
	gm_dev_free(tmp);
	return rc;
}

/* Copies of at least this many bytes go through pinned buffers (gm_copy_staged) */
#define GM_STAGE_MIN	((size_t) 32 << 20)
/* A pinned buffer: 32 MB, two of them */
#define GM_STAGE_BYTES	((size_t) 32 << 20)

/*
 * dst = src, n bytes, between pageable host memory and the device (up:
 * src on the host; else dst): with n of at least GM_STAGE_MIN through two
 * pinned buffers, threads copying a piece into one (or out of it) while the
 * other's DMA runs; from pageable memory the driver copies with one thread
 * at a fraction of the link's rate.  Synchronous, as cudaMemcpy.
 */
cudaError_t
gm_copy_staged(void *dst, const void *src, size_t n, int up)
{
	return gm_copy_staged_in(dst, src, n, up, NULL);
}

/*
 * The two pinned buffers gm_copy_staged_in may be given (GM_STAGE_BYTES
 * each, portable: any device may copy through them), or NULL; freed by
 * gm_stage_buffers_free.  Allocated ahead by a thread that then hands them
 * to another, so that the copying thread makes no allocation of its own.
 */
char	  **
gm_stage_buffers_alloc(void)
{
	char	  **bufs = (char **) calloc(2, sizeof(char *));

	for (int i = 0; bufs && i < 2; i++)
		if (cudaHostAlloc((void **) &bufs[i], GM_STAGE_BYTES, cudaHostAllocPortable) != cudaSuccess)
		{
			(void) cudaGetLastError();
			gm_stage_buffers_free(bufs);
			return NULL;
		}
	return bufs;
}

void
gm_stage_buffers_free(char **bufs)
{
	if (bufs == NULL)
		return;
	for (int i = 0; i < 2; i++)
		if (bufs[i])
			cudaFreeHost(bufs[i]);
	free(bufs);
}

/* gm_copy_staged through bufs (gm_stage_buffers_alloc's) when not NULL */
cudaError_t
gm_copy_staged_in(void *dst, const void *src, size_t n, int up, char **bufs)
{
	char	   *buf[2] = {NULL, NULL};
	cudaStream_t st = NULL;
	cudaEvent_t ev[2] = {NULL, NULL};
	cudaError_t e = cudaSuccess,
				e2;
	int			used[2] = {0, 0},
				b = 0;
	size_t		off[2] = {0, 0},	/* the piece a buffer holds (down: not yet copied out) */
				len[2] = {0, 0};

	if (n < GM_STAGE_MIN || getenv("GM_STAGE_OFF") != NULL)
		return cudaMemcpy(dst, src, n, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
	if (bufs)
	{
		buf[0] = bufs[0];
		buf[1] = bufs[1];
	}
	for (int i = 0; i < 2 && e == cudaSuccess && !bufs; i++)
		e = cudaHostAlloc((void **) &buf[i], GM_STAGE_BYTES, cudaHostAllocDefault);
	if (e != cudaSuccess)
	{
		/* no pinned memory to be had: the driver's own staging, slower */
		(void) cudaGetLastError();
		for (int i = 0; i < 2; i++)
			cudaFreeHost(buf[i]);
		return cudaMemcpy(dst, src, n, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
	}
	e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	for (int i = 0; i < 2 && e == cudaSuccess; i++)
		e = cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming);
	for (size_t o = 0; o < n && e == cudaSuccess; o += GM_STAGE_BYTES)
	{
		size_t		m = n - o < GM_STAGE_BYTES ? n - o : GM_STAGE_BYTES;

		/* buffer b was last used two pieces ago: that copy ends first (down: then its piece out) */
		if (used[b])
		{
			if ((e = cudaEventSynchronize(ev[b])) != cudaSuccess)
				break;
			if (!up)
				gm_copy_parallel((char *) dst + off[b], buf[b], len[b]);
		}
		if (up)
		{
			gm_copy_parallel(buf[b], (const char *) src + o, m);
			e = cudaMemcpyAsync((char *) dst + o, buf[b], m, cudaMemcpyHostToDevice, st);
		}
		else
			e = cudaMemcpyAsync(buf[b], (const char *) src + o, m, cudaMemcpyDeviceToHost, st);
		if (e == cudaSuccess)
			e = cudaEventRecord(ev[b], st);
		used[b] = 1;
		off[b] = o;
		len[b] = m;
		b = 1 - b;
	}
	if (st)
	{
		e2 = cudaStreamSynchronize(st);
		if (e == cudaSuccess)
			e = e2;
		cudaStreamDestroy(st);
	}
	/* down: the last two pieces, the older first */
	for (int i = 0; i < 2 && !up && e == cudaSuccess; i++)
		if (used[(b + i) % 2])
			gm_copy_parallel((char *) dst + off[(b + i) % 2], buf[(b + i) % 2], len[(b + i) % 2]);
	for (int i = 0; i < 2; i++)
	{
		if (ev[i])
			cudaEventDestroy(ev[i]);
		if (!bufs)
			cudaFreeHost(buf[i]);
	}
	return e;
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
	GM_CHECK(gm_copy_staged(d->indptr, a->indptr, sizeof(int64_t) * n1, 1));
	return GM_OK;
}

/*
 * Allocate d and copy a into it (a may be a transpose not formed: gm_csr's
 * of; when of_host is a->of, or a row view of it, and src its copy on this
 * device, it is transposed on the device).
 */
int
gm_dcsr_upload_of(gm_dcsr *d, const gm_csr *a, const gm_csr *of_host, const gm_dcsr *src,
				  char *err, size_t errlen)
{
	int32_t		r0,
				r1;
	int			rc;

	if (!source_on_device(a, of_host, src, &r0, &r1))
		return gm_dcsr_upload(d, a, err, errlen);
	if ((rc = dcsr_alloc(d, a, err, errlen)) != GM_OK)
		return rc;
	return transpose_on_device(d, a, src, r0, r1, err, errlen);
}

/*
 * Tests: a's transpose formed on the device from a's upload (through a
 * transpose not formed, as a lean training has it) equals at, formed on
 * the host, entry for entry; with shares > 1, as a training over that many
 * shares forms it: each share's rows of at (gm_csr_cut_rows of at) from
 * its rows of a (of a) on the device and the others' from the host.
 * GM_OK when equal; GM_EINVAL with the first difference in err.
 */
extern "C" int
gm_cuda_check_device_transpose(const gm_csr *a, const gm_csr *at, int shares, char *err,
							   size_t errlen)
{
	int32_t		cr[GM_MAX_GPUS + 1],
				ct[GM_MAX_GPUS + 1];
	int			rc = GM_OK;

	if (shares < 1 || shares > GM_MAX_GPUS)
	{
		snprintf(err, errlen, "between 1 and %d shares, not %d", GM_MAX_GPUS, shares);
		return GM_EINVAL;
	}
	gm_csr_cut_rows(a, shares, 0.0, cr);
	gm_csr_cut_rows(at, shares, 0.0, ct);
	for (int s = 0; s < shares && rc == GM_OK; s++)
	{
		gm_dcsr		da,
					dt;
		gm_csr		va,
					vt;
		int64_t    *pa = NULL,
				   *pt = NULL;
		int32_t    *ind = NULL,
					r0,
					r1;
		float	   *dat = NULL;

		memset(&da, 0, sizeof(da));
		memset(&dt, 0, sizeof(dt));
		if (shares == 1)
		{
			va = *a;
			vt = *at;
		}
		else if (gm_csr_row_view(a, cr[s], cr[s + 1], &va, &pa) != GM_OK ||
				 gm_csr_row_view(at, ct[s], ct[s + 1], &vt, &pt) != GM_OK)
			rc = GM_ENOMEM;
		vt.indices = NULL;
		vt.data = NULL;
		vt.of = a;
		vt.of_r0 = shares == 1 ? 0 : ct[s];
		vt.of_r1 = shares == 1 ? a->n_cols : ct[s + 1];
		if (rc == GM_OK && (rc = gm_dcsr_upload(&da, &va, err, errlen)) == GM_OK &&
			!source_on_device(&vt, shares == 1 ? a : &va, &da, &r0, &r1))
		{
			snprintf(err, errlen, "share %d of %d: its rows not seen as the source on the device", s, shares);
			rc = GM_EINVAL;
		}
		if (rc == GM_OK &&
			(rc = gm_dcsr_upload_of(&dt, &vt, shares == 1 ? a : &va, &da, err, errlen)) == GM_OK)
		{
			size_t		nz = (size_t) (vt.nnz > 0 ? vt.nnz : 1);
			int64_t		base = at->indptr[vt.of_r0];

			ind = (int32_t *) malloc(sizeof(int32_t) * nz);
			dat = (float *) malloc(sizeof(float) * nz);
			if (!ind || !dat)
				rc = GM_ENOMEM;
			else if (cudaMemcpy(ind, dt.indices, sizeof(int32_t) * nz, cudaMemcpyDeviceToHost) != cudaSuccess ||
					 cudaMemcpy(dat, dt.data, sizeof(float) * nz, cudaMemcpyDeviceToHost) != cudaSuccess)
				rc = GM_EDEVICE;
			for (int64_t e = 0; rc == GM_OK && e < vt.nnz; e++)
				if (ind[e] != at->indices[base + e] || memcmp(&dat[e], &at->data[base + e], sizeof(float)) != 0)
				{
					snprintf(err, errlen, "share %d of %d, entry %lld: row %d value %g on the device, row %d value %g on the host",
							 s, shares, (long long) (base + e), ind[e], dat[e], at->indices[base + e],
							 at->data[base + e]);
					rc = GM_EINVAL;
				}
		}
		free(ind);
		free(dat);
		free(pa);
		free(pt);
		gm_dcsr_free(&da);
		gm_dcsr_free(&dt);
	}
	return rc;
}

/*
 * Tests: gm_copy_staged moves n bytes up (pageable host to device) and down
 * exactly, for n below, at and above GM_STAGE_MIN, a whole number of pinned
 * buffers and not, from and to addresses off by a few bytes; each checked
 * against cudaMemcpy's copy of the same bytes.  GM_OK when equal; else the
 * first difference in err.
 */
extern "C" int
gm_cuda_check_staged_copy(char *err, size_t errlen)
{
	const size_t sizes[] = {GM_STAGE_MIN - 1, GM_STAGE_MIN, GM_STAGE_MIN + 1, 2 * GM_STAGE_BYTES,
	3 * GM_STAGE_BYTES + 12345, 7 * GM_STAGE_BYTES + 5};
	const size_t most = 7 * GM_STAGE_BYTES + 5 + 8;
	unsigned char *src = (unsigned char *) malloc(most),
			   *dst = (unsigned char *) malloc(most);
	char	   *dev = NULL;
	int			rc = GM_OK;

	if (!src || !dst || cudaMalloc((void **) &dev, most) != cudaSuccess)
	{
		free(src);
		free(dst);
		snprintf(err, errlen, "no room for the staged copies' check");
		return GM_ENOMEM;
	}
	for (size_t i = 0; i < most; i++)
		src[i] = (unsigned char) ((i * 2654435761u) >> 13);
	for (size_t z = 0; rc == GM_OK && z < sizeof(sizes) / sizeof(sizes[0]); z++)
		for (int up = 0; rc == GM_OK && up <= 1; up++)
		{
			size_t		n = sizes[z],
						so = 3 * z % 8, /* the host's side off by so bytes, the device's by 5 */
						first = n;
			cudaError_t e;

			memset(dst, 0xA5, most);
			if (up)
			{
				/* up staged, down plain */
				e = gm_copy_staged(dev + 5, src + so, n, 1);
				if (e == cudaSuccess)
					e = cudaMemcpy(dst + so, dev + 5, n, cudaMemcpyDeviceToHost);
			}
			else
			{
				/* up plain, down staged */
				e = cudaMemcpy(dev + 5, src + so, n, cudaMemcpyHostToDevice);
				if (e == cudaSuccess)
					e = gm_copy_staged(dst + so, dev + 5, n, 0);
			}
			if (e != cudaSuccess)
			{
				snprintf(err, errlen, "%zu bytes %s: %s", n, up ? "up" : "down", cudaGetErrorString(e));
				rc = GM_EDEVICE;
				break;
			}
			if (memcmp(dst + so, src + so, n) != 0)
				for (first = 0; first < n && dst[so + first] == src[so + first]; first++)
					;
			if (first < n)
			{
				snprintf(err, errlen, "%zu bytes %s: byte %zu is %u, not %u", n, up ? "up" : "down",
						 first, dst[so + first], src[so + first]);
				rc = GM_EINVAL;
			}
			/* and nothing beyond the copy written (down: the host's bytes after it) */
			else if (!up && dst[so + n] != 0xA5)
			{
				snprintf(err, errlen, "%zu bytes down: the byte after the copy written", n);
				rc = GM_EINVAL;
			}
		}
	cudaFree(dev);
	free(src);
	free(dst);
	return rc;
}

/* Allocate d and copy a into it (a may be a transpose not formed: gm_csr's of). */
int
gm_dcsr_upload(gm_dcsr *d, const gm_csr *a, char *err, size_t errlen)
{
	int			rc;

	if (gm_dcsr_take_kept(d, a))
		return GM_OK;
	if ((rc = dcsr_alloc(d, a, err, errlen)) != GM_OK)
		return rc;
	if (a->of != NULL)
		return upload_transpose(d, a, err, errlen);
	if (a->nnz > 0)
	{
		GM_CHECK(gm_copy_staged(d->indices, a->indices, sizeof(int32_t) * (size_t) a->nnz, 1));
		GM_CHECK(gm_copy_staged(d->data, a->data, sizeof(float) * (size_t) a->nnz, 1));
	}
	return GM_OK;
}

/* a CSR kept on the device for its upload (gm_dcsr_keep), and the host arrays it is a copy of */
static struct
{
	gm_dcsr		d;
	int			dev;
	const int64_t *indptr;
	const int32_t *indices;
	const float *data;
}			kept;

/* Keep d (its arrays now the keeper's) as host's copy on the current device. */
void
gm_dcsr_keep(const gm_dcsr *d, const gm_csr *host)
{
	gm_cuda_csr_drop_kept();
	kept.d = *d;
	(void) cudaGetDevice(&kept.dev);
	kept.indptr = host->indptr;
	kept.indices = host->indices;
	kept.data = host->data;
}

/* Device bytes of the CSR kept for its upload (0: none). */
extern "C" long long
gm_cuda_csr_kept_bytes(void)
{
	if (kept.d.indptr == NULL)
		return 0;
	return (long long) (sizeof(int64_t) * ((size_t) kept.d.n_rows + 1) +
						(sizeof(int32_t) + sizeof(float)) * (size_t) (kept.d.nnz > 0 ? kept.d.nnz : 1));
}

/* Free the CSR kept for its upload, if any. */
extern "C" void
gm_cuda_csr_drop_kept(void)
{
	int			cur = 0;

	if (kept.d.indptr == NULL)
		return;
	(void) cudaGetDevice(&cur);
	(void) cudaSetDevice(kept.dev);
	gm_dcsr_free(&kept.d);
	(void) cudaSetDevice(cur);
	memset(&kept, 0, sizeof(kept));
}

/*
 * The kept CSR into d when it is a's copy on the current device (a's host
 * arrays those it was downloaded into): true, and it is d's now.
 */
bool
gm_dcsr_take_kept(gm_dcsr *d, const gm_csr *a)
{
	int			cur = -1;

	if (kept.d.indptr == NULL || a->of != NULL || a->indptr != kept.indptr ||
		a->indices != kept.indices || a->data != kept.data || a->nnz != kept.d.nnz ||
		a->n_rows != kept.d.n_rows || a->n_cols != kept.d.n_cols ||
		cudaGetDevice(&cur) != cudaSuccess || cur != kept.dev)
		return false;
	*d = kept.d;
	memset(&kept, 0, sizeof(kept));
	return true;
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
