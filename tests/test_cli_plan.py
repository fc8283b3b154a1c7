"""`cpbcg plan` and `cpbcg layout` through typer's runner: outputs, options and error paths."""

import os
import subprocess
import sys

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app

runner = CliRunner()
JSON_KEYS = {"batches", "tokens", "graph_batches", "graph_tokens", "padded_tokens", "rescued", "eager", "bucket_hits"}


def invoke(*args):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"})


def plan_json(*args):
    result = invoke("plan", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_plan_on_embedded_default_runs_with_no_arguments():
    result = invoke("plan")
    assert result.exit_code == 0
    assert "embedded default" in result.stdout and "replayed in graphs" in result.stdout


def test_plan_json_on_batch_trace_honours_counts(assets):
    doc = plan_json("--trace", str(assets / "traces" / "good.jsonl"), "--cp-size", "4", "--buckets", "sglang-default:8192")
    assert JSON_KEYS <= doc.keys()
    # [1534,161,353] rescued into 2304; [8192] x3 needs 2048 rows = C(8192); [100, 28] fits 128 (32 rows)
    assert (doc["batches"], doc["tokens"]) == (5, 2048 + 3 * 8192 + 128)
    assert doc["graph_batches"] == 5 and doc["rescued"] == 1 and doc["natural_overflow"] == 1
    assert doc["bucket_hits"]["2304"] == 1 and doc["bucket_hits"]["8192"] == 3 and doc["bucket_hits"]["128"] == 1
    assert doc["padded_tokens"] == 256
    assert doc["eager"] == {"not_cp_active": 0, "above_largest_bucket": 0, "padding_limit": 0, "local_capacity": 0, "context_limit": 0, "multimodal_input": 0}


def test_plan_explicit_buckets_without_headroom_fall_back(assets):
    trace = str(assets / "traces" / "good.jsonl")
    doc = plan_json("--trace", trace, "--buckets", "128,2048")
    assert doc["eager"] == {"not_cp_active": 0, "above_largest_bucket": 3, "padding_limit": 0, "local_capacity": 1, "context_limit": 0, "multimodal_input": 0}
    assert doc["eager_examples"]["local_capacity"] == [[1534, 161, 353]]
    assert doc["eager_tokens"]["above_largest_bucket"] == 3 * 8192
    assert doc["graph_batches"] == 1 and doc["natural_overflow"] == 1 and doc["rescued"] == 0
    doc = plan_json("--trace", trace, "--buckets", "128,2048,8192")
    assert doc["eager"]["padding_limit"] == 1 and doc["graph_batches"] == 4


@pytest.mark.parametrize(
    "args, key, value",
    [
        (["--cp-strategy", "interleave"], "align_size", 4),
        (["--cp-strategy", "zigzag", "--align-size", "16"], "align_size", 16),
        (["--max-padding-factor", "1.5"], "max_padding_factor", 1.5),
        (["--capture-layout", "single_request"], "capture_layout", "single_request"),
        (["--capture-layout", "context_bounded", "--max-context-size", "4096", "--max-capture-requests", "8"], "capture_layout", "context_bounded"),
        (["--config", "llama-3.1-70b-cp8"], "cp_size", 8),
        (["--config", "llama-3.1-70b-cp8", "--cp-size", "2"], "cp_size", 2),
    ],
)
def test_plan_option_choices(args, key, value):
    assert plan_json(*args)[key] == value


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trace", "tests/assets/traces/negative-length.jsonl"], "negative-length.jsonl:2: extend_seq_lens[1]: -5 is not a positive integer"),
        (["--trace", "tests/assets/traces/empty.jsonl"], "empty.jsonl:1: empty trace"),
        (["--trace", "no/such/file.jsonl"], "no/such/file.jsonl: cannot open"),
        (["--buckets", "warp"], "buckets: cannot read 'warp'"),
        (["--buckets", "4"], "no capture bucket is >= 2*cp_size=8"),
        (["--config", "nope"], "nope: no such config file or preset"),
        (["--capture-layout", "context_bounded"], "context_bounded capture needs max_context_size_tokens"),
    ],
)
def test_plan_errors_are_one_line_exit_2(args, message):
    result = invoke("plan", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["--cp-size", "0"], ["--cp-strategy", "ring"], ["--format", "xml"], ["--bogus"]])
def test_usage_errors_exit_2(args):
    assert invoke("plan", *args).exit_code == 2


