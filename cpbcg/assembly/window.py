"""Rolling windows over a followed SGLang log's forwards (`cpbcg watch`): pure numpy, no I/O.

A `ForwardRing` keeps a server's most recent forwards (bounded: `capacity` rows, whatever the
log's length) with the time each was read. `window_stats` judges one window with the same code
`plan` and `replay-check` run on a whole log: `Evaluator` (modelled coverage, padding, eager
forwards by the selector's reason, above the largest bucket) and `ObservedTally` (what the server
printed, `cuda graph: True|False`, beside the model). Drift of the size distribution against the
trace the list was planned on is the total variation distance between the two distributions of
forwards over the list's buckets (`size_histogram`: the bucket each size pads to, plus one bin
above the largest): 0 = the same shape, 1 = no size in common.

A log is a sequence of launches (a server restarted into the same log, `sglang_settings`): each
forward is judged under its own launch's `LaunchSetup` (its list, CP layout, chunk, settings),
the ring keeps each forward's launch, and a window spanning a restart is judged launch by launch
and summed (`total_evaluation`; the observed side is `ObservedTally`'s per-launch total).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence

import numpy as np

from cpbcg.errors import ModelError
from cpbcg.planner.arrays import FloatArray
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import MAX_EXAMPLES, Evaluation, Evaluator
from cpbcg.planner.bound import bound_demand
from cpbcg.planner.model.selector import BucketTable
from cpbcg.engines.sglang.observed import AssumedSetting, LaunchModel, ObservedComparison, ObservedTally
from cpbcg.planner.optimise.recommend import RecommendSettings
from cpbcg.assembly.plan import plan
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.engines.sglang.logs.settings import LogSettings

_COLUMNS = ("num_tokens", "num_requests", "counts", "cached_tokens", "decode_requests", "line_no", "dp_rank", "launch")


@dataclass(frozen=True)
class LaunchSetup:
    """What the forwards of one launch of a followed log are judged with: the deployment and list
    resolved from the launch's settings (`settings`, as read from the log) and the settings the
    log does not state, assumed (`AssumedSetting`: their value and the option that sets them)."""

    deployment: Deployment
    table: BucketTable
    settings: LogSettings | None = None
    assumed: tuple[AssumedSetting, ...] = ()

    def model(self) -> LaunchModel:
        """The `LaunchModel` the observed comparison uses for this launch."""
        return LaunchModel(self.table, self.deployment.cp, self.deployment.max_padding_factor, self.assumed)


Window = list[ObservedForwards]
"""A window's forwards: one chunk per launch it spans, oldest first (empty: no forward)."""


def take(chunk: ObservedForwards, rows: slice | np.ndarray) -> ObservedForwards:
    """The rows `rows` of `chunk` (every aligned array sliced alike; `launch` kept)."""
    values: dict[str, Any] = {f.name: (value[rows] if isinstance(value := getattr(chunk, f.name), np.ndarray) else value)
                              for f in fields(chunk)}
    return ObservedForwards(**values)


def concat(chunks: Sequence[ObservedForwards]) -> ObservedForwards:
    """One chunk of `chunks`, in order (an empty chunk of launch 1 for none). Raises `ValueError`
    for chunks of different launches (a chunk never spans a restart: keep them apart, a `Window`)."""
    if not chunks:
        empty = np.zeros(0, dtype=np.int64)
        return ObservedForwards(empty, empty, empty, empty, decode_requests=empty, line_no=empty, dp_rank=empty,
                                graph=np.zeros(0, dtype=np.int8))
    if any(c.launch != chunks[0].launch for c in chunks):
        raise ValueError(f"concat: chunks of launches {sorted({c.launch for c in chunks})}: a chunk holds one launch")
    values: dict[str, Any] = {f.name: (np.concatenate([getattr(c, f.name) for c in chunks]) if isinstance(getattr(chunks[0], f.name), np.ndarray)
                                       else getattr(chunks[0], f.name)) for f in fields(chunks[0])}
    return ObservedForwards(**values)


def forwards_of(window: Window) -> int:
    """Forwards in `window`."""
    return sum(c.num_forwards for c in window)


def rank_window(window: Window, dp_rank: int) -> Window:
    """The forwards of `window` that attention-DP rank `dp_rank` ran (chunks left without any are left out)."""
    out = [take(c, c.dp_rank == dp_rank) for c in window]
    return [c for c in out if c.num_forwards]


