-- parallel serving: the serving functions are PARALLEL SAFE, so a LATERAL
-- over many users runs in parallel workers, which load the model
-- themselves and give the same rows
SET gpumf.progress = off;
CREATE TABLE psrc (u int, i int, v real);
INSERT INTO psrc SELECT u, i, 1 + (u + i) % 3 FROM generate_series(1, 300) u, generate_series(1, 30) i
 WHERE (u * 11 + i * 5) % 7 < 2;
SELECT n_users, n_items FROM gpumf_train('psrc', 'u', 'i', 'v', factors => 6, iterations => 3, model => 'par');
CREATE TABLE pusers (id int);
INSERT INTO pusers SELECT g FROM generate_series(1, 320) g;   -- 20 users the model lacks
INSERT INTO psrc SELECT u, i, 1 FROM generate_series(301, 310) u, generate_series(1, 4) i;  -- 10 of them in the source
ANALYZE pusers;

-- a function that runs a query and says how many parallel workers it launched
CREATE FUNCTION workers_launched(q text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE line text; n int := 0;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || q LOOP
    IF line ~ 'Workers Launched: ' THEN n := n + substring(line FROM 'Workers Launched: (\d+)')::int; END IF;
  END LOOP;
  RETURN n;
END $$;

CREATE TEMP TABLE serial AS
  SELECT p.id, r.item, r.score FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3) r;
CREATE TEMP TABLE serial_recompute AS
  SELECT p.id, r.item, r.score FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3, recompute => true) r;
CREATE TEMP TABLE serial_similar AS
  SELECT p.id, s.item, s.score FROM pusers p, LATERAL gpumf_similar_items('par', p.id % 30 + 1, 2) s;
SELECT (SELECT count(DISTINCT id) FROM serial) AS users_served,
       (SELECT count(*) FROM serial) AS rows, (SELECT count(*) FROM serial_recompute) AS recomputed_rows;

SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT p.id, r.item, r.score FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3) r;
SELECT workers_launched($$SELECT p.id, r.item, r.score FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3) r$$) > 0 AS workers_ran;
-- the same rows as the serial plan, for stored users, folded-in users and similar items
SELECT count(*) AS rows, (SELECT count(*) FROM serial) AS serial_rows FROM (
  SELECT p.id, r.item, r.score FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3) r
  INTERSECT SELECT * FROM serial) s;
SELECT count(*) AS rows, (SELECT count(*) FROM serial_recompute) AS serial_rows FROM (
  SELECT p.id, r.item, r.score FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3, recompute => true) r
  INTERSECT SELECT * FROM serial_recompute) s;
SELECT workers_launched($$SELECT p.id, r.item FROM pusers p, LATERAL gpumf_recommend('par', p.id, 3, recompute => true) r$$) > 0 AS workers_ran;
SELECT count(*) AS rows, (SELECT count(*) FROM serial_similar) AS serial_rows FROM (
  SELECT p.id, s.item, s.score FROM pusers p, LATERAL gpumf_similar_items('par', p.id % 30 + 1, 2) s
  INTERSECT SELECT * FROM serial_similar) s;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
SELECT gpumf_drop_model('par');
DROP TABLE psrc, pusers;
DROP FUNCTION workers_launched(text);
