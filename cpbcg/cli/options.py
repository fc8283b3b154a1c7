"""Options shared by several commands, declared once as frozen dataclasses of typer options.

A command asks for option groups by parameter name:

    @app.command()
    @error_boundary
    @with_options(deployment=DeploymentOptions, trace=TraceOptions)
    def layout(..., deployment: DeploymentOptions, trace: TraceOptions) -> None:

`with_options` spreads each group's fields into the command's signature (so typer sees
ordinary options) and gathers them back into the dataclass, passed by keyword. Each group
knows the config keys its fields override (`overrides()`), so no command maps parameter names
to keys, and renaming a field cannot silently drop an override.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, TypeVar

import typer

from cpbcg.cli.common import (
    AlignOpt, BucketsOpt, CaptureLayoutOpt, ChunkedPrefillOpt, ConfigOpt, CpSizeOpt, FactorOpt, LengthFieldOpt,
    MaxCaptureReqOpt, MaxContextOpt, MaxPrefillTokensOpt, MaxRunningRequestsOpt, PrefillFixedMsOpt,
    PrefillMaxRequestsOpt, PrefillTokensPerSOpt, PrefixCacheOpt, RateOpt, SeedOpt, StrategyOpt, TimeFieldOpt,
    TimeScaleOpt, TraceFormatOpt, DecodeOpt, PageSizeOpt, MaxTotalTokensOpt, MixedChunkOpt, DefaultOutputOpt,
    DecodeFixedMsOpt, DecodeMsPerRequestOpt,
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class DeploymentOptions:
    """The deployment config and the CP / capture settings that override it."""

    config: ConfigOpt = None
    cp_size: CpSizeOpt = None
    cp_strategy: StrategyOpt = None
    align_size: AlignOpt = None
    max_padding_factor: FactorOpt = None
    buckets: BucketsOpt = None
    capture_layout: CaptureLayoutOpt = None
    max_context_size: MaxContextOpt = None
    max_capture_requests: MaxCaptureReqOpt = None

    def overrides(self) -> dict[str, Any]:
        """Top-level config keys these options set (None = keep the config's value)."""
        return {
            "cp_size": self.cp_size, "cp_strategy": self.cp_strategy, "align_size": self.align_size,
            "max_padding_factor": self.max_padding_factor, "buckets": self.buckets, "capture_layout": self.capture_layout,
            "max_context_size_tokens": self.max_context_size, "max_capture_requests": self.max_capture_requests,
        }


@dataclass(frozen=True)
class TraceOptions:
    """Which trace to read and how."""

    traces: Annotated[Optional[list[Path]], typer.Option("--trace", "-t", help="Batch trace (JSONL of extend_seq_lens) or request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, any CSV/JSONL with --length-field), .gz ok; request traces go through the scheduler simulation (docs/scheduler.md). Omit for the embedded default workload. plan: repeat it, or give a glob or a directory, to plan several traces together (each an independent server).", show_default=False)] = None
    trace_format: TraceFormatOpt = "auto"
    length_field: LengthFieldOpt = None
    time_field: TimeFieldOpt = None
    output_field: Annotated[Optional[str], typer.Option("--output-field", help="Output-length field of a generic CSV/JSONL request trace (tokens); decode uses it.", show_default=False)] = None
    model: Annotated[Optional[str], typer.Option("--model", help="BurstGPT: keep only the rows of this Model (e.g. ChatGPT, GPT-4).", show_default=False)] = None
    log_type: Annotated[Optional[str], typer.Option("--log-type", help="BurstGPT: keep only the rows of this Log Type (e.g. 'Conversation log', 'API log').", show_default=False)] = None
    strict: Annotated[bool, typer.Option("--strict", help="Refuse request rows with 0 prompt tokens (Azure 2025 multimodal, BurstGPT failures) instead of skipping them with a note.")] = False

    @property
    def trace(self) -> Optional[Path]:
        """The one trace of a command that reads one (None: the embedded default). Raises
        `ConfigError` when several were given."""
        if not self.traces:
            return None
        if len(self.traces) > 1:
            from cpbcg.errors import ConfigError

            raise ConfigError(f"--trace: this command reads one trace, got {len(self.traces)} (cpbcg plan plans several together)")
        return self.traces[0]

    def reader_options(self) -> dict[str, Any]:
        """Keyword arguments of `cpbcg.api.open_trace` besides the path (a `ReadOptions`)."""
        from cpbcg.planner.traces import ReadOptions

        options = ReadOptions(length_field=self.length_field, time_field=self.time_field, output_field=self.output_field,
                              model=self.model, log_type=self.log_type, strict=self.strict)
        return {"trace_format": getattr(self.trace_format, "value", self.trace_format), "options": options}

    def request_only(self) -> dict[str, Any]:
        """The options only request traces use, by flag (for the ignored-options warning)."""
        return {"--length-field": self.length_field, "--time-field": self.time_field, "--output-field": self.output_field,
                "--model": self.model, "--log-type": self.log_type, "--strict": self.strict or None}


@dataclass(frozen=True)
class SchedulerOptions:
    """The scheduler simulation that turns a request trace into forwards (docs/scheduler.md)."""

    chunked_prefill_size: ChunkedPrefillOpt = None
    max_prefill_tokens: MaxPrefillTokensOpt = None
    prefill_max_requests: PrefillMaxRequestsOpt = None
    max_running_requests: MaxRunningRequestsOpt = None
    prefix_cache: PrefixCacheOpt = None
    prefill_fixed_ms: PrefillFixedMsOpt = None
    prefill_tokens_per_s: PrefillTokensPerSOpt = None
    rate: RateOpt = None
    time_scale: TimeScaleOpt = None
    seed: SeedOpt = None
    decode: DecodeOpt = None
    page_size: PageSizeOpt = None
    max_total_tokens: MaxTotalTokensOpt = None
    enable_mixed_chunk: MixedChunkOpt = None
    default_output_tokens: DefaultOutputOpt = None
    decode_fixed_ms: DecodeFixedMsOpt = None
    decode_ms_per_request: DecodeMsPerRequestOpt = None

    def overrides(self, several_loads: bool = False) -> dict[str, Any]:
        """Dotted `scheduler.*` config keys (field names are SchedulerConfig's keys). A
        `--time-scale` list sets no key: `plan` takes it as its load factors (`load_factors`);
        other commands refuse it unless `several_loads`."""
        out = {f"scheduler.{f.name}": getattr(self, f.name) for f in dataclasses.fields(self)}
        factors = self.load_factors()
        if factors is not None and len(factors) > 1 and not several_loads:
            from cpbcg.errors import ConfigError

            raise ConfigError(f"--time-scale: this command simulates one load, got {len(factors)} factors (cpbcg plan takes a list)")
        out["scheduler.time_scale"] = factors[0] if factors is not None and len(factors) == 1 else None
        return out

    def load_factors(self) -> Optional[list[float]]:
        """The `--time-scale` factors (one or a list), or None when not given."""
        if self.time_scale is None:
            return None
        from cpbcg.planner.traffic import parse_load_factors

        return parse_load_factors(str(self.time_scale))

    def given_flags(self) -> list[str]:
        """Flags given on the command line, in declaration order (`--no-decode` as given)."""
        flags = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            name = f.name.replace("_", "-")
            flags.append(f"--{'no-' if value is False else ''}{'mixed-chunk' if f.name == 'enable_mixed_chunk' and value is False else name}")
        return flags


@dataclass(frozen=True)
class CostOptions:
    """The cost model the optimiser minimises (docs/optimiser.md)."""

    graph_fixed_ms: Annotated[Optional[float], typer.Option("--graph-fixed-ms", min=0.0, max=1e6, help="Cost model: fixed time of a graph replay (ms); a replay of bucket B costs graph_fixed_ms + B*token_ms. [default: 10, fitted to public measurements]", show_default=False)] = None
    eager_fixed_ms: Annotated[Optional[float], typer.Option("--eager-fixed-ms", min=0.0, max=1e6, help="Cost model: fixed time of an eager forward (ms); n tokens eagerly cost eager_fixed_ms + n*token_ms. [default: 24]", show_default=False)] = None
    token_ms: Annotated[Optional[float], typer.Option("--token-ms", min=0.0, max=1e3, help="Cost model: time per token (ms). [default: 0.05]", show_default=False)] = None
    manifest: Annotated[Optional[Path], typer.Option("--manifest", help="Capture manifest (`cpbcg capture -o`): its measured replay and eager timings set the cost model, scaled to the model's layer count.", show_default=False)] = None

    def overrides(self) -> dict[str, Any]:
        return {"cost.graph_fixed_ms": self.graph_fixed_ms, "cost.eager_fixed_ms": self.eager_fixed_ms, "cost.token_ms": self.token_ms}

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.graph_fixed_ms, self.eager_fixed_ms, self.token_ms))


def with_options(**groups: type) -> Callable[[F], F]:
    """Spread the fields of each option dataclass in `groups` (parameter name -> class) into the
    decorated command's signature, and pass each group back as one dataclass by keyword."""

    def decorate(command: F) -> F:
        own = inspect.signature(command)
        own_hints = typing.get_type_hints(command, include_extras=True)
        params = [p.replace(annotation=own_hints.get(p.name, p.annotation)) for p in own.parameters.values() if p.name not in groups]
        fields_of = {name: dataclasses.fields(cls) for name, cls in groups.items()}
        for name, cls in groups.items():
            hints = typing.get_type_hints(cls, include_extras=True)
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
                       for f in fields_of[name]]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for name, cls in groups.items():
                kwargs[name] = cls(**{f.name: kwargs.pop(f.name) for f in fields_of[name]})
            return command(*args, **kwargs)

        del wrapper.__wrapped__  # typer must read the spread signature, not the command's
        wrapper.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate
