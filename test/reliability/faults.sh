#!/bin/bash
# Faults: a retraining killed (SIGKILL) or canceled at random points must
# leave the previous model exactly as it was.
#
#   bash test/reliability/faults.sh            # 10 kills, 20 cancels
#   bash test/reliability/faults.sh --fast     # 2 kills, 4 cancels (CI)
#   KILLS=20 CANCELS=40 bash test/reliability/faults.sh
#   FAULT_USERS, FAULT_ITEMS, FAULT_ROWS, FAULT_ITERS: the dataset and the
#   length of a training (default 300000 x 40000, 8000000 rows, 3
#   iterations; --fast: 100000 x 15000, 2500000 rows)
#
# A first training of the model, then a retraining that measures its phases
# (the catalog's read/build/train/store seconds, warm caches).  Each trial then retrains it and aims at
# one phase, in turn: reading the source, building the CSR, iterating,
# storing the factors.  Reading and building are aimed by time from the
# statement's start (pg_stat_activity.query_start); iterating and storing
# from gpumf's per-iteration progress NOTICEs.  The table says how many
# iteration NOTICEs had arrived when the fault hit.
#  - SIGKILL of the training backend (kill -9: needs root or the server's
#    OS user): the server recovers; the catalog row, the factor tables
#    (count and sum of row hashes) and the recommendations are as before; no
#    orphan factor table (every gpumf.m*_v*_ table is named by the catalog
#    or by gpumf.retired_tables, and every table the catalog names exists).
#  - pg_cancel_backend, and statement_timeout, alternately: the statement
#    fails with the cancel's message within 1 s of the cancel (of the
#    timeout), and the model is as before.
#  A trial whose training ends before its fault arrives (on a busy machine
#  the phases drift from the measurement) is not counted: the phases are
#  measured again from that training and the trial is retried.
#  - Out of GPU memory (only where gpumf.device = gpu works): with
#    gpumf.gpu_memory_limit (MB) set below what the problem needs, training
#    is refused before the upload with an ERROR (the predicted need, by
#    part, and a hint) and leaves the model as it was, and a training that fits still works afterwards.
#    Without that setting the check is skipped (a problem larger than the
#    card needs about as much host memory: unsafe to provoke).
# At the end a retraining still works.  Prints a table of trials, "ok"/"not
# ok" lines and "N passed, M failed".  Needs a server (source
# test/pgenv.sh) with gpumf installed; other sessions are disconnected by
# each crash recovery, so run nothing else against the server meanwhile.
set -u
cd "$(dirname "$0")/../.." || exit 1
DB=gpumf_faults
DEV=${GPUMF_TEST_DEVICE:-cpu}
fast=0; [ "${1:-}" = --fast ] && fast=1
if [ $fast = 1 ]; then kills=${KILLS:-2}; cancels=${CANCELS:-4}; else kills=${KILLS:-10}; cancels=${CANCELS:-20}; fi
if [ $fast = 1 ]; then
  users=${FAULT_USERS:-100000}; items=${FAULT_ITEMS:-15000}; rows=${FAULT_ROWS:-2500000}
else
  users=${FAULT_USERS:-300000}; items=${FAULT_ITEMS:-40000}; rows=${FAULT_ROWS:-8000000}