def test_layout_explains_the_rescued_batch():
    result = invoke("layout", "--cp-size", "4", "1534", "161", "353")
    assert result.exit_code == 0
    out = result.stdout
    assert "513" in out and "511" in out and "520" in out
    assert "natural bucket 2048: C = 512 rows → too small" in out
    assert "rescued: replays in bucket 2304 (C = 576 rows, padding 256 tokens)" in out


def test_layout_json_and_eager_reasons():
    result = invoke("layout", "--format", "json", "--buckets", "2048,2304", "--max-padding-factor", "1.1", "1534", "161", "353")
    doc = orjson.loads(result.stdout)
    assert doc["rank_local_tokens"] == [513, 511, 512, 512] and doc["local_rows"] == 520
    assert doc["bucket"] is None and doc["eager_reason"] == "padding_limit"
    short = orjson.loads(invoke("layout", "--format", "json", "100", "3").stdout)
    assert short["cp_active"] is False and short["eager_reason"] == "not_cp_active"


def test_layout_rejects_nonpositive_length():
    assert invoke("layout", "5", "0").exit_code == 2


def test_presets_lists_shipped_configs():
    result = invoke("presets")
    assert result.exit_code == 0 and "gpt-oss-120b-cp4" in result.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["plan", "--cp-size", "0"], "cpbcg: error: Invalid value for '--cp-size': Input should be greater than or equal to 1 (see `cpbcg plan --help`)"),
        (["plan", "--bogus"], "cpbcg: error: No such option: --bogus"),
        (["layout", "abc"], "cpbcg: error: Invalid value for 'extend_seq_lens'"),
        (["plan", "--format", "xml"], "cpbcg: error: Invalid value for '--format'"),
    ],
)
def test_console_script_usage_errors_are_one_line(capsys, argv, message):
    from cpbcg.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1


def test_console_script_version(capsys):
    from cpbcg import __version__
    from cpbcg.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"cpbcg {__version__}"


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "x.yaml"], "-o/--output writes the --emit export; add --emit"),
        (["--no-recommend", "--include", "4096"], "--include shapes the recommendation; drop --no-recommend"),
        (["--no-recommend", "-k", "9"], "--max-buckets shapes the recommendation"),
        (["-k", "4", "--emit", "yaml", "-o", "tests/assets/traces/good.jsonl", "-t", "tests/assets/traces/good.jsonl"], "is the same file as --trace; refusing to overwrite an input"),
        (["-k", "4", "--plot", "no/such/dir/p.png"], "--plot no/such/dir/p.png: directory no/such/dir does not exist"),
    ],
)
def test_plan_output_and_mode_misuse_refused_before_work(args, message):
    result = invoke("plan", *args)
    assert result.exit_code == 2 and message in result.stderr


def test_emit_dash_means_stdout_only_the_export():
    result = invoke("plan", "-k", "4", "--emit", "json", "-o", "-")
    assert result.exit_code == 0
    # headroom above the 16384 chunk 0.5.23 defaults to on the assumed B200 (16385 on SGLang's grid, multiples of cp 4)
    assert orjson.loads(result.stdout)["capture_num_tokens"][-1] == 16388


def test_plan_on_a_request_trace_states_the_simulation(assets):
    result = invoke("plan", "-t", str(assets / "requests" / "vidur.csv"), "--rate", "2", "-f", "json")
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["simulation"]["trace_format"] == "vidur" and doc["simulation"]["arrivals"] == "poisson"
    assert doc["simulation"]["scheduler"]["rate"] == 2.0
    assert "Poisson arrivals at 2 req/s (no arrival times were read" in result.stderr
    k = invoke("plan", "-t", str(assets / "requests" / "vidur.csv"), "-k", "4", "-f", "json")
    assert orjson.loads(k.stdout)["simulation"]["trace_format"] == "vidur"


def test_request_only_options_on_a_batch_trace_warn(assets):
    result = invoke("plan", "-t", str(assets / "traces" / "good.jsonl"), "--rate", "3", "--prefix-cache", "unlimited")
    assert result.exit_code == 0
    assert "cpbcg: warning: --prefix-cache, --rate apply to request traces only" in result.stderr


def test_saturated_simulation_is_called_out(assets):
    slow = invoke("plan", "-t", str(assets / "requests" / "mooncake.jsonl"), "--prefill-tokens-per-s", "100")
    assert "the simulated prefill is saturated" in slow.stderr
    fast = invoke("plan", "-t", str(assets / "requests" / "mooncake.jsonl"), "--prefill-tokens-per-s", "1e9")
    assert "saturated" not in fast.stderr


