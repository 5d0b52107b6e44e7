-- serving: one name per capability for every key type, filters, baskets,
-- similar items and users, and the bad inputs of each
SET gpumf.progress = off;
CREATE TABLE sv (u int, i int, v real);
INSERT INTO sv SELECT u, i, 1 + (u * i) % 4 FROM generate_series(1, 40) u, generate_series(1, 15) i
 WHERE (u * 7 + i * 3) % 5 < 2;
SELECT n_users, n_items FROM gpumf_train('sv', 'u', 'i', 'v', factors => 5, iterations => 4, model => 'sv');
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'sv' \gset

-- labels: serving reads tables (STABLE) and runs in parallel workers (PARALLEL SAFE)
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args, p.provolatile, p.proparallel
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gpumf')
   AND (p.proname LIKE 'gpumf_recommend%' OR p.proname LIKE 'gpumf_similar%')
   AND p.proname <> 'gpumf_recommend_all'  -- a batch writer, not a serving function
 ORDER BY 1, 2;

-- one name: plain integer keys need no cast; the result type follows item_type
SELECT pg_typeof(item)::text, count(*) FROM gpumf_recommend('sv', 3, 4) GROUP BY 1;
SELECT pg_typeof(item)::text, count(*) FROM gpumf_recommend('sv', 3, 4, true, item_type => NULL::integer) GROUP BY 1;
SELECT pg_typeof(item)::text, count(*) FROM gpumf_recommend('sv', 3, 4, true, item_type => NULL::text) GROUP BY 1;
-- the user as any integer type, as text, as a literal: the same rows
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('sv', 3, 4)
  INTERSECT SELECT * FROM gpumf_recommend('sv', 3::smallint, 4)
  INTERSECT SELECT * FROM gpumf_recommend('sv', 3::bigint, 4)
  INTERSECT SELECT * FROM gpumf_recommend('sv', '3', 4)
  INTERSECT SELECT * FROM gpumf_recommend('sv', '3'::text, 4)
  INTERSECT SELECT item::bigint, score FROM gpumf_recommend_text('sv', 3, 4)) s;
-- positional 0.1 calls keep working
SELECT count(*) FROM gpumf_recommend('sv', 3, 4, false);
-- untyped parameters (drivers that send text) reach the text declarations
PREPARE rec_untyped AS SELECT count(*) FROM gpumf_recommend('sv', $1, $2);
PREPARE rec_typed(int) AS SELECT count(*) FROM gpumf_recommend('sv', $1, 4);
PREPARE sim_untyped AS SELECT count(*) FROM gpumf_similar_items('sv', $1, 3);
PREPARE simu_untyped AS SELECT count(*) FROM gpumf_similar_users('sv', $1, 3, user_type => NULL::text);
PREPARE rec_candidates AS SELECT count(*) FROM gpumf_recommend('sv', $1, 100, candidates => $2::int[]);
EXECUTE rec_untyped('3', 4);
EXECUTE rec_typed(3);
EXECUTE sim_untyped('4');
EXECUTE simu_untyped('7');
EXECUTE rec_candidates('3', '{2,5,7}');
DEALLOCATE ALL;

-- candidates: only those are ranked, in the same order as among all items
SELECT (SELECT array_agg(item ORDER BY score DESC, item)
          FROM gpumf_recommend('sv', 3, 100) WHERE item IN (2, 5, 7, 11, 13)) =
       (SELECT array_agg(item ORDER BY score DESC, item)
          FROM gpumf_recommend('sv', 3, 100, candidates => ARRAY[13, 11, 7, 5, 2, 2, NULL, 999])) AS same_order,
       (SELECT count(*) FROM gpumf_recommend('sv', 3, 100, candidates => ARRAY[13, 11, 7, 5, 2, 2, NULL, 999])) AS unseen_candidates;
