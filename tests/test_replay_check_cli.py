"""`cpbcg replay-check` through typer's runner: gates, exit codes, report files, GitHub output,
`--replay` with a fake harness, and a run on a real trace."""

import os
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.manifest import manifest_bytes
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.model.selector import BucketTable

runner = CliRunner()
TRACE = "tests/assets/traces/good.jsonl"
VALID = "tests/assets/manifests/valid.json"
NO_HEADROOM = "tests/assets/manifests/valid-no-headroom.json"
ROOT = Path(__file__).resolve().parent.parent
GATES_HINT = "set gates: in the config or --min-coverage, --max-eager, ..."
NO_GATES = f"no gates configured: {GATES_HINT}"
NO_GATES_NOTE = f"no gate checked (--report-only); to gate, {GATES_HINT}"


@pytest.fixture(autouse=True)
def no_github(monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("CPBCG_WIDTH", "200")


def check(*args):
    return runner.invoke(app, ["replay-check", "--trace", TRACE, *args])


def check_json(*args):
    result = check("--format", "json", *args)
    return result, orjson.loads(result.stdout)


def test_manifest_run_reports_the_plan_evaluation_and_passes():
    result, doc = check_json("--manifest", VALID, "--min-coverage", "1", "--max-eager", "local_capacity=0")
    assert result.exit_code == 0, result.output
    assert doc["manifest"] == VALID and doc["cp_size"] == 4 and doc["align_size"] == 8
    assert doc["buckets"] == [128, 2048, 2304, 8192] and doc["capacity_rows"] == [32, 512, 576, 2048]
    assert (doc["batches"], doc["graph_batches"], doc["rescued"], doc["natural_overflow"]) == (5, 5, 1, 1)
    assert doc["overflow_examples"] == [[1534, 161, 353]]
    assert doc["passed"] is True and [g["name"] for g in doc["gates"]] == ["min_coverage", "max_eager.local_capacity"]
    assert result.stderr.strip() == "replay-check: passed all 2 gates"


def test_same_numbers_as_plan():
    _, doc = check_json("--buckets", "128,2048", "--cp-size", "4", "--report-only")
    plan = orjson.loads(runner.invoke(app, ["plan", "--format", "json", "--trace", TRACE, "--buckets", "128,2048", "--no-recommend"]).stdout)
    assert {k: v for k, v in doc.items() if k in plan} == plan
    assert plan["schema_version"] == doc["schema_version"] == 1


def test_manifest_without_headroom_fails_with_exit_1():
    result = check("--manifest", NO_HEADROOM, "--max-eager", "padding_limit=0", "--min-coverage", "0.8")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "replay-check: FAILED 1 of 2 gates",
        "  max_eager.padding_limit: eager batches (padding_limit) 1 is above the maximum 0 (first: extend_seq_lens [1534, 161, 353])",
    ]
    out = result.stdout
    assert "Natural bucket overflow (crashed before the runtime's bucket search): 1 batch\n" in out
    assert "extend_seq_lens [1534, 161, 353] (n=2048)" in out
    assert "max_eager.padding_limit" in out and "FAIL" in out and "replayed in graphs" in out


@pytest.mark.parametrize(
    "args, exit_code",
    [
        (["--min-coverage", "0.2"], 0),
        (["--min-coverage", "0.21"], 1),
        (["--min-token-coverage", "0.0047"], 0),
        (["--min-token-coverage", "0.0048"], 1),
        (["--max-eager", "above_largest_bucket=3"], 0),
        (["--max-eager", "above_largest_bucket=2"], 1),
        (["--max-eager", "local_capacity=1", "--max-eager", "not_cp_active=0", "--max-eager", "padding_limit=0"], 0),
        (["--max-eager", "local_capacity=0", "--max-eager", "padding_limit=0"], 1),
    ],
)
def test_each_gate_option_passes_and_fails(args, exit_code):
    # buckets 128, 2048: coverage 1/5; token coverage 128/26752 = 0.478%; eager local_capacity 1, above_largest 3
    result = check("--buckets", "128,2048", *args)
    assert result.exit_code == exit_code, result.output


@pytest.mark.parametrize("threshold, exit_code", [("0.0096", 0), ("0.0095", 1)])
def test_max_padding_option(threshold, exit_code):
    # manifest: 256 padded tokens / 26,752 real graph tokens = 0.957%
    assert check("--manifest", VALID, "--max-padding", threshold).exit_code == exit_code


