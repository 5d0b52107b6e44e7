#!/bin/bash
# README.md against the installed gpumf: runs its SQL examples in order in a
# scratch database (CPU path) and compares its function and settings tables
# with the catalog.  See test/docs/readme.py.  Prints "ok N - ..." lines and
# "N passed, M failed"; an optional argument names another README to check.
cd "$(dirname "$0")/../.." || exit 1
exec python3 test/docs/readme.py "$@"
