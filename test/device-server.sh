# Source this on a GPU machine that has no PostgreSQL, from the repository
# root, after copying .pgbundle/ there (../shared/tools/pg-bundle.sh makes it):
#     source test/device-server.sh && GPUMF_TEST_DEVICE=gpu bash test/run_all.sh
# It sources .pgbundle/device-pg.sh (unpacks the bundle, starts a throw-away
# cluster owned by user 'pg' on a socket in /tmp, exports PATH, PG_CONFIG,
# PGHOST, PGUSER, PGDATABASE), then restarts that cluster once with the
# settings the suite needs: cron.host = /tmp (pg_cron reaches the server
# through its socket: the cluster listens on no TCP address), 60 connections,
# background workers for a parallel read on every core (72 worker processes,
# 64 parallel workers), and memory for the benchmarks.  Exports GPUMF_PGDATA, so that the
# reliability suite finds the server log (/tmp/pg.log).
source .pgbundle/device-pg.sh || return 1
if [ ! -f /tmp/pgdata/.gpumf-settings ]; then
  su pg -c "LD_LIBRARY_PATH=$LD_LIBRARY_PATH $(dirname "$PG_CONFIG")/pg_ctl -D /tmp/pgdata -l /tmp/pg.log -w -m fast \
    -o \"-k /tmp -c listen_addresses= -c shared_preload_libraries=pg_cron -c cron.database_name=postgres -c cron.host=/tmp -c max_connections=60 -c max_worker_processes=72 -c max_parallel_workers=64 -c shared_buffers=4GB -c max_wal_size=8GB\" restart" >/dev/null \
    || { tail -20 /tmp/pg.log; return 1; }
  touch /tmp/pgdata/.gpumf-settings
fi
export GPUMF_PGDATA=/tmp/pgdata
