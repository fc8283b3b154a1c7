"""Deployment config: presets, overrides, and refusals naming the key."""

import os

import pytest

from cpbcg.config import load_config, preset_names
from cpbcg.errors import ConfigError
from cpbcg.planner.model.layout import CPStrategy


def test_defaults_and_presets():
    cfg = load_config(None)
    # the default deployment is what 0.5.23 runs on the assumed B200: page 64 (trtllm_mha), chunk 16384
    assert (cfg.cp_size, cfg.cp_strategy, cfg.max_padding_factor, cfg.buckets) == (4, CPStrategy.zigzag, 2.0, "sglang-default:16384")
    assert (cfg.scheduler.page_size, cfg.scheduler.chunked_prefill_size) == (64, 16384)
    assert "gpt-oss-120b-cp4" in preset_names()
    for name in preset_names():
        load_config(name)  # every shipped preset loads
    assert load_config("deepseek-v3-cp4-mla").buckets == "sglang-default:8192"  # MLA caps the default capture at 8192


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


CONFIG_CASES = [
    ("duplicate-key.yaml", ":3: cp_size: duplicate key (first on line 1)"),
    ("duplicate-key-nested.yaml", ":4: scheduler.rate: duplicate key (first on line 2)"),
    ("alias-bomb-scheduler.yaml", ":7: scheduler.f: expands to more than 100,000 values (aliases)"),
    ("alias-bomb-buckets.yaml", ":6: y4: expands to more than 100,000 values (aliases)"),
    ("recursive-alias.yaml", ":1: buckets[1]: alias *b refers to its own enclosing node"),
    ("deep-buckets.yaml", ":1: buckets: nested more than 64 levels deep"),
    ("huge-int-cp-size.yaml", ":1: cp_size: integer of 5000 digits; at most 20 are accepted"),
    ("huge-int-scheduler-key.yaml", ":2: scheduler.max_total_tokens: integer of 100 digits; at most 20 are accepted"),
    ("huge-int-bucket-item.yaml", ":1: buckets[1]: integer of 30 digits; at most 20 are accepted"),
    ("max-total-tokens-20-digits.yaml", ":2: scheduler.max_total_tokens: Input should be less than or equal to 4611686018427387904"),
    ("max-total-tokens-above-option.yaml", ":2: scheduler.max_total_tokens: Input should be less than or equal to 4611686018427387904 (got 4611686018427387905)"),
    ("decay-steps-above-int32.yaml", ":2: scheduler.new_token_ratio_decay_steps: Input should be less than or equal to 2147483647"),
    ("clip-max-new-tokens-above-int32.yaml", ":2: scheduler.clip_max_new_tokens: Input should be less than or equal to 2147483647"),
    ("time-scale-denormal.yaml", ":2: scheduler.time_scale: Input should be greater than or equal to 0.000001"),
    ("tab-indented.yaml", ":2: not valid YAML: found character '\\t' that cannot start any token"),
    ("non-ascii-digit-buckets.yaml", ":1: buckets: 2048,²: bucket 1: '²' is not a positive integer"),
    ("bucket-max-bs-zero.yaml", ":1: buckets: sglang-default:0: max_bs must be between 4 and 4194304, got 0"),
    ("unknown-bucket-list.yaml", ":1: buckets: cannot read 'nope:5': not a list like 2048,2304"),
    ("chunk-above-int32.yaml", ":2: scheduler.chunked_prefill_size: Input should be less than or equal to 4194304"),
    ("align-size-huge.yaml", ":1: align_size: Input should be less than or equal to 4194304 (got 4194305)"),
    ("bucket-above-limit.yaml", ":1: buckets.1: Input should be less than or equal to 4194304 (got 4194305)"),
    ("max-eager-huge.yaml", ":3: gates.max_eager.local_capacity: Input should be less than or equal to 9223372036854775807"),
    ("buckets-below-cp.yaml", ":2: buckets: no capture bucket is >= 2*cp_size=8; nothing to capture"),
    ("prefix-cache-superscript.yaml", ":2: scheduler.prefix_cache: must be off, unlimited, or a positive size in tokens (got '²')"),
    ("python-tag.yaml", ":1: cp_size: the tag !!python/object/apply:os.system is not accepted (plain YAML values only"),
    ("control-character.yaml", ":2: not valid YAML: unacceptable character #x0001: special characters are not allowed"),  # was a traceback
    ("python-name-tag-nested.yaml", ":3: scheduler.rate: the tag !!python/name:os.system is not accepted"),  # issue 32 item 10
    ("not-utf8.yaml", ":2: not UTF-8 text (byte 20)"),
    ("long-string.yaml", ":1: cp_strategy: Input should be 'zigzag' or 'interleave' (got 'zzzz"),
]


