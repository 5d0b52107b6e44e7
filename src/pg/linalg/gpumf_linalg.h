/*
 * gpumf_linalg.h: the linear-algebra line of the PostgreSQL layer
 * (src/pg/linalg).
 *
 *   linalg_device.c  the device the linear algebra runs on
 *   solve.c          gpumf_cg_solve, gpumf_spmv (sparse SPD solves)
 *   ols.c            gpumf_linreg, gpumf_linreg_agg, gpumf_linreg_predict
 */
#ifndef GPUMF_LINALG_H
#define GPUMF_LINALG_H

#include "gpumf_pg.h"
#include "gm_linalg.h"

/* --------------------------------------------------- linalg_device.c */

/* gpumf.spmv: a gm_spmv_impl (auto, own, cusparse); its type is the line's own */
extern int	gpumf_spmv_choice;

/*
 * The GPU's linear-algebra operations when gpumf.device picks the GPU (*name
 * gets its name), NULL for the CPU; may ERROR (gpu without a usable GPU).
 */
extern const gm_linalg_ops *gpumf_linalg_device(char *name, size_t namelen);

#endif
