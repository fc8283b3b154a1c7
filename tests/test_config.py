"""Deployment config: presets, overrides, and refusals naming the key."""

import pytest

from cpbcg.config import load_config, preset_names
from cpbcg.errors import ConfigError
from cpbcg.planner.layout import CPStrategy


def test_defaults_and_presets():
    cfg = load_config(None)
    assert (cfg.cp_size, cfg.cp_strategy, cfg.max_padding_factor, cfg.buckets) == (4, CPStrategy.zigzag, 2.0, "sglang-default:8192")
    assert "gpt-oss-120b-cp4" in preset_names()
    for name in preset_names():
        load_config(name)  # every shipped preset loads
    assert load_config("deepseek-v3-cp4-mla").buckets == "sglang-default:2048"


def test_overrides_win_over_file(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("cp_size: 8\nscheduler:\n  chunked_prefill_size: 4096\n  rate: 2.0\n")
    cfg = load_config(str(path), {"cp_size": 2, "scheduler.rate": 9.0, "align_size": None})
    assert cfg.cp_size == 2 and cfg.scheduler.rate == 9.0 and cfg.scheduler.chunked_prefill_size == 4096
    assert cfg.cp_layout.align_rows == 4


@pytest.mark.parametrize(
    "body, message",
    [
        ("cp_size: 4\ncp_sise: 2\n", "cp_sise: unknown key"),
        ("cp_size: zero\n", "cp_size: Input should be a valid integer"),
        ("cp_strategy: ring\n", "cp_strategy: Input should be 'zigzag' or 'interleave'"),
        ("scheduler:\n  chunked_prefill_size: 0\n", "scheduler.chunked_prefill_size: must be a positive token count or -1"),
        ("gates:\n  max_eager:\n    slow: 1\n", "gates.max_eager.slow"),
        ("max_padding_factor: 0.5\n", "max_padding_factor: Input should be greater than or equal to 1"),
        ("- 1\n- 2\n", "expected a mapping of settings, got list"),
        ("cp_size: [4\n", ":2: not valid YAML"),
        ("cp_size: true\n", "cp_size: Input should be a valid integer (got True)"),
        ("cp_size: '4'\n", "cp_size: Input should be a valid integer (got '4')"),
        ("buckets: [8, -1]\n", "buckets.1: Input should be greater than or equal to 1"),
    ],
)
def test_bad_config_names_the_key(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert str(info.value).startswith(str(path)) and message in str(info.value)


def test_bad_override_blames_the_command_line():
    with pytest.raises(ConfigError, match="command line: cp_size: Input should be greater than or equal to 1"):
        load_config("gpt-oss-120b-cp4", {"cp_size": 0})


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError, match="no such config file or preset \\(presets: .*gpt-oss-120b-cp4"):
        load_config("gpt-oss-999b")
