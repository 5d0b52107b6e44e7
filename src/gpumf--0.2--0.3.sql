-- gpumf 0.2 -> 0.3.  A new installation runs gpumf--0.1.sql and the upgrade
-- scripts in order, so an updated installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.3'" to load this file. \quit

-- ----------------------------------------------------------------------
-- A model's factors as vectors, for a vector index beside gpumf (pgvector:
-- real[] casts to vector and halfvec directly, array_to_vector).  The inner
-- product of a user's and an item's arrays is the score gpumf_recommend
-- reports: x_u and y_i, or for explicit models with biases [x_u, 1, mu + b_u]
-- and [y_i, c_i, 1].  l2 => true appends one element (users 0, items
-- sqrt(R^2 - |v_i|^2), R the largest item norm of the version) so that the
-- nearest items by Euclidean distance or cosine are the inner product's top
-- items.  Nothing here needs pgvector.  Serving functions: they only read,
-- STABLE and PARALLEL SAFE; the key argument has a text twin for untyped
-- parameters and quoted literals, as gpumf_recommend has.
CREATE FUNCTION gpumf_user_vector(model text, "user" "any", recompute boolean DEFAULT false,
								  l2 boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_user_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION gpumf_user_vector(model text, "user" text, recompute boolean DEFAULT false,
								  l2 boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_user_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_user_vector(text, "any", boolean, boolean) IS 'A user''s factors as an array whose inner product with gpumf_item_vector is the score gpumf_recommend reports (explicit models with biases: [x_u, 1, mu + b_u]; l2 => true: one more element, 0); casts to pgvector''s vector; a user the model lacks (or any user with recompute => true) is folded in from the model''s source; NULL for a user unknown to both.';
COMMENT ON FUNCTION gpumf_user_vector(text, text, boolean, boolean) IS 'gpumf_user_vector for a user key given as text (untyped parameters, quoted literals).';

CREATE FUNCTION gpumf_item_vector(model text, item "any", l2 boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_item_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION gpumf_item_vector(model text, item text, l2 boolean DEFAULT false)
RETURNS real[]
AS 'MODULE_PATHNAME', 'gpumf_item_vector'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION gpumf_item_vector(text, "any", boolean) IS 'An item''s factors as an array whose inner product with gpumf_user_vector is the score gpumf_recommend reports (explicit models with biases: [y_i, c_i, 1]; l2 => true: one more element, sqrt(R^2 - |v_i|^2), so that every item has the norm R and the nearest items by Euclidean distance are the top items by inner product); casts to pgvector''s vector; NULL for an item the model lacks.';
COMMENT ON FUNCTION gpumf_item_vector(text, text, boolean) IS 'gpumf_item_vector for an item key given as text (untyped parameters, quoted literals).';

CREATE FUNCTION gpumf_item_vectors(model text, l2 boolean DEFAULT false)
RETURNS TABLE (item bigint, embedding real[])
AS 'MODULE_PATHNAME', 'gpumf_item_vectors'
LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 10000;
CREATE FUNCTION gpumf_item_vectors(model text, item_type anycompatible, l2 boolean DEFAULT false)
RETURNS TABLE (item anycompatible, embedding real[])
AS 'MODULE_PATHNAME', 'gpumf_item_vectors'
LANGUAGE C STABLE PARALLEL SAFE ROWS 10000;
COMMENT ON FUNCTION gpumf_item_vectors(text, boolean) IS 'Every item of the model''s current version with its gpumf_item_vector, in key order, as bigint keys: fills a table with a pgvector column (embedding::vector) for an HNSW index.';
COMMENT ON FUNCTION gpumf_item_vectors(text, anycompatible, boolean) IS 'gpumf_item_vectors with item keys of the type of item_type (item_type => NULL::uuid, NULL::text, ...).';
