"""Capacity model C(B): domain §3 values and errors."""

import pytest

from cpbcg.errors import ModelError
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec, capturable_buckets, capture_pieces, local_capacity
from cpbcg.planner.model.layout import CPLayout, CPStrategy

CP4 = CPLayout(4)


def test_single_request_capacities_from_the_brief():
    assert local_capacity([2048, 2304, 2560, 2100], CP4).tolist() == [512, 576, 640, 528]


def test_context_bounded_pieces_and_capacity():
    spec = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=1000, max_capture_requests=8)
    assert capture_pieces(2500, CP4, spec) == [1000, 1000, 500]
    assert capture_pieces(2000, CP4, spec) == [1000, 1000]
    # 1000 -> 250 per rank (align 8 -> 256 each piece sum): 3 pieces of rank-0 tokens 250+250+125=625 -> 632
    assert local_capacity([2500], CP4, spec).tolist() == [632]


def test_context_bounded_needs_request_slots():
    spec = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=1000, max_capture_requests=2)
    with pytest.raises(ModelError, match="needs 3 requests of <= 1000 tokens, more than max_capture_requests=2"):
        capture_pieces(2500, CP4, spec)


def test_context_bounded_rejects_a_short_piece():
    spec = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=1000)
    with pytest.raises(ModelError, match="piece of 4 tokens, shorter than 2\\*cp_size=8"):
        capture_pieces(2004, CP4, spec)


def test_context_bounded_needs_a_context_size():
    with pytest.raises(ModelError, match="max_context_size_tokens"):
        capture_pieces(2048, CP4, CaptureSpec(CaptureLayout.context_bounded))


def test_small_buckets_dropped_for_zigzag_only():
    assert capturable_buckets([4, 8, 12, 16, 8], CP4) == [8, 12, 16]
    # interleave: SGLang keeps buckets >= cp_size (one token per rank)
    assert capturable_buckets([2, 3, 4, 8], CPLayout(4, CPStrategy.interleave)) == [4, 8]
    assert capturable_buckets([4, 16], CPLayout(1)) == [4, 16]
    with pytest.raises(ModelError, match="no capture bucket is >= 2\\*cp_size=8"):
        capturable_buckets([4, 7], CP4)


def test_capacity_without_cp_equals_bucket():
    assert local_capacity([4, 16], CPLayout(1)).tolist() == [4, 16]


def test_interleave_with_no_bucket_of_cp_size_is_an_error():
    with pytest.raises(ModelError, match="no capture bucket is >= cp_size=8"):
        capturable_buckets([4, 7], CPLayout(8, CPStrategy.interleave))
