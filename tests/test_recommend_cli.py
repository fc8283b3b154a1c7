"""`cpbcg plan` recommendation through typer's runner: the answer, headroom, validation, exports."""

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.bucket_files import read_bucket_file
from cpbcg.planner.model.bucket_spec import parse_sglang_flags

runner = CliRunner()


CHUNK_8192 = "scheduler:\n  chunked_prefill_size: 8192\n"
"""The 8192-token chunk these tests were written for, pinned (the default is now the B200's 16384)."""

def invoke(*args):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"})


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "lens.jsonl"
    rows = [[1534, 161, 353]] * 4 + [[2048]] * 3 + [[700, 300]] * 5 + [[4096]] * 2 + [[40, 3]] * 2
    path.write_text("".join(orjson.dumps({"extend_seq_lens": r}).decode() + "\n" for r in rows))
    return path


def recommendation(*args):
    result = invoke("plan", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_recommendation_has_headroom_above_the_chunk(small_trace):
    doc = recommendation("--trace", str(small_trace), "--max-buckets", "3", "--max-tokens", "4096")
    rec = doc["recommendation"]
    # a full 4096-token chunk of 3 requests needs up to align((4096 + 3*3)//4, 8) = 1032 rows; C(4096) = 1024, C(4097) = 1032;
    # SGLang 0.5.23 captures buckets rounded up to multiples of cp 4, so the list is on that grid: 4100, 2052 (C(2049) = 520)
    assert rec["headroom"] == {"chunk_tokens": 4096, "max_requests": 3, "worst_rows": 1032, "chunk_capacity_rows": 1024}
    assert rec["buckets"] == [1028, 2052, 4100] and rec["num_buckets"] == 3
    assert rec["evaluation"]["graph_batches"] == 14  # all but the 2 inactive [40, 3] forwards
    assert rec["evaluation"]["bucket_hits"] == {"1028": 5, "2052": 7, "4100": 2}
    assert doc["graph_batches"] == 14 and doc["rescued"] == 4  # the configured list, unchanged at the top level
    assert rec["deploy"].startswith("--cuda-graph-bs-prefill 1028 2052 4100 --cuda-graph-max-bs-prefill 4100 --enable-prefill-cp")
    assert "--chunked-prefill-size 4096" in rec["deploy"]


def test_gap_free_by_default_and_allow_gaps(small_trace):
    # gap-free: consecutive buckets p < b need b <= 2 * (p + 1), so 2052 pulls the first bucket up to 1028
    # (1025 rounded up to a multiple of cp 4)
    gap_free = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096")["recommendation"]["buckets"]
    assert gap_free == [1028, 2052, 4100] and all(b <= 2 * (p + 1) for p, b in zip(gap_free, gap_free[1:]))
    rec = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--allow-gaps")["recommendation"]
    assert rec["buckets"] == [1000, 2052, 4100]  # sizes 1001..1025 would now fall back for the padding limit


def test_no_headroom_keeps_the_list_at_the_chunk(small_trace):
    rec = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--no-headroom")["recommendation"]
    assert rec["buckets"] == [1028, 2052, 4096] and rec["headroom"] is None


def test_validation_fits_the_head_and_replays_the_tail(small_trace):
    rec = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096")["recommendation"]
    v = rec["validation"]
    assert v["fit_fraction"] == pytest.approx(11 / 16)  # round(0.7 * 16) lines
    assert v["evaluation"]["batches"] == 5 and v["in_sample"]["batches"] == 11
    assert set(v["evaluation"]) >= {"coverage", "token_coverage", "padding_overhead", "eager", "rescued", "bucket_hits"}
    assert recommendation("-t", str(small_trace), "-k", "3", "--validate-fraction", "0")["recommendation"]["validation"] is None


def test_validation_fit_is_the_same_in_a_child_process_and_in_place(small_trace, monkeypatch):
    args = ("-t", str(small_trace), "-k", "3", "--max-tokens", "4096")
    forked = recommendation(*args)["recommendation"]["validation"]
    monkeypatch.setenv("CPBCG_JOBS", "1")
    in_place = recommendation(*args)["recommendation"]["validation"]
    assert forked == in_place and forked["buckets"] == [1028, 2052, 4100]


def test_compare_beats_baselines(small_trace):
    doc = recommendation("--trace", str(small_trace), "-k", "3", "--max-tokens", "4096", "--compare")
    lists = {entry["name"]: entry for entry in doc["comparison"]["lists"]}
    assert set(lists) == {"recommended", "sglang-default", "pow2", "vllm", "trtllm", "uniform"}
    rec = lists["recommended"]
    assert rec["modelled_ms"] == pytest.approx(rec["optimal_same_size_ms"], rel=1e-12)  # the optimiser's best of its size (two sums)
    assert rec["graph_batches"] == 14 >= lists["sglang-default"]["graph_batches"]
    # 3 buckets beat every baseline of up to 50; only vLLM's 272-bucket ladder pads less
    assert all(e["modelled_ms"] > rec["modelled_ms"] for n, e in lists.items() if n != "recommended" and len(e["buckets"]) <= 50)
    assert lists["vllm"]["modelled_ms"] < rec["modelled_ms"] and len(lists["vllm"]["buckets"]) == 272
    assert [p["max_buckets"] for p in doc["comparison"]["pareto"]][:3] == [1, 2, 3]


@pytest.mark.parametrize("objective", ["coverage", "time"])
def test_objective_choice_is_reported(small_trace, objective):
    rec = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--objective", objective)["recommendation"]
    assert rec["objective"] == objective and rec["buckets"] == [1028, 2052, 4100]
    text = " ".join(invoke("plan", "-t", str(small_trace), "-k", "3", "--objective", objective).stdout.split())
    assert {"coverage": "most forwards in graphs, then least modelled time", "time": "least modelled time"}[objective] in text
    assert invoke("plan", "-t", str(small_trace), "-k", "3", "--objective", "speed").exit_code == 2


@pytest.mark.parametrize("target, count", [(0.5, 2), (0.8, 3)])
def test_target_coverage_takes_the_fewest_buckets(small_trace, target, count):
    # one bucket must be 4100 (headroom, 4097 on SGLang's grid): it replays only [4096] x2 (2/16); with 2052 beside it
    # [1534,161,353] x4 and [2048] x3 replay too (9/16 = 56%); the third (1000) adds [700,300] x5 (14/16)
    rec = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--target-coverage", str(target))["recommendation"]
    assert rec["target_coverage"] == target and rec["num_buckets"] == count
    assert rec["evaluation"]["graph_batches"] == {2: 9, 3: 14}[count]


def test_cost_options_change_the_model(small_trace):
    rec = recommendation("-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--token-ms", "0", "--eager-fixed-ms", "1", "--graph-fixed-ms", "0")["recommendation"]
    assert rec["cost_model"] == {"graph_fixed_ms": 0.0, "eager_fixed_ms": 1.0, "token_ms": 0.0, "source": "command line"}
    assert rec["modelled_ms"] == pytest.approx(2.0)  # only the 2 inactive [40, 3] forwards pay


@pytest.mark.parametrize("fmt", ["yaml", "json", "sglang-json", "sglang"])
def test_emit_to_file_reads_back(small_trace, tmp_path, fmt):
    out = tmp_path / {"yaml": "b.yaml", "json": "b.json", "sglang-json": "b.txt", "sglang": "b.txt"}[fmt]
    result = invoke("plan", "-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--emit", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    got = read_bucket_file(out) if fmt in ("yaml", "json") else parse_sglang_flags(out.read_text())
    assert got == [1028, 2052, 4100]
    assert "Recommended 3 buckets" in result.stdout


def test_emit_sglang_on_stdout_is_only_the_flags(small_trace):
    result = invoke("plan", "-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--emit", "sglang")
    assert result.exit_code == 0
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("--cuda-graph-bs-prefill 1028 2052 4100 ")
    assert parse_sglang_flags(result.stdout) == [1028, 2052, 4100]


def test_no_recommend_emits_the_configured_list():
    result = invoke("plan", "--buckets", "pow2:1024", "--no-recommend", "--emit", "sglang-json")
    assert result.exit_code == 0
    assert parse_sglang_flags(result.stdout) == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert '"max_bs":1024' in result.stdout and "--attn-cp-size 4" in result.stdout


def test_guarantee_mode_and_check():
    result = invoke("plan", "--guarantee", "--max-requests", "32", "--max-tokens", "8192", "--cp-size", "4")
    assert result.exit_code == 0, result.output
    # on 0.5.23's grid (multiples of cp 4)
    assert "12 buckets: 16, 32, 52, 104, 196, 340, 536, 908, 1676, 3212, 6284, 12428" in result.stdout
    assert "token limit 8,192: given (--max-tokens)" in result.stdout
    failed = invoke("plan", "--check-guarantee", "--buckets", "sglang-default:8192", "--max-requests", "32", "--max-tokens", "8192")
    assert failed.exit_code == 1
    assert "smallest n = 8103" in failed.stdout and "extend_seq_lens" in failed.stdout
    ok = invoke("plan", "--check-guarantee", "--buckets", "16,32,52,104,196,340,536,908,1676,3212,6284,12428", "--max-requests", "32", "-f", "json",
                "--chunked-prefill-size", "8192")  # the guarantee's default max tokens is the chunk (16384 on the default B200)
    assert ok.exit_code == 0 and orjson.loads(ok.stdout)["ok"] is True


def test_plot_writes_a_png(small_trace, tmp_path):
    out = tmp_path / "plan.png"
    result = invoke("plan", "-t", str(small_trace), "-k", "2", "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--guarantee", "--max-tokens", "8192"], "needs --max-requests"),
        (["--guarantee", "--check-guarantee", "--max-requests", "4"], "exclude each other"),
        (["--no-recommend", "--plot", "x.png"], "--plot shapes the recommendation"),
        (["-k", "2", "--include", "8192,abc"], "include"),
        (["-k", "2", "--include", "2048,²"], "include"),
        (["-k", "2", "--include", "2048,2048"], "include: 2048 is given twice"),
        (["-k", "2", "--include", "2048,,4096"], "include: '2048,,4096' is not a list of token counts"),
        (["-k", "1", "--include", "1024,2048"], "exceed max_buckets"),
        (["-k", "2", "--emit", "json", "-f", "json"], "needs -o FILE"),
        (["-k", "2", "--manifest", "missing.json"], "missing.json"),
    ],
)
def test_errors_are_one_line_exit_2(args, message):
    result = invoke("plan", *args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_headroom_that_cannot_fit_is_dropped_with_a_note(tmp_path, assets):
    # max_padding_factor 1: no bucket above the 8192 chunk is allowed, so the full chunk's
    # worst case (3 requests: 2,056 rows > C(8192) = 2,048) cannot be served; the plan still answers
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"max_padding_factor: 1\nbuckets: '2048,4096,8192'\n{CHUNK_8192}")
    rec = recommendation("-c", str(cfg), "-t", str(assets / "traces" / "good.jsonl"), "-k", "2")["recommendation"]
    assert rec["headroom"] is None and "no bucket up to max_padding_factor x 8192 = 8192 holds them" in rec["headroom_note"]
    assert rec["buckets"][-1] == 8192


