import sys
from pathlib import Path

import pytest

ASSETS = Path(__file__).parent / "assets"
SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread() -> None:
    """The capture tests run tiny proxy models on the CPU, where torch's intra-op threads only
    wait on each other: one thread gives the same results (every comparison in them is within one
    process) for a quarter of the CPU (issue 44: 5.5 s vs 21.5 s CPU for the default capture on the
    loaded 2-core machine). Torch is not imported here: only where a capture test already did."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@pytest.fixture
def assets() -> Path:
    return ASSETS


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (CI lays ../shared beside the clone)")
    return SHARED_TRACES


@pytest.fixture
def wide_plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 220-column terminal outside GitHub Actions: tables unwrapped, no step summary or annotations."""
    monkeypatch.setenv("CPBCG_WIDTH", "220")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
