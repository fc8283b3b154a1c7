"""Every forward's demand in trace order, kept in bounded memory while a trace streams.

The recommendation fits a bucket list on the first part of a trace and replays the rest
(out-of-sample validation), and fits the final list on the whole trace, all from one pass over
the trace. `DemandLog` keeps recent forwards as they came and older ones aggregated in blocks of
consecutive forwards, merging neighbouring blocks so that at most `MAX_BLOCKS` remain: memory
is bounded by the distinct forward shapes per block, not by the trace length, and a split in
trace order is exact inside the raw tail (the newest `RAW_FORWARDS` or so forwards: a trace
of up to 131,072 lines splits exactly) and falls on a block boundary elsewhere (the split
actually used is reported). Blocks hold `BLOCK_FORWARDS` lines and start at multiples of it
whatever the chunks the reader yields, so the split depends on the trace alone: within
`BLOCK_FORWARDS / 2` lines of the target up to about `MAX_BLOCKS * BLOCK_FORWARDS` lines (1M),
within about one block, 1/64 of the trace, beyond (neighbouring blocks merge).
"""

from __future__ import annotations

from collections.abc import Callable

from collections import deque
from dataclasses import dataclass

import numpy as np

from cpbcg.planner.model.demand import Demand

RAW_FORWARDS = 1 << 17
"""Newest forwards kept one by one (131,072: about 5 MB); older ones are aggregated in blocks."""
BLOCK_FORWARDS = 1 << 14
"""Forwards per aggregated block as it is made (16,384); merged blocks hold multiples of it."""
MAX_BLOCKS = 64
"""Most aggregated blocks (neighbours merge beyond it)."""


@dataclass(frozen=True)
class _Block:
    start: int
    """First forward (trace line index) of the block."""
    stop: int
    """One past its last forward."""
    demand: Demand
    """Its forwards, aggregated."""


@dataclass(frozen=True)
class DemandSplit:
    """A trace's forwards cut in trace order into the part a list is fitted on and the held-back
    rest, both aggregated (small: one row per distinct forward shape); several traces' splits
    merge exactly (`merge`)."""

    head: Demand
    """Forwards before the cut, aggregated."""
    tail: Demand
    """Forwards after the cut (held back), aggregated."""
    head_lines: int
    """Forwards (trace lines) in `head`."""
    num_lines: int
    """Forwards (trace lines) in all."""
    max_requests: int
    """Most requests any forward held (0 when empty)."""

    @property
    def fit_fraction(self) -> float:
        """Fraction of the lines in `head` (0 when empty)."""
        return self.head_lines / self.num_lines if self.num_lines else 0.0

    def whole(self) -> Demand:
        """All forwards, aggregated."""
        return Demand.concat([self.head, self.tail]).aggregate()

    @classmethod
    def merge(cls, parts: "list[DemandSplit]") -> "DemandSplit":
        """Heads with heads and tails with tails: each trace keeps its own cut."""
        return cls(Demand.concat([p.head for p in parts]).aggregate(), Demand.concat([p.tail for p in parts]).aggregate(),
                   sum(p.head_lines for p in parts), sum(p.num_lines for p in parts), max((p.max_requests for p in parts), default=0))


class DemandLog:
    """Append `Demand` pieces in trace order; read back aggregated prefixes, suffixes and the whole."""

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._raw: deque[Demand] = deque()
        self._raw_start = 0
        self._raw_forwards = 0

    @property
    def num_lines(self) -> int:
        """Forwards appended (trace lines; `count` weights not expanded)."""
        return self._raw_start + self._raw_forwards

    def add(self, demand: Demand) -> None:
        """Append the next forwards of the trace."""
        self._raw.append(demand)
        self._raw_forwards += len(demand.num_tokens)
        while self._raw_forwards > RAW_FORWARDS:
            self._flush()

    def _flush(self) -> None:
        """Aggregate the oldest `BLOCK_FORWARDS` raw forwards into a block."""
        taken, need = [], BLOCK_FORWARDS
        while need:
            first = self._raw.popleft()
            if len(first.num_tokens) > need:
                self._raw.appendleft(first.subset(slice(need, None)))
                first = first.subset(slice(0, need))
            taken.append(first)
            need -= len(first.num_tokens)
        stop = self._raw_start + BLOCK_FORWARDS
        self._blocks.append(_Block(self._raw_start, stop, Demand.concat(taken).aggregate()))
        self._raw_start, self._raw_forwards = stop, self._raw_forwards - BLOCK_FORWARDS
        while len(self._blocks) > MAX_BLOCKS:
            sizes = [b.stop - a.start for a, b in zip(self._blocks, self._blocks[1:])]
            i = int(np.argmin(sizes))
            a, b = self._blocks[i], self._blocks[i + 1]
            self._blocks[i : i + 2] = [_Block(a.start, b.stop, Demand.concat([a.demand, b.demand]).aggregate())]

    def rebound(self, bind: "Callable[[Demand], Demand]") -> "DemandLog":
        """The same forwards with `bind` applied to each piece (blocks and raw forwards keep their cut points)."""
        out = DemandLog()
        out._blocks = [_Block(b.start, b.stop, bind(b.demand).aggregate()) for b in self._blocks]
        out._raw = deque(bind(d) for d in self._raw)
        out._raw_start, out._raw_forwards = self._raw_start, self._raw_forwards
        return out

    def split(self, fraction: float) -> tuple[Demand, Demand, float]:
        """`(head, tail, used)`: the forwards before and after the split point nearest to
        `fraction` of the trace lines that this log can cut at, both aggregated, and the
        fraction of lines actually in `head`."""
        total = self.num_lines
        target = int(round(fraction * total))
        head: list[Demand] = []
        tail: list[Demand] = []
        cut = None
        for block in self._blocks:
            if cut is None and block.stop > target:
                cut = block.start if target - block.start < block.stop - target else block.stop
            (head if cut is None or block.stop <= cut else tail).append(block.demand)
        raw = Demand.concat(list(self._raw))
        if cut is None:
            cut = max(target, self._raw_start)
            head.append(raw.subset(np.arange(len(raw.num_tokens)) < cut - self._raw_start))
            tail.append(raw.subset(np.arange(len(raw.num_tokens)) >= cut - self._raw_start))
        else:
            tail.append(raw)
        used = cut / total if total else 0.0
        return Demand.concat(head).aggregate(), Demand.concat(tail).aggregate(), used

    def whole(self) -> Demand:
        """All forwards, aggregated."""
        return Demand.concat([b.demand for b in self._blocks] + list(self._raw)).aggregate()

    def to_split(self, held_back: float) -> DemandSplit:
        """The `DemandSplit` holding back the last `held_back` fraction of the lines (0: none)."""
        if held_back > 0:
            head, tail, used = self.split(1.0 - held_back)
            head_lines = int(round(used * self.num_lines))
        else:
            head, tail, head_lines = self.whole(), Demand.concat([]), self.num_lines
        return DemandSplit(head, tail, head_lines, self.num_lines, self.max_requests())

    def max_requests(self) -> int:
        """Most requests any forward held (0 when empty)."""
        parts = [b.demand.num_requests for b in self._blocks] + [d.num_requests for d in self._raw]
        return max((int(p.max()) for p in parts if len(p)), default=0)
