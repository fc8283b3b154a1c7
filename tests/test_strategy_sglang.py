"""The strategy models against SGLang 0.5.23's own functions, executed from the released wheel:
`required_local_tokens` (both strategies, cp 1..8), `select_replay_bucket`, `min_capture_tokens`,
`C(B)` from `capture_prepare`'s capture layout, and the runner's bucket preparation
(`get_prefill_num_tokens_to_capture`, the CP filter, DeepEP's rounding)."""

from __future__ import annotations

import ast
import dataclasses
import logging
import sys
import types
import typing

import numpy as np
import pytest
import sglang_oracle
from sglang_oracle import definitions

from cpbcg.errors import ModelError
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec, local_capacity
from cpbcg.planner.model.layout import BatchSet, CPLayout, CPStrategy
from cpbcg.planner.model.selector import BucketTable, select_buckets

BCG = "sglang/srt/layers/cp/bcg/"
from sglang_oracle import sglang_source, sglang_wheel  # noqa: E402,F401 - fixtures (skip when the wheel cannot be had)
SEEDS = range(40)


class _Parallel:
    def __init__(self, cp: int):
        self.attn_cp_size, self.cp_size, self.attn_tp_size = cp, cp, 1


def _inputs(sglang_source, cp: int, monkeypatch) -> dict:
    """`{strategy: 0.5.23's CP BCG input class}` for `cp` ranks (`bcg.py` + `{zigzag,interleave}_bcg.py`)."""
    parallel, zigzag = _Parallel(cp), {"on": True}
    base = types.ModuleType("sglang.srt.layers.cp.base")
    base.is_zigzag = lambda: zigzag["on"]  # get_cp_padding_align_size imports it at call time
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.cp.base", base)
    ns: dict = {"get_parallel": lambda: parallel, "get_cp_strategy": lambda: parallel}
    definitions("sglang/srt/layers/cp/padding.py", ["get_cp_padding_align_size"], ns)
    ns.update(dataclass=dataclasses.dataclass, field=dataclasses.field, Any=typing.Any, Dict=typing.Dict, Optional=typing.Optional)
    definitions(BCG + "bcg.py", ["PrefillCPBCGInput"], ns)
    definitions(BCG + "zigzag_bcg.py", ["ZigzagCPBCGInput"], ns)
    definitions(BCG + "interleave_bcg.py", ["InterleaveCPBCGInput"], ns)

    def make(cls, is_zigzag):
        obj = cls(input_embeds=None, positions=None)
        return obj, lambda: zigzag.__setitem__("on", is_zigzag)

    return {CPStrategy.zigzag: make(ns["ZigzagCPBCGInput"], True), CPStrategy.interleave: make(ns["InterleaveCPBCGInput"], False)}


def _random_batches(rng, count: int) -> list[list[int]]:
    return [[int(x) for x in rng.integers(1, rng.choice([40, 600, 5000]), size=rng.integers(1, 9))] for _ in range(count)]


@pytest.mark.parametrize("cp", range(2, 9))
def test_rows_and_min_capture_tokens_match_sglang(sglang_source, cp, monkeypatch):
    rng = np.random.default_rng(cp)
    inputs = _inputs(sglang_source, cp, monkeypatch)
    batches = _random_batches(rng, 300)
    for strategy, (oracle, use) in inputs.items():
        use()
        layout = CPLayout(cp, strategy)
        want = [oracle.required_local_tokens(b) for b in batches]
        assert layout.model.rows(BatchSet.from_lists(batches)).tolist() == want
        assert [layout.model.rows_of(b) for b in batches] == want
        assert layout.model.min_capture_tokens == type(oracle).min_capture_tokens(cp)


def test_cp1_is_no_cp():
    # 0.5.23 captures no CP graph at cp 1; plain prefill graphs: rows are tokens, every size kept
    model = CPLayout(1).model
    assert model.rows(BatchSet.from_lists([[3, 5], [1]])).tolist() == [8, 1]
    assert model.min_capture_tokens == 1 and model.prepare_buckets([5, 3, 5]).capture_num_tokens == (3, 5)


