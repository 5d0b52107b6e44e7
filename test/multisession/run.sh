#!/bin/bash
# Multi-session tests: atomic retraining, cancel and statement_timeout within
# 1 s leaving the model as it was, concurrent retraining serialised, progress
# NOTICEs, pg_dump/restore of models, the catalog version checked across
# sessions, gpumf_cg_solve stopped within 1 s by a cancel or
# statement_timeout, the training service (results, progress,
# cancel, concurrency, its shutdown and idle exit), shared serving (a dropped
# database's versions released).  Needs a server (source test/pgenv.sh)
# with gpumf installed.  Prints "ok N - ..." lines and "N passed, M failed".
set -u
DB=gpumf_multisession
DEV=${GPUMF_TEST_DEVICE:-cpu}
# gpumf.keep_versions = 1 (only the current version kept) for the retire/drop
# checks below; history.sh tests keeping more
export PGOPTIONS="-c gpumf.device=$DEV -c gpumf.progress=off -c gpumf.keep_versions=1"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$2'"; fi; }
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
now() { date +%s.%N; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || exit 1
q "CREATE EXTENSION gpumf" >/dev/null
# small model for visibility tests; a large table that trains for a long time
q "CREATE TABLE small AS SELECT user_id, item_id, value FROM gpumf_synthetic(300, 200, 6000, seed => 3)"
q "CREATE TABLE big AS SELECT user_id, item_id, value FROM gpumf_synthetic(20000, 4000, 600000, seed => 5)"
q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'm')" >/dev/null
q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'bigm')" >/dev/null
state() { q "SELECT version || ':' || final_loss || ':' || user_table FROM gpumf.models WHERE name = '$1'"; }
recs() { q "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10)"; }

# 1. readers see the old model until the retraining commits
before_state=$(state m); before_recs=$(recs)
psql -X -qAt -d "$DB" >"$tmp/a.out" 2>&1 <<SQL &
BEGIN;
SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 7, model => 'm');
SELECT pg_sleep(3);
COMMIT;
SQL
apid=$!
sleep 1.5
during_state=$(state m); during_recs=$(recs 2>&1)
check "readers see the old catalog row during retraining" "$during_state" "$before_state"
check "readers get the old recommendations during retraining" "$during_recs" "$before_recs"
wait $apid
after_version=$(q "SELECT version FROM gpumf.models WHERE name = 'm'")
check "the retraining commits a new version" "$after_version" "2"
after_recs=$(recs 2>&1)
if [ -n "$after_recs" ] && [ "$after_recs" != "$before_recs" ]; then ok "readers see the new model after commit"; else bad "readers see the new model after commit" "$after_recs"; fi
check "the replaced tables are retired" "$(q "SELECT count(*) FROM gpumf.retired_tables WHERE name LIKE 'gpumf.m1_v1_%'")" "2"

# 2. pg_cancel_backend stops a training within 1 s; the model is unchanged
cancel_test() {  # $1: label, $2: extra SQL before training, $3: factors
  local before pid t0 t1 dt out
  before=$(state bigm)
  psql -X -qAt -d "$DB" -v ON_ERROR_STOP=1 >"$tmp/c.out" 2>&1 <<SQL &
SET application_name = 'gpumf_cancel';
$2
SELECT gpumf_train('big', 'user_id', 'item_id', 'value', factors => $3, iterations => 100000, model => 'bigm');
SQL
  pid=$!
  # wait until the backend is past reading (training runs for minutes)
  sleep 4
  t0=$(now)
  q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'gpumf_cancel'" >/dev/null
  wait $pid
  t1=$(now)
  dt=$(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")
  out=$(cat "$tmp/c.out")
  if grep -q "canceling statement due to user request" <<<"$out"; then ok "$1: canceled"; else bad "$1: canceled" "$out"; fi
  if awk "BEGIN { exit !($dt < 1.0) }"; then ok "$1: stopped within 1 s (${dt}s)"; else bad "$1: stopped within 1 s" "${dt}s"; fi
  check "$1: model unchanged" "$(state bigm)" "$before"
}
cancel_test "cancel while training" "" 64
# large factors: long Gram products and loss passes are cut into slices too
cancel_test "cancel at factors 512" "" 512

# 3. statement_timeout ends a training the same way
before=$(state bigm)
t0=$(now)
out=$(q "SET statement_timeout = '5s'; SELECT gpumf_train('big', 'user_id', 'item_id', 'value', factors => 64, iterations => 100000, model => 'bigm')" 2>&1)
dt=$(awk "BEGIN { printf \"%.3f\", $(now) - $t0 }")
if grep -q "statement timeout" <<<"$out"; then ok "statement_timeout: canceled"; else bad "statement_timeout: canceled" "$out"; fi
if awk "BEGIN { exit !($dt < 6.0) }"; then ok "statement_timeout: stopped within 1 s of the timeout (${dt}s for 5s)"; else bad "statement_timeout: stopped within 1 s of the timeout" "${dt}s"; fi
check "statement_timeout: model unchanged" "$(state bigm)" "$before"

# 4. two sessions retraining one model are serialised; both succeed
v0=$(q "SELECT version FROM gpumf.models WHERE name = 'm'")
for s in 1 2; do
  q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 20, model => 'm')" >"$tmp/r$s.out" 2>&1 &
  eval "rp$s=\$!"