SELECT count(*) FROM gpumf_recommend('sv', 3, 100, candidates => '{2,5,7}');
SELECT count(*) FROM gpumf_recommend('sv', 3, 100, candidates => ARRAY[]::int[]);
SELECT count(*) FROM gpumf_recommend('sv', 3, 100, candidates => ARRAY[998, 999]);
-- candidates the user has seen stay out unless exclude_seen is false
SELECT (SELECT count(*) FROM gpumf_recommend('sv', 3, 100, candidates => (SELECT array_agg(i) FROM sv WHERE u = 3))) AS seen_excluded,
       (SELECT count(*) FROM gpumf_recommend('sv', 3, 100, false, candidates => (SELECT array_agg(i) FROM sv WHERE u = 3))) AS seen_kept;
-- exclude: more items left out
SELECT count(*) AS all_unseen, count(*) FILTER (WHERE item IN (1, 2, 3)) AS of_1_2_3 FROM gpumf_recommend('sv', 3, 100);
SELECT count(*) AS left, count(*) FILTER (WHERE item IN (1, 2, 3)) AS of_1_2_3
  FROM gpumf_recommend('sv', 3, 100, exclude => ARRAY[1, 2, 3]::bigint[]);
-- scores are the dot products of the stored factors, with and without filters
SELECT bool_and(abs(r.score - (SELECT sum(a * b) FROM unnest(u.factors, i.factors) AS t(a, b))) < 1e-5) AS dot_ok, count(*)
  FROM gpumf_recommend('sv', 3, 6, false, candidates => ARRAY[1, 4, 6, 8, 9, 10, 12]) r
  JOIN LATERAL (SELECT factors FROM :ut WHERE key = 3) u ON true
  JOIN LATERAL (SELECT factors FROM :it WHERE key = r.item) i ON true;

-- baskets: someone who interacted with these items
SELECT pg_typeof(item)::text, count(*) FROM gpumf_recommend_items('sv', ARRAY[1, 2, 3], 5) GROUP BY 1;
SELECT count(*) FILTER (WHERE item IN (1, 2, 3)) AS basket_items FROM gpumf_recommend_items('sv', ARRAY[1, 2, 3], 15);
SELECT count(*) FILTER (WHERE item IN (1, 2, 3)) AS basket_items FROM gpumf_recommend_items('sv', ARRAY[1, 2, 3], 15, exclude_seen => false);
-- a basket equals the same rows in the source for a new user
INSERT INTO sv VALUES (500, 1, 2), (500, 4, 1), (500, 4, 1), (500, 9, 3);
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('sv', 500, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 4, 9], 5, ARRAY[2, 2, 3])
  INTERSECT SELECT * FROM gpumf_recommend_items('sv', ARRAY[9, 4, 1, 4], 5, ARRAY[3, 1, 2, 1])) s;
-- items the model lacks are left out of the basket
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 4, 777], 5, ARRAY[1, 1, 5])
  INTERSECT SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 4], 5)) s;
SELECT count(*) FROM gpumf_recommend_items('sv', ARRAY[777, 778], 5);
SELECT count(*) FROM gpumf_recommend_items('sv', ARRAY[1, 2], 5, candidates => ARRAY[3, 4, 5], exclude => ARRAY[4]);

-- similar items: cosine of the item factors, the item itself left out
SELECT count(*), bool_and(item <> 4) AS self_left_out, bool_and(score BETWEEN -1 AND 1) AS cosines
  FROM gpumf_similar_items('sv', 4, 100);
WITH ref AS (
  SELECT b.key AS item, (SELECT sum(x * y) / sqrt(sum(x * x) * sum(y * y)) FROM unnest(a.factors, b.factors) AS t(x, y)) AS cos
    FROM :it a, :it b WHERE a.key = 4 AND b.key <> 4)