fi
iters=${FAULT_ITERS:-3}
export PGOPTIONS="-c gpumf.device=$DEV -c gpumf.progress=off"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$(echo "$2" | head -c 300)'"; fi; }
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
now() { date +%s.%N; }
fsub() { awk "BEGIN { printf \"%.3f\", $1 - $2 }"; }
rnd() { awk -v s="$RANDOM$RANDOM" -v lo="$1" -v hi="$2" 'BEGIN { srand(s); printf "%.3f", lo + (hi - lo) * rand() }'; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
finish() { dropdb --if-exists "$DB" >/dev/null 2>&1; echo "$pass passed, $fail failed"; [ $fail = 0 ]; exit $?; }
wait_server() {
  for _ in $(seq 1 480); do
    psql -X -qAt -d "$DB" -c "SELECT 1" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  return 1
}

train_sql() {  # $1: model
  echo "SELECT version FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 32, iterations => $iters, model => '$1')"
}
# the model's state: catalog row, factor tables, recommendations
state() {
  local ut it
  ut=$(q "SELECT user_table FROM gpumf.models WHERE name = 'm'")
  it=$(q "SELECT item_table FROM gpumf.models WHERE name = 'm'")
  q "SELECT to_jsonb(m)::text FROM gpumf.models m WHERE name = 'm'"
  q "SELECT count(*) || ':' || sum(hashtextextended(t::text, 0)) FROM $ut t"
  q "SELECT count(*) || ':' || sum(hashtextextended(t::text, 0)) FROM $it t"
  q "SELECT string_agg(item || '/' || score, ',') FROM gpumf_recommend('m', 7, 10)"
}
# factor tables nobody names (the catalog, the kept versions, the retired list),
# and models or kept versions whose tables are missing ("" when none)
orphans() {
  q "SELECT concat_ws(' ',
       (SELECT string_agg('unreferenced ' || tablename, ' ') FROM pg_tables
         WHERE schemaname = 'gpumf' AND tablename ~ '^m[0-9]+_v[0-9]+_(users|items)\$'
           AND 'gpumf.' || tablename NOT IN (SELECT user_table FROM gpumf.models UNION ALL
                                             SELECT item_table FROM gpumf.models UNION ALL
                                             SELECT user_table FROM gpumf.model_versions UNION ALL
                                             SELECT item_table FROM gpumf.model_versions UNION ALL
                                             SELECT name FROM gpumf.retired_tables)),
       (SELECT string_agg('missing tables of kept version ' || version, ' ') FROM gpumf.model_versions
         WHERE to_regclass(user_table) IS NULL OR to_regclass(item_table) IS NULL),
       (SELECT string_agg('missing tables of ' || name, ' ') FROM gpumf.models
         WHERE to_regclass(user_table) IS NULL OR to_regclass(item_table) IS NULL))"
}

dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || { bad "create database"; finish; }
q "CREATE EXTENSION gpumf" >/dev/null
t0=$(now)
q "CREATE TABLE big AS SELECT user_id, item_id, value FROM gpumf_synthetic($users, $items, $rows, seed => 5)"
q "$(train_sql m)" >/dev/null && q "$(train_sql m)" >/dev/null || { bad "first training"; finish; }
# the phases of the model's latest training (seconds)
calibrate() {
  read -r r_s b_s t_s s_s <<<"$(q "SELECT round(read_seconds::numeric, 3), round(build_seconds::numeric, 3),
                                          round((transfer_seconds + train_seconds)::numeric, 3), round(store_seconds::numeric, 3)
                                     FROM gpumf.models WHERE name = 'm'" | tr '|' ' ')"
  it_s=$(awk "BEGIN { printf \"%.3f\", $t_s / $iters }")
}
calibrate
# a checkpoint now keeps each crash recovery short (nothing of the set-up to redo)
q "CHECKPOINT"
echo "# set-up $(fsub "$(now)" "$t0") s; phases of one training: reading $r_s s, building $b_s s, iterating $t_s s ($it_s s each), storing $s_s s"
before=$(state)
check "no orphan factor table before the trials" "$(orphans)" ""

phases=(reading building iterating storing)
rows_out=()

