/*
 * solve.c: sparse symmetric positive-definite systems in SQL:
 * gpumf_cg_solve (Jacobi-preconditioned conjugate gradient) and gpumf_spmv
 * (y = A x).
 *
 * The matrix is a table or view of (row, col, value) rows, read through the
 * executor with the caller's rights by a query that names only the relation
 * and its three columns (quoted identifiers), under the pinned search_path;
 * values are converted in C by the columns' type OIDs.  Then the core's
 * checks, in this order, each an ERROR with the core's message (which names
 * the entry, the row or the pair):
 *
 *   gm_coo_scan               an empty matrix; an index below the base (or,
 *                             for gpumf_spmv, beyond x); NaN or Infinity
 *   gm_coo_check_square       row and column extents differ
 *   (rhs length)              one right-hand side entry per row
 *   gm_spmat_from_coo         CSR, duplicates summed; a matrix given by one
 *                             triangle (diagonal included) is mirrored
 *   gm_spmat_check_symmetric  when both triangles were given: A(i,j) =
 *                             A(j,i) to GM_SYMMETRY_RTOL, naming a pair
 *   gm_spmat_check_diagonal   with Jacobi: every diagonal entry > 0
 *
 * A NULL in any of the three columns is an ERROR naming the entry (its
 * position in the order read): skipping it would solve another system.
 * The solve runs where gpumf.device says (device.c); the GPU's SpMV is
 * gpumf.spmv.  Cancel and statement_timeout are polled by the core between
 * iterations.
 */
#include "gpumf_linalg.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/int.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "access/htup_details.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(gpumf_cg_solve);
PG_FUNCTION_INFO_V1(gpumf_spmv);

/* gpumf_cg_solve's arguments, by position (gpumf--0.1--0.2.sql) */
enum
{
	CG_MATRIX, CG_ROW_COL, CG_COL_COL, CG_VALUE_COL, CG_RHS, CG_TOLERANCE,
	CG_MAX_ITERATIONS, CG_PRECONDITIONER, CG_BASE, CG_ARITHMETIC, CG_NARGS
};

/* gpumf_spmv's arguments */
enum
{
	MV_MATRIX, MV_ROW_COL, MV_COL_COL, MV_VALUE_COL, MV_X, MV_BASE, MV_GENERAL, MV_NARGS
};

/* A matrix table being read, then built; malloc'ed arrays freed by a callback. */
typedef struct MatrixSource
{
	Oid			relid;
	char	   *relname;		/* schema-qualified, quoted */
	const char *rcol;
	const char *ccol;
	const char *vcol;
	Oid			rtype;
	Oid			ctype;
	Oid			vtype;
	int64		base;
	/* the triplets, 0-based, as read */
	int64		n;
	int64		cap;
	int64	   *rows;
	int64	   *cols;
	double	   *vals;
	/* the matrix built from them */
	gm_coo_info info;
	gm_spmat	A;
	double		read_seconds;
	double		build_seconds;
	MemoryContextCallback cb;
} MatrixSource;

typedef struct MatrixReceiver
{
	DestReceiver pub;
	MatrixSource *m;
} MatrixReceiver;

/* Reset callback: free the triplets and the matrix. */
static void
matrix_free(void *arg)
{
	MatrixSource *m = arg;

	free(m->rows);
	free(m->cols);
	free(m->vals);
	m->rows = m->cols = NULL;
	m->vals = NULL;
	gm_spmat_free(&m->A);
}

/* An engine error code as a SQLSTATE. */
static int
linalg_errcode(int rc)
{
	switch (rc)
	{
		case GM_ENOMEM:
			return ERRCODE_OUT_OF_MEMORY;
		case GM_EINVAL:
			return ERRCODE_INVALID_PARAMETER_VALUE;
		case GM_ECANCELED:
			return ERRCODE_QUERY_CANCELED;
		case GM_ENOTSUP:
			return ERRCODE_FEATURE_NOT_SUPPORTED;
		case GM_ERANGE:
			return ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE;
		default:
			return ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
	}
}

