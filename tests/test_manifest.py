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
    ("unknown-cp-strategy.json", "bad CP or capture settings: 'ring' is not a valid CPStrategy"),
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
