"""A SYNTHETIC SGLang server writing its log at a rate (a subprocess of tests/test_watch.py).

    python tests/watch_writer.py PATH --forwards N --rate LINES_PER_S [--seed S] [--rotate-at K] [--eager-from K] [--restart-at K]
                                [--copytruncate-at K]

Writes the start-up output (`sglang_log_fixtures.startup_lines`: settings dump, 58 prefill
buckets up to 8192) and then N `Prefill batch` lines in SGLang 0.5.23's wording, flushed in
bursts of 20 lines at about LINES_PER_S. Sizes and verdicts come from a seeded generator; a
verdict follows SGLang's rule (`sglang_graph_verdict`) until line `--eager-from`, after which
every forward prints `cuda graph: False` (a server whose graphs went away). `--rotate-at K`:
after K forwards the file is renamed to PATH.1 and a new PATH is started (logrotate's create mode).
`--copytruncate-at K`: right after the burst that reaches K forwards (so the reader has not read
it yet), the file is copied to PATH.1 and truncated in place (logrotate's copytruncate; the writer
goes on at offset 0, as an O_APPEND writer would).
`--restart-at K`: after K forwards the server restarts into the same file with other settings
(a second launch: its start-up output with 50 buckets up to 4096 and a 4096-token chunk), and the
verdicts follow that launch's list from then on.
Every loop is bounded: N lines, then exit.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sglang_log_fixtures import SYNTHETIC_HEADER, default_buckets, prefill_line, sglang_graph_verdict, startup_lines  # noqa: E402

BURST = 20


RESTART_MAX_BS = 4096


def forwards(n: int, seed: int, eager_from: int | None, restart_at: int | None = None) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        buckets = default_buckets(RESTART_MAX_BS if restart_at is not None and i >= restart_at else 8192)
        size = rng.choice([rng.randint(1, 512), rng.randint(513, 8192), rng.randint(8193, 9000)])
        k = rng.randint(1, min(size, 8))
        graph = sglang_graph_verdict(size, buckets) and (eager_from is None or i < eager_from)
        out.append(prefill_line(size, k, graph=graph))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--forwards", type=int, required=True)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rotate-at", type=int, default=None)
    ap.add_argument("--eager-from", type=int, default=None)
    ap.add_argument("--restart-at", type=int, default=None, help="a multiple of 20 (a burst)")
    ap.add_argument("--copytruncate-at", type=int, default=None)
    a = ap.parse_args()
    path = Path(a.path)
    handle = open(path, "w")
    handle.write(SYNTHETIC_HEADER + startup_lines())
    handle.flush()
    lines = forwards(a.forwards, a.seed, a.eager_from, a.restart_at)
    start, rotated, copied = time.monotonic(), False, False
    for i in range(0, len(lines), BURST):
        if a.rotate_at is not None and i >= a.rotate_at and not rotated:
            rotated = True
            handle.close()
            os.replace(path, path.with_name(path.name + ".1"))
            handle = open(path, "w")
        if a.restart_at is not None and i == a.restart_at:
            handle.write(startup_lines(max_bs=RESTART_MAX_BS, chunk=RESTART_MAX_BS, date="2026-11-02"))
        handle.write("".join(lines[i:i + BURST]))
        handle.flush()
        if a.copytruncate_at is not None and i + BURST >= a.copytruncate_at and not copied:  # right after a burst: lines in flight
            copied = True
            shutil.copyfile(path, path.with_name(path.name + ".1"))
            handle.seek(0)
            handle.truncate()
        wait = start + (i + BURST) / a.rate - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 1.0))
    handle.close()


if __name__ == "__main__":
    main()
