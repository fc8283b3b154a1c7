"""Layout model: domain §2 values and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis_sizes import examples

from cpbcg.errors import ConfigError, TraceError
from cpbcg.planner.model.layout import (
    BatchSet, CPLayout, CPStrategy, cp_active, local_rows, local_tokens, worst_case_rows, zigzag_blocks,
)

CP4 = CPLayout(4)


def one(batch, layout=CP4):
    return BatchSet.from_lists([batch]), layout


def test_domain_example_per_rank_tokens_and_rows():
    batches, layout = one([1534, 161, 353])
    assert local_tokens(batches, layout).tolist() == [[513, 511, 512, 512]]
    assert local_rows(batches, layout).tolist() == [520]
    assert layout.align_rows == 8


def test_zigzag_blocks_split_and_ownership():
    blocks = zigzag_blocks(1534, 4)
    assert blocks.block_tokens == (192, 192, 192, 192, 192, 192, 191, 191)
    assert blocks.rank_blocks == ((0, 7), (1, 6), (2, 5), (3, 4))


def test_default_alignment_per_strategy_and_override():
    assert CPLayout(4, CPStrategy.interleave).align_rows == 4
    assert CPLayout(8).align_rows == 16
    assert CPLayout(4, align_size=64).align_rows == 64
    batches, _ = one([1534, 161, 353])
    assert local_rows(batches, CPLayout(4, align_size=64)).tolist() == [576]
    assert local_rows(batches, CPLayout(4, align_size=1)).tolist() == [513]


def test_interleave_rows_are_even_share():
    layout = CPLayout(4, CPStrategy.interleave)
    batches = BatchSet.from_lists([[1534, 161, 353], [5], [3]])
    assert local_tokens(batches, layout).tolist() == [[512] * 4, [2, 1, 1, 1], [1, 1, 1, 0]]
    assert local_rows(batches, layout).tolist() == [512, 4, 4]
    assert cp_active(batches, layout).tolist() == [True, True, False]


@pytest.mark.parametrize(
    "batch, active",
    [([8], True), ([7], False), ([100, 7], False), ([8, 8], True), ([4, 4], False)],
)
def test_zigzag_eligibility_needs_every_request_at_least_2cp(batch, active):
    batches, layout = one(batch)
    assert cp_active(batches, layout).tolist() == [active]


def test_cp1_means_no_cp_rows_equal_tokens():
    batches = BatchSet.from_lists([[5], [3, 2]])
    layout = CPLayout(1)
    assert cp_active(batches, layout).tolist() == [True, True]
    assert local_rows(batches, layout).tolist() == [5, 5]


def test_bad_layout_and_batches_rejected():
    with pytest.raises(ConfigError):
        CPLayout(0)
    with pytest.raises(TraceError):
        BatchSet.from_lists([[]])
    with pytest.raises(TraceError):
        BatchSet.from_lists([[3, 0]])


def test_batchset_subset_and_concat_keep_batches():
    a = BatchSet.from_lists([[1, 2], [3]], counts=[2, 5])
    b = BatchSet.from_lists([[4, 5, 6]])
    both = BatchSet.concat([a, b])
    assert [both.batch(i) for i in range(3)] == [[1, 2], [3], [4, 5, 6]]
    assert both.counts.tolist() == [2, 5, 1]
    picked = both.subset(np.array([True, False, True]))
    assert [picked.batch(i) for i in range(2)] == [[1, 2], [4, 5, 6]]
    assert picked.num_tokens.tolist() == [3, 15]


def _reference_rank_tokens(batch, cp):
    """Token-by-token assignment, independent of the closed form."""
    seg, ranks = 2 * cp, [0] * cp
    for length in batch:
        base, rem = divmod(length, seg)
        sizes = [base + (j < rem) for j in range(seg)]
        for j, size in enumerate(sizes):
            ranks[j if j < cp else seg - 1 - j] += size
    return ranks


batches_strategy = st.lists(st.lists(st.integers(1, 5000), min_size=1, max_size=12), min_size=1, max_size=20)


@settings(max_examples=examples(200), deadline=None)
@given(batches=batches_strategy, cp=st.integers(1, 8), strategy=st.sampled_from(list(CPStrategy)))
def test_every_token_lands_on_exactly_one_rank(batches, cp, strategy):
    layout = CPLayout(cp, strategy)
    bs = BatchSet.from_lists(batches)
    per_rank = local_tokens(bs, layout)
    assert per_rank.sum(axis=1).tolist() == [sum(b) for b in batches]
    if strategy is CPStrategy.zigzag and cp > 1:
        assert per_rank.tolist() == [_reference_rank_tokens(b, cp) for b in batches]


@settings(max_examples=examples(200), deadline=None)
@given(batches=batches_strategy, cp=st.integers(2, 8), strategy=st.sampled_from(list(CPStrategy)))
def test_rows_never_exceed_worst_case_bound(batches, cp, strategy):
    layout = CPLayout(cp, strategy)
    bs = BatchSet.from_lists(batches)
    bound = worst_case_rows(bs.num_tokens, bs.num_requests, layout)
    assert np.all(local_rows(bs, layout) <= bound)


@settings(max_examples=examples(100), deadline=None)
@given(
    cp=st.integers(2, 8),
    bases=st.lists(st.integers(1, 400), min_size=1, max_size=10),
)
def test_bound_is_reached_by_requests_one_past_a_block_multiple(cp, bases):
    # Every request of length 2*cp*m + 1 gives its extra token to rank 0: the bound is tight.
    layout = CPLayout(cp, align_size=1)
    batch = [2 * cp * m + 1 for m in bases]
    bs = BatchSet.from_lists([batch])
    assert local_rows(bs, layout).tolist() == [worst_case_rows(sum(batch), len(batch), layout)]


def test_bound_example_values():
    assert worst_case_rows(2048, 3, CP4) == 520
    assert worst_case_rows(8192, 1, CP4) == 2048
    assert worst_case_rows(8192, 32, CP4) == 2072


def test_huge_batches_take_the_unpacked_path_and_agree():
    # 40,000 requests in one batch would overflow a 16-bit packed field; the plain path serves it.
    batch = [9 + (i % 7) for i in range(40_000)]
    bs = BatchSet.from_lists([batch, [1534, 161, 353]])
    assert local_tokens(bs, CP4).tolist() == [_reference_rank_tokens(batch, 4), [513, 511, 512, 512]]
    assert local_rows(bs, CP4)[1] == 520


@pytest.mark.parametrize("cp", [3, 5, 6])
def test_non_power_of_two_cp_matches_reference(cp):
    batches = [[1534, 161, 353], [7, 8, 9, 100], [12345]]
    bs = BatchSet.from_lists(batches)
    assert local_tokens(bs, CPLayout(cp)).tolist() == [_reference_rank_tokens(b, cp) for b in batches]


@pytest.mark.parametrize("lengths, given", [(["-5", "10"], "-5"), (["10", "-2.5"], "-2.5")])
def test_a_negative_length_is_named_not_called_an_unknown_option(capsys, lengths, given):
    from cpbcg.cli import main

    with pytest.raises(SystemExit) as info:
        main(["layout", "--cp-size", "4", *lengths])
    assert info.value.code == 2
    assert capsys.readouterr().err == (f"cpbcg: error: extend_seq_lens: {given} is negative: a length or count is a positive number "
                                       "(see `cpbcg layout --help`)\n")
