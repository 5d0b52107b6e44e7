#!/bin/bash
# Serving memory at many connections: N sessions each serve one
# gpumf_recommend call on MODEL and then sleep; the script sums their
# backends' private memory (USS: Private_Clean + Private_Dirty) and PSS from
# /proc/<pid>/smaps_rollup, against N sessions that only ran SELECT 1.
# Prints a markdown table.  Needs a server with max_connections > N, the
# model trained (test/bench/sql_bench.sh), and read access to the backends'
# /proc entries (run as root or as the server's user).
#   MODEL=bench_k128  N=100  DB=gpumf_bench  USERS=138493
set -u
MODEL=${MODEL:-bench_k128}
N=${N:-100}
DB=${DB:-gpumf_bench}
USERS=${USERS:-138493}
SLEEP=60

# sum of a field (kB) of smaps_rollup over the backends running pg_sleep
measure() {  # $1: label
  local pids uss=0 pss=0 n=0
  pids=$(psql -X -qAt -d "$DB" -c "SELECT pid FROM pg_stat_activity WHERE datname = '$DB' AND query LIKE '%pg_sleep($SLEEP)%' AND pid <> pg_backend_pid()")
  for p in $pids; do
    [ -r /proc/$p/smaps_rollup ] || continue
    read -r pc pd ps < <(awk '/^Private_Clean/ {c=$2} /^Private_Dirty/ {d=$2} /^Pss:/ {s=$2} END {print c, d, s}' /proc/$p/smaps_rollup)
    uss=$((uss + pc + pd)); pss=$((pss + ps)); n=$((n + 1))
  done
  python3 -c "print(f'| $1 | $n | {$uss/1024:.1f} | {$uss/1024/max($n,1):.2f} | {$pss/1024:.1f} |')"
}

# N sessions running $1, then sleeping; waits until all sleep
sessions() {
  for i in $(seq "$N"); do
    psql -X -qAt -d "$DB" -c "$(printf "$1" $((RANDOM % USERS + 1)))" -c "SELECT pg_sleep($SLEEP)" >/dev/null 2>&1 &
  done
  for t in $(seq 600); do
    s=$(psql -X -qAt -d "$DB" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB' AND query LIKE '%pg_sleep($SLEEP)%' AND state = 'active' AND pid <> pg_backend_pid()")
    [ "$s" -ge "$N" ] && return 0
    sleep 0.5
  done
  echo "not all $N sessions started" >&2
}

stop() {
  psql -X -qAt -d "$DB" -c "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE datname = '$DB' AND query LIKE '%pg_sleep($SLEEP)%' AND pid <> pg_backend_pid()" >/dev/null
  wait
}

k=$(psql -X -qAt -d "$DB" -c "SELECT factors || ' factors, ' || n_items || ' items' FROM gpumf.models WHERE name = '$MODEL'")
echo "### Serving memory: $N sessions, model $MODEL ($k)"
echo
echo "| sessions | backends | private MB (USS), all | private MB per backend | PSS MB, all |"
echo "|---|---|---|---|---|"
sessions "SELECT 1 -- %s"
measure "SELECT 1 only"
stop
sessions "SELECT count(*) FROM gpumf_recommend('$MODEL', %s, 10)"
measure "one gpumf_recommend each"
stop
