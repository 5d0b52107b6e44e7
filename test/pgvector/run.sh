#!/bin/bash
# gpumf beside pgvector: runs the recipe of docs/pgvector.md ("Serving through a pgvector
# index": its ```sql blocks marked <!-- test: skip: pgvector ... -->, those
# that need a later pgvector than the installed one left out) as written, on a
# planted model (gpumf_synthetic), and checks what it gives against
# gpumf_recommend's exact top n:
#   - the HNSW top 10 agrees with the exact top 10 (recall@10 at ef_search 40
#     and 200), and the inner products equal gpumf's scores to float tolerance
#   - exclude-seen (an anti-join on the source: iterative index scans on
#     pgvector 0.8, a large enough ef_search before) and a candidate filter
#   - an explicit model with biases (vectors of factors + 2) ranks and scores
#     as gpumf_recommend and gpumf_predict do
#   - halfvec (pgvector 0.7) ranks alike, scores to its precision
#   - the refresh in the retraining's transaction gives the new version's items
#   - gpumf depends on nothing of pgvector: dropping it leaves gpumf whole
# Needs a server (source test/pgenv.sh) with gpumf installed; where pgvector
# is not installed (no vector in pg_available_extensions) it says so and runs
# nothing.  Prints "ok N - ..." lines and "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
DB=${GPUMF_PGVECTOR_DB:-gpumf_pgvector}
export PGOPTIONS="-c gpumf.device=${GPUMF_TEST_DEVICE:-cpu} -c gpumf.progress=off"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$2'"; fi; }
# $1: description, $2: a number, $3: the least it may be
atleast() { if awk "BEGIN { exit !($2 >= $3) }" 2>/dev/null; then ok "$1 ($2 >= $3)"; else bad "$1" "$2, below $3"; fi; }
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1" 2>&1; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

avail=$(psql -X -qAt -d postgres -c "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'" 2>&1)
if [ -z "$avail" ]; then
  echo "# pgvector is not installed (no vector in pg_available_extensions): nothing run"
  finish
fi

dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || { bad "create database $DB"; finish; }
q "CREATE EXTENSION gpumf" >/dev/null
# the README's tables, larger: planted clusters (gpumf_synthetic), 6,000 items
q "CREATE TABLE ratings AS
     SELECT user_id, item_id AS movie_id, value AS rating
       FROM gpumf_synthetic(3000, 6000, 150000, seed => 5) WHERE NOT holdout;
   CREATE TABLE movies AS
     SELECT m AS id, 'movie ' || m AS title, (ARRAY['noir', 'comedy', 'drama'])[1 + m % 3] AS genre
       FROM generate_series(1, 6000) m;
   ALTER TABLE movies ADD PRIMARY KEY (id);
   ANALYZE ratings, movies;
   CREATE TABLE sample AS SELECT DISTINCT user_id AS u FROM ratings WHERE user_id % 15 = 0" >/dev/null
check "the model trains" \
  "$(q "SELECT version FROM gpumf_train('public.ratings', 'user_id', 'movie_id', 'rating', factors => 32, iterations => 10, model => 'movies')")" 1

# --------------------------------------------- the README's recipe, as written
# blocks after a marker "<!-- test: skip: pgvector[ >= X.Y] ... -->", in order
awk -v dir="$tmp" '
  /^<!-- test: skip: pgvector/ { want = 1; need = "0"; if (match($0, />= *[0-9.]+/)) need = substr($0, RSTART + 2, RLENGTH - 2); gsub(/ /, "", need); next }
  want && /^```sql/ { k++; file = sprintf("%s/block%02d.sql", dir, k); print need > (file ".need"); close(file ".need"); inblock = 1; want = 0; next }
  inblock && /^```/ { inblock = 0; close(file); next }
  inblock { print > file; next }
  want && !/^[[:space:]]*$/ { want = 0 }
