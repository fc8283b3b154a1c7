"""Parquet request logs with the columns of a known request table: Azure (`ContextTokens`, ...),
BurstGPT, SplitwiseSim, vidur, Mooncake-style (`input_length`), or any with `length_field`.

Needs pyarrow (the optional extra `cpbcg[parquet]`), imported only when a Parquet file is read.
Streams row groups in batches of `BATCH_ROWS`; in messages the line number is the 1-based row.
Timestamps may be Parquet timestamps, numbers (the table's unit) or datetime strings.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Iterator

import numpy as np

if TYPE_CHECKING:  # pyarrow is imported when a Parquet file is read
    import pyarrow as pa
    import pyarrow.parquet as pq

from cpbcg.errors import TraceError, located
from cpbcg.planner.arrays import FloatArray, Int64Array
import cpbcg.planner.traces.azure as azure
import cpbcg.planner.traces.burstgpt as burstgpt
import cpbcg.planner.traces.mooncake as mooncake
import cpbcg.planner.traces.generic as generic
import cpbcg.planner.traces.splitwise as splitwise
import cpbcg.planner.traces.vidur as vidur
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.records import (
    MAX_REQUEST_TOKENS, RequestChunk, RequestItem, RequestSpec, datetime_seconds, drop_empty_prompts,
    LAST_SECOND, known_lines, numeric_seconds,
)
from cpbcg.planner.traces.text import TracePath, display, excerpt, file_of, require_regular, show_names

MAGIC = b"PAR1"
BATCH_ROWS = 1 << 16
"""Rows converted at once (bounds memory)."""


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return sniff.head.startswith(MAGIC)


def _require_pyarrow(path: TracePath) -> None:
    try:
        import pyarrow.parquet  # noqa: F401  (only whether it imports)
    except ImportError:
        raise TraceError(f"{display(path)}: reading Parquet traces needs pyarrow: pip install 'cpbcg[parquet]'") from None


def table_spec(path: TracePath, names: list[str], options: ReadOptions) -> RequestSpec:
    """The request table whose length column the file has (or the generic `length_field`)."""
    if not options.length_field:
        for spec in (azure.SPEC, burstgpt.spec(options), splitwise.SPEC, vidur.SPEC, mooncake.SPEC):
            if spec.length_field in names:
                return spec
    if not generic.detects(names, options):
        raise TraceError(f"{display(path)}:1: unknown Parquet request log (columns: {show_names(names)}); no known length column: give --length-field")
    return replace(generic.table_spec(path, "csv", names, options)[0], label="parquet")


def read(path: TracePath, options: ReadOptions) -> Iterator[RequestItem]:
    """Yield `(chunk, row_numbers)` per batch of rows."""
    file = file_of(path)
    if file is None:
        raise TraceError(f"{display(path)}: Parquet cannot be read from standard input; give the file")
    require_regular(file)
    _require_pyarrow(file)
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(file)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise TraceError(f"{display(path)}:1: not a readable Parquet file ({excerpt(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 120)[1:-1]})") from None
    names = parquet.schema_arrow.names
    spec = table_spec(path, names, options)
    wanted = _columns(path, spec, names)
    row = 1
    for batch in _batches(path, parquet, wanted):
        chunk, rows = _chunk(path, row, batch, spec, names)
        yield drop_empty_prompts(chunk, known_lines(rows), spec.length_field)
        row += batch.num_rows


def _columns(path: TracePath, spec: RequestSpec, names: list[str]) -> list[str]:
    required = [spec.length_field, *(f for f, _ in spec.filters)]
    required += [spec.time_field] if spec.time_field and not spec.optional_time else []
    required += [spec.output_field] if spec.output_field and not spec.optional_output else []
    for name in required:
        if name not in names:
            raise TraceError(f'{path}: missing column "{name}"')
    optional = [f for f in (spec.time_field, spec.output_field) if f and f in names and f not in required]
    return required + optional


def _batches(path: TracePath, parquet: pq.ParquetFile, columns: list[str]) -> Iterator[pa.RecordBatch]:
    try:
        yield from parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: corrupt Parquet data ({excerpt(str(exc), 120)[1:-1]})") from None


def _chunk(path: TracePath, row: int, batch: pa.RecordBatch, spec: RequestSpec, names: list[str]) -> tuple[RequestChunk, Int64Array]:
    """The requests of a batch that pass the filters, and their [n] int64 1-based rows."""
    keep = np.ones(batch.num_rows, dtype=bool)
    for field, value in spec.filters:
        keep &= np.asarray(batch.column(field).to_pylist(), dtype=object) == value
    lengths = _ints(path, row, batch, spec.length_field, 0)[keep]  # 0-token prompts: skipped by the caller
    outputs = _ints(path, row, batch, spec.output_field, 0)[keep] if spec.output_field and spec.output_field in batch.schema.names else None
    times = _times(path, row, batch, spec)[keep] if spec.time_field in batch.schema.names else None
    return RequestChunk(lengths, times, None, outputs), row + np.flatnonzero(keep)


def _ints(path: TracePath, row: int, batch: pa.RecordBatch, field: str, minimum: int) -> Int64Array:
    import pyarrow.types as pat

    column = batch.column(field)
    if column.null_count:
        null = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise TraceError(located(path, row + null, f"{field}: null is not a token count"))
    if not pat.is_integer(column.type):
        raise TraceError(f"{path}: column {field}: type {column.type}, expected integers (token counts)")
    values: Int64Array = column.to_numpy(zero_copy_only=False).astype(np.int64)
    bad = np.flatnonzero((values < minimum) | (values > MAX_REQUEST_TOKENS)) if column.type != "uint64" else np.flatnonzero(column.to_numpy() > MAX_REQUEST_TOKENS)
    if len(bad):
        value = column[int(bad[0])].as_py()
        what = "a positive integer" if minimum else "a non-negative integer"
        raise TraceError(located(path, row + int(bad[0]), f"{field}: {value} is not {what} up to {MAX_REQUEST_TOKENS}"))
    return values


def _times(path: TracePath, row: int, batch: pa.RecordBatch, spec: RequestSpec) -> FloatArray:
    import pyarrow as pa
    import pyarrow.types as pat

    column = batch.column(spec.time_field)
    if column.null_count:
        bad = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise TraceError(located(path, row + bad, f"{spec.time_field}: null is not a timestamp"))
    try:
        if pat.is_timestamp(column.type):
            per_s = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[column.type.unit]
            seconds: FloatArray = column.cast(pa.int64()).to_numpy(zero_copy_only=False) / per_s
            if ((seconds < 0) | (seconds >= LAST_SECOND)).any():
                raise ValueError("date out of range (1970..2199)")
            return seconds
        if pat.is_string(column.type) or pat.is_large_string(column.type):
            return datetime_seconds(np.array(column.to_pylist()))
        if pat.is_integer(column.type) or pat.is_floating(column.type):
            return numeric_seconds(column.to_numpy(zero_copy_only=False).astype(np.float64), spec.time_unit)
    except ValueError as exc:
        raise TraceError(located(path, row, f"{spec.time_field}: {exc} (in this batch of rows)")) from None
    raise TraceError(f"{path}: column {spec.time_field}: type {column.type}, expected timestamps, numbers or datetime strings")


FORMAT = TraceFormatInfo("parquet", "Parquet", TraceKind.requests, recognises, read)