/* n zeroed doubles, palloc'd (beyond 1 GB too) */
static double *
zeros(int64 n)
{
	return palloc_extended(sizeof(double) * (Size) Max(n, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
}

/* ------------------------------------------------------------ arguments */

/* Index columns: integers only (a float index would be rounded silently). */
static Oid
index_column(Oid relid, const char *col)
{
	Oid			type = gpumf_column_type(relid, col, "read");

	if (type != INT2OID && type != INT4OID && type != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("index column \"%s\" has unsupported type %s", col,
						format_type_be(type)),
				 errhint("Row and column indices must be smallint, integer or bigint.")));
	return type;
}

/*
 * A float8[] argument as a C array of n finite values (palloc'd); ERROR
 * naming the argument for a NULL element, a non-finite one, an empty array
 * or more than one dimension.
 */
static double *
vector_arg(ArrayType *a, const char *name, int64 *n)
{
	int			nelems;
	Datum	   *elems;
	bool	   *nulls;
	double	   *v;

	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array, not %d-dimensional",
						name, ARR_NDIM(a))));
	if (ARR_NDIM(a) == 0 || ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is empty", name),
				 errhint("%s needs one entry per row of the matrix.", name)));
	deconstruct_array(a, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &elems, &nulls, &nelems);
	gpumf_check_memory((double) nelems * sizeof(double) * 4, name);
	v = palloc_extended(sizeof(double) * (Size) nelems, MCXT_ALLOC_HUGE);
	for (int i = 0; i < nelems; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s element %d is NULL", name, i + 1)));
		v[i] = DatumGetFloat8(elems[i]);
		if (isnan(v[i]) || isinf(v[i]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s element %d is %s", name, i + 1,
							isnan(v[i]) ? "NaN" : v[i] > 0 ? "Infinity" : "-Infinity")));
	}
	pfree(elems);
	pfree(nulls);
	*n = nelems;
	return v;
}

/* The text argument as one of the names given; ERROR listing them. */
static int
choice_arg(FunctionCallInfo fcinfo, int argno, const char *name,
		   const char *const *choices, const char *hint)
{
	char	   *s;

	gpumf_check_not_null(fcinfo, argno, name);
	s = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	for (int i = 0; choices[i]; i++)
		if (pg_strcasecmp(s, choices[i]) == 0)
			return i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown %s \"%s\"", name, s),
			 errhint("%s", hint)));
	return -1;					/* keep compiler quiet */
}

/* Lock the matrix relation and check its three columns (palloc'd result). */
static MatrixSource *
matrix_open(FunctionCallInfo fcinfo, int arg_matrix, int32 base)
{
	MatrixSource *m = palloc0(sizeof(MatrixSource));
	Oid			relid = PG_GETARG_OID(arg_matrix);

	m->relname = gpumf_relation_open(relid);
	m->relid = relid;
	m->rcol = NameStr(*PG_GETARG_NAME(arg_matrix + 1));
	m->ccol = NameStr(*PG_GETARG_NAME(arg_matrix + 2));
	m->vcol = NameStr(*PG_GETARG_NAME(arg_matrix + 3));
	m->rtype = index_column(relid, m->rcol);
	m->ctype = index_column(relid, m->ccol);
	m->vtype = gpumf_column_type(relid, m->vcol, "read");
	gpumf_check_numeric_type(m->vtype, m->vcol, "value");
	m->base = base;
	m->cb.func = matrix_free;
	m->cb.arg = m;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &m->cb);
	return m;
}

/* ------------------------------------------------------------ reading */

/* An index Datum of an integer column type as int64. */
static int64
index_of(Oid type, Datum d)
{
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		default:
			return DatumGetInt64(d);
	}
}

