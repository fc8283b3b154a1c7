"""The shipped alert rules and dashboard (deploy/): `promtool check rules` and `promtool test rules`
(deploy/prometheus/cpbcg-watch-rules.test.yaml: one and two replicas, a stale log, a failing
scrape), and every query per replica (`instance`) on names the exporter serves.

promtool comes from Debian's `prometheus` package; CI installs it and sets CPBCG_REQUIRE_PROMTOOL=1
(.ci/run), so there the rule tests run, never skip. Locally they skip, with the reason, without it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml

from cpbcg.watching.exporter import DEPRECATED, PREFIX, exported_names

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "cpbcg-watch.json"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CPBCG_REQUIRE_PROMTOOL"):
            pytest.fail("CPBCG_REQUIRE_PROMTOOL is set and promtool is not on PATH (apt-get install prometheus)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); CI requires it (CPBCG_REQUIRE_PROMTOOL=1)")
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=RULES, capture_output=True, text=True, timeout=120)


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load((RULES / "cpbcg-watch-rules.yaml").read_text())["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in orjson.loads(DASHBOARD.read_bytes())["panels"] for t in p["targets"]]


def test_promtool_loads_the_shipped_rules():
    done = run("check", "rules", "cpbcg-watch-rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in done.stdout


def test_the_rules_fire_per_replica_on_a_bad_replica_a_stale_log_and_a_failing_scrape():
    # two replicas at 20% and 100% observed coverage: CpbcgObservedCoverageLow fires for the bad one only
    done = run("test", "rules", "cpbcg-watch-rules.test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_query_is_per_replica_and_on_exported_names():
    exported = exported_names()
    for expr in rule_exprs() + dashboard_exprs():
        used = set(re.findall(r"\bcpbcg_[a-z_]+", expr))
        assert used <= exported, (expr, sorted(used - exported))
        assert not {PREFIX + old for old in DEPRECATED} & used, expr  # the deprecated names are served, never queried
        for grouping in re.findall(r"\bby \(([^)]*)\)", expr):
            assert "instance" in grouping.split(", "), expr  # aggregated over replicas nowhere: a bad one would hide
    for expr in dashboard_exprs():
        assert 'instance=~"$instance"' in expr, expr
    used = {m for e in rule_exprs() + dashboard_exprs() for m in re.findall(r"\bcpbcg_[a-z_]+", e)}
    assert {"cpbcg_log_last_line_age_seconds", "cpbcg_sglang_scrape_age_seconds", "cpbcg_log_reader_lag_seconds",
            "cpbcg_sglang_graph_memory_bytes"} <= used


def test_promtool_lints_the_served_page_clean_but_for_the_deprecated_name(tmp_path):
    import urllib.request

    from cpbcg import api
    from cpbcg.commands.watch import watch_options
    from sglang_log_fixtures import prefill_line, startup_lines, write_log

    tool = promtool()
    log = write_log(tmp_path / "server.log", startup_lines() + "".join(prefill_line(n, 2, graph=n < 5000) for n in (100, 200, 9000)))
    notes: list[str] = []
    pages: list[str] = []

    def on_snapshot(snap):
        if snap.final:
            url = next(n for n in notes if "serving metrics at" in n).rsplit(" ", 1)[1]
            with urllib.request.urlopen(url, timeout=10) as response:
                pages.append(response.read().decode())

    api.watch([str(log)], None, {"scheduler.page_size": 1, "scheduler.chunked_prefill_size": 8192},
              watch_options(max_forwards=3, interval_s=0.1, recommend_every_s=0.0, poll_s=0.02), serve_metrics="127.0.0.1:0",
              on_snapshot=on_snapshot, note=notes.append, baseline_trace=str(log))
    assert "cpbcg_log_lines_total{" in pages[0]
    done = subprocess.run([tool, "check", "metrics"], input=pages[0], capture_output=True, text=True, timeout=60)
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert problems == [], problems  # without --metrics-url the deprecated GB family has no sample, so nothing to flag
