"""The embedded default workload is built once per process (cpbcg/assembly/embedded.py): `plan`
without a trace opens it twice, and each build is about 0.3 s of CPU."""

import numpy as np
import pytest

from cpbcg.assembly import embedded


def test_the_default_workload_is_built_once_and_cannot_be_changed_by_a_caller(monkeypatch):
    embedded.synthetic_batches.cache_clear()
    built = []
    real = embedded.Simulation
    monkeypatch.setattr(embedded, "Simulation", lambda *a, **k: built.append(1) or real(*a, **k))
    first, again = embedded.synthetic_batches(), embedded.synthetic_batches()
    assert again is first and len(built) == 1
    assert first.num_batches == embedded.DEFAULT_NUM_BATCHES and int(first.extend_seq_lens.sum()) > 0
    for array in (first.extend_seq_lens, first.offsets, first.counts):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0
    assert np.array_equal(embedded.synthetic_batches(500).offsets, embedded.synthetic_batches(500).offsets)
