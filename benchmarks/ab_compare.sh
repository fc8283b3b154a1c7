#!/usr/bin/env bash
# Alternating A/B of cpbcg's issue-34 figures: an older tree against this one, in the same minutes.
#
# Usage: N=5 [ONLY="norec rec"] [TRACE=...] [LOG=...] benchmarks/ab_compare.sh OLD_TREE [NEW_TREE]
#   OLD_TREE: an export of an older commit (`git archive COMMIT | tar -x -C /tmp/old`), run with
#   PYTHONPATH and the working directory there (`python -m cpbcg` imports from the working
#   directory first). NEW_TREE defaults to this checkout. Needs the traces the other benchmarks
#   write: /tmp/cpbcg-bench/batches-1000000.jsonl (bench_plan.py) and
#   /tmp/cpbcg-bench-log/sglang-500000-500000.log (bench_log.py).
# Prints, per command and tree, the wall seconds and the CPU seconds (user + system of the process
# and its children, e.g. plan's forked fit) min-median-max over N rounds (fresh processes, after
# one warm-up round that also compiles the bytecode). On a shared machine compare the CPU columns.
# Numbers go in the README.
set -euo pipefail
OLD=${1:?usage: N=5 benchmarks/ab_compare.sh OLD_TREE [NEW_TREE]}
NEW=${2:-$(cd "$(dirname "$0")/.." && pwd)}
N=${N:-5}
T=${TRACE:-/tmp/cpbcg-bench/batches-1000000.jsonl}
L=${LOG:-/tmp/cpbcg-bench-log/sglang-500000-500000.log}
ALL_NAMES=(help planhelp default norec rec log)
ALL_ARGS=("--help" "plan --help" "plan -f json" "plan --trace $T -f json --no-recommend" "plan --trace $T -f json" "plan -t $L -f json --no-recommend")
NAMES=(); ARGS=()
for i in "${!ALL_NAMES[@]}"; do  # ONLY="norec rec": a subset of the commands
  if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" ${ALL_NAMES[$i]} "* ]]; then NAMES+=("${ALL_NAMES[$i]}"); ARGS+=("${ALL_ARGS[$i]}"); fi
done
for a in "${ARGS[@]}"; do
  for f in "$T" "$L"; do [[ "$a" != *"$f"* || -f "$f" ]] || { echo "missing $f: run bench_plan.py and bench_log.py first" >&2; exit 2; }; done
done
OUT=$(mktemp -d)
one() {  # tree, args -> "wall_s cpu_s"
  local tree=$1; shift
  python - "$tree" "$@" <<'PY'
import os, subprocess, sys, time
tree, args = sys.argv[1], sys.argv[2].split()
env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
began = time.perf_counter()
child = subprocess.Popen([sys.executable, "-m", "cpbcg", *args], cwd=tree, env={**env, "PYTHONPATH": tree},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, _, usage = os.wait4(child.pid, 0)
print(f"{time.perf_counter() - began:.3f} {usage.ru_utime + usage.ru_stime:.3f}")
PY
}
for tree in "$OLD" "$NEW"; do python -m compileall -q "$tree/cpbcg" > /dev/null; done
for round in $(seq 0 "$N"); do
  for i in "${!NAMES[@]}"; do
    for side in old new; do
      tree=$OLD; [ $side = new ] && tree=$NEW
      read -r wall cpu <<< "$(one "$tree" "${ARGS[$i]}")"
      [ "$round" -gt 0 ] && { echo "$wall" >> "$OUT/${NAMES[$i]}-$side"; echo "$cpu" >> "$OUT/${NAMES[$i]}-$side-cpu"; }
    done
  done
done
for name in "${NAMES[@]}"; do
  for side in old new; do
    spread() { sort -n "$1" | awk '{a[NR]=$1} END{printf "%.3f-%.3f-%.3f", a[1], a[int((NR+1)/2)], a[NR]}'; }
    echo "$name $side: wall $(spread "$OUT/$name-$side") s, CPU $(spread "$OUT/$name-$side-cpu") s"
  done
done
rm -rf "$OUT"
