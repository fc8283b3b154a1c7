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
