"""cpbcg.inputs: whole-file reading that never hangs, never explodes, and names the place."""

import os

import pytest

from cpbcg.errors import ConfigError, ManifestError, one_line
from cpbcg.inputs import MAX_YAML_NODES, check_inputs, duplicate_key_lines, load_json, load_yaml, read_input_bytes


def test_non_regular_files_are_refused_before_opening(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, message in ((fifo, "is not a regular file"), ("/dev/zero", "is not a regular file"), (tmp_path, "is a directory, not a file"), (tmp_path / "nope", "no such file")):
        with pytest.raises(ManifestError, match=f"^{path}: cannot read manifest: {message}"):
            read_input_bytes(path, error=ManifestError, what="manifest")


def test_size_limit_is_named(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 2049)
    assert read_input_bytes(path, max_bytes=2049) == b"x" * 2049
    with pytest.raises(ConfigError, match="f: larger than the 0 MiB limit"):
        read_input_bytes(path, max_bytes=2048)


def test_yaml_alias_budget_allows_small_reuse_and_refuses_bombs():
    assert load_yaml("a: &a [1, 2]\nb: *a\n", "c.yaml") == {"a": [1, 2], "b": [1, 2]}
    # 10 aliases of a 10,000-item list: 100,012 nodes once expanded
    text = "a: &a [" + ",".join(["1"] * 10_000) + "]\nb: [" + ",".join(["*a"] * 10) + "]\n"
    with pytest.raises(ConfigError, match=f"c.yaml:2: b: expands to more than {MAX_YAML_NODES:,} values"):
        load_yaml(text, "c.yaml")


def test_yaml_merge_keys_are_not_duplicates():
    assert load_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  x: 3\n", "c.yaml")["use"] == {"x": 3, "y": 2}


def test_yaml_errors_are_one_line():
    with pytest.raises(ConfigError) as info:
        load_yaml("a:\n  - 1\n b: [\n", "c.yaml")
    assert "\n" not in str(info.value) and str(info.value).startswith("c.yaml:")


def test_json_duplicate_keys_name_both_lines():
    text = '{"buckets": [{"local_rows": 1,\n  "capture_num_tokens": 8}, {"local_rows": 2,\n  "x": 1,\n  "local_rows": 3}]}'
    assert duplicate_key_lines(text, "local_rows") == (2, 4)
    with pytest.raises(ManifestError, match=r"^m\.json:4: buckets\[1\]\.local_rows: duplicate key \(first on line 2\)$"):
        load_json(text, "m.json", ManifestError)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"a": 1e999}', "m.json:1: manifest is not valid JSON (number is infinity when parsed as double"),
        ('{"a": NaN}', "m.json:1: manifest is not valid JSON"),
        ('{\n"a": 18446744073709551616' + "0" * 5 + "}", "m.json:2: a: integer of 25 digits"),
        ("[" * 70 + "]" * 70, "m.json: nested more than 64 levels deep"),
        ('{"a": [1,\n 2,', "m.json:2: manifest is not valid JSON"),
    ],
)
def test_json_refusals(text, message):
    with pytest.raises(ManifestError) as info:
        load_json(text, "m.json", ManifestError, what="manifest")
    assert str(info.value).startswith(message), str(info.value)


def test_check_inputs_checks_every_given_input(tmp_path):
    good = tmp_path / "m.json"
    good.write_text("{}")
    check_inputs({"--manifest": good, "--trace": None, "--config": "-"})
    with pytest.raises(ConfigError, match="^--manifest .*does-not-exist.json: no such file$"):
        check_inputs({"--trace": good, "--manifest": tmp_path / "does-not-exist.json"})


def test_one_line_strips_escapes_and_caps_length():
    assert one_line("\x1b[31mred\x1b[0m\nnext\ttab\x00nul") == "red next tab\\x00nul"
    long = one_line("f.yaml:1: " + "x" * 1000, 300)
    assert len(long) <= 300 and long.startswith("f.yaml:1: x") and "x...x" in long  # a very long word is cut in its middle
    assert one_line("f.yaml:1: " + "x" * 1000 + " the reason", 300).endswith("x the reason")
    words = one_line("f.yaml:1: " + "word " * 200, 300)
    assert len(words) == 300 and words.endswith("...")  # otherwise the tail is cut
    assert len(str(ConfigError("y" * 10_000))) == 386  # MAX_MESSAGE_CHARS 400 less "cpbcg: error: "


def test_a_model_preset_goes_through_the_input_edge(tmp_path):
    import time

    from cpbcg.graph_capture.presets import load_model_preset

    fifo = tmp_path / "FIFO.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=f"^{fifo}: is not a regular file"):
        load_model_preset(str(fifo))  # was: read_text() on the FIFO, blocking forever
    assert time.monotonic() - start < 1.0
    dims = "hidden_size: 64\nnum_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 16\nintermediate_size: 8\ndtype: float32\n"
    twice = tmp_path / "twice.yaml"
    twice.write_text(dims + "hidden_size: 128\n")
    with pytest.raises(ConfigError, match=f"^{twice}:7: hidden_size: duplicate key \\(first on line 1\\)$"):
        load_model_preset(str(twice))  # was: the last value taken
    bad = tmp_path / "bad.yaml"
    bad.write_text(dims.replace("head_dim: 16", "head_dim: 0"))
    with pytest.raises(ConfigError, match=f"^{bad}:4: head_dim: 0 is not a positive integer$"):
        load_model_preset(str(bad))  # FILE:LINE: KEY: from the one formatter
    good = tmp_path / "good.yaml"
    good.write_text(dims)
    assert load_model_preset(str(good)).hidden_size == 64


def test_inputs_and_its_yaml_loader_do_not_import_each_other():
    import ast
    from pathlib import Path

    import cpbcg.yaml_input

    tree = ast.parse(Path(cpbcg.yaml_input.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "cpbcg.inputs" not in imported and "cpbcg.input_limits" in imported


def test_the_exit_code_table_in_the_readme_is_the_enum():
    from pathlib import Path

    from cpbcg.errors import ExitCode, exit_code_line, exit_code_table

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert exit_code_table() in readme  # regenerate: python -c "from cpbcg.errors import exit_code_table as t; print(t())"
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 130, 143]
    assert exit_code_line() == ("Exit codes: 0 ok, 1 a gate (or a capture's verification) failed, 2 bad input or usage, "
                                "3 capture incomplete, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).")


def test_cpbcg_help_states_every_exit_code():
    from typer.testing import CliRunner

    from cpbcg.cli import app
    from cpbcg.errors import exit_code_line

    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0 and exit_code_line() in " ".join(result.stdout.split())


@pytest.mark.parametrize("args", [["plan", "-t", "-"], ["replay-check", "-t", "-", "--min-coverage", "0.5"], ["watch", "-", "--duration", "3"]])
def test_closed_stdin_is_one_line_exit_2(args):
    import subprocess
    import sys

    def close_stdin():
        os.close(0)

    done = subprocess.run([sys.executable, "-m", "cpbcg", *args], stdin=None, close_fds=True, preexec_fn=close_stdin, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, "cpbcg: error: -: standard input is closed\n")
