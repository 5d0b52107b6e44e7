-- gpumf 0.4 -> 0.5.  A new installation runs gpumf--0.1.sql and the upgrade
-- scripts in order, so an updated installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.5'" to load this file. \quit

-- ----------------------------------------------------------------------
-- graph_filter blended with an iALS model.  ials_factors, blend and
-- ials_iterations are appended to gpumf_train (calls by position keep
-- working).  algorithm => 'graph_filter' with ials_factors => f also trains
-- an implicit ALS model of f factors on the same rows (regularization,
-- alpha0, nu, solver, cg_steps and block_size, given, are that model's;
-- ials_iterations its iterations) and stores one model of factors + f
-- factors: each item's row is the filter's factors followed by the iALS
-- model's, each user's score blend * p/|p| . q + (1 - blend) * x/|x| . y.
-- The users table keeps the iALS part's factors (the filter's are formed
-- from the seen items, as before); params has the part's settings under
-- "ials".  Models trained by 0.4 serve as before.
DROP FUNCTION gpumf_train(regclass, name, name, name, integer, text, integer, real, real, integer,
						  bigint, text, integer, boolean, real, real, real, text, integer, real, text,
						  boolean);
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
	autotune boolean DEFAULT NULL,
	ials_factors integer DEFAULT NULL,
	blend real DEFAULT NULL,
	ials_iterations integer DEFAULT NULL)
RETURNS gpumf.models
AS 'MODULE_PATHNAME', 'gpumf_train'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_train IS 'Train a model on a table or view, read with the caller''s privileges: algorithm als (implicit feedback: observed pairs weigh 1 + alpha * value, unobserved ones alpha0; ridges regularization * (n + alpha0 * m)^nu; solver cg, block or exact; holdout => f stops early on a held-out metric), als_explicit or ccd (ratings, with biases; both weigh regularization by each user''s and item''s number of ratings), graph_filter (implicit feedback: a low-pass filter of the normalized item-item graph on its top factors eigenvectors; ials_factors => f blends it with an implicit ALS model of f factors, blend being the filter''s share); without hyper-parameters (or with autotune => true) it searches them on a validation split carved from the source within gpumf.autotune_seconds (als: factors, alpha0, the ridge, nu and the iterations by recall@20; als_explicit and ccd: the regularization by RMSE) and records the choice in params; replaces the model of the same name atomically and returns its catalog row.';
