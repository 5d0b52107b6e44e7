#!/bin/bash
# Builds the libFuzzer target fuzz_csr (clang-14, -fsanitize=fuzzer,address,
# undefined) over the core's key maps and COO -> CSR building, and runs it for
# a fixed time:  bash test/fuzz/run.sh [seconds] (default 120).
# The corpus grows in test/fuzz/corpus (not committed); a crash or a failed
# check leaves crash-* in test/fuzz/artifacts and the run fails.  Prints the
# executions, the coverage (edges) and the corpus size at the end.
# Needs clang-14 and its fuzzer runtime (Debian: libclang-rt-14-dev, pulled in
# by clang-14) and libomp-14-dev (clang's OpenMP).
set -u
cd "$(dirname "$0")" || exit 1
secs=${1:-120}
CLANG=${CLANG:-clang-14}
core=../../src/core
out=${FUZZ_OUT:-build}
mkdir -p "$out" corpus artifacts
blas=""; cblas_def="-DGM_NO_CBLAS"
if [ -f /usr/lib/x86_64-linux-gnu/libopenblas.so ]; then blas="-lopenblas"; cblas_def=""; fi
echo "== build ($CLANG)"
# shellcheck disable=SC2086
$CLANG -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer -Wno-pass-failed -fopenmp -std=gnu11 $cblas_def -I"$core"/common -I"$core"/train -I"$core"/serve -I"$core"/linalg \
  -I/usr/include/x86_64-linux-gnu -o "$out/fuzz_csr" fuzz_csr.c "$core"/*/*.c $blas -lm -ldl || exit 1
echo "== run for $secs s"
log=$out/fuzz.log
# two OpenMP threads: the parallel scatter (nnz >= 100000) and the per-row
# sort run threaded as in the server
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  "$out/fuzz_csr" -max_total_time="$secs" -max_len=65536 -timeout=30 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix=artifacts/ corpus >"$log" 2>&1
rc=$?
grep -E '^#[0-9]+.*(DONE|INITED)' "$log" | tail -2
execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
ft=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
corp=$(ls corpus | wc -l)
echo "seconds: $secs  executions: ${execs:-?}  exec/s: $(( ${execs:-0} / (secs > 0 ? secs : 1) ))  coverage (edges): ${cov:-?}  features: ${ft:-?}  corpus: $corp inputs"
if [ $rc != 0 ]; then
  grep -E 'ERROR|check failed|runtime error|SUMMARY|Test unit written' "$log" | head -20
  echo "fuzz_csr FAILED (exit $rc): inputs in test/fuzz/artifacts/; log $PWD/$log"
  exit 1
fi
echo "fuzz_csr: no crash, no failed check"
