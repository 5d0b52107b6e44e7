-- The factor tables written straight to their files (gpumf.store_writes =
-- direct, the default: src/pg/model/store_direct.c) hold what rows inserted
-- through the buffer pool (ring_ahead) hold: the same rows at the same
-- places in the same pages, for every key type, with and without biases, graph_filter's
-- rows, unlogged tables, and rows long enough for TOAST (left to the usual
-- insert, after the pages written directly).  Trained on the CPU, whose
-- trainings repeat bit for bit (a GPU's need not), so that both tables hold
-- the same factors
SET gpumf.progress = off;
SET gpumf.device = 'cpu';
CREATE FUNCTION store_same(a text, b text) RETURNS TABLE (tab text, n bigint, differ bigint, same_places boolean)
LANGUAGE plpgsql AS $$
DECLARE
  ta text; tb text;
BEGIN
  FOREACH tab IN ARRAY ARRAY['users', 'items'] LOOP
    SELECT CASE tab WHEN 'users' THEN user_table ELSE item_table END INTO ta FROM gpumf.models WHERE name = a;
    SELECT CASE tab WHEN 'users' THEN user_table ELSE item_table END INTO tb FROM gpumf.models WHERE name = b;
    EXECUTE format('SELECT count(*) FROM %s', ta) INTO n;
    EXECUTE format('SELECT count(*) FROM ((TABLE %s EXCEPT ALL TABLE %s) UNION ALL (TABLE %s EXCEPT ALL TABLE %s)) d',
                   ta, tb, tb, ta) INTO differ;
    -- each row at the same place (PostgreSQL 16 and later may extend a table
    -- by several pages ahead of an insert: the files' sizes may differ)
    EXECUTE format('SELECT NOT EXISTS ((SELECT ctid, key FROM %s EXCEPT SELECT ctid, key FROM %s) UNION ALL '
                   '(SELECT ctid, key FROM %s EXCEPT SELECT ctid, key FROM %s))', ta, tb, tb, ta) INTO same_places;
    RETURN NEXT;
  END LOOP;
END $$;
-- one training a way: ($1: the source, $2: the model's name, $3: the rest of the call)
CREATE FUNCTION store_both(src text, m text, args text) RETURNS TABLE (tab text, n bigint, differ bigint, same_places boolean)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('gpumf.store_writes', 'ring_ahead', true);
  EXECUTE format('SELECT 1 FROM gpumf_train(%L, ''u'', ''i'', %s, model => %L)', src, args, m || '_ring');
  PERFORM set_config('gpumf.store_writes', 'direct', true);
  EXECUTE format('SELECT 1 FROM gpumf_train(%L, ''u'', ''i'', %s, model => %L)', src, args, m || '_direct');
  RETURN QUERY SELECT * FROM store_same(m || '_ring', m || '_direct');
END $$;

CREATE TABLE st_int AS SELECT user_id AS u, item_id AS i, value FROM gpumf_synthetic(2000, 300, 40000, seed => 5);
-- text keys (longer than a short varlena holds, too), uuid, bigint, smallint
CREATE TABLE st_text AS SELECT 'user-' || u AS u, 'item ' || repeat('x', i % 200) || i AS i, value FROM st_int;
CREATE TABLE st_uuid AS SELECT md5(u::text)::uuid AS u, md5('i' || i)::uuid AS i, value FROM st_int;
CREATE TABLE st_big AS SELECT u::bigint * 10000000000 AS u, i::bigint - 5 AS i, value FROM st_int;
CREATE TABLE st_small AS SELECT u::smallint AS u, (i - 100)::smallint AS i, value FROM st_int;
CREATE TABLE st_rat AS SELECT user_id AS u, item_id AS i, rating AS value
  FROM gpumf_synthetic_ratings(2000, 300, 40000, rank => 5, noise => 0.3, seed => 3);
-- two users with 2,500 items each: their seen lists do not fit a page
CREATE TABLE st_long AS SELECT u, i, value FROM st_int
  UNION ALL SELECT 5000 + g % 2, g, 1 FROM generate_series(1, 4999) g;

SELECT 'int' AS source, * FROM store_both('st_int', 'st_int', '''value'', factors => 8, iterations => 2');
SELECT 'text' AS source, * FROM store_both('st_text', 'st_text', '''value'', factors => 8, iterations => 2');
SELECT 'uuid' AS source, * FROM store_both('st_uuid', 'st_uuid', '''value'', factors => 8, iterations => 2');
SELECT 'bigint' AS source, * FROM store_both('st_big', 'st_big', '''value'', factors => 8, iterations => 2');
SELECT 'smallint' AS source, * FROM store_both('st_small', 'st_small', '''value'', factors => 8, iterations => 2');
SELECT 'explicit, biases' AS source, * FROM store_both('st_rat', 'st_rat', '''value'', factors => 8, iterations => 2, algorithm => ''als_explicit'', biases => true');
SELECT 'graph_filter' AS source, * FROM store_both('st_int', 'st_gf', 'NULL, factors => 32, algorithm => ''graph_filter''');
SELECT 'graph_filter, iALS part' AS source, * FROM store_both('st_int', 'st_gfi', 'NULL, factors => 32, ials_factors => 8, algorithm => ''graph_filter''');
-- the long seen lists go to TOAST after the pages written directly: the same rows
SELECT 'long seen lists' AS source, tab, n, differ FROM store_both('st_long', 'st_long', '''value'', factors => 8, iterations => 2');
SET gpumf.unlogged_models = on;
SELECT 'unlogged' AS source, * FROM store_both('st_int', 'st_unl', '''value'', factors => 8, iterations => 2');
SELECT relpersistence FROM pg_class WHERE oid = (SELECT user_table::regclass FROM gpumf.models WHERE name = 'st_unl_direct');
RESET gpumf.unlogged_models;
-- served alike
SELECT (SELECT array_agg(item ORDER BY score DESC, item) FROM gpumf_recommend_text('st_text_ring', 'user-7', 5)) =
       (SELECT array_agg(item ORDER BY score DESC, item) FROM gpumf_recommend_text('st_text_direct', 'user-7', 5)) AS same_top5;
SELECT gpumf_drop_model(name) FROM gpumf.models WHERE name LIKE 'st\_%' ORDER BY name;
DROP FUNCTION store_both(text, text, text);
DROP FUNCTION store_same(text, text);
DROP TABLE st_int, st_text, st_uuid, st_big, st_small, st_rat, st_long;
