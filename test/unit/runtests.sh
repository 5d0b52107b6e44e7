#!/bin/bash
# Runs unit-test programs and sums their results: prints each program's
# "ok"/"not ok" lines, then one "N passed, M failed" over all of them.
#   bash runtests.sh [--sanitize] PROGRAM...
# With --sanitize (programs built with -fsanitize=address,undefined), each
# program also counts one test "no sanitizer reports": an AddressSanitizer,
# LeakSanitizer or UndefinedBehaviorSanitizer report, or an abnormal exit,
# fails it.
#   ASAN_OPTIONS:  detect_leaks=1 (LeakSanitizer at exit)
#   UBSAN_OPTIONS: halt_on_error=1, print_stacktrace=1
# No LeakSanitizer suppressions are needed: libgomp's thread pool stays
# reachable at exit and is not reported (checked with gcc 12 / libgomp 12).
set -u
san=0
[ "${1:-}" = --sanitize ] && { san=1; shift; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
log=$(mktemp); trap 'rm -f "$log"' EXIT
P=0; F=0
for prog in "$@"; do
  "$prog" >"$log" 2>&1
  rc=$?
  grep -E '^(ok|not ok|#)' "$log"
  # count the program's own lines: its final count line may be lost when a
  # sanitizer ends the process at exit, before stdout is flushed
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
  complete=$(grep -cE '^[0-9]+ passed, [0-9]+ failed$' "$log")
  if [ "$san" = 1 ]; then
    reports=$(grep -cE '(ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: [A-Za-z]+Sanitizer)' "$log")
    # a program that failed a test of its own exits non-zero: not a report
    if [ "$reports" = 0 ] && [ "$complete" -gt 0 ] && { [ "$rc" = 0 ] || [ "$f" -gt 0 ]; }; then
      echo "ok - $prog: no sanitizer reports (ASan, LSan, UBSan)"; p=$((p + 1))
    else
      echo "not ok - $prog: no sanitizer reports: exit status $rc"
      grep -vE '^(ok|not ok|#)' "$log" | head -60
      f=$((f + 1))
    fi
  elif [ "$complete" = 0 ] || { [ "$rc" != 0 ] && [ "$f" = 0 ]; }; then
    echo "not ok - $prog: exit status $rc"
    tail -20 "$log"
    f=$((f + 1))
  fi
  P=$((P + p)); F=$((F + f))
done
echo "$P passed, $F failed"
[ "$F" = 0 ]
