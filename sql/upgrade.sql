-- upgrade: a 0.1 installation with a model updates (through 0.2) to the
-- newest version and keeps serving it; before the update the library refuses
-- it (it serves only its own catalog version), at 0.1 and at 0.2; the update
-- to 0.3 pins the source by OID and takes kept versions' own grants; models
-- stored by 0.2 serve the same after an update to the newest version
SET gpumf.progress = off;
SET client_min_messages = warning;
DROP EXTENSION gpumf CASCADE;
RESET client_min_messages;
CREATE EXTENSION gpumf VERSION '0.1';
SELECT extversion FROM pg_extension WHERE extname = 'gpumf';
CREATE ROLE regress_gpumf_old;
GRANT CREATE ON SCHEMA public TO regress_gpumf_old;

-- a model exactly as gpumf 0.1 stored it: catalog row, factor tables, grants
CREATE TABLE old_items (id int, title text);
INSERT INTO gpumf.models (name, version, factors, iterations, regularization, alpha, cg_steps,
    seed, source, user_col, item_col, value_col, user_type, item_type, n_users, n_items,
    n_rows, nnz, backend, device, final_loss, read_seconds, build_seconds, transfer_seconds,
    train_seconds, store_seconds, user_table, item_table, trained_by)
  VALUES ('legacy', 3, 3, 15, 0.05, 2, 3, 42, 'public.old_ratings', 'user_id', 'item_id',
    'rating', 'integer', 'text', 4, 6, 20, 18, 'cpu', 'cpu (2 threads)', 0.0123, 0.1, 0.1, 0,
    1.5, 0.2, 'gpumf.m1_v3_users', 'gpumf.m1_v3_items', 'regress_gpumf_old');
CREATE TABLE gpumf.m1_v3_users (key integer NOT NULL, factors real[] NOT NULL, seen integer[] NOT NULL);
CREATE TABLE gpumf.m1_v3_items (idx integer NOT NULL, key text NOT NULL, factors real[] NOT NULL);
INSERT INTO gpumf.m1_v3_users
  SELECT u, ARRAY[sin(u)::real, cos(u)::real, (u % 3)::real / 3], ARRAY[(u % 6)]
    FROM generate_series(1, 4) u;
INSERT INTO gpumf.m1_v3_items
  SELECT i, 'item ' || i, ARRAY[cos(i)::real, sin(i)::real, (i % 2)::real]
    FROM generate_series(0, 5) i;
ALTER TABLE gpumf.m1_v3_users ADD PRIMARY KEY (key);
ALTER TABLE gpumf.m1_v3_items ADD PRIMARY KEY (idx), ADD UNIQUE (key);
GRANT SELECT ON gpumf.m1_v3_users, gpumf.m1_v3_items TO regress_gpumf_old WITH GRANT OPTION;

-- the library reads and writes the catalog of its own version only: every
-- function that touches the catalog refuses a 0.1 one at once, with a hint
-- (and no internal statement); functions that do not touch it still work
CREATE TABLE fresh_ratings (user_id int, item_id int);
INSERT INTO fresh_ratings SELECT u, i FROM generate_series(1, 4) u, generate_series(1, 5) i WHERE (u + i) % 2 = 0;
SELECT name FROM gpumf_train('fresh_ratings', 'user_id', 'item_id', NULL, 3, 'fresh');
SELECT * FROM gpumf_recommend_text('legacy', 2, 3);
SELECT * FROM gpumf_recommend('legacy', 2, 3);
SELECT gpumf_drop_model('legacy');
SELECT count(*) FROM gpumf_synthetic(10, 10, 40, min_per_user => 4, clusters => 2);
SELECT count(*) FROM gpumf.models;

-- to 0.2: still not the library's version
ALTER EXTENSION gpumf UPDATE TO '0.2';
SELECT * FROM gpumf_recommend_text('legacy', 2, 3);

-- 0.2 -> 0.3 (and on to the newest): the source is pinned by OID where its
-- name resolves, and kept versions' tables lose the grants of their own.
-- A kept version of the model as 0.2 left it: its tables readable by a
-- role the owner granted, and its catalog row naming the source.
SET ROLE regress_gpumf_old;
CREATE TABLE old_ratings (user_id int, item_id text, rating real);
INSERT INTO old_ratings SELECT u, 'item ' || i, 1 FROM generate_series(1, 4) u, generate_series(0, 5) i WHERE (u + i) % 2 = 0;
RESET ROLE;
CREATE ROLE regress_gpumf_reader;
CREATE TABLE gpumf.m1_v2_users (LIKE gpumf.m1_v3_users);
CREATE TABLE gpumf.m1_v2_items (LIKE gpumf.m1_v3_items);
INSERT INTO gpumf.model_versions (model_id, version, created_at, replaced_at, user_table, item_table, catalog)
  SELECT id, 2, created_at, now(), 'gpumf.m1_v2_users', 'gpumf.m1_v2_items', to_jsonb(m) || '{"version": 2}'
    FROM gpumf.models m WHERE name = 'legacy';
