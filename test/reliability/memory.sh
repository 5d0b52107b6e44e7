#!/bin/bash
# Memory: one backend trains, serves, retrains and drops models for a while;
# its memory must come back to the level of its first round.
#
#   bash test/reliability/memory.sh           # 5 rounds: 100 trainings, 10,000 recommendations
#   bash test/reliability/memory.sh --fast    # 4 rounds of 10 models (CI)
#   ROUNDS=10 MEM_TOLERANCE_MB=4 bash test/reliability/memory.sh
#
# One psql session (one backend) runs ROUNDS rounds over 20 models: 10
# models keep their names and are retrained every round (the serving cache
# replaces their versions); 10 get new names every round, are trained,
# served and dropped at the end of the round (the serving cache must let
# go of dropped models).  Each round: 20 trainings (gpumf_synthetic data,
# 1000 users x 3000 items, 20000 rows, factors 32) and 100 recommendations
# from each model (2000).  After each round the backend reports its memory:
# RSS, Anonymous and Private_Dirty from /proc/self/smaps_rollup (read with
# pg_read_file, so the server's user may differ from ours), the total of
# pg_backend_memory_contexts, and on a GPU machine (gpumf.device = gpu) the
# GPU memory nvidia-smi shows for the backend's PID and for the training
# service's worker (which trains these small models for it).  The first-run level is
# the end of round 2: by then every kind of work (first load, a replaced
# version, a dropped model) has happened once, and caches that fill once
# (relation and catalog caches, plans; +1.7 MB Anonymous and +1.1 MB of
# contexts from round 1 to 2 on this machine when nothing leaks) are full.
# Checks: from the end of round 2 to the end, Anonymous memory grows by at
# most MEM_TOLERANCE_MB (default 2 MB; a dropped model's cached factors are
# about 0.5 MB, so 10 leaked per round exceed it), the memory contexts by
# at most 1 MB, and GPU memory by at most 16 MB.
# Then (fast and long alike) memory that grows with threads: an ordinary
# role's gpumf.threads = 200 is capped at gpumf.max_threads (the cores) and
# it cannot raise the cap; 200 threads at factors 1024 under max_memory =
# 100 MB are refused (exact, block, explicit ALS, tune) with the backend's
# peak RSS (VmHWM) within max_memory; 64 threads that fit train within it.
# And the total of shared model segments (gpumf.shared_models_memory, set
# with ALTER SYSTEM and reloaded, reset at the end): a version that does not
# fit is refused with a hint, counted beside what is in use, served from the
# session's memory with gpumf.shared_models off, and shared once the cap
# allows it.  Prints a table, "ok"/"not ok" lines and "N passed, M failed".
# Needs a superuser connection.
set -u
cd "$(dirname "$0")/../.." || exit 1
DB=gpumf_memory
DEV=${GPUMF_TEST_DEVICE:-cpu}
fast=0; [ "${1:-}" = --fast ] && fast=1
if [ $fast = 1 ]; then rounds=${ROUNDS:-4}; nmodels=10; else rounds=${ROUNDS:-5}; nmodels=20; fi
tol=${MEM_TOLERANCE_MB:-2}
[ "$rounds" -ge 3 ] || { echo "ROUNDS must be at least 3"; exit 2; }
base=2                  # the first-run level: the end of round 2
per=100                 # recommendations per model and round
export PGOPTIONS="-c gpumf.device=$DEV -c gpumf.progress=off -c client_min_messages=warning"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)

dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || { echo "0 passed, 1 failed"; exit 1; }
q "CREATE EXTENSION gpumf" >/dev/null
# one table per model slot, so that models differ
for s in $(seq 1 $nmodels); do
  echo "CREATE TABLE r$s AS SELECT user_id, item_id, value FROM gpumf_synthetic(1000, 3000, 20000, seed => $s);"
done | psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
gpu=0; [ "$DEV" = gpu ] && command -v nvidia-smi >/dev/null && gpu=1

