"""Bound mode: forwards known only by size (`ForwardSizes`: `n` tokens in `k` requests) as a `Demand`.

An SGLang server log's `Prefill batch` line gives each forward's `#new-token` (`n`) and
`#new-seq` (`k`) but not the extend lengths inside, so each forward is planned at the most rows
ANY `k` requests of `n` tokens can need: a worst-case bound on what the real forward needed.

* zigzag (`cp_size > 1`): CP-active iff every request can have `>= 2*cp_size` tokens
  (`n >= 2*cp_size*k`, domain §2); rows are exact over exactly `k` requests. A request
  `L = seg*b + m` (`b >= 1`) gives rank `r` `2b + h_r(m)` tokens; splitting a request of base
  `b >= 2` into `seg` and `L - seg` leaves every rank's count unchanged, so exactly `k` requests
  with bases summing to `u >= k` reach what at most `k` residues summing to `S = n - seg*u` reach:
  `max over u >= k of 2u + Q_r(k, S)`, with `Q_r` the residue table of
  `cpbcg.planner.optimise.guarantee` (`worst_rows` also admits fewer than `k` requests, up to 4 rows
  more: cp 2, `k` 4, `n` 16 needs 8 rows, `worst_rows` says 12).
* interleave: rows `align_up(ceil(n/cp), cp)` whatever `k` (CP-active iff `n >= cp_size`).
* `cp_size == 1`: rows `n`, every forward eligible.
"""

from __future__ import annotations

import numpy as np

from cpbcg.planner.model.demand import Demand
from cpbcg.planner.optimise.guarantee import _most_extra_tokens
from cpbcg.planner.model.layout import CPLayout, CPStrategy, align_up, worst_case_rows
from cpbcg.planner.traces.records import ForwardSizes, ObservedForwards


def bound_demand(sizes: ForwardSizes, cp: CPLayout) -> Demand:
    """The `Demand` of forwards known only by size: `sizes.num_tokens` [N] int64 tokens,
    `sizes.counts` weights, rows the exact worst case over `sizes.num_requests` requests
    (`worst_forward_rows`), CP-active as `bound_active`. Vectorised per distinct `k`.
    A mixed-chunk forward (`ObservedForwards.decode_requests > 0`) carries one-token decode
    rows, so under zigzag CP it is never CP-active (every request needs `2*cp_size` tokens)."""
    n, k = sizes.num_tokens.astype(np.int64), sizes.num_requests.astype(np.int64)
    active = bound_active(n, k, cp)
    if isinstance(sizes, ObservedForwards) and cp.cp_size > 1 and cp.strategy is CPStrategy.zigzag:
        active &= sizes.decode_requests == 0
    return Demand(n, worst_forward_rows(n, k, cp), active, k, sizes.counts.astype(np.int64))


def bound_active(num_tokens: np.ndarray, num_requests: np.ndarray, cp: CPLayout) -> np.ndarray:
    """[N] bool: whether some batch of `num_tokens` tokens in `num_requests` requests is CP-active
    (zigzag: `n >= 2*cp_size*k`; interleave: `n >= cp_size`; no CP: always)."""
    if cp.cp_size == 1:
        return np.ones(len(num_tokens), dtype=bool)
    if cp.strategy is CPStrategy.interleave:
        return num_tokens >= cp.cp_size
    return num_tokens >= cp.min_request_tokens * num_requests


def worst_forward_rows(num_tokens: np.ndarray, num_requests: np.ndarray, cp: CPLayout) -> np.ndarray:
    """[N] int64: most physical rows per rank any `num_requests[i]` requests of `num_tokens[i]`
    tokens need (module doc). Forwards that cannot be CP-active get the §2 formula (the selector
    ignores their rows)."""
    rows = np.asarray(worst_case_rows(num_tokens, num_requests, cp), dtype=np.int64)
    if cp.cp_size == 1 or cp.strategy is CPStrategy.interleave:
        return np.asarray(align_up(-(-num_tokens // cp.cp_size), cp.align_rows), dtype=np.int64) if cp.cp_size > 1 else rows
    active = bound_active(num_tokens, num_requests, cp)
    ks = np.unique(num_requests[active]).tolist()
    tables = _residue_tables(max(ks), cp.cp_size) if ks else ()
    for k in ks:
        mine = np.flatnonzero(active & (num_requests == k))
        tokens = _exact_k_tokens(num_tokens[mine], int(k), cp.cp_size, [table[k] for table in tables])
        rows[mine] = align_up(tokens, cp.align_rows)
    return rows


def _exact_k_tokens(n: np.ndarray, k: int, cp_size: int, residue_rows: list[np.ndarray]) -> np.ndarray:
    """[N] most logical tokens one rank holds over exactly `k` zigzag requests of `n` tokens
    (every `n >= seg*k`): max over ranks `r` and `u >= k` of `2u + Q_r(k, n - seg*u)`;
    `residue_rows[r]` is `Q_r(k, S)` for `S = 0..k*(seg-1)`."""
    seg = 2 * cp_size
    best = np.zeros(len(n), dtype=np.int64)
    for q in residue_rows:
        j = np.arange(len(q)) // seg
        for res in range(min(seg, len(q))):
            mine = np.flatnonzero(n % seg == res)
            if not mine.size:
                continue
            run = np.maximum.accumulate(q[res::seg].astype(np.int64) - 2 * j[res::seg])  # best over S <= res + seg*j
            top_j = np.minimum((n[mine] - res) // seg - k, len(run) - 1)  # S <= n - seg*k, i.e. u >= k
            best[mine] = np.maximum(best[mine], 2 * ((n[mine] - res) // seg) + run[top_j])
    return best


def _residue_tables(k_top: int, cp_size: int) -> tuple[np.ndarray, ...]:
    """Per rank `[k_top + 1, S]`: `Q_r(k, S)`, most `H` of at most `k` residues summing to `S`
    (`cpbcg.planner.optimise.guarantee`'s table; 0 requests read as 0, `Q_r(k, 0) = 0`)."""
    seg = 2 * cp_size
    out = []
    for rank in range(cp_size):
        h = np.array([(rank < m) + (seg - 1 - rank < m) for m in range(seg)], dtype=np.int64)
        out.append(_most_extra_tokens(h, k_top, seg))
    return tuple(out)
