# Source this: makes sure a PostgreSQL server of PG_CONFIG's major is
# reachable and exports PATH, PG_CONFIG, PGHOST, PGPORT, PGUSER, PGDATABASE
# for it.
#  - If PGHOST (and PGPORT/PGUSER) already point at a running server, use it.
#  - Otherwise start a throw-away cluster in $GPUMF_PGDATA (default
#    /tmp/gpumf-pgdata) on port ${GPUMF_PGPORT:-5499}, owned by the non-root
#    user 'postgres' (created by Debian's postgresql package), socket in /tmp.
# PG_CONFIG picks the installation (default: Debian's PostgreSQL 15; another
# major: scripts/pg-wheel.sh, or a distribution's pg_config); its bindir goes
# first on PATH, so initdb, pg_ctl and psql are of the same build.  A server
# of another major than PG_CONFIG's (a PGHOST left over, an old data
# directory) is an error, not a run against the wrong server.
export PG_CONFIG=${PG_CONFIG:-$(command -v /usr/lib/postgresql/15/bin/pg_config || command -v pg_config)}
export PATH=$($PG_CONFIG --bindir):$PATH
# the server's major must be PG_CONFIG's
pgenv_same_major() {
  local want have
  want=$($PG_CONFIG --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
  have=$(psql -X -qAt -d "${PGDATABASE:-postgres}" -c "SELECT current_setting('server_version_num')::int / 10000" 2>&1)
  [ "$have" = "$want" ] && return 0
  echo "pgenv.sh: the server on ${PGHOST}:${PGPORT:-5432} is PostgreSQL $have, PG_CONFIG ($PG_CONFIG) is $want" >&2
  return 1
}
if [ -n "${PGHOST:-}" ] && pg_isready -q; then
  pgenv_same_major || { return 1 2>/dev/null || exit 1; }
  return 0 2>/dev/null || exit 0
fi
export GPUMF_PGDATA=${GPUMF_PGDATA:-/tmp/gpumf-pgdata}   # (exported: the reliability suite reads $GPUMF_PGDATA.log)
export PGHOST=/tmp PGPORT=${GPUMF_PGPORT:-5499} PGDATABASE=postgres
if [ "$(id -u)" = 0 ]; then
  owner=postgres
  id "$owner" >/dev/null 2>&1 || useradd -m "$owner"
  as_owner() { su "$owner" -s /bin/bash -c "cd / && PATH=$PATH $*"; }
else
  owner=$(id -un)
  as_owner() { bash -c "$*"; }
fi
export PGUSER=postgres
if ! pg_isready -q; then
  preload=""
  # pg_cron connects to the server over libpq: through the socket directory,
  # since the cluster listens on no TCP address
  [ -f "$($PG_CONFIG --pkglibdir)/pg_cron.so" ] && preload="-c shared_preload_libraries=pg_cron -c cron.database_name=postgres -c cron.host=/tmp"
  if [ ! -f "$GPUMF_PGDATA/PG_VERSION" ]; then
    rm -rf "$GPUMF_PGDATA"; mkdir -p "$GPUMF_PGDATA"; chown "$owner" "$GPUMF_PGDATA"
    as_owner "initdb -D $GPUMF_PGDATA -A trust -U postgres >$GPUMF_PGDATA.initdb.log 2>&1" \
      || { cat "$GPUMF_PGDATA.initdb.log"; return 1 2>/dev/null || exit 1; }
  fi
  as_owner "pg_ctl -D $GPUMF_PGDATA -l $GPUMF_PGDATA.log -w -o \"-p $PGPORT -k /tmp -c listen_addresses='' -c max_connections=50 $preload\" start >/dev/null" \
    || { cat "$GPUMF_PGDATA.log"; return 1 2>/dev/null || exit 1; }
fi
pgenv_same_major || { return 1 2>/dev/null || exit 1; }
