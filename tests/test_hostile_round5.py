"""Issue 43 (hostile and odd input, round five): one test asset per cause, each failing without its fix."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cpbcg.cli import app
from sglang_log_fixtures import prefill_line, startup_lines, write_log
from test_strictness import invoke as run_cpbcg

runner = CliRunner()
ASSETS = Path(__file__).parent / "assets"
GOOD = str(ASSETS / "traces" / "good.jsonl")
PINNED = ("--page-size", "1", "--chunked-prefill-size", "8192")


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"}, input=input)


def refusal(result) -> str:
    """The one line of an exit-2 run: the first (and only) line on stderr, nothing on stdout."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpbcg: error: "), result.stderr
    assert result.stdout == ""
    return lines[0].removeprefix("cpbcg: error: ")


# ---------------------------------------------------------------- 1. budgets with every mode

def test_a_graph_memory_budget_no_list_keeps_is_refused_with_target_coverage_too():
    """`plan --max-graph-memory 1 --target-coverage 0.99` raised `max() arg is an empty sequence`
    (`fewest_for_coverage` took the largest of no feasible list); now it is refused as `-k` is."""
    message = refusal(invoke("plan", "-t", GOOD, "--max-graph-memory", "1", "--target-coverage", "0.99", *PINNED))
    assert message.startswith("--max-graph-memory 1: no list of at most ")
    assert "keeps within it and holds the 0 pinned buckets and the required forwards" in message


MODES = [(), ("--target-coverage", "0.99"), ("--target-coverage", "1"), ("-k", "1"), ("-k", "4"), ("--objective", "time"),
         ("--objective", "time", "--target-coverage", "0.9"), ("--time-scale", "1,2"), ("--guarantee",), ("--guarantee", "-k", "3"),
         ("--no-recommend",)]
TRACES = [("-t", GOOD), ("-t", GOOD, "-t", str(ASSETS / "requests" / "mooncake.jsonl")), ("-t", str(ASSETS / "requests" / "mooncake.jsonl"))]


@settings(max_examples=14, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(mode=st.sampled_from(MODES), traces=st.sampled_from(TRACES),
       memory=st.none() | st.sampled_from([0.001, 1.0, 60.0, 1e5]), seconds=st.none() | st.sampled_from([0.01, 3.0, 12.0, 1e4]))
def test_budgets_with_every_recommendation_mode_work_or_are_refused_in_one_line(mode, traces, memory, seconds):
    """Property: `--max-capture-seconds` / `--max-graph-memory` with every recommendation mode
    either plan (the recommended list within the budget) or are refused in one line, first on stderr."""
    budget = (*(("--max-graph-memory", f"{memory:g}") if memory is not None else ()),
              *(("--max-capture-seconds", f"{seconds:g}") if seconds is not None else ()))
    result = invoke("plan", "-f", "json", *traces, *mode, *budget, *PINNED)
    if result.exit_code == 2:
        refusal(result)
        return
    assert result.exit_code == 0, (result.output, repr(result.exception))
    doc = orjson.loads(result.stdout)
    estimate = (doc.get("recommendation") or {}).get("capture_estimate")
    if estimate is not None and "--guarantee" not in mode:
        assert memory is None or estimate["graph_mib"] <= memory * (1 + 1e-9)
        assert seconds is None or estimate["capture_s"] <= seconds * (1 + 1e-9)


# ---------------------------------------------------------------- 2. empty after reading

@pytest.mark.parametrize("body", ["", "\n\n  \n", "# a comment\n   # another\n"], ids=["empty", "blank-lines", "only-comments"])
@pytest.mark.parametrize("command", ["plan", "check-server", "replay-check"])
def test_a_launch_file_with_no_words_is_refused_like_an_empty_option(tmp_path, body, command):
    """`--server-args @FILE` of an empty file, blank lines or only comments was the default server
    (plan exit 0, check-server exit 1 judging the default); `--server-args ""` is refused."""
    (tmp_path / "launch.sh").write_text(body)
    extra = ("--report-only",) if command == "replay-check" else ()
    message = refusal(invoke(command, "--server-args", f"@{tmp_path / 'launch.sh'}", *extra))
    assert message == f"{tmp_path / 'launch.sh'}: empty launch command (no words: blank, or only comments)"


@pytest.mark.parametrize("body", ["", "\n", "# nothing set\n"])
def test_a_config_with_no_settings_is_refused_naming_it(tmp_path, body):
    """`--config empty.yaml` planned the defaults without a word."""
    (tmp_path / "c.yaml").write_text(body)
    message = refusal(invoke("plan", "-c", str(tmp_path / "c.yaml"), "-t", GOOD))
    assert message == f"{tmp_path / 'c.yaml'}:1: empty config (no settings: blank, or only comments); give settings, or leave --config out"
    (tmp_path / "d.yaml").write_text("{}\n")  # an explicit empty mapping is a config that sets nothing on purpose
    assert invoke("plan", "-c", str(tmp_path / "d.yaml"), "-t", GOOD, "--no-recommend").exit_code == 0


@pytest.mark.parametrize("name, body, option, expected", [
    ("b.txt", "# none\n", "-b", "b.txt:1: expected a list of buckets, {capture_num_tokens: [...]} or {prefill: {bs: [...]}}, got an empty document"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 0, "output_length": 5}\n', "-t",
     "t.jsonl:1: empty trace: no requests (1 rows with 0 prompt tokens skipped, first at line 1)"),
])
def test_other_inputs_empty_after_reading_are_refused_naming_the_file(tmp_path, name, body, option, expected):
    (tmp_path / name).write_text(body)
    args = (option, str(tmp_path / name)) if option == "-t" else ("-t", GOOD, option, str(tmp_path / name))
    assert refusal(invoke("plan", *args)) == f"{tmp_path}/{expected}"


