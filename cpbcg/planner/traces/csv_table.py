"""CSV request tables (Azure, vidur / Sarathi, BurstGPT, Splitwise, generic): a header line, then
one request per line.

The common path converts a whole chunk's column at once with numpy; any problem in a chunk
sends it through a line-by-line pass that names the first bad line (`FILE:LINE: ...`).
Quoted fields are allowed, fields spanning several lines are not.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, cast

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.jsonl_table import length_too_large

from cpbcg.planner.traces.records import (
    FIRST_DATE, LAST_DATE, MAX_REQUEST_TOKENS, LineNumbers, RequestChunk, RequestItem, RequestSpec, TimeUnit, drop_empty_prompts, lengths_ok, parse_time_values,
)
from cpbcg.planner.traces.text import (
    CONTROL_BYTES, binary_error, check_blob_lines, count_newlines, excerpt, iter_blob_chunks, line_excerpt, long_line, looks_binary,
    MAX_LINE_BYTES, TracePath, no_requests, show_names, single_byte_hint, split_lines, time_problem,
)

if TYPE_CHECKING:
    import pyarrow as pa

REQUEST_CHUNK_BYTES = 4 << 20
"""Bytes of lines parsed at once (bounds memory: a chunk's Python objects are ~10x its bytes)."""
COLUMNAR_MIN_BYTES = 1 << 20
"""Chunks from this size on go through pyarrow's CSV reader when it is installed (smaller ones
do not pay its import, ~0.15 s)."""


@dataclass(frozen=True)
class Columns:
    """Positions of a spec's fields in the header (None: absent and optional)."""

    width: int
    length: int
    time: int | None
    output: int | None
    filters: tuple[tuple[int, str], ...]
    images: int | None = None


def csv_reason(exc: csv.Error) -> str:
    """The csv module's complaint without its advice (`new-line character seen in unquoted field`)."""
    return str(exc).split(" - ")[0]


def header_columns(path: TracePath, line_no: int, line: bytes) -> list[str]:
    """Column names of a CSV header line; `TraceError` for binary data or an unparsable line."""
    if looks_binary(line):
        raise binary_error(path, line_no, line)
    try:
        return [c.strip() for c in next(csv.reader([line.decode("utf-8", "replace").strip()]), [])]
    except csv.Error as exc:
        raise TraceError(located(path, line_no, f"not a CSV header ({csv_reason(exc)}): {line_excerpt(line)}")) from None


def read_csv_requests(path: TracePath, spec: RequestSpec) -> Iterator[RequestItem]:
    """Yield `(chunk, line_numbers)` per chunk of lines; `line_numbers()` gives the [n] int64
    line of each request (computed only when needed, for messages)."""
    columns: Columns | None = None
    pending, pending_first = b"", 0  # a record whose quoted field runs on past the chunk, and its first line
    for first, blob in iter_blob_chunks(path, REQUEST_CHUNK_BYTES):  # the file is opened once
        if pending:
            blob, first, pending = pending + blob, pending_first, b""
        if columns is None:  # the header: the first non-blank line (`first_line`'s rule), a UTF-8 BOM dropped
            header_line, cut = first, 0
            while cut < len(blob):
                end = blob.find(b"\n", cut) + 1 or len(blob)
                if blob[cut:end].strip():
                    break
                header_line, cut = header_line + 1, end
            else:  # only blank lines so far
                check_blob_lines(path, first, blob)
                continue
            header = blob[cut:end]
            if len(header.rstrip(b"\r\n")) > MAX_LINE_BYTES:
                raise long_line(path, header_line)
            columns = _columns(path, header_line, header.lstrip(b"\xef\xbb\xbf"), spec)
            check_blob_lines(path, first, blob)
            blob, first = blob[end:], header_line + 1  # cut the header line and any blank lines before it
        else:
            check_blob_lines(path, first, blob)
        columnar = _chunk_columnar(blob, first, columns, spec) or _chunk_flat(blob, first, columns, spec)
        if columnar is not None:
            yield drop_empty_prompts(*columnar, spec.length_field)
            continue
        lines = split_lines(blob)
        rows, consumed = _split_rows(path, first, lines)
        if consumed < len(lines):  # a quoted field still open at the chunk's end: its record goes on in the next chunk
            pending, pending_first = b"".join(lines[consumed:]), first + consumed
            if len(pending) > MAX_LINE_BYTES:
                raise TraceError(located(path, pending_first, f"a quoted field runs on for more than {MAX_LINE_BYTES >> 20} MiB "
                                                              "(a quote (\") not closed?)"))
            lines, rows = lines[:consumed], rows[:consumed]
            if not lines:
                continue
        if columns.filters:
            rows = _filtered(rows, columns)
        chunk = _chunk_fast(rows, columns, spec)
        if chunk is None:
            chunk = _chunk_slow(path, first, rows, columns, spec)
        yield drop_empty_prompts(chunk, _line_numbers(rows, first), spec.length_field)
    if pending:
        raise TraceError(located(path, pending_first, "a quoted field (\") is not closed before the end of the file"))
    if columns is None:
        raise no_requests(path)


def _chunk_columnar(blob: bytes, first: int, columns: Columns, spec: RequestSpec) -> RequestItem | None:
    """The chunk and its line numbers through pyarrow's CSV reader, or None: pyarrow is not
    installed, or the chunk holds anything the line-by-line path decides (quotes, blank lines,
    control bytes, U+FFFD, a lone CR, a row of the wrong width, a field that is not plain digits,
    a timestamp outside the strict ISO form that both numpy and pyarrow read alike). pyarrow only
    splits the fields; the values are converted by the same rules as `_chunk_fast`
    (`_digits`, `lengths_ok`, `parse_time_values`), so the two paths give the same chunk."""
    if len(blob) < COLUMNAR_MIN_BYTES:
        return None
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pa_csv
    except ImportError:  # the line-by-line path reads every chunk
        return None
    if (not blob or b'"' in blob or b"\xef\xbf\xbd" in blob or (b"\r" in blob and blob.count(b"\r") != blob.count(b"\r\n"))
            or len(blob.translate(None, CONTROL_BYTE_SET)) != len(blob)):
        return None
    num_lines = count_newlines(blob) + (not blob.endswith(b"\n"))
    names = [f"c{i}" for i in range(columns.width)]
    try:
        table = pa_csv.read_csv(
            pa.py_buffer(blob),
            read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=len(blob) + 1),
            parse_options=pa_csv.ParseOptions(quote_char=False, ignore_empty_lines=False),
            convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in names},
                                                  strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        return None
    if table.num_rows != num_lines:
        return None
    keep = None
    if columns.filters:
        mask = np.ones(table.num_rows, dtype=bool)
        for index, value in columns.filters:
            mask &= np.array([text.strip() == value for text in table.column(index).to_pylist()], dtype=bool)
        keep = np.flatnonzero(mask)
        table = table.take(pa.array(keep))

    def digits(index: int | None) -> np.ndarray | None:
        if index is None:
            return None
        column = table.column(index)
        if table.num_rows and not pc.all(pc.ascii_is_decimal(column)).as_py():
            raise ValueError("not plain digits")
        return np.asarray(pc.cast(column, pa.int64()).to_numpy(), dtype=np.int64)

    try:
        lengths = digits(columns.length)
        outputs, images = digits(columns.output), digits(columns.images)
        arrival = None if columns.time is None else _times(table.column(columns.time), spec.time_unit)
    except (ValueError, TypeError, OverflowError, pa.ArrowInvalid):
        return None
    assert lengths is not None
    if not lengths_ok(lengths, 0) or any(v is not None and not lengths_ok(v, 0) for v in (outputs, images)):
        return None
    count = len(lengths)
    numbers = (lambda: first + np.arange(count, dtype=np.int64)) if keep is None else (lambda: first + keep)
    return RequestChunk(lengths, arrival, None, outputs, images), numbers


