#!/bin/bash
# Hostile roles: gpumf under callers that shadow built-in types, functions,
# operators and tables, and under roles without the rights they would need.
#
#  1. Privileges (clean objects): no SELECT on the source; row-level
#     security; a role without access to a model cannot serve, retrain or
#     drop it; name squatting (a model name belongs to the role that first
#     trained it and its members; superusers may retrain and drop any model;
#     retraining does not change the owner; dropping frees the name); the
#     trainer can revoke what it granted after a retraining; a renamed role
#     keeps its models and a new role with the old name gets none of them.
#     The other functions (1b): the solvers, least squares, split, evaluate,
#     tune, RMSE and recommend_all on a table without SELECT, or with SELECT
#     on some columns: permission denied, nothing changed (the columns
#     granted suffice where they are all that is read); serving functions
#     and version switches refused to a role without access to the model,
#     recording metrics and switching versions to one that only serves it;
#     row-level security: each of them gives the caller what a clean run on
#     its visible rows gives, and a fold-in past the caller's policy is
#     refused (a basket of its rows serves instead).
#     Serving runs no other role's code as the caller (1c): sources of
#     alice's whose view functions (one SECURITY DEFINER) and forced policy
#     try ALTER ROLE ... SUPERUSER, SET, set_config, RESET ALL, CREATE TEMP,
#     SET ROLE and SET SESSION AUTHORIZATION and report current_user;
#     every serving function (recommend with a new user, recompute, text
#     user, item_type, the 0.1 _text and _uuid forms, similar users, in
#     parallel workers; baskets, similar items, stored users, predict,
#     evaluate and recommend_all, which read no source) as the superuser,
#     bob, mallory and alice: the code runs as its owner only, is refused
#     what would reach the caller's session, leaves the caller's settings
#     as they were, and folds in as a basket of the same rows would; a
#     caller without SELECT on the source (mallory) runs none of it; a
#     dropped source whose name mallory squats is never read, a renamed one
#     is followed.  Grants across versions (1d): every order of revoke,
#     retrain and roll-back; a session serving from memory while the owner
#     revokes, rolls back, grants and retrains; a REPEATABLE READ
#     transaction across a retraining and a revoke.
#  2. Shadowing: an unprivileged role (mallory) creates, in a database whose
#     schema public is writable (the default before PostgreSQL 15):
#       - in public: domains named text, int8, int4, int2, float8, uuid, ...
#         over other types; operators = and <> for the key and catalog
#         types; functions named now, nextval, format, quote_ident, ...
#       - in pg_temp (her session): the same domains, functions and
#         operators, and temporary views named like catalog tables
#         (pg_class, pg_roles, ...), like gpumf's (models, retired_tables,
#         model_versions) and like factor tables (m1_v1_users, ...);
#       - aimed at the SQL the other functions build (gpumf_split's
#         statement, the kept versions, the catalog's writes): comparison,
#         arithmetic, text and jsonb operators, hash_record_extended, round,
#         clock_timestamp, jsonb_populate_record, random, unnest, aggregates
#         (count, sum, max, min, string_agg, array_agg), more domains, and
#         views named like the statement's aliases and the new tables.
#     Every one of them leaves a trace when used: a WARNING "hostile object
#     executed: ..." and a call of the sequence public.hostile_trace_seq.
#     Then, as mallory (her default search_path) and as a superuser whose
#     search_path is "public, pg_catalog", every gpumf function runs: train
#     and retrain with each key type (int2, int4, int8, text, varchar, uuid
#     as user and as item keys), each recommend variant, drop, synthetic,
#     device_info, and every other function (split, evaluate, predict,
#     recommend with candidates and fold-in, recommend_items, similar_*,
#     recommend_all, tune, an explicit model with rmse, model_versions and
#     use_version, shared_models, synthetic_ratings, cg_solve, spmv, linreg,
#     linreg_agg, linreg_predict).  Checks: no crash (the backend answers;
#     the postmaster's PID, the checkpointer's PID and the server log show
#     no restart), the same results as a clean session's (catalog counts,
#     and key types read in a clean session; factor tables by checksum;
#     recommendations and the other functions' results row for row; the
#     tables they create by checksum; catalog rows and kept versions), and
#     no trace.
#
# Trains on the CPU with one thread (gpumf.device = cpu, gpumf.threads = 1)
# whatever GPUMF_TEST_DEVICE says, so that results compare bit for bit.
# Needs a server (source test/pgenv.sh) with gpumf installed, a superuser
# connection (PGUSER) and password-less logins for new roles (trust, as
# test/pgenv.sh sets up).  Creates the roles gpumf_rel_* and the database
# gpumf_hostile, and drops them at the end.  Server log for the crash check:
# $GPUMF_PGLOG, else $GPUMF_PGDATA.log (test/pgenv.sh), else the pg.log next
# to $GPUMF_PGDATA (the private clusters), else the logging collector's file.
# Prints "ok N - ..." lines and "N passed, M failed".
set -u
DB=gpumf_hostile
# the CPU with one thread, on any machine: results compared bit for bit
# (the shadowing attacks the SQL layer, which is the same for both devices)
export PGOPTIONS="-c gpumf.device=cpu -c gpumf.threads=1 -c gpumf.progress=off -c client_min_messages=warning"
R=gpumf_rel
MAL=${R}_mallory ALICE=${R}_alice BOB=${R}_bob CAROL=${R}_carol DAVE=${R}_dave
ROLES="$MAL $ALICE $BOB $CAROL $DAVE ${DAVE}_renamed"
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$3', got '$(echo "$2" | head -c 400)'"; fi; }
contains() { if grep -qF -- "$3" <<<"$2"; then ok "$1"; else bad "$1" "expected '$3' in '$(echo "$2" | head -c 400)'"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t_start=$(date +%s)

# superuser, clean session; as a role, a script on stdin (errors included)
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
as_role() { psql -X -qAt -d "$DB" -U "$1" 2>&1; }
# lines of one section of a session's output
section() { awk -v s="@@ $2" '$0 == s { on = 1; next } /^@@ / { on = 0 } on' <<<"$1"; }
owner_of() { q "SELECT coalesce(to_jsonb(m)->>'owner', to_jsonb(m)->>'trained_by') FROM gpumf.models m WHERE name = '$1'"; }
model_row() { q "SELECT to_jsonb(m) - 'created_at' FROM gpumf.models m WHERE name = '$1'"; }

# ---------------------------------------------------------------- the server
find_log() {
  local d c
  for c in "${GPUMF_PGLOG:-}" "${GPUMF_PGDATA:+$GPUMF_PGDATA.log}" "${GPUMF_PGDATA:+$(dirname "$GPUMF_PGDATA")/pg.log}"; do
    [ -n "$c" ] && [ -r "$c" ] && { echo "$c"; return; }
  done
  d=$(psql -X -qAt -d postgres -c "SELECT current_setting('data_directory') || '/' || pg_current_logfile()" 2>/dev/null)
  [ -n "$d" ] && [ -r "$d" ] && echo "$d"
}
# "postmaster PID, checkpointer PID": a backend crash restarts the checkpointer
server_id() {
  psql -X -qAt -d postgres -c "SELECT split_part(pg_read_file('postmaster.pid'), E'\n', 1) || ' ' || coalesce((SELECT pid::text FROM pg_stat_activity WHERE backend_type = 'checkpointer'), '?')" 2>/dev/null
}
wait_server() {
  for _ in $(seq 1 240); do
    psql -X -qAt -d "$DB" -c "SELECT 1" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  return 1
}
log=$(find_log)
log_start=0; [ -n "$log" ] && log_start=$(stat -c %s "$log")
srv0=$(server_id); srv=$srv0
crashes=0
# After each session: no crash.  A crash is reported, then waited out.
survived() {  # $1: label, $2: the session's output
  local id t0
  id=$(server_id)
  if [ "$id" = "$srv" ] && ! grep -qE 'server closed the connection unexpectedly|terminating connection because of crash|connection to server was lost' <<<"$2"; then
    ok "$1: no crash"
    return 0
  fi
  t0=$(date +%s.%N)
  wait_server || { bad "$1: no crash" "the server did not come back"; echo "$pass passed, $fail failed"; exit 1; }
  id=$(server_id)
  crashes=$((crashes + 1))
  bad "$1: no crash" "the server crashed and restarted (recovered in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s)"
  srv=$id
  return 1
}
# the objects that left a trace in a session's output
traces() { grep -oE 'hostile object executed: [^"]*' <<<"$1" | sed 's/hostile object executed: //' | sort -u | tr '\n' ';'; }
no_trace() { check "$1: no shadowing object ran" "$(traces "$2")" ""; }

# ---------------------------------------------------------------- set-up
dropdb --if-exists "$DB" >/dev/null 2>&1
for r in $ROLES; do psql -X -qAt -d postgres -c "DROP ROLE IF EXISTS $r" >/dev/null 2>&1; done
createdb "$DB" || { bad "create database $DB"; echo "$pass passed, $fail failed"; exit 1; }
psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" >/dev/null <<SQL || { bad "set-up"; echo "$pass passed, $fail failed"; exit 1; }
CREATE ROLE $MAL LOGIN; CREATE ROLE $ALICE LOGIN; CREATE ROLE $BOB LOGIN;
CREATE ROLE $CAROL LOGIN IN ROLE $ALICE; CREATE ROLE $DAVE LOGIN;
CREATE EXTENSION gpumf;
-- schema public writable by every role, as before PostgreSQL 15
GRANT CREATE ON SCHEMA public TO PUBLIC;
-- every key type, as user and as item; duplicates (summed) and NULL keys
CREATE TABLE src AS
SELECT u::int2 AS u2, (1000 + u)::int4 AS u4, (10000000000 + u)::int8 AS u8,
       'user ' || u AS ut, ('v' || u)::varchar(20) AS uv, md5('u' || u)::uuid AS uu,
       i::int2 AS i2, (100 + i)::int4 AS i4, (100000000000 + i)::int8 AS i8,
       'item-' || i AS it, ('iv' || i)::varchar(20) AS iv, md5('i' || i)::uuid AS iu,
       u::text AS tu, (7 * i)::text AS ti,
       (1 + (u * i) % 4)::float8 AS v
  FROM generate_series(1, 60) u, generate_series(1, 40) i
 WHERE (u * 7 + i * 3) % 5 < 2;
INSERT INTO src SELECT * FROM src WHERE u2 % 9 = 0;
INSERT INTO src (v) VALUES (1);
GRANT SELECT ON src TO PUBLIC;
CREATE TABLE secret (u int, i int);
INSERT INTO secret SELECT u, i FROM generate_series(1, 10) u, generate_series(1, 10) i;
CREATE TABLE rls_src (owner name, u int, i int);
INSERT INTO rls_src SELECT CASE WHEN u <= 10 THEN '$ALICE' WHEN u > 20 THEN '$BOB' ELSE 'other' END, u, i
  FROM generate_series(1, 30) u, generate_series(1, 12) i WHERE (u + i) % 3 <> 0;
GRANT SELECT ON rls_src TO PUBLIC;
ALTER TABLE rls_src ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON rls_src USING (owner = current_user);
-- the other functions' inputs: implicit strengths with a time column (and
-- NULL keys), a list of users, ratings, a sparse SPD matrix (its lower
-- triangle and a duplicate entry; again with base 0 and other column
-- types), a regression table (rows with a NULL)
CREATE TABLE imp AS
SELECT u, i, (1 + (u * 3 + i) % 5)::float8 AS v,
       timestamptz '2024-01-01 00:00+00' + ((u * 31 + i * 17) % 200) * interval '1 hour' AS t
  FROM generate_series(1, 40) u, generate_series(1, 30) i
 WHERE (u * 37 + i * 101 + u * i) % 7 < 2;
INSERT INTO imp (u, i, v) VALUES (NULL, 1, 1), (2, NULL, 1);
-- two thirds of those rows: evaluated on all of them, the others count
CREATE TABLE imp_a AS SELECT * FROM imp WHERE (u * 2 + i) % 3 <> 0;
CREATE TABLE imp_users (uid int8);
INSERT INTO imp_users VALUES (3), (5), (3), (NULL), (999), (12);
CREATE TABLE rat AS SELECT * FROM gpumf_synthetic_ratings(60, 40, 600, rank => 3, noise => 0.3, seed => 8);
CREATE TABLE mat (r int4, c int8, v float8);
INSERT INTO mat SELECT k, k, 4 + k % 3 FROM generate_series(1, 12) k;
INSERT INTO mat SELECT k + 1, k, -1 FROM generate_series(1, 11) k;
INSERT INTO mat SELECT k + 3, k, 0.5 FROM generate_series(1, 9) k;
INSERT INTO mat VALUES (5, 5, 0.25);
CREATE TABLE mat0 AS SELECT (r - 1)::int2 AS i, (c - 1)::int4 AS j, v::numeric AS a FROM mat;
CREATE TABLE reg AS
SELECT n % 3 AS g, (1.5 + 2 * n - 0.25 * (n % 7) + ((n * 37) % 11) / 10.0)::float8 AS y,
       n::float8 AS x1, (n % 7)::int4 AS x2, ((n * 13) % 5)::numeric AS x3
  FROM generate_series(1, 60) n;