def test_no_recommendation_keeps_the_evaluation_and_never_exports_in_its_place(monkeypatch, assets):
    from cpbcg.errors import ModelError
    from cpbcg.assembly import plan as plan_module

    def refuse(*args, **kwargs):
        raise ModelError("no CP-active forward fits any bucket up to 8192 tokens; nothing to optimise")

    monkeypatch.setattr(plan_module, "recommend", refuse)
    result = invoke("plan", "-t", str(assets / "traces" / "good.jsonl"), "-f", "json")
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["recommendation"] is None and doc["recommendation_error"].startswith("no recommendation: no CP-active forward")
    assert doc["graph_batches"] == 5  # the configured list's evaluation stands
    emitted = invoke("plan", "-t", str(assets / "traces" / "good.jsonl"), "--emit", "sglang")
    assert emitted.exit_code == 2 and emitted.stderr.startswith("cpbcg: error: no recommendation: ")


def test_very_wide_cp_plans_quickly_with_the_bound(tmp_path, assets):
    # cp 1000: the exact worst-case DP would take minutes; the section-2 bound stands in.
    # SGLang 0.5.23 captures the list as [3000, 5000, 9000] (rounded up to multiples of cp 1000)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"cp_size: 1000\nbuckets: '2048,4096,8192'\n{CHUNK_8192}")
    doc = recommendation("-c", str(cfg), "-t", str(assets / "traces" / "good.jsonl"), "--min-bucket", "0")
    assert doc["recommendation"]["buckets"] == [9000] and doc["buckets"] == [3000, 5000, 9000]
    assert doc["bucket_note"].endswith("2048 -> 3000, 4096 -> 5000, 8192 -> 9000")
    floored = recommendation("-c", str(cfg), "-t", str(assets / "traces" / "good.jsonl"))["recommendation"]
    assert floored["floor_tokens"] == 2000 and floored["buckets"][0] <= 4000  # the floor: 2*cp_size up, gap-free