' docs/pgvector.md
q "CREATE EXTENSION vector" >/dev/null
version=$(q "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
echo "# pgvector $version"
vge() {  # is pgvector at least $1?
  [ "$(printf '%s\n%s\n' "$1" "$version" | sort -V | head -1)" = "$1" ]
}
nblocks=$(ls "$tmp"/block*.sql 2>/dev/null | wc -l)
if [ "$nblocks" -ge 7 ]; then ok "the README has the recipe's $nblocks blocks"; else bad "the README has the recipe's blocks" "found $nblocks"; fi
for f in "$tmp"/block*.sql; do
  [ -f "$f" ] || continue
  need=$(cat "$f.need"); first=$(grep -v '^ *--' "$f" | head -1 | cut -c1-60)
  if ! vge "$need"; then echo "# not run: needs pgvector >= $need: $first"; continue; fi
  if out=$(psql -X -q -v ON_ERROR_STOP=1 -d "$DB" -f "$f" 2>&1); then
    ok "README block runs: $first"
  else
    bad "README block runs: $first" "$(echo "$out" | grep -m3 -E 'ERROR|error')"
  fi
  # its query for a user (with the settings before it): an HNSW index scan,
  # never a sort of every item, and no rows for a user the model does not know
  if grep -q '^WITH u AS MATERIALIZED' "$f"; then
    awk 'stmt == "" && /^[[:space:]]*(--.*)?$/ { next } { stmt = stmt $0 "\n" } /;[[:space:]]*$/ { if (stmt ~ /^(SET|RESET|SELECT set_config|WITH u AS)/) printf "%s", stmt; stmt = "" }' "$f" >"$f.query"
    plan=$(sed 's/^WITH u AS MATERIALIZED/EXPLAIN (COSTS OFF) &/' "$f.query" | psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" 2>&1)
    if grep -q 'Index Scan using .*embedding' <<<"$plan" && grep -q 'Order By: (' <<<"$plan"; then
      ok "its query is an HNSW index scan"
    else
      bad "its query is an HNSW index scan" "$(echo "$plan" | grep -v '^[0-9]*$' | head -8 | tr '\n' ' ')"
    fi
    rows=$(sed 's/\b42\b/987654321/g' "$f.query" | psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" 2>&1 | grep -cv '^[0-9]*$')
    check "its query gives a user the model does not know no rows" "$rows" 0
  fi
done
check "the refresh made version 2 current" "$(q "SELECT version FROM gpumf.models WHERE name = 'movies'")" 2
check "movie_vectors holds the current version's items" \
  "$(q "SELECT count(*) = (SELECT n_items FROM gpumf.models WHERE name = 'movies')
              AND bool_and(embedding = gpumf_item_vector('movies', item)::vector)
              AND count(*) = (SELECT count(*) FROM gpumf_item_vectors('movies'))
         FROM movie_vectors")" t
plan=$(q "EXPLAIN SELECT item FROM movie_vectors ORDER BY embedding <#> gpumf_user_vector('movies', 42)::vector LIMIT 10")
case "$plan" in
  *"Index Scan using movie_vectors_next_embedding_idx"*) ok "the recipe's query is an HNSW index scan" ;;
  *) bad "the recipe's query is an HNSW index scan" "$(echo "$plan" | head -3)" ;;
esac
check "the user's vector has the model's factors as dimensions" \
  "$(q "SELECT vector_dims(gpumf_user_vector('movies', 42)::vector)")" 32

# ------------------------------------ the HNSW top 10 against the exact top 10
# (enable_seqscan off: the index answers, never a sort of every row)
hnsw_top() {  # $1: table, $2: model, $3: user expression, $4: type (vector, halfvec(32)), $5: filter, $6: l2
  local col=embedding op='<#>' l2=false
  [ "$4" != vector ] && col="embedding::$4"
  [ "${6:-}" = l2 ] && { op='<->'; l2=true; }
  echo "SELECT v.item, -($col <#> gpumf_user_vector('$2', $3, l2 => $l2)::${4%%(*}) AS score FROM $1 v ${5:-}
         ORDER BY $col $op gpumf_user_vector('$2', $3, l2 => $l2)::${4%%(*} LIMIT 10"
}
recall() {  # $1: ef_search, $2: table, $3: model, $4: type, $5: l2
  q "SET enable_seqscan = off; SET hnsw.ef_search = $1;
     SELECT round(avg(hits) / 10, 4) FROM sample s,
       LATERAL (SELECT count(*) AS hits FROM ($(hnsw_top "$2" "$3" s.u "$4" "" "${5:-}")) h
                  JOIN gpumf_recommend('$3', s.u, 10, false) e USING (item)) x"
}
r40=$(recall 40 movie_vectors movies vector); r200=$(recall 200 movie_vectors movies vector)
echo "# implicit, factors 32, 6,000 items, $(q "SELECT count(*) FROM sample") users: recall@10 $r40 at ef_search 40, $r200 at 200"
atleast "HNSW recall@10 against gpumf_recommend at ef_search 40" "$r40" 0.9
atleast "HNSW recall@10 against gpumf_recommend at ef_search 200" "$r200" 0.97
# scores: -(a <#> b) against gpumf_recommend's (items in both top 10s) and gpumf_predict's (all)
same_scores() {  # $1: table, $2: model, $3: type, $4: relative tolerance, $5: l2
  q "SET enable_seqscan = off; SET hnsw.ef_search = 200;
     SELECT count(*) > 0 AND bool_and(abs(h.score - e.score) <= $4 * greatest(1, abs(e.score)))
       FROM sample s, LATERAL ($(hnsw_top "$1" "$2" s.u "$3" "" "${5:-}")) h
       JOIN gpumf_recommend('$2', s.u, 10, false) e USING (item);
     SELECT bool_and(abs(h.score - gpumf_predict('$2', s.u, h.item)) <= $4 * greatest(1, abs(h.score)))
       FROM sample s, LATERAL ($(hnsw_top "$1" "$2" s.u "$3" "" "${5:-}")) h" | tr '\n' ' ' | sed 's/ $//'
}
check "inner products equal gpumf_recommend's and gpumf_predict's scores (1e-5)" \
  "$(same_scores movie_vectors movies vector 1e-5)" "t t"
# the l2 form: the README's block again (the refresh above retrained the model)
l2block=$(grep -l 'movie_vectors_l2' "$tmp"/block*.sql | head -1)
q "DROP TABLE movie_vectors_l2" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d "$DB" -f "$l2block" >/dev/null 2>&1 || bad "the l2 block runs again"
l40=$(recall 40 movie_vectors_l2 movies vector l2); l200=$(recall 200 movie_vectors_l2 movies vector l2)
echo "# l2 form: recall@10 $l40 at ef_search 40, $l200 at 200"
atleast "l2 form: HNSW (vector_l2_ops) recall@10 against gpumf_recommend at ef_search 200" "$l200" 0.95
check "l2 form: inner products equal gpumf's scores (1e-5)" "$(same_scores movie_vectors_l2 movies vector 1e-5 l2)" "t t"
check "l2 form: every item vector has the norm R, the user's last element is 0" \
  "$(q "SELECT max(n) - min(n) <= 1e-5 * max(n) FROM (SELECT sqrt(-(embedding <#> embedding)) AS n FROM movie_vectors_l2) s")\
 $(q "SELECT (gpumf_user_vector('movies', 42, l2 => true))[33]")" "t 0"

# ------------------------------------------------- exclude seen and candidates
# $1: ef_search, $2: iterative_scan (off, relaxed_order), $3: extra filter,
# $4: gpumf_recommend's extra arguments; prints: users short of 10 rows, seen
# or non-candidate rows returned, recall@10 against gpumf_recommend
filtered() {
  local iter=""
  vge 0.8 && iter="SET hnsw.iterative_scan = $2;"
  q "SET enable_seqscan = off; SET hnsw.ef_search = $1; $iter
     SELECT count(*) FILTER (WHERE rows < 10), sum(wrong), round(avg(hits) / 10, 4) FROM sample s,
       LATERAL (SELECT count(*) AS rows,
                       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM ratings r WHERE r.user_id = s.u AND r.movie_id = t.item)
                                           OR NOT t.item IN (SELECT id FROM movies WHERE ${3:-true})) AS wrong,
                       count(*) FILTER (WHERE t.item IN (SELECT item FROM gpumf_recommend('movies', s.u, 10 $4))) AS hits
                  FROM ($(hnsw_top movie_vectors movies s.u vector "WHERE NOT EXISTS (SELECT 1 FROM ratings r WHERE r.user_id = s.u AND r.movie_id = v.item) ${3:+AND v.item IN (SELECT id FROM movies WHERE $3)}")) t) x" | tr '|' ' '
}
plain=$(filtered 40 off "" "")
echo "# exclude-seen without iterative scans at ef_search 40 (users short of 10, wrong rows, recall): $plain"
if vge 0.8; then
  read -r short wrong rec <<<"$(filtered 40 relaxed_order "" "")"
  check "exclude-seen with iterative scans: every user gets 10 rows, none seen" "$short $wrong" "0 0"
  atleast "exclude-seen with iterative scans: recall@10 against gpumf_recommend(exclude_seen => true)" "$rec" 0.9
  cands="candidates => (SELECT array_agg(id) FROM movies WHERE genre = 'noir')"
  read -r short wrong rec <<<"$(filtered 40 relaxed_order "genre = 'noir'" ", $cands")"
  check "a candidate filter with iterative scans: 10 rows each, only unseen candidates" "$short $wrong" "0 0"
  atleast "a candidate filter with iterative scans: recall@10 against gpumf_recommend(candidates => ...)" "$rec" 0.9
else
  echo "# not run: iterative scans need pgvector >= 0.8"
fi
# before 0.8 (and with iterative scans off): an ef_search with room for the seen items
room=$(q "SELECT least(1000, 10 + max(c)) FROM (SELECT count(*) AS c FROM ratings WHERE user_id IN (SELECT u FROM sample) GROUP BY user_id) s")
read -r short wrong rec <<<"$(filtered "$room" off "" "")"
check "exclude-seen with ef_search $room (n + the most seen): 10 rows each, none seen" "$short $wrong" "0 0"
atleast "exclude-seen with ef_search $room: recall@10 against gpumf_recommend(exclude_seen => true)" "$rec" 0.9

# ---------------------------------------------- an explicit model with biases
q "CREATE TABLE stars AS
     SELECT user_id, item_id, rating FROM gpumf_synthetic_ratings(3000, 6000, 150000, rank => 8, seed => 9)" >/dev/null
check "the explicit model trains with biases" \
  "$(q "SELECT global_mean IS NOT NULL FROM gpumf_train('stars', 'user_id', 'item_id', 'rating', factors => 16, iterations => 8, algorithm => 'als_explicit', model => 'stars')")" t
check "its vectors have factors + 2 dimensions" \
  "$(q "SELECT vector_dims(gpumf_user_vector('stars', 42)::vector) || ' ' || vector_dims(gpumf_item_vector('stars', 42)::vector)")" "18 18"
q "CREATE TABLE star_vectors AS SELECT item, embedding::vector(18) AS embedding FROM gpumf_item_vectors('stars');
   CREATE INDEX ON star_vectors USING hnsw (embedding vector_ip_ops)" >/dev/null
e200=$(recall 200 star_vectors stars vector)
echo "# explicit with biases, factors 16: recall@10 $(recall 40 star_vectors stars vector) at ef_search 40, $e200 at 200"
atleast "explicit: HNSW recall@10 against gpumf_recommend at ef_search 200" "$e200" 0.95
check "explicit: inner products equal the predicted ratings (gpumf_recommend, gpumf_predict; 1e-5)" \
  "$(same_scores star_vectors stars vector 1e-5)" "t t"

# ------------------------------------------------------------------- halfvec
if vge 0.7; then
  h200=$(recall 200 movie_vectors movies "halfvec(32)")
  echo "# halfvec(32): recall@10 $(recall 40 movie_vectors movies "halfvec(32)") at ef_search 40, $h200 at 200"
  atleast "halfvec: HNSW recall@10 against gpumf_recommend at ef_search 200" "$h200" 0.95
  check "halfvec: inner products within 1e-2 of gpumf's scores" "$(same_scores movie_vectors movies "halfvec(32)" 1e-2)" "t t"
else
  echo "# not run: halfvec needs pgvector >= 0.7"
fi

# ----------------------------------------------------- gpumf needs no pgvector
check "no object of gpumf depends on pgvector" \
  "$(q "SELECT count(*) FROM pg_depend d
          JOIN pg_depend g ON g.classid = d.classid AND g.objid = d.objid AND g.deptype = 'e'
         WHERE d.refclassid = 'pg_extension'::regclass
           AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'vector')
           AND g.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gpumf')")" 0
before=$(q "SELECT count(*) FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gpumf')")
q "SET client_min_messages = warning; DROP EXTENSION vector CASCADE" >/dev/null
check "dropping pgvector leaves gpumf's objects and serving as they were" \
  "$(q "SELECT count(*) FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gpumf')") $(q "SELECT count(*) FROM gpumf_recommend('movies', 42, 10)") $(q "SELECT array_length(gpumf_user_vector('movies', 42), 1)")" \
  "$before 10 32"

dropdb --if-exists "$DB" >/dev/null 2>&1
finish