done
wait $rp1; r1=$?; wait $rp2; r2=$?
check "concurrent retrainings both succeed" "$r1$r2" "00"
check "concurrent retrainings give two new versions" "$(sort -n "$tmp/r1.out" "$tmp/r2.out" | tr '\n' ' ')" "$((v0+1)) $((v0+2)) "
check "retired tables are dropped by later trainings" "$(q "SELECT count(*) FROM pg_tables WHERE schemaname = 'gpumf' AND tablename LIKE 'm1_v%'")" "4"
check "the catalog names the newest tables" "$(q "SELECT user_table FROM gpumf.models WHERE name = 'm'")" "gpumf.m1_v$((v0+2))_users"

# 5. a NOTICE per iteration shows progress (turned off by gpumf.progress)
out=$(PGOPTIONS="-c gpumf.device=$DEV" psql -X -qAt -d "$DB" -c "SELECT 1 FROM gpumf_train('small', 'user_id', 'item_id', factors => 4, iterations => 3, model => 'p')" 2>&1)
check "progress NOTICEs, one per iteration" "$(grep -cE 'NOTICE:  iteration [0-9]+/3: loss [0-9.e+-]+, [0-9.]+ s' <<<"$out")" "3"

# 7. the source stays locked from the column checks to the end of the transaction:
#    a concurrent ALTER COLUMN ... TYPE waits instead of changing the keys mid-read
psql -X -qAt -d "$DB" >"$tmp/l.out" 2>&1 <<SQL &
BEGIN;
SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'lockm');
SELECT pg_sleep(2);
COMMIT;
SQL
lpid=$!
sleep 1
out=$(q "SET lock_timeout = '300ms'; ALTER TABLE small ALTER COLUMN user_id TYPE bigint" 2>&1)
if grep -q "lock timeout" <<<"$out"; then ok "ALTER COLUMN TYPE on the source waits for the training transaction"; else bad "ALTER COLUMN TYPE on the source waits for the training transaction" "$out"; fi
wait $lpid

# 8. REPEATABLE READ: a training whose snapshot predates a concurrent training of
#    the same model fails at once with a serialization failure (not after training)
psql -X -qAt -d "$DB" >"$tmp/rr1.out" 2>&1 <<SQL &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 16, iterations => 3, model => 'rrm');
SELECT pg_sleep(1);
COMMIT;
SQL
rr1=$!
sleep 0.3
t0=$(now)
out=$(psql -X -qAt -d "$DB" 2>&1 <<SQL
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM pg_class;
SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 16, iterations => 3, model => 'rrm');
COMMIT;
SQL
)
wait $rr1
if grep -q "could not serialize access due to a concurrent training" <<<"$out"; then ok "REPEATABLE READ: the second training of a model fails with a serialization failure"; else bad "REPEATABLE READ: the second training of a model fails with a serialization failure" "$out"; fi
check "REPEATABLE READ: the first training committed" "$(q "SELECT version FROM gpumf.models WHERE name = 'rrm'")" "1"

