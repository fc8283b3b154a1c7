"""Where `cpbcg capture`'s wall time goes (issue 34): per-bucket and per-run accounting in the
result and the manifest, progress while it runs, and the attention a verification's second
forward reuses. Assertions are structural (nested intervals, a known sleep lands in its phase),
never on how fast anything ran."""

import time

import orjson
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from cpbcg.cli import app  # noqa: E402
from cpbcg.outputs import capture as capture_output  # noqa: E402
from cpbcg.outputs.documents import manifest_document  # noqa: E402
from cpbcg.graph_capture import forward  # noqa: E402
from cpbcg.graph_capture.harness import CaptureSession  # noqa: E402
from cpbcg.graph_capture.layouts import LiveLayout  # noqa: E402
from cpbcg.graph_capture.presets import load_model_preset  # noqa: E402
from cpbcg.graph_capture.records import CaptureSettings  # noqa: E402
from cpbcg.graph_capture.run import run_capture  # noqa: E402
from cpbcg.manifest import load_manifest  # noqa: E402
from cpbcg.planner.deployment import Deployment  # noqa: E402
from cpbcg.planner.model.capacity import CaptureSpec  # noqa: E402
from cpbcg.planner.model.layout import CPLayout  # noqa: E402

runner = CliRunner()
PHASES = ("estimate_s", "standalone_s", "warmup_s", "capture_s", "verify_s", "timing_s")
SLEEP_S = 0.05


def settings(trace=None) -> CaptureSettings:
    return CaptureSettings(Deployment(CPLayout(4), CaptureSpec(), 2.0, (64, 128, 256)), num_layers=1, dry_run=True, trace=trace)


@pytest.fixture(scope="module")
def slow_checks():
    """A dry run where every layout check sleeps SLEEP_S first: that time must land in verify_s."""
    real = CaptureSession.check
    calls: list[int] = []

    def check(self, bucket, layout, seed):
        calls.append(bucket)
        time.sleep(SLEEP_S)
        return real(self, bucket, layout, seed)

    CaptureSession.check = check
    phases: list[tuple[str, int]] = []
    try:
        result = run_capture(settings(), on_phase=lambda phase, bucket: phases.append((phase, bucket)))
    finally:
        CaptureSession.check = real
    return result, calls, phases


def test_bucket_phases_nest_in_the_bucket_total(slow_checks):
    result, calls, _ = slow_checks
    assert [b.capture_num_tokens for b in result.buckets] == [256, 128, 64]
    for b in result.buckets:
        w = b.wall
        assert w is not None and all(getattr(w, name) >= 0 for name in PHASES)
        assert w.other_s >= -1e-9  # every phase is timed inside the bucket's total
        assert w.capture_s + w.warmup_s == pytest.approx(b.capture.capture_s, abs=1e-6)  # the record's capture_s: warm-ups + capture
        assert w.layouts == calls.count(b.capture_num_tokens) >= 3
        assert w.verify_s >= SLEEP_S * w.layouts  # the injected time is verification time
        assert w.capture_s + w.warmup_s < SLEEP_S * w.layouts + w.verify_s
        assert w.standalone_s < 1e-3 and w.timing_s < 1e-3  # dry run: no private pool, no timed forwards (only the checks run)


def test_run_phases_add_up(slow_checks):
    result, _, _ = slow_checks
    run = result.wall
    parts = run.setup_s + run.sampling_s + run.capture_s + run.verify_s
    assert 0 <= parts <= run.total_s
    buckets = sum(b.wall.total_s for b in result.buckets)
    assert buckets <= run.capture_s + run.verify_s + 1e-9  # bucket steps partition the two loops
    assert run.verify_s >= SLEEP_S * sum(b.wall.layouts for b in result.buckets)
    assert run.sampling_s >= 0 and result.settings.trace is None


def test_phases_announced_before_they_run(slow_checks):
    _, _, phases = slow_checks
    assert phases == [("sampling", 0), ("setup", 0), ("capture", 256), ("capture", 128), ("capture", 64),
                      ("verify", 256), ("verify", 128), ("verify", 64)]