# the session's script
{
  echo "SELECT 'PID|' || pg_backend_pid();"
  for r in $(seq 1 "$rounds"); do
    half=$((nmodels / 2))
    for s in $(seq 1 $nmodels); do
      if [ "$s" -le "$half" ]; then m="keep$s"; else m="r${r}_drop$s"; fi
      echo "SELECT 1 FROM gpumf_train('r$s', 'user_id', 'item_id', 'value', factors => 32, iterations => 2, model => '$m') \\g /dev/null"
    done
    for s in $(seq 1 $nmodels); do
      if [ "$s" -le "$half" ]; then m="keep$s"; else m="r${r}_drop$s"; fi
      echo "SELECT 'REC|' || count(*) FROM generate_series(1, $per) u, LATERAL gpumf_recommend('$m', u, 10);"
    done
    for s in $(seq $((half + 1)) $nmodels); do
      echo "SELECT gpumf_drop_model('r${r}_drop$s') \\g /dev/null"
    done
    cat <<SQL
SELECT concat_ws('|', 'MEM', $r,
  (regexp_match(pg_read_file('/proc/self/smaps_rollup'), 'Rss:\s+(\d+)'))[1],
  (regexp_match(pg_read_file('/proc/self/smaps_rollup'), 'Anonymous:\s+(\d+)'))[1],
  (regexp_match(pg_read_file('/proc/self/smaps_rollup'), 'Private_Dirty:\s+(\d+)'))[1],
  (SELECT sum(total_bytes) / 1024 FROM pg_backend_memory_contexts));
SQL
    [ $gpu = 1 ] && echo "SELECT 'SVC|$r|' || coalesce((SELECT pid FROM pg_stat_activity WHERE backend_type = 'gpumf training service' LIMIT 1), 0);"
    [ $gpu = 1 ] && echo "\\! nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | sed 's/^/GPU|$r|/'"
  done
} >"$tmp/session.sql"

psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -f "$tmp/session.sql" >"$tmp/out" 2>&1
rc=$?
if [ $rc != 0 ]; then bad "the session ran to the end" "$(grep -v '^REC\|^MEM\|^PID\|^GPU' "$tmp/out" | head -5)"; else ok "the session ran to the end: $((rounds * nmodels)) trainings, $((rounds * nmodels * per)) recommendations"; fi
recs=$(grep '^REC|' "$tmp/out" | cut -d'|' -f2 | sort -u | tr '\n' ' ')
if [ "$recs" = "$((per * 10)) " ]; then ok "every call returned 10 items"; else bad "every call returned 10 items" "counts per model: $recs"; fi
bpid=$(grep '^PID|' "$tmp/out" | cut -d'|' -f2)

echo
echo "| round | trainings | recommendations | RSS MB | Anonymous MB | Private_Dirty MB | memory contexts MB | GPU MB |"
echo "|---|---|---|---|---|---|---|---|"
mb() { awk "BEGIN { printf \"%.1f\", $1 / 1024 }"; }
first=""; last=""
while IFS='|' read -r _ r rss anon pdirty ctx; do
  # the backend's GPU memory and the training service worker's, which trains for it
  spid=$(grep "^SVC|$r|" "$tmp/out" | cut -d'|' -f3)
  g=$(grep -E "^GPU\|$r\|($bpid|${spid:-0})," "$tmp/out" | cut -d, -f2 | tr -d ' ' | awk 'NF { s += $1; n++ } END { if (n) print s }')
  echo "| $r | $((r * nmodels)) | $((r * nmodels * per)) | $(mb "$rss") | $(mb "$anon") | $(mb "$pdirty") | $(mb "$ctx") | ${g:-n/a} |"
  [ "$r" = $base ] && first="$anon $ctx ${g:-0}"
  last="$anon $ctx ${g:-0}"
