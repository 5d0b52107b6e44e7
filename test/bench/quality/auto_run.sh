#!/bin/bash
# The bare call's quality against the fixed defaults and against gpumf's own
# tuning, on public data and the ML-20M-shaped synthetic set (issue: good
# recommendations without tuning).  For each dataset ials_quality's auto
# mode prints one table: the fixed defaults (gpumf 0.3's bare call), the
# automatic search a bare gpumf_train runs (gm_auto_tune on a validation
# split carved from the training part, then its choice trained on all of
# it), and a reference search (gm_tune local, REF trials) on the same split;
# the test split is looked at only after each choice is made.
#
#   bash test/bench/quality/auto_run.sh [cpu|cuda] [DATASET ...]
#
# DATASETs (data under .data/, git-ignored; see test/bench/README.md):
# gowalla, yelp2018 (LightGCN's splits), ml-1m, ml-100k (every rating an
# interaction, 20% of each user's items held out for the test, seed 7),
# ml-1m-half4 (MovieLens 1M's users 1-2999, ratings >= 4 as interactions),
# synthetic (the ML-20M shape, 138,493 users).  Default: all five.
# SECONDS (60) is the automatic search's budget, as gpumf.autotune_seconds.
set -o pipefail
cd "$(dirname "$0")/../../.." || exit 1
backend=${1:-cuda}
shift
sets=("$@")
[ ${#sets[@]} -eq 0 ] && sets=(gowalla yelp2018 ml-1m ml-100k synthetic)
SECONDS_BUDGET=${SECONDS_BUDGET:-60}
if [ "$backend" = cuda ]; then
	[ -f cuda/gpumf_cuda.so ] || make -C cuda -j"$(nproc)" >/tmp/auto_run_build.log 2>&1 || { tail -20 /tmp/auto_run_build.log; exit 1; }
fi
make -s -C test/bench/quality >/dev/null || exit 1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
q=./test/bench/quality/ials_quality
for s in "${sets[@]}"; do
	case $s in
		gowalla | yelp2018) src=(--data .data/$s); ref=(ref_budget=${REF:-30} factors=256,512,1024) ;;
		ml-1m) src=(--ratings .data/ml-1m/ratings.data); ref=(ref_budget=${REF:-30} factors=64,128,256,512,1024) ;;
		ml-1m-half4) src=(--ratings .data/ml-1m-half4/ratings.data); ref=(ref_budget=${REF:-30} factors=64,128,256,512,1024) ;;
		ml-100k) src=(--ratings .data/ml-100k/u.data); ref=(ref_budget=${REF:-30} factors=32,64,128,256) ;;
		synthetic) src=(--synthetic 138493); ref=(ref_budget=${REF_SYN:-16} factors=64,128,256) ;;
		*) echo "unknown dataset $s"; exit 2 ;;
	esac
	echo "== $s ($backend)"
	$q "${src[@]}" --name "$s" --backend "$backend" auto seconds="$SECONDS_BUDGET" kmax=1024 \
		iters=20 every=2 solver=block "${ref[@]}" 2>/dev/null || exit 1
	echo
done
