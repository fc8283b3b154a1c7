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
  `return_logprob, input embeddings or context limits (not in the log)`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

import numpy as np

from cpbcg.planner.model.bound import bound_demand
from cpbcg.planner.model.layout import CPLayout, CPStrategy
from cpbcg.planner.model.selector import BucketTable, EagerReason
from cpbcg.planner.traces.records import ForwardSizes, ObservedForwards
from cpbcg.planner.traces.sglang_settings import LogSettings

PADDING_CAP_DATE = "2026-07-16"
"""SGLang PR #31487 (merged 2026-07-16): prefill graphs fall back to eager above 2x padding.
Servers before it padded to any bucket up to the largest."""
REFERENCE_VERSION = (0, 5, 23)
"""The release the model follows."""
KEPT_EXAMPLES = 20
"""Disagreeing lines kept per side."""
NOT_IN_LOG = "return_logprob, input embeddings or context limits (not in the log)"


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
    def agreeing(self) -> int:
        """Forwards on which server and model agree."""
        return self.forwards - self.model_errors - self.unexplained_eager

    def to_dict(self) -> dict[str, object]:
        """The JSON section `observed` of `plan` and `replay-check`."""
        return {
            "label": self.label, "forwards": self.forwards, "graph_forwards": self.graph_forwards, "coverage": self.coverage,
            "token_coverage": self.token_coverage, "model_coverage": self.model_coverage, "agreeing": self.agreeing,
            "without_verdict": self.without_verdict, "ranks": [asdict(r) for r in self.ranks],
            "model_errors": self.model_errors, "model_error_lines": [asdict(d) for d in self.model_error_lines],
            "unexplained_eager": self.unexplained_eager, "eager_lines": [asdict(d) for d in self.eager_lines],
            "eager_explanations": dict(self.eager_explanations), "notes": list(self.notes),
        }


class ObservedTally:
    """Tally `ObservedForwards` chunks against the selector (module doc); `tap` passes every chunk
    on unchanged, `result()` is complete once the stream is exhausted."""

    def __init__(self, table: BucketTable, cp: CPLayout, max_padding_factor: float, settings: LogSettings | None = None):
        self.table, self.cp, self.settings = table, cp, settings or LogSettings()
        self.no_cap = bool(self.settings.date) and self.settings.date < PADDING_CAP_DATE
        self.factor = float("inf") if self.no_cap else max_padding_factor
        self._ranks: dict[int, np.ndarray] = {}  # dp -> [forwards, tokens, graph, graph tokens, model graph, model tokens]
        self._unknown = 0
        self._errors: list[Disagreement] = []
        self._eager: list[Disagreement] = []
        self._n_errors = self._n_eager = 0
        self._explained: dict[str, int] = {}

    def tap(self, chunks: Iterable[ForwardSizes]) -> Iterator[ForwardSizes]:
        for chunk in chunks:
            if isinstance(chunk, ObservedForwards):
                self.add(chunk)
            yield chunk

    def add(self, chunk: ObservedForwards) -> None:
        sel = bound_demand(chunk, self.cp).select(self.table, self.factor)
        known = chunk.graph >= 0
        self._unknown += int((~known).sum())
        server, model = chunk.graph == 1, sel.graph
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
        for i in errors[:max(0, KEPT_EXAMPLES - len(self._errors))].tolist():
            reason = sel.reason_of(i)
            self._errors.append(self._line(chunk, i, True, reason.value if reason else "graph", self._error_reasons(chunk, i, reason)))
        for i in eager.tolist():
            why = self._eager_reasons(chunk, i)
            for w in why:
                self._explained[w] = self._explained.get(w, 0) + 1
            if len(self._eager) < KEPT_EXAMPLES:
                self._eager.append(self._line(chunk, i, False, f"graph {int(sel.bucket_tokens[i])}", why))

    @staticmethod
    def _line(chunk: ObservedForwards, i: int, server: bool, model: str, why: tuple[str, ...]) -> Disagreement:
        return Disagreement(int(chunk.line_no[i]), int(chunk.dp_rank[i]), int(chunk.num_tokens[i]), int(chunk.num_requests[i]),
                            server, model, why)

    def _error_reasons(self, chunk: ObservedForwards, i: int, reason: EagerReason | None) -> tuple[str, ...]:
        out: list[str] = []
        if reason is not None and reason.value in ("local_capacity", "not_cp_active") and self.cp.cp_size > 1 and chunk.num_requests[i] > 1:
            out.append("worst-case rows: the log has no extend lengths")
        if reason is not None and reason.value == "padding_limit":
            out.append("a server without the 2x padding cap (before SGLang PR #31487, 2026-07)")
        return tuple(out) or ("none known: a model error",)

    def _eager_reasons(self, chunk: ObservedForwards, i: int) -> tuple[str, ...]:
        s, out = self.settings, []
        if s.prefill_graphs is False:
            out.append("prefill graphs off")
        if chunk.decode_requests[i] > 0 or s.server_args.get("enable_mixed_chunk") is True:
            out.append("mixed batch")
        if s.lora:
            out.append("LoRA")
        if self.cp.cp_size > 1 and self.cp.strategy is CPStrategy.zigzag and chunk.num_requests[i] > 1:
            out.append("a request shorter than 2*cp_size (lengths not in the log)")
        out.append(NOT_IN_LOG)
        return tuple(out)

    def result(self, label: str = "cuda graph") -> ObservedComparison | None:
        """The comparison, or None when no forward printed a verdict."""
        if not self._ranks:
            return None
        ranks = tuple(RankObserved(dp, *(int(v) for v in row)) for dp, row in sorted(self._ranks.items()))
        return ObservedComparison(label, ranks, self._unknown, self._n_errors, tuple(self._errors), self._n_eager,
                                  tuple(self._eager), dict(self._explained), self._notes())

    def _notes(self) -> tuple[str, ...]:
        s, notes = self.settings, []
        if self.no_cap:
            notes.append(f"the log is dated {s.date}, before SGLang PR #31487 ({PADDING_CAP_DATE}): its server had no 2x padding cap, "
                         "so the model compares with no cap either")
        elif s.version_tuple() is not None and s.version_tuple() < REFERENCE_VERSION:  # type: ignore[operator]
            notes.append(f"the log's SGLang {s.version} is older than the reference 0.5.23: releases before SGLang PR #31487 "
                         "(2026-07) had no 2x padding cap")
        return tuple(notes)
