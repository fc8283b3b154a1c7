"""`cpbcg replay-check`: evaluate captured buckets on a trace and gate CI on the result.

parse (config + manifest + gate options) → call (`cpbcg.api.check`: evaluation, gates, optional
real replays) → render (tables, JSON, JUnit, annotations, step summary) → exit 0 / 1 / 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from typing import TYPE_CHECKING

import typer

from cpbcg.atomic import STDOUT, output_path
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import FormatOpt, OutputFormat
from cpbcg.cli.options import DeploymentOptions, GateOptions, SchedulerOptions, TraceOptions, with_options
from cpbcg.errors import ConfigError, ExitCode

if TYPE_CHECKING:

    pass

ManifestOpt = Annotated[Optional[Path], typer.Option("--manifest", "-m", help="Capture manifest (`cpbcg capture -o`): buckets, capacities and CP settings come from it.", show_default=False)]
MaxEagerOpt = Annotated[Optional[list[str]], typer.Option("--max-eager", metavar="REASON=N", help="Gate: at most N eager batches for REASON (not_cp_active, above_largest_bucket, padding_limit, local_capacity, context_limit, multimodal_input). Repeatable.", show_default=False)]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", parser=output_path, help="Write a JUnit XML report (one test case per gate); `-` writes it to stdout.", show_default=False)]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", parser=output_path, help="Write the JSON report (the plan JSON plus gates) to this file; `-` writes it to stdout.", show_default=False)]
ReportOnlyOpt = Annotated[bool, typer.Option("--report-only", help="Run without any gate: report coverage and exit 0. Without it, a run with no gate (config gates:, --min-coverage, --max-eager, ..., --replay) is refused with exit 2, so a CI job that forgot its gates is not green.")]
EmbeddedOpt = Annotated[bool, typer.Option("--embedded-sample", help="Gate the embedded synthetic workload on purpose (no --trace): a smoke test of the gates, not of your traffic. Without it, gating with no --trace is refused (exit 2), so a CI job that forgot its trace is not green.")]
ReplayOpt = Annotated[int, typer.Option("--replay", min=0, max=4096, help="Replay N sampled graph batches through freshly captured graphs and compare with eager (needs torch; CUDA if present, else a dry run). Adds the replay_verified gate.")]



NO_TRACE_WARNING = "cpbcg: warning: no --trace given; the gates ran on the embedded synthetic workload, not on your traffic"
















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
    from cpbcg.commands import replay_check
    from cpbcg.outputs.replay_check import publish, render, verdict
    from cpbcg.atomic import check_outputs
    from cpbcg.cli.options import request_only_flags
    from cpbcg.cli.trace_progress import TraceProgress

    check_outputs({"--junit": junit, "--json": json_path}, {"--trace": trace.trace, "--manifest": manifest})
    if str(junit) == STDOUT and str(json_path) == STDOUT:
        raise ConfigError("--junit - and --json - would both write to stdout; send one to a file")
    overrides = {**deployment.overrides(), **scheduler.overrides(), **gates.overrides()}
    with TraceProgress() as bar:
        report = replay_check.check_trace(deployment.config, overrides, manifest, trace.trace, max_eager=max_eager, replay=replay,
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
