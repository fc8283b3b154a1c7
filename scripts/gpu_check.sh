#!/usr/bin/env bash
# One-shot GPU check of `cpbcg capture` on a bare GPU node (one H200, torch + Python 3.12, no
# registry): installs the wheels scripts/fetch_wheels.sh put in .whl/, then in <= 5 minutes
#   1. tiny fp32 capture at cp 4 and its manifest round trip (plan -k / replay-check --manifest);
#   2. qwen3-32b, 2 layers, bf16, over 512,1024,2048,2304,4096 with a trace holding the rescued
#      batch [1534, 161, 353], which must replay verified in 2304 (520 rows > C(2048) = 512);
#   3. qwen3-32b, 2 layers, fp32 over 2048,2304: verification at 1e-4;
#   4. per bucket: replay vs eager vs raw replay (ms), the fitted cost model scaled to 64 layers,
#      standalone and incremental graph-pool MiB, capture seconds;
#   5. pytest -m gpu.
# Every step runs even if an earlier one failed (no `set -e`); the summary is always printed
# and written, with every log and manifest, to $OUT (default ./gpu_check_out).
#
#   scripts/gpu_check.sh
#   GPU_CHECK_DRY_RUN=1 REAL_PRESET=tiny REAL_BUCKETS=256,2048,2304 FP32_BUCKETS=2048,2304 \
#     SKIP_INSTALL=1 PYTHON=/work/venv/bin/python scripts/gpu_check.sh     # CPU rehearsal
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=${OUT:-gpu_check_out}
REAL=${REAL_PRESET:-qwen3-32b}
REAL_BUCKETS=${REAL_BUCKETS:-512,1024,2048,2304,4096}
FP32_BUCKETS=${FP32_BUCKETS:-2048,2304}
BUDGET_S=${BUDGET_S:-290}
SITE=${SITE:-/tmp/site}
DRY=${GPU_CHECK_DRY_RUN:+--dry-run}
mkdir -p "$DEST"
SUMMARY="$DEST/summary.txt"
: > "$SUMMARY"
start=$(date +%s)
declare -a STEPS=()

note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }
step() {  # name cap-seconds command... : run with timeout min(cap, budget left), log, record status
  local name=$1 cap=$2 t; shift 2
  t=$(left); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 5 ]; then STEPS+=("$name: SKIPPED (time budget spent)"); return; fi
  echo "== $name (limit ${t}s): $*"
  local s0=$(date +%s)
  timeout "$t" "$@" > >(tee "$DEST/$name.log") 2> >(tee "$DEST/$name.err" >&2)
  local rc=$?
  sleep 0.2  # let tee flush
  STEPS+=("$name: rc $rc in $(( $(date +%s) - s0 )) s$( [ $rc -eq 124 ] && echo ' (TIMED OUT)')")
}

# 0. Wheels -> /tmp/site (numpy only when the image has none).
if [ -z "${SKIP_INSTALL:-}" ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl && STEPS+=("install: ok") || STEPS+=("install: FAILED")
    "$PY" -c "import numpy" 2>/dev/null || "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/optional/*.whl
  else
    STEPS+=("install: FAILED (no .whl/: run scripts/fetch_wheels.sh on the development machine and carry .whl)")
  fi
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CPBCG_WIDTH=140

"$PY" - <<'PY' 2>&1 | tee -a "$SUMMARY"
import sys
try:
    import torch
except ImportError as exc:
    sys.exit(f"python {sys.version.split()[0]}: torch is missing ({exc}); the capture steps will fail")
ok = torch.cuda.is_available()
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"device: {torch.cuda.get_device_name(0) if ok else 'NONE (CPU rehearsal)'}")
PY

cat > "$DEST/check_batches.jsonl" <<'JSONL'
{"extend_seq_lens": [1534, 161, 353]}
[2048]
[1000, 1000]
[3000, 17, 9, 600]
[200, 40, 40]
JSONL

capture() {  # name cap preset layers buckets [extra args...]
  local name=$1 cap=$2 preset=$3 layers=$4 buckets=$5; shift 5
  step "$name" "$cap" "$PY" -m cpbcg capture --preset "$preset" --layers "$layers" --cp-size 4 --buckets "$buckets" \
    --trace "$DEST/check_batches.jsonl" --samples 2 -o "$DEST/manifest-$name.json" $DRY "$@"
}

capture tiny 45 tiny 2 256,512,1024,2048,2304
step plan-manifest 30 "$PY" -m cpbcg plan -k 4 --manifest "$DEST/manifest-tiny.json" --format json  # -k: the cost model reads it
step replay-check-manifest 40 "$PY" -m cpbcg replay-check --manifest "$DEST/manifest-tiny.json" --trace "$DEST/check_batches.jsonl" \
  --min-coverage 0.8 --replay 2
