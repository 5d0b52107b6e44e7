-- fold-in: factors for users the model lacks (or any user, recompute => true)
-- from their current rows in the model's source (the relation it was
-- trained on, by OID, read as its owner once the caller may read its
-- columns); the same solve for baskets
SET gpumf.progress = off;
-- the equalities below hold for the CPU trainer's arithmetic, run for run
-- (the GPU trainer is compared with the CPU one by test/bench/gpu)
SET gpumf.device = cpu;
CREATE TABLE fsrc (u int, i int, v real);
INSERT INTO fsrc SELECT u, i, (u * i) % 4 FROM generate_series(1, 60) u, generate_series(1, 25) i
 WHERE (u * 5 + i * 7) % 6 < 2;

-- the on-the-fly factors equal the trainer's: model fb is model fa plus one
-- iteration from the same seed, so fb's users were solved against fa's item
-- factors (cg_steps large enough for CG to converge on the exact solve);
-- fa's recomputed scores must equal fb's user factors times fa's items
SELECT n_users, n_items FROM gpumf_train('fsrc', 'u', 'i', 'v', factors => 4, iterations => 3, cg_steps => 40,
                                         regularization => 0.3, alpha => 3, seed => 7, model => 'fa');
SELECT n_users FROM gpumf_train('fsrc', 'u', 'i', 'v', factors => 4, iterations => 4, cg_steps => 40,
                                regularization => 0.3, alpha => 3, seed => 7, model => 'fb');
SELECT (SELECT item_table FROM gpumf.models WHERE name = 'fa') AS fa_items,
       (SELECT user_table FROM gpumf.models WHERE name = 'fb') AS fb_users \gset
WITH folded AS (
  SELECT u, r.item, r.score FROM generate_series(1, 60) u,
         LATERAL gpumf_recommend('fa', u, 25, false, recompute => true) r),
trainer AS (
  SELECT x.key AS u, y.key AS item,
         (SELECT sum(a::float8 * b) FROM unnest(x.factors, y.factors) AS t(a, b)) AS score
    FROM :fb_users x, :fa_items y)
SELECT count(*) AS pairs, max(abs(f.score - t.score)) < 1e-4 AS equal_within_1e4
  FROM folded f JOIN trainer t USING (u, item);
-- without recompute the stored factors serve (fa's cg_steps differ from a fresh solve only by rounding here)
SELECT count(*) FROM gpumf_recommend('fa', 1, 5);

-- a user who came after training: factors from the rows in the source
INSERT INTO fsrc VALUES (1000, 3, 2), (1000, 8, 1), (1000, 8, 1), (1000, 99, 5);  -- item 99 is not in the model
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('fa', 1000, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', ARRAY[3, 8], 5, ARRAY[2, 2])) s;
-- a user whose rows changed: recompute => true reads the current rows
SELECT count(*) AS same_before FROM (
  SELECT * FROM gpumf_recommend('fa', 2, 5, recompute => true)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', (SELECT array_agg(i) FROM fsrc WHERE u = 2), 5,
                                                (SELECT array_agg(v) FROM fsrc WHERE u = 2))) s;
INSERT INTO fsrc VALUES (2, 4, 3), (2, 17, 3);
SELECT count(*) AS same_after FROM (
  SELECT * FROM gpumf_recommend('fa', 2, 5, recompute => true)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', (SELECT array_agg(i) FROM fsrc WHERE u = 2), 5,
                                                (SELECT array_agg(v) FROM fsrc WHERE u = 2))) s;
