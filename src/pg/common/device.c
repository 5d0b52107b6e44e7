/*
 * device.c: what gpumf.device means, and gpumf_device_info.
 *
 * auto: the GPU when one works, else the CPU; silently when gpumf was built
 * without its CUDA module, with one NOTICE per session when the module is
 * there but no GPU works.  gpu: an ERROR with a hint when none works.  The
 * lines ask for their device through this file's rules: training in
 * train/train_device.c (gpumf_training_backend), the linear algebra in
 * linalg/linalg_device.c (gpumf_linalg_device), scoring in
 * serve/model_load.c (gpumf_scoring_backend).
 */
#include "gpumf_pg.h"

#include <pthread.h>
#include <signal.h>

#include "funcapi.h"
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(gpumf_device_info);

static bool fallback_noticed = false;

/* gpumf.device = gpu but no usable GPU: the ERROR; doing: "train", "compute" */
void
gpumf_no_gpu_error(const char *err, const char *doing)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("gpumf.device is \"gpu\" but no usable GPU was found"),
			 errdetail("%s", err),
			 errhint("Set gpumf.device to 'auto' or 'cpu' to %s on the CPU.", doing)));
}

/* gpumf.device = auto and no usable GPU: one NOTICE per session */
void
gpumf_gpu_fallback_notice(const char *err, const char *doing)
{
	if (fallback_noticed)
		return;
	ereport(NOTICE,
			(errmsg("no usable GPU, %s on the CPU", doing),
			 errdetail("%s", err),
			 errhint("This NOTICE is shown once per session; gpumf.device = 'cpu' silences it.")));
	fallback_noticed = true;
}

/*
 * Every call of gm_cuda_available that may race a training's probe thread
 * (train/train_device.c) takes probe_lock; the thread holds it while it
 * probes and warms up, so a caller waits for the thread instead of
 * competing with it.
 */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* Take and release probe_lock (the probe thread holds it throughout). */
void
gpumf_probe_lock(void)
{
	pthread_mutex_lock(&probe_lock);
}

void
gpumf_probe_unlock(void)
{
	pthread_mutex_unlock(&probe_lock);
}

/* gm_cuda_available under probe_lock: waits for a probe thread still running. */
int
gpumf_cuda_available(char *name, size_t namelen, char *err, size_t errlen)
{
	int			rc;

	gpumf_probe_lock();
	rc = gm_cuda_available(gpumf_cuda_module_path(), name, namelen, err, errlen);
	gpumf_probe_unlock();
	return rc;
}

/*
 * gpumf_device_info's GPU columns (3 .. 6: compute_capability, kernel_arch,
 * fast_paths, module_archs) from the loaded module; detail (2) says why
 * when the module cannot tell.
 */
static void
device_caps_columns(Datum *values, bool *nulls)
{
	gm_gpu_caps caps;
	char		err[GM_ERRLEN];
	char		fast[128];
	Datum	   *elems;
	char	   *save = NULL;
	int			n = 0;
	int			rc;

	pthread_mutex_lock(&probe_lock);
	rc = gm_cuda_caps(&caps, err, sizeof(err));
	pthread_mutex_unlock(&probe_lock);
	if (rc != GM_OK)
	{
		values[2] = CStringGetTextDatum(err);
		nulls[2] = false;
		return;
	}
	values[3] = CStringGetTextDatum(psprintf("%d.%d", caps.cc / 10, caps.cc % 10));
	values[4] = CStringGetTextDatum(psprintf("%d.%d", caps.code_arch / 10, caps.code_arch % 10));
	gm_gpu_fast_paths(caps.fast, fast, sizeof(fast));
	elems = (Datum *) palloc(sizeof(Datum) * 8);
	for (char *tok = strtok_r(fast, ",", &save); tok != NULL && n < 8;
		 tok = strtok_r(NULL, ",", &save))
		elems[n++] = CStringGetTextDatum(tok);
	values[5] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[6] = CStringGetTextDatum(caps.archs);
	nulls[3] = nulls[4] = nulls[5] = nulls[6] = false;
}

/*
 * gpumf_device_info: the backend training would use now, the device's name
 * and why a GPU is not used; from 0.3 on also the GPU's compute capability,
 * the architecture its loaded kernels were compiled for (lower than the
 * card's when the driver compiled older PTX for it), the fast paths on, and
 * what the CUDA module was built for.  The columns a 0.2 installation
 * declares (the first three) are filled alone.
 */
Datum
gpumf_device_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[7];
	bool		nulls[7];
	char		name[128] = "";
	char		err[GM_ERRLEN] = "";
	int			rc = GM_ENODEVICE;
	int			natts;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	natts = tupdesc->natts;
	if (natts != 3 && natts != 7)
		elog(ERROR, "gpumf_device_info: %d result columns, expected 3 or 7", natts);
	memset(nulls, true, sizeof(nulls));
	if (gpumf_device != GPUMF_DEVICE_CPU)
		rc = gpumf_cuda_available(name, sizeof(name), err, sizeof(err));
	else
		snprintf(err, sizeof(err), "gpumf.device is \"cpu\"");
	if (rc == GM_OK)
	{
		values[0] = CStringGetTextDatum("cuda");
		values[1] = CStringGetTextDatum(name);
		nulls[0] = nulls[1] = false;
		if (natts == 7)
			device_caps_columns(values, nulls);
	}
	else
	{
		values[0] = CStringGetTextDatum(gpumf_device == GPUMF_DEVICE_GPU ? "none" : "cpu");
		values[1] = CStringGetTextDatum(psprintf("cpu (%d threads)",
												 gpumf_threads > 0 ? gpumf_threads : gm_default_threads()));
		values[2] = CStringGetTextDatum(err);
		nulls[0] = nulls[1] = nulls[2] = false;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
