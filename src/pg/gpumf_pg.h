/*
 * gpumf_pg.h: shared declarations of the PostgreSQL glue layer.
 */
#ifndef GPUMF_PG_H
#define GPUMF_PG_H

#include "postgres.h"
#include "fmgr.h"

#include "gm_core.h"

typedef enum
{
	GPUMF_DEVICE_AUTO,
	GPUMF_DEVICE_CPU,
	GPUMF_DEVICE_GPU
} GpumfDevice;

extern int	gpumf_device;
extern int	gpumf_threads;
extern bool gpumf_progress;

/* key kinds the model tables store */
typedef enum
{
	GPUMF_KEY_INT,				/* int2, int4, int8 */
	GPUMF_KEY_TEXT,				/* text, varchar, bpchar (stored as text) */
	GPUMF_KEY_UUID
} GpumfKeyKind;

/* the extension's owner, who owns model tables */
extern Oid	gpumf_owner(void);
extern Oid	gpumf_schema(void);
/* "$libdir/gpumf_cuda.so" expanded */
extern const char *gpumf_cuda_module_path(void);
/* device.c: the backend training uses under gpumf.device (may ERROR) */
extern gm_backend_kind gpumf_training_backend(char *name, size_t namelen);

#endif
