-- graph_filter: a low-pass filter of the normalized item-item graph kept on
-- its top eigenvectors, served as a factorization by the same functions as
-- every other model (src/core/train/graph_filter.c)
SET gpumf.progress = off;
CREATE TABLE gf_all AS
SELECT user_id, item_id, holdout FROM gpumf_synthetic(600, 300, 24000, seed => 11, min_per_user => 10, clusters => 8, affinity => 0.7);
CREATE TABLE gf_train AS SELECT user_id, item_id FROM gf_all WHERE NOT holdout;
CREATE TABLE gf_test AS SELECT user_id, item_id FROM gf_all WHERE holdout;

-- defaults: 1024 factors, on 300 items all of them; the filter goes to params
SELECT name, algorithm, factors, iterations_run, final_loss < 1e-3 AS whole_space,
       params - 'filter' AS params, jsonb_array_length(params->'filter') AS filters,
       (params->'filter'->>0)::float8 > (params->'filter'->>299)::float8 AS low_pass
  FROM gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', model => 'gf');
-- truncated: the loss (energy outside the subspace) falls with the iterations
SELECT a.final_loss > b.final_loss AS loss_falls
  FROM gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', factors => 32,
                   iterations => 1, model => 'gf32') a,
       gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', factors => 32,
                   iterations => 8, model => 'gf32') b;
-- a value column is allowed and ignored: every pair counts once
CREATE TABLE gf_valued AS SELECT user_id, item_id, (user_id % 5 + 1)::real AS v FROM gf_train;
SELECT name FROM gpumf_train('gf_valued', 'user_id', 'item_id', 'v', algorithm => 'graph_filter',
                             factors => 32, iterations => 8, model => 'gfv');
SELECT count(*) AS differ FROM (
  SELECT item, round(score::numeric, 4) FROM gpumf_recommend('gf32', 7, 10)
  EXCEPT SELECT item, round(score::numeric, 4) FROM gpumf_recommend('gfv', 7, 10)) d;

-- held-out quality on planted communities: well above popularity
WITH pop AS (SELECT item_id FROM gf_train GROUP BY item_id ORDER BY count(*) DESC, item_id LIMIT 20)
SELECT e.recall > 0.3 AS learns, e.recall > 1.5 * (
         SELECT count(*)::float8 / (SELECT count(*) FROM gf_test) FROM gf_test t JOIN pop USING (item_id))
       AS beats_popularity
  FROM gpumf_evaluate('gf32', 'gf_test', k => 20) e;

-- fold-in: a user recomputed from the source, or a basket of its items, gets
-- the stored vector (the same sum over its items)
SELECT count(*) AS differ FROM (
  SELECT item, round(score::numeric, 4) FROM gpumf_recommend('gf32', 5, 10)
  EXCEPT SELECT item, round(score::numeric, 4) FROM gpumf_recommend('gf32', 5, 10, recompute => true)) d;
SELECT count(*) AS differ FROM (
  SELECT item FROM gpumf_recommend('gf32', 5, 10)
  EXCEPT SELECT item FROM gpumf_recommend_items('gf32', (SELECT array_agg(item_id) FROM gf_train WHERE user_id = 5), 10)) d;
-- its users' factors are not stored (each is the sum over its seen items,
-- formed when served): the table keeps the key and the seen items
SELECT format('SELECT count(*) AS users, count(*) FILTER (WHERE cardinality(factors) = 0) AS without_factors, '
              'sum(cardinality(seen)) AS seen FROM %s', user_table) AS q
  FROM gpumf.models WHERE name = 'gf32' \gset
:q;
SELECT count(*) AS rows FROM gf_train;
-- the formed vector: the same for a single user, recomputed from the source, and the batch paths
SELECT array_length(gpumf_user_vector('gf32', 5), 1) AS len,
       (SELECT max(abs(a - b)) FROM unnest(gpumf_user_vector('gf32', 5), gpumf_user_vector('gf32', 5, recompute => true)) t(a, b)) < 1e-5 AS recompute_agrees;