# Start a retraining in the background; sets tpid (psql), tpsql (when psql
# started), and unless $2 is "nowait", bpid (the backend) and tstart (its
# query_start, epoch).  Progress NOTICEs go to $tmp/t.err.
start_training() {  # $1: extra SQL before the training
  rm -f "$tmp/t.out" "$tmp/t.err"
  tpsql=$(now)
  PGAPPNAME=gpumf_fault PGOPTIONS="-c gpumf.device=$DEV -c gpumf.progress=on" \
    psql -X -qAt -d "$DB" -c "$1" -c "$(train_sql m)" >"$tmp/t.out" 2>"$tmp/t.err" &
  tpid=$!
  bpid=""; tstart=""
  [ "${2:-}" = nowait ] && return 0
  for _ in $(seq 1 500); do
    read -r bpid tstart <<<"$(psql -X -qAt -d "$DB" -F ' ' -c "SELECT pid, extract(epoch FROM query_start) FROM pg_stat_activity WHERE application_name = 'gpumf_fault' AND state = 'active' AND query LIKE '%gpumf_train%'" 2>/dev/null)"
    [ -n "$bpid" ] && return 0
    sleep 0.01
  done
  return 1
}
notices() { grep -c 'NOTICE:  iteration' "$tmp/t.err" 2>/dev/null; }
# Wait until the aimed point of phase $1; prints the offset from the start.
aim() {
  local ph=$1 target k
  case $ph in
    reading)  target=$(awk "BEGIN { printf \"%.6f\", $tstart + $(rnd 0.1 0.9) * $r_s }") ;;
    building) target=$(awk "BEGIN { printf \"%.6f\", $tstart + $r_s + $(rnd 0.1 0.9) * $b_s }") ;;
    iterating|storing)
      if [ "$ph" = iterating ]; then k=$(( (RANDOM % iters) )); else k=$iters; fi
      # after the k-th iteration's NOTICE (k = 0: the first iteration)
      while [ "$(notices)" -lt "$k" ] && kill -0 $tpid 2>/dev/null; do sleep 0.01; done
      if [ "$ph" = iterating ]; then
        target=$(awk "BEGIN { printf \"%.6f\", $(now) + $(rnd 0.1 0.9) * $it_s }")
        [ $k = 0 ] && target=$(awk "BEGIN { printf \"%.6f\", $tstart + $r_s + $b_s + $(rnd 0.1 0.9) * $it_s }")
      else
        target=$(awk "BEGIN { printf \"%.6f\", $(now) + $(rnd 0.05 0.7) * $s_s }")
      fi ;;
  esac
  sleep "$(awk "BEGIN { w = $target - $(now); print (w > 0 ? w : 0) }")"
  fsub "$(now)" "$tstart"
}

# A trial whose training ends before the fault arrives (a busy machine runs
# slower or faster than the calibration) is not counted: the phases are
# measured again from that training and the trial is retried (3 attempts).
finished_first() {  # $1: trial label
  echo "# $1: the training finished before the fault; measured again, retried"
  calibrate
  before=$(state)
}
version_of() { sed -n 's/.*"version": \([0-9]*\).*/\1/p' <<<"$1" | head -1; }

