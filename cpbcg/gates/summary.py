"""The evaluation summary as one model: the rows every report shows, in one order.

`plan`'s terminal table, `replay-check`'s markdown step summary and the JUnit report's plain
text all render `summary_rows(evaluation)`; none of them re-derives a number or a label.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.planner.evaluate import Evaluation


@dataclass(frozen=True)
class SummaryRow:
    """One line of the evaluation summary."""

    metric: str
    """What the row counts, in words."""
    batches: int | None
    """Forwards (None: not a forward count)."""
    tokens: int | None
    """Tokens (None: not a token count)."""
    batches_of: int | None = None
    """The whole the forward count is a share of (None: show no share)."""
    tokens_of: int | None = None
    """The whole the token count is a share of."""


def summary_rows(ev: Evaluation) -> list[SummaryRow]:
    """Trace, graph replays, padding, rescued, natural overflow, then eager forwards per reason."""
    rows = [
        SummaryRow("trace", ev.batches, ev.tokens),
        SummaryRow("replayed in graphs", ev.graph_batches, ev.graph_tokens, ev.batches, ev.tokens),
        SummaryRow("padding (padded / real graph tokens)", None, ev.padded_tokens, None, ev.graph_tokens),
        SummaryRow("rescued by a larger bucket", ev.rescued, None),
        SummaryRow("natural bucket overflow (old runtime crash)", ev.natural_overflow, None),
    ]
    rows += [SummaryRow(f"eager: {reason}", count, ev.eager_tokens[reason], ev.batches, None) for reason, count in ev.eager.items()]
    return rows


def pct(part: float, whole: float) -> str:
    """`72.75%` (two decimals), `-` when the whole is 0."""
    return f"{100.0 * part / whole:.2f}%" if whole else "-"


def cell(value: int | None, whole: int | None) -> str:
    """`5,397 (26.98%)`, `5,397`, or empty."""
    if value is None:
        return ""
    return f"{value:,}" if whole is None else f"{value:,} ({pct(value, whole)})"


def summary_text(ev: Evaluation) -> list[str]:
    """The rows as plain `metric: batches / tokens` lines (JUnit system-out, logs)."""
    lines = []
    for row in summary_rows(ev):
        parts = [f"{cell(row.batches, row.batches_of)} forwards" if row.batches is not None else "",
                 f"{cell(row.tokens, row.tokens_of)} tokens" if row.tokens is not None else ""]
        lines.append(f"{row.metric}: " + ", ".join(p for p in parts if p))
    return lines


def summary_markdown(ev: Evaluation) -> list[str]:
    """The rows as a markdown table (`| metric | batches | tokens |`)."""
    out = ["| metric | batches | tokens |", "|---|---:|---:|"]
    for r in summary_rows(ev):
        out.append("| " + " | ".join([r.metric, cell(r.batches, r.batches_of), cell(r.tokens, r.tokens_of)]).rstrip() + " |")
    return out
