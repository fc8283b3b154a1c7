"""Planning over a set of simulations: load factors, several traces, the executor map and its
exact merge (serial, process pool, Dask LocalCluster), the floor of small buckets, and the API
that plans a trace more than once."""

import re
import subprocess
import sys
import time

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import cpbcg
from cpbcg.cli import app
from cpbcg.config import load_config
from cpbcg.errors import ConfigError
from cpbcg.planner.scheduler.simulation import KERNEL_MIN_REQUESTS
from cpbcg.assembly.traffic import MIN_REQUEST_BYTES
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.selector import BucketTable
from cpbcg.assembly.traffic import UTILISATIONS, default_rates
from cpbcg.settings import parse_load_factors
from cpbcg.planner.scheduler import SchedulerSettings

runner = CliRunner()


def mooncake(path, seed, n=400, rate_per_s=20.0):
    """A small Mooncake-style request trace with timestamps (ms)."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1000.0 / rate_per_s, n)).astype(int)
    lengths = rng.integers(20, 6000, n)
    path.write_text("".join(orjson.dumps({"timestamp": int(t), "input_length": int(l), "output_length": 50}).decode() + "\n"
                            for t, l in zip(times, lengths)))
    return path


@pytest.fixture
def traces(tmp_path):
    return [mooncake(tmp_path / f"server-{i}.jsonl", i) for i in range(3)]


def test_load_factor_lists_parse_and_refuse():
    assert parse_load_factors("0.5,1,2,4") == [0.5, 1.0, 2.0, 4.0]
    for bad, message in (("0", "outside"), ("1e-320", "outside"), ("nan", "outside"), ("1,x", "'x' is not a number"), ("2,2", "twice")):
        with pytest.raises(ConfigError, match=message):
            parse_load_factors(bad)


def test_every_factor_is_simulated_and_the_merge_is_exact(traces):
    dep = cpbcg.load_deployment(cp_size=4)
    sources = [cpbcg.open_trace(p, dep) for p in traces[:2]]
    result = cpbcg.plan(sources, dep, cpbcg.RecommendSettings(max_buckets=16), load_factors=[0.5, 1, 4])
    assert [(p.label, p.load) for p in result.parts] == [(str(t), f"x{f:g}") for t in traces[:2] for f in (0.5, 1, 4)]
    assert result.evaluation.batches == sum(p.evaluation.batches for p in result.parts)
    assert result.evaluation.eager == {r: sum(p.evaluation.eager[r] for p in result.parts) for r in result.evaluation.eager}
    # higher load packs more requests into each forward: fewer forwards at x4 than at x0.5
    assert result.parts[2].evaluation.batches < result.parts[0].evaluation.batches
    # the recommended list is evaluated per part, and the held-back check names every part
    assert all(p.recommended is not None and p.recommended.buckets == result.recommendation.buckets for p in result.parts)
    assert set(result.recommendation.validation.by_part) == {f"{t} x{f:g}" for t in traces[:2] for f in (0.5, 1, 4)}


def test_a_trace_can_be_planned_twice(traces):
    dep = cpbcg.load_deployment(cp_size=4)
    source = cpbcg.open_trace(traces[0], dep)
    first = cpbcg.plan(source, dep)
    second = cpbcg.plan(source, dep)
    assert first.evaluation == second.evaluation and first.recommendation.buckets == second.recommendation.buckets


def test_fit_trace_fits_on_one_and_reports_on_all(traces):
    dep = cpbcg.load_deployment(cp_size=4)
    sources = [cpbcg.open_trace(p, dep) for p in traces]
    result = cpbcg.plan(sources, dep, cpbcg.RecommendSettings(max_buckets=16), fit_traces=[str(traces[0])])
    assert [p.fit for p in result.parts] == [True, False, False]
    alone = cpbcg.plan(sources[0], dep, cpbcg.RecommendSettings(max_buckets=16))
    assert result.recommendation.buckets == alone.recommendation.buckets
    with pytest.raises(ConfigError, match="not among the traces given"):
        cpbcg.plan(sources[1:], dep, fit_traces=[str(traces[0])])


def _plan_json(*args):
    result = runner.invoke(app, ["plan", "--format", "json", "-k", "12", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_jobs_1_and_jobs_2_give_byte_identical_json(traces, tmp_path):
    serial = _plan_json("-t", str(tmp_path / "server-*.jsonl"), "--time-scale", "1,2", "--jobs", "1")
    parallel = _plan_json("-t", str(tmp_path), "--time-scale", "1,2", "--jobs", "2")  # the directory: the same 3 files
    assert serial == parallel
    doc = orjson.loads(serial)
    assert [(t["trace"], t["load"]) for t in doc["traffic"]] == [(str(p), f) for p in traces for f in ("x1", "x2")]


def test_dask_local_cluster_gives_the_serial_result(traces):
    distributed = pytest.importorskip("distributed")
    dep = cpbcg.load_deployment(cp_size=4)
    sources = [cpbcg.open_trace(p, dep) for p in traces]
    serial = cpbcg.plan(sources, dep, cpbcg.RecommendSettings(max_buckets=12), load_factors=[1, 2])
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=":0") as cluster:  # loopback only, one light in-process worker
        on_cluster = cpbcg.plan(sources, dep, cpbcg.RecommendSettings(max_buckets=12), load_factors=[1, 2],
                                scheduler=cluster.scheduler_address)
    assert on_cluster.evaluation == serial.evaluation
    assert on_cluster.recommendation.buckets == serial.recommendation.buckets
    assert [p.evaluation for p in on_cluster.parts] == [p.evaluation for p in serial.parts]


def test_an_unreachable_scheduler_is_a_usage_error_after_dasks_own_connect_timeout(traces, monkeypatch):
    """A scheduler that does not answer (not one that refuses: tests/test_hostile_round5.py) is
    waited for as long as Dask's setting says; the probe is bypassed to stand for such a network."""
    pytest.importorskip("distributed")
    import dask.config

    import cpbcg.assembly.traffic as traffic

    monkeypatch.setattr(traffic, "_probe", lambda *args: None)

    start = time.monotonic()
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):  # the setting (default 30 s) the message names
        result = runner.invoke(app, ["plan", "-t", str(traces[0]), "--scheduler", "tcp://127.0.0.1:9", "--no-recommend"])
    assert result.exit_code == 2 and "cannot reach the Dask scheduler within 1s" in result.stderr, result.output
    assert "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT sets it" in result.stderr and time.monotonic() - start < 15


