"""`cpbcg watch`: follow running SGLang servers' logs; live view, JSON lines, metrics, canary gates.

parse (logs, deployment, gates, window and stop options) -> call (`cpbcg.api.watch`) -> render
(a live rich view on a terminal, `--format json` lines, the final tables and verdict) -> exit 0 / 1 / 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import FormatOpt, OutputFormat, stdout_console
from cpbcg.cli.options import DeploymentOptions, GateOptions, SchedulerOptions, finite_option, with_options
from cpbcg.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import RenderableType

    from cpbcg.api import Evaluation, ObservedComparison, WatchReport, WatchSnapshot

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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.2f}%"


def _eager_text(eager: dict[str, int]) -> str:
    """The model's eager forwards other than above the largest bucket (a column of its own)."""
    return ", ".join(f"{r} {c:,}" for r, c in eager.items() if c and r != "above_largest_bucket") or "-"


def snapshot_view(snap: WatchSnapshot) -> RenderableType:
    """One table per server: a row for the run and one per window (and DP rank with several)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [Text(f"cpbcg watch: {snap.forwards:,} prefill forwards in {snap.elapsed_s:.0f} s")]
    for server in snap.servers:
        if server.refusal:
            parts.append(Text(f"{server.name}: REFUSED: {server.refusal}"))
            continue
        current = server.current
        launch = "" if current is None else f"launch {current.launch} (from line {current.first_line:,}): "
        table = Table(title=f"{server.name}: {server.forwards:,} forwards; {launch}{len(server.buckets)} buckets up to "
                      f"{max(server.buckets, default=0):,}", title_justify="left")
        for name in ("window", "dp", "forwards", "observed", "modelled", "padding", "> largest", "unexplained eager", "other eager (model)", "drift"):
            table.add_column(name, justify="left" if name in ("window", "dp", "other eager (model)") else "right")
        rows: list[tuple[str, str, int, ObservedComparison | None, Evaluation, float | None]] = []
        if server.evaluation is not None:
            ob = server.observed
            rows.append(("run", "all", server.forwards, ob, server.evaluation, None))
        for kind, per in server.windows.items():
            rows += [(kind, key, w.forwards, w.observed, w.evaluation, w.drift) for key, w in per.items()]
        for kind, key, forwards, ob, ev, drift in rows:
            if not forwards:
                continue  # nothing read (a warning says so): no coverage to show
            table.add_row(kind, key, f"{forwards:,}", _pct(None if ob is None else ob.coverage), _pct(ev.coverage), _pct(ev.padding_overhead),
                          f"{ev.eager.get('above_largest_bucket', 0):,}", "-" if ob is None else f"{ob.unexplained_eager:,}",
                          _eager_text(ev.eager), "-" if drift is None else f"{drift:.3f}")
        parts.append(table)
        if len(server.launches) > 1:  # a restart: each launch judged under its own settings
            parts.append(Text("  launches (restarts; each under its own settings): " + "; ".join(
                f"{v.launch} from line {v.first_line:,}: {v.forwards:,} forwards, {len(v.buckets)} buckets up to {max(v.buckets, default=0):,}, "
                f"modelled {_pct(v.evaluation.coverage)}" for v in server.launches)))
        if current is not None and current.assumed:
            parts.append(Text("  assumed for launch " + f"{current.launch}: " + "; ".join(a.text() for a in current.assumed)))
        gain = server.gain
        if isinstance(gain, str):
            parts.append(Text(f"  refit on the forwards window: {gain}"))
        elif gain is not None:
            parts.append(Text(f"  refit on the forwards window: {len(gain.buckets)} buckets would replay {_pct(gain.coverage)} "
                              f"(now {_pct(gain.current_coverage)}, {100.0 * gain.gain:+.2f} points; modelled)"))
        if server.metrics is not None:
            m = server.metrics
            total = m.prefill_graph_passes + m.prefill_eager_passes
            parts.append(Text(f"  SGLang metrics ({m.url}): {total:,.0f} prefill passes, {_pct(m.prefill_graph_passes / total if total else None)} "
                              "in graphs; graph memory " + (", ".join(f"{p} {gb:.2f} GB" for p, gb in m.graph_memory_gb.items()) or "-")))
        elif server.metrics_error:
            parts.append(Text(f"  SGLang metrics: {server.metrics_error}"))
    parts.append(Text("observed: the server's `cuda graph: True` share; modelled: SGLang 0.5.23's selector on the same forwards at their "
                      "worst case; unexplained eager: the model replays, the server ran eagerly; drift: total variation from "
                      "--baseline-trace (0 same sizes, 1 none in common)", style="dim"))
    return Group(*parts)


def gates_view(report: WatchReport) -> RenderableType:
    """Gate, measured value, threshold and verdict per gate (whole run, then the worst window)."""
    from rich.table import Table

    table = Table(title="Gates", title_justify="left")
    for name in ("gate", "measured", "threshold", "result", "where"):
        table.add_column(name, justify="right" if name in ("measured", "threshold") else "left")
    for g in report.gates:
        table.add_row(g.name, g.measured_text, f"{g.comparison} {g.threshold_text}", "pass" if g.passed else "FAIL",
                      g.detail if g.name.startswith("window.") else "whole run")
    return table


def verdict(report: WatchReport) -> str:
    """The closing lines on stderr: refusals, then the gates (replay-check's wording)."""
    from cpbcg.api import count_of

    lines = [f"watch: FAILED: {r}" for r in report.refusals]
    lines += [f"cpbcg: note: {u}" for u in (*report.notes, *report.unchecked)]
    if not report.gates:
        lines.append(f"watch: stopped by {report.stopped_by}; no gates configured: nothing to fail on" if not report.refusals
                     else f"watch: stopped by {report.stopped_by}")
    elif all(g.passed for g in report.gates):
        lines.append(f"watch: stopped by {report.stopped_by}; passed all {count_of(len(report.gates), 'gate')}")
    else:
        failed = [g for g in report.gates if not g.passed]
        lines.append(f"watch: stopped by {report.stopped_by}; FAILED {len(failed)} of {count_of(len(report.gates), 'gate')}")
        lines += [f"  {g.message()}" for g in failed]
    return "\n".join(lines)


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

    options = api.watch_options(window_forwards=window_forwards, window_seconds=window_seconds, ring_forwards=ring_forwards,
                                gate_step=gate_step, interval_s=interval, recommend_every_s=recommend_every, duration_s=duration,
                                max_forwards=max_forwards)
    overrides = {**deployment.overrides(), **scheduler.overrides(), **gates.overrides()}
    note = lambda text: typer.echo(text, err=True)  # noqa: E731
    if output_format is OutputFormat.json:
        import orjson

        def emit(snap: WatchSnapshot) -> None:
            if not snap.final:
                sys.stdout.write(orjson.dumps(snap.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode() + "\n")
                sys.stdout.flush()

        report = api.watch(logs, deployment.config, overrides, options, max_eager=max_eager, metrics_urls=metrics_url or [],
                           serve_metrics=serve_metrics, baseline_trace=baseline_trace, on_snapshot=emit, note=note)
        sys.stdout.write(orjson.dumps(report.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode() + "\n")
    else:
        console = stdout_console()
        if console.is_terminal:
            from rich.live import Live

            with Live(console=console, auto_refresh=False, transient=True) as live:
                report = api.watch(logs, deployment.config, overrides, options, max_eager=max_eager, metrics_urls=metrics_url or [],
                                   serve_metrics=serve_metrics, baseline_trace=baseline_trace,
                                   on_snapshot=lambda snap: live.update(snapshot_view(snap), refresh=True), note=note)
        else:
            report = api.watch(logs, deployment.config, overrides, options, max_eager=max_eager, metrics_urls=metrics_url or [],
                               serve_metrics=serve_metrics, baseline_trace=baseline_trace, note=note)
        console.print(snapshot_view(report.snapshot))
        if report.gates:
            console.print(gates_view(report))
    typer.echo(verdict(report), err=True)
    if not report.passed:
        raise typer.Exit(ExitCode.GATE_FAILED)
