"""Rich rendering of the recommendation: before/after, validation, deploy flags, comparisons,
the Pareto curve and guarantee mode."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text

from cpbcg.gates.summary import pct
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.optimise.compare import Comparison, ParetoPoint
from cpbcg.planner.optimise.recommend import KNEE_RULE, Recommendation, TradeOff
from cpbcg.planner.words import counted
from cpbcg.outputs.tables import REASON_HELP

OBJECTIVE_TEXT = {"coverage": "most forwards in graphs, then least modelled time", "time": "least modelled time"}
SHORT_REASON = {"not_cp_active": "inact", "above_largest_bucket": "above", "padding_limit": "pad", "local_capacity": "cap"}


def _eager_cell(ev: Evaluation) -> str:
    return ", ".join(f"{SHORT_REASON[r]} {c:,}" for r, c in ev.eager.items() if c) or "-"


def _eager_count(reason: str) -> Callable[[Evaluation], str]:
    return lambda ev: f"{ev.eager[reason]:,}"


def before_after_table(configured: Evaluation, rec: Recommendation) -> Table:
    """Configured vs recommended on the same forwards (the fitted traces'), and the recommendation out of sample."""
    same = rec.configured_evaluation if rec.configured_evaluation is not None else configured
    title = "Configured list vs recommendation" + ("" if same.batches == configured.batches else " (on the fitted traces' forwards)")
    configured = same
    table = Table(title=title, title_justify="left")
    columns = [("configured", configured), ("recommended", rec.evaluation)]
    if rec.validation is not None:
        columns.append((f"held-back {1 - rec.validation.fit_fraction:.0%} (out of sample)", rec.validation.evaluation))
    table.add_column("")
    for name, _ in columns:
        table.add_column(name, justify="right")
    rows: list[tuple[str, Callable[[Evaluation], str]]] = [
        ("buckets", lambda ev: str(len(ev.buckets))),
        ("forwards in graphs", lambda ev: pct(ev.graph_batches, ev.batches)),
        ("tokens in graphs", lambda ev: pct(ev.graph_tokens, ev.tokens)),
        ("padding", lambda ev: pct(ev.padded_tokens, ev.graph_tokens)),
        ("rescued", lambda ev: f"{ev.rescued:,}"),
        ("ceiling (any list)", lambda ev: f"{ev.ceiling:.2%}"),
    ]
    rows += [(f"eager: {reason}", _eager_count(reason)) for reason in configured.eager]
    for label, fmt in rows:
        table.add_row(label, *(fmt(ev) for _, ev in columns))
    times = [f"{rec.configured_modelled_ms / 1e3:,.2f} s", f"{rec.modelled_ms / 1e3:,.2f} s"]
    table.add_row("modelled prefill time", *times, *([""] if rec.validation is not None else []))
    return table


def recommendation_renderable(configured: Evaluation, rec: Recommendation) -> Group:
    """The answer: the list, how it compares (with the configured list on the same forwards),
    whether it holds out of sample, what it costs per bucket count, how to deploy it."""
    table = before_after_table(configured, rec)
    if rec.configured_evaluation is not None:
        configured = rec.configured_evaluation
    text = Text()
    how = (f"fewest buckets reaching {rec.target_coverage:.2%} of forwards in graphs" if rec.target_coverage
           else f"at most {counted(rec.max_buckets, 'bucket')}, {OBJECTIVE_TEXT[rec.objective]}")
    text.append(f"Recommended {len(rec.buckets)} bucket{'' if len(rec.buckets) == 1 else 's'} ({how}):\n", style="bold")
    text.append("  " + ", ".join(map(str, rec.buckets)) + "\n")  # wraps between numbers, never inside one
    if rec.headroom is not None:
        h = rec.headroom
        text.append(
            f"Headroom: serves a full {h.chunk_tokens}-token chunk of up to {counted(h.max_requests, 'request')} by its worst case "
            f"({h.worst_rows:,} CP-local rows; a bucket of exactly {h.chunk_tokens} holds {h.chunk_capacity_rows:,}).\n")
    worse = rec.evaluation.graph_batches < configured.graph_batches
    if worse:
        text.append(f"Warning: this list replays fewer forwards in graphs than the configured one ({rec.evaluation.coverage:.2%} "
                    f"against {configured.coverage:.2%}); keep the configured list, or allow more buckets or a finer --bucket-multiple.\n",
                    style="bold yellow")
    if rec.target_coverage and rec.evaluation.coverage < rec.target_coverage <= rec.ceiling:  # above the ceiling: the notes say it
        text.append(f"Warning: no list of at most {counted(rec.max_buckets, 'bucket')} reaches {rec.target_coverage:.2%} (the ceiling of "
                    f"any list is {rec.ceiling:.2%}); this is the best one.\n", style="bold yellow")
    elif rec.target_coverage and rec.validation is not None and rec.validation.evaluation.coverage < rec.target_coverage:
        text.append(f"Warning: out of sample the list replays {rec.validation.evaluation.coverage:.2%}, below the "
                    f"{rec.target_coverage:.2%} target: ask for a little more than you need.\n", style="bold yellow")
    if rec.headroom_note:
        text.append(f"cpbcg: note: {rec.headroom_note}.\n", style="yellow")
    if rec.validation is not None:
        v = rec.validation
        text.append(
            f"Validation: fitted on the first {v.fit_fraction:.0%} of forwards, the rest replays "
            f"{v.evaluation.coverage:.2%} in graphs (in sample {v.in_sample.coverage:.2%}); "
            f"padding_limit eager {v.evaluation.eager['padding_limit']:,}, local_capacity eager {v.evaluation.eager['local_capacity']:,}.\n")
        warning = v.warning()
        if warning:
            text.append(f"Warning: {warning}.\n", style="bold yellow")
    est, before = rec.capture, rec.configured_capture
    what = "measured" if est.measured else "estimate"
    text.append(f"Capture ({what}): {est.describe()} of graph memory per GPU", style="dim")
    if est.eager_peak_removed_mib:
        text.append(f"; serving the full chunk in a graph removes the eager activation peak of {est.eager_peak_removed_mib:,.0f} MiB "
                    f"(net {est.net_mib:+,.0f} MiB)", style="dim")
    text.append(f" (configured list: {before.capture_s:,.0f} s, {before.graph_mib:,.0f} MiB; {est.source}).\n", style="dim")
    if rec.knee is not None:
        k = rec.knee
        if k.num_buckets == len(rec.buckets):
            text.append(f"Suggested knee: the recommended list itself (rule: {KNEE_RULE}).\n")
        else:
            text.append(f"Suggested knee: {counted(k.num_buckets, 'bucket')}, {_vs(k.modelled_ms, rec.modelled_ms)} modelled time, "
                        f"{k.coverage:.2%} of forwards in graphs, {k.capture_s:,.0f} s and {k.graph_mib:,.0f} MiB to capture "
                        f"(rule: {KNEE_RULE}).\n")
    text.append(f"Cost model: graph {rec.cost.graph_fixed_ms:g} ms + B*{rec.cost.token_ms:g}, eager {rec.cost.eager_fixed_ms:g} ms + "
                f"n*{rec.cost.token_ms:g} ({rec.cost.source}).\n", style="dim")
    if rec.optimal.bucket_multiple == 1:
        text.append("Sizes are exact token counts; --bucket-multiple 8 keeps them round (optimal on that grid).\n", style="dim")
    text.append("Deploy (SGLang server flags; an explicit list is captured as given, buckets above the chunk included):\n", style="bold")
    text.append("  (under DP attention an explicit list skips SGLang's per-DP clamp; with DeepEP buckets are rounded up to\n"
                "  multiples of 8: plan with --bucket-multiple 8 there)\n", style="dim")
    text.append(f"  {rec.deploy}\n")
    return Group(table, trade_off_table(rec), text)


def _vs(ms: float, base: float) -> str:
    return f"{100.0 * (ms - base) / base:+.1f}% vs the recommendation's" if base else "the same"


TRADE_OFF_ROWS = 12
"""Most rows of the trade-off table (the knee and the recommended count always shown)."""


def trade_off_table(rec: Recommendation) -> Table:
    """Per bucket count K: coverage, modelled time, capture seconds and graph MiB of the best list."""
    table = Table(title="Trade-off: best list of at most K buckets", title_justify="left")
    table.caption = f"knee (*): {KNEE_RULE}; capture: {'measured' if rec.capture.measured else 'estimate'}, see below"
    for name in ("K", "in graphs", "modelled s", "capture s", "graph MiB", "largest"):
        table.add_column(name, justify="right")
    points = list(rec.trade_off)
    keep = {p.max_buckets for p in points if p.max_buckets in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512)}
    keep |= {rec.max_buckets} | ({rec.knee.max_buckets} if rec.knee is not None else set())
    shown: list[TradeOff] = [p for p in points if p.max_buckets in keep]
    if len(shown) > TRADE_OFF_ROWS:
        must = {rec.max_buckets} | ({rec.knee.max_buckets} if rec.knee is not None else set())
        shown = [p for p in shown if p.max_buckets in must or p.max_buckets <= 16][-TRADE_OFF_ROWS:]
    for p in shown:
        mark = "*" if rec.knee is not None and p.max_buckets == rec.knee.max_buckets else ""
        table.add_row(f"{p.max_buckets}{mark}", f"{p.coverage:.2%}", f"{p.modelled_ms / 1e3:,.2f}", f"{p.capture_s:,.0f}",
                      f"{p.graph_mib:,.0f}", str(p.largest_bucket))
    return table


