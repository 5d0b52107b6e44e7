-- hardening: hostile temp objects and search paths, grants, ownership, limits
SET gpumf.progress = off;
-- only the current version of a model is kept here (history.sql tests more):
-- the serving cache's counts below assume that replaced tables go
SET gpumf.keep_versions = 1;
CREATE ROLE regress_gpumf_carol;
CREATE ROLE regress_gpumf_dave;
GRANT USAGE, CREATE ON SCHEMA public TO regress_gpumf_carol, regress_gpumf_dave;
CREATE TABLE hk (u text, i text, iu uuid, i8 bigint, v double precision);
INSERT INTO hk SELECT 'user ' || u, 'item ' || i, md5('i' || i)::uuid, 1000 + i, 1 + (u * i) % 3
  FROM generate_series(1, 30) u, generate_series(1, 12) i WHERE (u + 2 * i) % 3 = 0;
GRANT SELECT ON hk TO regress_gpumf_carol, regress_gpumf_dave;

-- a clean run to compare with
SET ROLE regress_gpumf_carol;
SELECT n_users, n_items, user_type, item_type FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'clean_text', iterations => 3);
SELECT n_users, n_items, user_type, item_type FROM gpumf_train('hk', 'u', 'iu', 'v', 4, 'clean_uuid', iterations => 3);
CREATE TABLE carol_expect AS
  SELECT 't' AS m, item::text AS item, score FROM gpumf_recommend_text('clean_text', 'user 3', 5)
  UNION ALL SELECT 'u', item::text, score FROM gpumf_recommend_uuid('clean_uuid', 'user 3', 5);

-- 1. temp types shadowing the key and value types: no crash, the same model
CREATE DOMAIN pg_temp.text AS int8;
CREATE DOMAIN pg_temp.int8 AS text;
CREATE DOMAIN pg_temp.uuid AS int8;
CREATE DOMAIN pg_temp.float8 AS int8;
CREATE DOMAIN pg_temp.int4 AS text;
CREATE DOMAIN pg_temp.float4 AS text;
SELECT n_users, n_items, user_type, item_type FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'shadow_text', iterations => 3);
SELECT n_users, n_items, user_type, item_type FROM gpumf_train('hk', 'u', 'iu', 'v', 4, 'shadow_uuid', iterations => 3);
SELECT n_users, n_items, user_type, item_type FROM gpumf_train('hk', 'i8', 'i', 'v', 4, 'shadow_int', iterations => 3);
SELECT count(*) AS same_recommendations FROM (
  SELECT 't'::pg_catalog.text AS m, item::pg_catalog.text AS item, score FROM gpumf_recommend_text('shadow_text', 'user 3', 5)
  UNION ALL SELECT 'u', item::pg_catalog.text, score FROM gpumf_recommend_uuid('shadow_uuid', 'user 3', 5)) r
  JOIN carol_expect e USING (m, item, score);
SELECT count(*) FROM gpumf_recommend_text('shadow_int', 1001, 3);
SELECT item_table AS shadow_text_items FROM gpumf.models WHERE name = 'shadow_text' \gset
SELECT count(*) AS text_keys_intact FROM :shadow_text_items WHERE key LIKE 'item %';
RESET ROLE;
DISCARD TEMP;

-- 4. operators and functions in a schema the caller can write, first on a
--    superuser's search_path, never run inside gpumf
CREATE TABLE trap_log (who text, what text);
GRANT INSERT ON trap_log TO PUBLIC;
SET ROLE regress_gpumf_dave;
CREATE FUNCTION public.trap_texteq(text, text) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO trap_log VALUES (current_user, 'texteq'); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.trap_texteq);
CREATE FUNCTION public.trap_int8eq(int8, int8) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO trap_log VALUES (current_user, 'int8eq'); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE OPERATOR public.= (LEFTARG = int8, RIGHTARG = int8, FUNCTION = public.trap_int8eq);
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql AS
  $$ INSERT INTO trap_log VALUES (current_user, 'now'); SELECT pg_catalog.now() $$;
CREATE FUNCTION public.nextval(regclass) RETURNS bigint LANGUAGE sql AS
  $$ INSERT INTO trap_log VALUES (current_user, 'nextval'); SELECT pg_catalog.nextval($1) $$;
CREATE FUNCTION public.pg_current_xact_id() RETURNS xid8 LANGUAGE sql AS
  $$ INSERT INTO trap_log VALUES (current_user, 'pg_current_xact_id'); SELECT pg_catalog.pg_current_xact_id() $$;
CREATE FUNCTION public.quote_ident(text) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO trap_log VALUES (current_user, 'quote_ident'); SELECT pg_catalog.quote_ident($1) $$;
RESET ROLE;
SET search_path = public, pg_catalog;
SELECT n_users FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'su_text', iterations => 2);
SELECT n_users FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'su_text', iterations => 2);
SELECT n_users FROM gpumf_train('hk', 'i8', 'i', 'v', 4, 'su_int', iterations => 2);
SELECT count(*) FROM gpumf_recommend_text('su_text', 'user 3', 5);
SELECT count(*) FROM gpumf_recommend_text('su_int', 1001, 5);
SELECT gpumf_drop_model('su_text');
SELECT gpumf_drop_model('su_int');
SELECT count(*) AS traps_sprung FROM trap_log;
RESET search_path;
DROP FUNCTION public.now(), public.nextval(regclass), public.pg_current_xact_id(), public.quote_ident(text);
DROP OPERATOR public.= (text, text);
DROP OPERATOR public.= (int8, int8);
DROP FUNCTION public.trap_texteq(text, text), public.trap_int8eq(int8, int8);

