"""How `cpbcg watch` runs: its windows and stop conditions (`WatchOptions`), the one owner of
their defaults and flags, declared once. Light on purpose (no numpy, no planner): `cpbcg watch
--help` reads it (the command spreads `WatchOptions` beside `cpbcg.commands.watch_options`'
own options)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Annotated, Optional

from cpbcg.settings import Flag


def default_instance() -> str:
    """The replica's name when `--instance` is not given: `$POD_NAME` (Kubernetes' downward API), else
    `$HOSTNAME` (a pod's name in Kubernetes), else the host's name: unique per replica."""
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname() or "unknown"


@dataclass(frozen=True)
class WatchOptions:
    """How `cpbcg watch` runs: each field declared once, with its `Flag` (the command line is derived
    from it: `cpbcg.cli.options.with_options`) and its default (the CLI's and the library's)."""

    window_forwards: Annotated[int, Flag(("--window-forwards",), "Forwards in the rolling forwards window (per server); the window gates check every full window.", ge=1, le=1_000_000, metavar="N")] = 10_000
    window_seconds: Annotated[float, Flag(("--window-seconds",), "Seconds in the rolling time window (at most --ring-forwards forwards).", ge=0.1, le=86_400.0, metavar="SECONDS")] = 60.0
    ring_forwards: Annotated[int, Flag(("--ring-forwards",), "Forwards kept per server for the windows (73 bytes each): bounds memory whatever the log's length.", ge=1, le=10_000_000, metavar="N")] = 131_072
    gate_step: Annotated[Optional[int], Flag(("--gate-step",), "Forwards between two gated windows (default: a quarter of --window-forwards).", ge=1, le=1_000_000, metavar="N", show_default=False)] = None
    interval_s: Annotated[float, Flag(("--interval",), "Seconds between two updates (live view, JSON lines, exporter) and two --metrics-url scrapes (each on its own thread).", ge=0.05, le=3600.0, metavar="SECONDS")] = 1.0
    recommend_every_s: Annotated[float, Flag(("--recommend-every",), "Seconds between two fits of the recommended list to the forwards window (0: only at the end).", ge=0.0, le=86_400.0, metavar="SECONDS")] = 60.0
    duration_s: Annotated[Optional[float], Flag(("--duration",), "Stop after SECONDS (a canary's watch). Without it and --max-forwards: Ctrl-C, SIGTERM, or the end of standard input.", ge=0.0, le=1e7, metavar="SECONDS", show_default=False)] = None
    max_forwards: Annotated[Optional[int], Flag(("--max-forwards",), "Stop after N prefill forwards (all logs together).", ge=1, le=2**62, metavar="N", show_default=False)] = None
    max_scrape_errors: Annotated[Optional[int], Flag(("--max-scrape-errors",), "Gate: at most N failed scrapes of each --metrics-url over the run (a canary must not pass on an endpoint it could not read).", ge=0, le=2**62, metavar="N", show_default=False)] = None
    poll_s: Annotated[float, Flag(("--poll-interval",), "Seconds the reader waits when every log is read to its end, before it reads again.", ge=0.001, le=10.0, metavar="SECONDS")] = 0.05

    @property
    def step(self) -> int:
        """Forwards between two gated windows (`gate_step`, else a quarter window)."""
        return self.gate_step or max(1, self.window_forwards // 4)
