"""Capture manifests (`cpbcg.manifest`): the valid asset loads; each bad asset is refused with a
clear one-line message (and `replay-check --manifest` exits 2 on it)."""


import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.errors import ManifestError
from cpbcg.manifest import load_manifest, manifest_bytes
from cpbcg.planner.model.capacity import CaptureLayout
from cpbcg.planner.model.layout import CPStrategy

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
    ("model-null.json", "model-null.json: model: expected an object, got null"),
    ("model-list.json", "model-list.json: model: expected an object, got list"),
    ("model-string.json", "model-string.json: model: expected an object, got str"),
    ("model-hidden-layers-string.json", "model.num_hidden_layers: 'x' is not a positive integer <= 2147483647"),
    ("model-hidden-layers-zero.json", "model.num_hidden_layers: 0 is not a positive integer <= 2147483647"),
    ("model-hidden-layers-negative.json", "model.num_hidden_layers: -1 is not a positive integer <= 2147483647"),
    ("model-hidden-layers-true.json", "model.num_hidden_layers: True is not a positive integer <= 2147483647"),
    ("model-num-layers-zero.json", "model.num_layers: 0 is not a positive integer <= 2147483647"),
]


def test_valid_manifest_loads(assets):
    manifest = load_manifest(assets / "manifests" / "valid.json")
    assert manifest.table().as_dict() == {128: 32, 2048: 512, 2304: 576, 8192: 2048}
    assert manifest.cp_layout.cp_size == 4 and manifest.cp_layout.strategy is CPStrategy.zigzag and manifest.cp_layout.align_rows == 8
    assert manifest.capture_spec.layout is CaptureLayout.single_request
    assert manifest.fitted_cost_ms() is None  # a dry run has no timings


def test_a_manifest_reads_back_typed_and_merges_in_one_place(assets):
    from cpbcg.api import load_config_and_deployment
    from cpbcg.manifest import ManifestBucket

    manifest = load_manifest(assets / "manifests" / "valid.json")
    assert manifest.dry_run is False and all(isinstance(b, ManifestBucket) for b in manifest.buckets)
    assert all(b.replay_ms is None for b in manifest.buckets) and manifest.num_layers is not None
    assert [b.capture_num_tokens for b in manifest.buckets] == [8192, 2304, 2048, 128]  # capture order, largest first
    layer = manifest.config_layer()
    assert layer["buckets"] == [128, 2048, 2304, 8192] and layer["cp_size"] == 4 and layer["cp_strategy"] == "zigzag"
    _, dep = load_config_and_deployment(None, {}, manifest=manifest)
    assert dep.buckets == (128, 2048, 2304, 8192) and dep.cp == manifest.cp_layout and dep.capture == manifest.capture_spec


@pytest.mark.parametrize("name, message", BAD)
def test_bad_manifest_is_refused(assets, name, message):
    with pytest.raises(ManifestError) as info:
        load_manifest(assets / "manifests" / name)
    assert message in str(info.value) and str(info.value).startswith(str(assets / "manifests" / name))


