"""Every command's JSON document, assembled in one place (`--format json`, `--json`, `--emit`
metadata, the capture manifest).

Each function assembles a command's document from typed results and returns a JSON-ready dict;
`dumps` writes it. A result's own JSON is its `to_dict()` (`Evaluation`, `Recommendation`,
`Comparison`, `BucketResult`, ...), and a result's fields become JSON through
`cpbcg.planner.document.document` only: field names are the results' own, evaluations are
embedded with `Evaluation.to_dict()` everywhere (plan top level, recommendation, validation,
comparisons, replay-check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from cpbcg.planner.document import document
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.optimise.recommend import Recommendation
from cpbcg.planner.scheduler import backlog_fraction
from cpbcg.assembly.sources import BatchSource
from cpbcg.engines.sglang.server import deployment_header

if TYPE_CHECKING:  # typed records of the capture package and the API (not imported at run time)
    from cpbcg.planner.optimise.guarantee import GuaranteeResult
    from cpbcg.graph_capture.records import CaptureResult
    from cpbcg.gates.gates import CheckReport
    from cpbcg.planner.deployment import Deployment

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
        doc["recommendation"] = recommendation.to_dict()
    elif recommendation_error is not None:
        doc["recommendation"] = None
        doc["recommendation_error"] = recommendation_error
    if comparison is not None:
        doc["comparison"] = comparison
    return doc


def launch_plans_document(launches: Any) -> list[dict[str, Any]]:
    """`plan --format json` of an SGLang log of several launches (`PlanResult.launches`): per
    launch, where it begins, the server it was modelled under (CP size, chunk, page size, list,
    prefill graph state), whether the recommendation was fitted on it, and its evaluation (the
    top level is their total)."""
    out = []
    for one in launches:
        dep = one.model.deployment
        out.append({
            "launch": one.launch, "first_line": one.first_line, "cp_size": one.model.cp.cp_size,
            "chunked_prefill_size": None if dep is None else dep.scheduler.chunked_prefill_size,
            "page_size": None if dep is None else dep.scheduler.page_size,
            "buckets": one.model.table.capture_num_tokens.tolist(), "max_padding_factor": one.model.max_padding_factor,
            "prefill_graphs": one.settings.prefill_graphs, "fitted": one.fitted, "evaluation": one.evaluation.to_dict(),
        })
    return out


def graphs_off_document(source: Any) -> list[dict[str, Any]]:
    """`plan --format json`'s `graphs_off` of an SGLang log: each launch that ran prefill forwards
    with prefill graphs off (`BatchSource.graphs_off_launches`): the server ran them eagerly, and
    the main table (the top level, and the launch's `launches[]` entry) models them as if graphs were on."""
    return [{"launch": s.launch, "first_line": s.first_line, "forwards": n, "prefill_graphs_source": s.prefill_graphs_origin,
             "main_table": "modelled as if graphs were on; the server ran these forwards eagerly (observed)"}
            for s, n in source.graphs_off_launches]


def traffic_document(parts: Any) -> list[dict[str, Any]]:
    """`plan --format json` with several traces or loads: each (trace, load) job with the
    configured list's and the recommended list's evaluation (`PlanPart`)."""
    return [{
        "trace": p.label, "load": p.load, "load_factor": p.load_factor, "rate_per_s": p.rate_per_s, "fit": p.fit,
        "configured": p.evaluation.to_dict(), "recommended": None if p.recommended is None else p.recommended.to_dict(),
        "sglang_default": None if p.default is None else p.default.to_dict(), "flags": list(p.flags),
    } for p in parts]


def guarantee_document(deployment: Deployment, result: GuaranteeResult) -> dict[str, Any]:
    """`plan --guarantee|--check-guarantee --format json`: the header, limits, list and proof."""
    return {**deployment_header(deployment, "guarantee (no trace)"), **document(result.limits), "max_tokens_source": result.max_tokens_source,
            "buckets": result.buckets, **document(result.check)}


def check_document(report: CheckReport, simulation: dict[str, Any] | None = None) -> dict[str, Any]:
    """`replay-check --json`: the header, `simulation` (request traces: the scheduler summary, as
    in `plan --format json`) and evaluation keys of `plan --format json`, then `passed`, `gates`
    (each with measured value, threshold and message), `replays`, for an SGLang server log
    that prints the graph verdict, `observed`, and with decode steps `decode` (as in `plan`)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        **report.header,
        **({"simulation": simulation} if simulation is not None else {}),
        **report.evaluation.to_dict(),
        "passed": report.passed,
        "gates": [g.to_dict() for g in report.gates],
        "replays": [document(r) for r in report.replays],
    }
    if report.launches:
        doc["launches"] = launch_plans_document(report.launches)
    if report.observed is not None:
        doc["observed"] = report.observed.to_dict()
    default = report.default_evaluation
    doc["against_default"] = None if default is None else {
        "buckets": len(default.buckets), "coverage": default.coverage, "padding": default.padding_overhead,
        "costs_more": list(report.against_default)}
    if report.decode is not None:
        doc["decode"] = report.decode.to_dict()
    return doc


def simulation_summary(source: BatchSource) -> dict[str, Any] | None:
    """JSON-able summary of the scheduler simulation behind a request trace (settings and counts),
    or None when the source is not a request trace. Complete once `source.batches` has been iterated."""
    sim = source.simulation
    if sim is None:
        return None
    s = sim.summary()
    kind = source.trace_format
    return {
        "trace_format": getattr(kind, "value", kind),
        "arrivals": "poisson" if s.synthetic_arrivals else "timestamps",
        "scheduler": document(sim.cfg),
        **document(s, omit=("decode_batches",)),  # the plan's `decode` block has them
        "skipped_rows": 0 if source.read_notes is None else source.read_notes.skipped_rows,
        "first_skipped_line": None if source.read_notes is None else source.read_notes.first_skipped_line,
        "busy_fraction": s.busy_s / s.simulated_s if s.simulated_s else 0.0,
        "backlog_fraction": backlog_fraction(s),
    }


_SUMMED = ("requests", "input_tokens", "cached_tokens", "extend_tokens", "batches", "chunked_requests", "simulated_s", "busy_s",
           "output_tokens", "default_output_requests", "decode_steps", "decode_s", "blocked_decode_s", "drain_s", "decoded_tokens",
           "mixed_decode_tokens", "kv_limited_forwards", "slot_limited_forwards", "kv_oversized_requests", "retraction_points",
           "skipped_rows")
_MAXED = ("max_waiting", "max_running", "peak_kv_tokens")


def simulation_document(parts: Any, source: BatchSource | None = None) -> dict[str, Any] | None:
    """The `simulation` block of a plan or replay-check: `simulation_summary` of the one source
    simulated, or over several (trace, load) parts (`PlanPart`s, of which at least two were
    simulated) their total: counts and simulated times summed, maxima the largest, fractions of
    the summed times, a setting the parts share as its value and one they differ in (the rate,
    the time scale) as the list of their values; `parts` holds each part's own block (with its
    `trace` and `load`). None when nothing was simulated."""
    blocks = [(p, simulation_summary(p.source)) for p in parts]
    simulated = [(p, b) for p, b in blocks if b is not None]
    if len(simulated) < 2:
        if simulated:
            return simulated[0][1]
        return None if source is None else simulation_summary(source)
    docs = [b for _, b in simulated]
    total: dict[str, Any] = {"sum_of_parts": len(docs)}
    for key in docs[0]:
        values = [d[key] for d in docs]
        if key in _SUMMED:
            total[key] = sum(values)
        elif key in _MAXED:
            total[key] = max(values)
        elif key == "scheduler":
            total[key] = {k: (v[0] if all(x == v[0] for x in v) else v) for k, v in ((k, [d[key][k] for d in docs]) for k in docs[0][key])}
        elif key in ("busy_fraction", "backlog_fraction", "first_skipped_line"):
            continue
        else:
            total[key] = values[0] if all(v == values[0] for v in values) else values
    first_skip = next(((p, b) for p, b in simulated if b["first_skipped_line"] is not None), None)
    total["first_skipped_line"] = None if first_skip is None else first_skip[1]["first_skipped_line"]
    total["first_skipped_trace"] = None if first_skip is None else first_skip[0].label
    total["busy_fraction"] = total["busy_s"] / total["simulated_s"] if total["simulated_s"] else 0.0
    total["backlog_fraction"] = (total["busy_s"] + total["blocked_decode_s"]) / total["simulated_s"] if total["simulated_s"] else 0.0
    total["parts"] = [{"trace": p.label, "load": p.load, **b} for p, b in simulated]
    return total


def manifest_document(result: "CaptureResult") -> dict[str, Any]:
    """The manifest of a `cpbcg.graph_capture.CaptureResult`: versions, device, CP and capture
    settings, model, one record per captured bucket (capture order), skipped buckets with
    reasons. The one place capture results become JSON-ready data."""
    from cpbcg.manifest import SCHEMA_VERSION as MANIFEST_SCHEMA_VERSION  # here: a plan's JSON never needs the manifest module

    s, dims, tol = result.settings, result.dims, result.tolerance
    versions = dict(result.versions)
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "cpbcg_version": versions.get("cpbcg"), "torch_version": versions.get("torch"), "cuda_version": versions.get("cuda"),
        "device_name": result.device_name, "dry_run": result.dry_run, "complete": result.complete,
        "emulated_ranks": result.emulated_ranks,
        "cp_size": s.cp_layout.cp_size, "cp_strategy": s.cp_layout.strategy.value, "align_size": s.cp_layout.align_rows,
        "capture_layout": s.capture_spec.layout.value, "max_context_size_tokens": s.capture_spec.max_context_size_tokens,
        "max_capture_requests": s.capture_spec.max_capture_requests, "max_padding_factor": s.max_padding_factor,
        "model": document(dims, extra={"preset": s.preset, "dtype": result.dtype, "num_layers": s.num_layers}),
        "seed": s.seed,
        "tolerance": {"dtype": tol.dtype, "atol": tol.atol, "rtol": tol.rtol, "noise_factor": tol.noise_factor, "rule": tol.rule},
        "attention_kernels": dict(result.attention_kernels),
        "buckets": [b.to_dict() for b in result.buckets],
        "skipped_buckets": [document(k) for k in result.skipped],
        "wall_s": _run_wall(result),
    }


def _run_wall(result: "CaptureResult") -> dict[str, Any] | None:
    """Where the run's wall time went (`RunWall`), with the buckets' warm-ups, timed forwards and
    layouts summed; None when not accounted."""
    if result.wall is None:
        return None
    walls = [b.wall for b in result.buckets if b.wall is not None]
    return document(result.wall, extra={"warmup_s": sum(w.warmup_s for w in walls), "timing_s": sum(w.timing_s for w in walls),
                                        "layouts": sum(w.layouts for w in walls)})


def observed_document(observed: Any, log: Any) -> dict[str, Any] | None:
    """The JSON section `observed` of plan and replay-check (an SGLang server log: the server's
    graph verdicts vs the model's, in total and per launch (`launches`, each with its settings,
    their sources and what was assumed), the log's settings (`log`: each setting's source and
    line, the resolved values, the printed SGLang version) and the measured capture cost), or None."""
    if observed is None and (log is None or log.capture is None):
        return None

    doc: dict[str, Any] = observed.to_dict() if observed is not None else {}
    if log is not None:
        doc["log"] = {"path": log.path, **log.to_dict()}
    if log is not None and log.capture is not None:
        c = log.capture
        doc["capture"] = {"bucket_gb": {str(b): gb for b, gb in sorted(c.bucket_gb.items())}, "total_gb": c.total_gb,
                          "capture_s": c.capture_s, "line": c.total_line or None, "backend": c.backend or None,
                          "source": f"measured on {c.date or 'an undated day'} by the log {log.path}"}
    return doc