# 9. a large source is read by parallel workers, into the same model as one
#    reader (both trained on the CPU, whose factors do not depend on the order)
dbg() { PGOPTIONS="$PGOPTIONS -c client_min_messages=debug1" psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1" 2>&1; }
out=$(dbg "SET gpumf.device = cpu; SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'readpar')")
if grep -qE "read public.big with a scan of its own, [1-9][0-9]* parallel workers" <<<"$out"; then ok "a large table is read by parallel workers"; else bad "a large table is read by parallel workers" "$(grep 'gpumf: read' <<<"$out")"; fi
q "SET gpumf.device = cpu; SET gpumf.read_workers = 0; SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'readone')" >/dev/null
differ() {  # rows of one model's factor tables not in the other's, both ways
  q "SELECT (SELECT count(*) FROM (SELECT * FROM $1 EXCEPT ALL SELECT * FROM $2) a) + (SELECT count(*) FROM (SELECT * FROM $2 EXCEPT ALL SELECT * FROM $1) b)"
}
tp=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'readpar'")
to=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'readone'")
check "parallel and single readers train the same model" "$(differ ${tp% *} ${to% *}) $(differ ${tp#* } ${to#* })" "0 0"
q "SELECT gpumf_drop_model('readpar'), gpumf_drop_model('readone')" >/dev/null
# the index build of a factor table of a million rows or more asks for as
# many workers as the read had (the planner alone gives 1.2M users of 4
# factors 3: one more each time the table is three times 8 MB)
q "CREATE TABLE wide AS SELECT g AS user_id, g % 1000 AS item_id, 1.0::real AS value FROM generate_series(1, 1200000) g"
out=$(dbg "SET gpumf.device = cpu; SET gpumf.read_workers = 4; SET max_parallel_workers = 8; SELECT 1 FROM gpumf_train('wide', 'user_id', 'item_id', 'value', factors => 4, iterations => 1, model => 'wide')")
read=$(grep -oE "read public.wide with a scan of its own, [0-9]+ parallel workers" <<<"$out" | grep -oE "[0-9]+ parallel" | cut -d' ' -f1)
asked=$(grep -oE "_users_pkey\" on table \"[^\"]*\" with request for [0-9]+ parallel workers" <<<"$out" | grep -oE "[0-9]+ parallel" | cut -d' ' -f1)
if [ -n "$read" ] && [ "$read" -ge 2 ] && [ "${asked:-0}" = "$read" ]; then ok "the users' index build asks for the read's $read workers"
else bad "the users' index build asks for the read's workers" "read by ${read:-?}, index asked for ${asked:-?}: $(grep -E 'gpumf: read|request for' <<<"$out")"; fi
# the leader only merges (4 workers): a thread maps its arrays' pages ahead of its copies
check "the parallel read's arrays mapped ahead by a thread" "$(grep -oE "the arrays' pages mapped ahead by a thread \([1-9][0-9]* starts\)" <<<"$out" | grep -c .)" "1"
check "the settings of the index builds end with the training" "$(q "SET gpumf.read_workers = 4; SELECT 1 FROM gpumf_train('wide', 'user_id', 'item_id', 'value', factors => 4, iterations => 1, model => 'wide'); SHOW min_parallel_table_scan_size" | tail -1)" "8MB"
q "SELECT gpumf_drop_model('wide'); DROP TABLE wide" >/dev/null
# integer keys in the workers' raw range go to the leader as themselves, the
# others (negative, above it) through the workers' maps: keys of one kind
# only (d i: the leader loads the maps at once), both kinds in one column,
# text keys on the other side; the leader merging only (4 workers) and
# scanning too (1 worker): the same model as one reader each time
q "CREATE TABLE mixed AS SELECT CASE WHEN user_id % 7 = 0 THEN -user_id WHEN user_id % 11 = 0 THEN user_id::bigint * 1000000007 ELSE user_id END::bigint AS u, user_id AS d, item_id AS i, 'i' || item_id AS t, value FROM big"
for cols in "d i" "u i" "u t"; do
  set -- $cols
  for w in 0 4 1; do
    out=$(dbg "SET gpumf.device = cpu; SET gpumf.read_workers = $w; SELECT 1 FROM gpumf_train('mixed', '$1', '$2', 'value', factors => 8, iterations => 2, model => 'mixed$w')")
    [ $w = 0 ] || grep -qE "read public.mixed with a scan of its own, [1-9][0-9]* parallel workers" <<<"$out" || bad "mixed keys ($cols), $w workers: read in parallel" "$(grep 'gpumf: read' <<<"$out")"
  done
  for w in 4 1; do
    tp=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'mixed$w'")
    to=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'mixed0'")
    check "keys in and out of the raw range ($cols), $w parallel workers: the model of one reader" "$(differ ${tp% *} ${to% *}) $(differ ${tp#* } ${to#* })" "0 0"
  done
  check "keys in and out of the raw range ($cols): users and items" "$(q "SELECT n_users || ' ' || n_items FROM gpumf.models WHERE name = 'mixed4'")" "$(q "SELECT count(DISTINCT $1) || ' ' || count(DISTINCT $2) FROM mixed")"
  q "SELECT gpumf_drop_model('mixed0'), gpumf_drop_model('mixed4'), gpumf_drop_model('mixed1')" >/dev/null
done
q "DROP TABLE mixed"

# 10. serving from shared memory: one session reads a version into a shared
#     segment, another attaches to it; a retraining and a drop let it go
shared() { q "SELECT coalesce(string_agg(s.version::text, ','), 'none') FROM gpumf_shared_models() s JOIN gpumf.models m ON m.id = s.model_id WHERE m.name = 'm'"; }
q "SELECT 1 FROM gpumf_recommend('m', 5, 10)" >/dev/null   # publish the current version
v=$(q "SELECT version FROM gpumf.models WHERE name = 'm'")
check "the first session shares the version it read" "$(shared)" "$v"
out=$(dbg "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10)")
if grep -q "gpumf: model \"m\" version $v attached" <<<"$out"; then ok "a second session attaches to the shared version"; else bad "a second session attaches to the shared version" "$out"; fi
check "the attached session serves the same recommendations" "$(tail -1 <<<"$out")" "$(recs)"
old_recs=$(recs)
psql -X -qAt -d "$DB" >"$tmp/hold.out" 2>&1 <<SQL &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10);
SELECT pg_sleep(2);
SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10);
COMMIT;
SQL
hold=$!
sleep 0.5
q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'm')" >/dev/null
# no call serves it: a background worker reads the new version into shared
# memory once the training commits, and lets the replaced one go
for i in $(seq 1 100); do s=$(shared); [ "$s" = "$((v+1))" ] && break; sleep 0.05; done
check "a committed retraining: the new version shared before any call, the replaced one let go" "$s" "$((v+1))"
out=$(dbg "SELECT count(*) FROM gpumf_recommend('m', 5, 10)")
if grep -q "gpumf: model \"m\" version $((v+1)) attached" <<<"$out"; then ok "a session's first call after a retraining attaches"; else bad "a session's first call after a retraining attaches" "$out"; fi
q "BEGIN; SELECT 1 FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'm'); ROLLBACK" >/dev/null
sleep 0.5
check "a rolled-back retraining changes nothing shared" "$(shared) $(q "SELECT version FROM gpumf.models WHERE name = 'm'")" "$((v+1)) $((v+1))"
wait $hold
check "a snapshot that still sees the replaced version keeps serving it" "$(grep -v '^$' "$tmp/hold.out" | tr '\n' ' ')" "$old_recs $old_recs "
# a new model: read into shared memory when its training commits
# (gpumf.warm_new_models, the default), so that a session's first call attaches
q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'warmme')" >/dev/null
id=$(q "SELECT id FROM gpumf.models WHERE name = 'warmme'")
for i in $(seq 1 100); do s=$(q "SELECT count(*) FROM gpumf_shared_models() WHERE model_id = $id AND version = 1"); [ "$s" = 1 ] && break; sleep 0.05; done
check "a new model's first version is shared once its training commits, before any call" "$s" "1"
out=$(dbg "SELECT count(*) FROM gpumf_recommend('warmme', 5, 10)")
if grep -q 'gpumf: model "warmme" version 1 attached' <<<"$out"; then ok "a session's first call on a new model attaches"; else bad "a session's first call on a new model attaches" "$out"; fi
q "SELECT gpumf_drop_model('warmme')" >/dev/null
# the training reads its version into shared memory from its own arrays,
# not from the table it has just written: the same recommendations as the
# version read from its table (a session with gpumf.shared_models off), for
# integer and uuid item keys, without and with item biases (trained in this
# session: on a GPU machine the training service would train these small ones,
# and its factors are in its own segment)
q "CREATE TABLE uuid_items AS SELECT user_id, md5(item_id::text)::uuid AS item, value FROM small"
for spec in "small item_id als gpumf_recommend" "uuid_items item als gpumf_recommend_uuid" "small item_id als_explicit gpumf_recommend"; do
  set -- $spec
  out=$(dbg "SET gpumf.training_service = off; SELECT 1 FROM gpumf_train('$1', 'user_id', '$2', 'value', factors => 8, iterations => 3, algorithm => '$3', model => 'athand')")
  if grep -q 'gpumf: model "athand" version 1 read into shared memory in .* items copied from the training in' <<<"$out"; then
    ok "a training ($1, $3) shares its version from its own arrays"
  else bad "a training ($1, $3) shares its version from its own arrays" "$(grep 'shared memory' <<<"$out")"; fi
  r="SELECT count(*) || ' ' || string_agg(u || ':' || r.item::text || '/' || r.score::text, ',') FROM generate_series(1, 40) u, LATERAL $4('athand', u, 10) r"
  shared_recs=$(q "$r" 2>&1)
  case "$shared_recs" in 400\ *) ok "$4 of a version shared from the training's arrays ($1, $3): 10 items for each of 40 users";;
    *) bad "$4 of a version shared from the training's arrays ($1, $3): 10 items for each of 40 users" "$shared_recs";; esac
  check "a version shared from the training's arrays ($1, $3): the recommendations of its table" \
    "$shared_recs" "$(PGOPTIONS="$PGOPTIONS -c gpumf.shared_models=off" q "$r" 2>&1)"
  q "SELECT gpumf_drop_model('athand')" >/dev/null
