#!/usr/bin/env bash
# GPU check for `cpbcg capture` (issue 5). Installs nothing; needs python with torch (CUDA) and
# cpbcg's dependencies. Captures real breakable CUDA graphs for the tiny preset and one real
# preset (qwen3-32b dims, 2 layers) at cp 4, emulated on ONE GPU, over ten buckets that include
# the rescued case 2048/2304 with extend_seq_lens [1534, 161, 353]; writes the manifests and
# prints a summary. Budget: < 8 minutes on an H200 (each capture is capped by `timeout`).
#
#   scripts/gpu_check.sh                 # manifests in $OUT (if set) or ./gpu_check_out
#   PYTHON=/path/to/python REAL_PRESET=llama-3.1-70b scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
DEST=${OUT:-gpu_check_out}
REAL=${REAL_PRESET:-qwen3-32b}
BUCKETS=256,512,768,1024,1536,2048,2304,2560,3072,4096
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$DEST"

"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: this check needs a GPU (CPU runs are dry runs)"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
PY

# Trace of batches the selector routes: the rescued one (2048 tokens, 520 rows -> 2304), a
# natural 2048, a 4096-bucket batch and a short-request mix.
cat > "$DEST/check_batches.jsonl" <<'JSONL'
{"extend_seq_lens": [1534, 161, 353]}
[2048]
[1000, 1000]
[3000, 17, 9, 600]
[200, 40, 40]
JSONL

run() {  # preset layers manifest-name time-limit-s
  echo "== cpbcg capture --preset $1 --layers $2 --cp-size 4 (limit $4 s)"
  CPBCG_WIDTH=110 timeout "$4" "$PY" -m cpbcg capture --preset "$1" --layers "$2" --cp-size 4 \
    --buckets "$BUCKETS" --trace "$DEST/check_batches.jsonl" --samples 2 -o "$DEST/$3"
}
start=$(date +%s)
run tiny 2 manifest-tiny.json 150
run "$REAL" 2 "manifest-$REAL.json" 240
"$PY" -m pytest -q -m gpu tests/test_capture_gpu.py -p no:cacheprovider || echo "gpu tests FAILED"

"$PY" - "$DEST/manifest-tiny.json" "$DEST/manifest-$REAL.json" <<'PY'
import json, sys
ok = True
for path in sys.argv[1:]:
    d = json.load(open(path))
    m = d["model"]
    print(f"\n{path}: {m['name']} x{m['num_layers']} {m['dtype']} on {d['device_name']}, dry_run={d['dry_run']}, "
          f"tolerance atol {d['tolerance']['atol']} rtol {d['tolerance']['rtol']}")
    print(f"{'bucket':>6} {'C(B)':>5} {'capture_s':>9} {'graph_MiB':>9} {'alloc_MiB':>9} {'replay_ms':>9} {'eager_ms':>9} {'max_err':>8} ok probe")
    for b in d["buckets"]:
        mib = lambda v: "-" if v is None else f"{v / 2**20:.1f}"
        ms = lambda v: "-" if v is None else f"{v:.3f}"
        print(f"{b['capture_num_tokens']:>6} {b['local_rows']:>5} {b['capture_s']:>9.3f} {mib(b['graph_bytes']):>9} "
              f"{mib(b['allocator_bytes']):>9} {ms(b['replay_ms']):>9} {ms(b['eager_ms']):>9} {b['max_abs_err']:>8.1e} "
              f"{'yes' if b['verified'] else 'NO'} {b['overflow_refused']}")
        ok &= b["verified"] and b["overflow_refused"] is not False
    rescued = [l for b in d["buckets"] if b["capture_num_tokens"] == 2304 for l in b["layouts"]
               if l["kind"] == "trace" and l["num_tokens"] == 2048 and l["local_rows"] == 520]
    print(f"rescued [1534, 161, 353] (520 rows) replayed in 2304: {'verified' if rescued and rescued[0]['verified'] else 'MISSING/FAILED'}")
    ok &= bool(rescued) and rescued[0]["verified"] and not d["dry_run"]
    for s in d.get("skipped_buckets", []):
        print(f"skipped {s['capture_num_tokens']}: {s['reason']}")
print("\nGPU CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
echo "elapsed $(( $(date +%s) - start )) s; manifests in $DEST"
