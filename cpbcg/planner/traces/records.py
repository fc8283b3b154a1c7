"""What trace readers yield: `RequestChunk`s (request traces), `BatchSet`s (batch traces) or
`ForwardSizes` (server logs that give each forward's size and request count, not its lengths),
and the value rules every format shares (lengths, output lengths, timestamps)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Callable, Union

import numpy as np

from cpbcg.planner.arrays import Int64Array
from cpbcg.planner.model.batches import MAX_TOKENS, BatchSet

BLOCK_TOKENS = 512
"""Tokens per prefix-hash block (Mooncake `hash_ids`)."""
MAX_REQUEST_TOKENS = MAX_TOKENS
"""Longest prompt or output accepted (tokens, 2**31 - 1, as for batch traces): no sum
downstream can overflow int64."""
FIRST_DATE, LAST_DATE = np.datetime64("1970-01-01", "s"), np.datetime64("2200-01-01", "s")
"""Wall-clock timestamps outside [1970, 2200) are refused (datetime64[ns] wraps near 2262)."""
LAST_SECOND = float((LAST_DATE - FIRST_DATE) / np.timedelta64(1, "s"))
"""Largest time read from a trace, in seconds (2200-01-01 as seconds since 1970): numeric
timestamps and durations beyond it (in either sign) are refused, so every arrival time is finite
and every gap between two of them too."""


@dataclass(frozen=True)
class RequestChunk:
    """Consecutive requests of a trace, in file order."""

    input_tokens: np.ndarray
    """[n] int64: prompt length of each request (tokens, >= 1)."""
    arrival_s: np.ndarray | None
    """[n] float64: arrival time (s, non-decreasing across the whole trace; any origin), or None."""
    hash_ids: list[list[int]] | None
    """[n] prefix-block hashes (512 tokens per block) per request, or None when the trace has none."""
    output_tokens: np.ndarray | None = None
    """[n] int64: output (generated) length of each request (tokens, >= 0), or None when the
    trace has none."""
    num_images: np.ndarray | None = None
    """[n] int64: images in each request (Azure 2025 `NumImages`, >= 0), or None when the trace
    has no image count."""
    skipped: "SkippedRows | None" = None
    """Rows of this chunk the reader skipped (none are in the arrays above), or None."""
    notes: tuple[str, ...] = ()
    """What the reader decided for the user to see (`read input_tokens as prompt length`)."""

    @property
    def num_requests(self) -> int:
        return len(self.input_tokens)


@dataclass(frozen=True)
class SkippedRows:
    """Rows that hold no request a server would prefill: a prompt of 0 tokens (Azure 2025
    multimodal `ContextTokens` 0, BurstGPT's failed requests). Every request format skips and
    counts them; `ReadOptions.strict` refuses them instead (`stream.checked_requests`)."""

    rows: int
    """How many rows (>= 1)."""
    first_line: int
    """1-based line of the first (Parquet: row; vLLM JSON: index + 1)."""
    field: str
    """The prompt-length field that held 0 (`ContextTokens`)."""


LineNumbers = Callable[[], Int64Array]
"""Computes (on demand: only messages need them) the [n] int64 line numbers of a chunk's rows."""
RequestItem = tuple[RequestChunk, LineNumbers]
"""What a request-trace reader yields: a chunk and its rows' line numbers."""


def known_lines(lines: Int64Array) -> LineNumbers:
    """Line numbers already at hand (`lines`, [n] int64) as a `LineNumbers`."""
    return lambda: lines


def drop_empty_prompts(chunk: RequestChunk, line_numbers: LineNumbers, field: str) -> RequestItem:
    """`(chunk, line_numbers)` without the rows whose prompt is 0 tokens, counted in
    `chunk.skipped` (`field` names the prompt-length field); unchanged when there are none."""
    empty = chunk.input_tokens == 0
    if not empty.any():
        return chunk, line_numbers
    keep = ~empty
    lines = np.asarray(line_numbers(), dtype=np.int64)
    skipped = SkippedRows(int(empty.sum()), int(lines[int(np.argmax(empty))]), field)
    hashes = None if chunk.hash_ids is None else [h for h, k in zip(chunk.hash_ids, keep.tolist()) if k]
    kept = replace(
        chunk, input_tokens=chunk.input_tokens[keep], arrival_s=None if chunk.arrival_s is None else chunk.arrival_s[keep],
        hash_ids=hashes, output_tokens=None if chunk.output_tokens is None else chunk.output_tokens[keep],
        num_images=None if chunk.num_images is None else chunk.num_images[keep], skipped=skipped,
    )
    kept_lines = lines[keep]
    return kept, lambda: kept_lines


@dataclass
class ReadNotes:
    """What reading a request trace decided, for the report (filled while the trace streams)."""

    trace: str = ""
    """The trace as named in messages."""
    skipped_rows: int = 0
    """Rows skipped (`SkippedRows`), over the whole trace."""
    first_skipped_line: int | None = None
    """Line of the first skipped row, or None."""
    skipped_field: str | None = None
    """Prompt-length field of the skipped rows."""
    notes: list[str] = field(default_factory=list)
    """The readers' notes (`read input_tokens as prompt length`), in order."""

    def add(self, chunk: RequestChunk) -> None:
        self.notes += [n for n in chunk.notes if n not in self.notes]
        if chunk.skipped is not None:
            if self.first_skipped_line is None:
                self.first_skipped_line, self.skipped_field = chunk.skipped.first_line, chunk.skipped.field
            self.skipped_rows += chunk.skipped.rows

    def lines(self) -> list[str]:
        """The notes as lines for stderr (`cpbcg: note: ...`)."""
        out = [f"cpbcg: note: {n}" for n in self.notes]
        if self.skipped_rows:
            rows = "row" if self.skipped_rows == 1 else "rows"
            out.append(f"cpbcg: note: skipped {self.skipped_rows:,} {rows} with 0 prompt tokens ({self.skipped_field}; "
                       f"first: {self.trace}:{self.first_skipped_line}); --strict refuses them")
        return out


@dataclass(frozen=True)
class ForwardSizes:
    """Prefill forwards known only by size: `num_tokens[i]` extend tokens in `num_requests[i]`
    requests (SGLang's `Prefill batch` log line). The lengths inside are unknown, so a plan
    from them is a bound: every forward is taken at the worst case over its request count."""

    num_tokens: np.ndarray
    """[N] int64: extend tokens of each forward (`#new-token`, >= 1)."""
    num_requests: np.ndarray
    """[N] int64: requests in each forward (`#new-seq`, 1 <= k <= num_tokens)."""
    counts: np.ndarray
    """[N] int64: occurrences of each forward (>= 1)."""
    cached_tokens: np.ndarray
    """[N] int64: prefix-cache hits of each forward (`#cached-token`; informative only)."""

    @property
    def num_forwards(self) -> int:
        return len(self.num_tokens)

    def aggregate(self) -> "ForwardSizes":
        """Equal `(num_tokens, num_requests)` pairs merged, counts summed (sorted by the pair).
        The worst case of a forward depends on nothing else."""
        key = np.stack([self.num_tokens, self.num_requests], axis=1)
        uniq, inverse = np.unique(key, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse, weights=self.counts, minlength=len(uniq)).astype(np.int64)
        cached = np.bincount(inverse, weights=self.cached_tokens, minlength=len(uniq)).astype(np.int64)
        return ForwardSizes(uniq[:, 0].copy(), uniq[:, 1].copy(), counts, cached)


@dataclass(frozen=True, kw_only=True)
class ObservedForwards(ForwardSizes):
    """Forwards an SGLang server printed, one per distinct forward (`sglang_log`): their sizes as
    `ForwardSizes` (a mixed-chunk forward sized with its decode rows) plus what the server
    observed. Every array is `[N]`, aligned with `num_tokens`."""

    decode_requests: np.ndarray
    """int64: of `num_requests`, the decode rows of one token each that a mixed-chunk forward
    carries (`Prefill batch(mixed #running-req: N)`; 0 otherwise)."""
    line_no: np.ndarray
    """int64: 1-based line of the log that printed the forward (the first copy read)."""
    dp_rank: np.ndarray
    """int64: attention-DP rank that ran it (`DP1` in the rank prefix; 0 without one)."""
    graph: np.ndarray
    """int8: the server's verdict (`cuda graph: True` 1, `False` 0; -1 when the line has none)."""
    launch: int = 1
    """1-based launch of the log (a restart begins the next, `sglang_settings`); a chunk never spans two."""


class TimeUnit(str, Enum):
    """How a timestamp field is read."""

    ms = "ms"
    s = "s"
    auto = "auto"
    """Numbers are seconds, strings are wall-clock datetimes."""


def parse_time_values(values: list[object], unit: TimeUnit) -> np.ndarray:
    """[n] float64 seconds from numbers or numeric strings (ms or s by `unit`), or, with
    `TimeUnit.auto`, wall-clock datetime strings (seconds since 1970, years 1970..2199).

    Raises `ValueError` or `TypeError` when a value cannot be read (callers locate it).
    """
    if values and isinstance(values[0], str):
        if any(type(v) is not str for v in values):
            raise TypeError("mixed timestamp types")
        try:
            numbers = np.array(values, dtype=np.float64)
        except ValueError:
            if unit is not TimeUnit.auto:
                raise
            return datetime_seconds(np.array(values))
    else:
        if any(type(v) not in (int, float) for v in values):
            raise TypeError("not a number")
        numbers = np.array(values, dtype=np.float64)
    return numeric_seconds(numbers, unit)


def numeric_seconds(numbers: np.ndarray, unit: TimeUnit) -> np.ndarray:
    """Seconds from numeric timestamps; `ValueError` unless all finite and within
    `LAST_SECOND` of 0 (`seconds out of range`: a timestamp in µs or ns read as seconds)."""
    if not np.isfinite(numbers).all():
        raise ValueError("not a finite number")
    seconds = numbers / 1000.0 if unit is TimeUnit.ms else numbers
    if seconds.size and float(np.abs(seconds).max()) >= LAST_SECOND:
        raise ValueError("seconds out of range")
    return seconds


def datetime_seconds(values: np.ndarray) -> np.ndarray:
    """Seconds since 1970 of datetime strings; `ValueError` for unreadable or out-of-range dates.

    Parsed at second resolution first (no wrap-around for any year numpy reads), checked
    against `FIRST_DATE`/`LAST_DATE`, then re-read at nanoseconds for sub-second precision.
    """
    with warnings.catch_warnings():  # `...Z` / `+01:00` offsets are converted to UTC
        warnings.simplefilter("ignore", UserWarning)
        coarse = np.array(values, dtype="datetime64[s]")
        if np.isnat(coarse).any():
            raise ValueError("not a datetime")
        if ((coarse < FIRST_DATE) | (coarse >= LAST_DATE)).any():
            raise ValueError("date out of range (1970..2199)")
        return np.array(values, dtype="datetime64[ns]").astype(np.int64) / 1e9


def lengths_ok(values: np.ndarray, minimum: int) -> bool:
    """All values integral int64 within [minimum, MAX_REQUEST_TOKENS]."""
    return values.dtype == np.int64 and (values.size == 0 or (values.min() >= minimum and values.max() <= MAX_REQUEST_TOKENS))


@dataclass(frozen=True)
class RequestSpec:
    """Where a per-request table (CSV, JSONL or Parquet) keeps each field."""

    label: str
    """Format name for messages (`mooncake`, `azure`, ...)."""
    length_field: str
    """Field holding the prompt (input) length in tokens."""
    time_field: str | None
    """Field holding the arrival time, or None (Poisson arrivals are drawn)."""
    time_unit: TimeUnit = TimeUnit.auto
    """Unit of `time_field`."""
    optional_time: bool = False
    """Use `time_field` only when the header has it (vidur's `arrived_at`)."""
    output_field: str | None = None
    """Field holding the output length in tokens, or None."""
    optional_output: bool = True
    """Use `output_field` only when the header (first record) has it."""
    filters: tuple[tuple[str, str], ...] = ()
    """`(field, value)`: keep only rows whose text field equals the value (BurstGPT `Model`)."""
    hash_field: str | None = None
    """Field holding prefix-block hashes (JSONL only: Mooncake `hash_ids`), or None."""
    images_field: str | None = None
    """Field holding the request's image count (CSV only: Azure 2025 `NumImages`), read when the
    header has it, or None."""


TraceItem = Union[BatchSet, ForwardSizes, RequestItem]
"""What a trace reader yields, by its `TraceKind`: `BatchSet`s, `ForwardSizes` or `RequestItem`s."""