SELECT count(*) AS newly_seen_left_out FROM gpumf_recommend('fa', 2, 25, recompute => true) WHERE item IN (4, 17);
-- rows with a NULL item or value are skipped, as training skips them
INSERT INTO fsrc VALUES (1001, NULL, 1), (1001, 5, NULL), (1001, 6, 1);
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('fa', 1001, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', ARRAY[6], 5)) s;
-- gpumf.fold_in = off: serving reads no source (stored users only)
SET gpumf.fold_in = off;
SELECT count(*) AS new_user FROM gpumf_recommend('fa', 1000, 5);
SELECT count(*) FROM gpumf_recommend('fa', 2, 5, recompute => true);
SELECT count(*) AS stored FROM gpumf_recommend('fa', 1, 5);
RESET gpumf.fold_in;
-- a user with no rows anywhere: no rows
SELECT count(*) FROM gpumf_recommend('fa', 5000, 5, recompute => true);
-- a value training would refuse is an ERROR naming the row
INSERT INTO fsrc VALUES (1002, 1, -1);
SELECT count(*) FROM gpumf_recommend('fa', 1002, 5);
DELETE FROM fsrc WHERE u = 1002;

-- the caller's privileges: who may read the model but not the source
CREATE ROLE regress_fold;
GRANT SELECT ON :fa_items, :fb_users TO regress_fold;
SELECT user_table AS fa_users FROM gpumf.models WHERE name = 'fa' \gset
GRANT SELECT ON :fa_users TO regress_fold;
SET ROLE regress_fold;
SELECT count(*) AS stored FROM gpumf_recommend('fa', 1, 5);
SELECT count(*) AS new_user FROM gpumf_recommend('fa', 1000, 5);   -- the source is out of reach: no rows
SELECT count(*) FROM gpumf_recommend('fa', 1, 5, recompute => true);
RESET ROLE;
-- column privileges on the three columns suffice
GRANT SELECT (u, i, v) ON fsrc TO regress_fold;
SET ROLE regress_fold;
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('fa', 1000, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', ARRAY[3, 8], 5, ARRAY[2, 2])) s;
RESET ROLE;
-- row-level security that applies to the caller: the source is read as its
-- owner, which would bypass the caller's policy, so no fold-in (a basket of
-- the rows the caller can read serves instead)
ALTER TABLE fsrc ENABLE ROW LEVEL SECURITY;
CREATE POLICY fold_some ON fsrc TO regress_fold USING (i <> 8);
SET ROLE regress_fold;
SELECT count(*) AS new_user FROM gpumf_recommend('fa', 1000, 5);
SELECT count(*) FROM gpumf_recommend('fa', 1, 5, recompute => true);
RESET ROLE;
-- ... not to the owner (nor a superuser)
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('fa', 1000, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', ARRAY[3, 8], 5, ARRAY[2, 2])) s;
DROP POLICY fold_some ON fsrc;
ALTER TABLE fsrc DISABLE ROW LEVEL SECURITY;

-- the caller's search_path cannot change the query that reads the source
CREATE SCHEMA fold_evil;
CREATE FUNCTION fold_evil.always(int, int) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR fold_evil.= (LEFTARG = int, RIGHTARG = int, FUNCTION = fold_evil.always);
CREATE TEMP TABLE before AS SELECT * FROM gpumf_recommend('fa', 1000, 5);
SET search_path = fold_evil, pg_catalog, public;
SELECT count(*) AS same FROM (SELECT * FROM gpumf_recommend('fa', 1000, 5) INTERSECT SELECT * FROM before) s;
RESET search_path;

-- a source that changed or went away
ALTER TABLE fsrc ALTER COLUMN i TYPE text;
SELECT count(*) FROM gpumf_recommend('fa', 1000, 5);
ALTER TABLE fsrc ALTER COLUMN i TYPE int USING i::int;
ALTER TABLE fsrc RENAME COLUMN v TO strength;
SELECT count(*) FROM gpumf_recommend('fa', 1000, 5);
ALTER TABLE fsrc RENAME COLUMN strength TO v;
-- the source is pinned by OID: a rename (of the table, of its schema) follows it
CREATE SCHEMA fold_moved;
ALTER TABLE fsrc RENAME TO fsrc_renamed;
ALTER TABLE fsrc_renamed SET SCHEMA fold_moved;
SELECT source, source_relid FROM gpumf.models WHERE name = 'fa';
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('fa', 1000, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('fa', ARRAY[3, 8], 5, ARRAY[2, 2])) s;
-- a dropped source folds nobody in, even when a new relation takes its name
DROP TABLE fold_moved.fsrc_renamed;
CREATE TABLE fsrc (u int, i int, v real);
INSERT INTO fsrc VALUES (1000, 1, 1), (1, 2, 1);
SELECT count(*) AS stored FROM gpumf_recommend('fa', 1, 5);
SELECT count(*) AS new_user FROM gpumf_recommend('fa', 1000, 5);
SELECT count(*) FROM gpumf_recommend('fa', 1, 5, recompute => true);
SELECT count(*) FROM gpumf_similar_users('fa', 1000, 5);
DROP TABLE fsrc;
DROP SCHEMA fold_moved;

-- names that need quoting: schema, table and columns
CREATE SCHEMA "Odd Schema";
CREATE TABLE "Odd Schema"."Ratings; Table" ("User Id" bigint, "it""em" varchar(10), "Value" numeric);
INSERT INTO "Odd Schema"."Ratings; Table"
  SELECT u, 'i' || i, 1 + (u + i) % 3 FROM generate_series(1, 30) u, generate_series(1, 12) i WHERE (u * i) % 4 < 2;
SELECT source, user_col, item_col, value_col
  FROM gpumf_train('"Odd Schema"."Ratings; Table"', 'User Id', 'it"em', 'Value', factors => 3, iterations => 2, model => 'odd');
INSERT INTO "Odd Schema"."Ratings; Table" VALUES (99, 'i1', 2), (99, 'i5', 1);
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('odd', 99, 4, true, item_type => NULL::text)
  INTERSECT SELECT * FROM gpumf_recommend_items('odd', ARRAY['i1', 'i5'], 4, ARRAY[2, 1], true, item_type => NULL::text)) s;
SELECT gpumf_drop_model('odd');
DROP SCHEMA "Odd Schema" CASCADE;

-- explicit models (ratings): the same equality against explicit ALS, whose
-- user half-step is an exact solve, biases included:
-- score = global mean + user bias + item bias + x . y
CREATE TABLE rsrc (u int, i int, r real);
INSERT INTO rsrc SELECT u, i, 1 + (u * 3 + i * 7) % 5 FROM generate_series(1, 50) u, generate_series(1, 20) i
 WHERE (u + i * 3) % 4 = 0;
SELECT n_users, n_items FROM gpumf_train('rsrc', 'u', 'i', 'r', factors => 3, iterations => 2, regularization => 0.1,
                                         algorithm => 'als_explicit', seed => 5, model => 'ea');
SELECT n_users FROM gpumf_train('rsrc', 'u', 'i', 'r', factors => 3, iterations => 3, regularization => 0.1,
                                algorithm => 'als_explicit', seed => 5, model => 'eb');
SELECT (SELECT item_table FROM gpumf.models WHERE name = 'ea') AS ea_items,
       (SELECT user_table FROM gpumf.models WHERE name = 'eb') AS eb_users,
       (SELECT global_mean FROM gpumf.models WHERE name = 'ea') AS mu \gset
WITH folded AS (
  SELECT u, r.item, r.score FROM generate_series(1, 50) u,
         LATERAL gpumf_recommend('ea', u, 20, false, recompute => true) r),
trainer AS (
  SELECT x.key AS u, y.key AS item,
         :mu + x.bias + y.bias + (SELECT sum(a::float8 * b) FROM unnest(x.factors, y.factors) AS t(a, b)) AS score
    FROM :eb_users x, :ea_items y)
SELECT count(*) AS pairs, max(abs(f.score - t.score)) < 1e-4 AS equal_within_1e4
  FROM folded f JOIN trainer t USING (u, item);
-- a new user's ratings, and the same as a basket (ratings are required there)
INSERT INTO rsrc VALUES (1000, 2, 5), (1000, 3, 1), (1000, 11, 4);
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('ea', 1000, 5)
  INTERSECT SELECT * FROM gpumf_recommend_items('ea', ARRAY[2, 3, 11], 5, ARRAY[5, 1, 4])) s;
SELECT count(*) FROM gpumf_recommend_items('ea', ARRAY[2, 3], 5);
-- CCD++ models fold in with the exact minimiser of their objective
SELECT n_users FROM gpumf_train('rsrc', 'u', 'i', 'r', factors => 3, iterations => 2, algorithm => 'ccd', model => 'ec');
SELECT count(*) AS same FROM (
  SELECT * FROM gpumf_recommend('ec', 1000, 5, recompute => true)
  INTERSECT SELECT * FROM gpumf_recommend_items('ec', ARRAY[2, 3, 11], 5, ARRAY[5, 1, 4])) s;
SELECT gpumf_drop_model('ea'), gpumf_drop_model('eb'), gpumf_drop_model('ec');
DROP TABLE rsrc;

SELECT gpumf_drop_model('fa'), gpumf_drop_model('fb');
DROP SCHEMA fold_evil CASCADE;
DROP ROLE regress_fold;
RESET gpumf.device;
