#!/bin/bash
# Serving right after a training and after a server restart.  A training
# reads the version it made into shared memory before it commits, so that the
# first call after the commit attaches.  With gpumf in shared_preload_libraries and
# gpumf.warm_at_start on (the default), a worker reads every model's current
# version of every database that has gpumf into shared memory when the server
# starts, so that the first gpumf_recommend after the restart attaches
# instead of reading the factor tables.  This starts its own throw-away
# cluster of the PostgreSQL on PATH (pg_ctl, as test/pgenv.sh sets it up)
# with shared_preload_libraries = gpumf, trains models in two databases (and
# leaves a third without gpumf), restarts it and checks:
#   - before any serving call, gpumf_shared_models() of each database lists
#     each model's current version (and only that one), and the server log
#     says how many models of each database were read;
#   - the first gpumf_recommend of a new session returns the same list as
#     before the restart and leaves the list of shared versions as it was
#     (it attached: nothing new was read);
#   - with gpumf.warm_at_start = off nothing is read at start, and the first
#     call reads the model itself;
#   - a version larger than gpumf.shared_models_memory is logged and
#     skipped, and the others are still read;
#   - after a crash right after a training, with the new factor tables' heap
#     files emptied (none of their pages reached the disk), recovery gives
#     back the same rows, recommendations, index and visibility map from the
#     WAL (the tables are written straight to their files: store_direct.c);
#   - on a new cluster, background workers make the WAL segment files a
#     training's store fills while it trains (gpumf.wal_ahead_workers), and
#     are gone when its transaction ends; a crash right after such a training
#     recovers the same model;
# and prints a new session's first call's latency right after a training
# committed, after the commit's warm-up, and after a restart with and without
# the warm-up at start.
#
#   bash test/reliability/restart.sh                 # CI: 100,000 items, factors 32
#   RESTART_ITEMS=2000000 RESTART_FACTORS=128 bash test/reliability/restart.sh   # the latency at scale
#
# Run as root it runs the cluster as user postgres (RESTART_OS_USER).  Prints "ok N - ..."
# lines and "N passed, M failed".
set -u
ITEMS=${RESTART_ITEMS:-100000}
FACTORS=${RESTART_FACTORS:-32}
PORT=${RESTART_PORT:-$(( ${PGPORT:-5499} + 140 ))}
DIR=${RESTART_DIR:-/tmp/gpumf-restart}
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$(echo "$2" | head -c 600)'"; fi; }
q() {  # $1: database, then SQL
  local db=$1; shift
  PGOPTIONS="-c gpumf.device=cpu -c gpumf.progress=off -c client_min_messages=warning" \
    psql -X -qAt -v ON_ERROR_STOP=1 -h /tmp -p "$PORT" -U postgres -d "$db" -c "$*"
}
bindir=$(dirname "$(command -v pg_ctl)")
OSUSER=${RESTART_OS_USER:-postgres}   # the cluster's owner when run as root
if [ "$(id -u)" = 0 ]; then as_owner() { su "$OSUSER" -s /bin/bash -c "cd / && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} $*"; }; else as_owner() { bash -c "$*"; }; fi
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit; }
trap 'as_owner "$bindir/pg_ctl -D $DIR/data -m immediate -w stop" >/dev/null 2>&1' EXIT
opts="-p $PORT -k /tmp -c listen_addresses= -c max_connections=20 -c shared_preload_libraries=gpumf"
start() {  # $1: extra server options, $2: databases whose warm-up to wait for (their LOG line)
  : >"$DIR/server.log"; chmod 666 "$DIR/server.log"
  as_owner "$bindir/pg_ctl -D $DIR/data -l $DIR/server.log -w -o \"$opts $1\" start" >/dev/null \
    || { tail -5 "$DIR/server.log"; bad "the server starts ($1)"; finish; }
  for _ in $(seq 1 600); do
    [ "$(grep -c 'read into shared memory at start in' "$DIR/server.log")" -ge "${2:-0}" ] && return
    sleep 0.1
  done
  bad "the start-up warm-up ends within 60 s" "$(grep gpumf "$DIR/server.log" | head -5)"
}
stop() { as_owner "$bindir/pg_ctl -D $DIR/data -m fast -w stop" >/dev/null; cat "$DIR/server.log" >>"$DIR/all.log"; }
now() { date +%s.%N; }

as_owner "$bindir/pg_ctl -D $DIR/data -m immediate -w stop" >/dev/null 2>&1
rm -rf "$DIR"; mkdir -p "$DIR"; [ "$(id -u)" = 0 ] && chown "$OSUSER" "$DIR"
as_owner "$bindir/initdb -D $DIR/data -A trust -U postgres" >"$DIR/initdb.log" 2>&1 \
  || { cat "$DIR/initdb.log"; bad "initdb"; finish; }
