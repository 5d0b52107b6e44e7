-- gpumf installs cleanly and exposes its API
CREATE EXTENSION gpumf;
SELECT extname, extversion FROM pg_extension WHERE extname = 'gpumf';
SELECT count(*) AS models FROM gpumf.models;
-- functions are in the extension's schema, model tables in schema gpumf
SELECT p.proname FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gpumf') ORDER BY 1;
-- the GUCs
SELECT name, setting IN ('auto', 'cpu', 'gpu') AS ok FROM pg_settings WHERE name = 'gpumf.device';
SHOW gpumf.progress;
SET gpumf.device = 'tpu';
