#!/bin/bash
# The SQL path benchmark in one command: build and install gpumf into the
# server PGHOST/PGPORT point at (test/pgenv.sh starts a throw-away one when
# none answers), then run bench.py.  Its tables go to stdout and to
# $OUT/sql_path_bench.md (OUT defaults to /tmp/gpumf_sql_path), with the
# build log, the machine and bench.py's stderr beside them.
#
# On the GPU machine (no internet: the Gowalla split travels in the
# repository's ignored .bench-data/, see test/bench/sql_path/README.md):
#     source .pgbundle/device-pg.sh && DEVICE=gpu bash test/bench/sql_path/run.sh
# Settings (DEVICE, SOURCES, FACTORS, ITERS, REPEAT, WORKERS, GOWALLA, KEEP)
# are bench.py's; BUILD=0 skips the build and install.
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/gpumf_sql_path}
mkdir -p "$OUT"
source test/pgenv.sh || exit 1
if [ "${BUILD:-1}" != 0 ]; then
	if ! { make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$OUT/build.log" 2>&1 &&
		make -s PG_CONFIG="$PG_CONFIG" install >>"$OUT/build.log" 2>&1; }; then
		tail -30 "$OUT/build.log"
		echo "build failed"
		exit 1
	fi
fi
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2>/dev/null)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
	echo "settings: DEVICE=${DEVICE:-auto} SOURCES=${SOURCES:-1m 20m} FACTORS=${FACTORS:-64 512} ITERS=${ITERS:-} REPEAT=${REPEAT:-2} WORKERS=${WORKERS:-}"
} | tee "$OUT/machine.txt"
python3 test/bench/sql_path/bench.py 2>"$OUT/bench.err" | tee "$OUT/sql_path_bench.md"
rc=$?
[ $rc -eq 0 ] || tail -20 "$OUT/bench.err"
exit $rc