start ""

# models: two in db_a (the larger one trained last), one in db_b; db_c has no gpumf
users=$(( ITEMS / 10 > 2000 ? ITEMS / 10 : 2000 ))
for d in db_a db_b db_c; do q postgres "CREATE DATABASE $d" >/dev/null; done
out=$(q db_a "CREATE EXTENSION gpumf;
  CREATE TABLE small AS SELECT user_id, item_id, value FROM gpumf_synthetic(2000, 500, 40000);
  CREATE TABLE big AS SELECT user_id, item_id, value FROM gpumf_synthetic($users, $ITEMS, $(( ITEMS * 5 )));
  SELECT count(*) FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'm_small');
  SELECT count(*) FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'm_small');
  SELECT count(*) FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => $FACTORS, iterations => 2, model => 'm_big');" 2>&1)
# the first call of a new session right after the training committed (the
# commit's warm-up worker may still be reading), then once it has
t0=$(now); q db_a "SELECT count(*) FROM gpumf_recommend('m_big', 2, 10)" >/dev/null; commit_ms=$(awk "BEGIN { printf \"%.1f\", ($(now) - $t0) * 1000 }")
for _ in $(seq 1 600); do pgrep -f "gpumf warm model" >/dev/null 2>&1 || break; sleep 0.1; done
t0=$(now); q db_a "SELECT count(*) FROM gpumf_recommend('m_big', 3, 10)" >/dev/null; warmed_ms=$(awk "BEGIN { printf \"%.1f\", ($(now) - $t0) * 1000 }")
check "db_a: two models (m_small retrained: two versions kept)" "$out" "$(printf '1\n1\n1')"
out=$(q db_b "CREATE EXTENSION gpumf;
  CREATE TABLE r AS SELECT user_id, item_id, value FROM gpumf_synthetic(1000, 300, 20000);
  SELECT count(*) FROM gpumf_train('r', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'm_b');" 2>&1)
check "db_b: one model" "$out" "1"
q db_c "CREATE TABLE t (x int)" >/dev/null
before_big=$(q db_a "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_big', 1, 10)")
before_b=$(q db_b "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_b', 1, 10)")
shared_expected() {  # $1: database; the current versions of its models, as gpumf_shared_models() lists them
  q "$1" "SELECT string_agg(m.id || ':' || m.version, ',' ORDER BY m.id) FROM gpumf.models m"
}
shared_now() {
  q "$1" "SELECT coalesce(string_agg(model_id || ':' || version, ',' ORDER BY model_id), 'none') FROM gpumf_shared_models()"
}
exp_a=$(shared_expected db_a); exp_b=$(shared_expected db_b)

# 0. a training reads its new version into shared memory in its own transaction
out=$(q db_a "BEGIN;
  SELECT count(*) FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'm_tx');
  SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id AND m.version = s.version WHERE m.name = 'm_tx';
  ROLLBACK;" 2>&1)
check "the training's transaction lists its new version before it commits" "$out" "$(printf '1\n1')"
check "rolled back: nothing of it is listed" "$(shared_now db_a)" "$exp_a"
out=$(q db_a "CREATE TABLE small_text AS SELECT 'u' || user_id AS u, 'i' || item_id AS i, value FROM small;
  BEGIN;
  SELECT count(*) FROM gpumf_train('small_text', 'u', 'i', 'value', factors => 8, iterations => 2, model => 'm_text');
  SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id AND m.version = s.version WHERE m.name = 'm_text';
  ROLLBACK;" 2>&1)
check "text keys too: the training lists its version before it commits" "$out" "$(printf '1\n1')"

# 1. a restart with the warm-up (the default)
stop; start "" 2
check "db_a: the current versions are in shared memory before any call" "$(shared_now db_a)" "$exp_a"
check "db_b: the same" "$(shared_now db_b)" "$exp_b"
if grep -q '2 of 2 models of database "db_a" read into shared memory at start' "$DIR/server.log"; then ok "the log says what was read (db_a)"; else bad "the log says what was read (db_a)" "$(grep gpumf "$DIR/server.log" | head -5)"; fi
if grep -q 'database "db_c"' "$DIR/server.log"; then bad "nothing is logged for a database without gpumf"; else ok "nothing is logged for a database without gpumf"; fi
t0=$(now); after=$(q db_a "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_big', 1, 10)"); warm_ms=$(awk "BEGIN { printf \"%.1f\", ($(now) - $t0) * 1000 }")
check "the first call after the restart: the same top 10" "$after" "$before_big"
check "it attached: the shared versions are as they were" "$(shared_now db_a)" "$exp_a"
check "db_b serves the same top 10" "$(q db_b "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_b', 1, 10)")" "$before_b"

# 2. gpumf.warm_at_start = off: nothing at start, the first call reads
stop; start "-c gpumf.warm_at_start=off"
check "warm_at_start off: nothing in shared memory after the start" "$(shared_now db_a)" "none"
t0=$(now); after=$(q db_a "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_big', 1, 10)"); cold_ms=$(awk "BEGIN { printf \"%.1f\", ($(now) - $t0) * 1000 }")
check "warm_at_start off: the first call reads the model, the same top 10" "$after" "$before_big"
check "warm_at_start off: then m_big is shared" "$(q db_a "SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'm_big'")" "1"

# 3. a version too large for gpumf.shared_models_memory is skipped, the others read
stop; start "-c gpumf.shared_models_memory=1MB" 2
check "shared_models_memory 1 MB: m_big is not read at start" \
  "$(q db_a "SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'm_big'")" "0"
check "shared_models_memory 1 MB: m_small is" \
  "$(q db_a "SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'm_small'")" "1"
if grep -q 'shared memory for models is full: model "m_big"' "$DIR/server.log"; then ok "the log names the model it skipped"; else bad "the log names the model it skipped" "$(grep gpumf "$DIR/server.log" | head -5)"; fi
stop
if grep -q 'terminated by signal' "$DIR/all.log"; then bad "no process crashed" "$(grep 'terminated by signal' "$DIR/all.log" | head -3)"; else ok "no process crashed"; fi

# 4. a crash right after a training: the factor tables it wrote to their files
# (gpumf.store_writes = direct, the default) come back from the WAL alone.  No
# checkpoint runs after the training; after an immediate stop (a crash) the
# tables' heap files are emptied and their visibility maps removed, as if none
# of their pages had reached the disk, and recovery must replay them all.
start "-c gpumf.warm_at_start=off -c checkpoint_timeout=1h -c max_wal_size=4GB"
q db_a "CHECKPOINT" >/dev/null
q db_a "SELECT count(*) FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => $FACTORS, iterations => 2, model => 'm_crash')" >/dev/null
crash_tables=$(q db_a "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'm_crash'")
digest() {  # the rows of m_crash's tables, the top 10 of user 1, the rows an index scan finds
  for t in $crash_tables; do
    q db_a "SELECT md5(string_agg(t::text, ';' ORDER BY key)), count(*) FROM $t t"
  done
  q db_a "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_crash', 1, 10)"
  q db_a "SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM ${crash_tables%% *} WHERE key IN (1, 2, 3)"
}
before_crash=$(digest)
crash_files=$(for t in $crash_tables; do q db_a "SELECT pg_relation_filepath('$t')"; done)
as_owner "$bindir/pg_ctl -D $DIR/data -m immediate -w stop" >/dev/null; cat "$DIR/server.log" >>"$DIR/all.log"
emptied=0
for f in $crash_files; do
  for seg in "$DIR/data/$f" "$DIR/data/$f".[0-9]*; do
    [ -f "$seg" ] && { : >"$seg"; emptied=$((emptied + 1)); }
  done
  rm -f "$DIR/data/${f}_vm" "$DIR/data/${f}_fsm"
done
check "the crashed training's heap files were found and emptied" "$([ "$emptied" -ge 2 ] && echo yes)" "yes"
start "-c gpumf.warm_at_start=off"
check "after the crash, recovery gives back the same rows, top 10 and index" "$(digest)" "$before_crash"
if q db_a "CREATE EXTENSION IF NOT EXISTS pg_visibility" >/dev/null 2>&1; then
  check "the visibility map came back: every page of both tables all-visible and all-frozen" \
    "$(for t in $crash_tables; do q db_a "SELECT count(*) > 0 AND bool_and(all_visible AND all_frozen) FROM pg_visibility_map('$t')"; done)" "$(printf 't\nt')"
else
  echo "# pg_visibility is not installed with this PostgreSQL: the visibility map is not looked at"
fi
stop

# 5. the WAL segment files a store fills, made ahead by gpumf.wal_ahead_workers
# while the training reads and trains (wal_ahead.c): on a new cluster, which
# has almost no segment files beyond the one being written, a training whose
# store writes about 90 MB of WAL finds its workers making them; they are gone
# once the transaction ends (commit or rollback); with 0 workers none start;
# and after a crash right after such a training, recovery (which reads past
# the WAL's end into files made ahead and empty) gives the same model back.
rm -rf "$DIR/data"
as_owner "$bindir/initdb -D $DIR/data -A trust -U postgres" >"$DIR/initdb.log" 2>&1 \
  || { cat "$DIR/initdb.log"; bad "initdb (WAL ahead)"; finish; }
start "-c gpumf.warm_at_start=off -c checkpoint_timeout=1h -c max_wal_size=4GB -c min_wal_size=32MB"
q postgres "CREATE EXTENSION gpumf;
  CREATE UNLOGGED TABLE wal_src AS SELECT user_id, item_id, value FROM gpumf_synthetic(50000, 2000, 1000000);
  ANALYZE wal_src; CHECKPOINT" >/dev/null
ahead_files() {  # segment files after the one being written
  q postgres "SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}\$' AND name > pg_walfile_name(pg_current_wal_lsn())"
}
wal_train() {  # $1: gpumf.wal_ahead_workers, $2: model, $3: COMMIT or ROLLBACK; the DEBUG lines about the WAL ahead
  PGOPTIONS="-c gpumf.device=cpu -c gpumf.progress=off -c client_min_messages=debug1 -c gpumf.wal_ahead_workers=$1" \
    psql -X -qAt -v ON_ERROR_STOP=1 -h /tmp -p "$PORT" -U postgres -d postgres -c "BEGIN" \
    -c "SELECT count(*) FROM gpumf_train('wal_src', 'user_id', 'item_id', 'value', factors => 384, iterations => 1, model => '$2', autotune => false)" \
    -c "$3" 2>&1 | grep -o 'gpumf: .*WAL segment files.*'
}
workers_left() {  # the WAL-ahead workers still running 5 s after a training's transaction ended (at most)
  for _ in $(seq 1 50); do
    [ "$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'gpumf WAL ahead'")" = 0 ] && break
    sleep 0.1
  done
  q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'gpumf WAL ahead'"
}
before=$(ahead_files)
out=$(wal_train 2 m_wal COMMIT)
made=$(echo "$out" | sed -n 's/.*ahead of the store: \([0-9]*\) made.*/\1/p')
check "a new cluster has at most 2 segment files ahead before the training ($before)" "$([ "$before" -le 2 ] && echo yes)" "yes"
check "the workers made at least 4 segment files during the training (${made:-none})" \
  "$([ "${made:-0}" -ge 4 ] && echo yes)" "yes"
[ "${made:-0}" -ge 4 ] || echo "# $out"
check "no WAL-ahead worker runs after the commit" "$(workers_left)" "0"
check "the trained model serves" "$(q postgres "SELECT count(*) FROM gpumf_recommend('m_wal', 1, 10)")" "10"
out=$(wal_train 2 m_wal_rb ROLLBACK)
check "no WAL-ahead worker runs after a rollback" "$(workers_left)" "0"
check "the rolled-back model does not exist" "$(q postgres "SELECT count(*) FROM gpumf.models WHERE name = 'm_wal_rb'")" "0"
check "gpumf.wal_ahead_workers = 0: no worker starts" "$(wal_train 0 m_wal0 COMMIT | wc -l)" "0"
wal_digest() { q postgres "SELECT md5(string_agg(t::text, ';' ORDER BY key)), count(*) FROM $(q postgres "SELECT user_table FROM gpumf.models WHERE name = 'm_wal'") t"
  q postgres "SELECT string_agg(item::text, ',') FROM gpumf_recommend('m_wal', 1, 10)"; }
q postgres "CHECKPOINT" >/dev/null
wal_train 2 m_wal COMMIT >/dev/null
before_crash=$(wal_digest)
as_owner "$bindir/pg_ctl -D $DIR/data -m immediate -w stop" >/dev/null; cat "$DIR/server.log" >>"$DIR/all.log"
start "-c gpumf.warm_at_start=off"
check "after a crash right after a training with files made ahead, the same rows and top 10" "$(wal_digest)" "$before_crash"
stop
if grep -q 'terminated by signal' "$DIR/all.log"; then bad "no process crashed (WAL ahead)" "$(grep 'terminated by signal' "$DIR/all.log" | head -3)"; else ok "no process crashed (WAL ahead)"; fi

echo "# a new session's first gpumf_recommend ($ITEMS items, factors $FACTORS, $(nproc) cores; ms, psql's connection included):"
echo "# | when | first call ms |"
echo "# |---|---|"
echo "# | right after the training committed | $commit_ms |"
echo "# | after the commit's warm-up worker ended | $warmed_ms |"
echo "# | after a restart, gpumf.warm_at_start on (once its worker ended) | $warm_ms |"
echo "# | after a restart, gpumf.warm_at_start off | $cold_ms |"
finish
