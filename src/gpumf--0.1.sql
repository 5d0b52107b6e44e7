-- gpumf 0.1: implicit ALS training and serving.
\echo Use "CREATE EXTENSION gpumf" to load this file. \quit

-- Model tables live in schema gpumf; the functions in the extension's schema.
CREATE SCHEMA gpumf;

-- The model catalog: one row per model, the current version only.
CREATE TABLE gpumf.models (
	id					bigserial PRIMARY KEY,
	name				text NOT NULL UNIQUE,
	version				integer NOT NULL,
	algorithm			text NOT NULL DEFAULT 'implicit_als',
	factors				integer NOT NULL,
	iterations			integer NOT NULL,
	regularization		real NOT NULL,
	alpha				real NOT NULL,
	cg_steps			integer NOT NULL,
	seed				bigint NOT NULL,
	source				text NOT NULL,
	user_col			name NOT NULL,
	item_col			name NOT NULL,
	value_col			name,
	user_type			text NOT NULL,
	item_type			text NOT NULL,
	n_users				integer NOT NULL,
	n_items				integer NOT NULL,
	n_rows				bigint NOT NULL,
	nnz					bigint NOT NULL,
	backend				text NOT NULL,
	device				text NOT NULL,
	final_loss			double precision NOT NULL,
	read_seconds		double precision NOT NULL,
	build_seconds		double precision NOT NULL,
	transfer_seconds	double precision NOT NULL,
	train_seconds		double precision NOT NULL,
	store_seconds		double precision NOT NULL,
	user_table			text NOT NULL,
	item_table			text NOT NULL,
	trained_by			text NOT NULL,
	created_at			timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE gpumf.models IS 'gpumf model catalog: hyper-parameters, source, counts, backend and device, timings (seconds by phase), final loss, and the factor tables of the current version.';
COMMENT ON COLUMN gpumf.models.n_rows IS 'rows read from the source, NULL keys and values included';
COMMENT ON COLUMN gpumf.models.nnz IS 'distinct (user, item) pairs trained on, duplicates summed';
SELECT pg_catalog.pg_extension_config_dump('gpumf.models', '');
SELECT pg_catalog.pg_extension_config_dump('gpumf.models_id_seq', '');
-- Factor tables of replaced model versions.  A retraining does not drop the
-- tables it replaces (readers that looked up the old version a moment before
-- the commit would wait for it): a later training drops them once no reader
-- holds them.
CREATE TABLE gpumf.retired_tables (
	name				text PRIMARY KEY,
	retired_by			xid8 NOT NULL DEFAULT pg_current_xact_id(),
	retired_at			timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('gpumf.retired_tables', '');
GRANT USAGE ON SCHEMA gpumf TO PUBLIC;
COMMENT ON SCHEMA gpumf IS 'gpumf models: the catalog gpumf.models and one pair of factor tables per model version';
GRANT SELECT ON gpumf.models TO PUBLIC;

CREATE FUNCTION gpumf_train(
	source regclass,
	user_col name,
	item_col name,
	value_col name DEFAULT NULL,
	factors integer DEFAULT 64,
	model text DEFAULT NULL,
	iterations integer DEFAULT 15,
	regularization real DEFAULT 0.01,
	alpha real DEFAULT 1.0,
	cg_steps integer DEFAULT 3,
	seed bigint DEFAULT 42)
RETURNS gpumf.models
AS 'MODULE_PATHNAME', 'gpumf_train'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_train IS 'Train an implicit-feedback ALS model (confidence 1 + alpha * value) on a table or view, read with the caller''s privileges; replaces the model of the same name atomically and returns its catalog row.';

CREATE FUNCTION gpumf_drop_model(model text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gpumf_drop_model'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_drop_model IS 'Drop a model: its catalog row and factor tables.';

CREATE FUNCTION gpumf_recommend(
	model text,
	"user" anyelement,
	n integer DEFAULT 10,
	exclude_seen boolean DEFAULT true)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;
COMMENT ON FUNCTION gpumf_recommend(text, anyelement, integer, boolean) IS 'Top-n items for a user, best first (ties: lower item key first), for models with integer item keys; an unknown user gives no rows.';

CREATE FUNCTION gpumf_recommend_text(
	model text,
	"user" anyelement,
	n integer DEFAULT 10,
	exclude_seen boolean DEFAULT true)
RETURNS TABLE (item text, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;
COMMENT ON FUNCTION gpumf_recommend_text(text, anyelement, integer, boolean) IS 'Top-n items for a user with item keys as text (any item key type).';

CREATE FUNCTION gpumf_recommend_uuid(
	model text,
	"user" anyelement,
	n integer DEFAULT 10,
	exclude_seen boolean DEFAULT true)
RETURNS TABLE (item uuid, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;
COMMENT ON FUNCTION gpumf_recommend_uuid(text, anyelement, integer, boolean) IS 'Top-n items for a user, for models with uuid item keys.';

-- Text overloads: a quoted literal ('alice', '42', a uuid) reaches these, and
-- is converted to the model's user key type.
CREATE FUNCTION gpumf_recommend(model text, "user" text, n integer DEFAULT 10, exclude_seen boolean DEFAULT true)
RETURNS TABLE (item bigint, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;
CREATE FUNCTION gpumf_recommend_text(model text, "user" text, n integer DEFAULT 10, exclude_seen boolean DEFAULT true)
RETURNS TABLE (item text, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;
CREATE FUNCTION gpumf_recommend_uuid(model text, "user" text, n integer DEFAULT 10, exclude_seen boolean DEFAULT true)
RETURNS TABLE (item uuid, score real)
AS 'MODULE_PATHNAME', 'gpumf_recommend'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION gpumf_synthetic(
	users integer,
	items integer,
	rows bigint,
	seed bigint DEFAULT 42,
	min_per_user integer DEFAULT 20,
	clusters integer DEFAULT 32,
	affinity double precision DEFAULT 0.5)
RETURNS TABLE (user_id integer, item_id integer, value real, holdout boolean)
AS 'MODULE_PATHNAME', 'gpumf_synthetic'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_synthetic IS 'A seeded MovieLens-shaped implicit dataset with planted structure: lognormal user activity, power-law item popularity, items in clusters that users prefer with probability affinity; about 20% of rows marked holdout.';

CREATE FUNCTION gpumf_device_info(OUT backend text, OUT device text, OUT detail text)
AS 'MODULE_PATHNAME', 'gpumf_device_info'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_device_info IS 'The backend gpumf_train would use under the current gpumf.device, the device name, and why a GPU is not used.';