# ---------------------------------------------------------------- SIGKILL
kill_trial() {  # $1: trial, $2: phase; sets res
  local t=$1 ph=$2 at seen tk rec after orph
  res=""
  start_training "" || { bad "kill $t: the training started" "$(cat "$tmp/t.err")"; res=FAIL; return; }
  at=$(aim "$ph")
  seen=$(notices)
  tk=$(now)
  if ! kill -0 $tpid 2>/dev/null || ! kill -9 "$bpid" 2>"$tmp/kill.err"; then
    wait $tpid
    if grep -q '^[0-9]' "$tmp/t.out"; then res="finished first"; finished_first "kill $t ($ph)"; return; fi
    bad "kill $t: kill -9 of the backend" "$(cat "$tmp/kill.err") (run as root or as the server's OS user)"
    res=FAIL; return
  fi
  wait $tpid
  # psql returns as soon as the backend's socket closes; the postmaster reaps
  # the backend and starts crash recovery a moment later, and a connection
  # made in between would see the server before the recovery.  Wait until the
  # backend is reaped (kill -0 still succeeds on a zombie).
  for _ in $(seq 1 400); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.025; done
  wait_server || { bad "kill $t: the server recovers"; finish; }
  rec=$(fsub "$(now)" "$tk")
  after=$(state); orph=$(orphans)
  res=ok
  if [ "$(version_of "$after")" != "$(version_of "$before")" ]; then
    # committed just before the kill: a whole new version is intact too
    res="finished first"; finished_first "kill $t ($ph)"; return
  fi
  check "kill $t ($ph, ${at} s): the model is as before" "$after" "$before"
  [ "$after" = "$before" ] || res=FAIL
  check "kill $t ($ph): no orphan factor table" "$orph" ""
  [ -z "$orph" ] || res=FAIL
  rows_out+=("| kill $t | SIGKILL | $ph | $at | $seen/$iters | recovered in $rec s | $res |")
}
for t in $(seq 1 "$kills"); do
  for attempt in 1 2 3; do
    kill_trial "$t" "${phases[$(( (t - 1) % 4 ))]}"
    [ "$res" != "finished first" ] && break
  done
  [ "$res" = "finished first" ] && bad "kill $t: a fault before the training's end in 3 attempts"
done

# ---------------------------------------------------------------- cancel
cancel_trial() {  # $1: trial, $2: phase; sets res
  local t=$1 ph=$2 kind at seen tc dt ms msg out after
  res=""
  if [ $((t % 2)) = 1 ]; then
    kind=pg_cancel_backend
    start_training "" || { bad "cancel $t: the training started" "$(cat "$tmp/t.err")"; res=FAIL; return; }
    at=$(aim "$ph")
    seen=$(notices)
    tc=$(now)
    q "SELECT pg_cancel_backend($bpid)" >/dev/null 2>&1
    wait $tpid
    dt=$(fsub "$(now)" "$tc")
    msg="canceling statement due to user request"
  else
    kind=statement_timeout
    # the timeout: the aimed point of the phase, from the measured phases
    case $ph in
      reading)   ms=$(awk "BEGIN { printf \"%d\", 1000 * $(rnd 0.1 0.9) * $r_s }") ;;
      building)  ms=$(awk "BEGIN { printf \"%d\", 1000 * ($r_s + $(rnd 0.1 0.9) * $b_s) }") ;;
      iterating) ms=$(awk "BEGIN { printf \"%d\", 1000 * ($r_s + $b_s + $(rnd 0.05 0.9) * $t_s) }") ;;
      storing)   ms=$(awk "BEGIN { printf \"%d\", 1000 * ($r_s + $b_s + $t_s + $(rnd 0.05 0.4) * $s_s) }") ;;
    esac
    start_training "SET statement_timeout = $ms" nowait
    wait $tpid
    seen=$(notices)
    # from psql's start (connecting included: an upper bound) to its exit, less the timeout
    dt=$(awk "BEGIN { printf \"%.3f\", $(now) - $tpsql - $ms / 1000 }")
    at=$(awk "BEGIN { printf \"%.3f\", $ms / 1000 }")
    msg="canceling statement due to statement timeout"
  fi
  if grep -q '^[0-9]' "$tmp/t.out"; then res="finished first"; finished_first "cancel $t ($kind, $ph)"; return; fi
  out=$(cat "$tmp/t.out" "$tmp/t.err" | grep -v 'NOTICE:  iteration')
  after=$(state)
  # A cancel that lands after the training's commit, before the statement
  # ends, is reported to the client although the new version is committed,
  # whole (PostgreSQL's edge, not gpumf's): counted as finished first, as
  # long as the current version is exactly the next one and no table is orphaned.
  if [ "$after" != "$before" ] && [ "$(version_of "$after")" = "$(( $(version_of "$before") + 1 ))" ] \
     && [ -z "$(orphans)" ]; then
    res="finished first"; finished_first "cancel $t ($kind, $ph): the cancel came after the commit"; return
  fi
  res=ok
  if grep -qF "$msg" <<<"$out"; then ok "cancel $t ($kind, $ph, ${at} s): canceled"; else bad "cancel $t ($kind, $ph): canceled" "$out"; res=FAIL; fi
  if awk "BEGIN { exit !($dt < 1.0) }"; then ok "cancel $t ($kind, $ph): stopped within 1 s (${dt} s)"; else bad "cancel $t ($kind, $ph): stopped within 1 s" "${dt} s"; res=FAIL; fi
  check "cancel $t ($kind, $ph): the model is as before" "$after" "$before"
  [ "$after" = "$before" ] || res=FAIL
  rows_out+=("| cancel $t | $kind | $ph | $at | $seen/$iters | stopped in $dt s | $res |")
}
for t in $(seq 1 "$cancels"); do
  for attempt in 1 2 3; do
    cancel_trial "$t" "${phases[$(( (t - 1) % 4 ))]}"
    [ "$res" != "finished first" ] && break
  done
  [ "$res" = "finished first" ] && bad "cancel $t: a cancel before the training's end in 3 attempts"
