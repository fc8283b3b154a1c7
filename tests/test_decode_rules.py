"""SGLang 0.5.23's decode CUDA-graph rules (`cpbcg.engines.sglang.decode`), judged by the wheel's own code.

The released functions run under small stubs (tests/sglang_oracle.py) against cpbcg's restatements
on random settings (hypothesis): the default list and its speculative / no-padding ladders, the
default `max_bs` by GPU memory and TP with its lowering to `--max-running-requests`, the capture
filter (alignment drop, request-pool clamp) and the replay pad-up. Plus hand-worked cases.
"""

from __future__ import annotations

import bisect
import copy
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis_sizes import examples

from cpbcg.engines.sglang.decode import (
    decode_batch_size_alignment,
    decode_batch_sizes_to_capture,
    decode_cuda_graph_batch_sizes,
    decode_graph_list,
    decode_replay_sizes,
)
from sglang_oracle import definitions, sglang_wheel  # noqa: F401 - fixture

HOOK = "sglang/srt/arg_groups/cuda_graph_hook.py"
MEMORY = "sglang/srt/arg_groups/memory_hook.py"
RUNNER = "sglang/srt/model_executor/runner/base_cuda_graph_runner.py"
COMMON = "sglang/srt/utils/common.py"
FAST = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _view(args):
    return args


@pytest.fixture(scope="module")
def oracle(sglang_wheel):  # noqa: F811 - the fixture
    """0.5.23's functions, executed from the wheel under stubs."""
    ns: dict = {"resolving_view": _view, "resolved_view": _view, "Any": object}
    definitions(HOOK, ["generate_decode_cuda_graph_batch_sizes", "generate_prefill_cuda_graph_batch_sizes",
                       "generate_cpu_graph_batch_sizes"], ns)
    return ns


def wheel_list(oracle, max_bs: int, speculative: bool, no_padding: bool) -> list[int]:
    args = SimpleNamespace(disable_cuda_graph_padding=no_padding, speculative_algorithm="EAGLE" if speculative else None)
    return oracle["generate_decode_cuda_graph_batch_sizes"](args, max_bs)


@FAST
@given(max_bs=st.integers(1, 1200), speculative=st.booleans(), no_padding=st.booleans())
def test_decode_list_matches_the_wheel(oracle, max_bs, speculative, no_padding):
    assert decode_cuda_graph_batch_sizes(max_bs, speculative=speculative, disable_padding=no_padding) == \
        wheel_list(oracle, max_bs, speculative, no_padding)


def test_decode_list_hand_worked():
    assert decode_cuda_graph_batch_sizes(20) == [1, 2, 4, 8, 12, 16, 20]
    default = decode_cuda_graph_batch_sizes(512)
    assert default[:6] == [1, 2, 4, 8, 12, 16] and 496 in default and 504 not in default and default[-1] == 512
    assert decode_cuda_graph_batch_sizes(600)[-4:] == [512, 544, 576, 600]
    assert decode_cuda_graph_batch_sizes(9, speculative=True) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert decode_cuda_graph_batch_sizes(5, speculative=True, disable_padding=True) == [1, 2, 3, 4, 5]


