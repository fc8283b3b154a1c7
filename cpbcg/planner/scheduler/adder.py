"""How one prefill forward is packed: the rules of SGLang's `PrefillAdder` (schedule_policy.py)
and the waiting-queue loop of `Scheduler._get_new_batch_prefill_raw` (scheduler.py).

This is the readable statement of chunked-prefill packing, unit-tested rule by rule; the
embedded synthetic workload (`planner/traces/embedded.py`) calls `fill_forward`. The scheduler
simulation runs the same arithmetic inlined in its event loop (simulation.py, and kernel.py
compiled), for speed (issue 24); tests/test_scheduler_kernel.py and the SGLang conformance tests
hold the three together. Budgets are in tokens; `kv_free_tokens=None` means no KV budget
(prefill-only model).
"""

from __future__ import annotations

import math
from collections import deque
from enum import Enum
from typing import Callable, TypeVar

from cpbcg.planner.scheduler.settings import SchedulerSettings


class AddResult(Enum):
    """SGLang's `AddReqResult`: whether the loop may try the next waiting request."""

    CONTINUE = 0
    NO_TOKEN = 1
    """The KV budget is spent (the batch is full until requests finish)."""
    OTHER = 2
    """A compute budget or a request limit is spent."""


CONTINUE, NO_TOKEN, OTHER = AddResult.CONTINUE, AddResult.NO_TOKEN, AddResult.OTHER
ItemT = TypeVar("ItemT")
"""A waiting-queue item (`fill_forward` reads it only through `lookup`)."""