def test_batches_refuses_to_overwrite_its_trace(tmp_path, assets):
    trace = tmp_path / "az.csv"
    trace.write_bytes((assets / "requests" / "azure.csv").read_bytes())
    before = trace.read_bytes()
    result = invoke("batches", "--trace", str(trace), "-o", str(trace))
    assert result.exit_code == 2 and "is the same file as --trace" in result.stderr
    assert trace.read_bytes() == before


@pytest.mark.parametrize("command", ["plan", "batches"])
def test_negative_seed_is_a_usage_error(assets, tmp_path, command):
    args = [command, "--trace", str(assets / "requests" / "vidur.csv"), "--seed", "-1"]
    result = invoke(*args, *(["-o", str(tmp_path / "x.jsonl")] if command == "batches" else []))
    assert result.exit_code == 2


def test_weighted_token_total_overflow_is_refused(tmp_path):
    path = tmp_path / "huge-counts.jsonl"
    path.write_text('{"extend_seq_lens": [2147483647], "count": 2147483647}\n' * 3)
    result = invoke("plan", "--trace", str(path))
    assert result.exit_code == 2 and "count-weighted token total exceeds" in result.stderr


def test_evaluation_emit_with_json_needs_a_file():
    result = invoke("plan", "--format", "json", "--emit", "sglang")
    assert result.exit_code == 2 and "--emit with --format json needs -o FILE" in result.stderr


def test_layout_says_not_cp_active_once_and_what_cp_size_1_means():
    short = invoke("layout", "--cp-size", "4", "3")
    assert short.exit_code == 0 and "not CP-active: not CP-active" not in short.stdout
    assert "eager: not CP-active (zigzag needs every request >= 2*cp_size tokens" in short.stdout
    assert "worst case for 1 request of 3 tokens: 8" in short.stdout
    plain = invoke("layout", "--cp-size", "1", "100")
    assert plain.exit_code == 0
    assert "no context parallelism (cp_size 1)" in plain.stdout and "rows = tokens" in plain.stdout
    assert "replays in bucket 112 (padding 12 tokens)" in plain.stdout  # no C(B) rows line: without CP a bucket holds its size
    assert "natural bucket" not in plain.stdout and "align_up" not in plain.stdout


def test_every_note_has_one_prefix_and_counts_agree_in_number(tmp_path):
    trace = tmp_path / "one.jsonl"
    trace.write_text("[100]\n")
    result = invoke("plan", "-t", str(trace), "-b", "50,100,100", "-k", "1", "--no-headroom")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "note:" in line.lower()]
    assert notes and all(line.startswith("cpbcg: note: ") for line in notes), notes
    assert "SGLang 0.5.23 captures [52, 100]: rounded up to multiples of 4: 50 -> 52; 1 duplicate dropped" in result.output
    assert "only 1 prefill forward (fewer than 1,000)" in result.output
    assert "1 requests" not in result.output and "1 buckets" not in result.output and "1 forwards" not in result.output


def test_bare_cpbcg_prints_the_readable_help_then_an_error_line_and_exits_2():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cpbcg"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "Usage: cpbcg [OPTIONS] COMMAND [ARGS]..."
    assert lines[-1] == "cpbcg: error: no command given: name one (e.g. `cpbcg plan`); the commands are listed above"  # issue 32 item 10
    assert any(line.strip().startswith("plan") for line in lines) and len(lines) > 10  # the command list, one per line


def test_a_trace_given_twice_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    trace = tmp_path / "d" / "a.jsonl"
    trace.write_text("[100]\n[200]\n")
    for args in (["-t", str(trace), "-t", str(trace)], ["-t", str(tmp_path / "d"), "-t", str(trace)]):
        result = invoke("plan", *args, "--no-recommend")
        assert result.exit_code == 2 and f"{trace}: the same trace is given twice" in result.stderr, result.output
    assert invoke("plan", "-t", str(trace), "--fit-trace", str(trace), "-k", "3").exit_code == 0  # fit on one of the traces: fine


