"""Rich rendering of planner results (tables for people) and JSON documents (for machines)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cpbcg.gates.summary import cell, pct, summary_rows
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.words import counted
from cpbcg.engines.sglang.release import SGLANG_VERSION

REASON_HELP = {
    "not_cp_active": "not CP-active (zigzag needs every request >= 2*cp_size tokens, interleave a forward >= cp_size)",
    "above_largest_bucket": "more tokens than the largest captured bucket",
    "padding_limit": "the first bucket with enough local rows is beyond max_padding_factor * n",
    "local_capacity": "no bucket >= n has enough CP-local rows",
    "context_limit": "a request's sequence (prefix + extend) above max_seq_len_tokens (SGLang prefill max_seq_len)",
    "multimodal_input": "an interleave forward with a request carrying images (SGLang allows_replay)",
}


def summed_header(header: dict, parts: tuple) -> dict:
    """`header` with its source saying, over several (trace, load) parts, that the table sums them
    (a trace at four rates is four simulations: its forwards are counted four times)."""
    if len(parts) < 2:
        return header
    traces = len({p.label for p in parts})
    what = f"{len(parts)} (trace, load) simulations of {traces} trace{'s' if traces != 1 else ''} at {', '.join(dict.fromkeys(p.load for p in parts))}"
    return {**header, "source": f"{header['source']} | the sum of {what}"}


def evaluation_tables(ev: Evaluation, header: dict) -> Group:
    """Summary, eager reasons and bucket hits as rich renderables."""
    title = (
        f"{header['source']} | cp_size {header['cp_size']} {header['cp_strategy']}, align {header['align_size']}, "
        f"max_padding_factor {header['max_padding_factor']:g} | {counted(len(ev.buckets), 'bucket')} "
        f"{ev.buckets[0]}..{ev.buckets[-1]} | SGLang {header.get('sglang_version', SGLANG_VERSION)}"
    )
    launches = header.get("launch_total")
    if launches:  # a log of several launches (`PlanResult.launch_header`): the header is the last one's, the table their total
        own = launches["header_buckets"]
        title = (
            f"{header['source']} | {launches['launches']} launches: this table and the bucket hits are their total, over the union "
            f"of their lists ({counted(len(ev.buckets), 'bucket')} {ev.buckets[0]}..{ev.buckets[-1]}) | launch "
            f"{launches['header_launch']} (line {launches['header_first_line']}), the server as it runs now: cp_size "
            f"{header['cp_size']} {header['cp_strategy']}, align {header['align_size']}, max_padding_factor "
            f"{header['max_padding_factor']:g}, {counted(len(own), 'bucket')} {own[0]}..{own[-1]} | SGLang "
            f"{header.get('sglang_version', SGLANG_VERSION)}"
        )
    summary = Table(title=title, title_justify="left", show_header=True)
    summary.add_column("metric")
    summary.add_column("batches", justify="right")
    summary.add_column("tokens", justify="right")
    for row in summary_rows(ev):
        summary.add_row(row.metric, cell(row.batches, row.batches_of), cell(row.tokens, row.tokens_of))
    parts: list = [summary] if ev.bucket_note is None else [Text(f"cpbcg: note: {ev.bucket_note}"), summary]
    if header.get("server"):
        parts.insert(0, Text(" | ".join(header["server"]["said"])))
    examples = [(r, ex[0]) for r, ex in ev.eager_examples.items() if ex]
    if examples:
        lines = Text("First eager batch per reason (extend_seq_lens):\n", style="bold")
        for reason, seq in examples:
            lines.append(f"  {reason}: {_short(seq)}  — {REASON_HELP[reason]}\n")
        parts.append(lines)
    parts.append(bucket_hits_table(ev))
    return Group(*parts)


def bucket_hits_table(ev: Evaluation) -> Table:
    """Buckets that replayed at least one batch, with their capacity and share of replays."""
    table = Table(title="Bucket hits (buckets never hit are left out)", title_justify="left")
    for name in ("bucket (tokens)", "C(B) (rows)", "hits", "share of graph batches"):
        table.add_column(name, justify="right")
    idle = 0
    for bucket, cap in zip(ev.buckets, ev.capacity_rows):
        hits = ev.bucket_hits[bucket]
        if hits == 0:
            idle += 1
            continue
        table.add_row(str(bucket), str(cap), f"{hits:,}", pct(hits, ev.graph_batches))
    table.caption = f"{idle} of {counted(len(ev.buckets), 'bucket')} {'was' if idle == 1 else 'were'} never hit"
    return table


def _short(seq: list[int], limit: int = 12) -> str:
    body = ", ".join(map(str, seq[:limit]))
    return f"[{body}{', ...' if len(seq) > limit else ''}] (n={sum(seq)})"