done < <(grep '^MEM|' "$tmp/out")
echo
read -r a1 c1 g1 <<<"$first"; read -r a2 c2 g2 <<<"$last"
da=$(awk "BEGIN { printf \"%.1f\", ($a2 - $a1) / 1024 }"); dc=$(awk "BEGIN { printf \"%.2f\", ($c2 - $c1) / 1024 }")
echo "# growth from round $base to round $rounds: Anonymous $da MB, memory contexts $dc MB; $(( $(date +%s) - t0 )) s"
if awk "BEGIN { exit !($da <= $tol) }"; then ok "anonymous memory back to its first-run level (round $base -> $rounds: +$da MB, tolerance $tol MB)"; else bad "anonymous memory back to its first-run level" "round $base -> $rounds: +$da MB (tolerance $tol MB)"; fi
if awk "BEGIN { exit !($dc <= 1) }"; then ok "memory contexts back to their first-run level (round $base -> $rounds: +$dc MB, tolerance 1 MB)"; else bad "memory contexts back to their first-run level" "round $base -> $rounds: +$dc MB (tolerance 1 MB)"; fi
if [ $gpu = 1 ]; then
  if [ "$g1" = 0 ] && [ "$g2" = 0 ]; then
    echo "# GPU memory: nvidia-smi shows no process with the backend's PID $bpid or the training service's (another PID namespace?): not checked"
  elif awk "BEGIN { exit !($g2 - $g1 <= 16) }"; then ok "GPU memory back to its first-run level ($g1 -> $g2 MB)"
  else bad "GPU memory back to its first-run level" "$g1 -> $g2 MB"; fi
fi

# ------------------------------------------------ threads against gpumf.max_memory
# (On the CPU whatever GPUMF_TEST_DEVICE says: the threads are the CPU's.)
# Each CPU thread of a training has scratch of its own (the exact and block
# solvers' systems: 12 bytes x factors^2), which gpumf.max_memory must count:
# once 200 threads at factors 1024 peaked at 1.07 GB under max_memory = 100 MB.
ROLE=gpumf_memory_role
psql -X -qAt -d "$DB" -c "DROP ROLE IF EXISTS $ROLE" -c "CREATE ROLE $ROLE LOGIN" >/dev/null 2>&1
q "GRANT SELECT ON r1 TO $ROLE; GRANT CREATE ON SCHEMA public TO $ROLE" >/dev/null
cores=$(nproc)
# an ordinary role: gpumf.threads = 200 uses at most gpumf.max_threads (the cores); the cap is not its to raise
out=$(timeout 120 psql -X -qAt -d "$DB" -U $ROLE -c "SET gpumf.device = cpu" -c "SET gpumf.threads = 200" \
  -c "SELECT device FROM gpumf_train('r1', 'user_id', 'item_id', factors => 8, iterations => 1, model => 'role_threads')" \
  -c "SET gpumf.max_threads = 200" 2>&1)
used=$(sed -n 's/^cpu (\([0-9]*\) threads)$/\1/p' <<<"$out")
if [ -n "$used" ] && [ "$used" -le "$cores" ]; then ok "gpumf.threads = 200 as an ordinary role: $used threads used (the machine's $cores cores)"
else bad "gpumf.threads = 200 as an ordinary role: at most $cores threads" "$out"; fi
if grep -q 'permission denied to set parameter "gpumf.max_threads"' <<<"$out"; then ok "an ordinary role cannot raise gpumf.max_threads"
else bad "an ordinary role cannot raise gpumf.max_threads" "$out"; fi

# a superuser lifts the cap: 200 threads at factors 1024 with max_memory = 100 MB are
# refused before anything is allocated (the message names the threads), for each
# solver and algorithm whose scratch grows with factors^2; the backend's peak RSS
# (VmHWM) stays within max_memory of where it was
peak() { echo "SELECT 'HWM|' || (regexp_match(pg_read_file('/proc/self/status'), 'VmHWM:\s+(\d+)'))[1];"; }
t0=$(date +%s.%N)
out=$({ echo "SET gpumf.device = cpu; SET statement_timeout = '60s'; SET gpumf.max_memory = 100; SET gpumf.max_threads = 200; SET gpumf.threads = 200;"
  peak
  echo "SELECT 1 FROM gpumf_train('r1', 'user_id', 'item_id', factors => 1024, solver => 'exact', iterations => 1, model => 'threads');"
  echo "SELECT 1 FROM gpumf_train('r1', 'user_id', 'item_id', factors => 1024, solver => 'block', block_size => 1024, iterations => 1, model => 'threads');"
  echo "SELECT 1 FROM gpumf_train('r1', 'user_id', 'item_id', 'value', factors => 1024, algorithm => 'als_explicit', iterations => 1, model => 'threads');"
  echo "SELECT count(*) FROM gpumf_tune('r1', 'user_id', 'item_id', factors => '{1024}', solver => 'exact', budget => 1, iterations => 1);"
  peak; } | timeout 300 psql -X -qAt -d "$DB" 2>&1)
