/*
 * checks.c: named argument checks, one ereport each, so that every SQL entry
 * point reads as a list of checks and every message names the argument.
 */
#include "gpumf_pg.h"

#include <math.h>

#include "mb/pg_wchar.h"
#include "utils/array.h"

void
gpumf_check_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", name)));
}

void
gpumf_check_array_1d(ArrayType *a, const char *name)
{
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array, not %d-dimensional", name, ARR_NDIM(a)),
				 errhint("Pass a list such as ARRAY[1, 2, 3]; a two-dimensional array is not flattened.")));
}

void
gpumf_check_int_range(const char *name, int32 v, int32 lo, int32 hi)
{
	if (v < lo || v > hi)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d, got %d", name, lo, hi, v)));
}

void
gpumf_check_positive(const char *name, float8 v)
{
	if (isnan(v) || isinf(v) || v <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite number > 0, got %g", name, v),
				 strcmp(name, "regularization") == 0 ?
				 errhint("With no regularization the per-row systems can be singular.") : 0));
}

void
gpumf_check_nonneg(const char *name, float8 v)
{
	if (isnan(v) || isinf(v) || v < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite number >= 0, got %g", name, v)));
}

/* Model names: 1 to GPUMF_MODEL_NAME_MAX bytes, checked before any work. */
void
gpumf_check_model_name(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("model name must not be empty")));
	if (len > GPUMF_MODEL_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("model name is too long: %zu bytes, at most %d", len,
						GPUMF_MODEL_NAME_MAX),
				 errhint("Pass a shorter name in model =>; the default is the source table's name.")));
}

void
gpumf_check_n(int32 n)
{
	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be positive, got %d", n)));
}

/* A finite value in [0, 1]. */
void
gpumf_check_unit(const char *name, float8 v)
{
	if (isnan(v) || v < 0 || v > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 0 and 1, not %g", name, v)));
}

/* A holdout fraction. */
void
gpumf_check_holdout(float8 v)
{
	if (isnan(v) || v <= 0 || v > 0.9)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("holdout must be above 0 and at most 0.9, not %g", v),
				 errhint("It is the fraction of each user's rows held out, e.g. 0.2.")));
}

static const char *const solver_names[GM_SOLVER_COUNT] = {
	[GM_SOLVER_CG] = "cg",
	[GM_SOLVER_BLOCK] = "block",
	[GM_SOLVER_EXACT] = "exact",
};

/* The SQL name of a solver. */
const char *
gpumf_solver_name(gm_solver s)
{
	return (int) s >= 0 && s < GM_SOLVER_COUNT ? solver_names[s] : "?";
}

/* A solver by its SQL name. */
gm_solver
gpumf_solver_from_text(const char *s)
{
	for (int i = 0; i < GM_SOLVER_COUNT; i++)
		if (strcmp(s, solver_names[i]) == 0)
			return (gm_solver) i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown solver \"%s\"", s),
			 errhint("Valid solvers: \"cg\" (conjugate gradient, the default), \"block\" (block coordinate descent, iALS++) and \"exact\" (a Cholesky solve per row).")));
	return GM_SOLVER_CG;		/* not reached */
}

/*
 * The backend's private memory now (MB; Linux's RssAnon: what the heap and
 * the process's own mappings hold, not the shared buffers it touched), or
 * -1 where /proc does not tell.  For the DEBUG1 line of each training.
 */
double
gpumf_private_memory_mb(void)
{
	FILE	   *f = fopen("/proc/self/status", "r");
	char		line[256];
	double		mb = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "RssAnon:", 8) == 0)
		{
			mb = atof(line + 8) / 1024.0;
			break;
		}
	fclose(f);
	return mb;
}
