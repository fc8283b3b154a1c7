"""`cpbcg watch`: follow running SGLang servers' logs; live view, JSON lines, metrics, canary gates.

parse (`WatchCommandOptions`, declared once in `cpbcg.commands.watch_options`, and the shared
groups) -> call (`cpbcg.commands.watch.run`) -> render (`cpbcg.outputs.watch`: a live rich view on a
terminal or `--format json` lines while it runs, then the final tables and verdict) -> exit 0 / 1 / 2.
"""

from __future__ import annotations

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.options import DeploymentOptions, GateOptions, SchedulerOptions, with_options
from cpbcg.commands.watch_options import WatchCommandOptions, WatchOptions


@app.command("watch")
@error_boundary
@with_options(options=WatchCommandOptions, run=WatchOptions, deployment=DeploymentOptions, scheduler=SchedulerOptions, gates=GateOptions)
def watch(*, options: WatchCommandOptions, run: WatchOptions, deployment: DeploymentOptions, scheduler: SchedulerOptions,
          gates: GateOptions) -> None:
    """Follow running SGLang servers' logs and judge their prefill graphs live: observed and
    modelled coverage, eager forwards by reason, padding, forwards above the largest bucket, drift
    and what a refitted list would gain, over the run and rolling windows, per server and DP rank.

    Each server's settings are read from its log's start-up output, as `plan` reads them (options
    override); a server restarted into the same log is judged under the new launch's settings
    from its first forward on. A server whose prefill graphs are off (resolved disabled, no prefill capture line,
    a capture line with 0 buckets) is refused in one line and fails the run.

    Gates (config `gates:`, --min-observed-coverage, --min-coverage, --max-eager, ...) are checked
    over the whole run and over every full --window-forwards window: a canary job watches a fresh
    deployment for --duration seconds and fails it. `--format json` writes one JSON line per
    update and a final `result` line; `--serve-metrics` exports cpbcg_* metrics (docs/watch.md).

    Every stop (--duration, --max-forwards, the end of standard input, Ctrl-C, SIGTERM) ends with the
    final result and the gates' verdict on what was read. Exit codes: 0 all gates pass, 1 a gate
    failed or a server was refused (after SIGINT and SIGTERM too), 2 bad input.

    Example: `cpbcg watch server.log --duration 600 --min-observed-coverage 0.9 --window-forwards 2000`
    """
    from cpbcg.commands import watch as use_case
    from cpbcg.outputs.watch import live, write

    overrides = {**deployment.overrides(), **scheduler.overrides(), **gates.overrides()}
    with live(options.output_format) as on_snapshot:
        report = use_case.run(options, run, deployment.config, overrides, on_snapshot=on_snapshot, note=lambda text: typer.echo(text, err=True))
    code = write(report, options.output_format)
    if code:
        raise typer.Exit(code)