dt=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }")
nref=$(grep -c 'needs about .* MB, more than gpumf.max_memory allows (100 MB)' <<<"$out")
nthr=$(grep -c 'DETAIL:  200 threads with 12.0 MB of scratch each' <<<"$out")
if [ "$nref" = 4 ] && [ "$nthr" = 4 ]; then ok "200 threads at factors 1024 (exact, block, als_explicit, tune) under max_memory = 100 MB: refused, naming the threads' scratch (${dt} s)"
else bad "200 threads at factors 1024 under max_memory = 100 MB: refused, naming the threads' scratch" "$(grep -v '^HWM' <<<"$out" | head -6)"; fi
h0=$(grep '^HWM|' <<<"$out" | head -1 | cut -d'|' -f2); h1=$(grep '^HWM|' <<<"$out" | tail -1 | cut -d'|' -f2)
grow=$(awk "BEGIN { printf \"%.1f\", (${h1:-0} - ${h0:-0}) / 1024 }")
if [ -n "$h0" ] && awk "BEGIN { exit !($grow <= 100) }"; then ok "peak RSS of the refused trainings' backend within max_memory (+$grow MB)"
else bad "peak RSS of the refused trainings' backend within max_memory" "+$grow MB"; fi

# 64 threads at factors 256 that fit in max_memory = 200 MB train, and the backend's
# peak RSS grows by less than that
out=$({ echo "SET gpumf.device = cpu; SET statement_timeout = '120s'; SET gpumf.max_memory = 200; SET gpumf.max_threads = 64; SET gpumf.threads = 64;"
  echo "CREATE TEMP TABLE small AS SELECT user_id, item_id FROM r1 WHERE user_id <= 300 AND item_id <= 600;"
  peak
  echo "SELECT 'DEV|' || device FROM gpumf_train('small', 'user_id', 'item_id', factors => 256, solver => 'exact', iterations => 1, model => 'threads');"
  peak; } | timeout 300 psql -X -qAt -d "$DB" 2>&1)
h0=$(grep '^HWM|' <<<"$out" | head -1 | cut -d'|' -f2); h1=$(grep '^HWM|' <<<"$out" | tail -1 | cut -d'|' -f2)
grow=$(awk "BEGIN { printf \"%.1f\", (${h1:-0} - ${h0:-0}) / 1024 }")
if grep -q '^DEV|cpu (64 threads)' <<<"$out" && awk "BEGIN { exit !($grow <= 200) }"; then
  ok "64 threads at factors 256 within max_memory = 200 MB: trained, peak RSS +$grow MB"
else bad "64 threads at factors 256 within max_memory = 200 MB: trained, peak RSS within it" "+$grow MB; $(grep -v '^HWM' <<<"$out" | head -4)"; fi
echo "# threads: an ordinary role's 200 -> $used; refused in ${dt} s; 64 threads at factors 256: peak RSS +$grow MB"