def test_watch_refuses_a_whole_line_over_1_mib_inside_one_read(tmp_path):
    """A complete line over 1 MiB inside one read was followed past (exit 0); `plan` and
    docs/watch.md refuse it (exit 2), and so does watch now, naming its line."""
    log = write_log(tmp_path / "s.log", startup_lines() + "x" * ((1 << 20) + 10) + "\n" + prefill_line(100, 1))
    raw = (tmp_path / "s.log").read_bytes()
    line = raw[: raw.index(b"xxx")].count(b"\n") + 1
    message = refusal(invoke("watch", str(log), "--duration", "30"))
    assert refusal(invoke("plan", "-t", str(log))) == message  # the same refusal as plan's
    assert message == f"{log}:{line}: line longer than 1048576 bytes (1 MiB), the longest a trace line may be"


@pytest.mark.parametrize("url, why", [("http://", "no host"), ("http://:30000/metrics", "no host"), ("http://h:99999/metrics", "Port out of range 0-65535")])
def test_watch_refuses_a_metrics_url_without_a_host_at_the_option(tmp_path, url, why):
    """`--metrics-url http://` was accepted, and every scrape failed quietly."""
    log = write_log(tmp_path / "s.log", startup_lines() + prefill_line(100, 1))
    assert refusal(invoke("watch", str(log), "--duration", "30", "--metrics-url", url)) == f"--metrics-url {url!r}: {why}: expected http://HOST:PORT/metrics"


# ---------------------------------------------------------------- 3. FILE:LINE on replay-check's refusal

@pytest.mark.parametrize("edit, reason", [
    (("'backend': 'breakable'", "'backend': 'disabled'"), "--cuda-graph-config"),
    (("'enable_prefill_cp': True", "'enable_prefill_cp': False"), "--enable-prefill-cp is not set"),
])
def test_replay_check_refusing_a_logs_flags_names_the_log_and_its_line(tmp_path, edit, reason):
    """A CP log whose launch captures no CP graph was refused naming neither the log nor the line."""
    body = startup_lines(tp=4, cp=4, capture=False).replace(*edit) + "".join(prefill_line(n, 1, graph=False) for n in (100, 700))
    log = write_log(tmp_path / "off.log", body)
    # --gpu B200: the log's weight-loading line shows 75 GiB, an H100-class GPU, whose fa3 would be the first reason
    message = refusal(invoke("replay-check", "-t", str(log), "--min-coverage", "0.5", "--gpu", "B200"))
    assert message.startswith(f"{log}:2: replay-check: SGLang 0.5.23 would capture no CP graph with these flags ({reason})")


# ---------------------------------------------------------------- 4. a refused Dask port

def test_a_dask_address_that_refuses_the_connection_fails_at_once(monkeypatch):
    """`--scheduler tcp://127.0.0.1:PORT` with nothing listening waited Dask's 30 s connect
    timeout; a refused connection is an answer: refused before any Dask client is made."""
    import distributed

    def no_client(*args, **kwargs):
        raise AssertionError("a Dask client was made for a port that refuses connections")

    monkeypatch.setattr(distributed, "Client", no_client)
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    trace = str(ASSETS / "requests" / "mooncake.jsonl")
    message = refusal(invoke("plan", "-t", trace, "--time-scale", "1,2", "--scheduler", f"tcp://127.0.0.1:{port}", "--no-recommend"))
    assert message == f"--scheduler tcp://127.0.0.1:{port}: connection refused: no Dask scheduler listens at 127.0.0.1:{port}"


