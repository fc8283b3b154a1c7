"""`cpbcg plan`'s report rendered: the `--emit` export and the plot (written together, or
neither), then the report on stdout in the `--format` chosen (tables or the JSON document).
Every `--format` has its arm in `render`, which ends in `assert_never` (mypy checks the list is exhaustive)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from cpbcg.atomic import STDOUT, OutputGroup, write_atomic
from cpbcg.errors import ExitCode
from cpbcg.outputs.console import OutputFormat, assert_never, echo, print_json, stderr_console, stdout_console
from cpbcg.engines.sglang.release import SGLANG_VERSION



if TYPE_CHECKING:
    from cpbcg.engines.sglang.decode_plan import DecodePlan
    from cpbcg.planner.optimise.guarantee import GuaranteeResult
    from cpbcg.assembly.sources import BatchSource
    from cpbcg.planner.deployment import Deployment
    from cpbcg.engines.sglang.observed import LogObserved
    from cpbcg.planner.optimise.compare import Comparison
    from cpbcg.assembly.plan import PlanPart, PlanResult
    from cpbcg.engines.sglang.logs.settings import LogSettings
    from cpbcg.engines.sglang.memory import MemoryPreflight
    from cpbcg.settings import EmitFormat


class PlanView(Protocol):
    """What this output reads of a plan report (`cpbcg.commands.plan.PlanReport`; outputs sit
    below the commands and name no command's type)."""

    @property
    def header(self) -> dict[str, object]: ...
    @property
    def result(self) -> PlanResult: ...
    @property
    def comparison(self) -> Comparison | None: ...
    @property
    def source(self) -> BatchSource: ...
    @property
    def export(self) -> str | None: ...
    @property
    def log(self) -> LogSettings | None: ...
    @property
    def logs(self) -> tuple[LogObserved, ...]: ...
    @property
    def parts(self) -> tuple[PlanPart, ...]: ...
    @property
    def traces(self) -> int: ...
    @property
    def flags_command(self) -> str | None: ...
    @property
    def memory(self) -> MemoryPreflight | None: ...
    @property
    def decode(self) -> DecodePlan | None: ...


class GuaranteeView(Protocol):
    """What this output reads of a guarantee report (`cpbcg.commands.plan.GuaranteeReport`)."""

    @property
    def deployment(self) -> Deployment: ...
    @property
    def result(self) -> GuaranteeResult: ...
    @property
    def export(self) -> str | None: ...


class PlanOutputOptions(Protocol):
    """The options this output reads (`cpbcg.commands.plan_options.PlanOptions`)."""

    @property
    def output_format(self) -> OutputFormat: ...
    @property
    def output(self) -> Path | None: ...
    @property
    def plot(self) -> Path | None: ...
    @property
    def emit(self) -> EmitFormat | None: ...


def write(report: PlanView | GuaranteeView, options: PlanOutputOptions, notes: Callable[[], None] = lambda: None) -> ExitCode:
    """Everything `plan` writes for `report`; the exit code (`GATE_FAILED`: a guarantee that does not hold).
    `notes` writes the command's held notes (stderr): after the verdict's screen when the tables
    are printed with a verdict (the answer first), else before anything else; called once."""
    from cpbcg.planner.optimise.guarantee import GuaranteeResult

    output = None if options.output is None or str(options.output) == STDOUT else options.output
    verdict_first = (options.output_format is OutputFormat.table and not isinstance(report.result, GuaranteeResult)
                     and report.result.recommendation is not None and report.result.recommendation.verdict is not None
                     and (options.emit is None or output is not None))
    if not verdict_first:
        notes()
    if isinstance(report.result, GuaranteeResult):
        return _guarantee(report, options, output)
    assert not isinstance(report.result, GuaranteeResult)
    rec, comparison = report.result.recommendation, report.comparison
    plotted = options.plot is not None and rec is not None and comparison is not None
    with OutputGroup() as outputs:  # the plot and the export: both written, or neither
        if plotted:
            from cpbcg.outputs.plot import plot_png

            assert options.plot is not None and rec is not None and comparison is not None
            outputs.write(options.plot, plot_png(rec, comparison))
        _emit(report.export, output, outputs)
    if plotted:
        echo(f"wrote {options.plot}", err=True)
    if report.export is not None and output is not None:
        stderr_console().print(f"wrote {output}", highlight=False)
    if options.emit is not None and output is None:
        return ExitCode.OK  # the export is the stdout document
    render(report, options.output_format, notes if verdict_first else lambda: None)
    return ExitCode.OK


def render(report: PlanView, output_format: OutputFormat, after_verdict: Callable[[], None] = lambda: None) -> None:
    """The report on stdout in `output_format` (`after_verdict` runs after the tables' verdict screen)."""
    if output_format is OutputFormat.json:
        _json(report)
    elif output_format is OutputFormat.table:
        _tables(report, after_verdict)
    else:
        assert_never(output_format)


def _json(report: PlanView) -> None:
    from cpbcg.outputs.documents import dumps, graphs_off_document, launch_plans_document, observed_document, plan_document, simulation_document, traffic_document

    result, parts = report.result, report.parts
    compared = None if report.comparison is None else report.comparison.to_dict()
    doc = plan_document(report.header, result.evaluation, result.recommendation, simulation_document(parts, report.source), compared,
                        recommendation_error=result.recommendation_error)
    if result.launches:
        doc["launches"] = launch_plans_document(result.launches)
    observed = observed_document(result.observed, report.log) if report.traces == 1 else \
        ({"logs": [one.to_dict() for one in report.logs]} if report.logs else None)
    if observed is not None:
        doc["observed"] = observed
    off = graphs_off_document(report.source) if report.traces == 1 else []
    if off:
        doc["graphs_off"] = off
    if len(parts) > 1:
        doc["traffic"] = traffic_document(parts)
    verdict = result.recommendation.verdict if result.recommendation is not None else None
    if verdict is not None:  # no recommendation (--no-recommend, or none possible): no verdict
        doc["verdict"] = {**verdict.to_dict(), "flags_command": report.flags_command,
                          "memory": None if report.memory is None else report.memory.to_dict()}
    if report.decode is not None:
        doc["decode"] = report.decode.to_dict()
    print_json(dumps(doc))


def _tables(report: PlanView, after_verdict: Callable[[], None] = lambda: None) -> None:
    from cpbcg.outputs.log_tables import observed_renderable
    from cpbcg.outputs.recommend_tables import comparison_table, pareto_table, recommendation_renderable, traffic_table
    from cpbcg.outputs.tables import evaluation_tables, summed_header

    result, rec, comparison, parts = report.result, report.result.recommendation, report.comparison, report.parts
    console = stdout_console()
    no_graph = report.header.get("no_prefill_graph")
    if isinstance(no_graph, dict):  # when there is nothing to plan, that is said first (commands.plan._no_prefill_graph)
        console.print(f"{no_graph['answer']}.\nWhat would help: {'; or '.join(no_graph['what_would_help'])}.\n"
                      f"Planned instead: {no_graph['planned']}.", highlight=False)
    log = report.log
    if log is not None and log.prefill_graphs is False and not isinstance(no_graph, dict):  # what the server did, said first
        console.print(f"The server ran without prefill CUDA graphs ({log.prefill_graphs_origin}): every prefill forward of the log ran "
                      f"eagerly. Planned below: the same traffic on SGLang {SGLANG_VERSION} with its breakable prefill graphs.\n",
                      highlight=False, markup=False, soft_wrap=True)
    if rec is not None and rec.verdict is not None:
        from cpbcg.outputs.verdict import verdict_lines

        for line in verdict_lines(rec.verdict, report.flags_command, report.memory, observed=result.observed,
                                  bound=report.header.get("bound") is True):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        if report.decode is not None:
            from cpbcg.outputs.decode import decode_verdict_lines

            for line in decode_verdict_lines(report.decode):
                console.print(line, highlight=False, markup=False, soft_wrap=True)
        console.print("")
        console.file.flush()
    after_verdict()
    console.print(evaluation_tables(result.evaluation, summed_header(report.header, parts)))
    if result.launches:
        from cpbcg.outputs.log_tables import launch_plans_table

        console.print(launch_plans_table(result.launches))
    observed_view = observed_renderable(result.observed, report.log, report.logs)
    if observed_view is not None:
        console.print(observed_view)
    if rec is not None:
        console.print(recommendation_renderable(result.evaluation, rec))
    if len(parts) > 1:
        console.print(traffic_table(parts))
    if rec is not None and comparison is not None:
        console.print(comparison_table(comparison, rec))
        console.print(pareto_table(comparison.points, rec.objective))
    if report.decode is not None:
        from cpbcg.outputs.decode import decode_renderable

        console.print(decode_renderable(report.decode))


def _guarantee(report: GuaranteeView, options: PlanOutputOptions, output: Optional[Path]) -> ExitCode:
    dep, result = report.deployment, report.result
    _emit(report.export, output)
    if options.emit is None or output is not None:
        if options.output_format is OutputFormat.json:
            from cpbcg.outputs.documents import dumps, guarantee_document

            print_json(dumps(guarantee_document(dep, result)))
        elif options.output_format is OutputFormat.table:
            from cpbcg.outputs.recommend_tables import guarantee_renderable

            stdout_console().print(guarantee_renderable(result, dep.cp.cp_size, dep.cp.strategy.value, dep.max_padding_factor))
        else:
            assert_never(options.output_format)
    return ExitCode.OK if result.check.ok else ExitCode.GATE_FAILED


def _emit(text: Optional[str], output: Optional[Path], outputs: OutputGroup | None = None) -> None:
    """The `--emit` export: to `output` (with the command's other `outputs`, or atomically alone), or to stdout."""
    if text is None:
        return
    if output is not None:
        if outputs is not None:
            outputs.write(output, text)
            return
        write_atomic(output, text)
        stderr_console().print(f"wrote {output}", highlight=False)
    else:
        echo(text, nl=False)
