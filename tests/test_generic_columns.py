"""A generic request table with two recognised columns for one role is refused naming both and
the option that picks one (reading either would silently drop the other)."""

import json

import pytest
from typer.testing import CliRunner

from cpbcg.cli import app

runner = CliRunner()


@pytest.mark.parametrize("name, text, message", [
    ("two.csv", "input_len,prompt_len,output_len\n7,100,3\n", "input_len and prompt_len both name the prompt length: pass --length-field"),
    ("two.jsonl", '{"input_len": 7, "prompt_len": 100}\n', "input_len and prompt_len both name the prompt length: pass --length-field"),
    ("times.csv", "timestamp,time,input_tokens\n1,2,30\n", "timestamp and time both name the arrival time (s): pass --time-field"),
    ("outs.jsonl", '{"input_tokens": 5, "output_tokens": 1, "completion_tokens": 2}\n',
     "output_tokens and completion_tokens both name the output length: pass --output-field"),
])
def test_two_columns_for_one_role_are_refused(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"cpbcg: error: {path}:1: {message} to say which to read"


def test_the_option_picks_one_of_two_columns(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("input_len,prompt_len,output_len\n7,100,3\n")
    result = runner.invoke(app, ["plan", "-t", str(path), "--length-field", "prompt_len", "--rate", "4", "--no-recommend", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["simulation"]["input_tokens"] == 100  # prompt_len, not input_len (7)
