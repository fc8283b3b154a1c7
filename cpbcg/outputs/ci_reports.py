"""Reports of `cpbcg replay-check` in the formats CI systems read.

* `junit_xml`: JUnit XML, one `<testcase>` per gate; a failing gate carries a `<failure>` whose
  message names the measured value and the threshold (GitLab, Jenkins, GitHub test reporters).
* `github_annotations`: one `::error title=...::message` workflow command per failed gate
  (GitHub Actions shows them on the run and the pull request).
* `step_summary_markdown`: a markdown summary for `$GITHUB_STEP_SUMMARY`.
* `report_json`: the `plan --format json` document (with `simulation`) plus `gates`, `passed` and `replays`.

Every function returns text or bytes; report files are written by the command, together, through
`cpbcg.atomic.OutputGroup` (the step summary by `append_step_summary`, atomically), so no report
is ever half-written.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson

from cpbcg.atomic import write_atomic
from cpbcg.gates.gates import CheckReport, GateResult, count_of
from cpbcg.outputs.documents import check_document
from cpbcg.gates.summary import summary_markdown, summary_text

SUITE = "cpbcg.replay_check"
"""JUnit test-suite name and test-case class name."""
MAX_SHOWN = 5
"""Example batches listed in the markdown summary."""


def report_json(report: CheckReport, simulation: dict | None = None) -> bytes:
    """The `replay-check --json` document (`cpbcg.outputs.documents.check_document`, with `simulation`), serialised."""
    return orjson.dumps(check_document(report, simulation), option=orjson.OPT_INDENT_2) + b"\n"


def junit_xml(report: CheckReport) -> bytes:
    """JUnit XML with one test case per gate (`classname` `cpbcg.replay_check`, `name` the gate
    key). Failures: `message` is the one-line gate message; the text adds measured value,
    comparison and threshold in raw numbers."""
    failures = str(len(report.failed))
    tests = str(len(report.gates))
    root = ET.Element("testsuites", name="cpbcg replay-check", tests=tests, failures=failures, errors="0")
    suite = ET.SubElement(root, "testsuite", name=SUITE, tests=tests, failures=failures, errors="0", skipped="0")
    properties = ET.SubElement(suite, "properties")
    for key, value in report.header.items():
        ET.SubElement(properties, "property", name=str(key), value=str(value))
    for gate in report.gates:
        case = ET.SubElement(suite, "testcase", classname=SUITE, name=gate.name)
        if gate.passed:
            ET.SubElement(case, "system-out").text = gate.message()
        else:
            failure = ET.SubElement(case, "failure", message=gate.message(), type="GateFailed")
            failure.text = _failure_text(gate)
    ET.SubElement(suite, "system-out").text = evaluation_summary_text(report)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _failure_text(gate: GateResult) -> str:
    lines = [
        f"gate: {gate.name}",
        f"measured: {gate.metric} = {gate.measured_text}{_raw(gate, gate.measured)}",
        f"threshold: {gate.comparison} {gate.threshold_text}{_raw(gate, gate.threshold)}",
    ]
    if gate.detail:
        lines.append(gate.detail)
    return "\n".join(lines)


def _raw(gate: GateResult, value: float) -> str:
    """The raw fraction beside a percentage (`" (0.72745)"`); nothing for counts."""
    return f" ({value:g})" if gate.unit == "fraction" else ""


def evaluation_summary_text(report: CheckReport) -> str:
    """Plain lines: source, buckets, the summary rows, natural-overflow examples."""
    ev = report.evaluation
    lines = [f"source: {report.header.get('source')}", f"buckets {len(ev.buckets)}: {ev.buckets[0]}..{ev.buckets[-1]}"]
    lines += summary_text(ev)
    lines += [f"overflow example extend_seq_lens: {seq}" for seq in ev.overflow_examples]
    return "\n".join(lines)


def github_annotations(report: CheckReport) -> list[str]:
    """`::error title=cpbcg gate NAME::MESSAGE` per failed gate, escaped per GitHub's
    workflow-command rules (`%`, CR, LF in the message; also `:` and `,` in the title)."""
    return [
        f"::error title={_escape_property('cpbcg gate ' + g.name)}::{_escape_data(g.message())}"
        for g in report.failed
    ]


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def step_summary_markdown(report: CheckReport) -> str:
    """Markdown for `$GITHUB_STEP_SUMMARY`: verdict, gate table, evaluation table, examples."""
    ev, h = report.evaluation, report.header
    verdict = "passed" if report.passed else f"{len(report.failed)} of {count_of(len(report.gates), 'gate')} failed"
    icon = "✅" if report.passed else "❌"
    out = [
        f"## {icon} cpbcg replay-check: {verdict}",
        "",
        f"`{h.get('source')}` · cp_size {h.get('cp_size')} {h.get('cp_strategy')}, align {h.get('align_size')}, "
        f"max_padding_factor {h.get('max_padding_factor')} · {count_of(len(ev.buckets), 'bucket')} {ev.buckets[0]}..{ev.buckets[-1]}"
        + (f" · manifest `{h['manifest']}`" if h.get("manifest") else ""),
        "",
        "| gate | measured | threshold | result |",
        "|---|---:|---:|---|",
    ]
    for g in report.gates:
        out.append(f"| `{g.name}` | {g.measured_text} | {g.comparison} {g.threshold_text} | {'✅ pass' if g.passed else '❌ fail'} |")
    if not report.gates:
        out.append("| (no gates configured) | | | |")
    out += [""] + summary_markdown(ev)
    if ev.overflow_examples:
        out += ["", "First natural-bucket overflows (`extend_seq_lens`):", ""]
        out += [f"- `{seq}` (n={sum(seq)})" for seq in ev.overflow_examples[:MAX_SHOWN]]
    return "\n".join(out) + "\n"


def append_step_summary(path: str | os.PathLike[str], markdown: str) -> None:
    """Append `markdown` to the step-summary file (created if missing), atomically: the file
    holds either its old content or the old content plus the whole summary."""
    target = Path(path)
    old = target.read_bytes() if target.exists() else b""
    separator = b"\n" if old and not old.endswith(b"\n") else b""
    write_atomic(target, old + separator + markdown.encode())
