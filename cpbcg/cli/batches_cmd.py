"""`cpbcg batches`: write the prefill forwards of a trace as a batch trace."""

from __future__ import annotations


import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.commands.batches_options import BatchesOptions
from cpbcg.cli.options import SchedulerOptions, ServerOptions, TraceOptions, with_options

@app.command()
@error_boundary
@with_options(options=BatchesOptions, trace_options=TraceOptions, scheduler=SchedulerOptions, server=ServerOptions)
def batches(*, options: BatchesOptions, trace_options: TraceOptions, scheduler: SchedulerOptions,
            server: ServerOptions) -> None:
    """Turn a request trace into the prefill forwards the server would run (the scheduler
    simulation, docs/scheduler.md) and write them as a batch trace:
    `{"extend_seq_lens": [...], "count": k}` per line, identical batches folded into `count`.
    A batch trace as input is re-folded. The summary goes to stderr.

    Example: `cpbcg batches --trace conversation_trace.jsonl --prefix-cache unlimited -o lens.jsonl`
    """
    from cpbcg.cli.options import request_only_flags
    from cpbcg.cli.trace_progress import TraceProgress
    from cpbcg.commands.batches import run
    from cpbcg.outputs.batches import write

    bar = TraceProgress("forming forwards")
    written = run(options, trace_options.trace, {**scheduler.overrides(), **server.overrides()},
                  ignored_flags=request_only_flags(trace_options, scheduler), progress=bar.requests, on_chunk=bar.forwards,
                  **trace_options.reader_options())
    if written.warning is not None:
        typer.echo(written.warning, err=True)
    with bar:
        write(written, options.output)
