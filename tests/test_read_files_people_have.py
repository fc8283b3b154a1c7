"""Issue 22 item 4: the request files people have are read without edits.

Rows with 0 prompt tokens are skipped and counted (first line named), `--strict` refuses them;
AIBrix's older `"Prompt Length"` keys are read; common column names are detected and said;
`--length-field` alone still finds the output column; errors name the option. The fixtures are
small synthetic copies of the shapes of the real files (Azure 2025 multimodal, BurstGPT)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.errors import TraceError
from cpbcg.planner.traces import ReadOptions
from cpbcg.assembly.registry import open_trace

ASSETS = Path(__file__).parent / "assets" / "requests"


def read(name: str, **options):
    opened = open_trace(ASSETS / name, "auto", ReadOptions(**options))
    chunks = list(opened.items)
    lengths = np.concatenate([c.input_tokens for c in chunks]).tolist()
    outputs = None if chunks[0].output_tokens is None else np.concatenate([c.output_tokens for c in chunks]).tolist()
    return opened, lengths, outputs


@pytest.mark.parametrize(
    "name, lengths, skipped, first_line, field",
    [
        ("azure-2025-multimodal-zero.csv", [1840, 733, 2210], 2, 3, "ContextTokens"),
        ("burstgpt-zero.csv", [472, 1087], 1, 3, "Request tokens"),
        ("zero-length.jsonl", [100], 1, 2, "input_length"),
    ],
)
def test_zero_prompt_rows_are_skipped_and_counted(name, lengths, skipped, first_line, field):
    opened, got, _ = read(name)
    assert got == lengths
    notes = opened.notes
    assert (notes.skipped_rows, notes.first_skipped_line, notes.skipped_field) == (skipped, first_line, field)
    rows = "row" if skipped == 1 else "rows"
    assert notes.lines() == [f"cpbcg: note: skipped {skipped} {rows} with 0 prompt tokens ({field}; first: {ASSETS / name}:{first_line}); --strict refuses them"]


@pytest.mark.parametrize(
    "name, line, field",
    [("azure-2025-multimodal-zero.csv", 3, "ContextTokens"), ("burstgpt-zero.csv", 3, "Request tokens"), ("zero-length.jsonl", 2, "input_length")],
)
def test_strict_refuses_zero_prompt_rows(name, line, field):
    with pytest.raises(TraceError) as info:
        read(name, strict=True)
    assert str(info.value) == f"{ASSETS / name}:{line}: {field}: 0 is not a positive integer (--strict refuses rows with 0 prompt tokens)"


def test_zero_rows_in_every_chunk_path_give_the_same_count(tmp_path):
    """The fast (numpy) path and the careful path skip the same rows: a chunk with an unrelated
    quoted cell goes the careful way."""
    plain = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2025-03-01 10:00:{i:02d}.000,{0 if i % 3 == 0 else 100 + i},5\n" for i in range(30))
    quoted = plain.replace(",105,", ',"105",')
    results = []
    for text in (plain, quoted):
        path = tmp_path / "t.csv"
        path.write_text(text)
        opened = open_trace(path)
        lengths = np.concatenate([c.input_tokens for c in opened.items]).tolist()
        results.append((lengths, opened.notes.skipped_rows, opened.notes.first_skipped_line))
    assert results[0] == results[1] and results[0][1:] == (10, 2)


def test_aibrix_legacy_keys_are_read():
    opened, lengths, outputs = read("aibrix-legacy-keys.jsonl")
    assert opened.format.name == "aibrix" and lengths == [101, 55, 900] and outputs == [20, 7, 64]


@pytest.mark.parametrize(
    "name, fmt, lengths, outputs, note",
    [
        ("common-columns.csv", "csv", [1200, 800, 3000], [30, 12, 64],
         "read input_tokens as prompt length, arrival_time as arrival time (s), output_tokens as output length"),
        ("common-keys.jsonl", "jsonl", [1200, 800], [30, 12],
         "read prompt_len as prompt length, timestamp as arrival time (s), output_len as output length"),
    ],
)
def test_common_column_names_are_detected_and_said(name, fmt, lengths, outputs, note):
    opened, got, got_outputs = read(name)
    assert opened.format.name == fmt and got == lengths and got_outputs == outputs
    assert opened.notes.notes == [note]


def test_length_field_alone_still_finds_the_output_column():
    opened, lengths, outputs = read("length-field-only.csv", length_field="tokens")
    assert lengths == [500, 700] and outputs == [40, 41]
    assert opened.notes.notes == ["read completion_tokens as output length"]


def test_errors_name_the_option():
    with pytest.raises(TraceError, match="needs --length-field"):
        list(open_trace(ASSETS / "azure.csv", "csv").items)
    with pytest.raises(TraceError, match=r"or csv/jsonl with --length-field$"):
        list(open_trace(ASSETS / "unknown-columns.csv").items)


def test_plan_reports_skipped_rows_and_strict_exits_2():
    trace = str(ASSETS / "azure-2025-multimodal-zero.csv")
    result = CliRunner().invoke(app, ["plan", "-t", trace, "--no-recommend", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert f"skipped 2 rows with 0 prompt tokens (ContextTokens; first: {trace}:3)" in result.stderr
    simulation = orjson.loads(result.stdout)["simulation"]
    assert simulation["requests"] == 3 and simulation["skipped_rows"] == 2 and simulation["first_skipped_line"] == 3
    strict = CliRunner().invoke(app, ["plan", "-t", trace, "--no-recommend", "--strict"])
    assert strict.exit_code == 2 and strict.stderr.strip() == f"cpbcg: error: {trace}:3: ContextTokens: 0 is not a positive integer (--strict refuses rows with 0 prompt tokens)"
