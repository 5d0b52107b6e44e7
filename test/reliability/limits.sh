#!/bin/bash
# Data-dependent sizes at the limits of every key type: gpumf at the ends of
# what a smallint, integer, bigint, text, varchar, char(n) or uuid key column
# can hold, where one bigint key of 2^62 once hung a backend that nothing but
# SIGKILL stopped (the dense-key array's growth doubled an int64 until it
# overflowed).
#
#   bash test/reliability/limits.sh             # CI and long run alike (about a minute)
#   LIMITS_ROWS=8000000 bash test/reliability/limits.sh   # a longer read to cancel
#
# For each key type, a table whose user and item keys are that type's
# extremes (int2/int4/int8 min and max, their neighbours, 2^15, 2^16, 2^26
# (the dense array's limit), 2^31, 2^62, -2^62, -2^63; for text: the empty
# string, a blank, a 100 kB key, keys that read as numbers, non-ASCII; char(n)
# with trailing blanks; uuid: all zeros, all ones), and a table with one
# extreme key per row alone.  Every function that maps keys runs on them as a
# role without privileges beyond its own tables would: gpumf_train (implicit
# and explicit, read directly, by parallel workers and through a view),
# gpumf_recommend for every extreme user, gpumf_predict, gpumf_split (by
# row and by user), gpumf_evaluate on a temporary table, gpumf_tune and
# gpumf_recommend_all with a users table that has keys the model lacks.
# Checks: each returns within its time (statement_timeout 30 s, and the
# shell's `timeout` around each psql, so that a hang fails the test instead
# of hanging it), with the right counts, and the factor tables hold exactly
# the source's keys (the extremes survive the round trip).  Then a read that
# maps LIMITS_ROWS (4,000,000) sparse bigint keys is cancelled with
# pg_cancel_backend and with statement_timeout: the statement stops within
# 1 s with the cancel's message, and no model is stored.
# Needs a superuser connection (PGUSER) and password-less logins (trust, as
# test/pgenv.sh sets up).  Prints "ok N - ..." lines and "N passed, M failed".
set -u
DB=gpumf_limits
ROLE=gpumf_limits_role
ROWS=${LIMITS_ROWS:-4000000}
T=${LIMITS_TIMEOUT:-120}          # seconds one psql may take before it counts as hung
export PGOPTIONS="-c gpumf.device=cpu -c gpumf.progress=off -c client_min_messages=warning -c statement_timeout=30s"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$(echo "$2" | head -c 600)'"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t_start=$(date +%s)
now() { date +%s.%N; }
fsub() { awk "BEGIN { printf \"%.3f\", $1 - $2 }"; }

# as the superuser; as the role (errors on stdout); both under the shell's timeout
q() { timeout "$T" psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
as_role() { timeout "$T" psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -U "$ROLE" 2>&1; }
hung() { [ "$1" = 124 ] && echo " (HUNG: killed by timeout after $T s)"; }

psql -X -qAt -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
psql -X -qAt -d postgres -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1
psql -X -qAt -d postgres -c "CREATE ROLE $ROLE LOGIN" >/dev/null &&
  psql -X -qAt -d postgres -c "CREATE DATABASE $DB OWNER $ROLE" >/dev/null &&
  q "CREATE EXTENSION gpumf" >/dev/null || { echo "0 passed, 1 failed"; exit 1; }

# ---------------------------------------------------------------- the keys
# type | the SQL array of its extremes | the type models store it as
keys_int2="ARRAY[-32768, -32767, -1, 0, 1, 255, 32766, 32767]::int2[]"
keys_int4="ARRAY[-2147483648, -2147483647, -1, 0, 32768, 65535, 65536, 67108863, 67108864, 2147483646, 2147483647]::int4[]"
keys_int8="ARRAY[-9223372036854775808, -9223372036854775807, -4611686018427387904, -1, 0, 65536, 67108863, 67108864, 2147483648, 4611686018427387903, 4611686018427387904, 4611686018427387905, 9223372036854775806, 9223372036854775807]::int8[]"
keys_text="ARRAY['', ' ', 'a', 'a ', '0', '-9223372036854775808', '9223372036854775807', 'é', E'\\t', repeat('k', 100000), repeat('k', 99999) || 'l']::text[]"
keys_varchar="ARRAY['', 'x', 'x ', '00000000-0000-0000-0000-000000000000', repeat('v', 20000)]::varchar[]"
keys_bpchar="ARRAY['', ' ', 'a', 'ab', 'zzzzzzzzzz']::char(10)[]"
keys_uuid="ARRAY['00000000-0000-0000-0000-000000000000', '00000000-0000-0000-0000-000000000001', '7fffffff-ffff-ffff-ffff-ffffffffffff', '80000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff']::uuid[]"
coltype() { case $1 in bpchar) echo "char(10)";; *) echo "$1";; esac; }
# a key of the type that no model here has
unknown() { case $1 in int*) echo "12345::$1";; uuid) echo "'12345678-1234-1234-1234-123456789abc'::uuid";; *) echo "'unknown'::$(coltype "$1")";; esac; }
stored() { case $1 in varchar|bpchar) echo text;; *) echo "$1";; esac; }
TYPES="int2 int4 int8 text varchar bpchar uuid"

