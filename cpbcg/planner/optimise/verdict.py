"""The verdict: what a plan says first, in numbers against SGLang's default list on the same traffic.

`verdict(...)` is built from the recommendation's own results (no new rule): SGLang 0.5.23's
default list for the chunk (`EngineRules.lists.default`, as the runner captures it),
the coverage ceiling (`OptimalLists.ceiling`), the knee (`recommend.KNEE_RULE`) and the full
recommendation, each with its coverage, padding, modelled prefill time (`cost.CostModel`) and
capture seconds and graph MiB per server start (`capture_cost.CaptureModel`). It says which list
to deploy and why, and which budget binds. Outputs render it (`outputs/verdict.py`); JSON
carries it as `verdict` (`Verdict.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.optimise.capture_cost import CaptureEstimate
from cpbcg.planner.words import counted

__all__ = ["CEILING_TOLERANCE", "ListFigures", "Verdict", "list_figures"]

CEILING_TOLERANCE = 0.0005
"""A list "reaches the ceiling" (and the knee "keeps the coverage") when its coverage is within
this fraction of forwards (0.05 percentage points) of the ceiling (of the full list)."""


@dataclass(frozen=True)
class ListFigures:
    """One bucket list on the plan's forwards."""

    name: str
    """`default` (SGLang's), `configured`, `knee` or `recommended`."""
    buckets: tuple[int, ...]
    """The buckets as SGLang captures them (tokens, ascending)."""
    coverage: float
    """Fraction of forwards replayed in graphs."""
    padding: float
    """Padded over real graph tokens (`Evaluation.padding_overhead`)."""
    modelled_s: float
    """Modelled prefill time of the forwards (s)."""
    capture_s: float
    """Capture seconds per server start (estimate or measured, `capture`)."""
    graph_mib: float
    """Graph memory per GPU (MiB; the pool plus the per-graph term)."""

    @property
    def num_buckets(self) -> int:
        return len(self.buckets)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "num_buckets": self.num_buckets, "buckets": list(self.buckets), "coverage": self.coverage,
                "padding": self.padding, "modelled_seconds": self.modelled_s, "capture_seconds": self.capture_s,
                "graph_bytes": int(round(self.graph_mib * (1 << 20))), "graph_mib": self.graph_mib}


def list_figures(name: str, evaluation: Evaluation, modelled_ms: float, capture: CaptureEstimate) -> ListFigures:
    """`ListFigures` of a list from its evaluation, modelled time (ms) and capture estimate."""
    return ListFigures(name, tuple(evaluation.buckets), evaluation.coverage, evaluation.padding_overhead, modelled_ms / 1e3,
                       capture.capture_s, capture.graph_mib)


@dataclass(frozen=True)
class Verdict:
    """The answer of a plan against SGLang's default list on the same forwards."""

    forwards: int
    """Prefill forwards judged (count-weighted)."""
    ceiling: float
    """Most coverage any list reaches (fraction of forwards)."""
    beyond_ceiling: dict[str, int]
    """Forwards no list can replay, by eager reason (`evaluate.LIST_INDEPENDENT_REASONS`; only those > 0)."""
    default: ListFigures
    """SGLang 0.5.23's default list for the chunk, as captured."""
    full: ListFigures
    """The recommendation."""
    knee: ListFigures | None
    """The knee (`recommend.KNEE_RULE`); None without one, when it is the recommendation, or when -k/--max-buckets
    was given (the verdict judges the list asked for, so its flags command repeats the same advice)."""
    configured: ListFigures | None
    """The configured list when it is not SGLang's default (`--buckets`, a config, a log), else None."""
    deploy: str
    """Which list to deploy: `knee`, `recommended` or `default` (SGLang's)."""
    deploy_reason: str
    """Why, in words."""
    budgets: tuple[str, ...]
    """Each capture budget and whether it binds, in words (empty: none given)."""
    warnings: tuple[str, ...]
    """Where the configured or recommended list costs more than the default, or misses a target."""
    capture_source: str
    """Where the capture figures come from (`CaptureEstimate.source`)."""
    capture_range: float
    """The capture figures hold within times or divided by this (1: measured)."""
    cost_source: str
    """Where the modelled times come from (`CostModel.source`)."""
    decode: dict[str, object] | None = None
    """The decode graphs' line (issue 41 fills it; None: not judged here)."""

    @property
    def default_at_ceiling(self) -> bool:
        """Whether SGLang's default list already replays as many forwards as any list can."""
        return self.default.coverage >= self.ceiling - CEILING_TOLERANCE

    @property
    def default_below_ceiling(self) -> int:
        """Forwards the ceiling replays in graphs and SGLang's default list does not (0 at the ceiling;
        a few where it is `default_at_ceiling` within `CEILING_TOLERANCE`)."""
        return max(0, round((self.ceiling - self.default.coverage) * self.forwards))

    @property
    def deployed(self) -> ListFigures:
        """The list `deploy` names."""
        if self.deploy == "default":
            return self.default
        return self.knee if self.deploy == "knee" and self.knee is not None else self.full

    def change(self, figures: ListFigures) -> float:
        """Modelled time of `figures` over the default's, minus 1 (e.g. +0.0166)."""
        return figures.modelled_s / self.default.modelled_s - 1 if self.default.modelled_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        def one(f: ListFigures | None) -> dict[str, object] | None:
            if f is None:
                return None
            return {**f.to_dict(), "modelled_time_change_vs_default": self.change(f),
                    "capture_seconds_saved_vs_default": self.default.capture_s - f.capture_s,
                    "graph_mib_saved_vs_default": self.default.graph_mib - f.graph_mib}

        return {"forwards": self.forwards, "ceiling": self.ceiling, "beyond_ceiling": dict(self.beyond_ceiling),
                "default_reaches_ceiling": self.default_at_ceiling, "ceiling_tolerance": CEILING_TOLERANCE,
                "default_forwards_below_ceiling": self.default_below_ceiling,
                "default": one(self.default), "knee": one(self.knee), "recommended": one(self.full), "configured": one(self.configured),
                "deploy": self.deploy, "deploy_num_buckets": self.deployed.num_buckets, "deploy_reason": self.deploy_reason,
                "budgets": list(self.budgets), "warnings": list(self.warnings), "capture_source": self.capture_source,
                "capture_range_factor": self.capture_range, "cost_source": self.cost_source, "decode": self.decode}


