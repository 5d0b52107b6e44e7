-- gpumf_recommend_all: every user's top n into a new table (user, rank, item, score)
SET gpumf.progress = off;
CREATE TABLE ball AS SELECT user_id AS u, item_id AS i, value AS v
  FROM gpumf_synthetic(300, 150, 6000, seed => 11);
SELECT n_users, n_items FROM gpumf_train('ball', 'u', 'i', 'v', factors => 8, iterations => 4, model => 'ball');
SELECT scored_users, rows_written, unknown_users,
       backend = CASE current_setting('gpumf.device') WHEN 'gpu' THEN 'cuda' ELSE 'cpu' END AS device_as_set,
       compute_seconds >= 0 AND write_seconds >= 0 AS timed
  FROM gpumf_recommend_all('ball', 10, 'ball_recs');
\d ball_recs
-- the caller owns the new table
SELECT tableowner = current_user AS owned_by_caller FROM pg_tables WHERE tablename = 'ball_recs';

-- the same lists as gpumf_recommend, rank by rank: scores agree to float
-- rounding, items are the same except where two scores are that close
CREATE FUNCTION per_user(model text, n int, users regclass DEFAULT 'ball', excl boolean DEFAULT true)
RETURNS TABLE (u bigint, rank bigint, item bigint, score real) LANGUAGE sql AS $$
  SELECT s.u, r.rank, r.item, r.score
    FROM (SELECT DISTINCT u FROM ball) s,
         LATERAL (SELECT g.item, g.score, row_number() OVER () AS rank
                    FROM gpumf_recommend(model, s.u, n, excl) g) r $$;
CREATE FUNCTION differences(a regclass, model text, n int, excl boolean DEFAULT true) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE d bigint;
BEGIN
  EXECUTE format($q$
    SELECT count(*) FROM per_user(%L, %s, 'ball', %L) p
      FULL JOIN %s b ON b."user" = p.u AND b.rank = p.rank
     WHERE b.score IS NULL OR p.score IS NULL
        OR abs(b.score - p.score) > 1e-5 * (1 + abs(p.score))
        OR (b.item <> p.item AND abs(b.score - p.score) > 1e-6)$q$, model, n, excl, a) INTO d;
  RETURN d;
END $$;
SELECT differences('ball_recs', 'ball', 10) AS differences;
-- ranks 1 .. n for every user, no item the user had in training
SELECT count(DISTINCT "user") AS users, min(rank), max(rank), count(*) FILTER (WHERE rank > 10) AS beyond
  FROM ball_recs;
SELECT count(*) AS seen_recommended FROM ball_recs r JOIN ball b ON b.u = r."user" AND b.i = r.item;
-- exclude_seen => false ranks the seen items too
SELECT rows_written FROM gpumf_recommend_all('ball', 10, 'ball_all', exclude_seen => false);
SELECT differences('ball_all', 'ball', 10, false) AS differences;
SELECT count(*) > 0 AS seen_recommended FROM ball_all r JOIN ball b ON b.u = r."user" AND b.i = r.item;

-- n beyond the catalogue: every unseen item once per user
SELECT rows_written = (SELECT 300 * 150 - count(DISTINCT (u, i)) FROM ball) AS every_unseen_item
  FROM gpumf_recommend_all('ball', 1000, 'ball_every');
SELECT differences('ball_every', 'ball', 1000) AS differences;

-- only the users listed in a table (repeats once, NULLs and unknown users skipped and counted)
CREATE TABLE some_users (uid bigint, note text);
INSERT INTO some_users VALUES (3, 'a'), (1, 'b'), (3, 'again'), (NULL, 'none'), (100000, 'unknown'), (-5, 'unknown');
SELECT scored_users, rows_written, unknown_users
  FROM gpumf_recommend_all('ball', 3, 'some_recs', users => 'some_users', user_col => 'uid');