# tables: k_<t> (k, ord) the extremes; s_<t> (u, i, v) pairs of them, two of
# every three (every user has rows and unseen items)
for t in $TYPES; do
  arr=keys_$t
  cat <<SQL
CREATE TABLE k_$t AS SELECT k, ord FROM unnest(${!arr}) WITH ORDINALITY AS x(k, ord);
CREATE TABLE s_$t AS SELECT a.k AS u, b.k AS i, ((a.ord * 7 + b.ord * 3) % 5 + 1)::float8 AS v
  FROM k_$t a, k_$t b WHERE (a.ord + b.ord) % 3 <> 0;
SQL
done | as_role >"$tmp/setup" || { cat "$tmp/setup"; echo "0 passed, 1 failed"; exit 1; }

# ---------------------------------------------------------------- every function, each type
for t in $TYPES; do
  st=$(stored "$t")
  # distinct as stored: char(n) keys lose their trailing blanks ('' and ' ' are one key)
  nk=$(q "SELECT count(DISTINCT k::$st) FROM k_$t")
  t0=$(now)
  as_role >"$tmp/$t.out" <<SQL
\\pset null NULL
SELECT 'train|' || (n_users = $nk AND n_items = $nk)::text || '|' || nnz FROM gpumf_train('s_$t', 'u', 'i', factors => 4, iterations => 2, model => 'm_$t');
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'm_$t' \\gset
SELECT 'users|' || (SELECT count(*) FROM (SELECT u::$st FROM s_$t EXCEPT SELECT key FROM :ut) a)
  || '|' || (SELECT count(*) FROM (SELECT key FROM :ut EXCEPT SELECT u::$st FROM s_$t) b);
SELECT 'items|' || (SELECT count(*) FROM (SELECT i::$st FROM s_$t EXCEPT SELECT key FROM :it) a)
  || '|' || (SELECT count(*) FROM (SELECT key FROM :it EXCEPT SELECT i::$st FROM s_$t) b);
-- what serving must give: the users with an unseen item, and min(2, unseen) rows each
CREATE TEMP TABLE unseen AS SELECT u, (SELECT count(DISTINCT i::$st) FROM s_$t) - count(DISTINCT i::$st) AS c
  FROM (SELECT u::$st AS u, i FROM s_$t) s GROUP BY u;
SELECT 'recommend|' || count(*) FILTER (WHERE c > 0) || '|' || (SELECT count(*) FILTER (WHERE c > 0) FROM unseen)
  FROM (SELECT DISTINCT ON (k::$st) (SELECT count(*) FROM gpumf_recommend('m_$t', k.k, n => 3, exclude_seen => true, item_type => NULL::$st)) c FROM k_$t k) x;
SELECT 'explicit|' || (n_users = $nk)::text FROM gpumf_train('s_$t', 'u', 'i', 'v', factors => 4, iterations => 2, algorithm => 'als_explicit', model => 'e_$t');
SELECT 'predict|' || count(DISTINCT k::$st) FILTER (WHERE gpumf_predict('e_$t', k.k, k.k) IS NOT NULL) FROM k_$t k;
SELECT 'split_user|' || (train_rows + test_rows = (SELECT count(*) FROM s_$t))::text || '|' || (test_rows > 0)::text
  FROM gpumf_split('s_$t', 0.3, 7, by => 'user', user_col => 'u', train_table => 'tr_$t', test_table => 'te_$t');
