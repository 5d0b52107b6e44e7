#!/bin/bash
# Sources on other servers: gpumf_train reads its source through the
# executor, so a partitioned table whose partitions are postgres_fdw foreign
# tables on other PostgreSQL servers is a source like any other.  This starts
# two more throw-away clusters of the same PostgreSQL (the "shards"), puts
# half of the users' rows on each, and on the server under test (PGHOST,
# PGPORT, as test/pgenv.sh sets up) makes
#   fdw_src     a table partitioned by user, its two partitions foreign tables
#               of the shards (postgres_fdw, async_capable on: the Append
#               reads both shards at once)
#   local_src   the same rows in one local table
# Checks: a model trained from fdw_src equals the one trained from local_src
# (the same keys, nnz, loss and top-10 lists, same seed); an ordinary role
# trains from it through its own user mapping (its rights reach the shards,
# and the model is its own); a role without a user mapping gets
# postgres_fdw's error and no model; the foreign server's connection
# options are never copied into the catalog.  Then prints the read rates
# (rows a second of the read phase, from gpumf.models) of the local table,
# of the shards with async_capable on and with it off.
#
#   bash test/reliability/fdw.sh                  # CI: 300,000 rows
#   FDW_ROWS=20000000 bash test/reliability/fdw.sh   # the read rates on more rows
#
# Needs postgres_fdw in the server's PostgreSQL (contrib: Debian's
# postgresql-15 has it), a superuser connection and password-less logins
# (trust, as test/pgenv.sh sets up); run as root it starts the shards as user
# postgres.  Without postgres_fdw it says so and runs nothing.  Prints
# "ok N - ..." lines and "N passed, M failed".
set -u
ROWS=${FDW_ROWS:-300000}
DB=gpumf_fdw
ROLE=gpumf_fdw_role
NOMAP=gpumf_fdw_nomap
BASE=${FDW_PORT_BASE:-$(( ${PGPORT:-5499} + 120 ))}
DIR=${FDW_DIR:-/tmp/gpumf-fdw}
export PGOPTIONS="-c gpumf.device=cpu -c gpumf.progress=off -c client_min_messages=warning"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$(echo "$2" | head -c 600)'"; fi; }
q()  { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
qs() { psql -X -qAt -v ON_ERROR_STOP=1 -h /tmp -p "$1" -d postgres -U postgres -c "$2"; }

if [ "$(psql -X -qAt -d postgres -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'postgres_fdw'")" != 1 ]; then
  echo "# postgres_fdw is not in this PostgreSQL ($(psql -X -qAt -d postgres -c 'SHOW server_version')): not run"
  echo "0 passed, 0 failed"; exit 0
fi
bindir=$(dirname "$(command -v pg_ctl)")
if [ "$(id -u)" = 0 ]; then as_owner() { su postgres -s /bin/bash -c "cd / && $*"; }; else as_owner() { bash -c "$*"; }; fi

stop_shards() {
  for s in 1 2; do
    [ -f "$DIR/$s/postmaster.pid" ] && as_owner "$bindir/pg_ctl -D $DIR/$s -m immediate -w stop" >/dev/null 2>&1
  done
}
trap 'stop_shards; psql -X -qAt -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1; psql -X -qAt -d postgres -c "DROP ROLE IF EXISTS $ROLE" -c "DROP ROLE IF EXISTS $NOMAP" >/dev/null 2>&1' EXIT

# 1. the shards: two clusters, half of the users each
stop_shards
rm -rf "$DIR"; mkdir -p "$DIR"; [ "$(id -u)" = 0 ] && chown postgres "$DIR"
for s in 1 2; do
  port=$((BASE + s))
  as_owner "$bindir/initdb -D $DIR/$s -A trust -U postgres" >"$DIR/initdb-$s.log" 2>&1 \
    || { cat "$DIR/initdb-$s.log"; bad "shard $s: initdb"; echo "$pass passed, $fail failed"; exit 1; }
  as_owner "$bindir/pg_ctl -D $DIR/$s -l $DIR/$s.log -w -o \"-p $port -k /tmp -c listen_addresses='' -c max_connections=20\" start" >/dev/null \
    || { tail -5 "$DIR/$s.log"; bad "shard $s: start"; echo "$pass passed, $fail failed"; exit 1; }
done
users=$(( ROWS / 50 > 1000 ? ROWS / 50 : 1000 ))
items=$(( ROWS / 100 > 500 ? ROWS / 100 : 500 ))
# the rows: user u rates 50 distinct items on average, one row a (user, item)
rows_sql="SELECT u AS user_id, ((u::bigint * 7919 + k * 104729) % $items + 1)::int AS item_id,
                 (1 + (hashint4(u * 131 + k) & 3))::real AS value
            FROM generate_series(1, $users) u, generate_series(1, $(( ROWS / users ))) k"
half=$(( users / 2 ))
qs $((BASE + 1)) "CREATE TABLE part (user_id int, item_id int, value real);
                  INSERT INTO part SELECT * FROM ($rows_sql) r WHERE user_id <= $half; ANALYZE part" \
  && qs $((BASE + 2)) "CREATE TABLE part (user_id int, item_id int, value real);
                  INSERT INTO part SELECT * FROM ($rows_sql) r WHERE user_id > $half; ANALYZE part" \
  && ok "two shards with half of the users each" || bad "two shards with half of the users each"

# 2. the server under test: postgres_fdw, the partitioned source, the local copy
psql -X -qAt -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "DROP ROLE IF EXISTS $ROLE" -c "DROP ROLE IF EXISTS $NOMAP" >/dev/null 2>&1
psql -X -qAt -d postgres -c "CREATE DATABASE $DB" -c "CREATE ROLE $ROLE LOGIN" -c "CREATE ROLE $NOMAP LOGIN" >/dev/null
out=$(psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" 2>&1 <<SQL
CREATE EXTENSION gpumf;
CREATE EXTENSION postgres_fdw;
CREATE SERVER shard1 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '/tmp', port '$((BASE + 1))', dbname 'postgres', async_capable 'true', fetch_size '10000');
CREATE SERVER shard2 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '/tmp', port '$((BASE + 2))', dbname 'postgres', async_capable 'true', fetch_size '10000');
CREATE USER MAPPING FOR CURRENT_USER SERVER shard1 OPTIONS (user 'postgres');
CREATE USER MAPPING FOR CURRENT_USER SERVER shard2 OPTIONS (user 'postgres');
-- an ordinary role reaches the shards through its own mapping (trust logins
-- on a socket need password_required 'false', which a superuser sets)
CREATE USER MAPPING FOR $ROLE SERVER shard1 OPTIONS (user 'postgres', password_required 'false');
CREATE USER MAPPING FOR $ROLE SERVER shard2 OPTIONS (user 'postgres', password_required 'false');
CREATE TABLE fdw_src (user_id int, item_id int, value real) PARTITION BY RANGE (user_id);
CREATE FOREIGN TABLE fdw_src_1 PARTITION OF fdw_src FOR VALUES FROM (MINVALUE) TO ($((half + 1)))
  SERVER shard1 OPTIONS (schema_name 'public', table_name 'part');
