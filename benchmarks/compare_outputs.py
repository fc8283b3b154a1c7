"""Compare the CLI's outputs of two source trees byte for byte (a refactor's proof of no change).

Run: `python benchmarks/compare_outputs.py BEFORE_TREE AFTER_TREE [--out DIR] [--only NAME ...]`

Each tree is a checkout of this repository (e.g. `git worktree add --detach ../base <commit>`).
Every case below runs `python -m cpbcg ...` once with each tree first on `PYTHONPATH`, in text and
in JSON (plan, replay-check, batches, check-server, watch, presets, layout), on two shared request traces (`../shared/traces`), the test fixture SGLang log and a
synthetic 0.5.23 log (`make_sglang_log.py`, 2,000 prefill and 2,000 decode lines, seed 0). stdout,
stderr and the exit code are compared byte for byte; the only rewrites are the tree's own path,
which a message may name, and watch's wall-clock readings (`TIMING`). Prints one line per case
and `N/M identical`; exit 1 when any differ (both outputs of each case are kept under `--out`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TRACES = HERE.parent / "shared" / "traces"
VIDUR = TRACES / "vidur" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
AZURE = TRACES / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
FIXTURE_LOG = HERE / "tests" / "assets" / "traces" / "sglang-server.log"
LAUNCH = ("python -m sglang.launch_server --model-path m --tp-size 4 --attn-cp-size 4 --enable-prefill-cp "
          "--cp-strategy zigzag --prefill-attention-backend trtllm_mha")

TIMING = re.compile(rb'"(elapsed_s|last_line_age_s|reader_lag_s|scrape_age_s|seconds)":-?[0-9.e+-]+')
"""Wall-clock readings in watch's JSON (run time, line age, reader lag): masked, the rest compared as is."""
TEXT_TIMING = re.compile(rb"( in | last line | reader lag )[0-9.]+ s\b")
"""The same readings in watch's text (`2,000 prefill forwards in 1 s`, `last line 0 s ago`, `reader lag 0.0 s`)."""


def cases(logs: Path) -> dict[str, tuple[list[str], Path | None]]:
    """`{name: (cpbcg arguments, file fed on stdin or None)}`, each in text and JSON (`batches`
    writes a batch trace, one form). `logs` holds both logs (the fixture copied, so that both
    trees read the same path) and receives the flags files `--emit` writes."""
    fixture_log, synthetic_log = logs / "fixture-sglang-server.log", logs / "synthetic-sglang.log"
    out: dict[str, tuple[list[str], Path | None]] = {}
    for tag, trace in (("vidur", VIDUR), ("azure", AZURE), ("synthetic-log", synthetic_log)):
        out[f"batches-{tag}"] = (["batches", "--trace", str(trace), "-o", "-"], None)
    for fmt in ("table", "json"):
        for tag, trace in (("vidur", VIDUR), ("azure", AZURE), ("fixture-log", fixture_log), ("synthetic-log", synthetic_log)):
            out[f"plan-{tag}-{fmt}"] = (["plan", "--trace", str(trace), "-f", fmt], None)
            out[f"replay-check-{tag}-{fmt}"] = (["replay-check", "--trace", str(trace), "--report-only", "-f", fmt], None)
        out[f"plan-default-{fmt}"] = (["plan", "-f", fmt], None)
        for emit in ("sglang", "sglang-json", "yaml"):
            out[f"plan-emit-{emit}-vidur-{fmt}"] = (["plan", "--trace", str(VIDUR), "--emit", emit, "-f", fmt, "-o", str(logs / f"emitted.{emit}")], None)
        out[f"check-server-b200-{fmt}"] = (["check-server", "--server-args", LAUNCH, "--gpu", "B200", "-f", fmt], None)
        out[f"check-server-h200-{fmt}"] = (["check-server", "--server-args", LAUNCH, "--gpu", "H200", "-f", fmt], None)
        out[f"watch-fixture-log-{fmt}"] = (["watch", "-", "-f", fmt], fixture_log)
        out[f"watch-synthetic-log-{fmt}"] = (["watch", "-", "-f", fmt], synthetic_log)
        out[f"replay-check-gates-vidur-{fmt}"] = (["replay-check", "--trace", str(VIDUR), "--min-coverage", "0.5", "--max-padding", "0.01",
                                                    "-f", fmt], None)
        out[f"watch-gates-synthetic-log-{fmt}"] = (["watch", "-", "--min-observed-coverage", "0.99", "-f", fmt], synthetic_log)
        out[f"presets-{fmt}"] = (["presets", "-f", fmt], None)
        out[f"layout-{fmt}"] = (["layout", "--cp-size", "4", "1534", "161", "353", "-f", fmt], None)
        out[f"plan-guarantee-{fmt}"] = (["plan", "--guarantee", "--max-requests", "4", "-f", fmt], None)
        out[f"plan-compare-vidur-{fmt}"] = (["plan", "--trace", str(VIDUR), "--compare", "-f", fmt], None)
    return out


def run(tree: Path, args: list[str], stdin: Path | None, env: dict[str, str]) -> bytes:
    env = {**env, "PYTHONPATH": str(tree)}
    with open(stdin, "rb") if stdin is not None else open(os.devnull, "rb") as feed:
        done = subprocess.run([sys.executable, "-m", "cpbcg", *args], cwd=tree, env=env, stdin=feed, capture_output=True, timeout=900)
    text = b"exit %d\n--- stdout\n%s\n--- stderr\n%s" % (done.returncode, done.stdout, done.stderr)
    if "-o" in args and args[args.index("-o") + 1] != "-":  # the file written, then gone before the other tree's run
        written = Path(args[args.index("-o") + 1])
        text += b"\n--- " + written.name.encode() + b"\n" + (written.read_bytes() if written.exists() else b"(not written)")
        written.unlink(missing_ok=True)
    masked = TIMING.sub(rb'"\1":<T>', text.replace(str(tree).encode(), b"<TREE>"))
    return TEXT_TIMING.sub(rb"\1<T> s", masked) if args[0] == "watch" else masked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to keep both outputs of each case (default: a temporary folder)")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run (default: all)")
    ns = parser.parse_args()
    out = ns.out or Path(tempfile.mkdtemp(prefix="cpbcg-compare-"))
    out.mkdir(parents=True, exist_ok=True)
    synthetic = out / "synthetic-sglang.log"
    shutil.copyfile(FIXTURE_LOG, out / "fixture-sglang-server.log")
    if not synthetic.exists():
        subprocess.run([sys.executable, str(HERE / "benchmarks" / "make_sglang_log.py"), str(synthetic), "--prefills", "2000", "--decodes", "2000"],
                       check=True, env={**os.environ, "PYTHONPATH": str(HERE)}, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    selected = {n: c for n, c in cases(out).items() if ns.only is None or n in ns.only}
    same = 0
    for name, (args, stdin) in selected.items():
        before, after = (run(tree.resolve(), args, stdin, env) for tree in (ns.before, ns.after))
        (out / f"{name}.before").write_bytes(before)
        (out / f"{name}.after").write_bytes(after)
        identical = before == after
        same += identical
        status = after.split(b"\n", 1)[0].decode()
        print(f"{'identical' if identical else 'DIFFERENT'}  {name}  ({len(after):,} bytes, {status})", flush=True)
    print(f"{same}/{len(selected)} identical (outputs in {out})")
    return 0 if same == len(selected) else 1


if __name__ == "__main__":
    sys.exit(main())