INSERT INTO reg VALUES (0, NULL, 1, 1, 1), (1, 2, NULL, 1, 1);
GRANT SELECT ON imp, imp_a, imp_users, rat, mat, mat0, reg TO PUBLIC;
-- the same without a grant, with grants on some columns only
CREATE TABLE secret_imp AS SELECT * FROM imp;
CREATE TABLE secret_mat AS SELECT * FROM mat;
CREATE TABLE secret_reg AS SELECT * FROM reg;
CREATE TABLE cols_imp AS SELECT * FROM imp;
CREATE TABLE cols_mat AS SELECT * FROM mat;
CREATE TABLE cols_reg AS SELECT * FROM reg;
GRANT SELECT (u, i) ON cols_imp TO PUBLIC;
GRANT SELECT (r, c) ON cols_mat TO PUBLIC;
GRANT SELECT (y, x1) ON cols_reg TO PUBLIC;
-- row-level security: alice's rows are the public table's, in its order;
-- other rows (which would change every result) come after
CREATE TABLE rls_imp AS SELECT '$ALICE'::name AS owner, * FROM imp
  UNION ALL SELECT 'other', u, i + 30, 9, NULL FROM imp WHERE u % 3 = 0;
CREATE TABLE alice_imp AS SELECT * FROM rls_imp WHERE owner = '$ALICE';
CREATE TABLE rls_mat AS SELECT '$ALICE'::name AS owner, * FROM mat
  UNION ALL SELECT 'other', r, c, 7 FROM mat WHERE r = c;
CREATE TABLE rls_reg AS SELECT '$ALICE'::name AS owner, * FROM reg
  UNION ALL SELECT 'other', g, y * 3, x1, x2, x3 FROM reg;
CREATE TABLE rls_users AS SELECT '$ALICE'::name AS owner, uid FROM imp_users
  UNION ALL SELECT 'other', u FROM generate_series(20, 25) u;
GRANT SELECT ON rls_imp, rls_mat, rls_reg, rls_users TO PUBLIC;
ALTER TABLE rls_imp ENABLE ROW LEVEL SECURITY;
ALTER TABLE rls_mat ENABLE ROW LEVEL SECURITY;
ALTER TABLE rls_reg ENABLE ROW LEVEL SECURITY;
ALTER TABLE rls_users ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON rls_imp USING (owner = current_user);
CREATE POLICY own ON rls_mat USING (owner = current_user);
CREATE POLICY own ON rls_reg USING (owner = current_user);
CREATE POLICY own ON rls_users USING (owner = current_user);
SQL

# ---------------------------------------------------------------- 1. privileges
out=$(as_role $MAL <<<"SELECT gpumf_train('public.secret', 'u', 'i', model => 'mal_secret', factors => 2, iterations => 1)")
contains "no SELECT on the source: permission denied" "$out" "permission denied for table secret"
check "no SELECT on the source: no model stored" "$(q "SELECT count(*) FROM gpumf.models WHERE name = 'mal_secret'")" "0"

out=$(as_role $ALICE <<<"SELECT n_rows, n_users FROM gpumf_train('public.rls_src', 'u', 'i', model => 'alice_rls', factors => 2, iterations => 2)")
check "row-level security: training reads only the caller's rows" "$out" \
  "$(q "SELECT count(*) || '|' || count(DISTINCT u) FROM rls_src WHERE owner = '$ALICE'")"
ut=$(q "SELECT user_table FROM gpumf.models WHERE name = 'alice_rls'")
check "row-level security: the model holds only the caller's users" \
  "$(q "SELECT min(key) || '-' || max(key) FROM $ut" 2>&1)" "1-10"
out=$(as_role $BOB <<<"SELECT n_users FROM gpumf_train('public.rls_src', 'u', 'i', model => 'bob_rls', factors => 2, iterations => 2)")
check "row-level security: another role trains on its own rows" "$out" "10"

before=$(model_row alice_rls)
out=$(as_role $BOB <<<"SELECT count(*) FROM gpumf_recommend('alice_rls', 3, 5)")
contains "a role without access cannot serve another's model" "$out" "permission denied"
out=$(as_role $BOB <<<"SELECT gpumf_train('public.src', 'u4', 'i4', model => 'alice_rls', factors => 2, iterations => 1)")
contains "a role without access cannot retrain another's model" "$out" "permission denied"
out=$(as_role $BOB <<<"SELECT gpumf_drop_model('alice_rls')")
contains "a role without access cannot drop another's model" "$out" "permission denied"
out=$(as_role $MAL <<<"SELECT gpumf_drop_model('alice_rls', if_exists => true)")
contains "... nor with if_exists" "$out" "permission denied"
check "the model is unchanged by those attempts" "$(model_row alice_rls)" "$before"

# name squatting: the first trainer owns the name
as_role $MAL <<<"SELECT 1 FROM gpumf_train('public.src', 'u4', 'i4', model => 'squat', factors => 2, iterations => 1)" >/dev/null
before=$(model_row squat)
out=$(as_role $ALICE <<<"SELECT gpumf_train('public.src', 'u4', 'i4', model => 'squat', factors => 2, iterations => 1)")
contains "name squatting: another role cannot take a trained name" "$out" "permission denied"
check "name squatting: the squatted model is unchanged" "$(model_row squat)" "$before"
out=$(q "SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => 'squat', factors => 2, iterations => 1)" 2>&1)
check "a superuser may retrain any model" "$out" "2"
check "a superuser's retraining leaves the owner as it was" "$(owner_of squat)" "$MAL"
check "a superuser may drop any model" "$(q "SELECT gpumf_drop_model('squat')" 2>&1)" "t"
out=$(as_role $ALICE <<<"SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => 'squat', factors => 2, iterations => 1)")
check "a dropped name is free for the next trainer" "$out" "1"
check "... who then owns it" "$(owner_of squat)" "$ALICE"

# members of the owning role share its models
as_role $ALICE <<<"SELECT 1 FROM gpumf_train('public.src', 'u4', 'i4', model => 'alice_src', factors => 2, iterations => 1)" >/dev/null
out=$(as_role $CAROL <<<"SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => 'alice_src', factors => 2, iterations => 1)")
check "a member of the owning role may retrain" "$out" "2"
check "a member's retraining leaves the owner as it was" "$(owner_of alice_src)" "$ALICE"
out=$(as_role $ALICE <<<"SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => 'alice_src', factors => 2, iterations => 1)")
check "the owner still retrains after a member did" "$out" "3"

# grants: carried over to new versions, and revocable by the trainer
as_role $ALICE <<<"SELECT 1 FROM gpumf_train('public.src', 'u4', 'i4', model => 'alice_share', factors => 2, iterations => 1)" >/dev/null
out=$(as_role $ALICE <<SQL
SELECT format('GRANT SELECT ON %s, %s TO $BOB', user_table, item_table) FROM gpumf.models WHERE name = 'alice_share' \gexec
SQL
)
out=$(as_role $BOB <<<"SELECT count(*) FROM gpumf_recommend('alice_share', 1003, 5)")
check "a grant by the trainer lets another role serve" "$out" "5"
out=$(as_role $ALICE <<<"SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => 'alice_share', factors => 2, iterations => 1)")
check "the trainer retrains its shared model" "$out" "2"
out=$(as_role $BOB <<<"SELECT count(*) FROM gpumf_recommend('alice_share', 1003, 5)")
check "the grant carries over to the retrained version" "$out" "5"
out=$(as_role $ALICE <<SQL
SELECT format('REVOKE SELECT ON %s, %s FROM $BOB', user_table, item_table) FROM gpumf.models WHERE name = 'alice_share' \gexec
SQL
)
check "the trainer can revoke after a retraining (no error)" "$out" ""
out=$(as_role $BOB <<<"SELECT count(*) FROM gpumf_recommend('alice_share', 1003, 5)")
contains "the revoked role can no longer serve" "$out" "permission denied"

# a renamed role keeps its model; a new role with the old name gets nothing
as_role $DAVE <<<"SELECT 1 FROM gpumf_train('public.src', 'u4', 'i4', model => 'dave_model', factors => 2, iterations => 1)" >/dev/null
psql -X -qAt -d "$DB" -c "ALTER ROLE $DAVE RENAME TO ${DAVE}_renamed" -c "CREATE ROLE $DAVE LOGIN" >/dev/null 2>&1
out=$(as_role $DAVE <<<"SELECT gpumf_drop_model('dave_model')")
contains "a new role with a renamed owner's old name cannot drop its model" "$out" "permission denied"
out=$(as_role ${DAVE}_renamed <<<"SELECT gpumf_drop_model('dave_model')")
check "the renamed owner can drop its model" "$out" "t"

# ------------------------------------- 1b. privileges: the other functions
# what changes when a call should change nothing: models, their versions
# and metrics, and the tables of schemas public and gpumf
db_state() {
  q "SELECT (SELECT string_agg(name || ':' || version || ':' || coalesce(metrics::text, '-'), ',' ORDER BY name) FROM gpumf.models) || ' | ' ||
            (SELECT count(*) FROM gpumf.model_versions) || ' | ' ||
            (SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_class c
              WHERE c.relnamespace IN ('public'::regnamespace, 'gpumf'::regnamespace) AND c.relkind = 'r')"
}
# a table's rows, by checksum (in text order: the physical order may differ)
table_md5() { q "SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '-') FROM $1 t" 2>&1; }
# the same rows without the RLS tables' owner column
table_md5_no_owner() { q "SELECT count(*) || ' ' || coalesce(md5(string_agg((to_jsonb(t) - 'owner')::text, ',' ORDER BY (to_jsonb(t) - 'owner')::text)), '-') FROM $1 t" 2>&1; }

as_role $MAL <<<"SELECT 1 FROM gpumf_train('public.imp_a', 'u', 'i', 'v', factors => 4, model => 'mal_ev', iterations => 2)" >/dev/null
before=$(db_state)
denied() {  # $1 label, $2 table named in the error, $3 statement (as mallory)
  contains "$1: permission denied" "$(as_role $MAL <<<"$3")" "permission denied for table $2"
}
denied "gpumf_cg_solve without SELECT on the matrix" secret_mat \
  "SELECT x FROM gpumf_cg_solve('public.secret_mat', 'r', 'c', 'v', ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])"
denied "gpumf_spmv without SELECT on the matrix" secret_mat \
  "SELECT gpumf_spmv('public.secret_mat', 'r', 'c', 'v', ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])"
denied "gpumf_linreg without SELECT on the source" secret_reg \
  "SELECT coef FROM gpumf_linreg('public.secret_reg', 'y', '{x1,x2}')"
denied "gpumf_split without SELECT on the source" secret_imp \
  "SELECT train_rows FROM gpumf_split('public.secret_imp', 0.2, 1)"
denied "gpumf_split by user without SELECT on the source" secret_imp \
  "SELECT train_rows FROM gpumf_split('public.secret_imp', 0.2, 1, by => 'user', user_col => 'u', train_table => 'public.mal_tr', test_table => 'public.mal_te')"
denied "gpumf_evaluate (record => true) without SELECT on the test table" secret_imp \
  "SELECT users FROM gpumf_evaluate('mal_ev', 'public.secret_imp', k => 5, record => true)"
denied "gpumf_tune (model => ...) without SELECT on the source" secret_imp \
  "SELECT trial FROM gpumf_tune('public.secret_imp', 'u', 'i', 'v', budget => 2, factors => '{4}', iterations => 2, model => 'mal_tuned')"
denied "gpumf_rmse without SELECT on the test table" secret_imp \
  "SELECT gpumf_rmse('mal_ev', 'public.secret_imp', 'u', 'i', 'v')"
denied "gpumf_recommend_all without SELECT on the users table" secret_imp \
  "SELECT rows_written FROM gpumf_recommend_all('mal_ev', 3, 'public.mal_recs', users => 'public.secret_imp', user_col => 'u')"
# column privileges: SELECT on some columns only
denied "gpumf_cg_solve without SELECT on the value column" cols_mat \
  "SELECT x FROM gpumf_cg_solve('public.cols_mat', 'r', 'c', 'v', ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])"
denied "gpumf_linreg without SELECT on an x column" cols_reg \
  "SELECT coef FROM gpumf_linreg('public.cols_reg', 'y', '{x1,x2}')"
denied "gpumf_tune without SELECT on the value column" cols_imp \
  "SELECT trial FROM gpumf_tune('public.cols_imp', 'u', 'i', 'v', budget => 2, factors => '{4}', iterations => 2, model => 'mal_tuned')"
denied "gpumf_split without SELECT on every column" cols_imp \
  "SELECT train_rows FROM gpumf_split('public.cols_imp', 0.2, 1, by => 'user', user_col => 'u', item_col => 'i', train_table => 'public.mal_tr', test_table => 'public.mal_te')"