class ForwardRing:
    """A server's last `capacity` forwards and the time (s, any monotonic clock) each was read.

    Memory: `capacity` rows of 8 int64 columns (the launch one of them), the int8 verdict and a
    float64 time (73 bytes a forward)."""

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
            col[at] = getattr(chunk, name)  # `launch` (a scalar) fills its column
        self._graph[at] = chunk.graph
        self._time[at] = now
        self.total += n

    def _order(self) -> np.ndarray:
        """Ring indices of the held forwards, oldest first."""
        held = len(self)
        return (self.total - held + np.arange(held)) % self.capacity

    def last(self, forwards: int) -> Window:
        """The last `forwards` forwards held (fewer when the ring holds fewer), oldest first."""
        order = self._order()[-forwards:] if forwards > 0 else np.zeros(0, dtype=np.int64)
        return self._rows(order)

    def since(self, start: float) -> Window:
        """The held forwards read at `start` or later, oldest first."""
        order = self._order()
        return self._rows(order[self._time[order] >= start])

    def _rows(self, order: np.ndarray) -> Window:
        """The forwards at ring indices `order`, one chunk per run of one launch."""
        launch = self._cols["launch"][order]
        cuts = [0, *(np.flatnonzero(launch[1:] != launch[:-1]) + 1).tolist(), len(order)]
        out = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            if b > a:
                part = order[a:b]
                cols = {name: col[part] for name, col in self._cols.items() if name != "launch"}
                out.append(ObservedForwards(cols["num_tokens"], cols["num_requests"], cols["counts"], cols["cached_tokens"],
                                            decode_requests=cols["decode_requests"], line_no=cols["line_no"], dp_rank=cols["dp_rank"],
                                            graph=self._graph[part], launch=int(launch[a])))
        return out


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
    launches: tuple[int, ...] = ()
    """Launches the window's forwards belong to, in order (two or more: it spans a restart)."""

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
            "model_errors": None if ob is None else ob.model_errors, "drift": self.drift, "launches": list(self.launches),
        }


def _evaluator(deployment: Deployment, table: BucketTable) -> Evaluator:
    return Evaluator(table, deployment.cp, deployment.max_padding_factor, deployment.max_seq_len_tokens)  # as `plan` (traffic.tally)


def total_evaluation(parts: Sequence[Evaluation]) -> Evaluation:
    """The sum of several launches' evaluations, in order: `Evaluation.merge` when they replayed
    one list; otherwise every count added, `buckets` the union of the lists with each bucket's
    hits added and its `capacity_rows` from the latest launch that captured it. Raises
    `ValueError` for no part."""
    if not parts:
        raise ValueError("total_evaluation needs one or more evaluations")
    if all(p.buckets == parts[0].buckets for p in parts):
        return Evaluation.merge(list(parts))
    capacity = {b: c for p in parts for b, c in zip(p.buckets, p.capacity_rows)}  # the latest launch's wins
    buckets = sorted(capacity)
    reasons = list(dict.fromkeys(r for p in parts for r in p.eager))
    return Evaluation(
        buckets=buckets, capacity_rows=[capacity[b] for b in buckets],
        **{name: sum(getattr(p, name) for p in parts) for name in
           ("batches", "tokens", "graph_batches", "graph_tokens", "padded_tokens", "rescued", "natural_overflow")},
        eager={r: sum(p.eager.get(r, 0) for p in parts) for r in reasons},
        eager_tokens={r: sum(p.eager_tokens.get(r, 0) for p in parts) for r in reasons},
        bucket_hits={b: sum(p.bucket_hits.get(b, 0) for p in parts) for b in buckets},
        eager_examples={r: [e for p in parts for e in p.eager_examples.get(r, [])][:MAX_EXAMPLES] for r in reasons},
        overflow_examples=[e for p in parts for e in p.overflow_examples][:MAX_EXAMPLES],
        bucket_note=next((p.bucket_note for p in reversed(parts) if p.bucket_note), None),
    )


def _observed_tally(setup_of: Callable[[int], LaunchSetup], first: LaunchSetup) -> ObservedTally:
    """An `ObservedTally` that models every launch under its own setup (`setup_of(launch)`)."""
    model = first.model()
    return ObservedTally(first.table, first.deployment.cp, first.deployment.max_padding_factor, first.settings,
                         launch_settings=lambda launch: setup_of(launch).settings or LogSettings(launch=launch),
                         resolve=lambda settings: setup_of(settings.launch).model(), assumed=model.assumed)


