"""`cpbcg capture` through the CLI runner (CPU dry run), its error paths, and the model presets."""

import os

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.graph_capture.presets import load_model_preset, model_preset_names
from cpbcg.cli import app
from cpbcg.errors import ConfigError

torch = pytest.importorskip("torch")

runner = CliRunner()


def test_capture_dry_run_writes_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("CPBCG_WIDTH", "120")
    out = tmp_path / "manifest.json"
    result = runner.invoke(app, ["capture", "--cp-size", "4", "--buckets", "64,128", "--layers", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "DRY RUN (no CUDA)" in result.stdout
    assert "dry run: no CUDA device" in result.stderr
    assert "max_abs_err <= 0.0001 + 0.0001 * max|reference|; graph replay must equal eager pieces bit for bit" in result.stderr
    data = orjson.loads(out.read_bytes())
    assert data["dry_run"] is True and data["complete"] is True and data["cp_size"] == 4 and data["align_size"] == 8
    assert data["model"]["num_layers"] == 1 and data["model"]["num_hidden_layers"] is None and data["skipped_buckets"] == []
    assert [(b["capture_num_tokens"], b["local_rows"], b["verified"], b["graph_matches_eager"]) for b in data["buckets"]] == [
        (128, 32, True, True), (64, 16, True, True)]
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith(("128", "64"))]
    assert [(r[0], r[1], r[-3], r[-1]) for r in rows] == [("128", "32", "refused", "yes"), ("64", "16", "refused", "yes")]


def test_capture_manifest_loads_in_plan_and_replay_check(tmp_path):
    out = tmp_path / "m.json"
    assert runner.invoke(app, ["capture", "--cp-size", "4", "--preset", "tiny", "-o", str(out)]).exit_code == 0
    data = orjson.loads(out.read_bytes())
    assert [b["capture_num_tokens"] for b in data["buckets"]] == [2304, 2048, 1024, 512, 256]
    assert all(b["verified"] and b["capture_s"] >= 0 for b in data["buckets"])
    assert data["model"]["num_layers"] == 2
    plan = runner.invoke(app, ["plan", "-k", "4", "--manifest", str(out), "--format", "json"])  # -k reads the manifest
    assert plan.exit_code == 0, plan.output
    assert orjson.loads(plan.stdout)["recommendation"]["cost_model"]["source"].startswith("estimate for")  # a dry run has no timings to fit: the published estimate stays
    out.write_text(out.read_text().replace('"local_rows": 576', '"local_rows": 577', 1))
    broken = runner.invoke(app, ["plan", "-k", "4", "--manifest", str(out), "--format", "json"])
    assert broken.exit_code == 2 and "bucket 2304: local_rows 577 contradicts the capture model" in broken.stderr
    out.write_text(out.read_text().replace('"local_rows": 577', '"local_rows": 576', 1))
    check = runner.invoke(app, ["replay-check", "--report-only", "--manifest", str(out), "--format", "json"])
    assert check.exit_code == 0, check.output
    report = orjson.loads(check.stdout)
    assert report["manifest"] == str(out) and report["buckets"] == [256, 512, 1024, 2048, 2304]
    assert report["capacity_rows"] == [64, 128, 256, 512, 576]


def test_capture_out_of_memory_writes_partial_manifest_and_exits_3(tmp_path, monkeypatch):
    from cpbcg.graph_capture import graphs

    real = graphs.capture_bucket

    def oom_at_2048(backend, model, buffers, bucket, capacity_rows, pool=None):
        if bucket == 2048:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total capacity of 139.8 GiB")
        return real(backend, model, buffers, bucket, capacity_rows, pool)

    monkeypatch.setattr("cpbcg.graph_capture.harness.capture_bucket", oom_at_2048)
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["capture", "-b", "1024,2048,2304", "--layers", "1", "-o", str(out)])
    assert result.exit_code == 3, result.output
    assert "skipped bucket 2048 (out_of_memory): CUDA out of memory. Tried to allocate 64.00 GiB." in result.stderr
    assert result.stderr.endswith("cpbcg: capture incomplete: bucket(s) 2048 skipped (see skipped_buckets)\n")
    data = orjson.loads(out.read_bytes())
    assert data["complete"] is False and [b["capture_num_tokens"] for b in data["buckets"]] == [2304, 1024]
    assert data["skipped_buckets"] == [{"capture_num_tokens": 2048, "local_rows": 512, "cause": "out_of_memory",
                                        "reason": "CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total capacity of 139.8 GiB"}]
    assert runner.invoke(app, ["replay-check", "--report-only", "--manifest", str(out)]).exit_code == 0  # the rest is usable


