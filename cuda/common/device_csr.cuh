/*
 * device_csr.cuh: sparse matrices on the device, for every algorithm of the
 * CUDA module: a CSR uploaded from the host, the chunk list that splits rows
 * into warp-sized tasks of at most GM_CHUNK nonzeros, and rows grouped by
 * length (gm_csr_nnz_bins) for one launch per group.
 *
 * Every function returns GM_OK or an error code with a message in err; the
 * free functions are safe on zeroed and half-built structs.
 */
#ifndef GM_DEVICE_CSR_CUH
#define GM_DEVICE_CSR_CUH

#include "common.cuh"

#define GM_CHUNK		256		/* nonzeros per chunk */

/* A CSR on the device: int64 row pointers, int32 columns, float values. */
typedef struct gm_dcsr
{
	int32_t		n_rows;
	int32_t		n_cols;
	int64_t		nnz;
	int64_t    *indptr;			/* n_rows + 1 */
	int32_t    *indices;		/* nnz (at least one element allocated) */
	float	   *data;			/* nnz (at least one element allocated) */
} gm_dcsr;

/* Allocate d and copy a into it. */
int			gm_dcsr_upload(gm_dcsr *d, const gm_csr *a, char *err, size_t errlen);
/*
 * The same; a transpose not formed of of_host whose copy on this device is
 * src (all of it: one GPU; or a share's rows of it: several) is transposed
 * on the device instead of on the host (unless GM_HOST_TRANSPOSE is set in
 * the environment): src's entries from the device, the other rows'
 * streamed from the host.
 */
int			gm_dcsr_upload_of(gm_dcsr *d, const gm_csr *a, const gm_csr *of_host,
							  const gm_dcsr *src, char *err, size_t errlen);
void		gm_dcsr_free(gm_dcsr *d);

/*
 * A CSR built on the device and kept for its upload (gm_cuda_csr_from_coo,
 * coo_csr.cu): gm_dcsr_keep keeps d (its arrays the keeper's) as host's copy
 * on the current device, dropping any kept before; gm_dcsr_take_kept, when a
 * is that host copy: true, and d holds it (d's now, no copy made).
 */
void		gm_dcsr_keep(const gm_dcsr *d, const gm_csr *host);
bool		gm_dcsr_take_kept(gm_dcsr *d, const gm_csr *a);
extern "C" long long gm_cuda_csr_kept_bytes(void);
extern "C" void gm_cuda_csr_drop_kept(void);

/*
 * dst = src, n bytes, between pageable host memory and the current device
 * (up: to the device), through pinned buffers filled and emptied by threads
 * where n is large (32 MB or more).  Synchronous, as cudaMemcpy.
 */
cudaError_t gm_copy_staged(void *dst, const void *src, size_t n, int up);
cudaError_t gm_copy_staged_in(void *dst, const void *src, size_t n, int up, char **bufs);
char	  **gm_stage_buffers_alloc(void);
void		gm_stage_buffers_free(char **bufs);

/*
 * Every row split into max(1, ceil(len / GM_CHUNK)) chunks: chunks[j] is
 * (row, chunk number within the row) on the device, ptr (host, n_rows + 1)
 * the first chunk of each row, so rows [b, e) are chunks [ptr[b], ptr[e]).
 */
typedef struct gm_dchunks
{
	int32_t		n_rows;
	int2	   *chunks;			/* device, ptr[n_rows] */
	int32_t    *ptr;			/* host */
} gm_dchunks;

int			gm_dchunks_build(gm_dchunks *c, const int64_t *indptr, int32_t n_rows,
							 char *err, size_t errlen);
void		gm_dchunks_free(gm_dchunks *c);

/* What chunk task covers: its row, the row's entries [rb, re) and chunk
 * count, and the chunk's entries [b, e). */
typedef struct gm_chunk_span
{
	int32_t		row;
	int			nch;
	int64_t		rb,
				re,
				b,
				e;
} gm_chunk_span;

__device__ __forceinline__ gm_chunk_span
gm_chunk_at(const int2 *chunks, const int64_t *indptr, int32_t task)
{
	const int2	ch = chunks[task];
	gm_chunk_span s;

	s.row = ch.x;
	s.rb = indptr[ch.x];
	s.re = indptr[ch.x + 1];
	s.nch = s.re - s.rb > GM_CHUNK ? (int) ((s.re - s.rb + GM_CHUNK - 1) / GM_CHUNK) : 1;
	s.b = s.rb + (int64_t) ch.y * GM_CHUNK;
	s.e = s.b + GM_CHUNK < s.re ? s.b + GM_CHUNK : s.re;
	return s;
}

/*
 * A queue of chunks for kernels that run a warp per chunk.  Without a queue
 * (q == NULL) warp w of thread block t takes chunk t * W + w and nothing
 * else, so a thread block holds its registers and shared memory until its
 * longest chunk is done (chunks range from 1 to GM_CHUNK entries).  With a
 * queue the launch has only as many thread blocks as fit on the GPU at once
 * and every warp takes the next chunk from the counter q[0] until none is
 * left; q[1] counts the warps that are done, and the last of them sets both
 * back to zero for the next launch.  q: two ints, zero before the first
 * launch; launches that share one must be on one stream.
 */
