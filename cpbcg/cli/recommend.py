"""`cpbcg plan` recommendation modes: the exact optimiser (`--max-buckets`), guarantee mode
(`--guarantee`, `--check-guarantee`), exports (`--emit`) and the plot (`--plot`).

`plan_cmd.py` only dispatches here; the numbers come from `cpbcg.planner` (optimise, compare,
guarantee, export), this module parses options into calls and renders the results.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import orjson
import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from cpbcg.atomic import STDOUT, check_outputs, write_atomic
from cpbcg.cli.render import REASON_HELP, pct
from cpbcg.config import DeploymentConfig
from cpbcg.errors import ConfigError
from cpbcg.planner.baselines import BASELINES
from cpbcg.planner.compare import Headroom, ListReport, ParetoPoint, compare_lists, headroom_finding, pareto
from cpbcg.planner.cost import CostModel, cost_model
from cpbcg.planner.evaluate import Demand
from cpbcg.planner.export import EmitFormat, export_buckets
from cpbcg.planner.guarantee import GuaranteeCheck, Limits, check_guarantee, guarantee_buckets
from cpbcg.planner.layout import BatchSet
from cpbcg.planner.optimise import OptimalLists, optimise

class Objective(str, Enum):
    coverage = "coverage"
    time = "time"


OBJECTIVE_TEXT = {
    Objective.coverage: "most graph forwards, then least time",
    Objective.time: "least modelled time",
}
ObjectiveOpt = Annotated[Objective, typer.Option("--objective", help="What the optimiser minimises: coverage = most forwards in graphs first, then least modelled time; time = least modelled time alone (may leave a batch eager where its padded replay would cost more).")]
MaxBucketsOpt = Annotated[Optional[int], typer.Option("--max-buckets", "-k", min=1, max=512, help="Recommend the best list of at most K buckets for the trace (exact optimiser) and compare it with SGLang's default, powers of two, vLLM-, TensorRT-LLM-style and uniform lists.", show_default=False)]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens", min=1, max=131072, help="Largest bucket of the recommended list (always included, like SGLang's max_bs); in guarantee mode the largest batch. [default: scheduler.chunked_prefill_size, 8192]", show_default=False)]
BucketMultipleOpt = Annotated[int, typer.Option("--bucket-multiple", min=1, help="Candidate bucket sizes are multiples of this (coarser = faster, optimal on that grid only; 1 = exact).")]
IncludeOpt = Annotated[Optional[str], typer.Option("--include", help="Buckets every recommended list must contain, e.g. 8192,4096.", show_default=False)]
GraphFixedOpt = Annotated[Optional[float], typer.Option("--graph-fixed-ms", min=0.0, help="Cost model: fixed time of a graph replay (ms); a replay of bucket B costs graph_fixed_ms + B*token_ms. [default: 0.5]", show_default=False)]
EagerFixedOpt = Annotated[Optional[float], typer.Option("--eager-fixed-ms", min=0.0, help="Cost model: fixed time of an eager forward, kernel launches included (ms); n tokens eagerly cost eager_fixed_ms + n*token_ms. [default: 4.0]", show_default=False)]
TokenMsOpt = Annotated[Optional[float], typer.Option("--token-ms", min=0.0, help="Cost model: time per token (ms). [default: 0.025]", show_default=False)]
ManifestOpt = Annotated[Optional[Path], typer.Option("--manifest", help="Capture manifest (`cpbcg capture`): its replay timings set graph_fixed_ms and token_ms (and eager_fixed_ms if eager times were measured).", show_default=False)]
GuaranteeOpt = Annotated[bool, typer.Option("--guarantee", help="Trace-free: the fewest buckets that replay every CP-active batch of <= --max-requests requests and <= --max-tokens tokens.")]
CheckGuaranteeOpt = Annotated[bool, typer.Option("--check-guarantee", help="Prove that --buckets replay every such batch, or name the smallest batch that falls back (exit 1).")]
MaxRequestsOpt = Annotated[Optional[int], typer.Option("--max-requests", min=1, max=1024, help="Guarantee mode: most requests in one forward. [default: scheduler.prefill_max_requests]", show_default=False)]
EmitOpt = Annotated[Optional[EmitFormat], typer.Option("--emit", help="Export the resulting list: sglang (server flags), sglang-json (--cuda-graph-config), yaml|json (cpbcg bucket file, read back by --buckets). On stdout, or -o.", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the --emit export to this file (atomically); - or no -o for stdout.", show_default=False)]
PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG: Pareto curve (buckets vs modelled time, coverage) and the batch-size distribution with the chosen buckets.", show_default=False)]

PARETO_COUNTS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
MAX_BASELINE_BUCKETS = 128
"""Baselines longer than this get no 'optimal of the same size' figure (the DP would be slow)."""


@dataclass(frozen=True)
class Recommendation:
    """Everything the optimiser mode renders."""

    header: dict
    cost: CostModel
    max_buckets: int
    optimal: OptimalLists
    objective: "Objective"
    reports: list[ListReport]
    points: list[ParetoPoint]
    headroom: Headroom | None
    demand: Demand

    @property
    def buckets(self) -> list[int]:
        return self.optimal.best(self.max_buckets)


def cost_overrides(graph_fixed_ms, eager_fixed_ms, token_ms) -> dict[str, object]:
    """Dotted `cost.*` overrides for `resolve_config` (None = keep)."""
    return {"cost.graph_fixed_ms": graph_fixed_ms, "cost.eager_fixed_ms": eager_fixed_ms, "cost.token_ms": token_ms}


def resolve_cost(cfg: DeploymentConfig, manifest: Optional[Path], overridden: bool) -> CostModel:
    """The cost model: config/overrides, with a manifest's fitted timings when given."""
    from cpbcg.manifest import load_manifest

    loaded = load_manifest(manifest) if manifest is not None else None
    source = "command line" if overridden else "defaults" if cfg.cost == type(cfg.cost)() else "config"
    return cost_model(cfg.cost, loaded, source=source)