def test_relative_trace_paths_travel_to_dask_workers_absolute(traces, monkeypatch):
    """Issue 32 item 6: a Dask worker opens files against its own directory."""
    import cpbcg.api as api

    seen = []
    monkeypatch.setattr(api, "plan_traffic", lambda jobs, *a, **k: seen.extend(jobs))
    monkeypatch.chdir(traces[0].parent)
    dep = cpbcg.load_deployment(cp_size=4)
    api.plan([cpbcg.open_trace(p.name, dep) for p in traces], dep, load_factors=[1, 2], scheduler="tcp://127.0.0.1:8786")
    assert [j.spec.path for j in seen] == [str(p) for p in traces for _ in (1, 2)] and [j.label for j in seen][:2] == [traces[0].name] * 2


@pytest.mark.parametrize("address, reason", [("bogus", "missing port"), ("tcp://127.0.0.1", "missing port"), ("", "missing port"),
                                             ("http://127.0.0.1:1", "unknown protocol 'http'"),
                                             ("tcp://127.0.0.1:99999", "port 99999 is outside 1..65535"),
                                             ("tcp://127.0.0.1:0", "port 0 is outside 1..65535")])
def test_a_malformed_scheduler_address_is_refused_at_once(traces, address, reason):
    pytest.importorskip("distributed")
    start = time.monotonic()
    result = runner.invoke(app, ["plan", "-t", str(traces[0]), "--scheduler", address, "--no-recommend"])
    assert result.exit_code == 2 and "not a Dask scheduler address" in result.stderr and reason in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and time.monotonic() - start < 20  # no wait for a connection timeout