done
q "DROP TABLE uuid_items"
# with gpumf.warm_new_models off, a model nobody serves takes no shared memory
PGOPTIONS="$PGOPTIONS -c gpumf.warm_new_models=off" q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'dropme')" >/dev/null
id=$(q "SELECT id FROM gpumf.models WHERE name = 'dropme'")
sleep 0.5
check "gpumf.warm_new_models = off: a model nobody serves takes no shared memory when trained" "$(q "SELECT count(*) FROM gpumf_shared_models() WHERE model_id = $id")" "0"
q "SELECT 1 FROM gpumf_recommend('dropme', 5, 10)" >/dev/null
check "a dropped model's version is no longer shared" "$(q "SELECT gpumf_drop_model('dropme'); SELECT count(*) FROM gpumf_shared_models() WHERE model_id = $id")" "$(printf 't\n0')"

# the versions a dropped database shared do not keep the registry full: a
# scratch database fills it (130 models served), is dropped, and a new model
# here is still shared when its training commits
S=${DB}_scratch
dropdb --if-exists --force "$S" >/dev/null 2>&1; createdb "$S"
filled=$({
  echo "CREATE EXTENSION gpumf;"
  echo "CREATE TABLE t AS SELECT user_id, item_id, value FROM gpumf_synthetic(40, 40, 400, seed => 1, min_per_user => 5, clusters => 4);"
  for i in $(seq 1 130); do echo "SELECT 1 FROM gpumf_train('t', 'user_id', 'item_id', 'value', factors => 2, iterations => 1, model => 'r$i');"; done
  echo "SELECT count(*) FROM generate_series(1, 130) i, LATERAL gpumf_recommend('r' || i, 1, 1);"
  echo "SELECT count(*) < 130 FROM gpumf_shared_models();"
} | PGOPTIONS="$PGOPTIONS -c gpumf.warm_new_models=off -c client_min_messages=warning" psql -X -qAt -v ON_ERROR_STOP=1 -d "$S" 2>&1 | tail -1)
check "a scratch database's 130 served models fill the registry of shared versions" "$filled" "t"
dropdb --force "$S"
q "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'afterdrop')" >/dev/null
id=$(q "SELECT id FROM gpumf.models WHERE name = 'afterdrop'")
for i in $(seq 1 100); do s=$(q "SELECT count(*) FROM gpumf_shared_models() WHERE model_id = $id"); [ "$s" = 1 ] && break; sleep 0.05; done
check "a dropped database's shared versions are released when the registry needs room" "$s" "1"
q "SELECT gpumf_drop_model('afterdrop')" >/dev/null

