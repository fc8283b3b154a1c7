"""The flags `cpbcg plan --emit sglang` writes, judged by SGLang 0.5.23's own code (from the wheel).

0.5.23's `handle_context_parallelism` (the start-up checks for prefill CP) and
`supports_prefill_cp_bcg` run under stubs on the emitted flags; cpbcg's restatement
(`cpbcg.engines.sglang.startup.check_server_flags`) must agree with them on those flags and on broken ones.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import shlex
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from cpbcg.planner.deployment import Deployment
from cpbcg.engines.sglang.export import deploy_flags
from cpbcg.planner.model.layout import CPLayout
from cpbcg.engines.sglang.startup import check_flag_words
from cpbcg.engines.sglang.release import SGLANG_VERSION
from sglang_oracle import SGLANG_WHEEL_VERSION, definitions, prefill_cp_bcg, sglang_wheel  # noqa: F401 - fixture


def server_args(words: list[str], architecture: str = "LlamaForCausalLM") -> SimpleNamespace:
    """The server arguments a command line sets (0.5.23 defaults otherwise)."""
    args = SimpleNamespace(enable_prefill_cp=False, attn_cp_size=1, tp_size=1, pp_size=1, dp_size=1, ep_size=1,
                           attn_dp_size=1, moe_dp_size=1, cp_strategy=None, prefill_attention_backend=None,
                           decode_attention_backend=None, enable_aiter_allreduce_fusion=False, model_path="m",
                           architecture=architecture)
    for i, word in enumerate(words):
        key = word[2:].replace("-", "_")
        if word == "--enable-prefill-cp":
            args.enable_prefill_cp = True
        elif word.startswith("--") and hasattr(args, key):
            value = words[i + 1]
            setattr(args, key, int(value) if value.isdigit() else value)
    return args


def sglang_verdict(args: SimpleNamespace, monkeypatch) -> tuple[str | None, bool]:
    """(start-up error or None, supports_prefill_cp_bcg) as 0.5.23 evaluates them."""
    ns: dict = {"IntEnum": enum.IntEnum, "Any": object, "dataclass": dataclasses.dataclass, "field": dataclasses.field}
    view = lambda a: a  # noqa: E731 - the stub server args are their own resolved view
    ns.update(resolving_view=view, resolved_view=view, run_hook=lambda *a: None, validate_prefill_cp_platform=None,
              attention_backends_of=lambda a: (a.prefill_attention_backend, a.decode_attention_backend),
              parse_connector_type=lambda path: "instance", ConnectorType=SimpleNamespace(INSTANCE="instance"),
              model_config_of=lambda a: SimpleNamespace(hf_config=SimpleNamespace(architectures=[a.architecture])))
    prefill_cp_bcg(ns)
    definitions("sglang/srt/arg_groups/parallel_hook.py", ["handle_context_parallelism"], ns)
    base = types.ModuleType("sglang.srt.layers.cp.base")
    base.init_cp_strategy = lambda **k: None
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.cp"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.cp.base", base)
    try:
        ns["handle_context_parallelism"](args)
        error = None
    except (AssertionError, ValueError) as exc:
        error = str(exc)
    return error, bool(ns["supports_prefill_cp_bcg"](args))


def emitted(cp_size: int, strategy: str) -> list[str]:
    return shlex.split(deploy_flags([4096, 8192], Deployment(cp=CPLayout(cp_size, strategy))))


def test_the_oracle_is_the_modelled_release():
    assert SGLANG_WHEEL_VERSION == SGLANG_VERSION == "0.5.23"


@pytest.mark.parametrize("cp_size", [2, 4, 8])
def test_emitted_zigzag_flags_start_the_server_with_cp_graphs(sglang_wheel, monkeypatch, cp_size):
    words = emitted(cp_size, "zigzag")
    assert words[words.index("--tp-size") + 1] == str(cp_size)
    assert words[words.index("--prefill-attention-backend") + 1] == "trtllm_mha"
    assert sglang_verdict(server_args(words), monkeypatch) == (None, True)
    assert check_flag_words(words).ok


def test_emitted_interleave_flags_need_glm5_next(sglang_wheel, monkeypatch):
    words = emitted(4, "interleave")
    assert sglang_verdict(server_args(words, "Glm5NextForConditionalGeneration"), monkeypatch) == (None, True)
    error, supported = sglang_verdict(server_args(words), monkeypatch)
    assert error is None and not supported


@pytest.mark.parametrize("edit, refused, graphs", [
    ({"--tp-size": None}, True, False),                       # the old emit: TP 1, CP 4
    ({"--tp-size": "8"}, False, False),                        # starts, attn_cp_size != tp_size
    # no backend named: 0.5.23 picks trtllm_mha on SM100 and CP graphs are captured; the default
    # backend is compared with 0.5.23's get_default_attn_backend in test_server_resolution_conformance
    ({"--prefill-attention-backend": "fa3"}, False, False),
    ({"--pp-size": "2"}, False, False),
    ({"--cp-strategy": None}, True, False),
])
def test_cpbcg_check_agrees_with_sglang_on_broken_flags(sglang_wheel, monkeypatch, edit, refused, graphs):
    words = emitted(4, "zigzag")
    for flag, value in edit.items():
        if flag in words:
            i = words.index(flag)
            del words[i:i + 2]
        if value is not None:
            words += [flag, value]
    error, supported = sglang_verdict(server_args(words), monkeypatch)
    assert (error is not None, supported) == (refused, graphs)
    check = check_flag_words(words)
    assert (bool(check.refuses_start), not check.no_cp_graph) == (refused, graphs)


# --- the commands say what the server would do with a flags file ------------------------------

OLD_EMIT = ("--cuda-graph-bs-prefill 2048 4096 8192 --cuda-graph-max-bs-prefill 8192 --enable-prefill-cp "
            "--attn-cp-size 4 --cp-strategy zigzag --chunked-prefill-size 8192 --max-prefill-tokens 16384\n")


@pytest.mark.parametrize("command", ["plan", "replay-check"])
def test_commands_warn_when_the_flags_would_not_start_the_server(tmp_path, command):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    old = tmp_path / "old.txt"
    old.write_text(OLD_EMIT)
    extra = ["--report-only"] if command == "replay-check" else []
    result = CliRunner().invoke(app, [command, "--buckets", str(old), *extra])
    assert result.exit_code == 0, result.output
    assert ("cpbcg: warning: SGLang 0.5.23 would refuse to start with these flags: tp_size must be divisible by "
            "attn_cp_size (--tp-size 1, --attn-cp-size 4)") in result.stderr
    assert "would capture no CP graph with these flags: --attn-cp-size 4 differs from --tp-size 1" in result.stderr
    new = tmp_path / "new.txt"
    new.write_text(deploy_flags([2048, 4096, 8192], Deployment()) + "\n")
    result = CliRunner().invoke(app, [command, "--buckets", str(new), *extra])
    assert result.exit_code == 0, result.output
    assert "SGLang 0.5.23 would" not in result.stderr


def test_a_configured_tp_other_than_cp_is_refused_with_the_rule(tmp_path):
    from cpbcg.config import load_config
    from cpbcg.errors import ConfigError

    config = tmp_path / "c.yaml"
    config.write_text("cp_size: 4\ntp_size: 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(config))
    assert str(err.value) == (
        f"{config}:2: tp_size: 8 differs from cp_size 4: SGLang 0.5.23 would capture no CP graph: --attn-cp-size 4 "
        "differs from --tp-size 8 (set tp_size: 4)")
    config.write_text("cp_size: 4\ntp_size: 2\n")
    with pytest.raises(ConfigError, match="would refuse to start: tp_size must be divisible by attn_cp_size"):
        load_config(str(config))
    config.write_text("cp_size: 4\ntp_size: 4\n")
    assert load_config(str(config)).tp_size == 4


@pytest.mark.parametrize("strategy, architecture", [("zigzag", "LlamaForCausalLM"), ("interleave", "Glm5NextForConditionalGeneration")])
def test_plan_emit_sglang_passes_sglang_start_up_and_cp_graph_checks(sglang_wheel, monkeypatch, tmp_path, strategy, architecture):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"extend_seq_lens": [{n}, {n // 3 + 16}]}}\n' for n in range(300, 9000, 700)))
    out = tmp_path / "flags.txt"
    model = tmp_path / "config.json"  # the model the flags are for: interleave CP graphs exist for GLM-5 Next only
    llama = json.loads((Path(__file__).parents[1] / "cpbcg" / "configs" / "models" / "llama-3.1-70b.config.json").read_text())
    model.write_text(json.dumps({**llama, "architectures": [architecture]}))
    result = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--cp-strategy", strategy, "--model-config", str(model),
                                      "--emit", "sglang", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sglang_verdict(server_args(shlex.split(out.read_text()), architecture), monkeypatch) == (None, True)


def test_the_release_is_named_in_help_report_header_and_json():
    from typer.testing import CliRunner

    from cpbcg.cli import app

    assert "Models SGLang 0.5.23." in CliRunner().invoke(app, ["--help"]).output
    text = CliRunner().invoke(app, ["plan", "--no-recommend"])
    assert "| SGLang 0.5.23" in text.stdout
    doc = CliRunner().invoke(app, ["plan", "--no-recommend", "--format", "json"])
    assert '"sglang_version": "0.5.23"' in doc.stdout


def test_replay_check_refuses_flags_that_capture_no_cp_graph(tmp_path):
    """A CI gate over graphs the server would never capture cannot pass: exit 2, one line (the
    flags without --enable-prefill-cp), unless --report-only asks for the report alone."""
    from typer.testing import CliRunner

    from cpbcg.cli import app

    flags = tmp_path / "flags.txt"
    flags.write_text(deploy_flags([2048, 4096, 8192], Deployment()).replace("--enable-prefill-cp ", "") + "\n")
    result = CliRunner().invoke(app, ["replay-check", "--buckets", str(flags), "--min-coverage", "0"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    # without --enable-prefill-cp at attn_cp_size 4 there is no CP graph, so 0.5.23 disables the prefill graph
    # (disable_breakable_cudagraph_if_incompatible): nothing to gate, said first
    assert line.startswith("cpbcg: error: replay-check: 0.5.23 captures no prefill graph for this launch: CP without CP graphs on B200")
    result = CliRunner().invoke(app, ["replay-check", "--buckets", str(flags), "--report-only"])
    assert result.exit_code == 0 and "would capture no CP graph with these flags" in result.stderr
    old = tmp_path / "old.txt"
    old.write_text(OLD_EMIT)
    result = CliRunner().invoke(app, ["replay-check", "--buckets", str(old), "--min-coverage", "0"])
    assert result.exit_code == 2 and "would refuse to start with these flags (tp_size must be divisible" in result.stderr
