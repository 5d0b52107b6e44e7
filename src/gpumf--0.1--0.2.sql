-- gpumf 0.1 -> 0.2.  A new installation runs gpumf--0.1.sql and then this
-- script, so an updated 0.1 installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.2'" to load this file. \quit

-- gpumf_drop_model: if_exists => true returns false for a missing model
-- (with a NOTICE) instead of raising an ERROR, as DROP ... IF EXISTS does.
DROP FUNCTION gpumf_drop_model(text);
CREATE FUNCTION gpumf_drop_model(model text, if_exists boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gpumf_drop_model'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_drop_model(text, boolean) IS 'Drop a model: its catalog row and factor tables.  Returns true; for a missing model, an ERROR, or false with a NOTICE when if_exists is true.';

COMMENT ON FUNCTION gpumf_synthetic IS 'A seeded MovieLens-shaped implicit dataset with planted structure: lognormal user activity, power-law item popularity, items in clusters that users prefer with probability affinity.  holdout marks about 20% of the rows (independently per row, seeded) for held-out evaluation: train on the other rows, measure on these.';

-- The catalog: one algorithm column and the hyper-parameters by name (params)
-- instead of a column per parameter; key types kept as type OIDs (regtype)
-- and the owning role as a role OID (regrole), never as names.
ALTER TABLE gpumf.models
	ADD COLUMN params jsonb,
	ADD COLUMN owner regrole,
	ADD COLUMN iterations_run integer,
	ADD COLUMN train_rmse double precision,
	ADD COLUMN global_mean double precision,
	ADD COLUMN value_min real,
	ADD COLUMN value_max real,
	ADD COLUMN metrics jsonb;
UPDATE gpumf.models SET
	algorithm = 'als',
	params = pg_catalog.jsonb_build_object('iterations', iterations,
										   'regularization', regularization,
										   'alpha', alpha, 'cg_steps', cg_steps,
										   'tolerance', 0, 'seed', seed),
	owner = COALESCE(pg_catalog.to_regrole(pg_catalog.quote_ident(trained_by)),
								(SELECT e.extowner::pg_catalog.regrole
								   FROM pg_catalog.pg_extension e
								  WHERE e.extname OPERATOR(pg_catalog.=) 'gpumf')),
	iterations_run = iterations;
ALTER TABLE gpumf.models
	ALTER COLUMN user_type TYPE pg_catalog.regtype USING (CASE user_type
		WHEN 'bigint' THEN 'pg_catalog.int8' WHEN 'integer' THEN 'pg_catalog.int4'
		WHEN 'smallint' THEN 'pg_catalog.int2' WHEN 'uuid' THEN 'pg_catalog.uuid'
		ELSE 'pg_catalog.text' END)::pg_catalog.regtype,
	ALTER COLUMN item_type TYPE pg_catalog.regtype USING (CASE item_type
		WHEN 'bigint' THEN 'pg_catalog.int8' WHEN 'integer' THEN 'pg_catalog.int4'
		WHEN 'smallint' THEN 'pg_catalog.int2' WHEN 'uuid' THEN 'pg_catalog.uuid'
		ELSE 'pg_catalog.text' END)::pg_catalog.regtype,
	ALTER COLUMN algorithm DROP DEFAULT,
	ALTER COLUMN params SET NOT NULL,
	ALTER COLUMN owner SET NOT NULL,
	ALTER COLUMN iterations_run SET NOT NULL,
	DROP COLUMN iterations,
	DROP COLUMN regularization,
	DROP COLUMN alpha,
	DROP COLUMN cg_steps,
	DROP COLUMN seed,
	DROP COLUMN trained_by;
COMMENT ON COLUMN gpumf.models.algorithm IS 'als (implicit feedback), als_explicit or ccd (ratings)';
COMMENT ON COLUMN gpumf.models.params IS 'the hyper-parameters the model was trained with, by name';
COMMENT ON COLUMN gpumf.models.owner IS 'the role the model belongs to (the one that first trained it): it, its members and superusers may retrain and drop it';
COMMENT ON COLUMN gpumf.models.iterations_run IS 'iterations run (fewer than params->iterations when tolerance stopped the training early)';
COMMENT ON COLUMN gpumf.models.train_rmse IS 'explicit models: RMSE on the training ratings after the last iteration';
COMMENT ON COLUMN gpumf.models.global_mean IS 'explicit models with biases: the mean training rating';
COMMENT ON COLUMN gpumf.models.value_min IS 'explicit models: the smallest training rating (predictions may be clipped to [value_min, value_max])';
COMMENT ON COLUMN gpumf.models.value_max IS 'explicit models: the largest training rating';
COMMENT ON COLUMN gpumf.models.metrics IS 'evaluation results recorded with this version';

-- gpumf_train: the algorithm and its parameters by name.  Parameters that
-- apply only to some algorithms default to NULL (the algorithm's default);
-- naming one for an algorithm it does not apply to is an ERROR.
DROP FUNCTION gpumf_train(regclass, name, name, name, integer, text, integer, real, real, integer, bigint);
CREATE FUNCTION gpumf_train(
	source regclass,
	user_col name,
	item_col name,
	value_col name DEFAULT NULL,
	factors integer DEFAULT 64,
	model text DEFAULT NULL,
	iterations integer DEFAULT 15,
	regularization real DEFAULT NULL,
	alpha real DEFAULT NULL,
	cg_steps integer DEFAULT NULL,
	seed bigint DEFAULT 42,
	algorithm text DEFAULT 'als',
	inner_iterations integer DEFAULT NULL,
	biases boolean DEFAULT NULL,
	tolerance real DEFAULT NULL)
RETURNS gpumf.models
AS 'MODULE_PATHNAME', 'gpumf_train'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_train IS 'Train a model on a table or view, read with the caller''s privileges: algorithm als (implicit feedback, confidence 1 + alpha * value), als_explicit or ccd (ratings, with biases); replaces the model of the same name atomically and returns its catalog row.';

-- Serving from shared memory (gpumf.shared_models): the model versions of
-- this database whose item factors live in a shared segment.
CREATE FUNCTION gpumf_shared_models(
	OUT model_id bigint, OUT version integer, OUT item_table regclass, OUT bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'gpumf_shared_models_list'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;
COMMENT ON FUNCTION gpumf_shared_models() IS 'Model versions of this database served from dynamic shared memory (one copy for all sessions), with the size of their segment.';

-- The training's phases, one more: the time spent computing the loss after
-- each iteration (a part of train_seconds).
ALTER TABLE gpumf.models ADD COLUMN loss_seconds double precision;
COMMENT ON COLUMN gpumf.models.loss_seconds IS 'of train_seconds, the time spent evaluating the loss after each iteration';
