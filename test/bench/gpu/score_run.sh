#!/bin/bash
# Build and run the batch scorer's checks and benchmark on the GPU machine,
# then the CuPy baseline on the same problem.  From the repository root:
#   bash test/bench/gpu/score_run.sh            # full run (ML-20M shape), about 2 minutes
#   bash test/bench/gpu/score_run.sh --quick    # the random-problem checks only
# Logs go to $OUT (default /tmp/gpumf_score), the problem's files to $DATA
# (default /tmp/gpumf_score_data, about 250 MB).  Ends with "N passed, M failed".
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/gpumf_score}
DATA=${DATA:-/tmp/gpumf_score_data}
mkdir -p "$OUT" "$DATA"
quick=0
for a in "$@"; do [ "$a" = --quick ] && quick=1; done
{
	echo "== machine"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
	nvcc --version | tail -1
	nproc
} 2>&1 | tee "$OUT/score-machine.txt"
if ! make -C cuda -j8 gpumf_cuda.so ../test/bench/gpu/score_bench >"$OUT/score-build.log" 2>&1; then
	tail -30 "$OUT/score-build.log"
	echo "0 passed, 1 failed"
	exit 1
fi
[ -n "${GPUMF_KEEP_BUILD:-}" ] ||
	(cd cuda && nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Icommon -I../src/core/common -I../src/core/serve -Xcompiler -fPIC \
		-Xptxas -v -c serve/score.cu -o /dev/null) >"$OUT/score-ptxas.txt" 2>&1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
./test/bench/gpu/score_bench --out "$DATA" "$@" 2>&1 | tee "$OUT/score-bench.log"
P=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/score-bench.log" | tail -1 | cut -d' ' -f1)
F=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/score-bench.log" | tail -1 | cut -d' ' -f3)
P=${P:-0}; F=${F:-1}
if [ $quick = 0 ]; then
	echo
	echo "== CuPy baseline"
	python3 test/bench/gpu/score_cupy.py "$DATA" 2>&1 | tee "$OUT/score-cupy.log"
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/score-cupy.log" | tail -1)
	if [ -n "$line" ]; then
		P=$((P + $(echo "$line" | cut -d' ' -f1))); F=$((F + $(echo "$line" | cut -d' ' -f3)))
	else
		F=$((F + 1))
	fi
fi
echo "$P passed, $F failed"
[ "$F" = 0 ]
