"""The cost models per model and GPU (fitted to published measurements), the trade-off in the
answer (per-K capture cost, the knee, the coverage ceiling, the coverage target's time) and the
warnings that hold (like with like under --fit-trace, flags against SGLang's default)."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import cpbcg
from cpbcg.api import load_config_and_deployment
from cpbcg.cli import app
from cpbcg.errors import ConfigError
from cpbcg.planner.evaluate import evaluate_demand
from cpbcg.planner.hardware import ASSUMED_GPU, ASSUMED_MODEL, gpu_by_name, model_spec_from_config
from cpbcg.planner.model.capacity import CaptureSpec, local_capacity
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.costs import published as pub
from cpbcg.planner.optimise.capture_cost import capture_model
from cpbcg.planner.costs.cost import DEFAULT_COST, forward_cost
from cpbcg.planner.optimise.recommend import Validation
from cpbcg.engines.sglang.server_inputs import model_spec

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def model_spec_named(name: str):
    """A model preset by name, as --model-config NAME reads it (cpbcg/configs/models/NAME.config.json)."""
    return model_spec(name, "--model-config")
PINNED = ["--page-size", "1", "--chunked-prefill-size", "8192"]  # the settings these tests depend on, not the defaults


def _fit_module():
    spec = importlib.util.spec_from_file_location("fit_costs", ROOT / "benchmarks" / "fit_costs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_constants_are_the_refit_of_the_published_points():
    fit = _fit_module()
    data = fit.load()
    assert fit.fit(data) == pub.FITTED
    rows = fit.errors(data, pub.FITTED)
    assert len(rows) == len(data["capture"]) + len(data["memory"]) + len(data["forward"])
    ranges = {"capture s": pub.CAPTURE_RANGE, "graph MiB": pub.MEMORY_RANGE}
    for kind, source, est, measured, fitted, loo in rows:
        if fitted:  # the bar: every published setup within 2x of its measurement, without a log or manifest
            assert 0.5 <= est / measured <= 2.0, (kind, source, est, measured)
            # the printed range holds the point when it is left out of the fit (its leave-one-out error)
            assert loo is not None and fit.worst(loo) <= ranges.get(kind, pub.FORWARD_RANGE), (kind, source, loo)
        else:
            assert loo is None
    # the blog's speed-up figure as it plots it: 1.70x at 64 tokens, 1.45x at 512, 1.75x at 2048
    speedups = {p["tokens"]: p["speedup"] for p in data["forward"] if p["model"] == "gpt-oss-120b" and p["gpu"] == "GB300"}
    assert speedups == {64: 1.70, 512: 1.45, 2048: 1.75}


def test_the_blog_setups_before_and_after():
    data = _fit_module().load()
    qwen, glm = data["specs"]["Qwen3-235B-A22B"], data["specs"]["GLM-5.2"]
    # 42 breakable shapes at TP4 on GB300: 27.7 s and 35.2 s measured; the old 19.2 s/bucket said 806 s for both;
    # per layer (host-bound, 8.19 ms per layer per shape): 94 and 78 layers
    assert pub.capture_seconds(qwen, 42) == pytest.approx(1.73 + 42 * 94 * 8.1903e-3) == pytest.approx(34.07, abs=0.01)
    assert pub.capture_seconds(glm, 42) == pytest.approx(28.56, abs=0.01)
    for setup, measured in ((qwen, 27.7), (glm, 35.2)):
        assert 1 / pub.CAPTURE_RANGE <= pub.capture_seconds(setup, 42) / measured <= pub.CAPTURE_RANGE
    # the width does not enter the capture time: the same layers at half the hidden size take as long
    assert pub.capture_seconds_per_shape(replace(qwen, hidden_size=2048)) == pub.capture_seconds_per_shape(qwen)
    llama = data["specs"]["Llama-3.3-70B"]
    at = {rows: pub.graph_pool_mib(llama, rows, 4) + n * pub.per_graph_mib(llama) for rows, n in ((1024, 38), (8192, 58))}
    assert at[1024] == pytest.approx(0.025e9 / 2**20, rel=0.1) and at[8192] == pytest.approx(0.135e9 / 2**20, rel=0.1)


def test_graph_memory_follows_cp_local_rows_not_global_tokens():
    model = model_spec_named("llama-3.1-70b")
    spec = CaptureSpec()
    small, large = CPLayout(4), CPLayout(8)
    rows4 = int(local_capacity([8192], small, spec)[0])
    rows8 = int(local_capacity([16384], large, spec)[0])
    assert rows4 == rows8  # doubling cp and the chunk keeps the rows per rank
    pool4 = capture_model(model, None, 4, 8192, rows4).estimate([8192], rows4).graph_mib
    pool8 = capture_model(model, None, 8, 16384, rows8).estimate([16384], rows8).graph_mib
    assert pool8 < pool4 * 1.1  # not doubled (the MLP shard shrinks with TP 8)
    # the capture time follows the count and the model's layers, not its width or the GPU
    gpt = model_spec_named("gpt-oss-120b")
    assert pub.capture_seconds(gpt, 10) < pub.capture_seconds(model, 10)
    assert pub.capture_seconds(model, 20) - pub.capture_seconds(model, 10) == pytest.approx(10 * pub.capture_seconds_per_shape(model))


def test_a_full_chunk_list_removes_the_eager_peak():
    model = model_spec_named("llama-3.1-70b")
    rows = int(local_capacity([8192], CPLayout(4), CaptureSpec())[0])
    cm = capture_model(model, None, 4, 8192, rows)
    full, short = cm.estimate([1024, 8192], rows), cm.estimate([1024, 4096], rows // 2)
    assert full.eager_peak_removed_mib == pytest.approx(pub.eager_peak_mib(model, rows, 4)) and full.net_mib < full.graph_mib
    assert short.eager_peak_removed_mib == 0.0 and short.net_mib == short.graph_mib


def test_forward_cost_follows_the_model_and_the_gpu():
    llama = model_spec_named("llama-3.1-70b")
    b200, h100 = forward_cost(llama, gpu_by_name("B200"), 4), forward_cost(llama, gpu_by_name("H100"), 4)
    assert h100.token_ms / b200.token_ms == pytest.approx(2250 / 989, rel=1e-3)
    assert forward_cost(llama, gpu_by_name("B200"), 8).token_ms == pytest.approx(b200.token_ms / 2, rel=1e-3)
    assert "H100" in h100.source and "assumed" not in h100.source
    # without a model or GPU: the stated assumption, which is also the default cost model
    assert forward_cost(None, None, 4) == DEFAULT_COST and "model assumed Llama-3.1-70B-shaped; GPU assumed B200" in DEFAULT_COST.source
    # the blog's gpt-oss-120b TP4 GB300: 1.45-1.75x faster in graphs from 64 to 2048 tokens
    gpt = model_spec_from_config({"architectures": ["GptOssForCausalLM"], "num_hidden_layers": 36, "hidden_size": 2880,
                                  "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
                                  "num_local_experts": 128, "num_experts_per_tok": 4}, "gpt-oss-120b")
    cost = forward_cost(gpt, gpu_by_name("GB300"), 4)
    for n in (64, 2048):
        assert 1.45 / 1.25 <= cost.eager_ms(n) / cost.graph_ms(n) <= 1.75 * 1.25


def test_config_model_and_gpu_rescale_the_costs(tmp_path):
    # the model and GPU are the server's (--model-config, --gpu, server:): the cost models read the ones it resolved
    _, dep = load_config_and_deployment(None, {"server.model_config": "qwen3-32b", "server.gpu": "h100"})
    assert dep.model.hidden_size == 5120 and dep.gpu.name == "H100"
    assert dep.model is dep.server.model and dep.gpu is dep.server.gpu
    assert dep.cost == forward_cost(dep.model, dep.gpu, 4)
    assert "model preset qwen3-32b (models/qwen3-32b.config.json)" in dep.cost.source and "assumed" not in dep.cost.source
    _, part = load_config_and_deployment(None, {"server.model_config": "qwen3-32b", "server.gpu": "H100", "cost.token_ms": 0.5})
    assert (part.cost.token_ms, part.cost.graph_fixed_ms) == (0.5, dep.cost.graph_fixed_ms)
    assert part.cost.source == f"config for token_ms; the rest {dep.cost.source}"
    config = tmp_path / "config.json"
    config.write_bytes(orjson.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
                                     "num_attention_heads": 32, "intermediate_size": 14336}))
    _, own = load_config_and_deployment(None, {"server.model_config": str(config)})
    assert own.model.num_hidden_layers == 32 and own.model.source == str(config) and own.server.model is own.model
    assert f"model {config}" in own.cost.source and "GPU assumed B200" in own.cost.source
    with pytest.raises(ConfigError, match="unknown GPU"):
        load_config_and_deployment(None, {"server.gpu": "Z9000"})
    with pytest.raises(ConfigError, match=r"no such file \(nor a model preset: deepseek-v3, gpt-oss-120b, llama-3.1-70b, qwen3-32b\)"):
        load_config_and_deployment(None, {"server.model_config": "llama-9"})


def test_one_assumed_model_and_gpu_for_the_server_and_the_costs(tmp_path):
    # nothing given: the resolution and the cost models take the one assumed model and GPU, and say so
    _, dep = load_config_and_deployment(None)
    assert dep.server.model is ASSUMED_MODEL and dep.server.gpu is ASSUMED_GPU and dep.server.model_assumed
    assert dep.model is None and dep.gpu is None and dep.cost == DEFAULT_COST
    assert "model assumed Llama-3.1-70B-shaped; GPU assumed B200" in dep.cost.source
    assert not hasattr(pub, "DEFAULT_MODEL") and not hasattr(pub, "DEFAULT_GPU")
    # a preset's server.model_config reaches the cost models (it used to be costed as the assumed Llama)
    _, gpt = load_config_and_deployment("gpt-oss-120b-cp4")
    assert gpt.model.num_hidden_layers == 36 and "36 layers, hidden 2880, MoE top-4, B200" in gpt.cost.source
    # the old top-level keys are refused, pointing at the server's
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cp_size: 4\nmodel: qwen3-32b\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}:2: model: unknown key .*\(the model is server.model_config: --model-config\)"):
        load_config_and_deployment(str(cfg))


def _demand(lengths, cp):
    return Demand.of(BatchSet.from_lists([[n] for n in lengths]), cp).aggregate()


def test_out_of_sample_warning_tells_the_ceiling_from_the_list():
    cp = CPLayout(4)
    table = BucketTable.build([64, 128, 256], cp, CaptureSpec())
    head = evaluate_demand(_demand([100] * 95 + [3] * 5, cp), table, cp, 2.0)
    tail = evaluate_demand(_demand([100] * 80 + [3] * 20, cp), table, cp, 2.0)  # more forwards too short for CP
    warning = Validation(0.7, [64, 128, 256], head, tail).warning()
    assert tail.ceiling == pytest.approx(0.8) and head.ceiling == pytest.approx(0.95)
    assert "the list is not the cause" in warning and "later traffic" not in warning
    missed = evaluate_demand(_demand([100] * 80 + [1000] * 20, cp), table, cp, 2.0)  # too large for the list: its loss
    assert "forwards the list misses" in Validation(0.7, [64, 128, 256], head, missed).warning()


def _mooncake(path, seed, low, high, n=300, rate_per_s=20.0):
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1000.0 / rate_per_s, n)).astype(int)
    lengths = rng.integers(low, high, n)
    path.write_text("".join(orjson.dumps({"timestamp": int(t), "input_length": int(x), "output_length": 20}).decode() + "\n"
                            for t, x in zip(times, lengths)))
    return path


def test_fit_trace_compares_like_with_like_and_flags_a_list_worse_than_sglang_default(tmp_path):
    chat = _mooncake(tmp_path / "chat.jsonl", 1, 100, 400)
    code = _mooncake(tmp_path / "code.jsonl", 2, 1000, 7000)
    args = ["plan", "-t", str(chat), "-t", str(code), "--fit-trace", str(chat), "-k", "12", "--cp-size", "4", "-j", "1", *PINNED]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "replays fewer forwards in graphs than the configured one" not in text.stdout
    assert "(on the fitted traces' forwards)" in text.stdout
    doc = orjson.loads(runner.invoke(app, [*args, "-f", "json"]).stdout)
    rec, parts = doc["recommendation"], doc["traffic"]
    fitted = [p for p in parts if p["fit"]]
    assert rec["configured_evaluation"]["batches"] == sum(p["configured"]["batches"] for p in fitted) < doc["batches"]
    code_part = next(p for p in parts if not p["fit"])
    assert code_part["recommended"]["padding_overhead"] > code_part["sglang_default"]["padding_overhead"]
    assert any("against SGLang's default" in f for f in code_part["flags"])
    assert "vs SGLang" in text.stdout and "padding" in text.stdout


def test_json_carries_the_trade_off_per_k_and_the_knee(tmp_path):
    trace = _mooncake(tmp_path / "t.jsonl", 3, 20, 6000, n=400)
    out = runner.invoke(app, ["plan", "-t", str(trace), "-f", "json", "--compare", "-k", "16", *PINNED])
    assert out.exit_code == 0, out.output
    rec = orjson.loads(out.stdout)["recommendation"]
    ks = [t["max_buckets"] for t in rec["trade_off"]]
    assert ks == sorted(ks) and 16 in ks
    captures = [t["capture_s"] for t in rec["trade_off"]]
    assert captures == sorted(captures) and all(t["graph_mib"] > 0 for t in rec["trade_off"])
    upto = [t for t in rec["trade_off"] if t["max_buckets"] <= 16]  # the knee looks no further than the count asked for
    best = min(t["modelled_ms"] for t in upto)
    assert rec["knee"]["modelled_ms"] <= best * 1.02 and "2%" in rec["knee"]["rule"]
    assert all(t["modelled_ms"] > best * 1.02 for t in upto if t["num_buckets"] < rec["knee"]["num_buckets"])
    plain = orjson.loads(runner.invoke(app, ["plan", "-t", str(trace), "-f", "json", "-k", "16", *PINNED]).stdout)["recommendation"]
    assert plain["knee"] == rec["knee"]  # --compare's longer curve does not move it
    assert 0 < rec["coverage_ceiling"] <= 1
    doc = orjson.loads(out.stdout)["comparison"]
    assert all(entry["capture_s"] > 0 and entry["graph_mib"] > 0 for entry in doc["lists"])
    assert all(p["capture_s"] is not None for p in doc["pareto"])


def test_target_coverage_says_its_ceiling_and_its_time(tmp_path):
    trace = _mooncake(tmp_path / "t.jsonl", 4, 2, 3000, n=400)  # some prompts too short to be CP-active at cp 4
    dep = cpbcg.load_deployment(cp_size=4, scheduler={"page_size": 1, "chunked_prefill_size": 8192})
    rec = cpbcg.plan(cpbcg.open_trace(trace, dep), dep, cpbcg.RecommendSettings(target_coverage=0.5, validate_fraction=0)).recommendation
    assert rec.modelled_ms > rec.configured_modelled_ms
    assert any("modelled prefill time over the configured list" in n for n in rec.notes)
    ceiling = rec.ceiling
    assert ceiling < 1
    high = cpbcg.plan(cpbcg.open_trace(trace, dep), dep, cpbcg.RecommendSettings(target_coverage=1.0, validate_fraction=0)).recommendation
    assert any(f"the ceiling is {ceiling:.2%}" in n for n in high.notes)


def test_the_deployment_model_reaches_the_capture_estimate():
    from cpbcg.assembly.embedded import synthetic_batches

    settings = cpbcg.RecommendSettings(max_buckets=12, validate_fraction=0)
    batches = synthetic_batches(600)
    assumed = cpbcg.plan([batches], cpbcg.load_deployment(cp_size=4), settings).recommendation
    given = cpbcg.plan([batches], cpbcg.load_deployment(cp_size=4, server={"model_config": "gpt-oss-120b", "gpu": "GB300"}), settings).recommendation
    assert "model assumed Llama-3.1-70B" in assumed.capture.source and "assumed" not in given.capture.source
    assert "36 layers, hidden 2880" in given.capture.source and given.capture.capture_s < assumed.capture.capture_s
    assert given.capture.range_factor == pub.CAPTURE_RANGE == 1.6 and not given.capture.measured
    per_shape = pub.capture_seconds_per_shape(model_spec_named("gpt-oss-120b"))
    assert given.capture.capture_s == pytest.approx(pub.FITTED.capture_startup_s + len(given.buckets) * per_shape)