__device__ __forceinline__ int32_t
gm_chunk_take(int *q, int32_t t)
{
	if ((threadIdx.x & 31) == 0)
		t = atomicAdd(q, 1);
	return __shfl_sync(0xffffffffu, t, 0);
}

/* The warp's first chunk. */
__device__ __forceinline__ int32_t
gm_chunk_first(int *q, int warps_per_block)
{
	int32_t		t = blockIdx.x * warps_per_block + (threadIdx.x >> 5);

	if (q != NULL)
		t = gm_chunk_take(q, t);
	return t;
}

/* The warp's next chunk: a number >= nchunks when there is none. */
__device__ __forceinline__ int32_t
gm_chunk_next(int *q, int32_t nchunks)
{
	int32_t		t = nchunks;

	if (q != NULL)
	{
		__syncwarp();
		t = gm_chunk_take(q, t);
	}
	return t;
}

/* Every warp of the launch calls this once, after its last chunk. */
__device__ __forceinline__ void
gm_chunk_done(int *q, int warps_per_block)
{
	if (q != NULL && (threadIdx.x & 31) == 0)
	{
		/* this warp's last take happens before its count */
		__threadfence();
		if (atomicAdd(q + 1, 1) == (int) (gridDim.x * warps_per_block) - 1)
		{
			atomicExch(q, 0);
			atomicExch(q + 1, 0);
		}
	}
}

/*
 * Resident thread blocks of kernel f on the current device (blocks per SM
 * times SMs); 0 if the runtime cannot say.
 */
template <typename F>
static int
gm_resident_blocks(F f, int threads, size_t smem)
{
	int			dev = 0,
				sms = 0,
				per = 0;

	if (cudaGetDevice(&dev) != cudaSuccess ||
		cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
		cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, f, threads, smem) != cudaSuccess)
	{
		(void) cudaGetLastError();
		return 0;
	}
	return per * sms;
}

/*
 * Thread blocks of a launch of kernel f (W warps a block, smem bytes of
 * dynamic shared memory) over nchunks chunks: one per W chunks without a
 * queue; with one, at most what fits on the GPU at once.  *resident keeps
 * that count for f between launches (static, zero at first: the runtime is
 * asked once, gm_resident_blocks).
 */
template <typename F>
static unsigned
gm_chunk_grid(F f, int *resident, int warps_per_block, size_t smem, int32_t nchunks,
			  const int *q)
{
	unsigned	g = (unsigned) ((nchunks + warps_per_block - 1) / warps_per_block);

	if (q != NULL)
	{
		if (*resident <= 0)
			*resident = gm_resident_blocks(f, warps_per_block * 32, smem);
		if (*resident > 0 && g > (unsigned) *resident)
			g = (unsigned) *resident;
	}
	return g;
}

/* Whether the kernels above take chunks from a queue (gm_cuda_set_chunk_queue). */
extern int	gm_chunk_queue_enabled;

/*
 * Rows grouped by nonzero count: perm (device, n_rows) lists the rows bin by
 * bin, bin_start (host, nbins + 1) where each bin begins in perm.
 */
typedef struct gm_dbins
{
	int			nbins;
	int32_t		n_rows;
	int32_t    *perm;			/* device */
	int32_t    *bin_start;		/* host */
} gm_dbins;

/* Upload bins computed on the host (gm_csr_nnz_bins's perm and bin_start). */
int			gm_dbins_upload(gm_dbins *b, const int32_t *perm, int32_t n_rows,
							const int32_t *bin_start, int nbins,
							char *err, size_t errlen);
/* Compute a's bins for the given upper bounds (gm_csr_nnz_bins) and upload them. */
int			gm_dbins_build(gm_dbins *b, const gm_csr *a, int nbins,
						   const int64_t *upper, char *err, size_t errlen);
void		gm_dbins_free(gm_dbins *b);

/* ------------------------------------------------ rows over several GPUs (shares.cu) */

/*
 * The row view of A's rows r0 .. r1: every row pointer (rows outside are
 * empty), the indices and values of those rows where they are in A; *ptr is
 * the new row pointer array (the caller frees it).  GM_ENOMEM.
 */
int			gm_csr_row_view(const gm_csr *A, int32_t r0, int32_t r1, gm_csr *v, int64_t **ptr);

/*
 * The shares of a training over several GPUs (implicit and explicit ALS):
 * each side's rows cut into ndev shares of about equal work (core's
 * gm_csr_cut_rows, a row weighing row_weight entries), a row view
 * of R and Rt for each share, and the virtual rows the core slices (virtual
 * row r of a side is row cut[i] + r of every share i at once; vrow[side][r]
 * the entries of the virtual rows before r).  With GM_GPUS_SHARE_DEVICE set
 * (tests) every share runs on device 0, as streams of one GPU.
 */
