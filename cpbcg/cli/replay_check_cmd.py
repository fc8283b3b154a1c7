"""`cpbcg replay-check`: evaluate captured buckets on a trace and gate CI on the result.

parse (`ReplayCheckOptions` and the shared groups) → call (`cpbcg.commands.replay_check.run`:
evaluation, gates, optional real replays) → output (`cpbcg.outputs.replay_check.write`: tables,
JSON, JUnit, annotations, step summary) → exit 0 / 1 / 2.
"""

from __future__ import annotations

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.commands.replay_check_options import ReplayCheckOptions
from cpbcg.cli.options import DeploymentOptions, GateOptions, SchedulerOptions, TraceOptions, with_options


@app.command("replay-check")
@error_boundary
@with_options(options=ReplayCheckOptions, deployment=DeploymentOptions, trace=TraceOptions, scheduler=SchedulerOptions, gates=GateOptions)
def replay_check(*, options: ReplayCheckOptions, deployment: DeploymentOptions, trace: TraceOptions, scheduler: SchedulerOptions,
                 gates: GateOptions) -> None:
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

    Exit codes: 0 all gates pass, 1 a gate failed, 2 bad input, no gate at all, or an SGLang
    log a launch of which ran its prefill forwards with prefill graphs off (each unless
    `--report-only`; `cpbcg --help` lists them all).

    Example: `cpbcg replay-check --config ci-gates-cp4 --trace lens.jsonl --junit report.xml`
    """
    from cpbcg.cli.options import request_only_flags
    from cpbcg.cli.trace_progress import TraceProgress
    from cpbcg.commands.replay_check import run
    from cpbcg.outputs.replay_check import write

    overrides = {**deployment.overrides(), **scheduler.overrides(), **gates.overrides()}
    with TraceProgress() as bar:
        report = run(options, deployment.config, overrides, trace.trace, **trace.reader_options(),
                     ignored_flags=request_only_flags(trace, scheduler), note=lambda text: typer.echo(text, err=True),
                     progress=bar.requests, on_chunk=bar.forwards)
    code = write(report, options, trace_given=trace.trace is not None)
    if code:
        raise typer.Exit(code)
