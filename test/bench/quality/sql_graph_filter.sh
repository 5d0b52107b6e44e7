#!/bin/bash
# graph_filter through SQL on a LightGCN-format split (train.txt, test.txt):
# the number of factors chosen on a validation split carved from the
# training part (gpumf_split, 20% of the rows, seed 2024), then the chosen
# setting trained on the whole training part and measured on the test part
# with gpumf_evaluate (recall and NDCG at 20, training items left out).
# Prints one table: each candidate's validation figures, then the test
# figures of every candidate trained on the whole training part, with the
# phases from the catalog (read, CSR, transfer, train, store) and the whole
# statement.  Needs a server (test/pgenv.sh or test/device-server.sh) with
# gpumf.  IALS_FACTORS=f blends each with an iALS model of f factors
# (gpumf_train's ials_factors; its other settings the defaults), once for
# each blend weight in BLENDS; IALS_FACTORS=0 (or unset) trains the filter
# alone.  PARTS=test skips the validation runs.
#
#   FACTORS="2048 3072 4096" ITERATIONS=6 bash test/bench/quality/sql_graph_filter.sh DIR NAME
#   FACTORS=3072 IALS_FACTORS=1024 BLENDS="0.3 0.4 0.5" bash test/bench/quality/sql_graph_filter.sh DIR NAME
set -eo pipefail
dir=$1
name=${2:-data}
factors=${FACTORS:-"1024 2048 4096"}
iterations=${ITERATIONS:-6}
ials=${IALS_FACTORS:-0}
blends=${BLENDS:-0.4}
[ "$ials" -gt 0 ] || blends=-
tmp=$(mktemp -d)
chmod 755 "$tmp"
for f in train test; do
	awk '{for (i = 2; i <= NF; i++) print $1 "\t" $i}' "$dir/$f.txt" >"$tmp/$f.tsv"
done
chmod 644 "$tmp"/*.tsv
psql -X -q -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS gpumf;
DROP TABLE IF EXISTS gfb_train, gfb_test, gfb_fit, gfb_val;
CREATE TABLE gfb_train (u int, i int);
CREATE TABLE gfb_test (u int, i int);
COPY gfb_train FROM '$tmp/train.tsv';
COPY gfb_test FROM '$tmp/test.tsv';
ANALYZE gfb_train;
SELECT train_rows, test_rows FROM gpumf_split('gfb_train', 0.2::real, 2024::bigint, user_col => 'u', item_col => 'i',
                                              train_table => 'gfb_fit', test_table => 'gfb_val');
ANALYZE gfb_fit;
SQL
rm -rf "$tmp"
# the statement's time: clock around psql (one connection per training)
table=""
for part in ${PARTS:-val test}; do
	src=gfb_fit; tst=gfb_val
	[ $part = test ] && { src=gfb_train; tst=gfb_test; }
	for k in $factors; do
	for b in $blends; do
		extra="" setting="filter"
		if [ "$b" != - ]; then
			extra=", ials_factors => $ials, blend => $b"
			setting="blend $b, iALS $ials"
		fi
		model="gfb_${part}_${k}_${b//[.-]/}"
		t0=$(date +%s.%N)
		psql -X -q -v ON_ERROR_STOP=1 -c "SET gpumf.progress = off" -c "SET client_min_messages = warning" \
			-c "SELECT 1 FROM gpumf_train('$src', 'u', 'i', algorithm => 'graph_filter', factors => $k, iterations => $iterations, model => '$model'$extra)" >/dev/null
		t1=$(date +%s.%N)
		line=$(psql -X -q -At -F' | ' -v ON_ERROR_STOP=1 <<SQL
SET gpumf.progress = off;
SELECT '$name', '$part', $k, '$setting', m.factors, round(e.recall::numeric, 4), round(e.ndcg::numeric, 4),
       round(m.read_seconds::numeric, 2), round(m.build_seconds::numeric, 2), round(m.transfer_seconds::numeric, 2),
       round(m.train_seconds::numeric, 2), round(m.store_seconds::numeric, 2),
       round((m.train_seconds + m.transfer_seconds + m.store_seconds)::numeric, 2),
       round(($t1 - $t0)::numeric, 2), round(e.seconds::numeric, 1), m.device
  FROM gpumf.models m, LATERAL gpumf_evaluate(m.name, '$tst', 'u', 'i', k => 20) e
 WHERE m.name = '$model';
SQL
)
		table="$table| $line |"$'\n'
		psql -X -q -c "SELECT gpumf_drop_model('$model')" >/dev/null
	done
	done
done
echo
echo "| dataset | part | filter factors | model | factors | recall@20 | NDCG@20 | read s | CSR s | transfer s | train s | store s | transfer + train + store s | statement s | evaluate s | device |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s' "$table"
echo
echo "iterations $iterations; 'val': trained on gfb_fit (80% of the training rows), measured on gfb_val; 'test': trained on the whole training part, measured on the test part."
