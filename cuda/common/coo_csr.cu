/*
 * coo_csr.cu: the matrix of a training built on the GPU from the rows read
 * (gm_cuda_csr_from_coo): the CSR gm_csr_from_coo builds on the host, entry
 * for entry and bit for bit, from a radix sort of the (row, column) pairs.
 *
 *  1. Every device array is allocated first: two arrays of 8-byte keys, two
 *     of values, the sort's scratch and the row pointers (24 bytes an entry
 *     and the scratch).  Without the room, nothing is uploaded and the
 *     caller builds on the host.
 *  2. The keys' maps, then the rows, columns and values are uploaded
 *     (gm_copy_staged), and the host's rows freed; each pair becomes a key
 *     (through the maps), the row's bits above the column's.
 *  3. cub::DeviceRadixSort sorts the keys with their values over the bits
 *     they use.  It is stable: equal pairs keep their input order.
 *  4. Runs of equal keys: their heads marked and numbered (an exclusive
 *     scan); each head's thread sums its run in input order, as the host
 *     does (the same floats), and writes the column, the sum and the row
 *     pointers of the rows that begin there.
 *  5. The CSR is downloaded into the host's arrays of the columns and values
 *     (their pages already mapped; gm_csr_free frees them), and, when asked
 *     for, its transpose's row pointers: the columns' entries counted (atomic
 *     adds) and summed (a scan).  With keep, a copy stays on the device
 *     (gm_dcsr_keep): the training's upload of that CSR takes it instead of
 *     copying it again.
 */
#include "device_csr.cuh"
#include "gm_core.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <vector>

static int
bits_for(int64_t n)
{
	int			b = 1;

	while (b < 62 && ((int64_t) 1 << b) < n)
		b++;
	return b;
}

/*
 * keys[i] = row << cbits | column, each through its map where there is one
 * (an entry outside the map, or mapped to -1, is out of range); *bad = 1
 * where a pair is out of range
 */
__global__ void
coo_pack_keys(const int32_t *rows, const int32_t *cols, uint64_t *keys, int64_t n,
			  int32_t n_rows, int32_t n_cols, int cbits, const int32_t *rmap, int32_t rmap_n,
			  const int32_t *cmap, int32_t cmap_n, int *bad)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		int32_t		r = rows[i],
					c = cols[i];

		if (rmap)
			r = (uint32_t) r < (uint32_t) rmap_n ? rmap[r] : -1;
		if (cmap)
			c = (uint32_t) c < (uint32_t) cmap_n ? cmap[c] : -1;

		if (r < 0 || r >= n_rows || c < 0 || c >= n_cols)
		{
			*bad = 1;
			r = c = 0;
		}
		keys[i] = ((uint64_t) r << cbits) | (uint32_t) c;
	}
}

/* head[i] = 1 where key i begins a run of equal keys */
__global__ void
coo_mark_heads(const uint64_t *keys, int32_t *head, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		head[i] = i == 0 || keys[i] != keys[i - 1];
}

/*
 * Each run's head (pos: its entry's index in the CSR): its values summed in
 * order, its column and sum written, and the row pointers of the rows from
 * the previous key's row (exclusive) to its own; the last run also those of
 * the rows after its own, and indptr[n_rows] (the entries' count).
 */
__global__ void
coo_reduce_runs(const uint64_t *keys, const float *vals, const int32_t *pos, int64_t n,
				int cbits, int32_t n_rows, int32_t *ind, float *dat, int64_t *indptr)
{
	const uint64_t cmask = ((uint64_t) 1 << cbits) - 1;

	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		uint64_t	k = keys[i];
		int64_t		j,
					e = i + 1;
		int32_t		r,
					pr;
		float		s;

		if (i > 0 && keys[i - 1] == k)
			continue;
		j = pos[i];
		s = vals[i];
		while (e < n && keys[e] == k)
			s += vals[e++];
		ind[j] = (int32_t) (k & cmask);
		dat[j] = s;
		r = (int32_t) (k >> cbits);
		pr = i > 0 ? (int32_t) (keys[i - 1] >> cbits) : -1;
		for (int32_t rr = pr + 1; rr <= r; rr++)
			indptr[rr] = j;
		if (e == n)
			for (int64_t rr = (int64_t) r + 1; rr <= n_rows; rr++)
				indptr[rr] = j + 1;
	}
}