# ---------------------------------------------------------------- 5. bucket lists of any length

def _no_slow_parser(monkeypatch):
    import shlex

    import cpbcg.bucket_files as bucket_files

    def refuse(*args, **kwargs):
        raise AssertionError("a 100,000-bucket list went through a pure-Python parser")

    monkeypatch.setattr(bucket_files, "load_yaml", refuse)
    monkeypatch.setattr(bucket_files, "yaml_key_lines", refuse)
    monkeypatch.setattr(shlex, "split", refuse)


@pytest.mark.parametrize("name, text", [
    ("b.yaml", "".join(f"- {8 * i}\n" for i in range(1, 100_001))),
    ("b.yml", "[" + ", ".join(str(8 * i) for i in range(1, 100_001)) + "]\n"),
    ("b.json", "[" + ",".join(str(8 * i) for i in range(1, 100_001)) + "]"),
    ("flags.txt", "--cuda-graph-bs-prefill " + " ".join(str(8 * i) for i in range(1, 100_001)) + "\n"),
])
def test_a_100000_bucket_file_is_read_without_a_pure_python_parser(tmp_path, monkeypatch, name, text):
    """A 100,000-bucket file took 20-30 s: every bucket's line was looked up (a second PyYAML
    parse of the file) before any was found bad, and PyYAML / shlex read the list itself."""
    from cpbcg.bucket_files import read_bucket_file

    (tmp_path / name).write_text(text)
    _no_slow_parser(monkeypatch)
    buckets = read_bucket_file(tmp_path / name)
    assert len(buckets) == 100_000 and buckets[0] == 8 and buckets[-1] == 800_000


@pytest.mark.parametrize("name, text, line", [
    ("b.yaml", "# buckets\n" + "".join(f"- {8 * i}\n" for i in range(1, 100_000)) + "- -8\n", 100_001),
    ("b.json", "[\n" + "".join(f"  {8 * i},\n" for i in range(1, 100_000)) + "  0\n]\n", 100_001),
    ("b.yml", "[" + ", ".join(str(8 * i) for i in range(1, 100_000)) + ", 99999999999]", 1),
])
def test_a_bad_bucket_deep_in_a_long_file_is_located_at_its_line_at_once(tmp_path, monkeypatch, name, text, line):
    """The last of 100,000 buckets bad: its line came from a second PyYAML parse (6-9 s); now from
    the list's own tokens."""
    from cpbcg.bucket_files import read_bucket_file
    from cpbcg.errors import ConfigError

    (tmp_path / name).write_text(text)
    _no_slow_parser(monkeypatch)
    with pytest.raises(ConfigError, match=rf"{name}:{line}: bucket 99999: "):
        read_bucket_file(tmp_path / name)


@pytest.mark.parametrize("text", ["- -8\n- 16 # c\n", "- 010\n", "- 8#x\n", "  - 8\n- 16\n", "[8, 16.0]\n", "- 1_000\n"])
def test_yaml_the_fast_path_cannot_read_exactly_goes_to_pyyaml(tmp_path, text):
    """The fast path never reads a list otherwise than PyYAML (octal `010`, `8#x` a string, ...)."""
    import yaml

    from cpbcg.bucket_files import _plain_list

    fast = _plain_list(text.encode())
    assert fast is None or fast == yaml.safe_load(text)


# ---------------------------------------------------------------- 6. one refusal path

REFUSALS = [
    ("plan", "-t", GOOD, "--time-scale", "1,2", "--max-graph-memory", "1", *PINNED),  # a warning came first
    ("plan", "-t", str(ASSETS / "round4" / "sglang-requests-unbounded.log"), "--strict", *PINNED),  # notes came first
    ("batches", "-o", "-", "-t", str(ASSETS / "round4" / "sglang-requests-unbounded.log"), "--strict", *PINNED),
    ("plan", "-t", GOOD, "--include", "4", "-k", "12", "--cp-size", "4", *PINNED),
    ("plan", "--chunked-prefill-size", "2147483647"),
    ("plan", "-c", str(ASSETS / "round4" / "utf16le-no-bom.yaml")),
    ("plan", "-t", str(ASSETS / "round4" / "timestamps-in-ns.csv")),
    ("plan", "-t", GOOD, "--manifest", str(ASSETS / "round4" / "plan-report.json")),
    ("replay-check", "--min-coverage", "0.5"),
    ("replay-check", "--report-only", "--min-coverage", "0.5", "-t", GOOD),
    ("batches", "-t", str(ASSETS / "round4" / "aibrix-both-prompt-spellings.jsonl"), "-o", "-", *PINNED),
    ("check-server", "--gpu", "no-such-gpu"),
    ("layout", "0", "1"),
    ("capture", "--cp-size", "4", "--cp-strategy", "nope"),
    ("plan", "-t", ""),
]
"""Refusals the suite knows (tests/test_hostile_round4.py, tests/test_fuzz_cases.py and this file),
one or more per command; the fuzzer's oracle checks the same rule on every exit-2 case it makes."""


