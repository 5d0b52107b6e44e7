-- The SQL path around the kernels: reading the source (the executor, a scan of
-- gpumf's own, parallel workers), the factor tables' layout and contents,
-- unlogged models, and serving from shared memory.  On the CPU: the factors
-- of two trainings of the same data must be equal bit for bit.
SET gpumf.progress = off;
SET gpumf.device = cpu;
CREATE TABLE pr (u text, i int, v real);
INSERT INTO pr SELECT 'user ' || (n % 97), (n * 7919) % 61, 1 + n % 5
  FROM generate_series(1, 3000) n;
INSERT INTO pr VALUES (NULL, 1, 1), ('user 1', NULL, 1), ('user 2', 3, NULL);
CREATE VIEW pr_view AS SELECT * FROM pr;

-- 1. three ways to read give the same model: the executor (a view), a scan of
--    gpumf's own, and the same scan with two parallel workers
SELECT n_rows, nnz, n_users, n_items FROM gpumf_train('pr_view', 'u', 'i', 'v', 6, 'pr_exec', iterations => 3);
SET gpumf.read_workers = 0;
SELECT n_rows, nnz, n_users, n_items FROM gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_alone', iterations => 3);
SET gpumf.read_workers = 2;
SELECT n_rows, nnz, n_users, n_items FROM gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_par', iterations => 3);
RESET gpumf.read_workers;
CREATE FUNCTION tables_differ(a text, b text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint; m bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM ((SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) UNION ALL (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s)) d',
                 (SELECT user_table FROM gpumf.models WHERE name = a), (SELECT user_table FROM gpumf.models WHERE name = b),
                 (SELECT user_table FROM gpumf.models WHERE name = b), (SELECT user_table FROM gpumf.models WHERE name = a)) INTO n;
  EXECUTE format('SELECT count(*) FROM ((SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) UNION ALL (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s)) d',
                 (SELECT item_table FROM gpumf.models WHERE name = a), (SELECT item_table FROM gpumf.models WHERE name = b),
                 (SELECT item_table FROM gpumf.models WHERE name = b), (SELECT item_table FROM gpumf.models WHERE name = a)) INTO m;
  RETURN n + m;
END $$;
SELECT tables_differ('pr_exec', 'pr_alone') AS exec_vs_alone, tables_differ('pr_alone', 'pr_par') AS alone_vs_parallel;
-- uuid keys through the workers' byte-key messages, int keys through the dense cache
CREATE TABLE pu AS SELECT md5('u' || (n % 50))::uuid AS u, (n % 37) * 1000003::bigint AS i FROM generate_series(1, 2000) n;
SET gpumf.read_workers = 0;
SELECT nnz, n_users, n_items FROM gpumf_train('pu', 'u', 'i', factors => 4, model => 'pu_alone', iterations => 2);
SET gpumf.read_workers = 3;
SELECT nnz, n_users, n_items FROM gpumf_train('pu', 'u', 'i', factors => 4, model => 'pu_par', iterations => 2);
SELECT tables_differ('pu_alone', 'pu_par') AS uuid_alone_vs_parallel;
CREATE VIEW pu_view AS SELECT * FROM pu;
SELECT nnz, n_users, n_items FROM gpumf_train('pu_view', 'u', 'i', factors => 4, model => 'pu_exec', iterations => 2);
SELECT tables_differ('pu_exec', 'pu_alone') AS uuid_exec_vs_alone;
DROP VIEW pu_view;
-- a bad value found by a worker is the same ERROR (its context names the worker)
UPDATE pr SET v = 'NaN' WHERE u = 'user 40' AND i = (SELECT min(i) FROM pr WHERE u = 'user 40');
\set VERBOSITY terse
SELECT gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_par', iterations => 3);
\set VERBOSITY default
RESET gpumf.read_workers;
UPDATE pr SET v = 1 WHERE v = 'NaN';
-- a temporary table is read by the backend alone (workers cannot see its
-- buffers); a materialized view never refreshed is the executor's ERROR
SET gpumf.read_workers = 2;
CREATE TEMP TABLE pr_temp AS SELECT * FROM pr;
SELECT nnz FROM gpumf_train('pr_temp', 'u', 'i', factors => 4, model => 'pr_temp', iterations => 1);
CREATE MATERIALIZED VIEW pr_mv AS SELECT * FROM pr WITH NO DATA;
SELECT gpumf_train('pr_mv', 'u', 'i', factors => 4, model => 'pr_mv', iterations => 1);
REFRESH MATERIALIZED VIEW pr_mv;
SELECT nnz FROM gpumf_train('pr_mv', 'u', 'i', factors => 4, model => 'pr_mv', iterations => 1);
RESET gpumf.read_workers;
DROP MATERIALIZED VIEW pr_mv;
DROP TABLE pr_temp;
-- inheritance: a parent's children are read too (through the executor)
CREATE TABLE pr_child () INHERITS (pr);
INSERT INTO pr_child VALUES ('user 1000', 1, 1);
SELECT n_rows, n_users FROM gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_inh', iterations => 1);
DROP TABLE pr_child;
-- columns of a fixed length are read a page at a time, from each tuple at
-- their offsets (u, i, an unused int8 aligned to 8, then v), but for
-- tuples read by heap_getattr: those written before v was added (theirs is
-- its default) and those with NULL keys or values; a column dropped after
-- v is NULL in the rows written since, which does not move v.  The same
-- model as the executor's
CREATE TABLE pw (u smallint, i int, w bigint);
INSERT INTO pw SELECT n % 83, (n * 31) % 47, n FROM generate_series(1, 1500) n;
ALTER TABLE pw ADD COLUMN v real DEFAULT 2, ADD COLUMN gone bigint;
INSERT INTO pw SELECT n % 83, (n * 31) % 47, n, 1 + n % 4, n FROM generate_series(1501, 2500) n;
ALTER TABLE pw DROP COLUMN gone;
INSERT INTO pw SELECT n % 83, (n * 31) % 47 + 47, n, 1 + n % 5 FROM generate_series(2501, 4000) n;
INSERT INTO pw VALUES (NULL, 1, 1, 1), (5, NULL, 1, 1), (6, 7, 1, NULL);
CREATE VIEW pw_view AS SELECT * FROM pw;
SELECT n_rows, nnz, n_users, n_items FROM gpumf_train('pw_view', 'u', 'i', 'v', 6, 'pw_exec', iterations => 3);
SET gpumf.read_workers = 0;
SELECT n_rows, nnz, n_users, n_items FROM gpumf_train('pw', 'u', 'i', 'v', 6, 'pw_alone', iterations => 3);
SET gpumf.read_workers = 2;
SELECT n_rows, nnz, n_users, n_items FROM gpumf_train('pw', 'u', 'i', 'v', 6, 'pw_par', iterations => 3);
RESET gpumf.read_workers;
SELECT tables_differ('pw_exec', 'pw_alone') AS exec_vs_alone, tables_differ('pw_alone', 'pw_par') AS alone_vs_parallel,
       (SELECT count(*) FROM gpumf_recommend('pw_alone', 5::smallint, 5)) AS served;
SELECT gpumf_drop_model(m) FROM unnest(ARRAY['pw_exec', 'pw_alone', 'pw_par']) m;
DROP VIEW pw_view;
DROP TABLE pw;

-- 2. the factor tables: factors stored inline and never compressed (PLAIN,
--    rows up to a page), seen lists never compressed (EXTERNAL: out of line
--    when too long), one-dimensional arrays of k reals without NULLs, as
--    SQL builds them; keys in order at idx 0 .. n-1; seen = the user's items
SELECT c.relname ~ '_users$' AS users, a.attname, a.attstorage
  FROM gpumf.models m, pg_class c, pg_attribute a
 WHERE m.name = 'pr_par' AND c.oid IN (m.user_table::regclass, m.item_table::regclass)
   AND a.attrelid = c.oid AND a.attnum > 0 ORDER BY 1, a.attnum;
SELECT c.relname ~ '_users$' AS users, c.reloptions FROM gpumf.models m, pg_class c
 WHERE m.name = 'pr_par' AND c.oid IN (m.user_table::regclass, m.item_table::regclass) ORDER BY 1;
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'pr_par' \gset
SELECT count(*) AS users, bool_and(array_ndims(factors) = 1 AND array_lower(factors, 1) = 1
         AND array_length(factors, 1) = 6 AND array_position(factors, NULL) IS NULL
         AND factors = ARRAY(SELECT unnest(factors))) AS factors_as_sql_builds_them,
       bool_and(seen = ARRAY(SELECT unnest(seen) ORDER BY 1)) AS seen_sorted
  FROM :ut;
SELECT count(*) AS items, bool_and(idx = r - 1) AS idx_in_key_order
  FROM (SELECT idx, row_number() OVER (ORDER BY key) AS r FROM :it) s;
SELECT count(*) AS users_whose_seen_differs FROM :ut u
 WHERE u.seen <> ARRAY(SELECT DISTINCT it.idx FROM pr JOIN :it it ON it.key = pr.i
                        WHERE pr.u = u.key AND pr.v IS NOT NULL ORDER BY 1);

-- 3. unlogged models: no WAL; a crash (which empties unlogged tables, as this
--    TRUNCATE does) leaves a model that says to retrain it
SET gpumf.unlogged_models = on;
SELECT version FROM gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_unlogged', iterations => 1);
SELECT c.relkind, c.relpersistence, count(*) FROM gpumf.models m, pg_class c
 WHERE m.name = 'pr_unlogged' AND (c.oid IN (m.user_table::regclass, m.item_table::regclass)
       OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (m.user_table::regclass, m.item_table::regclass)))
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT count(*) FROM gpumf_recommend_text('pr_unlogged', 'user 5', 3);
SELECT format('TRUNCATE %s, %s', user_table, item_table) AS crash FROM gpumf.models WHERE name = 'pr_unlogged' \gset
:crash;
\c
SET gpumf.device = cpu;
SET gpumf.progress = off;
SELECT count(*) FROM gpumf_recommend_text('pr_unlogged', 'user 5', 3);
SELECT version FROM gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_unlogged', iterations => 1);
SELECT DISTINCT c.relpersistence FROM gpumf.models m, pg_class c
 WHERE m.name = 'pr_unlogged' AND c.oid IN (m.user_table::regclass, m.item_table::regclass);
