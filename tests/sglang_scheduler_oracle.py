"""SGLang 0.5.23's scheduler loop as an oracle for cpbcg's scheduler simulation.

Runs the released code of `Scheduler.get_next_batch_to_run`, `_get_new_batch_prefill_raw`,
`get_num_allocatable_reqs`, `update_running_batch`, `PrefillAdder`, `PrefillBudget` and
`ScheduleBatch.check_decode_mem` (read from the wheel, `sglang_oracle.definitions`) over stub
requests, a stub token pool (whole pages, no radix cache) and stub batches. The event loop
around them is `event_loop_normal` with cpbcg's time model (a prefill forward takes
`prefill_fixed_ms + tokens / prefill_tokens_per_s`, a decode step `decode_fixed_ms +
running x decode_ms_per_request`), so forwards can be compared one for one. A run that reaches
a retraction stops there (`Outcome.retracted`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
from types import SimpleNamespace
from typing import Optional

from sglang_oracle import definitions


class Retracted(Exception):
    """The decode batch ran out of KV: 0.5.23 would retract requests here."""


class _Noop:
    def __getattr__(self, name):
        return lambda *a, **k: None


class Req:
    """The fields of SGLang's `Req` the scheduler reads, for a prompt without a cached prefix."""

    def __init__(self, rid: int, input_tokens: int, output_tokens: int):
        self.rid, self.input_tokens = rid, input_tokens
        self.sampling_params = SimpleNamespace(max_new_tokens=output_tokens, ignore_eos=False)
        self.output_ids: list[int] = []
        self.prefix_len = self.extend_end = 0
        self.kv = SimpleNamespace(holds_kv=False, req_pool_idx=None, holds_mamba=False, kv_committed_len=0)
        self.last_node = self.best_match_node = self.lock = self.lora_id = self.cache_request_handle = None
        self.host_hit_length = self.swa_host_hit_length = self.auxiliary_swa_host_hit_length = 0
        self.storage_hit_length = self.mamba_host_hit_length = self.inflight_middle_chunks = 0
        self.retracted_stain = False
        self.token_indices_to_pool = self.beam_group = None

    @property
    def full_untruncated_fill_ids(self):
        return range(self.input_tokens + len(self.output_ids))

    @property
    def extend_len(self) -> int:
        return self.extend_end - self.prefix_len

    def init_next_round_input(self, tree_cache=None):
        self.prefix_len = self.kv.kv_committed_len

    def needs_host_load_back(self) -> bool:
        return False

    def materialized_host_hit_len(self) -> int:
        return 0

    def fulfilled_storage_hit_len(self, prefix_len: int) -> int:
        return 0

    def finished(self) -> bool:
        return len(self.output_ids) >= self.sampling_params.max_new_tokens


