-- gpumf 0.3 -> 0.4.  A new installation runs gpumf--0.1.sql and the upgrade
-- scripts in order, so an updated installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.4'" to load this file. \quit

-- ----------------------------------------------------------------------
-- A bare gpumf_train chooses its own hyper-parameters.  factors and
-- iterations now default to NULL, so that the library can tell a call that
-- gives them from one that does not; autotune is appended (calls by position
-- keep working).  A call that gives no hyper-parameter (factors, iterations,
-- regularization, alpha, alpha0, nu, solver, cg_steps, block_size,
-- inner_iterations, biases, tolerance, holdout, metric) searches them on a
-- validation split carved from the source, within gpumf.autotune_seconds,
-- and trains the best on every row; autotune => false (or SET gpumf.autotune
-- = off) gives 0.3's fixed defaults; autotune => true searches what a call
-- leaves out even when it gives some.  What was chosen, and how, is in
-- gpumf.models.params (its "autotune" key).  Calls that give any
-- hyper-parameter train exactly as in 0.3.
DROP FUNCTION gpumf_train(regclass, name, name, name, integer, text, integer, real, real, integer,
						  bigint, text, integer, boolean, real, real, real, text, integer, real, text);
CREATE FUNCTION gpumf_train(
	source regclass,
	user_col name,
	item_col name,
	value_col name DEFAULT NULL,
	factors integer DEFAULT NULL,
	model text DEFAULT NULL,
	iterations integer DEFAULT NULL,
	regularization real DEFAULT NULL,
	alpha real DEFAULT NULL,
	cg_steps integer DEFAULT NULL,
	seed bigint DEFAULT 42,
	algorithm text DEFAULT 'als',
	inner_iterations integer DEFAULT NULL,
	biases boolean DEFAULT NULL,
	tolerance real DEFAULT NULL,
	alpha0 real DEFAULT NULL,
	nu real DEFAULT NULL,
	solver text DEFAULT NULL,
	block_size integer DEFAULT NULL,
	holdout real DEFAULT NULL,
	metric text DEFAULT NULL,
	autotune boolean DEFAULT NULL)
RETURNS gpumf.models
AS 'MODULE_PATHNAME', 'gpumf_train'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_train IS 'Train a model on a table or view, read with the caller''s privileges: algorithm als (implicit feedback: observed pairs weigh 1 + alpha * value, unobserved ones alpha0; ridges regularization * (n + alpha0 * m)^nu; solver cg, block or exact; holdout => f stops early on a held-out metric), als_explicit or ccd (ratings, with biases; both weigh regularization by each user''s and item''s number of ratings); without hyper-parameters (or with autotune => true) it searches them on a validation split carved from the source within gpumf.autotune_seconds (als: factors, alpha0, the ridge, nu and the iterations by recall@20; als_explicit and ccd: the regularization by RMSE) and records the choice in params; replaces the model of the same name atomically and returns its catalog row.';
