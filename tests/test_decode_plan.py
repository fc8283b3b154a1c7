"""Decode graphs planned on traffic: decode steps from the simulation and from a log's `Decode batch`
lines, the replay evaluation, the recommendation, `plan`'s decode block and the emitted flags."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.engines.sglang.decode_plan import DecodeCost, decode_server, evaluate_decode, plan_decode
from cpbcg.planner.decode_steps import DecodeSteps
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.traces.records import RequestChunk
from cpbcg.engines.sglang.logs.decode_lines import DecodeLines
from sglang_log_fixtures import prefill_line, startup_lines, write_log

runner = CliRunner()
MOONCAKE = "../shared/traces/mooncake-fast25/conversation_trace.jsonl"


def test_decode_steps_histogram_merge_and_quantile():
    steps = DecodeSteps.from_histogram([0, 5, 0, 2, 1])
    assert steps.batch_sizes.tolist() == [1, 3, 4] and steps.steps.tolist() == [5, 2, 1]
    merged = DecodeSteps.merge([steps, DecodeSteps.from_samples([3, 3, 9])])
    assert merged.batch_sizes.tolist() == [1, 3, 4, 9] and merged.steps.tolist() == [5, 4, 1, 1]
    assert merged.num_steps == 11 and merged.max_batch == 9
    assert merged.quantile(0.5) == 3 and merged.quantile(1.0) == 9 and merged.quantile(5 / 11) == 1


def test_evaluate_decode_hand_worked():
    steps = DecodeSteps(np.array([3, 10, 200]), np.array([5, 2, 1]))
    cost = DecodeCost(fixed_ms=2.0, ms_per_request=0.5, eager_factor=2.0, capture_s_per_graph=1.0)
    ev = evaluate_decode(steps, (4, 8, 16), cost)
    assert (ev.steps, ev.graph_steps, ev.eager_steps, ev.largest_eager_batch) == (8, 7, 1, 200)
    assert ev.padded_rows == 5 * 1 + 2 * 6 and ev.rows == 15 + 20 + 200
    # graph: 5 x (2 + 0.5 x 4) + 2 x (2 + 0.5 x 16); eager: 2 x (2 + 0.5 x 200)
    assert ev.modelled_s == pytest.approx((5 * 4 + 2 * 10 + 204) / 1000)
    assert ev.capture_s == 3.0 and ev.graph_memory_mib == 2 * 16
    sampled = evaluate_decode(DecodeSteps(np.array([3]), np.array([2]), sampled_every=40), (4,), cost)
    assert sampled.steps == 80 and sampled.padded_rows == 80


def test_simulation_counts_each_decode_step_at_its_running_batch():
    # two requests arrive together, 1 and 3 output tokens... 5 and 9: prefill (first token), then
    # decode steps: both run 4 steps (batch 2), the second 4 more alone (batch 1)
    chunk = RequestChunk(np.array([100, 100]), np.array([0.0, 0.0]), None, np.array([5, 9]), np.zeros(2, dtype=np.int64))
    sim = Simulation([chunk], SchedulerSettings(max_total_tokens=None), compiled=False)
    list(sim)
    decode = sim.summary().decode_batches
    assert dict(zip(decode.batch_sizes.tolist(), decode.steps.tolist())) == {2: 4, 1: 4}


def test_log_decode_lines_are_read_with_their_verdicts():
    lines = DecodeLines()
    blob = (b"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: 37, #token: 9120, token usage: 0.04, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0\n"
            b"[2026-11-02 10:00:02 TP0] Decode batch [77], #running-req: 300, #token: 9120, token usage: 0.04, cuda graph: False, #queue-req: 0\n"
            b"[2025-06-01 12:01:01 TP0] Decode batch. #running-req: 1, #token: 2100, token usage: 0.01, gen throughput (token/s): 40.1\n")
    assert lines.feed(blob) == 3
    assert lines.verdicts() == (1, 1, 1)
    steps = DecodeSteps.from_samples(lines.arrays()[0], 40)
    assert steps.batch_sizes.tolist() == [1, 37, 300] and steps.sampled_every == 40
    server = decode_server(gpu_memory_mib=81559, tp_size=1, max_running_requests=None, request_pool=4096)  # H100: max_bs 256
    plan = plan_decode(steps, "log", server, DecodeCost(5.0, 0.025), 4096, log_lines=lines.arrays())
    assert plan.observed == {"lines": 3, "with_verdict": 2, "graph": 1, "eager": 1, "eager_share": 0.5, "modelled_graph": 1,
                             "agree": 2, "disagree": 0}
    assert plan.configured.eager_steps == 40 and plan.recommended is not None and plan.recommended.max_bs == 304


def plan_json(*args):
    result = runner.invoke(app, ["plan", "--format", "json", *args], env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_plan_decode_block_on_a_request_trace():
    doc = plan_json("-t", MOONCAKE, "--server-args", "--cuda-graph-max-bs-decode 64 --tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag")
    d = doc["decode"]
    # attention CP 4: 0.5.23 aligns decode sizes to 4, so 1 and 2 are not captured
    assert d["server"]["captured"] == [4, 8, 12, 16, 24, 32, 40, 48, 56, 64] and d["server"]["dropped_by_capture_filter"] == [1, 2]
    assert d["source"] == "scheduler simulation: every decode step" and d["sampled_every"] == 1
    assert d["configured"]["steps"] == doc["simulation"]["decode_steps"] > 0
    assert d["configured"]["eager_steps"] > 0 and d["configured"]["largest_eager_batch"] == d["max_running_batch"] > 64
    rec = d["recommended"]
    assert rec["eager_steps"] == 0 and rec["max_bs"] >= d["max_running_batch"]
    assert rec["modelled_decode_s"] < d["configured"]["modelled_decode_s"]
    assert d["flags"][:1] == ["--cuda-graph-bs-decode"] and d["flags"][-2:] == ["--cuda-graph-max-bs-decode", str(rec["max_bs"])]
    assert d["cost_model"]["assumed"] is True and any("#40346" in s for s in d["cost_model"]["sources"])


def test_plan_emit_carries_the_decode_flags():
    result = runner.invoke(app, ["plan", "-t", MOONCAKE, "--emit", "sglang"], env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    words = result.stdout.split()
    at = words.index("--cuda-graph-bs-decode")
    top = words[words.index("--cuda-graph-max-bs-decode") + 1]
    assert words[at + 1] == "4" and words[words.index("--cuda-graph-max-bs-decode") - 1] == top


def test_plan_decode_block_on_a_log(tmp_path):
    body = startup_lines(cp=1) + prefill_line(2048, 1)
    body += "".join(f"[2026-11-02 10:00:0{i} TP0] Decode batch, #running-req: {n}, #token: 9120, token usage: 0.04, cuda graph: {n <= 256}, "
                    "gen throughput (token/s): 2311.52, #queue-req: 0\n" for i, n in enumerate([3, 40, 300]))
    log = write_log(tmp_path / "server.log", body)
    d = plan_json("-t", str(log), "--gpu", "H100")["decode"]
    assert d["sampled_every"] == 40 and d["steps_counted"] == 3 and "1-in-40" in d["source"]
    assert d["observed"]["eager"] == 1 and d["observed"]["disagree"] == 0
    assert d["configured"]["eager_steps"] == 40 and d["recommended"]["eager_steps"] == 0


def test_watch_exports_the_decode_fall_off(tmp_path):
    from cpbcg import api
    from cpbcg.commands.watch import watch_options
    from cpbcg.watching.exporter import _Collector

    body = startup_lines(cp=1) + prefill_line(2048, 1)
    body += "".join(f"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: {n}, #token: 9120, token usage: 0.04, cuda graph: {g}, "
                    "gen throughput (token/s): 2311.52, #queue-req: 0\n" for n, g in [(30, True), (600, False), (700, False)])
    body += prefill_line(1024, 1)
    log = write_log(tmp_path / "server.log", body)
    snaps = []
    opts = watch_options(interval_s=0.2, recommend_every_s=0.0, duration_s=30.0, poll_s=0.02, max_forwards=2)
    api.watch([str(log)], None, {"scheduler.page_size": 1, "scheduler.chunked_prefill_size": 8192}, opts, on_snapshot=snaps.append)
    collector = _Collector()
    collector.snapshot = snaps[-1]
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in collector.collect() for s in f.samples}
    lines = {labels["verdict"]: value for (name, key), value in got.items() if name == "cpbcg_decode_batch_lines_total"
             for labels in [dict(key)] if labels["server"] == str(log)}
    assert lines == {"graph": 1, "eager": 2, "none": 0}


SERVER = "--cuda-graph-max-bs-decode 64 --tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag --prefill-attention-backend trtllm_mha"


def test_replay_check_fails_the_decode_gates_above_the_captured_max():
    result = runner.invoke(app, ["replay-check", "-t", MOONCAKE, "--server-args", SERVER, "--max-eager-decode-steps", "0",
                                 "--min-decode-coverage", "0.99", "--json", "-"], env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 1, result.output
    doc = orjson.loads(result.stdout)
    gates = {g["name"]: g for g in doc["gates"]}
    assert not gates["max_eager_decode_steps"]["passed"] and gates["max_eager_decode_steps"]["measured"] == doc["decode"]["configured"]["eager_steps"] > 0
    assert not gates["min_decode_coverage"]["passed"] and "captured decode max_bs 64" in gates["min_decode_coverage"]["message"]
    passing = runner.invoke(app, ["replay-check", "-t", MOONCAKE, "--max-eager-decode-steps", "0"], env={"CPBCG_WIDTH": "200"})
    assert passing.exit_code == 0, passing.output  # SGLang's default decode list (max_bs 512 on a B200) holds every step


def test_replay_check_decode_gate_on_a_log_and_without_decode_steps(tmp_path, assets):
    body = startup_lines(cp=1) + prefill_line(2048, 1)
    body += "".join(f"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: {n}, #token: 9120, token usage: 0.04, cuda graph: {g}, "
                    "gen throughput (token/s): 1.0, #queue-req: 0\n" for n, g in [(30, True), (300, False)])
    log = write_log(tmp_path / "server.log", body)
    result = runner.invoke(app, ["replay-check", "-t", str(log), "--gpu", "H100", "--max-eager-decode-steps", "39"], env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 1 and "eager decode steps 40 is above the maximum 39" in result.output, result.output
    batch = runner.invoke(app, ["replay-check", "-t", str(assets / "traces" / "good.jsonl"), "--min-decode-coverage", "0.9"])
    assert batch.exit_code == 2 and "no decode steps" in batch.output


def test_check_server_shows_the_decode_list_as_captured():
    result = runner.invoke(app, ["check-server", "--server-args", "--tp-size 8 --attn-cp-size 8 --enable-prefill-cp --cp-strategy zigzag "
                                 "--max-running-requests 100", "--gpu", "H100", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    d = orjson.loads(result.stdout)["decode"]
    # max_bs default 512 (H100, TP 8) lowered to 100; attention CP 8 aligns sizes to 8: 1, 2, 4, 12 and 100 are not captured,
    # so a running batch of 97..100 decodes eagerly under --max-running-requests 100
    assert d["max_bs_rule"] == "0.5.23 default lowered to --max-running-requests" and d["configured"][-1] == 100
    assert d["captured"] == [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96] and d["dropped"] == [1, 2, 4, 12, 100]


def test_a_recommendation_is_capturable_under_the_alignment():
    from cpbcg.engines.sglang.decode_plan import recommend_decode

    server = decode_server(gpu_memory_mib=183359, tp_size=4, attn_cp_size=4, request_pool=4096)
    rec, knee = recommend_decode(DecodeSteps.from_samples([1, 1, 2]), server, DecodeCost(5.0, 0.025), 4096)
    assert rec is not None and rec.batch_sizes == (4,) and rec.eager_steps == 0 and knee[-1]["max_bs"] == 4


def test_eager_decode_in_the_loop_lengthens_the_run():
    from cpbcg import api

    trace = "../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
    deployment = api.load_config_and_deployment(None, {"cp_size": 1, "server.gpu": "H100"})[1]
    rows = {r["list"]: r for r in api.decode_loads(trace, deployment, [4.0], {"small": 64, "large": 4096})}
    assert rows["small"]["eager_steps"] > 0 and rows["large"]["eager_steps"] == 0
    assert rows["small"]["decode_s"] > rows["large"]["decode_s"]


def test_decode_graphs_off_and_a_given_decode_list():
    off = plan_json("-t", MOONCAKE, "--no-recommend", "--server-args", "--cuda-graph-backend-decode disabled")["decode"]
    assert off["server"]["enabled"] is False and off["configured"]["graph_steps"] == 0 and off["configured"]["eager_steps"] > 0
    given = plan_json("-t", MOONCAKE, "--no-recommend", "--server-args", "--cuda-graph-bs-decode 4 8 300")["decode"]
    assert given["server"]["captured"] == [4, 8, 300] and given["server"]["max_bs_rule"] == "max of --cuda-graph-bs-decode"
    assert given["recommended"] is None and given["configured"]["eager_steps"] == 0


def test_guarantee_emits_a_decode_list_up_to_the_request_slots():
    result = runner.invoke(app, ["plan", "--guarantee", "--max-requests", "8", "--max-running-requests", "102", "--emit", "sglang"],
                           env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    words = result.stdout.split()
    decode = words[words.index("--cuda-graph-bs-decode") + 1:words.index("--cuda-graph-max-bs-decode")]
    # attention CP 4 (the default deployment): sizes multiples of 4, the pool 102 rounded up to 104 so that 101..102 replay
    assert decode[0] == "4" and decode[-1] == "104" and all(int(b) % 4 == 0 for b in decode)


def _reference(blob: bytes) -> tuple[list[int], list[int]]:
    """Every `Decode batch` line by the per-line regex alone (what the bulk read must equal)."""
    import re

    line = re.compile(rb"Decode batch(?: \[\d+\])?[.,] #running-req: (\d{1,9}),([^\n]*)")
    verdict = re.compile(rb"\b(?:cuda|npu|cpu|musa|xpu) graph: (True|False)\b")
    sizes, verdicts = [], []
    for m in line.finditer(blob):
        v = verdict.search(m.group(2))
        sizes.append(int(m.group(1)))
        verdicts.append(-1 if v is None else int(v.group(1) == b"True"))
    return sizes, verdicts


@pytest.mark.parametrize("repeat", [1, 3000])
def test_decode_lines_in_bulk_equal_the_per_line_reading(repeat):
    rng = np.random.default_rng(7)
    shapes = [b"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: %d, #token: 9120, token usage: 0.04, cuda graph: %s, gen throughput (token/s): 1.0, #queue-req: 0\n",
              b"[2026-11-02 10:00:01 DP1 TP0] Decode batch [12], #running-req: %d, #token: 1, npu graph: %s, #queue-req: 0\n",
              b"[2025-06-01 12:01:01 TP0] Decode batch. #running-req: %d, #token: 2100, token usage: 0.01, gen throughput (token/s): 40.1%s\n",
              b"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: %d, note: my graph: nope, cuda graph: %s\n",
              b"[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, cuda graph: %s\n",
              b"some text about a Decode batch of %d that is %s not a record\n"]
    lines = []
    for _ in range(repeat):
        shape = shapes[int(rng.integers(len(shapes)))]
        value = b"" if shape.endswith(b"%s\n") and b"throughput (token/s): 40.1" in shape else (b"True" if rng.random() < 0.5 else b"False")
        lines.append(shape % (int(rng.integers(1, 2000)), value))
    blob = b"".join(lines)
    got = DecodeLines()
    got.feed(blob)
    sizes, verdicts = got.arrays()
    assert (sizes.tolist(), verdicts.tolist()) == _reference(blob)


def test_watch_gates_decode_over_the_run(tmp_path):
    from cpbcg import api
    from cpbcg.commands.watch import watch_options

    body = startup_lines(cp=1) + prefill_line(2048, 1)
    body += "".join(f"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: {n}, #token: 9120, token usage: 0.04, cuda graph: {n <= 256}, "
                    "gen throughput (token/s): 1.0, #queue-req: 0\n" for n in (30, 600, 700))
    body += prefill_line(1024, 1)
    log = write_log(tmp_path / "server.log", body)
    opts = watch_options(interval_s=0.2, recommend_every_s=0.0, duration_s=30.0, poll_s=0.02, max_forwards=2, window_forwards=1)
    report = api.watch([str(log)], None, {"scheduler.page_size": 1, "scheduler.chunked_prefill_size": 8192, "server.gpu": "H100",
                                          "gates.max_eager_decode_steps": 0}, opts)
    gate = next(g for g in report.gates if g.name == "max_eager_decode_steps")
    assert not gate.passed and gate.measured == 80  # two lines above the captured 256, 40 decode steps each


@pytest.mark.parametrize("flags, message", [("--cuda-graph-bs-decode 0", "positive batch sizes needed, got [0]"),
                                            ("--cuda-graph-bs-decode abc", "expected a positive batch size, got 'abc'"),
                                            ("--cuda-graph-max-bs-decode 0", "must be positive, got 0")])
def test_bad_decode_flags_are_refused_before_any_work(flags, message):
    for command in (["plan", "-t", MOONCAKE], ["replay-check", "-t", MOONCAKE, "--min-coverage", "0"]):
        result = runner.invoke(app, [*command, "--server-args", flags])
        assert result.exit_code == 2 and result.stderr.splitlines()[0].startswith("cpbcg: error: --server-args: decode graphs: ")
        assert message in result.stderr and len(result.stderr.splitlines()) == 1


def test_plan_text_has_a_decode_section_and_says_where_the_list_tips_over():
    azure = "../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
    result = runner.invoke(app, ["plan", "-t", azure, "--gpu", "H100", "--cp-size", "1", "--time-scale", "1,4", "-j", "1"],
                           env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    assert "Decode graphs: " in result.stdout and "fall off the graphs" in result.stdout
    first_screen = result.stdout.split("\n\n", 1)[0]  # the verdict, decode included
    assert "  decode     SGLang's decode list (max_bs 256) runs " in first_screen and "recommended max_bs" in first_screen
    assert "deploy: --cuda-graph-bs-decode 1 2 4" in result.stdout and "cost model (assumed)" in result.stdout
    assert "decode list first falls off the graphs at " in result.stderr and " x4 (" in result.stderr
    doc = plan_json("-t", azure, "--gpu", "H100", "--cp-size", "1", "--time-scale", "1,4", "-j", "1")["decode"]
    loads = {p["trace"].rsplit(" ", 1)[1]: p for p in doc["parts"]}
    assert loads["x1"]["configured_eager_steps"] == 0 and loads["x4"]["configured_eager_steps"] > 0
    assert loads["x4"]["recommended_eager_steps"] == 0 and loads["x4"]["max_running_batch"] > 256


def test_sglang_decode_passes_are_scraped_and_exported():
    from cpbcg.watching.exporter import _server_samples
    from cpbcg.engines.sglang.metrics import parse_metrics

    page = ('# TYPE sglang:cuda_graph_passes_total counter\n'
            'sglang:cuda_graph_passes_total{tp_rank="0",dp_rank="1",mode="decode_cuda_graph"} 90.0\n'
            'sglang:cuda_graph_passes_total{tp_rank="1",dp_rank="1",mode="decode_cuda_graph"} 90.0\n'
            'sglang:cuda_graph_passes_total{tp_rank="0",dp_rank="1",mode="decode_none"} 10.0\n'
            'sglang:cuda_graph_passes_total{tp_rank="0",dp_rank="1",mode="prefill_none"} 2.0\n')
    m = parse_metrics(page, "u")
    assert m.decode_passes == {"1": {"decode_cuda_graph": 90.0, "decode_none": 10.0}}  # TP copies not added
    assert m.prefill_passes == {"1": {"prefill_none": 2.0}}

    class View:  # the fields _server_samples reads, nothing else
        ranks, windows, gain, refusal, rotations, truncations, metrics_errors = (), {}, None, None, 0, 0, 0
        decode_lines = (0, 0, 0)
        freshness = type("F", (), {"lines_read": 0, "bytes_read": 0, "last_line_unix": 0.0, "reader_lag_s": 0.0, "unread_bytes": 0,
                                    "scrape_unix": None})()
        metrics = m

    got = {(name, labels): value for name, labels, value in _server_samples(View(), 0.0) if name == "sglang_decode_passes"}  # type: ignore[arg-type]
    assert got == {("sglang_decode_passes", ("1", "decode_cuda_graph")): 90.0, ("sglang_decode_passes", ("1", "decode_none")): 10.0}


def test_absurd_decode_sizes_are_refused_not_enumerated():
    from cpbcg.engines.sglang.decode_plan import MAX_RECOMMENDED_BS, recommend_decode

    result = runner.invoke(app, ["plan", "-t", MOONCAKE, "--server-args", "--cuda-graph-max-bs-decode 999999999"])
    assert result.exit_code == 2 and "is above 1,048,576 requests" in result.stderr
    guarantee = runner.invoke(app, ["plan", "--guarantee", "--max-requests", "8", "--max-running-requests", "2000000000", "--emit", "sglang"])
    assert guarantee.exit_code == 2 and "--max-running-requests 2,000,000,000" in guarantee.stderr
    server = decode_server(gpu_memory_mib=81559, tp_size=1)  # a log line's odd running batch, no request slots known
    rec, _ = recommend_decode(DecodeSteps.from_samples([3, 999_999_999]), server, DecodeCost(5.0, 0.025), None)
    assert rec is not None and rec.max_bs == MAX_RECOMMENDED_BS


def test_replay_check_gates_the_observed_decode_share_of_a_log(tmp_path):
    body = startup_lines(cp=1) + prefill_line(2048, 1)
    body += "".join(f"[2026-11-02 10:00:01 TP0] Decode batch, #running-req: {n}, #token: 9120, token usage: 0.04, cuda graph: {g}, "
                    "gen throughput (token/s): 1.0, #queue-req: 0\n" for n, g in [(30, True), (40, True), (300, False), (310, False)])
    log = write_log(tmp_path / "server.log", body)
    result = runner.invoke(app, ["replay-check", "-t", str(log), "--gpu", "H100", "--min-observed-decode-coverage", "0.9"],
                           env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 1 and "observed decode lines in graphs 50.00% is below the minimum 90.00%" in result.output, result.output
    plain = write_log(tmp_path / "plain.log", startup_lines(cp=1) + prefill_line(2048, 1))
    refused = runner.invoke(app, ["replay-check", "-t", str(plain), "--min-observed-decode-coverage", "0.9"])
    assert refused.exit_code == 2 and "Decode batch lines print the graph verdict" in refused.output
