"""How `cpbcg watch` runs: its windows and stop conditions (`WatchOptions`), the one owner of
their defaults. Light on purpose (no numpy, no planner): the command's options
(`cpbcg.commands.watch_options`) take their defaults from here, and `cpbcg watch --help` reads it."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


def default_instance() -> str:
    """The replica's name when `--instance` is not given: `$POD_NAME` (Kubernetes' downward API), else
    `$HOSTNAME` (a pod's name in Kubernetes), else the host's name: unique per replica."""
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname() or "unknown"


@dataclass(frozen=True)
class WatchOptions:
    """How `cpbcg watch` runs (every field has the CLI's default)."""

    window_forwards: int = 10_000
    """Forwards in the forwards window (per server)."""
    window_seconds: float = 60.0
    """Seconds in the time window."""
    ring_forwards: int = 131_072
    """Forwards kept per server (bounds memory: 73 bytes each); the time window holds at most these."""
    gate_step: int | None = None
    """Forwards between two gated windows; None = a quarter window."""
    interval_s: float = 1.0
    """Seconds between two snapshots (live view, JSON lines, exporter gauges, scrapes)."""
    recommend_every_s: float = 60.0
    """Seconds between two list fits on the forwards window; 0 = only at the end."""
    duration_s: float | None = None
    """Stop after this many seconds (None: no limit)."""
    max_forwards: int | None = None
    """Stop after this many forwards, all servers together (None: no limit)."""
    max_scrape_errors: int | None = None
    """Gate: at most this many failed scrapes of each --metrics-url over the run (None: not gated)."""
    poll_s: float = 0.05
    """Idle wait between two reads (s)."""

    @property
    def step(self) -> int:
        return self.gate_step or max(1, self.window_forwards // 4)