def window_stats(window: Window, setup_of: Callable[[int], LaunchSetup], baseline: FloatArray | None = None,
                 launch: int = 1) -> WindowStats:
    """Judge `window` (module doc), each launch's forwards under `setup_of(launch)`; `baseline` is
    `size_histogram` of the planned trace over the list of the window's latest launch, the list
    the window's sizes are binned over for drift. An empty window is judged under `launch`'s setup."""
    launches = [c.launch for c in window] or [launch]
    evaluations = []
    for each in dict.fromkeys(launches):
        setup = setup_of(each)
        evaluator = _evaluator(setup.deployment, setup.table)
        for c in window:
            if c.launch == each:
                evaluator.add_demand(bound_demand(c, setup.deployment.cp))
        evaluations.append(evaluator.result())
    tally = _observed_tally(setup_of, setup_of(launches[0]))
    for c in window:
        tally.add(c)
    drift = None
    if baseline is not None and window:
        buckets = setup_of(launches[-1]).table.capture_num_tokens.tolist()
        drift = total_variation(sum((size_histogram(c.num_tokens, c.counts, buckets) for c in window), np.zeros(len(buckets) + 1)), baseline)
    return WindowStats(forwards_of(window), int(window[0].line_no[0]) if window else 0, int(window[-1].line_no[-1]) if window else 0,
                       total_evaluation(evaluations), tally.result(), drift, tuple(dict.fromkeys(c.launch for c in window)))


class RunTally:
    """A server's forwards since the start of the run, tallied exactly as `plan` tallies a log's
    launches: one `Evaluator` per launch and attention-DP rank (merged: `Evaluation.merge` adds
    counts exactly; launches of different lists are summed, `total_evaluation`) and one
    `ObservedTally` that models each launch under its own setup (`setup_of(launch)`). Memory does
    not grow with the log (it grows with the launches and DP ranks seen)."""

    def __init__(self, setup_of: Callable[[int], LaunchSetup], launch: int = 1):
        """`launch`: the launch an empty tally is reported under (the first one resolved)."""
        self.setup_of, self.launch = setup_of, launch
        self._ranks: dict[int, dict[int, Evaluator]] = {}
        self._tally: ObservedTally | None = None
        self.forwards = 0
        self.launch_forwards: dict[int, int] = {}
        """Forwards tallied per launch."""

    def add(self, chunk: ObservedForwards) -> None:
        setup = self.setup_of(chunk.launch)
        per = self._ranks.setdefault(chunk.launch, {})
        ranks = np.unique(chunk.dp_rank)
        for dp in ranks.tolist():
            part = chunk if len(ranks) == 1 else take(chunk, chunk.dp_rank == dp)
            if dp not in per:
                per[dp] = _evaluator(setup.deployment, setup.table)
            per[dp].add_demand(bound_demand(part, setup.deployment.cp))
        if self._tally is None:
            self._tally = _observed_tally(self.setup_of, setup)
        self._tally.add(chunk)
        self.forwards += chunk.num_forwards
        self.launch_forwards[chunk.launch] = self.launch_forwards.get(chunk.launch, 0) + chunk.num_forwards

    def launch_evaluations(self) -> dict[int, Evaluation]:
        """Per launch tallied, ascending: its forwards under its own list."""
        return {launch: Evaluation.merge([per[dp].result() for dp in sorted(per)]) for launch, per in sorted(self._ranks.items())}

    def rank_evaluations(self) -> dict[int, Evaluation]:
        """Per attention-DP rank, ascending (each launch under its own list, summed)."""
        dps = sorted({dp for per in self._ranks.values() for dp in per})
        return {dp: total_evaluation([per[dp].result() for _, per in sorted(self._ranks.items()) if dp in per]) for dp in dps}

    def evaluation(self) -> Evaluation:
        """Every launch's and rank's forwards (an empty evaluation of `launch`'s list before any forward)."""
        parts = list(self.launch_evaluations().values())
        if parts:
            return total_evaluation(parts)
        setup = self.setup_of(self.launch)
        return _evaluator(setup.deployment, setup.table).result()

    def observed(self, label: str = "cuda graph") -> ObservedComparison | None:
        """Observed beside modelled, the total with each launch's in `.launches`; None before any verdict."""
        return None if self._tally is None else self._tally.result(label)


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


def window_gain(window: Window, deployment: Deployment, table: BucketTable,
                settings: RecommendSettings = RecommendSettings(validate_fraction=0.0)) -> WindowGain | str:
    """The list `plan` recommends for `window` (the optimiser, `settings`) and its gain over `table`,
    or why none can be made (a sentence). Every forward of the window is fitted under `deployment`
    (the caller's: the latest launch's, the server that runs now)."""
    if not forwards_of(window):
        return "no forward in the window"
    try:
        result = plan(list(window), deployment, settings, table)
    except ModelError as exc:
        return str(exc)
    rec = result.recommendation
    if rec is None:
        return result.recommendation_error or "no recommendation"
    return WindowGain(list(rec.buckets), rec.evaluation.coverage, result.evaluation.coverage, rec.configured_modelled_ms - rec.modelled_ms)