SELECT 'split_row|' || (train_rows + test_rows = (SELECT count(*) FROM s_$t))::text FROM gpumf_split('s_$t', 0.5, -9223372036854775808);
CREATE TEMP TABLE ev AS SELECT * FROM s_$t;
SELECT 'evaluate|' || users || '|' || skipped_users FROM gpumf_evaluate('m_$t', 'ev', k => 3);
SELECT 'evaluate_explicit|' || (rmse IS NOT NULL)::text FROM gpumf_evaluate('e_$t', 'ev', value_col => 'v');
SELECT 'tune|' || count(*) FROM gpumf_tune('s_$t', 'u', 'i', budget => 2, iterations => 2, factors => '{4}', holdout => 0.3);
CREATE TEMP TABLE want_users AS SELECT k FROM k_$t UNION ALL SELECT NULL UNION ALL SELECT $(unknown "$t");
SELECT 'batch|' || scored_users || '|' || (rows_written = (SELECT sum(least(2, c)) FROM unseen))::text || '|' || unknown_users FROM gpumf_recommend_all('m_$t', 2, 'ra_$t', users => 'want_users', user_col => 'k');
SELECT 'batch_rows|' || count(DISTINCT "user") FROM ra_$t;
SQL
  rc=$?
  dt=$(fsub "$(now)" "$t0")
  out=$(cat "$tmp/$t.out")
  get() { grep "^$1|" <<<"$out" | head -1 | cut -d'|' -f2-; }
  if [ $rc != 0 ]; then bad "$t keys: every function ran ($dt s)$(hung $rc)" "$(grep -v '^[a-z_]*|' <<<"$out" | head -5)"
  else ok "$t keys: every function ran within its time ($dt s)"; fi
  check "$t keys: gpumf_train maps each extreme user and item once" "$(get train | cut -d'|' -f1)" "true"
  check "$t keys: the users table holds exactly the source's user keys" "$(get users)" "0|0"
  check "$t keys: the items table holds exactly the source's item keys" "$(get items)" "0|0"
  rec=$(get recommend)
  check "$t keys: gpumf_recommend serves every extreme user with an unseen item" "$rec" "${rec#*|}|${rec#*|}"
  check "$t keys: explicit ALS and gpumf_predict on every extreme" "$(get explicit)|$(get predict)" "true|$nk"
  check "$t keys: gpumf_split by user and by row" "$(get split_user)|$(get split_row)" "true|true|true"
  check "$t keys: gpumf_evaluate on a temporary table" "$(get evaluate)" "$nk|0"
  check "$t keys: gpumf_evaluate of the explicit model" "$(get evaluate_explicit)" "true"
  check "$t keys: gpumf_tune" "$(get tune)" "2"
  check "$t keys: gpumf_recommend_all with a users table (one key unknown)" "$(get batch)|$(get batch_rows)" "$nk|true|1|${rec#*|}"
done

# ------------------------------------------- each extreme alone, three ways of reading
# one row per extreme bigint (the issue's example: one key of 2^62), read
# directly, by parallel workers, through a view
cat <<'SQL' | as_role >"$tmp/one.out"
CREATE TABLE one (u bigint, i int);
CREATE VIEW one_v AS SELECT * FROM one;
SQL
one_ok=0; one_n=0; one_bad=""
for key in 4611686018427387904 -9223372036854775808 9223372036854775807 67108864 67108863 2147483648 -1 0; do
  for how in direct workers view; do
    src=one; setting="SET gpumf.read_workers = 0;"
    [ $how = workers ] && setting="SET gpumf.read_workers = 2; SET max_parallel_workers = 4;"
    [ $how = view ] && src=one_v
    one_n=$((one_n + 1))
    out=$(as_role <<SQL
TRUNCATE one; INSERT INTO one VALUES ($key, 1), ($key, 2147483647);
$setting
SELECT n_users || '|' || n_items FROM gpumf_train('$src', 'u', 'i', factors => 2, iterations => 1, model => 'one');
SELECT user_table AS ut FROM gpumf.models WHERE name = 'one' \gset
SELECT key FROM :ut;
SQL
)
    rc=$?
    if [ $rc = 0 ] && [ "$out" = "$(printf '1|2\n%s' "$key")" ]; then one_ok=$((one_ok + 1))
    else one_bad="$one_bad [$key $how rc=$rc$(hung $rc): $(echo "$out" | head -2 | tr '\n' ' ')]"; fi
  done
