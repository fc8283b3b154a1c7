"""The strategy models (`cpbcg.planner.model.strategy`): one rule per mode, every caller on it."""

from __future__ import annotations

import orjson
import numpy as np
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.errors import ModelError
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec, capture_pieces, local_capacity
from cpbcg.planner.model.layout import BatchSet, CPLayout, CPStrategy
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.model.strategy import Interleave, NoCP, Zigzag, strategy_model
from cpbcg.planner.optimise.grid import candidate_grid

runner = CliRunner()


def test_one_model_per_mode():
    assert isinstance(CPLayout(1).model, NoCP) and isinstance(CPLayout(1, CPStrategy.interleave).model, NoCP)
    assert isinstance(CPLayout(4).model, Zigzag) and isinstance(CPLayout(4, CPStrategy.interleave).model, Interleave)
    assert [CPLayout(4, s).model.min_capture_tokens for s in CPStrategy] == [8, 4]  # 0.5.23: 2*cp zigzag, cp interleave
    assert strategy_model(4, CPStrategy.zigzag, None) is CPLayout(4).model  # cached
    assert (CPLayout(4).align_rows, CPLayout(4, CPStrategy.interleave).align_rows, CPLayout(4, align_size=3).align_rows) == (8, 4, 3)


def test_zigzag_rule_vectorised_scalar_and_capacity_agree():
    # [1534, 161, 353], cp 4: per rank [513, 511, 512, 512] -> 520 rows (domain §2)
    cp = CPLayout(4)
    batch = BatchSet.from_lists([[1534, 161, 353]])
    assert cp.model.local_tokens(batch).tolist() == [[513, 511, 512, 512]]
    assert cp.model.rows(batch).tolist() == [520] and cp.model.rows_of([1534, 161, 353]) == 520
    assert local_capacity([2048, 2304, 2560, 2100], cp).tolist() == [512, 576, 640, 528]
    rng = np.random.default_rng(7)
    for size in (2, 3, 5, 8):
        layout = CPLayout(size)
        batches = [[int(x) for x in rng.integers(1, 300, size=rng.integers(1, 6))] for _ in range(200)]
        assert layout.model.rows(BatchSet.from_lists(batches)).tolist() == [layout.model.rows_of(b) for b in batches]
        sizes = np.arange(1, 400)
        assert layout.model.capacity_rows(sizes, CaptureSpec())[1].tolist() == [layout.model.rows_of([int(b)]) for b in sizes]


def test_capture_pieces_request_slot_boundary():
    # 2500 tokens, pieces of <= 1000: three requests. Three slots are enough (0.5.23 asserts
    # `bs <= max_bs`); two are not. Vectorised (grid) and scalar agree on the boundary.
    cp = CPLayout(4)
    exact = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=1000, max_capture_requests=3)
    assert capture_pieces(2500, cp, exact) == [1000, 1000, 500]
    assert local_capacity([2500], cp, exact).tolist() == [632]
    assert candidate_grid(cp, exact, 3000).sizes.max() == 3000
    short = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=1000, max_capture_requests=2)
    with pytest.raises(ModelError, match="needs 3 requests"):
        capture_pieces(2500, cp, short)
    assert candidate_grid(cp, short, 3000).sizes.max() == 2000


def test_buckets_rounded_as_sglang_captures_them():
    # issue 20: cp 8 zigzag, --cuda-graph-bs-prefill 16 20 -> captured [16, 24]
    table = BucketTable.build([16, 20], CPLayout(8), CaptureSpec(engine="SGLang 0.5.23"))
    assert table.capture_num_tokens.tolist() == [16, 24]
    assert table.note == "SGLang 0.5.23 captures [16, 24]: rounded up to multiples of 8: 20 -> 24"
    default = CPLayout(8).model.prepare_buckets(sglang_default_buckets(2048))
    assert (20, 24) in default.rounded and (28, 32) in default.rounded
    assert default.capture_num_tokens[:4] == (16, 24, 32, 48)  # 4, 8 dropped (< 16); 12 -> 16 merged with 16
    interleave = CPLayout(8, CPStrategy.interleave).model.prepare_buckets(sglang_default_buckets(2048))
    assert (12, 16) in interleave.rounded and interleave.capture_num_tokens[:3] == (8, 16, 24)
    assert CPLayout(8).model.prepare_buckets([16, 24, 4096]).note is None  # captured as given: no note
    assert CPLayout(4).model.prepare_buckets([5, 9], deepep=True).capture_num_tokens == (8, 16)
    with pytest.raises(ModelError, match="2\\*cp_size=8; nothing to capture"):
        CPLayout(4).model.prepare_buckets([1, 4])


