#!/bin/bash
# Installs what gpumf needs to build and test on Debian 12 (run as root):
#   postgresql-15, postgresql-server-dev-15   the server and PGXS (pulls in clang-14 and
#                                             llvm-14, which PGXS uses for JIT bitcode)
#   libomp-14-dev                             omp.h for clang-14: the bitcode of files that
#                                             use OpenMP is compiled with -fopenmp
#   libclang-rt-14-dev                        clang-14's sanitizer and libFuzzer runtimes for
#                                             test/fuzz/run.sh (clang-14 only recommends it)
#   postgresql-15-cron                        scheduled retraining (the README's recipe)
#   libopenblas-dev                           Y^T Y and serving products (optional: plain C without)
#   make gcc                                  the build; gcc's sanitizers for the unit tests
#   procps                                    ps/pkill, used by the multi-session tests
#   python3                                   the benchmark scripts
set -euo pipefail
pkgs="postgresql-15 postgresql-server-dev-15 postgresql-15-cron libomp-14-dev libclang-rt-14-dev libopenblas-dev make gcc libc6-dev procps python3"
missing=$(for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  log=/tmp/gpumf-install-deps.log
  # shellcheck disable=SC2086
  if ! { apt-get update -qq && apt-get install -y -qq $missing; } >"$log" 2>&1; then
    tail -30 "$log"
    echo "install-deps.sh: installing $missing failed (full log: $log)" >&2
    exit 1
  fi
fi
