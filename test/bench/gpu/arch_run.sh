#!/bin/bash
# arch_run.sh: gpumf's CUDA module across GPU architectures, checked and
# measured on one GPU machine (an H100 or H200), in parts that each fit in
# one 10-minute device command.  From the repository root:
#
#   bash test/bench/gpu/arch_run.sh build           builds (a) the default fatbin, (b) compute_75
#                                                   PTX only, (c) sm_90 only: module size, build
#                                                   time, first-load time (JIT cache off)     ~4 min
#   source test/device-server.sh && bash test/bench/gpu/arch_run.sh check75
#                                                   the GPU checks and pg_regress on the GPU
#                                                   with (b), as a T4 would run them           ~5 min
#   source test/device-server.sh && bash test/bench/gpu/arch_run.sh check75-rest
#                                                   the rest of the suite's GPU path with (b)  ~5 min
#   source test/device-server.sh && bash test/bench/gpu/arch_run.sh checkfat
#                                                   the same checks with (a)                   ~5 min
#   source test/device-server.sh && bash test/bench/gpu/arch_run.sh checkfat-rest
#                                                   the rest with (a), and the ALS and explicit
#                                                   checks of (a) on 99 KB of shared memory    ~6 min
#   bash test/bench/gpu/arch_run.sh bench           iALS, CCD++ (and explicit ALS) and the
#                                                   scorer: (b) against (c) on this card       ~6 min
#   source test/device-server.sh && bash test/bench/gpu/arch_run.sh all
#                                                   every part in turn (where commands may run long)
#
# (The times were estimates made before the first run; measured on a 16-core
# H100, 2026-11-25: build 1.5 min, check75 2.2, checkfat 3.5, bench 2.7,
# check75-rest 2.2, checkfat-rest 3.6.)
#
# Why (b) tests the older GPUs' code on a Hopper card: a PTX-only build for
# compute_75 is compiled by the driver at load time, with __CUDA_ARCH__ =
# 750, so every architecture-specific path takes its fallback (no TF32 wmma,
# four float atomics instead of float4 ones), exactly the code a T4 runs.
# check75 also sets GPUMF_CUDA_SMEM_LIMIT=65536 (the T4's shared memory per
# block), so that the host makes a T4's choices too (fewer warps a block in
# the block solver, cuSOLVER for explicit ALS above 127 factors, CCD++'s two-
# copy layout for more than 8,192 items).  checkfat-rest runs the ALS and
# explicit-model checks of (a) again under GPUMF_CUDA_SMEM_LIMIT=101376 (99 KB,
# compute capability 8.6, 8.9 and 12.0) with the tensor cores on.
#
# Each part starts from nothing (a fresh machine has none of the others'
# builds) and reuses what an earlier part left on a machine still warm.
# Builds go into copies of the tree, $TREES/{fat,c75,sm90} (default
# /tmp/gpumf_arch_trees), one per variant; the check parts install their
# variant into the server of test/device-server.sh (source it first: it
# needs .pgbundle/) and run test/run_all.sh from that copy with
# GPUMF_TEST_DEVICE=gpu, the suites that run GPU code:
#   check*:       regress gpu gpu-score gpu-explicit gpu-linalg
#   check*-rest:  multisession load faults memory
# (unit, sanitizers, readme, hostile and cron run on the CPU whatever the
# device, so the build does not change them: CI runs them.)
#
# Output: a log per part and one markdown table in $OUT (default
# /tmp/gpumf_arch): arch-<part>.log, arch-<part>.md.  Every check part
# ends with "N passed, M failed".
set -u
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
ROOT=$(pwd)
OUT=${OUT:-/tmp/gpumf_arch}
TREES=${TREES:-/tmp/gpumf_arch_trees}
J=$(nproc)
NT=${NVCC_THREADS:-4}			# nvcc --threads: architectures in parallel per file
export NVCC_THREADS=$NT		# (also for the builds of run_all.sh and the bench scripts)
BENCH_K=${BENCH_K:-128}			# factors of the iALS timings (e.g. 64,256: a minute more each)
mkdir -p "$OUT" "$TREES"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$J}
part=${1:-}

# the make settings of each variant
variant_env() {  # $1: fat | c75 | sm90 -- exports its GPUMF_CUDA_ARCHS / GPUMF_CUDA_PTX
	unset GPUMF_CUDA_ARCHS GPUMF_CUDA_PTX GENCODE
	case $1 in
		fat) ;;
		c75) export GPUMF_CUDA_ARCHS= GPUMF_CUDA_PTX=75 ;;
		sm90) export GPUMF_CUDA_ARCHS=90 GPUMF_CUDA_PTX= ;;
	esac
}
variant_label() {
	case $1 in
		fat) echo "(a) default fatbin" ;;
		c75) echo "(b) compute_75 PTX only" ;;
		sm90) echo "(c) sm_90 only" ;;
	esac
}