typedef struct gm_shares
{
	int			ndev;
	int			one_device;		/* GM_GPUS_SHARE_DEVICE */
	int32_t		cut[2][GM_MAX_GPUS + 1];
	int64_t    *vptr[GM_MAX_GPUS][2];	/* the row views' pointers */
	int32_t		vn[2];
	int64_t    *vrow[2];
} gm_shares;

/* Plan ndev shares of d's rows (ndev 1: one share, no views); GM_ENODEVICE, GM_ENOMEM. */
int			gm_shares_plan(gm_shares *s, const gm_mf_data *d, int ndev, double row_weight,
						   char *err, size_t errlen);

/*
 * Share i's problem: *dv is d with R and Rt replaced by the share's row
 * views (kept in v); its device in *dev, made current, reaching the others
 * directly where it can.  One share: *dv = *d, device 0.
 */
int			gm_shares_view(gm_shares *s, int i, const gm_mf_data *d, gm_mf_data *dv,
						   gm_csr *v, int *dev, char *err, size_t errlen);

/*
 * What a handle does with share i of d: create the state of device dev
 * from dv (the share's problem, gm_shares_view), solving rows [own0[s],
 * own1[s]) of each side s.
 */
typedef int (*gm_share_make)(void *top, int i, const gm_mf_data *dv, int dev, const int32_t *own0,
							 const int32_t *own1, char *err, size_t errlen);

/*
 * Plan ndev shares of d (gm_shares_plan) and make each in turn; *made is
 * i + 1 before share i is made, so that the caller frees a half-made one
 * too.
 */
int			gm_shares_make_all(gm_shares *s, const gm_mf_data *d, int ndev, double row_weight,
							   gm_share_make make, void *top, int *made, char *err, size_t errlen);

/* The rows share i solves of each side. */
static inline void
gm_shares_own(const gm_shares *s, int i, int32_t *own0, int32_t *own1)
{
	for (int side = 0; side < 2; side++)
	{
		own0[side] = s->cut[side][i];
		own1[side] = s->cut[side][i + 1];
	}
}

/* Share i's rows of a side for the virtual rows [begin, end): [*b, *e), maybe empty. */
static inline void
gm_shares_rows(const gm_shares *s, int side, int i, int32_t begin, int32_t end, int32_t *b,
			   int32_t *e)
{
	int32_t		o0 = s->cut[side][i],
				o1 = s->cut[side][i + 1];

	*b = o0 + begin;
	*e = o0 + end < o1 ? o0 + end : o1;
}

/* The device's name, with " x N" for N shares. */
void		gm_shares_device_name(const gm_shares *s, char *device, size_t devlen);
void		gm_shares_free(gm_shares *s);

/* Device dev reaches every other of the first n directly where it can (NVLink, PCIe peer). */
int			gm_enable_peers(int dev, int n, char *err, size_t errlen);

/* A device's share of a side: the full factor rows, of which it solved [own0, own1). */
typedef struct gm_share
{
	int			dev;
	cudaStream_t stream;
	float	   *F;				/* every row, row_floats floats each */
	int32_t		own0,
				own1;
} gm_share;

/*
 * The all-gather of a side's factors: every device's solved rows copied to
 * the others (peer copies after its queued work), then every stream waited
 * for.
 */
int			gm_share_allgather(const gm_share *sh, int n, size_t row_floats, char *err,
							   size_t errlen);

/*
 * The same exchange, overlapped with the sweep: after each slice, a
 * device's rows just solved go to the others on its copy stream (behind an
 * event of its compute stream: no host wait), and at the side's end every
 * device's compute stream waits for every copy stream (gm_share_join).  A
 * device's incoming rows are rows it neither reads nor writes during the
 * sweep (another device's share of the side being solved).  Off
 * (GM_SHARE_PUSH=0 in the environment): the all-gather after the side.
 */
typedef struct gm_share_links
{
	int			n;				/* devices with a copy stream and events */
	int			dev[GM_MAX_GPUS];
	cudaStream_t copy[GM_MAX_GPUS];
	cudaEvent_t slice[GM_MAX_GPUS];	/* on the compute stream: the slice is done */
	cudaEvent_t done[GM_MAX_GPUS];	/* on the copy stream: the pushes are done */
} gm_share_links;

/*
 * The links of s's devices when slices push their rows (several devices,
 * GM_SHARE_PUSH unset or not 0): *push says whether they were made.
 */
int			gm_share_links_open(gm_share_links *l, const gm_shares *s, int *push, char *err,
								size_t errlen);
void		gm_share_links_free(gm_share_links *l);

/* Rows [b, e) of sh[i].F, once sh[i].stream's queued work is done, to every other device's F. */
int			gm_share_push(gm_share_links *l, const gm_share *sh, int n, int i, int32_t b, int32_t e,
						  size_t row_floats, char *err, size_t errlen);

/* Every device's stream waits for every push queued so far. */
int			gm_share_join(gm_share_links *l, const gm_share *sh, int n, char *err, size_t errlen);

#endif							/* GM_DEVICE_CSR_CUH */
