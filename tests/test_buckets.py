"""Bucket lists: SGLang defaults (domain §5), explicit lists and files."""

import os

import orjson
import pytest

from cpbcg.errors import ConfigError
from cpbcg.bucket_files import resolve_bucket_spec
from cpbcg.planner.model.bucket_spec import parse_bucket_spec, parse_positive_int
from cpbcg.engines.sglang.capture_lists import LISTS, sglang_default_buckets


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
    assert resolve_bucket_spec("sglang-default:3000")[-1] == 2816
    assert resolve_bucket_spec("sglang-legacy:3000") == resolve_bucket_spec("sglang-default:3000")
    assert len(resolve_bucket_spec("sglang-default:3000")) == 45  # 8 + 14 + 8 + 8 + 7 (1280..2816 step 256)


def test_sglang_append_adds_the_off_grid_max_bs():
    assert sglang_default_buckets(3000, append_max_bs=True)[-2:] == [2816, 3000]
    assert resolve_bucket_spec("sglang-append:3000")[-3:] == [2560, 2816, 3000]
    assert resolve_bucket_spec("sglang-append:8192") == resolve_bucket_spec("sglang-default:8192")  # on-grid: same list


def test_spec_forms(tmp_path):
    assert resolve_bucket_spec("2304, 2048,2048") == [2048, 2048, 2304]  # SGLang drops the repeat; the capture note says so
    assert resolve_bucket_spec("sglang-default") == sglang_default_buckets(8192)
    assert resolve_bucket_spec([16, 8]) == [8, 16]
    (tmp_path / "b.yaml").write_text("- 4096\n- 2048\n")
    assert resolve_bucket_spec(str(tmp_path / "b.yaml")) == [2048, 4096]
    (tmp_path / "own.json").write_bytes(orjson.dumps({"capture_num_tokens": [1024, 512]}))
    assert resolve_bucket_spec(str(tmp_path / "own.json")) == [512, 1024]
    (tmp_path / "sg.json").write_bytes(orjson.dumps({"prefill": {"bs": [64, 32], "max_bs": 64}}))
    assert resolve_bucket_spec(str(tmp_path / "sg.json")) == [32, 64]
    (tmp_path / "sgmax.json").write_bytes(orjson.dumps({"prefill": {"max_bs": 2048}}))
    assert len(resolve_bucket_spec(str(tmp_path / "sgmax.json"))) == 42


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
        resolve_bucket_spec(spec)


@pytest.mark.parametrize(
    "body, message",
    [
        ("[1, 2", "not valid JSON"),
        ('{"a": 1}', "b.json:1: expected a list of buckets, .* got a mapping with keys a$"),
        ('[]', "b.json:1: the bucket list is empty"),
        ('[16,\n 0]', "b.json:2: bucket 1: 0 is not a positive integer"),
        ('{"prefill": {}}', "b.json:1: prefill: needs 'bs' .* or 'max_bs'"),
        ('{"prefill":\n {"max_bs": -1}}', "b.json:2: prefill.max_bs: -1 is not a positive integer"),
        ('{"capture_num_tokens":\n [8,\n "x"]}', "b.json:3: bucket 1: x is not a positive integer"),
        ('{"cp_size": 4}', "b.json:1: expected a list of buckets, .*this is a deployment config: pass it with --config"),
    ],
)
def test_bad_files(tmp_path, body, message):
    path = tmp_path / "b.json"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        resolve_bucket_spec(str(path))


@pytest.mark.parametrize(
    "name, body, message",
    [
        ("bk.txt", "x: 1\n", "bk.txt:1: expected a list of buckets"),
        ("c.yaml", "- 8\n- 16\n", r"c.yaml:1: expected a mapping of settings, got list \(a bucket list: pass it with --buckets\)"),
        ("f.txt", '--cuda-graph-bs-prefill "8\n', "f.txt:1: not a flags line a shell can split"),
        ("e.yaml", "capture_num_tokens: [8, 16]\n", "e.yaml:1: capture_num_tokens: unknown key .*pass it with --buckets"),
    ],
)
def test_every_file_error_names_its_line(tmp_path, name, body, message):
    from cpbcg.config import load_config

    path = tmp_path / name
    path.write_text(body)
    option = "config" if name[0] in "ce" else "buckets"
    with pytest.raises(ConfigError, match=message):
        load_config(str(path)) if option == "config" else load_config(None, {"buckets": str(path)})


