"""The README's "What the recommendation buys" table: `cpbcg plan` on the shared traces.

Run: `python benchmarks/resolved_settings.py [--before PATH]` from the repository root. For
the embedded default workload and each shared trace (`../shared/traces`) it runs
`cpbcg plan --trace FILE -f json` and prints the default list and the recommended list of the
same size: forwards in graphs, padding, modelled prefill time, local_capacity eager forwards,
natural overflows, out-of-sample coverage, and the page size and chunk the plan used.
`--before PATH` also runs the checkout at PATH (e.g. a worktree of the commit before the
start-up resolution, which planned page size 1 and 8192-token chunks) for the "before" column.
Numbers are reported, not asserted.

`--sweep` instead checks the README's sentence on capacity overflows: for each trace it runs
`cpbcg plan --no-recommend -f json --time-scale LOADS` at each `--cp`, `--pages` and
`--prefix-caches` value and prints, per (trace, cp, page, prefix cache, load), the forwards whose
natural bucket lacked CP-local rows (`natural_overflow`), how many a larger bucket rescued
(`rescued`), and the `local_capacity` and `not_cp_active` eager forwards, then the maxima.
E.g. `python benchmarks/resolved_settings.py --sweep --cp 8 --pages 16,32,64,128 --loads 1,4,16,64
--prefix-caches off,unlimited` (about 40 runs; a request trace without arrival times is
simulated at the rate picker's rates, each times the load factor, and reported per rate).
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


def sweep(here: Path, traces: list[Path | None], opts: argparse.Namespace) -> None:
    """The overflow sweep (module doc): one line per (trace, cp, page, prefix cache, load part), then the maxima."""
    most: dict[str, tuple[int, str]] = {}
    for trace in traces:
        for cp in opts.cp.split(","):
            for page in opts.pages.split(","):
                for cache in opts.prefix_caches.split(","):
                    args = [sys.executable, "-m", "cpbcg", "plan", "--no-recommend", "-f", "json", "--cp-size", cp, "--page-size", page]
                    if trace is not None:  # the embedded workload is forwards already: no load, no prefix cache
                        args += ["--trace", str(trace), "--time-scale", opts.loads, "--prefix-cache", cache]
                    elif cache != opts.prefix_caches.split(",")[0]:
                        continue
                    run = subprocess.run(args, cwd=here, env={**os.environ, "PYTHONPATH": str(here)}, capture_output=True, text=True,
                                         check=True)
                    doc = json.loads(run.stdout)
                    parts = [(p["load"], p["configured"]) for p in doc.get("traffic", [])] or [("-", doc)]
                    for load, ev in parts:
                        where = f"{trace.name if trace else 'embedded default'} cp {cp} page {page} cache {cache} load {load}"
                        counts = {"natural_overflow": ev["natural_overflow"], "rescued": ev["rescued"],
                                  "local_capacity": ev["eager"]["local_capacity"], "not_cp_active": ev["eager"]["not_cp_active"]}
                        print(f"{where} | {ev['batches']:,} forwards | " + ", ".join(f"{k} {v:,}" for k, v in counts.items()), flush=True)
                        for key, value in counts.items():
                            if value > most.get(key, (-1, ""))[0]:
                                most[key] = (value, where)
    for key, (value, where) in most.items():
        print(f"most {key}: {value:,} ({where})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to run for the 'before' column")
    parser.add_argument("--traces", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--sweep", action="store_true", help="the overflow sweep instead of the table (module doc)")
    parser.add_argument("--cp", default="8", help="--sweep: CP sizes, comma-separated")
    parser.add_argument("--pages", default="16,32,64,128", help="--sweep: page sizes, comma-separated")
    parser.add_argument("--loads", default="1,4,16,64", help="--sweep: load factors (--time-scale)")
    parser.add_argument("--prefix-caches", default="off,unlimited", help="--sweep: --prefix-cache values, comma-separated")
    opts = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    if opts.sweep:
        present = [(opts.traces / name).resolve() if name else None for name in TRACES]
        sweep(here, [t for t in present if t is None or t.is_file()], opts)
        return
    for name in TRACES:
        trace = (opts.traces / name).resolve() if name else None
        if trace is not None and not trace.is_file():
            print(f"{name}: not present, skipped")
            continue
        for label, root in ([("before", opts.before.resolve())] if opts.before else []) + [("after", here)]:
            print(f"{name or 'embedded default'} | {label} | {line(plan(root, trace))}", flush=True)


if __name__ == "__main__":
    main()