def test_config_gates_section_and_option_overrides(tmp_path):
    cfg = tmp_path / "gates.yaml"
    cfg.write_text("buckets: 128,2048\ngates:\n  min_coverage: 0.2\n  max_eager:\n    above_largest_bucket: 3\n")
    assert check("--config", str(cfg)).exit_code == 0
    assert check("--config", str(cfg), "--min-coverage", "0.5").exit_code == 1
    # --max-eager merges into the config's max_eager instead of replacing it
    _, doc = check_json("--config", str(cfg), "--max-eager", "local_capacity=1")
    assert [g["name"] for g in doc["gates"]] == ["min_coverage", "max_eager.above_largest_bucket", "max_eager.local_capacity"]
    assert doc["passed"] is True


def test_shipped_gate_preset_fails_the_default_list_on_packed_batches():
    _, doc = check_json("--config", "ci-gates-cp4")
    assert doc["passed"] is True  # the small asset trace fits the default list...
    result = check("--config", "ci-gates-cp4", "--buckets", "128,2048,8192")
    assert result.exit_code == 1  # ...but not one without the 2304 headroom bucket


def test_no_gates_is_refused_unless_report_only():
    result = check("--buckets", "128,2048")
    assert result.exit_code == 2
    assert result.stderr == f"cpbcg: error: replay-check: {NO_GATES}; or pass --report-only to report without gates\n"
    assert check("--buckets", "128,2048", "--replay", "0", "--config", "ci-gates-cp4").exit_code in (0, 1)  # a gate: runs
    result = check("--buckets", "128,2048", "--report-only")
    assert result.exit_code == 0 and result.stderr.strip() == "cpbcg: note: replay-check: no gate checked (--report-only): nothing to fail on"


@pytest.mark.parametrize("width", ["40", "200"])
def test_no_gates_note_is_never_cut(monkeypatch, width):
    monkeypatch.setenv("CPBCG_WIDTH", width)
    result = check("--buckets", "128,2048", "--report-only")
    assert result.exit_code == 0
    assert NO_GATES_NOTE in " ".join(result.stdout.split())
    if width == "200":  # a plain line, not a caption squeezed to the width of the empty table
        assert NO_GATES_NOTE in [line.rstrip() for line in result.stdout.splitlines()]


@pytest.mark.parametrize(
    "args, verdict",
    [
        (["--min-coverage", "0.2"], "replay-check: passed the 1 gate"),
        (["--min-coverage", "0.2", "--max-eager", "local_capacity=1"], "replay-check: passed all 2 gates"),
        (["--min-coverage", "0.21"], "replay-check: FAILED 1 of 1 gate"),
        (["--min-coverage", "0.21", "--max-eager", "local_capacity=0"], "replay-check: FAILED 2 of 2 gates"),
    ],
)
def test_verdict_grammar(args, verdict):
    result = check("--buckets", "128,2048", *args)
    assert result.exit_code == (0 if "passed" in verdict else 1)
    assert result.stderr.splitlines()[0] == verdict


