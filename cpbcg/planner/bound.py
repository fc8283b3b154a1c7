"""Bound mode: forwards known only by size (`ForwardSizes`: `n` tokens in `k` requests) as a `Demand`.

An SGLang server log's `Prefill batch` line gives each forward's `#new-token` (`n`) and
`#new-seq` (`k`) but not the extend lengths inside, so each forward is planned at the most rows
ANY `k` requests of `n` tokens can need: a worst-case bound on what the real forward needed.

* zigzag (`cp_size > 1`): CP-active iff every request can have `>= 2*cp_size` tokens
  (`n >= 2*cp_size*k`, docs/model.md "Layout"); rows are exact over exactly `k` requests. A request
  `L = seg*b + m` (`b >= 1`) gives rank `r` `2b + h_r(m)` tokens; splitting a request of base
  `b >= 2` into `seg` and `L - seg` leaves every rank's count unchanged, so exactly `k` requests
  with bases summing to `u >= k` reach what at most `k` residues summing to `S = n - seg*u` reach:
  `max over u >= k of 2u + Q_r(k, S)`, with `Q_r` the residue table of the zigzag model
  (`cpbcg.planner.model.strategy.Zigzag`; guarantee's `worst_rows` also admits fewer than `k`
  requests, up to 4 rows more: cp 2, `k` 4, `n` 16 needs 8 rows, `worst_rows` says 12).
* interleave: rows `align_up(ceil(n/cp), cp)` whatever `k` (CP-active iff `n >= cp_size`).
* `cp_size == 1`: rows `n`, every forward eligible.
"""

from __future__ import annotations

import numpy as np

from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.traces.records import ForwardSizes, ObservedForwards


def bound_demand(sizes: ForwardSizes, cp: CPLayout) -> Demand:
    """The `Demand` of forwards known only by size: `sizes.num_tokens` [N] int64 tokens,
    `sizes.counts` weights, rows the exact worst case over `sizes.num_requests` requests
    (`worst_forward_rows`), CP-active as `bound_active`. Vectorised per distinct `k`.
    A mixed-chunk forward (`ObservedForwards.decode_requests > 0`) carries one-token decode
    rows (`StrategyModel.bound_active`: under zigzag CP it is never CP-active)."""
    n, k = sizes.num_tokens.astype(np.int64), sizes.num_requests.astype(np.int64)
    decode = sizes.decode_requests if isinstance(sizes, ObservedForwards) else None
    return Demand(n, worst_forward_rows(n, k, cp), cp.model.bound_active(n, k, decode), k, sizes.counts.astype(np.int64))


def rebound_demand(demand: Demand, cp: CPLayout) -> Demand:
    """`demand` (forwards known by size, bound under some CP layout) bound again under `cp`: the same tokens,
    requests and counts, their worst-case rows and CP activity under `cp` (a mixed-chunk forward's decode rows are
    not kept in a `Demand`: its rows are taken as prefill rows)."""
    n, k = demand.num_tokens, demand.num_requests
    return Demand(n, worst_forward_rows(n, k, cp), cp.model.bound_active(n, k), k, demand.counts)


def bound_active(num_tokens: np.ndarray, num_requests: np.ndarray, cp: CPLayout) -> np.ndarray:
    """[N] bool: whether some batch of `num_tokens` tokens in `num_requests` requests is CP-active
    (zigzag: `n >= 2*cp_size*k`; interleave: `n >= cp_size`; no CP: always)."""
    return cp.model.bound_active(num_tokens, num_requests)


def worst_forward_rows(num_tokens: np.ndarray, num_requests: np.ndarray, cp: CPLayout) -> np.ndarray:
    """[N] int64: most physical rows per rank any `num_requests[i]` requests of `num_tokens[i]`
    tokens need (module doc; `StrategyModel.worst_forward_rows`). Forwards that cannot be
    CP-active get the §2 formula (the selector ignores their rows)."""
    return cp.model.worst_forward_rows(num_tokens, num_requests)