@pytest.mark.parametrize("name, message", CONFIG_CASES)
def test_hostile_config_assets(assets, name, message):
    path = assets / "configs" / name
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}{message}"), text
    assert "\n" not in text and len(text) <= 286


def test_every_config_asset_has_a_case(assets):
    assert sorted(p.name for p in (assets / "configs").iterdir()) == sorted(name for name, _ in CONFIG_CASES)


def test_fifo_device_and_directory_configs_are_refused_without_opening(tmp_path):
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)  # opening it for reading would block forever
    for source, message in ((fifo, "is not a regular file"), ("/dev/zero", "is not a regular file"), (tmp_path, "is a directory")):
        with pytest.raises(ConfigError, match=f"^command line: config: {source}: {message}"):
            load_config(str(source))


def test_a_config_above_16_mib_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (16 * 1024 * 1024) + b"\ncp_size: 4\n")
    with pytest.raises(ConfigError, match="big.yaml: larger than the 16 MiB limit"):
        load_config(str(path))


def test_the_bucket_spec_is_validated_at_load_whatever_the_command(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("cp_size: 4\nbuckets: b.yaml\n")
    with pytest.raises(ConfigError, match="cfg.yaml:2: buckets: b.yaml: no such file"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="^command line: buckets: 2048,0: bucket 1: 0 is not a positive integer"):
        load_config(None, {"buckets": "2048,0"})


def test_errors_are_blamed_on_the_layer_that_set_the_key(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("cp_size: 4\nscheduler:\n  rate: 2.0\n")
    with pytest.raises(ConfigError, match=r"^m\.json: max_padding_factor: Input should be less than or equal to 100"):
        load_config(str(path), {"cp_size": 2}, layers=[("m.json", {"max_padding_factor": 500.0})])
    with pytest.raises(ConfigError, match="^command line: scheduler.rate: Input should be greater than or equal to 0.000000001"):
        load_config(str(path), {"scheduler.rate": -1.0}, layers=[("m.json", {"max_padding_factor": 2.0})])
    # a key only the file sets is the file's, with its line, even when overrides share a prefix
    path.write_text("cp_size: 4\nscheduler:\n  rate: -2.0\n")
    with pytest.raises(ConfigError, match=f"^{path}:3: scheduler.rate: "):
        load_config(str(path), {"scheduler.seed": 3, "cp_size_": None})


@pytest.mark.parametrize(
    "override, message",
    [
        ({"scheduler.chunked_prefill_size": 18446744073709551616}, "scheduler.chunked_prefill_size: Input should be less than or equal to 4194304"),
        ({"scheduler.max_prefill_tokens": 2**31}, "scheduler.max_prefill_tokens: Input should be less than or equal to 4194304"),
        ({"scheduler.prefill_max_requests": 2**31}, "scheduler.prefill_max_requests: Input should be less than or equal to 2147483647"),
        ({"scheduler.max_running_requests": 2**31}, "scheduler.max_running_requests: Input should be less than or equal to 2147483647"),
        ({"scheduler.prefix_cache": 2**31}, "scheduler.prefix_cache: must be off, unlimited, or a positive size in tokens"),
        ({"scheduler.seed": 2**63}, "scheduler.seed: Input should be less than or equal to 9223372036854775807"),
        ({"cp_size": 1025}, "cp_size: Input should be less than or equal to 1024"),
        ({"align_size": 2**22 + 1}, "align_size: Input should be less than or equal to 4194304"),
        ({"max_context_size_tokens": 2**31}, "max_context_size_tokens: Input should be less than or equal to 2147483647"),
        ({"max_capture_requests": 2**22 + 1}, "max_capture_requests: Input should be less than or equal to 4194304"),
        ({"gates.max_eager.padding_limit": 2**63}, "gates.max_eager.padding_limit: Input should be less than or equal to 9223372036854775807"),
    ],
)
def test_every_integer_key_has_an_upper_bound(override, message):
    with pytest.raises(ConfigError, match="^command line: " + message.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, override)


def test_a_chunk_below_the_smallest_cp_active_forward_is_refused():
    from cpbcg.config import load_config
    from cpbcg.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^command line: scheduler.chunked_prefill_size: 7 is below 8, the smallest CP-active forward at cp_size 4"):
        load_config(None, {"scheduler.chunked_prefill_size": 7})
    # on the default B200 0.5.23 runs trtllm_mha at page 64: a smaller chunk cannot be cut at a page boundary
    with pytest.raises(ConfigError, match=r"^command line: scheduler.chunked_prefill_size: 8 is below page_size 64: trtllm_mha \(0.5.23 overrides\)"):
        load_config(None, {"scheduler.chunked_prefill_size": 8})
    assert load_config(None, {"scheduler.chunked_prefill_size": 64}).scheduler.chunked_prefill_size == 64
    # H100 with the CP flags but no backend named: 0.5.23 picks fa3 at page 1 (and captures no CP graph, which plan says)
    h100 = {"server.gpu": "H100", "server.args": "--tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag"}
    assert load_config(None, {**h100, "scheduler.chunked_prefill_size": 8}).scheduler.chunked_prefill_size == 8
    assert load_config(None, {**h100, "cp_size": 1, "scheduler.chunked_prefill_size": 1}).scheduler.chunked_prefill_size == 1


def test_the_largest_forward_is_one_rule_for_the_default_list_the_recommendation_and_the_guarantee():
    # "the chunk, else max_prefill_tokens" (issue 28): SchedulerSettings.largest_forward_tokens is its one statement;
    # breaking it, or a consumer that stops taking it, fails here (plan --guarantee once proved 8,192 tokens here)
    import orjson
    from typer.testing import CliRunner

    from cpbcg import api
    from cpbcg.cli import app

    off = {"scheduler.chunked_prefill_size": -1, "scheduler.max_prefill_tokens": 16384}
    cfg, dep = api.load_config_and_deployment(None, off)
    assert dep.scheduler.largest_forward_tokens == 16384 and cfg.buckets == "sglang-default:16384"
    assert api.guarantee(dep, 4).limits.max_tokens == 16384
    on = api.load_config_and_deployment(None, {"scheduler.chunked_prefill_size": 4096, "scheduler.max_prefill_tokens": 16384})
    assert on[1].scheduler.largest_forward_tokens == 4096 and on[0].buckets == "sglang-default:4096"
    result = CliRunner().invoke(app, ["plan", "--chunked-prefill-size", "-1", "--max-prefill-tokens", "16384", "--guarantee",
                                      "--max-requests", "4", "-f", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert (doc["max_tokens"], doc["max_requests"], doc["ok"]) == (16384, 4, True) and max(doc["buckets"]) > 16384


def test_a_bucket_spec_too_long_for_a_file_name_is_blamed_on_its_key(tmp_path):
    # a name longer than the file system allows is no flags file (ENAMETOOLONG was raised unlocated); found by the fuzzer,
    # seed 90210, case 426
    path = tmp_path / "cfg.yaml"
    path.write_text("cp_size: 4\ncp_strategy: zigzag\nbuckets: 'x" + "y" * 300 + "'\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3: buckets: cannot read 'xy+"):
        load_config(str(path), {})


def test_an_unknown_config_key_close_to_a_known_one_is_named(tmp_path):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    def error(text: str) -> str:
        path = tmp_path / "c.yaml"
        path.write_text(text)
        result = CliRunner().invoke(app, ["plan", "-c", str(path)])
        assert result.exit_code == 2, result.output
        return result.stderr.strip()

    assert error("cp_sise: 8\n").endswith("c.yaml:1: cp_sise: unknown key (got 8) (did you mean cp_size?)")
    assert error("scheduler:\n  page_sise: 16\n").endswith(
        "c.yaml:2: scheduler.page_sise: unknown key (got 16) (did you mean scheduler.page_size?)")
    assert error("zzz: 1\n").endswith("c.yaml:1: zzz: unknown key (got 1)")  # nothing close: no guess
