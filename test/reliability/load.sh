#!/bin/bash
# Load: pgbench clients call gpumf_recommend for random users of a model
# while another session retrains that model; every call must return exactly
# n distinct, scored items (a short or partial result, or an error, during
# the swap of versions is a failure).
#
#   bash test/reliability/load.sh            # 16 clients, 60 s, 2 retrains
#   bash test/reliability/load.sh --fast     # 4 clients, 8 s, 1 retrain (CI)
#   CLIENTS=32 SECONDS=120 RETRAINS=3 bash test/reliability/load.sh
#   LOAD_USERS, LOAD_ITEMS, LOAD_ROWS: the dataset (gpumf_synthetic);
#   default 20000 x 4000, 600000 rows (--fast: 5000 x 2000, 100000 rows)
#
# Each pgbench transaction: a random user, SELECT count(*), count(DISTINCT
# item), count(score) FROM gpumf_recommend(model, user, 10) \gset; a result
# other than 10/10/10 is logged as a short result (\shell).  An error aborts
# the client (pgbench counts it).  Latencies come from pgbench's
# per-transaction log (-l).  Prints a table, "ok"/"not ok" lines and
# "N passed, M failed".  Needs a server (source test/pgenv.sh) with gpumf.
set -u
secs_env=$SECONDS     # bash's SECONDS: the value from the environment, if any
cd "$(dirname "$0")/../.." || exit 1
DB=gpumf_load
DEV=${GPUMF_TEST_DEVICE:-cpu}
fast=0; [ "${1:-}" = --fast ] && fast=1
if [ $fast = 1 ]; then
  clients=${CLIENTS:-4}; secs=8; retrains=${RETRAINS:-1}
  users=${LOAD_USERS:-5000}; items=${LOAD_ITEMS:-2000}; rows=${LOAD_ROWS:-100000}
else
  clients=${CLIENTS:-16}; secs=60; retrains=${RETRAINS:-2}
  users=${LOAD_USERS:-20000}; items=${LOAD_ITEMS:-4000}; rows=${LOAD_ROWS:-600000}
fi
[ "$secs_env" -gt 0 ] 2>/dev/null && secs=$secs_env
N=10
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$2'"; fi; }
q() { PGOPTIONS="-c gpumf.device=$DEV -c gpumf.progress=off" psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"

dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || { echo "0 passed, 1 failed"; exit 1; }
q "CREATE EXTENSION gpumf" >/dev/null
q "CREATE TABLE ratings AS SELECT user_id, item_id, value FROM gpumf_synthetic($users, $items, $rows, seed => 9)"
train_sql="SELECT version || ' ' || train_seconds FROM gpumf_train('ratings', 'user_id', 'item_id', 'value', factors => 32, iterations => 4, model => 'load')"
q "$train_sql" >/dev/null || { bad "initial training"; echo "$pass passed, $fail failed"; exit 1; }
# every user has more than n unseen items, so each call must give n rows
maxseen=$(q "SELECT max(c) FROM (SELECT count(DISTINCT item_id) AS c FROM ratings GROUP BY user_id) s")
[ "$maxseen" -le $((items - N)) ] || { bad "dataset: a user has fewer than $N unseen items"; echo "$pass passed, $fail failed"; exit 1; }
nusers=$(q "SELECT max(user_id) FROM ratings")

cat >"$tmp/rec.sql" <<SQL
\set u random(1, $nusers)
SELECT count(*) AS c, count(DISTINCT item) AS d, count(score) AS s FROM gpumf_recommend('load', :u, $N) \gset
\if :c != $N or :d != $N or :s != $N
\shell echo short user :u rows :c distinct :d scored :s >> $tmp/short.log
\endif
SQL
: >"$tmp/short.log"; : >"$tmp/retrains.log"; chmod 666 "$tmp/short.log"

# the retraining session: retrain k starts at k * secs / (retrains + 1)
(
  t0=$(date +%s.%N)
  for k in $(seq 1 "$retrains"); do
    at=$(awk "BEGIN { print $k * $secs / ($retrains + 1) }")
    wait_s=$(awk "BEGIN { w = $t0 + $at - $(date +%s.%N); print (w > 0 ? w : 0) }")
    sleep "$wait_s"
    s=$(date +%s.%N)
    v=$(q "$train_sql" 2>&1)
    e=$(date +%s.%N)
    echo "$(awk "BEGIN { printf \"%.1f %.1f\", $s - $t0, $e - $t0 }") $v" >>"$tmp/retrains.log"
  done
) &
rpid=$!

pgbench -n -d "$DB" -f "$tmp/rec.sql" -c "$clients" -j 2 -T "$secs" -l --log-prefix="$tmp/tx" >"$tmp/pgbench.out" 2>"$tmp/pgbench.err"
prc=$?
wait $rpid

txs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$tmp/pgbench.out")
failed_tx=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$tmp/pgbench.out")
aborted=$(grep -c 'aborted in command' "$tmp/pgbench.err")
failed=$(( ${failed_tx:-0} + aborted ))
short=$(wc -l <"$tmp/short.log")
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$tmp/pgbench.out" | head -1)
# per-transaction log: "client tx latency_us script epoch us"
cat "$tmp"/tx.* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ { print $3 / 1000 }' | sort -n >"$tmp/lat"
pct() { awk -v p="$1" '{ a[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(p * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.2f", a[i] }' "$tmp/lat"; }
p50=$(pct 0.50); p99=$(pct 0.99); pmax=$(pct 1.0)
committed=0; during=0
while read -r s e v rest; do
  case "$v" in [0-9]*) committed=$((committed + 1)); awk "BEGIN { exit !($e < $secs) }" && during=$((during + 1)) ;; esac
done <"$tmp/retrains.log"

echo
echo "| clients | seconds | transactions | tps | failed | short results | p50 ms | p99 ms | max ms | retrains committed (during the run) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
echo "| $clients | $secs | ${txs:-0} | ${tps:-0} | $failed | $short | $p50 | $p99 | $pmax | $committed ($during) |"
echo
echo "# dataset: $users users x $items items, $rows rows; factors 32; n = $N"
echo "# retrains (start s, end s, version, train_seconds):"; sed 's/^/#   /' "$tmp/retrains.log"

if [ "${txs:-0}" -gt 0 ]; then ok "pgbench ran ${txs} transactions ($clients clients, $secs s)"; else bad "pgbench ran transactions" "$(tail -5 "$tmp/pgbench.err")"; fi
check "no failed transaction (errors, aborted clients)" "$failed" "0"
[ "$failed" = 0 ] || grep -m3 'aborted in command' "$tmp/pgbench.err"
check "no empty, short or partial result" "$short" "0"
[ "$short" = 0 ] || head -5 "$tmp/short.log"
check "pgbench exit status" "$prc" "0"
check "every retraining committed, during the load" "$committed/$during" "$retrains/$retrains"
check "the model's version went up by the retrains" "$(q "SELECT version FROM gpumf.models WHERE name = 'load'")" "$((1 + retrains))"

dropdb "$DB"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