def test_a_closed_stdout_pipe_exits_quietly_with_141():
    """`cpbcg plan | head -1`: the reader is gone; exit 128 + SIGPIPE, nothing on stderr but notes."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout now fails with EPIPE, deterministically
    try:
        done = subprocess.run([sys.executable, "-m", "cpbcg", "plan", "--page-size", "1", "--chunked-prefill-size", "8192"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert [line for line in done.stderr.splitlines() if not line.startswith("cpbcg: note:")] == []


def test_presets_as_json_lists_each_preset_and_why_it_has_no_cp_graphs():
    doc = orjson.loads(invoke("presets", "--format", "json").stdout)
    by_name = {row["name"]: row for row in doc}
    # 0.5.23's gpt-oss allow-list (model_hook.py) reads the decode backend before any default: the deployment's
    # CP flags name --decode-attention-backend too for it (cpbcg/engines/sglang/export.py BOTH_BACKENDS_CHECKED), so it starts
    assert by_name["gpt-oss-120b-cp4"] == {"name": "gpt-oss-120b-cp4", "cp_size": 4, "cp_strategy": "zigzag", "chunked_prefill_size": 16384,
                                           "buckets": "sglang-default:16384", "gpu": "B200", "cp_graphs": True, "why_not": []}
    assert by_name["deepseek-v3-cp4-mla"]["cp_graphs"] is False
    assert by_name["deepseek-v3-cp4-mla"]["why_not"] == ["trtllm_mha backend can only be used with non-MLA models."]


def test_gpt_oss_cp_flags_name_the_decode_backend_so_0523_starts(tmp_path):
    # without --decode-attention-backend, 0.5.23 refuses gpt-oss (decode backend None): --emit would write nothing
    out = tmp_path / "flags.txt"
    done = invoke("plan", "-c", "cpbcg/configs/gpt-oss-120b-cp4.yaml", "-k", "8", "--emit", "sglang", "-o", str(out))
    words = out.read_text().split()
    assert words[words.index("--prefill-attention-backend") + 1] == words[words.index("--decode-attention-backend") + 1] == "trtllm_mha"
    assert done.exit_code == 0


GOOD = "tests/assets/traces/good.jsonl"
MODEL_JSON = "cpbcg/configs/models/llama-3.1-70b.config.json"


@pytest.mark.parametrize("case", ["config", "buckets", "server-args", "model-config", "fit-trace", "plot over buckets"])
def test_no_output_overwrites_any_input_of_the_command(tmp_path, case):
    """Every file the command reads is refused as an output (exit 2, the file unchanged), not only --trace."""
    cfg = tmp_path / "cfgcopy.yaml"
    cfg.write_text(open("cpbcg/configs/llama-3.1-70b-cp8.yaml").read())
    buckets = tmp_path / "f2.yaml"
    buckets.write_text("[64, 128, 256]\n")
    flags = tmp_path / "flags.txt"
    flags.write_text("--enable-prefill-cp --attn-cp-size 4 --tp-size 4\n")
    model = tmp_path / "m.json"
    model.write_text(open(MODEL_JSON).read())
    fit = tmp_path / "fit.jsonl"
    fit.write_text(open(GOOD).read())
    plot = tmp_path / "p.png"
    plot.write_text("not yet a plot\n")
    given, target, option, shown = {
        "config": (["--config", str(cfg)], cfg, "-o", "--config"),
        "buckets": (["--buckets", str(buckets)], buckets, "-o", "--buckets"),
        "server-args": (["--server-args", f"@{flags}"], flags, "-o", "--server-args"),
        "model-config": (["--model-config", str(model)], model, "-o", "--model-config"),
        "fit-trace": (["--fit-trace", str(fit)], fit, "-o", "--fit-trace"),
        "plot over buckets": (["--buckets", str(plot)], plot, "--plot", "--buckets"),
    }[case]
    before = target.read_bytes()
    out = ["--plot", str(target)] if option == "--plot" else ["--emit", "yaml", "-o", str(target)]
    result = invoke("plan", "-t", GOOD, *given, *out)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"cpbcg: error: {option} {target}: is the same file as {shown}; refusing to overwrite an input\n"
    assert result.stdout == "" and target.read_bytes() == before


def test_a_preset_name_is_no_input_file(tmp_path, monkeypatch):
    """`--config NAME` of a preset reads no file in the working directory: `-o NAME` is a new file."""
    trace = os.path.abspath(GOOD)
    monkeypatch.chdir(tmp_path)
    result = invoke("plan", "-t", trace,
                    "--config", "llama-3.1-70b-cp8", "--emit", "yaml", "-o", "llama-3.1-70b-cp8")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "llama-3.1-70b-cp8").read_text().startswith("capture_num_tokens: [32, 64, 128, ")


def test_batches_and_replay_check_refuse_to_overwrite_their_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(open("cpbcg/configs/llama-3.1-70b-cp8.yaml").read())
    before = cfg.read_bytes()
    for args, option in ((["batches", "-t", GOOD, "--config", str(cfg), "-o", str(cfg)], "-o"),
                         (["replay-check", "-t", GOOD, "--config", str(cfg), "--min-coverage", "0", "--junit", str(cfg)], "--junit")):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr == f"cpbcg: error: {option} {cfg}: is the same file as --config; refusing to overwrite an input\n"
        assert cfg.read_bytes() == before


def test_the_per_load_table_without_a_recommendation_shows_the_configured_list_and_no_fit_column(tmp_path):
    trace = tmp_path / "blankline.csv"
    trace.write_text("prompt_len\n100\n\n200\n300\n")
    plain = invoke("plan", "--no-recommend", "-t", str(trace))
    assert plain.exit_code == 0, plain.output
    assert "Per trace and load: configured buckets" in plain.stdout and "recommended" not in plain.stdout
    header = next(line for line in plain.stdout.splitlines() if "forwards" in line and "trace" in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")] == ["trace", "load", "forwards", "in graphs", "padding", "eager",
                                                                          "vs SGLang default"]
    assert "│ blankline.csv │ 25 req/s │        2 │   100.00% │" in plain.stdout
    recommended = invoke("plan", "-t", str(trace))
    assert "Per trace and load: configured -> recommended" in recommended.stdout
    assert "│ blankline.csv │ 25 req/s │ yes │        2 │ 100.00% -> 100.00% │" in recommended.stdout


@pytest.mark.parametrize("count, warning", [
    (2147483647, None),  # 10 lines standing for 21,474,836,470 forwards: plenty
    (3, "warning: only 30 prefill forwards in 10 trace lines (fewer than 1,000)"),
    (1, "warning: only 10 prefill forwards (fewer than 1,000)"),
])
def test_the_short_trace_warning_counts_weighted_forwards(tmp_path, count, warning):
    trace = tmp_path / "bigcount.jsonl"
    trace.write_text("".join(f'{{"extend_seq_lens": [{100 * (i + 1)}], "count": {count}}}\n' for i in range(10)))
    result = invoke("plan", "-t", str(trace))
    assert result.exit_code == 0, result.output
    assert f"{10 * count:,}" in result.stdout  # the table's forwards
    if warning is None:
        assert "fewer than 1,000" not in result.stderr
    else:
        assert warning in result.stderr


def test_every_plan_option_says_which_modes_refuse_it():
    # the --no-recommend and guarantee refusals are derived from each field's declaration: a new
    # option without `refused_under` would be silently accepted in a mode that ignores it
    from dataclasses import fields

    from cpbcg.commands.plan_options import PlanOptions, option_flag

    unclassified = [f.name for f in fields(PlanOptions) if option_flag(f.name).refused_under is None]
    assert unclassified == []
    assert {f.name for f in fields(PlanOptions) if "--no-recommend" in (option_flag(f.name).refused_under or ())} == {
        "max_buckets", "target_coverage", "include", "compare", "plot", "max_capture_s", "max_graph_mib"}


@pytest.mark.parametrize("mode", ["--no-recommend", "--guarantee"])
def test_every_option_a_mode_refuses_is_refused_on_the_command_line(mode):
    # each option declared as refused under the mode really is (its own flag named in the error)
    from dataclasses import fields

    from cpbcg.commands.plan_options import PlanOptions, option_flag

    values = {"max_buckets": "3", "target_coverage": "0.5", "objective": "time", "include": "4096", "validate_fraction": "0.5",
              "plot": "p.png", "min_bucket": "8", "max_capture_s": "10", "max_graph_mib": "100", "fit_traces": "t.jsonl"}
    refused = [f.name for f in fields(PlanOptions) if mode in (option_flag(f.name).refused_under or ())]
    assert refused
    for name in refused:
        flag = option_flag(name)
        words = [flag.flags[0]] + ([values[name]] if name in values else [])
        result = runner.invoke(app, ["plan", mode, *(["--max-requests", "8"] if mode == "--guarantee" else []), *words])
        assert result.exit_code == 2, (name, result.output)
        named = "--trace" if name == "fit_traces" else flag.flags[0]
        assert named in result.stderr.splitlines()[0], (name, result.stderr)


def test_emit_help_and_usage_name_every_format():
    from cpbcg.planner.choices import EmitFormat

    help_text = " ".join(runner.invoke(app, ["plan", "--help"]).output.split())
    usage = runner.invoke(app, ["plan", "-o", "x.txt"]).stderr
    for fmt in EmitFormat:
        assert fmt.value in help_text and fmt.value in usage.rpartition("--emit ")[2].strip().split("|")
    assert "sglang (server flags with the CP and scheduler flags), sglang-json (--cuda-graph-config), yaml|json (bucket file for --buckets)" in help_text
