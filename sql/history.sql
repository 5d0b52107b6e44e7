-- model history: gpumf.keep_versions versions of each model are kept;
-- gpumf_model_versions lists them, gpumf_use_version makes one current again
SET gpumf.progress = off;
CREATE TABLE hist AS SELECT user_id AS u, item_id AS i, value AS v FROM gpumf_synthetic(100, 60, 2000, seed => 9);
CREATE FUNCTION recs(model text) RETURNS text LANGUAGE sql AS
  $$ SELECT string_agg(item || ':' || round(score::numeric, 4), ' ') FROM gpumf_recommend(model, 7, 5) $$;
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 2, model => 'h');
SHOW gpumf.keep_versions;
CREATE TEMP TABLE v1 AS SELECT recs('h') AS r;
SELECT version, "current", replaced_at IS NULL AS never_replaced, tables_exist,
       catalog->>'iterations_run' AS iterations FROM gpumf_model_versions('h');
-- a retraining keeps the version it replaces, with its tables
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 5, model => 'h');
CREATE TEMP TABLE v2 AS SELECT recs('h') AS r;
SELECT (SELECT r FROM v1) <> (SELECT r FROM v2) AS versions_differ;
SELECT version, "current", replaced_at IS NOT NULL AS replaced, tables_exist,
       catalog->>'iterations_run' AS iterations FROM gpumf_model_versions('h');
SELECT count(*) AS retired FROM gpumf.retired_tables;

-- roll back: version 1 is current again, with its catalog row and its lists
SELECT version, iterations_run, user_table = (SELECT catalog->>'user_table' FROM gpumf_model_versions('h') WHERE version = 1) AS its_tables
  FROM gpumf_use_version('h', 1);
SELECT recs('h') = (SELECT r FROM v1) AS serves_version_1;
SELECT version, "current" FROM gpumf_model_versions('h');
-- and forward again
SELECT version, iterations_run FROM gpumf_use_version('h', 2);
SELECT recs('h') = (SELECT r FROM v2) AS serves_version_2;
-- the current version: a NOTICE, nothing changes
SELECT version FROM gpumf_use_version('h', 2);
-- a rollback inside a transaction that aborts changes nothing
BEGIN;
SELECT version FROM gpumf_use_version('h', 1);
ROLLBACK;
SELECT version FROM gpumf.models WHERE name = 'h';

-- after a rollback a retraining numbers past every kept version, and keeps
-- the version it replaced plus the most recently replaced other ones
SELECT version FROM gpumf_use_version('h', 1);
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 3, model => 'h');
SELECT version, "current", tables_exist FROM gpumf_model_versions('h');
SELECT regexp_replace(name, '^gpumf\.m[0-9]+_', '') AS retired FROM gpumf.retired_tables ORDER BY 1;
-- metrics recorded for a version travel with it
SELECT users > 0 AS evaluated FROM gpumf_evaluate('h', 'hist', record => true);
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 2, model => 'h');
SELECT version, "current", jsonb_typeof(catalog->'metrics') AS metrics
  FROM gpumf_model_versions('h');
SELECT (metrics->>'k')::int AS k FROM gpumf_use_version('h', 3);

-- more versions with a larger gpumf.keep_versions, only the current one with 1
SET gpumf.keep_versions = 3;
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 2, model => 'h');
SELECT version, "current" FROM gpumf_model_versions('h');
SET gpumf.keep_versions = 1;
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 2, model => 'h');
SELECT version, "current" FROM gpumf_model_versions('h');
SELECT count(*) AS kept_rows FROM gpumf.model_versions;
RESET gpumf.keep_versions;

-- bad input: a clear error, and nothing changes
SELECT gpumf_model_versions('no such model');
SELECT gpumf_use_version('no such model', 1);
SELECT gpumf_use_version('h', 5);
SELECT gpumf_use_version('h', 99);
SELECT gpumf_use_version('h', 0);
SELECT gpumf_use_version('h', NULL) IS NULL AS strict;
SELECT gpumf_model_versions('');
SET gpumf.keep_versions = 0;
-- a kept version whose tables were dropped by hand cannot be used
SELECT version FROM gpumf_train('hist', 'u', 'i', 'v', factors => 4, iterations => 2, model => 'h');
SELECT user_table AS dropped, version AS dropped_version FROM gpumf_model_versions('h') WHERE NOT "current" \gset
DROP TABLE :dropped;
SELECT version, tables_exist FROM gpumf_model_versions('h') ORDER BY version;
\set VERBOSITY terse
SELECT gpumf_use_version('h', :dropped_version);
\set VERBOSITY default
SELECT version FROM gpumf.models WHERE name = 'h';

-- only the model's owner may switch versions; anyone may list them
CREATE ROLE regress_gpumf_hist;
SET ROLE regress_gpumf_hist;
SELECT count(*) AS listed FROM gpumf_model_versions('h');
\set VERBOSITY terse
SELECT gpumf_use_version('h', 6);
\set VERBOSITY default
RESET ROLE;
DROP ROLE regress_gpumf_hist;

-- dropping the model drops every kept version's tables
SELECT 'm' || id || '_v%' AS h_tables FROM gpumf.models WHERE name = 'h' \gset
SELECT count(*) AS tables_before FROM pg_tables WHERE schemaname = 'gpumf' AND tablename LIKE :'h_tables';
SELECT gpumf_drop_model('h');
SELECT count(*) AS kept_rows FROM gpumf.model_versions;
SELECT count(*) AS tables FROM pg_tables WHERE schemaname = 'gpumf' AND tablename LIKE :'h_tables';