def test_padding_factor_one_plans_in_time(tmp_path, assets):
    # gap-free at factor 1 chains every size below a bucket: the candidate closure must stay linear
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"max_padding_factor: 1\nbuckets: '2048,4096,8192'\n{CHUNK_8192}")
    rec = recommendation("-c", str(cfg), "-t", str(assets / "traces" / "good.jsonl"), "-k", "2")["recommendation"]
    assert rec["buckets"] == [8192]  # only the 3 full chunks can replay at factor 1 ([8192] x3)
    assert rec["evaluation"]["graph_batches"] == 3


def test_a_recommendation_worse_than_the_configured_list_says_so(small_trace):
    # one bucket (4100, the headroom bucket) replays only [4096] x2; the default list replays 14 of 16
    text = " ".join(invoke("plan", "-t", str(small_trace), "-k", "1", "--max-tokens", "4096").stdout.split())
    assert "Warning: this list replays fewer forwards in graphs than the configured one (12.50% against 87.50%)" in text


def test_plot_must_be_a_png(small_trace, tmp_path):
    result = invoke("plan", "-t", str(small_trace), "--plot", str(tmp_path / "p.svg"))
    assert result.exit_code == 2 and "the plot is a PNG; give a file name ending in .png" in result.stderr


def test_plot_says_which_comparison_lists_it_leaves_out_and_stops_at_100_percent(small_trace, tmp_path, monkeypatch):
    import matplotlib.figure

    figures = []
    original = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: (figures.append(self), original(self, *a, **k))[1])
    result = invoke("plan", "-t", str(small_trace), "-k", "2", "--plot", str(tmp_path / "p.png"), "--chunked-prefill-size", "8192")
    assert result.exit_code == 0, result.output
    left, right, cov = figures[0].axes
    legend = [t.get_text() for t in left.get_legend().get_texts()]
    # the Pareto curve runs to 128 buckets; the vLLM-style list holds 528 (1, 2, 4, step 8 to 256, step 16 to 8192)
    assert legend[-1] == "not drawn (more than 128 buckets): vllm (528 buckets)", legend
    assert cov.get_ylim() == (0.0, 100.0)


