#!/bin/bash
# gpumf_train at scale (test/bench/scale/bench.py): build and install gpumf
# into the server PGHOST/PGPORT point at (test/pgenv.sh starts a throw-away
# one when none answers; BUILD=0 skips the build), then run bench.py, whose
# table also goes to $OUT/scale_bench.md (OUT default /tmp/gpumf_scale).
#   bash test/bench/scale/run.sh                     # 200,000 rows on the CPU: a check, not a timing
#   source .pgbundle/device-pg.sh && DEVICE=gpu ROWS=200000000 USERS=8000000 ITEMS=1000000 \
#     SESSIONS=15 ITERS=10 bash test/bench/scale/run.sh
set -e
cd "$(dirname "$0")/../../.."
[ -n "${PGHOST:-}" ] || source test/pgenv.sh
export OUT=${OUT:-/tmp/gpumf_scale}
mkdir -p "$OUT"
if [ "${BUILD:-1}" = 1 ]; then
  make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$OUT/build.log" 2>&1
  make -s PG_CONFIG="$PG_CONFIG" install >>"$OUT/build.log" 2>&1
fi
exec python3 test/bench/scale/bench.py
