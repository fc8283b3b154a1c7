from pathlib import Path

import pytest

ASSETS = Path(__file__).parent / "assets"
SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


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