/* Double the triplet arrays (bounded by gpumf.max_memory first). */
static void
matrix_grow(MatrixSource *m)
{
	int64		cap = m->cap ? m->cap * 2 : 1 << 16;
	void	   *r,
			   *c,
			   *v;

	/* the triplets, then the CSR built from them with a mirrored triangle */
	gpumf_check_memory((double) cap * (2 * sizeof(int64) + sizeof(double)) +
					   (double) cap * 2 * (sizeof(int32) + sizeof(double)),
					   "reading the matrix");
	r = realloc(m->rows, sizeof(int64) * cap);
	if (r)
		m->rows = r;
	c = r ? realloc(m->cols, sizeof(int64) * cap) : NULL;
	if (c)
		m->cols = c;
	v = c ? realloc(m->vals, sizeof(double) * cap) : NULL;
	if (v)
		m->vals = v;
	if (!v)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading " INT64_FORMAT " matrix entries", m->n)));
	m->cap = cap;
}

/*
 * One (row, col, value) row: NULLs and indices beyond int64 after the base
 * are ERRORs naming the entry; the rest is the core's to check.
 */
static bool
matrix_receive(TupleTableSlot *slot, DestReceiver *self)
{
	MatrixSource *m = ((MatrixReceiver *) self)->m;
	int64		e = m->n + 1;	/* entries are numbered from 1 in messages */
	int64		r,
				c,
				r0,
				c0;

	slot_getallattrs(slot);
	for (int a = 0; a < 3; a++)
		if (slot->tts_isnull[a])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("matrix entry " INT64_FORMAT " has a NULL %s (column \"%s\")", e,
							a == 0 ? "row index" : a == 1 ? "column index" : "value",
							a == 0 ? m->rcol : a == 1 ? m->ccol : m->vcol),
					 errhint("Entries are numbered in the order the query reads them; leave such rows out with a view or a WHERE clause.")));
	r = index_of(m->rtype, slot->tts_values[0]);
	c = index_of(m->ctype, slot->tts_values[1]);
	if (pg_sub_s64_overflow(r, m->base, &r0) || pg_sub_s64_overflow(c, m->base, &c0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("entry " INT64_FORMAT " (row " INT64_FORMAT ", column " INT64_FORMAT ") lies outside the largest supported matrix",
						e, r, c)));
	if (m->n == m->cap)
		matrix_grow(m);
	m->rows[m->n] = r0;
	m->cols[m->n] = c0;
	m->vals[m->n] = gpumf_datum_double(m->vtype, slot->tts_values[2]);
	m->n++;
	return true;
}

/* The receiver needs no setup or teardown. */
static void
matrix_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
matrix_nothing(DestReceiver *self)
{
}

/* Read every entry with the caller's rights (SPI must be connected). */
static void
matrix_read(MatrixSource *m, bool read_only)
{
	StringInfoData q;
	MatrixReceiver recv;
	double		t0 = gm_now();

	initStringInfo(&q);
	appendStringInfo(&q, "SELECT %s, %s, %s FROM %s", quote_identifier(m->rcol),
					 quote_identifier(m->ccol), quote_identifier(m->vcol), m->relname);
	memset(&recv, 0, sizeof(recv));
	recv.pub.receiveSlot = matrix_receive;
	recv.pub.rStartup = matrix_startup;
	recv.pub.rShutdown = matrix_nothing;
	recv.pub.rDestroy = matrix_nothing;
	recv.pub.mydest = DestNone;
	recv.m = m;
	gpumf_read_query(q.data, (DestReceiver *) &recv, read_only, "the matrix");
	m->read_seconds = gm_now() - t0;
}

/* ------------------------------------------------------------ building */

/* ERROR with the engine's message unless rc is GM_OK. */
static void
check_rc(int rc, const char *err, const char *hint)
{
	if (rc != GM_OK)
		ereport(ERROR,
				(errcode(linalg_errcode(rc)),
				 errmsg("%s", err),
				 hint ? errhint("%s", hint) : 0));
}

/* gpumf.cg_result.triangle: which triangles the table gave. */
static const char *
triangle_name(gm_triangle t)
{
	switch (t)
	{
		case GM_TRI_LOWER:
			return "lower";
		case GM_TRI_UPPER:
			return "upper";
		case GM_TRI_BOTH:
			return "both";
		default:
			return "diagonal";
	}
}

/*
 * Check the triplets and build the n x n matrix.  n_given > 0: the
 * dimension the caller knows (gpumf_spmv: x's length), indices beyond it
 * are an ERROR; otherwise the extents, which must make a square matrix,
 * and rhs_len must match them.  symmetric: one given triangle is mirrored,
 * and both given must agree; otherwise the entries are taken as given.
 */
