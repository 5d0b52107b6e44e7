#!/bin/bash
# Build and run gpumf's linear-algebra GPU checks and benchmark in one go
# (about 5 minutes on an H100 with 16 cores).  On the GPU machine, from the
# repository root:
#     bash test/bench/gpu/linalg_run.sh            full run
#     bash test/bench/gpu/linalg_run.sh --quick    correctness only
# Logs go to $OUT (default /tmp/gpumf_linalg): machine.txt, build.log,
# ptxas.txt (register report), linalg_bench.log.  Ends with "N passed, M failed".
# GPUMF_KEEP_BUILD=1: no register report (arch_run.sh).
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/gpumf_linalg}
mkdir -p "$OUT"
{
	echo "== machine"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
	nvcc --version | tail -1
	echo "cores: $(nproc)"
	python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1
} 2>&1 | tee "$OUT/machine.txt"
if ! make -C cuda -j"$(nproc)" linalg-bench >"$OUT/build.log" 2>&1; then
	tail -30 "$OUT/build.log"
	echo "0 passed, 1 failed"
	exit 1
fi
[ -n "${GPUMF_KEEP_BUILD:-}" ] || make -C cuda resources >"$OUT/ptxas.txt" 2>&1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
./test/bench/gpu/linalg_bench --dir "$OUT/matrices" --cupy test/bench/gpu/linalg_cupy.py "$@" 2>&1 |
	tee "$OUT/linalg_bench.log"
rc=$?
rm -rf "$OUT/matrices"
exit $rc
