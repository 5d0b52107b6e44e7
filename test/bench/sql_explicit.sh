#!/bin/bash
# End to end in SQL: gpumf_train(..., algorithm => 'ccd' | 'als_explicit') on a
# ratings table (default 20M rows: gpumf_synthetic_ratings(138493, 26744,
# 20000263), rank 10, noise 0.5), timed by phase from the catalog row, with
# the held-out RMSE.  Needs a server with gpumf installed (test/pgenv.sh, or
# .pgbundle/device-pg.sh on the GPU machine).  Prints a markdown table.
#   DEVICE=gpu|cpu  FACTORS="40 100"  ALGOS="ccd als_explicit"  ITERS=10  ROWS=20000263  USERS  ITEMS
#   REGS="0.05"  (regularization, the default; several values train each in turn.  Both
#   algorithms weigh it by each row's number of ratings, so one value serves both.)
set -u
set -o pipefail
DEVICE=${DEVICE:-gpu}; FACTORS=${FACTORS:-40 100}; ALGOS=${ALGOS:-ccd als_explicit}
ITERS=${ITERS:-10}; ROWS=${ROWS:-20000263}; USERS=${USERS:-138493}; ITEMS=${ITEMS:-26744}
REGS=${REGS:-0.05}
DB=gpumf_sql_explicit
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || exit 1
q "CREATE EXTENSION gpumf" >/dev/null
t0=$(date +%s.%N)
q "CREATE TABLE ratings AS SELECT * FROM gpumf_synthetic_ratings($USERS, $ITEMS, $ROWS, rank => 10, noise => 0.5, seed => 1)"
q "CREATE TABLE train AS SELECT user_id, item_id, rating FROM ratings WHERE NOT holdout"
q "CREATE TABLE test AS SELECT user_id, item_id, rating FROM ratings WHERE holdout"
q "VACUUM ANALYZE train" >/dev/null
echo "generated $(q "SELECT count(*) FROM train") training and $(q "SELECT count(*) FROM test") held-out ratings in $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s" >&2
echo "| algorithm | factors | regularization | backend / device | read s | CSR s | transfer s | train s | ms / iteration | store s | total s | train RMSE | held-out RMSE |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for a in $ALGOS; do
  for k in $FACTORS; do
   for reg in $REGS; do
    # one untimed training first: the backend's CUDA start-up stays out of the table
    q "SET gpumf.device = $DEVICE; SET gpumf.progress = off; SELECT 1 FROM gpumf_train('train', 'user_id', 'item_id', 'rating', factors => $k, iterations => 1, algorithm => '$a', regularization => $reg, model => 'warm')" >/dev/null 2>&1
    row=$(q "SET gpumf.device = $DEVICE; SET gpumf.progress = off;
      SELECT backend || ' / ' || device, round(read_seconds::numeric, 2), round(build_seconds::numeric, 2),
             round(transfer_seconds::numeric, 2), round(train_seconds::numeric, 2),
             round((1000 * train_seconds / iterations_run)::numeric, 1), round(store_seconds::numeric, 2),
             round((read_seconds + build_seconds + transfer_seconds + train_seconds + store_seconds)::numeric, 2),
             round(train_rmse::numeric, 4),
             round(gpumf_rmse(name, 'test', 'user_id', 'item_id', 'rating')::numeric, 4)
        FROM gpumf_train('train', 'user_id', 'item_id', 'rating', factors => $k, iterations => $ITERS,
                         algorithm => '$a', regularization => $reg, model => '${a}_$k')" 2>&1 | tail -1)
    echo "| $a | $k | $reg | $(echo "$row" | sed 's/|/ | /g') |"
   done
  done
done
dropdb "$DB"
