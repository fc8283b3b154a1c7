#!/usr/bin/env bash
# Alternating A/B of cpbcg's issue-34 figures: an older tree against this one, in the same minutes.
#
# Usage: N=5 benchmarks/ab_compare.sh OLD_TREE [NEW_TREE]
#   OLD_TREE: an export of an older commit (`git archive COMMIT | tar -x -C /tmp/old`), run with
#   PYTHONPATH and the working directory there (`python -m cpbcg` imports from the working
#   directory first). NEW_TREE defaults to this checkout. Needs the traces the other benchmarks
#   write: /tmp/cpbcg-bench/batches-1000000.jsonl (bench_plan.py) and
#   /tmp/cpbcg-bench-log/sglang-500000-500000.log (bench_log.py).
# Prints, per command and tree, the wall seconds min-median-max over N rounds (fresh processes,
# after one warm-up round that also compiles the bytecode). Numbers go in the README.
set -euo pipefail
OLD=${1:?usage: N=5 benchmarks/ab_compare.sh OLD_TREE [NEW_TREE]}
NEW=${2:-$(cd "$(dirname "$0")/.." && pwd)}
N=${N:-5}
T=/tmp/cpbcg-bench/batches-1000000.jsonl
L=/tmp/cpbcg-bench-log/sglang-500000-500000.log
for f in "$T" "$L"; do [ -f "$f" ] || { echo "missing $f: run bench_plan.py and bench_log.py first" >&2; exit 2; }; done
OUT=$(mktemp -d)
NAMES=(help planhelp norec rec log)
ARGS=("--help" "plan --help" "plan --trace $T -f json --no-recommend" "plan --trace $T -f json" "plan -t $L -f json --no-recommend")
one() {  # tree, args -> wall seconds
  local tree=$1; shift
  python - "$tree" "$@" <<'PY'
import os, subprocess, sys, time
tree, args = sys.argv[1], sys.argv[2].split()
began = time.perf_counter()
subprocess.run([sys.executable, "-m", "cpbcg", *args], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(f"{time.perf_counter() - began:.3f}")
PY
}
for tree in "$OLD" "$NEW"; do python -m compileall -q "$tree/cpbcg" > /dev/null; done
for round in $(seq 0 "$N"); do
  for i in "${!NAMES[@]}"; do
    for side in old new; do
      tree=$OLD; [ $side = new ] && tree=$NEW
      t=$(one "$tree" "${ARGS[$i]}")
      [ "$round" -gt 0 ] && echo "$t" >> "$OUT/${NAMES[$i]}-$side"
    done
  done
done
for name in "${NAMES[@]}"; do
  for side in old new; do
    echo "$name $side: $(sort -n "$OUT/$name-$side" | awk '{a[NR]=$1} END{printf "%.3f-%.3f-%.3f", a[1], a[int((NR+1)/2)], a[NR]}')"
  done
done
rm -rf "$OUT"