def comparison_table(comparison: Comparison, rec: Recommendation) -> Table:
    """One row per list: the recommendation beside SGLang's default and peers' lists."""
    table = Table(title="Bucket lists compared on this trace (modelled time, coverage)", title_justify="left")
    table.caption = "K: buckets; time: modelled prefill time; best@K: the optimiser's best list of the same size"
    for name in ("list", "K", "graph fwd", "graph tok", "padding", "time s", "vs rec", "best@K s", "capture s", "graph MiB", "eager by reason"):
        table.add_column(name, justify="left" if name in ("list", "eager by reason") else "right")
    base = comparison.reports[0].modelled_ms
    for r in comparison.reports:
        ev = r.evaluation
        same = f"{r.optimal_same_size_ms / 1e3:,.2f}" if r.optimal_same_size_ms is not None else "-"
        table.add_row(r.name, str(len(ev.buckets)), pct(ev.graph_batches, ev.batches), pct(ev.graph_tokens, ev.tokens),
                      pct(ev.padded_tokens, ev.graph_tokens), f"{r.modelled_ms / 1e3:,.2f}",
                      f"{100.0 * (r.modelled_ms - base) / base:+.1f}%" if base else "-", same,
                      "-" if r.capture_s is None else f"{r.capture_s:,.0f}", "-" if r.graph_mib is None else f"{r.graph_mib:,.0f}", _eager_cell(ev))
    return table


