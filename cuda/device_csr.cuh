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
void		gm_dcsr_free(gm_dcsr *d);

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

#endif							/* GM_DEVICE_CSR_CUH */