SELECT count(*) AS similar, bool_and("user" <> 5) AS not_itself FROM gpumf_similar_users('gf32', 5, 3);
-- a new user: a basket of two items ranks other items, none of its own
SELECT count(*) AS n, bool_and(item NOT IN (3, 8)) AS basket_excluded
  FROM gpumf_recommend_items('gf32', ARRAY[3, 8], 10);
-- filters and batch serving work as for any model
SELECT count(*) FROM gpumf_recommend('gf32', 5, 10, candidates => ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
SELECT scored_users, rows_written FROM gpumf_recommend_all('gf32', 3, 'gf_recs');
SELECT count(*) AS differ FROM (
  SELECT item FROM gf_recs WHERE "user" = 9
  EXCEPT SELECT item FROM gpumf_recommend('gf32', 9, 3)) d;

-- more than 1024 factors: rows of 4.4 kB factors, stored out of line when a row would not fit
CREATE TABLE gf_wide AS SELECT u, i FROM generate_series(1, 200) u, generate_series(1, 1100) i
 WHERE (pg_catalog.hashint4(u * 2003 + i) & 15) < 3;
SELECT factors, n_items FROM gpumf_train('gf_wide', 'u', 'i', algorithm => 'graph_filter', factors => 1100,
                                         iterations => 1, model => 'gf_wide');
SELECT count(*), count(DISTINCT item) FROM gpumf_recommend('gf_wide', 5, 10);
-- the recomputed user scores the stored list's items alike (near-ties may swap places)
SELECT count(*) AS matched, count(*) FILTER (WHERE abs(a.score - b.score) > 1e-4 * greatest(abs(a.score), 1e-3)) AS differ
  FROM gpumf_recommend('gf_wide', 5, 10) a JOIN gpumf_recommend('gf_wide', 5, 20, recompute => true) b USING (item);

-- blended with an iALS model (ials_factors): one model of factors + ials_factors
-- factors, the iALS part last; its users keep that part's factors
SELECT name, factors, (params->'ials') - 'final_loss' AS ials, jsonb_array_length(params->'filter') AS filters,
       (params->'ials'->>'final_loss')::float8 > 0 AS ials_trained
  FROM gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', factors => 32,
                   iterations => 8, ials_factors => 8, ials_iterations => 6, model => 'gfb');
SELECT format('SELECT count(*) AS users, count(*) FILTER (WHERE cardinality(factors) = 8) AS ials_factors FROM %s',
              user_table) AS q, user_table AS ut, item_table AS it
  FROM gpumf.models WHERE name = 'gfb' \gset
:q;
-- a stored user's scores: blend * p/|p| . q + (1 - blend) * x/|x| . y, p the
-- filter's sum over its seen items, x its stored iALS factors (float64 here)
CREATE TEMP TABLE gfb_deg AS SELECT s AS idx, count(*) AS d FROM :ut, unnest(seen) s GROUP BY s;
CREATE TEMP TABLE gfb_p AS
SELECT f, (m.params->'filter'->>(f - 1))::float8 *
          sum(power(g.d, -2 * (m.params->>'beta')::float8) * i.factors[f]) AS p
  FROM gpumf.models m, :ut u, unnest(u.seen) s JOIN :it i ON i.idx = s JOIN gfb_deg g ON g.idx = s,
       generate_series(1, 32) f
 WHERE m.name = 'gfb' AND u.key = 5 GROUP BY f, m.params;
CREATE TEMP TABLE gfb_x AS SELECT f - 32 AS f, u.factors[f - 32]::float8 AS x FROM :ut u, generate_series(33, 40) f WHERE u.key = 5;
CREATE TEMP TABLE gfb_ref AS
SELECT i.key AS item,
       0.4 * (SELECT sum(p * i.factors[f]) FROM gfb_p) / (SELECT sqrt(sum(p * p)) FROM gfb_p) +
       0.6 * (SELECT sum(x * i.factors[32 + f]) FROM gfb_x) / (SELECT sqrt(sum(x * x)) FROM gfb_x) AS score
  FROM :it i WHERE NOT i.idx = ANY ((SELECT seen FROM :ut WHERE key = 5)::int[]);
