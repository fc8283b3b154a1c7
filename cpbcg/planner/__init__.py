"""The planner: CP layout model, capacity model, replay selector, evaluation and recommendation.

Pure numpy; it never imports cpbcg.config, pydantic, yaml, typer, rich or torch (tests prove
it). Functions return typed results and never print. Import what you need from its modules
(`cpbcg.planner.model.strategy`, `.model.layout`, `.model.selector`, `.evaluate`, ...); the names below are
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BatchSet": "model.layout", "CPLayout": "model.layout", "CPStrategy": "model.layout", "cp_active": "model.layout",
    "local_rows": "model.layout", "local_tokens": "model.layout", "strategy_model": "model.strategy",
    "CaptureLayout": "model.capacity", "CaptureSpec": "model.capacity", "local_capacity": "model.capacity",
    "BucketTable": "model.selector", "EagerReason": "model.selector", "select_buckets": "model.selector",
    "select_one": "model.selector", "Demand": "model.demand", "Evaluation": "evaluate", "evaluate": "evaluate",
    "parse_bucket_spec": "model.bucket_spec", "Deployment": "deployment",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cpbcg.planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cpbcg.planner.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
