/*
 * shares.cu: a training over several GPUs (device_csr.cuh, "rows over
 * several GPUs"): row views of the matrices, the shares' plan and making,
 * peer access, and the exchange of solved rows between the devices.
 */
#include "device_csr.cuh"
#include "gm_core.h"			/* gm_csr_cut_rows (csr.c is linked into the module) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