@pytest.mark.parametrize("extra, named", [
    (["-k", "3"], "-k/--max-buckets"), (["--plot", "p.png"], "--plot"), (["--compare"], "--compare"),
    (["--target-coverage", "0.5"], "--target-coverage"), (["--validate-fraction", "0.5"], "--validate-fraction"),
    (["--objective", "time"], "--objective"), (["--include", "4096"], "--include"), (["--time-scale", "2"], "--time-scale"),
])
def test_guarantee_mode_refuses_the_options_it_would_ignore(tmp_path, extra, named):
    for mode in ("--guarantee", "--check-guarantee"):
        result = runner.invoke(app, ["plan", mode, "--max-requests", "8", *extra])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"cpbcg: error: {mode} is trace-free") and f"takes no {named};" in line
    trace = tmp_path / "t.jsonl"
    trace.write_text("[100]\n")
    result = runner.invoke(app, ["plan", "--guarantee", "--trace", str(trace)])
    assert result.exit_code == 2 and "takes no --trace;" in result.stderr
    assert not (tmp_path / "p.png").exists()


def test_a_default_count_cut_to_the_cap_is_said(small_trace):
    # 600 configured buckets: the default count (the configured list's) is cut to 512, --max-buckets' upper limit
    configured = ",".join(str(b) for b in range(8, 4801, 8))
    rec = recommendation("-t", str(small_trace), "--max-tokens", "4096", "--buckets", configured)["recommendation"]
    assert rec["max_buckets"] == 512
    capped = [n for n in rec["notes"] if n.startswith("bucket count capped")]
    assert capped == ["bucket count capped: the default (the configured list's 600 buckets) is cut to 512, the most "
                      "-k/--max-buckets allows (the optimiser's time and memory grow with the count); give -k/--max-buckets for fewer"]
    given = recommendation("-t", str(small_trace), "--max-tokens", "4096", "--buckets", configured, "-k", "3")["recommendation"]
    assert not [n for n in given["notes"] if n.startswith("bucket count capped")]  # the user's own count is no cut


