"""`cpbcg replay-check`: evaluate captured buckets on a trace and gate CI on the result.

parse (config + manifest + gate options) → call (`run_evaluation`, `check_gates`, optional real
replays) → render (tables, JSON, JUnit, annotations, step summary) → exit 0 / 1 / 2.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cpbcg.atomic import STDOUT, check_outputs
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import (
    AlignOpt, BucketsOpt, CaptureLayoutOpt, ConfigOpt, CpSizeOpt, FactorOpt, FormatOpt,
    MaxCaptureReqOpt, MaxContextOpt, OutputFormat, StrategyOpt, TraceOpt, deployment_overrides, resolve_config,
    stderr_console, stdout_console,
)
from cpbcg.cli.common import (  # request traces and the scheduler simulation
    ChunkedPrefillOpt, LengthFieldOpt, MaxPrefillTokensOpt, MaxRunningRequestsOpt, PrefillFixedMsOpt,
    PrefillMaxRequestsOpt, PrefillTokensPerSOpt, PrefixCacheOpt, RateOpt, SeedOpt, TimeFieldOpt,
    TimeScaleOpt, TraceFormatOpt, scheduler_overrides,
)
from cpbcg.cli.plan_cmd import bucket_table, run_evaluation
from cpbcg.cli.source_note import warn_ignored_options
from cpbcg.planner.traces import TraceFormat
from cpbcg.cli.render import deployment_header, evaluation_tables, print_json
from cpbcg.config import DeploymentConfig
from cpbcg.errors import CaptureError, ConfigError
from cpbcg.gates import CheckReport, GateResult, ReplayRecord, check_gates, count_of, parse_max_eager, replay_gate, sample_graph_batches
from cpbcg.manifest import Manifest, load_manifest
from cpbcg.planner.sources import describe_source, open_batches
from cpbcg.reports import append_step_summary, github_annotations, junit_xml, report_json, step_summary_markdown, write_report

ManifestOpt = Annotated[Optional[Path], typer.Option("--manifest", "-m", help="Capture manifest (`cpbcg capture -o`): buckets, capacities and CP settings come from it.", show_default=False)]
MinCovOpt = Annotated[Optional[float], typer.Option("--min-coverage", min=0.0, max=1.0, help="Gate: least fraction of batches replayed in graphs (0..1).", show_default=False)]
MinTokCovOpt = Annotated[Optional[float], typer.Option("--min-token-coverage", min=0.0, max=1.0, help="Gate: least fraction of tokens replayed in graphs (0..1).", show_default=False)]
MaxPadOpt = Annotated[Optional[float], typer.Option("--max-padding", min=0.0, help="Gate: most padding overhead, padded / real graph tokens (0.05 = 5%).", show_default=False)]
MaxEagerOpt = Annotated[Optional[list[str]], typer.Option("--max-eager", metavar="REASON=N", help="Gate: at most N eager batches for REASON (not_cp_active, above_largest_bucket, padding_limit, local_capacity). Repeatable.", show_default=False)]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", help="Write a JUnit XML report (one test case per gate); `-` writes it to stdout.", show_default=False)]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the JSON report (the plan JSON plus gates) to this file; `-` writes it to stdout.", show_default=False)]
ReplayOpt = Annotated[int, typer.Option("--replay", min=0, help="Replay N sampled graph batches through freshly captured graphs and compare with eager (needs torch; CUDA if present, else a dry run). Adds the replay_verified gate.")]

MANIFEST_FIXES = {
    "--cp-size": "cp_size", "--cp-strategy": "cp_strategy", "--align-size": "align_size", "--buckets": "buckets",
    "--capture-layout": "capture_layout", "--max-context-size": "max_context_size_tokens",
    "--max-capture-requests": "max_capture_requests",
}
"""Options a manifest fixes (flag → config key); giving one with `--manifest` is an error."""


def manifest_overrides(manifest: Manifest) -> dict[str, Any]:
    """Config keys the manifest fixes: CP settings, capture layout, buckets, and its
    `max_padding_factor` when it records one."""
    data = manifest.data
    out: dict[str, Any] = {key: data.get(key) for key in MANIFEST_FIXES.values() if key != "buckets"}
    out["buckets"] = manifest.table().capture_num_tokens.tolist()
    if data.get("max_padding_factor") is not None:
        out["max_padding_factor"] = data["max_padding_factor"]
    return out


def resolve_check_config(config: Optional[str], manifest: Optional[Manifest], flags: dict[str, Any], dotted: dict[str, Any]) -> DeploymentConfig:
    """Config file → manifest (if any) → command-line flags and dotted overrides (gates,
    scheduler), later ones winning. Raises `ConfigError` for a flag the manifest fixes."""
    given = [flag for flag, key in MANIFEST_FIXES.items() if flags.get(key) is not None]
    if manifest is not None and given:
        raise ConfigError(f"--manifest {manifest.path} fixes the buckets and CP settings; drop {', '.join(given)}")
    base = manifest_overrides(manifest) if manifest is not None else {}
    if manifest is not None and flags.get("max_padding_factor") is not None:
        base.pop("max_padding_factor", None)
    explicit = {k: v for k, v in flags.items() if v is not None}
    return resolve_config(config, **{**base, **explicit}, **dotted)


def gate_overrides(min_coverage: Optional[float], min_token_coverage: Optional[float], max_padding: Optional[float], max_eager: list[str]) -> dict[str, Any]:
    """Dotted config overrides for the gate options (`--max-eager` merges into the config's)."""
    out: dict[str, Any] = {
        "gates.min_coverage": min_coverage, "gates.min_token_coverage": min_token_coverage, "gates.max_padding": max_padding,
    }
    out.update({f"gates.max_eager.{reason}": n for reason, n in parse_max_eager(max_eager).items()})
    return out


def run_replays(batches: list[list[int]], cfg: DeploymentConfig) -> tuple[ReplayRecord, ...]:
    """Replay `batches` through freshly captured graphs (`cpbcg.capture.harness`); torch is
    imported here only. Raises `CaptureError` when the capture extra is not installed."""
    try:
        from cpbcg.capture.harness import replay_batches
    except ImportError as exc:
        raise CaptureError(f"--replay needs the capture module and torch (pip install 'cpbcg[capture]'): {exc}") from exc
    return tuple(ReplayRecord.of(record) for record in replay_batches(batches, cfg))


def run_check(cfg: DeploymentConfig, manifest: Optional[Manifest], trace: Optional[Path], trace_options: dict[str, Any], replay: int) -> CheckReport:
    """Evaluate (the same code as `plan`), check the gates, and with `replay > 0` replay that
    many sampled graph batches through freshly captured graphs."""
    table = manifest.table() if manifest is not None else bucket_table(cfg)
    ev = run_evaluation(cfg, trace, table, **trace_options)
    header = deployment_header(cfg, describe_source(trace))
    if manifest is not None:
        header["manifest"] = str(manifest.path)
    results: tuple[GateResult, ...] = check_gates(ev, cfg.gates)
    replays: tuple[ReplayRecord, ...] = ()
    if replay:
        batches = open_batches(trace, scheduler=cfg.scheduler, **trace_options)
        replays = run_replays(sample_graph_batches(batches, table, cfg.cp_layout, cfg.max_padding_factor, replay), cfg)
        results += (replay_gate(replays),)
    return CheckReport(header, ev, results, replays)


def gates_table(report: CheckReport) -> Table:
    """Gate, measured value, threshold and verdict per gate."""
    table = Table(title="Gates", title_justify="left")
    for name, justify in (("gate", "left"), ("measured", "right"), ("threshold", "right"), ("result", "left")):
        table.add_column(name, justify=justify)
    for g in report.gates:
        table.add_row(g.name, g.measured_text, f"{g.comparison} {g.threshold_text}", "pass" if g.passed else "FAIL")
    return table


NO_GATES_NOTE = "no gates configured: set gates: in the config or --min-coverage, --max-eager, ..."
"""Printed under the empty gate table as a plain line (a caption would be cut in narrow terminals)."""
NO_TRACE_WARNING = "cpbcg: warning: no --trace given; the gates ran on the embedded synthetic workload, not on your traffic"


def overflow_text(report: CheckReport) -> Text:
    """The first natural-bucket overflows as `extend_seq_lens` (old runtime crashed on them)."""
    ev = report.evaluation
    text = Text(f"Natural bucket overflow (crashed before the runtime's bucket search): {count_of(ev.natural_overflow, 'batch', 'batches')}\n")
    for seq in ev.overflow_examples:
        text.append(f"  extend_seq_lens {seq} (n={sum(seq)})\n")
    return text


def replays_table(replays: tuple[ReplayRecord, ...]) -> Table:
    """One row per replayed batch: bucket, verified against eager, error and time."""
    table = Table(title=f"Replays through captured graphs ({len(replays)})", title_justify="left")
    for name in ("extend_seq_lens", "bucket", "verified", "max_abs_err", "replay_ms"):
        table.add_column(name)
    for r in replays:
        table.add_row(str(r.extend_seq_lens), _or_dash(r.bucket), str(r.verified), _or_dash(r.max_abs_err), _or_dash(r.replay_ms))
    if replays and all(r.replay_ms is None for r in replays):
        table.caption = "no replay timings: a dry run (no CUDA device), graph pieces ran eagerly"
    return table


def _or_dash(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def render(report: CheckReport, output_format: OutputFormat, stdout_taken: bool = False) -> None:
    """Main output on stdout: the plan tables plus overflow and gates, or the JSON report; on
    stderr when a report file goes to stdout (`--json -` or `--junit -`)."""
    console = stderr_console() if stdout_taken else stdout_console()
    if output_format is OutputFormat.json:
        print_json(console, report_json(report))
        return
    parts: list = [evaluation_tables(report.evaluation, report.header), overflow_text(report)]
    if report.replays:
        parts.append(replays_table(report.replays))
    parts.append(gates_table(report))
    if not report.gates:
        parts.append(Text(NO_GATES_NOTE))
    console.print(Group(*parts))


def publish(report: CheckReport, junit: Optional[Path], json_path: Optional[Path]) -> None:
    """Report files (`--json -`: stdout), GitHub annotations (`GITHUB_ACTIONS=true`) and the
    step summary. The outputs were checked up front (`check_outputs`); the annotations and the
    step summary never change the verdict: a summary that cannot be appended is a warning."""
    if junit is not None:
        _write(junit, junit_xml(report))
    if json_path is not None:
        _write(json_path, report_json(report))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(report):  # stderr lines only: nothing here can fail on a file
            typer.echo(line, err=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            append_step_summary(summary, step_summary_markdown(report))
        except OSError as exc:
            typer.echo(f"cpbcg: warning: cannot append the step summary to {summary}: {exc.strerror or exc}", err=True)


def _write(path: Path, data: bytes) -> None:
    """A report file, written atomically; `-` is stdout."""
    if str(path) == STDOUT:
        typer.echo(data.decode(), nl=False)
    else:
        write_report(path, data)


def verdict(report: CheckReport) -> str:
    if not report.gates:
        return "replay-check: no gates configured (nothing to fail on)"
    if report.passed:
        n = len(report.gates)
        return "replay-check: passed the 1 gate" if n == 1 else f"replay-check: passed all {n} gates"
    lines = [f"replay-check: FAILED {len(report.failed)} of {count_of(len(report.gates), 'gate')}"]
    return "\n".join(lines + [f"  {g.message()}" for g in report.failed])


@app.command("replay-check")
@error_boundary
def replay_check(
    trace: TraceOpt = None,
    config: ConfigOpt = None,
    manifest: ManifestOpt = None,
    cp_size: CpSizeOpt = None,
    cp_strategy: StrategyOpt = None,
    align_size: AlignOpt = None,
    max_padding_factor: FactorOpt = None,
    buckets: BucketsOpt = None,
    capture_layout: CaptureLayoutOpt = None,
    max_context_size: MaxContextOpt = None,
    max_capture_requests: MaxCaptureReqOpt = None,
    trace_format: TraceFormatOpt = TraceFormat.auto,
    length_field: LengthFieldOpt = None,
    time_field: TimeFieldOpt = None,
    chunked_prefill_size: ChunkedPrefillOpt = None,
    max_prefill_tokens: MaxPrefillTokensOpt = None,
    prefill_max_requests: PrefillMaxRequestsOpt = None,
    max_running_requests: MaxRunningRequestsOpt = None,
    prefix_cache: PrefixCacheOpt = None,
    prefill_fixed_ms: PrefillFixedMsOpt = None,
    prefill_tokens_per_s: PrefillTokensPerSOpt = None,
    rate: RateOpt = None,
    time_scale: TimeScaleOpt = None,
    seed: SeedOpt = None,
    min_coverage: MinCovOpt = None,
    min_token_coverage: MinTokCovOpt = None,
    max_padding: MaxPadOpt = None,
    max_eager: MaxEagerOpt = None,
    junit: JunitOpt = None,
    json_path: JsonOpt = None,
    replay: ReplayOpt = 0,
    output_format: FormatOpt = OutputFormat.table,
) -> None:
    """Check in CI that a trace's batches replay in the captured graphs, and fail the build
    when they do not.

    Runs every batch through the runtime's bucket selector (the same evaluation as `cpbcg plan`),
    lists the batches whose natural bucket overflowed (the old runtime crashed on them), and
    checks the gates from the config's `gates:` section and the gate options.

    Buckets come from a capture manifest (`--manifest`, capacities as captured) or from
    `--buckets`/`--cp-size` (capacities computed). Without `--trace` the gates run on the
    embedded synthetic workload (a warning says so). Reports: `--junit`, `--json` (`--json -`
    for stdout), GitHub annotations when `GITHUB_ACTIONS=true`, a summary appended to
    `$GITHUB_STEP_SUMMARY` (a warning, not a failure, if it cannot be written).

    Exit codes: 0 all gates pass, 1 a gate failed, 2 bad input.

    Example: `cpbcg replay-check --config ci-gates-cp4 --trace lens.jsonl --junit report.xml`
    """
    check_outputs({"--junit": junit, "--json": json_path}, {"--trace": trace, "--manifest": manifest})
    if str(junit) == STDOUT and str(json_path) == STDOUT:
        raise ConfigError("--junit - and --json - would both write to stdout; send one to a file")
    dotted = gate_overrides(min_coverage, min_token_coverage, max_padding, max_eager or [])
    dotted.update(scheduler_overrides(locals()))
    loaded = load_manifest(manifest) if manifest is not None else None
    if loaded is not None and loaded.data.get("dry_run"):
        typer.echo(f"cpbcg: warning: {manifest} is a CPU dry run: no CUDA graph was captured, so its capacities come from the model", err=True)
    flags = deployment_overrides(locals())
    cfg = resolve_check_config(config, loaded, flags, dotted)
    trace_options = dict(trace_format=trace_format, length_field=length_field, time_field=time_field)
    warn_ignored_options(trace, trace_format, {**dotted, **trace_options})
    report = run_check(cfg, loaded, trace, trace_options, replay)
    render(report, output_format, stdout_taken=STDOUT in (str(junit), str(json_path)))
    publish(report, junit, json_path)
    if trace is None:
        typer.echo(NO_TRACE_WARNING, err=True)
    typer.echo(verdict(report), err=True)
    if not report.passed:
        raise typer.Exit(1)
