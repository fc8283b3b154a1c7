"""One progress bar while a trace is read: requests simulated for a request trace, else forwards.

`open_source(..., progress=bar.requests)` reports requests read so far while the scheduler
simulation runs; `on_chunk=bar.forwards` reports each chunk of forwards. Whichever comes first
opens the bar (a request trace reads requests before its first forward), so a request trace
shows "simulating requests" and a batch trace or server log "replaying forwards" (total unknown
in both). Hidden when stderr is not a terminal (`progress_bar`).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable

from cpbcg.outputs.console import progress_bar

SIMULATING = "simulating requests"
REPLAYING = "replaying forwards"


def _ignore(amount: float = 1) -> None:
    """No bar (yet)."""


class TraceProgress:
    """Context manager; pass `requests` as the source's `progress` and `forwards` as `on_chunk`."""

    def __init__(self, forwards_description: str = REPLAYING) -> None:
        self._stack = ExitStack()
        self._forwards_description = forwards_description
        self._description: str | None = None
        self._advance: Callable[[float], Any] = _ignore
        self._requests_seen = 0

    def __enter__(self) -> "TraceProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def requests(self, requests_read: int) -> None:
        """`progress(requests read so far)` of the simulation (cumulative)."""
        if self._open(SIMULATING):
            self._advance(requests_read - self._requests_seen)
        self._requests_seen = requests_read

    def forwards(self, chunk: object) -> None:
        """`on_chunk`: a `BatchSet` or `ForwardSizes` chunk was tallied."""
        if self._open(self._forwards_description):
            count = getattr(chunk, "num_batches", 0) or getattr(chunk, "num_forwards", 0)
            self._advance(float(count))

    def _open(self, description: str) -> bool:
        """Open the bar as `description` unless one is open; True when it shows `description`."""
        if self._description is None:
            self._description = description
            self._advance = self._stack.enter_context(progress_bar(description))
        return self._description == description
