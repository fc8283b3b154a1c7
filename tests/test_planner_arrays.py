"""`sorted_unique` is `np.unique` for the planner's plain arrays (same values, order and dtype),
without the masked-array check that makes numpy 2.x import `numpy.ma`."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis_sizes import examples

from cpbcg.planner.arrays import sorted_unique


@pytest.mark.parametrize("values", [
    np.zeros(0, dtype=np.int64), np.asarray([7], dtype=np.int64), np.asarray([3, 1, 3, 2, 1], dtype=np.int64),
    np.asarray([[5, 4], [4, 9]], dtype=np.int32), [2.5, -1.0, 2.5], np.asarray([-3, -3, -3], dtype=np.int64),
])
def test_sorted_unique_is_np_unique(values):
    got, want = sorted_unique(values), np.unique(values)
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist()


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(-2**62, 2**62), max_size=60))
def test_sorted_unique_matches_np_unique_on_any_int64s(values):
    arr = np.asarray(values, dtype=np.int64)
    got = sorted_unique(arr)
    assert got.dtype == np.int64
    assert got.tolist() == sorted(set(values))
