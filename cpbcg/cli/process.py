"""Process settings of the command line, applied once before any command imports numpy.

Two costs of a short numpy-heavy run that are not the work itself (the 1M-line batch plan,
`benchmarks/bench_plan.py`):

* OpenBLAS starts one thread per core when numpy is imported, and the threads spin before they
  sleep: about 0.1 s of CPU per run on two cores, for a planner that makes no BLAS call worth a
  thread (the integer dots never call BLAS; `tests/test_plan_no_blas_threads.py`). The CLI sets
  `OPENBLAS_NUM_THREADS=1` unless the environment already sets it (an explicit value is kept).
* glibc returns freed blocks of 128 KiB and more to the kernel (`mmap`/`munmap`, and trimming
  the heap's top), so each of the planner's megabyte-sized temporaries is faulted in page by
  page again: `(data - 48) < 10` on a 1 MiB chunk takes 0.8 ms instead of 0.06 ms. The CLI
  keeps freed memory in the heap up to `HEAP_KEEP_BYTES` (`mallopt` M_MMAP_THRESHOLD and
  M_TRIM_THRESHOLD); the peak memory is unchanged (it is the same arrays), the memory is
  returned when the process ends. Only on glibc; elsewhere nothing changes. The results are
  the same either way: this changes where memory comes from, not what is computed.

Library callers (`import cpbcg`) are left alone: these are the CLI process's settings.
"""

from __future__ import annotations

import ctypes
import os
import sys

HEAP_KEEP_BYTES = 64 << 20
"""Blocks up to this size come from the heap (M_MMAP_THRESHOLD), and up to twice this much free
memory stays at the heap's top (M_TRIM_THRESHOLD)."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def tune_process() -> None:
    """Apply the module doc's settings to this process (idempotent; call before numpy loads)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): the defaults stay
        return
    mallopt(_M_MMAP_THRESHOLD, HEAP_KEEP_BYTES)
    mallopt(_M_TRIM_THRESHOLD, 2 * HEAP_KEEP_BYTES)
