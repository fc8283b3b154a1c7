"""JSON documents of cpbcg's results, built in one place (the `--format json` and `--json` edge).

Each function takes typed results and returns a JSON-ready dict; `dumps` writes it. Field names
are the results' own; evaluations are embedded with `Evaluation.to_dict()` everywhere (plan top
level, recommendation, validation, comparisons, replay-check).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.optimise.recommend import Recommendation

SCHEMA_VERSION = 1
"""Version of the plan / replay-check JSON layout (bumped when a field changes meaning)."""


def dumps(doc: Any) -> bytes:
    """Indented JSON with a trailing newline (numpy scalars and arrays allowed)."""
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n"


def plan_document(header: dict[str, Any], evaluation: Evaluation, recommendation: Recommendation | None = None,
                  simulation: dict[str, Any] | None = None, comparison: dict[str, Any] | None = None,
                  recommendation_error: str | None = None) -> dict[str, Any]:
    """`plan --format json`: the header, the configured list's evaluation at the top level, then
    `recommendation` (and `comparison` with `--compare`)."""
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, **header}
    if simulation is not None:
        doc["simulation"] = simulation
    doc.update(evaluation.to_dict())
    if recommendation is not None:
        doc["recommendation"] = recommendation_document(recommendation)
    elif recommendation_error is not None:
        doc["recommendation"] = None
        doc["recommendation_error"] = recommendation_error
    if comparison is not None:
        doc["comparison"] = comparison
    return doc


def recommendation_document(rec: Recommendation) -> dict[str, Any]:
    """The recommendation: list, evaluation (same fields as the top level), validation, deploy flags."""
    validation = None
    if rec.validation is not None:
        v = rec.validation
        validation = {
            "fit_fraction": v.fit_fraction, "buckets": v.buckets, "in_sample": v.in_sample.to_dict(),
            "evaluation": v.evaluation.to_dict(), "warning": v.warning(),
            "by_part": {name: ev.to_dict() for name, ev in v.by_part.items()},
        }
    return {
        "buckets": rec.buckets,
        "num_buckets": len(rec.buckets),
        "max_buckets": rec.max_buckets,
        "objective": rec.objective,
        "target_coverage": rec.target_coverage,
        "evaluation": rec.evaluation.to_dict(),
        "modelled_ms": rec.modelled_ms,
        "configured_modelled_ms": rec.configured_modelled_ms,
        "cost_model": rec.cost.to_dict(),
        "headroom": None if rec.headroom is None else dataclasses.asdict(rec.headroom),
        "headroom_note": rec.headroom_note,
        "validation": validation,
        "capture_estimate": dataclasses.asdict(rec.capture),
        "configured_capture_estimate": dataclasses.asdict(rec.configured_capture),
        "deploy": rec.deploy,
        "exact": rec.optimal.bucket_multiple == 1,
        "bucket_multiple": rec.optimal.bucket_multiple,
        "num_candidates": rec.optimal.num_candidates,
        "floor_tokens": rec.floor_tokens,
        "notes": list(rec.notes),
    }


def traffic_document(parts: Any) -> list[dict[str, Any]]:
    """`plan --format json` with several traces or loads: each (trace, load) job with the
    configured list's and the recommended list's evaluation (`PlanPart`)."""
    return [{
        "trace": p.label, "load": p.load, "load_factor": p.load_factor, "rate_per_s": p.rate_per_s, "fit": p.fit,
        "configured": p.evaluation.to_dict(), "recommended": None if p.recommended is None else p.recommended.to_dict(),
    } for p in parts]


def as_dict(result: Any) -> dict[str, Any]:
    """A frozen dataclass result as a JSON-ready dict (`dataclasses.asdict`)."""
    return dataclasses.asdict(result)
