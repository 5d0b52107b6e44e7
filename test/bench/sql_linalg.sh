#!/bin/bash
# The SQL linear-algebra benchmark.  Prints markdown tables:
#   1. gpumf_linreg on a ROWS x COLS table of random regressors (y = 1 + b.x
#      + noise, b known), split into reading the table and computing, on the
#      CPU and (when a GPU works) on the GPU, beside a bare scan of the table
#      and COPY of the same columns (binary, to /dev/null), with the fit's
#      error against b and the GPU fit's difference from the CPU fit;
#   2. gpumf_cg_solve on a 2-D Poisson matrix table (5-point Laplacian on a
#      GRID x GRID grid, given as its lower triangle, b = 1) to tolerance
#      1e-8: reading, building, the engine's own solve time and the whole
#      call, per device and arithmetic.
# Needs a server (source test/pgenv.sh, or .pgbundle/device-pg.sh on the GPU
# machine) with gpumf installed, a superuser (server-side COPY).
#   ROWS=200000 COLS=100      the least-squares table (10M x 100 is 8.3 GB)
#   GRID=512                  the Poisson grid (GRID^2 unknowns)
#   DEVICES="cpu gpu"         gpu is left out when no GPU works
#   ARITHMETIC="double"       also "single" for gpumf_cg_solve
#   REPEAT=2                  runs per configuration; the fastest is shown
#   COPY_RUNS=2               COPY runs (the fastest is shown; 0: none)
#   JOBS=$(nproc)             sessions loading the table in parallel
#   KEEP=1                    reuse tables of the same size
#   THREADS=0                 gpumf.threads for the CPU (0: all cores)
set -eu
ROWS=${ROWS:-200000}
COLS=${COLS:-100}
GRID=${GRID:-512}
DEVICES=${DEVICES:-"cpu gpu"}
ARITHMETIC=${ARITHMETIC:-double}
REPEAT=${REPEAT:-2}
COPY_RUNS=${COPY_RUNS:-2}
JOBS=${JOBS:-$(nproc)}
THREADS=${THREADS:-0}
DB=${BENCH_DB:-gpumf_linalg_bench}
export PGOPTIONS="-c gpumf.progress=off -c gpumf.threads=$THREADS"
q() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
now() { date +%s.%N; }
since() { python3 -c "print(round($(now) - $1, 3))"; }

psql -X -qAt -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 || createdb "$DB"
q "CREATE EXTENSION IF NOT EXISTS gpumf"
have_gpu=$(PGOPTIONS="$PGOPTIONS -c gpumf.device=auto" q "SELECT backend = 'cuda' FROM gpumf_device_info()")
devs=""
for d in $DEVICES; do
  if [ "$d" = gpu ] && [ "$have_gpu" != t ]; then echo "(no usable GPU: the GPU rows are left out)" >&2; continue; fi
  devs="$devs $d"
done

