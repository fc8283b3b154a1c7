"""The planner: CP layout model, capacity model, replay selector, evaluation and recommendation.

Pure numpy; it never imports cpbcg.config, pydantic, yaml, typer, rich or torch (tests prove
it). Functions return typed results and never print. Import what you need from its modules
(`cpbcg.planner.model.layout`, `.selector`, `.evaluate`, `.recommend`, ...); the names below are
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BatchSet": "layout", "CPLayout": "layout", "CPStrategy": "layout", "cp_active": "layout", "local_rows": "layout",
    "local_tokens": "layout", "CaptureLayout": "capacity", "CaptureSpec": "capacity", "local_capacity": "capacity",
    "BucketTable": "selector", "EagerReason": "selector", "select_buckets": "selector", "select_one": "selector",
    "Demand": "demand", "Evaluation": "evaluate", "evaluate": "evaluate", "parse_bucket_spec": "buckets",
    "sglang_default_buckets": "buckets", "Deployment": "deployment",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cpbcg.planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cpbcg.planner.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
