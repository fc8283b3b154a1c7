"""The verdict first: `cpbcg plan`'s first screen and JSON `verdict` block, in numbers against
SGLang's default list on the same traffic (a shared public trace and the embedded default)."""

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

import cpbcg
from cpbcg.cli import app
from cpbcg.commands.plan import flags_command
from cpbcg.outputs.verdict import MAX_VERDICT_LINES, VERDICT_WIDTH
from cpbcg.planner.costs import published as pub

runner = CliRunner()
MOONCAKE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake-fast25" / "conversation_trace.jsonl"
needs_mooncake = pytest.mark.skipif(not MOONCAKE.exists(), reason="the shared traces are not here")


def invoke(*args: str):
    result = runner.invoke(app, ["plan", *args], env={"CPBCG_WIDTH": "120", "COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return result


def verdict_json(*args: str) -> dict:
    return orjson.loads(invoke("--format", "json", *args).stdout)["verdict"]


def first_screen(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    return lines[:lines.index("")]


@needs_mooncake
def test_mooncake_first_screen_says_the_ceiling_the_knee_and_what_to_deploy():
    screen = first_screen(invoke("-t", str(MOONCAKE)).stdout)
    assert len(screen) <= MAX_VERDICT_LINES and all(len(line) <= VERDICT_WIDTH for line in screen)
    text = " ".join(" ".join(screen).split())
    assert text.startswith("Verdict on 11,413 prefill forwards, against SGLang 0.5.23's default list for the chunk (73 buckets 8..16384)")
    assert "99.97% of forwards can replay in graphs (no list replays 3 not CP-active); the default already reaches it (99.97%)" in text
    assert "73 buckets 8..16384: padding 0.83%, modelled prefill 4,589.4 s, capture 50 s and 75 MiB per server start" in text
    assert "knee 17 buckets: 99.97% in graphs, padding 2.59%, modelled prefill +1.44% vs the default (4,655.6 s)" in text
    assert "capture 13 s and 61 MiB per server start: saves 37 s and 14 MiB against the default" in text
    assert "full 73 buckets: 99.97% in graphs, padding 0.41% (default 0.83%), modelled prefill -0.34% vs the default" in text
    assert "deploy the knee (17 buckets)" in text
    assert f"flags cpbcg plan -t {MOONCAKE} -k 17 --emit sglang -o sglang-flags.txt" in text
    assert "estimates within x/÷1.6" in text


@needs_mooncake
def test_mooncake_json_verdict_carries_the_same_numbers():
    v = verdict_json("-t", str(MOONCAKE))
    assert v["forwards"] == 11413 and v["beyond_ceiling"] == {"not_cp_active": 3} and v["default_reaches_ceiling"] is True
    assert v["ceiling"] == pytest.approx(11410 / 11413)
    d, k, r = v["default"], v["knee"], v["recommended"]
    assert (d["num_buckets"], k["num_buckets"], r["num_buckets"]) == (73, 17, 73)
    assert d["modelled_seconds"] == pytest.approx(4589.39, abs=0.01) and k["modelled_seconds"] == pytest.approx(4655.635, abs=0.01)
    assert k["modelled_time_change_vs_default"] == pytest.approx(4655.635 / 4589.39 - 1, abs=1e-5)
    assert d["padding"] == pytest.approx(0.008283, abs=1e-6) and r["padding"] == pytest.approx(0.004099, abs=1e-6)
    # capture: 1.73 s + K x 8.19 ms x 80 layers (the assumed Llama-3.1-70B shape); 73 captured buckets, not the 74 given
    assert d["capture_seconds"] == pytest.approx(pub.capture_seconds(pub.ASSUMED_MODEL, 73)) == pytest.approx(49.561, abs=1e-3)
    assert k["capture_seconds_saved_vs_default"] == pytest.approx(pub.capture_seconds_per_shape(pub.ASSUMED_MODEL) * (73 - 17))
    assert k["graph_mib_saved_vs_default"] == pytest.approx(75.459 - 61.464, abs=1e-3)
    assert v["deploy"] == "knee" and v["deploy_num_buckets"] == 17 and v["decode"] is None
    assert v["flags_command"] == f"cpbcg plan -t {MOONCAKE} -k 17 --emit sglang -o sglang-flags.txt"


def test_embedded_default_verdict():
    v = verdict_json()
    assert v["forwards"] == 20000 and v["beyond_ceiling"] == {"not_cp_active": 54} and v["ceiling"] == pytest.approx(0.9973)
    assert v["default_reaches_ceiling"] and v["deploy"] == "knee" and v["knee"]["num_buckets"] == 15
    assert v["default"]["modelled_seconds"] == pytest.approx(4910.434, abs=0.01)
    assert v["knee"]["modelled_time_change_vs_default"] == pytest.approx(-0.00182, abs=1e-5)
    assert v["recommended"]["modelled_time_change_vs_default"] == pytest.approx(-0.01971, abs=1e-5)
    assert v["knee"]["capture_seconds_saved_vs_default"] == pytest.approx(38.003, abs=1e-3)
    assert v["flags_command"] == "cpbcg plan -k 15 --emit sglang -o sglang-flags.txt"
    screen = first_screen(invoke().stdout)
    assert len(screen) <= MAX_VERDICT_LINES and screen[0].startswith("Verdict on 20,000 prefill forwards")


def test_a_binding_capture_budget_is_said():
    v = verdict_json("--max-capture-seconds", "30", "--max-graph-memory", "100")
    fits = int((30 - pub.FITTED.capture_startup_s) // pub.capture_seconds_per_shape(pub.ASSUMED_MODEL))
    assert fits == 43 and v["recommended"]["num_buckets"] == 43
    assert v["budgets"] == ["--max-capture-seconds 30 binds: at most 43 buckets fit it (the count limit is 73; SGLang's default "
                            "list of 73 takes 50 s)", "--max-graph-memory 100 MiB does not bind: SGLang's default list holds 75 MiB"]
    text = " ".join(" ".join(first_screen(invoke("--max-capture-seconds", "30").stdout)).split())
    assert "budget --max-capture-seconds 30 binds: at most 43 buckets fit it" in text


def test_a_list_worse_than_sglang_default_is_said_with_both_numbers():
    args = ("--buckets", "512,1024,2048,4096,8192,16384")
    v = verdict_json(*args)
    assert v["configured"]["num_buckets"] == 6 and v["deploy"] == "default" and v["flags_command"] is None
    said = v["warnings"][0]
    assert said.startswith("the configured list of 6 buckets costs more than SGLang's default list of 73 here: padding 42.66% "
                           "against SGLang's default 3.22%; modelled prefill time ")
    assert "s against SGLang's default 4,910.43 s (+" in said
    text = " ".join(" ".join(first_screen(invoke(*args).stdout)).split())
    assert "warning the configured list of 6 buckets costs more" in text and "deploy SGLang's default list (73 buckets)" in text


def test_a_target_missed_is_said():
    v = verdict_json("--target-coverage", "0.999")
    assert v["warnings"] == ["the target of 99.90% of forwards in graphs is missed out of sample (the held-back forwards): 99.83% "
                             "(SGLang's default list there: 99.83%)"]


def test_flags_command_repeats_the_run_without_its_output_options():
    given = ["-t", "a b.jsonl", "-k", "73", "--format=json", "--emit", "yaml", "-o", "x.yaml", "--compare", "--cp-size", "8"]
    assert flags_command(given, [], 17) == "cpbcg plan -t 'a b.jsonl' --cp-size 8 -k 17 --emit sglang -o sglang-flags.txt"
    assert flags_command(None, ["t.jsonl"], 5) == "cpbcg plan -t t.jsonl -k 5 --emit sglang -o sglang-flags.txt"


def test_tp_is_the_servers_without_cp():
    """Llama-3.3-70B-shaped at TP 4 without CP: the MLP shard is split by 4 (the blog's 0.135 GB at 8192), not by cp_size 1."""
    from cpbcg.assembly.embedded import synthetic_batches

    settings = cpbcg.RecommendSettings(max_buckets=8, validate_fraction=0)
    dep = cpbcg.load_deployment(cp_size=1, tp_size=4, server={"model_config": "llama-3.1-70b", "gpu": "B200"})
    assert dep.tp_size == 4 and "at TP 4" in dep.cost.source
    rec = cpbcg.plan([synthetic_batches(300)], dep, settings).recommendation
    assert "at TP 4" in rec.capture.source and "x 30,720 B" in rec.capture.source  # (8192 + 28672 / 4) x 2 B


@needs_mooncake
def test_replay_check_says_a_list_worse_than_sglang_default_with_both_numbers():
    args = ["replay-check", "--report-only", "-t", str(MOONCAKE), "--json", "-"]
    worse = runner.invoke(app, [*args, "--buckets", "512,1024,2048,4096,8192,16384"], env={"CPBCG_WIDTH": "400"})
    assert worse.exit_code == 0, worse.output
    assert ("warning: on this traffic the list costs more than SGLang's default list for the chunk (73 buckets): padding "
            "9.57% against SGLang's default 0.83%; modelled prefill time 4,920.37 s against SGLang's default 4,589.39 s (+7.21%)") in \
        " ".join(worse.stderr.split())  # the report goes to stderr when --json - takes stdout
    doc = orjson.loads(worse.stdout)["against_default"]
    assert doc["buckets"] == 73 and doc["padding"] == pytest.approx(0.008283, abs=1e-6) and len(doc["costs_more"]) == 2
    same = runner.invoke(app, args, env={"CPBCG_WIDTH": "120"})
    assert same.exit_code == 0 and "costs more" not in same.stderr
    assert orjson.loads(same.stdout)["against_default"]["costs_more"] == []


@needs_mooncake
def test_memory_preflight_restates_the_start_up_reserve():
    """0.5.23 handle_gpu_memory_settings on the assumed B200 at TP 4, chunk 16384: 512 + 16384 x 1.5 + 4/8 x 1024 + decode max_bs
    512 x 2 + 8 MiB per prefill bucket (non-MLA); the knee's 17 buckets against the default's 73."""
    from cpbcg.planner.hardware import ASSUMED_GPU

    m = verdict_json("-t", str(MOONCAKE))["memory"]
    gpu = ASSUMED_GPU.memory_mib
    mine, theirs = 512 + 16384 * 1.5 + 512 + 1024 + 17 * 8, 512 + 16384 * 1.5 + 512 + 1024 + 73 * 8
    assert m["mem_fraction_static"] == round((gpu - mine) / gpu, 3) == 0.854
    assert m["default_mem_fraction_static"] == round((gpu - theirs) / gpu, 3) == 0.852
    per_token = 2 * 80 * (8 // 4) * 128 * 2  # K and V, 80 layers, 2 of 8 KV heads per rank, head_dim 128, bf16
    assert m["kv_bytes_per_token"] == per_token
    assert m["kv_tokens_vs_default"] == round(0.002 * gpu * 2**20 / per_token) == 4694
    assert m["capture_fits"] is True and m["activation_reserve_bytes"] == 16384 * 1.5 * 2**20
    text = " ".join(" ".join(first_screen(invoke("-t", str(MOONCAKE)).stdout)).split())
    assert ("memory B200 179 GiB, mem_fraction_static 0.854: the knee's 17 buckets reserve 136 MiB against the default's 584 MiB "
            "(0.5.23 reserve_for_graph_mb): +4,694 KV tokens against the default") in text


def test_the_memory_floor_and_mla_reserve():
    from cpbcg.engines.sglang.memory import decode_max_bs, reserved_mem_mib

    assert decode_max_bs(80 * 1024, 2) == 256 and decode_max_bs(80 * 1024, 4) == 512 and decode_max_bs(183_000, 1, 100) == 100
    # a small chunk on a large GPU: the 10 GiB floor binds, so the bucket count changes nothing
    assert reserved_mem_mib(80 * 1024, 2048, 1, 1, 256, 73, mla=False) == reserved_mem_mib(80 * 1024, 2048, 1, 1, 256, 17, mla=False) == 10240
    # MLA: a flat 1.5 GiB whatever the count
    assert reserved_mem_mib(183_000, 16384, 8, 1, 512, 73, mla=True) == 512 + 16384 * 1.5 + 1024 + 1024 + 1536


def test_the_configured_lists_estimate_counts_only_what_sglang_captures():
    """At cp 8 SGLang's 74-bucket default list loses 5 buckets below min_capture_tokens 16: 69 are captured and estimated."""
    from cpbcg.assembly.embedded import synthetic_batches

    dep = cpbcg.load_deployment(cp_size=8)
    assert (len(dep.buckets), len(dep.table().capture_num_tokens)) == (74, 69)
    rec = cpbcg.plan([synthetic_batches(300)], dep, cpbcg.RecommendSettings(max_buckets=8, validate_fraction=0)).recommendation
    assert rec.configured_capture.capture_s == pytest.approx(pub.capture_seconds(pub.ASSUMED_MODEL, 69))
    assert rec.verdict.default.num_buckets == 69


@needs_mooncake
def test_the_flags_command_writes_the_knee_it_names():
    knee = verdict_json("-t", str(MOONCAKE))["knee"]["buckets"]
    exported = orjson.loads(invoke("-t", str(MOONCAKE), "-k", "17", "--emit", "json").stdout)
    assert exported["capture_num_tokens"] == knee and len(knee) == 17


def test_without_a_recommendation_a_configured_list_worse_than_the_default_is_still_said():
    result = runner.invoke(app, ["plan", "--no-recommend", "--buckets", "512,1024,2048,4096,8192,16384"], env={"CPBCG_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    assert ("cpbcg: warning: on this traffic the configured list costs more than SGLang's default list for the chunk: padding 42.66% "
            "against SGLang's default 3.22%; modelled prefill time 6,244.35 s against SGLang's default 4,910.43 s (+27.16%)") in result.stderr
    assert "costs more" not in runner.invoke(app, ["plan", "--no-recommend"]).stderr  # the default itself: nothing to say


def test_a_default_within_the_tolerance_is_not_said_to_reach_the_ceiling_exactly():
    # Azure at 4x on H100 without CP: one forward (a padding-limit miss) below the 100.00% ceiling
    azure = MOONCAKE.parents[1] / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    if not azure.exists():
        pytest.skip("the shared traces are not here")
    args = ("-t", str(azure), "--gpu", "H100", "--cp-size", "1", "--time-scale", "4")
    v = verdict_json(*args)
    assert v["default_reaches_ceiling"] is True and v["default_forwards_below_ceiling"] == 1 and v["ceiling_tolerance"] == 0.0005
    screen = " ".join(" ".join(first_screen(invoke(*args).stdout)).split())
    assert "the default is within 0.05% of it (99.99%: 1 forward fewer in graphs)" in screen
    assert "already reaches" not in screen


def test_emit_without_k_says_it_wrote_the_full_list_and_how_to_write_the_knee(tmp_path):
    out = tmp_path / "flags.txt"
    result = runner.invoke(app, ["plan", "--emit", "sglang", "-o", str(out)], env={"CPBCG_WIDTH": "120"})
    assert result.exit_code == 0, result.output
    words = out.read_text().split()
    full = words[words.index("--cuda-graph-bs-prefill") + 1:words.index("--cuda-graph-max-bs-prefill")]
    said = [line for line in result.stderr.splitlines() if "--emit sglang wrote" in line]
    assert said == [f"cpbcg: note: --emit sglang wrote the full recommendation ({len(full)} buckets); the verdict deploys the knee "
                    f"(15 buckets): cpbcg plan -k 15 --emit sglang -o sglang-flags.txt"]
    knee = runner.invoke(app, ["plan", "-k", "15", "--emit", "sglang", "-o", str(out)], env={"CPBCG_WIDTH": "120"})
    assert "--emit sglang wrote" not in knee.stderr


def test_on_a_log_the_first_screen_says_what_the_server_did_and_that_layouts_are_worst_case(tmp_path):
    from sglang_log_fixtures import prefill_line, startup_lines, write_log

    body = startup_lines() + "".join(prefill_line(n, 1, graph=(i % 10 != 0)) for i, n in enumerate(range(100, 3100, 30)))
    log = write_log(tmp_path / "server.log", body)
    screen = " ".join(" ".join(first_screen(invoke("-t", str(log)).stdout)).split())
    assert screen.startswith("Verdict on 100 prefill forwards at their worst-case layouts (a server log gives forward sizes, not request lengths)")
    assert "server the log's cuda graph verdicts: 90.00% of 100 forwards ran in graphs (the model of its list: " in screen


@needs_mooncake
def test_the_knees_price_against_the_default_is_a_warning_with_both_numbers():
    v = verdict_json("-t", str(MOONCAKE))
    assert ("the knee list of 17 buckets costs more than SGLang's default list of 73 here: padding 2.59% against SGLang's default "
            "0.83%; modelled prefill time 4,655.63 s against SGLang's default 4,589.39 s (+1.44%)") in v["warnings"]
    screen = first_screen(invoke("-t", str(MOONCAKE)).stdout)
    assert len(screen) <= MAX_VERDICT_LINES and "warning the knee list of 17 buckets" in " ".join(" ".join(screen).split())
    # a knee no worse than the default (the embedded default's: padding 2.96% against 3.22%, -0.18%) is not warned about
    assert not any("knee" in w for w in verdict_json()["warnings"])


def test_a_logs_measured_memory_scales_an_moe_estimate_for_every_list(tmp_path):
    """A breakable capture's memory calibrates the whole MoE estimate: the caches follow each list's
    rows, so every list's figure moves with its own rows (a dense model's pool, with its largest only)."""
    from sglang_log_fixtures import prefill_line, startup_lines, write_log

    body = startup_lines() + "".join(prefill_line(n, 1) for n in range(100, 8100, 40))
    log = write_log(tmp_path / "server.log", body)
    v = verdict_json("-t", str(log), "--model-config", "deepseek-v3")
    assert v["capture_source"].startswith(f"calibrated from {log}:")
    assert v["default"]["graph_mib"] == pytest.approx(2.37 * 1024, abs=0.01)  # the log's end line, all 58 buckets
    # every other list: the measurement times its estimate over the default's (cp 1, TP 1: rows are tokens)
    from cpbcg.engines.sglang.server_inputs import model_spec

    spec = model_spec("deepseek-v3", "--model-config")

    def estimate(b: list[int]) -> float:
        return pub.graph_memory_mib(spec, max(b), sum(b), len(b), 1)

    for name in ("knee", "recommended"):
        want = v["default"]["graph_mib"] * estimate(v[name]["buckets"]) / estimate(v["default"]["buckets"])
        assert v[name]["graph_mib"] == pytest.approx(want, rel=1e-6) and abs(v[name]["graph_mib"] - v["default"]["graph_mib"]) > 100
    dense = verdict_json("-t", str(log))
    assert dense["knee"]["graph_mib"] == pytest.approx(dense["default"]["graph_mib"])  # one pool the largest bucket sizes


@needs_mooncake
@pytest.mark.parametrize("args", [(), ("--max-graph-memory", "60"), ("--buckets", "512,1024,2048,4096,8192,16384"),
                                  ("--target-coverage", "0.9999", "--max-capture-seconds", "20")])
def test_the_first_screen_holds_the_answer_with_warnings_budgets_and_the_decode_line(args):
    """At most 25 lines at 120 columns, the decode line counted; each warning once (a single trace's
    recommended list is not warned about twice)."""
    screen = first_screen(invoke("-t", str(MOONCAKE), *args).stdout)
    assert len(screen) <= MAX_VERDICT_LINES and all(len(line) <= VERDICT_WIDTH for line in screen), "\n".join(screen)
    text = " ".join(" ".join(screen).split())
    assert text.startswith("Verdict on 11,413 prefill forwards") and " deploy " in text and " decode " in text
    warnings = verdict_json("-t", str(MOONCAKE), *args)["warnings"]
    assert len(warnings) == len(set(w.split(": ", 1)[1] for w in warnings)), warnings


def test_on_a_log_whose_every_forward_ran_eagerly_the_first_screen_leads_with_it(tmp_path):
    from sglang_log_fixtures import prefill_line, write_log

    log = write_log(tmp_path / "eager.log", "".join(prefill_line(8192, 1, graph=False) for _ in range(5)))
    lines = first_screen(invoke("-t", str(log)).stdout)
    screen = " ".join(" ".join(lines).split())
    assert lines[2].startswith("  server     0.00% of 5 forwards ran in graphs (the log's cuda graph verdicts; the model of its list: 100.00%)")
    assert "prefill graphs appear off" in screen and "--disable-cuda-graph" in screen
    assert screen.index("server 0.00%") < screen.index("ceiling 100.00%")
    assert "deploy once prefill graphs are on, the full recommendation" in screen


def _k_of(command: str) -> str:
    words = command.split()
    return words[words.index("-k") + 1]


def test_following_the_flags_command_keeps_the_advice():
    """plan -> its flags command -> the same list, the same advice (issue 40): with -k K the verdict
    judges and deploys the K-bucket list asked for; it offers no knee below it."""
    first = verdict_json()
    assert first["deploy"] == "knee" and _k_of(first["flags_command"]) == "15"
    again = verdict_json("-k", "15")
    assert again["knee"] is None and again["deploy"] == "recommended" and again["deploy_num_buckets"] == 15
    assert again["recommended"]["buckets"] == first["knee"]["buckets"]
    assert again["flags_command"] == first["flags_command"] == "cpbcg plan -k 15 --emit sglang -o sglang-flags.txt"
    assert again["deploy_reason"] == ("saves 38 s of capture per server start and 0.18% modelled prefill time; it replays 99.73% of "
                                      "forwards in graphs (the default 99.73%)")


def test_a_k_list_within_the_knee_tolerance_is_deployed_with_its_trade_and_stays_deployed():
    """-k 12 costs +1.48% modelled time against SGLang's default list and saves 40 s of capture: within
    the knee rule's 2% it is deployed, the reason stating the trade, and its flags command is itself."""
    v = verdict_json("-k", "12")
    assert v["deploy"] == "recommended" and v["deploy_num_buckets"] == 12 and v["knee"] is None
    assert v["recommended"]["modelled_time_change_vs_default"] == pytest.approx(0.01475, abs=1e-4)
    assert v["flags_command"] == "cpbcg plan -k 12 --emit sglang -o sglang-flags.txt"
    assert v["deploy_reason"].startswith("saves 40 s of capture per server start for +1.48% modelled prefill time; it replays 99.73%")
    text = " ".join(" ".join(first_screen(invoke("-k", "12").stdout)).split())
    assert "deploy the full recommendation (12 buckets): saves 40 s of capture per server start for +1.48% modelled" in text
    assert "flags cpbcg plan -k 12 --emit sglang -o sglang-flags.txt" in text


def test_a_k_list_past_the_knee_tolerance_keeps_the_default():
    """The same rule past 2%: -k 8 costs +2.42% for no more forwards in graphs, so SGLang's default list stays (no flags)."""
    v = verdict_json("-k", "8")
    assert v["deploy"] == "default" and v["flags_command"] is None
    assert v["recommended"]["modelled_time_change_vs_default"] == pytest.approx(0.02419, abs=1e-4)
    assert "takes +2.42% modelled prefill time, more than the 2% a capture saving may cost" in v["deploy_reason"]


@needs_mooncake
def test_mooncake_deploy_line_states_the_knees_trade_and_its_command_keeps_it():
    text = " ".join(" ".join(first_screen(invoke("-t", str(MOONCAKE)).stdout)).split())
    assert "deploy the knee (17 buckets): saves 37 s of capture per server start for +1.44% modelled prefill time flags" in text
    v = verdict_json("-t", str(MOONCAKE), "-k", "17")
    assert v["deploy"] == "recommended" and v["deploy_num_buckets"] == 17
    assert v["flags_command"] == f"cpbcg plan -t {MOONCAKE} -k 17 --emit sglang -o sglang-flags.txt"
    assert v["deploy_reason"].startswith("saves 37 s of capture per server start for +1.44% modelled prefill time")