SELECT count(*) AS served, count(*) FILTER (WHERE abs(r.score - e.score) < 1e-5) AS agree,
       (SELECT count(*) FROM (SELECT item FROM gfb_ref ORDER BY score DESC LIMIT 10) t) AS ref
  FROM gpumf_recommend('gfb', 5, 10) r JOIN (SELECT * FROM gfb_ref ORDER BY score DESC LIMIT 10) e USING (item);
-- fold-in: the filter's part is the same sum; the iALS part an exact solve
-- (the trainer's 6 sweeps come close); a basket of the user's items = recomputed
SELECT (SELECT max(abs(a - b)) FROM unnest((gpumf_user_vector('gfb', 5))[1:32],
                                           (gpumf_user_vector('gfb', 5, recompute => true))[1:32]) t(a, b)) < 1e-5 AS filter_part_agrees,
       (SELECT sqrt(sum(a * a)) FROM unnest((gpumf_user_vector('gfb', 5, recompute => true))[33:40]) t(a)) BETWEEN 0.5999 AND 0.6001 AS ials_part_scaled,
       (SELECT sum(a * b) FROM unnest((gpumf_user_vector('gfb', 5))[33:40],
                                      (gpumf_user_vector('gfb', 5, recompute => true))[33:40]) t(a, b)) > 0.9 * 0.36 AS ials_part_close;
SELECT count(*) AS differ FROM (
  SELECT item, round(score::numeric, 4) FROM gpumf_recommend('gfb', 5, 10, recompute => true)
  EXCEPT SELECT item, round(score::numeric, 4) FROM gpumf_recommend_items('gfb', (SELECT array_agg(item_id) FROM gf_train WHERE user_id = 5), 10)) d;
-- evaluation, batch serving and similar users, as for any model
SELECT e.recall > 0.3 AS learns FROM gpumf_evaluate('gfb', 'gf_test', k => 20) e;
SELECT scored_users, rows_written FROM gpumf_recommend_all('gfb', 3, 'gfb_recs');
SELECT count(*) AS differ FROM (
  SELECT item FROM gfb_recs WHERE "user" = 9
  EXCEPT SELECT item FROM gpumf_recommend('gfb', 9, 3)) d;
SELECT count(*) AS similar, bool_and("user" <> 5) AS not_itself FROM gpumf_similar_users('gfb', 5, 3);
SELECT count(*) AS n, bool_and(item NOT IN (3, 8)) AS basket_excluded
  FROM gpumf_recommend_items('gfb', ARRAY[3, 8], 10);
-- the iALS part's hyper-parameters apply with ials_factors only; bad values are refused
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', ials_factors => 8, blend => 1, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', blend => 0.5, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', ials_iterations => 3, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', factors => 8000, ials_factors => 200, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', ials_factors => 8, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', ials_factors => 8, holdout => 0.2, model => 'gf_bad');

-- bad calls change nothing
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', factors => 301, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', factors => 8193, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', regularization => 0.1, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', alpha => -1, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', autotune => true, model => 'gf_bad');
SELECT gpumf_train('gf_train', 'user_id', 'item_id', algorithm => 'graph_filter', biases => true, model => 'gf_bad');
SELECT count(*) FROM gpumf.models WHERE name = 'gf_bad';
-- a damaged catalog row (no filter) refuses fold-in with a hint
UPDATE gpumf.models SET params = params - 'filter' WHERE name = 'gfv';
\c
SET gpumf.progress = off;
SELECT count(*) FROM gpumf_recommend_items('gfv', ARRAY[3, 8], 10);
SELECT gpumf_drop_model(name) FROM gpumf.models WHERE name LIKE 'gf%' ORDER BY name;
