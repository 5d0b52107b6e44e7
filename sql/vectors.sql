-- vectors: a model's factors as real[] whose inner products are the scores
-- gpumf serves (for a vector index such as pgvector's; no pgvector needed here)
SET gpumf.progress = off;
CREATE TABLE vec_clicks AS
  SELECT user_id, item_id, value FROM gpumf_synthetic(200, 300, 6000, seed => 11) WHERE NOT holdout;
SELECT n_items > 250 AS trained
  FROM gpumf_train('vec_clicks', 'user_id', 'item_id', 'value', factors => 8, iterations => 5, model => 'vec_imp');
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'vec_imp' \gset

-- implicit models: the factors themselves, one-dimensional, from 1
SELECT array_length(gpumf_user_vector('vec_imp', 5), 1) AS user_len,
       array_length(gpumf_item_vector('vec_imp', 7), 1) AS item_len,
       array_ndims(gpumf_user_vector('vec_imp', 5)) AS ndims,
       array_lower(gpumf_item_vector('vec_imp', 7), 1) AS lower;
SELECT bool_and(u.factors = gpumf_user_vector('vec_imp', u.key)) AS users_stored,
       count(*) = (SELECT n_users FROM gpumf.models WHERE name = 'vec_imp') AS every_user
  FROM :ut u;
SELECT bool_and(i.factors = gpumf_item_vector('vec_imp', i.key)) AS items_stored FROM :it i;
-- the inner product is gpumf_recommend's score, for every item
SELECT count(*) = (SELECT n_items FROM gpumf.models WHERE name = 'vec_imp') AS every_item,
       bool_and(abs(r.score - d.s) <= 1e-5 * greatest(1, abs(r.score))) AS same_score
  FROM gpumf_recommend('vec_imp', 5, 1000, false) r,
       LATERAL (SELECT sum(a * b) AS s
                  FROM unnest(gpumf_user_vector('vec_imp', 5), gpumf_item_vector('vec_imp', r.item)) t(a, b)) d;
-- gpumf_item_vectors: every item once, in key order, the same arrays
SELECT count(*) AS items, count(DISTINCT item) AS distinct_items,
       bool_and(embedding = gpumf_item_vector('vec_imp', item)) AS same_arrays,
       array_agg(item) = array_agg(item ORDER BY item) AS key_order
  FROM gpumf_item_vectors('vec_imp');
SELECT pg_typeof(item) AS item_type, pg_typeof(embedding) AS embedding_type
  FROM gpumf_item_vectors('vec_imp') LIMIT 1;
-- ranking by the inner product in SQL gives gpumf_recommend's top 10
SELECT (SELECT array_agg(item) FROM gpumf_recommend('vec_imp', 5, 10, false)) =
       (SELECT array_agg(item) FROM (
          SELECT v.item FROM gpumf_item_vectors('vec_imp') v,
                 LATERAL (SELECT sum(a * b) AS s FROM unnest(gpumf_user_vector('vec_imp', 5), v.embedding) t(a, b)) d
           ORDER BY d.s DESC, v.item LIMIT 10) t) AS same_top10;

-- l2 => true: one more element (users 0; items sqrt(R^2 - |v|^2)), so every
-- item has the norm R, the nearest items by Euclidean distance are the top
-- items by inner product, and the inner product is the same
SELECT array_length(gpumf_user_vector('vec_imp', 5, l2 => true), 1) AS user_len,
       array_length(gpumf_item_vector('vec_imp', 7, l2 => true), 1) AS item_len,
       (gpumf_user_vector('vec_imp', 5, l2 => true))[9] AS user_last,
       (gpumf_user_vector('vec_imp', 5, l2 => true))[1:8] = gpumf_user_vector('vec_imp', 5) AS user_factors,
       (gpumf_item_vector('vec_imp', 7, l2 => true))[1:8] = gpumf_item_vector('vec_imp', 7) AS item_factors;
SELECT count(*) AS items, max(r) - min(r) <= 1e-5 * max(r) AS one_norm, min(last) = 0 AS largest_gets_0,
       bool_and(embedding = gpumf_item_vector('vec_imp', item, l2 => true)) AS same_arrays
  FROM gpumf_item_vectors('vec_imp', l2 => true),
       LATERAL (SELECT sqrt(sum(a::float8 * a)) AS r FROM unnest(embedding) a) n,
       LATERAL (SELECT embedding[9] AS last) l;
SELECT (SELECT array_agg(item) FROM gpumf_recommend('vec_imp', 5, 10, false)) =
       (SELECT array_agg(item) FROM (
          SELECT v.item FROM gpumf_item_vectors('vec_imp', l2 => true) v,
                 LATERAL (SELECT sum((a - b)::float8 ^ 2) AS d, sum(a::float8 * b) AS s
                            FROM unnest(gpumf_user_vector('vec_imp', 5, l2 => true), v.embedding) t(a, b)) d
           ORDER BY d.d, v.item LIMIT 10) t) AS nearest_are_top10,
       (SELECT bool_and(abs(r.score - d.s) <= 1e-5 * greatest(1, abs(r.score)))
          FROM gpumf_recommend('vec_imp', 5, 1000, false) r,
               LATERAL (SELECT sum(a * b) AS s
                          FROM unnest(gpumf_user_vector('vec_imp', 5, l2 => true),
                                      gpumf_item_vector('vec_imp', r.item, l2 => true)) t(a, b)) d) AS same_score;

-- unknown keys, NULLs, keys of other types
SELECT gpumf_user_vector('vec_imp', 100000) IS NULL AS unknown_user,
       gpumf_item_vector('vec_imp', 100000) IS NULL AS unknown_item,
       gpumf_user_vector('vec_imp', NULL::int) IS NULL AS null_user,
       gpumf_user_vector(NULL, 5) IS NULL AS null_model,
       gpumf_user_vector('vec_imp', 5, NULL) IS NULL AS null_recompute,
       gpumf_user_vector('vec_imp', 5::bigint) = gpumf_user_vector('vec_imp', '5') AS int8_and_text,
       gpumf_user_vector('vec_imp', 4294967296) IS NULL AS out_of_range;
SELECT count(*) AS no_rows FROM gpumf_item_vectors(NULL);
SELECT gpumf_item_vector('vec_imp', 7, NULL) IS NULL AS null_l2,
       (SELECT count(*) FROM gpumf_item_vectors('vec_imp', l2 => NULL)) AS null_l2_rows;
-- a user the model lacks is folded in from the source, as gpumf_recommend does
INSERT INTO vec_clicks VALUES (100000, 1, 3), (100000, 2, 1), (100000, 3, 2);
SELECT array_length(gpumf_user_vector('vec_imp', 100000), 1) AS folded_len,
       bool_and(abs(r.score - d.s) <= 1e-5 * greatest(1, abs(r.score))) AS same_score
  FROM gpumf_recommend('vec_imp', 100000, 20) r,
       LATERAL (SELECT sum(a * b) AS s
                  FROM unnest(gpumf_user_vector('vec_imp', 100000), gpumf_item_vector('vec_imp', r.item)) t(a, b)) d;
-- recompute => true solves a stored user from the current rows
INSERT INTO vec_clicks VALUES (5, 299, 40);
SELECT gpumf_user_vector('vec_imp', 5, recompute => true) <> gpumf_user_vector('vec_imp', 5) AS recomputed,
       (SELECT item FROM gpumf_recommend('vec_imp', 5, 1, false, recompute => true)) =
       (SELECT v.item FROM gpumf_item_vectors('vec_imp') v,
               LATERAL (SELECT sum(a * b) AS s FROM unnest(gpumf_user_vector('vec_imp', 5, true), v.embedding) t(a, b)) d
         ORDER BY d.s DESC, v.item LIMIT 1) AS same_top1;

-- text keys: the text twin, and item keys through the type carrier
CREATE TABLE vec_shop AS SELECT 'u' || user_id AS customer, 'sku-' || item_id AS sku, value FROM vec_clicks;
SELECT user_type, item_type FROM gpumf_train('vec_shop', 'customer', 'sku', 'value', factors => 4, iterations => 3, model => 'vec_txt');
SELECT array_length(gpumf_user_vector('vec_txt', 'u5'), 1) AS text_user,
       array_length(gpumf_item_vector('vec_txt', 'sku-7'::varchar), 1) AS varchar_item;
SELECT count(*) AS items, pg_typeof(min(item)) AS key_type
  FROM gpumf_item_vectors('vec_txt', item_type => NULL::text);
SELECT count(*) FROM gpumf_item_vectors('vec_txt');
SELECT count(*) FROM gpumf_item_vectors('vec_imp', item_type => 1);
SELECT count(*) FROM gpumf_item_vectors('vec_imp', item_type => NULL::smallint);
SELECT count(*), min(array_length(embedding, 1)) AS len
  FROM gpumf_item_vectors('vec_txt', item_type => NULL::text, l2 => true);

-- explicit models with biases: [x_u, 1, mu + b_u] and [y_i, c_i, 1]
CREATE TABLE vec_stars AS
  SELECT user_id, item_id, rating FROM gpumf_synthetic_ratings(150, 120, 3000, rank => 4, seed => 3);
SELECT global_mean IS NOT NULL AS has_mean
  FROM gpumf_train('vec_stars', 'user_id', 'item_id', 'rating', factors => 6, iterations => 5,
                   algorithm => 'als_explicit', model => 'vec_exp');
SELECT user_table AS eut, item_table AS eit, global_mean AS mu FROM gpumf.models WHERE name = 'vec_exp' \gset
SELECT array_length(gpumf_user_vector('vec_exp', 3), 1) AS user_len,
       array_length(gpumf_item_vector('vec_exp', 3), 1) AS item_len;
SELECT bool_and(v[1:6] = u.factors AND v[7] = 1 AND v[8] = (:mu)::real + u.bias) AS user_layout
  FROM :eut u, LATERAL (SELECT gpumf_user_vector('vec_exp', u.key) AS v) g;
SELECT bool_and(v[1:6] = i.factors AND v[7] = i.bias AND v[8] = 1) AS item_layout
  FROM :eit i, LATERAL (SELECT gpumf_item_vector('vec_exp', i.key) AS v) g;
-- l2: [x_u, 1, mu + b_u, 0] and [y_i, c_i, 1, sqrt(R^2 - |v_i|^2)], one norm for every item
SELECT array_length(gpumf_user_vector('vec_exp', 3, l2 => true), 1) AS user_len,
       (gpumf_user_vector('vec_exp', 3, l2 => true))[1:8] = gpumf_user_vector('vec_exp', 3) AS user_prefix,
       (gpumf_user_vector('vec_exp', 3, l2 => true))[9] AS user_last;
SELECT max(r) - min(r) <= 1e-5 * max(r) AS one_norm,
       bool_and(embedding[1:8] = gpumf_item_vector('vec_exp', item)) AS item_prefix
  FROM gpumf_item_vectors('vec_exp', l2 => true),
       LATERAL (SELECT sqrt(sum(a::float8 * a)) AS r FROM unnest(embedding) a) n;
-- the inner product is the predicted rating: gpumf_recommend's score and gpumf_predict
SELECT count(*) AS items,
       bool_and(abs(r.score - d.s) <= 1e-5 * greatest(1, abs(r.score))) AS same_score,
       bool_and(abs(gpumf_predict('vec_exp', 3, r.item) - d.s) <= 1e-5 * greatest(1, abs(d.s))) AS same_prediction
  FROM gpumf_recommend('vec_exp', 3, 1000, false) r,
       LATERAL (SELECT sum(a * b) AS s
                  FROM unnest(gpumf_user_vector('vec_exp', 3), gpumf_item_vector('vec_exp', r.item)) t(a, b)) d;
SELECT (SELECT array_agg(item) FROM gpumf_recommend('vec_exp', 3, 10)) =
       (SELECT array_agg(item) FROM (
          SELECT v.item FROM gpumf_item_vectors('vec_exp') v,
                 LATERAL (SELECT sum(a * b) AS s FROM unnest(gpumf_user_vector('vec_exp', 3), v.embedding) t(a, b)) d
           WHERE v.item NOT IN (SELECT item_id FROM vec_stars WHERE user_id = 3)
           ORDER BY d.s DESC, v.item LIMIT 10) t) AS same_top10_unseen;
-- explicit models without biases: the plain factors
SELECT global_mean IS NULL AS no_mean
  FROM gpumf_train('vec_stars', 'user_id', 'item_id', 'rating', factors => 6, iterations => 3,
                   algorithm => 'ccd', biases => false, model => 'vec_nob');
SELECT array_length(gpumf_user_vector('vec_nob', 3), 1) AS user_len,
       array_length(gpumf_item_vector('vec_nob', 3), 1) AS item_len,
       (SELECT bool_and(abs(r.score - d.s) <= 1e-5 * greatest(1, abs(r.score)))
          FROM gpumf_recommend('vec_nob', 3, 1000, false) r,
               LATERAL (SELECT sum(a * b) AS s
                          FROM unnest(gpumf_user_vector('vec_nob', 3), gpumf_item_vector('vec_nob', r.item)) t(a, b)) d) AS same_score;

-- errors: an unknown model, a key that is no integer, a role that may not read the model
SELECT gpumf_user_vector('no such model', 1);
SELECT gpumf_user_vector('vec_imp', 'x');
SELECT count(*) FROM gpumf_item_vectors('no such model');
CREATE ROLE regress_vec_other;
SET ROLE regress_vec_other;
SELECT gpumf_item_vector('vec_imp', 7);
RESET ROLE;
DROP ROLE regress_vec_other;

SELECT gpumf_drop_model(name) FROM gpumf.models WHERE name LIKE 'vec\_%' ORDER BY name;
DROP TABLE vec_clicks, vec_shop, vec_stars;
