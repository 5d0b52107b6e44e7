-- explicit models (ratings): CCD++ and ALS, both with weighted-lambda regularisation, predictions, RMSE
SET gpumf.progress = off;
-- planted rank-5 ratings with noise sigma 0.5; about 10% held out
CREATE TABLE pr AS SELECT * FROM gpumf_synthetic_ratings(1000, 400, 80000, rank => 5, noise => 0.5, seed => 3);
SELECT count(*), round(avg(rating)::numeric, 1) AS mean, sum(holdout::int) > 7000 AS held_out FROM pr;
CREATE VIEW pr_train AS SELECT user_id, item_id, rating FROM pr WHERE NOT holdout;
CREATE VIEW pr_test AS SELECT user_id, item_id, rating FROM pr WHERE holdout;

-- both algorithms land close to the noise level on held-out ratings
SELECT name, algorithm, params, iterations_run, train_rmse < 0.55 AS fits,
       round(global_mean::numeric, 1) AS mean, value_min < 1.5 AND value_max > 5 AS range_known
  FROM gpumf_train('pr_train', 'user_id', 'item_id', 'rating', factors => 5, iterations => 20,
                   algorithm => 'ccd', model => 'ccd5', regularization => 0.05);
SELECT gpumf_rmse('ccd5', 'pr_test', 'user_id', 'item_id', 'rating') < 0.56 AS ccd_heldout_ok;
SELECT name, algorithm, params, train_rmse < 0.55 AS fits
  FROM gpumf_train('pr_train', 'user_id', 'item_id', 'rating', factors => 5, iterations => 20,
                   algorithm => 'als_explicit', model => 'als5', regularization => 0.05);
SELECT gpumf_rmse('als5', 'pr_test', 'user_id', 'item_id', 'rating') < 0.56 AS als_heldout_ok;
-- test ratings beyond about 1e154 (whose squared errors overflow double):
-- the RMSE computed exactly in numeric, not Infinity
CREATE TABLE pr_huge AS SELECT user_id, item_id, rating * 1e300 AS rating FROM pr_test LIMIT 200;
SELECT abs(gpumf_rmse('als5', 'pr_huge', 'user_id', 'item_id', 'rating')::numeric /
           (SELECT sqrt(avg(((gpumf_predict('als5', user_id, item_id))::numeric - rating::numeric) ^ 2)) FROM pr_huge) - 1)
       < 1e-12 AS huge_rmse_exact;
DROP TABLE pr_huge;

-- predictions: over a join, clipped on request; NULL for unknown keys
SELECT abs(avg(gpumf_predict('als5', user_id, item_id) - rating)) < 0.05 AS unbiased,
       min(gpumf_predict('als5', user_id, item_id, clip => true)) >= (SELECT value_min FROM gpumf.models WHERE name = 'als5') AS clipped
  FROM pr_test;
SELECT gpumf_predict('als5', 99999, 2) IS NULL AS unknown_user, gpumf_predict('als5', 1, 99999) IS NULL AS unknown_item,
       gpumf_predict('als5', '1', '2') = gpumf_predict('als5', 1, 2) AS literal_keys;
SELECT gpumf_predict('als5', 'x'::text, 2);
-- recommendations score by the predicted rating
SELECT count(*), bool_and(score > 3) AS high FROM gpumf_recommend('als5', 1, 5);
-- recommend ranks in float32, gpumf_predict sums in float64: equal to float32 rounding
SELECT abs(r.score - gpumf_predict('als5', 1, r.item)) <= 1e-5 * greatest(1, abs(r.score)) AS same
FROM gpumf_recommend('als5', 1, 1) r;

-- RMSE: unknown keys skipped and counted; wrong key types refused
CREATE TABLE extra AS SELECT user_id + 5000 AS user_id, item_id, rating FROM pr_test LIMIT 10;
INSERT INTO extra SELECT * FROM pr_test LIMIT 5;
SELECT gpumf_rmse('ccd5', 'extra', 'user_id', 'item_id', 'rating') > 0 AS some_rows;
CREATE TABLE wrong (u text, i int, r real);
SELECT gpumf_rmse('ccd5', 'wrong', 'u', 'i', 'r');
SELECT gpumf_rmse('ccd5', 'wrong', 'i', 'nope', 'r');
SELECT gpumf_rmse('no such model', 'wrong', 'i', 'i', 'r');

-- biases off: no global mean, the plain factorisation
SELECT params->'biases' AS biases, global_mean IS NULL AS no_mean
  FROM gpumf_train('pr_train', 'user_id', 'item_id', 'rating', factors => 5, iterations => 3,
                   algorithm => 'ccd', model => 'nobias', biases => false, inner_iterations => 2);

-- ratings may be negative; NaN and infinite ones are an ERROR naming the row
CREATE TABLE neg AS SELECT user_id, item_id, rating - 3 AS rating FROM pr_train;
SELECT name, value_min < 0 AS negative_ok FROM gpumf_train('neg', 'user_id', 'item_id', 'rating', factors => 2, iterations => 2, algorithm => 'ccd');
INSERT INTO neg VALUES (1, 1, 'NaN');
SELECT gpumf_train('neg', 'user_id', 'item_id', 'rating', factors => 2, algorithm => 'als_explicit');

-- bad input: algorithm unknown, parameters that do not apply, no value column
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => 'svd');
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => 'ccd', cg_steps => 3);
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => 'als_explicit', alpha => 2);
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => 'als_explicit', inner_iterations => 2);
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => 'als', biases => true);
SELECT gpumf_train('pr_train', 'user_id', 'item_id', algorithm => 'ccd');
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => 'ccd', inner_iterations => 0);
SELECT gpumf_train('pr_train', 'user_id', 'item_id', 'rating', algorithm => NULL);
SELECT count(*) FROM gpumf_synthetic_ratings(10, 1, 100);
SELECT count(*) FROM gpumf_synthetic_ratings(10, 100, 5);

SELECT gpumf_drop_model(name) FROM gpumf.models WHERE name IN ('ccd5', 'als5', 'nobias', 'neg') ORDER BY name;
DROP TABLE pr, extra, wrong, neg CASCADE;