@pytest.mark.parametrize("seed", SEEDS)
def test_select_replay_bucket_matches_sglang(sglang_source, seed, monkeypatch):
    rng = np.random.default_rng(seed)
    cp = int(rng.integers(2, 9))
    strategy = [CPStrategy.zigzag, CPStrategy.interleave][seed % 2]
    oracle, use = _inputs(sglang_source, cp, monkeypatch)[strategy]
    use()
    layout = CPLayout(cp, strategy)
    buckets = sorted({int(b) for b in rng.integers(1, 3000, size=rng.integers(1, 12))} | {4096})
    table = BucketTable.build(buckets, layout)
    oracle.bucket_local_tokens = table.as_dict()
    batches = _random_batches(rng, 200)
    bs = BatchSet.from_lists(batches)
    sel = select_buckets(bs.num_tokens, layout.model.rows(bs), layout.model.active(bs), table, 2.0)
    for i, lens in enumerate(batches):
        if not layout.model.active(BatchSet.from_lists([lens]))[0]:
            continue
        want = oracle.select_replay_bucket_for_batch(num_tokens=sum(lens), extend_seq_lens=lens,
                                                     capture_num_tokens=table.capture_num_tokens.tolist(), max_padding_factor=2)
        assert (int(sel.bucket_tokens[i]) or None) == want, lens


def _capture_seq_lens(sglang_source):
    """0.5.23 `PrefillCudaGraphRunner.capture_prepare`'s capture layout (its `capture_seq_lens`
    expression and its request-slot assertion), evaluated on their own."""
    tree = ast.parse(sglang_source("sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py"))
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "capture_prepare"
                  and any(isinstance(a, ast.Assign) and getattr(a.targets[0], "id", "") == "capture_seq_lens" for a in ast.walk(n)))
    expr = next(a.value for a in ast.walk(method) if isinstance(a, ast.Assign) and getattr(a.targets[0], "id", "") == "capture_seq_lens")
    check = next(a.test for a in ast.walk(method) if isinstance(a, ast.Assert) and "max_bs" in ast.unparse(a.test))
    lens, fits = compile(ast.Expression(expr), "capture_seq_lens", "eval"), compile(ast.Expression(check), "assert", "eval")

    def layout(num_tokens: int, context_length: int, max_bs: int) -> list[int] | None:
        seq = eval(lens, {"min": min, "range": range, "num_tokens": num_tokens, "context_length": context_length})
        ok = eval(fits, {"len": len, "bs": len(seq), "self": types.SimpleNamespace(max_bs=max_bs)})
        return seq if ok else None

    return layout


@pytest.mark.parametrize("seed", range(12))
def test_capacity_of_both_capture_layouts_matches_sglang(sglang_source, seed, monkeypatch):
    rng = np.random.default_rng(100 + seed)
    cp = int(rng.integers(2, 9))
    strategy = [CPStrategy.zigzag, CPStrategy.interleave][seed % 2]
    oracle, use = _inputs(sglang_source, cp, monkeypatch)[strategy]
    use()
    layout, capture = CPLayout(cp, strategy), _capture_seq_lens(sglang_source)
    sizes = sorted({int(b) for b in rng.integers(2 * cp, 5000, size=60)})
    ctx, slots = int(rng.integers(2 * cp, 900)), int(rng.integers(1, 12))
    assert local_capacity(sizes, layout).tolist() == [oracle.required_local_tokens(capture(b, 10**9, 1)) for b in sizes]
    spec = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=ctx, max_capture_requests=slots)
    for b in sizes:
        pieces = capture(b, ctx, slots)
        if pieces is None:  # 0.5.23 asserts: more requests than slots
            with pytest.raises(ModelError, match="max_capture_requests"):
                local_capacity([b], layout, spec)
        elif min(pieces) >= layout.model.min_request_tokens:
            assert int(local_capacity([b], layout, spec)[0]) == oracle.required_local_tokens(pieces)