# 11. a cancel that lands while the factor tables are written stops within 1 s
#     and leaves the model as it was (a million users: the store takes a while)
q "CREATE TABLE wide AS SELECT u AS user_id, u % 1000 AS item_id FROM generate_series(1, 1000000) u"
q "SELECT 1 FROM gpumf_train('small', 'user_id', 'item_id', factors => 4, iterations => 1, model => 'widem')" >/dev/null
before=$(state widem)
psql -X -qAt -d "$DB" -v ON_ERROR_STOP=1 >"$tmp/s.out" 2>&1 <<SQL &
SET application_name = 'gpumf_store_cancel';
SELECT gpumf_train('wide', 'user_id', 'item_id', factors => 32, iterations => 1, model => 'widem');
SQL
spid=$!
# the store has begun when the training holds a lock on a table nobody else can see yet
store_seen=0
for i in $(seq 1 3000); do
  nl=$(q "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE a.application_name = 'gpumf_store_cancel' AND l.locktype = 'relation'
            AND l.mode = 'AccessExclusiveLock' AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = l.relation)")
  if [ "$nl" != 0 ]; then store_seen=1; break; fi
  kill -0 $spid 2>/dev/null || break
  sleep 0.01
done
t0=$(now)
q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'gpumf_store_cancel'" >/dev/null
wait $spid
dt=$(awk "BEGIN { printf \"%.3f\", $(now) - $t0 }")
check "the cancel was sent while the factor tables were being written" "$store_seen" "1"
if grep -q "canceling statement due to user request" "$tmp/s.out"; then ok "cancel during the store: canceled"; else bad "cancel during the store: canceled" "$(cat "$tmp/s.out")"; fi
if awk "BEGIN { exit !($dt < 1.0) }"; then ok "cancel during the store: stopped within 1 s (${dt}s)"; else bad "cancel during the store: stopped within 1 s" "${dt}s"; fi
check "cancel during the store: model unchanged" "$(state widem)" "$before"
q "SELECT gpumf_drop_model('widem')" >/dev/null
q "DROP TABLE wide"

