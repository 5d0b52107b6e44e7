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

-- Explicit models (ratings): predictions, RMSE on a test table, planted ratings.
CREATE FUNCTION gpumf_predict(model text, "user" "any", item "any", clip boolean DEFAULT false)
RETURNS real
AS 'MODULE_PATHNAME', 'gpumf_predict'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION gpumf_predict(text, "any", "any", boolean) IS 'The model''s prediction for a user and an item: mu + b_u + c_i + x_u . y_i for explicit models (clip => true limits it to the training range [value_min, value_max]), the ranking score x_u . y_i for implicit ones; NULL for an unknown user or item.';

CREATE FUNCTION gpumf_rmse(model text, test regclass, user_col name, item_col name, value_col name,
						   clip boolean DEFAULT false)
RETURNS double precision
AS 'MODULE_PATHNAME', 'gpumf_rmse'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION gpumf_rmse(text, regclass, name, name, name, boolean) IS 'Root mean squared error of the model''s predictions on a table of ratings, read with the caller''s privileges; rows with an unknown user or item, or a NULL, are skipped and counted in a NOTICE.';

CREATE FUNCTION gpumf_synthetic_ratings(users integer, items integer, rows bigint,
										rank integer DEFAULT 10, noise double precision DEFAULT 0.5,
										seed bigint DEFAULT 42)
RETURNS TABLE (user_id integer, item_id integer, rating real, holdout boolean)
AS 'MODULE_PATHNAME', 'gpumf_synthetic_ratings'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_synthetic_ratings IS 'Seeded ratings from a planted rank-r model (mean 3.5, user and item biases, power-law item popularity) plus Gaussian noise of standard deviation noise; about 10% of the rows are marked holdout. A good explicit model reaches a held-out RMSE close to noise.';

-- ---------------------------------------------------------------- serving
-- One name per capability, whatever the key types.  Keys in arguments are
-- "any": a value of the key's type, any integer type for integer keys, or
-- a literal ('alice', '42', '{1,2,3}'); a user or item key also has a text
-- declaration, for untyped parameters ("any" cannot give one a type).
-- Results have bigint keys, or, with the type carrier item_type =>
-- NULL::uuid (NULL::text, NULL::integer, ...), keys of that type.
-- PostgreSQL resolves a polymorphic result column only from an argument the
-- call passes, never from a default, so the carrier has a declaration of its
-- own; it comes after the parameters the short form takes positionally
-- (model, user, n, exclude_seen), which it requires too, so that no call of
-- the short form, untyped parameters included, can also match it.  Serving
-- only reads tables: STABLE, and PARALLEL SAFE, so that a LATERAL over many
-- users can run in parallel workers.  The 0.1 gpumf_recommend_text and
-- gpumf_recommend_uuid stay as they were, labelled the same way.
DROP FUNCTION gpumf_recommend(text, anyelement, integer, boolean);
DROP FUNCTION gpumf_recommend(text, text, integer, boolean);
CREATE FUNCTION gpumf_recommend(
	model text,
	"user" "any",
	n integer DEFAULT 10,
	exclude_seen boolean DEFAULT true,
	candidates "any" DEFAULT NULL,
	exclude "any" DEFAULT NULL,
	recompute boolean DEFAULT false)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_recommend(
	model text,
	"user" "any",
	n integer,
	exclude_seen boolean,
	item_type anycompatible,
	candidates "any" DEFAULT NULL,
	exclude "any" DEFAULT NULL,
	recompute boolean DEFAULT false)
