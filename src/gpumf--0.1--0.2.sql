-- gpumf 0.1 -> 0.2.  A new installation runs gpumf--0.1.sql and then this
-- script, so an updated 0.1 installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.2'" to load this file. \quit

-- gpumf_drop_model: if_exists => true returns false for a missing model
-- (with a NOTICE) instead of raising an ERROR, as DROP ... IF EXISTS does.
DROP FUNCTION gpumf_drop_model(text);
CREATE FUNCTION gpumf_drop_model(model text, if_exists boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gpumf_drop_model'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_drop_model(text, boolean) IS 'Drop a model: its catalog row and factor tables.  Returns true; for a missing model, an ERROR, or false with a NOTICE when if_exists is true.';

COMMENT ON FUNCTION gpumf_synthetic IS 'A seeded MovieLens-shaped implicit dataset with planted structure: lognormal user activity, power-law item popularity, items in clusters that users prefer with probability affinity.  holdout marks about 20% of the rows (independently per row, seeded) for held-out evaluation: train on the other rows, measure on these.';
