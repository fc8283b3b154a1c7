"""The README's "What the recommendation buys" table: `cpbcg plan` on the shared traces.

Run: `python benchmarks/resolved_settings.py [--before PATH]` from the repository root. For
the embedded default workload and each shared trace (`../shared/traces`) it runs
`cpbcg plan --trace FILE -f json` and prints the default list and the recommended list of the
same size: forwards in graphs, padding, modelled prefill time, local_capacity eager forwards,
natural overflows, out-of-sample coverage, and the page size and chunk the plan used.
`--before PATH` also runs the checkout at PATH (e.g. a worktree of the commit before the
start-up resolution, which planned page size 1 and 8192-token chunks) for the "before" column.
Numbers are reported, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

TRACES = [
    None,
    "azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
    "mooncake-fast25/conversation_trace.jsonl",
    "sarathi-serve/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
]


def plan(root: Path, trace: Path | None) -> dict:
    args = [sys.executable, "-m", "cpbcg", "plan", "-f", "json"] + (["--trace", str(trace)] if trace else [])
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def line(doc: dict) -> str:
    rec = doc.get("recommendation") or {}
    ev = rec.get("evaluation") or {}
    server = doc.get("server")
    settings = (f"page {server['page_size']['value']}, chunk {server['chunked_prefill_size']['value']}" if server
                else "page 1, chunk 8192 (unresolved)")
    oos = ((rec.get("validation") or {}).get("evaluation") or {}).get("coverage")
    return (f"{settings} | default {len(doc['buckets'])} buckets: {doc['coverage']:.2%} in graphs, padding "
            f"{doc['padding_overhead']:.2%}, local_capacity {doc['eager']['local_capacity']}, overflow {doc['natural_overflow']} "
            f"| recommended {len(rec.get('buckets', []))}: {ev.get('coverage', 0):.2%}, padding {ev.get('padding_overhead', 0):.2%} "
            f"| modelled {rec.get('configured_modelled_ms', 0) / 1000:,.1f} s -> {rec.get('modelled_ms', 0) / 1000:,.1f} s "
            f"| out of sample {oos if oos is None else f'{oos:.2%}'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to run for the 'before' column")
    parser.add_argument("--traces", type=Path, default=Path("../shared/traces"))
    opts = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    for name in TRACES:
        trace = (opts.traces / name).resolve() if name else None
        if trace is not None and not trace.is_file():
            print(f"{name}: not present, skipped")
            continue
        for label, root in ([("before", opts.before.resolve())] if opts.before else []) + [("after", here)]:
            print(f"{name or 'embedded default'} | {label} | {line(plan(root, trace))}", flush=True)


if __name__ == "__main__":
    main()
