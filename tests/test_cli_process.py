"""The CLI's process settings (cpbcg/cli/process.py): one OpenBLAS thread unless the user set a
count, and megabyte temporaries reused from the heap instead of faulted in page by page."""

import os
import subprocess
import sys

import pytest

FAULTS = """
import resource, sys
if sys.argv[1] == "tuned":
    from cpbcg.cli.process import tune_process
    tune_process()
import numpy as np
data = np.zeros(1 << 20, np.uint8)
((data - np.uint8(48)) < 10).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    ((data - np.uint8(48)) < 10).sum()  # two 1 MiB temporaries alive at once, as in the trace parse
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

THREADS = """
import os, sys
from cpbcg.cli import main
try:
    main(["--version"])
except SystemExit:
    pass
print(os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                         env=env if env is not None else dict(os.environ))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_megabyte_temporaries_come_from_the_heap_not_fresh_pages():
    # with glibc's defaults each 1 MiB temporary is a fresh mmap, 256 page faults each (24,016 on the
    # development machine for this loop; other glibc builds may differ, so only the tuned count is held)
    assert int(_run(FAULTS, "tuned")) < 500


def test_the_cli_sets_one_blas_thread_and_keeps_an_explicit_count():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _run(THREADS, env=env) == "1"
    assert _run(THREADS, env=dict(env, OPENBLAS_NUM_THREADS="3")) == "3"