def _chunk_flat(blob: bytes, first: int, columns: Columns, spec: RequestSpec) -> RequestItem | None:
    """The chunk and its line numbers by one `str.split` of the whole chunk (no Python list per
    row), or None where the line-by-line path decides: the same conditions as `_chunk_columnar`
    (quotes, blank lines, control bytes, U+FFFD or invalid UTF-8, a lone CR, a row of the wrong
    width, filters), then the same conversions as `_chunk_fast` on the same field strings."""
    width = columns.width
    if (not blob or columns.filters or width < 2 or b'"' in blob or b"\xef\xbf\xbd" in blob or (b"\r" in blob and blob.count(b"\r") != blob.count(b"\r\n"))
            or len(blob.translate(None, CONTROL_BYTE_SET)) != len(blob)):
        return None
    body = blob[:-1] if blob.endswith(b"\n") else blob
    data = np.frombuffer(body, dtype=np.uint8)
    ends = np.flatnonzero(data == ord("\n"))
    commas = np.flatnonzero(data == ord(","))
    per_line = np.diff(np.searchsorted(commas, np.concatenate([[-1], ends, [len(body)]])))
    if (per_line != width - 1).any():  # a blank line or a row of the wrong width
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    fields = text.replace("\r\n", "\n").replace("\n", ",").split(",")
    try:
        lengths = _digits(fields[columns.length::width])
        outputs = None if columns.output is None else _digits(fields[columns.output::width])
        images = None if columns.images is None else _digits(fields[columns.images::width])
        arrival = None if columns.time is None else parse_time_values(cast("list[object]", fields[columns.time::width]), spec.time_unit)
    except (ValueError, TypeError, OverflowError):
        return None
    if not lengths_ok(lengths, 0) or any(v is not None and not lengths_ok(v, 0) for v in (outputs, images)):
        return None
    count = len(lengths)
    return RequestChunk(lengths, arrival, None, outputs, images), lambda: first + np.arange(count, dtype=np.int64)


