#!/bin/bash
# README.md and docs/*.md against the installed gpumf: runs their SQL examples
# in order in a scratch database (CPU path) and compares their function and
# settings tables with the catalog.  See test/docs/readme.py.  Prints
# "ok N - ..." lines and "N passed, M failed"; an optional argument names one
# file to check alone.
cd "$(dirname "$0")/../.." || exit 1
exec python3 test/docs/readme.py "$@"
