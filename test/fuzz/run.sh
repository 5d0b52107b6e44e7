#!/bin/bash
# Builds the libFuzzer target fuzz_csr (clang-14, -fsanitize=fuzzer,address,
# undefined) over the core's key maps (the calls the server's reader makes,
# with integer keys at the ends of smallint, integer and bigint, long and
# uuid byte keys) and COO -> CSR building, and runs it for a fixed time:
#   bash test/fuzz/run.sh [seconds]      (default 120; test/run_all.sh: 45)
# The corpus grows in test/fuzz/corpus (not committed), started from the seed
# inputs written below; an input that runs longer than FUZZ_TIMEOUT seconds
# (default 30: a loop that never ends), a crash or a failed check leaves
# crash-* or timeout-* in test/fuzz/artifacts and the run fails.  Prints the
# executions, the coverage (edges) and the corpus size, then "1 passed, 0
# failed" (or "0 passed, 1 failed") for test/run_all.sh.
# Needs clang-14, its fuzzer runtime (Debian: libclang-rt-14-dev, which
# scripts/install-deps.sh installs: clang-14 only recommends it) and
# libomp-14-dev (clang's OpenMP).
set -u
cd "$(dirname "$0")" || exit 1
secs=${1:-120}
CLANG=${CLANG:-clang-14}
core=../../src/core
out=${FUZZ_OUT:-build}
fail() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }
command -v "$CLANG" >/dev/null || fail "fuzz_csr: $CLANG not found (bash scripts/install-deps.sh installs it)"
mkdir -p "$out" corpus artifacts seeds
# seed inputs (see fuzz_csr.c for the layout): the server's key kinds with a
# bigint key of 2^62, int2/int8 extremes, long text keys and uuids
seed() { printf "$2" >"seeds/$1"; }
seed one-bigint-2p62 '\x80\x00\x00\x08\xa0\x01'
seed int8-int2-extremes '\x80\x00\x08\xa0\xa1\x01\xa1\xa8\x02\xa2\xa9\x03\xa3\xaa\x04\xd0\xdf\x05\xcf\xc0\x06\xae\xad'
seed int4-extremes '\x80\x05\x05\xa4\xa5\x01\xb4\xb5\x02\xc4\xc5\x03\xff\x00\x00\x00\x80\x00\x00\x00\x00\x10\x04'
seed long-text-uuid '\x83\x00\x60\xc8\x40\x00\x6b\x01\x00\x01\xc8\x40\x00\x6b\x02\x7f\x02\xc8\x3f\xff\x6b\x6b\x40\x03\x00\x00\x04'
seed uuid-users '\x81\x00\x10\x00\x01\x01\x3f\x02\x02\x40\x03\x03\x7f\x04\x04'
blas=""; cblas_def="-DGM_NO_CBLAS"
if [ -f /usr/lib/x86_64-linux-gnu/libopenblas.so ]; then blas="-lopenblas"; cblas_def=""; fi
echo "== build ($CLANG)"
# shellcheck disable=SC2086
$CLANG -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer -Wno-pass-failed -fopenmp -std=gnu11 $cblas_def -I"$core"/common -I"$core"/train -I"$core"/serve -I"$core"/linalg \
  -I/usr/include/x86_64-linux-gnu -o "$out/fuzz_csr" fuzz_csr.c "$core"/*/*.c $blas -lm -ldl || fail "fuzz_csr: the build failed (clang's fuzzer runtime: libclang-rt-14-dev)"
echo "== run for $secs s"
log=$out/fuzz.log
# two OpenMP threads: the parallel scatter (nnz >= 100000) and the per-row
# sort run threaded as in the server
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  "$out/fuzz_csr" -max_total_time="$secs" -max_len=65536 -timeout="${FUZZ_TIMEOUT:-30}" -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix=artifacts/ corpus seeds >"$log" 2>&1
rc=$?
grep -E '^#[0-9]+.*(DONE|INITED)' "$log" | tail -2
execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
ft=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
corp=$(ls corpus | wc -l)
echo "seconds: $secs  executions: ${execs:-?}  exec/s: $(( ${execs:-0} / (secs > 0 ? secs : 1) ))  coverage (edges): ${cov:-?}  features: ${ft:-?}  corpus: $corp inputs"
if [ $rc != 0 ]; then
  grep -E 'ERROR|check failed|runtime error|SUMMARY|Test unit written|timeout' "$log" | head -20
  fail "fuzz_csr FAILED (exit $rc): inputs in test/fuzz/artifacts/; log $PWD/$log"
fi
echo "fuzz_csr: no crash, no failed check, no timeout"
echo "1 passed, 0 failed"