@pytest.mark.parametrize("args", REFUSALS, ids=lambda a: " ".join(a)[:60])
def test_every_refusal_prints_its_error_first_and_alone(args):
    """A refusal printed its notes (up to 4 KB) before its one error line; now notes wait until the
    input is good and a refusal is its error line alone (as the console script runs it)."""
    result = run_cpbcg(*args)
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert len(lines) == 1 and lines[0].startswith("cpbcg: error: "), result.stderr


def test_a_refused_log_says_nothing_but_its_refusal(tmp_path):
    """replay-check printed the log's start-up notes (`cpbcg: from the log: ...`) before refusing it."""
    body = startup_lines(capture=False).replace("'backend': 'breakable'", "'backend': 'disabled'") + prefill_line(100, 1, graph=None)  # no verdict printed: refused
    log = write_log(tmp_path / "off.log", body)
    assert refusal(invoke("replay-check", "-t", str(log), "--min-coverage", "0.5")).startswith(f"{log}:2: prefill graphs off")
    reported = invoke("replay-check", "-t", str(log), "--report-only")  # good input: the notes are all there
    assert reported.exit_code == 0 and "cpbcg: from the log: prefill graphs off" in reported.stderr


def test_held_notes_come_before_the_answer():
    """Notes are held, not lost: on good input they show, before the report on stdout."""
    import sys

    from cpbcg.cli import main

    class Tee:
        def __init__(self):
            self.events: list[tuple[str, str]] = []

        def stream(self, name):
            tee = self

            class Stream:
                encoding, errors = "utf-8", "strict"

                def write(self, text):
                    if not isinstance(text, str):
                        raise TypeError("text")
                    tee.events.append((name, text))
                    return len(text)

                def flush(self):
                    pass

                def isatty(self):
                    return False

            return Stream()

    tee = Tee()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = tee.stream("out"), tee.stream("err")
    try:
        with pytest.raises(SystemExit) as info:
            main(["plan", "-t", GOOD, "-k", "3", "-f", "json", *PINNED])
    finally:
        sys.stdout, sys.stderr = old
    assert info.value.code == 0
    first_out = next(i for i, (name, _) in enumerate(tee.events) if name == "out")
    notes = [i for i, (name, text) in enumerate(tee.events) if name == "err" and text.startswith("cpbcg: ")]
    assert notes and max(notes) < first_out


def test_a_launch_command_of_another_engine_is_refused():
    # `vllm serve m --tp 4` was read as SGLang flags (--tp is --tp-size by prefix) and said "starts"
    result = CliRunner().invoke(app, ["check-server", "--server-args", "vllm serve m --tp 4"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == ("cpbcg: error: --server-args: 'vllm serve m': not an SGLang 0.5.23 launch command "
                                             "(python -m sglang.launch_server ..., sglang serve ..., or the flags alone)")
    ok = CliRunner().invoke(app, ["check-server", "--server-args", "CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server --model-path m"])
    assert ok.exit_code != 2 and "starts" in ok.stdout  # read as SGLang (exit 1: no CP graph without attention CP)


def test_check_server_without_cp_says_why_there_is_no_cp_graph_not_that_it_does_not_start():
    result = CliRunner().invoke(app, ["check-server", "--server-args", "python -m sglang.launch_server --model-path m", "--gpu", "H200"],
                                env={"CPBCG_WIDTH": "200"})
    assert "CP prefill graphs: no (no attention CP: attn_cp_size 1)" in result.stdout and "does not start" not in result.stdout


@pytest.mark.parametrize("name", ["nosuch.txt", "nosuch.sh", "nosuch.flags"])
def test_a_missing_flags_file_given_as_buckets_says_no_such_file(name):
    result = invoke("plan", "--buckets", name)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"cpbcg: error: command line: buckets: {name}: no such file"
