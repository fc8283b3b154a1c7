"""Tallying forwards calls no BLAS routine: a float `np.dot` wakes OpenBLAS's worker threads, which
then spin after each chunk, taking a core from `plan`'s forked fit (cpbcg/planner/evaluate.py)."""

import os
import subprocess
import sys

import pytest

CODE = """
import os
import numpy as np
from cpbcg.planner.evaluate import evaluate
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import BucketTable


def other_threads_cpu_ticks():
    ticks = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


rng = np.random.default_rng(0)
sizes = rng.integers(1, 9, 400_000)
lens = rng.integers(1, 4000, int(sizes.sum())).astype(np.int64)
offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
np.cumsum(sizes, out=offsets[1:])
table = BucketTable.build(sglang_default_buckets(8192), CPLayout(4))
before = other_threads_cpu_ticks()
ev = evaluate([BatchSet(lens, offsets)], table, CPLayout(4))
assert ev.batches == 400_000 and ev.tokens == int(lens.sum()), (ev.batches, ev.tokens)
print(other_threads_cpu_ticks() - before)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2, reason="Linux, two or more CPUs")
def test_tallying_keeps_blas_threads_asleep():
    # with the float np.dot of the token-total guard, OpenBLAS's worker burned 6-10 ticks here
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) <= 1  # clock ticks of every thread but the main one
