-- gpumf_evaluate: ranking metrics at k as the implicit library defines them,
-- RMSE/MAE for explicit models
SET gpumf.progress = off;

-- a model made by hand, so that every list is known: six items with one-hot
-- factors (keys 10 .. 15), so a user's factors are its scores
CREATE FUNCTION hand_model(model text, algorithm text, users text, items text, mu float8 DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE id bigint := nextval('gpumf.models_id_seq');
  ut text := format('gpumf.m%s_v1_users', id);
  it text := format('gpumf.m%s_v1_items', id);
BEGIN
  EXECUTE format('CREATE TABLE %s (key int PRIMARY KEY, factors real[] NOT NULL, seen int[] NOT NULL, bias real)', ut);
  EXECUTE format('CREATE TABLE %s (idx int PRIMARY KEY, key int UNIQUE NOT NULL, factors real[] NOT NULL, bias real)', it);
  EXECUTE format('INSERT INTO %s %s', ut, users);
  EXECUTE format('INSERT INTO %s %s', it, items);
  INSERT INTO gpumf.models (id, name, version, algorithm, factors, params, source, user_col, item_col,
      value_col, user_type, item_type, n_users, n_items, n_rows, nnz, backend, device, iterations_run,
      final_loss, global_mean, read_seconds, build_seconds, transfer_seconds, train_seconds,
      store_seconds, user_table, item_table, owner)
    VALUES (id, model, 1, algorithm, 6, '{}', 'public.none', 'u', 'i',
      CASE WHEN algorithm = 'als' THEN NULL ELSE 'rating' END, 'integer', 'integer', 3, 6, 0, 0,
      'cpu', 'hand', 0, 0, mu, 0, 0, 0, 0, 0, ut, it, current_user::regrole);
END $$;
SELECT hand_model('hand', 'als',
  $$VALUES (1, '{0.1, 0.7, 0.8, 0.2, 0.9, 0.3}', '{}', NULL),
           (2, '{0.5, 0.9, 0.9, 0.4, 0.9, 0.9}', '{1, 2, 4, 5}', NULL),
           (3, '{0.6, 0.5, 0.4, 0.3, 0.2, 0.1}', '{}', NULL)$$,
  $$SELECT i, 10 + i, array_agg((CASE WHEN j = i THEN 1 ELSE 0 END)::real ORDER BY j), NULL
      FROM generate_series(0, 5) i, generate_series(0, 5) j GROUP BY i$$);
-- user 1's list at k = 3 is (14, 12, 11), user 2's (10, 13) and an empty slot
SELECT rows_written FROM gpumf_recommend_all('hand', 3, 'hand_recs');
SELECT "user", array_agg(item ORDER BY rank) AS list FROM hand_recs GROUP BY "user" ORDER BY 1;
-- the test set: user 1 likes 11 and 14, user 2 likes 15 (an item it had in
-- training); user 3 has no test row; an unknown user, an unknown item and a
-- NULL are skipped
CREATE TABLE hand_test (u int, i int);
INSERT INTO hand_test VALUES (1, 11), (1, 14), (2, 15), (1, 14), (1, 77), (99, 10), (NULL, 10);
-- by hand, k = 3:
--   precision = (2 + 0) / (min(3, 2) + min(3, 1))                  = 2/3
--   recall    = (2/2 + 0/1) / 2                                     = 1/2
--   map       = ((1/1 + 2/3) / 2 + 0) / 2                           = 5/12
--   ndcg      = ((1 + 1/log2 4) / (1 + 1/log2 3) + 0) / 2
--   auc       = user 1: the miss at rank 2 adds 1, then (2 + 2)/2 * (4 - 1) = 6: 7/8
--               user 2: (0 + 1)/2 * (5 - 3) = 1: 1/5;  mean 43/80
SELECT users, skipped_users, skipped_rows,
       abs("precision" - 2.0 / 3) < 1e-12 AS "precision",
       abs(recall - 0.5) < 1e-12 AS recall,
       abs(map - 5.0 / 12) < 1e-12 AS map,
       abs(ndcg - (1 + 1 / log(2, 4)) / (1 + 1 / log(2, 3)) / 2) < 1e-12 AS ndcg,
       abs(auc - 43.0 / 80) < 1e-12 AS auc,
       rmse IS NULL AND mae IS NULL AS no_rating_errors
  FROM gpumf_evaluate('hand', 'hand_test', k => 3);
-- k = 1: lists (14) and (10): precision 1/2, recall 1/4, map 1/2, ndcg 1/2,
-- auc (6/8 + 2/5) / 2 = 0.575
SELECT "precision", recall, map, ndcg, round(auc::numeric, 12) AS auc
  FROM gpumf_evaluate('hand', 'hand_test', 'u', 'i', k => 1);

-- explicit models: RMSE and MAE of mu + b_u + c_i + x.y over the test rows
SELECT hand_model('hand_explicit', 'als_explicit',
  $$VALUES (1, '{0.1, 0.7, 0.8, 0.2, 0.9, 0.3}', '{}', 0.25),
           (2, '{0.5, 0.9, 0.9, 0.4, 0.9, 0.9}', '{1, 2, 4, 5}', -0.5),
           (3, '{0.6, 0.5, 0.4, 0.3, 0.2, 0.1}', '{}', 0)$$,
  $$SELECT i, 10 + i, array_agg((CASE WHEN j = i THEN 1 ELSE 0 END)::real ORDER BY j), (i - 2.5)::real / 10
      FROM generate_series(0, 5) i, generate_series(0, 5) j GROUP BY i$$, 3.5);
CREATE TABLE hand_ratings (u int, i int, rating numeric);
INSERT INTO hand_ratings VALUES (1, 11, 4), (1, 14, 5), (2, 15, 2.5), (3, 10, 3), (3, 10, 4), (9, 10, 1);
-- predictions: 3.5 + b_u + c_i + x_u[i - 10]
SELECT abs(e.rmse - ref.rmse) < 1e-6 AS rmse, abs(e.mae - ref.mae) < 1e-6 AS mae, e.users, e.skipped_rows
  FROM gpumf_evaluate('hand_explicit', 'hand_ratings', k => 2) e,
       (SELECT sqrt(avg((p - rating) ^ 2)) AS rmse, avg(abs(p - rating)) AS mae FROM (
          SELECT r.rating::float8, 3.5 + ub.b + ib.b + x.f AS p
            FROM hand_ratings r
            JOIN (VALUES (1, 0.25::real), (2, -0.5::real), (3, 0::real)) ub(u, b) ON ub.u = r.u
            JOIN (SELECT 10 + i AS i, ((i - 2.5)::real / 10)::float8 AS b FROM generate_series(0, 5) i) ib ON ib.i = r.i
            JOIN (SELECT u, i + 9 AS i, f::real::float8 AS f FROM (VALUES
                    (1, '{0.1, 0.7, 0.8, 0.2, 0.9, 0.3}'::real[]), (2, '{0.5, 0.9, 0.9, 0.4, 0.9, 0.9}'),
                    (3, '{0.6, 0.5, 0.4, 0.3, 0.2, 0.1}')) v(u, fs), unnest(fs) WITH ORDINALITY AS t(f, i)) x
              ON x.u = r.u AND x.i = r.i) d) ref;
-- the value column defaults to the model's; another can be named
ALTER TABLE hand_ratings RENAME rating TO stars;
SELECT gpumf_evaluate('hand_explicit', 'hand_ratings');
SELECT rmse > 0 AS named FROM gpumf_evaluate('hand_explicit', 'hand_ratings', value_col => 'stars');

-- trained explicit models: the same RMSE as gpumf_rmse, and RMSE/MAE as
-- computed in SQL from gpumf_predict
CREATE TABLE er AS SELECT * FROM gpumf_synthetic_ratings(300, 120, 6000, rank => 4, noise => 0.3, seed => 8);
CREATE VIEW er_train AS SELECT user_id, item_id, rating FROM er WHERE NOT holdout;
CREATE VIEW er_test AS SELECT user_id, item_id, rating FROM er WHERE holdout;
SELECT algorithm FROM gpumf_train('er_train', 'user_id', 'item_id', 'rating', factors => 4, iterations => 8,
                                  algorithm => 'als_explicit', model => 'er_als');
SELECT algorithm FROM gpumf_train('er_train', 'user_id', 'item_id', 'rating', factors => 4, iterations => 8,
                                  algorithm => 'ccd', model => 'er_ccd');
SELECT m AS model, e.users > 0 AS ranked, e.rmse < 0.6 AS fits,
       abs(e.rmse - gpumf_rmse(m, 'er_test', 'user_id', 'item_id', 'rating')) < 1e-5 AS same_as_gpumf_rmse,
       abs(e.rmse - r.rmse) < 1e-5 AS rmse, abs(e.mae - r.mae) < 1e-5 AS mae
  FROM unnest(ARRAY['er_als', 'er_ccd']) m,
       LATERAL gpumf_evaluate(m, 'er_test') e,
       LATERAL (SELECT sqrt(avg((p - rating) ^ 2)) AS rmse, avg(abs(p - rating)) AS mae
                  FROM (SELECT gpumf_predict(m, user_id, item_id)::float8 AS p, rating::float8 AS rating
                          FROM er_test) t WHERE p IS NOT NULL) r;

-- a trained model on random data against a reference written in SQL from
-- gpumf_recommend's lists (float64 sums)
CREATE TABLE ev AS SELECT user_id AS u, item_id AS i, value AS v, holdout FROM gpumf_synthetic(400, 120, 8000, seed => 5);
CREATE VIEW ev_train AS SELECT u, i, v FROM ev WHERE NOT holdout;
CREATE VIEW ev_test AS SELECT u, i FROM ev WHERE holdout;
SELECT n_items FROM gpumf_train('ev_train', 'u', 'i', 'v', factors => 8, iterations => 5, model => 'ev');
SELECT item_table AS ev_items, n_items AS ev_n FROM gpumf.models WHERE name = 'ev' \gset
CREATE TABLE ev_ref AS
WITH likes AS (SELECT DISTINCT t.u, t.i FROM ev_test t JOIN :ev_items it ON it.key = t.i
                WHERE t.u IN (SELECT u FROM ev_train)),
  npos AS (SELECT u, count(*)::float8 AS n FROM likes GROUP BY u),
  lists AS (SELECT p.u, r.item, r.rank FROM npos p,
              LATERAL (SELECT item, row_number() OVER () AS rank FROM gpumf_recommend('ev', p.u, 10)) r),
  marked AS (SELECT l.u, l.rank, (k.i IS NOT NULL) AS hit,
                    count(k.i) OVER (PARTITION BY l.u ORDER BY l.rank) AS hits_so_far
               FROM lists l LEFT JOIN likes k ON k.u = l.u AND k.i = l.item),
  per_user AS (SELECT m.u, p.n, count(*) FILTER (WHERE hit) AS hits,
                      sum(CASE WHEN hit THEN hits_so_far::float8 / rank ELSE 0 END) / least(10, p.n) AS ap,
                      sum(CASE WHEN hit THEN 1 / log(2, rank + 1) ELSE 0 END)
                        / (SELECT sum(1 / log(2, j + 1)) FROM generate_series(1, least(10, p.n)::int) j) AS ndcg,
                      (sum(CASE WHEN NOT hit THEN hits_so_far ELSE 0 END)
                        + (count(*) FILTER (WHERE hit) + p.n) / 2
                          * (:ev_n - p.n - count(*) FILTER (WHERE NOT hit))) / (p.n * (:ev_n - p.n)) AS auc
                 FROM marked m JOIN npos p ON p.u = m.u GROUP BY m.u, p.n)
SELECT count(*) AS users, sum(hits) / sum(least(10, n)) AS "precision", avg(hits / n) AS recall,
       avg(ap) AS map, avg(ndcg) AS ndcg, avg(auc) AS auc FROM per_user;
SELECT e.users = r.users AS users, e.skipped_users, e.skipped_rows > 0 AS skipped_rows,
       abs(e."precision" - r."precision") < 1e-9 AS "precision", abs(e.recall - r.recall) < 1e-9 AS recall,
       abs(e.map - r.map) < 1e-9 AS map, abs(e.ndcg - r.ndcg) < 1e-9 AS ndcg, abs(e.auc - r.auc) < 1e-9 AS auc,
       e."precision" > 0.1 AS finds_the_structure
  FROM gpumf_evaluate('ev', 'ev_test') e, ev_ref r;

-- record => true keeps the results with the model's version (owner only)
SELECT metrics IS NULL AS none_yet FROM gpumf.models WHERE name = 'ev';
SELECT users FROM gpumf_evaluate('ev', 'ev_test', record => true);
SELECT metrics->>'k' AS k, metrics->>'test' AS test, (metrics->>'users')::int AS users,
       abs((metrics->>'precision')::float8 - (SELECT "precision" FROM ev_ref)) < 1e-9 AS "precision"
  FROM gpumf.models WHERE name = 'ev';
-- a retraining starts without metrics
SELECT metrics IS NULL AS cleared FROM gpumf_train('ev_train', 'u', 'i', 'v', factors => 8, iterations => 2, model => 'ev');

-- bad input: a clear error, and no metrics recorded
SELECT gpumf_evaluate('no such model', 'ev_test');
SELECT gpumf_evaluate('ev', 'no_such_table');
SELECT gpumf_evaluate('ev', NULL);
SELECT gpumf_evaluate('ev', 'ev_test', k => 0);
SELECT gpumf_evaluate('ev', 'ev_test', k => NULL);
SELECT gpumf_evaluate('ev', 'ev_test', 'nope');
SELECT gpumf_evaluate('ev', 'ev_test', 'u', 'nope');
SELECT gpumf_evaluate('ev', 'hand_ratings', 'u', 'stars');
CREATE TABLE text_test (u text, i int);
SELECT gpumf_evaluate('ev', 'text_test');
SELECT gpumf_evaluate('ev', 'ev_test', value_col => 'v');
CREATE SEQUENCE ev_seq;
SELECT gpumf_evaluate('ev', 'ev_seq');
-- no known user: a NOTICE and NULL metrics
CREATE TABLE strangers (u int, i int);
INSERT INTO strangers VALUES (100001, 1), (100002, 2);
SELECT users, skipped_users, skipped_rows, "precision" IS NULL AS no_precision FROM gpumf_evaluate('ev', 'strangers');
-- another role may evaluate a model it can read, but not record into it
CREATE ROLE regress_gpumf_eval;
GRANT SELECT ON ev_test, ev TO regress_gpumf_eval;
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'ev' \gset
SET ROLE regress_gpumf_eval;
SELECT gpumf_evaluate('ev', 'ev_test');
RESET ROLE;
GRANT SELECT ON :ut, :it TO regress_gpumf_eval;
SET ROLE regress_gpumf_eval;
SELECT users > 0 AS evaluated FROM gpumf_evaluate('ev', 'ev_test');
\set VERBOSITY terse
SELECT gpumf_evaluate('ev', 'ev_test', record => true);
\set VERBOSITY default
RESET ROLE;
SELECT metrics IS NULL AS not_recorded FROM gpumf.models WHERE name = 'ev';
REVOKE ALL ON ev_test, ev, :ut, :it FROM regress_gpumf_eval;
DROP ROLE regress_gpumf_eval;
