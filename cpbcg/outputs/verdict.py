"""The verdict rendered: the first screen of `cpbcg plan` (`verdict_lines`), at most
`MAX_VERDICT_LINES` lines at 120 columns, in numbers against SGLang's default list."""

from __future__ import annotations

from collections.abc import Sequence

import textwrap
from typing import TYPE_CHECKING

from cpbcg.planner.optimise.verdict import CEILING_TOLERANCE
from cpbcg.engines.sglang.release import SGLANG_VERSION
from cpbcg.planner.words import counted

if TYPE_CHECKING:
    from cpbcg.engines.sglang.memory import MemoryPreflight
    from cpbcg.engines.sglang.observed import ObservedComparison
    from cpbcg.planner.optimise.verdict import ListFigures, Verdict

MAX_VERDICT_LINES = 25
"""The verdict fits one screen: at most this many lines at `VERDICT_WIDTH` columns."""
VERDICT_WIDTH = 120
_LABEL = 11
_REASONS = {"not_cp_active": "not CP-active", "context_limit": "past the context limit", "multimodal_input": "multimodal"}


GRAPHS_OFF_ADVICE = ("prefill graphs appear off, or every forward fell off the server's list; no bucket list helps until "
                     "graphs are on: check the launch for --disable-cuda-graph, --disable-piecewise-cuda-graph, "
                     "--cuda-graph-backend-prefill disabled or --cuda-graph-config's prefill entry, and the start-up log for a "
                     "prefill capture line")
"""What the verdict says when a log's every forward ran eagerly although the model replays some."""


def _span(f: ListFigures) -> str:
    return f"{counted(f.num_buckets, 'bucket')} {f.buckets[0]}..{f.buckets[-1]}" if f.buckets else "no buckets"


def _capture(f: ListFigures) -> str:
    return f"capture {f.capture_s:,.0f} s and {f.graph_mib:,.0f} MiB per server start"


def labelled_line(label: str, text: str, width: int) -> list[str]:
    """`text` wrapped to `width` columns under a left-hand `label` column (the verdict's layout)."""
    return textwrap.wrap(text, width=width, initial_indent=f"  {label:<{_LABEL}}", subsequent_indent=" " * (_LABEL + 2),
                         break_on_hyphens=False)


