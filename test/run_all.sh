#!/bin/bash
# Runs every test of gpumf and ends with "N passed, M failed":
#   1. C unit tests of the core (test/unit)
#   2. the pg_regress suite (sql/, expected/) with gpumf.device = $GPUMF_TEST_DEVICE
#   3. the multi-session tests (test/multisession/run.sh)
#   4. the README's pg_cron recipe (test/cron/run.sh; runs in the background
#      from the start, since pg_cron starts jobs once a minute)
#   5. on a GPU machine (GPUMF_TEST_DEVICE=gpu): the GPU checks of
#      test/bench/gpu (--quick: correctness only): implicit ALS, batch
#      scoring, the explicit models, the linear algebra, the graph filter
#   6. the core's unit tests under AddressSanitizer, LeakSanitizer and UBSan
#      (make -C test/unit check-sanitize), and the libFuzzer target over the
#      key maps and the COO -> CSR path for GPUMF_FUZZ_SECONDS (45) seconds
#      (test/fuzz/run.sh)
#   7. the fast parts of the reliability suite (test/reliability): hostile
#      roles, keys at the limits of their types, a source of postgres_fdw
#      partitions on two more clusters, serving after a restart, load during
#      retraining,
#      faults (SIGKILL, cancel), backend memory; after the pg_cron test, since
#      a crash recovery would end its sessions
#   8. README.md and docs/*.md against the installed extension
#      (test/docs/readme.sh): their SQL examples run in order (on the CPU),
#      their function and settings tables match the catalog
#   9. the file-level dependencies against ARCHITECTURE.md
#      (scripts/check-deps.py, on the objects just built): layers, product
#      lines, no circles between files
#  10. where pgvector is installed (vector in pg_available_extensions): the
#      pgvector recipe of docs/serving.md against gpumf_recommend
#      (test/pgvector/run.sh); elsewhere it says it was not run
# Builds and installs the extension first (run as root, or as a user who can
# write PostgreSQL's lib and extension directories).  Uses the server that
# PGHOST/PGPORT point at, or starts a throw-away cluster (test/pgenv.sh).
# PG_CONFIG picks the PostgreSQL to build against and test (default: Debian
# 12's 15); test/run_majors.sh runs this for other majors (16, 18).
# GPUMF_TEST_SUITES (optional, space-separated) runs only the suites named:
# deps unit sanitizers fuzz regress readme pgvector multisession gpu
# gpu-score gpu-explicit gpu-linalg gpu-graph-filter cron hostile limits fdw restart scale load
# faults memory
# (unset: all of them; an unknown name is an error) -- for running the whole
# set in parts on a machine that limits the length of one command.
set -u
cd "$(dirname "$0")/.." || exit 1
DEV=${GPUMF_TEST_DEVICE:-cpu}
ALL_SUITES="deps unit sanitizers fuzz regress readme pgvector multisession gpu gpu-score gpu-explicit gpu-linalg gpu-graph-filter cron hostile limits fdw restart scale load faults memory"
for s in ${GPUMF_TEST_SUITES:-}; do
  case " $ALL_SUITES " in
    *" $s "*) ;;
    *) echo "GPUMF_TEST_SUITES: unknown suite \"$s\" (known: $ALL_SUITES)"; echo "0 passed, 1 failed"; exit 1 ;;
  esac
done
want() {  # $1: suite; whether GPUMF_TEST_SUITES asks for it
  [ -z "${GPUMF_TEST_SUITES:-}" ] || [[ " $GPUMF_TEST_SUITES " == *" $1 "* ]]
}
source test/pgenv.sh || { echo "0 passed, 1 failed"; exit 1; }
P=0; F=0
logs=$(mktemp -d /tmp/gpumf-tests.XXXXXX)
tally() {  # $1: suite, $2: passed, $3: failed
  echo "== $1: $2 passed, $3 failed"
  P=$((P + $2)); F=$((F + $3))
}
# run a suite that ends with "N passed, M failed"; show its failures only
suite() {  # $1: name, then the command
  local name=$1 out line t0=$SECONDS
  shift
  want "$name" || return 0
  out=$("$@" 2>&1); echo "$out" | grep -vE '^ok '
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  echo "== $name: $((SECONDS - t0)) s"
  if [ -n "$line" ]; then tally "$name" "$(echo "$line" | cut -d' ' -f1)" "$(echo "$line" | cut -d' ' -f3)"; else tally "$name" 0 1; fi
}

echo "== build and install"
if ! { make -s PG_CONFIG="$PG_CONFIG" >$logs/build.log 2>&1 && make -s PG_CONFIG="$PG_CONFIG" install >>$logs/build.log 2>&1; }; then
  tail -40 $logs/build.log
  tally build 0 1
  echo "$P passed, $F failed"; exit 1
fi

want deps && echo "== dependencies between files (ARCHITECTURE.md)"
suite deps python3 scripts/check-deps.py

