"""Rolling windows over a followed SGLang log's forwards (`cpbcg watch`): pure numpy, no I/O.

A `ForwardRing` keeps a server's most recent forwards (bounded: `capacity` rows, whatever the
log's length) with the time each was read. `window_stats` judges one window with the same code
`plan` and `replay-check` run on a whole log: `Evaluator` (modelled coverage, padding, eager
forwards by the selector's reason, above the largest bucket) and `ObservedTally` (what the server
printed, `cuda graph: True|False`, beside the model). Drift of the size distribution against the
trace the list was planned on is the total variation distance between the two distributions of
forwards over the list's buckets (`size_histogram`: the bucket each size pads to, plus one bin
above the largest): 0 = the same shape, 1 = no size in common.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from cpbcg.errors import ModelError
from cpbcg.planner.arrays import FloatArray
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation, Evaluator
from cpbcg.planner.model.bound import bound_demand
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.observed import ObservedComparison, ObservedTally
from cpbcg.planner.optimise.recommend import RecommendSettings
from cpbcg.planner.plan import plan
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.planner.traces.sglang_settings import LogSettings

_COLUMNS = ("num_tokens", "num_requests", "counts", "cached_tokens", "decode_requests", "line_no", "dp_rank")


def take(chunk: ObservedForwards, rows: slice | np.ndarray) -> ObservedForwards:
    """The rows `rows` of `chunk` (every aligned array sliced alike)."""
    return ObservedForwards(**{f.name: (value[rows] if isinstance(value := getattr(chunk, f.name), np.ndarray) else value)
                               for f in fields(chunk)})


def concat(chunks: Sequence[ObservedForwards]) -> ObservedForwards:
    """One chunk of `chunks`, in order (an empty chunk for none)."""
    if not chunks:
        empty = np.zeros(0, dtype=np.int64)
        return ObservedForwards(empty, empty, empty, empty, decode_requests=empty, line_no=empty, dp_rank=empty,
                                graph=np.zeros(0, dtype=np.int8))
    return ObservedForwards(**{f.name: np.concatenate([getattr(c, f.name) for c in chunks]) for f in fields(chunks[0])})


class ForwardRing:
    """A server's last `capacity` forwards and the time (s, any monotonic clock) each was read.

    Memory: `capacity` rows of 8 int64 columns and one float64 time (72 bytes a forward)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("a ring holds at least one forward")
        self.capacity = capacity
        self._cols = {name: np.zeros(capacity, dtype=np.int64) for name in _COLUMNS}
        self._graph = np.zeros(capacity, dtype=np.int8)
        self._time = np.zeros(capacity, dtype=np.float64)
        self.total = 0
        """Forwards ever added (the ring holds the last `min(total, capacity)`)."""

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def add(self, chunk: ObservedForwards, now: float) -> None:
        """Append `chunk`'s forwards, read at `now`."""
        n = chunk.num_forwards
        if n > self.capacity:
            chunk, n = take(chunk, slice(n - self.capacity, n)), self.capacity
        at = (self.total + np.arange(n)) % self.capacity
        for name, col in self._cols.items():
            col[at] = getattr(chunk, name)
        self._graph[at] = chunk.graph
        self._time[at] = now
        self.total += n

    def _order(self) -> np.ndarray:
        """Ring indices of the held forwards, oldest first."""
        held = len(self)
        return (self.total - held + np.arange(held)) % self.capacity

    def last(self, forwards: int) -> ObservedForwards:
        """The last `forwards` forwards held (fewer when the ring holds fewer), oldest first."""
        order = self._order()[-forwards:] if forwards > 0 else np.zeros(0, dtype=np.int64)
        return self._rows(order)

    def since(self, start: float) -> ObservedForwards:
        """The held forwards read at `start` or later, oldest first."""
        order = self._order()
        return self._rows(order[self._time[order] >= start])

    def _rows(self, order: np.ndarray) -> ObservedForwards:
        cols = {name: col[order] for name, col in self._cols.items()}
        return ObservedForwards(cols["num_tokens"], cols["num_requests"], cols["counts"], cols["cached_tokens"],
                                decode_requests=cols["decode_requests"], line_no=cols["line_no"], dp_rank=cols["dp_rank"],
                                graph=self._graph[order])


def size_histogram(num_tokens: np.ndarray, counts: np.ndarray, buckets: Sequence[int]) -> FloatArray:
    """[len(buckets) + 1] float64: forwards (weighted by `counts`) whose size pads to each bucket
    of the ascending list `buckets` (`b[i-1] < n <= b[i]`), the last bin above the largest."""
    edges = np.asarray(buckets, dtype=np.int64)
    bins = np.searchsorted(edges, np.asarray(num_tokens, dtype=np.int64), side="left")  # n <= b[i] -> i
    return np.bincount(bins, weights=np.asarray(counts, dtype=np.float64), minlength=len(edges) + 1).astype(np.float64)


def total_variation(p: FloatArray, q: FloatArray) -> float | None:
    """Total variation distance `0.5 * sum |p/|p| - q/|q||` in [0, 1]; None when either is empty."""
    sp, sq = float(p.sum()), float(q.sum())
    if sp <= 0 or sq <= 0:
        return None
    return float(0.5 * np.abs(p / sp - q / sq).sum())