# a role without access to the model (bob): no serving, no version switch
no_access() {  # $1 label, $2 statement (as bob)
  contains "a role without access to a model cannot $1" "$(as_role $BOB <<<"$2")" "permission denied"
}
no_access "predict with it" "SELECT gpumf_predict('mal_ev', 3, 7)"
no_access "compute its RMSE" "SELECT gpumf_rmse('mal_ev', 'public.imp', 'u', 'i', 'v')"
no_access "evaluate it" "SELECT users FROM gpumf_evaluate('mal_ev', 'public.imp', k => 5)"
no_access "recommend for a basket" "SELECT item FROM gpumf_recommend_items('mal_ev', ARRAY[1, 5], 3)"
no_access "list similar items" "SELECT item FROM gpumf_similar_items('mal_ev', 5, 3)"
no_access "list similar users" "SELECT \"user\" FROM gpumf_similar_users('mal_ev', 3, 3)"
no_access "recommend for every user" "SELECT rows_written FROM gpumf_recommend_all('mal_ev', 3, 'public.bob_recs')"
no_access "switch its version" "SELECT version FROM gpumf_use_version('mal_ev', 1)"
check "the refused calls changed nothing (models, versions, metrics, tables)" "$(db_state)" "$before"
# a role that may serve the model but does not own it: evaluates, but
# neither records metrics nor switches versions
as_role $MAL <<<"SELECT format('GRANT SELECT ON %s, %s TO $BOB', user_table, item_table) FROM gpumf.models WHERE name = 'mal_ev' \gexec" >/dev/null
check "a role that may serve a model evaluates it" \
  "$(as_role $BOB <<<"SELECT users FROM gpumf_evaluate('mal_ev', 'public.imp', k => 5)")" "40"
contains "... but cannot record metrics of it" \
  "$(as_role $BOB <<<"SELECT users FROM gpumf_evaluate('mal_ev', 'public.imp', k => 5, record => true)")" "permission denied"
contains "... nor switch its version" "$(as_role $BOB <<<"SELECT version FROM gpumf_use_version('mal_ev', 1)")" "permission denied"
check "... which changed nothing" "$(db_state)" "$before"
# ... and the columns granted are enough
tune_cols="trial, factors, regularization, alpha, alpha0, nu, iterations, metric, recall, ndcg, best"
check "gpumf_tune with SELECT on the user and item columns: as on the whole table" \
  "$(as_role $MAL <<<"SELECT $tune_cols FROM gpumf_tune('public.cols_imp', 'u', 'i', budget => 2, factors => '{4}', iterations => 2, seed => 5, metric => 'recall@5')")" \
  "$(q "SELECT $tune_cols FROM gpumf_tune('public.imp', 'u', 'i', budget => 2, factors => '{4}', iterations => 2, seed => 5, metric => 'recall@5')" 2>&1)"
check "gpumf_linreg with SELECT on y and x: as on the whole table" \
  "$(as_role $MAL <<<"SELECT coef, std_err, rows_used FROM gpumf_linreg('public.cols_reg', 'y', '{x1}')")" \
  "$(q "SELECT coef, std_err, rows_used FROM gpumf_linreg('public.reg', 'y', '{x1}')" 2>&1)"
ev_cols="users, skipped_users, skipped_rows, \"precision\", recall, map, ndcg, auc"
check "gpumf_evaluate with SELECT on the user and item columns: as on the whole table" \
  "$(as_role $MAL <<<"SELECT $ev_cols FROM gpumf_evaluate('mal_ev', 'public.cols_imp', k => 5)")" \
  "$(q "SELECT $ev_cols FROM gpumf_evaluate('mal_ev', 'public.imp', k => 5)" 2>&1)"

# row-level security: alice sees her rows of the rls_* tables, which are
# the rows of the public tables; her results are theirs
as_role $ALICE <<<"SELECT 1 FROM gpumf_train('public.imp_a', 'u', 'i', 'v', factors => 4, model => 'alice_ev', iterations => 3, seed => 2)" >/dev/null
rls() {  # $1 label, $2 statement on the rls table (as alice), $3 the same on the visible rows (clean)
  check "row-level security: $1" "$(as_role $ALICE <<<"$2")" "$(q "$3" 2>&1)"
}
cg_b="ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]"
rls "gpumf_cg_solve solves the caller's matrix" \
  "SELECT x, iterations, triangle FROM gpumf_cg_solve('public.rls_mat', 'r', 'c', 'v', $cg_b, tolerance => 1e-12)" \
  "SELECT x, iterations, triangle FROM gpumf_cg_solve('public.mat', 'r', 'c', 'v', $cg_b, tolerance => 1e-12)"
rls "gpumf_spmv multiplies the caller's matrix" \
  "SELECT gpumf_spmv('public.rls_mat', 'r', 'c', 'v', $cg_b, general => true)" \
  "SELECT gpumf_spmv('public.mat', 'r', 'c', 'v', $cg_b, general => true)"
rls "gpumf_linreg fits the caller's rows" \
  "SELECT coef, std_err, r2, rows_used, rows_skipped FROM gpumf_linreg('public.rls_reg', 'y', '{x1,x2,x3}')" \
  "SELECT coef, std_err, r2, rows_used, rows_skipped FROM gpumf_linreg('public.reg', 'y', '{x1,x2,x3}')"
rls "gpumf_linreg_agg over the caller's rows" \
  "SELECT (gpumf_linreg_agg(y, ARRAY[x1, x2])).coef FROM public.rls_reg" \
  "SELECT (gpumf_linreg_agg(y, ARRAY[x1, x2])).coef FROM public.reg"
rls "gpumf_tune searches on the caller's rows" \
  "SELECT $tune_cols FROM gpumf_tune('public.rls_imp', 'u', 'i', 'v', budget => 2, factors => '{4}', iterations => 2, seed => 5, metric => 'recall@5')" \
  "SELECT $tune_cols FROM gpumf_tune('public.imp', 'u', 'i', 'v', budget => 2, factors => '{4}', iterations => 2, seed => 5, metric => 'recall@5')"
rls "gpumf_evaluate reads the caller's test rows" \
  "SELECT $ev_cols FROM gpumf_evaluate('alice_ev', 'public.rls_imp', k => 5)" \
  "SELECT $ev_cols FROM gpumf_evaluate('alice_ev', 'public.imp', k => 5)"
rls "gpumf_rmse reads the caller's test rows" \
  "SELECT gpumf_rmse('alice_ev', 'public.rls_imp', 'u', 'i', 'v')" \
  "SELECT gpumf_rmse('alice_ev', 'public.imp', 'u', 'i', 'v')"
rls "gpumf_split splits the caller's rows" \
  "SELECT train_rows, test_rows FROM gpumf_split('public.rls_imp', 0.3, 11, by => 'user', user_col => 'u', item_col => 'i', train_table => 'public.alice_sp_train', test_table => 'public.alice_sp_test')" \
  "SELECT train_rows, test_rows FROM gpumf_split('public.alice_imp', 0.3, 11, by => 'user', user_col => 'u', item_col => 'i', train_table => 'public.clean_sp_train', test_table => 'public.clean_sp_test')"
check "row-level security: gpumf_split's train table as from the visible rows" "$(table_md5 public.alice_sp_train)" "$(table_md5 public.clean_sp_train)"
check "row-level security: gpumf_split's test table as from the visible rows" "$(table_md5 public.alice_sp_test)" "$(table_md5 public.clean_sp_test)"
rls "gpumf_recommend_all reads the caller's users" \
  "SELECT scored_users, rows_written, unknown_users FROM gpumf_recommend_all('alice_ev', 3, 'public.alice_recs', users => 'public.rls_users', user_col => 'uid')" \
  "SELECT scored_users, rows_written, unknown_users FROM gpumf_recommend_all('alice_ev', 3, 'public.clean_recs', users => 'public.imp_users', user_col => 'uid')"
check "row-level security: gpumf_recommend_all's table as for the visible users" "$(table_md5 public.alice_recs)" "$(table_md5 public.clean_recs)"
# fold-in reads the model's source as its owner: a model of all the rows
# (the superuser's), served to alice, on whom the source's row-level
# security applies, folds nobody in (it would bypass her policy); a basket
# of the rows she can read is what serves her
q "SELECT format('GRANT SELECT ON %s, %s TO $ALICE', user_table, item_table) FROM gpumf_train('public.rls_imp', 'u', 'i', 'v', factors => 4, model => 'rls_fold', iterations => 3)" |
  psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" >/dev/null
contains "row-level security: no fold-in (recompute) past the caller's policy" \
  "$(as_role $ALICE <<<"SELECT item, score FROM gpumf_recommend('rls_fold', 3, 5, recompute => true)")" \
  "row-level security applies to you on it"
check "row-level security: a user the model lacks gets no rows, not rows the caller cannot see" \
  "$(as_role $ALICE <<<"SELECT count(*) FROM gpumf_recommend('rls_fold', 999, 5)")" "0"
rls "a basket of the caller's rows serves instead" \
  "SELECT item, score FROM gpumf_recommend_items('rls_fold', (SELECT array_agg(i ORDER BY i) FROM rls_imp WHERE u = 3), 5,
                                                 (SELECT array_agg(v ORDER BY i) FROM rls_imp WHERE u = 3))" \
  "SELECT item, score FROM gpumf_recommend_items('rls_fold', (SELECT array_agg(i ORDER BY i) FROM imp WHERE u = 3), 5,
                                                 (SELECT array_agg(v ORDER BY i) FROM imp WHERE u = 3))"

# ------------------------- 1c. serving runs no other role's code as the caller
# Fold-in (a user the model lacks, recompute => true) reads the model's
# source; alice's sources run her code: a view whose functions (one of them
# SECURITY DEFINER with a setting of its own), and a forced row-level-
# security policy whose function, report current_user and session_user,
# try ALTER ROLE ... SUPERUSER for her, change the session's settings (SET,
# set_config, RESET ALL), create a temporary table, SET ROLE and SET
# SESSION AUTHORIZATION, and say what they did in a WARNING "fold trap:
# ..." (parallel workers' WARNINGs reach the client too) and a row of
# public.fold_log.  Every serving function runs as the superuser, as bob
# (who may read the sources), as mallory (who may not) and as alice; then a
# source dropped (or renamed) and its name squatted by mallory.
q "CREATE TABLE public.fold_log (who name, sess name, what text); GRANT INSERT ON public.fold_log TO PUBLIC;
   CREATE TABLE public.fold_test AS SELECT u, i, 1::float8 AS v FROM generate_series(1, 40) u, generate_series(1, 25) i WHERE (u * 3 + i) % 7 = 0;
   GRANT SELECT ON public.fold_test TO PUBLIC" >/dev/null
out=$(as_role $ALICE <<SQL
\set ON_ERROR_STOP 1
SET client_min_messages = error;
CREATE TABLE public.alice_fsrc AS
SELECT u, i, md5('i' || i)::uuid AS iu, (1 + (u * i) % 3)::float8 AS v
  FROM generate_series(1, 40) u, generate_series(1, 25) i WHERE (u * 7 + i * 5) % 4 = 0;
CREATE TABLE public.alice_secret (x int);
INSERT INTO public.alice_secret VALUES (42);
CREATE FUNCTION public.alice_trap(u int) RETURNS boolean LANGUAGE plpgsql VOLATILE AS \$f\$
DECLARE
	s text;
	r text := '';
BEGIN
	FOREACH s IN ARRAY ARRAY['ALTER ROLE $ALICE SUPERUSER', 'SET search_path = public', 'SET work_mem = ''7MB''',
		'SELECT set_config(''statement_timeout'', ''1234'', false)', 'RESET ALL',
		'CREATE TEMP TABLE fold_tmp (x int)', 'SET ROLE NONE', 'SET SESSION AUTHORIZATION DEFAULT']
	LOOP
		BEGIN
			EXECUTE s;
			r := r || s || ': ran; ';
		EXCEPTION WHEN OTHERS THEN
			r := r || s || ': refused; ';
		END;
	END LOOP;
	RAISE WARNING 'fold trap: as % for %: %', current_user, session_user, r;
	BEGIN
		INSERT INTO public.fold_log VALUES (current_user, session_user, r);
	EXCEPTION WHEN OTHERS THEN NULL;	-- (a parallel worker cannot write)
	END;
	RETURN true;
END \$f\$;
CREATE FUNCTION public.alice_definer(u int) RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public AS \$f\$
BEGIN
	RETURN public.alice_trap(u);
END \$f\$;
CREATE VIEW public.alice_fview AS SELECT u, i, iu, v FROM public.alice_fsrc WHERE public.alice_definer(u) AND public.alice_trap(u);
-- for parallel workers, which allow no subtransaction: a trap that only reports
CREATE FUNCTION public.alice_ptrap(u int) RETURNS boolean LANGUAGE plpgsql VOLATILE AS \$f\$
BEGIN
	RAISE WARNING 'fold trap: as % for %: pid %', current_user, session_user, pg_backend_pid();
	RETURN true;
END \$f\$;
CREATE VIEW public.alice_pview AS SELECT u, i, v FROM public.alice_fsrc WHERE public.alice_ptrap(u);
CREATE TABLE public.alice_frls AS SELECT * FROM public.alice_fsrc;
ALTER TABLE public.alice_frls ENABLE ROW LEVEL SECURITY;
ALTER TABLE public.alice_frls FORCE ROW LEVEL SECURITY;
CREATE POLICY trap ON public.alice_frls USING (public.alice_trap(u));
GRANT SELECT ON public.alice_fview, public.alice_pview, public.alice_frls TO $BOB;
SELECT 1 FROM gpumf_train('public.alice_fview', 'u', 'i', 'v', factors => 4, model => 'fold_int', iterations => 2);
SELECT 1 FROM gpumf_train('public.alice_fview', 'u', 'iu', 'v', factors => 4, model => 'fold_uuid', iterations => 2);
SELECT 1 FROM gpumf_train('public.alice_frls', 'u', 'i', 'v', factors => 4, model => 'fold_rls', iterations => 2);
SELECT 1 FROM gpumf_train('public.alice_pview', 'u', 'i', 'v', factors => 4, model => 'fold_par', iterations => 2);
SELECT format('GRANT SELECT ON %s, %s TO PUBLIC', user_table, item_table) FROM gpumf.models WHERE name LIKE 'fold\_%' \gexec
-- users who came after training (500, 501), and user 3's rows changed
INSERT INTO public.alice_fsrc VALUES (500, 2, md5('i2')::uuid, 3), (500, 9, md5('i9')::uuid, 1), (500, 14, md5('i14')::uuid, 2),
  (501, 1, md5('i1')::uuid, 1), (501, 5, md5('i5')::uuid, 2), (3, 6, md5('i6')::uuid, 3);
INSERT INTO public.alice_frls SELECT * FROM public.alice_fsrc WHERE u IN (500, 501) OR (u = 3 AND i = 6);
SQL
)
check "alice builds her sources and models" "$(grep -vE '^(1|GRANT)$|fold trap' <<<"$out")" ""
q "TRUNCATE public.fold_log" >/dev/null
# the references: baskets of the users' rows (no source is read for a basket)
basket() {  # $1 model, $2 user, $3 item column, $4 n, $5 item_type carrier
  echo "SELECT item, score FROM gpumf_recommend_items('$1', (SELECT array_agg($3 ORDER BY i) FROM public.alice_fsrc WHERE u = $2), $4,
        (SELECT array_agg(v ORDER BY i) FROM public.alice_fsrc WHERE u = $2), true${5:+, item_type => $5})"
}
declare -A fold_ref
fold_ref[new]=$(q "$(basket fold_int 500 i 5)" 2>&1)
fold_ref[recompute]=$(q "$(basket fold_int 3 i 5)" 2>&1)
fold_ref[text]=$(q "$(basket fold_int 500 i 5 NULL::text)" 2>&1)
fold_ref[uuid]=$(q "$(basket fold_uuid 500 iu 5 NULL::uuid)" 2>&1)
fold_ref[rls]=$(q "$(basket fold_rls 500 i 5)" 2>&1)
check "the basket references are 5 rows each" \
  "$(for r in new recompute text uuid rls; do wc -l <<<"${fold_ref[$r]}"; done | tr '\n' ' ')" "5 5 5 5 5 "
