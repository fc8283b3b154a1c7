"""What `plan` and `replay-check` show of SGLang server logs: per log, its launches (settings as
read, what was assumed, observed vs modelled graph use, the measured capture total) and their
total, then the comparison per DP rank with the disagreeing lines, and the measured capture memory
per bucket (a table). The stderr lines (settings taken from the log, lines skipped and folded) are
`cpbcg.outputs.notes`'; the JSON section is `cpbcg.outputs.documents.observed_document`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from rich.console import Group

    from cpbcg.engines.sglang.observed import LogObserved, ObservedComparison
    from cpbcg.assembly.plan import LaunchPlan
    from cpbcg.engines.sglang.logs.settings import LogSettings


def observed_renderable(observed: "ObservedComparison | None", log: "LogSettings | None",
                        logs: "Sequence[LogObserved]" = ()) -> "Group | None":
    """Per log (`logs`; else the one `observed` of `log`): the launch table when it has several
    launches or assumed settings, observed vs modelled per DP rank, the disagreeing lines (model
    errors first) and the measured per-bucket capture memory; None when there is nothing to show."""
    from rich.console import Group

    parts: list = []
    if len(logs) > 1:
        parts.append(_logs_table(logs))
    shown = [(one.observed, one.settings, one.path) for one in logs] if len(logs) > 1 else [(observed, log, log.path if log else "")]
    for one_observed, one_log, path in shown:
        parts += _one_log(one_observed, one_log, path if len(logs) > 1 else "")
    return Group(*parts) if parts else None


def launch_plans_table(launches: "Sequence[LaunchPlan]") -> object:
    """The main table of a log of several launches, per launch (`PlanResult.launches`): the
    server each was modelled under and its forwards in graphs, with the total."""
    from rich.table import Table

    table = Table(title="Main table by launch: each launch under the server it resolved to", title_justify="left")
    for name in ("launch", "from line", "cp", "chunk", "buckets", "forwards", "modelled in graphs", "padding", "recommendation"):
        table.add_column(name, justify="left" if name in ("buckets", "recommendation") else "right")
    for one in launches:
        ev, dep, buckets = one.evaluation, one.model.deployment, one.model.table.capture_num_tokens.tolist()
        shown = f"{len(buckets)}: {buckets[0]}..{buckets[-1]}" if buckets else "none"
        if one.settings.prefill_graphs is False:
            shown += " (graphs off)"
        table.add_row(str(one.launch), str(one.first_line), str(one.model.cp.cp_size),
                      "" if dep is None else str(dep.scheduler.chunked_prefill_size), shown, f"{ev.batches:,}",
                      _frac(ev.graph_batches, ev.batches), f"{ev.padding_overhead:.2%}", "fitted on it, for its server" if one.fitted else "")
    total_batches = sum(one.evaluation.batches for one in launches)
    table.add_row("total", "", "", "", "", f"{total_batches:,}", _frac(sum(one.evaluation.graph_batches for one in launches), total_batches),
                  "", "")
    return table


def _logs_table(logs: "Sequence[LogObserved]") -> object:
    from rich.table import Table

    table = Table(title="SGLang logs, each under its own settings", title_justify="left")
    for name in ("log", "SGLang", "launches", "forwards", "observed in graphs", "modelled in graphs", "agree", "model errors (assumed)"):
        table.add_column(name, justify="left" if name in ("log", "SGLang") else "right")
    for one in logs:
        o = one.observed
        launches = str(one.summary.launches) if one.summary is not None else "1"
        if o is None:
            table.add_row(one.path, one.settings.version or "?", launches, "-", "no verdicts", "", "", "")
            continue
        table.add_row(one.path, one.settings.version or "?", launches, f"{o.forwards:,}", _frac(o.graph_forwards, o.forwards),
                      _frac(sum(r.model_graph_forwards for r in o.ranks), o.forwards), _frac(o.agreeing, o.forwards),
                      f"{o.model_errors:,} ({o.assumption_errors:,})")
    return table


def _one_log(observed: "ObservedComparison | None", log: "LogSettings | None", path: str) -> list:
    from rich.table import Table
    from rich.text import Text

    from cpbcg.engines.sglang.release import SGLANG_VERSION
    from cpbcg.planner.words import counted

    parts: list = []
    where = f" — {path}" if path else ""
    if observed is not None and (len(observed.launches) > 1 or any(launch.assumed for launch in observed.launches)):
        table = Table(title=f"Launches{where}: each compared under its own settings", title_justify="left")
        for name in ("launch", "from line", "forwards", "observed in graphs", "modelled in graphs", "agree", "capture (measured)",
                     "settings read / assumed"):
            table.add_column(name, justify="left" if name == "settings read / assumed" else "right")
        for launch in observed.launches:
            lc, s = launch.comparison, launch.settings
            cost = s.capture
            measured = f"{cost.total_gb:.2f} GiB (line {cost.total_line})" if cost is not None and cost.total_gb is not None else "-"
            read = "; ".join(_setting(x.key, x.value) + f" ({x.origin})" for x in s.settings if x.key in ("cp_size", "scheduler.chunked_prefill_size"))
            assumed = "; ".join(a.text() for a in launch.assumed)
            table.add_row(str(launch.launch), str(launch.first_line), f"{lc.forwards:,}", _frac(lc.graph_forwards, lc.forwards),
                          _frac(sum(r.model_graph_forwards for r in lc.ranks), lc.forwards), _frac(lc.agreeing, lc.forwards), measured,
                          "; ".join(t for t in (read, assumed) if t) or "-")
        if len(observed.launches) > 1:
            table.add_row("total", "", f"{observed.forwards:,}", _frac(observed.graph_forwards, observed.forwards),
                          _frac(sum(r.model_graph_forwards for r in observed.ranks), observed.forwards),
                          _frac(observed.agreeing, observed.forwards), "", "")
        parts.append(table)
    if observed is not None:
        table = Table(title=f"Observed ({observed.label}, printed by the server) vs modelled{where}", title_justify="left")
        for name in ("DP rank", "forwards", "observed in graphs", "modelled in graphs", "observed tokens in graphs", "modelled tokens in graphs"):
            table.add_column(name, justify="right")
        for r in observed.ranks:
            table.add_row(str(r.dp_rank), f"{r.forwards:,}", _frac(r.graph_forwards, r.forwards), _frac(r.model_graph_forwards, r.forwards),
                          _frac(r.graph_tokens, r.tokens), _frac(r.model_graph_tokens, r.tokens))
        parts.append(table)
        lines = [f"agree on {observed.agreeing:,} of {counted(observed.forwards, 'forward')}"]
        if observed.without_verdict:
            lines.append(f"{observed.without_verdict:,} forwards printed no verdict (not compared)")
        if observed.model_errors:
            assumed = f" ({observed.assumption_errors:,} of them explained by assumed settings)" if observed.assumption_errors else ""
            lines.append(f"model errors: {observed.model_errors:,} forwards the server ran in graphs, the model calls eager{assumed}:")
            lines += [f"  line {d.line_no}: DP{d.dp_rank} {d.num_tokens} tokens in {d.num_requests} requests: model {d.model} "
                      f"({'; '.join(d.explanations)})" for d in observed.model_error_lines]
        if observed.unexplained_eager:
            lines.append(f"{observed.unexplained_eager:,} forwards the model replays ran eagerly on the server; possible reasons: "
                         + ", ".join(f"{k} ({v:,})" for k, v in observed.eager_explanations.items()))
            lines += [f"  line {d.line_no}: DP{d.dp_rank} {d.num_tokens} tokens in {d.num_requests} requests: model {d.model}"
                      for d in observed.eager_lines]
        lines += [f"cpbcg: note: {n}" for n in observed.notes]
        if log is not None and log.version is not None:
            lines.append(f"the log's SGLang version: {log.version} (line {log.version_line}); the model follows {SGLANG_VERSION}")
        parts.append(Text("\n".join(lines)))
    if log is not None and log.capture is not None and log.capture.bucket_gb:
        c = log.capture
        backend = f" ({c.backend} graphs, as the log's capture lines name them)" if c.backend else " (the log does not name the graph backend)"
        table = Table(title=f"Capture memory per bucket{backend}", title_justify="left")
        table.add_column("bucket (tokens)", justify="right")
        table.add_column("GiB", justify="right")
        shown = [(b, gb) for b, gb in sorted(c.bucket_gb.items(), reverse=True) if gb >= 0.005]
        for b, gb in shown:
            table.add_row(str(b), f"{gb:.2f}")
        rest = len(c.bucket_gb) - len(shown)
        if rest:
            table.add_row(f"{rest} other buckets", "0.00 each")
        parts.append(table)
        total = [f"total {c.total_gb:.2f} GiB measured (log line {c.total_line})" if c.total_gb is not None else "",
                 f"capture {c.capture_s:.2f} s" if c.capture_s is not None else ""]
        several = observed is not None and len(observed.launches) > 1  # a log of several launches: these are the first's
        which = f" (launch {log.launch}, line {log.first_line}; each launch's total is in the Launches table)" if several else ""
        parts.append(Text(f"measured on {c.date or 'an undated day'} by the log {log.path}{which}" + "".join(f", {t}" for t in total if t)))
    return parts


def _setting(key: str, value: object) -> str:
    return f"{key.split('.')[-1]} {value}"


def _frac(part: int, whole: int) -> str:
    return f"{part:,} ({part / whole:.2%})" if whole else "0"
