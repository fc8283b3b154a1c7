"""The decode section of `cpbcg plan`'s text report: the server's decode list (SGLang 0.5.23, as
captured) against the recommended one on the traffic's decode steps, the knee, the assumed cost
model and, for a log, the printed verdicts against the modelled ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text


if TYPE_CHECKING:
    from cpbcg.engines.sglang.decode_plan import DecodeEvaluation, DecodePlan


def pct(share: float) -> str:
    """`99.62%` of a 0-1 share."""
    return f"{100.0 * share:.2f}%"


def _sizes(sizes: tuple[int, ...]) -> str:
    if len(sizes) <= 12:
        return " ".join(map(str, sizes))
    return f"{' '.join(map(str, sizes[:6]))} ... {' '.join(map(str, sizes[-3:]))} ({len(sizes)} sizes)"


def decode_verdict_lines(plan: DecodePlan) -> list[str]:
    """The decode phase as the verdict's `decode` entry, wrapped as the verdict's lines are
    (`outputs.verdict`); the detail: `decode_renderable`."""
    from cpbcg.outputs.verdict import VERDICT_WIDTH, labelled_line

    conf, rec = plan.configured, plan.recommended
    if not plan.server.enabled:
        head = f"decode graphs off: all {conf.steps:,} decode steps run eagerly"
    elif conf.eager_steps:
        head = (f"SGLang's decode list (max_bs {conf.max_bs}) runs {conf.eager_steps:,} of {conf.steps:,} decode steps eagerly "
                f"(running batch up to {conf.largest_eager_batch})")
    else:
        head = f"SGLang's decode list (max_bs {conf.max_bs}) keeps all {conf.steps:,} decode steps in graphs (running batch up to {plan.traffic.max_batch})"
    if rec is not None:
        head += (f"; recommended max_bs {rec.max_bs}, {len(rec.batch_sizes)} sizes: {pct(rec.coverage)} in graphs, modelled decode "
                 f"{rec.modelled_s:,.1f} s vs {conf.modelled_s:,.1f} s (assumed step times); --emit sglang carries it")
    return labelled_line("decode", head, VERDICT_WIDTH)


def decode_renderable(plan: DecodePlan) -> Group:
    """The decode section: verdict line, then the table, knee, observed verdicts and the cost model's sources."""
    conf, rec = plan.configured, plan.recommended
    head = Text()
    head.append("Decode graphs: ", style="bold")
    if not plan.server.enabled:
        head.append(f"decode CUDA graphs are off; every one of {conf.steps:,} decode steps runs eagerly")
    elif conf.eager_steps:
        head.append(f"{conf.eager_steps:,} of {conf.steps:,} decode steps ({pct(1 - conf.coverage)}) fall off the graphs "
                    f"(running batch up to {conf.largest_eager_batch}, captured max_bs {conf.max_bs})", style="yellow")
    else:
        head.append(f"every decode step in graphs (running batch up to {plan.traffic.max_batch}, captured max_bs {conf.max_bs})")
    head.append(f"\n  traffic: {plan.source}")
    table = Table(title="Decode list: SGLang's (as captured)" + (" vs recommended" if rec is not None else ""), title_justify="left")
    table.add_column("")
    columns: list[tuple[str, DecodeEvaluation]] = [("server (0.5.23)", conf)]
    if rec is not None:
        columns.append(("recommended", rec))
    for name, _ in columns:
        table.add_column(name, justify="right")
    rows = [("sizes", lambda e: _sizes(e.batch_sizes)), ("max_bs", lambda e: str(e.max_bs)),
            ("steps in graphs", lambda e: f"{e.graph_steps:,} ({pct(e.coverage)})"), ("eager steps", lambda e: f"{e.eager_steps:,}"),
            ("padded rows", lambda e: f"{e.padded_rows:,} ({pct(e.padding)})"),
            ("modelled decode s (assumed)", lambda e: f"{e.modelled_s:,.1f}"),
            ("capture s (assumed) / graph MiB", lambda e: f"{e.capture_s:.1f} / {e.graph_memory_mib:,.0f}")]
    for label, cell in rows:
        table.add_row(label, *(cell(e) for _, e in columns))
    parts: list[object] = [head, table]
    if plan.knee:
        knee = Table(title="Knee: max_bs at step quantiles (0.5.23's ladder to it)", title_justify="left")
        for col in ("steps covered", "max_bs", "graphs", "in graphs", "eager steps", "modelled s"):
            knee.add_column(col, justify="right")
        for row in plan.knee:
            knee.add_row(f"{row['quantile']:.1%}", str(row["max_bs"]), str(row["graphs"]), pct(row["coverage"]),
                         f"{row['eager_steps']:,}", f"{row['modelled_decode_s']:,.1f}")
        parts.append(knee)
    if plan.observed is not None:
        o = plan.observed
        share = "-" if o["eager_share"] is None else pct(o["eager_share"])
        parts.append(Text(f"Decode batch lines: {o['lines']:,} ({o['with_verdict']:,} with a verdict): {o['graph']:,} in graphs, "
                          f"{o['eager']:,} eager ({share}); the model agrees on {o['agree']:,}, disagrees on {o['disagree']:,}"))
    if plan.flags:
        parts.append(Text("deploy: " + " ".join(plan.flags)))
        parts.append(Text(f"with --max-running-requests {plan.guarantee_max_running_requests} (or less) no decode step can leave the graphs; "
                          f"this traffic reached {plan.traffic.max_batch} running"))
    parts.append(Text(f"cost model (assumed): eager decode step = {plan.cost.eager_factor:g} x graph step; "
                      f"{plan.cost.capture_s_per_graph:g} s per graph captured; sources: sglang #40346, #33900, vllm #54933", style="dim"))
    return Group(*parts)  # type: ignore[arg-type]
