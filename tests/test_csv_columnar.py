"""pyarrow's CSV path (`csv_table._chunk_columnar`) against the numpy / line-by-line paths, for
the request CSV formats with filters, numeric timestamps and image counts: the same records,
skipped rows and notes, or the same located error. (test_fuzz_oracles.py does the same for
Azure's wall-clock timestamps.)"""

from __future__ import annotations

import random

import numpy as np
import pytest

import cpbcg.planner.traces.csv_table as csv_table
from cpbcg.errors import TraceError
from cpbcg.planner.traces import ReadOptions
from cpbcg.assembly.registry import open_trace

pytest.importorskip("pyarrow")

HEADERS = {
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
    "splitwise": "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size",
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens,NumImages",
}


def line(rng: random.Random, kind: str, i: int) -> str:
    length, out = rng.choice([0, 1, 50, rng.randrange(1, 9000)]), rng.randrange(0, 900)
    hostile = rng.random() < 0.02
    if kind == "burstgpt":
        model = rng.choice(["ChatGPT", "GPT-4", " ChatGPT ", "chatgpt"])
        bad = [f"{i},{model},-{length},{out},1,API log", f"{i},{model},{length},{out}", f"x,{model},{length},{out},1,API log",
               f"{i},GPT-4,abc,{out},1,API log", f"nan,{model},{length},{out},1,API log", f"{i},{model},{length}, {out},1,API log"]
        good = f"{i * 1.5},{model},{length},{out},{length + out},{rng.choice(['Conversation log', 'API log'])}"
    elif kind == "splitwise":
        bad = [f"{i},conv,1,1e3,1,{length},{out}", f"{i},conv,1,inf,1,{length},{out}", f"{i},conv,1,{i},1,{length},+{out}",
               f"{i},conv,1,1_0,1,{length},{out}"]
        good = f"{i},conv,{rng.randrange(9)},{i * 0.25:.3f},1,{length},{out}"
    else:
        stamp = f"2025-05-01 00:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randrange(10**7):07d}"
        bad = [f"{stamp},{length},{out},-1", f"{stamp},{length},{out},", f"{stamp},{length},{out},1.0"]
        good = f"{stamp},{length},{out},{rng.choice([0, 0, 0, 1, 3])}"
    return rng.choice(bad) if hostile else good


def result(path, kind: str, options: ReadOptions) -> tuple:
    try:
        chunks = list(open_trace(path, kind, options).items)
    except TraceError as exc:
        return ("error", str(exc))
    cat = lambda name: None if getattr(chunks[0], name) is None else np.concatenate([getattr(c, name) for c in chunks]).tolist()  # noqa: E731
    return (*(cat(n) for n in ("input_tokens", "arrival_s", "output_tokens", "num_images")), [repr(c.skipped) for c in chunks])


@pytest.mark.parametrize("kind", sorted(HEADERS))
def test_pyarrow_columns_read_as_the_other_paths(tmp_path, monkeypatch, kind):
    rng = random.Random(f"columnar-{kind}")
    errors = 0
    for case in range(60):
        text = HEADERS[kind] + "\n" + "\n".join(line(rng, kind, i) for i in range(rng.randrange(1, 300))) + rng.choice(["\n", "", "\r\n"])
        path = tmp_path / f"t{case}.csv"
        path.write_text(text)
        options = ReadOptions(model=rng.choice([None, "ChatGPT", "GPT-4"])) if kind == "burstgpt" else ReadOptions()
        monkeypatch.setattr(csv_table, "COLUMNAR_MIN_BYTES", 0)
        columnar = result(path, kind, options)
        monkeypatch.setattr(csv_table, "COLUMNAR_MIN_BYTES", 1 << 60)
        assert result(path, kind, options) == columnar, text[:500]
        errors += columnar[0] == "error"
    assert 0 < errors < 60  # both outcomes were exercised


@pytest.mark.parametrize("kind", sorted(HEADERS))
def test_flat_split_reads_as_the_line_by_line_path(tmp_path, monkeypatch, kind):
    """`csv_table._chunk_flat` (a plain install's fast CSV path, issue 34) against the line-by-line
    path: the same records, skipped rows, notes and located errors, odd rows included."""
    rng = random.Random(f"flat-{kind}")
    odd = ["", '"1",2,3', "\ufffd", "1,2\r3", "\x00"]
    monkeypatch.setattr(csv_table, "COLUMNAR_MIN_BYTES", 1 << 60)
    outcomes = set()
    for case in range(60):
        rows = [line(rng, kind, i) for i in range(rng.randrange(1, 300))]
        if rng.random() < 0.2:
            rows.insert(rng.randrange(len(rows)), rng.choice(odd))
        text = HEADERS[kind] + "\n" + "\n".join(rows) + rng.choice(["\n", "", "\r\n"])
        path = tmp_path / f"t{case}.csv"
        path.write_text(text)
        options = ReadOptions(model=rng.choice([None, "ChatGPT", "GPT-4"])) if kind == "burstgpt" else ReadOptions()
        flat = result(path, kind, options)
        with monkeypatch.context() as m:
            m.setattr(csv_table, "_chunk_flat", lambda *a: None)
            assert result(path, kind, options) == flat, text[:500]
        outcomes.add(flat[0] == "error")
    assert outcomes == {True, False}  # both outcomes were exercised