def test_manifest_carries_the_accounting_and_old_manifests_still_load(slow_checks, tmp_path):
    result, _, _ = slow_checks
    doc = manifest_document(result)
    run = doc["wall_s"]
    assert set(run) == {"setup_s", "sampling_s", "capture_s", "verify_s", "total_s", "warmup_s", "timing_s", "layouts"}
    assert run["layouts"] == sum(r["wall_s"]["layouts"] for r in doc["buckets"])
    for record in doc["buckets"]:
        w = record["wall_s"]
        assert w["other_s"] == pytest.approx(w["total_s"] - sum(w[name] for name in PHASES))
    path = tmp_path / "m.json"
    path.write_bytes(orjson.dumps(doc))
    loaded = load_manifest(path)
    assert [(b.capture_s, b.warmup_s, b.wall_total_s) for b in loaded.buckets] == [
        (r["capture_s"], r["wall_s"]["warmup_s"], r["wall_s"]["total_s"]) for r in doc["buckets"]]
    old = {**doc, "buckets": [{k: v for k, v in r.items() if k != "wall_s"} for r in doc["buckets"]]}
    del old["wall_s"]
    path.write_bytes(orjson.dumps(old))
    assert [b.wall_total_s for b in load_manifest(path).buckets] == [None, None, None]
    bad = {**doc, "buckets": [{**doc["buckets"][0], "wall_s": {**doc["buckets"][0]["wall_s"], "verify_s": -1.0}}, *doc["buckets"][1:]]}
    path.write_bytes(orjson.dumps(bad))
    with pytest.raises(Exception, match=r"buckets\[0\]\.wall_s\.verify_s: -1\.0 is not a finite number >= 0 \(bucket 256\)"):
        load_manifest(path)


def test_trace_sampling_is_its_own_phase(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join('{"extend_seq_lens": [%d, %d]}\n' % (40 + i % 50, 60 + i % 70) for i in range(400)))
    result = run_capture(settings(trace))
    assert result.wall.sampling_s > 0
    assert any(c.kind == "trace" for b in result.buckets for c in b.layouts)
    assert sum(b.wall.layouts for b in result.buckets) == sum(len(b.layouts) + len(b.probes) for b in result.buckets)


def test_second_forward_reuses_equal_attention_only():
    session = CaptureSession.open(CPLayout(4), CaptureSpec(), load_model_preset("tiny"), 2, seed=0, dry_run=True)
    session.capture([128], [32])
    seen: list[forward.ReusedAttention] = []
    real = forward.ReusedAttention

    class Spy(real):
        def __init__(self, attention):
            super().__init__(attention)
            seen.append(self)

    forward.ReusedAttention = Spy
    try:
        good = session.check(128, LiveLayout("trace", (57, 40)), seed=1)
        graphs = session.graphs[128]
        replay = graphs.pieces[0].replay
        graphs.pieces[0].replay = lambda: (lambda x, qkv: (x, qkv + 1e-7 * qkv.abs().max()))(*replay())
        nudged = session.check(128, LiveLayout("trace", (57, 40)), seed=1)
    finally:
        forward.ReusedAttention = real
    assert good.verified and good.graph_matches_eager and (seen[0].reused, seen[0].calls) == (8, 8)  # 2 layers x 4 ranks
    assert not nudged.graph_matches_eager and seen[1].reused == 0  # the graph's first QKV differs: nothing reused


def test_cli_prints_the_wall_line_and_progress_lines_off_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setenv("CPBCG_WIDTH", "200")
    monkeypatch.setattr(capture_output, "PROGRESS_LINES_AFTER_S", 0.0)
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["capture", "--cp-size", "4", "--buckets", "64,128", "--layers", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("cpbcg: capture: ")]
    assert [line.split(" done")[0] for line in lines] == [
        "cpbcg: capture: capture bucket 128", "cpbcg: capture: capture bucket 64",
        "cpbcg: capture: verify bucket 128", "cpbcg: capture: verify bucket 64"]
    assert all(line.endswith("s so far)") for line in lines[:2])  # no ETA before a bucket is verified
    assert " s so far, about " in lines[2] and lines[2].endswith(" s left)")
    assert lines[-1].endswith("s so far, about 0 s left)") and "(4/4 steps," in lines[-1]
    wall = orjson.loads(out.read_bytes())["wall_s"]
    assert f"wall time {wall['total_s']:.1f} s: setup {wall['setup_s']:.1f} s, trace sampling 0.0 s, " in result.stderr
    assert f"({wall['layouts']:,} layouts replayed; timed forwards 0.0 s)" in result.stderr
    assert "verify_s" in result.stdout


def test_progress_eta_scales_the_verification_time_per_token_to_the_buckets_left():
    progress = capture_output.CaptureProgress(enabled=False)
    for bucket in (4096, 1024, 512):
        progress.step("capture", bucket)
    assert progress.eta_s(100.0) is None  # nothing verified yet
    progress.phase("verify", 4096)
    began = progress.verify_began
    assert began is not None
    progress.step("verify", 4096)
    assert progress.eta_s(began + 40.0) == pytest.approx(40.0 * 1536 / 4096)
    progress.step("verify", 1024)
    assert progress.eta_s(began + 50.0) == pytest.approx(50.0 * 512 / 5120)
