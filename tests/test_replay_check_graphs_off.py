"""`replay-check` never passes a server that ran its prefill forwards eagerly (a launch of an
SGLang log whose resolved prefill graph state is off: the model would replay them as if graphs
were on): a failed gate where its lines print the verdicts, a refusal where nothing says what ran; `plan` says once that its main table is such a model, and `--report-only` runs no gate
(a gate option with it is refused; a config's gates are skipped, said in a note). Every log here
is SYNTHETIC (tests/sglang_log_fixtures.py)."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from sglang_log_fixtures import default_buckets, prefill_line, sglang_graph_verdict, startup_lines, write_log

runner = CliRunner()
TRACE = "tests/assets/traces/good.jsonl"
SIZES = (100, 700, 3000)


pytestmark = pytest.mark.usefixtures("wide_plain_terminal")


def launch(graphs: bool, sizes=SIZES) -> str:
    """A 0.5.23 launch at cp 1: graphs on (its capture lines, verdicts by SGLang's rule for the list)
    or off (`cuda_graph_config.prefill.backend` disabled, no capture, every forward eager)."""
    if graphs:
        body = startup_lines(cp=1)
        return body + "".join(prefill_line(n, 1, graph=sglang_graph_verdict(n, default_buckets(8192))) for n in sizes)
    body = startup_lines(cp=1, capture=False).replace("'backend': 'breakable'", "'backend': 'disabled'")
    return body + "".join(prefill_line(n, 1, graph=False) for n in sizes)


def replay_check(*args):
    return runner.invoke(app, ["replay-check", *args])


def test_a_log_that_ran_with_prefill_graphs_off_fails_its_gate_in_the_reports(tmp_path):
    """Its lines print what the server did (`cuda graph: False`): a failed gate `prefill_graphs_on` with the
    reason, exit 1, in the JSON and JUnit a CI job reads (not an exit-2 refusal that writes no report)."""
    log = write_log(tmp_path / "off.log", launch(False))
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    result = replay_check("-t", str(log), "--min-coverage", "0.5", "--json", str(report), "--junit", str(junit))
    assert result.exit_code == 1, result.output
    gate = orjson.loads(report.read_bytes())["gates"][0]
    assert (gate["name"], gate["measured"], gate["passed"]) == ("prefill_graphs_on", 3, False)
    assert gate["message"].endswith(f"({log}:2: prefill graphs off (server_args.cuda_graph_config.prefill.backend))")
    assert 'name="prefill_graphs_on"' in junit.read_text()
    # no verdicts printed (lines of an older release): nothing says what the server did, so it is refused, nothing written
    quiet = write_log(tmp_path / "quiet.log", launch(False).replace(", cuda graph: False", ""))
    result = replay_check("-t", str(quiet), "--min-coverage", "0.5", "--json", str(tmp_path / "q.json"))
    assert result.exit_code == 2 and result.stdout == "" and not (tmp_path / "q.json").exists(), result.output
    assert result.stderr.splitlines()[-1] == (
        f"cpbcg: error: {quiet}:2: prefill graphs off (server_args.cuda_graph_config.prefill.backend): its 3 prefill forwards ran "
        "eagerly, not gated; pass --report-only to report without gating, or turn prefill graphs on")
    # --report-only reports it: the observed table says what ran, the model shows it as if graphs were on
    result = replay_check("-t", str(log), "--report-only", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["gates"] == [] and doc["observed"]["graph_forwards"] == 0 and doc["graph_batches"] == 3


def test_the_same_log_with_graphs_on_still_gates(tmp_path):
    log = write_log(tmp_path / "on.log", launch(True))
    result = replay_check("-t", str(log), "--min-coverage", "0.5")
    assert result.exit_code == 0, result.output
    # the modelled coverage, the log's observed coverage and the model's agreement with the log (issue 39)
    assert result.stderr.splitlines()[-1] == "replay-check: passed all 3 gates"


def test_a_log_is_gated_on_what_the_server_did(tmp_path):
    """A server that printed every forward eager while graphs were on (and the model replays them in
    graphs) fails on its observed coverage and on the disagreement, whatever the model says."""
    body = startup_lines(cp=1)
    log = write_log(tmp_path / "eager.log", body + "".join(prefill_line(n, 1, graph=False) for n in SIZES))
    report = tmp_path / "r.json"
    result = replay_check("-t", str(log), "--min-coverage", "0.9", "--json", str(report))
    assert result.exit_code == 1, result.output
    gates = {g["name"]: g for g in orjson.loads(report.read_bytes())["gates"]}
    assert gates["min_coverage"]["passed"] and gates["min_coverage"]["measured"] == 1.0  # the model: all in graphs
    assert not gates["min_coverage.observed"]["passed"] and gates["min_coverage.observed"]["measured"] == 0.0
    assert not gates["model_agrees_with_log"]["passed"] and gates["model_agrees_with_log"]["measured"] == 3


def test_any_launch_with_forwards_that_ran_graphs_off_fails(tmp_path):
    first = launch(True)
    log = write_log(tmp_path / "two.log", first + launch(False, (200, 5000)))
    second_dump = 2 + first.count("\n")  # the header, then launch 1's lines
    report = tmp_path / "r.json"
    result = replay_check("-t", str(log), "--min-coverage", "0.5", "--json", str(report))
    assert result.exit_code == 1, result.output
    gate = orjson.loads(report.read_bytes())["gates"][0]
    assert (gate["name"], gate["measured"]) == ("prefill_graphs_on", 2)
    assert gate["message"].endswith(f"({log}:{second_dump}: prefill graphs off (server_args.cuda_graph_config.prefill.backend) in launch 2)")


def test_a_graphs_off_launch_without_forwards_does_not_block_the_gate(tmp_path):
    off = launch(False, ())
    log = write_log(tmp_path / "restart.log", off + launch(True))
    result = replay_check("-t", str(log), "--min-coverage", "0.5")
    assert result.exit_code == 0, result.output


def test_plan_says_once_its_main_table_is_modelled_as_if_graphs_were_on(tmp_path):
    log = write_log(tmp_path / "off.log", launch(False))
    result = runner.invoke(app, ["plan", "-t", str(log), "--no-recommend"])
    assert result.exit_code == 0, result.output
    note = (f"cpbcg: note: {log}: prefill graphs were off (server_args.cuda_graph_config.prefill.backend, line 2): the server ran "
            "its 3 prefill forwards eagerly; the main table models them as if graphs were on (the observed table shows what ran)")
    assert result.stderr.count("as if graphs were on") == 1 and note in result.stderr.splitlines()
    doc = orjson.loads(runner.invoke(app, ["plan", "-t", str(log), "--no-recommend", "-f", "json"]).stdout)
    assert doc["graph_batches"] == 3 and doc["observed"]["graph_forwards"] == 0
    assert doc["graphs_off"] == [{"launch": 1, "first_line": 1, "forwards": 3,
                                  "prefill_graphs_source": "server_args.cuda_graph_config.prefill.backend, line 2",
                                  "main_table": "modelled as if graphs were on; the server ran these forwards eagerly (observed)"}]
    on = write_log(tmp_path / "on.log", launch(True))
    doc = orjson.loads(runner.invoke(app, ["plan", "-t", str(on), "--no-recommend", "-f", "json"]).stdout)
    assert "graphs_off" not in doc


@pytest.mark.parametrize("gate, named", [
    (["--min-coverage", "0.9999"], "--min-coverage"),
    (["--max-eager", "local_capacity=0"], "--max-eager"),
    (["--min-observed-coverage", "0.5"], "--min-observed-coverage"),
    (["--replay", "2"], "--replay"),
])
def test_report_only_with_a_gate_option_is_refused(gate, named):
    result = replay_check("-t", TRACE, "--buckets", "128,2048", "--report-only", *gate)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == (f"cpbcg: error: replay-check: --report-only runs no gate, but {named} sets one: drop --report-only "
                             f"to gate, or drop {named} to report only\n")


def test_report_only_skips_a_configs_gates_and_says_so():
    gated = replay_check("-t", TRACE, "--config", "ci-gates-cp4", "--buckets", "128,2048")
    assert gated.exit_code == 1  # the config's gates fail this list...
    result = replay_check("-t", TRACE, "--config", "ci-gates-cp4", "--buckets", "128,2048", "--report-only", "--format", "json")
    assert result.exit_code == 0, result.output  # ...and --report-only does not run them
    assert orjson.loads(result.stdout)["gates"] == []
    assert result.stderr.splitlines() == [
        "cpbcg: note: replay-check: --report-only: the config's gates (min_coverage, min_token_coverage, max_padding, max_eager) "
        "were not checked",
        "cpbcg: note: replay-check: no gate checked (--report-only): nothing to fail on"]