def test_a_directory_as_config_names_the_option(tmp_path):
    from cpbcg.config import load_config

    with pytest.raises(ConfigError, match="^command line: config: .*: is a directory, not a file$"):
        load_config(str(tmp_path))


def test_a_spec_that_looks_like_a_list_is_a_list_however_long():
    spec = ",".join(str(b) for b in range(8, 3993, 8))  # $(seq -s, 8 8 3992): 499 buckets, 1,900+ characters
    assert resolve_bucket_spec(spec) == list(range(8, 3993, 8))
    assert resolve_bucket_spec("4096") == [4096] and resolve_bucket_spec(" 16 , 8 ,") == [8, 16]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("2048,\u00b2", "2048,\u00b2: bucket 1: '\u00b2' is not a positive integer"),  # '²'.isdigit() is True
        ("2048,\u0663", "bucket 1: '\u0663' is not a positive integer"),  # Arabic-Indic three: int() accepts it
        ("sglang-default:\u00b2", "sglang-default:\u00b2: the part after ':' must be a token count"),
        ("sglang-default:\u0663\u0663", "the part after ':' must be a token count"),
        ("pow2:" + "9" * 5000, "the part after ':' must be a token count"),
        ("8," + "9" * 5000, "is not a positive integer"),
        ("sglang-default:0", "sglang-default:0: max_bs must be between 4 and 4194304, got 0"),
        ("/dev/zero", "/dev/zero: is not a regular file"),
        ("x" * 5000, "cannot read 'xxxxxxxxxxxx"),  # too long for a file name: no OSError
        ("a\0b.yaml", "a\\x00b.yaml: cannot read: the name holds a NUL character"),
    ],
)
def test_hostile_specs(spec, message):
    with pytest.raises(ConfigError) as info:
        resolve_bucket_spec(spec)
    assert message in str(info.value) and len(str(info.value)) <= 286


def test_bucket_files_are_read_safely(tmp_path):
    fifo = tmp_path / "b.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="b.yaml: is not a regular file"):
        resolve_bucket_spec(str(fifo))
    cases = {
        "dup.json": ('{"prefill": {"bs": [8],\n "bs": [16]}}', "dup.json:2: prefill.bs: duplicate key (first on line 1)"),
        "dup.yaml": ("capture_num_tokens: [8]\ncapture_num_tokens: [16]\n", "dup.yaml:2: capture_num_tokens: duplicate key (first on line 1)"),
        "deep.json": ("[" * 5000 + "]" * 5000, "deep.json:1: not valid JSON (depth limit exceeded"),
        "deep.yaml": ("[" * 100 + "]" * 100, "deep.yaml:1: nested more than 64 levels deep"),
        "tab.yaml": ("prefill:\n\tbs: [8]\n", "tab.yaml:2: not valid YAML: found character '\\t' that cannot start any token"),
        "digits.yaml": ("- 8\n- 1" + "0" * 30 + "\n", "digits.yaml:2: [1]: integer of 31 digits"),
        "big.json": ("[8, 1" + "0" * 30 + "]", "big.json:1: [1]: integer of 31 digits"),
        "bool.json": ("[8, true]", "bool.json:1: bucket 1: True is not a positive integer"),
    }
    for name, (body, message) in cases.items():
        (tmp_path / name).write_text(body)
        with pytest.raises(ConfigError) as info:
            resolve_bucket_spec(str(tmp_path / name))
        assert str(info.value).startswith(str(tmp_path / name)) and message in str(info.value), str(info.value)
        assert "\n" not in str(info.value)