SELECT "user", rank FROM some_recs ORDER BY "user", rank;
-- user_col defaults to the model's user column
CREATE TABLE active AS SELECT DISTINCT u FROM ball WHERE u % 50 = 0;
SELECT scored_users, rows_written FROM gpumf_recommend_all('ball', 2, 'active_recs', users => 'active');
SELECT count(*) AS differences FROM active_recs a
  JOIN ball_recs b ON b."user" = a."user" AND b.rank = a.rank
 WHERE a.item <> b.item AND abs(a.score - b.score) > 1e-6;

-- target names: schema-qualified, quoted, temporary
CREATE SCHEMA recs;
SELECT rows_written FROM gpumf_recommend_all('ball', 1, 'recs."Top One"');
SELECT count(*) FROM recs."Top One";
SELECT rows_written FROM gpumf_recommend_all('ball', 1, 'pg_temp.tmp_recs');
SELECT relpersistence FROM pg_class WHERE relname = 'tmp_recs';

-- text and uuid keys keep their types
CREATE TABLE tball AS SELECT 'user ' || u AS uname, md5(i::text)::uuid AS iid FROM ball;
SELECT n_items FROM gpumf_train('tball', 'uname', 'iid', factors => 4, iterations => 2, model => 'tball');
SELECT rows_written FROM gpumf_recommend_all('tball', 4, 'tball_recs');
SELECT pg_typeof("user") AS user_type, pg_typeof(item) AS item_type FROM tball_recs LIMIT 1;
SELECT count(*) AS differences FROM tball_recs b
  JOIN LATERAL (SELECT g.item, g.score, row_number() OVER () AS rank
                  FROM gpumf_recommend_uuid('tball', b."user", 4) g) p ON p.rank = b.rank
 WHERE abs(b.score - p.score) > 1e-5 * (1 + abs(p.score)) OR (b.item <> p.item AND abs(b.score - p.score) > 1e-6);

-- bad input: a clear error, and no table is created
SELECT gpumf_recommend_all('no such model', 10, 'x1');
SELECT gpumf_recommend_all('ball', 0, 'x1');
SELECT gpumf_recommend_all('ball', -3, 'x1');
SELECT gpumf_recommend_all('ball', NULL, 'x1');
SELECT gpumf_recommend_all('ball', 10, NULL);
SELECT gpumf_recommend_all('ball', 10, '');
SELECT gpumf_recommend_all('ball', 10, 'a.b.c');
SELECT gpumf_recommend_all('ball', 10, '"unterminated');
SELECT gpumf_recommend_all('ball', 10, 'x1; DROP TABLE ball');
SELECT gpumf_recommend_all('ball', 10, repeat('x', 64));
SELECT gpumf_recommend_all('ball', 10, 'public."' || repeat('y', 64) || '"');
SELECT gpumf_recommend_all('ball', 10, 'no_such_schema.x1');
SELECT gpumf_recommend_all('ball', 10, 'ball_recs');
SELECT gpumf_recommend_all('ball', 10, 'x1', user_col => 'u');
SELECT gpumf_recommend_all('ball', 10, 'x1', users => 'some_users');
SELECT gpumf_recommend_all('ball', 10, 'x1', users => 'some_users', user_col => 'note');
SELECT gpumf_recommend_all('ball', 10, 'x1', users => 'some_users', user_col => 'nope');
SELECT count(*) AS created FROM pg_class WHERE relname = 'x1';
-- a role that may not create in the schema, or read the model, gets an error too
CREATE ROLE regress_gpumf_batch;
GRANT USAGE ON SCHEMA recs TO regress_gpumf_batch;
SET ROLE regress_gpumf_batch;
SELECT gpumf_recommend_all('ball', 10, 'recs.mine');
SELECT gpumf_recommend_all('ball', 10, 'pg_temp.mine');
RESET ROLE;
REVOKE USAGE ON SCHEMA recs FROM regress_gpumf_batch;
DROP ROLE regress_gpumf_batch;
