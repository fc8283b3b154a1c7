"""Write a SYNTHETIC SGLang 0.5.23 server log for the log-reading benchmark (bench_log.py).

Run: `python benchmarks/make_sglang_log.py OUT.log [--prefills 500000] [--decodes 500000] [--seed 0]`

The lines follow the format strings of 0.5.23's `report_prefill_stats` / `report_decode_stats`
(`managers/scheduler_components/metrics_reporter.py`): a start-up settings dump
(`server_args={...}`, with the resolved CUDA-graph settings 0.5.23's `resolved_dict` prints), then `Prefill batch` and `Decode batch` lines interleaved, with rank
prefix `[date TP0]`, prefill sizes log-normal around 2,000 tokens (at most 8192), 1-8 requests, the verdict
`cuda graph: True` where SGLang's default list for 8192 replays the forward.
500,000 of each is about 181 MB. Not a real server's log.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cpbcg.engines.sglang.capture_lists import sglang_default_buckets

MAX_BS = 8192
"""chunked_prefill_size and the prefill graphs' max_bs the log's server ran with (tokens); no forward is larger."""


def write_log(path: Path, prefills: int, decodes: int, seed: int = 0) -> int:
    """Write the log; returns its size in bytes."""
    rng = np.random.default_rng(seed)
    n = np.clip(rng.lognormal(np.log(2000), 0.9, prefills), 1, MAX_BS).astype(np.int64)
    k = np.minimum(rng.integers(1, 9, prefills), n)
    cached = rng.integers(0, 4096, prefills)
    buckets = np.array(sglang_default_buckets(MAX_BS), dtype=np.int64)
    padded = buckets[np.minimum(np.searchsorted(buckets, n), len(buckets) - 1)]
    graph = (n <= buckets[-1]) & (padded <= 2 * n)  # SGLang's verdict without CP (can_replay_locally), 2x padding cap
    running = rng.integers(1, 256, max(prefills, decodes))
    total = prefills + decodes
    is_prefill = np.zeros(total, dtype=bool)
    is_prefill[rng.choice(total, prefills, replace=False)] = True
    with open(path, "w") as out:
        out.write("# SYNTHETIC SGLang 0.5.23 server log written by benchmarks/make_sglang_log.py (not from a real server)\n")
        # 0.5.23's dump (`ServerArgs.resolved_dict`) prints the resolved CUDA-graph settings: prefill graphs on (breakable,
        # the default list up to chunked_prefill_size), as the verdicts below say
        out.write("[2026-11-02 09:59:00] server_args={'model_path': 'org/model', 'tp_size': 1, 'attn_cp_size': 1, "
                  f"'enable_prefill_cp': False, 'chunked_prefill_size': {MAX_BS}, 'page_size': 1, 'enable_mixed_chunk': False, "
                  "'cuda_graph_config': {'decode': {'backend': 'full', 'bs': None, 'max_bs': 512}, "
                  f"'prefill': {{'backend': 'breakable', 'bs': None, 'max_bs': {MAX_BS}}}}}, 'cuda_graph_backend_prefill': 'breakable', "
                  f"'cuda_graph_max_bs_prefill': {MAX_BS}, 'disable_prefill_cuda_graph': False, 'disable_cuda_graph': False}}\n")
        p = d = 0
        lines: list[str] = []
        for i in range(total):
            sec = i // 1000
            stamp = f"[2026-11-02 {10 + sec // 3600 % 14:02d}:{sec // 60 % 60:02d}:{sec % 60:02d} TP0] "
            if is_prefill[i]:
                lines.append(f"{stamp}Prefill batch, #new-seq: {k[p]}, #new-token: {n[p]}, #cached-token: {cached[p]}, "
                             f"token usage: 0.{p % 100:02d}, #running-req: {running[p]}, #queue-req: {p % 7}, #pending-token: 0, "
                             f"cuda graph: {bool(graph[p])}, input throughput (token/s): {12000 + p % 5000}.{p % 100:02d}\n")
                p += 1
            else:
                r = running[d]
                lines.append(f"{stamp}Decode batch, #running-req: {r}, #token: {r * 900 + d % 1000}, token usage: 0.{d % 100:02d}, "
                             f"cuda graph: True, gen throughput (token/s): {3000 + d % 2000}.{d % 100:02d}, #queue-req: {d % 5}\n")
                d += 1
            if len(lines) >= 65536:
                out.write("".join(lines))
                lines.clear()
        out.write("".join(lines))
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--prefills", type=int, default=500_000)
    parser.add_argument("--decodes", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    size = write_log(args.out, args.prefills, args.decodes, args.seed)
    print(f"{args.out}: {size / 1e6:.1f} MB, {args.prefills:,} Prefill batch + {args.decodes:,} Decode batch lines")


if __name__ == "__main__":
    main()
