"""Issue 32 (hostile and odd input, round four): one test asset per cause, each failing without its fix."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.planner.traces import ReadOptions
from cpbcg.assembly.registry import open_trace

runner = CliRunner()
PINNED = ("--page-size", "1", "--chunked-prefill-size", "8192")
"""Deployment numbers these tests depend on, pinned (the defaults move with issue 29)."""


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"})


def test_sglang_requests_unbounded_times_and_impossible_dates_are_skipped_counted_and_said(assets):
    """Cause 1 and 8: `e2e_latency` of 331 digits (inf), `entry_time` of 401 digits, a 401-digit
    queue duration and `[2026-13-45 ...]` were read with unbounded `float()` / `fromisoformat`
    (hang, OverflowError, ValueError traceback); now each such line is skipped, counted and said."""
    path = assets / "round4" / "sglang-requests-unbounded.log"
    opened = open_trace(path)
    chunks = list(opened.request_chunks())
    assert [c.input_tokens.tolist() for c in chunks] == [[1000, 1500]]
    assert chunks[0].arrival_s.tolist() == [0.0, 1.5]  # 00:00:05 - 1 s e2e; entry_time 1767225605.5
    assert opened.notes.notes == [f"skipped 4 unreadable request lines (no lengths, or an impossible time; first: {path}:1)"]
    result = invoke("batches", "-t", str(path), "-o", "-", *PINNED)
    assert result.exit_code == 0, result.output
    assert f"cpbcg: note: skipped 4 unreadable request lines (no lengths, or an impossible time; first: {path}:1)" in result.stderr
    strict = invoke("batches", "-t", str(path), "-o", "-", "--strict", *PINNED)
    assert strict.exit_code == 2 and strict.stderr.startswith(f"cpbcg: error: {path}:1: unreadable request line"), strict.output
    assert list(open_trace(path, options=ReadOptions()).request_chunks())[0].num_requests == 2


@pytest.mark.parametrize("args", [("plan", "-t", ""), ("plan", "-t", " "), ("batches", "-o", "-", "-t", ""), ("replay-check", "--report-only", "-t", ""),
                                  ("plan", "-t", "x.jsonl", "--fit-trace", "")])
def test_an_empty_trace_path_is_refused_not_read_as_the_current_directory(args, tmp_path, monkeypatch):
    """Cause 7: `-t ""` (an unset shell variable) planned every file of the current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text("[100]\n")
    result = invoke(*args)
    assert result.exit_code == 2 and "an empty path (an unset shell variable?)" in result.stderr, result.output
    assert result.stdout == ""
    from cpbcg.commands.common import trace_paths
    from cpbcg.errors import TraceError

    with pytest.raises(TraceError, match="an empty trace path"):
        trace_paths([""])