CREATE FOREIGN TABLE fdw_src_2 PARTITION OF fdw_src FOR VALUES FROM ($((half + 1))) TO (MAXVALUE)
  SERVER shard2 OPTIONS (schema_name 'public', table_name 'part');
CREATE TABLE local_src AS SELECT * FROM ($rows_sql) r;
ANALYZE local_src;
GRANT SELECT ON fdw_src TO $ROLE;
GRANT SELECT ON fdw_src TO $NOMAP;
GRANT USAGE, CREATE ON SCHEMA public TO $ROLE, $NOMAP;
SQL
)
check "the partitioned source of two foreign tables and the local copy" "$out" ""
check "the shards hold the local table's rows" \
  "$(q "SELECT (SELECT count(*) FROM fdw_src) = (SELECT count(*) FROM local_src) AND NOT EXISTS (SELECT * FROM fdw_src EXCEPT SELECT * FROM local_src)")" "t"
check "the plan reads both shards asynchronously" \
  "$(q "EXPLAIN (COSTS OFF) SELECT user_id, item_id, value FROM fdw_src" | grep -c 'Async Foreign Scan')" "2"

# 3. the same model from both
train() {  # $1: source, $2: model, [$3: role]
  psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" ${3:+-U $3} -c "SELECT nnz FROM gpumf_train('$1', 'user_id', 'item_id', 'value', factors => 16, iterations => 5, model => '$2', seed => 7)" 2>&1
}
check "trains from the foreign partitions" "$(train fdw_src m_fdw)" "$(q "SELECT count(*) FROM local_src")"
check "trains from the local table" "$(train local_src m_local)" "$(q "SELECT count(*) FROM local_src")"
check "the same users, items and nnz" \
  "$(q "SELECT a.n_users = b.n_users AND a.n_items = b.n_items AND a.nnz = b.nnz FROM gpumf.models a, gpumf.models b WHERE a.name = 'm_fdw' AND b.name = 'm_local'")" "t"
