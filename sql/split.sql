-- gpumf_split: reproducible train/test splits into two new tables
CREATE TABLE inter AS
  SELECT user_id AS u, item_id AS i, value AS v, timestamp '2026-01-01' + (user_id * 7 + item_id) % 1000 * interval '1 hour' AS t
    FROM gpumf_synthetic(300, 200, 6000, seed => 3);
INSERT INTO inter VALUES (1000, 1, 1, now()), (NULL, 2, 1, now());  -- a user with one row, a NULL user

-- by row: each row on its own, by a seeded hash of its keys
SELECT train, test, train_rows, test_rows, train_rows + test_rows = (SELECT count(*) FROM inter) AS complete,
       test_rows BETWEEN 0.17 * 6002 AND 0.23 * 6002 AS about_a_fifth
  FROM gpumf_split('inter', 0.2, 42, user_col => 'u', item_col => 'i');
-- nothing lost, nothing twice: train and test together are the source
SELECT count(*) AS differences FROM (
  (SELECT * FROM inter EXCEPT ALL (SELECT * FROM inter_train UNION ALL SELECT * FROM inter_test))
  UNION ALL
  ((SELECT * FROM inter_train UNION ALL SELECT * FROM inter_test) EXCEPT ALL SELECT * FROM inter)) d;
-- the caller owns both
SELECT tablename, tableowner = current_user AS owned_by_caller FROM pg_tables
 WHERE tablename IN ('inter_train', 'inter_test') ORDER BY 1;
-- reproducible: the same seed on the same rows, in another order and with
-- bigint keys, gives the same split; another seed another one
CREATE TABLE inter2 AS SELECT u::bigint AS u, i::bigint AS i, v, t FROM inter ORDER BY random();
SELECT test_rows FROM gpumf_split('inter2', 0.2, 42, user_col => 'u', item_col => 'i', train_table => 'x_train', test_table => 'x_test');
SELECT count(*) AS differences FROM (
  (SELECT u, i FROM inter_test EXCEPT ALL SELECT u, i FROM x_test)
  UNION ALL (SELECT u, i FROM x_test EXCEPT ALL SELECT u, i FROM inter_test)) d;
SELECT test_rows FROM gpumf_split('inter', 0.2, 43, user_col => 'u', item_col => 'i', train_table => 'y_train', test_table => 'y_test');
SELECT count(*) < 700 AS mostly_different FROM (SELECT u, i FROM inter_test INTERSECT ALL SELECT u, i FROM y_test) d;
-- without key columns the whole row is hashed; a fraction near 1 works too
SELECT train_rows + test_rows AS rows, test_rows > 5800 AS almost_all
  FROM gpumf_split('inter', 0.99, 1, train_table => 'w_train', test_table => 'w_test');

-- by user: round(fraction * rows) of each user's rows, at least one, never
-- all; users with a single row and rows with a NULL user stay in train
SELECT train_rows, test_rows
  FROM gpumf_split('inter', 0.25, 7, by => 'user', user_col => 'u', train_table => 'u_train', test_table => 'u_test');
WITH n AS (SELECT u, count(*) AS n FROM inter GROUP BY u),
     t AS (SELECT u, count(*) AS k FROM u_test GROUP BY u)
SELECT count(*) FILTER (WHERE coalesce(t.k, 0) <> CASE WHEN n.n < 2 OR n.u IS NULL THEN 0
                          ELSE least(n.n - 1, greatest(1, round(0.25 * n.n))) END) AS wrong_counts,
       count(*) FILTER (WHERE n.n >= 2 AND n.u IS NOT NULL AND t.k IS NULL) AS users_without_test_rows
  FROM n LEFT JOIN t ON t.u = n.u;
