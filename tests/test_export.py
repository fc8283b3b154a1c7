"""Exports parse back to the same bucket list."""

import orjson
import pytest

from cpbcg.errors import ConfigError
from cpbcg.planner.buckets import read_bucket_file
from cpbcg.planner.export import EmitFormat, export_buckets, parse_sglang_flags
from cpbcg.planner.layout import CPLayout

BUCKETS = [16, 512, 2048, 4096, 8193]


def test_sglang_flags_round_trip():
    text = export_buckets(BUCKETS, "sglang", CPLayout(4))
    assert text == (
        "--cuda-graph-bs-prefill 16 512 2048 4096 8193 --cuda-graph-max-bs-prefill 8193 "
        "--enable-prefill-cp --attn-cp-size 4 --cp-strategy zigzag\n"
    )
    assert parse_sglang_flags(text) == BUCKETS
    assert "--enable-prefill-cp" not in export_buckets(BUCKETS, "sglang", CPLayout(1))


@pytest.mark.parametrize("fmt,suffix", [("sglang-json", ".json"), ("json", ".json"), ("yaml", ".yaml")])
def test_file_exports_read_back(tmp_path, fmt, suffix):
    path = tmp_path / f"buckets{suffix}"
    path.write_text(export_buckets(BUCKETS, fmt, CPLayout(4), {"source": "test"}))
    assert read_bucket_file(path) == BUCKETS


def test_sglang_json_shape():
    doc = orjson.loads(export_buckets(BUCKETS, EmitFormat.sglang_json, CPLayout(4)))
    assert doc == {"prefill": {"bs": BUCKETS, "max_bs": 8193}}


def test_export_errors():
    with pytest.raises(ConfigError):
        export_buckets([], "json", CPLayout(4))
    with pytest.raises(ConfigError):
        parse_sglang_flags("--attn-cp-size 4")