class Pool:
    """Token pool of `size` tokens in pages of `page_size`; a request holds whole pages."""

    def __init__(self, size: int, page_size: int, budget_cls):
        self.size, self.page_size, self.used = size, page_size, 0
        self._budget_cls = budget_cls
        self.shard_spec = None

    def paged(self, tokens: int) -> int:
        return -(-tokens // self.page_size) * self.page_size

    def available_size(self) -> int:
        return self.size - self.used

    def create_prefill_budget(self, tree_cache, *, num_mixed_decode_tokens=0):
        return self._budget_cls(self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def request_slot_reserve(self, *, has_req_pool_slot, prefill_tokens=0):
        return 0

    def evict_to_free_tokens(self, tree_cache, num_tokens):
        return None

    def check_decode_capacity(self, *, num_tokens, tree_cache, requests=None, spec_algorithm=None):
        return self.available_size() >= num_tokens

    def grow(self, req: Req, new_committed: int) -> None:
        self.used += self.paged(new_committed) - self.paged(req.kv.kv_committed_len)
        req.kv.kv_committed_len = new_committed
        req.kv.holds_kv = True

    def free(self, req: Req) -> None:
        self.used -= self.paged(req.kv.kv_committed_len)
        req.kv.kv_committed_len = 0
        req.kv.holds_kv = False


class TreeCache(_Noop):
    """No radix cache (`--disable-radix-cache`): nothing evictable."""

    disable = True
    buffer_pipeline = None
    storage_prefetch_retries = None

    def supports_mamba(self):
        return False

    def supports_prefix_sharing(self):
        return False

    def evictable_size(self):
        return 0


@functools.cache
def _namespace() -> dict:
    ns: dict = {
        "Enum": enum.Enum, "auto": enum.auto, "dataclass": dataclasses.dataclass, "Optional": Optional,
        "contextmanager": contextlib.contextmanager, "nullcontext": contextlib.nullcontext,
        "CLIP_MAX_NEW_TOKENS": 4096, "_IS_HIP": False, "PREFILL_TILE_BUDGET": 0, "TEST_RETRACT": False,
        "mamba_prefill_chunk_grid": lambda: 1, "_use_exact_chunk_fill": lambda: False,
        "page_interleave_shard_size": lambda allocator: 1, "set_time_batch": lambda *a: None,
        "set_schedule_time_batch": lambda *a: None,
        "num_beam_member_rows": lambda reqs: 0,
        "get_exec": lambda: SimpleNamespace(features=SimpleNamespace(enable_encoder_swa_bounded_replay=False)),
        "split_cached_prefix_by_tier": lambda **k: (0, 0, 0),
    }
    for name in ("SWATokenToKVPoolAllocator", "DeepSeekV4HiSparseTokenToKVPoolAllocator", "UnifiedRadixCache",
                 "UnifiedMambaTokenToKVPoolAllocator", "UnifiedMambaSWATokenToKVPoolAllocator"):
        ns[name] = type(name, (), {})
    definitions("sglang/srt/managers/schedule_policy.py", ["AddReqResult", "_PrefillAdmission", "PrefillAdder"], ns)
    definitions("sglang/srt/mem_cache/prefill_budget.py", ["PrefillBudget"], ns)
    sched = {}
    for name in ("get_next_batch_to_run", "_get_new_batch_prefill_raw", "get_num_allocatable_reqs",
                 "update_running_batch", "get_new_batch_prefill", "_reqs_finishing_inflight"):
        definitions("sglang/srt/managers/scheduler.py", [f"Scheduler.{name}"], ns)
        sched[name] = ns.pop(name)
    batch = {}
    for name in ("check_decode_mem", "new_tokens_required_next_decode"):
        definitions("sglang/srt/managers/schedule_batch.py", [f"ScheduleBatch.{name}"], ns)
        batch[name] = ns.pop(name)
    ns["_scheduler_methods"], ns["_batch_methods"] = sched, batch
    return ns


class Batch:
    """`ScheduleBatch` as the loop uses it (the KV check is 0.5.23's own)."""

    def __init__(self, reqs=None, batch_is_full=False, pool=None, chunked_req=None, extend=False):
        self.reqs = list(reqs or [])
        self.batch_is_full = batch_is_full
        self.token_to_kv_pool_allocator = pool
        self.tree_cache = None
        self.chunked_req = chunked_req
        self.extend = extend
        self.forward_mode = SimpleNamespace(is_extend=lambda: self.extend)
        self.spec_algorithm = SimpleNamespace(is_none=lambda: True)
        self.return_logprob = False
        self.input_embeds = None
        self.is_prefill_only = False
        self.decoding_reqs = None
        self.mixed = 0
        self.prefill_stats = None
        self.contains_last_prefill_chunk = True
        self.hisparse_coordinator = None

    def is_empty(self):
        return not self.reqs

    def batch_size(self):
        return len(self.reqs)

    def filter_batch(self, reqs_to_exclude=None, keep_indices=None):
        if keep_indices is not None:
            self.reqs = [self.reqs[i] for i in keep_indices]
        exclude = set(map(id, reqs_to_exclude or []))
        self.reqs = [r for r in self.reqs if id(r) not in exclude and not r.finished()]

    def merge_batch(self, other):
        self.reqs.extend(other.reqs)

    def prepare_for_extend(self):
        pass

    def prepare_for_decode(self):
        self.extend = False

    def mix_with_running(self, running):
        self.mixed = len(running.reqs)
        self.reqs.extend(running.reqs)

    def retract_decode(self):
        raise Retracted

    def check_decode_mem(self, selected_indices=None):
        return _namespace()["_batch_methods"]["check_decode_mem"](self, selected_indices)

    def new_tokens_required_next_decode(self, selected_indices=None):
        return _namespace()["_batch_methods"]["new_tokens_required_next_decode"](self, selected_indices)


class RatioTracker:
    """`NewTokenRatioTracker` with SGLang's environment defaults."""

    def __init__(self):
        self.init = 0.7
        self.min = 0.7 * 0.14
        self.decay = (self.init - self.min) / 600
        self.current = self.init

    def decay_step(self):
        self.current = max(self.current - self.decay, self.min)

    def reset(self):
        self.current = self.init


@dataclasses.dataclass
class Outcome:
    forwards: list[list[int]]
    """Prefill forwards, extend lengths (mixed decode rows as trailing 1s, like cpbcg)."""
    retracted: bool
    """The run stopped at a retraction (forwards up to there)."""


class Scheduler:
    """A stub `Scheduler` running 0.5.23's methods on the state they read."""

    def __init__(self, *, pool_tokens, page_size, chunked_prefill_size, max_prefill_tokens, max_running_requests,
                 prefill_max_requests=None, enable_mixed_chunk=False):
        ns = _namespace()
        self.ns = ns
        self.page_size = page_size
        self.token_to_kv_pool_allocator = self.pool = Pool(pool_tokens, page_size, ns["PrefillBudget"])
        self.tree_cache = TreeCache()
        self.chunked_prefill_size = None if chunked_prefill_size == -1 else chunked_prefill_size
        self.max_prefill_tokens, self.max_running_requests = max_prefill_tokens, max_running_requests
        self.is_mixed_chunk = enable_mixed_chunk
        self.new_token_ratio_tracker = RatioTracker()
        self.waiting_queue: list[Req] = []
        self.chunked_req = None
        self.running_batch = Batch(pool=self.pool)
        self.last_batch = None
        self.req_to_token_pool = SimpleNamespace(available_size=self._free_rows)
        self.tp_worker = SimpleNamespace(model_runner=SimpleNamespace(attn_backend=object(), prefill_aware_swa=False))
        self.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
        self.policy = SimpleNamespace(calc_priority=lambda *a, **k: None, shortest_prefill_chunk_limit=lambda *a: None)
        self.load_inquirer = SimpleNamespace(_get_num_pending_tokens=lambda **k: 0)
        self.beam_coordinator = SimpleNamespace(pending_member_rows=lambda batch: 0)
        self.dp_attn_adapter = SimpleNamespace(maybe_prepare_mlp_sync_batch=lambda b, need_sync=False: b,
                                               maybe_convert_decode_to_extend=lambda b: b)
        self.ngram_embedding_manager = SimpleNamespace(prepare_for_forward=lambda b, chunked_req=None: b)
        for flag in ("enable_priority_preemption", "is_hybrid_swa", "enable_lora", "enable_hicache_storage",
                     "enable_lmcache", "enable_overlap", "enable_hierarchical_cache", "enable_hisparse",
                     "enable_unified_cache_external_linker", "enable_priority_scheduling", "require_mlp_sync",
                     "enable_skip_finishing_decode"):
            setattr(self, flag, False)
        self.dllm_config = self.min_free_slots_delayer = self.dynamic_chunk_sizer = self.prefill_delayer = None
        self.truncation_align_size = self.hisparse_coordinator = self.model_config = self.decode_offload_manager = None
        self.priority_scheduling_preemption_threshold = self.max_prefill_bs = self.forward_ct = 0
        self.spec_algorithm = SimpleNamespace(is_none=lambda: True)
        self.result_queue = self.processed_tokens_counter = None
        schedule = SimpleNamespace(prefill_max_requests=prefill_max_requests, schedule_policy="fcfs")
        ns["get_schedule"] = lambda: schedule
        ns["get_parallel"] = lambda: SimpleNamespace(pp_max_micro_batch_size=max_running_requests)
        ns["AddReqResult"] = ns["AddReqResult"]
        def schedule_batch(reqs=None, batch_is_full=False):
            return Batch(reqs, batch_is_full, pool=self.pool)

        schedule_batch.init_new = self._init_new
        ns["ScheduleBatch"] = schedule_batch
        ns["PrefillStats"] = SimpleNamespace(from_adder=lambda *a, **k: None)

    def __getattr__(self, name):
        method = self.ns["_scheduler_methods"].get(name)
        if method is None:
            if name.startswith(("process_", "_process", "_arm", "stash_", "_should_defer")):
                return (lambda *a, **k: False) if name == "_should_defer_prefill" else (lambda *a, **k: None)
            raise AttributeError(name)
        return method.__get__(self)

    def get_prefill_adder_class(self):
        return self.ns["PrefillAdder"]

    def _add_request_to_queue(self, req, is_retracted=False):
        self.waiting_queue.append(req)

    def _free_rows(self) -> int:
        held = sum(r.kv.holds_kv for r in self.running_batch.reqs) + (self.chunked_req is not None)
        return self.max_running_requests - held

    def _init_new(self, reqs, *args, chunked_req=None, **kwargs):
        return Batch(reqs, pool=self.pool, chunked_req=chunked_req, extend=True)

    def step(self) -> tuple[str, list[int], int]:
        """One turn of `event_loop_normal`: ('prefill', extend lens, mixed rows), ('decode', [], rows)
        or ('idle', [], 0). Runs the batch (KV, outputs) like `process_batch_result`."""
        plan = self.get_next_batch_to_run(running_batch=self.running_batch, last_batch=self.last_batch)
        self.running_batch = plan.running_batch
        batch = plan.batch_to_run
        self.last_batch = batch
        if batch is None:
            return "idle", [], 0
        pool = self.pool
        if batch.forward_mode.is_extend():
            prefill = batch.reqs[: len(batch.reqs) - batch.mixed]
            lens = [r.extend_len for r in prefill]
            for r in prefill:
                pool.grow(r, r.extend_end)
                if r is not self.chunked_req:
                    r.output_ids.append(0)
            for r in batch.reqs[len(prefill):]:
                pool.grow(r, r.kv.kv_committed_len + 1)
                r.output_ids.append(0)
            for r in batch.reqs:
                if r.finished():
                    pool.free(r)
            return "prefill", lens, batch.mixed
        for r in batch.reqs:
            pool.grow(r, r.kv.kv_committed_len + 1)
            r.output_ids.append(0)
        n = len(batch.reqs)
        for r in batch.reqs:
            if r.finished():
                pool.free(r)
        return "decode", [], n


def NextBatchPlan(batch_to_run, running_batch):  # noqa: N802 - SGLang's name
    return SimpleNamespace(batch_to_run=batch_to_run, running_batch=running_batch)


def run(requests, *, arrivals_s, pool_tokens, page_size=1, chunked_prefill_size=8192, max_prefill_tokens=16384,
        max_running_requests=4096, prefill_max_requests=None, enable_mixed_chunk=False,
        prefill_fixed_ms=5.0, prefill_tokens_per_s=40000.0, decode_fixed_ms=5.0, decode_ms_per_request=0.025,
        max_turns=200_000) -> Outcome:
    """0.5.23's forwards for `requests` [(input tokens, output tokens)] arriving at `arrivals_s`."""
    ns = _namespace()
    ns["NextBatchPlan"] = NextBatchPlan
    s = Scheduler(pool_tokens=pool_tokens, page_size=page_size, chunked_prefill_size=chunked_prefill_size,
                  max_prefill_tokens=max_prefill_tokens, max_running_requests=max_running_requests,
                  prefill_max_requests=prefill_max_requests, enable_mixed_chunk=enable_mixed_chunk)
    pending = [Req(i, a, b) for i, (a, b) in enumerate(requests)]
    times = list(arrivals_s)
    origin = times[0] if times else 0.0
    now = 0.0
    i = 0
    forwards: list[list[int]] = []
    for _ in range(max_turns):
        while i < len(pending) and times[i] - origin <= now:
            s.waiting_queue.append(pending[i])
            i += 1
        try:
            kind, lens, rows = s.step()
        except Retracted:
            return Outcome(forwards, True)
        if kind == "prefill":
            forwards.append(lens + [1] * rows)
            now += prefill_fixed_ms / 1000.0 + (sum(lens) + rows) / prefill_tokens_per_s
        elif kind == "decode":
            now += (decode_fixed_ms + decode_ms_per_request * rows) / 1000.0
        elif i < len(pending):
            if not s.waiting_queue and s.running_batch.is_empty():
                s.new_token_ratio_tracker.reset()
            now = max(now, times[i] - origin)
        else:
            if s.waiting_queue or s.chunked_req is not None:
                raise RuntimeError("oracle stuck: waiting requests that never fit")
            return Outcome(forwards, False)
    raise RuntimeError("oracle did not finish")