def test_layout_command_replays_in_the_rounded_bucket():
    result = runner.invoke(app, ["layout", "--cp-size", "8", "--buckets", "16,20", "18", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["bucket"] == 24 and doc["bucket_note"].endswith("20 -> 24")


def test_interleave_include_below_cp_is_one_list_everywhere():
    # issue 19: the recommendation, its evaluation and the deploy flags were [2, 6, ...],
    # [6, ...] and `2 6 ...`; 0.5.23 captures 2 at cp 4 as 4 (interleave min_capture_tokens = cp).
    result = runner.invoke(app, ["plan", "--cp-strategy", "interleave", "--cp-size", "4", "--include", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    rec = orjson.loads(result.stdout)["recommendation"]
    assert rec["buckets"][0] == 4 and all(b % 4 == 0 for b in rec["buckets"])
    assert rec["evaluation"]["buckets"] == rec["buckets"]
    assert rec["deploy"].split("--cuda-graph-bs-prefill ")[1].split()[: len(rec["buckets"])] == [str(b) for b in rec["buckets"]]


def test_planner_exports_load():
    import cpbcg.planner as planner

    assert planner.strategy_model is strategy_model and planner.CPLayout is CPLayout  # every name resolves
    assert all(getattr(planner, name) is not None for name in planner.__all__)


def test_server_flags_and_capture_emulation_are_the_models():
    """The CP server flags (`plan --emit sglang`, `Deployment.server_check`) and whether capture
    can emulate a mode are each written once: the flags by the engine's export (`mode_flags`), emulation by the strategy model."""
    from cpbcg.engines.sglang.export import cp_flags, mode_flags
    from cpbcg.planner.model.layout import CPLayout
    from cpbcg.engines.sglang.startup import check_flag_words

    assert mode_flags(CPLayout(1)) == []
    assert cp_flags(CPLayout(1)) == []
    assert mode_flags(CPLayout(4, CPStrategy.zigzag)) == [
        "--enable-prefill-cp", "--attn-cp-size", "4", "--tp-size", "4", "--cp-strategy", "zigzag",
        "--prefill-attention-backend", "trtllm_mha"]
    assert cp_flags(CPLayout(8, CPStrategy.interleave)) == [
        "--enable-prefill-cp", "--attn-cp-size", "8", "--tp-size", "8", "--cp-strategy", "interleave",
        "--prefill-attention-backend", "dsa"]
    for strategy in CPStrategy:
        assert check_flag_words(mode_flags(CPLayout(2, strategy))).refuses_start == []
    assert [strategy_model(cp, s).capture_emulated for cp, s in ((1, CPStrategy.zigzag), (4, CPStrategy.zigzag), (4, CPStrategy.interleave))] == [False, True, False]


def test_bucket_note_names_the_dropped_buckets_not_a_count():
    from cpbcg.planner.model.strategy import PreparedBuckets

    one = PreparedBuckets((4, 8, 16), (8, 16), (), (4,), 4, 8)
    assert one.note is not None and one.note.endswith(": dropped bucket 4 (below min_capture_tokens 8)")
    three = PreparedBuckets((2, 4, 6, 8), (8,), (), (2, 4, 6), 2, 8)
    assert three.note is not None and three.note.endswith(": dropped 3 buckets: 2, 4, 6 (below min_capture_tokens 8)")


def test_the_capture_note_names_the_release_the_engine_hands_the_core():
    # the core holds no copy of the release: the note names `CaptureSpec.engine`, which the config
    # sets from the engine (`release.RELEASE`, the seam's `EngineRules.release`); a hand-built one names none
    from cpbcg.config import load_config
    from cpbcg.engines.sglang.export import RULES
    from cpbcg.engines.sglang.release import SGLANG_VERSION

    deployment = load_config(None, {"cp_size": 8, "buckets": "16,20"}).to_deployment()
    assert deployment.capture.engine == RULES.release == f"SGLang {SGLANG_VERSION}"
    assert deployment.table().note == f"SGLang {SGLANG_VERSION} captures [16, 24]: rounded up to multiples of 8: 20 -> 24"
    assert BucketTable.build([16, 20], CPLayout(8)).note == "the engine captures [16, 24]: rounded up to multiples of 8: 20 -> 24"