done

check "no orphan factor table after the cancels" "$(orphans)" ""

# ---------------------------------------------------------------- out of GPU memory
gpu=$(PGOPTIONS="-c gpumf.device=gpu" psql -X -qAt -d "$DB" -c "SELECT backend FROM gpumf_device_info()" 2>/dev/null)
if [ "$gpu" = cuda ]; then
  # (a session lists gpumf's settings once the library is loaded in it)
  has_cap=$(q "LOAD 'gpumf'; SELECT count(*) FROM pg_settings WHERE name = 'gpumf.gpu_memory_limit'")
  if [ "$has_cap" = 1 ]; then
    # the problem needs about (users + items) * 32 * 4 * 2 + nnz * 16 bytes on the card: far above 16 MB
    st=$(state)
    out=$(PGOPTIONS="-c gpumf.device=gpu -c gpumf.progress=off -c gpumf.gpu_memory_limit=16" psql -X -qAt -d "$DB" -c "$(train_sql m)" 2>&1)
    if grep -qE 'ERROR:.*training needs about [0-9]+ MB of GPU memory, more than the [0-9]+ MB available' <<<"$out" &&
       grep -qi 'nothing was uploaded' <<<"$out" && grep -q 'HINT:.*gpumf.device' <<<"$out"; then
      ok "out of GPU memory (gpumf.gpu_memory_limit = 16 MB): refused before the upload, with what it needs and a hint"
      check "out of GPU memory: the model is as before" "$(state)" "$st"
    else
      bad "out of GPU memory (gpumf.gpu_memory_limit = 16 MB): refused before the upload with what it needs" "$out"
    fi
    out=$(PGOPTIONS="-c gpumf.device=gpu -c gpumf.progress=off" psql -X -qAt -d "$DB" -c "$(train_sql m)" -c "SELECT backend FROM gpumf.models WHERE name = 'm'" 2>&1 | tail -1)
    check "after running out of GPU memory, a training that fits runs on the GPU" "$out" "cuda"
    before=$(state)
  else
    bad "out of GPU memory: the setting gpumf.gpu_memory_limit exists" "got '$has_cap'"
  fi
else
  echo "# out of GPU memory: no usable GPU under gpumf.device = gpu: check skipped"
fi

# ---------------------------------------------------------------- after all that
v0=$(q "SELECT version FROM gpumf.models WHERE name = 'm'")
v1=$(q "$(train_sql m)" 2>&1)
check "a retraining still works after the faults" "$v1" "$((v0 + 1))"
check "no orphan factor table at the end" "$(orphans)" ""

echo
echo "| trial | fault | aimed at | at s | iteration NOTICEs seen | stop | result |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows_out[@]}"
echo
finish
