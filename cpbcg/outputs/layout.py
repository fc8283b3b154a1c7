"""`cpbcg layout` as a table: one batch explained (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cpbcg.outputs.console import OutputFormat, assert_never, print_json, stdout_console





if TYPE_CHECKING:
    from rich.console import Group
    from rich.text import Text

    from cpbcg.planner.deployment import Deployment
    from cpbcg.planner.model.explain import BatchExplanation


def write(explanation: BatchExplanation, deployment: Deployment, output_format: OutputFormat) -> None:
    """One batch explained on stdout in `output_format`."""
    if output_format is OutputFormat.json:
        from cpbcg.outputs.documents import dumps
        from cpbcg.planner.document import document

        print_json(dumps(document(explanation)))
    elif output_format is OutputFormat.table:
        dep = deployment
        stdout_console().print(render_explanation(explanation, dep.cp.cp_size, dep.cp.align_rows, dep.max_padding_factor))
    else:
        assert_never(output_format)


def render_explanation(ex: "BatchExplanation", cp_size: int, align: int, max_padding_factor: float = 2.0) -> "Group":
    """Rank table plus a verdict line."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from cpbcg.planner.words import counted
    from cpbcg.outputs.tables import REASON_HELP

    table = Table(title=f"extend_seq_lens {ex.extend_seq_lens} (n={ex.num_tokens}), cp_size {cp_size}", title_justify="left")
    table.add_column("rank", justify="right")
    if ex.block_tokens:
        table.add_column("blocks held (request: block j, block 2cp-1-j → tokens)")
    table.add_column("logical tokens", justify="right")
    table.add_column("physical rows", justify="right")
    for rank, tokens in enumerate(ex.rank_local_tokens):
        cells = [str(rank)]
        if ex.block_tokens:
            first, second = ex.rank_blocks[rank]
            held = [f"r{i}: b{first}+b{second} → {b[first]}+{b[second]}" for i, b in enumerate(ex.block_tokens)]
            cells.append("; ".join(held))
        cells += [str(tokens), str(ex.local_rows)]
        table.add_row(*cells)
    verdict = Text() if ex.bucket_note is None else Text(f"cpbcg: note: {ex.bucket_note}\n")
    if cp_size == 1:  # no CP: no ranks to split over, rows are tokens, every bucket holds its own size
        verdict.append(f"no context parallelism (cp_size 1): the forward runs SGLang's plain prefill graphs, rows = tokens "
                       f"and a bucket of B tokens holds B, so the smallest bucket >= n within max_padding_factor "
                       f"{max_padding_factor:g} x n serves it\n")
        return Group(table, verdict.append_text(_outcome(ex)))
    verdict.append(f"rows = align_up(max {max(ex.rank_local_tokens)}, {align}) = {ex.local_rows}")
    verdict.append(f" (worst case for {counted(len(ex.extend_seq_lens), 'request')} of {counted(ex.num_tokens, 'token')}: {ex.worst_case_rows})\n")
    if not ex.cp_active:
        verdict.append("eager: ", style="bold red")
        verdict.append(REASON_HELP["not_cp_active"] + "\n")
        return Group(table, verdict)
    if ex.natural_bucket is not None and ex.natural_capacity_rows is not None:
        fits = ex.local_rows <= ex.natural_capacity_rows
        within = ex.natural_bucket <= max_padding_factor * ex.num_tokens  # the selector's own comparison
        if not within:
            verdict.append(f"natural bucket {ex.natural_bucket} is above max_padding_factor {max_padding_factor:g} x n = "
                           f"{max_padding_factor * ex.num_tokens:g} tokens: beyond the padding limit\n")
        else:
            verdict.append(f"natural bucket {ex.natural_bucket}: C = {ex.natural_capacity_rows} rows → {'fits' if fits else 'too small'}\n")
    return Group(table, verdict.append_text(_outcome(ex)))


def _outcome(ex: "BatchExplanation") -> "Text":
    """The bucket the forward replays in (rows against C(B) under CP), or why it runs eagerly."""
    from rich.text import Text

    from cpbcg.planner.words import counted
    from cpbcg.outputs.tables import REASON_HELP

    out = Text()
    if ex.bucket is not None:
        style = "bold yellow" if ex.rescued else "bold green"
        label = "rescued: replays in" if ex.rescued else "replays in"
        rows = f"C = {ex.capacity_rows} rows, " if len(ex.rank_local_tokens) > 1 else ""
        out.append(f"{label} bucket {ex.bucket} ({rows}padding {counted(ex.bucket - ex.num_tokens, 'token')})", style=style)
    else:
        out.append(f"eager ({ex.eager_reason}): ", style="bold red")
        out.append(REASON_HELP[str(ex.eager_reason)])
    return out