P=0; F=0
ok()  { P=$((P + 1)); echo "ok - $1"; }
bad() { F=$((F + 1)); echo "not ok - $1${2:+: $2}"; }
tally() {  # $1: a "N passed, M failed" line, $2: what
	local line
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$1" | tail -1)
	if [ -z "$line" ]; then
		bad "$2" "no \"N passed, M failed\" line"
		return
	fi
	echo "== $2: $line"
	P=$((P + $(cut -d' ' -f1 <<<"$line")))
	F=$((F + $(cut -d' ' -f3 <<<"$line")))
}

machine() {
	echo "== machine ($(date -u '+%Y-%m-%d %H:%M UTC'))"
	nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
	nvcc --version | tail -1
	echo "cores: $J; commit: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null || echo '(no git)')"
}

# a copy of the repository's files for one variant's build
copy_tree() {  # $1: destination
	rm -rf "$1"
	mkdir -p "$1"
	tar -C "$ROOT" --exclude=./.pgbundle --exclude=./.data --exclude=./.git --exclude=./.whl \
		--exclude=./.gl --exclude=./results --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude=./cuda/obj --exclude=./test/bench/gpu/obj -cf - . | tar -C "$1" -xf -
	make -s -C "$1/cuda" clean >/dev/null 2>&1
}

# the module of variant $1 in its tree, built (and timed) unless there already
module_built() {
	local v=$1 t=$TREES/$1
	[ -f "$t/.module-built" ] && return 0
	copy_tree "$t"
	if ! (variant_env "$v"; cd "$t/cuda" && TIMEFORMAT='%R %U %S' &&
		{ time make -j"$J" NVCC_THREADS="$NT" gpumf_cuda.so >"$t/module-build.log" 2>&1; } 2>"$t/module-build.time"); then
		tail -30 "$t/module-build.log"
		return 1
	fi
	touch "$t/.module-built"
}

# the benchmark and check programs of variant $1 (and the extension's objects when PG_CONFIG is set)
programs_built() {
	local v=$1 t=$TREES/$1
	module_built "$v" || return 1
	[ -f "$t/.programs-built" ] && return 0
	if ! (variant_env "$v"; make -C "$t/cuda" -j"$J" NVCC_THREADS="$NT" bench explicit-bench linalg-bench \
		startup-bench >"$t/programs-build.log" 2>&1); then
		tail -30 "$t/programs-build.log"
		return 1
	fi
	touch "$t/.programs-built"
}

extension_installed() {  # $1: variant -- builds and installs it into $PG_CONFIG's PostgreSQL
	local v=$1 t=$TREES/$1
	programs_built "$v" || return 1
	[ -n "${PG_CONFIG:-}" ] || { echo "PG_CONFIG is not set: source test/device-server.sh first"; return 1; }
	(variant_env "$v"; make -C "$t" -s -j"$J" PG_CONFIG="$PG_CONFIG" >"$t/extension-build.log" 2>&1 &&
		make -C "$t" -s PG_CONFIG="$PG_CONFIG" install >>"$t/extension-build.log" 2>&1) ||
		{ tail -30 "$t/extension-build.log"; return 1; }
}

# restart the test server with the given environment (VAR=value ...; none: as started)
server_env() {
	local owner log bindir
	[ -n "${GPUMF_PGDATA:-}" ] && [ -d "$GPUMF_PGDATA" ] ||
		{ echo "GPUMF_PGDATA is not set: source test/device-server.sh first"; return 1; }
	owner=$(stat -c %U "$GPUMF_PGDATA")
	bindir=$($PG_CONFIG --bindir)
	log=$GPUMF_PGDATA.log
	[ -f "$log" ] || log=$(dirname "$GPUMF_PGDATA")/pg.log
	su "$owner" -s /bin/bash -c "cd / && env $* LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} $bindir/pg_ctl -D $GPUMF_PGDATA -l $log -w -m fast restart" >/dev/null ||
		{ tail -20 "$log"; return 1; }
}

