"""The cost model the optimiser minimises: modelled prefill time of a batch stream.

* a graph replay of bucket `B` costs `graph_fixed_ms + B * token_ms` (the graph computes the
  padding too);
* an eager forward of `n` tokens costs `eager_fixed_ms + n * token_ms` (eager pays the
  kernel-launch overhead the graph avoids).

The numbers come from the deployment config (`cost:`), from command-line overrides, or from a
capture manifest's replay timings (`Manifest.fitted_cost_ms`, `Manifest.eager_fixed_ms`).
The model counts what the runtime selector does, not what would be ideal: a batch the selector
replays in a heavily padded graph pays the graph cost even where eager would be cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the planner never imports cpbcg.config (pydantic) at run time
    from cpbcg.config import CostConfig
from cpbcg.errors import ConfigError
from cpbcg.planner.evaluate import Demand, Evaluation
from cpbcg.planner.selector import GRAPH, BucketTable, select_buckets


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

    def graph_ms(self, bucket_tokens):
        """Replay time of bucket(s) `bucket_tokens` (int or int64 array) in ms."""
        return self.graph_fixed_ms + np.asarray(bucket_tokens, dtype=np.float64) * self.token_ms

    def eager_ms(self, num_tokens):
        """Eager time of `num_tokens` (int or int64 array) in ms."""
        return self.eager_fixed_ms + np.asarray(num_tokens, dtype=np.float64) * self.token_ms

    @property
    def break_even_tokens(self) -> float:
        """Padding (tokens) above which a graph replay is slower than eager: `(eager - graph fixed) / token_ms`."""
        if self.token_ms == 0:
            return float("inf")
        return (self.eager_fixed_ms - self.graph_fixed_ms) / self.token_ms

    def to_dict(self) -> dict:
        return {
            "graph_fixed_ms": self.graph_fixed_ms, "eager_fixed_ms": self.eager_fixed_ms,
            "token_ms": self.token_ms, "source": self.source,
        }


def cost_model(config: CostConfig, manifest=None, *, source: str = "config") -> CostModel:
    """The cost model of `config`, with `manifest` timings (a `cpbcg.manifest.Manifest`) replacing
    the fitted fields when it has them (`fitted_cost_ms` gives graph fixed and per-token time,
    `eager_fixed_ms` the eager fixed time). Raises `ConfigError` for negative or non-finite values."""
    graph_fixed, eager_fixed, token = config.graph_fixed_ms, config.eager_fixed_ms, config.token_ms
    if manifest is not None:
        fitted = manifest.fitted_cost_ms()
        if fitted is not None:
            graph_fixed, token = fitted
            source = f"manifest {manifest.path}"
        eager = manifest.eager_fixed_ms()
        if eager is not None:
            eager_fixed = eager
    return CostModel(float(graph_fixed), float(eager_fixed), float(token), source)


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
    sel = select_buckets(demand.num_tokens, demand.rows, demand.active, table, max_padding_factor)
    graph = sel.reason_code == GRAPH
    per_batch = np.where(
        graph,
        cost.graph_ms(table.capture_num_tokens[np.maximum(sel.bucket_index, 0)]),
        cost.eager_ms(demand.num_tokens),
    )
    return float((per_batch * demand.counts).sum())
