"""Zigzag sharding in torch agrees with the planner, round-trips, and CP attention is exact."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from cpbcg.graph_capture.comm import EmulatedGroup  # noqa: E402
from cpbcg.graph_capture.forward import cp_forward  # noqa: E402
from cpbcg.graph_capture.model import build_model, causal_attention_by_request, expand_kv, piece, reference_forward  # noqa: E402
from cpbcg.graph_capture.presets import load_model_preset  # noqa: E402
from cpbcg.graph_capture.zigzag import cp_attention, dense_cp_attention, plan_zigzag, shard, unshard  # noqa: E402
from cpbcg.errors import CaptureError  # noqa: E402
from cpbcg.planner.model.layout import BatchSet, CPLayout, local_rows, local_tokens, zigzag_blocks  # noqa: E402

CPU = torch.device("cpu")
BATCHES = [[1534, 161, 353], [16], [9, 9, 9, 40], [17, 23, 100]]


@pytest.mark.parametrize("lens", BATCHES)
@pytest.mark.parametrize("cp", [2, 4])
def test_plan_matches_planner_layout(lens, cp):
    layout = CPLayout(cp)
    rows = int(local_rows(BatchSet.from_lists([lens]), layout)[0])
    plan = plan_zigzag(lens, cp, rows, CPU)
    assert plan.logical_tokens() == local_tokens(BatchSet.from_lists([lens]), layout)[0].tolist()
    # rank r holds block r then block 2cp-1-r of every request, requests in order
    offset, expected = 0, [[] for _ in range(cp)]
    for length in lens:
        blocks = zigzag_blocks(length, cp)
        starts = [offset + sum(blocks.block_tokens[:j]) for j in range(2 * cp)]
        for r, (a, b) in enumerate(blocks.rank_blocks):
            for j in (a, b):
                expected[r] += list(range(starts[j], starts[j] + blocks.block_tokens[j]))
        offset += length
    for r in range(cp):
        got = plan.token_index[r][plan.token_index[r] >= 0].tolist()
        assert got == expected[r]


def test_rescued_batch_rows_and_padding():
    plan = plan_zigzag([1534, 161, 353], 4, 576, CPU)
    assert plan.logical_tokens() == [513, 511, 512, 512]
    assert (~plan.valid).sum(dim=1).tolist() == [63, 65, 64, 64]


def test_shard_unshard_round_trip_and_junk_padding():
    lens = [1534, 161, 353]
    x = torch.randn(sum(lens), 8)
    plan = plan_zigzag(lens, 4, 520, CPU)
    local = shard(x, plan)
    assert local.shape == (4, 520, 8)
    assert torch.equal(unshard(local, plan), x)
    assert torch.equal(unshard(local.flatten(0, 1), plan), x)
    assert (local[~plan.valid].abs().sum(dim=1) > 0).all()  # padding is junk, not zeros


def test_plan_never_truncates():
    with pytest.raises(CaptureError, match="needs 513 rows on one CP rank, only 512"):
        plan_zigzag([1534, 161, 353], 4, 512, CPU)


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_attention_equals_full_causal_attention(cp):
    torch.manual_seed(0)
    lens, heads, kv_heads, dim = [37, 16, 61], 4, 2, 8
    n = sum(lens)
    q, k, v = torch.randn(n, heads, dim), torch.randn(n, kv_heads, dim), torch.randn(n, kv_heads, dim)
    plan = plan_zigzag(lens, cp, 64, CPU)
    flat = lambda t: shard(t.reshape(n, -1), plan)  # noqa: E731
    ql, kl, vl = flat(q).view(cp, 64, heads, dim), flat(k).view(cp, 64, kv_heads, dim), flat(v).view(cp, 64, kv_heads, dim)
    k_all, v_all = kl.flatten(0, 1), vl.flatten(0, 1)
    out = torch.stack([cp_attention(ql[r], k_all, v_all, plan, r) for r in range(cp)])
    assert torch.isfinite(out).all()  # padding queries stay finite
    got = unshard(out, plan)
    want, start = [], 0
    for length in lens:
        sl = slice(start, start + length)
        o = F.scaled_dot_product_attention(q[sl].transpose(0, 1), expand_kv(k[sl], heads).transpose(0, 1),
                                           expand_kv(v[sl], heads).transpose(0, 1), is_causal=True)
        want.append(o.transpose(0, 1).reshape(length, -1))
        start += length
    torch.testing.assert_close(got, torch.cat(want), atol=1e-5, rtol=1e-5)


def test_cp_forward_equals_unsharded_reference():
    model = build_model(load_model_preset("tiny"), 2, seed=3, device=CPU, dtype=torch.float32)
    lens = [1534, 161, 353]
    x = torch.randn(sum(lens), 64)
    plan = plan_zigzag(lens, 4, 576, CPU)
    pieces = [piece(model, k) for k in range(model.num_pieces)]
    run = lambda k, x, attn: pieces[k](x, attn)  # noqa: E731
    out = unshard(cp_forward(run, model, EmulatedGroup(4), plan, shard(x, plan)), plan)
    torch.testing.assert_close(out, reference_forward(model, x, lens), atol=1e-4, rtol=1e-4)


def test_attention_hands_sdpa_4d_tensors(monkeypatch):
    """Fused SDPA kernels need `[batch, heads, rows, dim]`; 3-D inputs fall to the math kernel."""
    from cpbcg.graph_capture import model as model_module

    seen = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, is_causal=False, **kw):
        seen.append((tuple(q.shape), tuple(k.shape), None if attn_mask is None else tuple(attn_mask.shape), is_causal))
        return real(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", spy)
    plan = plan_zigzag([40, 24], 4, 16, CPU)
    q, kv = torch.randn(16, 4, 16), torch.randn(64, 2, 16)
    assert cp_attention(q, kv, kv, plan, 1).shape == (16, 64)
    model = build_model(load_model_preset("tiny"), 1, seed=0, device=CPU, dtype=torch.float32)
    reference_forward(model, torch.randn(40, 64), [40])
    # CP attention: one tile of rank 1's 16 query rows (4 heads over 2 KV heads, enable_gqa), over
    # the 61 sorted keys up to its last query's position (not all 64 gathered rows)
    assert seen == [((1, 4, 16, 16), (1, 2, 61, 16), (1, 1, 16, 61), False), ((1, 4, 40, 16), (1, 4, 40, 16), None, True)]


def _swapped_metadata_plan(lens, cp, rows):
    """A plan whose rows hold the wrong tokens for its metadata (request ids, positions shuffled per rank)."""
    plan = plan_zigzag(lens, cp, rows, CPU)
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(1))
    return dataclasses.replace(plan, request_id=plan.request_id[:, perm], position=plan.position[:, perm], _masks={})


@pytest.mark.parametrize("lens, cp, rows", [([37, 16, 61], 2, 64), ([37, 16, 61], 4, 40), ([9] * 40 + [700], 4, 300),
                                            ([1534, 161, 353], 4, 576), ([3000], 2, 1600)])
def test_block_sparse_cp_attention_equals_dense_masked_attention(lens, cp, rows):
    """The tiles see exactly the keys `attention_mask` shows each query (padding queries: only
    themselves), on good plans and on one whose metadata does not match its rows."""
    torch.manual_seed(0)
    q, k, v = torch.randn(cp, rows, 4, 16), torch.randn(cp * rows, 2, 16), torch.randn(cp * rows, 2, 16)
    for plan in (plan_zigzag(lens, cp, rows, CPU), _swapped_metadata_plan(lens, cp, rows)):
        for r in range(cp):
            torch.testing.assert_close(cp_attention(q[r], k, v, plan, r), dense_cp_attention(q[r], k, v, plan, r),
                                       atol=2e-6, rtol=2e-6)


def test_reference_attention_batches_requests_of_equal_length():
    torch.manual_seed(0)
    lens = [9, 9, 30, 9, 1, 30, 9]
    n = sum(lens)
    q, k, v = torch.randn(n, 4, 16), torch.randn(n, 2, 16), torch.randn(n, 2, 16)
    want, start = [], 0
    for length in lens:
        sl = slice(start, start + length)
        want.append(F.scaled_dot_product_attention(q[sl].transpose(0, 1), expand_kv(k[sl], 4).transpose(0, 1),
                                                   expand_kv(v[sl], 4).transpose(0, 1), is_causal=True).transpose(0, 1).reshape(length, -1))
        start += length
    torch.testing.assert_close(causal_attention_by_request(q, k, v, lens), torch.cat(want), atol=1e-6, rtol=1e-6)
