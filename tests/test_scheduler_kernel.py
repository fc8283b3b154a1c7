"""The compiled event loop (scheduler/kernel.py, numba) against the generator (simulation.py).

Both must give the same forwards (extend lengths, forward boundaries, longest sequence, the
multimodal flag) and the same `SimulationSummary`, float for float, for every setting the kernel
runs (every one without a prefix cache): random traces cut into several chunks, small yields.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cpbcg.planner.scheduler.simulation as simulation
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.traces.records import RequestChunk

kernel = pytest.importorskip("cpbcg.planner.scheduler.kernel")
pytestmark = pytest.mark.skipif(not kernel.COMPILED, reason="numba is not installed (cpbcg[fast])")

SETTINGS = [
    {},
    {"page_size": 16},
    {"decode": False},
    {"enable_mixed_chunk": True},
    {"page_size": 16, "enable_mixed_chunk": True},
    {"max_total_tokens": 20000, "max_running_requests": 24, "page_size": 8},
    {"max_total_tokens": 6000, "page_size": 4, "enable_mixed_chunk": True},
    {"chunked_prefill_size": -1, "prefill_max_requests": 3},
    {"chunked_prefill_size": 512, "max_prefill_tokens": 1024, "time_scale": 5.0},
    {"decode": False, "chunked_prefill_size": 1024, "page_size": 64, "max_total_tokens": None},
    {"max_total_tokens": None, "clip_max_new_tokens": 40, "init_new_token_ratio": 0.3},
    {"decode_graph_max_bs": 3, "eager_decode_factor": 2.5},  # eager decode steps above 3 running (the fall-off feedback)
]


def chunks(seed: int, n: int, timed: bool) -> list[RequestChunk]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(700), 1.2, n), 1, 20000).astype(np.int64)
    outputs = rng.integers(0, 400, n)
    images = (rng.random(n) < 0.1).astype(np.int64)
    arrival = np.cumsum(rng.exponential(1.0 / rng.choice([2.0, 20.0, 200.0]), n)) + 1.7e9
    cuts = np.sort(rng.choice(np.arange(1, n), size=4, replace=False))
    parts = []
    for a, b in zip([0, *cuts], [*cuts, n]):
        parts.append(RequestChunk(lengths[a:b], arrival[a:b] if timed else None, None, outputs[a:b], images[a:b]))
    parts.insert(2, RequestChunk(np.zeros(0, dtype=np.int64), np.zeros(0) if timed else None, None,
                                 np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    return parts


def forwards_and_summary(parts: list[RequestChunk], settings: SchedulerSettings, compiled: bool, monkeypatch):
    monkeypatch.setattr(simulation, "USE_KERNEL", compiled)
    sim = Simulation(parts, settings, compiled=compiled)  # True: the kernel whatever the trace's length
    out = [(p.extend_seq_lens.tolist(), p.offsets.tolist(), p.counts.tolist(), p.max_seq_tokens.tolist(), p.multimodal.tolist())
           for p in sim]
    summary = dataclasses.asdict(sim.summary())
    decode = summary.pop("decode_batches")
    summary["decode_batches"] = (decode["batch_sizes"].tolist(), decode["steps"].tolist())
    return out, summary


@pytest.mark.parametrize("index", range(len(SETTINGS)))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kernel_gives_the_generators_forwards_and_summary(index, seed, monkeypatch):
    monkeypatch.setattr(simulation, "BATCHES_PER_CHUNK", 50)  # several yields, each checked
    parts = chunks(seed * 100 + index, 600, timed=seed != 3)
    settings = SchedulerSettings(**SETTINGS[index])
    expected = forwards_and_summary(parts, settings, False, monkeypatch)
    got = forwards_and_summary(parts, settings, True, monkeypatch)
    assert got[1] == expected[1]
    assert got[0] == expected[0]
    assert expected[1]["batches"] > 50  # more than one yield
    sizes, steps = expected[1]["decode_batches"]
    assert sum(steps) == expected[1]["decode_steps"]  # every decode-only step, at its running batch
    assert (max(sizes) if sizes else 0) <= expected[1]["max_running"]
    assert sum(b * n for b, n in zip(sizes, steps)) + expected[1]["mixed_decode_tokens"] == expected[1]["decoded_tokens"]


def test_the_kernel_runs_where_it_applies(monkeypatch):
    ran = []
    monkeypatch.setattr(simulation, "_kernel_loop", lambda sim, k: ran.append(len(list(sim.arrivals._chunks))) or iter(()))
    monkeypatch.setattr(simulation, "KERNEL_MIN_REQUESTS", 50)
    list(Simulation(chunks(0, 50, True), SchedulerSettings()))  # 50 requests: long enough
    list(Simulation(chunks(0, 49, True), SchedulerSettings()))  # too short: the generator
    list(Simulation(chunks(0, 49, True), SchedulerSettings(), compiled=True))  # asked for
    list(Simulation(chunks(0, 50, True), SchedulerSettings(), compiled=False))
    list(Simulation(chunks(0, 50, True), SchedulerSettings(prefix_cache="unlimited")))  # the generator
    assert ran == [len(chunks(0, 50, True)), len(chunks(0, 49, True))]  # the chunks read ahead are handed on


def test_write_cache_puts_the_compiled_loop_in_numbas_cache_beside_kernel_py():
    """What setup.py calls at install: the run over an empty trace ends DONE and leaves `run`'s
    cache index where numba looks for it first (the source file's __pycache__)."""
    from pathlib import Path

    path = Path(kernel.write_cache())
    assert path == Path(kernel.__file__).parent / "__pycache__"
    for _ in Simulation((), SchedulerSettings(), compiled=True):  # a simulation's arguments: the same types, no second compile
        pass
    assert len(kernel.run.signatures) == 1
    parts = chunks(3, 400, True)
    for part in parts:  # a CSV's columns come read-only (zero-copy): still the signature the install compiled
        for column in (part.input_tokens, part.arrival_s, part.output_tokens, part.num_images):
            if column is not None:
                column.setflags(write=False)
    assert sum(1 for _ in Simulation(parts, SchedulerSettings(), compiled=True)) > 0
    assert len(kernel.run.signatures) == 1, kernel.run.signatures
    for name in ("run", "_advance", "_heap_pop", "_heap_push", "_held_at", "_join", "_kv_now"):  # numba names an index by function and line
        line = getattr(kernel, name).py_func.__code__.co_firstlineno
        assert list(path.glob(f"kernel.{name}-{line}.*.nbi")), name



LOAD_AND_WARM = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kernel", sys.argv[1])
kernel = importlib.util.module_from_spec(spec)
sys.modules["kernel"] = kernel
spec.loader.exec_module(kernel)
print(type(kernel.run._cache._impl.locator).__name__)
kernel.write_cache()
"""


def test_a_cache_written_at_build_loads_after_an_install_that_changes_the_files_mtime(tmp_path):
    """A wheel's install gives kernel.py a new mtime: the cache written at build (setup.py) must
    still load (numba before 0.68 stamped caches by mtime; `_stamp_cache_by_content`)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    built = Path(kernel.write_cache())  # the cache beside kernel.py, as setup.py writes it (compiled once if absent)
    installed = tmp_path / "site"
    (installed / "__pycache__").mkdir(parents=True)
    shutil.copy(Path(kernel.__file__), installed / "kernel.py")  # shutil.copy: a new mtime, as an install gives
    for cached in list(built.glob("kernel.*.nbi")) + list(built.glob("kernel.*.nbc")):
        shutil.copy(cached, installed / "__pycache__" / cached.name)
    os.utime(installed / "kernel.py", (1e9, 1e9))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    out = subprocess.run([sys.executable, "-c", LOAD_AND_WARM, str(installed / "kernel.py")], capture_output=True, text=True,
                         env=dict(env, NUMBA_DEBUG_CACHE="1"), timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "ContentStampedLocator"
    assert "data loaded" in out.stdout and "data saved" not in out.stdout, out.stdout[-2000:]
