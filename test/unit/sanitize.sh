#!/bin/bash
# Runs a unit-test program built with -fsanitize=address,undefined and
# counts a sanitizer report as a failed test: prints the program's own
# "ok"/"not ok" lines, then "ok|not ok N - no sanitizer reports" (with the
# report), then "N passed, M failed" over both.
#   ASAN_OPTIONS:  detect_leaks=1 (LeakSanitizer at exit), abort_on_error=0
#   UBSAN_OPTIONS: halt_on_error=1, print_stacktrace=1
# No LeakSanitizer suppressions are needed: libgomp's thread pool stays
# reachable at exit and is not reported (checked with gcc 12 / libgomp 12).
set -u
prog=${1:?usage: sanitize.sh PROGRAM}
log=$(mktemp); trap 'rm -f "$log"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
"$prog" >"$log" 2>&1
rc=$?
grep -E '^(ok|not ok|#)' "$log"
# count the program's own lines (its final count line may be lost when a
# sanitizer ends the process at exit, before stdout is flushed)
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
n=$((p + f + 1))
reports=$(grep -cE '(ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer)' "$log")
if [ "$reports" = 0 ] && [ "$rc" = 0 ] && [ -n "$line" ]; then
  echo "ok $n - no sanitizer reports (ASan, LSan, UBSan)"; p=$((p + 1))
elif [ "$reports" = 0 ] && [ "$rc" != 0 ] && [ -n "$line" ] && [ "$f" != 0 ]; then
  # the program failed a test of its own and said so: no report to add
  echo "ok $n - no sanitizer reports (ASan, LSan, UBSan)"; p=$((p + 1))
else
  echo "not ok $n - no sanitizer reports: exit status $rc"
  grep -vE '^(ok|not ok|#)' "$log" | head -60
  f=$((f + 1))
fi
echo "$p passed, $f failed"
[ "$f" = 0 ]