GRANT SELECT ON gpumf.m1_v2_users, gpumf.m1_v2_items TO regress_gpumf_old WITH GRANT OPTION;
GRANT SELECT ON gpumf.m1_v2_users, gpumf.m1_v2_items TO PUBLIC;
SET ROLE regress_gpumf_old;
GRANT SELECT ON gpumf.m1_v2_users, gpumf.m1_v2_items, gpumf.m1_v3_users, gpumf.m1_v3_items TO regress_gpumf_reader;
RESET ROLE;
ALTER EXTENSION gpumf UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'gpumf';
SELECT name, source, source_relid FROM gpumf.models;
SELECT version, source_relid FROM gpumf.model_versions;
-- the kept version: the owner's SELECT only; the current one as it was
SELECT c.relname, g.grantee::regrole, g.privilege_type, g.is_grantable
  FROM pg_class c, aclexplode(c.relacl) g
 WHERE c.relname IN ('m1_v2_users', 'm1_v2_items', 'm1_v3_users') AND g.grantee <> c.relowner
 ORDER BY 1, 2::text;

-- now at the newest version: the library serves it
SELECT e.extversion = a.default_version AS newest
  FROM pg_extension e, pg_available_extensions a WHERE e.extname = 'gpumf' AND a.name = 'gpumf';
SELECT name, version, algorithm, params, owner, user_type, item_type, iterations_run, factors
  FROM gpumf.models;

-- serving: the same top items as scoring the stored factors in SQL
SET ROLE regress_gpumf_old;
SELECT r.item, round(r.score::numeric, 5) AS score FROM gpumf_recommend_text('legacy', 2, 3) r;
SELECT i.key AS item, round(s::numeric, 5) AS score
  FROM gpumf.m1_v3_users u, gpumf.m1_v3_items i,
       LATERAL (SELECT sum(a * b) AS s FROM unnest(u.factors, i.factors) AS t(a, b)) d
 WHERE u.key = 2 AND i.idx <> ALL (u.seen)
 ORDER BY s DESC, i.idx LIMIT 3;
-- the 0.2 names serve the 0.1 model too
SELECT count(*) AS same FROM (
  SELECT item, score FROM gpumf_recommend_text('legacy', 2, 3)
  INTERSECT SELECT item, score FROM gpumf_recommend('legacy', 2, 3, true, item_type => NULL::text)
  INTERSECT SELECT item, score FROM gpumf_recommend('legacy', '2', 3, true, item_type => NULL::text)) s;
SELECT count(*) FROM gpumf_similar_items('legacy', 'item 1', 2, item_type => NULL::text);
SELECT count(*) FROM gpumf_recommend_items('legacy', ARRAY['item 1', 'item 2'], n => 2, "values" => NULL, exclude_seen => true, item_type => NULL::text);
SELECT gpumf_user_vector('legacy', 2) = (SELECT factors FROM gpumf.m1_v3_users WHERE key = 2) AS user_vector,
       (SELECT count(*) FROM gpumf_item_vectors('legacy', item_type => NULL::text)) AS item_vectors;


-- the owner (a role OID now) retrains and drops it
SET ROLE regress_gpumf_old;
SELECT version, algorithm, owner, user_type, item_type, source_relid FROM gpumf_train('old_ratings', 'user_id', 'item_id', 'rating', 3, 'legacy', iterations => 2);
SELECT gpumf_drop_model('legacy');
DROP TABLE old_ratings;
RESET ROLE;
DROP TABLE old_items;
REVOKE CREATE ON SCHEMA public FROM regress_gpumf_old;
DROP ROLE regress_gpumf_old;
DROP ROLE regress_gpumf_reader;

-- the table refused above trains once the catalog is updated
SELECT name, version, algorithm FROM gpumf_train('fresh_ratings', 'user_id', 'item_id', NULL, 3, 'fresh', iterations => 2);
SELECT gpumf_drop_model('fresh');
DROP TABLE fresh_ratings;

