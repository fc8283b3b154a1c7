"""Benchmark: every request-trace format end to end on a generated N-request file, in bounded memory.

Run: `python benchmarks/bench_traces.py [--requests 1000000] [--workdir /tmp/cpbcg-traces] [--only burstgpt,vllm]`

For each format, writes an N-request trace (prompt lengths log-normal around 600 tokens, outputs
around 200, Poisson arrivals at 20 requests/s), then runs `cpbcg plan --trace FILE --format json`
under `/usr/bin/time -v` and prints the wall time and the peak resident memory. The SGLang log
(N `Prefill batch` lines) is read with the library (`open_trace`), since planning it needs bound
mode. Numbers go in the notes; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

WRITERS = {}


def writer(name: str, suffix: str):
    def register(fn):
        WRITERS[name] = (suffix, fn)
        return fn
    return register


def workload(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    inputs = np.clip(rng.lognormal(np.log(600), 0.9, n), 1, 30000).astype(np.int64)
    outputs = np.clip(rng.lognormal(np.log(200), 0.8, n), 0, 4000).astype(np.int64)
    arrival_s = np.cumsum(rng.exponential(1 / 20.0, n))
    return inputs, outputs, arrival_s


def _csv(path: Path, header: str, rows) -> None:
    with open(path, "w") as handle:
        handle.write(header + "\n")
        handle.writelines(rows)


@writer("burstgpt", "csv")
def burstgpt(path, inputs, outputs, t):
    _csv(path, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
         (f"{s:.0f},ChatGPT,{i},{o},{i + o},Conversation log\n" for i, o, s in zip(inputs.tolist(), outputs.tolist(), t.tolist())))


@writer("splitwise", "csv")
def splitwise(path, inputs, outputs, t):
    _csv(path, "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size",
         (f"{k},2,0,{s:.4f},1,{i},{o}\n" for k, (i, o, s) in enumerate(zip(inputs.tolist(), outputs.tolist(), t.tolist()))))


@writer("azure2025", "csv")
def azure(path, inputs, outputs, t):
    stamps = (np.datetime64("2025-03-01T00:00:00", "us") + (t * 1e6).astype("timedelta64[us]")).astype(str)
    _csv(path, "TIMESTAMP,ContextTokens,GeneratedTokens,NumImages",
         (f"{s.replace('T', ' ')},{i},{o},0\n" for i, o, s in zip(inputs.tolist(), outputs.tolist(), stamps.tolist())))


@writer("vllm", "json")
def vllm(path, inputs, outputs, t):
    path.write_text(json.dumps({"backend": "vllm", "input_lens": inputs.tolist(), "output_lens": outputs.tolist(), "start_times": t.tolist()}))


@writer("aibrix", "jsonl")
def aibrix(path, inputs, outputs, t):
    ms = (t * 1000).astype(np.int64) // 100 * 100  # requests grouped per 100 ms, as AIBrix's generator does
    with open(path, "w") as handle:
        lo = 0
        bounds = np.flatnonzero(np.diff(ms)) + 1
        for hi in [*bounds.tolist(), len(ms)]:
            reqs = [{"prompt": "", "prompt_length": int(i), "output_length": int(o)} for i, o in zip(inputs[lo:hi], outputs[lo:hi])]
            handle.write(json.dumps({"timestamp": int(ms[lo]), "requests": reqs}) + "\n")
            lo = hi


@writer("parquet", "parquet")
def parquet(path, inputs, outputs, t):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"TIMESTAMP": t, "ContextTokens": inputs, "GeneratedTokens": outputs}), path, row_group_size=1 << 17)


@writer("sglang-log", "log")
def sglang_log(path, inputs, outputs, t):
    with open(path, "w") as handle:
        for k, (i, s) in enumerate(zip(inputs.tolist(), t.tolist())):
            handle.write(f"[2025-06-01 12:00:00 TP0] Prefill batch, #new-seq: {1 + k % 4}, #new-token: {i + 8}, #cached-token: 0, token usage: 0.10, #running-req: 3, #queue-req: 0\n")


def measure(command: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of a command under /usr/bin/time -v."""
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    hours, minutes, seconds = (float(g or 0) for g in wall.groups())
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    return hours * 3600 + minutes * 60 + seconds, rss_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-traces"))
    parser.add_argument("--only", default=",".join(WRITERS))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    data = workload(args.requests)
    for name in args.only.split(","):
        suffix, write = WRITERS[name]
        path = args.workdir / f"{name}-{args.requests}.{suffix}"
        if not path.exists():
            write(path, *data)
        if name == "sglang-log":
            code = f"from cpbcg.assembly.registry import open_trace; print(sum(f.num_forwards for f in open_trace({str(path)!r}).items))"
            command = [sys.executable, "-c", code]
        else:
            command = [sys.executable, "-m", "cpbcg", "plan", "--trace", str(path), "--format", "json", "--cp-size", "4"]
        wall_s, rss_mib = measure(command)
        print(f"{name:11s} {path.stat().st_size / 1e6:7.0f} MB   {wall_s:6.1f} s   peak RSS {rss_mib:6.0f} MiB")


if __name__ == "__main__":
    main()