def pareto_table(points: list[ParetoPoint], objective: str) -> Table:
    table = Table(title="Pareto: best list of at most K buckets", title_justify="left")
    if objective == "coverage":
        table.caption = "coverage first: a larger K may cost more modelled time when it replays more forwards in graphs"
    for name in ("K", "modelled s", "graph batches", "graph tokens", "capture s", "graph MiB", "largest bucket"):
        table.add_column(name, justify="right")
    for p in points:
        table.add_row(str(p.max_buckets), f"{p.modelled_ms / 1e3:,.2f}", f"{100 * p.coverage:.2f}%",
                      f"{100 * p.token_coverage:.2f}%", "-" if p.capture_s is None else f"{p.capture_s:,.0f}",
                      "-" if p.graph_mib is None else f"{p.graph_mib:,.0f}", str(p.buckets[-1]))
    return table


def guarantee_renderable(result, cp_size: int, cp_strategy: str, factor: float) -> Text:
    """Guarantee mode: the list and the proof, or the smallest forward that falls back."""
    limits, buckets, check = result.limits, result.buckets, result.check
    out = Text()
    what = "Fewest buckets replaying" if result.recommended else "Bucket list checked against"
    out.append(f"{what} every CP-active batch of <= {counted(limits.max_requests, 'request')} and <= {counted(limits.max_tokens, 'token')} "
               f"(cp_size {cp_size} {cp_strategy}, max_padding_factor {factor:g}):\n", style="bold")
    if result.max_tokens_source:
        out.append(f"  token limit {limits.max_tokens:,}: {result.max_tokens_source}\n", style="dim")
    out.append(f"  {counted(len(buckets), 'bucket')}: {', '.join(map(str, buckets))}\n")
    if check.ok:
        out.append("  guarantee holds: every such batch replays in a graph.\n", style="green")
    else:
        out.append(
            f"  guarantee FAILS for {counted(check.failing_sizes, 'batch size')}; smallest n = {check.failing_tokens} "
            f"(worst case {check.failing_rows} rows, eager: {check.reason} — {REASON_HELP[check.reason]})\n", style="red")
        if check.witness:
            out.append(f"  e.g. extend_seq_lens = {check.witness}\n")
    return out


def traffic_table(parts) -> Table:
    """One row per (trace, load) job: forwards, coverage, padding and eager by reason, for the
    configured and the recommended list (`PlanResult.parts`); without a recommendation
    (`--no-recommend`) the configured list alone, and no `fit` column (whether the
    recommendation was fitted on the job)."""
    recommended = any(p.recommended is not None for p in parts)
    table = Table(title="Per trace and load: configured -> recommended" if recommended else "Per trace and load: configured buckets",
                  title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("trace", "left"), ("load", "right"), ("fit", "left"), ("forwards", "right"),
                                                     ("in graphs", "right"), ("padding", "right"), ("eager", "left"),
                                                     ("vs SGLang default", "left"))
    for name, justify in columns:
        if name != "fit" or recommended:
            table.add_column(name, justify=justify)
    for p in parts:
        ev, rec = p.evaluation, p.recommended

        def both(fmt, ev=ev, rec=rec) -> str:
            return fmt(ev) if rec is None else f"{fmt(ev)} -> {fmt(rec)}"

        fit = ["yes" if p.fit else "no"] if recommended else []
        table.add_row(Path(p.label).name, p.load, *fit, f"{ev.batches:,}",
                      both(lambda e: pct(e.graph_batches, e.batches)), both(lambda e: pct(e.padded_tokens, e.graph_tokens)),
                      both(_eager_cell), "; ".join(p.flags) if p.flags else ("-" if p.default is None else "ok"))
    return table
