-- bad input: a clear error (or the documented behaviour), and nothing changes
SET gpumf.progress = off;
CREATE TABLE good (u int, i int, v real);
INSERT INTO good SELECT u, i, 1 FROM generate_series(1, 10) u, generate_series(1, 10) i WHERE (u + i) % 2 = 0;
SELECT name, version FROM gpumf_train('good', 'u', 'i', 'v', 4, 'm', iterations => 2);
CREATE FUNCTION model_state() RETURNS text LANGUAGE sql AS
  $$ SELECT string_agg(name || ':' || version || ':' || final_loss, ', ' ORDER BY name) FROM gpumf.models $$;
CREATE TEMP TABLE before AS SELECT model_state() AS s;

-- missing table and columns
SELECT gpumf_train('no_such_table', 'u', 'i');
SELECT gpumf_train('good', 'nope', 'i', model => 'm');
SELECT gpumf_train('good', 'u', 'nope', model => 'm');
SELECT gpumf_train('good', 'u', 'i', 'nope', model => 'm');
SELECT gpumf_train('good', 'ctid', 'i', model => 'm');
SELECT gpumf_train(NULL, 'u', 'i');
SELECT gpumf_train('good', NULL, 'i');
CREATE SEQUENCE seq;
SELECT gpumf_train('seq', 'last_value', 'log_cnt');

-- unsupported key and value types
CREATE TABLE typed (u int, i int, f float8, ts timestamptz, t text, b boolean);
INSERT INTO typed VALUES (1, 1, 1.0, now(), 'x', true);
SELECT gpumf_train('typed', 'f', 'i', model => 'm');
SELECT gpumf_train('typed', 'u', 'ts', model => 'm');
SELECT gpumf_train('typed', 'u', 'i', 't', model => 'm');
SELECT gpumf_train('typed', 'u', 'i', 'b', model => 'm');

-- hyper-parameters out of range
SELECT gpumf_train('good', 'u', 'i', 'v', 0, 'm');
SELECT gpumf_train('good', 'u', 'i', 'v', 1025, 'm');
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', iterations => 0);
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', regularization => -0.1);
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', regularization => 'NaN');
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', alpha => -1);
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', alpha => 'Infinity');
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', cg_steps => 0);
SELECT gpumf_train('good', 'u', 'i', 'v', 4, '');
SELECT gpumf_train('good', 'u', 'i', 'v', 4, 'm', seed => NULL);

-- NaN, infinite and negative values: ERROR naming the row's keys
CREATE TABLE vals (u text, i int, v float8);
INSERT INTO vals VALUES ('ann', 1, 1), ('bob', 2, 'NaN');
SELECT gpumf_train('vals', 'u', 'i', 'v', 4, 'm');
UPDATE vals SET v = '-Infinity' WHERE u = 'bob';
SELECT gpumf_train('vals', 'u', 'i', 'v', 4, 'm');
UPDATE vals SET v = -2 WHERE u = 'bob';
SELECT gpumf_train('vals', 'u', 'i', 'v', 4, 'm');
CREATE TABLE numvals (u int, i int, v numeric);
INSERT INTO numvals VALUES (1, 7, 'NaN');
SELECT gpumf_train('numvals', 'u', 'i', 'v', 4, 'm');

-- NULL keys are skipped and counted; NULL values are skipped and counted
CREATE TABLE nulls (u int, i int, v real);
INSERT INTO nulls VALUES (1, 1, 1), (NULL, 2, 1), (2, NULL, 1), (2, 2, NULL), (3, 3, 2);
SELECT name, n_rows, nnz, n_users FROM gpumf_train('nulls', 'u', 'i', 'v', 4, 'nulls_model', iterations => 2);
SELECT gpumf_drop_model('nulls_model');

-- empty input
CREATE TABLE empty (u int, i int, v real);
SELECT gpumf_train('empty', 'u', 'i', 'v', 4, 'm');
INSERT INTO empty VALUES (NULL, NULL, 1);
SELECT gpumf_train('empty', 'u', 'i', 'v', 4, 'm');

-- names with quotes, spaces, mixed case and SQL in them are used literally
CREATE TABLE "Odd ""Table""; DROP TABLE good; --" ("User Id" int, "it""em" int, "Val; SELECT 1" real);
INSERT INTO "Odd ""Table""; DROP TABLE good; --" VALUES (1, 1, 1), (1, 2, 1), (2, 2, 3);
SELECT name, source, user_col, item_col, value_col, nnz
  FROM gpumf_train('"Odd ""Table""; DROP TABLE good; --"', 'User Id', 'it"em', 'Val; SELECT 1', 2,
                   model => 'odd''; DROP TABLE good; --', iterations => 2);
SELECT count(*) FROM gpumf_recommend('odd''; DROP TABLE good; --', 1, 5);
SELECT count(*) AS good_still_there FROM good;
SELECT gpumf_drop_model('odd''; DROP TABLE good; --');

-- serving errors
SELECT * FROM gpumf_recommend('no such model', 1);
SELECT * FROM gpumf_recommend('m', 1, 0);
SELECT * FROM gpumf_recommend('m', 1, -5);
SELECT count(*) FROM gpumf_recommend('m', 12345, 5);   -- unknown user: empty
SELECT count(*) FROM gpumf_recommend('m', NULL::int, 5);
SELECT gpumf_drop_model('no such model');
SELECT gpumf_drop_model('no such model', if_exists => true);

-- gpumf_synthetic: each wrong size argument named, nothing allocated first
SELECT count(*) FROM gpumf_synthetic(3, 4, 10, seed => 1);
SELECT count(*) FROM gpumf_synthetic(1, 100000000, 20);
SELECT count(*) FROM gpumf_synthetic(1, 1500000000, 20);
SELECT count(*) FROM gpumf_synthetic(0, 10, 100);
SELECT count(*) FROM gpumf_synthetic(100000000, 10, 100);
SELECT count(*) FROM gpumf_synthetic(10, 50, 40);
SELECT count(*) FROM gpumf_synthetic(10, 50, 400, min_per_user => 60);
SELECT count(*) FROM gpumf_synthetic(10, 50, 3000);
SELECT count(*) FROM gpumf_synthetic(10, 50, 3000000000);
SELECT count(*) FROM gpumf_synthetic(10, 50, 300, clusters => 0);
SELECT count(*) FROM gpumf_synthetic(10, 50, 300, affinity => 1.5);
SELECT count(*) FROM gpumf_synthetic(10, 50, 300, affinity => 'NaN');
SELECT count(*) FROM gpumf_synthetic(10, 50, 200);

-- values that are each within real's range but whose duplicates (summed)
-- are not: an ERROR naming the user and item, and no model
CREATE TABLE dup_huge (u int, i int, v float8);
INSERT INTO dup_huge VALUES (1, 1, 3e38), (1, 1, 3e38), (2, 2, 1);
SELECT count(*) FROM gpumf_train('dup_huge', 'u', 'i', 'v', model => 'dup_huge');
SELECT count(*) FROM gpumf.models WHERE name = 'dup_huge';
DROP TABLE dup_huge;

-- nothing above changed the model
SELECT model_state() = (SELECT s FROM before) AS unchanged;
