#!/bin/bash
# Batch recommendations and evaluation in SQL on the ML-20M shape
# (gpumf_synthetic(138493, 26744, 20000263); the rows marked holdout are the
# test set, the others train a model with factors 128):
#   1. gpumf_recommend_all(model, 10, target), seen items excluded, by phase
#      (read the users, scoring compute, transfers, writing the table), against
#      the same lists from a LATERAL over gpumf_recommend into a table; the two
#      tables are compared rank by rank
#   2. gpumf_evaluate on the holdout (k = 10)
# Prints markdown tables.  Needs a server (source test/pgenv.sh) with gpumf
# installed.
#   DEVICE=cpu|gpu (gpumf.device)   SCALE=1 (fraction of the ML-20M size)
#   ITERS=2 (ALS iterations of the model: the factors only need to be real)
#   LATERAL=1 (0: skip the LATERAL baseline)   KEEP=1 (reuse table and model)
set -eu
DEVICE=${DEVICE:-cpu}
SCALE=${SCALE:-1}
ITERS=${ITERS:-2}
LATERAL=${LATERAL:-1}
DB=${BENCH_DB:-gpumf_bench}
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.2f}')"; }
users=$(python3 -c "print(max(1000, int(138493 * $SCALE)))")
items=$(python3 -c "print(max(200, int(26744 * $SCALE)))")
rows=$(python3 -c "print(max(20000, int(20000263 * $SCALE)))")
export PGOPTIONS="-c gpumf.device=$DEVICE -c gpumf.progress=off"

psql -X -qAt -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 || createdb "$DB"
q "CREATE EXTENSION IF NOT EXISTS gpumf"
have=$(q "SELECT count(*) FROM pg_class WHERE relname = 'ml20m_h'")
if [ "$have" = 0 ] || [ -z "${KEEP:-}" ]; then
  t0=$(now)
  q "DROP TABLE IF EXISTS ml20m_h CASCADE"
  q "CREATE TABLE ml20m_h AS SELECT user_id, item_id, value, holdout FROM gpumf_synthetic($users, $items, $rows, seed => 20)"
  q "CREATE VIEW ml20m_train AS SELECT user_id, item_id, value FROM ml20m_h WHERE NOT holdout"
  q "CREATE VIEW ml20m_test AS SELECT user_id, item_id FROM ml20m_h WHERE holdout"
  q "VACUUM ANALYZE ml20m_h"
  echo "generated ml20m_h ($users users, $items items, $rows rows) in $(since $t0) s" >&2
fi
if [ -z "${KEEP:-}" ] || [ "$(q "SELECT count(*) FROM gpumf.models WHERE name = 'batch_k128'")" = 0 ]; then
  q "SELECT 1 FROM gpumf_train('ml20m_train', 'user_id', 'item_id', 'value', factors => 128, iterations => $ITERS, model => 'batch_k128')" >/dev/null
fi
echo "## gpumf_recommend_all and gpumf_evaluate: $(q "SELECT n_users || ' users x ' || n_items || ' items, ' || nnz || ' training nonzeros, factors ' || factors FROM gpumf.models WHERE name = 'batch_k128'"), device=$DEVICE"
echo "machine: $(nproc) cores; $(q "SELECT device FROM gpumf_device_info()")"
echo

# 1. gpumf_recommend_all, twice (the first loads the model into the session's cache)
q "DROP TABLE IF EXISTS recs_all, recs_lateral"
line=""
for rep in 1 2; do
  q "DROP TABLE IF EXISTS recs_all"
  t0=$(now)
  line=$(psql -X -qAt -F' ' -v ON_ERROR_STOP=1 -d "$DB" -c \
    "SELECT scored_users, rows_written, backend, read_seconds, transfer_seconds, compute_seconds, write_seconds
       FROM gpumf_recommend_all('batch_k128', 10, 'recs_all')")
  wall=$(since $t0)
done
set -- $line
echo "#### Top 10 of every user into a table (seen items excluded)"
echo
echo "| method | users | rows | backend | read s | transfer s | compute s | write s | total s (wall, psql) |"
echo "|---|---|---|---|---|---|---|---|---|"
printf "| gpumf_recommend_all | %s | %s | %s | %.3f | %.3f | %.3f | %.3f | %s |\n" "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$wall"
if [ "$LATERAL" = 1 ]; then
  ut=$(q "SELECT user_table FROM gpumf.models WHERE name = 'batch_k128'")
  t0=$(now)
  q "CREATE TABLE recs_lateral AS SELECT u.key AS \"user\", r.rank::int AS rank, r.item::int AS item, r.score
       FROM $ut u, LATERAL (SELECT g.item, g.score, row_number() OVER () AS rank
                              FROM gpumf_recommend('batch_k128', u.key, 10) g) r"
  lwall=$(since $t0)
  printf "| CREATE TABLE AS ... LATERAL gpumf_recommend(model, user, 10) | %s | %s | cpu | | | | | %s |\n" \
    "$(q "SELECT count(DISTINCT \"user\") FROM recs_lateral")" "$(q "SELECT count(*) FROM recs_lateral")" "$lwall"
  echo
  diff=$(q "SELECT count(*) FROM recs_all a FULL JOIN recs_lateral b ON b.\"user\" = a.\"user\" AND b.rank = a.rank
             WHERE a.score IS NULL OR b.score IS NULL OR abs(a.score - b.score) > 1e-5 * (1 + abs(b.score))
                OR (a.item <> b.item AND abs(a.score - b.score) > 1e-6)")
  swaps=$(q "SELECT count(*) FROM recs_all a JOIN recs_lateral b ON b.\"user\" = a.\"user\" AND b.rank = a.rank WHERE a.item <> b.item")
  echo "Speed-up: $(python3 -c "print(f'{$lwall / $wall:.1f}')")x. The two tables differ in $diff rows (scores within 1e-5 relative at every rank; $swaps near-tie swaps of items whose scores differ by less than 1e-6)."
  echo
fi

# 2. evaluation on the holdout
echo "#### gpumf_evaluate on the holdout, k = 10"
echo
echo "| backend | users | skipped users | precision | recall | map | ndcg | auc | seconds |"
echo "|---|---|---|---|---|---|---|---|---|"
for rep in 1 2; do
  e=$(psql -X -qAt -F' ' -v ON_ERROR_STOP=1 -d "$DB" -c \
    "SELECT backend, users, skipped_users, round(\"precision\"::numeric, 6), round(recall::numeric, 6), round(map::numeric, 6),
            round(ndcg::numeric, 6), round(auc::numeric, 6), round(seconds::numeric, 3)
       FROM gpumf_evaluate('batch_k128', 'ml20m_test')")
done
set -- $e
echo "| $1 | $2 | $3 | $4 | $5 | $6 | $7 | $8 | $9 |"
echo