# gpumf_device_info on the GPU through SQL: $1 the expected kernel_arch, $2 the expected fast paths
check_device_info() {
	local got
	psql -X -qAt -d postgres -c "DROP DATABASE IF EXISTS gpumf_arch" -c "CREATE DATABASE gpumf_arch" >/dev/null 2>&1
	got=$(PGOPTIONS="-c gpumf.device=gpu" psql -X -qAt -F '|' -d gpumf_arch -c "CREATE EXTENSION gpumf" \
		-c "SELECT backend, compute_capability, kernel_arch, fast_paths, module_archs FROM gpumf_device_info()" 2>&1)
	echo "gpumf_device_info: $got"
	if [ "$(cut -d'|' -f3 <<<"$got")" = "$1" ] && [ "$(cut -d'|' -f4 <<<"$got")" = "$2" ]; then
		ok "gpumf_device_info reports kernels for $1 and fast paths $2"
	else
		bad "gpumf_device_info reports kernels for $1 and fast paths $2" "got: $got"
	fi
	psql -X -qAt -d postgres -c "DROP DATABASE IF EXISTS gpumf_arch" >/dev/null 2>&1
}

# test/run_all.sh of variant $1's tree, on the GPU, for the suites $2
suites() {
	local v=$1 out
	out=$(cd "$TREES/$v" && variant_env "$v" && OUT=$TREES/$v/logs GPUMF_KEEP_BUILD=1 GPUMF_TEST_DEVICE=gpu \
		GPUMF_TEST_SUITES="$2" bash test/run_all.sh 2>&1)
	echo "$out"
	tally "$out" "run_all.sh ($2) with $(variant_label "$v")"
}

# ---------------------------------------------------------------- parts

part_build() {
	local md=$OUT/arch-build.md
	machine
	for v in fat c75 sm90; do
		echo "== building $(variant_label "$v")"
		rm -f "$TREES/$v/.module-built" "$TREES/$v/.programs-built"
		module_built "$v" || { bad "build $v"; continue; }
		ok "build $(variant_label "$v"): $(cat "$TREES/$v/module-build.time") (wall, user, sys s)"
		(cd "$TREES/$v" && variant_env "$v" && make -C cuda -j"$J" startup-bench >/dev/null 2>&1) ||
			bad "startup_bench of $v"
		echo "-- cuobjdump --list-elf --list-ptx ($v): images per architecture"
		cuobjdump --list-elf --list-ptx "$TREES/$v/cuda/gpumf_cuda.so" |
			sed -E 's/^(ELF|PTX) file +[0-9]+: .*\.(sm_[0-9a-z]+)\.(cubin|ptx)$/\1 \2/' | sort | uniq -c
	done
	# first loads: the libraries read from disk once (a throw-away run), then
	# each build with the driver's JIT cache off, lazily loaded (CUDA's default)
	# and eagerly (every kernel at the context's creation)
	(cd "$TREES/sm90" && CUDA_CACHE_DISABLE=1 ./test/bench/gpu/startup_bench cuda/gpumf_cuda.so >/dev/null 2>&1)
	{
		echo "| build | module bytes | ELF (SASS) images | PTX images | build s (wall / CPU) on $J cores | probe ms | caps ms | first training ms (ALS 512 CG) | probe ms, eager loading | kernels for |"
		echo "|---|---|---|---|---|---|---|---|---|---|"
	} >"$md"
	for v in fat c75 sm90; do
		local t=$TREES/$v lazy eager sz nelf nptx tm
		[ -f "$t/.module-built" ] || continue
		lazy=$(cd "$t" && CUDA_CACHE_DISABLE=1 ./test/bench/gpu/startup_bench cuda/gpumf_cuda.so 2>&1)
		eager=$(cd "$t" && CUDA_CACHE_DISABLE=1 CUDA_MODULE_LOADING=EAGER ./test/bench/gpu/startup_bench cuda/gpumf_cuda.so 2>&1)
		echo "-- startup_bench, $v, CUDA_CACHE_DISABLE=1 (lazy)"; echo "$lazy"
		echo "-- startup_bench, $v, CUDA_CACHE_DISABLE=1 CUDA_MODULE_LOADING=EAGER"; echo "$eager"
		sz=$(stat -c %s "$t/cuda/gpumf_cuda.so")
		nelf=$(cuobjdump --list-elf "$t/cuda/gpumf_cuda.so" 2>/dev/null | grep -c 'ELF file')
		nptx=$(cuobjdump --list-ptx "$t/cuda/gpumf_cuda.so" 2>/dev/null | grep -c 'PTX file')
		read -r w u s <"$t/module-build.time"
		tm=$(awk -v w="$w" -v u="$u" -v s="$s" 'BEGIN { printf "%.0f / %.0f", w, u + s }')
		step() { awk -F'|' -v k="$2" 'index($2, k) { gsub(/ /, "", $3); print $3; exit }' <<<"$1"; }
		echo "| $(variant_label "$v") | $sz | $nelf | $nptx | $tm | $(step "$lazy" 'module: dlopen') | $(step "$lazy" 'device caps') | $(step "$lazy" 'warm-up 1: als, factors 512, solver cg') | $(step "$eager" 'module: dlopen') | $(grep -o 'kernels compiled for [0-9.]*' <<<"$lazy" | awk '{print $4}') |" >>"$md"
		case $v in
			c75) want=7.5 ;;
			*) want=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ') ;;
		esac
		if grep -q "kernels compiled for $want," <<<"$lazy"; then
			ok "$v: the driver runs kernels compiled for $want"
		else
			bad "$v: the driver runs kernels compiled for $want" "$(grep '^caps' <<<"$lazy")"
		fi
	done
	echo
	cat "$md"
}