# one session per caller: every serving function, those that fold in and
# those that read no source; the session's settings before and after
fold_body() {
  cat <<SQL
\echo @@ settings before
SELECT current_user, current_setting('search_path'), current_setting('work_mem'), current_setting('statement_timeout');
\echo @@ gpumf_recommend, a new user
SELECT item, score FROM gpumf_recommend('fold_int', 500, 5);
\echo @@ gpumf_recommend, recompute
SELECT item, score FROM gpumf_recommend('fold_int', 3, 5, recompute => true);
\echo @@ gpumf_recommend, the user as text, item_type
SELECT item, score FROM gpumf_recommend('fold_int', '500', 5, true, item_type => NULL::text);
\echo @@ gpumf_recommend_text
SELECT item, score FROM gpumf_recommend_text('fold_int', 500, 5);
\echo @@ gpumf_recommend_uuid
SELECT item, score FROM gpumf_recommend_uuid('fold_uuid', 500, 5);
\echo @@ gpumf_similar_users, a new user
SELECT count(*) FROM gpumf_similar_users('fold_int', 500, 5);
\echo @@ row-level security source, a new user
SELECT item, score FROM gpumf_recommend('fold_rls', 500, 5);
\echo @@ row-level security source, recompute
SELECT item, score FROM gpumf_recommend('fold_rls', 3, 5, recompute => true);
\echo @@ in parallel workers
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'debug_parallel_query'
                       ELSE 'force_parallel_mode' END, 'on', false) \\g /dev/null
SELECT pg_backend_pid() AS leader \\gset
\\echo leader :leader
SELECT count(*) FROM generate_series(500, 501) u, LATERAL gpumf_recommend('fold_par', u, 3) r;
\echo @@ settings after
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
SELECT current_user, current_setting('search_path'), current_setting('work_mem'), current_setting('statement_timeout');
SQL
}
# the serving functions that read no source (in a session of their own)
nofold_body() {
  cat <<SQL
SELECT count(*) FROM gpumf_recommend_items('fold_int', ARRAY[2, 9, 14], 5);
SELECT count(*) FROM gpumf_similar_items('fold_int', 2, 5);
SELECT count(*) FROM gpumf_recommend('fold_int', 7, 5);
SELECT gpumf_predict('fold_int', 7, 2) IS NOT NULL;
SELECT users > 0 FROM gpumf_evaluate('fold_int', 'public.fold_test', k => 5);
SELECT rows_written > 0 FROM gpumf_recommend_all('fold_int', 3, 'pg_temp.fold_recs');
SQL
}
fold_sections="gpumf_recommend, a new user|new
gpumf_recommend, recompute|recompute
gpumf_recommend, the user as text, item_type|text
gpumf_recommend_text|text
gpumf_recommend_uuid|uuid"
# who the trap ran as, for whom: "fold trap: as <role> for <caller>;..."
trap_roles() { grep -oE 'fold trap: as [^ ]+ for [^:]+' <<<"$1" | sort -u | tr '\n' ';'; }
for who in superuser bob mallory alice; do
  case $who in superuser) role=${PGUSER:-postgres} ;; bob) role=$BOB ;; mallory) role=$MAL ;; alice) role=$ALICE ;; esac
  out=$(fold_body | as_role "$role")
  label="fold-in as $who"
  survived "$label" "$out"
  check "$label: the session's settings are as before" "$(section "$out" "settings after")" "$(section "$out" "settings before")"
  o=$(nofold_body | as_role "$role")
  check "$label: the functions that read no source (baskets, similar items, stored users, predict, evaluate, recommend_all) run no source code" \
    "$(grep -c 'fold trap' <<<"$o")" "0"
  check "$label: ... and answer" "$(tr '\n' ' ' <<<"$o")" "5 5 5 t t t "
  if [ $who = mallory ]; then
    # the model is hers to serve, its sources are not hers to read
    check "$label: no source code ran" "$(trap_roles "$out")" ""
    for sec in "gpumf_recommend, a new user" "gpumf_recommend, the user as text, item_type" \
               gpumf_recommend_text gpumf_recommend_uuid "row-level security source, a new user"; do
      check "$label: $sec: no rows (the source is out of reach)" "$(section "$out" "$sec")" ""
    done
    check "$label: gpumf_similar_users: no rows" "$(section "$out" "gpumf_similar_users, a new user")" "0"
    contains "$label: recompute: permission denied" "$(section "$out" "gpumf_recommend, recompute")" \
      "cannot fold a user into model \"fold_int\" from its source public.alice_fview: permission denied"
    check "$label: in parallel workers: no rows" "$(section "$out" "in parallel workers" | grep -v '^leader ')" "0"
    continue
  fi
  check "$label: the source's code ran, as its owner only, never as the caller" \
    "$(trap_roles "$out" | tr ';' '\n' | sed 's/ for .*//' | grep . | sort -u | tr '\n' ';')" "fold trap: as $ALICE;"
  check "$label: ALTER ROLE, SET ROLE, SET SESSION AUTHORIZATION and CREATE TEMP refused to it every time" \
    "$(grep -oE 'fold trap: .*' <<<"$out" | grep -v ': pid [0-9]*$' | grep -vc "ALTER ROLE $ALICE SUPERUSER: refused; .*CREATE TEMP TABLE fold_tmp (x int): refused; SET ROLE NONE: refused; SET SESSION AUTHORIZATION DEFAULT: refused")" "0"
  while IFS='|' read -r sec ref; do
    check "$label: $sec: as a basket of the user's rows" "$(section "$out" "$sec" | grep -v 'fold trap')" "${fold_ref[$ref]}"
  done <<<"$fold_sections"
  check "$label: gpumf_similar_users folds the new user in" "$(section "$out" "gpumf_similar_users, a new user" | grep -v 'fold trap')" "5"
  par=$(section "$out" "in parallel workers")
  check "$label: in parallel workers" "$(grep -v 'fold trap' <<<"$par" | grep -v '^leader ')" "6"
  check "$label: ... the source's code ran in a worker, as its owner" \
    "$(grep -oE 'fold trap: as [^ ]+ for [^:]+: pid [0-9]+' <<<"$par" | grep -v ": pid $(grep -oE '^leader [0-9]+' <<<"$par" | cut -d' ' -f2)\$" | sed 's/: pid .*//' | sort -u)" \
    "fold trap: as $ALICE for $role"
  if [ $who = bob ]; then
    # row-level security applies to bob on alice_frls: no fold-in, and no policy ran for him
    check "$label: row-level security on the source: no rows for a new user, no policy ran" \
      "$(section "$out" "row-level security source, a new user")" ""
    contains "$label: row-level security on the source: recompute refused" \
      "$(section "$out" "row-level security source, recompute")" "row-level security applies to you on it"
  else
    check "$label: a source with a forced policy folds in (the policy run as its owner)" \
      "$(section "$out" "row-level security source, a new user" | grep -v 'fold trap')" "${fold_ref[rls]}"
  fi
done
# gpumf.fold_in = off: the superuser's session reads no source at all
out=$( { echo "SET gpumf.fold_in = off;"; fold_body; } | as_role "${PGUSER:-postgres}")
check "gpumf.fold_in = off: no source code ran" "$(trap_roles "$out")" ""
check "gpumf.fold_in = off: a new user gets no rows" "$(section "$out" "gpumf_recommend, a new user")" ""
contains "gpumf.fold_in = off: recompute says so" "$(section "$out" "gpumf_recommend, recompute")" "gpumf.fold_in is off"
check "the source's code saw only its owner as current_user" "$(q "SELECT string_agg(DISTINCT who::text, ',') FROM public.fold_log")" "$ALICE"
check "... serving the superuser, alice and bob" \
  "$(q "SELECT string_agg(DISTINCT sess::text, ',' ORDER BY sess::text) FROM public.fold_log")" \
  "$(printf '%s\n' "${PGUSER:-postgres}" "$ALICE" "$BOB" | sort | paste -sd,)"
check "the source's owner did not become a superuser" "$(q "SELECT rolsuper FROM pg_roles WHERE rolname = '$ALICE'")" "f"

# a source dropped, and its name squatted: mallory's view in public (which
# everyone may write here) takes the name of alice's dropped source, and of
# one she renamed; mallory's function would copy alice's secret, and says so
out=$(as_role $ALICE <<SQL
\set ON_ERROR_STOP 1
SET client_min_messages = error;
CREATE TABLE public.alice_sq AS SELECT u, i, v FROM public.alice_fsrc WHERE u < 500;
CREATE TABLE public.alice_rn AS SELECT u, i, v FROM public.alice_fsrc WHERE u < 500;
SELECT 1 FROM gpumf_train('public.alice_sq', 'u', 'i', 'v', factors => 4, model => 'sq_model', iterations => 2);
SELECT 1 FROM gpumf_train('public.alice_rn', 'u', 'i', 'v', factors => 4, model => 'rn_model', iterations => 2);
SELECT format('GRANT SELECT ON %s, %s TO PUBLIC', user_table, item_table) FROM gpumf.models WHERE name IN ('sq_model', 'rn_model') \gexec
GRANT SELECT ON public.alice_rn TO $BOB;
INSERT INTO public.alice_rn SELECT u, i, v FROM public.alice_fsrc WHERE u = 500;
DROP TABLE public.alice_sq;
ALTER TABLE public.alice_rn RENAME TO alice_rn_renamed;
SQL
)
check "alice's dropped and renamed sources" "$(grep -vE '^(1|GRANT)$' <<<"$out")" ""
out=$(as_role $MAL <<SQL
\set ON_ERROR_STOP 1
CREATE TABLE public.mal_loot (x int);
GRANT INSERT ON public.mal_loot TO PUBLIC;
CREATE FUNCTION public.mal_trap() RETURNS boolean LANGUAGE plpgsql VOLATILE AS \$f\$
BEGIN
	RAISE WARNING 'squat trap: as % for %', current_user, session_user;
	BEGIN
		INSERT INTO public.mal_loot SELECT x FROM public.alice_secret;
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	RETURN true;
END \$f\$;
CREATE VIEW public.alice_sq AS SELECT 500 AS u, i, 1::float8 AS v FROM generate_series(1, 25) i WHERE public.mal_trap();
CREATE VIEW public.alice_rn AS SELECT 500 AS u, i, 1::float8 AS v FROM generate_series(1, 25) i WHERE public.mal_trap();
GRANT SELECT ON public.alice_sq, public.alice_rn TO PUBLIC;
SQL
)
check "mallory squats the names" "$out" ""
squat_body() {
  cat <<SQL
\echo @@ dropped: a new user
SELECT count(*) FROM gpumf_recommend('sq_model', 500, 5);
\echo @@ dropped: recompute
SELECT count(*) FROM gpumf_recommend('sq_model', 3, 5, recompute => true);
\echo @@ dropped: similar users
SELECT count(*) FROM gpumf_similar_users('sq_model', 500, 5);
\echo @@ renamed: a new user
SELECT item, score FROM gpumf_recommend('rn_model', 500, 5);
SQL
}
rn_ref=$(q "SELECT item, score FROM gpumf_recommend_items('rn_model', (SELECT array_agg(i ORDER BY i) FROM public.alice_rn_renamed WHERE u = 500), 5,
              (SELECT array_agg(v ORDER BY i) FROM public.alice_rn_renamed WHERE u = 500))" 2>&1)