def verdict_lines(v: Verdict, command: str | None, memory: MemoryPreflight | None = None, width: int = VERDICT_WIDTH, *,
                  observed: ObservedComparison | None = None, bound: bool = False, after: Sequence[str] = ()) -> list[str]:
    """The verdict as plain lines of at most `width` columns: the ceiling, SGLang's default, the
    knee, the full recommendation (and the configured list when it is not the default), which to
    deploy and the command that writes its flags, the budgets, warnings and where the figures come from.
    `observed`: a server log's printed verdicts, said second (what the server did beside what is
    modelled); `bound`: the forwards are sizes judged at their worst-case layouts (a log); `after`:
    lines said right after where the figures come from (the decode line), counted in the one screen."""
    d = v.default
    at = " at their worst-case layouts (a server log gives forward sizes, not request lengths)" if bound else ""
    out = [f"Verdict on {v.forwards:,} prefill forwards{at}, against SGLang {SGLANG_VERSION}'s default list for the chunk "
           f"({_span(d)}) on the same traffic:"]
    out = textwrap.wrap(out[0], width=width, subsequent_indent="  ")
    beyond = ", ".join(f"{n:,} {_REASONS.get(r, r)}" for r, n in v.beyond_ceiling.items())
    ceiling = f"{v.ceiling:.2%} of forwards can replay in graphs" + (f" (no list replays {beyond})" if beyond else "")
    below = v.default_below_ceiling
    if v.default_at_ceiling and not below:
        reach = f"the default already reaches it ({d.coverage:.2%})"
    elif v.default_at_ceiling:
        reach = f"the default is within {CEILING_TOLERANCE:.2%} of it ({d.coverage:.2%}: {counted(below, 'forward')} fewer in graphs)"
    else:
        reach = f"the default replays {d.coverage:.2%}: {v.ceiling - d.coverage:.2%} of forwards below it ({counted(below, 'forward')})"
    off = observed is not None and observed.graphs_appear_off
    if observed is not None and off:  # the log's own verdicts lead: no list helps a server that ran every forward eagerly
        out += labelled_line("server", f"{observed.coverage:.2%} of {observed.forwards:,} forwards ran in graphs (the log's "
                             f"{observed.label} verdicts; the model of its list: {observed.model_coverage:.2%}): "
                             f"{GRAPHS_OFF_ADVICE}", width)
    out += labelled_line("ceiling", f"{ceiling}; {reach}", width)
    if observed is not None and observed.forwards and not off:
        out += labelled_line("server", f"the log's {observed.label} verdicts: {observed.coverage:.2%} of {observed.forwards:,} forwards ran in "
                     f"graphs (the model of its list: {observed.model_coverage:.2%}; the observed table below compares them)", width)
    out += labelled_line("default", f"{_span(d)}: padding {d.padding:.2%}, modelled prefill {d.modelled_s:,.1f} s, {_capture(d)}", width)
    if v.configured is not None:
        c = v.configured
        out += labelled_line("configured", f"{_span(c)}: {c.coverage:.2%} in graphs, padding {c.padding:.2%}, modelled prefill "
                     f"{v.change(c):+.2%} vs the default ({c.modelled_s:,.1f} s), {_capture(c)}", width)
    if v.knee is not None:
        k = v.knee
        out += labelled_line("knee", f"{counted(k.num_buckets, 'bucket')}: {k.coverage:.2%} in graphs, padding {k.padding:.2%}, modelled prefill "
                     f"{v.change(k):+.2%} vs the default ({k.modelled_s:,.1f} s); {_capture(k)}: saves "
                     f"{d.capture_s - k.capture_s:,.0f} s and {d.graph_mib - k.graph_mib:,.0f} MiB against the default", width)
    f = v.full
    out += labelled_line("full", f"{counted(f.num_buckets, 'bucket')}: {f.coverage:.2%} in graphs, padding {f.padding:.2%} (default {d.padding:.2%}), "
                 f"modelled prefill {v.change(f):+.2%} vs the default ({f.modelled_s:,.1f} s); {_capture(f)}", width)
    if v.decode is not None:  # issue 41's decode line
        out += labelled_line("decode", str(v.decode.get("said", v.decode)), width)
    chosen = v.deployed
    which = {"knee": "the knee", "recommended": "the full recommendation", "default": "SGLang's default list"}[v.deploy]
    once = "once prefill graphs are on, " if off else ""
    out += labelled_line("deploy", f"{once}{which} ({counted(chosen.num_buckets, 'bucket')}): {v.deploy_reason}", width)
    if command is not None and v.deploy != "default":
        out += labelled_line("flags", command, width)
    if memory is not None:
        out += labelled_line("memory", memory.said("knee" if v.deploy == "knee" else "list", v.deployed.num_buckets), width)
    for said in v.budgets:
        out += labelled_line("budget", said, width)
    how = (f"estimates within x/÷{v.capture_range:g} (docs/costs.md)" if v.capture_range > 1
           else v.capture_source.split(" (")[0])  # `calibrated from FILE:LINE`
    tail = labelled_line("costs", f"capture: {how}; time: the cost model below", width)
    full = [line for said in v.warnings for line in labelled_line("warning", said, width)]
    if len(out) + len(full) + len(tail) + len(after) <= MAX_VERDICT_LINES:
        return out + full + tail + list(after)
    # too long for one screen: each warning's first clause here, its numbers after the screen
    short = [line for said in v.warnings for line in labelled_line("warning", said.split(":")[0] + " (numbers below)", width)]
    return out + short + tail + list(after) + [""] + full
