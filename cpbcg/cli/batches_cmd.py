"""`cpbcg batches`: write the prefill forwards of a trace as a batch trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cpbcg.atomic import output_path
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import ConfigOpt
from cpbcg.cli.options import SchedulerOptions, ServerOptions, TraceOptions, with_options
from cpbcg.errors import ConfigError
from cpbcg.settings import Fold

FOLD_HELP = "Merge identical forwards into one line with a count: consecutive runs (keeps the order, streams), all (first-seen order), or none."


@app.command()
@error_boundary
@with_options(trace_options=TraceOptions, scheduler=SchedulerOptions, server=ServerOptions)
def batches(
    output: Annotated[Path, typer.Option("--output", "-o", parser=output_path, help="Batch trace to write (JSONL, written atomically); - for stdout.", show_default=False)],
    fold: Annotated[Fold, typer.Option("--fold", help=FOLD_HELP)] = Fold.consecutive,
    config: ConfigOpt = None,
    *,
    trace_options: TraceOptions,
    scheduler: SchedulerOptions,
    server: ServerOptions,
) -> None:
    """Turn a request trace into the prefill forwards the server would run (the scheduler
    simulation, docs/scheduler.md) and write them as a batch trace:
    `{"extend_seq_lens": [...], "count": k}` per line, identical batches folded into `count`.
    A batch trace as input is re-folded. The summary goes to stderr.

    Example: `cpbcg batches --trace conversation_trace.jsonl --prefix-cache unlimited -o lens.jsonl`
    """
    from cpbcg.commands import batches as batches_use_case
    from cpbcg.atomic import check_outputs, write_atomic
    from cpbcg.cli.common import stderr_console
    from cpbcg.cli.options import request_only_flags
    from cpbcg.cli.trace_progress import TraceProgress

    trace = trace_options.trace
    if trace is None:
        raise ConfigError("batches needs --trace (a request trace to simulate, or a batch trace to re-fold)")
    check_outputs({"-o": output}, {"--trace": trace})
    bar = TraceProgress("forming forwards")
    written = batches_use_case.batches(trace, config, {**scheduler.overrides(), **server.overrides()}, fold=fold.value, ignored_flags=request_only_flags(trace_options, scheduler),
                          progress=bar.requests, on_chunk=bar.forwards, **trace_options.reader_options())
    if written.warning is not None:
        typer.echo(written.warning, err=True)
    with bar:
        if str(output) == "-":
            import sys

            sys.stdout.buffer.writelines(written.lines())
            sys.stdout.flush()
        else:
            write_atomic(output, written.lines())
    from cpbcg.outputs.batches import written_line

    stderr_console().print(written_line(written.forwards, written.num_lines, written.note(), output), highlight=False, markup=False, soft_wrap=True)