SELECT bool_and(abs(s.score - ref.cos) < 1e-5) AS cosine_ok,
       (SELECT array_agg(item ORDER BY score DESC, item) FROM gpumf_similar_items('sv', 4, 3)) =
       (SELECT array_agg(item::bigint ORDER BY cos DESC, item) FROM (SELECT * FROM ref ORDER BY cos DESC, item LIMIT 3) t) AS top3_ok
  FROM gpumf_similar_items('sv', 4, 100) s JOIN ref USING (item);
SELECT pg_typeof(item)::text, count(*) FROM gpumf_similar_items('sv', 4, 3, item_type => NULL::smallint) GROUP BY 1;
SELECT count(*) FROM gpumf_similar_items('sv', 999, 3);   -- not in the model

-- similar users: the same over the users' factors
SELECT count(*), bool_and("user" <> 7) AS self_left_out FROM gpumf_similar_users('sv', 7, 5);
WITH ref AS (
  SELECT b.key AS "user", (SELECT sum(x * y) / sqrt(sum(x * x) * sum(y * y)) FROM unnest(a.factors, b.factors) AS t(x, y)) AS cos
    FROM :ut a, :ut b WHERE a.key = 7 AND b.key <> 7)
SELECT bool_and(abs(s.score - ref.cos) < 1e-5) AS cosine_ok, count(*)
  FROM gpumf_similar_users('sv', 7, 50) s JOIN ref USING ("user");
SELECT count(*) AS new_user_folded_in FROM gpumf_similar_users('sv', 500, 5);
SELECT count(*) FROM gpumf_similar_users('sv', 999, 5);   -- in neither model nor source

-- text and uuid keys: the carrier gives their type, literals and arrays of their type work
CREATE TABLE svk (uu uuid, it text, v real);
INSERT INTO svk SELECT md5('u' || u)::uuid, 'item ' || i, 1 FROM generate_series(1, 20) u, generate_series(1, 9) i
 WHERE (u + i) % 3 = 0;
SELECT user_type, item_type FROM gpumf_train('svk', 'uu', 'it', 'v', 4, 'svk', iterations => 2);
SELECT pg_typeof(item)::text, count(*) FROM gpumf_recommend('svk', md5('u3')::uuid, 2, true, item_type => NULL::text) GROUP BY 1;
SELECT count(*) FROM gpumf_recommend('svk', md5('u3'), n => 2, exclude_seen => true, item_type => NULL::text);
SELECT count(*) FROM gpumf_recommend('svk', md5('u3')::uuid, 9, true, item_type => NULL::text,
                                     candidates => ARRAY['item 1', 'item 2', 'item 4']::varchar[]);
SELECT count(*) FROM gpumf_recommend_items('svk', ARRAY['item 1', 'item 2'], 3, NULL, true, item_type => NULL::text);
SELECT count(*) FROM gpumf_similar_items('svk', 'item 3', 3, NULL::text);
SELECT pg_typeof("user")::text, count(*) FROM gpumf_similar_users('svk', md5('u3')::uuid, 3, user_type => NULL::uuid) GROUP BY 1;