/* cnt[ind[j]] += 1 for j < m */
__global__ void
coo_count_columns(const int32_t *ind, int64_t m, unsigned long long *cnt)
{
	for (int64_t j = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; j < m;
		 j += (int64_t) gridDim.x * blockDim.x)
		atomicAdd(&cnt[ind[j]], 1ULL);
}

static unsigned
grid_for(int64_t n)
{
	int64_t		b = (n + 255) / 256;

	return (unsigned) (b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

static void
free_all(void **p, int n)
{
	for (int i = 0; i < n; i++)
	{
		gm_dev_free(p[i]);
		p[i] = NULL;
	}
}

static bool
stop_now(const gm_callbacks *cb)
{
	return cb && cb->should_stop && cb->should_stop(cb->arg);
}

/*
 * The CSR of the nnz pairs (*rows, *cols) with values *vals (n_rows x
 * n_cols, duplicates summed), built on the current device: gm_csr_from_coo's
 * CSR.  The arrays are malloc'd; once uploaded they are taken (the rows'
 * freed, the columns' and values' hold out's entries) and the pointers set
 * to NULL.  An error with the pointers still set means nothing
 * was uploaded (GM_ENOMEM: the GPU lacks the room, GM_ENOTSUP: more than
 * 2^31 - 1 pairs); the caller builds on the host.  An error with them NULL
 * (the device failed, cb->should_stop said stop: GM_ECANCELED) leaves out
 * empty.  row_map, col_map (row_map_n, col_map_n entries; NULL: none): the
 * entries' indices, applied as they are packed.  keep: a copy stays on the
 * device for gm_dcsr_upload of out.
 * col_ptr (n_cols + 1, may be NULL): the row pointers of out's transpose.
 * seconds (may be NULL): uploading, sorting and summing, downloading.
 */
extern "C" int
gm_cuda_csr_from_coo(int32_t n_rows, int32_t n_cols, int64_t nnz, int32_t **rows,
					 int32_t **cols, float **vals, const int32_t *row_map, int32_t row_map_n,
					 const int32_t *col_map, int32_t col_map_n, int keep, const gm_callbacks *cb,
					 gm_csr *out, int64_t *col_ptr, double *seconds, char *err, size_t errlen)
{
	/*
	 * keys[2], vals[2], scratch, indptr, bad flag, column counts, the row and
	 * column maps; then the kept copy's ind, dat
	 */
	void	   *p[10] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
	uint64_t   *keys[2];
	float	   *v[2];
	int64_t    *indptr;
	int		   *bad;
	size_t		temp_sort = 0,
				temp_scan = 0,
				temp_cols = 0,
				temp;
	int			cbits = bits_for(n_cols),
				rbits = bits_for(n_rows),
				hbad = 0,
				rc = GM_OK;
	int64_t		m = 0;
	double		t0 = gm_wall_seconds(),
				t1,
				t2;
	cudaError_t e;

	memset(out, 0, sizeof(*out));
	if (seconds)
		seconds[0] = seconds[1] = seconds[2] = 0;
	gm_cuda_csr_drop_kept();
	GM_CHECK(cudaSetDevice(0));	/* a training on one GPU trains on device 0 */
	if (nnz < 1 || nnz > INT32_MAX || n_rows < 1 || n_cols < 1 || cbits + rbits > 64)
	{
		snprintf(err, errlen, "the GPU builds matrices of 1 to %d entries, not %lld",
				 INT32_MAX, (long long) nnz);
		return GM_ENOTSUP;
	}
	{
		cub::DoubleBuffer<uint64_t> dk(NULL, NULL);
		cub::DoubleBuffer<float> dv(NULL, NULL);

		GM_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_sort, dk, dv, nnz, 0, cbits + rbits));
		GM_CHECK(cub::DeviceScan::ExclusiveSum(NULL, temp_scan, (int32_t *) NULL, nnz));
		GM_CHECK(cub::DeviceScan::ExclusiveSum(NULL, temp_cols, (unsigned long long *) NULL,
											   (int64_t) n_cols + 1));
	}
	temp = temp_sort > temp_scan ? temp_sort : temp_scan;
	temp = temp > temp_cols ? temp : temp_cols;
	/* everything first: without the room, nothing was uploaded */
	e = gm_dev_malloc(&p[0], sizeof(uint64_t) * (size_t) nnz);
	if (e == cudaSuccess)
		e = gm_dev_malloc(&p[1], sizeof(uint64_t) * (size_t) nnz);
	if (e == cudaSuccess)
		e = gm_dev_malloc(&p[2], sizeof(float) * (size_t) nnz);
	if (e == cudaSuccess)
		e = gm_dev_malloc(&p[3], sizeof(float) * (size_t) nnz);
	if (e == cudaSuccess)
		e = gm_dev_malloc(&p[4], temp > 0 ? temp : 1);
	if (e == cudaSuccess)
		e = gm_dev_malloc(&p[5], sizeof(int64_t) * ((size_t) n_rows + 1));
	if (e == cudaSuccess)
		e = gm_dev_malloc(&p[6], sizeof(int));
	if (e == cudaSuccess && col_ptr)
		e = gm_dev_malloc(&p[7], sizeof(unsigned long long) * ((size_t) n_cols + 1));
	if (e == cudaSuccess && row_map)
		e = gm_dev_malloc(&p[8], sizeof(int32_t) * (size_t) (row_map_n > 0 ? row_map_n : 1));
	if (e == cudaSuccess && col_map)
		e = gm_dev_malloc(&p[9], sizeof(int32_t) * (size_t) (col_map_n > 0 ? col_map_n : 1));
	if (e != cudaSuccess)
	{
		(void) cudaGetLastError();
		free_all(p, 10);
		snprintf(err, errlen, "the GPU has no room for the matrix's build (%.0f MB): %s",
				 (24.0 * nnz + temp + 8.0 * n_rows) / 1048576.0, cudaGetErrorString(e));
		return gm_status_oom(e) ? GM_ENOMEM : GM_EDEVICE;
	}
	keys[0] = (uint64_t *) p[0];
	keys[1] = (uint64_t *) p[1];
	v[0] = (float *) p[2];
	v[1] = (float *) p[3];
	indptr = (int64_t *) p[5];
	bad = (int *) p[6];

#define CU(call) \
	do { \
		cudaError_t ce_ = (call); \
		if (ce_ != cudaSuccess) \
		{ \
			snprintf(err, errlen, "%s failed: %s (%s:%d)", #call, cudaGetErrorString(ce_), \
					 __FILE__, __LINE__); \
			(void) cudaGetLastError(); \
			rc = GM_EDEVICE; \
			goto done; \
		} \
	} while (0)

	/* 2. up: the maps; the rows and columns into keys[1]'s two halves, the values into v[0] */
	if (row_map && row_map_n > 0)
		CU(gm_copy_staged(p[8], row_map, sizeof(int32_t) * (size_t) row_map_n, 1));
	if (col_map && col_map_n > 0)
		CU(gm_copy_staged(p[9], col_map, sizeof(int32_t) * (size_t) col_map_n, 1));
	CU(gm_copy_staged(keys[1], *rows, sizeof(int32_t) * (size_t) nnz, 1));
	CU(gm_copy_staged((int32_t *) keys[1] + nnz, *cols, sizeof(int32_t) * (size_t) nnz, 1));
	CU(gm_copy_staged(v[0], *vals, sizeof(float) * (size_t) nnz, 1));
	/* the columns' and values' arrays (their pages the host's already) take the CSR's entries */
	free(*rows);
	out->indices = *cols;
	out->data = *vals;
	*rows = *cols = NULL;
	*vals = NULL;
	t1 = gm_wall_seconds();
	if (stop_now(cb))
	{
		snprintf(err, errlen, "building the matrix canceled");
		rc = GM_ECANCELED;
		goto done;
	}
	CU(cudaMemset(bad, 0, sizeof(int)));
	coo_pack_keys<<<grid_for(nnz), 256>>>((const int32_t *) keys[1], (const int32_t *) keys[1] + nnz,
										  keys[0], nnz, n_rows, n_cols, cbits,
										  (const int32_t *) p[8], row_map_n,
										  (const int32_t *) p[9], col_map_n, bad);
	CU(cudaGetLastError());
	CU(cudaMemcpy(&hbad, bad, sizeof(int), cudaMemcpyDeviceToHost));
	if (hbad)
	{
		snprintf(err, errlen, "a row or column index out of range (%d x %d)", n_rows, n_cols);
		rc = GM_EINVAL;
		goto done;
	}

	/* 3. the sort */
	{
		cub::DoubleBuffer<uint64_t> dk(keys[0], keys[1]);
		cub::DoubleBuffer<float> dv(v[0], v[1]);
		uint64_t   *sk,
				   *ak;
		float	   *sv;
		int32_t    *pos,
				   *ind;
		float	   *dat;

		CU(cub::DeviceRadixSort::SortPairs(p[4], temp, dk, dv, nnz, 0, cbits + rbits));
		sk = dk.Current();
		ak = dk.Alternate();
		sv = dv.Current();
		pos = (int32_t *) dv.Alternate();
		/* the result in the spare keys' two halves */
		ind = (int32_t *) ak;
		dat = (float *) ak + nnz;
		if (stop_now(cb))
		{
			snprintf(err, errlen, "building the matrix canceled");
			rc = GM_ECANCELED;
			goto done;
		}

		/* 4. runs: heads numbered, each run summed */
		coo_mark_heads<<<grid_for(nnz), 256>>>(sk, pos, nnz);
		CU(cudaGetLastError());
		CU(cub::DeviceScan::ExclusiveSum(p[4], temp, pos, nnz));
		coo_reduce_runs<<<grid_for(nnz), 256>>>(sk, sv, pos, nnz, cbits, n_rows, ind, dat, indptr);
		CU(cudaGetLastError());
		CU(cudaMemcpy(&m, indptr + n_rows, sizeof(int64_t), cudaMemcpyDeviceToHost));
		if (col_ptr)
		{
			unsigned long long *cnt = (unsigned long long *) p[7];

			CU(cudaMemset(cnt, 0, sizeof(unsigned long long) * ((size_t) n_cols + 1)));
			coo_count_columns<<<grid_for(m), 256>>>(ind, m, cnt);
			CU(cudaGetLastError());
			CU(cub::DeviceScan::ExclusiveSum(p[4], temp, cnt, (int64_t) n_cols + 1));
			CU(cudaMemcpy(col_ptr, cnt, sizeof(int64_t) * ((size_t) n_cols + 1),
						  cudaMemcpyDeviceToHost));
		}
		t2 = gm_wall_seconds();

		/*
		 * 5. down, into the host's arrays: the entries into those of the
		 * columns and values (no page of them to fault in; m <= nnz), then
		 * shrunk to m
		 */
		out->n_rows = n_rows;
		out->n_cols = n_cols;
		out->nnz = m;
		out->indptr = (int64_t *) malloc(sizeof(int64_t) * ((size_t) n_rows + 1));
		if (!out->indptr)
		{
			snprintf(err, errlen, "out of memory for the matrix's row pointers (%d rows)", n_rows);
			rc = GM_ENOMEM;
			goto done;
		}
		CU(gm_copy_staged(out->indptr, indptr, sizeof(int64_t) * ((size_t) n_rows + 1), 0));
		CU(gm_copy_staged(out->indices, ind, sizeof(int32_t) * (size_t) m, 0));
		CU(gm_copy_staged(out->data, dat, sizeof(float) * (size_t) m, 0));
		if (m < nnz)
		{
			int32_t    *i2 = (int32_t *) realloc(out->indices, sizeof(int32_t) * (size_t) m);
			float	   *d2 = (float *) realloc(out->data, sizeof(float) * (size_t) m);

			if (i2)
				out->indices = i2;
			if (d2)
				out->data = d2;
		}
		if (seconds)
		{
			seconds[0] = t1 - t0;
			seconds[1] = t2 - t1;
			seconds[2] = gm_wall_seconds() - t2;
		}
		if (keep)
		{
			/* the sort's arrays go; the result moves to arrays of its own size */
			gm_dev_free(sk);
			gm_dev_free(sv);
			gm_dev_free(pos);
			gm_dev_free(p[4]);
			gm_dev_free(p[6]);
			p[0] = p[1] = p[2] = p[3] = p[4] = p[6] = NULL;
			p[1] = ak;			/* freed at the end */
			if (gm_dev_malloc(&p[0], sizeof(int32_t) * (size_t) (m > 0 ? m : 1)) == cudaSuccess &&
				gm_dev_malloc(&p[2], sizeof(float) * (size_t) (m > 0 ? m : 1)) == cudaSuccess &&
				cudaMemcpy(p[0], ind, sizeof(int32_t) * (size_t) m, cudaMemcpyDeviceToDevice) == cudaSuccess &&
				cudaMemcpy(p[2], dat, sizeof(float) * (size_t) m, cudaMemcpyDeviceToDevice) == cudaSuccess)
			{
				gm_dcsr		d;

				d.n_rows = n_rows;
				d.n_cols = n_cols;
				d.nnz = m;
				d.indptr = indptr;
				d.indices = (int32_t *) p[0];
				d.data = (float *) p[2];
				gm_dcsr_keep(&d, out);
				p[0] = p[2] = p[5] = NULL;
			}
			else
				(void) cudaGetLastError();	/* not kept: the training uploads it */
		}
	}
done:
#undef CU
	free_all(p, 10);
	if (rc != GM_OK)
		gm_csr_free(out);
	return rc;
}

