"""Capture manifests (`cpbcg.manifest`): the valid asset loads; each bad asset is refused with a
clear one-line message (and `replay-check --manifest` exits 2 on it)."""


import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.errors import ManifestError
from cpbcg.manifest import load_manifest, manifest_bytes
from cpbcg.planner.capacity import CaptureLayout
from cpbcg.planner.layout import CPStrategy

BAD = [
    ("wrong-schema-version.json", "schema_version 2 is not supported (expected 1)"),
    ("missing-buckets.json", "buckets: no captured buckets"),
    ("missing-cp-size.json", "missing key(s) cp_size"),
    ("contradicting-capacity.json", "bucket 2048: local_rows 520 contradicts the capture model (cp_size 4, zigzag, align 8, single_request capture gives 512)"),
    ("non-integer-local-rows.json", "buckets[1].local_rows: '576' is not a positive integer"),
    ("not-json.json", "not-json.json:2: manifest is not valid JSON"),
    ("unknown-cp-strategy.json", "unknown-cp-strategy.json: cp_strategy: 'ring' is not one of zigzag, interleave"),
    ("bucket-not-verified.json", "bucket 2304 failed verification in the capture; recapture it or drop it"),
    ("negative-replay-ms.json", "buckets[2].replay_ms: -0.5 is not a finite number >= 0 (bucket 2048)"),
    ("negative-eager-ms.json", "buckets[0].eager_ms: -2.1 is not a finite number >= 0 (bucket 8192)"),
    ("negative-capture-s.json", "buckets[3].capture_s: -0.01 is not a finite number >= 0 (bucket 128)"),
    ("negative-graph-bytes.json", "buckets[1].graph_bytes: -4096 is not a finite number >= 0 (bucket 2304)"),
    ("non-finite-replay-ms.json", "non-finite-replay-ms.json:32: manifest is not valid JSON (number is infinity"),  # the parser refuses it
]


def test_valid_manifest_loads(assets):
    manifest = load_manifest(assets / "manifests" / "valid.json")
    assert manifest.table().as_dict() == {128: 32, 2048: 512, 2304: 576, 8192: 2048}
    assert manifest.cp_layout.cp_size == 4 and manifest.cp_layout.strategy is CPStrategy.zigzag and manifest.cp_layout.align_rows == 8
    assert manifest.capture_spec.layout is CaptureLayout.single_request
    assert manifest.fitted_cost_ms() is None  # a dry run has no timings


@pytest.mark.parametrize("name, message", BAD)
def test_bad_manifest_is_refused(assets, name, message):
    with pytest.raises(ManifestError) as info:
        load_manifest(assets / "manifests" / name)
    assert message in str(info.value) and str(info.value).startswith(str(assets / "manifests" / name))


@pytest.mark.parametrize("name, message", BAD)
def test_replay_check_refuses_bad_manifest_with_exit_2(assets, tmp_path, name, message):
    junit = tmp_path / "report.xml"
    result = CliRunner().invoke(app, ["replay-check", "--manifest", str(assets / "manifests" / name), "--junit", str(junit)])
    assert result.exit_code == 2
    assert result.stderr.startswith("cpbcg: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not junit.exists()


def mutated(assets, tmp_path, change):
    data = orjson.loads((assets / "manifests" / "valid.json").read_bytes())
    change(data)
    path = tmp_path / "m.json"
    path.write_bytes(manifest_bytes(data))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["buckets"].append(dict(d["buckets"][2])), "buckets[4]: bucket 2048 is recorded twice"),
        (lambda d: d.update(cp_size=True), "cp_size: True is not a positive integer"),
        (lambda d: d.update(cp_size="4"), "cp_size: '4' is not a positive integer"),
        (lambda d: d.update(align_size=0), "align_size: 0 is not a positive integer"),
        (lambda d: d["buckets"].append({"capture_num_tokens": 4, "local_rows": 8}), "bucket 4 is below 2*cp_size=8 and cannot be captured with zigzag"),
        (lambda d: d.update(capture_layout="context_bounded"), "the capture model refuses these settings: context_bounded capture needs max_context_size_tokens"),
        (lambda d: d["buckets"].append("x"), "buckets[4]: expected an object, got str"),
        (lambda d: d.update(max_padding_factor=0.5), "max_padding_factor: 0.5 is not a number >= 1"),
        (lambda d: d.update(schema_version="1"), "schema_version '1' is not supported"),
    ],
)
def test_more_manifest_gaps_are_refused(assets, tmp_path, change, message):
    with pytest.raises(ManifestError, match=r"m\.json: ") as info:
        load_manifest(mutated(assets, tmp_path, change))
    assert message in str(info.value)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "0.8", True])
@pytest.mark.parametrize("key", ["replay_ms", "eager_ms", "capture_s", "graph_bytes"])
def test_non_finite_or_non_numeric_measurements_are_refused(assets, tmp_path, monkeypatch, key, value):
    """JSON files cannot hold inf/nan (orjson refuses them), but a parser that accepts them must
    not slip one past the check: feed the loaded document in directly."""
    path = mutated(assets, tmp_path, lambda d: None)
    data = orjson.loads(path.read_bytes())
    data["buckets"][1][key] = value
    monkeypatch.setattr("cpbcg.manifest.load_json", lambda *args, **kwargs: data)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert f"m.json: buckets[1].{key}: {value!r} is not a finite number >= 0 (bucket 2304)" in str(info.value)


def test_null_and_zero_measurements_and_unmeasured_verification_load(assets, tmp_path):
    def change(d):
        d["buckets"][0].update(replay_ms=0, eager_ms=0.0, capture_s=None, graph_bytes=0, verified=None)

    assert load_manifest(mutated(assets, tmp_path, change)).table().as_dict()[8192] == 2048


def test_context_bounded_manifest_with_matching_capacities_loads(assets, tmp_path):
    def change(d):
        d.update(capture_layout="context_bounded", max_context_size_tokens=1024, max_capture_requests=16)
        # 8192 = 8 x 1024 → 8 x 256 rows; 2304 = 1024 + 1024 + 256 → 576; 2048 = 2 x 1024 → 512; 128 → 32.
        for record, rows in zip(d["buckets"], (2048, 576, 512, 32)):
            record["local_rows"] = rows

    manifest = load_manifest(mutated(assets, tmp_path, change))
    assert manifest.table().as_dict()[2304] == 576


def test_unreadable_manifest(tmp_path):
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_manifest(tmp_path / "absent.json")