check "the renamed source's reference is 5 rows" "$(wc -l <<<"$rn_ref")" "5"
for who in superuser alice bob; do
  case $who in superuser) role=${PGUSER:-postgres} ;; bob) role=$BOB ;; alice) role=$ALICE ;; esac
  out=$(squat_body | as_role "$role")
  label="squatted names, as $who"
  check "$label: the squatter's code never ran" "$(grep -c 'squat trap' <<<"$out")" "0"
  check "$label: a dropped source folds no new user in" "$(section "$out" "dropped: a new user")" "0"
  contains "$label: recompute says the source was dropped" "$(section "$out" "dropped: recompute")" \
    "cannot fold a user into model \"sq_model\" from its source public.alice_sq: it was dropped"
  check "$label: similar users of a new user: no rows" "$(section "$out" "dropped: similar users")" "0"
  check "$label: a renamed source is followed (its rows, not the squatter's)" "$(section "$out" "renamed: a new user")" "$rn_ref"
done
check "squatted names: nothing was copied to the squatter" "$(q "SELECT count(*) FROM public.mal_loot")" "0"
check "squatted names: the model keeps its source's identity" \
  "$(q "SELECT source_relid::text FROM gpumf.models WHERE name = 'rn_model'")" "alice_rn_renamed"

# ---------------------------------------------- 1d. grants across versions
# Grants follow the model's current version: a kept version's tables carry
# only the owner's SELECT, a version made current (gpumf_use_version) takes
# the current ACL, and so does a retraining's new version.  Every order of
# revoke, retrain and roll-back, each from a model with two versions whose
# current one alice granted to bob; after each step: bob is served exactly
# while his grant stands, reads the current tables directly exactly then,
# reads no kept version's tables, and alice reads every version's.
readable() {  # $1 role, $2 table: ok or denied
  local o; o=$(as_role "$1" <<<"SELECT count(*) >= 0 FROM $2")
  if [ "$o" = t ]; then echo ok; elif grep -q "permission denied for table" <<<"$o"; then echo denied; else echo "?$o"; fi
}
served() {  # $1 model (as bob): ok or denied
  local o; o=$(as_role $BOB <<<"SELECT count(*) FROM gpumf_recommend('$1', 1003, 5)")
  if [ "$o" = 5 ]; then echo ok; elif grep -q "permission denied for model" <<<"$o"; then echo denied; else echo "?$o"; fi
}
acl_state() {  # $1 model
  local m=$1 cur="" kb="" ka="" t
  for t in $(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = '$m'"); do cur="$cur$(readable $BOB "$t"),"; done
  for t in $(q "SELECT v.user_table || ' ' || v.item_table FROM gpumf.model_versions v JOIN gpumf.models m ON m.id = v.model_id WHERE m.name = '$m'"); do
    kb="$kb$(readable $BOB "$t"),"; ka="$ka$(readable $ALICE "$t"),"
  done
  echo "served=$(served "$m") current=$cur kept(bob)=$kb kept(alice)=$ka"
}
expect_state() {  # $1: granted or revoked
  if [ "$1" = granted ]; then echo "served=ok current=ok,ok, kept(bob)=denied,denied, kept(alice)=ok,ok,"
  else echo "served=denied current=denied,denied, kept(bob)=denied,denied, kept(alice)=ok,ok,"; fi
}
acl_op() {  # $1 model, $2 revoke | retrain | rollback (to the newest kept version)
  case $2 in
    revoke) as_role $ALICE <<<"SELECT format('REVOKE SELECT ON %s, %s FROM $BOB', user_table, item_table) FROM gpumf.models WHERE name = '$1' \gexec" ;;
    retrain) as_role $ALICE <<<"SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => '$1', factors => 2, iterations => 1)" ;;
    rollback) as_role $ALICE <<<"SELECT version FROM gpumf_use_version('$1', (SELECT max(v.version) FROM gpumf.model_versions v JOIN gpumf.models m ON m.id = v.model_id WHERE m.name = '$1'))" ;;
  esac
}
two_versions() {  # $1 model: version 1, granted to bob, then version 2
  as_role $ALICE <<SQL >/dev/null
SELECT 1 FROM gpumf_train('public.src', 'u4', 'i4', model => '$1', factors => 2, iterations => 1);
SELECT format('GRANT SELECT ON %s, %s TO $BOB', user_table, item_table) FROM gpumf.models WHERE name = '$1' \gexec
SELECT 1 FROM gpumf_train('public.src', 'u4', 'i4', model => '$1', factors => 2, iterations => 1);
SQL
}
k=0
for order in "revoke retrain rollback" "revoke rollback retrain" "retrain revoke rollback" \
             "retrain rollback revoke" "rollback revoke retrain" "rollback retrain revoke"; do
  k=$((k + 1)); m=acl_$k; state=granted
  two_versions $m
  check "versions ($order): granted, then retrained" "$(acl_state $m)" "$(expect_state granted)"
  steps=""
  for op in $order; do
    steps="$steps, $op"
    acl_op $m $op >/dev/null
    [ $op = revoke ] && state=revoked
    check "versions ($order): after${steps#,}" "$(acl_state $m)" "$(expect_state $state)"
  done
done
# one session of bob's, serving from memory (the model's items are in
# shared memory) while alice, in hers, revokes, rolls back, grants again and
# retrains; and a REPEATABLE READ transaction of his across a retraining
# (his snapshot keeps the replaced version, which keeps only alice's grant:
# access follows the current version) and a revoke
two_versions acl_s
alice_sql() {  # $1 file name, $2 SQL
  printf '%s\n' "$2" > "$tmp/$1.sql"
  printf '\\! psql -X -qAt -d %s -U %s -f %s >/dev/null 2>&1\n' "$DB" "$ALICE" "$tmp/$1.sql"
}
acl_of() { echo "SELECT format('$1 SELECT ON %s, %s $2 $BOB', user_table, item_table) FROM gpumf.models WHERE name = 'acl_s' \\gexec"; }
serve_s="SELECT count(*) FROM gpumf_recommend('acl_s', 1003, 5);"
out=$( {
  echo "\\echo @@ granted"; echo "$serve_s"
  alice_sql revoke "$(acl_of REVOKE FROM)"
  echo "\\echo @@ revoked"; echo "$serve_s"
  alice_sql rollback "SELECT version FROM gpumf_use_version('acl_s', 1);"
  echo "\\echo @@ revoked, rolled back"; echo "$serve_s"
  alice_sql grant "$(acl_of GRANT TO)"
  echo "\\echo @@ granted again"; echo "$serve_s"
  alice_sql retrain "SELECT version FROM gpumf_train('public.src', 'u4', 'i4', model => 'acl_s', factors => 2, iterations => 1);"
  echo "\\echo @@ retrained"; echo "$serve_s"
  echo "\\echo @@ repeatable read, before"; echo "BEGIN ISOLATION LEVEL REPEATABLE READ;"; echo "$serve_s"
  printf '\\! psql -X -qAt -d %s -U %s -f %s >/dev/null 2>&1\n' "$DB" "$ALICE" "$tmp/retrain.sql"
  echo "\\echo @@ repeatable read, retrained meanwhile"; echo "$serve_s"
  echo "SELECT version FROM gpumf.models WHERE name = 'acl_s';"
  printf '\\! psql -X -qAt -d %s -U %s -f %s >/dev/null 2>&1\n' "$DB" "$ALICE" "$tmp/revoke.sql"
  echo "\\echo @@ repeatable read, revoked meanwhile"; echo "$serve_s"
  echo "ROLLBACK;"
} | as_role $BOB )
check "bob's session: served while granted" "$(section "$out" granted)" "5"
contains "bob's session: refused at once after the revoke" "$(section "$out" revoked)" "permission denied for model \"acl_s\""
contains "bob's session: ... and after a roll-back to a version that had his grant" "$(section "$out" "revoked, rolled back")" \
  "permission denied for model \"acl_s\""
check "bob's session: served again once granted again" "$(section "$out" "granted again")" "5"
check "bob's session: served after a retraining" "$(section "$out" retrained)" "5"
check "bob's session, REPEATABLE READ: served" "$(section "$out" "repeatable read, before")" "5"
check "bob's session, REPEATABLE READ: still served the version his snapshot sees after a retraining" \
  "$(section "$out" "repeatable read, retrained meanwhile" | tr '\n' ' ')" "5 3 "
contains "bob's session, REPEATABLE READ: refused once the current version is revoked" \
  "$(section "$out" "repeatable read, revoked meanwhile")" "permission denied for model \"acl_s\""

# ---------------------------------------------------------------- 2. shadowing
# combos "user_col:item_col": each key type once as user and once as item;
# tu, ti: text keys that read as numbers (a text shadowed by an int8 domain
# casts them without an error)
combos="u2:it u4:iu u8:iv ut:i8 uv:i2 uu:i4 tu:ti"
uuid_of() { local h; h=$(printf '%s' "$1" | md5sum | cut -c1-32); echo "${h:0:8}-${h:8:4}-${h:12:4}-${h:16:4}-${h:20:12}"; }
typed_user() {  # $1 column, $2 user number: a literal of the column's type
  case $1 in
    u2) echo "$2::pg_catalog.int2" ;; u4) echo "$((1000 + $2))::pg_catalog.int4" ;;
    u8) echo "$((10000000000 + $2))::pg_catalog.int8" ;; ut) echo "'user $2'::pg_catalog.text" ;;
    uv) echo "'v$2'::pg_catalog.varchar" ;; uu) echo "'$(uuid_of "u$2")'::pg_catalog.uuid" ;;
    tu) echo "'$2'::pg_catalog.text" ;;
  esac
}
text_user() {  # the same user as an untyped literal (the text overloads)
  case $1 in
    u2) echo "'$2'" ;; u4) echo "'$((1000 + $2))'" ;; u8) echo "'$((10000000000 + $2))'" ;;
    ut) echo "'user $2'" ;; uv) echo "'v$2'" ;; uu) echo "'$(uuid_of "u$2")'" ;; tu) echo "'$2'" ;;
  esac
}
rec_fn() { case $1 in i2|i4|i8) echo gpumf_recommend ;; iu) echo gpumf_recommend_uuid ;; *) echo gpumf_recommend_text ;; esac; }

