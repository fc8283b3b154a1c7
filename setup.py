"""Build hook: write numba's on-disk cache of the compiled scheduler loop at install.

`pip install -e .` (the README's install) runs `build_py`; afterwards this compiles
`cpbcg/planner/scheduler/kernel.py` once (`kernel.write_cache`), so the cache sits in the
source tree's `__pycache__` and the user's first request-trace plan loads it instead of
compiling (about 5 CPU-seconds). Needs numba in the build environment (`[build-system]
requires`); if it cannot be imported or the compile fails, the install goes on and the first
run compiles as before. Everything else is declared in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

KERNEL = Path("cpbcg") / "planner" / "scheduler" / "kernel.py"


def _load_kernel(source: Path) -> types.ModuleType:
    """kernel.py imported under its own name (numba's cache records it) without running the
    package `__init__`s above it, whose dependencies the build environment lacks."""
    name = "cpbcg.planner.scheduler.kernel"
    parts = name.split(".")
    for depth in range(1, len(parts)):
        package = types.ModuleType(".".join(parts[:depth]))
        package.__path__ = [str(source.parents[len(parts) - 1 - depth])]
        sys.modules.setdefault(package.__name__, package)
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class BuildPyWithKernelCache(build_py):
    """`build_py`, then numba's cache of kernel.py where the installed code will import it from."""

    def run(self) -> None:
        super().run()
        editable = getattr(self, "editable_mode", False)
        source = Path(__file__).resolve().parent / KERNEL if editable else Path(self.build_lib) / KERNEL
        for stale in source.parent.glob("__pycache__/kernel.*.nb[ic]"):  # an earlier build's kernel.py (a reused build/)
            stale.unlink()
        try:
            written = _load_kernel(source).write_cache()
        except Exception as exc:  # noqa: BLE001 - an install never fails for an optional cache
            print(f"cpbcg: numba cache of the scheduler loop not written at build ({exc}); the first run compiles it", file=sys.stderr)
            return
        print(f"cpbcg: numba cache of the scheduler loop written: {written}", file=sys.stderr)


setup(cmdclass={"build_py": BuildPyWithKernelCache})
