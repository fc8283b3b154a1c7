"""torchrun on CPU (`--dry-run`: one gloo rank per process): ranks agree on every bucket."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

RANK1_FAILS_128 = """
import os, sys, torch
from cpbcg.graph_capture import harness
real = harness.capture_bucket
def capture_bucket(backend, model, buffers, bucket, rows, pool=None):
    if bucket == 128 and os.environ["RANK"] == "1":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (rank 1)")
    return real(backend, model, buffers, bucket, rows, pool)
harness.capture_bucket = capture_bucket
from cpbcg.cli import main
main(sys.argv[1:])
"""


@pytest.mark.skipif(shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
                    reason="torchrun not installed")
def test_torchrun_dry_run_ranks_agree_to_skip_a_bucket_one_rank_lost(tmp_path):
    script = tmp_path / "launch.py"
    script.write_text(RANK1_FAILS_128)
    out = tmp_path / "m.json"
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([torchrun, "--nproc-per-node", "2", str(script), "capture", "--cp-size", "2", "--dry-run",
                           "-b", "64,128", "--layers", "1", "-o", str(out)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert "capture incomplete: bucket(s) 128 skipped" in proc.stderr, proc.stderr[-2000:]
    data = orjson.loads(out.read_bytes())  # written by rank 0, which captured 128 itself
    assert data["emulated_ranks"] is False and data["dry_run"] is True
    assert [b["capture_num_tokens"] for b in data["buckets"]] == [64] and data["buckets"][0]["verified"]
    assert data["skipped_buckets"] == [{"capture_num_tokens": 128, "local_rows": 64, "cause": "rank_disagreement",
                                        "reason": "another CP rank skipped this bucket (out_of_memory)"}]


def test_local_rank_beyond_the_visible_devices_is_refused(monkeypatch):
    import torch

    from cpbcg.graph_capture.comm import init_group
    from cpbcg.errors import CaptureError

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(CaptureError, match="^LOCAL_RANK 2 but only 2 CUDA device\\(s\\) are visible; start at most 2 processes per node$"):
        init_group(4, want_cuda=True)
    with pytest.raises(CaptureError, match="^torchrun started 4 processes but cp_size is 2; they must be equal$"):
        init_group(2, want_cuda=True)