# The statements of one combo, for model prefix $3 (c: clean, h: mallory,
# s: superuser); sections marked "@@ label".  Only pg_catalog-qualified
# types: the session shadows the unqualified ones.
body() {  # $1 user col, $2 item col, $3 prefix
  local m=$3_$1_$2 c=c_$1_$2 fn; fn=$(rec_fn "$2")
  cat <<SQL
\echo @@ train
SELECT n_users, n_items, n_rows, nnz, version FROM gpumf_train('public.src', '$1', '$2', 'v', factors => 4, model => '$m', iterations => 3, seed => 7);
\echo @@ retrain
SELECT n_users, n_items, n_rows, nnz, version FROM gpumf_train('public.src', '$1', '$2', 'v', factors => 4, model => '$m', iterations => 3, seed => 7);
\echo @@ $fn, typed user
SELECT item, score FROM $fn('$m', $(typed_user "$1" 3), 5);
\echo @@ $fn, user as text
SELECT item, score FROM $fn('$m', $(text_user "$1" 17), 5);
\echo @@ gpumf_recommend_text, exclude_seen false
SELECT item, score FROM gpumf_recommend_text('$m', $(typed_user "$1" 17), 6, false);
\echo @@ unknown user
SELECT pg_catalog.count(*) FROM $fn('$m', $(typed_user "$1" 999), 5);
\echo @@ $fn of the clean model
SELECT item, score FROM $fn('$c', $(typed_user "$1" 3), 5);
SQL
}
# checksum of a model's factor tables
tables_md5() {
  local ut it
  ut=$(q "SELECT user_table FROM gpumf.models WHERE name = '$1'")
  it=$(q "SELECT item_table FROM gpumf.models WHERE name = '$1'")
  [ -n "$ut" ] || { echo "no model $1"; return; }
  q "SELECT (SELECT md5(string_agg(format('%s|%s|%s', key, factors, seen), ',' ORDER BY key)) FROM $ut) || ' ' ||
            (SELECT md5(string_agg(format('%s|%s|%s', idx, key, factors), ',' ORDER BY idx)) FROM $it)" 2>&1
}
misc_body() {
  cat <<SQL
\echo @@ gpumf_synthetic
SELECT * FROM gpumf_synthetic(40, 30, 300, seed => 5, min_per_user => 5, clusters => 4);
\echo @@ gpumf_device_info
SELECT backend, device FROM gpumf_device_info();
SQL
}
# The other functions, for prefix $1 (c, h, s): each session splits, trains
# and evaluates its own models and tables, named with its prefix.  Types,
# functions and operators in these statements are qualified (the session
# shadows the unqualified ones); new tables are named unqualified once each.
more_body() {
  local p=$1 ev="public.\"$1 ev\"\"\\test\""
  cat <<SQL
\echo @@ gpumf_split by row
SELECT train_rows, test_rows FROM gpumf_split('public.imp', 0.25, 7, train_table => 'public.${p}_sp_row_train', test_table => '${p}_sp_row_test');
\echo @@ gpumf_split by user
SELECT train_rows, test_rows FROM gpumf_split('public.imp', 0.3, 11, by => 'user', user_col => 'u', item_col => 'i', train_table => 'public.${p}_sp_user_train', test_table => 'public.${p}_sp_user_test');
\echo @@ gpumf_split by time
SELECT train_rows, test_rows FROM gpumf_split('public.imp', 0.2, 3, by => 'time', user_col => 'u', time_col => 't', train_table => 'public.${p}_sp_time_train', test_table => 'public.${p}_sp_time_test');
\echo @@ gpumf_split, default table names
CREATE TABLE public.${p}_copy AS SELECT * FROM public.imp;
SELECT train_rows, test_rows FROM gpumf_split('public.${p}_copy', 0.5, 1);
\echo @@ train on the split
SELECT n_users, n_items, n_rows, nnz, version FROM gpumf_train('public.${p}_sp_user_train', 'u', 'i', 'v', factors => 4, model => '${p}_imp', iterations => 3, seed => 7);
\echo @@ gpumf_evaluate, record
SELECT users, skipped_users, skipped_rows, "precision", recall, map, ndcg, auc, rmse, mae, backend FROM gpumf_evaluate('${p}_imp', 'public.${p}_sp_user_test', k => 5, record => true);
\echo @@ gpumf_evaluate, a test table whose name needs quoting
CREATE TABLE $ev AS SELECT * FROM public.${p}_sp_user_test;
SELECT users, "precision", recall, ndcg FROM gpumf_evaluate('${p}_imp', '$ev', 'u', 'i', 5, record => true);
\echo @@ gpumf_evaluate, columns named
SELECT users, skipped_users, skipped_rows, "precision", recall, map, ndcg, auc FROM gpumf_evaluate('${p}_imp', 'public.imp', 'u', 'i', 3);
\echo @@ gpumf_predict
SELECT gpumf_predict('${p}_imp', 3, 7), gpumf_predict('${p}_imp', '3', '7'), gpumf_predict('${p}_imp', 3::pg_catalog.int8, 7::pg_catalog.int2), gpumf_predict('${p}_imp', 999, 7) IS NULL;
\echo @@ gpumf_recommend, candidates and exclude
SELECT item, score FROM gpumf_recommend('${p}_imp', 3, 4, true, candidates => ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], exclude => ARRAY[7, 11]);
\echo @@ gpumf_recommend, recompute
SELECT item, score FROM gpumf_recommend('${p}_imp', 3, 5, recompute => true);
\echo @@ gpumf_recommend, a new user folded in
INSERT INTO public.${p}_sp_user_train (u, i, v) VALUES (500, 1, 3), (500, 5, 1), (500, 9, 2);
SELECT item, score FROM gpumf_recommend('${p}_imp', 500, 5, true, item_type => NULL::pg_catalog.text);
\echo @@ gpumf_recommend_items
SELECT item, score FROM gpumf_recommend_items('${p}_imp', ARRAY[1, 5, 9], 5, ARRAY[2, 1, 1]);
SELECT item, score FROM gpumf_recommend_items('${p}_imp', '{1,5}', 4, NULL, false, item_type => NULL::pg_catalog.text);
\echo @@ gpumf_similar_items
SELECT item, score FROM gpumf_similar_items('${p}_imp', 5, 4);
SELECT item, score FROM gpumf_similar_items('${p}_imp', '5', 3, NULL::pg_catalog.text);
\echo @@ gpumf_similar_users
SELECT "user", score FROM gpumf_similar_users('${p}_imp', 3, 4);
SELECT "user", score FROM gpumf_similar_users('${p}_imp', 500, 3);
\echo @@ gpumf_recommend_all
SELECT scored_users, rows_written, unknown_users, backend FROM gpumf_recommend_all('${p}_imp', 3, 'public.${p}_recs');
SELECT scored_users, rows_written, unknown_users FROM gpumf_recommend_all('${p}_imp', 2, '${p}_recs_some', users => 'public.imp_users', user_col => 'uid', exclude_seen => false);
\echo @@ gpumf_tune
SELECT trial, factors, regularization, alpha, alpha0, nu, iterations, metric, recall, ndcg, best FROM gpumf_tune('public.imp', 'u', 'i', 'v', metric => 'recall@5', budget => 3, factors => '{4,8}', iterations => 3, seed => 3, model => '${p}_tuned');
\echo @@ explicit training
SELECT n_users, global_mean, value_min, value_max, train_rmse, final_loss FROM gpumf_train('public.rat', 'user_id', 'item_id', 'rating', factors => 4, model => '${p}_exp', iterations => 4, algorithm => 'als_explicit', seed => 3);
\echo @@ gpumf_rmse
SELECT gpumf_rmse('${p}_exp', 'public.rat', 'user_id', 'item_id', 'rating'), gpumf_rmse('${p}_exp', 'public.rat', 'user_id', 'item_id', 'rating', clip => true);
\echo @@ gpumf_predict, explicit
SELECT gpumf_predict('${p}_exp', 1, 2), gpumf_predict('${p}_exp', 1, 2, clip => true);
\echo @@ gpumf_evaluate, explicit
SELECT users, rmse, mae, ndcg FROM gpumf_evaluate('${p}_exp', 'public.rat', k => 3);
\echo @@ retrain under extra_float_digits = -15
SET extra_float_digits = -15;
SELECT version FROM gpumf_train('public.rat', 'user_id', 'item_id', 'rating', factors => 4, model => '${p}_exp', iterations => 2, algorithm => 'als_explicit', seed => 5);
RESET extra_float_digits;
\echo @@ gpumf_model_versions
SELECT version, "current", tables_exist FROM gpumf_model_versions('${p}_exp');
\echo @@ gpumf_use_version
SELECT n_users, global_mean, value_min, value_max, train_rmse, final_loss FROM gpumf_use_version('${p}_exp', 1);
\echo @@ gpumf_predict after gpumf_use_version
SELECT gpumf_predict('${p}_exp', 1, 2), gpumf_predict('${p}_exp', 1, 2, clip => true);
\echo @@ versions of a model with uuid users and text items
SELECT version FROM gpumf_train('public.src', 'uu', 'it', factors => 2, model => '${p}_ver', iterations => 1);
SELECT version FROM gpumf_train('public.src', 'uu', 'it', factors => 2, model => '${p}_ver', iterations => 2);
SELECT version, n_users FROM gpumf_use_version('${p}_ver', 1);
SELECT version, "current", tables_exist FROM gpumf_model_versions('${p}_ver');
SELECT item, score FROM gpumf_recommend('${p}_ver', '$(uuid_of u3)'::pg_catalog.uuid, 3, true, item_type => NULL::pg_catalog.text);
\echo @@ gpumf_shared_models
SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>=) 0 FROM gpumf_shared_models();
\echo @@ gpumf_synthetic_ratings
SELECT pg_catalog.count(*), pg_catalog.md5(pg_catalog.string_agg(r::pg_catalog.text, ',' ORDER BY r.user_id, r.item_id)) FROM gpumf_synthetic_ratings(30, 20, 200, rank => 2, seed => 4) r;
\echo @@ gpumf_cg_solve
SELECT x, iterations, converged, triangle, device FROM gpumf_cg_solve('public.mat', 'r', 'c', 'v', ARRAY[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], tolerance => 1e-12);
SELECT x, iterations, converged, triangle FROM gpumf_cg_solve('public.mat0', 'i', 'j', 'a', ARRAY[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], base => 0, preconditioner => 'none', arithmetic => 'single');
\echo @@ gpumf_spmv
SELECT gpumf_spmv('public.mat', 'r', 'c', 'v', ARRAY[1, -1, 2, 0.5, 0, 0, 1, 1, 1, 1, 1, 1]), gpumf_spmv('public.mat0', 'i', 'j', 'a', ARRAY[1, -1, 2, 0.5, 0, 0, 1, 1, 1, 1, 1, 1], base => 0, general => true);
\echo @@ gpumf_linreg
SELECT terms, coef, std_err, t_stat, p_value, r2, adj_r2, residual_se, condition_number, rows_used, rows_skipped, device FROM gpumf_linreg('public.reg', 'y', '{x1,x2,x3}');
SELECT terms, coef, r2, rows_used FROM gpumf_linreg('public.reg', 'y', ARRAY['x1']::pg_catalog.name[], intercept => false);
\echo @@ gpumf_linreg_agg
SELECT (gpumf_linreg_agg(y, ARRAY[x1, x2])).coef FROM public.reg;
SELECT r.g, (r.f).terms, (r.f).coef, (r.f).rows_used, (r.f).rows_skipped FROM (SELECT g, gpumf_linreg_agg(y, ARRAY[x1, x2], false) AS f FROM public.reg GROUP BY g) r ORDER BY r.g;
\echo @@ gpumf_linreg_predict
SELECT gpumf_linreg_predict(ARRAY[1, 2, 3]::pg_catalog.float8[], ARRAY[0.5, 2]::pg_catalog.float8[]), gpumf_linreg_predict((gpumf_linreg('public.reg', 'y', '{x1,x2}')).coef, ARRAY[3, 1]::pg_catalog.float8[]);
SQL
}
# the tables more_body creates, and its models
more_tables="sp_row_train sp_row_test sp_user_train sp_user_test sp_time_train sp_time_test copy_train copy_test recs recs_some"
more_models="imp exp ver tuned"
# a model's catalog row without what differs between sessions (ids, names,
# times, owner, source: the session's own table) and its metrics
cat_skip="'{id,name,created_at,replaced_at,read_seconds,build_seconds,transfer_seconds,train_seconds,loss_seconds,store_seconds,user_table,item_table,owner,source,source_relid,metrics}'::text[]"
catalog_of() { q "SELECT to_jsonb(m) - $cat_skip FROM gpumf.models m WHERE name = '$1'" 2>&1; }
kept_of() {
  q "SELECT string_agg((v.catalog - $cat_skip)::text, ';' ORDER BY v.version) FROM gpumf.model_versions v JOIN gpumf.models m ON m.id = v.model_id WHERE m.name = '$1'" 2>&1
}

# the clean reference: a superuser with the default search_path, before any
# hostile object exists
declare -A clean
for c in $combos; do
  clean[$c]=$( { body "${c%%:*}" "${c##*:}" c; } | psql -X -qAt -d "$DB" 2>&1)
done
clean_misc=$(misc_body | psql -X -qAt -d "$DB" 2>&1)
check "the clean reference of synthetic and device_info has no error" "$(grep -E '^(ERROR|WARNING)' <<<"$clean_misc")" ""
clean_more=$(more_body c | psql -X -qAt -d "$DB" 2>&1)
check "the clean reference of the other functions has no error" "$(grep -E '^(ERROR|WARNING)' <<<"$clean_more")" ""
# mallory may read the clean models (to serve them in her session)
q "SELECT format('GRANT SELECT ON %s, %s TO $MAL;', user_table, item_table) FROM gpumf.models WHERE name LIKE 'c\_%'" |
  psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" >/dev/null