RETURNS TABLE (item anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
-- Untyped parameters (PREPARE ... $1, drivers that send text) and quoted
-- literals reach these: "any" cannot give a parameter a type.
CREATE FUNCTION gpumf_recommend(
	model text,
	"user" text,
	n integer DEFAULT 10,
	exclude_seen boolean DEFAULT true,
	candidates "any" DEFAULT NULL,
	exclude "any" DEFAULT NULL,
	recompute boolean DEFAULT false)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_recommend(
	model text,
	"user" text,
	n integer,
	exclude_seen boolean,
	item_type anycompatible,
	candidates "any" DEFAULT NULL,
	exclude "any" DEFAULT NULL,
	recompute boolean DEFAULT false)
RETURNS TABLE (item anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
COMMENT ON FUNCTION gpumf_recommend(text, "any", integer, boolean, "any", "any", boolean) IS 'Top-n items for a user, best first (ties: lower item key first), as bigint keys: candidates (an array of item keys) ranks only those, exclude leaves more out; a user the model lacks (or any user with recompute => true) gets factors computed from the user''s current rows in the model''s source (read with your privileges); a user unknown to both gives no rows.';
COMMENT ON FUNCTION gpumf_recommend(text, "any", integer, boolean, anycompatible, "any", "any", boolean) IS 'gpumf_recommend with item keys of the type of item_type (a type carrier: item_type => NULL::uuid, NULL::text, ...).';
ALTER FUNCTION gpumf_recommend_text(text, anyelement, integer, boolean) STABLE PARALLEL SAFE;
ALTER FUNCTION gpumf_recommend_text(text, text, integer, boolean) STABLE PARALLEL SAFE;
ALTER FUNCTION gpumf_recommend_uuid(text, anyelement, integer, boolean) STABLE PARALLEL SAFE;
ALTER FUNCTION gpumf_recommend_uuid(text, text, integer, boolean) STABLE PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_recommend_text(text, anyelement, integer, boolean) IS 'Top-n items for a user with item keys as text (0.1; gpumf_recommend(..., item_type => NULL::text) does the same).';
COMMENT ON FUNCTION gpumf_recommend_uuid(text, anyelement, integer, boolean) IS 'Top-n items for a user, for models with uuid item keys (0.1; gpumf_recommend(..., item_type => NULL::uuid) does the same).';

CREATE FUNCTION gpumf_recommend_items(
	model text,
	items "any",
	n integer DEFAULT 10,
	"values" double precision[] DEFAULT NULL,
	exclude_seen boolean DEFAULT true,
	candidates "any" DEFAULT NULL,
	exclude "any" DEFAULT NULL)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend_items'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_recommend_items(
	model text,
	items "any",
	n integer,
	"values" double precision[],
	exclude_seen boolean,
	item_type anycompatible,
	candidates "any" DEFAULT NULL,
	exclude "any" DEFAULT NULL)
RETURNS TABLE (item anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend_items'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
COMMENT ON FUNCTION gpumf_recommend_items(text, "any", integer, double precision[], boolean, "any", "any") IS 'Top-n items for someone who interacted with these items (a basket, a session; values: one strength or rating per item, 1 by default): the user factors one least-squares solve against the item factors gives; exclude_seen leaves the basket''s items out.';
COMMENT ON FUNCTION gpumf_recommend_items(text, "any", integer, double precision[], boolean, anycompatible, "any", "any") IS 'gpumf_recommend_items with item keys of the type of item_type (item_type => NULL::uuid, NULL::text, ...).';

CREATE FUNCTION gpumf_similar_items(model text, item "any", n integer DEFAULT 10)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_items'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_similar_items(model text, item "any", n integer, item_type anycompatible)
RETURNS TABLE (item anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_items'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_similar_items(model text, item text, n integer DEFAULT 10)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_items'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_similar_items(model text, item text, n integer, item_type anycompatible)
RETURNS TABLE (item anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_items'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
COMMENT ON FUNCTION gpumf_similar_items(text, "any", integer) IS 'The n items most similar to an item by the cosine of their factors, the item itself left out; an item the model lacks gives no rows.';
COMMENT ON FUNCTION gpumf_similar_items(text, "any", integer, anycompatible) IS 'gpumf_similar_items with item keys of the type of item_type (item_type => NULL::uuid, NULL::text, ...).';

CREATE FUNCTION gpumf_similar_users(model text, "user" "any", n integer DEFAULT 10)
RETURNS TABLE ("user" bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_users'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_similar_users(model text, "user" "any", n integer, user_type anycompatible)
RETURNS TABLE ("user" anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_users'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_similar_users(model text, "user" text, n integer DEFAULT 10)
RETURNS TABLE ("user" bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_users'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
CREATE FUNCTION gpumf_similar_users(model text, "user" text, n integer, user_type anycompatible)
RETURNS TABLE ("user" anycompatible, score real)
AS 'MODULE_PATHNAME', 'gpumf_similar_users'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10;
COMMENT ON FUNCTION gpumf_similar_users(text, "any", integer) IS 'The n users most similar to a user by the cosine of their factors, the user itself left out (the users'' factors are loaded into the session on first use); a user the model lacks is folded in from the model''s source.';
COMMENT ON FUNCTION gpumf_similar_users(text, "any", integer, anycompatible) IS 'gpumf_similar_users with user keys of the type of user_type (user_type => NULL::uuid, NULL::text, ...).';

-- ----------------------------------------------------------------------
-- Batch recommendations, evaluation, splits and model history.

-- Kept versions of each model (gpumf.keep_versions, the current one
-- included): the catalog row each had when it was replaced, whole, as jsonb.
-- The factor tables it names stay until the version is no longer kept.
CREATE TABLE gpumf.model_versions (
	model_id			bigint NOT NULL,
	version				integer NOT NULL,
	created_at			timestamptz NOT NULL,
	replaced_at			timestamptz NOT NULL,
	user_table			text NOT NULL,
	item_table			text NOT NULL,
	catalog				jsonb NOT NULL,
	PRIMARY KEY (model_id, version)
);
CREATE UNIQUE INDEX ON gpumf.model_versions (user_table);
COMMENT ON TABLE gpumf.model_versions IS 'kept, non-current versions of the models: their gpumf.models rows (catalog) as they were when replaced; gpumf_use_version() makes one current again';
SELECT pg_catalog.pg_extension_config_dump('gpumf.model_versions', '');
GRANT SELECT ON gpumf.model_versions TO PUBLIC;

CREATE FUNCTION gpumf_model_versions(model text)
RETURNS TABLE (version integer, "current" boolean, created_at timestamptz,
			   replaced_at timestamptz, user_table text, item_table text,
			   catalog jsonb, tables_exist boolean)
AS 'MODULE_PATHNAME', 'gpumf_model_versions'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION gpumf_model_versions(text) IS 'The versions of a model that are kept, newest first: the current one and up to gpumf.keep_versions - 1 replaced ones, each with its catalog row.';

CREATE FUNCTION gpumf_use_version(model text, version integer)
RETURNS gpumf.models
AS 'MODULE_PATHNAME', 'gpumf_use_version'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_use_version(text, integer) IS 'Make a kept version of a model current again (roll back or forward); readers switch when the transaction commits.  Owner only.  Returns the new catalog row.';

-- Every user's top n into a new table (user, rank, item, score), created by
-- the caller.  users / user_col: only the users in that column of a table.
CREATE FUNCTION gpumf_recommend_all(
	model text,
	n integer,
	target text,
	users regclass DEFAULT NULL,
	user_col name DEFAULT NULL,
	exclude_seen boolean DEFAULT true,
	OUT scored_users bigint,
	OUT rows_written bigint,
	OUT unknown_users bigint,
	OUT backend text,
	OUT device text,
	OUT read_seconds double precision,
	OUT transfer_seconds double precision,
	OUT compute_seconds double precision,
	OUT write_seconds double precision)
RETURNS record
AS 'MODULE_PATHNAME', 'gpumf_recommend_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_recommend_all IS 'Top-n items of every user of a model (or of the users in users.user_col) into a new table target ("user", rank, item, score), the same lists as gpumf_recommend; computed in batches on the GPU (cuBLAS + a selection kernel) when gpumf.device allows, else on the CPU.';

-- A reproducible train/test split into two new tables.
CREATE FUNCTION gpumf_split(
	source regclass,
	test_fraction real,
	seed bigint,
	by text DEFAULT 'row',
	time_col name DEFAULT NULL,
	user_col name DEFAULT NULL,
	item_col name DEFAULT NULL,
	train_table text DEFAULT NULL,
	test_table text DEFAULT NULL,
	OUT train regclass,
	OUT test regclass,
	OUT train_rows bigint,
	OUT test_rows bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'gpumf_split'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_split IS 'Split a table into new train and test tables (default <source>_train and <source>_test), reproducibly: a seeded hash of each row''s keys (user_col, item_col; else the whole row) decides.  by => ''row'' (each row), ''user'' (a fraction of each user''s rows), ''time'' (each user''s latest rows by time_col).';

-- Ranking metrics at k (and RMSE/MAE for explicit models) on a test table.
CREATE FUNCTION gpumf_evaluate(
	model text,
	test regclass,
	user_col name DEFAULT NULL,
	item_col name DEFAULT NULL,
	k integer DEFAULT 10,
	value_col name DEFAULT NULL,
	record boolean DEFAULT false,
	OUT users bigint,
	OUT skipped_users bigint,
	OUT skipped_rows bigint,
	OUT "precision" double precision,
	OUT recall double precision,
	OUT map double precision,
	OUT ndcg double precision,
	OUT auc double precision,
	OUT rmse double precision,
	OUT mae double precision,
	OUT backend text,
	OUT seconds double precision)
RETURNS record
AS 'MODULE_PATHNAME', 'gpumf_evaluate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_evaluate IS 'Evaluate a model on a test table: precision, recall, MAP, NDCG and AUC at k as the implicit library defines them (items seen in training left out; users and items unknown to the model skipped and counted), and RMSE/MAE for explicit models; record => true stores them in gpumf.models.metrics (owner only).';

-- Linear algebra: sparse symmetric positive-definite solves (Jacobi-PCG over
-- a CSR SpMV) and ordinary least squares (float64 Householder QR), on the
-- GPU when gpumf.device picks one.  Matrices and data are read from tables
-- with the caller's privileges.
CREATE TYPE gpumf.cg_result AS (
	x					double precision[],
	iterations			integer,
	residual			double precision,
	converged			boolean,
	seconds				double precision,
	triangle			text,
	device				text,
	read_seconds		double precision,
	build_seconds		double precision
);
COMMENT ON TYPE gpumf.cg_result IS 'The result of gpumf_cg_solve: the solution x (the last iterate when not converged), iterations run, the relative residual ||b - Ax|| / ||b|| computed afresh in float64 at the end, whether it is <= tolerance, solve seconds, which triangles the table gave (lower, upper, both, diagonal), the device (and the GPU''s SpMV), seconds reading the table and building the matrix.';

CREATE FUNCTION gpumf_cg_solve(
	matrix regclass,
	row_col name,
	col_col name,
	value_col name,
	rhs double precision[],
	tolerance double precision DEFAULT 1e-8,
	max_iterations integer DEFAULT 10000,
	preconditioner text DEFAULT 'jacobi',
	base integer DEFAULT 1,
	arithmetic text DEFAULT 'double')
RETURNS gpumf.cg_result
AS 'MODULE_PATHNAME', 'gpumf_cg_solve'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION gpumf_cg_solve IS 'Solve A x = rhs for a symmetric positive-definite sparse A stored as (row, col, value) rows (read with the caller''s privileges; duplicates summed; the lower or upper triangle alone is mirrored, both triangles must agree) by the conjugate gradient with Jacobi (or no) preconditioning, in float64 (arithmetic => ''single'': float32 vectors and values, float64 dot products and residual checks), to tolerance on the true relative residual.  Not converging: a WARNING, and the last iterate with converged = false.';

CREATE FUNCTION gpumf_spmv(
	matrix regclass,
	row_col name,
	col_col name,
	value_col name,
	x double precision[],
	base integer DEFAULT 1,
	general boolean DEFAULT false)
RETURNS double precision[]
AS 'MODULE_PATHNAME', 'gpumf_spmv'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION gpumf_spmv IS 'y = A x in float64 for the sparse matrix stored as (row, col, value) rows, n x n with n the length of x.  By default the matrix is taken as gpumf_cg_solve takes it (one triangle alone is mirrored, both triangles must agree); general => true takes the entries as given.  Duplicates are summed.';

CREATE TYPE gpumf.linreg_result AS (
	terms				text[],
	coef				double precision[],
	std_err				double precision[],
	t_stat				double precision[],
	p_value				double precision[],
	r2					double precision,
	adj_r2				double precision,
	residual_se			double precision,
	condition_number	double precision,
	rows_used			bigint,
	rows_skipped		bigint,
	device				text,
	read_seconds		double precision,
	compute_seconds		double precision
);
COMMENT ON TYPE gpumf.linreg_result IS 'A least-squares fit: terms ((intercept) first, then the x columns, x[i] for the aggregate), coefficients, standard errors, t statistics and two-sided p-values in that order; R^2 and adjusted R^2 (about the mean with an intercept, about 0 without), the residual standard error, the 2-norm condition number of X, rows used and rows skipped for a NULL; for gpumf_linreg also the device and the seconds reading the table and computing (NULL for the aggregate).';

CREATE FUNCTION gpumf_linreg(source regclass, y name, x name[], intercept boolean DEFAULT true)
RETURNS gpumf.linreg_result
AS 'MODULE_PATHNAME', 'gpumf_linreg'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION gpumf_linreg IS 'Ordinary least squares of column y on the columns x of a table or view, read with the caller''s privileges, in float64 (Householder QR, never X''X); rows with a NULL in y or x are skipped and counted; a rank-deficient X is an ERROR naming the collinear columns.  Folds on the GPU for tall inputs when gpumf.device allows.';

CREATE FUNCTION gpumf_linreg_agg_step(internal, double precision, double precision[])
RETURNS internal
AS 'MODULE_PATHNAME', 'gpumf_linreg_agg_step'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
CREATE FUNCTION gpumf_linreg_agg_step(internal, double precision, double precision[], boolean)
RETURNS internal
AS 'MODULE_PATHNAME', 'gpumf_linreg_agg_step'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
CREATE FUNCTION gpumf_linreg_agg_combine(internal, internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'gpumf_linreg_agg_combine'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
CREATE FUNCTION gpumf_linreg_agg_serialize(internal)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpumf_linreg_agg_serialize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION gpumf_linreg_agg_deserialize(bytea, internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'gpumf_linreg_agg_deserialize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION gpumf_linreg_agg_final(internal)
RETURNS gpumf.linreg_result
AS 'MODULE_PATHNAME', 'gpumf_linreg_agg_final'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE AGGREGATE gpumf_linreg_agg(y double precision, x double precision[]) (
	SFUNC = gpumf_linreg_agg_step,
	STYPE = internal,
	FINALFUNC = gpumf_linreg_agg_final,
	FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = gpumf_linreg_agg_combine,
	SERIALFUNC = gpumf_linreg_agg_serialize,
	DESERIALFUNC = gpumf_linreg_agg_deserialize,
	PARALLEL = SAFE
);
COMMENT ON AGGREGATE gpumf_linreg_agg(double precision, double precision[]) IS 'Ordinary least squares of y on x (with an intercept) over the rows of each group, as gpumf_linreg computes it; rows with a NULL in y or x are skipped and counted; NULL for a group without a usable row.  Parallel safe.';

CREATE AGGREGATE gpumf_linreg_agg(y double precision, x double precision[], intercept boolean) (
	SFUNC = gpumf_linreg_agg_step,
	STYPE = internal,
	FINALFUNC = gpumf_linreg_agg_final,
	FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = gpumf_linreg_agg_combine,
	SERIALFUNC = gpumf_linreg_agg_serialize,
	DESERIALFUNC = gpumf_linreg_agg_deserialize,
	PARALLEL = SAFE
);
COMMENT ON AGGREGATE gpumf_linreg_agg(double precision, double precision[], boolean) IS 'Ordinary least squares of y on x over the rows of each group, with or without an intercept (the same in every row).';

CREATE FUNCTION gpumf_linreg_predict(coef double precision[], x double precision[])
RETURNS double precision
AS 'MODULE_PATHNAME', 'gpumf_linreg_predict'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_linreg_predict IS 'The fitted value of a gpumf_linreg fit at x: coef[1] + coef[2:] . x when coef has one more entry than x (the intercept first), coef . x when as many; NULL when an element is NULL.';

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

-- Implicit ALS in the general form (Rendle et al. 2022): the unobserved
-- weight alpha0 and frequency-scaled ridges regularization * (n + alpha0 m)^nu
-- (alpha0 = 1, nu = 0 is the 2008 model), the solver (cg, block: iALS++'s
-- block coordinate descent, exact), and early stopping on held-out rows.
-- New parameters are appended, so calls by position keep working.
DROP FUNCTION gpumf_train(regclass, name, name, name, integer, text, integer, real, real, integer, bigint, text, integer, boolean, real);
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
	tolerance real DEFAULT NULL,
	alpha0 real DEFAULT NULL,
	nu real DEFAULT NULL,
	solver text DEFAULT NULL,
	block_size integer DEFAULT NULL,
	holdout real DEFAULT NULL,
	metric text DEFAULT NULL)
RETURNS gpumf.models
AS 'MODULE_PATHNAME', 'gpumf_train'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_train IS 'Train a model on a table or view, read with the caller''s privileges: algorithm als (implicit feedback: observed pairs weigh 1 + alpha * value, unobserved ones alpha0; ridges regularization * (n + alpha0 * m)^nu; solver cg, block or exact; holdout => f stops early on a held-out metric), als_explicit or ccd (ratings, with biases; both weigh regularization by each user''s and item''s number of ratings); replaces the model of the same name atomically and returns its catalog row.';

-- gpumf_tune: a hyper-parameter search for als on a held-out split made
-- inside the function; one row per trial.
CREATE TYPE gpumf.tune_trial AS (
	trial integer,
	factors integer,
	regularization real,
	alpha real,
	alpha0 real,
	nu real,
	iterations integer,
	metric double precision,
	recall double precision,
	ndcg double precision,
	seconds double precision,
	best boolean);
COMMENT ON TYPE gpumf.tune_trial IS 'one trial of gpumf_tune: the setting (iterations: the best iteration), its held-out metric (and recall and NDCG at the same K), seconds, and whether it was the best';
CREATE FUNCTION gpumf_tune(
	source regclass,
	user_col name,
	item_col name,
	value_col name DEFAULT NULL,
	metric text DEFAULT 'recall@20',
	budget integer DEFAULT 30,
	holdout real DEFAULT 0.2,
	factors integer[] DEFAULT '{32,64,128}',
	iterations integer DEFAULT 20,
	alpha real DEFAULT NULL,
	solver text DEFAULT NULL,
	method text DEFAULT 'local',
	seed bigint DEFAULT 42,
	model text DEFAULT NULL,
	alpha0_range real[] DEFAULT NULL,
	regularization_range real[] DEFAULT NULL,
	nu_range real[] DEFAULT NULL)
RETURNS SETOF gpumf.tune_trial
AS 'MODULE_PATHNAME', 'gpumf_tune'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_tune IS 'Search factors, alpha0, the ridge, nu and the iteration count of als on holdout of each user''s rows (held out inside, seeded): budget trainings (method local: a Latin hypercube then moves around the best; bayes: Gaussian-process expected improvement; random), each stopped early on metric (recall@K, ndcg@K, precision@K over all items, training items excluded); a NOTICE and a row per trial; with model, the best setting is trained on all rows and stored under that name.  Ranges: alpha0 {0.001, 1} and the ridge of an average user {0.001, 1000} on log scales, nu {0, 1}.';