def default_max_tokens(cfg: DeploymentConfig, max_tokens: Optional[int]) -> int:
    if max_tokens is not None:
        return max_tokens
    chunk = cfg.scheduler.chunked_prefill_size
    return chunk if chunk > 0 else cfg.scheduler.max_prefill_tokens


def parse_include(include: Optional[str]) -> list[int]:
    if not include:
        return []
    parts = [p.strip() for p in include.split(",") if p.strip()]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"--include: {include!r} is not a list of positive token counts like 8192,4096")
    return sorted({int(p) for p in parts})


def recommend(
    cfg: DeploymentConfig, batches: BatchSet, header: dict, cost: CostModel, max_buckets: int,
    max_tokens: int, bucket_multiple: int, include: list[int], objective: Objective = Objective.coverage,
) -> Recommendation:
    """Run the optimiser and the side-by-side comparison on `batches`."""
    cp, spec, factor = cfg.cp_layout, cfg.capture_spec, cfg.max_padding_factor
    include = sorted(set(include) | {max_tokens})  # the list ends at max_tokens, like SGLang's max_bs
    if len(include) > max_buckets:
        raise ConfigError(f"{len(include)} pinned buckets (--include) exceed --max-buckets {max_buckets}")
    demand = Demand.of(batches, cp).aggregate()
    baselines = {name: fn(max_tokens) for name, fn in BASELINES.items()}
    sizes = [len(b) for b in baselines.values() if len(b) <= MAX_BASELINE_BUCKETS]
    k_top = max([max_buckets] + sizes)
    optimal = optimise(
        demand, cp, cost, k_top, max_tokens, spec=spec, max_padding_factor=factor,
        bucket_multiple=bucket_multiple, pinned=include, objective=objective.value,
        allow_gaps=True,  # today's lists; the lead wires --allow-gaps (gap-free is the library default)
    )
    lists = {"recommended": optimal.best(max_buckets), **baselines}
    reports = compare_lists(batches, lists, cp, spec, factor, cost, optimal)
    counts = sorted(set(PARETO_COUNTS) | {len(r.evaluation.buckets) for r in reports} | {max_buckets})
    points = pareto(optimal, demand, cp, spec, factor, [c for c in counts if c <= k_top])
    headroom = headroom_finding(demand, optimal.best(max_buckets), cp, spec, factor, cost)
    return Recommendation(header, cost, max_buckets, optimal, objective, reports, points, headroom, demand)


def _eager_cell(report: ListReport) -> str:
    short = {"not_cp_active": "inact", "above_largest_bucket": "above", "padding_limit": "pad", "local_capacity": "cap"}
    parts = [f"{short[r]} {c:,}" for r, c in report.evaluation.eager.items() if c]
    return ", ".join(parts) or "-"


