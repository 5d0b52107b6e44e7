#!/bin/bash
# The README's pg_cron recipe, as a test: schedule a retraining every minute
# in another database with cron.schedule_in_database, wait for pg_cron to run
# it, and check that the model's version went up and that
# cron.job_run_details records the run as succeeded.  Needs a server started
# with shared_preload_libraries = pg_cron (test/pgenv.sh does this) and
# gpumf installed.  Prints "ok N - ..." lines and "N passed, M failed".
set -u
DB=gpumf_cron
JOB=gpumf-test-retrain
pass=0; fail=0; n=0
ok()   { n=$((n+1)); pass=$((pass+1)); echo "ok $n - $1"; }
bad()  { n=$((n+1)); fail=$((fail+1)); echo "not ok $n - $1${2:+: $2}"; }
q()  { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }

preload=$(psql -X -qAt -d postgres -c "SHOW shared_preload_libraries" 2>&1)
case "$preload" in
  *pg_cron*) ok "pg_cron is preloaded" ;;
  *) bad "pg_cron is preloaded" "shared_preload_libraries = '$preload' (start the server with test/pgenv.sh)"; finish ;;
esac
cron_db=$(psql -X -qAt -d postgres -c "SHOW cron.database_name")

dropdb --if-exists "$DB" >/dev/null 2>&1; createdb "$DB" || { bad "create database"; finish; }
q "CREATE EXTENSION gpumf" >/dev/null
q "CREATE TABLE ratings AS SELECT user_id, item_id, value FROM gpumf_synthetic(500, 200, 10000, seed => 7)"
v1=$(q "SET gpumf.progress = off; SELECT version FROM gpumf_train('public.ratings', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'movies')")

# the recipe: pg_cron lives in cron.database_name; jobs for other databases
# are scheduled there with cron.schedule_in_database
psql -X -qAt -v ON_ERROR_STOP=1 -d "$cron_db" >/dev/null <<SQL
CREATE EXTENSION IF NOT EXISTS pg_cron;
SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = '$JOB';
SELECT cron.schedule_in_database('$JOB', '* * * * *',
  \$\$SELECT 1 FROM gpumf_train('public.ratings', 'user_id', 'item_id', 'value',
                               factors => 8, iterations => 2, model => 'movies')\$\$,
  '$DB');
SQL
if [ $? = 0 ]; then ok "a retraining is scheduled with cron.schedule_in_database"; else bad "a retraining is scheduled"; finish; fi

# pg_cron runs jobs at the start of each minute: wait up to two of them
status=""
for _ in $(seq 1 65); do
  sleep 2
  status=$(psql -X -qAt -d "$cron_db" -c "SELECT d.status || ': ' || coalesce(d.return_message, '') FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname = '$JOB' AND d.status IN ('succeeded', 'failed') ORDER BY d.runid LIMIT 1")
  [ -n "$status" ] && break
done
case "$status" in
  succeeded*) ok "cron.job_run_details shows the run succeeded" ;;
  "") bad "cron.job_run_details shows the run succeeded" "no finished run within 130 s" ;;
  *) bad "cron.job_run_details shows the run succeeded" "$status" ;;
esac
v2=$(q "SELECT version FROM gpumf.models WHERE name = 'movies'")
if [ -n "$v2" ] && [ "$v2" -gt "$v1" ]; then ok "the scheduled retraining made a new version ($v1 -> $v2)"; else bad "the scheduled retraining made a new version" "version $v1 -> $v2"; fi
q "SELECT count(*) FROM gpumf_recommend('movies', 1, 5)" | grep -qx 5 && ok "the retrained model serves" || bad "the retrained model serves"

psql -X -qAt -d "$cron_db" -c "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = '$JOB'" >/dev/null
dropdb --if-exists "$DB" >/dev/null 2>&1
finish
