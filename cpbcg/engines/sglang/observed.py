"""Observed vs modelled: what an SGLang server printed for each forward against what the model says.

Newer SGLang prints on every `Prefill batch` line whether the forward ran in a graph (the runner's
`can_run_graph` after the forward). `ObservedTally` reads the log's `ObservedForwards` as they
stream past, replays each through the selector with the deployment's list (the logged one when
the log configured the plan), and counts, per attention-DP rank, the forwards and tokens the
server ran in graphs beside the model's. Where they disagree it keeps the lines:

* the server replayed, the model calls eager: a model error (listed first), with the model's
  reason and what could explain it (worst-case rows: the log has no lengths; no 2x padding cap
  before SGLang PR #31487, 2026-07-16);
* the model replays, the server ran eagerly: eager reasons the log cannot show, named when the
  log's settings make them possible (graphs off, LoRA, mixed batches), else
  `return_logprob, input embeddings or context limits (not in the log)`; an NPU server
  (`npu graph`), pipeline parallelism (0.5.23 turns breakable prefill graphs off with
  `pp_size > 1`) and a launch where every forward ran eagerly without any capture line
  ("prefill graphs likely off") get their own reason.

A log is a sequence of launches: each launch is compared under its own settings (`LaunchModel`,
built by the caller from the launch's `LogSettings`), and the comparison is reported per launch
(`ObservedComparison.launches`) with their total. Settings a launch does not state are
*assumed* (`AssumedSetting`): a disagreement the assumption could explain is attributed to it
(the assumed `cp_size` for a forward the server replayed and the model calls not CP-active;
prefill graphs assumed on for one the server ran eagerly). A launch whose prefill graphs were
off is modelled eager throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from cpbcg.planner.document import document
from cpbcg.planner.bound import bound_demand
from cpbcg.planner.model.layout import CPLayout, CPStrategy
from cpbcg.planner.arrays import Int64Array
from cpbcg.planner.model.selector import EAGER_REASONS, BucketTable, EagerReason
from cpbcg.planner.traces.records import ForwardSizes, ObservedForwards
from cpbcg.engines.sglang.logs.log import LogSummary
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.engines.sglang.server import ResolvedServer
from cpbcg.planner.deployment import Deployment
from cpbcg.engines.sglang.args import BY_KEY as SERVER_ARG

PADDING_CAP_DATE = "2026-07-16"
"""SGLang PR #31487 (merged 2026-07-16): prefill graphs fall back to eager above 2x padding.
Servers before it padded to any bucket up to the largest."""
REFERENCE_VERSION = (0, 5, 23)
"""The release the model follows."""
KEPT_EXAMPLES = 20
"""Disagreeing lines kept per side."""
NOT_IN_LOG = "return_logprob, input embeddings or context limits (not in the log)"
LIKELY_OFF = "prefill graphs likely off (every forward of the launch ran eagerly, no capture line)"
NPU = "an NPU server (npu graph): its graph runner is not the CUDA runner 0.5.23's model follows"


@dataclass(frozen=True)
class AssumedSetting:
    """A setting the log does not state, planned at a value it assumes."""

    key: str
    """cpbcg config key (`cp_size`)."""
    value: object
    """The value assumed (the config's or the default)."""
    option: str
    """The option that sets it (`--cp-size`)."""

    def text(self) -> str:
        shown = ",".join(map(str, self.value)) if isinstance(self.value, list) else self.value
        return f"{self.key} {shown} (assumed: not in the log; {self.option} sets it)"


ASSUMED_OPTIONS = {"cp_size": "--cp-size", "buckets": "--buckets",
                   **{key: SERVER_ARG[key].flag for key in ("scheduler.chunked_prefill_size", "scheduler.page_size")}}
"""The settings whose source a log's comparison names when the log does not state them, and the option
that sets each (the scheduler's are their SGLang flags: `cpbcg.settings` declares them `SGLANG_FLAG`)."""


def assumed_settings(log: LogSettings | None, deployment: Deployment, overrides: Mapping[str, object] | None = None,
                     fixed: Iterable[str] = ()) -> tuple[AssumedSetting, ...]:
    """The settings of `ASSUMED_OPTIONS` that the log (one launch) neither states nor shows, the
    command line does not give and a manifest does not fix (`fixed`), with the value `deployment`
    plans them at: what the comparison and the report call assumed. Empty without a log."""
    if log is None:
        return ()
    known = set(log.overrides()) | {k for k, v in (overrides or {}).items() if v is not None} | set(fixed) | set(log.resolved_by_server())
    values: dict[str, object] = {"cp_size": deployment.cp.cp_size, "buckets": deployment.bucket_spec or list(deployment.buckets),
                                 "scheduler.chunked_prefill_size": deployment.scheduler.chunked_prefill_size,
                                 "scheduler.page_size": deployment.scheduler.page_size}
    return tuple(AssumedSetting(k, values[k], option) for k, option in ASSUMED_OPTIONS.items() if k not in known)


@dataclass(frozen=True)
class LaunchModel:
    """What one launch of a log is modelled with: its list, CP layout and padding cap, and the
    settings that were assumed rather than read from it."""

    table: BucketTable
    cp: CPLayout
    max_padding_factor: float
    assumed: tuple[AssumedSetting, ...] = ()
    server: ResolvedServer | None = None
    """The server 0.5.23 starts for the launch (its settings resolved as a launch command's,
    each value with its source, `log line N`); None when not resolved."""
    deployment: Deployment | None = None
    """The whole deployment the launch resolves to (scheduler, cost model, capture spec): what
    the main table and a recommendation for that launch plan with; None when not resolved."""


@dataclass(frozen=True)
class RankObserved:
    """One attention-DP rank's forwards with a printed verdict: observed beside modelled."""

    dp_rank: int
    forwards: int
    """Forwards whose line printed a verdict."""
    tokens: int
    """Their tokens (mixed forwards with their decode rows)."""
    graph_forwards: int
    """Forwards the server ran in a graph (`cuda graph: True`)."""
    graph_tokens: int
    model_graph_forwards: int
    """Forwards the model replays in a graph."""
    model_graph_tokens: int

    @property
    def coverage(self) -> float:
        return self.graph_forwards / self.forwards if self.forwards else 0.0

    @property
    def model_coverage(self) -> float:
        return self.model_graph_forwards / self.forwards if self.forwards else 0.0


@dataclass(frozen=True)
class Disagreement:
    """One forward on which the server and the model disagree."""

    line_no: int
    """Line of the log."""
    dp_rank: int
    num_tokens: int
    num_requests: int
    server_graph: bool
    """What the server printed."""
    model: str
    """The model's verdict: `graph 2304` or the eager reason."""
    explanations: tuple[str, ...]
    """What could explain the difference (module doc)."""


@dataclass(frozen=True)
class ObservedComparison:
    """Observed vs modelled over a log's forwards (module doc)."""

    label: str
    """The server's verdict name (`cuda graph`)."""
    ranks: tuple[RankObserved, ...]
    """Per attention-DP rank, ascending."""
    without_verdict: int
    """Forwards whose line printed no verdict (older SGLang): not compared."""
    model_errors: int
    """Forwards the server replayed and the model calls eager."""
    model_error_lines: tuple[Disagreement, ...]
    """The first `KEPT_EXAMPLES` of them."""
    unexplained_eager: int
    """Forwards the model replays and the server ran eagerly."""
    eager_lines: tuple[Disagreement, ...]
    """The first `KEPT_EXAMPLES` of them."""
    eager_explanations: dict[str, int] = field(default_factory=dict)
    """How many of `unexplained_eager` each explanation could cover."""
    notes: tuple[str, ...] = ()
    """Version and padding-cap notes."""
    launches: tuple["LaunchObserved", ...] = ()
    """Per launch of the log (this comparison is their total); empty within a launch's own."""
    assumption_errors: int = 0
    """Of `model_errors`, those a setting the log does not state (assumed) could explain."""

    @property
    def forwards(self) -> int:
        return sum(r.forwards for r in self.ranks)

    @property
    def graph_forwards(self) -> int:
        return sum(r.graph_forwards for r in self.ranks)

    @property
    def coverage(self) -> float:
        """Observed fraction of forwards (with a verdict) the server ran in graphs."""
        return self.graph_forwards / self.forwards if self.forwards else 0.0

    @property
    def token_coverage(self) -> float:
        tokens = sum(r.tokens for r in self.ranks)
        return sum(r.graph_tokens for r in self.ranks) / tokens if tokens else 0.0

    @property
    def model_coverage(self) -> float:
        return sum(r.model_graph_forwards for r in self.ranks) / self.forwards if self.forwards else 0.0

    @property
    def graphs_appear_off(self) -> bool:
        """The server ran every forward with a verdict eagerly while the model of its list replays
        some: its prefill graphs appear off (or every forward fell off its list). `plan`'s verdict
        leads with it and `watch` refuses the server on it (the forwards' verdicts win both ways)."""
        return self.forwards > 0 and self.graph_forwards == 0 and self.model_coverage > 0

    @property
    def agreeing(self) -> int:
        """Forwards on which server and model agree."""
        return self.forwards - self.model_errors - self.unexplained_eager

    def to_dict(self) -> dict[str, object]:
        """The JSON section `observed` of `plan` and `replay-check`."""
        return {
            "label": self.label, "forwards": self.forwards, "graph_forwards": self.graph_forwards, "coverage": self.coverage,
            "token_coverage": self.token_coverage, "model_coverage": self.model_coverage, "agreeing": self.agreeing,
            "without_verdict": self.without_verdict, "ranks": [document(r) for r in self.ranks],
            "model_errors": self.model_errors, "assumption_errors": self.assumption_errors, "model_error_lines": [document(d) for d in self.model_error_lines],
            "unexplained_eager": self.unexplained_eager, "eager_lines": [document(d) for d in self.eager_lines],
            "eager_explanations": dict(self.eager_explanations), "notes": list(self.notes),
            **({"launches": [launch.to_dict() for launch in self.launches]} if self.launches else {}),
        }


@dataclass(frozen=True)
class LaunchObserved:
    """One launch of a log: its settings (as read), what was assumed, and its comparison."""

    launch: int
    """1-based launch."""
    first_line: int
    """Line the launch begins on."""
    settings: LogSettings
    assumed: tuple[AssumedSetting, ...]
    comparison: ObservedComparison
    server: ResolvedServer | None = None
    """The launch's server as 0.5.23 resolves it (`LaunchModel.server`)."""

    def to_dict(self) -> dict[str, object]:
        return {"launch": self.launch, "first_line": self.first_line, **self.settings.to_dict(),
                "assumed": [document(a) for a in self.assumed],
                **({"server": self.server.summary()} if self.server is not None else {}), **self.comparison.to_dict()}


@dataclass(frozen=True)
class LogObserved:
    """One SGLang log of a plan: its (first launch's) settings, its comparison (total, per launch
    in `.launches`) and what its reader kept, folded and skipped."""

    path: str
    settings: LogSettings
    observed: ObservedComparison | None
    """None when no forward printed a verdict."""
    summary: LogSummary | None = None

    def to_dict(self) -> dict[str, object]:
        """The JSON of one log: its path, version, settings (each with its source line) and comparison."""
        doc: dict[str, object] = {"path": self.path, **self.settings.to_dict()}
        if self.summary is not None:
            doc["forwards"] = self.summary.forwards
            doc["launch_count"] = self.summary.launches
        if self.observed is not None:
            doc["observed"] = self.observed.to_dict()
        return doc


class _LaunchTally:
    """One launch's forwards against its `LaunchModel` (module doc)."""

    def __init__(self, model: LaunchModel, settings: LogSettings):
        self.model, self.settings = model, settings
        self.no_cap = bool(settings.date) and settings.date < PADDING_CAP_DATE
        self.factor = float("inf") if self.no_cap else model.max_padding_factor
        self.assumed = {a.key: a for a in model.assumed}
        self._ranks: dict[int, np.ndarray] = {}  # dp -> [forwards, tokens, graph, graph tokens, model graph, model tokens]
        self._unknown = 0
        self._errors: list[Disagreement] = []
        self._eager: list[Disagreement] = []
        self._n_errors = self._n_eager = self._n_assumed = 0
        self._explained: dict[str, int] = {}

    def add(self, chunk: ObservedForwards) -> None:
        sel = bound_demand(chunk, self.model.cp).select(self.model.table, self.factor)
        known = chunk.graph >= 0
        self._unknown += int((~known).sum())
        server = chunk.graph == 1
        model = sel.graph if self.settings.prefill_graphs is not False else np.zeros(len(chunk.graph), dtype=bool)
        n = chunk.num_tokens
        for dp in np.unique(chunk.dp_rank[known]).tolist():
            mine = known & (chunk.dp_rank == dp)
            row = np.array([mine.sum(), n[mine].sum(), (mine & server).sum(), n[mine & server].sum(),
                            (mine & model).sum(), n[mine & model].sum()], dtype=np.int64)
            self._ranks[dp] = self._ranks.get(dp, np.zeros(6, dtype=np.int64)) + row
        errors = np.flatnonzero(known & server & ~model)
        eager = np.flatnonzero(known & ~server & model)
        self._n_errors += len(errors)
        self._n_eager += len(eager)
        multi = chunk.num_requests > 1
        if len(errors):  # the reasons depend on the case only (eager reason, several requests): one call per distinct case
            reason = np.zeros(len(errors), dtype=np.int64)  # 0: graph, else 1 + EAGER_REASONS index
            for code, r in enumerate(EAGER_REASONS, start=1):
                reason[sel.eager_mask(r)[errors]] = code
            error_why: dict[int, tuple[str, ...]] = {}
            for case, count in _cases(reason * 2 + multi[errors]):
                why = error_why[case] = self._error_reasons(EAGER_REASONS[case // 2 - 1] if case >= 2 else None, bool(case % 2))
                if any(w.startswith("the assumed ") for w in why):
                    self._n_assumed += count
            for i in errors[:max(0, KEPT_EXAMPLES - len(self._errors))].tolist():
                r_i = sel.reason_of(i)
                why = error_why[(0 if r_i is None else EAGER_REASONS.index(r_i) + 1) * 2 + int(multi[i])]
                shown = "eager (prefill graphs off)" if self.settings.prefill_graphs is False else r_i.value if r_i else "graph"
                self._errors.append(_line(chunk, i, True, shown, why))
        if len(eager):
            eager_why: dict[int, tuple[str, ...]] = {}
            for case, count in _cases((chunk.decode_requests[eager] > 0) * 2 + multi[eager]):
                why = eager_why[case] = self._eager_reasons(case >= 2, bool(case % 2))
                for w in why:
                    self._explained[w] = self._explained.get(w, 0) + count
            for i in eager[:max(0, KEPT_EXAMPLES - len(self._eager))].tolist():
                why = eager_why[int(chunk.decode_requests[i] > 0) * 2 + int(multi[i])]
                self._eager.append(_line(chunk, i, False, f"graph {int(sel.bucket_tokens[i])}", why))

    def _error_reasons(self, reason: EagerReason | None, multi_request: bool) -> tuple[str, ...]:
        """What could explain a forward the server replayed and the model calls eager for
        `reason` (None: the model replays it, prefill graphs off), a forward of several requests
        when `multi_request`: the case, nothing else of the forward (`add` calls it once per case)."""
        out: list[str] = []
        cp = self.model.cp
        if self.settings.prefill_graphs is False:
            out.append(f"the log says prefill graphs were off ({self.settings.prefill_graphs_origin}), yet the server replayed")
        if reason is not None and reason.value in ("local_capacity", "not_cp_active") and cp.cp_size > 1 and "cp_size" in self.assumed:
            out.append(f"the assumed {self.assumed['cp_size'].text()}")
        if reason is not None and reason.value in ("above_largest_bucket", "padding_limit") and "buckets" in self.assumed:
            out.append(f"the assumed bucket list ({self.assumed['buckets'].option} sets it)")
        if reason is not None and reason.value in ("local_capacity", "not_cp_active") and cp.cp_size > 1 and multi_request:
            out.append("worst-case rows: the log has no extend lengths")
        if reason is not None and reason.value == "padding_limit":
            out.append("a server without the 2x padding cap (before SGLang PR #31487, 2026-07)")
        return tuple(out) or ("none known: a model error",)

    def _eager_reasons(self, mixed: bool, multi_request: bool) -> tuple[str, ...]:
        """What could explain a forward the model replays and the server ran eagerly: a mixed
        forward (decode rows) when `mixed`, of several requests when `multi_request`: the case,
        nothing else of the forward (`add` calls it once per case)."""
        s, out = self.settings, []
        if s.prefill_graphs is None:
            out.append("prefill graphs assumed on (the log states no graph setting and prints no capture line)")
        if s.pp_size() > 1:
            out.append(f"pipeline parallelism (pp_size {s.pp_size()}): 0.5.23 turns breakable prefill graphs off with PP "
                       "unless --cuda-graph-backend-prefill breakable opts in")
        if mixed or s.server_args.get("enable_mixed_chunk") is True:
            out.append("mixed batch")
        if s.lora:
            out.append("LoRA")
        cp = self.model.cp
        if cp.cp_size > 1 and cp.strategy is CPStrategy.zigzag and multi_request:
            out.append("a request shorter than 2*cp_size (lengths not in the log)")
        out.append(NOT_IN_LOG)
        return tuple(out)

    def result(self, label: str) -> ObservedComparison | None:
        if not self._ranks:
            return None
        ranks = tuple(RankObserved(dp, *(int(v) for v in row)) for dp, row in sorted(self._ranks.items()))
        explained, eager = dict(self._explained), list(self._eager)
        lead = []
        if label.startswith("npu"):
            lead.append(NPU)
        if (self.settings.prefill_graphs is None and self.settings.capture is None and not self.settings.captured
                and sum(r.graph_forwards for r in ranks) == 0):
            lead.append(LIKELY_OFF)
        if lead and self._n_eager:
            explained = {**{w: self._n_eager for w in lead}, **explained}
            eager = [replace(d, explanations=(*lead, *d.explanations)) for d in eager]
        return ObservedComparison(label, ranks, self._unknown, self._n_errors, tuple(self._errors), self._n_eager,
                                  tuple(eager), explained, self._notes(), assumption_errors=self._n_assumed)

    def _notes(self) -> tuple[str, ...]:
        s, notes = self.settings, []
        if self.no_cap:
            notes.append(f"the log is dated {s.date}, before SGLang PR #31487 ({PADDING_CAP_DATE}): its server had no 2x padding cap, "
                         "so the model compares with no cap either")
        elif s.version_tuple() is not None and s.version_tuple() < REFERENCE_VERSION:  # type: ignore[operator]
            notes.append(f"the log's SGLang {s.version} is older than the reference 0.5.23: releases before SGLang PR #31487 "
                         "(2026-07) had no 2x padding cap")
        if s.prefill_graphs is False:
            notes.append(f"prefill graphs were off ({s.prefill_graphs_origin}): every forward is modelled eager")
        return tuple(notes)


def _cases(case: Int64Array) -> list[tuple[int, int]]:
    """`(case, count)` of each distinct value of `case` ([M] int64), in order of first occurrence."""
    values, first, counts = np.unique(case, return_index=True, return_counts=True)
    order = np.argsort(first)
    return list(zip(values[order].tolist(), counts[order].tolist()))


def _line(chunk: ObservedForwards, i: int, server: bool, model: str, why: tuple[str, ...]) -> Disagreement:
    return Disagreement(int(chunk.line_no[i]), int(chunk.dp_rank[i]), int(chunk.num_tokens[i]), int(chunk.num_requests[i]),
                        server, model, why)


class ObservedTally:
    """Tally `ObservedForwards` chunks against the selector (module doc), launch by launch; `tap`
    passes every chunk on unchanged, `result()` is complete once the stream is exhausted.

    `settings` are the log's (its first launch's) and `table`, `cp`, `max_padding_factor` what
    they are modelled with. With `launch_settings` (launch -> its `LogSettings`, complete before
    the launch's first forward: `LogReader.launch`) and `resolve` (`LogSettings` -> `LaunchModel`)
    every launch is modelled under its own settings."""

    def __init__(self, table: BucketTable, cp: CPLayout, max_padding_factor: float, settings: LogSettings | None = None, *,
                 launch_settings: Callable[[int], LogSettings] | None = None,
                 resolve: Callable[[LogSettings], LaunchModel] | None = None, assumed: tuple[AssumedSetting, ...] = ()):
        self.settings = settings or LogSettings()
        self.base = LaunchModel(table, cp, max_padding_factor, assumed)
        self.launch_settings, self.resolve = launch_settings, resolve
        self._launches: dict[int, _LaunchTally] = {}

    def tap(self, chunks: Iterable[ForwardSizes]) -> Iterator[ForwardSizes]:
        for chunk in chunks:
            if isinstance(chunk, ObservedForwards):
                self.add(chunk)
            yield chunk

    def add(self, chunk: ObservedForwards) -> None:
        tally = self._launches.get(chunk.launch)
        if tally is None:
            settings = self.launch_settings(chunk.launch) if self.launch_settings is not None else self.settings
            model = self.resolve(settings) if self.resolve is not None else self.base
            tally = self._launches[chunk.launch] = _LaunchTally(model, settings)
        tally.add(chunk)

    def result(self, label: str = "cuda graph") -> ObservedComparison | None:
        """The total over the launches with their own comparisons in `.launches`, or None when
        no forward printed a verdict."""
        per = [(k, t, t.result(label)) for k, t in sorted(self._launches.items())]
        launches = tuple(LaunchObserved(k, t.settings.first_line, t.settings, t.model.assumed, c, t.model.server)
                         for k, t, c in per if c is not None)
        if not launches:
            return None
        return replace(_total([launch.comparison for launch in launches], label), launches=launches)


def _total(parts: list[ObservedComparison], label: str) -> ObservedComparison:
    """The sum of several launches' comparisons (lines: the first `KEPT_EXAMPLES` in log order)."""
    ranks: dict[int, list[int]] = {}
    for c in parts:
        for r in c.ranks:
            row = ranks.setdefault(r.dp_rank, [0] * 6)
            for j, v in enumerate((r.forwards, r.tokens, r.graph_forwards, r.graph_tokens, r.model_graph_forwards, r.model_graph_tokens)):
                row[j] += v
    explained: dict[str, int] = {}
    for c in parts:
        for k, v in c.eager_explanations.items():
            explained[k] = explained.get(k, 0) + v
    notes = tuple(dict.fromkeys(n for c in parts for n in c.notes))
    return ObservedComparison(
        label, tuple(RankObserved(dp, *row) for dp, row in sorted(ranks.items())), sum(c.without_verdict for c in parts),
        sum(c.model_errors for c in parts), tuple(d for c in parts for d in c.model_error_lines)[:KEPT_EXAMPLES],
        sum(c.unexplained_eager for c in parts), tuple(d for c in parts for d in c.eager_lines)[:KEPT_EXAMPLES], explained, notes,
        assumption_errors=sum(c.assumption_errors for c in parts))
