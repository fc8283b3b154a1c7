"""The cost model the optimiser minimises: modelled prefill time of a batch stream.

* a graph replay of bucket `B` costs `graph_fixed_ms + B * token_ms` (the graph computes the
  padding too);
* an eager forward of `n` tokens costs `eager_fixed_ms + n * token_ms` (eager pays the
  kernel-launch overhead the graph avoids).

The numbers come from the published fit for the deployment's model and GPU (`forward_cost`,
docs/costs.md), from the deployment config (`cost:`), from command-line overrides, or from a
capture manifest's replay timings (`Manifest.fitted_cost_ms`, `Manifest.eager_fixed_ms`).
The model counts what the runtime selector does, not what would be ideal: a batch the selector
replays in a heavily padded graph pays the graph cost even where eager would be cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import numpy as np

from cpbcg.planner.document import document
from cpbcg.errors import ConfigError
from cpbcg.planner.arrays import FloatArray, Int64Array
from cpbcg.planner.hardware import GPU, ModelSpec
from cpbcg.planner.costs import published as pub
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.model.selector import BucketTable


@dataclass(frozen=True)
class CostModel:
    """Linear time model of one prefill forward (milliseconds)."""

    graph_fixed_ms: float
    """Fixed time of one graph replay (ms)."""
    eager_fixed_ms: float
    """Fixed time of one eager forward, kernel launches included (ms)."""
    token_ms: float
    """Time per token, graph (padded bucket tokens) or eager (real tokens) (ms/token)."""
    source: str = "defaults"
    """Where the numbers came from (`defaults`, `config`, `command line`, a manifest path)."""

    def __post_init__(self) -> None:
        for name in ("graph_fixed_ms", "eager_fixed_ms", "token_ms"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ConfigError(f"cost.{name}: must be a finite number >= 0, got {value!r}")

    @overload
    def graph_ms(self, bucket_tokens: int) -> float: ...
    @overload
    def graph_ms(self, bucket_tokens: Int64Array) -> FloatArray: ...
    def graph_ms(self, bucket_tokens: int | Int64Array) -> float | FloatArray:
        """Replay time of bucket(s) `bucket_tokens` (int or int64 array) in ms."""
        if isinstance(bucket_tokens, int):
            return self.graph_fixed_ms + bucket_tokens * self.token_ms
        return self.graph_fixed_ms + np.asarray(bucket_tokens, dtype=np.float64) * self.token_ms

    @overload
    def eager_ms(self, num_tokens: int) -> float: ...
    @overload
    def eager_ms(self, num_tokens: Int64Array) -> FloatArray: ...
    def eager_ms(self, num_tokens: int | Int64Array) -> float | FloatArray:
        """Eager time of `num_tokens` (int or int64 array) in ms."""
        if isinstance(num_tokens, int):
            return self.eager_fixed_ms + num_tokens * self.token_ms
        return self.eager_fixed_ms + np.asarray(num_tokens, dtype=np.float64) * self.token_ms

    @property
    def break_even_tokens(self) -> float:
        """Padding (tokens) above which a graph replay is slower than eager: `(eager - graph fixed) / token_ms`."""
        if self.token_ms == 0:
            return float("inf")
        return (self.eager_fixed_ms - self.graph_fixed_ms) / self.token_ms

    def to_dict(self) -> dict[str, float | str]:
        return document(self)


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def forward_cost(model: ModelSpec | None, gpu: GPU | None, tp: int) -> CostModel:
    """The cost model of `model` on `gpu` at TP `tp` (`published.forward_terms`, rounded to 4
    significant digits); None: the assumed model or GPU (`hardware.ASSUMED_MODEL`,
    `ASSUMED_GPU`), said in the source; a given model is named by its source."""
    spec, card, assumed = pub.assumptions(model, gpu)
    graph, eager, token = pub.forward_terms(spec, card, tp)
    source = (f"estimate for {pub.describe(spec, card)} at TP {tp} ({assumed + '; ' if assumed else ''}fitted to the SGLang blog "
              f"2026-08-15 prefill-ttft and tokenspeed #597, within x/÷{pub.FORWARD_RANGE:g}; docs/costs.md)")
    return CostModel(_sig(graph), _sig(eager), _sig(token), source)


DEFAULT_COST = forward_cost(None, None, 4)
"""Default cost model: the published fit for the assumed model and GPU at TP 4 (docs/costs.md):
graph `70.67 + 0.02591*B` ms, eager `122.7 + 0.02591*n` ms, a 1.42x saving at 2048 tokens;
`cpbcg.settings` states the same numbers."""


def with_measured(cost: CostModel, fitted: tuple[float, float] | None, eager_fixed_ms: float | None, source: str) -> CostModel:
    """`cost` with measured timings replacing its fields where given: `fitted` is
    `(graph_fixed_ms, token_ms)` (e.g. a capture manifest's replay fit), `eager_fixed_ms` the
    measured eager fixed time. Raises `ConfigError` for negative or non-finite values."""
    graph_fixed, token = fitted if fitted is not None else (cost.graph_fixed_ms, cost.token_ms)
    eager = cost.eager_fixed_ms if eager_fixed_ms is None else eager_fixed_ms
    changed = fitted is not None or eager_fixed_ms is not None
    return CostModel(float(graph_fixed), float(eager), float(token), source if changed else cost.source)


def evaluation_cost_ms(ev: Evaluation, cost: CostModel) -> float:
    """Modelled time (ms) of the forwards of an `Evaluation`: graph replays at their bucket size,
    eager forwards at their real size."""
    eager_batches = sum(ev.eager.values())
    eager_tokens = sum(ev.eager_tokens.values())
    graph = ev.graph_batches * cost.graph_fixed_ms + (ev.graph_tokens + ev.padded_tokens) * cost.token_ms
    return float(graph + eager_batches * cost.eager_fixed_ms + eager_tokens * cost.token_ms)


def demand_cost_ms(demand: Demand, table: BucketTable, cost: CostModel, max_padding_factor: float = 2.0) -> float:
    """Modelled time (ms) of `demand` under the runtime selector with `table` (the optimiser's
    objective, evaluated the slow, obvious way)."""
    sel = demand.select(table, max_padding_factor)
    per_batch = np.where(
        sel.graph,
        cost.graph_ms(sel.bucket_tokens),
        cost.eager_ms(demand.num_tokens),
    )
    return float((per_batch * demand.counts).sum())


FLAG_TOLERANCE = 0.005
"""A list is flagged against SGLang's default when its padding exceeds the default's by more than
this (fraction of graph tokens), or its modelled time by more than this fraction."""


def flags_against_default(ev: Evaluation, default: Evaluation, cost: CostModel) -> tuple[str, ...]:
    """Plain phrases where the list of `ev` costs more than SGLang's default list (`default`, on
    the same forwards): padding (padded over real graph tokens) or modelled prefill time."""
    out = []
    if ev.padding_overhead > default.padding_overhead + FLAG_TOLERANCE:
        out.append(f"padding {ev.padding_overhead:.2%} against SGLang's default {default.padding_overhead:.2%}")
    ours, theirs = evaluation_cost_ms(ev, cost), evaluation_cost_ms(default, cost)
    if theirs > 0 and ours > theirs * (1 + FLAG_TOLERANCE):
        out.append(f"modelled prefill time {ours / 1e3:,.2f} s against SGLang's default {theirs / 1e3:,.2f} s ({ours / theirs - 1:+.2%})")
    return tuple(out)
