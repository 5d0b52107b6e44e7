#!/bin/bash
# Build and run the explicit models' GPU checks + benchmark in one go.
# On the GPU machine, from the repository root:
#     bash test/bench/gpu/run_explicit.sh            # checks, then the Netflix-shaped benchmark
#     bash test/bench/gpu/run_explicit.sh --quick    # checks only
# Arguments go to the program (--seed N, --cpu-iterations N).  Logs go to
# $OUT (default /tmp/gpumf_explicit): machine.txt, build.log, ptxas.txt, bench.log.
# GPUMF_KEEP_BUILD=1: no register report (arch_run.sh).
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/gpumf_explicit}
mkdir -p "$OUT"
{
	echo "== machine"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
	nvcc --version | tail -1
	nproc
	git log -1 --format='commit %h %s' 2>/dev/null
	ls /usr/lib/x86_64-linux-gnu/libopenblas* 2>/dev/null || echo "no OpenBLAS: core built with -DGM_NO_CBLAS"
} 2>&1 | tee "$OUT/machine.txt"
if ! make -C cuda -j8 explicit-bench >"$OUT/build.log" 2>&1; then
	tail -30 "$OUT/build.log"
	exit 1
fi
[ -n "${GPUMF_KEEP_BUILD:-}" ] || make -C cuda resources >"$OUT/ptxas.txt" 2>&1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
./test/bench/gpu/mf_explicit_bench "$@" 2>&1 | tee "$OUT/bench.log"