# pg_cron runs jobs at minute boundaries: start its test now, collect it last
if want cron; then
  bash test/cron/run.sh >$logs/cron.out 2>&1 &
  cron_pid=$!
fi

if want unit; then
  echo "== C unit tests"
  out=$(make -s -C test/unit check 2>&1); echo "$out" | grep -v '^ok'
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -n "$line" ]; then tally unit "$(echo "$line" | cut -d' ' -f1)" "$(echo "$line" | cut -d' ' -f3)"; else tally unit 0 1; fi
fi

want sanitizers && echo "== C unit tests under AddressSanitizer, LeakSanitizer and UBSan"
suite sanitizers make -s -C test/unit check-sanitize

want fuzz && echo "== fuzzing the key maps and the COO -> CSR path (${GPUMF_FUZZ_SECONDS:-45} s)"
suite fuzz env FUZZ_TIMEOUT=10 bash test/fuzz/run.sh "${GPUMF_FUZZ_SECONDS:-45}"

if want regress; then
  echo "== pg_regress (gpumf.device=$DEV)"
  rm -rf results regression.diffs regression.out
  out=$(make -s PG_CONFIG="$PG_CONFIG" installcheck PGOPTIONS="-c gpumf.device=$DEV" 2>&1); echo "$out" | grep -E '^(test|ok|not ok| All|.*failed)'
  ntests=$(echo "$out" | grep -cE '^(test |ok |not ok )')
  nfail=$(echo "$out" | grep -cE '(FAILED|failed \(ignored\)|^not ok )')
  [ -f regression.diffs ] && head -60 regression.diffs
  [ "$ntests" -gt 0 ] || nfail=1
  tally regress $((ntests - nfail)) "$nfail"
fi

want readme && echo "== README.md and docs/ against the installed extension"
suite readme bash test/docs/readme.sh

if want pgvector; then
  if [ -n "$(psql -X -qAt -d postgres -c "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'" 2>/dev/null)" ]; then
    echo "== pgvector beside gpumf (the README's recipe)"
    suite pgvector bash test/pgvector/run.sh
  else
    echo "== pgvector: not run (pgvector is not installed: no vector in pg_available_extensions)"
  fi
fi

if want multisession; then
  echo "== multi-session"
  out=$(GPUMF_TEST_DEVICE=$DEV bash test/multisession/run.sh 2>&1); echo "$out"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -n "$line" ]; then tally multisession "$(echo "$line" | cut -d' ' -f1)" "$(echo "$line" | cut -d' ' -f3)"; else tally multisession 0 1; fi
fi

if [ "$DEV" = gpu ]; then
  want gpu && echo "== GPU vs CPU comparisons (implicit ALS)"
  suite gpu bash test/bench/gpu/run.sh --quick
  want gpu-score && echo "== GPU batch scorer vs CPU and a float64 reference"
  suite gpu-score bash test/bench/gpu/score_run.sh --quick
  want gpu-explicit && echo "== GPU explicit models (CCD++, explicit ALS) vs float64 references and the CPU"
  suite gpu-explicit bash test/bench/gpu/run_explicit.sh --quick
  want gpu-linalg && echo "== GPU linear algebra (SpMV, PCG, OLS) vs float64 references and cuSPARSE"
  suite gpu-linalg bash test/bench/gpu/linalg_run.sh --quick
  want gpu-graph-filter && echo "== GPU graph filter vs the CPU's"
  suite gpu-graph-filter bash -c 'make -s -C cuda graph-filter-test >/dev/null && ./test/bench/gpu/test_graph_filter'
fi

if want cron; then
  echo "== pg_cron recipe"
  wait $cron_pid
  out=$(cat $logs/cron.out); echo "$out"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -n "$line" ]; then tally cron "$(echo "$line" | cut -d' ' -f1)" "$(echo "$line" | cut -d' ' -f3)"; else tally cron 0 1; fi
fi

# the reliability suite's fast parts (the long runs: test/reliability/README.md)
export GPUMF_TEST_DEVICE=$DEV
want hostile && echo "== reliability: hostile roles"
suite hostile bash test/reliability/hostile.sh
want limits && echo "== reliability: keys at the limits of their types"
suite limits bash test/reliability/limits.sh
want fdw && echo "== reliability: a source of postgres_fdw partitions on two more servers"
suite fdw bash test/reliability/fdw.sh
want restart && echo "== reliability: serving after a restart (models read into shared memory at start)"
suite restart bash test/reliability/restart.sh
want scale && echo "== the scale benchmark's code path, at 200,000 rows on the CPU (test/bench/scale)"
suite scale env BUILD=0 DEVICE=cpu RECOMMEND_ALL=1 bash test/bench/scale/run.sh
want load && echo "== reliability: load during retraining"
suite load bash test/reliability/load.sh --fast
want faults && echo "== reliability: faults"
suite faults bash test/reliability/faults.sh --fast
want memory && echo "== reliability: backend memory"
suite memory bash test/reliability/memory.sh --fast

echo "$P passed, $F failed"
[ "$F" = 0 ]
