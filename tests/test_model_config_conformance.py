"""cpbcg's start-up resolution against SGLang 0.5.23 on real model configs (issue 39): each config.json is
loaded by 0.5.23's own `ModelConfig` (`configs/model_config.py`) with transformers' config loading
(transformers 5.19.0, the release 0.5.23 pins; SGLang's own config classes for GLM-5 Next, Kimi Linear ...),
in a subprocess with only kernels, devices and serving I/O stubbed (`sglang_oracle.MODEL_CONFIG_SCRIPT`).
What it made of each (MLA or not, multimodal and the breakable-graph allow-list under `--enable-multimodal`
and `--language-model-only`, the HF attributes the DSA, KDA and DeepSeek-V4 rules read, KV heads per TP)
drives the wheel's resolution functions (tests/test_server_resolution_conformance.py's oracle) on random
launches and a CP grid, against `resolve_server` on `model_spec_from_config` of the same file.

The configs: cpbcg's shipped ones (dense GQA Llama 3.1 70B and Qwen3 32B, gpt-oss-120b, DeepSeek-V3 MLA)
and tests/assets/model_configs/ (Qwen3-30B-A3B MoE, DeepSeek-V3.2 DSA, Qwen2.5-VL, LLaVA 1.5, Llama 4 Scout,
Gemma 3, Qwen3.5 MoE, GLM-5 Next, Kimi Linear KDA): the published config.json of each, trimmed to the
fields the loaders read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_sizes import examples

from cpbcg.engines.sglang.startup import is_multimodal, parse_launch_words
from cpbcg.planner.hardware import GPUS, model_spec_from_config, uses_mla
from sglang_oracle import MODEL_CONFIG_SCRIPT, sglang_wheel  # noqa: F401 - fixture
from test_server_resolution_conformance import cpbcg_resolve, deployments, model_config_key, sglang_resolve

TRANSFORMERS = "5.19.0"
"""The transformers release SGLang 0.5.23 pins (`Requires-Dist: transformers==5.19.0`)."""
ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {p.name.removesuffix(".config.json"): p for p in sorted((ROOT / "cpbcg" / "configs" / "models").glob("*.config.json"))}
CONFIGS |= {p.name.removesuffix(".config.json"): p for p in sorted((ROOT / "tests" / "assets" / "model_configs").glob("*.config.json"))}
SPECS = {name: model_spec_from_config(json.loads(path.read_text()), str(path)) for name, path in CONFIGS.items()}


@pytest.fixture(scope="session")
def model_configs(sglang_wheel):  # noqa: F811
    """{config name: {model_config_key: what 0.5.23's ModelConfig made of it}}, built once."""
    pytest.importorskip("torch", reason="SGLang 0.5.23's model_config imports torch; it is loaded where torch is installed")
    transformers = pytest.importorskip("transformers", reason=f"transformers=={TRANSFORMERS} (the test extra) loads the configs")
    assert transformers.__version__ == TRANSFORMERS, f"SGLang 0.5.23 pins transformers=={TRANSFORMERS}, found {transformers.__version__}"
    run = subprocess.run([sys.executable, "-c", MODEL_CONFIG_SCRIPT, str(sglang_wheel)], input=json.dumps({k: str(v) for k, v in CONFIGS.items()}),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_every_family_the_issue_names_is_loaded(model_configs):
    archs = {facts["None/False"]["hf"]["architectures"][0] for facts in model_configs.values()}
    assert {"LlamaForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Qwen2_5_VLForConditionalGeneration",
            "GptOssForCausalLM", "Glm5NextForConditionalGeneration", "Llama4ForConditionalGeneration", "KimiLinearForCausalLM"} <= archs
    mm = {name for name, facts in model_configs.items() if facts["None/False"]["is_multimodal"]}
    assert mm == {"qwen2.5-vl-7b", "llava-1.5-7b", "qwen3.5-moe", "glm-5-next"}  # Llama 4 and Gemma 3: off unless --enable-multimodal


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cpbcg_reads_each_config_as_model_config_does(model_configs, name):
    """MLA, multimodal (each --enable-multimodal and --language-model-only), the breakable-graph allow-list, KDA,
    DSA and the architectures: cpbcg's reading of config.json against 0.5.23's ModelConfig of it."""
    spec = SPECS[name]
    for key, facts in model_configs[name].items():
        mm, lm_only = key.split("/")
        flags = {**({"enable_multimodal": mm == "True"} if mm != "None" else {}), **({"language_model_only": True} if lm_only == "True" else {})}
        given = parse_launch_words([f"--{k.replace('_', '-')}" + ("" if v is True else f"={str(v).lower()}") for k, v in flags.items()])
        assert is_multimodal(spec, given) == facts["is_multimodal"], (name, key)
        assert uses_mla(spec) == (facts["attention_arch"] == "MLA"), name
        assert spec.architectures == tuple(facts["hf"]["architectures"])
    facts = model_configs[name]["None/False"]
    hf, text = facts["hf"], facts["hf_text"]
    kda = any(bool((level or {}).get("linear_attn_config") and level["linear_attn_config"].get("kda_layers"))
              for level in (hf, text, hf.get("text_config")))
    assert spec.kda_attention == kda, name


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=deployments(), name=st.sampled_from(sorted(CONFIGS)))
def test_random_launches_on_real_configs_resolve_as_sglang_does(model_configs, monkeypatch, case, name):
    flags, _, gpu = case
    spec = SPECS[name]
    expected = sglang_resolve(flags, spec, gpu, monkeypatch, real=model_configs[name])
    got = cpbcg_resolve(flags, spec, gpu)
    if expected["refused"] is not None and got["refused"] is not None:
        assert got["refused"].startswith(expected["refused"]), (flags, name, gpu.name)
    else:
        assert got == expected, (flags, name, gpu.name)


def test_cp_deployments_on_real_configs_and_every_gpu_resolve_as_sglang_does(model_configs, monkeypatch):
    cases = graphs = off = 0
    for gpu in GPUS.values():
        for name in sorted(CONFIGS):
            for strategy in ("zigzag", "interleave"):
                for extra in ({}, {"prefill_attention_backend": "trtllm_mha"}, {"page_size": 1}, {"enable_multimodal": True}):
                    flags = {"tp_size": 4, "attn_cp_size": 4, "enable_prefill_cp": True, "cp_strategy": strategy, **extra}
                    expected = sglang_resolve(flags, SPECS[name], gpu, monkeypatch, real=model_configs[name])
                    got = cpbcg_resolve(flags, SPECS[name], gpu)
                    if expected["refused"] is not None and got["refused"] is not None:
                        assert got["refused"].startswith(expected["refused"]), (flags, name, gpu.name)
                    else:
                        assert got == expected, (flags, name, gpu.name)
                    cases += 1
                    graphs += bool(expected.get("cp_graphs")) and expected.get("prefill_graph_backend") == "breakable"
                    off += expected.get("prefill_graph_backend") == "disabled"
    assert cases > 1000 and graphs >= 20 and off >= 200  # servers with CP graphs and without any prefill graph both compared


def test_model_config_key_names_each_model_config_built():
    assert model_config_key({}) == "None/False"
    assert model_config_key({"enable_multimodal": False, "language_model_only": True}) == "False/True"