@pytest.fixture
def memory_oracle(oracle, monkeypatch):
    """0.5.23's `handle_gpu_memory_settings` with the GPU memory stubbed: returns a function of the
    settings giving the decode (bs, max_bs) it resolves."""
    hook = types.ModuleType("sglang.srt.arg_groups.cuda_graph_hook")
    for name in ("generate_decode_cuda_graph_batch_sizes", "generate_prefill_cuda_graph_batch_sizes", "generate_cpu_graph_batch_sizes"):
        setattr(hook, name, oracle[name])
    vl = types.ModuleType("sglang.srt.arg_groups.model_overrides.qwen3_vl")
    vl.expand_multimodal_decode_graph_to_running_limit = lambda *a: None  # not modelled (Qwen3-VL only)
    for name in ("sglang", "sglang.srt", "sglang.srt.arg_groups", "sglang.srt.arg_groups.model_overrides"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.arg_groups.cuda_graph_hook", hook)
    monkeypatch.setitem(sys.modules, "sglang.srt.arg_groups.model_overrides.qwen3_vl", vl)

    gpu = {"mib": None}
    ns: dict = {"resolving_view": _view, "resolved_view": _view, "copy": copy, "Any": object,
                "get_device_memory_capacity": lambda device: gpu["mib"], "use_mla_backend": lambda a: False,
                "Phase": SimpleNamespace(PREFILL="prefill", DECODE="decode"), "Backend": SimpleNamespace(BREAKABLE="b"),
                "_DEFAULT_PP_PREFILL_CUDA_GRAPH_MAX_TOKENS": 8192,
                "declare_resolution": lambda args, rule, **kw: [setattr(args, k, v) for k, v in kw.items()]}
    definitions(MEMORY, ["handle_gpu_memory_settings"], ns)

    def run(gpu_mib, tp, max_bs, bs, max_running, speculative):
        gpu["mib"] = gpu_mib
        graphs = SimpleNamespace(decode=SimpleNamespace(max_bs=max_bs, bs=None if bs is None else list(bs)),
                                 prefill=SimpleNamespace(max_bs=8192, bs=[8192], backend="b"))
        args = SimpleNamespace(device="cuda", cuda_graph_config=graphs, chunked_prefill_size=8192, tp_size=tp, pp_size=1,
                               max_running_requests=max_running, max_total_tokens=None, model_path="m",
                               mem_fraction_static=0.8, enable_symm_mem=False, disable_cuda_graph_padding=False,
                               speculative_algorithm="EAGLE" if speculative else None, _cuda_graph_config_locked=set())
        ns["handle_gpu_memory_settings"](args)
        decode = args.cuda_graph_config.decode
        return list(decode.bs), decode.max_bs

    return run


GPU_MIB = st.sampled_from([None, 15360, 24576, 32607, 40960, 49152, 81559, 97871, 143771, 183359, 196608])


@FAST
@given(gpu=GPU_MIB, tp=st.sampled_from([1, 2, 4, 8]), max_bs=st.one_of(st.none(), st.integers(1, 700)),
       bs=st.one_of(st.none(), st.lists(st.integers(1, 600), min_size=1, max_size=12)),
       max_running=st.one_of(st.none(), st.integers(1, 1024)), speculative=st.booleans())
def test_decode_max_bs_and_list_match_the_wheel(memory_oracle, gpu, tp, max_bs, bs, max_running, speculative):
    mine = decode_graph_list(gpu_memory_mib=gpu, tp_size=tp, max_bs=max_bs, bs=bs, max_running_requests=max_running,
                             speculative=speculative)
    assert (list(mine.bs), mine.max_bs) == memory_oracle(gpu, tp, max_bs, bs, max_running, speculative)


def test_decode_max_bs_hand_worked():
    h100, h200 = 81559, 143771
    assert decode_graph_list(gpu_memory_mib=h100, tp_size=1).max_bs == 256
    assert decode_graph_list(gpu_memory_mib=h200, tp_size=8).max_bs == 512
    assert decode_graph_list(gpu_memory_mib=h100, tp_size=1, max_running_requests=48).max_bs == 48  # default lowered
    assert decode_graph_list(gpu_memory_mib=h100, tp_size=1, max_bs=300, max_running_requests=48).max_bs == 300  # given: kept
    assert decode_graph_list(gpu_memory_mib=None, tp_size=1).max_bs == 160
    assert decode_graph_list(gpu_memory_mib=h100, tp_size=1, bs=[4, 64, 8]).max_bs == 64


@pytest.fixture
def capture_oracle(sglang_wheel):  # noqa: F811 - the fixture
    """0.5.23's `get_batch_sizes_to_capture` with its `get_cuda_graph_batch_size_alignment`."""

    state: dict = {}
    ns: dict = {"get_exec": lambda: state["exec"], "get_parallel": lambda: state["parallel"], "is_hip": lambda: False,
                "require_gathered_buffer": lambda: state["gathered"],
                "get_flags": lambda: SimpleNamespace(capture=SimpleNamespace(enable_torch_compile=False)),
                "DllmConfig": SimpleNamespace(from_server_args=lambda a: None), "Optional": object}
    definitions(COMMON, ["ceil_div", "ceil_align", "get_cuda_graph_batch_size_alignment"], ns)
    definitions(RUNNER, ["get_batch_sizes_to_capture"], ns)

    def run(bs, pool, tbo, gathered, attn_tp, attn_cp, width):
        state["exec"] = SimpleNamespace(graph=SimpleNamespace(cuda_graph_config=SimpleNamespace(decode=SimpleNamespace(bs=list(bs))),
                                                              torch_compile_max_bs=32),
                                        overlap=SimpleNamespace(enable_two_batch_overlap=tbo))
        state["parallel"], state["gathered"] = SimpleNamespace(attn_tp_size=attn_tp, attn_cp_size=attn_cp), gathered
        runner = SimpleNamespace(req_to_token_pool=SimpleNamespace(size=pool), server_args=None)
        try:
            return ns["get_batch_sizes_to_capture"](runner, width, gathered_buffer_required=gathered)[0]
        except AssertionError:
            return None

    return run


@FAST
@given(bs=st.lists(st.integers(1, 600), min_size=1, max_size=40), pool=st.integers(1, 700), tbo=st.booleans(),
       gathered=st.booleans(), attn_tp=st.sampled_from([1, 2, 4, 8]), attn_cp=st.sampled_from([1, 2, 3, 4, 8]),
       width=st.sampled_from([1, 1, 2, 3, 4]))
def test_decode_capture_filter_matches_the_wheel(capture_oracle, bs, pool, tbo, gathered, attn_tp, attn_cp, width):
    alignment = decode_batch_size_alignment(two_batch_overlap=tbo, gathered_buffer=gathered, attn_tp_size=attn_tp, attn_cp_size=attn_cp)
    try:
        mine = decode_batch_sizes_to_capture(bs, pool, alignment=alignment, captured_req_width=width, two_batch_overlap=tbo)
    except ValueError:
        mine = None
    assert mine == capture_oracle(bs, pool, tbo, gathered, attn_tp, attn_cp, width)


def test_decode_capture_filter_hand_worked():
    # DP attention with attention TP 4 (gathered buffers): the operator's 1 and 2 vanish
    alignment = decode_batch_size_alignment(gathered_buffer=True, attn_tp_size=4)
    assert alignment == 4
    assert decode_batch_sizes_to_capture([1, 2, 4, 8, 12], 64, alignment=alignment) == [4, 8, 12]
    # the request pool clamps the list and is added (rounded up to the alignment)
    assert decode_batch_sizes_to_capture(decode_cuda_graph_batch_sizes(256), 30, alignment=4) == [4, 8, 12, 16, 24, 32]
    assert decode_batch_size_alignment(attn_cp_size=4) == 4 and decode_batch_size_alignment(two_batch_overlap=True, attn_cp_size=2) == 2


@pytest.fixture(scope="module")
def pad_to_bucket(sglang_wheel):  # noqa: F811 - the fixture
    """0.5.23's `BaseCudaGraphRunner._pad_to_bucket`."""
    return definitions(RUNNER, ["BaseCudaGraphRunner._pad_to_bucket"], {"bisect": bisect})["_pad_to_bucket"]


@FAST
@given(captured=st.lists(st.integers(1, 600), min_size=1, max_size=30, unique=True), sizes=st.lists(st.integers(1, 700), min_size=1, max_size=50))
def test_decode_replay_matches_the_wheel(pad_to_bucket, captured, sizes):
    ns = {"_pad_to_bucket": pad_to_bucket}
    table = sorted(captured)
    max_bs = max(table)  # can_run_graph: bs <= max_bs, else eager; then _pad_to_bucket
    expected = [ns["_pad_to_bucket"](s, table) if s <= max_bs else 0 for s in sizes]
    assert decode_replay_sizes(np.array(sizes), captured).tolist() == expected


def test_decode_replay_hand_worked():
    captured = decode_cuda_graph_batch_sizes(160)
    assert decode_replay_sizes(np.array([1, 3, 13, 160, 161]), captured).tolist() == [1, 4, 16, 160, 0]