def test_a_bucket_multiple_states_the_grid_it_really_searches(small_trace):
    # --bucket-multiple 7 at cp 4: multiples of 7 rounded up to multiples of 4 as SGLang 0.5.23 captures them
    # (1029 -> 1032, 2051 -> 2052, 4102 -> 4104): the sizes are not multiples of 7, and the note says so
    rec = recommendation("-t", str(small_trace), "--max-tokens", "4096", "-k", "3", "--bucket-multiple", "7")["recommendation"]
    assert rec["buckets"] == [1032, 2052, 4104] and rec["bucket_multiple"] == 7
    grid = [n for n in rec["notes"] if n.startswith("grid:")]
    assert len(grid) == 1 and "multiples of 7 tokens rounded up to a multiple of 4" in grid[0]
    assert "7 -> 8" in grid[0] and "--bucket-multiple 28 keeps them multiples of both" in grid[0]
    eight = recommendation("-t", str(small_trace), "--max-tokens", "4096", "-k", "3", "--bucket-multiple", "8")["recommendation"]
    assert eight["buckets"] == [1032, 2056, 4104] and all(b % 8 == 0 for b in eight["buckets"])
    assert [n for n in eight["notes"] if n.startswith("grid:")][0].startswith("grid: the list is optimal among multiples of 8 tokens only")
    exact = recommendation("-t", str(small_trace), "--max-tokens", "4096", "-k", "3")["recommendation"]
    assert not [n for n in exact["notes"] if n.startswith("grid:")]


def test_a_grid_too_coarse_for_the_floor_names_the_options_that_fix_it(small_trace, tmp_path):
    # the floor needs every CP-active size from 8 tokens (8 rows) in a bucket <= 16; multiples of 100 start at 100
    out = tmp_path / "flags.txt"
    result = invoke("plan", "-t", str(small_trace), "--max-tokens", "4096", "--bucket-multiple", "100", "--emit", "sglang", "-o", str(out))
    assert result.exit_code == 2 and not out.exists()
    line = " ".join(result.stderr.split())
    assert ("no recommendation: required forward of 8 tokens (8 CP-local rows) fits no bucket within max_padding_factor 2: the "
            "smallest candidate with room is 100; give a finer --bucket-multiple (now 100), a higher --min-bucket or a larger "
            "--max-padding-factor") in line
    assert "max_bucket_tokens" not in line
    help_text = invoke("plan", "--help").stdout
    assert all(flag in help_text for flag in ("--bucket-multiple", "--min-bucket", "--max-padding-factor", "--max-tokens"))
    fixed = invoke("plan", "-t", str(small_trace), "--max-tokens", "4096", "--bucket-multiple", "100", "--min-bucket", "200",
                   "--emit", "sglang", "-o", str(out))
    assert fixed.exit_code == 0, fixed.output  # the option the message names fixes it
    assert out.read_text().startswith("--cuda-graph-bs-prefill ")


def test_the_guarantee_says_where_its_token_limit_came_from():
    # no --max-tokens: the chunk of the server 0.5.23 starts on the assumed B200 (179 GiB: 16384, handle_gpu_memory_settings)
    doc = orjson.loads(invoke("plan", "--guarantee", "--max-requests", "32", "-f", "json").stdout)
    assert doc["max_tokens"] == 16384
    assert doc["max_tokens_source"] == ("the chunk, chunked_prefill_size: B200 179 GiB (0.5.23 handle_gpu_memory_settings); "
                                        "the GPU is assumed (give --gpu)")
    text = invoke("plan", "--guarantee", "--max-requests", "32")
    assert "token limit 16,384: the chunk, chunked_prefill_size: B200 179 GiB (0.5.23 handle_gpu_memory_settings); the GPU is assumed" \
        in " ".join(text.stdout.split())
    h200 = orjson.loads(invoke("plan", "--guarantee", "--max-requests", "32", "--gpu", "H200", "-f", "json").stdout)
    assert (h200["max_tokens"], h200["max_tokens_source"]) == (8192, "the chunk, chunked_prefill_size: H200 140 GiB (0.5.23 handle_gpu_memory_settings)")
    given = orjson.loads(invoke("plan", "--guarantee", "--max-requests", "32", "--chunked-prefill-size", "8192", "-f", "json").stdout)
    assert (given["max_tokens"], given["max_tokens_source"]) == (8192, "the chunk, chunked_prefill_size: option")