def test_fit_trace_naming_a_given_trace_another_way_plans_it_once(tmp_path, monkeypatch):
    """Cause 5: `--fit-trace sub/../a.jsonl` (or the absolute path) for `-t a.jsonl` planned it twice."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.jsonl").write_text("[100]\n[200, 300]\n[4000]\n")
    (tmp_path / "b.jsonl").write_text("[900]\n")
    for fit in ("sub/../a.jsonl", str(tmp_path / "a.jsonl"), "./a.jsonl"):
        result = invoke("plan", "--format", "json", "-t", "a.jsonl", "-t", "b.jsonl", "--fit-trace", fit, "-k", "3", *PINNED)
        assert result.exit_code == 0, result.output
        doc = orjson.loads(result.stdout)
        assert doc["batches"] == 4 and [t["trace"] for t in doc["traffic"]] == ["a.jsonl", "b.jsonl"]
        assert [t["fit"] for t in doc["traffic"]] == [True, False]


def _untimed_trace(path, n=240):
    """A trace without timestamps whose first half has short prompts and second half long ones
    (the mean of a first read chunk is not the trace's)."""
    rows = [(200 + 7 * i % 300 if i < n // 2 else 3000 + 11 * i % 2000, 20 + i % 50) for i in range(n)]
    path.write_text("input_tokens,output_tokens\n" + "".join(f"{a},{b}\n" for a, b in rows))
    return sum(a for a, _ in rows) / n


def test_auto_rates_come_from_every_request_not_the_first_read_chunk(tmp_path, monkeypatch):
    """Cause 3: the rates came from the first read chunk's mean prompt (so where a chunk ended,
    e.g. a final newline or not, changed the plan)."""
    import cpbcg
    from cpbcg.planner.traces import csv_table
    from cpbcg.assembly.traffic import default_rates

    mean = _untimed_trace(tmp_path / "u.csv")
    monkeypatch.setattr(csv_table, "REQUEST_CHUNK_BYTES", 256)  # many small chunks
    dep = cpbcg.load_deployment(cp_size=4, **{"scheduler.page_size": 1, "scheduler.chunked_prefill_size": 8192})
    jobs = cpbcg.api.traffic_jobs([cpbcg.open_trace(tmp_path / "u.csv", dep)], dep, None, "auto")
    assert [j.rate_per_s for j in jobs] == default_rates(mean, dep.scheduler) and len(jobs) == 4


def test_standard_input_and_a_file_are_planned_at_the_same_rates(tmp_path):
    """Cause 3: on standard input an untimed trace was simulated once at 4 req/s."""
    _untimed_trace(tmp_path / "u.csv")
    text = (tmp_path / "u.csv").read_text()
    from_file = invoke("plan", "--format", "json", "-t", str(tmp_path / "u.csv"), "-k", "4", *PINNED)
    from_stdin = runner.invoke(app, ["plan", "--format", "json", "-t", "-", "-k", "4", *PINNED], input=text, env={"CPBCG_WIDTH": "200"})
    unterminated = (tmp_path / "v.csv")
    unterminated.write_text(text.rstrip("\n"))
    no_newline = invoke("plan", "--format", "json", "-t", str(unterminated), "-k", "4", *PINNED)
    docs = [orjson.loads(r.stdout) for r in (from_file, from_stdin, no_newline)]
    assert [[t["rate_per_s"] for t in d["traffic"]] for d in docs][1:] == [[t["rate_per_s"] for t in docs[0]["traffic"]]] * 2
    for doc in docs[1:]:
        assert doc["recommendation"]["buckets"] == docs[0]["recommendation"]["buckets"] and doc["batches"] == docs[0]["batches"]


def test_one_load_model_plan_replay_check_and_batches_simulate_the_same_rates(tmp_path):
    """Issue 29 item 5: `replay-check` and `batches` simulated 4 req/s where `plan` simulated four
    rates of its own; now all three simulate the rate picker's rates and print them."""
    _untimed_trace(tmp_path / "u.csv")
    trace = str(tmp_path / "u.csv")
    plan = invoke("plan", "--format", "json", "-t", trace, "--no-recommend", *PINNED)
    check = invoke("replay-check", "--json", "-", "--report-only", "-t", trace, *PINNED)
    written = invoke("batches", "-t", trace, "-o", str(tmp_path / "b.jsonl"), "--fold", "none", *PINNED)
    assert plan.exit_code == check.exit_code == written.exit_code == 0, (plan.output, check.output, written.output)
    p, c = orjson.loads(plan.stdout), orjson.loads(check.stdout)
    rates = [t["rate_per_s"] for t in p["traffic"]]
    assert len(rates) == 4 and c["simulation"]["scheduler"]["rate"] == rates and p["simulation"]["scheduler"]["rate"] == rates
    replayed = invoke("plan", "--format", "json", "-t", str(tmp_path / "b.jsonl"), "--no-recommend", *PINNED)
    r = orjson.loads(replayed.stdout)
    assert p["batches"] == c["batches"] == r["batches"] == p["simulation"]["batches"] == c["simulation"]["batches"]
    assert p["coverage"] == c["coverage"] == r["coverage"] and p["bucket_hits"] == c["bucket_hits"] == r["bucket_hits"]
    for result in (plan, check, written):
        assert f"has no arrival times: simulated at Poisson rates {rates[0]:g} (" in result.stderr, result.stderr
        assert all(f"{x:g} (" in result.stderr for x in rates)


def test_a_multi_part_simulation_block_sums_its_parts_and_keeps_each(tmp_path):
    """Cause 2: the top-level `simulation` block of a multi-part plan described part 0 (rows
    skipped in the second trace were missing) while `batches` was the total."""
    (tmp_path / "a.jsonl").write_text("".join(f'{{"timestamp": {i}, "input_length": {300 + i}, "output_length": 5}}\n' for i in range(50)))
    (tmp_path / "b.jsonl").write_text("".join(f'{{"timestamp": {i}, "input_length": {0 if i % 10 == 3 else 900}, "output_length": 5}}\n'
                                              for i in range(40)))
    result = invoke("plan", "--format", "json", "-t", str(tmp_path / "a.jsonl"), "-t", str(tmp_path / "b.jsonl"),
                    "--time-scale", "1,2", "-k", "4", *PINNED)
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    sim = doc["simulation"]
    assert sim["sum_of_parts"] == 4 and len(sim["parts"]) == 4
    assert sim["batches"] == doc["batches"] == sum(p["batches"] for p in sim["parts"]) == sum(t["configured"]["batches"] for t in doc["traffic"])
    assert sim["requests"] == 2 * 50 + 2 * 36 and sim["skipped_rows"] == 2 * 4
    assert sim["first_skipped_trace"] == str(tmp_path / "b.jsonl") and sim["first_skipped_line"] == 4
    assert [(p["trace"], p["load"], p["skipped_rows"]) for p in sim["parts"]] == [
        (str(tmp_path / "a.jsonl"), "x1", 0), (str(tmp_path / "a.jsonl"), "x2", 0), (str(tmp_path / "b.jsonl"), "x1", 4), (str(tmp_path / "b.jsonl"), "x2", 4)]
    assert sim["scheduler"]["time_scale"] == [1.0, 2.0, 1.0, 2.0] and sim["scheduler"]["chunked_prefill_size"] == 8192
    text = invoke("plan", "-t", str(tmp_path / "a.jsonl"), "-t", str(tmp_path / "b.jsonl"), "--time-scale", "1,2", "-k", "4", *PINNED)
    assert "| the sum of 4 (trace, load) simulations of 2 traces at x1, x2 |" in " ".join(text.stdout.split())


def test_one_column_holds_one_role_whatever_found_it(assets):
    """Cause 4: `--length-field timestamp` also read `timestamp` as the arrival time (found by its
    name); `--output-field input_tokens` also read it as the prompt length."""
    from cpbcg.errors import TraceError

    path = assets / "round4" / "roles.csv"
    opened = open_trace(path, options=ReadOptions(length_field="timestamp"))
    chunk = next(iter(opened.request_chunks()))
    assert chunk.input_tokens.tolist() == [100, 200] and chunk.arrival_s is None and chunk.output_tokens.tolist() == [3, 4]
    assert opened.notes.notes == ["read output_tokens as output length", "timestamp is the --length-field, so it is not read as arrival time (s)"]
    with pytest.raises(TraceError, match="needs --length-field .*no column other than the ones the options name is named input_tokens"):
        list(open_trace(path, options=ReadOptions(output_field="input_tokens")).request_chunks())
    opened = open_trace(path, options=ReadOptions(time_field="output_tokens"))
    chunk = next(iter(opened.request_chunks()))
    assert chunk.output_tokens is None and chunk.arrival_s.tolist() == [3.0, 4.0]
    assert "output_tokens is the --time-field, so it is not read as output length" in opened.notes.notes


def test_aibrix_with_both_spellings_of_a_length_is_refused_naming_both(assets):
    """Cause 4: AIBrix `prompt_length` and `Prompt Length` in one request: one was silently taken."""
    path = assets / "round4" / "aibrix-both-prompt-spellings.jsonl"
    result = invoke("batches", "-t", str(path), "-o", "-", *PINNED)
    assert result.exit_code == 2
    assert result.stderr == f'cpbcg: error: {path}:1: requests[0]: "prompt_length" and "Prompt Length" both name the prompt length: keep one\n'


SIMULATION_ONLY = [("--rate", "3"), ("--seed", "5"), ("--prefix-cache", "unlimited"), ("--prefill-fixed-ms", "9"),
                   ("--prefill-tokens-per-s", "1000"), ("--time-scale", "2"), ("--no-decode",),
                   ("--default-output-tokens", "9"), ("--decode-fixed-ms", "3"), ("--decode-ms-per-request", "0.5")]
SERVER = [("--chunked-prefill-size", "4096"), ("--page-size", "16"), ("--max-prefill-tokens", "4096"), ("--max-running-requests", "8"),
          ("--prefill-max-requests", "4"), ("--enable-mixed-chunk",),
          ("--max-total-tokens", "5000")]  # 0.5.23 caps the default prefill graph list at it


@pytest.mark.parametrize("flag", SIMULATION_ONLY + SERVER, ids=lambda f: f[0])
def test_an_option_warned_as_request_traces_only_never_changes_a_batch_trace_plan(flag, assets):
    """Cause 9: `--chunked-prefill-size` (the default list) and `--page-size` (the flags) changed
    a batch-trace plan under "applies to request traces only"; now they are not warned about
    (server settings: they shape every plan), and every option warned about changes nothing."""
    trace = str(assets / "traces" / "good.jsonl")
    without = invoke("plan", "--format", "json", "-t", trace, "-k", "3")
    given = invoke("plan", "--format", "json", "-t", trace, "-k", "3", *flag)
    flags_without = invoke("plan", "-t", trace, "-k", "3", "--emit", "sglang")
    flags_given = invoke("plan", "-t", trace, "-k", "3", "--emit", "sglang", *flag)
    assert without.exit_code == given.exit_code == 0, given.output
    warned = f"{flag[0]} applies to request traces only" in given.stderr
    assert warned is (flag in SIMULATION_ONLY), given.stderr
    if warned:
        assert given.stdout == without.stdout and flags_given.stdout == flags_without.stdout
    else:
        assert (given.stdout, flags_given.stdout) != (without.stdout, flags_without.stdout)  # it does shape the plan


@pytest.mark.parametrize("args, captured", [
    (("--cp-size", "8", "--buckets", "sglang-default:12"), [16]),  # 4, 8, 12 -> 8, 8, 16 -> [16] (>= 2*cp)
    (("--cp-size", "8", "--buckets", "12"), [16]),
    (("--cp-size", "4", "--cp-strategy", "interleave", "--buckets", "2,3"), [4]),  # was refused: "no capture bucket is >= cp_size=4"
])
def test_an_explicit_list_is_rounded_up_to_cp_multiples_before_the_cp_filter(args, captured):
    """0.5.23 order (`get_prefill_num_tokens_to_capture` rounds every bucket up to a multiple of the
    alignment, then `filter_prefill_cp_bcg_capture_num_tokens` drops those below
    `min_capture_tokens`): the config check filtered the unrounded list and refused it."""
    result = invoke("plan", "--format", "json", "--no-recommend", *args, *PINNED)
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["buckets"] == captured


@pytest.mark.parametrize("args", [("--chunked-prefill-size", "2147483647"), ("--chunked-prefill-size", "-1", "--max-prefill-tokens", "5000000")])
def test_a_largest_forward_beyond_the_largest_bucket_is_refused_not_planned_at_a_silent_clamp(args):
    """`--chunked-prefill-size 2147483647` planned the default list at 4,194,304 with exit 0 and
    no word (and 256,901 MiB of graph memory); the bound is now where the option is declared."""
    result = invoke("plan", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert "Input should be less than or equal to 4194304" in result.stderr


def test_include_rounding_is_said_and_an_uncapturable_pin_named():
    """`--include 5` silently became 8 (cp 4 rounds every bucket up to a multiple of 4)."""
    result = invoke("plan", "--format", "json", "--include", "5", "-k", "12", "--cp-size", "4", *PINNED)
    assert result.exit_code == 0, result.output
    assert 8 in orjson.loads(result.stdout)["recommendation"]["buckets"]
    assert "cpbcg: note: include: SGLang 0.5.23 captures a bucket rounded up to a multiple of 4: 5 -> 8; the list pins the rounded size" in result.stderr
    refused = invoke("plan", "--include", "4", "-k", "12", "--cp-size", "4", *PINNED)
    assert refused.exit_code == 2 and "pinned buckets [4]: 4 (as captured) below 2*cp_size=8, which the CP capture drops" in refused.stderr


def test_replay_check_without_a_trace_refuses_unless_the_embedded_sample_is_named():
    """`replay-check --min-coverage 0.5` with no `--trace` gated the embedded sample and exited 0."""
    result = invoke("replay-check", "--min-coverage", "0.5")
    assert result.exit_code == 2 and result.stdout == ""
    assert "replay-check: no --trace given: the gates would run on the embedded synthetic workload" in result.stderr
    named = invoke("replay-check", "--min-coverage", "0.5", "--embedded-sample")
    assert named.exit_code == 0 and "cpbcg: warning: no --trace given" in named.stderr
    assert invoke("replay-check", "--report-only").exit_code == 0  # nothing to pass or fail: a report


@pytest.mark.parametrize("name, what", [("plan-report.json", "a plan or replay-check JSON report"), ("bucket-file.json", "a bucket file: pass it with --buckets")])
def test_another_cpbcg_document_given_as_a_manifest_is_named_as_such(assets, name, what):
    """`--manifest plan.json` said `buckets[0]: expected an object`."""
    from cpbcg.errors import ManifestError
    from cpbcg.manifest import load_manifest

    path = assets / "round4" / name
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value).startswith(f"{path}: not a capture manifest ({what}") and "`cpbcg capture -o` writes" in str(info.value)


@pytest.mark.parametrize("name, encoding", [("utf16-bom.csv", "UTF-16 LE"), ("utf16be-no-bom.jsonl", "UTF-16 BE"), ("utf16le-no-bom.yaml", "UTF-16 LE")])
def test_utf16_text_is_named_with_its_encoding_not_called_binary(assets, name, encoding):
    """UTF-16 text was called binary data with no encoding hint."""
    path = assets / "round4" / name
    args = ("plan", "--config", str(path)) if name.endswith(".yaml") else ("plan", "-t", str(path))
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert f"{path}:1: not UTF-8 text: it looks like {encoding} text; convert it to UTF-8 (e.g. iconv -f {encoding.replace(' ', '')} -t UTF-8" in result.stderr


@pytest.mark.parametrize("name, body, column", [
    ("latin1.csv", b"input_tokens,output_tokens,note\n100,10,caf\xe9\n200,20,x\n", 11),
    ("latin1.jsonl", b'{"extend_seq_lens":[5]}\n{"extend_seq_lens":[5],"n":"caf\xe9"}\n', 32),
])
def test_latin1_text_is_named_with_its_encoding_not_called_binary(tmp_path, name, body, column):
    path = tmp_path / name
    path.write_bytes(body)
    result = invoke("plan", "-t", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"cpbcg: error: {path}:2: not UTF-8 text: byte 0xe9 at column {column} ('\u00e9' in Windows-1252): it "
                             "looks like Latin-1 or Windows-1252 text; convert it to UTF-8 (e.g. iconv -f WINDOWS-1252 -t UTF-8 "
                             "FILE > FILE.utf8)\n")
    assert "binary" not in result.stderr


@pytest.mark.parametrize("name, line, value", [("timestamps-beyond-doubles.jsonl", 1, "-1.7e+308"), ("timestamps-in-ns.csv", 3, "'1700000000000000000'")])
def test_numeric_timestamps_are_bounded_in_every_reader(assets, name, line, value):
    """Every number read from a file bounded: arrivals of +-1.7e308 s (gaps of inf) or
    nanoseconds read as seconds were planned without a word."""
    path = assets / "round4" / name
    result = invoke("batches", "-t", str(path), "-o", "-", *PINNED)
    assert result.exit_code == 2
    assert f"{path}:{line}: timestamp: {value} is beyond 2200 as seconds since 1970 (a timestamp in µs or ns?)" in result.stderr


def test_the_same_trace_under_two_names_is_refused_not_counted_twice(tmp_path, monkeypatch):
    """One file by any name (`inputs.file_identity`): relative, absolute, `sub/..`, a symbolic link."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.jsonl").write_text("[100]\n")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "a.jsonl")
    for other in (str(tmp_path / "a.jsonl"), "sub/../a.jsonl", "link.jsonl"):
        result = invoke("plan", "-t", "a.jsonl", "-t", other, "--no-recommend")
        assert result.exit_code == 2 and f"{other}: the same trace is given twice (as a.jsonl too)" in result.stderr, result.output
