#!/usr/bin/env bash
# The same sweep (ours only, CUDA backend) for several source trees, one after the other on the same GPU: the A/B
# of a kernel change. Runs on the lent GPU from the repository root:
#   bash benchmarks/ab.sh NAME=SRC_DIR [NAME=SRC_DIR ...] -- [sweep args]
# e.g. bash benchmarks/ab.sh base=/tmp/base/src new=src -- --op softmax --dtype bfloat16 --n 128 --n 256
# Writes $OUT/ab-NAME.csv per tree and prints % of copy side by side ($OUT/ab.txt).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do trees+=("$1"); shift; done
shift || true
for t in "${trees[@]}"; do
  name=${t%%=*}; dir=${t#*=}
  ONLINESOFTMAX_CACHE=/tmp/osm-cache-$name PYTHONPATH="$dir" \
    python3 -m onlinesoftmax sweep --ours-only --backend cuda --out "$OUT/ab-$name.csv" "$@" >"$OUT/ab-$name.txt" 2>&1 \
    || { echo "$name: sweep failed"; tail -20 "$OUT/ab-$name.txt"; }
done
python3 - "$OUT" "${trees[@]}" <<'PY' | tee "$OUT/ab.txt"
import csv, sys
out, names = sys.argv[1], [t.split("=", 1)[0] for t in sys.argv[2:]]
table = {}
for n in names:
    for r in csv.DictReader(open(f"{out}/ab-{n}.csv")):
        if r["variant"].startswith("api.cuda") and r["pct_copy"]:
            key = (r["op"], r["dtype"], int(r["M"]), int(r["N"]))
            table.setdefault(key, {})[n] = f"{float(r['pct_copy']):5.1f}{'' if r['ok'] == 'True' else ' !'}"
print(f"{'op':22s} {'dtype':9s} {'shape':>16s} " + " ".join(f"{n:>7s}" for n in names), "  (% of copy)")
for (op, dt, M, N), v in sorted(table.items()):
    print(f"{op:22s} {dt:9s} {f'{M}x{N}':>16s} " + " ".join(f"{v.get(n, '-'):>7s}" for n in names))
PY