def test_parse_positive_int_is_ascii_only_and_bounded():
    assert parse_positive_int(" 42 ", "x") == 42 and parse_positive_int("0", "x", allow_zero=True) == 0
    for text, message in [
        ("\u00b2", "x: '\u00b2' is not a positive integer"),
        ("\uff14", "x: '\uff14' is not a positive integer"),  # fullwidth 4
        ("-3", "x: '-3' is not a positive integer"),
        ("0", "x: 0 is not a positive integer"),
        ("1" * 21, "is not a positive integer"),
        ("4194305", "x: 4194305 is above the largest accepted value 4194304"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_positive_int(text, "x", maximum=1 << 22)
        assert message in str(info.value) and str(info.value).startswith("x: "), str(info.value)


def test_a_flags_file_error_names_the_file_once(tmp_path):
    path = tmp_path / "flags.txt"
    path.write_text("--cuda-graph-bs-prefill 0 16\n")
    with pytest.raises(ConfigError) as caught:
        resolve_bucket_spec(str(path))
    assert str(caught.value) == f"{path}:1: bucket 0: 0 is not a positive integer"
    path.write_text("--cuda-graph-bs-prefill 16 x\n")
    with pytest.raises(ConfigError) as caught:
        resolve_bucket_spec(str(path))
    assert str(caught.value) == f"{path}:1: --cuda-graph-bs-prefill: 'x' is not a token count"


def test_the_planner_reads_no_bucket_file(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("[2048, 4096]\n")
    assert resolve_bucket_spec(str(path)) == [2048, 4096]
    with pytest.raises(ConfigError, match="cannot read '.*': not a list like 2048,2304, a file"):
        parse_bucket_spec(str(path), lists=LISTS)  # the planner parses what the input edge read; it opens nothing
    assert parse_bucket_spec("2304,2048", lists=LISTS) == [2048, 2304] and parse_bucket_spec("pow2:64", lists=LISTS)[-1] == 64


def test_a_repeated_bucket_is_noted_from_a_list_and_from_a_file(tmp_path):
    from cpbcg.planner.model.layout import CPLayout
    from cpbcg.planner.model.capacity import capture_buckets

    (tmp_path / "dup.yaml").write_text("- 100\n- 100\n- 200\n")
    for spec in ("100,50,100", str(tmp_path / "dup.yaml")):
        prepared = capture_buckets(resolve_bucket_spec(spec), CPLayout(4))
        assert "1 duplicate dropped" in prepared.note, prepared.note
    assert capture_buckets([100, 100, 52, 50], CPLayout(4)).note.endswith("50 -> 52; 2 duplicates dropped")
    assert capture_buckets([100, 52], CPLayout(4)).note is None


def test_the_engine_hands_the_core_its_lists_through_the_seam():
    # the core holds no SGLang list: SGLang 0.5.23's default list and its named lists are the
    # engine's (`capture_lists.LISTS`), handed to the optimiser in `RULES.lists` and to the spec parser
    import cpbcg.planner.model.bucket_lists as core
    from cpbcg.engines.sglang.export import RULES

    assert RULES.lists is LISTS and LISTS.default is sglang_default_buckets and LISTS.default_max_tokens == 8192
    assert list(LISTS.named) == ["sglang-default", "pow2", "vllm", "trtllm", "uniform", "sglang-append", "sglang-legacy"]
    assert LISTS.baselines == ("sglang-default", "pow2", "vllm", "trtllm", "uniform")
    assert LISTS.not_a_spec == ("not a list like 2048,2304, a file, or one of sglang-default:MAX, pow2:MAX, vllm:MAX, trtllm:MAX, "
                                "uniform:MAX, sglang-append:MAX, sglang-legacy:MAX")
    assert not [name for name in vars(core) if "sglang" in name.lower()]
    assert parse_bucket_spec("sglang-default", lists=LISTS) == sglang_default_buckets(8192)
    assert len(parse_bucket_spec("uniform:8192", lists=LISTS)) == len(sglang_default_buckets(8192)) == 58
    with pytest.raises(ConfigError, match="the largest bucket must be >= 1 token, got 0"):  # the peer's own check first
        parse_bucket_spec("uniform:0", lists=LISTS)
