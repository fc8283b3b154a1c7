"""Issue 23: one asset (or command line) per root cause, through the CLI: exit 2 with one line
`cpbcg: error: FILE:LINE: KEY: ...` (or the valid input accepted), never a traceback.

Causes 1 and 2 (comma-joined JSON records, signs in CSV integers) are also in test_batch_trace /
test_requests (every reader), cause 4 (the manifest's model section) in test_manifest, the
key-naming parse errors in test_config / test_buckets / test_inputs.
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from cpbcg.cli import main

ASSETS = Path("tests/assets")
TRACES, REQUESTS, CONFIGS, BUCKET_FILES = ASSETS / "traces", ASSETS / "requests", ASSETS / "configs", ASSETS / "bucket-files"
MOONCAKE = str(REQUESTS / "mooncake.jsonl")
GOOD = str(TRACES / "good.jsonl")


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def invoke(*args: str, stdin: bytes = b"") -> Result:
    """`cpbcg ARGS` in process, as the console script runs it (`cpbcg.cli.main`)."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(stdin)))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        sys.stdin = old_stdin
    return Result(code, out.getvalue(), err.getvalue())


def one_error(result) -> str:
    """The single error line of an exit-2 run."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpbcg: error: "), result.stderr
    return lines[0].removeprefix("cpbcg: error: ")


def last_error(result) -> str:
    """The error line that ends an exit-2 run after its notes (`cpbcg: note: ...`, warnings)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("cpbcg: error: ") and all(not line.startswith("cpbcg: error: ") for line in lines[:-1]), result.stderr
    return lines[-1].removeprefix("cpbcg: error: ")


@pytest.mark.parametrize("name", ["comma-joined-lists.jsonl", "comma-joined-lists.jsonl.gz", "comma-joined-objects.jsonl"])
def test_cause_1_comma_joined_records_on_a_file(name):
    assert one_error(invoke("plan", "-t", str(TRACES / name), "--no-recommend", "-f", "json")).startswith(f"{TRACES / name}:2: not valid JSON")


@pytest.mark.parametrize("name", ["comma-joined-lists.jsonl", "comma-joined-lists.jsonl.gz"])
def test_cause_1_comma_joined_records_on_stdin(name):
    data = (TRACES / name).read_bytes()
    assert one_error(invoke("plan", "-t", "-", "--no-recommend", "-f", "json", stdin=data)).startswith("<stdin>:2: not valid JSON")


def test_cause_2_sign_in_a_csv_integer():
    path = REQUESTS / "azure-minus-zero-output.csv"
    assert one_error(invoke("plan", "-t", str(path), "--no-recommend")) == f"{path}:3: GeneratedTokens: '-0' is not a non-negative integer"


def test_cause_3_unbalanced_quote_in_a_flags_file():
    path = BUCKET_FILES / "flags-unbalanced-quote.txt"
    assert one_error(invoke("plan", "-t", GOOD, "-b", str(path))) == f"{path}:1: not a flags line a shell can split: no closing quotation"
    config = BUCKET_FILES / "config-flags-unbalanced-quote.yaml"
    assert one_error(invoke("plan", "-t", GOOD, "-c", str(config))) == f"{path}:1: not a flags line a shell can split: no closing quotation"


@pytest.mark.parametrize("value", ["AUTO", "", "nope", "Batches"])
def test_cause_5_unknown_trace_format_with_a_request_only_option(value):
    error = one_error(invoke("plan", "-t", MOONCAKE, "--trace-format", value, "--page-size", "16"))
    assert error.startswith("Invalid value for '--trace-format': ") and f"{value!r} is not a trace format; choose one of: auto, batches," in error


@pytest.mark.parametrize("value", ["1e-320", "0", "1e-7", "1000000.0001", "inf"])
def test_cause_6_time_scale_out_of_its_bound(value):
    # --time-scale takes a list of load factors (issue 22): each is bounded where it is parsed
    error = one_error(invoke("plan", "-t", MOONCAKE, "--time-scale", value, "--no-recommend"))
    assert error.startswith("Invalid value for '--time-scale': ") and f"{value} is outside [1e-06, 1e+06]" in error


def test_cause_6_time_scale_in_a_config():
    path = CONFIGS / "time-scale-denormal.yaml"
    assert one_error(invoke("plan", "-t", MOONCAKE, "-c", str(path), "--no-recommend")).startswith(
        f"{path}:2: scheduler.time_scale: Input should be greater than or equal to 0.000001")


@pytest.mark.parametrize("name", ["vllm-bench", "vllm"])
def test_cause_9_vllm_bench_as_help_lists_it(name):
    result = invoke("plan", "-t", str(REQUESTS / "vllm-bench.json"), "--trace-format", name, "--no-recommend", "-f", "json")
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["simulation"]["trace_format"] == "vllm-bench"
    assert "vllm-bench" in invoke("plan", "--help").stdout


def test_cause_10_target_coverage_help_shows_the_real_bound():
    assert "[0<x<=1]" in " ".join(invoke("plan", "--help").stdout.split())
    assert "'0' is not in the range 0<x<=1" in one_error(invoke("plan", "-t", GOOD, "--target-coverage", "0"))
    assert invoke("plan", "-t", GOOD, "--target-coverage", "1", "-k", "4", "-f", "json").exit_code == 0


def test_cause_12_outputs_commit_together(tmp_path):
    plot = tmp_path / "p.png"
    error = last_error(invoke("plan", "-t", GOOD, "-k", "4", "--plot", str(plot), "--emit", "yaml", "-o", "/dev/full"))
    assert error == "/dev/full: No space left on device"
    assert not plot.exists() and list(tmp_path.iterdir()) == []
    junit = tmp_path / "r.xml"
    assert last_error(invoke("replay-check", "--report-only", "-t", GOOD, "--junit", str(junit), "--json", "/dev/full")) == "/dev/full: No space left on device"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, message",
    [
        ("max-total-tokens-20-digits.yaml", ":2: scheduler.max_total_tokens: Input should be less than or equal to 4611686018427387904"),
        ("max-total-tokens-above-option.yaml", ":2: scheduler.max_total_tokens: Input should be less than or equal to 4611686018427387904"),
        ("decay-steps-above-int32.yaml", ":2: scheduler.new_token_ratio_decay_steps: Input should be less than or equal to 2147483647"),
        ("clip-max-new-tokens-above-int32.yaml", ":2: scheduler.clip_max_new_tokens: Input should be less than or equal to 2147483647"),
    ],
)
def test_cause_13_scheduler_integer_keys_are_bounded(name, message):
    path = CONFIGS / name
    assert one_error(invoke("plan", "-t", MOONCAKE, "-c", str(path), "--no-recommend")).startswith(f"{path}{message}")


def test_a_bucket_files_error_names_the_file():
    path = BUCKET_FILES / "below-cp.yaml"
    assert one_error(invoke("plan", "-t", GOOD, "-b", str(path))) == f"{path}:1: no capture bucket is >= 2*cp_size=8; nothing to capture"


def test_replay_check_json_has_the_simulation_block():
    result = invoke("replay-check", "-t", MOONCAKE, "--min-coverage", "0", "-f", "json")
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["simulation"]["requests"] == 4 and doc["simulation"]["trace_format"] == "mooncake" and doc["passed"] is True