# 12. model history: versions kept, switched under concurrent readers
source "$(dirname "$0")/history.sh"

# 13. the catalog version the library serves, checked again after another
#     session's DROP, CREATE or ALTER EXTENSION
source "$(dirname "$0")/catalog_version.sh"

# 6. models survive pg_dump / restore
pg_dump -Fc -d "$DB" -f "$tmp/dump" 2>"$tmp/dump.err" || cat "$tmp/dump.err"
dropdb --if-exists "${DB}_restored" >/dev/null 2>&1; createdb "${DB}_restored"
pg_restore -d "${DB}_restored" "$tmp/dump" 2>"$tmp/restore.err"; rc=$?
check "pg_restore succeeds" "$rc" "0"
[ $rc = 0 ] || cat "$tmp/restore.err"
src=$(q "SELECT string_agg(name || ':' || version || ':' || final_loss, ',' ORDER BY name) FROM gpumf.models")
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT string_agg(name || ':' || version || ':' || final_loss, ',' ORDER BY name) FROM gpumf.models")
check "the model catalog is restored" "$dst" "$src"
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10)" 2>&1)
check "restored models serve the same recommendations" "$dst" "$(recs)"
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT nextval('gpumf.models_id_seq') > (SELECT max(id) FROM gpumf.models)")
check "the model id sequence is restored" "$dst" "t"
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT string_agg(version || ':' || tables_exist, ' ') FROM gpumf_model_versions('hv')")
check "kept versions are restored with their tables" "$dst" "3:true 1:true"
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT version FROM gpumf_use_version('hv', 1)" -c "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('hv', 5, 10)" | tr '\n' ' ')
check "a restored kept version can be made current and serves as before" "$dst" "1 $hr1 "
# the source is pinned by OID, dumped as its name: the restore pins the restored table
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT source_relid::oid = 'public.small'::regclass::oid FROM gpumf.models WHERE name = 'm'")
check "the model's source pin is restored (to the restored table)" "$dst" "t"
dst=$(psql -X -qAt -d "${DB}_restored" -c "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10, recompute => true)" 2>&1)
check "restored models fold users in from the restored source as before" "$dst" \
  "$(q "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('m', 5, 10, recompute => true)")"
dropdb "${DB}_restored"

# 9. gpumf_cg_solve stops within 1 s of a cancel or a statement_timeout: a
#    2-D Poisson system (300 x 300 grid, 90,000 rows) with tolerance 0 runs
#    for max_iterations, far longer than the test waits
q "CREATE TABLE poisson AS
     SELECT (gx - 1) * 300 + gy AS r, (gx - 1) * 300 + gy AS c, 4.0::float8 AS v
       FROM generate_series(1, 300) gx, generate_series(1, 300) gy
     UNION ALL SELECT (gx - 1) * 300 + gy + 1, (gx - 1) * 300 + gy, -1
       FROM generate_series(1, 300) gx, generate_series(1, 299) gy
     UNION ALL SELECT gx * 300 + gy, (gx - 1) * 300 + gy, -1
       FROM generate_series(1, 299) gx, generate_series(1, 300) gy"