-- bad input: an ERROR naming the problem
SELECT * FROM gpumf_recommend('no_such_model', 3, 4);
SELECT * FROM gpumf_recommend_items('no_such_model', ARRAY[1], 4);
SELECT * FROM gpumf_similar_items('no_such_model', 1, 4);
SELECT * FROM gpumf_similar_users('no_such_model', 1, 4);
SELECT * FROM gpumf_recommend('sv', 3, 0);
SELECT * FROM gpumf_recommend('sv', 3, -1);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1], 0);
SELECT * FROM gpumf_similar_items('sv', 1, 0);
SELECT * FROM gpumf_similar_users('sv', 1, -5);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[]::int[], 4);
SELECT * FROM gpumf_recommend_items('sv', '{}', 4);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, ARRAY[1]);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, ARRAY[1, 2, 3]);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, ARRAY[1, NULL]);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, ARRAY[1, -2]);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, ARRAY[1, 'NaN']::float8[]);
-- values beyond real's range, values whose sum for one item is, and
-- confidences no double-precision solve can resolve: each named as such
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, "values" => ARRAY[1e308, 1e308]);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 1], 4, "values" => ARRAY[3e38, 3e38]);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, "values" => ARRAY[1e20, 1e20]);
SELECT count(*) FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, "values" => ARRAY[1e6, 1e6]);
-- arrays of more than one dimension are refused, never flattened
SELECT * FROM gpumf_recommend('sv', 3, 4, candidates => ARRAY[[1, 2], [3, 4]]);
SELECT * FROM gpumf_recommend('sv', 3, 4, exclude => '{{1,2},{3,4}}');
SELECT * FROM gpumf_recommend_items('sv', ARRAY[[1, 2], [3, 4]], 4);
SELECT * FROM gpumf_recommend_items('sv', ARRAY[1, 2], 4, "values" => ARRAY[[1], [2]]);
SELECT * FROM gpumf_recommend_items('sv', 1, 4);
SELECT * FROM gpumf_recommend_items('sv', ARRAY['a', 'b'], 4);
SELECT * FROM gpumf_recommend('sv', 3, 4, candidates => ARRAY['a', 'b']);
SELECT * FROM gpumf_recommend('sv', 3, 4, candidates => ARRAY[md5('x')::uuid]);
SELECT * FROM gpumf_recommend('sv', 3, 4, exclude => ARRAY[1.5]);
SELECT * FROM gpumf_recommend('sv', 3, 4, candidates => 7);
SELECT * FROM gpumf_recommend('sv', 3, 4, candidates => '{a,b}');
SELECT * FROM gpumf_recommend('svk', md5('u3')::uuid, 4);
SELECT * FROM gpumf_recommend('svk', md5('u3')::uuid, 10, true, item_type => NULL::uuid);
SELECT * FROM gpumf_recommend('svk', md5('u3')::uuid, 10, true, item_type => NULL::text, candidates => ARRAY[1, 2]);
SELECT * FROM gpumf_recommend('svk', 'not a uuid', 10, true, item_type => NULL::text);
SELECT * FROM gpumf_recommend('sv', 3, 4, true, item_type => 4::bigint);
-- filters and the carrier are passed by name: a fifth positional argument could be either
SELECT * FROM gpumf_recommend('sv', 3, 4, true, ARRAY[1, 2]);
SELECT * FROM gpumf_similar_users('svk', md5('u3')::uuid, 3);
CREATE TABLE bigkeys (u int, i bigint);
INSERT INTO bigkeys SELECT u, 10000000001 FROM generate_series(1, 5) u;
SELECT count(*) FROM gpumf_train('bigkeys', 'u', 'i', factors => 2, iterations => 1, model => 'bigkeys');
SELECT * FROM gpumf_recommend('bigkeys', 1, 1, false, item_type => NULL::integer);
-- NULL arguments: no rows (as for a STRICT function); NULL filters are no filters
SELECT count(*) FROM gpumf_recommend(NULL, 3, 4);
SELECT count(*) FROM gpumf_recommend('sv', NULL::int, 4);
SELECT count(*) FROM gpumf_recommend('sv', 3, NULL);
SELECT count(*) FROM gpumf_recommend('sv', 3, 4, candidates => NULL, exclude => NULL, recompute => NULL);
SELECT count(*) FROM gpumf_recommend_items('sv', NULL::int[], 4);
SELECT count(*) FROM gpumf_similar_items('sv', NULL::int, 4);
-- unknown users and items: no rows
SELECT count(*) FROM gpumf_recommend('sv', 12345, 4);
SELECT count(*) FROM gpumf_recommend('sv', 99999999999, 4);
SELECT gpumf_drop_model('sv'), gpumf_drop_model('svk'), gpumf_drop_model('bigkeys');
DROP TABLE sv, svk, bigkeys;
