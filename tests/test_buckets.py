"""Bucket lists: SGLang defaults (domain §5), explicit lists and files."""

import orjson
import pytest

from cpbcg.errors import ConfigError
from cpbcg.planner.buckets import parse_bucket_spec, sglang_default_buckets


@pytest.mark.parametrize("max_bs, count", [(2048, 42), (4096, 50), (8192, 58), (16384, 74)])
def test_default_counts(max_bs, count):
    buckets = sglang_default_buckets(max_bs)
    assert len(buckets) == count
    assert buckets[0] == 4 and buckets[-1] == max_bs
    assert buckets == sorted(set(buckets))


def test_default_grid_segments():
    b = sglang_default_buckets(8192)
    assert b[:9] == [4, 8, 12, 16, 20, 24, 28, 32, 48]
    assert 4096 in b and 4352 not in b and 4608 in b and 5120 in b


def test_sglang_default_follows_the_released_generator_without_appending():
    # SGLang's _generate_piecewise_cuda_graph_tokens keeps the grid <= max_bs and stops there
    assert sglang_default_buckets(3000)[-2:] == [2560, 2816]
    assert parse_bucket_spec("sglang-default:3000")[-1] == 2816
    assert parse_bucket_spec("sglang-legacy:3000") == parse_bucket_spec("sglang-default:3000")
    assert len(parse_bucket_spec("sglang-default:3000")) == 45  # 8 + 14 + 8 + 8 + 7 (1280..2816 step 256)


def test_sglang_append_adds_the_off_grid_max_bs():
    assert sglang_default_buckets(3000, append_max_bs=True)[-2:] == [2816, 3000]
    assert parse_bucket_spec("sglang-append:3000")[-3:] == [2560, 2816, 3000]
    assert parse_bucket_spec("sglang-append:8192") == parse_bucket_spec("sglang-default:8192")  # on-grid: same list


def test_spec_forms(tmp_path):
    assert parse_bucket_spec("2304, 2048,2048") == [2048, 2304]
    assert parse_bucket_spec("sglang-default") == sglang_default_buckets(8192)
    assert parse_bucket_spec([16, 8]) == [8, 16]
    (tmp_path / "b.yaml").write_text("- 4096\n- 2048\n")
    assert parse_bucket_spec(str(tmp_path / "b.yaml")) == [2048, 4096]
    (tmp_path / "own.json").write_bytes(orjson.dumps({"capture_num_tokens": [1024, 512]}))
    assert parse_bucket_spec(str(tmp_path / "own.json")) == [512, 1024]
    (tmp_path / "sg.json").write_bytes(orjson.dumps({"prefill": {"bs": [64, 32], "max_bs": 64}}))
    assert parse_bucket_spec(str(tmp_path / "sg.json")) == [32, 64]
    (tmp_path / "sgmax.json").write_bytes(orjson.dumps({"prefill": {"max_bs": 2048}}))
    assert len(parse_bucket_spec(str(tmp_path / "sgmax.json"))) == 42


@pytest.mark.parametrize(
    "spec, message",
    [
        ("sglang-default:lots", "must be a token count"),
        ("2048,-1", "2048,-1: bucket 1: '-1' is not a positive integer"),
        ("warp-speed", "cannot read 'warp-speed': not a list like 2048,2304, a file, or one of sglang-default:MAX"),
        ("missing.yaml", "missing.yaml: no such file"),
        ("sglang-default:2", "max_bs must be between 4 and 4194304, got 2"),
        ("sglang-default:99999999999", "max_bs must be between 4 and 4194304"),
        ("sglang-default:", "the part after ':' must be a token count"),
        ("", "the bucket spec is empty"),
        ("99999999999999999999", "bucket 0: 99999999999999999999 is above the largest accepted value 4194304"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(ConfigError, match=message):
        parse_bucket_spec(spec)


@pytest.mark.parametrize(
    "body, message",
    [
        ("[1, 2", "not valid JSON"),
        ('{"a": 1}', "expected a list of buckets"),
        ('[]', "the bucket list is empty"),
        ('[16, 0]', "bucket 1: 0 is not a positive integer"),
        ('{"prefill": {}}', "prefill needs 'bs' or 'max_bs'"),
    ],
)
def test_bad_files(tmp_path, body, message):
    path = tmp_path / "b.json"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        parse_bucket_spec(str(path))