def comparison_table(rec: Recommendation) -> Table:
    """The side-by-side table (one row per list)."""
    title = (
        f"{rec.header['source']} | cp_size {rec.header['cp_size']} {rec.header['cp_strategy']}, "
        f"max_padding_factor {rec.header['max_padding_factor']:g} | lists up to {rec.optimal.max_tokens} tokens | cost: graph {rec.cost.graph_fixed_ms:g} ms + "
        f"B*{rec.cost.token_ms:g}, eager {rec.cost.eager_fixed_ms:g} ms + n*{rec.cost.token_ms:g} ({rec.cost.source}) | "
        f"objective: {OBJECTIVE_TEXT[rec.objective]}"
    )
    table = Table(title=title, title_justify="left")
    table.caption = "K: buckets; time: modelled prefill time; best@K: the optimiser's best list of the same size"
    for name, justify in (("list", "left"), ("K", "right"), ("graph fwd", "right"), ("graph tok", "right"),
                          ("padding", "right"), ("time s", "right"), ("vs rec", "right"),
                          ("best@K s", "right"), ("eager by reason", "left")):
        table.add_column(name, justify=justify)
    base = rec.reports[0].modelled_ms
    for r in rec.reports:
        ev = r.evaluation
        same = f"{r.optimal_same_size_ms / 1e3:,.2f}" if r.optimal_same_size_ms is not None else "-"
        table.add_row(
            r.name, str(len(ev.buckets)), pct(ev.graph_batches, ev.batches), pct(ev.graph_tokens, ev.tokens),
            pct(ev.padded_tokens, ev.graph_tokens), f"{r.modelled_ms / 1e3:,.2f}",
            f"{100.0 * (r.modelled_ms - base) / base:+.1f}%" if base else "-", same, _eager_cell(r),
        )
    return table


def pareto_table(points: list[ParetoPoint], objective: "Objective" = None) -> Table:
    table = Table(title="Pareto: best list of at most K buckets", title_justify="left")
    if objective is Objective.coverage:
        table.caption = "coverage first: a larger K may cost more modelled time when it replays more forwards in graphs"
    for name in ("K", "modelled s", "graph batches", "graph tokens", "largest bucket"):
        table.add_column(name, justify="right")
    for p in points:
        table.add_row(str(p.max_buckets), f"{p.modelled_ms / 1e3:,.2f}", f"{100 * p.coverage:.2f}%",
                      f"{100 * p.token_coverage:.2f}%", str(p.buckets[-1]))
    return table


def recommendation_renderable(rec: Recommendation) -> Group:
    opt = rec.optimal
    grid = "exact (every size that can matter)" if opt.bucket_multiple == 1 else (
        f"multiples of {opt.bucket_multiple} only: optimal on that grid, not over all sizes")
    lines = Text()
    lines.append(f"Recommended {len(rec.buckets)} buckets (max {rec.max_buckets}, <= {opt.max_tokens} tokens", style="bold")
    lines.append(f"{', pinned ' + ','.join(map(str, opt.pinned)) if opt.pinned else ''}):\n", style="bold")
    lines.append("  " + ",".join(map(str, rec.buckets)) + "\n")
    lines.append(f"Candidates: {opt.num_candidates:,} of {opt.grid_size:,} sizes searched; grid {grid}.\n")
    if opt.bucket_multiple == 1:
        lines.append("Sizes are exact token counts; --bucket-multiple 8 (or your alignment) keeps them round.\n")
    if rec.headroom is not None:
        lines.append("Headroom: " + rec.headroom.sentence() + "\n", style="bold yellow")
        if rec.headroom.modelled_ms_with_extra is not None:
            saved_ms = rec.reports[0].modelled_ms - rec.headroom.modelled_ms_with_extra
            lines.append(
                f"  with it the modelled time would be {rec.headroom.modelled_ms_with_extra / 1e3:,.2f} s "
                f"({saved_ms:,.1f} ms less).\n"
            )
    return Group(comparison_table(rec), pareto_table(rec.points, rec.objective), lines)