def test_capture_out_of_memory_in_verification_is_skipped_too(tmp_path, monkeypatch):
    from cpbcg.graph_capture.harness import CaptureSession

    real = CaptureSession.verify

    def verify(self, record, samples):
        if record.capture_num_tokens == 128:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes")
        return real(self, record, samples)

    monkeypatch.setattr(CaptureSession, "verify", verify)
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["capture", "-b", "64,128", "--layers", "1", "-o", str(out)])
    assert result.exit_code == 3, result.output
    (skip,) = orjson.loads(out.read_bytes())["skipped_buckets"]
    assert (skip["capture_num_tokens"], skip["cause"]) == (128, "out_of_memory")
    assert skip["reason"].startswith("verification: out of memory: [enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator")


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
    (["-o", "."], "-o .: is a directory, not a file"),
    (["-o", "/nonexistent-dir/m.json"], "-o /nonexistent-dir/m.json: directory /nonexistent-dir does not exist"),
    (["-b", "4194304"], "buckets: no bucket fits: the smallest, 4194304 (C(B)=1048576 rows), needs about"),
])
def test_capture_errors_exit_2(args, message):
    result = runner.invoke(app, ["capture", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("cpbcg: error: ") and message in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--dtype", "int8"], "Invalid value for '--dtype': Value error, 'int8' is not one of 'float32', 'bfloat16', 'float16'"),
    (["--dtype", "float64"], "Invalid value for '--dtype'"),
    (["--dtype", "fp16"], "Invalid value for '--dtype'"),
    (["--layers", "100000"], "Invalid value for '--layers': Input should be less than or equal to 256"),
    (["--seed", "-1"], "Invalid value for '--seed': Input should be greater than or equal to 0"),
    (["--seed", "99999999999999999999999"], "Invalid value for '--seed'"),
    (["-m", "tiny"], "No such option: -m"),
])
def test_capture_usage_errors_exit_2(capsys, args, message):
    from cpbcg.cli import main

    assert runner.invoke(app, ["capture", *args]).exit_code == 2
    with pytest.raises(SystemExit) as info:
        main(["capture", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith(f"cpbcg: error: {message}") and len(err.strip().splitlines()) == 1


def test_capture_dtype_choices_run(tmp_path):
    for dtype in ("float32", "bfloat16", "float16"):
        out = tmp_path / f"{dtype}.json"
        result = runner.invoke(app, ["capture", "-p", "tiny", "--dtype", dtype, "-b", "64", "--layers", "1", "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert orjson.loads(out.read_bytes())["model"]["dtype"] == dtype


def test_capture_output_same_as_trace_refused_before_work(tmp_path):
    trace = tmp_path / "b.jsonl"
    trace.write_text('{"extend_seq_lens": [40]}\n')
    result = runner.invoke(app, ["capture", "-b", "64", "-t", str(trace), "-o", str(trace)])
    assert result.exit_code == 2
    assert result.stderr == f"cpbcg: error: -o {trace}: is the same file as --trace; refusing to overwrite an input\n"
    assert result.stdout == "" and trace.read_text() == '{"extend_seq_lens": [40]}\n'


def test_capture_read_only_output_dir_refused_before_work(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root writes anyway: make the check see what a user would
        monkeypatch.setattr(os, "access", lambda path, mode: False)
    result = runner.invoke(app, ["capture", "-b", "64", "-o", str(ro / "m.json")])
    ro.chmod(0o700)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"cpbcg: error: -o {ro / 'm.json'}: directory {ro} is not writable\n"


def test_capture_skips_bucket_that_cannot_fit_in_memory_before_building(tmp_path, monkeypatch):
    from cpbcg.graph_capture import estimate, harness

    tiny, kernels = load_model_preset("tiny"), estimate.AttentionKernels("flash", "flash", "flash")
    small = estimate.bucket_peak_bytes(tiny, 64, 16, 64, 4, 4, 4, kernels)
    monkeypatch.setattr(harness, "available_bytes", lambda device: small)
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["capture", "-b", "64,128", "-o", str(out)])
    assert result.exit_code == 3
    (skip,) = orjson.loads(out.read_bytes())["skipped_buckets"]
    assert (skip["capture_num_tokens"], skip["local_rows"], skip["cause"]) == (128, 32, "estimate")
    assert skip["reason"].endswith(f"only {small / 2**30:.1f} GiB free on cpu")
    monkeypatch.setattr(harness, "available_bytes", lambda device: small - 1)
    result = runner.invoke(app, ["capture", "-b", "64,128", "-o", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and not (tmp_path / "none.json").exists()
    assert result.stderr.startswith("cpbcg: error: buckets: no bucket fits: the smallest, 64 (C(B)=16 rows), needs about ")
    assert result.stderr.endswith("GiB is free on cpu; capture smaller buckets\n") and result.stderr.count("\n") == 1


def test_attention_bytes_estimate_counts_the_kernel_used():
    from cpbcg.graph_capture.estimate import AttentionKernels, attention_bytes, bucket_peak_bytes

    tiny = load_model_preset("tiny")  # 4 heads of 16
    # fused: expanded K/V (2*keys) and output (rows) per head, plus the mask as a bias
    assert attention_bytes(tiny, 32, 128, 4, "flash", masked=True) == 4 * (2 * 128 + 32) * 4 * 16 + 4 * 32 * 128
    # math adds float32 scores and softmax, [heads, rows, keys] each
    assert attention_bytes(tiny, 32, 128, 4, "math", masked=False) == 4 * (2 * 128 + 32) * 4 * 16 + 8 * 4 * 32 * 128
    qwen = load_model_preset("qwen3-32b")
    math = AttentionKernels("efficient", "math", "math")
    fused = AttentionKernels("efficient", "flash", "efficient")
    # 16384 tokens, cp 4, one emulating process: the math reference needs two 64 GiB float32 score tensors
    need = bucket_peak_bytes(qwen, 16384, 4096, 16384, 4, 4, 2, math)
    assert need > 128 * 2**30 and bucket_peak_bytes(qwen, 16384, 4096, 16384, 4, 4, 2, fused) < 16 * 2**30


def test_preset_short_option_is_p_only():
    from typer.main import get_command

    params = {p.name: p.opts for p in get_command(app).commands["capture"].params}
    assert params["preset"] == ["--preset", "-p"]
    assert [name for name, opts in params.items() if "-p" in opts] == ["preset"]
    assert not [name for name, opts in params.items() if "-m" in opts]


def test_torch_dtype_unknown_is_config_error():
    from cpbcg.graph_capture.model import torch_dtype

    with pytest.raises(ConfigError, match="dtype 'int8' is not one of float32, bfloat16, float16"):
        torch_dtype("int8")


def test_help_states_default_buckets():
    result = runner.invoke(app, ["capture", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "256,512,1024,2048,2304" in result.stdout


def test_model_presets_have_public_dims():
    assert model_preset_names() == ["gpt-oss-120b", "llama-3.1-70b", "qwen3-32b", "tiny"]
    llama = load_model_preset("llama-3.1-70b")
    assert (llama.hidden_size, llama.num_attention_heads, llama.num_key_value_heads, llama.head_dim,
            llama.intermediate_size, llama.dtype) == (8192, 64, 8, 128, 28672, "bfloat16")
    assert load_model_preset("qwen3-32b").intermediate_size == 25600
    assert [load_model_preset(n).num_hidden_layers for n in model_preset_names()] == [36, 80, 64, None]
    assert load_model_preset("gpt-oss-120b").head_dim == 64


def test_model_preset_file_errors(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("hidden_size: 64\nnum_attention_heads: 4\nnum_key_value_heads: 3\nhead_dim: 16\nintermediate_size: 8\ndtype: float32\n")
    with pytest.raises(ConfigError, match="num_attention_heads 4 is not a multiple of num_key_value_heads 3"):
        load_model_preset(str(bad))
    bad.write_text("hidden_size: 64\nwidth: 3\n")
    with pytest.raises(ConfigError, match="unknown key\\(s\\) width"):
        load_model_preset(str(bad))
    bad.write_text("1: 2\nhidden_size: 64\n")
    with pytest.raises(ConfigError, match="unknown key\\(s\\) 1$"):
        load_model_preset(str(bad))
    bad.write_text("name: [1]\nhidden_size: 64\nnum_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 16\nintermediate_size: 8\ndtype: float32\n")
    with pytest.raises(ConfigError, match="name: \\[1\\] is not a string"):
        load_model_preset(str(bad))
    bad.write_bytes(b"\x8a\xff\x00binary")
    with pytest.raises(ConfigError, match="m.yaml: not a text \\(UTF-8\\) YAML file"):
        load_model_preset(str(bad))


def test_a_bucket_that_fails_verification_exits_1_and_names_it(tmp_path, monkeypatch, capsys):
    # the output's verdict on a finished run (cpbcg/outputs/capture.py): a failed bucket wins over a skipped one
    from types import SimpleNamespace

    import cpbcg.outputs.documents
    from cpbcg.commands.capture_options import CaptureOptions
    from cpbcg.errors import ExitCode
    from cpbcg.outputs.capture import write

    def record(tokens: int, verified: bool) -> dict:
        return {"capture_num_tokens": tokens, "local_rows": tokens // 4, "capture_s": 0.5, "wall_s": None, "graph_bytes": 2**20,
                "standalone_graph_bytes": None, "replay_ms": 1.25, "eager_ms": 2.5, "raw_replay_ms": None, "layouts_checked": 3,
                "overflow_refused": True, "max_abs_err": 0.125, "verified": verified}

    doc = {"dry_run": False, "device_name": "H200", "model": {"name": "tiny", "num_layers": 1, "dtype": "float32"}, "cp_size": 4,
           "align_size": 8, "tolerance": {"dtype": "float32", "rule": "a rule"}, "wall_s": None,
           "buckets": [record(128, False), record(64, True)], "skipped_buckets": [{"capture_num_tokens": 256, "cause": "estimate", "reason": "too big"}]}
    monkeypatch.setattr(cpbcg.outputs.documents, "manifest_document", lambda result: doc)
    monkeypatch.setenv("CPBCG_WIDTH", "200")
    skipped = SimpleNamespace(capture_num_tokens=256)
    out = tmp_path / "m.json"
    assert write(SimpleNamespace(is_writer=True, complete=False, skipped=(skipped,)), CaptureOptions(output=out)) == ExitCode.GATE_FAILED
    printed = capsys.readouterr()
    assert printed.err.endswith(f"skipped bucket 256 (estimate): too big\nwrote {out}\ncpbcg: verification failed for bucket(s) 128\n")
    assert "   128    32      0.500         -    1.0      -   1.250  2.500    -       3  refused   1.2e-01  NO" in printed.out
    assert orjson.loads(out.read_bytes())["buckets"][0]["verified"] is False
    doc["buckets"] = [record(64, True)]
    assert write(SimpleNamespace(is_writer=True, complete=False, skipped=(skipped,)), CaptureOptions()) == ExitCode.CAPTURE_INCOMPLETE
    assert capsys.readouterr().err.endswith("cpbcg: capture incomplete: bucket(s) 256 skipped (see skipped_buckets)\n")
    assert write(SimpleNamespace(is_writer=False), CaptureOptions(output=tmp_path / "other.json")) == ExitCode.OK  # torchrun rank > 0
    assert capsys.readouterr() == ("", "") and not (tmp_path / "other.json").exists()


def test_capture_output_same_as_its_bucket_file_refused_before_work(tmp_path):
    buckets = tmp_path / "b.yaml"
    buckets.write_text("[64, 128]\n")
    result = runner.invoke(app, ["capture", "-b", str(buckets), "-o", str(buckets)])
    assert result.exit_code == 2
    assert result.stderr == f"cpbcg: error: -o {buckets}: is the same file as --buckets; refusing to overwrite an input\n"
    assert buckets.read_text() == "[64, 128]\n"