def _prepare(sglang_source, cp: int, strategy: CPStrategy, monkeypatch, deepep: bool = False):
    """0.5.23's bucket preparation: `apply_deepep_adjustments` (with DeepEP), then the runner's
    `get_prefill_num_tokens_to_capture` and `filter_prefill_cp_bcg_capture_num_tokens`."""
    parallel = _Parallel(cp)
    ns: dict = {"get_parallel": lambda: parallel, "is_hip": lambda: False, "require_gathered_buffer": lambda: False,
                "get_exec": lambda: types.SimpleNamespace(overlap=types.SimpleNamespace(enable_two_batch_overlap=False)),
                "Optional": typing.Optional, "Sequence": typing.Sequence}
    definitions("sglang/srt/utils/common.py", ["ceil_div", "ceil_align", "get_cuda_graph_batch_size_alignment", "get_cuda_graph_max_batch_size"], ns)
    definitions("sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py", ["get_prefill_num_tokens_to_capture"], ns)
    cls = _inputs(sglang_source, cp, monkeypatch)[strategy][0].__class__
    bcg = types.ModuleType("sglang.srt.layers.cp.bcg")
    bcg.get_cp_bcg_input_type = lambda kind: cls
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.cp.bcg", bcg)
    view = types.SimpleNamespace(cp_strategy=strategy.value, attn_cp_size=cp, moe_a2a_backend="deepep")
    ns.update(resolving_view=lambda args: args, resolved_view=lambda args: view,
              ContextParallelStrategyKind=types.SimpleNamespace(from_string=lambda s: s))
    definitions(BCG + "bcg.py", ["filter_prefill_cp_bcg_capture_num_tokens"], ns)
    hook: dict = {"logger": logging.getLogger("sglang-oracle"), "Backend": types.SimpleNamespace(BREAKABLE="breakable"),
                  "Phase": types.SimpleNamespace(PREFILL="prefill")}
    definitions("sglang/srt/arg_groups/cuda_graph_hook.py", ["apply_deepep_adjustments", "generate_prefill_cuda_graph_batch_sizes"], hook)

    def prepare(configured: list[int]) -> list[int]:
        bs = list(configured)
        if deepep:
            declared: dict = {}
            graph = types.SimpleNamespace(prefill=types.SimpleNamespace(backend="breakable", bs=bs, max_bs=max(bs)))
            args = types.SimpleNamespace(cuda_graph_config=graph, moe_a2a_backend="deepep")
            hook.update(resolving_view=lambda a: a, resolved_view=lambda a: a,
                        with_phase=lambda cfg, phase, **kw: kw, declare_resolution=lambda a, who, cuda_graph_config: declared.update(cuda_graph_config))
            hook["apply_deepep_adjustments"](args)
            bs = declared.get("bs", bs)
        captured = ns["get_prefill_num_tokens_to_capture"](bs)
        return ns["filter_prefill_cp_bcg_capture_num_tokens"](captured, types.SimpleNamespace(cp_strategy=strategy.value)) if cp > 1 else captured

    return prepare


@pytest.mark.parametrize("seed", SEEDS)
def test_bucket_preparation_matches_sglang(sglang_source, seed, monkeypatch):
    rng = np.random.default_rng(200 + seed)
    cp = int(rng.integers(1, 9))
    strategy, deepep = [CPStrategy.zigzag, CPStrategy.interleave][seed % 2], seed % 3 == 0
    prepare = _prepare(sglang_source, cp, strategy, monkeypatch, deepep)
    for _ in range(20):
        configured = [int(b) for b in rng.integers(1, rng.choice([24, 300, 9000]), size=rng.integers(1, 15))]
        model = CPLayout(cp, strategy).model
        try:
            want = prepare(configured)
        except ValueError:  # 0.5.23: no bucket >= min_capture_tokens
            with pytest.raises(ModelError, match="nothing to capture"):
                model.prepare_buckets(configured, deepep)
            continue
        assert list(model.prepare_buckets(configured, deepep).capture_num_tokens) == want


def test_issue_values_against_sglang(sglang_source, monkeypatch):
    prepare = _prepare(sglang_source, 8, CPStrategy.zigzag, monkeypatch)
    assert prepare([16, 20]) == [16, 24] == list(CPLayout(8).model.prepare_buckets([16, 20]).capture_num_tokens)
    default = sglang_default_buckets(2048)
    assert list(CPLayout(8).model.prepare_buckets(default).capture_num_tokens) == prepare(default)
    interleave = _prepare(sglang_source, 8, CPStrategy.interleave, monkeypatch)
    assert list(CPLayout(8, CPStrategy.interleave).model.prepare_buckets(default).capture_num_tokens) == interleave(default)


@pytest.mark.parametrize("max_bs", [2048, 3000, 4096, 8192, 16384])
def test_default_list_matches_sglang(sglang_source, max_bs):
    ns = definitions("sglang/srt/arg_groups/cuda_graph_hook.py", ["generate_prefill_cuda_graph_batch_sizes"], {})
    assert sglang_default_buckets(max_bs) == ns["generate_prefill_cuda_graph_batch_sizes"](max_bs)
