"""Exports parse back to the same bucket list."""

import json
import pytest

from cpbcg.errors import ConfigError
from cpbcg.bucket_files import read_bucket_file
from cpbcg.outputs.exports import export_buckets
from cpbcg.planner.choices import EmitFormat
from cpbcg.planner.model.bucket_spec import parse_sglang_flags
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.layout import CPLayout

CP4 = Deployment(cp=CPLayout(4))
CP1 = Deployment(cp=CPLayout(1))

BUCKETS = [16, 512, 2048, 4096, 8193]


def test_sglang_flags_round_trip():
    text = export_buckets(BUCKETS, "sglang", CP4)
    assert text == (
        "--cuda-graph-bs-prefill 16 512 2048 4096 8193 --cuda-graph-max-bs-prefill 8193 "
        "--enable-prefill-cp --attn-cp-size 4 --tp-size 4 --cp-strategy zigzag --prefill-attention-backend trtllm_mha "
        "--chunked-prefill-size 8192 --max-prefill-tokens 16384 --page-size 1\n"  # the page size is always said
    )
    assert parse_sglang_flags(text) == BUCKETS
    assert export_buckets(BUCKETS, "sglang", CP1) == "--cuda-graph-bs-prefill 16 512 2048 4096 8193 --cuda-graph-max-bs-prefill 8193 --chunked-prefill-size 8192 --max-prefill-tokens 16384 --page-size 1\n"


@pytest.mark.parametrize("fmt,suffix", [("json", ".json"), ("yaml", ".yaml")])
def test_file_exports_read_back(tmp_path, fmt, suffix):
    path = tmp_path / f"buckets{suffix}"
    path.write_text(export_buckets(BUCKETS, fmt, CP4, {"source": "test"}))
    assert read_bucket_file(path) == BUCKETS


def test_sglang_json_shape():
    text = export_buckets(BUCKETS, EmitFormat.sglang_json, CP4)
    assert text.startswith('--cuda-graph-config \'{"prefill":{"bs":[16,512,2048,4096,8193],"max_bs":8193}}\' --enable-prefill-cp')
    assert parse_sglang_flags(text) == BUCKETS
    assert parse_sglang_flags(text.replace("'", "")) == BUCKETS  # the bare form earlier versions wrote still reads


@pytest.mark.parametrize("form", ["sglang", "sglang-json"])
def test_a_flags_file_reaches_the_server_as_written_under_failglob(tmp_path, form):
    """Issue 32: `--emit sglang-json` wrote a bare `{"prefill":{"bs":[16,...]}}`, a glob bracket:
    `bash -O failglob` refused `$(cat flags.txt)` and a file named `1` replaced the word. The JSON
    is now single-quoted and the README passes the file with `xargs` (a shell's split, no
    globbing); the numbers-only form holds no glob character and survives `$(cat ...)` too."""
    import shlex
    import subprocess
    import sys

    flags = tmp_path / "flags.txt"
    flags.write_text(export_buckets(BUCKETS, EmitFormat(form), CP4) + "\n")
    for name in ("1", "6", "8", "p"):  # files a glob bracket of the JSON would match
        (tmp_path / name).write_text("")
    probe = "import json, sys; print(json.dumps(sys.argv[1:]))"
    ways = ['xargs {py} -c "$0" < flags.txt'] + (['{py} -c "$0" $(cat flags.txt)'] if form == "sglang" else [])
    for way in ways:
        out = subprocess.run(["bash", "-O", "failglob", "-c", way.format(py=sys.executable), probe], cwd=tmp_path,
                             capture_output=True, text=True, check=True)
        words = json.loads(out.stdout)
        assert words == shlex.split(flags.read_text())
        if form == "sglang-json":
            assert json.loads(words[words.index("--cuda-graph-config") + 1])["prefill"]["bs"] == BUCKETS


def test_export_errors():
    with pytest.raises(ConfigError):
        export_buckets([], "json", CP4)
    with pytest.raises(ConfigError):
        parse_sglang_flags("--attn-cp-size 4")


@pytest.mark.parametrize("text", [
    "--cuda-graph-bs-prefill 16 32 --cuda-graph-bs-prefill 64",
    "--cuda-graph-bs-prefill 16 32 --piecewise-cuda-graph-tokens 64",
    '--cuda-graph-bs-prefill 16 --cuda-graph-config \'{"prefill": {"bs": [64]}}\'',
])
def test_a_bucket_list_given_twice_is_refused(text):
    with pytest.raises(ConfigError, match="the bucket list is given 2 times"):
        parse_sglang_flags(text)