def choose(knee: ListFigures | None, full: ListFigures, default: ListFigures, tolerance: float) -> tuple[str, str]:
    """`(deploy, reason)`: the knee when it keeps the full list's coverage with fewer buckets, else
    the full recommendation (the list `-k` asked for: no knee is offered below it), unless that
    list replays no more forwards than SGLang's default list and takes more modelled time than
    `tolerance` (a fraction: the knee rule's) over it, or saves no capture: then SGLang's default
    list. One rule for a list that costs more than the default, knee or not: within `tolerance` and
    saving capture it is deployed, the reason stating the trade (capture seconds saved per server
    start for the modelled time added); past it, the default is kept. The rule is a fixed point:
    the deployed list's `-k` gives the same list and the same advice."""
    def change(f: ListFigures) -> float:
        return f.modelled_s / default.modelled_s - 1 if default.modelled_s > 0 else 0.0

    def rejected(f: ListFigures) -> bool:  # costs more than the default for no more forwards in graphs, past the trade allowed
        more_time = f.modelled_s > default.modelled_s and f.coverage <= default.coverage + CEILING_TOLERANCE
        return more_time and (change(f) > tolerance or f.capture_s >= default.capture_s)

    chosen = full
    if knee is not None and knee.num_buckets < full.num_buckets and knee.coverage >= full.coverage - CEILING_TOLERANCE \
            and not (rejected(knee) and not rejected(full)):
        chosen = knee
    saved = default.capture_s - chosen.capture_s
    more = chosen.modelled_s > default.modelled_s
    if rejected(chosen):
        which = "the knee" if chosen is knee else "the recommendation"
        past = (f"more than the {tolerance:.0%} a capture saving may cost" if saved > 0
                else "and saves no capture")
        return "default", (f"{which}, held to {counted(chosen.num_buckets, 'bucket')}, replays {chosen.coverage:.2%} of forwards in "
                           f"graphs against the default's {default.coverage:.2%} and takes {change(chosen):+.2%} modelled prefill time, {past}; "
                           "keep SGLang's default list (no --cuda-graph-bs-prefill), or raise -k/--max-buckets")
    trade = (f"saves {saved:,.0f} s of capture per server start for {change(chosen):+.2%} modelled prefill time" if more
             else f"saves {saved:,.0f} s of capture per server start and {-change(chosen):.2%} modelled prefill time")
    if chosen is knee:
        return "knee", trade
    if knee is not None and knee.num_buckets < full.num_buckets and knee.coverage < full.coverage - CEILING_TOLERANCE:
        return "recommended", (f"the knee replays {knee.coverage:.2%} of forwards in graphs against {full.coverage:.2%}: "
                               "its capture saving costs coverage")
    replays = f"it replays {full.coverage:.2%} of forwards in graphs (the default {default.coverage:.2%})"
    return "recommended", f"{trade}; {replays}" if saved > 0 or more else f"{replays} for less modelled time"
