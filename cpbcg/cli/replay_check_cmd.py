"""`cpbcg replay-check`: evaluate captured buckets on a trace and gate CI on the result.

parse (config + manifest + gate options) → call (`cpbcg.api.check`: evaluation, gates, optional
real replays) → render (tables, JSON, JUnit, annotations, step summary) → exit 0 / 1 / 2.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

from typing import TYPE_CHECKING

import typer

from cpbcg.atomic import STDOUT, output_path
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import FormatOpt, OutputFormat, print_json, stderr_console, stdout_console
from cpbcg.cli.options import DeploymentOptions, GateOptions, SchedulerOptions, TraceOptions, with_options
from cpbcg.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from cpbcg.api import CheckReport, ReplayRecord
    from cpbcg.atomic import OutputGroup

ManifestOpt = Annotated[Optional[Path], typer.Option("--manifest", "-m", help="Capture manifest (`cpbcg capture -o`): buckets, capacities and CP settings come from it.", show_default=False)]
MaxEagerOpt = Annotated[Optional[list[str]], typer.Option("--max-eager", metavar="REASON=N", help="Gate: at most N eager batches for REASON (not_cp_active, above_largest_bucket, padding_limit, local_capacity, context_limit, multimodal_input). Repeatable.", show_default=False)]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", parser=output_path, help="Write a JUnit XML report (one test case per gate); `-` writes it to stdout.", show_default=False)]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", parser=output_path, help="Write the JSON report (the plan JSON plus gates) to this file; `-` writes it to stdout.", show_default=False)]
ReportOnlyOpt = Annotated[bool, typer.Option("--report-only", help="Run without any gate: report coverage and exit 0. Without it, a run with no gate (config gates:, --min-coverage, --max-eager, ..., --replay) is refused with exit 2, so a CI job that forgot its gates is not green.")]
EmbeddedOpt = Annotated[bool, typer.Option("--embedded-sample", help="Gate the embedded synthetic workload on purpose (no --trace): a smoke test of the gates, not of your traffic. Without it, gating with no --trace is refused (exit 2), so a CI job that forgot its trace is not green.")]
ReplayOpt = Annotated[int, typer.Option("--replay", min=0, max=4096, help="Replay N sampled graph batches through freshly captured graphs and compare with eager (needs torch; CUDA if present, else a dry run). Adds the replay_verified gate.")]

def gates_table(report: CheckReport) -> Table:
    """Gate, measured value, threshold and verdict per gate."""
    from rich.table import Table

    table = Table(title="Gates", title_justify="left")
    for name in ("gate", "measured", "threshold", "result"):
        table.add_column(name, justify="right" if name in ("measured", "threshold") else "left")
    for g in report.gates:
        table.add_row(g.name, g.measured_text, f"{g.comparison} {g.threshold_text}", "pass" if g.passed else "FAIL")
    return table


NO_GATES_NOTE = "no gates configured: set gates: in the config or --min-coverage, --max-eager, ..."
"""Printed under the empty gate table as a plain line (a caption would be cut in narrow terminals)."""
NO_TRACE_WARNING = "cpbcg: warning: no --trace given; the gates ran on the embedded synthetic workload, not on your traffic"


def overflow_text(report: CheckReport) -> Text:
    """The first natural-bucket overflows as `extend_seq_lens` (old runtime crashed on them)."""
    from rich.text import Text

    from cpbcg.api import count_of

    ev = report.evaluation
    text = Text(f"Natural bucket overflow (crashed before the runtime's bucket search): {count_of(ev.natural_overflow, 'batch', 'batches')}\n")
    for seq in ev.overflow_examples:
        text.append(f"  extend_seq_lens {seq} (n={sum(seq)})\n")
    return text


def replays_table(replays: tuple[ReplayRecord, ...]) -> Table:
    """One row per replayed batch: bucket, verified against eager, error and time."""
    from rich.table import Table

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
    """Main output on stdout: the plan tables plus overflow and gates, or the JSON report (with
    the simulation summary); on stderr when a report file goes to stdout (`--json -` or `--junit -`)."""
    from rich.console import Group
    from rich.text import Text

    from cpbcg.api import report_json
    from cpbcg.cli.render import evaluation_tables, summed_header

    if output_format is OutputFormat.json:
        print_json(report_json(report, report.simulation), to_stderr=stdout_taken)
        return
    console = stderr_console() if stdout_taken else stdout_console()
    from cpbcg.cli.log_report import observed_renderable

    parts: list = [evaluation_tables(report.evaluation, summed_header(report.header, report.parts)), overflow_text(report)]
    observed_view = observed_renderable(report.observed, None)
    if observed_view is not None:
        parts.append(observed_view)
    if report.replays:
        parts.append(replays_table(report.replays))
    parts.append(gates_table(report))
    if not report.gates:
        parts.append(Text(NO_GATES_NOTE))
    console.print(Group(*parts))


def publish(report: CheckReport, junit: Optional[Path], json_path: Optional[Path]) -> None:
    """Report files (`--json -`: stdout; both files written together or neither), GitHub
    annotations (`GITHUB_ACTIONS=true`) and the step summary. The outputs were checked up front
    (`check_outputs`); the annotations and the step summary never change the verdict: a summary
    that cannot be appended is a warning. The JSON report carries the simulation summary."""
    from cpbcg.api import append_step_summary, github_annotations, junit_xml, report_json, step_summary_markdown
    from cpbcg.atomic import OutputGroup

    with OutputGroup() as outputs:
        if junit is not None:
            _write(junit, junit_xml(report), outputs)
        if json_path is not None:
            _write(json_path, report_json(report, report.simulation), outputs)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(report):  # stderr lines only: nothing here can fail on a file
            typer.echo(line, err=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            append_step_summary(summary, step_summary_markdown(report))
        except OSError as exc:
            typer.echo(f"cpbcg: warning: cannot append the step summary to {summary}: {exc.strerror or exc}", err=True)


def _write(path: Path, data: bytes, outputs: "OutputGroup") -> None:
    """A report file, staged in `outputs` (an `OutputGroup`); `-` is stdout."""
    if str(path) == STDOUT:
        typer.echo(data.decode(), nl=False)
    else:
        outputs.write(path, data)


def verdict(report: CheckReport) -> str:
    from cpbcg.api import count_of

    if not report.gates:
        return "cpbcg: note: replay-check: no gates configured (--report-only): nothing to fail on"
    if report.passed:
        n = len(report.gates)
        return "replay-check: passed the 1 gate" if n == 1 else f"replay-check: passed all {n} gates"
    lines = [f"replay-check: FAILED {len(report.failed)} of {count_of(len(report.gates), 'gate')}"]
    return "\n".join(lines + [f"  {g.message()}" for g in report.failed])


@app.command("replay-check")
@error_boundary
@with_options(deployment=DeploymentOptions, trace=TraceOptions, scheduler=SchedulerOptions, gates=GateOptions)
def replay_check(
    manifest: ManifestOpt = None,
    max_eager: MaxEagerOpt = None,
    junit: JunitOpt = None,
    json_path: JsonOpt = None,
    replay: ReplayOpt = 0,
    output_format: FormatOpt = OutputFormat.table,
    report_only: ReportOnlyOpt = False,
    embedded_sample: EmbeddedOpt = False,
    *,
    deployment: DeploymentOptions,
    trace: TraceOptions,
    scheduler: SchedulerOptions,
    gates: GateOptions,
) -> None:
    """Check in CI that a trace's batches replay in the captured graphs, and fail the build
    when they do not.

    Runs every batch through the runtime's bucket selector (the same evaluation as `cpbcg plan`),
    lists the batches whose natural bucket overflowed (the old runtime crashed on them), and
    checks the gates from the config's `gates:` section and the gate options.

    Buckets come from a capture manifest (`--manifest`, capacities as captured) or from
    `--buckets`/`--cp-size` (capacities computed). Without `--trace` it refuses to gate (exit
    2) unless `--embedded-sample` asks for the embedded synthetic workload (a warning says so). Reports: `--junit`, `--json` (`--json -`
    for stdout), GitHub annotations when `GITHUB_ACTIONS=true`, a summary appended to
    `$GITHUB_STEP_SUMMARY` (a warning, not a failure, if it cannot be written).

    Exit codes: 0 all gates pass, 1 a gate failed, 2 bad input or no gate at all (unless
    `--report-only`; `cpbcg --help` lists them all).

    Example: `cpbcg replay-check --config ci-gates-cp4 --trace lens.jsonl --junit report.xml`
    """
    from cpbcg import api
    from cpbcg.atomic import check_outputs
    from cpbcg.cli.options import request_only_flags
    from cpbcg.cli.trace_progress import TraceProgress

    check_outputs({"--junit": junit, "--json": json_path}, {"--trace": trace.trace, "--manifest": manifest})
    if str(junit) == STDOUT and str(json_path) == STDOUT:
        raise ConfigError("--junit - and --json - would both write to stdout; send one to a file")
    overrides = {**deployment.overrides(), **scheduler.overrides(), **gates.overrides()}
    with TraceProgress() as bar:
        report = api.check_trace(deployment.config, overrides, manifest, trace.trace, max_eager=max_eager, replay=replay,
                                 report_only=report_only, embedded_sample=embedded_sample, **trace.reader_options(),
                                 ignored_flags=request_only_flags(trace, scheduler), note=lambda text: typer.echo(text, err=True),
                                 progress=bar.requests, on_chunk=bar.forwards)
    render(report, output_format, stdout_taken=STDOUT in (str(junit), str(json_path)))
    publish(report, junit, json_path)
    if trace.trace is None:
        typer.echo(NO_TRACE_WARNING, err=True)
    typer.echo(verdict(report), err=True)
    if not report.passed:
        raise typer.Exit(ExitCode.GATE_FAILED)
