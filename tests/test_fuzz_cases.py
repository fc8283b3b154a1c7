"""The hostile inputs of issue 11 on configs, bucket specs, manifests, options, outputs and the
environment, one test each, through the CLI exactly as a user runs it (`cpbcg.cli.main`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpbcg.errors import MAX_MESSAGE_CHARS

from test_fuzz import ASSETS, FIFO, GOOD_TRACE, MOONCAKE, VALID_MANIFEST, Case, problems, run_case

CONFIGS = ASSETS / "configs"


def cli(tmp_path: Path, argv: list[str], files: dict | None = None, env: dict | None = None, bad: bool = True, place: str | None = None):
    case = Case("issue-11", argv, bad, files or {}, env or {}, place)
    result = run_case(case, tmp_path / "case")
    assert problems(case, result) == [], (result.stdout[-300:], result.stderr[-300:])
    return result


def error_line(result) -> str:
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("cpbcg: error: ")]
    return line


def test_a_fifo_config_is_refused_without_blocking(tmp_path):
    result = cli(tmp_path, ["plan", "-c", "cfg.yaml", "-t", GOOD_TRACE], {"cfg.yaml": FIFO}, place="cfg.yaml")
    assert error_line(result) == "cpbcg: error: command line: config: cfg.yaml: is not a regular file (a FIFO, socket or device); give a file"


def test_the_410_byte_alias_bomb_is_refused_at_once(tmp_path):
    result = cli(tmp_path, ["batches", "-c", str(CONFIGS / "alias-bomb-scheduler.yaml"), "-t", MOONCAKE, "-o", "o.jsonl"])
    assert error_line(result).endswith("alias-bomb-scheduler.yaml:7: scheduler.f: expands to more than 100,000 values (aliases); write it out")
    assert not (tmp_path / "case" / "o.jsonl").exists()


@pytest.mark.parametrize("command", [["batches", "-t", MOONCAKE, "-o", "o.jsonl"], ["layout", "1534", "161", "353"], ["plan", "-t", GOOD_TRACE]])
def test_a_bad_bucket_spec_fails_every_command_at_load(tmp_path, command):
    result = cli(tmp_path, [*command, "-c", "cfg.yaml"], {"cfg.yaml": 'buckets: "nope:5"\n'}, place="cfg.yaml")
    assert "cpbcg: error: cfg.yaml:1: buckets: cannot read 'nope:5': not a list like 2048,2304" in error_line(result)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("2048,\u00b2", "command line: buckets: 2048,\u00b2: bucket 1: '\u00b2' is not a positive integer"),
        ("sglang-default:\u00b2", "command line: buckets: sglang-default:\u00b2: the part after ':' must be a token count"),
        ("/dev/zero", "command line: buckets: /dev/zero: is not a regular file"),
        ("sglang-default:0", "command line: buckets: sglang-default:0: max_bs must be between 4 and 4194304, got 0"),
    ],
)
def test_bad_bucket_specs_on_the_command_line(tmp_path, spec, message):
    assert message in error_line(cli(tmp_path, ["plan", "-t", GOOD_TRACE, "-b", spec]))


def test_a_long_explicit_list_is_a_list(tmp_path):
    spec = ",".join(str(b) for b in range(8, 3993, 8))  # $(seq -s, 8 8 3992)
    result = cli(tmp_path, ["plan", "-t", GOOD_TRACE, "-b", spec, "-f", "json"], bad=False)
    assert result.code == 0 and json.loads(result.stdout)["buckets"][-1] == 3992


def test_a_64_bit_overflowing_option_names_the_option(tmp_path):
    result = cli(tmp_path, ["plan", "-t", MOONCAKE, "--chunked-prefill-size", "18446744073709551616"])
    assert "'--chunked-prefill-size': Input should be less than or equal to 4194304" in error_line(result)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["buckets"][0].update(local_rows=9223372036854775808), "m.json: buckets[0].local_rows: 9223372036854775808 is not a positive integer <= 2147483647"),
        (lambda d: d.update(cp_strategy="ring"), "m.json: cp_strategy: 'ring' is not one of zigzag, interleave"),
        (lambda d: d.update(max_padding_factor=500), "m.json: max_padding_factor: 500 is above 100"),
    ],
)
def test_manifest_values_are_bounded_and_blamed_on_the_manifest(tmp_path, change, message):
    doc = json.loads(json.dumps(VALID_MANIFEST))
    change(doc)
    for argv in (["plan", "--manifest", "m.json", "-k", "2", "-t", GOOD_TRACE], ["replay-check", "--report-only", "--manifest", "m.json", "-t", GOOD_TRACE]):
        result = cli(tmp_path, argv, {"m.json": json.dumps(doc)}, place="m.json")
        assert error_line(result) == f"cpbcg: error: {message}"


def test_a_manifest_with_a_duplicate_key_names_both_lines(tmp_path):
    text = json.dumps(VALID_MANIFEST, indent=2).replace('"cp_size": 4,', '"cp_size": 4,\n  "cp_size": 8,', 1)
    result = cli(tmp_path, ["replay-check", "--report-only", "--manifest", "m.json", "-t", GOOD_TRACE], {"m.json": text}, place="m.json")
    assert error_line(result) == "cpbcg: error: m.json:9: cp_size: duplicate key (first on line 8)"


def test_bad_environment_values_are_ignored_with_one_warning(tmp_path):
    result = cli(tmp_path, ["presets"], env={"CPBCG_WIDTH": "abc", "COLUMNS": "\u00b2"}, bad=False)
    assert result.code == 0
    assert result.stderr.splitlines()[:2] == [
        "cpbcg: warning: ignoring CPBCG_WIDTH='abc': not a whole number from 0 to 10000",
        "cpbcg: warning: ignoring COLUMNS='\u00b2': not a whole number from 1 to 10000",
    ]


def test_errors_are_plain_text_under_force_color(tmp_path):
    result = cli(tmp_path, ["replay-check", "--report-only", "-t", "missing.jsonl"], env={"FORCE_COLOR": "1", "TERM": "xterm-256color"}, place="missing.jsonl")
    assert "\x1b" not in result.stderr and result.stderr.startswith("cpbcg: error: missing.jsonl: ")


@pytest.mark.parametrize("argv", [["replay-check", "--report-only", "-t", GOOD_TRACE, "--junit", "d"], ["replay-check", "--report-only", "-t", GOOD_TRACE, "--json", "d/"], ["plan", "-t", GOOD_TRACE, "--emit", "yaml", "-o", "d"], ["capture", "--cp-size", "2", "-b", "64", "-o", "d"]])
def test_an_output_that_is_a_directory_is_refused_before_any_work(tmp_path, argv):
    result = cli(tmp_path, argv, {"d": "<dir>"}, place="d")
    assert "is a directory" in error_line(result) or "names a directory" in error_line(result)


def test_an_error_line_is_capped_at_max_message_chars(tmp_path):
    name = "t" * 380 + ".jsonl"
    result = cli(tmp_path, ["plan", "-t", name])
    line = error_line(result)
    assert len(line) <= MAX_MESSAGE_CHARS and line.startswith("cpbcg: error: ttt") and "t...t" in line  # the long path is cut in its middle
    assert line.endswith(".jsonl: cannot open: File name too long")  # the reason stays