-- models exactly as gpumf 0.2 stored them (an implicit and an explicit
-- one: catalog rows, factor tables, grants) serve the same after ALTER
-- EXTENSION gpumf UPDATE to the newest version (a no-op while 0.2 is the
-- newest; made by hand, as a newer library refuses to train under 0.2)
SET client_min_messages = warning;
DROP EXTENSION gpumf CASCADE;
RESET client_min_messages;
CREATE EXTENSION gpumf VERSION '0.2';
CREATE ROLE regress_gpumf_v02;
GRANT CREATE ON SCHEMA public TO regress_gpumf_v02;
CREATE TABLE kept_ratings (u int, i text, v real);
INSERT INTO kept_ratings SELECT u, 'item ' || i, 1 + (u * i) % 4 FROM generate_series(1, 7) u, generate_series(0, 5) i WHERE (u + i) % 2 = 0;
GRANT SELECT ON kept_ratings TO regress_gpumf_v02;
INSERT INTO gpumf.models (name, version, algorithm, factors, source, user_col, item_col, value_col,
    user_type, item_type, n_users, n_items, n_rows, nnz, backend, device, final_loss, read_seconds,
    build_seconds, transfer_seconds, train_seconds, store_seconds, user_table, item_table, params,
    owner, iterations_run, train_rmse, global_mean, value_min, value_max, metrics, loss_seconds)
  VALUES ('kept', 1, 'als', 3, 'public.kept_ratings', 'u', 'i', 'v', 'integer', 'text', 6, 6, 18, 18,
    'cpu', 'cpu (2 threads)', 0.0123, 0.1, 0.1, 0, 1.5, 0.2, 'gpumf.m1_v1_users', 'gpumf.m1_v1_items',
    '{"nu": 0, "seed": 42, "alpha": 1, "alpha0": 1, "solver": "cg", "cg_steps": 3, "tolerance": 0, "iterations": 15, "regularization": 0.01}',
    'regress_gpumf_v02', 15, NULL, NULL, NULL, NULL, NULL, 0.01),
         ('kept_ccd', 1, 'ccd', 2, 'public.kept_ratings', 'u', 'i', 'v', 'integer', 'text', 6, 6, 18, 18,
    'cpu', 'cpu (2 threads)', 0.07, 0.1, 0.1, 0, 1.5, 0.2, 'gpumf.m2_v1_users', 'gpumf.m2_v1_items',
    '{"seed": 42, "biases": true, "tolerance": 0, "iterations": 10, "regularization": 0.05, "inner_iterations": 3}',
    'regress_gpumf_v02', 10, 0.066, 2.5, 1, 4, NULL, 0.01);
SELECT id, name FROM gpumf.models ORDER BY id;
CREATE TABLE gpumf.m1_v1_users (key integer NOT NULL, factors real[] NOT NULL, seen integer[] NOT NULL, bias real);
CREATE TABLE gpumf.m1_v1_items (idx integer NOT NULL, key text NOT NULL, factors real[] NOT NULL, bias real);
CREATE TABLE gpumf.m2_v1_users (LIKE gpumf.m1_v1_users);
CREATE TABLE gpumf.m2_v1_items (LIKE gpumf.m1_v1_items);
-- user u saw the items of its rows (item i has index i)
INSERT INTO gpumf.m1_v1_users
  SELECT u, ARRAY[sin(u), cos(u), (u % 3) / 3.0]::real[],
         ARRAY(SELECT i FROM generate_series(0, 5) i WHERE (u + i) % 2 = 0), NULL
    FROM generate_series(1, 6) u;
INSERT INTO gpumf.m1_v1_items
  SELECT i, 'item ' || i, ARRAY[cos(i), sin(2 * i), (i % 2) - 0.5]::real[], NULL FROM generate_series(0, 5) i;
INSERT INTO gpumf.m2_v1_users
  SELECT u, ARRAY[sin(u) / 2, cos(u) / 3]::real[],
         ARRAY(SELECT i FROM generate_series(0, 5) i WHERE (u + i) % 2 = 0), u / 10.0 - 0.3
    FROM generate_series(1, 6) u;
INSERT INTO gpumf.m2_v1_items
  SELECT i, 'item ' || i, ARRAY[cos(i) / 2, sin(i) / 3]::real[], 0.2 - i / 20.0 FROM generate_series(0, 5) i;
