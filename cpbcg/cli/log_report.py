"""What `plan` and `replay-check` show of an SGLang server log: observed vs modelled graph use
with the measured capture cost (a table). The stderr lines (settings taken from the log, lines
skipped and folded) are `cpbcg.notes`'; the JSON section is `cpbcg.documents.observed_document`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Group

    from cpbcg.api import LogSettings, ObservedComparison


def observed_renderable(observed: "ObservedComparison | None", log: "LogSettings | None") -> "Group | None":
    """Observed vs modelled per DP rank, the disagreeing lines (model errors first) and the
    measured per-bucket capture memory; None when the log has neither."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from cpbcg.api import counted

    parts: list = []
    if observed is not None:
        table = Table(title=f"Observed ({observed.label}, printed by the server) vs modelled", title_justify="left")
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
            lines.append(f"model errors: {observed.model_errors:,} forwards the server ran in graphs, the model calls eager:")
            lines += [f"  line {d.line_no}: DP{d.dp_rank} {d.num_tokens} tokens in {d.num_requests} requests: model {d.model} "
                      f"({'; '.join(d.explanations)})" for d in observed.model_error_lines]
        if observed.unexplained_eager:
            lines.append(f"{observed.unexplained_eager:,} forwards the model replays ran eagerly on the server; possible reasons: "
                         + ", ".join(f"{k} ({v:,})" for k, v in observed.eager_explanations.items()))
            lines += [f"  line {d.line_no}: DP{d.dp_rank} {d.num_tokens} tokens in {d.num_requests} requests: model {d.model}"
                      for d in observed.eager_lines]
        lines += [f"cpbcg: note: {n}" for n in observed.notes]
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
