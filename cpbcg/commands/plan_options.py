"""`cpbcg plan`'s options, each declared once: the field of `PlanOptions` carries its flag, help,
bounds and default (`cpbcg.settings.Flag`), the command line is derived from it
(`cpbcg.cli.options.with_options`), and the use case (`cpbcg.commands.plan`) reads it.

Light on purpose (no numpy, no planner at import): `cpbcg plan --help` reads it. A new plan
option is one field here plus its consumer (the recommendation's: `RecommendSettings`, filled in
`PlanOptions.settings`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

from cpbcg.atomic import input_path, output_path
from cpbcg.outputs.console import OutputFormat
from cpbcg.settings import FORMAT_FLAG, EmitFormat, Flag, Objective, emit_help

if TYPE_CHECKING:
    from cpbcg.planner.optimise.recommend import RecommendSettings

PARETO_MAX_BUCKETS = 128
"""With a comparison or a plot the optimiser also finds the best list of every count up to this."""


def coverage_fraction(text: str) -> float:
    """`--target-coverage`: a fraction in (0, 1] (0 asks for no list at all); `ValueError` otherwise."""
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(f"{text[:20]!r} is not in the range 0<x<=1")
    return value


@dataclass(frozen=True)
class PlanOptions:
    """Everything `cpbcg plan` takes besides the shared deployment, trace, scheduler and cost
    groups: the output, the recommendation's settings, guarantee mode, the exports and the jobs."""

    output_format: Annotated[OutputFormat, FORMAT_FLAG] = OutputFormat.table
    no_recommend: Annotated[bool, Flag(("--no-recommend",), "Only evaluate the configured list (no recommendation).", refused_under=())] = False
    max_buckets: Annotated[Optional[int], Flag(("--max-buckets", "-k"), "Buckets in the recommended list; given, the verdict judges and deploys this list (no knee below it). [default: as many capturable buckets as the configured list]", ge=1, le=512, show_default=False, refused_under=("--no-recommend", "--guarantee"))] = None
    target_coverage: Annotated[Optional[float], Flag(("--target-coverage",), "Recommend the fewest buckets (up to --max-buckets) that replay at least this fraction of forwards in graphs, e.g. 0.99: capture time and graph memory grow with the count.  [0<x<=1]", parser=coverage_fraction, metavar="FRACTION", show_default=False, refused_under=("--no-recommend", "--guarantee"))] = None
    objective: Annotated[Objective, Flag(("--objective",), "coverage = most forwards in graphs first, then least modelled time; time = least modelled time alone.", refused_under=("--guarantee",))] = Objective.coverage
    max_tokens: Annotated[Optional[int], Flag(("--max-tokens",), "The largest forward the list must serve (tokens), for the recommendation and guarantee mode. [default: scheduler.chunked_prefill_size]", ge=1, le=1 << 22, show_default=False, refused_under=())] = None
    bucket_multiple: Annotated[int, Flag(("--bucket-multiple",), "Candidate bucket sizes are multiples of this, each rounded up to a multiple of cp_size as SGLang captures it (coarser = faster, optimal on that grid only, said in a note; 1 = exact).", ge=1, le=131072, refused_under=())] = 1
    include: Annotated[Optional[str], Flag(("--include",), "Buckets every recommended list must contain, e.g. 8192,4096.", show_default=False, refused_under=("--no-recommend", "--guarantee"))] = None
    max_requests: Annotated[Optional[int], Flag(("--max-requests",), "Requests in the worst-case full chunk the list must serve (headroom), and in guarantee mode the most requests per forward. [default: the most any forward of the trace held; guarantee: scheduler.prefill_max_requests]", ge=1, le=1024, show_default=False, refused_under=())] = None
    no_headroom: Annotated[bool, Flag(("--no-headroom",), "Keep every bucket at or below the chunk size (full chunks of several requests may then run eagerly).", refused_under=("--guarantee",))] = False
    allow_gaps: Annotated[bool, Flag(("--allow-gaps",), "Allow forward sizes between buckets that no bucket serves within max_padding_factor.", refused_under=("--guarantee",))] = False
    validate_fraction: Annotated[float, Flag(("--validate-fraction",), "Hold back this last fraction of the forwards (trace order): fit on the rest, replay it out of sample. 0 disables.", ge=0.0, le=0.9, refused_under=("--guarantee",))] = 0.3
    compare: Annotated[bool, Flag(("--compare",), "Also compare with SGLang's default, powers of two, vLLM-, TensorRT-LLM-style and uniform lists, and print the Pareto curve.", refused_under=("--no-recommend", "--guarantee"))] = False
    guarantee: Annotated[bool, Flag(("--guarantee",), "Trace-free: the fewest buckets that replay every CP-active forward of <= --max-requests requests and <= --max-tokens tokens.", refused_under=())] = False
    check_guarantee: Annotated[bool, Flag(("--check-guarantee",), "Prove that --buckets replay every such forward, or name the smallest that falls back (exit 1).", refused_under=())] = False
    emit: Annotated[Optional[EmitFormat], Flag(("--emit",), f"Export the recommended list (the configured one with --no-recommend): {emit_help()}. On stdout, or -o.", show_default=False, refused_under=())] = None
    output: Annotated[Optional[Path], Flag(("--output", "-o"), "Write the --emit export to this file (atomically); - for stdout.", parser=output_path, show_default=False, refused_under=())] = None
    plot: Annotated[Optional[Path], Flag(("--plot",), "Write a PNG: Pareto curve (buckets vs modelled time, coverage) and the forward-size distribution with the recommended buckets.", parser=output_path, show_default=False, refused_under=("--no-recommend", "--guarantee"))] = None
    workers: Annotated[Optional[int], Flag(("--jobs", "-j"), "Worker processes for several traces or load factors (each trace at each load is one job). [default: all cores]", ge=1, le=1024, show_default=False, refused_under=())] = None
    scheduler_address: Annotated[Optional[str], Flag(("--scheduler",), "Run the jobs on this Dask distributed cluster (tcp://host:8786) instead of local processes; needs pip install 'cpbcg[distributed]'. Same result.", show_default=False, refused_under=())] = None
    fit_traces: Annotated[Optional[list[Path]], Flag(("--fit-trace",), "Fit the recommendation on this trace only (repeatable; it must be among the --trace files, or is added to them) and report the list on every trace given.", parser=input_path, show_default=False, refused_under=("--guarantee",))] = None
    min_bucket: Annotated[Optional[int], Flag(("--min-bucket",), "Floor of small buckets: the recommended list serves every CP-active size from this many tokens up within max_padding_factor, whether or not the trace held it; 0 = no floor. [default: the smallest capturable size, 2*cp_size zigzag, cp_size interleave]", ge=0, le=1 << 22, show_default=False, refused_under=("--guarantee",))] = None
    max_capture_s: Annotated[Optional[float], Flag(("--max-capture-seconds",), "Capture budget: the recommended list (and every list of the Pareto curve) captures within this many seconds per server start, an exact constraint of the optimiser; the capture time is the estimate for the model (docs/costs.md) or what a server log measured.", ge=0.001, le=1e7, metavar="SECONDS", show_default=False, refused_under=("--no-recommend", "--guarantee"))] = None
    max_graph_mib: Annotated[Optional[float], Flag(("--max-graph-memory",), "Graph-memory budget (MiB per GPU: the shared pool the largest bucket's CP-local rows size, plus each graph's own; an MoE list's per-graph caches counted at the largest bucket's rows, the most they can be), a constraint of the optimiser (docs/costs.md).", ge=0.001, le=1e9, metavar="MIB", show_default=False, refused_under=("--no-recommend", "--guarantee"))] = None

    @property
    def recommend(self) -> bool:
        """False: only evaluate the configured list."""
        return not self.no_recommend

    @property
    def headroom(self) -> bool:
        """False: every bucket at or below the chunk size."""
        return not self.no_headroom

    def settings(self) -> RecommendSettings | None:
        """The `RecommendSettings` these options give (None without a recommendation)."""
        if not self.recommend:
            return None
        from cpbcg.planner.model.bucket_spec import parse_positive_list
        from cpbcg.planner.optimise.recommend import RecommendSettings

        include = tuple(parse_positive_list(self.include, "include")) if self.include else ()
        return RecommendSettings(
            max_buckets=self.max_buckets, target_coverage=self.target_coverage, objective=self.objective.value,
            max_bucket_tokens=self.max_tokens, bucket_multiple=self.bucket_multiple, include=include,
            headroom=self.headroom, max_requests=self.max_requests, allow_gaps=self.allow_gaps,
            validate_fraction=self.validate_fraction, min_bucket=self.min_bucket,
            pareto_max_buckets=PARETO_MAX_BUCKETS if (self.compare or self.plot is not None) else 0,
            max_capture_s=self.max_capture_s, max_graph_mib=self.max_graph_mib,
        )


@functools.cache
def option_flag(name: str) -> Flag:
    """The `Flag` declared on `PlanOptions.<name>`."""
    import typing

    hint = typing.get_type_hints(PlanOptions, include_extras=True)[name]
    return next(m for m in hint.__metadata__ if isinstance(m, Flag))


def refused(request: PlanOptions, mode: str) -> list[tuple[str, Flag]]:
    """The options `request` gives (away from their defaults) that `mode` refuses, in declaration
    order, each with its `Flag`: what each field declares (`Flag.refused_under`), no list kept."""
    default = PlanOptions()
    return [(f.name, flag) for f in fields(PlanOptions) if mode in ((flag := option_flag(f.name)).refused_under or ())
            if getattr(request, f.name) != getattr(default, f.name)]