class PrefillAdder:
    """Budgets of one forward being formed (SGLang `PrefillAdder.__init__`).

    `mixed_decode_tokens` is the running batch size with `enable_mixed_chunk` (it shrinks the
    chunk and input budgets and is charged to the KV budget); `kv_free_tokens` is the KV pool
    minus the tokens resident requests hold (None: no KV budget); `running_reserve_tokens` is
    the running requests' `new_token_ratio x min(remaining output, clip)` sum;
    `allocatable_requests` is `max_running_requests - running_bs` (None: unlimited), where
    `running_bs` counts the decoding requests only: the forward's requests, the in-progress
    chunk among them, are checked against it (0.5.23 `get_num_allocatable_reqs`, whose
    `num_held_rows` gives the chunk's request row back).
    """

    def __init__(
        self,
        settings: SchedulerSettings,
        mixed_decode_tokens: int = 0,
        kv_free_tokens: float | None = None,
        running_reserve_tokens: float = 0.0,
        allocatable_requests: int | None = None,
    ):
        self.page_size = settings.page_size
        self.clip = settings.clip_max_new_tokens
        self.allocatable = allocatable_requests
        self.request_limit = settings.prefill_max_requests
        self.rem_input_tokens = settings.max_prefill_tokens - mixed_decode_tokens
        chunk = settings.chunk_tokens
        self.rem_chunk_tokens = None if chunk is None else chunk - mixed_decode_tokens
        self.kv_free = kv_free_tokens
        self.rem_total_offset = mixed_decode_tokens + running_reserve_tokens
        self.cur_rem_offset = mixed_decode_tokens
        self.num_admitted = 0

    def ceil_paged_tokens(self, tokens: int) -> int:
        """SGLang `ceil_paged_tokens`: tokens rounded up to whole pages."""
        return -(-tokens // self.page_size) * self.page_size

    @property
    def rem_total_tokens(self) -> float:
        return math.inf if self.kv_free is None else self.kv_free - self.rem_total_offset

    @property
    def cur_rem_tokens(self) -> float:
        return math.inf if self.kv_free is None else self.kv_free - self.cur_rem_offset

    def budget_state(self) -> AddResult:
        """SGLang `budget_state`: KV first, then the input and chunk budgets."""
        kv_free = self.kv_free  # the properties' arithmetic, inlined: called per waiting request
        if kv_free is not None and (kv_free - self.rem_total_offset <= 0 or kv_free - self.cur_rem_offset <= 0):
            return NO_TOKEN
        chunk = self.rem_chunk_tokens
        if self.rem_input_tokens <= 0 or (chunk is not None and chunk <= 0):
            return OTHER
        return CONTINUE

    def charge(self, extend_tokens: int, max_new_tokens: int) -> None:
        """SGLang `_update_prefill_budget`: page-rounded extend charged to every budget; the KV
        budget also reserves the output estimate and one page (`reserve`)."""
        paged = extend_tokens if self.page_size == 1 else self.ceil_paged_tokens(extend_tokens)
        self.rem_total_offset += paged + max_new_tokens + self.page_size
        self.cur_rem_offset += paged
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged
        self.num_admitted += 1

    def add_chunked(self, remaining_tokens: int, output_tokens: int) -> int:
        """SGLang `add_chunked_req`: the in-progress request takes up to the chunk budget (capped
        by the KV budget unless that is spent), with no page cut. Returns the tokens taken."""
        chunk = self.rem_chunk_tokens
        assert chunk is not None, "a request is cut only under a chunk budget"
        limit = chunk
        if self.kv_free is not None:
            limit = min(chunk, int(self.rem_total_tokens))
            if limit <= 0:
                limit = chunk
        take = min(remaining_tokens, max(limit, 1))  # max: a chunk budget spent by mixed decode tokens
        self.charge(take, min(output_tokens, self.clip) if take == remaining_tokens else 0)
        return take

    def add_one(self, extend_tokens: int, prefix_tokens: int, output_tokens: int) -> tuple[AddResult, int]:
        """SGLang `add_one_req` (and the slot check before it in `_get_new_batch_prefill_raw`).

        Returns `(result, tokens taken)`; 0 tokens means the request was not admitted and
        `result` says why; a take below `extend_tokens` starts a chunked request.
        """
        if self.request_limit is not None and self.num_admitted >= self.request_limit:
            return OTHER, 0  # prefill_max_requests
        max_new = output_tokens if output_tokens < self.clip else self.clip
        kv_free, page = self.kv_free, self.page_size
        if kv_free is not None and extend_tokens + max_new + page >= kv_free - self.rem_total_offset:
            return NO_TOKEN, 0  # (`rem_total_tokens`, inlined)
        input_tokens = extend_tokens if page == 1 else -(-extend_tokens // page) * page
        chunk = self.rem_chunk_tokens
        if chunk is None and self.num_admitted and input_tokens >= self.rem_input_tokens:
            return OTHER, 0
        if chunk is None or input_tokens <= chunk:
            self.charge(extend_tokens, max_new)
            return self.budget_state(), extend_tokens
        take = (prefix_tokens + chunk // page * page) // page * page - prefix_tokens
        if take <= 0:
            return OTHER, 0
        self.charge(take, 0)
        return self.budget_state(), take


def fill_forward(
    adder: PrefillAdder, waiting: deque[ItemT], lookup: Callable[[ItemT], tuple[int, int, int]]
) -> tuple[list[tuple[ItemT, int, int]], AddResult, bool]:
    """The waiting-queue loop of `_get_new_batch_prefill_raw` (SGLang 0.5.23): before each
    waiting request, stop if a compute budget is spent (`budget_state() == OTHER`, checked
    before the first request too: the in-progress chunk or mixed decode rows can spend it),
    then if the forward holds `allocatable` requests (the slots are full); otherwise FCFS
    `add_one`, until a request is refused. `lookup(item)` gives `(extend, prefix, output)` tokens
    of a waiting item. Admitted items are popped; returns `[(item, extend, taken)]`, the last
    result (`NO_TOKEN`: the KV budget stopped the forward) and whether the slots stopped it.
    """
    admitted: list[tuple[ItemT, int, int]] = []
    result = CONTINUE
    budget_state, add_one, allocatable = adder.budget_state, adder.add_one, adder.allocatable
    check = True  # the budgets change only when `add_one` admits, and then it returns the state
    while waiting:
        if check and budget_state() is OTHER:
            break
        check = False
        if allocatable is not None and adder.num_admitted >= allocatable:
            return admitted, result, True
        item = waiting[0]
        extend, prefix, output = lookup(item)
        result, taken = add_one(extend, prefix, output)
        if taken:
            waiting.popleft()
            admitted.append((item, extend, taken))
        if result is not CONTINUE or taken < extend:
            break
    return admitted, result, False