ALTER TABLE gpumf.m1_v1_users ADD PRIMARY KEY (key), SET (toast_tuple_target = 8160);
ALTER TABLE gpumf.m1_v1_items ADD PRIMARY KEY (idx), ADD UNIQUE (key), SET (toast_tuple_target = 8160);
ALTER TABLE gpumf.m2_v1_users ADD PRIMARY KEY (key), SET (toast_tuple_target = 8160);
ALTER TABLE gpumf.m2_v1_items ADD PRIMARY KEY (idx), ADD UNIQUE (key), SET (toast_tuple_target = 8160);
GRANT SELECT ON gpumf.m1_v1_users, gpumf.m1_v1_items, gpumf.m2_v1_users, gpumf.m2_v1_items
  TO regress_gpumf_v02 WITH GRANT OPTION;
-- what the stored factors say: each user's top 3 unseen items, and the ratings mu + b_u + c_i + x.y
CREATE TABLE kept_expected AS
  SELECT u.key AS u, rank() OVER (PARTITION BY u.key ORDER BY s DESC, i.idx) AS rank, i.key AS item, s AS score
    FROM gpumf.m1_v1_users u, gpumf.m1_v1_items i,
         LATERAL (SELECT sum(a * b) AS s FROM unnest(u.factors, i.factors) AS t(a, b)) d
   WHERE i.idx <> ALL (u.seen);
DELETE FROM kept_expected WHERE rank > 3;
CREATE TABLE kept_ratings_expected AS
  SELECT u.key AS u, i.key AS item, 2.5 + u.bias + i.bias + d.s AS rating
    FROM gpumf.m2_v1_users u, gpumf.m2_v1_items i,
         LATERAL (SELECT sum(a * b) AS s FROM unnest(u.factors, i.factors) AS t(a, b)) d;
GRANT SELECT ON kept_expected, kept_ratings_expected TO regress_gpumf_v02;

-- gpumf_device_info through its 0.2 declaration (three columns) works with
-- this library; 0.3 adds the GPU's architecture
SELECT backend IS NOT NULL AS has_backend, detail IS NULL OR detail <> '' AS detail_ok FROM gpumf_device_info();
SET client_min_messages = warning;
ALTER EXTENSION gpumf UPDATE;
RESET client_min_messages;
SELECT pg_get_function_arguments('gpumf_device_info'::regproc);
-- 0.4: gpumf_train's factors and iterations default to NULL, autotune appended
SELECT pg_get_function_arguments('gpumf_train'::regproc) ~ 'factors integer DEFAULT NULL::integer' AS factors_null,
       (SELECT proargnames[22] FROM pg_proc WHERE oid = 'gpumf_train'::regproc) AS autotune_arg;
-- 0.5: graph_filter's iALS part (ials_factors, blend, ials_iterations) appended
SELECT proargnames[23:25] AS appended FROM pg_proc WHERE oid = 'gpumf_train'::regproc;
SELECT backend IS NOT NULL AS has_backend FROM gpumf_device_info();
SELECT e.extversion = a.default_version AS newest
  FROM pg_extension e, pg_available_extensions a WHERE e.extname = 'gpumf' AND a.name = 'gpumf';
SELECT name, version, algorithm, owner, user_type, item_type FROM gpumf.models ORDER BY id;
SET ROLE regress_gpumf_v02;
-- stored users: the same top 3 as the factors say; ratings: the same predictions
SELECT count(*) AS rows,
       count(*) FILTER (WHERE r.item = e.item AND abs(r.score - e.score) < 1e-5) AS same
  FROM kept_expected e
  LEFT JOIN LATERAL (SELECT * FROM gpumf_recommend_text('kept', e.u, 3) WITH ORDINALITY) r(item, score, rank)
    ON r.rank = e.rank;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE abs(gpumf_predict('kept_ccd', e.u, e.item) - e.rating) < 1e-5) AS same
  FROM kept_ratings_expected e;
-- a user only in the source is folded in from it; similar items; kept versions
SELECT count(*) AS folded FROM gpumf_recommend_text('kept', 7, 3);
SELECT count(*) AS similar FROM gpumf_similar_items('kept', 'item 1', 2, item_type => NULL::text);
SELECT version, "current" FROM gpumf_model_versions('kept');
-- the owner retrains and drops them
SELECT version, algorithm FROM gpumf_train('kept_ratings', 'u', 'i', 'v', factors => 3, iterations => 2, model => 'kept');
SELECT gpumf_drop_model('kept'), gpumf_drop_model('kept_ccd');
RESET ROLE;
DROP TABLE kept_ratings, kept_expected, kept_ratings_expected;
REVOKE CREATE ON SCHEMA public FROM regress_gpumf_v02;
DROP ROLE regress_gpumf_v02;