check "the same loss (relative 1e-5)" \
  "$(q "SELECT abs(a.final_loss - b.final_loss) <= 1e-5 * abs(b.final_loss) FROM gpumf.models a, gpumf.models b WHERE a.name = 'm_fdw' AND b.name = 'm_local'")" "t"
check "the same top-10 lists for 50 users" \
  "$(q "SELECT count(*) FROM generate_series(1, $users, $(( users / 50 ))) u
         WHERE ARRAY(SELECT item FROM gpumf_recommend('m_fdw', u, 10)) IS DISTINCT FROM
               ARRAY(SELECT item FROM gpumf_recommend('m_local', u, 10))")" "0"

# 4. rights: the caller's mapping, the caller's model; no mapping, no model
check "an ordinary role trains through its own user mapping" "$(train fdw_src m_role $ROLE)" "$(q "SELECT count(*) FROM local_src")"
check "the model is the role's" "$(q "SELECT owner::text FROM gpumf.models WHERE name = 'm_role'")" "$ROLE"
out=$(train fdw_src m_nomap $NOMAP)
if grep -q 'user mapping not found' <<<"$out"; then ok "a role without a user mapping: postgres_fdw's error"; else bad "a role without a user mapping: postgres_fdw's error" "$out"; fi
check "and no model" "$(q "SELECT count(*) FROM gpumf.models WHERE name = 'm_nomap'")" "0"
check "the catalog holds no connection option of the shards" \
  "$(q "SELECT count(*) FROM gpumf.models WHERE (params::text || source) ~ 'password|host|shard'")" "0"

# 5. read rates: the read phase of the same rows from each source
rate() {  # $1: model
  q "SELECT round(read_seconds::numeric, 3) || ' ' || round((nnz / greatest(read_seconds, 1e-6))::numeric) FROM gpumf.models WHERE name = '$1'"
}
q "ALTER SERVER shard1 OPTIONS (SET async_capable 'false'); ALTER SERVER shard2 OPTIONS (SET async_capable 'false')"
check "trains from the shards read one after the other (async_capable off)" "$(train fdw_src m_sync)" "$(q "SELECT count(*) FROM local_src")"
read -r ls lr <<<"$(rate m_local)"; read -r fs fr <<<"$(rate m_fdw)"; read -r ss sr <<<"$(rate m_sync)"
echo "# read phase of $ROWS rows ($users users x $items items), $(nproc) cores, $(psql -X -qAt -d postgres -c 'SHOW server_version'):"
echo "# | source | read s | rows/s | against local |"
echo "# |---|---|---|---|"
echo "# | local table | $ls | $lr | 1.00 |"
echo "# | 2 postgres_fdw partitions, async_capable on | $fs | $fr | $(awk "BEGIN { printf \"%.2f\", $fr / $lr }") |"
echo "# | 2 postgres_fdw partitions, async_capable off | $ss | $sr | $(awk "BEGIN { printf \"%.2f\", $sr / $lr }") |"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