solve_sql="SELECT converged FROM gpumf_cg_solve('poisson', 'r', 'c', 'v', array_fill(1::float8, ARRAY[90000]), tolerance => 0, max_iterations => 2000000000)"
#    A small solve first in the same session: the CUDA module's first load in
#    a backend (and, for a module without machine code for the card, the
#    driver's compilation of its PTX) is one driver call that a cancel waits
#    for; what this checks is the solve loop
psql -X -qAt -d "$DB" -v ON_ERROR_STOP=1 >"$tmp/cg.out" 2>&1 <<SQL &
SET application_name = 'gpumf_cg_cancel';
SELECT converged FROM gpumf_cg_solve('poisson', 'r', 'c', 'v', array_fill(1::float8, ARRAY[90000]), max_iterations => 5);
$solve_sql;
SQL
pid=$!
sleep 3
t0=$(now)
q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'gpumf_cg_cancel'" >/dev/null
wait $pid
dt=$(awk "BEGIN { printf \"%.3f\", $(now) - $t0 }")
out=$(cat "$tmp/cg.out")
if grep -q "canceling statement due to user request" <<<"$out"; then ok "gpumf_cg_solve: canceled"; else bad "gpumf_cg_solve: canceled" "$out"; fi
if awk "BEGIN { exit !($dt < 1.0) }"; then ok "gpumf_cg_solve: stopped within 1 s of the cancel (${dt}s)"; else bad "gpumf_cg_solve: stopped within 1 s of the cancel" "${dt}s"; fi
t0=$(now)
out=$(q "SET statement_timeout = '3s'; $solve_sql" 2>&1)
dt=$(awk "BEGIN { printf \"%.3f\", $(now) - $t0 }")
if grep -q "statement timeout" <<<"$out"; then ok "gpumf_cg_solve: statement_timeout cancels"; else bad "gpumf_cg_solve: statement_timeout cancels" "$out"; fi
if awk "BEGIN { exit !($dt < 4.0) }"; then ok "gpumf_cg_solve: stopped within 1 s of the timeout (${dt}s for 3s)"; else bad "gpumf_cg_solve: stopped within 1 s of the timeout" "${dt}s"; fi
check "the backend still works after the canceled solves" "$(q "SELECT converged FROM gpumf_cg_solve('poisson', 'r', 'c', 'v', array_fill(1::float8, ARRAY[90000]), tolerance => 1e-6)")" "t"

# 10. the training service: a worker that keeps the GPU set up between
#     trainings (gpumf.training_service = always sends CPU trainings to it too,
#     so that this runs without a GPU)
svc="SET gpumf.training_service = always;"
svcpid() { q "SELECT coalesce(string_agg(pid::text, ','), 'none') FROM pg_stat_activity WHERE backend_type = 'gpumf training service'"; }
out=$(dbg "$svc SET gpumf.device = cpu; SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'svc1')")
if grep -q "trained by the training service" <<<"$out"; then ok "the training service trains"; else bad "the training service trains" "$out"; fi
p1=$(svcpid)
if [[ "$p1" =~ ^[0-9]+$ ]]; then ok "pg_stat_activity lists the service's worker"; else bad "pg_stat_activity lists the service's worker" "$p1"; fi
q "SET gpumf.device = cpu; SET gpumf.training_service = off; SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'svc2')" >/dev/null
t1=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'svc1'")
t2=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = 'svc2'")
check "the service trains the same model as the session itself" "$(differ ${t1% *} ${t2% *}) $(differ ${t1#* } ${t2#* })" "0 0"
out=$(PGOPTIONS="-c gpumf.device=$DEV -c gpumf.training_service=always" psql -X -qAt -d "$DB" -c "SELECT 1 FROM gpumf_train('small', 'user_id', 'item_id', factors => 4, iterations => 3, model => 'p')" 2>&1)
check "the service's progress NOTICEs reach the client, one per iteration" "$(grep -cE 'NOTICE:  iteration [0-9]+/3: loss [0-9.e+-]+, [0-9.]+ s' <<<"$out")" "3"
out=$(dbg "$svc SET gpumf.device = cpu; SELECT (metrics->'holdout'->>'best_iteration') || ' ' || round(final_loss::numeric, 9) FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 6, holdout => 0.2, model => 'svch1')")
out2=$(q "SET gpumf.device = cpu; SELECT (metrics->'holdout'->>'best_iteration') || ' ' || round(final_loss::numeric, 9) FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 6, holdout => 0.2, model => 'svch2')")
check "a held-out training on the service stops and scores as in the session" "$(tail -1 <<<"$out")" "$out2"
cancel_test "training service: cancel" "$svc" 64
check "training service: the worker survives a canceled training" "$(svcpid)" "$p1"
# two sessions at once: one trains on the service, the other in its own process
# (once the worker is idle again after the canceled training: a session that
# finds it busy trains in its own process)
for _ in $(seq 1 100); do
  [ "$(q "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'gpumf training service' AND state = 'active'")" = 0 ] && { sleep 0.3; break; }
  sleep 0.1
