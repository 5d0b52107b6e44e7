#!/bin/bash
# Build and run gpumf's GPU benchmark + correctness checks in one go.
# On the GPU machine, from the repository root:   bash test/bench/gpu/run.sh
# Arguments go to the benchmark (--quick: correctness only; --k 64,128,256).
# Full logs go to $OUT (default /tmp/gpumf_bench).  GPUMF_KEEP_BUILD=1: build on
# what is there (no clean) and skip the register report (arch_run.sh: its
# variant's build, GPUMF_CUDA_ARCHS and GPUMF_CUDA_PTX, is kept).
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/gpumf_bench}
mkdir -p "$OUT"
{
	echo "== machine"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
	nvcc --version | tail -1
	nproc
	ls /usr/lib/x86_64-linux-gnu/libopenblas* 2>/dev/null || echo "no OpenBLAS: core built with -DGM_NO_CBLAS"
} 2>&1 | tee "$OUT/machine.txt"
[ -n "${GPUMF_KEEP_BUILD:-}" ] || make -C cuda clean >/dev/null
if ! make -C cuda -j8 bench >"$OUT/build.log" 2>&1; then
	tail -30 "$OUT/build.log"
	exit 1
fi
[ -n "${GPUMF_KEEP_BUILD:-}" ] || make -C cuda resources >"$OUT/ptxas.txt" 2>&1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
./test/bench/gpu/gpu_als_bench "$@" 2>&1 | tee "$OUT/bench.log"