ISO_SECONDS = r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d{1,9})?$"
"""Wall-clock timestamps that pyarrow converts exactly as numpy's `datetime64` (a month, day,
hour, minute or second out of range fails in both); any other form goes to
`parse_time_values` as text."""
CONTROL_BYTE_SET = bytes(i for i in range(256) if CONTROL_BYTES.match(bytes([i])))
"""`CONTROL_BYTES` as a set for `bytes.translate` (a pass at memory speed)."""


FIRST_DATE_S, LAST_DATE_S = (int(d.astype("datetime64[s]").astype(np.int64)) for d in (FIRST_DATE, LAST_DATE))


def _times(column: "pa.ChunkedArray", unit: TimeUnit) -> np.ndarray:
    """[n] float64 seconds of a text column, by `parse_time_values`' rule; `ValueError` as it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if unit is TimeUnit.auto and len(column) and pc.all(pc.match_substring_regex(column, ISO_SECONDS)).as_py():
        stamps = pc.cast(pc.replace_substring(column, " ", "T"), pa.timestamp("ns"))
        nanoseconds = np.asarray(stamps.cast(pa.int64()).to_numpy(), dtype=np.int64)
        seconds = nanoseconds // 1_000_000_000
        if ((seconds < FIRST_DATE_S) | (seconds >= LAST_DATE_S)).any():
            raise ValueError("date out of range (1970..2199)")
        return nanoseconds / 1e9
    return parse_time_values(column.to_pylist(), unit)


def _filtered(rows: list[list[str]], columns: Columns) -> list[list[str]]:
    """Rows failing a filter become `[]` (skipped like blank lines; line numbers stay right).
    Rows of the wrong width are kept so that the careful path names them."""
    def keep(row: list[str]) -> bool:
        return len(row) != columns.width or all(row[i].strip() == value for i, value in columns.filters)

    return [row if row and keep(row) else [] for row in rows]


def _split_rows(path: TracePath, first: int, lines: list[bytes]) -> tuple[list[list[str]], int]:
    """Fields of each line (`[]` for a blank line) and how many of `lines` they cover; plain
    `split` unless the chunk has quotes, then Python's `csv` reader over the whole chunk
    (`_quoted_rows`: a quoted field may hold newlines; the record is at its first line, its
    other lines `[]`; a record still open at the chunk's end is left uncovered).

    Raises `TraceError` naming the first line that is binary data or not a CSV row.
    """
    blob = b"".join(lines)
    text = blob.decode("utf-8", "replace")
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    if "\ufffd" in text or CONTROL_BYTES.search(blob):
        for line_no, line in enumerate(lines, start=first):
            if looks_binary(line):
                hint = single_byte_hint(line)
                raise TraceError(located(path, line_no, f"not UTF-8 text: {hint}" if hint is not None
                                         else f"binary data, not a CSV row: {excerpt(line.strip(), 16)}"))
    if '"' in text or len(parts) != len(lines):
        return _quoted_rows(path, first, lines)
    return [line.rstrip("\r").split(",") if line.strip() else [] for line in parts], len(lines)


def _quoted_rows(path: TracePath, first: int, lines: list[bytes]) -> tuple[list[list[str]], int]:
    """`_split_rows` by Python's `csv` reader (RFC 4180 quoting: a quoted field may span lines).
    A record the reader finishes only by running out of lines is still open (its quote closes
    in the next chunk): the lines from its first one are left uncovered."""
    past_end = False

    def feed() -> Iterator[str]:
        nonlocal past_end
        for line in lines:
            yield line.decode("utf-8", "replace")
        past_end = True  # the reader asked for a line after the last one

    reader = csv.reader(feed(), strict=True)  # a quote closed mid-field ("x"y) is refused, not glued
    rows: list[list[str]] = [[] for _ in lines]
    start = 0
    try:
        for row in reader:
            if past_end:  # the last record ran into the end of the chunk (a line without its newline)
                return rows[:start], start
            rows[start], start = row, reader.line_num
    except csv.Error as exc:
        if past_end:  # strict: "unexpected end of data" inside quotes at the chunk's end
            return rows[:start], start
        line_no = first + max(reader.line_num - 1, 0)
        raise TraceError(located(path, line_no, f"not a CSV row ({csv_reason(exc)}): {line_excerpt(lines[line_no - first])}")) from None
    return rows, len(lines)


def _columns(path: TracePath, line_no: int, header: bytes, spec: RequestSpec) -> Columns:
    """Positions of the spec's fields in the header; `TraceError` for a missing required column."""
    if header.lstrip()[:1] in (b"{", b"["):
        raise TraceError(located(path, line_no, f"not a CSV header: {spec.label} traces are CSV with a header line (see --trace-format)"))
    names = header_columns(path, line_no, header)
    wanted = [spec.length_field, *(name for name, _ in spec.filters)]
    wanted += [spec.time_field] if spec.time_field and not spec.optional_time else []
    wanted += [spec.output_field] if spec.output_field and not spec.optional_output else []
    for name in wanted:
        if name not in names:
            raise TraceError(located(path, line_no, f'missing column "{name}" (header has: {show_names(names)})'))
    for field in (spec.length_field, spec.time_field, spec.output_field, spec.images_field, *(f for f, _ in spec.filters)):
        if field and names.count(field) > 1:
            raise TraceError(located(path, line_no, f'column "{excerpt(field)[1:-1]}" appears {names.count(field)} times in the header'))

    def where(name: str | None) -> int | None:
        return names.index(name) if name and name in names else None

    filters = tuple((names.index(name), value) for name, value in spec.filters)
    return Columns(len(names), names.index(spec.length_field), where(spec.time_field), where(spec.output_field), filters,
                   where(spec.images_field))


def _chunk_fast(rows: list[list[str]], columns: Columns, spec: RequestSpec) -> RequestChunk | None:
    body = [row for row in rows if row]
    if any(len(row) != columns.width for row in body):
        return None
    try:
        lengths = _digits([row[columns.length] for row in body])
        outputs = None if columns.output is None else _digits([row[columns.output] for row in body])
        images = None if columns.images is None else _digits([row[columns.images] for row in body])
        arrival = None if columns.time is None else parse_time_values([row[columns.time] for row in body], spec.time_unit)
    except (ValueError, TypeError, OverflowError):
        return None
    if not lengths_ok(lengths, 0) or any(v is not None and not lengths_ok(v, 0) for v in (outputs, images)):  # 0-token prompts: skipped by the caller
        return None
    return RequestChunk(lengths, arrival, None, outputs, images)


def _digits(texts: list[str]) -> np.ndarray:
    """[n] int64 of plain ASCII digit strings; `ValueError` for anything else (spaces, signs,
    `1_000`, non-ASCII digits: the careful path decides those, by `csv_length`'s rule)."""
    joined = "".join(texts)
    if texts and not (joined.isascii() and joined.isdigit()):
        raise ValueError("not plain digits")
    return np.array(texts, dtype=np.int64)


def _chunk_slow(path: TracePath, first: int, rows: list[list[str]], columns: Columns, spec: RequestSpec) -> RequestChunk:
    lengths, outputs, times, images = [], [], [], []
    for line_no, row in enumerate(rows, start=first):
        if not row:
            continue
        if len(row) != columns.width:
            raise TraceError(located(path, line_no, f"expected {columns.width} fields, got {len(row)}"))
        lengths.append(csv_length(path, line_no, row[columns.length], spec.length_field, 1, zero_ok=True))
        if columns.output is not None:
            outputs.append(csv_length(path, line_no, row[columns.output], spec.output_field or "", 0))
        if columns.images is not None:
            images.append(csv_length(path, line_no, row[columns.images], spec.images_field or "", 0))
        if columns.time is not None:
            try:
                times.append(float(parse_time_values([row[columns.time]], spec.time_unit)[0]))
            except (ValueError, TypeError, OverflowError) as exc:
                raise TraceError(located(path, line_no, time_problem(spec.time_field or "", excerpt(row[columns.time]), exc))) from None
    arrival = None if columns.time is None else np.array(times, dtype=np.float64)
    output = None if columns.output is None else np.array(outputs, dtype=np.int64)
    image = None if columns.images is None else np.array(images, dtype=np.int64)
    return RequestChunk(np.array(lengths, dtype=np.int64), arrival, None, output, image)


def csv_length(path: TracePath, line_no: int, text: str, field: str, minimum: int, zero_ok: bool = False) -> int:
    """A CSV token count: ASCII digits (no sign, surrounding blanks allowed) of an integer in
    [minimum, MAX_REQUEST_TOKENS] (or 0 with `zero_ok`: a row the caller skips), else `TraceError`. The fast path (`_digits`) takes plain
    digits only and leaves everything else here, so both refuse `+100` and `-0` alike."""
    stripped = text.strip()
    value = int(stripped) if stripped.isascii() and stripped.isdigit() and len(stripped) < 400 else None
    if value is not None and value > MAX_REQUEST_TOKENS:
        raise TraceError(located(path, line_no, length_too_large(field, str(value))))
    if value is None or (value < minimum and not (zero_ok and value == 0)):
        what = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise TraceError(located(path, line_no, f"{field}: {excerpt(text)} is not {what}"))
    return value


def _line_numbers(rows: list[list[str]], first: int) -> LineNumbers:
    """Line of each request, as a thunk that keeps no reference to `rows`."""
    if all(rows):
        count = len(rows)
        return lambda: first + np.arange(count, dtype=np.int64)
    numbers = np.array([i for i, row in enumerate(rows, start=first) if row], dtype=np.int64)
    return lambda: numbers