-- 3. after a retraining the trainer can still revoke what it granted
SET ROLE regress_gpumf_carol;
SELECT format('GRANT SELECT ON %s, %s TO regress_gpumf_dave', user_table, item_table) AS g
  FROM gpumf.models WHERE name = 'clean_text' \gset
:g;
SELECT version FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'clean_text', iterations => 2);
SELECT a.grantor::regrole AS grantor, a.grantee::regrole AS grantee, a.privilege_type
  FROM gpumf.models m, pg_class c, aclexplode(c.relacl) a
 WHERE m.name = 'clean_text' AND c.oid = m.user_table::regclass
   AND a.grantee = 'regress_gpumf_dave'::regrole;
SELECT format('REVOKE SELECT ON %s, %s FROM regress_gpumf_dave', user_table, item_table) AS r
  FROM gpumf.models WHERE name = 'clean_text' \gset
:r;
SET ROLE regress_gpumf_dave;
SELECT count(*) FROM gpumf_recommend_text('clean_text', 'user 3', 5);
RESET ROLE;

-- 5. the serving cache frees what was dropped or replaced
SELECT (gpumf_train('hk', 'u', 'i', 'v', 4, 'cache_' || g, iterations => 1)).version
  FROM generate_series(1, 3) g;
SELECT count(*) FROM generate_series(1, 3) g, gpumf_recommend_text('cache_' || g, 'user 3', 2);
SELECT count(*) AS cached FROM pg_backend_memory_contexts WHERE name = 'gpumf served model';
SELECT gpumf_drop_model('cache_' || g) FROM generate_series(1, 3) g;
SELECT count(*) FROM gpumf_recommend_text('clean_uuid', 'user 3', 1);   -- a call sweeps the cache
SELECT count(*) AS cached FROM pg_backend_memory_contexts WHERE name = 'gpumf served model';

-- 6. model names: at most 200 bytes, checked before anything is read
SELECT gpumf_train('hk', 'u', 'i', 'v', 4, repeat('n', 201));
SELECT gpumf_train('hk', 'u', 'i', 'v', 4, repeat('é', 101));
SELECT name = repeat('n', 200) AS long_name_ok FROM gpumf_train('hk', 'u', 'i', 'v', 4, repeat('n', 200), iterations => 1);
SELECT count(*) FROM gpumf_recommend_text(repeat('n', 200), 'user 3', 2);
SELECT count(*) FROM gpumf_recommend_text(repeat('n', 9600), 'user 3', 2);
SELECT gpumf_drop_model(repeat('n', 200));

-- 7. ownership follows the role, not its name
SET ROLE regress_gpumf_carol;
SELECT owner FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'carols', iterations => 1);
RESET ROLE;
ALTER ROLE regress_gpumf_carol RENAME TO regress_gpumf_carol2;
CREATE ROLE regress_gpumf_carol;
SET ROLE regress_gpumf_carol;
SELECT gpumf_drop_model('carols');
SET ROLE regress_gpumf_carol2;
SELECT owner FROM gpumf.models WHERE name = 'carols';
SELECT gpumf_drop_model('carols');
RESET ROLE;
DROP ROLE regress_gpumf_carol;
ALTER ROLE regress_gpumf_carol2 RENAME TO regress_gpumf_carol;

-- 10. no regularization: the per-row systems can be singular
SELECT gpumf_train('hk', 'u', 'i', 'v', 4, 'noreg', regularization => 0);

-- 11. error texts: a finite value beyond real's range; a user key out of range
CREATE TABLE huge (u int, i int, v float8);
INSERT INTO huge VALUES (1, 1, 1), (2, 2, 1e300);
SELECT gpumf_train('huge', 'u', 'i', 'v', 2, 'huge');
UPDATE huge SET v = 1 WHERE u = 2;
SELECT name FROM gpumf_train('huge', 'u', 'i', 'v', 2, 'huge', iterations => 1);
SELECT count(*) AS unknown_user FROM gpumf_recommend('huge', '99999999999999999999'::text, 3);
SELECT count(*) AS unknown_user FROM gpumf_recommend('huge', '-99999999999'::text, 3);
SELECT count(*) FROM gpumf_recommend('huge', 'one'::text, 3);
SELECT gpumf_drop_model('huge');

-- gpumf.gpu_memory_limit caps gpumf's GPU memory: none by default, set by superusers only
SHOW gpumf.gpu_memory_limit;
SET gpumf.gpu_memory_limit = '512MB';
SHOW gpumf.gpu_memory_limit;
RESET gpumf.gpu_memory_limit;
SET ROLE regress_gpumf_carol;
SET gpumf.gpu_memory_limit = '100GB';
RESET ROLE;

-- gpumf.gpus: GPUs an ALS or CCD++ training spreads over; one by default, 1 to 16;
-- a CPU training ignores it and its params say nothing of GPUs
SHOW gpumf.gpus;
SET gpumf.gpus = 0;
SET gpumf.gpus = 17;
SET gpumf.gpus = 2;
SHOW gpumf.gpus;
SET gpumf.device = 'cpu';
SELECT backend, params ? 'gpus' AS params_name_gpus
  FROM gpumf_train('hk', 'u', 'i', 'v', 4, 'gpus_cpu', iterations => 1);
SELECT gpumf_drop_model('gpus_cpu');
RESET gpumf.device;
RESET gpumf.gpus;

-- clean up
SET ROLE regress_gpumf_carol;
SELECT gpumf_drop_model(name) FROM gpumf.models WHERE owner = 'regress_gpumf_carol'::regrole ORDER BY name;
DROP TABLE carol_expect;
RESET ROLE;
DROP TABLE hk, huge, trap_log;
REVOKE ALL ON SCHEMA public FROM regress_gpumf_carol, regress_gpumf_dave;
DROP ROLE regress_gpumf_carol;
DROP ROLE regress_gpumf_dave;