@pytest.mark.parametrize("name, message", BAD)
def test_replay_check_refuses_bad_manifest_with_exit_2(assets, tmp_path, name, message):
    junit = tmp_path / "report.xml"
    result = CliRunner().invoke(app, ["replay-check", "--report-only", "--manifest", str(assets / "manifests" / name), "--junit", str(junit)])
    assert result.exit_code == 2
    assert result.stderr.startswith("cpbcg: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not junit.exists()


@pytest.mark.parametrize("name, message", [b for b in BAD if b[0].startswith("model-")])
def test_plan_refuses_bad_manifest_model_with_exit_2(assets, name, message):
    result = CliRunner().invoke(app, ["plan", "--manifest", str(assets / "manifests" / name), "--no-recommend"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("cpbcg: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


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


def timed(assets, tmp_path, diffs, num_hidden_layers=64):
    """valid.json with replay_ms = 0.5 + 0.001*B and eager_ms = replay_ms + diffs (bucket order)."""
    def change(d):
        d["model"]["num_hidden_layers"] = num_hidden_layers
        for record, diff in zip(d["buckets"], diffs):
            record["replay_ms"] = 0.5 + 0.001 * record["capture_num_tokens"]
            record["eager_ms"] = record["replay_ms"] + diff

    return load_manifest(mutated(assets, tmp_path, change))


def test_fitted_cost_scales_to_the_real_model_layer_count(assets, tmp_path):
    from cpbcg.api import with_manifest_cost
    from cpbcg.planner.deployment import Deployment

    manifest = timed(assets, tmp_path, [3.0, 3.5, 3.0, 2.5])  # median eager - replay = 3.0 ms
    fit = manifest.fitted_cost()  # 2 proxy layers -> qwen3-32b's 64: every term x 32
    assert (fit.proxy_layers, fit.model_layers, fit.scale, fit.note) == (2, 64, 32.0, "")
    assert fit.graph_fixed_ms == pytest.approx(16.0) and fit.token_ms == pytest.approx(0.032)
    assert fit.eager_fixed_ms == pytest.approx(112.0)  # (0.5 + 3.0) x 32
    own = manifest.fitted_cost(num_layers=2)
    assert (own.graph_fixed_ms, own.token_ms, own.eager_fixed_ms) == pytest.approx((0.5, 0.001, 3.5))
    cost = with_manifest_cost(Deployment(), manifest).cost  # the cost model reads the scaled terms
    assert (cost.graph_fixed_ms, cost.token_ms, cost.eager_fixed_ms) == pytest.approx((16.0, 0.032, 112.0))
    unknown = timed(assets, tmp_path, [3.0] * 4, num_hidden_layers=None).fitted_cost()
    assert unknown.model_layers == 2 and unknown.graph_fixed_ms == pytest.approx(0.5)


def test_eager_faster_than_graph_is_not_clamped_to_zero_silently(assets, tmp_path):
    manifest = timed(assets, tmp_path, [-0.6] * 4)  # eager_fixed would be 0.5 - 0.6 < 0
    fit = manifest.fitted_cost()
    assert fit.eager_fixed_ms is None and manifest.eager_fixed_ms() is None
    assert fit.note == "eager forwards ran 0.6 ms faster than replays (median), so eager_fixed_ms is not fitted"
    with pytest.raises(ManifestError, match="num_layers: 0 is not a positive integer"):
        manifest.fitted_cost(num_layers=0)


def test_manifest_document_is_the_one_writer(tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    from cpbcg.graph_capture import CaptureSettings, run_capture
    from cpbcg.outputs.documents import manifest_document
    from cpbcg.planner.deployment import Deployment
    from cpbcg.planner.model.capacity import CaptureSpec
    from cpbcg.planner.model.layout import CPLayout

    result = run_capture(CaptureSettings(Deployment(CPLayout(4), CaptureSpec(), 2.0, (64, 128)), num_layers=1, dry_run=True))
    path = tmp_path / "m.json"
    path.write_bytes(manifest_bytes(manifest_document(result)))
    manifest = load_manifest(path)
    assert manifest.table().as_dict() == {64: 16, 128: 32} and manifest.num_layers == 1 and manifest.fitted_cost() is None
    data = orjson.loads(path.read_bytes())
    assert data["dry_run"] is True and data["device_name"] == "cpu" and data["emulated_ranks"] is True and data["complete"] is True
    assert data["tolerance"] == {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4, "noise_factor": 0.0,
                                 "rule": "max_abs_err <= 0.0001 + 0.0001 * max|reference|"}
    record = data["buckets"][0]
    assert [layout["kind"] for layout in record["layouts"]] == ["capture", "many_short", "long_plus_short"]
    assert record["probes"][0]["refused"] is True and record["overflow_refused"] is True
    assert all(record[k] is None for k in ("graph_bytes", "standalone_graph_bytes", "allocator_bytes", "replay_ms", "raw_replay_ms"))


def test_a_manifests_capture_timings_calibrate_the_capture_time_per_layer(tmp_path, assets):
    """Capture is host-bound per layer: a manifest's mean capture (warm-ups left out) over its proxy's 2 layers,
    scaled to the model's 80 (the assumed Llama-3.1-70B shape), replaces the per-bucket estimate, labelled."""
    doc = orjson.loads((assets / "manifests" / "valid.json").read_bytes())
    for record, (capture, warmup) in zip(doc["buckets"], ((0.50, 0.30), (0.40, 0.20), (0.30, 0.10), (0.26, 0.06))):
        record.update(capture_s=capture, wall_s={"warmup_s": warmup})
    path = tmp_path / "timed.json"
    path.write_bytes(orjson.dumps(doc))
    assert load_manifest(path).capture_s_per_layer() == pytest.approx(0.2 / 2)
    trace = str(assets / "traces" / "good.jsonl")
    result = CliRunner().invoke(app, ["plan", "--manifest", str(path), "-t", trace, "-f", "json"])
    assert result.exit_code == 0, result.output
    rec = orjson.loads(result.stdout)["recommendation"]["capture_estimate"]
    assert rec["source"].startswith(f"calibrated from {path} (cpbcg capture of 4 buckets: 100.00 ms per layer per bucket, scaled to 80 layers")
    assert "graph memory estimated" in rec["source"]
    assert rec["capture_s"] == pytest.approx(0.1 * 80 * len(orjson.loads(result.stdout)["recommendation"]["buckets"]))  # no start-up term