def test_without_trace_warns_that_the_synthetic_workload_was_gated():
    for threshold, code in (("0", 0), ("1", 1)):  # the warning never changes the exit code
        result = runner.invoke(app, ["replay-check", "--buckets", "128,2048", "--min-coverage", threshold, "--embedded-sample"])
        assert result.exit_code == code, result.output
        (warning,) = [line for line in result.stderr.splitlines() if "warning" in line]
        assert warning.startswith("cpbcg: warning: no --trace given; the gates ran on the embedded synthetic workload")
    assert "warning" not in check("--buckets", "128,2048", "--min-coverage", "0").stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-eager", "bogus=1"], "--max-eager 'bogus=1': unknown reason 'bogus' (choose from not_cp_active, above_largest_bucket, padding_limit, local_capacity, context_limit, multimodal_input)"),
        (["--max-eager", "local_capacity=x"], "--max-eager 'local_capacity=x': N must be a non-negative integer, got 'x'"),
        (["--max-eager", "local_capacity"], "--max-eager 'local_capacity': expected REASON=N"),
        (["--manifest", VALID, "--buckets", "2048", "--cp-size", "4"], "fixes the buckets and CP settings; drop cp_size, buckets"),
        (["--config", "nope"], "nope: no such config file or preset"),
        (["--manifest", "no/such/manifest.json"], "no/such/manifest.json: cannot read manifest"),
        (["--junit", "no/such/dir/report.xml", "--min-coverage", "0"], "no/such/dir"),
        (["--chunked-prefill-size", "0"], "command line: scheduler.chunked_prefill_size: "),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    result = check(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.startswith("cpbcg: error: ")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("args", [["--min-coverage", "1.5"], ["--max-padding", "-1"], ["--replay", "-1"]])
def test_out_of_range_options_exit_2(args):
    assert check(*args).exit_code == 2


def test_config_gate_errors_name_the_key(tmp_path):
    cfg = tmp_path / "gates.yaml"
    cfg.write_text("gates:\n  max_eager:\n    local_capacity: -1\n")
    result = check("--config", str(cfg))
    assert result.exit_code == 2 and "gates.max_eager.local_capacity: Input should be greater than or equal to 0" in result.stderr


def test_junit_and_json_files(tmp_path):
    junit, report = tmp_path / "report.xml", tmp_path / "report.json"
    result = check("--manifest", NO_HEADROOM, "--min-coverage", "0.8", "--max-eager", "padding_limit=0", "--junit", str(junit), "--json", str(report))
    assert result.exit_code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    cases = {c.get("name"): c.find("failure") for c in suite.findall("testcase")}
    assert cases["min_coverage"] is None
    assert cases["max_eager.padding_limit"].get("message").startswith("max_eager.padding_limit: eager batches (padding_limit) 1 is above the maximum 0")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["manifest"] == NO_HEADROOM and props["source"] == TRACE
    doc = orjson.loads(report.read_bytes())
    assert doc["passed"] is False and doc["eager"]["padding_limit"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.xml"]  # no temp files left


def assert_one_line_exit_2(result, message):
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("cpbcg: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_bad_json_path_is_refused_before_junit_is_written(tmp_path):
    junit = tmp_path / "ok.xml"
    result = check("--min-coverage", "0", "--junit", str(junit), "--json", str(tmp_path / "missing" / "x.json"))
    assert_one_line_exit_2(result, f"--json {tmp_path / 'missing' / 'x.json'}: directory {tmp_path / 'missing'} does not exist")
    assert list(tmp_path.iterdir()) == []


def test_read_only_json_directory_is_refused_before_junit_is_written(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == ro else real_access(p, mode))  # root ignores chmod
    junit = tmp_path / "ok.xml"
    result = check("--min-coverage", "0", "--junit", str(junit), "--json", str(ro / "x.json"))
    assert_one_line_exit_2(result, f"--json {ro / 'x.json'}: directory {ro} is not writable")
    assert not junit.exists() and list(ro.iterdir()) == []


def test_same_file_for_json_and_junit_is_refused(tmp_path):
    out = tmp_path / "report"
    result = check("--min-coverage", "0", "--json", str(out), "--junit", str(out))
    assert_one_line_exit_2(result, f"--json {out}: is also the output of --junit")
    assert not out.exists()


def test_json_onto_the_trace_is_refused(tmp_path):
    trace = tmp_path / "lens.jsonl"
    trace.write_bytes(Path(TRACE).read_bytes())
    result = runner.invoke(app, ["replay-check", "--trace", str(trace), "--min-coverage", "0", "--json", str(trace)])
    assert_one_line_exit_2(result, f"--json {trace}: is the same file as --trace; refusing to overwrite an input")
    assert trace.read_bytes() == Path(TRACE).read_bytes()


def test_json_dash_is_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["replay-check", "--trace", str(ROOT / TRACE),
                                 "--buckets", "128,2048", "--min-coverage", "0.2", "--json", "-", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "-").exists()
    assert orjson.loads(result.stdout)["passed"] is True  # stdout holds the report alone
    help_words = " ".join(runner.invoke(app, ["replay-check", "--help"]).stdout.replace("│", " ").split())
    assert "Write the JSON report (the plan JSON plus gates) to this file; `-` writes it to stdout." in help_words


@pytest.mark.parametrize("where", ["missing/summary.md", "."])
def test_bad_step_summary_path_warns_and_keeps_the_verdict(monkeypatch, tmp_path, where):
    summary = tmp_path / where
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    for args, code in ((["--min-coverage", "0.2"], 0), (["--min-coverage", "0.21"], 1)):
        result = check("--buckets", "128,2048", *args)
        assert result.exit_code == code, result.output
        warnings = [line for line in result.stderr.splitlines() if line.startswith("cpbcg: warning: ")]
        assert len(warnings) == 1 and warnings[0].startswith(f"cpbcg: warning: cannot append the step summary to {summary}: ")
        assert "cpbcg: error" not in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "missing").exists()


def test_github_annotations_and_step_summary(monkeypatch, tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("# build\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = check("--buckets", "128,2048", "--min-coverage", "0.81", "--max-eager", "local_capacity=1")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "::error title=cpbcg gate min_coverage::min_coverage: batch coverage 20.00%25 is below the minimum 81.00%25"
    assert sum(line.startswith("::error") for line in lines) == 1
    text = summary.read_text()
    assert text.startswith("# build\n## ❌ cpbcg replay-check: 1 of 2 gates failed\n")
    assert "| `min_coverage` | 20.00% | >= 81.00% | ❌ fail |" in text


def test_no_annotations_outside_github(monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "false")
    result = check("--buckets", "128,2048", "--min-coverage", "0.81")
    assert result.exit_code == 1 and "::error" not in result.output


@pytest.fixture
def fake_harness(monkeypatch):
    """A stand-in for `cpbcg.graph_capture.run` that records its call and verifies all but `bad`."""
    from cpbcg.graph_capture.records import BatchReplay

    calls = []
    bad = []

    def replay_batches(batches, cfg, *, preset="tiny", layers=2, seed=0):
        calls.append((batches, cfg))
        return [BatchReplay(tuple(b), 2304 if sum(b) == 2048 else sum(b), None, False, b not in bad,
                            0.5 if b in bad else 0.0, None) for b in batches]

    module = types.ModuleType("cpbcg.graph_capture.run")
    module.replay_batches = replay_batches
    monkeypatch.setitem(sys.modules, "cpbcg.graph_capture.run", module)
    return calls, bad


def test_replay_uses_the_harness_and_adds_a_gate(fake_harness):
    calls, _ = fake_harness
    result, doc = check_json("--manifest", VALID, "--replay", "10")
    assert result.exit_code == 0, result.output
    ((batches, cfg),) = calls
    assert batches == [[1534, 161, 353], [8192], [100, 28]]  # every distinct graph line, in trace order
    assert cfg.cp.cp_size == 4 and cfg.buckets == (128, 2048, 2304, 8192)  # the one Deployment, buckets parsed once
    assert doc["gates"][-1]["name"] == "replay_verified" and doc["gates"][-1]["passed"] is True
    assert len(doc["replays"]) == 3


def test_replay_failure_fails_the_check(fake_harness):
    _, bad = fake_harness
    bad.append([100, 28])
    result = check("--manifest", VALID, "--replay", "3")
    assert result.exit_code == 1
    assert "replay_verified: failed replays of 3 captured-graph replays 1 is above the maximum 0" in result.stderr


def test_replay_without_the_capture_module_exits_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "cpbcg.graph_capture.run", None)
    result = check("--manifest", VALID, "--replay", "2")
    assert result.exit_code == 2 and "replay needs the capture extra and torch" in result.stderr


NO_TORCH = """
import sys
from typer.testing import CliRunner
import cpbcg.cli
result = CliRunner().invoke(cpbcg.cli.app, ["replay-check", "--trace", "tests/assets/traces/good.jsonl",
                                            "--manifest", "tests/assets/manifests/valid.json", "--min-coverage", "1"])
assert result.exit_code == 0, result.output
print("torch" in sys.modules)
"""


def test_replay_check_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def headroom_manifest(path, buckets):
    """A dry-run manifest for `buckets` at cp 4 with capacities from the capture model."""
    table = BucketTable.build(buckets, CPLayout(4))
    records = [{"capture_num_tokens": b, "local_rows": c} for b, c in sorted(table.as_dict().items(), reverse=True)]
    doc = {"schema_version": 1, "dry_run": True, "cp_size": 4, "cp_strategy": "zigzag", "align_size": 8,
           "capture_layout": "single_request", "buckets": records}
    path.write_bytes(manifest_bytes(doc))
    return path


def test_real_traces_on_the_resolved_server(shared_traces, tmp_path):
    """On the server 0.5.23 runs (B200: trtllm_mha at page 64, 16384-token chunks) chunks are cut
    at page boundaries, and the Azure conversation trace's forwards never overflow their natural
    bucket: the default list passes the gates (at page 1, a setting no zigzag CP graph server
    runs, a packed 8192-token forward overflowed C(8192)). The Mooncake conversation trace with
    the prefix cache fails min_coverage for a real reason no bucket list fixes: cached prefixes
    leave extends shorter than 2*cp_size, which zigzag runs eagerly (not_cp_active)."""
    azure = shared_traces / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    passing = runner.invoke(app, ["replay-check", "--config", "ci-gates-cp4", "--trace", str(azure), "--format", "json", "--no-decode"])
    assert passing.exit_code == 0, passing.output
    doc = orjson.loads(passing.stdout)
    assert (doc["server"]["page_size"]["value"], doc["server"]["chunked_prefill_size"]["value"]) == (64, 16384)
    assert (doc["batches"], doc["natural_overflow"], doc["eager"]["local_capacity"], doc["eager"]["not_cp_active"]) == (18691, 0, 0, 17)
    mooncake = shared_traces / "mooncake-fast25" / "conversation_trace.jsonl"
    failing = runner.invoke(app, ["replay-check", "--config", "ci-gates-cp4", "--trace", str(mooncake), "--prefix-cache", "unlimited",
                                  "--format", "json"])
    assert failing.exit_code == 1, failing.output
    doc = orjson.loads(failing.stdout)
    assert [g["name"] for g in doc["gates"] if not g["passed"]] == ["min_coverage"]
    assert (doc["batches"], doc["eager"]["not_cp_active"], doc["eager"]["local_capacity"], doc["rescued"]) == (6060, 120, 0, 1)
    with_headroom = headroom_manifest(tmp_path / "manifest.json", sglang_default_buckets(16384) + [16896, 17408])
    still = runner.invoke(app, ["replay-check", "--config", "ci-gates-cp4", "--trace", str(mooncake), "--prefix-cache", "unlimited",
                                "--format", "json", "--manifest", str(with_headroom)])
    assert still.exit_code == 1 and orjson.loads(still.stdout)["eager"]["not_cp_active"] == 120  # no list fixes it


def test_json_to_stdout_keeps_stdout_parseable(tmp_path):
    result = check("--manifest", VALID, "--json", "-", "--min-coverage", "1")
    assert result.exit_code == 0
    assert orjson.loads(result.stdout)["passed"] is True  # the tables went to stderr
    both = check("--manifest", VALID, "--json", "-", "--junit", "-")
    assert both.exit_code == 2 and "would both write to stdout" in both.stderr


def test_dry_run_manifest_is_flagged():
    dry = VALID.replace("valid.json", "dry-run.json")
    result = check("--manifest", dry, "--min-coverage", "1")
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == (
        f"cpbcg: warning: {dry} is a CPU dry run: no CUDA graph was captured, so its capacities come from the model"
    )


def test_a_flags_file_planned_under_other_settings_is_refused(tmp_path):
    flags = tmp_path / "flags.txt"
    flags.write_text("--cuda-graph-bs-prefill 128 2048 2304 8192 --cuda-graph-max-bs-prefill 8192 --enable-prefill-cp "
                     "--attn-cp-size 8 --tp-size 8 --cp-strategy zigzag --prefill-attention-backend trtllm_mha "
                     "--chunked-prefill-size 8192 --max-prefill-tokens 16384\n")
    result = check("--buckets", str(flags), "--cp-size", "4")
    assert result.exit_code == 2
    assert result.stderr == f"cpbcg: error: {flags}: --attn-cp-size 8 but cp_size is 4: the flags were planned under other settings; set cp_size: 8 (or re-plan) so the check tests the deployment the flags describe\n"
    assert check("--buckets", str(flags), "--cp-size", "8", "--format", "json", "--report-only").exit_code == 0


def test_a_junit_path_in_proc_is_refused_before_the_report_is_printed():
    result = check("--min-coverage", "0", "--junit", "/proc/junit.xml")
    assert_one_line_exit_2(result, "--junit /proc/junit.xml: cannot create a file in /proc (No such file or directory)")
    assert result.stdout == ""


def test_a_config_whose_launch_command_would_not_start_is_named_by_file_line_and_key(tmp_path):
    config = tmp_path / "c_server.yaml"
    config.write_text('cp_size: 4\nserver: {gpu: B200, args: "--tp 4 --attn-cp-size 4 --enable-prefill-cp"}\n')
    result = check("--config", str(config), "--min-coverage", "0.5")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith(
        f"cpbcg: error: {config}:2: server.args: SGLang 0.5.23 would refuse to start with these flags (--cp-strategy must be set "
        "when --enable-prefill-cp is enabled.)")
    result = check("--server-args", "--tp 4 --attn-cp-size 4 --enable-prefill-cp", "--min-coverage", "0.5")
    assert result.exit_code == 2 and result.stderr.startswith("cpbcg: error: --server-args: SGLang 0.5.23 would refuse to start")