# mallory's objects in public: they trap sessions whose search_path puts
# public before pg_catalog (the superuser below)
out=$(as_role $MAL <<'SQL'
\set ON_ERROR_STOP 1
CREATE SEQUENCE public.hostile_trace_seq;
GRANT USAGE, UPDATE ON SEQUENCE public.hostile_trace_seq TO PUBLIC;
CREATE FUNCTION public.hostile_trace(what pg_catalog.text) RETURNS pg_catalog.bool
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_catalog.nextval('public.hostile_trace_seq'::pg_catalog.regclass);
	RAISE WARNING 'hostile object executed: % (as %)', what, pg_catalog.current_user();
	RETURN true;
END $$;
-- creates, in schema s, domains named like built-in types (over other
-- types), the operators = and <> on key and catalog types, and functions
-- named like built-in ones: each calls hostile_trace, then does the real work
CREATE FUNCTION public.hostile_objects(s pg_catalog.text) RETURNS void
LANGUAGE plpgsql AS $f$
DECLARE
	d pg_catalog.text[];
	o pg_catalog.text[];
	f pg_catalog.text[];
	fn pg_catalog.text;
BEGIN
	FOREACH d SLICE 1 IN ARRAY ARRAY[
		['text', 'int8'], ['int8', 'text'], ['int4', 'int8'], ['int2', 'int8'],
		['float8', 'text'], ['float4', 'text'], ['uuid', 'text'], ['varchar', 'int8'],
		['bpchar', 'int8'], ['name', 'int8'], ['oid', 'text'], ['regclass', 'text'],
		['xid8', 'text'], ['numeric', 'text'], ['jsonb', 'text'], ['regrole', 'text'],
		['bool', 'int4'], ['timestamptz', 'text'], ['regtype', 'text'], ['regproc', 'text'],
		['json', 'text'], ['date', 'text'], ['timestamp', 'text'], ['interval', 'text'],
		['bytea', 'text']]
	LOOP
		EXECUTE pg_catalog.format('CREATE DOMAIN %I.%I AS pg_catalog.%I CHECK (public.hostile_trace(%L))',
			s, d[1], d[2], 'domain ' || s || '.' || d[1]);
	END LOOP;
	FOREACH o SLICE 1 IN ARRAY ARRAY[
		['text', 'text', 'texteq', 'textne'], ['int8', 'int8', 'int8eq', 'int8ne'],
		['int4', 'int4', 'int4eq', 'int4ne'], ['int2', 'int2', 'int2eq', 'int2ne'],
		['uuid', 'uuid', 'uuid_eq', 'uuid_ne'], ['oid', 'oid', 'oideq', 'oidne'],
		['xid8', 'xid8', 'xid8eq', 'xid8ne'], ['name', 'name', 'nameeq', 'namene'],
		['name', 'text', 'nameeqtext', 'namenetext'], ['text', 'name', 'texteqname', 'textnename'],
		['oid', 'int4', 'oideq', 'oidne'], ['int8', 'int4', 'int84eq', 'int84ne'],
		['int4', 'int8', 'int48eq', 'int48ne'], ['regclass', 'regclass', 'oideq', 'oidne']]
	LOOP
		FOR i IN 0..1 LOOP
			fn := pg_catalog.format('%I.%I', s, 'hostile_' || o[3 + i] || '_' || o[1] || '_' || o[2]);
			EXECUTE pg_catalog.format(
				'CREATE FUNCTION %s(a pg_catalog.%I, b pg_catalog.%I) RETURNS pg_catalog.bool LANGUAGE plpgsql AS '
				'$b$ BEGIN PERFORM public.hostile_trace(%L); RETURN pg_catalog.%I(a::pg_catalog.%I, b::pg_catalog.%I); END $b$',
				fn, o[1], o[2], 'operator ' || s || '.' || (CASE i WHEN 0 THEN '=' ELSE '<>' END) || ' (' || o[1] || ', ' || o[2] || ')',
				o[3 + i], CASE WHEN o[3] = 'oideq' THEN 'oid' ELSE o[1] END, CASE WHEN o[3] = 'oideq' THEN 'oid' ELSE o[2] END);
			EXECUTE pg_catalog.format('CREATE OPERATOR %I.%s (LEFTARG = pg_catalog.%I, RIGHTARG = pg_catalog.%I, FUNCTION = %s)',
				s, CASE i WHEN 0 THEN '=' ELSE '<>' END, o[1], o[2], fn);
		END LOOP;
	END LOOP;
	-- more operators, with the argument types of pg_catalog's exactly
	-- (comparisons, arithmetic, text and jsonb): operator, left, right,
	-- result, the function that implements it
	FOREACH o SLICE 1 IN ARRAY ARRAY[
		['<', 'int8', 'int8', 'bool', 'int8lt'], ['<=', 'int8', 'int8', 'bool', 'int8le'],
		['>', 'int8', 'int8', 'bool', 'int8gt'], ['>=', 'int8', 'int8', 'bool', 'int8ge'],
		['<', 'int8', 'int4', 'bool', 'int84lt'], ['<=', 'int8', 'int4', 'bool', 'int84le'],
		['<', 'int4', 'int4', 'bool', 'int4lt'], ['<=', 'int4', 'int4', 'bool', 'int4le'],
		['>', 'int4', 'int4', 'bool', 'int4gt'], ['>=', 'int4', 'int4', 'bool', 'int4ge'],
		['<', 'float8', 'float8', 'bool', 'float8lt'], ['>', 'float8', 'float8', 'bool', 'float8gt'],
		['=', 'float8', 'float8', 'bool', 'float8eq'],
		['<', 'timestamptz', 'timestamptz', 'bool', 'timestamptz_lt'],
		['=', 'timestamptz', 'timestamptz', 'bool', 'timestamptz_eq'],
		['+', 'int8', 'int8', 'int8', 'int8pl'], ['-', 'int8', 'int8', 'int8', 'int8mi'],
		['+', 'int8', 'int4', 'int8', 'int84pl'], ['-', 'int8', 'int4', 'int8', 'int84mi'],
		['*', 'int8', 'int8', 'int8', 'int8mul'],
		['+', 'int4', 'int4', 'int4', 'int4pl'], ['-', 'int4', 'int4', 'int4', 'int4mi'],
		['*', 'int4', 'int4', 'int4', 'int4mul'],
		['+', 'float8', 'float8', 'float8', 'float8pl'], ['-', 'float8', 'float8', 'float8', 'float8mi'],
		['*', 'float8', 'float8', 'float8', 'float8mul'], ['/', 'float8', 'float8', 'float8', 'float8div'],
		['||', 'text', 'text', 'text', 'textcat'], ['||', 'jsonb', 'jsonb', 'jsonb', 'jsonb_concat'],
		['-', 'jsonb', 'text', 'jsonb', 'jsonb_delete'], ['->', 'jsonb', 'text', 'jsonb', 'jsonb_object_field'],
		['->>', 'jsonb', 'text', 'text', 'jsonb_object_field_text'], ['=', 'jsonb', 'jsonb', 'bool', 'jsonb_eq']]
	LOOP
		fn := pg_catalog.format('%I.%I', s, 'hostile_op_' || o[5]);
		EXECUTE pg_catalog.format(
			'CREATE FUNCTION %s(a pg_catalog.%I, b pg_catalog.%I) RETURNS pg_catalog.%I LANGUAGE plpgsql AS '
			'$b$ BEGIN PERFORM public.hostile_trace(%L); RETURN pg_catalog.%I(a, b); END $b$',
			fn, o[2], o[3], o[4], 'operator ' || s || '.' || o[1] || ' (' || o[2] || ', ' || o[3] || ')', o[5]);
		EXECUTE pg_catalog.format('CREATE OPERATOR %I.%s (LEFTARG = pg_catalog.%I, RIGHTARG = pg_catalog.%I, FUNCTION = %s)',
			s, o[1], o[2], o[3], fn);
	END LOOP;
	-- name, arguments, result, the real call
	FOREACH f SLICE 1 IN ARRAY ARRAY[
		['now', '', 'timestamptz', 'pg_catalog.now()'],
		['nextval', 'r pg_catalog.regclass', 'int8', 'pg_catalog.nextval(r)'],
		['pg_current_xact_id', '', 'xid8', 'pg_catalog.pg_current_xact_id()'],
		['format', 'a pg_catalog.text, b pg_catalog.text, c pg_catalog.int8, d pg_catalog.int4', 'text', 'pg_catalog.format(a, b, c, d)'],
		['format', 'a pg_catalog.text, b pg_catalog.text', 'text', 'pg_catalog.format(a, b)'],
		['format', 'a pg_catalog.text, b pg_catalog.text, c pg_catalog.text', 'text', 'pg_catalog.format(a, b, c)'],
		['quote_ident', 'a pg_catalog.text', 'text', 'pg_catalog.quote_ident(a)'],
		['quote_literal', 'a pg_catalog.text', 'text', 'pg_catalog.quote_literal(a)'],
		['set_config', 'a pg_catalog.text, b pg_catalog.text, c pg_catalog.bool', 'text', 'pg_catalog.set_config(a, b, c)'],
		['current_setting', 'a pg_catalog.text', 'text', 'pg_catalog.current_setting(a)'],
		['pg_advisory_xact_lock', 'a pg_catalog.int4, b pg_catalog.int4', 'void', 'pg_catalog.pg_advisory_xact_lock(a, b)'],
		['pg_advisory_xact_lock', 'a pg_catalog.int8', 'void', 'pg_catalog.pg_advisory_xact_lock(a)'],
		['hashtext', 'a pg_catalog.text', 'int4', 'pg_catalog.hashtext(a)'],
		['lower', 'a pg_catalog.text', 'text', 'pg_catalog.lower(a)'],
		['length', 'a pg_catalog.text', 'int4', 'pg_catalog.length(a)'],
		['md5', 'a pg_catalog.text', 'text', 'pg_catalog.md5(a)'],
		['to_jsonb', 'a anyelement', 'jsonb', 'pg_catalog.to_jsonb(a)'],
		['array_length', 'a anyarray, b pg_catalog.int4', 'int4', 'pg_catalog.array_length(a, b)'],
		['pg_get_userbyid', 'a pg_catalog.oid', 'name', 'pg_catalog.pg_get_userbyid(a)'],
		['has_table_privilege', 'a pg_catalog.text, b pg_catalog.text', 'bool', 'pg_catalog.has_table_privilege(a, b)'],
		['to_regclass', 'a pg_catalog.text', 'regclass', 'pg_catalog.to_regclass(a)'],
		-- what gpumf_split, the kept versions and the catalog's writes use
		['hash_record_extended', 'a pg_catalog.record, b pg_catalog.int8', 'int8', 'pg_catalog.hash_record_extended(a, b)'],
		['hashint8', 'a pg_catalog.int8', 'int4', 'pg_catalog.hashint8(a)'],
		['round', 'a pg_catalog.float8', 'float8', 'pg_catalog.round(a)'],
		['round', 'a pg_catalog.numeric, b pg_catalog.int4', 'numeric', 'pg_catalog.round(a, b)'],
		['clock_timestamp', '', 'timestamptz', 'pg_catalog.clock_timestamp()'],
		['jsonb_populate_record', 'a pg_catalog.anyelement, b pg_catalog.jsonb', 'anyelement', 'pg_catalog.jsonb_populate_record(a, b)'],
		['jsonb_build_object', '', 'jsonb', 'pg_catalog.jsonb_build_object()'],
		['random', '', 'float8', 'pg_catalog.random()'],
		['setseed', 'a pg_catalog.float8', 'void', 'pg_catalog.setseed(a)'],
		['abs', 'a pg_catalog.float8', 'float8', 'pg_catalog.abs(a)'],
		['sqrt', 'a pg_catalog.float8', 'float8', 'pg_catalog.sqrt(a)'],
		['quote_nullable', 'a pg_catalog.text', 'text', 'pg_catalog.quote_nullable(a)'],
		['format_type', 'a pg_catalog.oid, b pg_catalog.int4', 'text', 'pg_catalog.format_type(a, b)'],
		['has_schema_privilege', 'a pg_catalog.text, b pg_catalog.text', 'bool', 'pg_catalog.has_schema_privilege(a, b)'],
		['has_column_privilege', 'a pg_catalog.text, b pg_catalog.text, c pg_catalog.text', 'bool', 'pg_catalog.has_column_privilege(a, b, c)'],
		-- (not a window function: an unqualified row_number() OVER fails)
		['row_number', '', 'int8', '0']]
	LOOP
		EXECUTE pg_catalog.format(
			'CREATE FUNCTION %I.%I(%s) RETURNS pg_catalog.%I LANGUAGE plpgsql AS '
			'$b$ BEGIN PERFORM public.hostile_trace(%L); %s %s; END $b$',
			s, f[1], f[2], f[3], 'function ' || s || '.' || f[1] || '(' || f[2] || ')',
			CASE WHEN f[3] = 'void' THEN 'PERFORM' ELSE 'RETURN' END, f[4]);
	END LOOP;
	EXECUTE pg_catalog.format(
		'CREATE FUNCTION %I.aclexplode(acl pg_catalog.aclitem[], OUT grantor pg_catalog.oid, OUT grantee pg_catalog.oid, '
		'OUT privilege_type pg_catalog.text, OUT is_grantable pg_catalog.bool) RETURNS SETOF record LANGUAGE plpgsql AS '
		'$b$ BEGIN PERFORM public.hostile_trace(%L); RETURN QUERY SELECT * FROM pg_catalog.aclexplode(acl); END $b$',
		s, 'function ' || s || '.aclexplode');
	EXECUTE pg_catalog.format(
		'CREATE FUNCTION %I.unnest(a pg_catalog.anyarray) RETURNS SETOF pg_catalog.anyelement LANGUAGE plpgsql AS '
		'$b$ BEGIN PERFORM public.hostile_trace(%L); RETURN QUERY SELECT * FROM pg_catalog.unnest(a); END $b$',
		s, 'function ' || s || '.unnest(anyarray)');
	EXECUTE pg_catalog.format(
		'CREATE FUNCTION %I.generate_series(a pg_catalog.int4, b pg_catalog.int4) RETURNS SETOF pg_catalog.int4 LANGUAGE plpgsql AS '
		'$b$ BEGIN PERFORM public.hostile_trace(%L); RETURN QUERY SELECT * FROM pg_catalog.generate_series(a, b); END $b$',
		s, 'function ' || s || '.generate_series(int4, int4)');
	-- aggregates named like built-in ones (the same argument types): name,
	-- arguments, the step's arguments after the state, state type, the
	-- step's result, initial state ('': the first value, strict step)
	FOREACH f SLICE 1 IN ARRAY ARRAY[
		['count', '*', '', 'int8', 'pg_catalog.int8inc(st)', '0'],
		['sum', 'pg_catalog.float8', ', a pg_catalog.float8', 'float8', 'pg_catalog.float8pl(st, a)', ''],
		['sum', 'pg_catalog.int8', ', a pg_catalog.int8', 'int8', 'pg_catalog.int8pl(st, a)', ''],
		['sum', 'pg_catalog.int4', ', a pg_catalog.int4', 'int8', 'pg_catalog.int84pl(st, a)', '0'],
		['max', 'pg_catalog.int4', ', a pg_catalog.int4', 'int4', 'pg_catalog.int4larger(st, a)', ''],
		['max', 'pg_catalog.int8', ', a pg_catalog.int8', 'int8', 'pg_catalog.int8larger(st, a)', ''],
		['max', 'pg_catalog.float8', ', a pg_catalog.float8', 'float8', 'pg_catalog.float8larger(st, a)', ''],
		['min', 'pg_catalog.int4', ', a pg_catalog.int4', 'int4', 'pg_catalog.int4smaller(st, a)', ''],
		['string_agg', 'pg_catalog.text, pg_catalog.text', ', a pg_catalog.text, d pg_catalog.text', 'text',
		 'pg_catalog.textcat(pg_catalog.textcat(st, d), a)', ''],
		['array_agg', 'pg_catalog.anynonarray', ', a pg_catalog.anynonarray', 'anyarray', 'pg_catalog.array_append(st, a)', '{}']]
	LOOP
		fn := pg_catalog.format('%I.%I', s, 'hostile_step_' || f[1] || '_' || pg_catalog.md5(f[2]));
		EXECUTE pg_catalog.format(
			'CREATE FUNCTION %s(st pg_catalog.%I%s) RETURNS pg_catalog.%I LANGUAGE plpgsql %s AS '
			'$b$ BEGIN PERFORM public.hostile_trace(%L); RETURN %s; END $b$',
			fn, f[4], f[3], f[4], CASE f[6] WHEN '' THEN 'STRICT' ELSE '' END,
			'aggregate ' || s || '.' || f[1] || '(' || f[2] || ')', f[5]);
		EXECUTE pg_catalog.format('CREATE AGGREGATE %I.%I(%s) (SFUNC = %s, STYPE = pg_catalog.%I%s)',
			s, f[1], f[2], fn, f[4], CASE f[6] WHEN '' THEN '' ELSE pg_catalog.format(', INITCOND = %L', f[6]) END);
	END LOOP;
END $f$;
SELECT public.hostile_objects('public');
-- views named like gpumf's tables and the names its statements use
DO $$
DECLARE
	t pg_catalog.text;
BEGIN
	FOREACH t IN ARRAY ARRAY['models', 'model_versions', 'retired_tables']
	LOOP
		EXECUTE pg_catalog.format('CREATE VIEW public.%I AS SELECT * FROM gpumf.%I WHERE public.hostile_trace(%L)',
			t, t, 'view public.' || t);
	END LOOP;
	FOREACH t IN ARRAY ARRAY['gpumf_s', 'gpumf_test', 'gpumf_train', 'gpumf_split_test', 'old', 'w']
	LOOP
		EXECUTE pg_catalog.format('CREATE VIEW public.%I AS SELECT 1 AS hostile WHERE public.hostile_trace(%L)',
			t, 'view public.' || t);
	END LOOP;
END $$;
SQL
)
check "mallory creates her objects in public" "$out" ""