SELECT count(*) FROM gpumf_recommend_text('pr_unlogged', 'user 5', 3);

-- 4. serving from shared memory: the first session reads a version into a
--    shared segment, the next attaches to it, one with sharing off reads its
--    own copy; all three serve the same items and scores
CREATE TABLE recs (session text, item text, score real);
\c
SET gpumf.device = cpu;
SET gpumf.progress = off;
INSERT INTO recs SELECT 'first', item, score FROM gpumf_recommend_text('pr_par', 'user 7', 8);
SELECT s.version, s.item_table = m.item_table::regclass AS current_tables, s.bytes > 0 AS bytes
  FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'pr_par';
\c
SET gpumf.device = cpu;
SET gpumf.progress = off;
INSERT INTO recs SELECT 'attached', item, score FROM gpumf_recommend_text('pr_par', 'user 7', 8);
\c
SET gpumf.device = cpu;
SET gpumf.progress = off;
SET gpumf.shared_models = off;
INSERT INTO recs SELECT 'own copy', item, score FROM gpumf_recommend_text('pr_par', 'user 7', 8);
SELECT count(*) AS rows, count(DISTINCT (item, score)) AS distinct_recs FROM recs;
SELECT count(*) AS differ FROM recs r JOIN gpumf.models m ON m.name = 'pr_par', :ut u, :it i,
       LATERAL (SELECT sum(a * b) AS s FROM unnest(u.factors, i.factors) t(a, b)) d
 WHERE u.key = 'user 7' AND i.key::text = r.item AND abs(d.s - r.score) > 1e-5 * (1 + abs(d.s));
RESET gpumf.shared_models;
-- a retraining replaces the shared version; a drop lets it go
SELECT version FROM gpumf_train('pr', 'u', 'i', 'v', 6, 'pr_par', iterations => 3);
SELECT count(*) FROM gpumf_recommend_text('pr_par', 'user 7', 8);
SELECT s.version FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'pr_par';
SELECT id AS pr_par_id FROM gpumf.models WHERE name = 'pr_par' \gset
SELECT gpumf_drop_model('pr_par');
SELECT count(*) AS shared_after_drop FROM gpumf_shared_models() WHERE model_id = :pr_par_id;

SELECT gpumf_drop_model(name) FROM gpumf.models WHERE name IN ('pr_exec', 'pr_alone', 'pu_alone', 'pu_par', 'pu_exec', 'pr_inh', 'pr_unlogged', 'pr_temp', 'pr_mv') ORDER BY name;
DROP FUNCTION tables_differ(text, text);
DROP TABLE recs, pu;
DROP VIEW pr_view;
DROP TABLE pr;
