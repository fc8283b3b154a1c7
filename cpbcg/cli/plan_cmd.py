"""`cpbcg plan`: replay a trace with the configured bucket list and recommend the list to capture.

parse (`PlanOptions`, declared once in `cpbcg.commands.plan_options`, and the shared groups) ->
call (`cpbcg.commands.plan.plan_command`) -> hand the report to its output (`cpbcg.outputs.plan.write`).
"""

from __future__ import annotations


import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.commands.plan_options import PlanOptions
from cpbcg.cli.options import CostOptions, DeploymentOptions, SchedulerOptions, TraceOptions, with_options


@app.command()
@error_boundary
@with_options(options=PlanOptions, deployment=DeploymentOptions, trace=TraceOptions, scheduler=SchedulerOptions, cost=CostOptions)
def plan(*, options: PlanOptions, deployment: DeploymentOptions, trace: TraceOptions, scheduler: SchedulerOptions, cost: CostOptions) -> None:
    """Replay a trace through the runtime's bucket selector, report how the configured list
    serves it (coverage, padding, eager forwards by reason, rescued forwards, hits per bucket),
    and recommend the list to capture: validated out of sample, with the flags to deploy it.

    Without `--trace` it runs on the embedded default workload (a seeded synthetic chat
    stream). Request traces (Mooncake, Azure, vidur, generic CSV/JSONL) are first turned into
    prefill forwards by the scheduler simulation (docs/scheduler.md).

    Several traces (`--trace A --trace B`, a glob, a directory) and load factors
    (`--time-scale 0.5,1,2,4`) plan together: each trace at each load is simulated (in
    parallel, `--jobs`, or on a Dask cluster, `--scheduler`), the list is fitted to all of them,
    and each is reported with the configured and the recommended list.

    Example: `cpbcg plan --trace lens.jsonl --cp-size 4 --emit sglang -o flags.txt`
    """
    from cpbcg.cli.options import request_only_flags
    from cpbcg.cli.trace_progress import TraceProgress
    from cpbcg.commands.plan import plan_command
    from cpbcg.outputs.plan import write

    overrides = {**deployment.overrides(), **scheduler.overrides(several_loads=True), **cost.overrides()}
    held: list[str] = []  # the notes: after the verdict's screen (the answer first), or as they are when the command fails

    def flush() -> None:
        for text in held:
            typer.echo(text, err=True)
        held.clear()

    try:
        with TraceProgress() as bar:
            report = plan_command(deployment.config, overrides, options, trace.traces, manifest_path=cost.manifest, cost_given=cost.given,
                                  **trace.reader_options(), ignored_flags=request_only_flags(trace, scheduler),
                                  note=held.append, progress=bar.requests, on_chunk=bar.forwards,
                                  load_factors=scheduler.load_factors(), untimed_rates="auto" if scheduler.rate is None else None,
                                  invocation=_invocation())
    except BaseException:
        flush()
        raise
    try:
        code = write(report, options, flush)
    finally:
        flush()
    if code:
        raise typer.Exit(code)


def _invocation() -> list[str] | None:
    """This process's arguments after `plan` (None when not run from a command line, e.g. a test runner)."""
    import sys

    args = sys.argv[1:]
    if not sys.argv[0].endswith(("cpbcg", "__main__.py")) or "plan" not in args:
        return None
    return args[args.index("plan") + 1:]
