-- a bare gpumf_train chooses its own hyper-parameters (autotune): on planted
-- data it lands within 5% of the best setting gpumf's own tuning finds
-- (implicit: recall@20 against a 24-trial gpumf_tune; explicit: RMSE against
-- a grid over factors and regularization), measured on held-out rows the
-- training never saw
SET gpumf.progress = off;
CREATE TABLE at_all AS
SELECT user_id, item_id, holdout FROM gpumf_synthetic(600, 300, 24000, seed => 11, min_per_user => 10, clusters => 8, affinity => 0.7);
CREATE TABLE at_train AS SELECT user_id, item_id FROM at_all WHERE NOT holdout;
CREATE TABLE at_test AS SELECT user_id, item_id FROM at_all WHERE holdout;

-- the bare call: the search's summary is in params
SELECT factors BETWEEN 8 AND 1024 AS factors_ok, params->>'solver' AS solver,
       params->'autotune'->'searched' AS searched,
       params->'autotune'->>'metric' AS metric,
       (params->'autotune'->>'trials')::int BETWEEN 5 AND 40 AS trials_ok,
       (params->'autotune'->>'validation')::float8 > 0 AS measured,
       (params->>'iterations')::int = iterations_run AS best_iteration_trained
  FROM gpumf_train('at_train', 'user_id', 'item_id');

-- the best of gpumf_tune's default search with 24 trials, trained on every row
SELECT count(*) FROM gpumf_tune('at_train', 'user_id', 'item_id', budget => 24, factors => '{8,16,32,64}', model => 'at_tuned');
SELECT name FROM gpumf_train('at_train', 'user_id', 'item_id', model => 'at_fixed', autotune => false);
WITH bare AS (SELECT recall FROM gpumf_evaluate('at_train', 'at_test', k => 20)),
     tuned AS (SELECT recall FROM gpumf_evaluate('at_tuned', 'at_test', k => 20)),
     fixed AS (SELECT recall FROM gpumf_evaluate('at_fixed', 'at_test', k => 20))
SELECT bare.recall >= 0.95 * tuned.recall AS bare_within_5pct_of_tuned,
       bare.recall > fixed.recall AS bare_beats_fixed_defaults,
       round(bare.recall::numeric / tuned.recall::numeric, 1) AS ratio_1dp
  FROM bare, tuned, fixed;

-- autotune => false and gpumf.autotune = off: the fixed defaults of 0.3
SELECT factors, params->>'regularization' AS regularization, params->>'solver' AS solver,
       params ? 'autotune' AS searched
  FROM gpumf_train('at_train', 'user_id', 'item_id', model => 'at_fixed', autotune => false);
SET gpumf.autotune = off;
SELECT factors, params ? 'autotune' AS searched FROM gpumf_train('at_train', 'user_id', 'item_id', model => 'at_off');
RESET gpumf.autotune;
-- a call that gives any hyper-parameter trains exactly as given (no search)
SELECT factors, params->>'solver' AS solver, params ? 'autotune' AS searched
  FROM gpumf_train('at_train', 'user_id', 'item_id', factors => 16, model => 'at_given');
-- autotune => true searches what the call leaves out; what it gives wins
SELECT factors, params->>'nu' AS nu, params->'autotune'->'searched' AS searched,
       params->'autotune'->>'metric' AS metric
  FROM gpumf_train('at_train', 'user_id', 'item_id', factors => 16, nu => 0.5, metric => 'ndcg@10',
                   model => 'at_some', autotune => true);
-- a retrain searches again (what a pg_cron job gets), version by version
SELECT version, params ? 'autotune' AS searched FROM gpumf_train('at_train', 'user_id', 'item_id');
-- bad combinations change nothing
SELECT gpumf_train('at_train', 'user_id', 'item_id', holdout => 0.2, autotune => true);
SELECT gpumf_train('at_train', 'user_id', 'item_id', metric => 'nope@3', autotune => true);
SELECT version FROM gpumf.models WHERE name = 'at_train';
-- too few rows to hold any out: the fixed defaults, with a NOTICE
CREATE TABLE at_tiny (u int, i int);
INSERT INTO at_tiny VALUES (1, 1), (2, 2), (3, 3), (4, 1);
SELECT factors, params ? 'autotune' AS searched FROM gpumf_train('at_tiny', 'u', 'i');

-- explicit: the regularization by held-out RMSE; against a grid over factors
-- and regularization (the best of 15 trainings)
CREATE TABLE ar_all AS
SELECT user_id, item_id, rating, holdout FROM gpumf_synthetic_ratings(400, 300, 24000, rank => 5, noise => 0.3, seed => 3);
CREATE TABLE ar_train AS SELECT user_id, item_id, rating FROM ar_all WHERE NOT holdout;
CREATE TABLE ar_test AS SELECT user_id, item_id, rating FROM ar_all WHERE holdout;
SELECT factors, params->'autotune'->'searched' AS searched, params->'autotune'->>'metric' AS metric
  FROM gpumf_train('ar_train', 'user_id', 'item_id', 'rating', algorithm => 'als_explicit');
SELECT params->'autotune'->'searched' AS searched
  FROM gpumf_train('ar_train', 'user_id', 'item_id', 'rating', algorithm => 'ccd', model => 'ar_ccd');
CREATE TABLE ar_grid (f int, r real, rmse float8);
DO $$
DECLARE f int; r real;
BEGIN
  FOREACH f IN ARRAY '{8,16,64}'::int[] LOOP
    FOREACH r IN ARRAY '{0.005,0.01,0.02,0.05,0.15}'::real[] LOOP
      PERFORM gpumf_train('ar_train', 'user_id', 'item_id', 'rating', factors => f, regularization => r,
                          algorithm => 'als_explicit', model => 'ar_g');
      INSERT INTO ar_grid SELECT f, r, rmse FROM gpumf_evaluate('ar_g', 'ar_test', value_col => 'rating');
    END LOOP;
  END LOOP;
END $$;
SELECT (SELECT rmse FROM gpumf_evaluate('ar_train', 'ar_test', value_col => 'rating'))
         <= 1.05 * (SELECT min(rmse) FROM ar_grid) AS als_explicit_within_5pct,
       (SELECT rmse FROM gpumf_evaluate('ar_ccd', 'ar_test', value_col => 'rating'))
         <= 1.05 * (SELECT min(rmse) FROM ar_grid) AS ccd_within_5pct;
