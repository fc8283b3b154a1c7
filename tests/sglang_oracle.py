"""SGLang 0.5.23's own source, read from the released wheel at test time (never copied here).

`wheel_source("sglang/srt/layers/cp/bcg/zigzag_bcg.py")` returns one file of the wheel as text.
The wheel is looked for in `CPBCG_SGLANG_WHEEL_DIR`, /tmp/sgl and ~/.cache/cpbcg-test; if absent,
`pip download sglang==0.5.23 --no-deps` fetches it into ~/.cache/cpbcg-test; if that fails (no
registry), tests using the `sglang_wheel` fixture skip with that reason. `definitions` executes
chosen top-level definitions of a file under stubs (the rest of the file is never run).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SGLANG_VERSION = "0.5.23"
CACHE = Path(os.environ.get("CPBCG_SGLANG_WHEEL_DIR", Path.home() / ".cache" / "cpbcg-test"))


@functools.lru_cache(maxsize=1)
def _wheel() -> Path:
    for folder in (CACHE, Path("/tmp/sgl")):
        found = sorted(folder.glob(f"sglang-{SGLANG_VERSION}-*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", f"sglang=={SGLANG_VERSION}", "--no-deps",
                          "--only-binary", ":all:", "-d", str(CACHE), "-q"], capture_output=True, text=True, timeout=600)
    found = sorted(CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if got.returncode or not found:
        raise FileNotFoundError(f"sglang=={SGLANG_VERSION} wheel unavailable (pip download: {got.stderr.strip()[-200:]})")
    return found[0]


@functools.lru_cache(maxsize=None)
def wheel_source(path_in_wheel: str) -> str:
    """The text of one file of the sglang 0.5.23 wheel. Raises FileNotFoundError if unreachable."""
    with zipfile.ZipFile(_wheel()) as wheel:
        return wheel.read(path_in_wheel).decode("utf-8")


def definitions(path_in_wheel: str, names: list[str], namespace: dict) -> dict:
    """Execute the top-level definitions `names` (functions, classes; decorators kept) of one wheel
    file into `namespace` (the stubs they need) and return it."""
    tree = ast.parse(wheel_source(path_in_wheel))
    picked = [node for node in tree.body if getattr(node, "name", None) in names]
    missing = set(names) - {node.name for node in picked}  # type: ignore[attr-defined]
    assert not missing, f"{path_in_wheel}: no {sorted(missing)} in sglang {SGLANG_VERSION}"
    module = ast.Module(body=picked, type_ignores=[])
    exec(compile(module, f"<sglang {SGLANG_VERSION} {path_in_wheel}>", "exec", flags=annotations_flag()), namespace)
    return namespace


def annotations_flag() -> int:
    import __future__

    return __future__.annotations.compiler_flag


@pytest.fixture(scope="session")
def sglang_wheel():
    """`wheel_source`, or a skip naming why the 0.5.23 wheel cannot be had."""
    try:
        _wheel()
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"sglang {SGLANG_VERSION} wheel unavailable: {exc}")
    return wheel_source
