-- upgrade: a 0.1 installation with a model updates to 0.2 and keeps serving it
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

ALTER EXTENSION gpumf UPDATE TO '0.2';
SELECT extversion FROM pg_extension WHERE extname = 'gpumf';
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

-- the owner (a role OID now) retrains and drops it
CREATE TABLE old_ratings (user_id int, item_id text, rating real);
INSERT INTO old_ratings SELECT u, 'item ' || i, 1 FROM generate_series(1, 4) u, generate_series(0, 5) i WHERE (u + i) % 2 = 0;
SELECT version, algorithm, owner, user_type, item_type FROM gpumf_train('old_ratings', 'user_id', 'item_id', 'rating', 3, 'legacy', iterations => 2);
SELECT gpumf_drop_model('legacy');
DROP TABLE old_ratings;
RESET ROLE;
DROP TABLE old_items;
REVOKE CREATE ON SCHEMA public FROM regress_gpumf_old;
DROP ROLE regress_gpumf_old;

-- 0.2 -> 0.3: gpumf_device_info also reports the GPU's architecture (the 0.2
-- declaration, three columns, still works with the new library)
SELECT backend IS NOT NULL AS has_backend, detail IS NULL OR detail <> '' AS detail_ok FROM gpumf_device_info();
ALTER EXTENSION gpumf UPDATE TO '0.3';
SELECT extversion FROM pg_extension WHERE extname = 'gpumf';
SELECT pg_get_function_arguments('gpumf_device_info'::regproc);
SELECT backend IS NOT NULL AS has_backend FROM gpumf_device_info();
