"""`cpbcg watch`: follow running SGLang servers' logs; live view, JSON lines, metrics, canary gates.

parse (logs, deployment, gates, window and stop options) -> call (`cpbcg.api.watch`) -> render
(a live rich view on a terminal, `--format json` lines, the final tables and verdict) -> exit 0 / 1 / 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import FormatOpt, OutputFormat, stdout_console
from cpbcg.cli.options import DeploymentOptions, GateOptions, SchedulerOptions, finite_option, with_options
from cpbcg.errors import ExitCode


LogsArg = Annotated[list[str], typer.Argument(metavar="LOG...", help="SGLang server logs to follow like `tail -F` (rotation and truncation survive); `-` reads standard input (`kubectl logs -f POD | cpbcg watch -`). One server each.", show_default=False)]
MetricsUrlOpt = Annotated[Optional[list[str]], typer.Option("--metrics-url", metavar="URL", help="The server's SGLang metrics endpoint (`--enable-metrics`; http://HOST:PORT/metrics), scraped every --interval: prefill passes by mode, graph memory and capture time beside the log. Repeatable: one per LOG, in order.", show_default=False)]
ServeOpt = Annotated[Optional[str], typer.Option("--serve-metrics", metavar="HOST:PORT", help="Serve cpbcg_* Prometheus metrics over HTTP on HOST:PORT (port 0: any free port, printed on stderr); docs/watch.md lists them.", show_default=False)]
DurationOpt = Annotated[Optional[float], finite_option("--duration", min=0.0, max=1e7, metavar="SECONDS", help="Stop after SECONDS (a canary's watch). Without it and --max-forwards: Ctrl-C, or the end of standard input.", show_default=False)]
MaxForwardsOpt = Annotated[Optional[int], typer.Option("--max-forwards", min=1, max=2**62, metavar="N", help="Stop after N prefill forwards (all logs together).", show_default=False)]
WindowForwardsOpt = Annotated[int, typer.Option("--window-forwards", min=1, max=1_000_000, metavar="N", help="Forwards in the rolling forwards window (per server); the window gates check every full window.")]
WindowSecondsOpt = Annotated[float, finite_option("--window-seconds", min=0.1, max=86_400.0, metavar="SECONDS", help="Seconds in the rolling time window (at most --ring-forwards forwards).")]
GateStepOpt = Annotated[Optional[int], typer.Option("--gate-step", min=1, max=1_000_000, metavar="N", help="Forwards between two gated windows (default: a quarter of --window-forwards).", show_default=False)]
RingOpt = Annotated[int, typer.Option("--ring-forwards", min=1, max=10_000_000, metavar="N", help="Forwards kept per server for the windows (73 bytes each): bounds memory whatever the log's length.")]
IntervalOpt = Annotated[float, finite_option("--interval", min=0.05, max=3600.0, metavar="SECONDS", help="Seconds between two updates (live view, JSON lines, exporter, --metrics-url scrapes).")]
RecommendEveryOpt = Annotated[float, finite_option("--recommend-every", min=0.0, max=86_400.0, metavar="SECONDS", help="Seconds between two fits of the recommended list to the forwards window (0: only at the end).")]
BaselineOpt = Annotated[Optional[Path], typer.Option("--baseline-trace", metavar="TRACE", help="The trace the list was planned on (any format plan reads): the windows report the drift of their size distribution from it.", show_default=False)]
MaxEagerOpt = Annotated[Optional[list[str]], typer.Option("--max-eager", metavar="REASON=N", help="Gate: at most N eager forwards for REASON (as replay-check), over the run and over every window. Repeatable.", show_default=False)]












@app.command("watch")
@error_boundary
@with_options(deployment=DeploymentOptions, scheduler=SchedulerOptions, gates=GateOptions)
def watch(
    logs: LogsArg,
    metrics_url: MetricsUrlOpt = None,
    serve_metrics: ServeOpt = None,
    duration: DurationOpt = None,
    max_forwards: MaxForwardsOpt = None,
    window_forwards: WindowForwardsOpt = 10_000,
    window_seconds: WindowSecondsOpt = 60.0,
    gate_step: GateStepOpt = None,
    ring_forwards: RingOpt = 131_072,
    interval: IntervalOpt = 1.0,
    recommend_every: RecommendEveryOpt = 60.0,
    baseline_trace: BaselineOpt = None,
    max_eager: MaxEagerOpt = None,
    output_format: FormatOpt = OutputFormat.table,
    *,
    deployment: DeploymentOptions,
    scheduler: SchedulerOptions,
    gates: GateOptions,
) -> None:
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

    Exit codes: 0 all gates pass, 1 a gate failed or a server was refused, 2 bad input.

    Example: `cpbcg watch server.log --duration 600 --min-observed-coverage 0.9 --window-forwards 2000`
    """
    from cpbcg import api
    from cpbcg.commands import watch as watch_use_case
    from cpbcg.outputs.console import assert_never
    from cpbcg.outputs.notes import launch_notes
    from cpbcg.outputs.watch import gates_view, snapshot_view, verdict

    options = watch_use_case.watch_options(window_forwards=window_forwards, window_seconds=window_seconds, ring_forwards=ring_forwards,
                                gate_step=gate_step, interval_s=interval, recommend_every_s=recommend_every, duration_s=duration,
                                max_forwards=max_forwards)
    overrides = {**deployment.overrides(), **scheduler.overrides(), **gates.overrides()}
    note = lambda text: typer.echo(text, err=True)  # noqa: E731
    if output_format is OutputFormat.json:
        from cpbcg.outputs.watch import report_json_line, snapshot_json_line

        def emit(snap: object) -> None:
            line = snapshot_json_line(snap)
            if line is not None:
                sys.stdout.write(line)
                sys.stdout.flush()

        report = api.watch(logs, deployment.config, overrides, options, max_eager=max_eager, metrics_urls=metrics_url or [],
                           serve_metrics=serve_metrics, baseline_trace=baseline_trace, on_snapshot=emit, note=note, launch_notes=launch_notes)
        sys.stdout.write(report_json_line(report))
    elif output_format is OutputFormat.table:
        console = stdout_console()
        if console.is_terminal:
            from rich.live import Live

            with Live(console=console, auto_refresh=False, transient=True) as live:
                report = api.watch(logs, deployment.config, overrides, options, max_eager=max_eager, metrics_urls=metrics_url or [],
                                   serve_metrics=serve_metrics, baseline_trace=baseline_trace,
                                   on_snapshot=lambda snap: live.update(snapshot_view(snap), refresh=True), note=note, launch_notes=launch_notes)
        else:
            report = api.watch(logs, deployment.config, overrides, options, max_eager=max_eager, metrics_urls=metrics_url or [],
                               serve_metrics=serve_metrics, baseline_trace=baseline_trace, note=note, launch_notes=launch_notes)
        console.print(snapshot_view(report.snapshot))
        if report.gates:
            console.print(gates_view(report))
    else:
        assert_never(output_format)
    typer.echo(verdict(report), err=True)
    if not report.passed:
        raise typer.Exit(ExitCode.GATE_FAILED)
