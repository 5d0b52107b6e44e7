-- training on a small table: catalog row, duplicates summed, versions, views
SET gpumf.progress = off;
CREATE TABLE ratings (user_id int, item_id int, value real);
INSERT INTO ratings
SELECT u, i, ((u * 7 + i * 3) % 5) + 1
  FROM generate_series(1, 40) u, generate_series(1, 30) i
 WHERE (u + i) % 3 = 0;
-- a duplicate (user, item) row: summed, not double counted
INSERT INTO ratings VALUES (3, 3, 2.5);
SELECT count(*) AS rows, count(DISTINCT (user_id, item_id)) AS pairs FROM ratings;

SELECT name, version, algorithm, factors, params, iterations_run,
       source, user_col, item_col, value_col, user_type, item_type,
       n_users, n_items, n_rows, nnz, backend IN ('cpu', 'cuda') AS backend_ok,
       final_loss > 0 AND final_loss < 1 AS loss_ok,
       read_seconds >= 0 AND build_seconds >= 0 AND train_seconds > 0 AND store_seconds > 0 AS timed,
       user_table, item_table, owner = current_user::regrole AS mine
  FROM gpumf_train('ratings', 'user_id', 'item_id', 'value', factors => 8, iterations => 5);

-- factor tables keyed by the original keys
SELECT count(*) AS users, min(array_length(factors, 1)) AS k FROM gpumf.m1_v1_users;
SELECT count(*) AS items, min(idx) AS first_idx, max(idx) AS last_idx FROM gpumf.m1_v1_items;
SELECT key, array_length(seen, 1) AS seen FROM gpumf.m1_v1_users WHERE key IN (1, 3) ORDER BY key;
SELECT pg_typeof(key) FROM gpumf.m1_v1_users LIMIT 1;

-- recommendations: n rows, best first, seen items excluded
SELECT count(*) FROM gpumf_recommend('ratings', 3, 5);
SELECT bool_and(score IS NOT NULL) AS scored FROM gpumf_recommend('ratings', 3, 5);
SELECT count(*) AS seen_in_results
  FROM gpumf_recommend('ratings', 3, 50) r JOIN ratings t ON t.user_id = 3 AND t.item_id = r.item;
SELECT count(*) AS all_items FROM gpumf_recommend('ratings', 3, 1000, exclude_seen => false);
WITH r AS (SELECT item, score, row_number() OVER () AS pos FROM gpumf_recommend('ratings', 5, 10))
SELECT bool_and(a.score >= b.score) AS ordered FROM r a JOIN r b ON b.pos = a.pos + 1;
-- deterministic: the same call twice gives the same list
SELECT (SELECT array_agg(item) FROM gpumf_recommend('ratings', 7, 10)) =
       (SELECT array_agg(item) FROM gpumf_recommend('ratings', 7, 10)) AS same;

-- retraining replaces the model: new version; with gpumf.keep_versions = 1
-- (only the current version kept; history.sql tests keeping more) the old
-- tables are retired, and dropped by a later training once no reader holds them
SET gpumf.keep_versions = 1;
SELECT version, user_table, iterations_run FROM gpumf_train('ratings', 'user_id', 'item_id', 'value', factors => 8, iterations => 3);
SELECT name FROM gpumf.retired_tables ORDER BY name;
SELECT count(*) FROM gpumf_recommend('ratings', 3, 5);

-- without a value column every row counts 1; model name given
SELECT name, value_col IS NULL AS no_value, nnz
  FROM gpumf_train('ratings', 'user_id', 'item_id', model => 'plain', factors => 4, iterations => 2);

SELECT count(*) AS old_tables FROM pg_tables WHERE schemaname = 'gpumf' AND tablename LIKE 'm1_v1_%';
SELECT count(*) AS retired FROM gpumf.retired_tables;

-- views and materialized views
CREATE VIEW recent AS SELECT * FROM ratings WHERE user_id <= 20;
CREATE MATERIALIZED VIEW mv AS SELECT * FROM ratings WHERE item_id <= 10;
SELECT name, n_users, nnz FROM gpumf_train('recent', 'user_id', 'item_id', 'value', factors => 4, iterations => 2);
SELECT name, n_items FROM gpumf_train('mv', 'user_id', 'item_id', 'value', factors => 4, iterations => 2);

-- the loss goes down with more iterations (same seed)
SELECT (SELECT final_loss FROM gpumf_train('ratings', 'user_id', 'item_id', 'value', factors => 8, iterations => 8, model => 'long'))
     < (SELECT final_loss FROM gpumf_train('ratings', 'user_id', 'item_id', 'value', factors => 8, iterations => 1, model => 'short')) AS converging;

-- dropping
SELECT gpumf_drop_model('plain');
SELECT name FROM gpumf.models ORDER BY name;
SELECT gpumf_drop_model('plain');