capture "$REAL-bf16" 110 "$REAL" 2 "$REAL_BUCKETS" --dtype bfloat16
capture "$REAL-fp32" 60 "$REAL" 2 "$FP32_BUCKETS" --dtype float32
step pytest-gpu 60 "$PY" -m pytest -q -m gpu tests/test_capture_gpu.py -p no:cacheprovider -rs

"$PY" - "$DEST" tiny "$REAL-bf16" "$REAL-fp32" <<'PY' 2>&1 | tee -a "$SUMMARY"
import sys
from pathlib import Path
from cpbcg.errors import CpbcgError
from cpbcg.manifest import load_manifest

dest, names = Path(sys.argv[1]), sys.argv[2:]
ok = True
mib = lambda v: "-" if v is None else f"{v / 2**20:.1f}"
ms = lambda v: "-" if v is None else f"{v:.3f}"
for name in names:
    path = dest / f"manifest-{name}.json"
    try:
        m = load_manifest(path)
    except CpbcgError as exc:
        print(f"\n{name}: manifest does not load: {exc}")
        ok = False
        continue
    d, model = m.data, m.data["model"]
    print(f"\n{name}: {model['name']} x{model['num_layers']} {model['dtype']} on {d['device_name']}, dry_run={d['dry_run']}, "
          f"complete={d.get('complete')}, kernels {d.get('attention_kernels')}\n  tolerance: {d['tolerance']['rule']}")
    print(f"  {'bucket':>6} {'C(B)':>5} {'capture_s':>9} {'pool+MiB':>8} {'aloneMiB':>8} {'replay':>8} {'eager':>8} {'raw':>8} "
          f"{'max_err':>8} {'tol':>8} {'bitwise':>7} ok")
    for b in d["buckets"]:
        tol = max((l["tolerance"] for l in b["layouts"]), default=0.0)
        print(f"  {b['capture_num_tokens']:>6} {b['local_rows']:>5} {b['capture_s']:>9.3f} {mib(b['graph_bytes']):>8} "
              f"{mib(b['standalone_graph_bytes']):>8} {ms(b['replay_ms']):>8} {ms(b['eager_ms']):>8} {ms(b['raw_replay_ms']):>8} "
              f"{b['max_abs_err']:>8.1e} {tol:>8.1e} {str(b['graph_matches_eager']):>7} {'yes' if b['verified'] else 'NO'}")
        ok &= b["verified"] and b["overflow_refused"] is not False
        ok &= all(b[k] is None or b[k] >= 0 for k in ("graph_bytes", "standalone_graph_bytes", "allocator_bytes"))
    for s in d.get("skipped_buckets", []):
        print(f"  skipped {s['capture_num_tokens']} ({s['cause']}): {s['reason']}")
    ok &= d.get("complete", False) and (d["dry_run"] or d["device_name"] != "cpu")
    rescued = [l for b in d["buckets"] if b["capture_num_tokens"] == 2304 for l in b["layouts"]
               if l["kind"] == "trace" and l["extend_seq_lens"] == [1534, 161, 353]]
    print(f"  rescued [1534, 161, 353] (520 rows) in 2304: "
          f"{'verified, err %.1e' % rescued[0]['max_abs_err'] if rescued and rescued[0]['verified'] else 'MISSING/FAILED'}")
    ok &= bool(rescued) and rescued[0]["verified"]
    fit = m.fitted_cost()
    if fit is None:
        print("  fitted cost: none (dry run or < 2 timed buckets)")
    else:
        print(f"  fitted cost x{fit.scale:g} ({fit.proxy_layers} -> {fit.model_layers} layers): graph {fit.graph_fixed_ms:.3f} ms "
              f"+ B*{fit.token_ms:.3g}, eager {ms(fit.eager_fixed_ms)} ms{'; ' + fit.note if fit.note else ''}")
print("\nMANIFESTS", "PASSED" if ok else "FAILED")
PY

note ""
note "steps:"
for s in "${STEPS[@]}"; do note "  $s"; done
for s in "${STEPS[@]}"; do case "$s" in *"rc 0 "*|*": ok") ;; *) FAILED=1 ;; esac; done
grep -q "MANIFESTS PASSED" "$SUMMARY" || FAILED=1
note "elapsed $(( $(date +%s) - start )) s (budget ${BUDGET_S} s); logs and manifests in $DEST"
note "GPU CHECK $( [ -z "${FAILED:-}" ] && echo PASSED || echo FAILED )"
[ -z "${FAILED:-}" ]
