"""`cpbcg batches`: write the prefill forwards of a trace as a batch trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cpbcg.atomic import output_path
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import ConfigOpt
from cpbcg.cli.options import SchedulerOptions, TraceOptions, with_options
from cpbcg.errors import ConfigError
from cpbcg.planner.choices import Fold

FOLD_HELP = "Merge identical forwards into one line with a count: consecutive runs (keeps the order, streams), all (first-seen order), or none."


@app.command()
@error_boundary
@with_options(trace_options=TraceOptions, scheduler=SchedulerOptions)
def batches(
    output: Annotated[Path, typer.Option("--output", "-o", parser=output_path, help="Batch trace to write (JSONL, written atomically); - for stdout.", show_default=False)],
    fold: Annotated[Fold, typer.Option("--fold", help=FOLD_HELP)] = Fold.consecutive,
    config: ConfigOpt = None,
    *,
    trace_options: TraceOptions,
    scheduler: SchedulerOptions,
) -> None:
    """Turn a request trace into the prefill forwards the server would run (the scheduler
    simulation, docs/scheduler.md) and write them as a batch trace:
    `{"extend_seq_lens": [...], "count": k}` per line, identical batches folded into `count`.
    A batch trace as input is re-folded. The summary goes to stderr.

    Example: `cpbcg batches --trace conversation_trace.jsonl --prefix-cache unlimited -o lens.jsonl`
    """
    from cpbcg.api import load_config_and_deployment
    from cpbcg.atomic import check_outputs, write_atomic
    from cpbcg.cli.common import stderr_console
    from cpbcg.cli.source_note import ignored_options_note, request_only_flags, simulation_note
    from cpbcg.planner.traces.sources import open_source
    from cpbcg.planner.traces.writer import batch_trace_lines, fold_batches

    trace = trace_options.trace
    if trace is None:
        raise ConfigError("batches needs --trace (a request trace to simulate, or a batch trace to re-fold)")
    check_outputs({"-o": output}, {"--trace": trace})
    _, dep = load_config_and_deployment(config, scheduler.overrides())
    from cpbcg.cli.trace_progress import TraceProgress

    bar = TraceProgress("forming forwards")
    source = open_source(trace, scheduler=dep.scheduler, progress=bar.requests, **trace_options.reader_options())
    ignored = ignored_options_note(source.trace_format, request_only_flags(trace_options, scheduler), trace)
    if ignored is not None:
        typer.echo(ignored, err=True)
    tally = {"forwards": 0, "lines": 0}

    def counted(chunks):
        for chunk in chunks:
            tally["forwards"] += int(chunk.counts.sum())
            bar.forwards(chunk)
            yield chunk

    def lines():
        for line in batch_trace_lines(fold_batches(counted(source.batches), fold)):
            tally["lines"] += 1
            yield line

    with bar:
        if str(output) == "-":
            import sys

            sys.stdout.buffer.writelines(lines())
            sys.stdout.flush()
        else:
            write_atomic(output, lines())
    where = "stdout" if str(output) == "-" else output
    text = f"{tally['forwards']:,} prefill forwards → {tally['lines']:,} lines → {where}"
    note = simulation_note(source)
    stderr_console().print(text if note is None else f"{note}\n{text}", highlight=False, markup=False, soft_wrap=True)
