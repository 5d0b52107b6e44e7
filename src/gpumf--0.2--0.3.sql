-- gpumf 0.2 -> 0.3.  A new installation runs gpumf--0.1.sql and the upgrade
-- scripts in order, so an updated installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.3'" to load this file. \quit

-- ----------------------------------------------------------------------
-- A model's factors as vectors, for a vector index beside gpumf (pgvector:
-- real[] casts to vector and halfvec directly, array_to_vector).  The inner
-- product of a user's and an item's arrays is the score gpumf_recommend
-- reports: x_u and y_i, or for explicit models with biases [x_u, 1, mu + b_u]
-- and [y_i, c_i, 1].  Nothing here needs pgvector.  Serving functions: they
-- only read, STABLE and PARALLEL SAFE; the key argument has a text twin for
-- untyped parameters and quoted literals, as gpumf_recommend has.
CREATE FUNCTION gpumf_user_vector(model text, "user" "any", recompute boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_user_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION gpumf_user_vector(model text, "user" text, recompute boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_user_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_user_vector(text, "any", boolean) IS 'A user''s factors as an array whose inner product with gpumf_item_vector is the score gpumf_recommend reports (explicit models with biases: [x_u, 1, mu + b_u]); casts to pgvector''s vector; a user the model lacks (or any user with recompute => true) is folded in from the model''s source; NULL for a user unknown to both.';
COMMENT ON FUNCTION gpumf_user_vector(text, text, boolean) IS 'gpumf_user_vector for a user key given as text (untyped parameters, quoted literals).';

CREATE FUNCTION gpumf_item_vector(model text, item "any")
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_item_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION gpumf_item_vector(model text, item text)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_item_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_item_vector(text, "any") IS 'An item''s factors as an array whose inner product with gpumf_user_vector is the score gpumf_recommend reports (explicit models with biases: [y_i, c_i, 1]); casts to pgvector''s vector; NULL for an item the model lacks.';
COMMENT ON FUNCTION gpumf_item_vector(text, text) IS 'gpumf_item_vector for an item key given as text (untyped parameters, quoted literals).';

CREATE FUNCTION gpumf_item_vectors(model text)
RETURNS TABLE (item bigint, embedding real[])
AS 'MODULE_PATHNAME', 'gpumf_item_vectors'
LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 10000;
CREATE FUNCTION gpumf_item_vectors(model text, item_type anycompatible)
RETURNS TABLE (item anycompatible, embedding real[])
AS 'MODULE_PATHNAME', 'gpumf_item_vectors'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10000;
COMMENT ON FUNCTION gpumf_item_vectors(text) IS 'Every item of the model''s current version with its gpumf_item_vector, in key order, as bigint keys: fills a table with a pgvector column (embedding::vector) for an HNSW index.';
COMMENT ON FUNCTION gpumf_item_vectors(text, anycompatible) IS 'gpumf_item_vectors with item keys of the type of item_type (item_type => NULL::uuid, NULL::text, ...).';
