#!/bin/bash
# The bare explicit call (algorithm => 'als_explicit' or 'ccd', nothing else:
# the regularization and the factors chosen on a validation split of the
# source) against a grid over factors {8, 16, 32, 64, 128} and regularization
# {0.005 .. 0.3} (the best of 40 trainings, measured on the test split itself,
# so an upper bound on what tuning can find), on MovieLens 100K (ratings,
# gpumf_split 20% of rows, seed 7) and on planted ratings (rank 5, noise 0.3,
# the generator's holdout rows).  Held-out RMSE by gpumf_evaluate.
#
#   bash test/bench/quality/sql_explicit_bare.sh [path/to/u.data]
set -eo pipefail
udata=${1:-.data/ml-100k/u.data}
tmp=$(mktemp -d)
chmod 755 "$tmp"
cut -f1-3 "$udata" >"$tmp/u.tsv"
chmod 644 "$tmp/u.tsv"
psql -X -q -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
SET gpumf.progress = off;
DROP TABLE IF EXISTS ex_ml, ex_ml_train, ex_ml_test, ex_pl, ex_pl_train, ex_pl_test, ex_grid;
CREATE TABLE ex_ml (u int, i int, r real);
COPY ex_ml FROM '$tmp/u.tsv';
SELECT train_rows FROM gpumf_split('ex_ml', 0.2, 7, train_table => 'ex_ml_train', test_table => 'ex_ml_test');
CREATE TABLE ex_pl AS SELECT user_id AS u, item_id AS i, rating AS r, holdout
  FROM gpumf_synthetic_ratings(2000, 1000, 100000, rank => 5, noise => 0.3, seed => 5);
CREATE TABLE ex_pl_train AS SELECT u, i, r FROM ex_pl WHERE NOT holdout;
CREATE TABLE ex_pl_test AS SELECT u, i, r FROM ex_pl WHERE holdout;
CREATE TABLE ex_grid (data text, setting text, k int, reg real, rmse float8, search_s float8, train_s float8);
DO \$\$
DECLARE d text; f int; g real; a text; m gpumf.models;
BEGIN
  FOREACH d IN ARRAY '{ex_ml,ex_pl}'::text[] LOOP
    FOREACH a IN ARRAY '{als_explicit,ccd}'::text[] LOOP
      m := gpumf_train(d || '_train', 'u', 'i', 'r', algorithm => a, model => d || '_' || a);
      INSERT INTO ex_grid SELECT d, 'bare ' || a, m.factors, (m.params->>'regularization')::real, e.rmse,
             (m.params->'autotune'->>'seconds')::float8, m.train_seconds
        FROM gpumf_evaluate(d || '_' || a, d || '_test', value_col => 'r') e;
      m := gpumf_train(d || '_train', 'u', 'i', 'r', algorithm => a, model => d || '_' || a || '_fixed', autotune => false);
      INSERT INTO ex_grid SELECT d, 'fixed defaults ' || a, m.factors, (m.params->>'regularization')::real, e.rmse, NULL, m.train_seconds
        FROM gpumf_evaluate(d || '_' || a || '_fixed', d || '_test', value_col => 'r') e;
    END LOOP;
    FOREACH f IN ARRAY '{8,16,32,64,128}'::int[] LOOP
      FOREACH g IN ARRAY '{0.005,0.01,0.02,0.05,0.1,0.15,0.2,0.3}'::real[] LOOP
        m := gpumf_train(d || '_train', 'u', 'i', 'r', factors => f, regularization => g,
                         algorithm => 'als_explicit', model => d || '_grid');
        INSERT INTO ex_grid SELECT d, 'grid', f, g, e.rmse, NULL, m.train_seconds
          FROM gpumf_evaluate(d || '_grid', d || '_test', value_col => 'r') e;
      END LOOP;
    END LOOP;
  END LOOP;
END \$\$;
\pset tuples_only on
\pset format unaligned
\echo '| data | setting | k | regularization | test RMSE | / best of grid | search s | train s |'
\echo '|---|---|---|---|---|---|---|---|'
WITH best AS (SELECT DISTINCT ON (data) data, k, reg, rmse FROM ex_grid WHERE setting = 'grid' ORDER BY data, rmse)
SELECT format('| %s | %s | %s | %s | %s | %s | %s | %s |', CASE g.data WHEN 'ex_ml' THEN 'MovieLens 100K' ELSE 'planted (rank 5, noise 0.3)' END,
              g.setting, g.k, g.reg, round(g.rmse::numeric, 4), round((g.rmse / b.rmse)::numeric, 3),
              coalesce(round(g.search_s::numeric, 1)::text, '-'), round(g.train_s::numeric, 2))
  FROM ex_grid g JOIN best b USING (data)
 WHERE g.setting <> 'grid' OR (g.k = b.k AND g.reg = b.reg)
 ORDER BY g.data, g.setting;
SQL
rm -rf "$tmp"