static int	should_stop(void *arg);

static void
matrix_build(MatrixSource *m, int64 n_given, int64 rhs_len, bool symmetric)
{
	char		err[GM_ERRLEN];
	gm_coo		c;
	int64		n;
	double		t0 = gm_now();
	int			rc;
	gm_callbacks build_cb = {should_stop, NULL, NULL};

	CHECK_FOR_INTERRUPTS();
	c.nnz = m->n;
	c.rows = m->rows;
	c.cols = m->cols;
	c.values = m->vals;
	c.base = m->base;
	rc = gm_coo_scan(&c, n_given, &m->info, err, sizeof(err));
	check_rc(rc, err, m->n == 0 ?
			 "The matrix table has no rows: give its entries as (row, column, value) rows." :
			 n_given > 0 ?
			 psprintf("x has " INT64_FORMAT " entries, so the matrix is taken as " INT64_FORMAT " x " INT64_FORMAT ".",
					  n_given, n_given, n_given) :
			 "Indices must be integers from base (1 unless base says otherwise); values finite.");
	if (n_given > 0)
		n = n_given;
	else
	{
		rc = gm_coo_check_square(&m->info, m->base, err, sizeof(err));
		check_rc(rc, err, "A symmetric positive-definite matrix is square: its largest row and column indices are equal.");
		n = m->info.n_rows;
		if (rhs_len != n)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("rhs has " INT64_FORMAT " entries, but the matrix is " INT64_FORMAT " x " INT64_FORMAT,
							rhs_len, n, n),
					 errhint("rhs needs one entry per row: the matrix's largest index is " INT64_FORMAT " (indices start at " INT64_FORMAT ").",
							 n - 1 + m->base, m->base)));
	}
	/* CSR with the mirrored triangle: 64-bit row pointers, int32 indices, doubles */
	gpumf_check_memory((double) (n + 1) * sizeof(int64) +
					   (double) m->n * 2 * (sizeof(int32) + sizeof(double)) +
					   (double) m->n * (2 * sizeof(int64) + sizeof(double)),
					   "building the matrix");
	rc = gm_spmat_from_coo_polled(&c, n, symmetric ? m->info.triangle : GM_TRI_BOTH, gpumf_threads,
								  &build_cb, &m->A, err, sizeof(err));
	if (rc == GM_ECANCELED)
		CHECK_FOR_INTERRUPTS();
	check_rc(rc, err, NULL);
	free(m->rows);
	free(m->cols);
	free(m->vals);
	m->rows = m->cols = NULL;
	m->vals = NULL;
	CHECK_FOR_INTERRUPTS();
	if (symmetric && m->info.triangle == GM_TRI_BOTH)
	{
		rc = gm_spmat_check_symmetric(&m->A, GM_SYMMETRY_RTOL, m->base, gpumf_threads,
									  err, sizeof(err));
		check_rc(rc, err, "Give both triangles with equal values, or one triangle only (diagonal included): gpumf mirrors it.");
	}
	m->build_seconds = gm_now() - t0;
}

/* ------------------------------------------------------------ cancellation */

/* Polled by the core between iterations: a cancel or a statement_timeout. */
static int
should_stop(void *arg)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

/* ------------------------------------------------------------ gpumf_cg_solve */

static const char *const precond_names[] = {"none", "jacobi", NULL};
static const char *const precision_names[] = {"double", "single", NULL};

/*
 * Solve A x = b for the symmetric positive-definite matrix in a table;
 * returns gpumf.cg_result.  Not converging is a WARNING with the residual
 * reached, and the last iterate comes back with converged = false.
 */
