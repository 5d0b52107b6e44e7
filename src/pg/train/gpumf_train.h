/*
 * gpumf_train.h: the training line of the PostgreSQL layer (src/pg/train).
 *
 *   train.c          gpumf_train, gpumf_drop_model
 *   train_device.c   the device a training runs on; the GPU made ready meanwhile
 *   train_service.c  the training service: a worker that keeps the GPU warm
 *   tune.c           gpumf_tune (hyper-parameter search)
 *   synth.c          gpumf_synthetic, gpumf_synthetic_ratings
 */
#ifndef GPUMF_TRAIN_H
#define GPUMF_TRAIN_H

#include "gpumf_serve.h"

/* ---------------------------------------------------- train_device.c */

/* the backend training uses under gpumf.device (may ERROR) */
extern gm_backend_kind gpumf_training_backend(char *name, size_t namelen);
/*
 * After the core trained (or searched): re-throw an ERROR a progress
 * callback caught (pending), a cancel as 'what canceled', any other failure
 * as 'what failed: err' with its SQLSTATE (out of memory: oom_hint, if any).
 */
extern void gpumf_train_check_rc(int rc, ErrorData *pending, const char *what,
								 const char *err, const char *oom_hint);
/*
 * Get the GPU ready while the caller reads a source of about est_rows rows
 * (-1: unknown): start the training service's worker, or look for a GPU on
 * a thread of this process.  True when the training should go to the
 * service (gpumf_train_backend's try_service).
 */
extern bool gpumf_device_prefetch(const gm_mf_params *p, double est_rows);
/*
 * p->gpus from gpumf.gpus for a training on p->backend: several GPUs for
 * implicit ALS on the GPU, else one (a NOTICE when gpumf.gpus asked for
 * more for an explicit model).
 */
extern void gpumf_apply_gpus(gm_mf_params *p);
/*
 * ERROR (53200, nothing uploaded) when training p on R and Rt needs more
 * GPU memory than the card has free or gpumf.gpu_memory_limit leaves
 * (gm_mf_device_memory and a margin for the libraries); what: "training".
 * Nothing on the CPU backend, nor when this process has not loaded the
 * CUDA module (the training service's worker trains).
 */
extern void gpumf_check_gpu_memory(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
								   const char *what);
/* Whether gpumf_check_gpu_memory would pass (true when it has nothing to check). */
extern bool gpumf_gpu_memory_fits(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt);
/*
 * gpumf_check_gpu_memory as a message (the training service's worker, which
 * reports rather than raises): true, with msg, when it would not fit.
 */
extern bool gpumf_gpu_memory_short(const gm_mf_params *p, const gm_csr *R, const gm_csr *Rt,
								   const char *what, char *msg, size_t len);
/*
 * gpumf_training_backend for gpumf_train: with try_service, *service says
 * the training goes to the training service (train_service.c), whose worker
 * then probed the GPU instead of this process.
 */
extern gm_backend_kind gpumf_train_backend(char *name, size_t namelen, bool try_service,
										   bool *service);

/* --------------------------------------------------- train_service.c */

/* _PG_init in the postmaster (shared_preload_libraries): the worker starts with the server */
extern void gpumf_service_register_at_start(void);
/* start the service's worker if it will be used (no wait); false: it will not, or is busy */
extern bool gpumf_service_prefetch(bool gpu);
/*
 * Wait for the worker (starting it): GM_OK with *name when it has a GPU,
 * another GM_ code with *why when its probe failed, -1 when there is no
 * service to use (gpumf.training_service, no worker slot, no start-up).
 */
extern int	gpumf_service_device(char *name, size_t namelen, char *why, size_t whylen);
/*
 * Train on the service's worker: NULL when it cannot take the job now (busy,
 * no shared memory: train in this process); else *rc, err, *res and ev's
 * results are set, d's factor and bias pointers point into the returned
 * segment, which gpumf_service_release (or the transaction's end) detaches.
 * cb's progress is forwarded; should_stop turns into a stop request.
 */
extern void *gpumf_service_train(const gm_mf_params *p, gm_mf_data *d,
								 const gm_callbacks *cb, gm_mf_eval *ev,
								 gm_mf_result *res, int *rc, char *err, size_t errlen);
extern void gpumf_service_release(void *seg);

/* ----------------------------------------------------------- train.c */

/* What gpumf_train was asked for (gpumf_tune builds one for its best setting). */
typedef struct TrainArgs
{
	Oid			relid;
	char	   *ucol;
	char	   *icol;
	char	   *vcol;				/* NULL: every row counts 1 */
	char	   *model;
	gm_mf_params p;
	double		holdout;			/* > 0: early stopping on held-out rows */
	gm_rank_metric metric;
	int			K;
	/* the automatic search (autotune): what it may not move, and what it chose */
	bool		autotune;
	unsigned	auto_fixed;			/* GM_AUTO_FIX_* */
	int			auto_max_iterations;
	bool		auto_solver_given;
	char	   *auto_json;			/* the search's summary for params, once it ran */
	/* graph_filter: the items trained on and the filter download returned */
	int32		n_items;
	float	   *filter;
	/*
	 * graph_filter with an iALS part (ials_factors > 0): that model's
	 * hyper-parameters (ip.factors = ials_factors), the filter's share of
	 * each user's score, and what its training reported
	 */
	int			ials_factors;
	float		blend;
	gm_mf_params ip;
	double		ials_loss;
} TrainArgs;

/*
 * a->p.backend (gpumf_train_backend: *service when the training service
 * trains), a->p.gpus; true when the training is lean: implicit ALS on one
 * or more GPUs in this process, no holdout or search, gpumf.lean_training
 * (train_device.c).
 */
extern bool gpumf_choose_backend(TrainArgs *a, bool try_service, char *name, size_t namelen,
								 bool *service);
/* where gpumf_source_to_csr builds the matrix of a training of rows rows so chosen */
extern int	gpumf_csr_build_where(const TrainArgs *a, bool service, bool lean, int64 rows);

/* The hyper-parameters that apply to a's algorithm, by name, for params (train_params.c) */
extern Jsonb *gpumf_train_params_jsonb(const TrainArgs *a);
/* Train and store a model (the body of gpumf_train); returns the catalog row. */
extern Datum gpumf_train_args(const TrainArgs *a);
/*
 * The automatic search (tune.c): choose a->p's free hyper-parameters on a
 * validation split of R (Rt its transpose), within gpumf.autotune_seconds;
 * a->p gets the choice and a->auto_json its summary.
 */
extern void gpumf_autotune_choose(TrainArgs *a, const gm_csr *R, const gm_csr *Rt);
/* 'recall@20' etc.; ERROR with a hint otherwise */
extern void gpumf_metric_from_text(const char *s, gm_rank_metric *m, int *K);

#endif