def recommendation_json(rec: Recommendation) -> bytes:
    doc = {
        **rec.header,
        "cost_model": rec.cost.to_dict(),
        "max_buckets": rec.max_buckets,
        "objective": rec.objective.value,
        "max_tokens": rec.optimal.max_tokens,
        "bucket_multiple": rec.optimal.bucket_multiple,
        "exact": rec.optimal.bucket_multiple == 1,
        "pinned": rec.optimal.pinned,
        "num_candidates": rec.optimal.num_candidates,
        "recommended": rec.buckets,
        "lists": [
            {"name": r.name, "modelled_ms": r.modelled_ms, "optimal_same_size_ms": r.optimal_same_size_ms, **r.evaluation.to_dict()}
            for r in rec.reports
        ],
        "pareto": [p.__dict__ for p in rec.points],
        "headroom": None if rec.headroom is None else {**rec.headroom.__dict__, "message": rec.headroom.sentence()},
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def guarantee_limits(cfg: DeploymentConfig, max_requests: Optional[int], max_tokens: Optional[int]) -> Limits:
    requests = max_requests or cfg.scheduler.prefill_max_requests or cfg.scheduler.max_running_requests
    if requests is None:
        raise ConfigError("guarantee mode needs --max-requests (or scheduler.prefill_max_requests in the config)")
    return Limits(requests, default_max_tokens(cfg, max_tokens))


def guarantee_renderable(limits: Limits, buckets: list[int], check: GuaranteeCheck, cfg: DeploymentConfig, recommended: bool) -> Text:
    out = Text()
    what = "Fewest buckets replaying" if recommended else "Bucket list checked against"
    out.append(
        f"{what} every CP-active batch of <= {limits.max_requests} requests and <= {limits.max_tokens} tokens "
        f"(cp_size {cfg.cp_size} {cfg.cp_strategy.value}, max_padding_factor {cfg.max_padding_factor:g}):\n", style="bold")
    out.append(f"  {len(buckets)} buckets: {','.join(map(str, buckets))}\n")
    if check.ok:
        out.append("  guarantee holds: every such batch replays in a graph.\n", style="green")
    else:
        out.append(
            f"  guarantee FAILS for {check.failing_sizes:,} batch sizes; smallest n = {check.failing_tokens} "
            f"(worst case {check.failing_rows} rows, eager: {check.reason} — {REASON_HELP[check.reason]})\n", style="red")
        if check.witness:
            out.append(f"  e.g. extend_seq_lens = {check.witness}\n")
    return out


def guarantee_json(limits: Limits, buckets: list[int], check: GuaranteeCheck, header: dict) -> bytes:
    doc = {**header, "max_requests": limits.max_requests, "max_tokens": limits.max_tokens, "buckets": buckets, **check.__dict__}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def emit(buckets: list[int], fmt: EmitFormat, cfg: DeploymentConfig, metadata: dict, output: Optional[Path], console: Console) -> None:
    """Write the export to `output` atomically, or to stdout."""
    text = export_buckets(buckets, fmt, cfg.cp_layout, metadata)
    if output is not None and str(output) != STDOUT:
        write_atomic(output, text)
    else:
        console.file.write(text)
        console.file.flush()


def write_plot(path: Path, rec: Recommendation) -> None:
    """Pareto curve plus the batch-size distribution with the chosen buckets, as a PNG (atomic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=110)
    ks = [p.max_buckets for p in rec.points]
    left.plot(ks, [p.modelled_ms / 1e3 for p in rec.points], "o-", color="tab:blue", label="modelled time")
    left.set_xlabel("buckets (K)")
    left.set_ylabel("modelled prefill time (s)", color="tab:blue")
    left.set_title("Best list of at most K buckets")
    cov = left.twinx()
    cov.plot(ks, [100 * p.coverage for p in rec.points], "s--", color="tab:green", label="graph batches")
    cov.set_ylabel("forwards replayed in graphs (%)", color="tab:green")
    for r in rec.reports[1:]:
        k = len(r.evaluation.buckets)
        if k <= max(ks):
            left.plot([k], [r.modelled_ms / 1e3], "x", markersize=9, label=r.name)
    left.legend(loc="center right", fontsize=8)
    d = rec.demand
    right.hist(d.num_tokens, bins=120, weights=d.counts, color="tab:gray")
    right.set_yscale("log")
    for b in rec.buckets:
        right.axvline(b, color="tab:red", linewidth=0.6, alpha=0.7)
    right.set_xlabel("batch tokens n (red: recommended buckets)")
    right.set_ylabel("forwards")
    right.set_title(f"Batch sizes and the {len(rec.buckets)} recommended buckets")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    write_atomic(path, buffer.getvalue())


@dataclass(frozen=True)
class RecommendOptions:
    """`plan`'s recommendation options as given on the command line (None = not given)."""

    max_buckets: Optional[int] = None
    max_tokens: Optional[int] = None
    bucket_multiple: int = 1
    include: Optional[str] = None
    manifest: Optional[Path] = None
    cost_overridden: bool = False
    guarantee: bool = False
    check_guarantee: bool = False
    max_requests: Optional[int] = None
    emit: Optional[EmitFormat] = None
    output: Optional[Path] = None
    plot: Optional[Path] = None
    objective: Objective = Objective.coverage


def run_modes(cfg: DeploymentConfig, trace: Optional[Path], trace_options: dict, opts: RecommendOptions, as_json: bool) -> int | None:
    """Run the guarantee or optimiser mode if `opts` asks for one; returns the exit code, or None
    when `plan` should evaluate the configured list as before."""
    from cpbcg.cli.common import stderr_console, stdout_console
    from cpbcg.cli.render import deployment_header, print_json
    from cpbcg.planner.buckets import parse_bucket_spec
    from cpbcg.cli.source_note import report_simulation
    from cpbcg.planner.sources import describe_source, open_source

    if opts.guarantee and opts.check_guarantee:
        raise ConfigError("--guarantee and --check-guarantee exclude each other")
    if opts.output is not None and opts.emit is None:
        raise ConfigError("-o/--output writes the --emit export; add --emit sglang|sglang-json|yaml|json")
    modes = opts.max_buckets is not None or opts.guarantee or opts.check_guarantee
    for given, option in ((opts.include, "--include"), (opts.max_tokens, "--max-tokens"), (opts.max_requests, "--max-requests")):
        if given is not None and not modes:
            raise ConfigError(f"{option} applies to --max-buckets, --guarantee or --check-guarantee; none was given")
    check_outputs({"-o": opts.output, "--plot": opts.plot}, {"--trace": trace, "--manifest": opts.manifest})
    if opts.plot is not None and opts.max_buckets is None:
        raise ConfigError("--plot needs --max-buckets (it draws the optimiser's Pareto curve)")
    machine = as_json or (opts.emit is not None and opts.output is None)
    console = stderr_console() if machine and not as_json else stdout_console()
    out = stdout_console()
    if opts.guarantee or opts.check_guarantee:
        limits = guarantee_limits(cfg, opts.max_requests, opts.max_tokens)
        cp, spec, factor = cfg.cp_layout, cfg.capture_spec, cfg.max_padding_factor
        if opts.guarantee:
            buckets = guarantee_buckets(limits, cp, spec, factor, opts.bucket_multiple)
        else:
            buckets = parse_bucket_spec(cfg.buckets)
        check = check_guarantee(buckets, limits, cp, spec, factor)
        header = deployment_header(cfg, "guarantee (no trace)")
        _finish(cfg, buckets, {"guarantee": {"max_requests": limits.max_requests, "max_tokens": limits.max_tokens}}, opts, as_json, out)
        if as_json:
            print_json(out, guarantee_json(limits, buckets, check, header))
        else:
            console.print(guarantee_renderable(limits, buckets, check, cfg, opts.guarantee))
        return 0 if check.ok else 1
    if opts.max_buckets is None:
        return None
    overridden = opts.cost_overridden
    cost = resolve_cost(cfg, opts.manifest, overridden)
    source = open_source(trace, scheduler=cfg.scheduler, **trace_options)
    batches = BatchSet.concat(source.batches)
    simulation = report_simulation(source)
    if batches.num_batches == 0:
        raise ConfigError("the trace has no prefill forwards to optimise for")
    header = deployment_header(cfg, describe_source(trace))
    if simulation is not None:
        header["simulation"] = simulation
    rec = recommend(
        cfg, batches, header, cost, opts.max_buckets, default_max_tokens(cfg, opts.max_tokens),
        opts.bucket_multiple, parse_include(opts.include), opts.objective,
    )
    if opts.plot is not None:
        write_plot(opts.plot, rec)
    meta = {"source": header["source"], "cp_size": cfg.cp_size, "cp_strategy": cfg.cp_strategy.value,
            "max_padding_factor": cfg.max_padding_factor, "modelled_ms": rec.reports[0].modelled_ms,
            "cost_model": cost.to_dict()}
    _finish(cfg, rec.buckets, meta, opts, as_json, out)
    if as_json:
        print_json(out, recommendation_json(rec))
    else:
        console.print(recommendation_renderable(rec))
    return 0


def _finish(cfg: DeploymentConfig, buckets: list[int], meta: dict, opts: RecommendOptions, as_json: bool, out: Console) -> None:
    if opts.emit is None:
        return
    if as_json and opts.output is None:
        raise ConfigError("--emit with --format json needs -o FILE (both would go to stdout)")
    emit(buckets, opts.emit, cfg, meta, opts.output, out)