# her session: the same objects in pg_temp, and temporary views named like
# catalog tables, gpumf's tables and factor tables (present and next ones)
mal_preamble() {
  cat <<'SQL'
\echo @@ preamble
SELECT public.hostile_objects('pg_temp');
DO $$
DECLARE
	t pg_catalog.text;
BEGIN
	FOREACH t IN ARRAY ARRAY['pg_class', 'pg_namespace', 'pg_roles', 'pg_authid', 'pg_type',
		'pg_proc', 'pg_extension', 'pg_depend', 'pg_index', 'pg_stat_activity', 'pg_locks', 'pg_settings']
	LOOP
		EXECUTE pg_catalog.format('CREATE TEMP VIEW %I AS SELECT * FROM pg_catalog.%I WHERE public.hostile_trace(%L)',
			t, t, 'temp view ' || t);
	END LOOP;
	-- (pg_attribute has an anyarray column: not every column)
	EXECUTE 'CREATE TEMP VIEW pg_attribute AS SELECT attrelid, attname, atttypid, attnum, attisdropped '
		'FROM pg_catalog.pg_attribute WHERE public.hostile_trace(''temp view pg_attribute'')';
	EXECUTE 'CREATE TEMP VIEW models AS SELECT * FROM gpumf.models WHERE public.hostile_trace(''temp view models'')';
	EXECUTE 'CREATE TEMP VIEW retired_tables AS SELECT * FROM gpumf.retired_tables WHERE public.hostile_trace(''temp view retired_tables'')';
	EXECUTE 'CREATE TEMP VIEW model_versions AS SELECT * FROM gpumf.model_versions WHERE public.hostile_trace(''temp view model_versions'')';
	-- the sources and tables of the other functions (always named
	-- qualified), the names gpumf_split's statement uses, and the new
	-- tables' names given unqualified
	FOREACH t IN ARRAY ARRAY['src', 'imp', 'imp_users', 'rat', 'mat', 'mat0', 'reg', 'gpumf_s', 'gpumf_test',
		'gpumf_train', 'gpumf_split_test', 'old', 'w', 'h_sp_row_test', 'h_recs_some', 'h_copy_train', 'h_copy_test']
	LOOP
		EXECUTE pg_catalog.format('CREATE TEMP VIEW %I AS SELECT 1 AS hostile WHERE public.hostile_trace(%L)',
			t, 'temp view ' || t);
	END LOOP;
	FOR i IN 1 .. (SELECT pg_catalog.max(id) + 12 FROM gpumf.models) LOOP
		FOR v IN 1 .. 3 LOOP
			EXECUTE pg_catalog.format('CREATE TEMP VIEW %I (key, factors, seen) AS SELECT 0::pg_catalog.int8, ''{}''::pg_catalog.float4[], ''{}''::pg_catalog.int4[] WHERE public.hostile_trace(%L)',
				'm' || i || '_v' || v || '_users', 'temp view m' || i || '_v' || v || '_users');
			EXECUTE pg_catalog.format('CREATE TEMP VIEW %I (idx, key, factors) AS SELECT 0::pg_catalog.int4, 0::pg_catalog.int8, ''{}''::pg_catalog.float4[] WHERE public.hostile_trace(%L)',
				'm' || i || '_v' || v || '_items', 'temp view m' || i || '_v' || v || '_items');
		END LOOP;
	END LOOP;
END $$;
SET search_path = public, pg_catalog;
SQL
}
su_preamble() { printf '%s\n' '\echo @@ preamble' 'SET search_path = public, pg_catalog;'; }
# each session first checks that its shadowing objects are in place
preamble_ok() { check "$1: shadowing objects in place" "$(section "$2" preamble)" ""; }

declare -A model_tables
for who in mallory superuser; do
  if [ $who = mallory ]; then pre=mal_preamble; pfx=h; role=$MAL; else pre=su_preamble; pfx=s; role=${PGUSER:-postgres}; fi
  for c in $combos; do
    u=${c%%:*}; i=${c##*:}
    out=$( { $pre; body "$u" "$i" $pfx; } | as_role "$role")
    label="$who, $u x $i keys"
    survived "$label" "$out"
    preamble_ok "$label" "$out"
    for s in train retrain "$(rec_fn "$i"), typed user" "$(rec_fn "$i"), user as text" \
             "gpumf_recommend_text, exclude_seen false" "unknown user" "$(rec_fn "$i") of the clean model"; do
      check "$label: $s as in a clean session" "$(section "$out" "$s" | grep -v 'hostile object executed')" \
        "$(section "${clean[$c]}" "$s")"
    done
    check "$label: the factor tables equal the clean model's" "$(tables_md5 ${pfx}_${u}_${i})" "$(tables_md5 c_${u}_${i})"
    # (read in a clean session: a regtype prints qualified where shadowed)
    check "$label: the key types in the catalog are the clean model's" \
      "$(q "SELECT user_type::text || ' ' || item_type::text FROM gpumf.models WHERE name = '${pfx}_${u}_${i}'")" \
      "$(q "SELECT user_type::text || ' ' || item_type::text FROM gpumf.models WHERE name = 'c_${u}_${i}'")"
    no_trace "$label" "$out"
    model_tables[$pfx:$c]=$(q "SELECT user_table || ' ' || item_table FROM gpumf.models WHERE name = '${pfx}_${u}_${i}'")
  done
  out=$( { $pre; misc_body; } | as_role "$role")
  survived "$who, synthetic and device_info" "$out"
  preamble_ok "$who, synthetic and device_info" "$out"
  for s in gpumf_synthetic gpumf_device_info; do
    check "$who: $s as in a clean session" "$(section "$out" "$s" | grep -v 'hostile object executed')" "$(section "$clean_misc" "$s")"
  done
  no_trace "$who, synthetic and device_info" "$out"
  # the other functions
  out=$( { $pre; more_body $pfx; } | as_role "$role")
  label="$who, the other functions"
  survived "$label" "$out"
  preamble_ok "$label" "$out"
  while IFS= read -r s; do
    check "$who: ${s#@@ } as in a clean session" "$(section "$out" "${s#@@ }" | grep -v 'hostile object executed')" \
      "$(section "$clean_more" "${s#@@ }")"
  done < <(grep '^@@ ' <<<"$clean_more")
  for t in $more_tables; do
    check "$who: table ${pfx}_$t as in a clean session" "$(table_md5 "public.${pfx}_$t")" "$(table_md5 "public.c_$t")"
  done
  for m in $more_models; do
    check "$who: the factor tables of ${pfx}_$m equal the clean model's" "$(tables_md5 ${pfx}_$m)" "$(tables_md5 c_$m)"
    check "$who: the catalog row of ${pfx}_$m is the clean model's" "$(catalog_of ${pfx}_$m)" "$(catalog_of c_$m)"
    check "$who: the kept versions of ${pfx}_$m are the clean model's" "$(kept_of ${pfx}_$m)" "$(kept_of c_$m)"
  done
  check "$who: the metrics gpumf_evaluate recorded are the clean session's" \
    "$(q "SELECT metrics - 'test' FROM gpumf.models WHERE name = '${pfx}_imp'")" "$(q "SELECT metrics - 'test' FROM gpumf.models WHERE name = 'c_imp'")"
  check "$who: gpumf_evaluate records the test table's name, quoted" \
    "$(q "SELECT metrics->>'test' FROM gpumf.models WHERE name = '${pfx}_imp'")" "public.\"${pfx} ev\"\"\\test\""
  check "$who: gpumf_use_version restores the version's catalog row exactly" \
    "$(section "$out" gpumf_use_version)" "$(section "$out" "explicit training")"
  no_trace "$label" "$out"
  more_dropped=$(q "SELECT string_agg(t, ' ') FROM (SELECT user_table AS t FROM gpumf.models WHERE name LIKE '${pfx}\_%' UNION ALL
                    SELECT item_table FROM gpumf.models WHERE name LIKE '${pfx}\_%' UNION ALL
                    SELECT v.user_table FROM gpumf.model_versions v JOIN gpumf.models m ON m.id = v.model_id WHERE m.name LIKE '${pfx}\_%' UNION ALL
                    SELECT v.item_table FROM gpumf.model_versions v JOIN gpumf.models m ON m.id = v.model_id WHERE m.name LIKE '${pfx}\_%') x")
  # drop: each model and its tables go
  out=$( { $pre; echo '\echo @@ drop'; for c in $combos; do echo "SELECT gpumf_drop_model('${pfx}_${c%%:*}_${c##*:}');"; done
           echo '\echo @@ drop the others'; for m in $more_models; do echo "SELECT gpumf_drop_model('${pfx}_$m');"; done; } | as_role "$role")
  survived "$who, drop" "$out"
  check "$who: gpumf_drop_model returns true for each model" "$(section "$out" drop | grep -v 'hostile object executed' | tr '\n' ' ')" "t t t t t t t "
  check "$who: gpumf_drop_model returns true for the other functions' models" \
    "$(section "$out" "drop the others" | grep -v 'hostile object executed' | tr '\n' ' ')" "t t t t "
  left=$(for c in $combos; do for t in ${model_tables[$pfx:$c]:-}; do q "SELECT to_regclass('$t')"; done; done | grep -v '^$' | tr '\n' ' ')
  check "$who: the dropped models' tables are gone" "$left" ""
  left=$(for t in $more_dropped; do q "SELECT to_regclass('$t')"; done | grep -v '^$' | tr '\n' ' ')
  check "$who: the tables of the other models' versions are gone" "$left" ""
  check "$who: the dropped models' catalog rows are gone" "$(q "SELECT count(*) FROM gpumf.models WHERE name LIKE '${pfx}\_%'")" "0"
  no_trace "$who, drop" "$out"
done

check "no shadowing object ran in any session (trace sequence never called)" \
  "$(q "SELECT is_called FROM public.hostile_trace_seq")" "f"

# ---------------------------------------------------------------- the server
check "the postmaster survived (same PID)" "${srv%% *}" "${srv0%% *}"
check "no crash restart (same checkpointer; $crashes crash(es) seen)" "$srv" "$srv0"
if [ -n "$log" ]; then
  sig=$(tail -c +$((log_start + 1)) "$log" | grep -E 'terminated by signal|was terminated by exception' | head -3)
  check "no backend terminated by a signal in the server log" "$sig" ""
else
  echo "# server log not found (set GPUMF_PGLOG): log check skipped"
fi

# the models first: a dropped model's shared segments are let go, but those
# of a dropped database stay listed (and pinned) until the server restarts
q "SELECT count(gpumf_drop_model(name)) FROM gpumf.models" >/dev/null 2>&1
dropdb --if-exists "$DB" >/dev/null 2>&1
for r in $ROLES; do psql -X -qAt -d postgres -c "DROP ROLE IF EXISTS $r" >/dev/null 2>&1; done
echo "# hostile.sh: $(( $(date +%s) - t_start )) s"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
