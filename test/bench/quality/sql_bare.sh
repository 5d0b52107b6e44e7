#!/bin/bash
# A bare gpumf_train through SQL on a LightGCN-format split (train.txt,
# test.txt): the source and test tables loaded with COPY, the bare call
# (autotune) and the fixed defaults (autotune => false) trained, both
# evaluated by gpumf_evaluate at k = 20 on the test table; prints one table
# with the search, the training and the store times from the catalog.
# Needs a server (test/pgenv.sh or test/device-server.sh) with gpumf.
#
#   bash test/bench/quality/sql_bare.sh DIR NAME
set -eo pipefail
dir=$1
name=${2:-data}
tmp=$(mktemp -d)
chmod 755 "$tmp"
for f in train test; do
	awk '{for (i = 2; i <= NF; i++) print $1 "\t" $i}' "$dir/$f.txt" >"$tmp/$f.tsv"
done
chmod 644 "$tmp"/*.tsv
psql -X -q -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS bare_train, bare_test;
CREATE TABLE bare_train (u int, i int);
CREATE TABLE bare_test (u int, i int);
COPY bare_train FROM '$tmp/train.tsv';
COPY bare_test FROM '$tmp/test.tsv';
ANALYZE bare_train;
SQL
psql -X -q -v ON_ERROR_STOP=1 <<SQL
SET gpumf.progress = off;
\pset footer off
CREATE TEMP TABLE runs AS
SELECT 'bare call (autotune)'::text AS setting, m.* FROM gpumf_train('bare_train', 'u', 'i', model => 'bare_auto') m;
INSERT INTO runs SELECT 'fixed defaults (autotune => false)', m.*
  FROM gpumf_train('bare_train', 'u', 'i', model => 'bare_fixed', autotune => false) m;
\echo
\echo '| dataset | setting | k | chosen | recall@20 | NDCG@20 | search s | train s | store s | backend |'
\echo '|---|---|---|---|---|---|---|---|---|---|'
\pset tuples_only on
\pset format unaligned
SELECT format('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |', '$name', r.setting, r.factors,
              format('reg %s, alpha0 %s, nu %s, %s it., %s', r.params->>'regularization', r.params->>'alpha0',
                     r.params->>'nu', r.params->>'iterations', r.params->>'solver'),
              round(e.recall::numeric, 4), round(e.ndcg::numeric, 4),
              coalesce(round((r.params->'autotune'->>'seconds')::numeric, 1)::text, '-'),
              round(r.train_seconds::numeric, 2), round(r.store_seconds::numeric, 2), r.device)
  FROM runs r, LATERAL gpumf_evaluate(r.name, 'bare_test', 'u', 'i', k => 20) e
 ORDER BY r.setting;
SQL
rm -rf "$tmp"
