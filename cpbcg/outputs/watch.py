"""`cpbcg watch` rendered: the live snapshot table, the gates and the one-line verdict (rich), or
JSON lines; every `--format` has its arm in `live` and `write` (`assert_never`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from cpbcg.errors import ExitCode
from cpbcg.outputs.console import OutputFormat, assert_never, echo, release_stderr, stdout_console






if TYPE_CHECKING:
    from rich.console import RenderableType

    from cpbcg.planner.evaluate import Evaluation
    from cpbcg.engines.sglang.observed import ObservedComparison
    from cpbcg.watching.session import ServerView, WatchReport, WatchSnapshot


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
        parts.append(Text(freshness_line(server), style="dim"))
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
            said = "" if server.observed is None else f" (the log read: {_pct(server.observed.coverage)})"
            parts.append(Text(f"  SGLang metrics ({m.url}): {total:,.0f} prefill passes since the server started, "
                              f"{_pct(m.prefill_graph_passes / total if total else None)} in graphs{said}; graph memory "
                              + (", ".join(f"{p} {gb:.2f} GiB" for p, gb in m.graph_memory_gb.items()) or "-")))
        elif server.metrics_error:
            parts.append(Text(f"  SGLang metrics: {server.metrics_error}"))
    drift = any(w.drift is not None for server in snap.servers for per in server.windows.values() for w in per.values())
    parts.append(Text("observed: the server's `cuda graph: True` share; modelled: SGLang 0.5.23's selector on the same forwards at their "
                      "worst case; unexplained eager: the model replays, the server ran eagerly" + (
                          "; drift: total variation from --baseline-trace (0 same sizes, 1 none in common)" if drift else ""), style="dim"))
    return Group(*parts)


def freshness_line(server: ServerView) -> str:
    """`INSTANCE SERVER: 1,234 lines (5.2 MiB) read; last line 0 s ago; reader lag 0.0 s[; ...]`."""
    f = server.freshness
    age = max(0.0, server.snapshot_unix - f.last_line_unix)
    events = [f"{n:,} {what}" for n, what in ((server.rotations, "rotations"), (server.truncations, "truncations")) if n]
    scrape = "" if f.scrape_unix is None else f"; last good scrape {max(0.0, server.snapshot_unix - f.scrape_unix):.0f} s ago"
    return (f"{server.instance} {server.name}: {f.lines_read:,} lines ({f.bytes_read / (1 << 20):.1f} MiB) read; last line {age:.0f} s ago; "
            f"reader lag {f.reader_lag_s:.1f} s" + (f", {f.unread_bytes:,} bytes unread" if f.unread_bytes else "") + scrape
            + ("; " + ", ".join(events) if events else ""))


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
    from cpbcg.gates.gates import count_of

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




def snapshot_json_line(snap: object) -> str | None:
    """One JSON line of a live snapshot (`--format json`), None for the final one (the report follows)."""
    import orjson

    from cpbcg.watching.session import WatchSnapshot

    assert isinstance(snap, WatchSnapshot)
    if snap.final:
        return None
    return orjson.dumps(snap.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode() + "\n"


def report_json_line(report: WatchReport) -> str:
    """The final `result` JSON line of a run (`--format json`)."""
    import orjson

    return orjson.dumps(report.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode() + "\n"


def _release_once_read(snap: WatchSnapshot) -> None:
    """Show the held notes once a log has been read (a log that never appears ends in its error,
    which must come first: the notes are dropped then)."""
    if any(server.freshness.bytes_read for server in snap.servers):
        release_stderr()


@contextmanager
def live(output_format: OutputFormat) -> Iterator[Callable[[WatchSnapshot], None]]:
    """While a watch runs, what shows each update (the use case's `on_snapshot`): one JSON line on
    stdout per update (`json`), a live view on a terminal (`table`; nothing more elsewhere). The
    first update after a log was read shows the notes held until then (`release_stderr`, the one
    refusal path) and later ones as they come."""
    if output_format is OutputFormat.json:
        def emit(snap: WatchSnapshot) -> None:
            _release_once_read(snap)
            line = snapshot_json_line(snap)
            if line is not None:
                echo(line, nl=False)

        yield emit
    elif output_format is OutputFormat.table:
        console = stdout_console(answer=False)
        if console.is_terminal:
            from rich.live import Live

            with Live(console=console, auto_refresh=False, transient=True) as view:
                def show(snap: WatchSnapshot) -> None:
                    _release_once_read(snap)
                    view.update(snapshot_view(snap), refresh=True)

                yield show
        else:
            yield _release_once_read
    else:
        assert_never(output_format)


def write(report: WatchReport, output_format: OutputFormat) -> ExitCode:
    """A finished watch: the final `result` JSON line (`json`) or the last snapshot's tables and the
    gates (`table`) on stdout, the verdict on stderr; the exit code (`GATE_FAILED`: a gate failed
    or a server was refused)."""
    if output_format is OutputFormat.json:
        echo(report_json_line(report), nl=False)
    elif output_format is OutputFormat.table:
        console = stdout_console()
        console.print(snapshot_view(report.snapshot))
        if report.gates:
            console.print(gates_view(report))
    else:
        assert_never(output_format)
    echo(verdict(report), err=True)
    return ExitCode.OK if report.passed else ExitCode.GATE_FAILED