SELECT count(*) AS single_or_null_in_test FROM u_test WHERE u = 1000 OR u IS NULL;
SELECT count(*) AS differences FROM (
  (SELECT * FROM inter EXCEPT ALL (SELECT * FROM u_train UNION ALL SELECT * FROM u_test))
  UNION ALL ((SELECT * FROM u_train UNION ALL SELECT * FROM u_test) EXCEPT ALL SELECT * FROM inter)) d;

-- by time: each user's latest rows go to test
SELECT train_rows, test_rows
  FROM gpumf_split('inter', 0.25, 7, by => 'time', user_col => 'u', time_col => 't',
                   train_table => 't_train', test_table => 't_test');
SELECT count(*) AS test_rows_older_than_train_rows
  FROM t_test a JOIN t_train b ON a.u = b.u AND a.t < b.t;
SELECT (SELECT count(*) FROM t_test) = (SELECT count(*) FROM u_test) AS same_counts_as_by_user;

-- names: schema-qualified and quoted; a view as the source
CREATE SCHEMA splits;
CREATE VIEW inter_view AS SELECT u, i FROM inter WHERE v > 1;
SELECT train, test FROM gpumf_split('inter_view', 0.1, 1, train_table => 'splits."Train"', test_table => 'splits.test');
SELECT count(*) > 0 AS filled FROM splits."Train";

-- bad input: a clear error, and no table is created
SELECT gpumf_split('inter', 0, 1);
SELECT gpumf_split('inter', 1, 1);
SELECT gpumf_split('inter', -0.5, 1);
SELECT gpumf_split('inter', 'NaN', 1);
SELECT gpumf_split('inter', NULL, 1);
SELECT gpumf_split('inter', 0.2, NULL);
SELECT gpumf_split('inter', 0.2, 1, by => 'item');
SELECT gpumf_split('inter', 0.2, 1, by => 'user');
SELECT gpumf_split('inter', 0.2, 1, by => 'time', user_col => 'u');
SELECT gpumf_split('inter', 0.2, 1, by => 'row', time_col => 't');
SELECT gpumf_split('inter', 0.2, 1, by => 'time', user_col => 'u', time_col => 'nope');
SELECT gpumf_split('inter', 0.2, 1, by => 'user', user_col => 'nope');
SELECT gpumf_split('inter', 0.2, 1, item_col => 'nope');
CREATE TABLE pts (u int, p point);
SELECT gpumf_split('pts', 0.2, 1, by => 'time', user_col => 'u', time_col => 'p');
-- columns without a hash function: named, with what to do (no internal statement)
CREATE TABLE docs (u int, i int, doc json);
INSERT INTO docs SELECT g, g % 7, json_build_object('g', g) FROM generate_series(1, 50) g;
SELECT gpumf_split('docs', 0.2, 1);
SELECT gpumf_split('docs', 0.2, 1, user_col => 'doc');
SELECT gpumf_split('docs', 0.2, 1, user_col => 'u', item_col => 'doc');
SELECT gpumf_split('docs', 0.2, 1, by => 'user', user_col => 'doc');
-- with hashable key columns named, a json column is only copied
SELECT train_rows + test_rows AS rows
  FROM gpumf_split('docs', 0.2, 1, user_col => 'u', item_col => 'i', train_table => 'docs_tr', test_table => 'docs_te');