def test_planning_never_imports_dask(traces):
    code = ("import sys, cpbcg\n"
            f"dep = cpbcg.load_deployment(cp_size=4)\n"
            f"cpbcg.plan([cpbcg.open_trace(p, dep) for p in {[str(t) for t in traces]!r}], dep, workers=2, load_factors=[1, 2])\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')], 'dask imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


PRELOADED = ("import sys, cpbcg\n"
             "dep = cpbcg.load_deployment(cp_size=4)\n"
             "cpbcg.plan([cpbcg.open_trace(p, dep) for p in sys.argv[1:]], dep, workers=2)\n"
             "kernel = sys.modules.get('cpbcg.planner.scheduler.kernel')\n"
             "print('numba' in sys.modules, kernel and len(kernel.run.signatures))\n")


def test_the_compiled_loop_is_loaded_before_the_pool_forks_and_only_for_request_traces(traces, tmp_path):
    batches = [tmp_path / f"batches-{i}.jsonl" for i in range(2)]
    for i, path in enumerate(batches):
        path.write_text(f"[100, {300 + i}]\n[3000]\n")
    run = subprocess.run([sys.executable, "-c", PRELOADED, *map(str, batches)], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False None"  # planning batch traces never imports numba
    run = subprocess.run([sys.executable, "-c", PRELOADED, *map(str, traces[:2])], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False None"  # 400 requests each: the Python loop is done before numba would load
    pytest.importorskip("numba")
    assert KERNEL_MIN_REQUESTS * MIN_REQUEST_BYTES < 2_000_000
    big = [mooncake(tmp_path / f"big-{i}.jsonl", i, n=40_000) for i in range(2)]  # ~2.4 MB each
    run = subprocess.run([sys.executable, "-c", PRELOADED, *map(str, big)], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "True 1"  # compiled (or loaded from its cache) once, inherited by the workers


def test_the_floor_serves_the_smallest_cp_active_forward(traces):
    dep = cpbcg.load_deployment(cp_size=4)
    source = cpbcg.open_trace(traces[0], dep)
    floored = cpbcg.plan(source, dep, cpbcg.RecommendSettings(max_buckets=16)).recommendation
    free = cpbcg.plan(source, dep, cpbcg.RecommendSettings(max_buckets=16, min_bucket=0)).recommendation
    table = BucketTable.build(floored.buckets, dep.cp)
    # every CP-active single-request forward from 2*cp_size = 8 tokens up replays (gap-free list)
    sel = Demand.of(BatchSet.from_lists([[n] for n in range(8, 4000)]), dep.cp).select(table, 2.0)
    assert floored.floor_tokens == 8 and floored.buckets[0] <= 16 and sel.graph.all()
    assert free.floor_tokens is None and free.buckets[0] > 16  # the trace's own forwards start at 20 tokens or more
    assert any(n.startswith("floor: every CP-active size from 8 tokens") for n in floored.notes)


def test_untimed_traces_get_a_stated_range_of_rates(tmp_path):
    trace = tmp_path / "vidur.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n" + "".join(f"{1000 + 37 * i % 3000},20\n" for i in range(300)))
    sched = SchedulerSettings()
    mean = float(np.mean([1000 + 37 * i % 3000 for i in range(300)]))
    rates = default_rates(mean, sched)
    per_request_s = sched.prefill_fixed_ms / 1000 + mean / sched.prefill_tokens_per_s
    assert rates == [float(f"{u / per_request_s:.3g}") for u in UTILISATIONS]
    result = runner.invoke(app, ["plan", "-t", str(trace), "-k", "8", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [t["rate_per_s"] for t in orjson.loads(result.stdout)["traffic"]] == rates
    shown = r", ".join(re.escape(f"{r:g}") + r" \(\d+\.\d% busy\)" for r in rates)
    assert re.search(f"simulated at Poisson rates {shown} req/s \\(prefill busy reached\\), the rate picker's choice", result.stderr), result.stderr


def test_tiny_traces_warn_and_keep_the_held_back_fraction(tmp_path):
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("[100]\n[3000]\n[500, 300]\n")
    result = runner.invoke(app, ["plan", "-t", str(trace), "--format", "json"])
    rec = orjson.loads(result.stdout)["recommendation"]
    assert rec["validation"] is None  # 3 forwards cannot hold back 30%: no check rather than 33%
    assert "warning: only 3 prefill forwards (fewer than 1,000)" in result.stderr
    assert "no out-of-sample check: 3 forwards cannot hold back 30%" in result.stderr


def test_defaults_follow_the_chunk_in_force():
    assert load_config(None, {"scheduler.chunked_prefill_size": 16384}).buckets == "sglang-default:16384"
    assert load_config(None, {"scheduler.chunked_prefill_size": -1}).buckets == "sglang-default:16384"  # max_prefill_tokens
    assert load_config(None, {"scheduler.chunked_prefill_size": 4096, "buckets": "128,256"}).buckets == "128,256"


def test_the_dp_never_runs_more_layers_than_candidates(tmp_path):
    buckets = tmp_path / "many.json"
    buckets.write_text(orjson.dumps(list(range(8, 800_008, 8))).decode())
    trace = tmp_path / "one.jsonl"
    trace.write_text("[100]\n[3000]\n[5000, 300]\n")
    doc = orjson.loads(_plan_json("-t", str(trace), "-b", str(buckets), "-k", "512"))
    rec = doc["recommendation"]
    assert len(rec["buckets"]) <= rec["num_candidates"] < 100


def test_layout_never_says_fits_for_a_bucket_beyond_the_padding_limit():
    result = runner.invoke(app, ["layout", "--cp-size", "4", "--buckets", "25,64", "12"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    # (SGLang 0.5.23 captures 25 as 28 under cp 4: either way above 2 x 12)
    assert re.search(r"natural bucket 2[58] is above max_padding_factor 2 x n = 24 tokens: beyond the padding limit", text)
    assert "fits" not in text and "eager (padding_limit)" in text


def test_a_load_that_falls_short_of_the_rate_pickers_model_is_said_to(tmp_path):
    # the fact (`load_reached`, planner) and its words (`rate_notes`, outputs) live apart: the
    # target is the picker's prefill-only model of the simulated mean prompt, the reached share
    # the simulation's busy time; below REACHED_SHARE of the target the note says what held it
    from cpbcg.commands.batches import BatchesLoad
    from cpbcg.outputs.notes import rate_notes
    from cpbcg.assembly.traffic import REACHED_SHARE, LoadReached, load_reached, prefill_s_per_request

    assert REACHED_SHARE == 0.9
    assert LoadReached(0.5, 0.449).short and not LoadReached(0.5, 0.451).short
    trace = tmp_path / "vidur.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n" + "".join(f"{1000 + 37 * i % 3000},2000\n" for i in range(200)))
    dep = cpbcg.load_deployment(scheduler={"rate": 0.5})
    source = cpbcg.open_trace(trace, dep)
    assert load_reached(source, 0.5) is None  # not read yet: nothing simulated
    for _ in source.batches:
        pass
    s = source.simulation.summary()
    reached = load_reached(source, 0.5)
    assert reached == LoadReached(0.5 * prefill_s_per_request(s.input_tokens / s.requests, dep.scheduler), s.busy_s / s.simulated_s)
    assert reached.target_busy == pytest.approx(0.5 * (0.005 + sum(1000 + 37 * i % 3000 for i in range(200)) / 200 / 40000))
    assert load_reached(source, None) is None
    # decode (2,000 tokens a request) kept the prefill below 90% of its modelled share: said, with what held it
    assert reached.short, reached
    lines = rate_notes([BatchesLoad(str(trace), 0.5, source)], picked=False)
    assert lines[0] == (f"cpbcg: note: {trace} has no arrival times: simulated at Poisson rates 0.5 ({reached.reached_busy:.1%} busy) req/s "
                        "(prefill busy reached), --rate (or scheduler.rate) times each --time-scale factor")
    assert lines[1] == (f"cpbcg: note: at 0.5 req/s the prefill alone would be {reached.target_busy:.0%} busy; the simulation reached "
                        f"{reached.reached_busy:.1%}: decode steps took {s.decode_s / s.simulated_s:.1%} of the time, so that load is what "
                        "this server can reach, not more")