Datum
gpumf_cg_solve(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	MatrixSource *m;
	gm_cg_params p;
	gm_cg_result res;
	gm_callbacks cbs;
	double	   *b,
			   *x;
	int64		nb;
	int32		base;
	char		err[GM_ERRLEN];
	char		gpuname[128];
	int			rc;
	Datum		values[9];
	bool		nulls[9] = {false};
	Datum	   *xd;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	/* ---- arguments, each checked by name before the table is read */
	gm_cg_params_default(&p);
	gpumf_check_not_null(fcinfo, CG_MATRIX, "matrix");
	gpumf_check_not_null(fcinfo, CG_ROW_COL, "row_col");
	gpumf_check_not_null(fcinfo, CG_COL_COL, "col_col");
	gpumf_check_not_null(fcinfo, CG_VALUE_COL, "value_col");
	gpumf_check_not_null(fcinfo, CG_RHS, "rhs");
	gpumf_check_not_null(fcinfo, CG_TOLERANCE, "tolerance");
	gpumf_check_not_null(fcinfo, CG_MAX_ITERATIONS, "max_iterations");
	gpumf_check_not_null(fcinfo, CG_BASE, "base");
	b = vector_arg(PG_GETARG_ARRAYTYPE_P(CG_RHS), "rhs", &nb);
	p.tolerance = PG_GETARG_FLOAT8(CG_TOLERANCE);
	gpumf_check_nonneg("tolerance", p.tolerance);
	p.max_iterations = PG_GETARG_INT32(CG_MAX_ITERATIONS);
	gpumf_check_int_range("max_iterations", p.max_iterations, 1, PG_INT32_MAX);
	p.preconditioner = choice_arg(fcinfo, CG_PRECONDITIONER, "preconditioner", precond_names,
								  "preconditioner is 'jacobi' (diagonal scaling) or 'none'.") == 1 ?
		GM_PRECOND_JACOBI : GM_PRECOND_NONE;
	p.precision = choice_arg(fcinfo, CG_ARITHMETIC, "arithmetic", precision_names,
							 "arithmetic is 'double' (float64 vectors, values and sums) or 'single' (float32 vectors and values, float64 dot products and residual checks).") == 1 ?
		GM_PRECISION_SINGLE : GM_PRECISION_DOUBLE;
	base = PG_GETARG_INT32(CG_BASE);
	p.base = base;
	p.threads = gpumf_threads;
	p.spmv = (gm_spmv_impl) gpumf_spmv_choice;
	/* the device before the work: gpu without one fails at once */
	p.gpu = gpumf_linalg_device(gpuname, sizeof(gpuname));

	/* ---- the matrix: read as the caller, checked, built */
	m = matrix_open(fcinfo, CG_MATRIX, base);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	matrix_read(m, false);
	SPI_finish();
	matrix_build(m, 0, nb, true);
	if (p.preconditioner == GM_PRECOND_JACOBI)
		check_rc(gm_spmat_check_diagonal(&m->A, m->base, err, sizeof(err)), err,
				 "Jacobi preconditioning divides by the diagonal; a matrix with a diagonal entry <= 0 is not positive definite.");

	/* ---- the solve: x starts at 0 */
	gpumf_check_memory((double) m->A.n * sizeof(double) * 12 + (double) m->A.nnz * sizeof(double),
					   "the conjugate-gradient solve");
	x = zeros(m->A.n);
	cbs.should_stop = should_stop;
	cbs.on_iteration = NULL;
	cbs.arg = NULL;
	rc = gm_cg_solve(&m->A, b, x, &p, &cbs, &res, err, sizeof(err));
	if (rc == GM_ECANCELED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED), errmsg("%s", err)));
	}
	check_rc(rc, err, rc == GM_EINVAL ?
			 "A must be symmetric positive definite: every x'Ax > 0." :
			 rc == GM_ERANGE ?
			 (p.preconditioner == GM_PRECOND_NONE ?
			  "x grows as rhs / A: scale the right-hand side down or the matrix up, or use preconditioner 'jacobi', which scales the matrix's rows and columns." :
			  "x grows as rhs / A: scale the right-hand side down or the matrix up.") : NULL);
	if (!res.converged)
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("the conjugate-gradient solve did not converge: relative residual %.3g after %d iterations, tolerance %g",
						res.residual, res.iterations, p.tolerance),
				 res.stagnated && p.precision == GM_PRECISION_SINGLE ?
				 errhint("The residual stopped falling in single precision: use arithmetic 'double' or a larger tolerance.") :
				 res.stagnated ?
				 errhint("The residual stopped falling in double precision: A is singular or too ill-conditioned for this tolerance (check that it is positive definite), or the tolerance is below what double precision can reach.") :
				 errhint("Raise max_iterations or the tolerance; the last iterate is returned with converged = false.")));

	/* ---- the result */
	xd = palloc_extended(sizeof(Datum) * (Size) m->A.n, MCXT_ALLOC_HUGE);
	for (int64 i = 0; i < m->A.n; i++)
		xd[i] = Float8GetDatum(x[i]);
	values[0] = PointerGetDatum(construct_array(xd, (int) m->A.n, FLOAT8OID, sizeof(float8),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = Int32GetDatum(res.iterations);
	values[2] = Float8GetDatum(res.residual);
	values[3] = BoolGetDatum(res.converged != 0);
	values[4] = Float8GetDatum(res.seconds);
	values[5] = CStringGetTextDatum(triangle_name(m->info.triangle));
	values[6] = CStringGetTextDatum(res.device);
	values[7] = Float8GetDatum(m->read_seconds);
	values[8] = Float8GetDatum(m->build_seconds);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ------------------------------------------------------------ gpumf_spmv */

/*
 * y = A x for the matrix in a table, n x n with n the length of x.  By
 * default the matrix is the one gpumf_cg_solve sees (one triangle
 * mirrored, both checked); with general, the entries as given.
 */
Datum
gpumf_spmv(PG_FUNCTION_ARGS)
{
	MatrixSource *m;
	double	   *x,
			   *y;
	int64		nx;
	int32		base;
	bool		symmetric;
	const gm_linalg_ops *gpu;
	char		gpuname[128];
	char		err[GM_ERRLEN];
	Datum	   *yd;

	gpumf_check_not_null(fcinfo, MV_MATRIX, "matrix");
	gpumf_check_not_null(fcinfo, MV_ROW_COL, "row_col");
	gpumf_check_not_null(fcinfo, MV_COL_COL, "col_col");
	gpumf_check_not_null(fcinfo, MV_VALUE_COL, "value_col");
	gpumf_check_not_null(fcinfo, MV_X, "x");
	gpumf_check_not_null(fcinfo, MV_BASE, "base");
	gpumf_check_not_null(fcinfo, MV_GENERAL, "general");
	x = vector_arg(PG_GETARG_ARRAYTYPE_P(MV_X), "x", &nx);
	base = PG_GETARG_INT32(MV_BASE);
	symmetric = !PG_GETARG_BOOL(MV_GENERAL);
	gpu = gpumf_linalg_device(gpuname, sizeof(gpuname));

	m = matrix_open(fcinfo, MV_MATRIX, base);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	matrix_read(m, true);
	SPI_finish();
	matrix_build(m, nx, nx, symmetric);

	y = zeros(nx);
	if (gpu)
	{
		void	   *h = NULL;
		char		dev[128];
		int			rc;

		/* the handle lives only for this call: freed before any ERROR */
		rc = gpu->sparse_create(&h, &m->A, GM_PRECISION_DOUBLE, dev, sizeof(dev),
								err, sizeof(err));
		if (rc == GM_OK)
			rc = gpu->sparse_spmv(h, (gm_spmv_impl) gpumf_spmv_choice, x, y, err, sizeof(err));
		if (h)
			gpu->sparse_destroy(h);
		check_rc(rc, err, NULL);
	}
	else
		gm_spmv(&m->A, x, y, gpumf_threads);

	yd = palloc_extended(sizeof(Datum) * (Size) nx, MCXT_ALLOC_HUGE);
	for (int64 i = 0; i < nx; i++)
	{
		/* finite entries and x: a non-finite y is a sum beyond double's range */
		if (!isfinite(y[i]))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("y element " INT64_FORMAT " of A x overflows double precision", i + 1),
					 errhint("Scale x or the matrix down.")));
		yd[i] = Float8GetDatum(y[i]);
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(yd, (int) nx, FLOAT8OID, sizeof(float8),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}
