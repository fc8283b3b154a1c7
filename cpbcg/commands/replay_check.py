"""`cpbcg replay-check`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable, Mapping

from cpbcg.engines.sglang.server import resolved_server
from cpbcg.atomic import STDOUT, check_outputs
from cpbcg.commands.common import input_files, launch_resolver, load_model_rates
from cpbcg.commands.replay_check_options import ReplayCheckOptions
from cpbcg.api import check, check_decode_flags, load_config_and_deployment, server_check
from cpbcg.errors import ConfigError, located
from cpbcg.gates.gates import CheckReport, GateResult, Gates, max_eager_overrides
from cpbcg.manifest import MANIFEST_KEYS, load_manifest
from cpbcg.outputs.notes import GATES_HINT, HeldNotes, ignored_options_warning, log_settings_notes, log_summary_notes, rate_notes, read_notes, resolution_notes, server_check_notes
from cpbcg.assembly.sources import BatchSource, detect_input
from cpbcg.engines.sglang.observed import assumed_settings
from cpbcg.engines.sglang.release import SGLANG_VERSION
from cpbcg.planner.traces import ReadOptions
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.settings import setting


NO_GATES = f"no gates configured: {GATES_HINT}"
"""What `replay-check` says when no gate is configured."""


@dataclass(frozen=True)
class ReplayCheckReport:
    """Everything `cpbcg replay-check` shows: the library's `CheckReport` and the trace it read
    (complete: its simulation summary, for the JSON report, is final)."""

    report: CheckReport
    source: BatchSource


def run(request: ReplayCheckOptions, config: str | None, overrides: Mapping[str, object], trace_path: str | Path | None, *,
        trace_format: str = "auto", options: ReadOptions | None = None, ignored_flags: list[str] | None = None,
        note: Callable[[str], None] = lambda text: None, progress: Callable[[int], None] | None = None,
        on_chunk: Callable[[object], object] | None = None) -> ReplayCheckReport:
    """`cpbcg replay-check` with its options: the report files checked writable and apart from
    the inputs before any work, then `check_trace` (the lines `note` receives held until the trace
    was read, so that a log's start-up lines say which launch they describe: `HeldNotes`)."""
    check_outputs({"--junit": request.junit, "--json": request.json_path},
                  input_files(config, overrides, trace=trace_path, manifest=request.manifest))
    if str(request.junit) == STDOUT and str(request.json_path) == STDOUT:
        raise ConfigError("--junit - and --json - would both write to stdout; send one to a file")
    with HeldNotes(note) as held:  # a log's start-up lines say their launch once the log was read
        report = check_trace(config, overrides, request.manifest, trace_path, max_eager=request.max_eager, replay=request.replay,
                             report_only=request.report_only, embedded_sample=request.embedded_sample, trace_format=trace_format,
                             options=options, ignored_flags=ignored_flags, note=held, progress=progress, on_chunk=on_chunk)
        held.label_launches(report.source if not report.report.parts else None)
    return report


def check_trace(config: str | None, overrides: Mapping[str, object], manifest_path: str | Path | None, trace_path: str | Path | None, *,
                max_eager: list[str] | None = None, replay: int = 0, report_only: bool = False, trace_format: str = "auto", rates: str | None = "auto",
                embedded_sample: bool = False,
                options: ReadOptions | None = None, ignored_flags: list[str] | None = None, note: Callable[[str], None] = lambda text: None,
                progress: Callable[[int], None] | None = None, on_chunk: Callable[[object], object] | None = None) -> ReplayCheckReport:
    """`cpbcg replay-check`: the deployment (a capture manifest's buckets and CP settings win; an
    SGLang server log's settings lie under the command line), the trace evaluated, the gates of
    the config and `overrides` checked, `replay` forwards replayed through fresh graphs.
    `max_eager` (`REASON=N` texts) merge into the config's `gates.max_eager`. Without any gate
    (and no `replay`) it is a `ConfigError` unless `report_only`, as are flags with which SGLang
    0.5.23 would refuse to start or capture no CP graph (`server_check`), and gating without a trace
    (`trace_path` None) unless `embedded_sample` asks for the embedded workload by name (or
    `report_only`), and gating an SGLang log any launch of which ran prefill forwards with prefill
    graphs off (`BatchSource.graphs_off_launches`; `report_only` reports it). With `report_only`
    a gate in `overrides` (or `replay`) is a `ConfigError` and the config's gates are not checked
    (a note). A request trace without timestamps is simulated at `rates` as `plan` takes
    them (`load_model_rates`). Notes for people go to `note`; the report carries the trace read (its simulation summary)."""
    overrides = {**overrides, **max_eager_overrides(max_eager or [])}
    manifest = load_manifest(manifest_path) if manifest_path is not None else None
    if manifest is not None and manifest.dry_run:
        note(f"cpbcg: warning: {manifest_path} is a CPU dry run: no CUDA graph was captured, so its capacities come from the model")
    detected = None if trace_path is None else detect_input(trace_path, trace_format, options)  # detected once, its start-up output read once
    log = detected.log if detected is not None else None
    cfg, deployment = load_config_and_deployment(config, overrides, manifest=manifest, log=log)
    check_decode_flags(deployment)
    server = resolved_server(deployment)
    for line in log_settings_notes(log, overrides, assumed_settings(log, deployment, overrides, (*MANIFEST_KEYS, "buckets") if manifest else ()), server):
        note(line)
    gates = cfg.gates.to_gates()
    if report_only:
        gates = _report_only_gates(gates, overrides, replay, note)
    if not replay and not report_only and gates == Gates():
        raise ConfigError(f"replay-check: {NO_GATES}; or pass --report-only to report without gates")
    warning = ignored_options_warning(ignored_flags or [], trace_path, detected.format.name if detected is not None else trace_format,
                                      options.length_field if options else None)
    if warning is not None:
        note(warning)
    answer = server.no_prefill_graph() if server is not None and log is None \
        and not server.verdict_hinges_on_the_assumed_model else None
    if answer is not None and not report_only:  # when there is nothing to gate, that is the answer
        helps = server.what_would_help() if server is not None else []
        raise ConfigError(f"{(server.launch_origin if server is not None else '') or 'replay-check'}: {answer}: nothing to gate (or --report-only); what would help: "
                          f"{'; or '.join(helps)}")
    found = server_check(deployment)
    if not found.ok and not report_only:
        what, reason = found.findings()[0]
        origin = server.launch_origin if server is not None and server.launch_origin else "replay-check"
        message = (f"{origin}: SGLang {SGLANG_VERSION} would {what} with these flags ({reason}), so the gates would "
                   "test graphs the server never has; fix the flags (plan --emit sglang writes them), or pass --report-only")
        raise ConfigError(message if log is None else located(log.path, _flags_line(log), message))
    for finding in resolution_notes(server, log) + server_check_notes(found):
        note(finding)
    if trace_path is None and not embedded_sample and not report_only:
        raise ConfigError("replay-check: no --trace given: the gates would run on the embedded synthetic workload, not on your "
                          "traffic (a CI job that forgot its trace would pass); give --trace FILE, or --embedded-sample to gate it on purpose")
    rates = load_model_rates(config, overrides, rates)
    resolve = launch_resolver(config, overrides, manifest) if log is not None else None
    report, source = check(detected, deployment, gates, manifest=manifest, replay=replay, trace_format=trace_format,
                           options=options, progress=progress, on_chunk=on_chunk, rates=rates, resolve_launch=resolve)
    if source.log_summary is not None:  # what the log reader skipped, in the JSON and JUnit reports (a gate judged what was kept)
        report = replace(report, header={**report.header, **source.log_summary.skipped_document()})
    above = source.above_chunk if not report.parts else None
    if above is not None:  # a batch trace's forwards that contradict the chunk (warned below), in the JSON and JUnit reports
        report = replace(report, header={**report.header, "forwards_above_chunked_prefill_size": above.forwards})
    off = source.graphs_off_launches
    printed = report.observed is not None and report.observed.forwards > report.observed.without_verdict
    several = source.log_summary is not None and source.log_summary.launches > 1
    if off and not report_only and not printed:
        raise ConfigError(_graphs_off_refusal(*off[0], several=several))
    if off and not report_only:  # the lines print what the server did: a failed gate, in the reports CI reads
        report = replace(report, gates=(_graphs_off_gate(off, several=several), *report.gates))
    for part in report.parts:
        note(f"{part.label} at {part.load}:")
        for line in read_notes(part.source, ignored_flags or [], part.label):
            note(line)
    for line in read_notes(source, ignored_flags or [], trace_path) if not report.parts else ():
        note(line)
    for line in log_summary_notes(source):
        note(line)
    for line in rate_notes(report.parts, rates is not None):
        note(line)
    return ReplayCheckReport(report, source)




def _report_only_gates(gates: Gates, overrides: Mapping[str, object], replay: int, note: Callable[[str], None]) -> Gates:
    """`--report-only` runs no gate: one given on the command line (`overrides`' `gates.*` keys,
    `--max-eager`, `--replay`, which adds `replay_verified`) contradicts it (`ConfigError` naming
    both options); the config's own `gates:` are simply not checked, said in a note. Returns no gates."""
    given = [("--max-eager" if key.startswith("gates.max_eager.") else str(setting(key).flag))
             for key, value in overrides.items() if key.startswith("gates.") and value is not None]
    given = list(dict.fromkeys(given + (["--replay"] if replay else [])))
    if given:
        raise ConfigError(f"replay-check: --report-only runs no gate, but {' and '.join(given)} {'sets' if len(given) == 1 else 'set'} "
                          f"one: drop --report-only to gate, or drop {' and '.join(given)} to report only")
    if gates != Gates():
        names = [f.name for f in fields(gates) if getattr(gates, f.name) not in (None, {})]
        note(f"cpbcg: note: replay-check: --report-only: the config's gates ({', '.join(names)}) were not checked")
    return Gates()


def _flags_line(log: LogSettings) -> int | None:
    """The line of a log that states the flags a refusal is about: the one that turned prefill
    graphs off, else the settings dump or launch command (None when the log states neither)."""
    line = log.prefill_graphs_at()[1] if log.prefill_graphs is False else None
    return line or log.args_line or None


def _graphs_off_where(launch: LogSettings, several: bool, why: str = "") -> str:
    """`FILE:LINE: prefill graphs off (WHAT)[ in launch N]` and `why`: the line of a log that shows its launch ran
    with prefill graphs off (`LogSettings.prefill_graphs_at`), as the gate and the refusal below both name it."""
    what, line = launch.prefill_graphs_at()
    return located(launch.path, line, f"prefill graphs off ({what})" + (f" in launch {launch.launch}" if several else "") + why)


def _graphs_off_gate(off: tuple[tuple[LogSettings, int], ...], *, several: bool) -> GateResult:
    """The failed gate `prefill_graphs_on` of a log whose lines print the server's verdicts and whose launch(es)
    ran with prefill graphs off (`BatchSource.graphs_off_launches`): the forwards that ran so, against none."""
    forwards = sum(n for _, n in off)
    return GateResult("prefill_graphs_on", "prefill forwards of launches with prefill graphs off", float(forwards), 0.0, "<=",
                      "batches", False, _graphs_off_where(off[0][0], several))


def _graphs_off_refusal(launch: LogSettings, forwards: int, *, several: bool) -> str:
    """The one line refusing to gate a log whose launch ran its prefill forwards with prefill
    graphs off (`BatchSource.graphs_off_launches`): every forward ran eagerly, while the model
    replays them as if graphs were on, so a coverage gate would pass a server that never replayed one."""
    return _graphs_off_where(launch, several, f": its {forwards:,} prefill forwards ran eagerly, not gated; "
                             "pass --report-only to report without gating, or turn prefill graphs on")
