"""What `plan` and `replay-check` say about an SGLang server log: the settings taken "from the
log" (stderr), what reading it skipped and folded (stderr), and observed vs modelled graph use
with the measured capture cost (a table, or a JSON section)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import typer

from cpbcg.planner.traces.sources import BatchSource
from cpbcg.planner.traces.text import display

if TYPE_CHECKING:
    from rich.console import Group

    from cpbcg.planner.observed import ObservedComparison
    from cpbcg.planner.traces.sglang_settings import LogSettings


def print_log_settings(log: "LogSettings | None", overrides: Mapping[str, Any]) -> None:
    """One stderr line per setting the log states: `cpbcg: from the log: cp_size 1
    (server_args.attn_cp_size, line 3)`, or `..., overridden by the command line`."""
    if log is None:
        return
    given = {k for k, v in overrides.items() if v is not None}
    for s in log.settings:
        value = ",".join(map(str, s.value)) if isinstance(s.value, list) else s.value
        shown = value if len(str(value)) <= 60 else f"{len(s.value)} buckets {s.value[0]}..{s.value[-1]}"
        tail = "; overridden by the command line" if s.key in given else ""
        typer.echo(f"cpbcg: from the log: {s.key} {shown} ({s.origin}{tail})", err=True)
    for note in log.notes:
        typer.echo(f"cpbcg: note: {note}", err=True)


def print_log_summary(source: BatchSource) -> None:
    """The reader's skipped / folded lines (stderr), after the log was read."""
    summary = source.log_summary
    if summary is None:
        return
    path = display(source.log.path if source.log is not None else "log")
    for line in (summary.skipped_note(path), summary.folded_note(path)):
        if line is not None:
            typer.echo(f"cpbcg: note: {line}", err=True)


def capture_settings(log: "LogSettings | None") -> dict[str, Any]:
    """`RecommendSettings` fields from the log's measured capture cost (`capture_s_per_bucket`,
    `graph_mib_per_token`, `capture_source`), {} without capture lines. Graph memory is the
    largest bucket's (one shared pool that the largest bucket sizes)."""
    cost = None if log is None else log.capture
    if cost is None or not cost.bucket_gb:
        return {}
    largest = max(cost.bucket_gb)
    out: dict[str, Any] = {"graph_mib_per_token": cost.bucket_gb[largest] * 1024 / largest}
    if cost.capture_s is not None:
        out["capture_s_per_bucket"] = cost.capture_s / len(cost.bucket_gb)
    out["capture_source"] = f"measured on {cost.date or 'an undated day'} by the log {log.path}"  # type: ignore[union-attr]
    return out


def observed_document(observed: "ObservedComparison | None", log: "LogSettings | None") -> dict[str, Any] | None:
    """The JSON section `observed` (plan and replay-check), or None."""
    if observed is None and (log is None or log.capture is None):
        return None
    doc: dict[str, Any] = observed.to_dict() if observed is not None else {}
    if log is not None and log.capture is not None:
        c = log.capture
        doc["capture"] = {"bucket_gb": {str(b): gb for b, gb in sorted(c.bucket_gb.items())}, "total_gb": c.total_gb,
                          "capture_s": c.capture_s, "source": f"measured on {c.date or 'an undated day'} by the log {log.path}"}
    return doc


def observed_renderable(observed: "ObservedComparison | None", log: "LogSettings | None") -> "Group | None":
    """Observed vs modelled per DP rank, the disagreeing lines (model errors first) and the
    measured per-bucket capture memory; None when the log has neither."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list = []
    if observed is not None:
        table = Table(title=f"Observed ({observed.label}, printed by the server) vs modelled", title_justify="left")
        for name in ("DP rank", "forwards", "observed in graphs", "modelled in graphs", "observed tokens in graphs", "modelled tokens in graphs"):
            table.add_column(name, justify="right")
        for r in observed.ranks:
            table.add_row(str(r.dp_rank), f"{r.forwards:,}", _frac(r.graph_forwards, r.forwards), _frac(r.model_graph_forwards, r.forwards),
                          _frac(r.graph_tokens, r.tokens), _frac(r.model_graph_tokens, r.tokens))
        parts.append(table)
        lines = [f"agree on {observed.agreeing:,} of {observed.forwards:,} forwards"]
        if observed.without_verdict:
            lines.append(f"{observed.without_verdict:,} forwards printed no verdict (not compared)")
        if observed.model_errors:
            lines.append(f"model errors: {observed.model_errors:,} forwards the server ran in graphs, the model calls eager:")
            lines += [f"  line {d.line_no}: DP{d.dp_rank} {d.num_tokens} tokens in {d.num_requests} requests: model {d.model} "
                      f"({'; '.join(d.explanations)})" for d in observed.model_error_lines]
        if observed.unexplained_eager:
            lines.append(f"{observed.unexplained_eager:,} forwards the model replays ran eagerly on the server; possible reasons: "
                         + ", ".join(f"{k} ({v:,})" for k, v in observed.eager_explanations.items()))
            lines += [f"  line {d.line_no}: DP{d.dp_rank} {d.num_tokens} tokens in {d.num_requests} requests: model {d.model}"
                      for d in observed.eager_lines]
        lines += [f"note: {n}" for n in observed.notes]
        parts.append(Text("\n".join(lines)))
    if log is not None and log.capture is not None and log.capture.bucket_gb:
        c = log.capture
        table = Table(title="Capture memory per bucket", title_justify="left")
        table.add_column("bucket (tokens)", justify="right")
        table.add_column("GiB", justify="right")
        shown = [(b, gb) for b, gb in sorted(c.bucket_gb.items(), reverse=True) if gb >= 0.005]
        for b, gb in shown:
            table.add_row(str(b), f"{gb:.2f}")
        rest = len(c.bucket_gb) - len(shown)
        if rest:
            table.add_row(f"{rest} other buckets", "0.00 each")
        parts.append(table)
        total = [f"total {c.total_gb:.2f} GiB" if c.total_gb is not None else "", f"capture {c.capture_s:.2f} s" if c.capture_s is not None else ""]
        parts.append(Text(f"measured on {c.date or 'an undated day'} by the log {log.path}" + "".join(f", {t}" for t in total if t)))
    return Group(*parts) if parts else None


def _frac(part: int, whole: int) -> str:
    return f"{part:,} ({part / whole:.2%})" if whole else "0"