@dataclass(frozen=True)
class WindowStats:
    """One window of a server's forwards judged (module doc)."""

    forwards: int
    """Forwards in the window."""
    first_line: int
    """Log line of its first forward (0 when empty)."""
    last_line: int
    evaluation: Evaluation
    """The deployment's list replayed on the window's forwards at their worst case (as `plan`)."""
    observed: ObservedComparison | None
    """What the server printed beside the model; None when no line printed a verdict."""
    drift: float | None
    """Total variation distance of the window's sizes from the baseline's; None without a baseline."""

    @property
    def above_largest(self) -> int:
        """Forwards above the largest bucket (the selector's `above_largest_bucket`)."""
        return int(self.evaluation.eager.get("above_largest_bucket", 0))

    def to_dict(self) -> dict[str, object]:
        ev, ob = self.evaluation, self.observed
        return {
            "forwards": self.forwards, "first_line": self.first_line, "last_line": self.last_line,
            "observed_coverage": None if ob is None else ob.coverage, "observed_token_coverage": None if ob is None else ob.token_coverage,
            "model_coverage": ev.coverage, "model_token_coverage": ev.token_coverage, "padding_overhead": ev.padding_overhead,
            "eager": {r: c for r, c in ev.eager.items() if c}, "above_largest_bucket": self.above_largest,
            "unexplained_eager": None if ob is None else ob.unexplained_eager,
            "eager_explanations": {} if ob is None else dict(ob.eager_explanations),
            "model_errors": None if ob is None else ob.model_errors, "drift": self.drift,
        }


def _evaluator(deployment: Deployment, table: BucketTable) -> Evaluator:
    return Evaluator(table, deployment.cp, deployment.max_padding_factor, deployment.max_seq_len_tokens)  # as `plan` (traffic.tally)


def window_stats(window: ObservedForwards, deployment: Deployment, table: BucketTable, settings: LogSettings | None = None,
                 baseline: FloatArray | None = None) -> WindowStats:
    """Judge `window` with `table` (module doc); `baseline` is `size_histogram` of the planned trace."""
    evaluator = _evaluator(deployment, table)
    tally = ObservedTally(table, deployment.cp, deployment.max_padding_factor, settings)
    if window.num_forwards:
        evaluator.add_demand(bound_demand(window, deployment.cp))
        tally.add(window)
    drift = None
    if baseline is not None and window.num_forwards:
        drift = total_variation(size_histogram(window.num_tokens, window.counts, table.capture_num_tokens.tolist()), baseline)
    lines = window.line_no
    return WindowStats(window.num_forwards, int(lines[0]) if len(lines) else 0, int(lines[-1]) if len(lines) else 0,
                       evaluator.result(), tally.result(), drift)


class RunTally:
    """A server's forwards since the start of the run, tallied exactly as `plan` tallies a log:
    one `Evaluator` per attention-DP rank (merged: `Evaluation.merge` adds counts exactly) and
    one `ObservedTally`. Memory does not grow with the log."""

    def __init__(self, deployment: Deployment, table: BucketTable, settings: LogSettings | None = None):
        self.deployment, self.table = deployment, table
        self._ranks: dict[int, Evaluator] = {}
        self._tally = ObservedTally(table, deployment.cp, deployment.max_padding_factor, settings)
        self.forwards = 0

    def add(self, chunk: ObservedForwards) -> None:
        ranks = np.unique(chunk.dp_rank)
        for dp in ranks.tolist():
            part = chunk if len(ranks) == 1 else take(chunk, chunk.dp_rank == dp)
            if dp not in self._ranks:
                self._ranks[dp] = _evaluator(self.deployment, self.table)
            self._ranks[dp].add_demand(bound_demand(part, self.deployment.cp))
        self._tally.add(chunk)
        self.forwards += chunk.num_forwards

    def rank_evaluations(self) -> dict[int, Evaluation]:
        """Per attention-DP rank, ascending."""
        return {dp: self._ranks[dp].result() for dp in sorted(self._ranks)}

    def evaluation(self) -> Evaluation:
        """Every rank's forwards (an empty evaluation before any forward)."""
        parts = list(self.rank_evaluations().values())
        return Evaluation.merge(parts) if parts else _evaluator(self.deployment, self.table).result()

    def observed(self, label: str = "cuda graph") -> ObservedComparison | None:
        return self._tally.result(label)


@dataclass(frozen=True)
class WindowGain:
    """What the list recommended for a window would have done on it (modelled)."""

    buckets: list[int]
    """The recommended list (tokens, ascending)."""
    coverage: float
    """Its modelled coverage of the window's forwards."""
    current_coverage: float
    """The deployment's list's modelled coverage of the same forwards."""
    modelled_ms_saved: float
    """Modelled prefill time the recommended list saves on the window (ms; the cost model's)."""

    @property
    def gain(self) -> float:
        """Coverage gained (fraction of forwards; negative when the window prefers the current list)."""
        return self.coverage - self.current_coverage

    def to_dict(self) -> dict[str, object]:
        return {"buckets": self.buckets, "coverage": self.coverage, "current_coverage": self.current_coverage,
                "coverage_gain": self.gain, "modelled_ms_saved": self.modelled_ms_saved}


def window_gain(window: ObservedForwards, deployment: Deployment, table: BucketTable,
                settings: RecommendSettings = RecommendSettings(validate_fraction=0.0)) -> WindowGain | str:
    """The list `plan` recommends for `window` (the optimiser, `settings`) and its gain over `table`,
    or why none can be made (a sentence)."""
    if not window.num_forwards:
        return "no forward in the window"
    try:
        result = plan([window], deployment, settings, table)
    except ModelError as exc:
        return str(exc)
    rec = result.recommendation
    if rec is None:
        return result.recommendation_error or "no recommendation"
    return WindowGain(list(rec.buckets), rec.evaluation.coverage, result.evaluation.coverage, rec.configured_modelled_ms - rec.modelled_ms)