# ------------------------------------------------------------ the tables
T=ols_${ROWS}x${COLS}
xs=$(seq -s, 1 "$COLS" | sed 's/\([0-9]\+\)/x\1/g')
xnames=$(seq -s, 1 "$COLS" | sed "s/\([0-9]\+\)/'x\1'/g")
# b_j = (j mod 7 - 3) / 3 + 0.1: the coefficients the fit should find
coefs=$(python3 -c "print(','.join(repr((j % 7 - 3) / 3 + 0.1) for j in range(1, $COLS + 1)))")
truth="ARRAY[1,$coefs]::float8[]"
if [ -z "${KEEP:-}" ] || [ "$(q "SELECT count(*) FROM pg_class WHERE relname = '$T'")" = 0 ]; then
  t0=$(now)
  q "SET client_min_messages = warning; DROP TABLE IF EXISTS $T"
  q "CREATE UNLOGGED TABLE $T (y float8, $(seq -s, 1 "$COLS" | sed 's/\([0-9]\+\)/x\1 float8/g'))"
  gen=$(python3 -c "
b = [$coefs]
print('SELECT 1 + ' + ' + '.join('x%d * (%r)' % (j + 1, c) for j, c in enumerate(b)) +
      ' + 0.1 * (random() - 0.5), $xs FROM (SELECT ' +
      ', '.join('random() AS x%d' % (j + 1) for j in range(len(b))) + ' FROM generate_series(1, %d)) s')")
  per=$(( (ROWS + JOBS - 1) / JOBS ))
  for j in $(seq 1 "$JOBS"); do
    n=$(( ROWS - (j - 1) * per )); [ $n -gt $per ] && n=$per
    [ $n -gt 0 ] && q "INSERT INTO $T $(printf "$gen" "$n")" &
  done
  wait
  q "VACUUM (FREEZE, ANALYZE) $T"
  echo "generated $T ($ROWS rows, $(q "SELECT pg_size_pretty(pg_table_size('$T'))")) in $(since "$t0") s" >&2
fi
P=poisson_$GRID
if [ -z "${KEEP:-}" ] || [ "$(q "SELECT count(*) FROM pg_class WHERE relname = '$P'")" = 0 ]; then
  t0=$(now)
  q "SET client_min_messages = warning; DROP TABLE IF EXISTS $P"
  q "CREATE UNLOGGED TABLE $P (r int, c int, v float8)"
  # the diagonal, horizontal and vertical neighbours in parallel
  q "INSERT INTO $P SELECT (gx - 1) * $GRID + gy, (gx - 1) * $GRID + gy, 4 FROM generate_series(1, $GRID) gx, generate_series(1, $GRID) gy" &
  q "INSERT INTO $P SELECT (gx - 1) * $GRID + gy + 1, (gx - 1) * $GRID + gy, -1 FROM generate_series(1, $GRID) gx, generate_series(1, $GRID - 1) gy" &
  q "INSERT INTO $P SELECT gx * $GRID + gy, (gx - 1) * $GRID + gy, -1 FROM generate_series(1, $GRID - 1) gx, generate_series(1, $GRID) gy" &
  wait
  q "VACUUM (FREEZE, ANALYZE) $P"
  echo "generated $P ($(q "SELECT count(*) FROM $P") rows) in $(since "$t0") s" >&2
fi

echo "## gpumf SQL linear-algebra benchmark"
echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(PGOPTIONS="$PGOPTIONS -c gpumf.device=auto" q "SELECT device FROM gpumf_device_info()"); gpumf.threads = $THREADS"
echo

# ------------------------------------------------------------ 1. least squares
# the floor of reading: the same columns through COPY (binary) to /dev/null
copy_s() {
  local t0; t0=$(now)
  q "COPY (SELECT y, $xs FROM $T) TO '/dev/null' (FORMAT binary)"
  since "$t0"
}
scan_s() {
  local t0; t0=$(now)
  q "SELECT count(*) FROM $T" >/dev/null
  since "$t0"
}
scan=$(scan_s)
copy=""
for r in $(seq "$COPY_RUNS"); do
  c=$(copy_s)
  if [ -z "$copy" ] || python3 -c "import sys; sys.exit(0 if $c < $copy else 1)"; then copy=$c; fi
done

echo "### gpumf_linreg: $ROWS rows x $COLS columns + intercept ($(q "SELECT pg_size_pretty(pg_table_size('$T'))"))"
echo
echo "| what | device | read s | compute s | total s | rows/s read | max abs coefficient error (vs b) | max relative difference from the CPU fit |"
echo "|---|---|---|---|---|---|---|---|"
printf '| SELECT count(*) FROM the table (the scan alone, no values converted) | | %.2f | | %.2f | %.0f | | |\n' \
  "$scan" "$scan" "$(python3 -c "print($ROWS / $scan)")"
[ -n "$copy" ] && printf '| COPY (SELECT y, x1..x%d) TO /dev/null (FORMAT binary), fastest of %d | | %.2f | | %.2f | %.0f | | |\n' \
  "$COLS" "$COPY_RUNS" "$copy" "$copy" "$(python3 -c "print($ROWS / $copy)")"
q "SET client_min_messages = warning; DROP TABLE IF EXISTS fits; CREATE TABLE fits (device text, rep int, wall float8, f gpumf.linreg_result)"
for d in $devs; do
  for r in $(seq "$REPEAT"); do
    t0=$(now)
    PGOPTIONS="$PGOPTIONS -c gpumf.device=$d" q "INSERT INTO fits SELECT '$d', $r, 0, f FROM gpumf_linreg('$T', 'y', ARRAY[$xnames]) f"
    q "UPDATE fits SET wall = $(since "$t0") WHERE device = '$d' AND rep = $r"
  done
done
for d in $devs; do
  q "SELECT '| gpumf_linreg, fastest of $REPEAT | ' || (b.f).device || ' | ' || round((b.f).read_seconds::numeric, 2) || ' | ' ||
            round((b.f).compute_seconds::numeric, 2) || ' | ' || round(b.wall::numeric, 2) || ' | ' ||
            round($ROWS / (b.f).read_seconds) || ' | ' ||
            (SELECT to_char(max(abs(c - t)), '9.9EEEE') FROM unnest((b.f).coef, $truth) u(c, t)) || ' | ' ||
            CASE WHEN b.device = 'cpu' THEN '' ELSE
              coalesce((SELECT to_char(max(abs(c - d) / abs(d)), '9.9EEEE') FROM unnest((b.f).coef, (c.f).coef) u(c, d)), '') END || ' |'
       FROM (SELECT * FROM fits WHERE device = '$d' ORDER BY wall LIMIT 1) b
            LEFT JOIN (SELECT * FROM fits WHERE device = 'cpu' ORDER BY wall LIMIT 1) c ON true"
done
echo
echo "read s: the executor's scan and gpumf's conversion of $((COLS + 1)) values a row into batches; compute s: folding the batches into the QR factor (cuSOLVER on the GPU, copies included) and finishing the fit."
echo

# ------------------------------------------------------------ 2. sparse SPD solve
n=$((GRID * GRID))
echo "### gpumf_cg_solve: 2-D Poisson, $GRID x $GRID grid ($n rows, $(q "SELECT count(*) FROM $P") table rows = lower triangle), Jacobi, tolerance 1e-8, b = 1"
echo
echo "| device | arithmetic | read s | build s | solve s (engine) | whole call s | iterations | residual | engine device |"
echo "|---|---|---|---|---|---|---|---|---|"
for d in $devs; do
  for a in $ARITHMETIC; do
    best=""
    for r in $(seq "$REPEAT"); do
      t0=$(now)
      line=$(PGOPTIONS="$PGOPTIONS -c gpumf.device=$d" psql -X -qAt -F' | ' -v ON_ERROR_STOP=1 -d "$DB" -c \
        "SELECT round(read_seconds::numeric, 2), round(build_seconds::numeric, 2), round(seconds::numeric, 3),
                iterations, to_char(residual, '9.99EEEE'), device
           FROM gpumf_cg_solve('$P', 'r', 'c', 'v', array_fill(1::float8, ARRAY[$n]), arithmetic => '$a')")
      wall=$(since "$t0")
      if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $wall < $best_wall else 1)"; then best=$line; best_wall=$wall; fi
    done
    IFS='|' read -r rd bd sd it res dev <<<"$best"
    echo "| $d | $a | ${rd// /} | ${bd// /} | ${sd// /} | $best_wall | ${it// /} | ${res// /} | ${dev# } |"
  done
done
echo
echo "whole call: psql's wall time of the statement (reading, checks, CSR, solve, the result array)."
echo
q "DROP TABLE fits"
