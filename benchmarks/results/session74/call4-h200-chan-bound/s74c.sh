#!/usr/bin/env bash
# session 74 call 4: the chan backward's launch bound for 16-bit pairs at 20-24 rows of G > 1 bands (the working
# tree: 2 CTAs an SM; C = 150 log_softmax backward took 132 registers unbound, 72% of copy on the H100 against the
# softmax backward's 96%, call 3's extras) against HEAD (.ab/base) at C = 40, 80, 150 (G = 2, 4, 8; 20 rows a band),
# alone on the GPU; then the regimes that can take dim 0 of odd-width matrices (the scalar path: 18-35% of copy in
# call 3); then in parallel the chan GPU tests on the new tree and compute-sanitizer memcheck over the chan cases
set -uo pipefail
OUT=${OUT:-out}
export ONLINESOFTMAX_COMMIT="$(head -1 .commit)"
SECONDS=0
TREES="new=$PWD/src=chan base=$PWD/.ab/base/src=chan" DTYPES="bfloat16 float16" \
SHAPES="8 150 256 256 --dim 1;8 40 256 256 --dim 1;8 80 256 256 --dim 1" bash benchmarks/device.sh layouts-ab >/dev/null
mkdir -p "$OUT/odd"
OUT="$OUT/odd" TREES="new=$PWD/src=columns,strided,bands" DTYPES="float32 bfloat16" \
SHAPES="4097 1001 --dim 0;2049 3001 --dim 0" bash benchmarks/device.sh layouts-ab >/dev/null
mv "$OUT/odd/layouts-ab.txt" "$OUT/odd-width.txt" && rm -r "$OUT/odd"
( TOOLS=memcheck OUT="$OUT" timeout 200 bash benchmarks/sanitize.sh --regime chan >"$OUT/sanitize.txt" 2>&1 ) &
TEST_TIMEOUT=300 bash benchmarks/device.sh groups tests \
  "tests/test_gpu_production.py -k '(variant_matches and chan) or forward_backward_layouts'" >/dev/null
wait
rm -rf "$OUT/sanitize"
echo "total $SECONDS s" | tee -a "$OUT/tests-summary.txt"
cat "$OUT/tests-summary.txt" "$OUT/sanitize.txt"