SELECT count(*) AS json_kept FROM docs_tr t JOIN docs d ON d.u = t.u WHERE d.doc::text = t.doc::text;
DROP TABLE docs, docs_tr, docs_te;
-- by 'user' hashes each row's binary form: a type without one is named
CREATE TABLE acls (u int, a aclitem);
INSERT INTO acls SELECT g % 5, makeaclitem('pg_monitor'::regrole, 'pg_monitor'::regrole, 'SELECT', false) FROM generate_series(1, 20) g;
SELECT gpumf_split('acls', 0.2, 1, by => 'user', user_col => 'u');
DROP TABLE acls;
SELECT gpumf_split('no_such_table', 0.2, 1);
SELECT gpumf_split('inter', 0.2, 1);
SELECT gpumf_split('inter', 0.2, 1, train_table => 'same', test_table => 'same');
SELECT gpumf_split('inter', 0.2, 1, train_table => 'a.b.c', test_table => 'z_test');
SELECT gpumf_split('inter', 0.2, 1, train_table => 'z_train', test_table => 'nope.z_test');
CREATE TABLE clash (u int, gpumf_rn int);
SELECT gpumf_split('clash', 0.2, 1, by => 'user', user_col => 'u');
CREATE TABLE "a_very_long_table_name_that_leaves_no_room_for_a_suffix_at_all_x" (u int);
SELECT gpumf_split('"a_very_long_table_name_that_leaves_no_room_for_a_suffix_at_all_x"', 0.2, 1);
SELECT count(*) AS created FROM pg_class WHERE relname IN ('same', 'z_train', 'z_test', 'clash_train', 'pts_train');
-- the source is read with the caller's rights
CREATE ROLE regress_gpumf_split;
GRANT USAGE, CREATE ON SCHEMA splits TO regress_gpumf_split;
SET ROLE regress_gpumf_split;
SELECT gpumf_split('inter', 0.2, 1, train_table => 'splits.r_train', test_table => 'splits.r_test');
RESET ROLE;
SELECT count(*) AS created FROM pg_class WHERE relname = 'r_train';
GRANT SELECT ON inter TO regress_gpumf_split;
SET ROLE regress_gpumf_split;
SELECT train_rows + test_rows AS rows FROM gpumf_split('inter', 0.2, 1, train_table => 'splits.r_train', test_table => 'splits.r_test');
SELECT tableowner FROM pg_tables WHERE tablename = 'r_train';
RESET ROLE;
DROP TABLE splits.r_train, splits.r_test;
REVOKE ALL ON inter FROM regress_gpumf_split;
REVOKE ALL ON SCHEMA splits FROM regress_gpumf_split;
DROP ROLE regress_gpumf_split;
-- by user with only user_col: a user's test rows are chosen by a seeded hash
-- of the row's binary form, not by the order of its text (which put items
-- 1 and 10 first for every user), and no session setting changes them
CREATE TABLE tied AS SELECT u, i, '2024-01-01 12:00+00'::timestamptz + i * interval '1 day' AS t,
  u * 0.1 + i / 3.0::float8 AS f FROM generate_series(1, 100) u, generate_series(1, 10) i;
SELECT test_rows FROM gpumf_split('tied', 0.2, 7, by => 'user', user_col => 'u');
SELECT count(DISTINCT i) > 5 AS test_items_spread, bool_and(n = 2) AS two_per_user
  FROM tied_test, LATERAL (SELECT count(*) AS n FROM tied_test x WHERE x.u = tied_test.u) c;
SET DateStyle = 'SQL, DMY';
SET extra_float_digits = -15;
SET TimeZone = 'Asia/Kathmandu';
SELECT test_rows FROM gpumf_split('tied', 0.2, 7, by => 'user', user_col => 'u',
  train_table => 'tied_train2', test_table => 'tied_test2');
RESET DateStyle;
RESET extra_float_digits;
RESET TimeZone;
SELECT (SELECT count(*) FROM (SELECT * FROM tied_test EXCEPT SELECT * FROM tied_test2) d) AS differ_test,
  (SELECT count(*) FROM (SELECT * FROM tied_train EXCEPT SELECT * FROM tied_train2) d) AS differ_train;
SELECT test_rows FROM gpumf_split('tied', 0.2, 8, by => 'user', user_col => 'u',
  train_table => 'tied_train3', test_table => 'tied_test3');
SELECT count(*) < 100 AS another_seed_other_rows
  FROM (SELECT * FROM tied_test INTERSECT SELECT * FROM tied_test3) x;
DROP TABLE tied, tied_train, tied_test, tied_train2, tied_test2, tied_train3, tied_test3;