done
check "one extreme bigint key alone (8 keys; direct, parallel workers, view): trained, key kept" "$one_ok$one_bad" "$one_n"

# ------------------------------------------------ a cancel while keys are mapped
q "CREATE UNLOGGED TABLE big AS SELECT ((pg_catalog.hashint8(g)::int8 << 20) + g) AS u, (g % 50000)::int4 AS i FROM generate_series(1, $ROWS) g; ANALYZE big; GRANT SELECT ON big TO $ROLE" >/dev/null ||
  bad "the large table was created"
start_read() {  # $1: settings; starts the training in the background; sets tpid, tstart
  rm -f "$tmp/c.out"
  tstart=$(now)
  { timeout "$T" psql -X -qAt -d "$DB" -U "$ROLE" -c "$1" \
      -c "SELECT 'PID|' || pg_backend_pid()" \
      -c "SELECT 'DONE|' || nnz FROM gpumf_train('big', 'u', 'i', factors => 2, iterations => 1, model => 'big')" >"$tmp/c.out" 2>&1; echo "rc=$?" >>"$tmp/c.out"; } &
  tpid=$!
}
bpid_of() { for _ in $(seq 1 100); do p=$(grep '^PID|' "$tmp/c.out" 2>/dev/null | cut -d'|' -f2); [ -n "$p" ] && { echo "$p"; return; }; sleep 0.05; done; }
stored_model() { q "SELECT count(*) FROM gpumf.models WHERE name = 'big'"; }

start_read "SET gpumf.read_workers = 0"
bpid=$(bpid_of)
sleep 0.5
tc=$(now)
q "SELECT pg_cancel_backend(${bpid:-0})" >/dev/null
wait $tpid
dt=$(fsub "$(now)" "$tc")
out=$(cat "$tmp/c.out")
if grep -q "canceling statement due to user request" <<<"$out"; then ok "pg_cancel_backend while $ROWS keys are mapped: canceled"
else bad "pg_cancel_backend while $ROWS keys are mapped: canceled" "$out"; fi
if awk "BEGIN { exit !($dt < 1.0) }"; then ok "pg_cancel_backend: stopped within 1 s (${dt} s)"; else bad "pg_cancel_backend: stopped within 1 s" "${dt} s"; fi
check "pg_cancel_backend: no model stored" "$(stored_model)" "0"

for ms in 700 1500; do
  start_read "SET statement_timeout = $ms"
  wait $tpid
  dt=$(fsub "$(fsub "$(now)" "$tstart")" "$(awk "BEGIN { print $ms / 1000 }")")
  out=$(cat "$tmp/c.out")
  if grep -q "canceling statement due to statement timeout" <<<"$out"; then ok "statement_timeout = $ms ms on $ROWS keys: canceled"
  else bad "statement_timeout = $ms ms on $ROWS keys: canceled" "$out"; fi
  # from psql's start (connecting included): an upper bound
  if awk "BEGIN { exit !($dt < 1.0) }"; then ok "statement_timeout = $ms ms: stopped within 1 s of it (${dt} s)"; else bad "statement_timeout = $ms ms: stopped within 1 s of it" "${dt} s"; fi
  check "statement_timeout = $ms ms: no model stored" "$(stored_model)" "0"
done

# the models first (their shared segments), then the database and the role
q "SELECT count(gpumf_drop_model(name)) FROM gpumf.models" >/dev/null
psql -X -qAt -d postgres -c "DROP DATABASE $DB" >/dev/null
psql -X -qAt -d postgres -c "DROP ROLE $ROLE" >/dev/null
echo "# $(( $(date +%s) - t_start )) s"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
