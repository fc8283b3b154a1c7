"""`cpbcg replay-check` rendered: tables or JSON on stdout, and the CI reports (JUnit, JSON, step summary, annotations) written together."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

from cpbcg.atomic import STDOUT
from cpbcg.errors import ExitCode
from cpbcg.outputs.notes import GATES_HINT
from cpbcg.outputs.console import OutputFormat, assert_never, echo, print_json, stderr_console, stdout_console

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from cpbcg.gates.gates import CheckReport, ReplayRecord
    from cpbcg.atomic import OutputGroup
    from cpbcg.assembly.sources import BatchSource

NO_GATES_NOTE = f"no gate checked (--report-only); to gate, {GATES_HINT}"
"""Printed under the empty gate table as a plain line (a caption would be cut in narrow terminals)."""


def gates_table(report: CheckReport) -> Table:
    """Gate, measured value, threshold and verdict per gate."""
    from rich.table import Table

    table = Table(title="Gates", title_justify="left")
    for name in ("gate", "measured", "threshold", "result"):
        table.add_column(name, justify="right" if name in ("measured", "threshold") else "left")
    for g in report.gates:
        table.add_row(g.name, g.measured_text, f"{g.comparison} {g.threshold_text}", "pass" if g.passed else "FAIL")
    return table


def overflow_text(report: CheckReport) -> Text:
    """The first natural-bucket overflows as `extend_seq_lens` (old runtime crashed on them)."""
    from rich.text import Text

    from cpbcg.gates.gates import count_of

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


NO_TRACE_WARNING = "cpbcg: warning: no --trace given; the gates ran on the embedded synthetic workload, not on your traffic"


class ReplayCheckOutputOptions(Protocol):
    """The options this output reads (`cpbcg.commands.replay_check_options.ReplayCheckOptions`)."""

    @property
    def output_format(self) -> OutputFormat: ...
    @property
    def junit(self) -> Optional[Path]: ...
    @property
    def json_path(self) -> Optional[Path]: ...


class ReplayCheckView(Protocol):
    """What this output reads of a replay-check report (`cpbcg.commands.replay_check.ReplayCheckReport`)."""

    @property
    def report(self) -> CheckReport: ...
    @property
    def source(self) -> BatchSource: ...


def write(checked: ReplayCheckView, options: ReplayCheckOutputOptions, *, trace_given: bool) -> ExitCode:
    """Everything `replay-check` writes: the report on stdout (stderr when a report file takes
    stdout), the CI reports, the verdict line; the exit code (`GATE_FAILED`: a gate failed). The
    JSON reports carry the simulation summary of the trace read (`simulation_document`)."""
    from cpbcg.outputs.documents import simulation_document

    report = checked.report
    simulation = simulation_document(report.parts, checked.source)
    render(report, options.output_format, stdout_taken=STDOUT in (str(options.junit), str(options.json_path)), simulation=simulation)
    publish(report, options.junit, options.json_path, simulation)
    if not trace_given:
        echo(NO_TRACE_WARNING, err=True)
    echo(verdict(report), err=True)
    return ExitCode.OK if report.passed else ExitCode.GATE_FAILED


def render(report: CheckReport, output_format: OutputFormat, stdout_taken: bool = False, simulation: dict[str, Any] | None = None) -> None:
    """Main output on stdout: the plan tables plus overflow and gates, or the JSON report (with
    the `simulation` summary); on stderr when a report file goes to stdout (`--json -` or `--junit -`)."""
    from rich.console import Group
    from rich.text import Text

    from cpbcg.outputs.ci_reports import report_json
    from cpbcg.outputs.tables import evaluation_tables, summed_header

    if output_format is OutputFormat.json:
        print_json(report_json(report, simulation), to_stderr=stdout_taken)
        return
    if output_format is not OutputFormat.table:
        assert_never(output_format)
    console = stderr_console() if stdout_taken else stdout_console()
    from cpbcg.outputs.log_tables import observed_renderable

    parts: list = [evaluation_tables(report.evaluation, summed_header(report.header, report.parts)), overflow_text(report)]
    if report.against_default:
        parts.append(Text(against_default_line(report)))
    if report.launches:
        from cpbcg.outputs.log_tables import launch_plans_table

        parts.append(launch_plans_table(report.launches))
    observed_view = observed_renderable(report.observed, None)
    if observed_view is not None:
        parts.append(observed_view)
    if report.replays:
        parts.append(replays_table(report.replays))
    parts.append(gates_table(report))
    if not report.gates:
        parts.append(Text(NO_GATES_NOTE))
    console.print(Group(*parts))


def publish(report: CheckReport, junit: Optional[Path], json_path: Optional[Path], simulation: dict[str, Any] | None = None) -> None:
    """Report files (`--json -`: stdout; both files written together or neither), GitHub
    annotations (`GITHUB_ACTIONS=true`) and the step summary. The outputs were checked up front
    (`check_outputs`); the annotations and the step summary never change the verdict: a summary
    that cannot be appended is a warning. The JSON report carries the `simulation` summary."""
    from cpbcg.outputs.ci_reports import append_step_summary, github_annotations, junit_xml, report_json, step_summary_markdown
    from cpbcg.atomic import OutputGroup

    with OutputGroup() as outputs:
        if junit is not None:
            _write(junit, junit_xml(report), outputs)
        if json_path is not None:
            _write(json_path, report_json(report, simulation), outputs)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(report):  # stderr lines only: nothing here can fail on a file
            echo(line, err=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            append_step_summary(summary, step_summary_markdown(report))
        except OSError as exc:
            echo(f"cpbcg: warning: cannot append the step summary to {summary}: {exc.strerror or exc}", err=True)


def _write(path: Path, data: bytes, outputs: "OutputGroup") -> None:
    """A report file, staged in `outputs` (an `OutputGroup`); `-` is stdout."""
    if str(path) == STDOUT:
        echo(data.decode(), nl=False)
    else:
        outputs.write(path, data)


def against_default_line(report: CheckReport) -> str:
    """The warning when the judged list costs more than SGLang's default list on the same forwards, with both numbers."""
    n = len(report.default_evaluation.buckets) if report.default_evaluation is not None else 0
    return (f"warning: on this traffic the list costs more than SGLang's default list for the chunk ({n} buckets): "
            f"{'; '.join(report.against_default)}")


def verdict(report: CheckReport) -> str:
    from cpbcg.gates.gates import count_of

    if not report.gates:
        return "cpbcg: note: replay-check: no gate checked (--report-only): nothing to fail on"
    if report.passed:
        n = len(report.gates)
        return "replay-check: passed the 1 gate" if n == 1 else f"replay-check: passed all {n} gates"
    lines = [f"replay-check: FAILED {len(report.failed)} of {count_of(len(report.gates), 'gate')}"]
    return "\n".join(lines + [f"  {g.message()}" for g in report.failed])