done
for s in 1 2; do
  dbg "$svc SET gpumf.device = cpu; SELECT 1 FROM gpumf_train('big', 'user_id', 'item_id', 'value', factors => 16, iterations => 12, model => 'svcc$s')" >"$tmp/s$s.out" 2>&1 &
  eval "sp$s=\$!"
done
wait $sp1; r1=$?; wait $sp2; r2=$?
check "training service: two concurrent trainings both succeed" "$r1$r2" "00"
check "training service: one of them on the service, the other in its session" "$(cat "$tmp/s1.out" "$tmp/s2.out" | grep -c 'trained by the training service') $(cat "$tmp/s1.out" "$tmp/s2.out" | grep -c 'service is busy')" "1 1"
# the worker shut down during a training: an ERROR, the model unchanged, the next training starts a new one
before=$(state bigm)
psql -X -qAt -d "$DB" -v ON_ERROR_STOP=1 >"$tmp/k.out" 2>&1 <<SQL &
$svc
SELECT gpumf_train('big', 'user_id', 'item_id', 'value', factors => 64, iterations => 100000, model => 'bigm');
SQL
pid=$!
sleep 4
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'gpumf training service'" >/dev/null
wait $pid
if grep -q "the training service was shut down during the training" "$tmp/k.out"; then ok "training service: its shutdown fails the training with a clear ERROR"; else bad "training service: its shutdown fails the training with a clear ERROR" "$(cat "$tmp/k.out")"; fi
check "training service: model unchanged after its shutdown" "$(state bigm)" "$before"
# the next training once the stopped worker has exited (a training that starts
# while it is still exiting trains in its own session)
for _ in $(seq 1 100); do
  [ "$(q "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'gpumf training service'")" = 0 ] && break
  sleep 0.1
done
out=$(dbg "$svc SET gpumf.device = cpu; SELECT 1 FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'svc3')")
p2=$(svcpid)
if grep -q "trained by the training service" <<<"$out" && [[ "$p2" =~ ^[0-9]+$ ]] && [ "$p2" != "$p1" ]; then ok "training service: the next training starts a new worker"; else bad "training service: the next training starts a new worker" "$p1 -> $p2: $out"; fi
# DROP DATABASE (which waits for every process to absorb a barrier) does not
# wait for the worker, idle or training
createdb "${DB}_scratch"
psql -X -qAt -d "$DB" -v ON_ERROR_STOP=1 >"$tmp/d.out" 2>&1 <<SQL &
SET application_name = 'gpumf_svc_drop';
$svc
SELECT gpumf_train('big', 'user_id', 'item_id', 'value', factors => 64, iterations => 100000, model => 'bigm');
SQL
pid=$!
sleep 4
t0=$(now)
# (it forces a checkpoint: seconds; the training runs for minutes)
timeout 30 dropdb "${DB}_scratch"; rc=$?
dt=$(awk "BEGIN { printf \"%.3f\", $(now) - $t0 }")
running=$(q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'gpumf_svc_drop' AND state = 'active'")
if [ $rc = 0 ] && [ "$running" = 1 ]; then ok "training service: DROP DATABASE does not wait for a training on it (${dt}s)"; else bad "training service: DROP DATABASE does not wait for a training on it" "rc $rc, ${dt}s, training still running: $running"; fi
q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'gpumf_svc_drop'" >/dev/null
wait $pid
# it exits after gpumf.training_service_idle_timeout
psql -X -qAt -d "$DB" -c "LOAD 'gpumf'" -c "ALTER SYSTEM SET gpumf.training_service_idle_timeout = 1" -c "SELECT pg_reload_conf()" >/dev/null
sleep 3
check "training service: the worker exits when idle for gpumf.training_service_idle_timeout" "$(svcpid)" "none"
psql -X -qAt -d "$DB" -c "LOAD 'gpumf'" -c "ALTER SYSTEM RESET gpumf.training_service_idle_timeout" -c "SELECT pg_reload_conf()" >/dev/null

dropdb "$DB"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
