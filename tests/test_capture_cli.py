"""`cpbcg capture` through the CLI runner (CPU dry run), its error paths, and the model presets."""

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.capture.presets import load_model_preset, model_preset_names
from cpbcg.cli import app
from cpbcg.errors import ConfigError

pytest.importorskip("torch")

runner = CliRunner()


def test_capture_dry_run_writes_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("CPBCG_WIDTH", "120")
    out = tmp_path / "manifest.json"
    result = runner.invoke(app, ["capture", "--cp-size", "4", "--buckets", "64,128", "--layers", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "DRY RUN (no CUDA)" in result.stdout
    assert "dry run: no CUDA device" in result.stderr
    assert "max_abs_err <= 0.0001 + 0.0001 * max|reference|" in result.stderr
    data = orjson.loads(out.read_bytes())
    assert data["dry_run"] is True and data["cp_size"] == 4 and data["align_size"] == 8
    assert [(b["capture_num_tokens"], b["local_rows"], b["verified"]) for b in data["buckets"]] == [(128, 32, True), (64, 16, True)]
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith(("128", "64"))]
    assert [(r[0], r[1], r[-3], r[-1]) for r in rows] == [("128", "32", "refused", "yes"), ("64", "16", "refused", "yes")]


def test_capture_with_trace_samples(tmp_path):
    trace = tmp_path / "b.jsonl"
    trace.write_text('{"extend_seq_lens": [1534, 161, 353]}\n')
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["capture", "-b", "2048,2304", "--layers", "1", "-t", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    b2304 = orjson.loads(out.read_bytes())["buckets"][0]
    assert b2304["capture_num_tokens"] == 2304 and b2304["layouts_checked"] == 4
    assert b2304["layouts"][-1] == {**b2304["layouts"][-1], "kind": "trace", "num_tokens": 2048, "local_rows": 520, "verified": True}


@pytest.mark.parametrize("args, message", [
    (["--cp-size", "1"], "capture emulates zigzag CP only"),
    (["--preset", "nope"], "nope: no such model preset (presets: gpt-oss-120b, llama-3.1-70b, qwen3-32b, tiny)"),
    (["--buckets", "4"], "no capture bucket is >= 2*cp_size=8"),
    (["--trace", "/nonexistent.jsonl", "-b", "64"], "/nonexistent.jsonl: cannot open"),
])
def test_capture_errors_exit_2(args, message):
    result = runner.invoke(app, ["capture", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("cpbcg: error: ") and message in result.stderr


def test_help_states_default_buckets():
    result = runner.invoke(app, ["capture", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "256,512,1024,2048,2304" in result.stdout


def test_model_presets_have_public_dims():
    assert model_preset_names() == ["gpt-oss-120b", "llama-3.1-70b", "qwen3-32b", "tiny"]
    llama = load_model_preset("llama-3.1-70b")
    assert (llama.hidden_size, llama.num_attention_heads, llama.num_key_value_heads, llama.head_dim,
            llama.intermediate_size, llama.dtype) == (8192, 64, 8, 128, 28672, "bfloat16")
    assert load_model_preset("qwen3-32b").intermediate_size == 25600
    assert load_model_preset("gpt-oss-120b").head_dim == 64


def test_model_preset_file_errors(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("hidden_size: 64\nnum_attention_heads: 4\nnum_key_value_heads: 3\nhead_dim: 16\nintermediate_size: 8\ndtype: float32\n")
    with pytest.raises(ConfigError, match="num_attention_heads 4 is not a multiple of num_key_value_heads 3"):
        load_model_preset(str(bad))
    bad.write_text("hidden_size: 64\nwidth: 3\n")
    with pytest.raises(ConfigError, match="unknown key\\(s\\) width"):
        load_model_preset(str(bad))
