#!/bin/bash
# The implicit-ALS runs on a GPU machine, from the repository root, in one go:
#
#   bash test/bench/gpu/ials_run.sh bench [--quick] [--k 64,...]   checks + per-iteration times (gpu_als_bench)
#   bash test/bench/gpu/ials_run.sh quality DIR NAME run key=value ... [-- ...]
#   bash test/bench/gpu/ials_run.sh quality DIR NAME tune key=value ...
#
# DIR holds a LightGCN-format split (train.txt, test.txt), e.g. .data/gowalla
# (never committed); synthetic:USERS is the ML-20M-shaped synthetic data
# (synthetic:138493 the full size); a path ending in u.data (or .data) a
# MovieLens-style ratings file.  Builds the CUDA module, the benchmark and ials_quality
# first.  Logs go to $OUT (default /tmp/gpumf_bench).
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/gpumf_bench}
mkdir -p "$OUT"
what=$1
shift
if [ ! -f "$OUT/machine.txt" ]; then
	{
		echo "== machine"
		nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
		nvcc --version | tail -1
		nproc
		ls /usr/lib/x86_64-linux-gnu/libopenblas* 2>/dev/null || echo "no OpenBLAS: core built with -DGM_NO_CBLAS"
	} 2>&1 | tee "$OUT/machine.txt"
fi
if [ ! -x test/bench/gpu/gpu_als_bench ] || [ ! -x test/bench/quality/ials_quality ]; then
	if ! { make -C cuda -j"$(nproc)" bench && make -C test/bench/quality; } >"$OUT/build.log" 2>&1; then
		tail -30 "$OUT/build.log"
		exit 1
	fi
	make -C cuda resources >"$OUT/ptxas.txt" 2>&1
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
case "$what" in
	bench)
		./test/bench/gpu/gpu_als_bench "$@" 2>&1 | tee -a "$OUT/bench.log"
		;;
	quality)
		dir=$1
		name=$2
		shift 2
		case "$dir" in
			synthetic:*) src=(--synthetic "${dir#synthetic:}") ;;
			*.data | */u.data) src=(--ratings "$dir") ;;
			*) src=(--data "$dir") ;;
		esac
		./test/bench/quality/ials_quality "${src[@]}" --name "$name" --backend cuda "$@" 2>&1 |
			tee -a "$OUT/quality.log"
		;;
	*)
		echo "usage: $0 bench|quality ..."
		exit 2
		;;
esac
