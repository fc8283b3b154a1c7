"""cpbcg: plan, capture and check CUDA-graph buckets for context-parallel (CP) prefill.

The public API (`cpbcg.api`, re-exported here and loaded on first use so that `cpbcg --help`
stays fast): `load_deployment`, `open_trace`, `evaluate`, `plan`, `recommend`, `guarantee`,
`check`, `capture` (torch), `load_manifest`, `watch`, and the result types. The planner (`cpbcg.planner`) is pure numpy and never imports
torch; the capture harness (`cpbcg.graph_capture`) is the only place torch is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_deployment": "cpbcg.api", "open_trace": "cpbcg.api", "evaluate": "cpbcg.api", "plan": "cpbcg.api",
    "recommend": "cpbcg.api", "guarantee": "cpbcg.api", "check": "cpbcg.api", "capture": "cpbcg.api",
    "GuaranteeResult": "cpbcg.planner.optimise.guarantee", "CaptureSettings": "cpbcg.graph_capture.records", "load_manifest": "cpbcg.manifest",
    "Deployment": "cpbcg.planner.deployment", "Evaluation": "cpbcg.planner.evaluate", "PlanResult": "cpbcg.assembly.plan",
    "Recommendation": "cpbcg.planner.optimise.recommend", "RecommendSettings": "cpbcg.planner.optimise.recommend",
    "Validation": "cpbcg.planner.optimise.recommend", "CheckReport": "cpbcg.gates.gates", "Gates": "cpbcg.gates.gates",
    "CPLayout": "cpbcg.planner.model.layout", "CaptureSpec": "cpbcg.planner.model.strategy", "CostModel": "cpbcg.planner.costs.cost",
    "CpbcgError": "cpbcg.errors", "TraceError": "cpbcg.errors", "ConfigError": "cpbcg.errors", "ModelError": "cpbcg.errors",
    "ReadOptions": "cpbcg.planner.traces.base", "BatchSource": "cpbcg.assembly.sources", "PlanPart": "cpbcg.assembly.plan",
    "watch": "cpbcg.api", "WatchOptions": "cpbcg.watching.options", "WatchReport": "cpbcg.watching.session",
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cpbcg' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
