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
