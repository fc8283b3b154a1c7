"""Rich rendering of planner results (tables for people) and JSON documents (for machines)."""

from __future__ import annotations

import orjson
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from cpbcg.config import DeploymentConfig
from cpbcg.planner.evaluate import Evaluation

REASON_HELP = {
    "not_cp_active": "a request shorter than 2*cp_size (zigzag needs every request >= 2*cp_size)",
    "above_largest_bucket": "more tokens than the largest captured bucket",
    "padding_limit": "the first bucket with enough local rows is beyond max_padding_factor * n",
    "local_capacity": "no bucket >= n has enough CP-local rows",
}


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole else "-"


def deployment_header(cfg: DeploymentConfig, source: str) -> dict:
    """Settings that qualify every report (also the JSON header)."""
    return {
        "source": source,
        "cp_size": cfg.cp_size,
        "cp_strategy": cfg.cp_strategy.value,
        "align_size": cfg.cp_layout.align_rows,
        "max_padding_factor": cfg.max_padding_factor,
        "capture_layout": cfg.capture_layout.value,
    }


def evaluation_json(ev: Evaluation, header: dict) -> bytes:
    """The `--format json` document of an evaluation (header keys, then the evaluation's)."""
    return orjson.dumps({**header, **ev.to_dict()}, option=orjson.OPT_INDENT_2) + b"\n"


def evaluation_tables(ev: Evaluation, header: dict) -> Group:
    """Summary, eager reasons and bucket hits as rich renderables."""
    title = (
        f"{header['source']} | cp_size {header['cp_size']} {header['cp_strategy']}, align {header['align_size']}, "
        f"max_padding_factor {header['max_padding_factor']:g} | {len(ev.buckets)} buckets "
        f"{ev.buckets[0]}..{ev.buckets[-1]}"
    )
    summary = Table(title=title, title_justify="left", show_header=True)
    summary.add_column("metric")
    summary.add_column("batches", justify="right")
    summary.add_column("tokens", justify="right")
    summary.add_row("trace", f"{ev.batches:,}", f"{ev.tokens:,}")
    summary.add_row(
        "replayed in graphs",
        f"{ev.graph_batches:,} ({pct(ev.graph_batches, ev.batches)})",
        f"{ev.graph_tokens:,} ({pct(ev.graph_tokens, ev.tokens)})",
    )
    summary.add_row("padding (padded / real graph tokens)", "", f"{ev.padded_tokens:,} ({pct(ev.padded_tokens, ev.graph_tokens)})")
    summary.add_row("rescued by a larger bucket", f"{ev.rescued:,}", "")
    summary.add_row("natural bucket overflow (old runtime crash)", f"{ev.natural_overflow:,}", "")
    for reason, count in ev.eager.items():
        summary.add_row(f"eager: {reason}", f"{count:,} ({pct(count, ev.batches)})", f"{ev.eager_tokens[reason]:,}")
    parts: list = [summary]
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
    table.caption = f"{idle} of {len(ev.buckets)} buckets were never hit"
    return table


def _short(seq: list[int], limit: int = 12) -> str:
    body = ", ".join(map(str, seq[:limit]))
    return f"[{body}{', ...' if len(seq) > limit else ''}] (n={sum(seq)})"


def print_json(console: Console, payload: bytes) -> None:
    """Write a JSON document to the console's file unchanged (no rich markup, no wrapping)."""
    console.file.write(payload.decode())
    console.file.flush()