/*
 * Tests: a's upload (gm_dcsr_upload, which takes the kept CSR when a is its
 * host copy) downloaded again equals a; *taken says whether it was the kept
 * copy.  GM_OK when equal; GM_EINVAL with the first difference in err.
 */
extern "C" int
gm_cuda_check_upload_equal(const gm_csr *a, int *taken, char *err, size_t errlen)
{
	gm_dcsr		d;
	std::vector<int64_t> p((size_t) a->n_rows + 1);
	std::vector<int32_t> ind((size_t) (a->nnz > 0 ? a->nnz : 1));
	std::vector<float> dat((size_t) (a->nnz > 0 ? a->nnz : 1));
	long long	before = gm_cuda_csr_kept_bytes();
	int			rc;

	if ((rc = gm_dcsr_upload(&d, a, err, errlen)) != GM_OK)
	{
		gm_dcsr_free(&d);
		return rc;
	}
	*taken = before > 0 && gm_cuda_csr_kept_bytes() == 0;
	rc = GM_OK;
	if (cudaMemcpy(p.data(), d.indptr, sizeof(int64_t) * p.size(), cudaMemcpyDeviceToHost) != cudaSuccess ||
		cudaMemcpy(ind.data(), d.indices, sizeof(int32_t) * (size_t) a->nnz, cudaMemcpyDeviceToHost) != cudaSuccess ||
		cudaMemcpy(dat.data(), d.data, sizeof(float) * (size_t) a->nnz, cudaMemcpyDeviceToHost) != cudaSuccess)
	{
		snprintf(err, errlen, "downloading the upload failed: %s", cudaGetErrorString(cudaGetLastError()));
		rc = GM_EDEVICE;
	}
	else if (d.nnz != a->nnz || memcmp(p.data(), a->indptr, sizeof(int64_t) * p.size()) != 0 ||
			 memcmp(ind.data(), a->indices, sizeof(int32_t) * (size_t) a->nnz) != 0 ||
			 memcmp(dat.data(), a->data, sizeof(float) * (size_t) a->nnz) != 0)
	{
		snprintf(err, errlen, "the device's copy differs from the host's");
		rc = GM_EINVAL;
	}
	gm_dcsr_free(&d);
	return rc;
}
