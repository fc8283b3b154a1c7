"""A launch's `Prefill batch` lines that say `cuda graph: True` are facts: the server ran prefill
graphs, whatever its settings dump implies (a dump without the prefill-graph keys: a release
before prefill graphs, a dump cut short in an issue thread, a tool's). `plan`, `replay-check` and
`watch` read one rule (`LogSettings.prefill_graphs`); a disagreement with the dump is said in a
note. Every log here is SYNTHETIC (tests/sglang_log_fixtures.py, benchmarks/make_sglang_log.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.engines.sglang.logs.log import LogReader
from cpbcg.engines.sglang.logs.settings import read_log_settings
from sglang_log_fixtures import prefill_line, write_log

runner = CliRunner()
PINNED = ["--page-size", "1", "--chunked-prefill-size", "8192"]
BARE_DUMP = ("[2026-11-02 09:59:00] server_args={'model_path': 'org/model', 'tp_size': 1, 'attn_cp_size': 1, "
             "'enable_prefill_cp': False, 'chunked_prefill_size': 8192, 'page_size': 1, 'enable_mixed_chunk': False}\n")
"""A 0.5.23-shaped dump cut short: none of the prefill-graph keys (as make_sglang_log.py wrote it before)."""
SIZES = [100 + 37 * i for i in range(40)]

pytestmark = pytest.mark.usefixtures("wide_plain_terminal")


def bare_log(tmp_path: Path, graph: bool | None, name: str = "bare.log", dump: str = BARE_DUMP) -> Path:
    return write_log(tmp_path / name, dump + "".join(prefill_line(n, 1, graph=graph) for n in SIZES))


def test_the_verdicts_beat_a_dump_without_prefill_graph_keys(tmp_path):
    path = bare_log(tmp_path, True)
    reader = LogReader(path)
    list(reader)
    for log in (read_log_settings(path), reader.launch(1)):  # the start-up scan and the whole-log reader agree
        assert log.prefill_graphs is True
        assert log.prefill_graphs_origin == "the Prefill batch lines' verdicts (cuda graph: True), line 3"
        assert log.prefill_graphs_at() == ("the Prefill batch lines' verdicts (cuda graph: True)", 3)
        said = [n for n in log.notes if "the forwards' verdicts win" in n]
        assert len(said) == 1 and "server_args has none of the prefill-graph settings" in said[0] and "line 2" in said[0]


def test_without_a_graph_verdict_the_cut_dump_still_says_off(tmp_path):
    for graph in (False, None):
        log = read_log_settings(bare_log(tmp_path, graph, f"off{graph}.log"))
        assert log.prefill_graphs is False and log.graph_forward is None
        assert "a release before prefill CUDA graphs, or a dump cut short" in log.prefill_graphs_origin


def test_one_graph_verdict_after_eager_ones_is_enough(tmp_path):
    body = BARE_DUMP + "".join(prefill_line(n, 1, graph=False) for n in SIZES) + prefill_line(500, 1, graph=True)
    log = LogReader(write_log(tmp_path / "late.log", body))
    list(log)
    assert log.launch(1).prefill_graphs is True and log.launch(1).graph_forward == ("cuda graph", 3 + len(SIZES))


def test_a_stated_disable_loses_to_the_verdicts_and_is_said(tmp_path):
    dump = BARE_DUMP.replace("}\n", ", 'disable_cuda_graph': True}\n")
    log = read_log_settings(bare_log(tmp_path, True, "dis.log", dump))
    assert log.prefill_graphs is True
    assert any("server_args.disable_cuda_graph, line 2), but the Prefill batch line 3 says `cuda graph: True`" in n for n in log.notes)


def test_plan_replay_check_and_watch_agree_the_server_ran_graphs(tmp_path):
    path = bare_log(tmp_path, True)
    plan = runner.invoke(app, ["plan", "-t", str(path), "--format", "json", "--no-recommend", *PINNED])
    assert plan.exit_code == 0, plan.output
    assert "graphs_off" not in orjson.loads(plan.stdout)
    assert "ran its 40 prefill forwards eagerly" not in plan.stderr
    gate = runner.invoke(app, ["replay-check", "-t", str(path), "--min-coverage", "0.9", *PINNED])
    assert gate.exit_code == 0, gate.output
    watch = runner.invoke(app, ["watch", str(path), "--max-forwards", str(len(SIZES)), "--duration", "60", "--format", "json", *PINNED])
    assert watch.exit_code == 0, watch.output
    final = orjson.loads(watch.stdout.splitlines()[-1])
    assert final["refusals"] == [] and final["servers"][0]["forwards"] == len(SIZES)


def test_watch_refuses_a_cut_dump_whose_forwards_ran_eagerly(tmp_path):
    watch = runner.invoke(app, ["watch", str(bare_log(tmp_path, False)), "--duration", "60", "--format", "json", *PINNED])
    assert watch.exit_code == 1
    assert "prefill graphs resolved disabled" in orjson.loads(watch.stdout.splitlines()[-1])["refusals"][0]


def test_watch_takes_a_server_without_a_capture_line_whose_forwards_ran_in_graphs(tmp_path):
    dump = BARE_DUMP.replace("}\n", ", 'cuda_graph_config': None, 'disable_cuda_graph': False}\n")
    path = bare_log(tmp_path, True, "nocap.log", dump)
    watch = runner.invoke(app, ["watch", str(path), "--max-forwards", str(len(SIZES)), "--duration", "60", "--format", "json", *PINNED])
    assert watch.exit_code == 0, watch.output
    assert orjson.loads(watch.stdout.splitlines()[-1])["refusals"] == []


def test_the_project_generator_writes_the_prefill_graph_settings_of_a_0_5_23_dump(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from make_sglang_log import write_log as make_log
    finally:
        sys.path.pop(0)
    path = tmp_path / "synth.log"
    make_log(path, 200, 50)
    log = read_log_settings(path)
    assert log.server_args["cuda_graph_config"]["prefill"] == {"backend": "breakable", "bs": None, "max_bs": 8192}
    assert log.server_args["disable_cuda_graph"] is False and log.prefill_graphs is True
    assert not [n for n in log.notes if "verdicts win" in n]  # the dump and the verdicts agree
    assert log.setting("buckets").value == "sglang-default:8192" and "cuda_graph_config.prefill.max_bs" in log.setting("buckets").origin


def test_the_model_assumed_from_a_printed_class_says_assumed_once(tmp_path):
    body = BARE_DUMP + "[2026-11-02 09:59:10 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB, mem usage=15.00 GB.\n"
    path = write_log(tmp_path / "arch.log", body + "".join(prefill_line(n, 1) for n in SIZES))
    plan = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend", *PINNED])
    assert plan.exit_code == 0, plan.output
    text = " ".join(plan.output.split())
    assert "assumed: assumed" not in text and "its shape assumed: a Llama-3.1-70B-shaped" in text
