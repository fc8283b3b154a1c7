"""`cpbcg batches`: write the prefill forwards of a trace as a batch trace."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Iterable, Iterator

import orjson
import typer

from cpbcg.atomic import check_outputs, write_atomic
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import ConfigOpt, LengthFieldOpt, TimeFieldOpt, TraceFormatOpt, progress_bar, stderr_console
from cpbcg.cli.options import SchedulerOptions, TraceOptions, with_options
from cpbcg.cli.source_note import ignored_options_note, request_only_flags, simulation_note
from cpbcg.config import load_config
from cpbcg.planner.layout import BatchSet
from cpbcg.planner.traces import TraceFormat
from cpbcg.planner.sources import BatchSource, open_source


class Fold(str, Enum):
    """How identical batches are merged into one line with a `count`."""

    consecutive = "consecutive"
    all = "all"
    none = "none"


TRACE_HELP = "Request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, generic CSV/JSONL) or batch trace; .gz ok."
FOLD_HELP = "Merge identical batches into one line with a count: consecutive runs (keeps the order), all (first-seen order), or none."


@app.command()
@error_boundary
@with_options(scheduler=SchedulerOptions)
def batches(
    trace: Annotated[Path, typer.Option("--trace", "-t", help=TRACE_HELP, show_default=False)],
    output: Annotated[str, typer.Option("--output", "-o", help="Batch trace to write (JSONL, written atomically); - for stdout.", show_default=False)],
    fold: Annotated[Fold, typer.Option("--fold", help=FOLD_HELP)] = Fold.consecutive,
    config: ConfigOpt = None,
    trace_format: TraceFormatOpt = TraceFormat.auto,
    length_field: LengthFieldOpt = None,
    time_field: TimeFieldOpt = None,
    *,
    scheduler: SchedulerOptions,
) -> None:
    """Turn a request trace into the prefill forwards the server would run (the scheduler
    simulation, docs/scheduler.md) and write them as a batch trace:
    `{"extend_seq_lens": [...], "count": k}` per line, identical batches folded into `count`.
    A batch trace as input is re-folded. The summary goes to stderr.

    Example: `cpbcg batches --trace conversation_trace.jsonl --prefix-cache unlimited -o lens.jsonl`
    """
    check_outputs({"-o": output}, {"--trace": trace})
    cfg = load_config(config, scheduler.overrides())
    source = open_source(trace, trace_format, cfg.scheduler.to_settings(), length_field, time_field)
    given = TraceOptions(trace, trace_format, length_field, time_field)
    ignored = ignored_options_note(source.trace_format, request_only_flags(given, scheduler), trace)
    if ignored is not None:
        typer.echo(ignored, err=True)
    with progress_bar("forming batches") as advance:
        counted = _CountingStream(source.batches, advance)
        lines = [_line(lens, count) for lens, count in fold_batches(counted.chunks(), fold)]
    write_output(output, b"".join(lines))
    stderr_console().print(summary_text(counted.num_batches, len(lines), output, source), highlight=False, markup=False, soft_wrap=True)


def write_output(output: str, data: bytes) -> None:
    """Write to stdout (`-`), in place to a device or pipe (`/dev/null`: never replace it),
    or atomically to a regular file."""
    target = Path(output)
    if output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    elif target.exists() and not target.is_file():
        with open(target, "wb") as handle:
            handle.write(data)
    else:
        write_atomic(target, data)


class _CountingStream:
    """Counts forwards (honouring `count` weights) while passing chunks through."""

    def __init__(self, chunks: Iterable[BatchSet], advance):
        self._chunks, self._advance, self.num_batches = chunks, advance, 0

    def chunks(self) -> Iterator[BatchSet]:
        for chunk in self._chunks:
            self.num_batches += int(chunk.counts.sum())
            self._advance(chunk.num_batches)
            yield chunk


def fold_batches(chunks: Iterable[BatchSet], fold: Fold) -> Iterator[tuple[tuple[int, ...], int]]:
    """`(extend_seq_lens, count)` per output line: identical batches merged per `fold`."""
    if fold is Fold.all:
        merged: dict[tuple[int, ...], int] = {}
        for lens, count in _each_batch(chunks):
            merged[lens] = merged.get(lens, 0) + count
        yield from merged.items()
        return
    previous, total = None, 0
    for lens, count in _each_batch(chunks):
        if fold is Fold.consecutive and lens == previous:
            total += count
            continue
        if previous is not None:
            yield previous, total
        previous, total = lens, count
    if previous is not None:
        yield previous, total


def _each_batch(chunks: Iterable[BatchSet]) -> Iterator[tuple[tuple[int, ...], int]]:
    for chunk in chunks:
        flat, offsets, counts = chunk.extend_seq_lens.tolist(), chunk.offsets.tolist(), chunk.counts.tolist()
        for i, count in enumerate(counts):
            yield tuple(flat[offsets[i] : offsets[i + 1]]), count


def _line(lens: tuple[int, ...], count: int) -> bytes:
    record = {"extend_seq_lens": list(lens)}
    if count != 1:
        record["count"] = count
    return orjson.dumps(record) + b"\n"


def summary_text(num_batches: int, num_lines: int, output: str, source: BatchSource) -> str:
    """Lines for stderr: the simulation's assumptions (`simulation_note`, request traces only),
    then what was written."""
    where = "stdout" if output == "-" else output
    text = f"{num_batches:,} prefill forwards → {num_lines:,} lines → {where}"
    note = simulation_note(source)
    return text if note is None else f"{note}\n{text}"