part_check() {  # $1: variant, $2: rest (or empty)
	local v=$1 rest=${2:-}
	machine
	extension_installed "$v" || { bad "build and install $(variant_label "$v")"; return; }
	ok "build and install $(variant_label "$v")"
	if [ "$v" = c75 ]; then
		# a T4's shared memory per block: the host makes its choices too
		export GPUMF_CUDA_SMEM_LIMIT=65536
		server_env GPUMF_CUDA_SMEM_LIMIT=65536 || { bad "server restart"; return; }
	else
		unset GPUMF_CUDA_SMEM_LIMIT
		server_env || { bad "server restart"; return; }
	fi
	if [ -z "$rest" ]; then
		if [ "$v" = c75 ]; then
			check_device_info 7.5 '{}'
		else
			check_device_info "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')" \
				'{tf32_tensor_cores,vector_atomics,large_smem}'
		fi
		suites "$v" "regress gpu gpu-score gpu-explicit gpu-linalg"
	else
		suites "$v" "multisession load faults memory"
		if [ "$v" = fat ]; then
			# compute capability 8.6 / 8.9 / 12.0's 99 KB a block, tensor cores on
			local out
			echo "== (a) under GPUMF_CUDA_SMEM_LIMIT=101376"
			out=$(cd "$TREES/fat" && GPUMF_CUDA_SMEM_LIMIT=101376 ./test/bench/gpu/gpu_als_bench --quick 2>&1)
			echo "$out"
			tally "$out" "gpu_als_bench --quick, 99 KB shared memory"
			out=$(cd "$TREES/fat" && GPUMF_CUDA_SMEM_LIMIT=101376 ./test/bench/gpu/mf_explicit_bench --quick 2>&1)
			echo "$out"
			tally "$out" "mf_explicit_bench --quick, 99 KB shared memory"
		fi
	fi
	unset GPUMF_CUDA_SMEM_LIMIT
	server_env || bad "server restart"
}

