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

-- ------------------------------------------------- the source, by identity
-- A model keeps the relation it was trained on by OID (a regclass: pg_dump
-- writes it as a name and a restore resolves it), so that a rename follows
-- it and a relation that later takes a dropped source's name is never read.
-- Fold-in reads that relation as its owner, after checking the caller's
-- privileges (README, Security).
ALTER TABLE gpumf.models ADD COLUMN source_relid pg_catalog.regclass;
COMMENT ON COLUMN gpumf.models.source_relid IS 'the relation the model was trained on, pinned (a rename follows it; NULL: none recorded); fold-in reads it as its owner.  source is its name at training';
ALTER TABLE gpumf.model_versions ADD COLUMN source_relid pg_catalog.regclass;
COMMENT ON COLUMN gpumf.model_versions.source_relid IS 'the kept version''s source, pinned (its catalog row keeps the name in source)';

-- Models trained before 0.3 pin the relation their source's name names now,
-- the relation 0.2 would have read: only a schema-qualified name (as
-- training stores it; no search_path is involved) and never a temporary
-- table (another session's, or gone with it).  A source that no longer
-- resolves pins nothing, and such a model folds no user in until it is
-- retrained.
UPDATE gpumf.models m SET source_relid = c.oid
  FROM pg_catalog.pg_class c
 WHERE c.oid OPERATOR(pg_catalog.=)
	   CASE WHEN pg_catalog.array_length(pg_catalog.parse_ident(m.source, false), 1) OPERATOR(pg_catalog.=) 2
			THEN pg_catalog.to_regclass(m.source)::pg_catalog.oid END
   AND c.relpersistence OPERATOR(pg_catalog.<>) 't';
UPDATE gpumf.model_versions v SET source_relid = c.oid
  FROM pg_catalog.pg_class c
 WHERE c.oid OPERATOR(pg_catalog.=)
	   CASE WHEN pg_catalog.array_length(pg_catalog.parse_ident(v.catalog OPERATOR(pg_catalog.->>) 'source', false), 1)
				 OPERATOR(pg_catalog.=) 2
			THEN pg_catalog.to_regclass(v.catalog OPERATOR(pg_catalog.->>) 'source')::pg_catalog.oid END
   AND c.relpersistence OPERATOR(pg_catalog.<>) 't';

-- ------------------------------------------- grants follow the current version
-- The factor tables of kept (and retired) versions carry no grants of their
-- own any more, only the model owner's SELECT: a REVOKE on the current
-- version then reaches every version, and gpumf_use_version gives a kept
-- version the current ACL when it makes it current.  Grants made in 0.2 on
-- kept versions' tables are revoked here (with what depends on them).
DO $gpumf$
DECLARE
	t record;
	g pg_catalog.oid;
BEGIN
	FOR t IN
		SELECT DISTINCT c.oid::pg_catalog.regclass AS rel, c.relowner, m.owner::pg_catalog.oid AS model_owner
		  FROM (SELECT v.model_id, v.user_table AS name FROM gpumf.model_versions v
				UNION ALL SELECT v.model_id, v.item_table FROM gpumf.model_versions v
				UNION ALL SELECT m.id, r.name FROM gpumf.retired_tables r
				  JOIN gpumf.models m ON r.name OPERATOR(pg_catalog.~~)
					   ('gpumf.m' OPERATOR(pg_catalog.||) m.id::pg_catalog.text OPERATOR(pg_catalog.||) '\_v%')) n
		  JOIN gpumf.models m ON m.id OPERATOR(pg_catalog.=) n.model_id
		  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(n.name)::pg_catalog.oid
		 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'gpumf'::pg_catalog.regnamespace
	LOOP
		FOR g IN
			SELECT DISTINCT a.grantee
			  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
			 WHERE c.oid OPERATOR(pg_catalog.=) t.rel::pg_catalog.oid
			   AND a.grantee OPERATOR(pg_catalog.<>) t.relowner
			UNION
			SELECT DISTINCT a.grantee
			  FROM pg_catalog.pg_attribute at, pg_catalog.aclexplode(at.attacl) a
			 WHERE at.attrelid OPERATOR(pg_catalog.=) t.rel::pg_catalog.oid
			   AND a.grantee OPERATOR(pg_catalog.<>) t.relowner
		LOOP
			EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s CASCADE', t.rel,
				CASE WHEN g OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g)) END);
		END LOOP;
		IF t.model_owner OPERATOR(pg_catalog.<>) t.relowner
		   AND EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) t.model_owner) THEN
			EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %s TO %s', t.rel,
				pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(t.model_owner)));
		END IF;
	END LOOP;
END
$gpumf$;

-- ------------------------------------------------------- what serving says
COMMENT ON FUNCTION gpumf_recommend(text, "any", integer, boolean, "any", "any", boolean) IS 'Top-n items for a user, best first (ties: lower item key first), as bigint keys: candidates (an array of item keys) ranks only those, exclude leaves more out; a user the model lacks (or any user with recompute => true) gets factors computed from the user''s current rows in the model''s source (the relation it was trained on, read as its owner once you may read its columns; README, Security); a user unknown to both gives no rows.';
COMMENT ON FUNCTION gpumf_similar_users(text, "any", integer) IS 'The n users most similar to a user by the cosine of their factors, the user itself left out (the users'' factors are loaded into the session on first use); a user the model lacks is folded in from the model''s source, as gpumf_recommend does.';
COMMENT ON FUNCTION gpumf_use_version(text, integer) IS 'Make a kept version of a model current again (roll back or forward); it takes the current version''s grants, and the version it replaces keeps only the owner''s.  Readers switch when the transaction commits.  Owner only.  Returns the new catalog row.';

-- ------------------------------------------------------- the GPU it runs on
-- gpumf_device_info: on a GPU also its compute capability, the architecture
-- the loaded kernels were compiled for, the architecture-specific fast paths
-- on, and what the CUDA module was built for (the same C function, which
-- fills the three columns of 0.2 when called through the old declaration).
DROP FUNCTION gpumf_device_info();
CREATE FUNCTION gpumf_device_info(OUT backend text, OUT device text, OUT detail text,
	OUT compute_capability text, OUT kernel_arch text, OUT fast_paths text[],
	OUT module_archs text)
AS 'MODULE_PATHNAME', 'gpumf_device_info'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_device_info IS 'The backend gpumf_train would use under the current gpumf.device, the device name, and why a GPU is not used; on a GPU its compute capability, the architecture its kernels were compiled for (lower when the driver compiled older PTX), the fast paths on (tf32_tensor_cores, vector_atomics, large_smem) and what the CUDA module was built for.';