# ------------------------------------------------ the total of shared model segments
# gpumf.shared_models_memory (superuser, postgresql.conf or ALTER SYSTEM): a
# version whose segment would take the listed segments (every database's)
# past it is refused with an ERROR and a hint.  The test reads what is in use
# from the refusal itself (other databases' models count too), then sets the
# cap just below and just above what one more segment needs.
setcap() {  # $1: MB or DEFAULT; waits until new sessions see it
  psql -X -qAt -d "$DB" -c "LOAD 'gpumf'" -c "ALTER SYSTEM SET gpumf.shared_models_memory = $1" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 50); do
    [ "$(psql -X -qAt -d "$DB" -c "LOAD 'gpumf'" -c "SHOW gpumf.shared_models_memory")" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
serve() { timeout 120 psql -X -qAt -d "$DB" -c "SELECT 'REC|' || count(*) FROM gpumf_recommend('$1', 1, 5)" 2>&1; }
q "CREATE TABLE seg_a AS SELECT user_id, item_id FROM gpumf_synthetic(1000, 4000, 30000, seed => 1);
   CREATE TABLE seg_b AS SELECT user_id, item_id FROM gpumf_synthetic(2000, 20000, 60000, seed => 2);" >/dev/null
setcap -1 -1 || bad "gpumf.shared_models_memory reloaded"
q "SELECT 1 FROM gpumf_train('seg_a', 'user_id', 'item_id', factors => 64, iterations => 1, model => 'seg_a')" >/dev/null
a_out=$(serve seg_a)
a_bytes=$(q "SELECT bytes FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'seg_a'")
setcap 0 0 || bad "gpumf.shared_models_memory reloaded"
q "SELECT 1 FROM gpumf_train('seg_b', 'user_id', 'item_id', factors => 128, iterations => 1, model => 'seg_b')" >/dev/null
out=$(serve seg_b)
need=$(sed -n 's/.*version [0-9]* needs \([0-9.]*\) MB, \([0-9.]*\) MB of gpumf.shared_models_memory.*/\1/p' <<<"$out" | head -1)
used=$(sed -n 's/.*version [0-9]* needs \([0-9.]*\) MB, \([0-9.]*\) MB of gpumf.shared_models_memory.*/\2/p' <<<"$out" | head -1)
if [ -n "$need" ] && grep -q 'HINT:  A superuser can raise gpumf.shared_models_memory' <<<"$out"; then
  ok "gpumf.shared_models_memory = 0: serving a version refused with the segment's size ($need MB), the total in use ($used MB) and a hint"
else bad "gpumf.shared_models_memory = 0: serving refused with an ERROR and a hint" "$out"; fi
if [ "$a_out" = "REC|5" ] && [ -n "$a_bytes" ] && awk "BEGIN { exit !($used >= $a_bytes / 1048576 - 0.05) }"; then
  ok "the model served before (${a_bytes} bytes) counts in what is in use"
else bad "the model served before counts in what is in use" "served: $a_out, bytes $a_bytes, in use $used MB"; fi
# just below: in use + the segment - 1 MB (rounded down); just above: + 1 MB (rounded up)
below=$(awk "BEGIN { printf \"%d\", $used + $need - 1 }"); above=$(awk "BEGIN { printf \"%d\", $used + $need + 1.99 }")
setcap "$below" "${below}MB" || bad "gpumf.shared_models_memory reloaded"
out=$(serve seg_b)
if grep -q "shared memory for models is full" <<<"$out"; then ok "cap $below MB (in use $used + $need MB): refused"
else bad "cap $below MB (in use $used + $need MB): refused" "$out"; fi
off=$(timeout 120 psql -X -qAt -d "$DB" -c "SET gpumf.shared_models = off" -c "SELECT 'REC|' || count(*) FROM gpumf_recommend('seg_b', 1, 5)" 2>&1)
check_off=$(q "SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'seg_b'")
if [ "$off" = "REC|5" ] && [ "$check_off" = 0 ]; then ok "with gpumf.shared_models off the refused model serves from the session's memory"
else bad "with gpumf.shared_models off the refused model serves from the session's memory" "$off; listed $check_off"; fi
# (a gpumf function first: it loads the library, whose settings are then known)
role_out=$(psql -X -qAt -d "$DB" -U $ROLE -c "SELECT 1 FROM gpumf_device_info()" -c "SET gpumf.shared_models_memory = 100000" 2>&1)
if grep -q 'cannot be changed now\|permission denied' <<<"$role_out"; then ok "a session cannot change gpumf.shared_models_memory"
else bad "a session cannot change gpumf.shared_models_memory" "$role_out"; fi
setcap "$above" "${above}MB" || bad "gpumf.shared_models_memory reloaded"
out=$(serve seg_b)
listed=$(q "SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name IN ('seg_a', 'seg_b')")
if [ "$out" = "REC|5" ] && [ "$listed" = 2 ]; then ok "cap $above MB: both models shared"
else bad "cap $above MB: both models shared" "$out; listed $listed"; fi
setcap DEFAULT -1 || bad "gpumf.shared_models_memory back to its default"
echo "# shared segments: seg_a $a_bytes bytes; seg_b needs $need MB beside $used MB in use: refused at $below MB, shared at $above MB"

psql -X -qAt -d "$DB" -c "SELECT gpumf_drop_model(name) FROM gpumf.models" >/dev/null
dropdb "$DB"
psql -X -qAt -d postgres -c "DROP ROLE IF EXISTS $ROLE" >/dev/null
echo "$pass passed, $fail failed"
[ $fail = 0 ]