part_bench() {
	local md=$OUT/arch-bench.md
	machine
	for v in sm90 c75; do
		programs_built "$v" || { bad "build $(variant_label "$v")"; return; }
	done
	unset GPUMF_CUDA_SMEM_LIMIT
	for v in sm90 c75; do
		local t=$TREES/$v
		echo "== $(variant_label "$v"): implicit ALS (gpu_als_bench --timing --k $BENCH_K)"
		(cd "$t" && ./test/bench/gpu/gpu_als_bench --timing --k "$BENCH_K" 2>&1) | tee "$t/ials.log"
		tally "$(cat "$t/ials.log")" "gpu_als_bench --timing with $(variant_label "$v")"
		echo "== $(variant_label "$v"): CCD++ and explicit ALS (mf_explicit_bench --timing)"
		(cd "$t" && ./test/bench/gpu/mf_explicit_bench --timing --seed 7 2>&1) | tee "$t/explicit.log"
		tally "$(cat "$t/explicit.log")" "mf_explicit_bench --timing with $(variant_label "$v")"
		echo "== $(variant_label "$v"): batch scorer (score_bench)"
		(cd "$t" && GM_TEST_SEED=7 ./test/bench/gpu/score_bench 2>&1) | tee "$t/score.log"
		tally "$(cat "$t/score.log")" "score_bench with $(variant_label "$v")"
	done
	# one table: ms of the sm_90 build, of the compute_75 PTX build, their ratio
	local a=$TREES/sm90 b=$TREES/c75
	ials() {  # $1 log, $2 k, $3 solver label: "ms loss"
		awk -F'|' -v k="$2" -v s="$3" '{ g = $3; gsub(/^ +| +$/, "", g); kk = $2; gsub(/ /, "", kk) }
			kk == k && g == s { m = $4; l = $9; gsub(/ /, "", m); gsub(/ /, "", l); print m, l; exit }' "$1"
	}
	ccd() {  # $1 log, $2 k, $3 label (as printed, padded to 28)
		awk -v k="$2" -v s="$3" 'substr($0, 3, 4) + 0 == k && substr($0, 8, length(s)) == s {
			split(substr($0, 8 + 28), f, " "); print f[1], f[6]; exit }' "$1"
	}
	als() {
		awk -v k="$2" -v s="$3" 'substr($0, 3, 4) + 0 == k && substr($0, 8, length(s)) == s {
			split(substr($0, 8 + 24), f, " "); print f[1], f[5]; exit }' "$1"
	}
	row() {  # $1 name, $2 "ms q" of sm_90, $3 of compute_75
		local ma qa mb qb
		read -r ma qa <<<"$2"
		read -r mb qb <<<"$3"
		awk -v n="$1" -v ma="$ma" -v mb="$mb" -v qa="$qa" -v qb="$qb" 'BEGIN {
			printf "| %s | %s | %s | %s | %s / %s |\n", n, ma, mb, (ma > 0 && mb > 0) ? sprintf("%.2fx", mb / ma) : "-", qa, qb }'
	}
	{
		echo "Same card, same run: sm_90 SASS (c) against compute_75 PTX compiled by the driver (b). $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)."
		echo
		echo "| benchmark | sm_90 ms | compute_75 ms | compute_75 / sm_90 | quality (sm_90 / compute_75) |"
		echo "|---|---|---|---|---|"
		for k in ${BENCH_K//,/ }; do
			for s in "gpumf CG 3" "gpumf CG 3, TF32 V G" "gpumf block 32 x 1" "gpumf block 32 x 1, TF32 Grams" \
				"gpumf block 64 x 1" "gpumf block 64 x 1, TF32 Grams" "gpumf exact"; do
				x=$(ials "$a/ials.log" "$k" "$s")
				[ -n "$x" ] && row "iALS k=$k $s (ms/iteration; loss)" "$x" "$(ials "$b/ials.log" "$k" "$s")"
			done
		done
		for k in 40 100; do
			for s in "GPU, binned (one launch)" "GPU, one copy, fixed sums"; do
				x=$(ccd "$a/explicit.log" "$k" "$s")
				[ -n "$x" ] && row "CCD++ k=$k $s (ms/iteration; held-out RMSE)" "$x" "$(ccd "$b/explicit.log" "$k" "$s")"
			done
			for s in "own Cholesky" "cuSOLVER batched"; do
				x=$(als "$a/explicit.log" "$k" "$s")
				[ -n "$x" ] && row "explicit ALS k=$k $s (ms/iteration; held-out RMSE)" "$x" "$(als "$b/explicit.log" "$k" "$s")"
			done
		done
		sc() { awk -F'|' 'index($2, "GPU: cuBLAS sgemm + select_topk") { m = $3; gsub(/ /, "", m); print m, "-"; exit }' "$1"; }
		row "scorer, ML-20M shape, k=128, n=10 (GPU compute ms)" "$(sc "$a/score.log")" "$(sc "$b/score.log")"
	} >"$md"
	echo
	cat "$md"
}

# ---------------------------------------------------------------- main

run_part() {  # $1: part name -- runs it, its log in $OUT/arch-$1.log
	local t0=$SECONDS
	{
		case $1 in
			build) part_build ;;
			check75) part_check c75 ;;
			check75-rest) part_check c75 rest ;;
			checkfat) part_check fat ;;
			checkfat-rest) part_check fat rest ;;
			bench) part_bench ;;
		esac
		echo "== arch_run.sh $1: $((SECONDS - t0)) s"
		echo "$P passed, $F failed"
	} 2>&1 | tee "$OUT/arch-$1.log"
}

case $part in
	build | check75 | check75-rest | checkfat | checkfat-rest | bench) parts=$part ;;
	all) parts="build check75 check75-rest checkfat checkfat-rest bench" ;;
	*)
		echo "usage: $0 build | check75 | check75-rest | checkfat | checkfat-rest | bench | all"
		exit 2
		;;
esac
rc=0
for p in $parts; do
	run_part "$p"
	tail -1 "$OUT/arch-$p.log" | grep -qE '^[0-9]+ passed, 0 failed$' || rc=1
done
exit $rc
