"""Options shared by several commands, derived from the settings declared once in
`cpbcg.settings` (flag, bounds, default, help) and grouped in frozen dataclasses.

A command asks for option groups by parameter name:

    @app.command()
    @error_boundary
    @with_options(deployment=DeploymentOptions, trace=TraceOptions)
    def layout(..., deployment: DeploymentOptions, trace: TraceOptions) -> None:

`with_options` spreads each group's fields into the command's signature (so typer sees
ordinary options) and gathers them back into the dataclass, passed by keyword. Each setting
option carries its config key in its type (`option(key)` -> `SettingKey`), and a group's
`overrides()` reads them, so no command maps parameter names to keys and no option can be
dropped on the way to the config (tests/test_cli_options.py checks every command).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, TypeVar

import typer

from cpbcg.atomic import input_path
from cpbcg.settings import CAPTURE_DEFAULT_BUCKETS, CONFIG_FLAG, SETTINGS, TRACE_FORMAT_NAMES, Argument, Flag, setting, trace_format_name

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SettingKey:
    """Marks an option-group field as the command-line spelling of a config key, in its type:
    `cp_size: Annotated[Any, SettingKey("cp_size")] = None`. `with_options` turns it into the
    typer option (`option`); `help`/`default_text` reword it for one command."""

    key: str
    help: str | None = None
    default_text: str | None = None


@functools.lru_cache(maxsize=None)  # several commands share a group: build each option once (`--help` stays fast)
def option(key: str, *, help: str | None = None, default_text: str | None = None) -> Any:
    """The typer option of the setting `key` (`cpbcg.settings.SETTINGS`): its flag, bounds, help
    and `[default: ...]` from the one declaration, `None` meaning "keep the config's value".
    `help`/`default_text` reword it for one command (capture's own `--buckets`)."""
    spec = setting(key)
    if spec.flag is None:
        raise ValueError(f"{key} has no command-line flag")
    flag: str = spec.flag
    if help is not None or default_text is not None:
        spec = dataclasses.replace(spec, help=help or spec.help, default_text=default_text or spec.default_text)
    flags = [f"{flag}/{spec.off_flag}" if spec.off_flag else flag] + ([spec.short] if spec.short else [])
    low = high = None
    kind = spec.flag_kind or spec.kind
    if spec.flag_kind is None and spec.kind in (int, float):
        low, high = (None if value is None else spec.kind(value) for value in (spec.ge, spec.le))
    parser = _load_factor_text if key == "scheduler.time_scale" else None
    if parser is None and kind is float:
        info = finite_option(*flags, help=spec.help_text(), show_default=False, min=low, max=high)
    else:
        info = typer.Option(*flags, help=spec.help_text(), show_default=False, min=low, max=high, parser=parser)
    return Annotated[Optional[kind], info, SettingKey(key)]


def finite_option(*flags: str, min: float | None = None, max: float | None = None, help: str = "", **kwargs: Any) -> Any:
    """`typer.Option` of a float with bounds: parsed by `finite_number` (NaN/inf refused as such),
    the bounds shown in the help as click shows them (`[0.0<=x<=0.9]`)."""
    bounds = " and ".join(text for text in (None if min is None else f"x>={float(min)}", None if max is None else f"x<={float(max)}") if text)
    if min is not None and max is not None:
        bounds = f"{float(min)}<=x<={float(max)}"
    return typer.Option(*flags, parser=finite_number(min, max), help=f"{help}  [{bounds}]" if bounds else help, **kwargs)


@functools.lru_cache(maxsize=None)
def finite_number(low: float | None, high: float | None) -> Callable[[str], float]:
    """A float option's parser: NaN and infinities are refused as such ("expected a finite number,
    got nan"), before the bounds (`low`..`high`, checked as typer checks them, same wording),
    whose comparisons NaN would fail with a misleading "less than or equal to" message."""

    def parse(text: str) -> float:
        plain = _plain_float(text)
        if plain is not None and (low is None or plain >= low) and (high is None or plain <= high):
            return plain  # what pydantic's float answers below, without importing it
        from pydantic import Field, TypeAdapter, ValidationError

        try:
            value = float(text)
        except (TypeError, ValueError):
            pass
        else:
            if not math.isfinite(value):
                raise typer.BadParameter(f"expected a finite number, got {text.strip()}")
        try:
            return TypeAdapter(Annotated[float, Field(ge=low, le=high)]).validate_python(text)
        except ValidationError as exc:
            raise typer.BadParameter(exc.errors()[0]["msg"]) from None

    return parse


_PLAIN_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?\Z")


def _plain_float(value: Any) -> Optional[float]:
    """`value` as pydantic's lax `float` reads it, where that is plain and finite: a float or int
    (not a bool), or the text of a plain decimal (`0.3`, `12`; no sign, exponent, space or `_`);
    else None."""
    if type(value) in (float, int) or (type(value) is str and _PLAIN_DECIMAL.match(value)):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _load_factor_text(text: str) -> str:
    """`--time-scale` checked at parse: one load factor or a list, each within its bounds."""
    from cpbcg.errors import ConfigError
    from cpbcg.settings import parse_load_factors

    try:
        parse_load_factors(text)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("--time-scale: ")) from None
    return text


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """`typing.get_type_hints` of an option group, evaluated once per class."""
    return typing.get_type_hints(cls, include_extras=True)


def setting_keys(cls: type) -> dict[str, str]:
    """Field name -> config key of the option fields of an option group (`SettingKey` marks)."""
    hints = _hints(cls)
    out = {}
    for name, hint in hints.items():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, SettingKey):
                out[name] = meta.key
    return out


class _SettingGroup:
    """An option group whose fields are settings: `overrides()` maps them to their config keys."""

    def overrides(self) -> dict[str, Any]:
        """Config keys these options set, dotted (None = keep the config's value)."""
        return {key: getattr(self, name) for name, key in setting_keys(type(self)).items()}

    def given_flags(self) -> list[str]:
        """Flags given on the command line, in declaration order (`--no-decode` as given)."""
        flags = []
        for name, key in setting_keys(type(self)).items():
            value, spec = getattr(self, name), setting(key)
            if value is not None:
                flags.append(spec.off_flag if value is False and spec.off_flag else str(spec.flag))
        return flags


CAPTURE_BUCKETS_HELP = (
    "Buckets to capture (capture_num_tokens): a list like 2048,2304, sglang-default:MAX, or a bucket/plan file. A bucket whose "
    "estimated attention memory exceeds the free memory of the device (CPU: available RAM) is skipped before it is built; "
    "if none fits, the run is refused."
)


@dataclass(frozen=True)
class _DeploymentSettings(_SettingGroup):
    """The deployment config and the CP / capture settings that override it, shared by every
    command that takes a deployment (`DeploymentOptions`, `CaptureDeploymentOptions`)."""

    config: Annotated[Optional[str], CONFIG_FLAG] = None
    cp_size: Annotated[Any, SettingKey("cp_size")] = None
    align_size: Annotated[Any, SettingKey("align_size")] = None
    max_padding_factor: Annotated[Any, SettingKey("max_padding_factor")] = None
    capture_layout: Annotated[Any, SettingKey("capture_layout")] = None
    max_context_size: Annotated[Any, SettingKey("max_context_size_tokens")] = None
    max_capture_requests: Annotated[Any, SettingKey("max_capture_requests")] = None


@dataclass(frozen=True)
class ServerOptions(_SettingGroup):
    """The server SGLang 0.5.23 starts: its launch command, the model and the GPU (every planning command)."""

    server_args: Annotated[Any, SettingKey("server.args")] = None
    model_config: Annotated[Any, SettingKey("server.model_config")] = None
    gpu: Annotated[Any, SettingKey("server.gpu")] = None


@dataclass(frozen=True)
class DeploymentOptions(_DeploymentSettings, ServerOptions):
    """The deployment settings of the planning commands: the shared ones, the server, the strategy and the bucket list."""

    cp_strategy: Annotated[Any, SettingKey("cp_strategy")] = None
    buckets: Annotated[Any, SettingKey("buckets")] = None


@dataclass(frozen=True)
class CaptureDeploymentOptions(_DeploymentSettings):
    """The deployment settings `cpbcg capture` takes (zigzag only, so no --cp-strategy), its buckets described for capture."""

    buckets: Annotated[Any, SettingKey("buckets", help=CAPTURE_BUCKETS_HELP, default_text=f"the config's buckets, else {CAPTURE_DEFAULT_BUCKETS}")] = None


@dataclass(frozen=True)
class TraceOptions:
    """Which trace to read and how."""

    traces: Annotated[Optional[list[Path]], Flag(("--trace", "-t"), "Batch trace (JSONL of extend_seq_lens) or request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, any CSV/JSONL with --length-field), .gz ok; request traces go through the scheduler simulation (docs/scheduler.md). Omit for the embedded default workload. plan: repeat it, or give a glob or a directory, to plan several traces together (each an independent server).", parser=input_path, show_default=False)] = None
    trace_format: Annotated[str, Flag(("--trace-format",), f"What --trace holds: auto (detect it from the first line), {', '.join(TRACE_FORMAT_NAMES)} (docs/traces.md lists every format).", metavar="FORMAT", parser=trace_format_name)] = "auto"
    length_field: Annotated[Optional[str], Flag(("--length-field",), "Prompt-length field of a generic CSV/JSONL request trace (tokens).", show_default=False)] = None
    time_field: Annotated[Optional[str], Flag(("--time-field",), "Arrival-time field of a generic request trace: seconds, or wall-clock datetimes. Without it arrivals are Poisson at --rate.", show_default=False)] = None
    output_field: Annotated[Optional[str], Flag(("--output-field",), "Output-length field of a generic CSV/JSONL request trace (tokens); decode uses it.", show_default=False)] = None
    model: Annotated[Optional[str], Flag(("--model",), "BurstGPT: keep only the rows of this Model (e.g. ChatGPT, GPT-4).", show_default=False)] = None
    log_type: Annotated[Optional[str], Flag(("--log-type",), "BurstGPT: keep only the rows of this Log Type (e.g. 'Conversation log', 'API log').", show_default=False)] = None
    strict: Annotated[bool, Flag(("--strict",), "Refuse request rows with 0 prompt tokens (Azure 2025 multimodal, BurstGPT failures), and an SGLang log's unreadable Prefill batch lines, instead of skipping them with a note.")] = False

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
        from cpbcg import ReadOptions

        options = ReadOptions(length_field=self.length_field, time_field=self.time_field, output_field=self.output_field,
                              model=self.model, log_type=self.log_type, strict=self.strict)
        return {"trace_format": getattr(self.trace_format, "value", self.trace_format), "options": options}

    def request_only(self) -> dict[str, Any]:
        """The options only request traces use, by flag (for the ignored-options warning)."""
        return {"--length-field": self.length_field, "--time-field": self.time_field, "--output-field": self.output_field,
                "--model": self.model, "--log-type": self.log_type, "--strict": self.strict or None}


class _SchedulerGroup(_SettingGroup):
    """What the scheduler's option group does beyond its fields; `SchedulerOptions` is this with
    one field per `scheduler.*` setting that has a flag (`_scheduler_options`)."""

    if typing.TYPE_CHECKING:  # the fields are made from the declarations at import
        time_scale: Any

        def __getattr__(self, name: str) -> Any: ...

    def overrides(self, several_loads: bool = False) -> dict[str, Any]:
        """Dotted `scheduler.*` config keys. A `--time-scale` list sets no key: `plan` takes it as
        its load factors (`load_factors`); other commands refuse it unless `several_loads`."""
        out = super().overrides()
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
        from cpbcg.settings import parse_load_factors

        return parse_load_factors(str(self.time_scale))


def _scheduler_options() -> type[_SchedulerGroup]:
    """`SchedulerOptions`: a frozen dataclass with one field per `scheduler.*` setting of
    `cpbcg.settings.SETTINGS` that has a flag, in declaration order, each
    `Annotated[Any, SettingKey(key)] = None` (the option derived from the declaration by `option`)."""
    fields = [(spec.key.partition(".")[2], Annotated[Any, SettingKey(spec.key)], dataclasses.field(default=None))
              for spec in SETTINGS if spec.key.startswith("scheduler.") and spec.flag is not None]
    cls = dataclasses.make_dataclass("SchedulerOptions", fields, bases=(_SchedulerGroup,), frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = "The scheduler simulation that turns a request trace into forwards (docs/scheduler.md)."
    return cls


if typing.TYPE_CHECKING:
    SchedulerOptions = _SchedulerGroup
else:
    SchedulerOptions = _scheduler_options()
"""The scheduler simulation that turns a request trace into forwards (docs/scheduler.md): made
from the declarations (`_scheduler_options`)."""


@dataclass(frozen=True)
class CostOptions(_SettingGroup):
    """The cost model the optimiser minimises (docs/optimiser.md)."""

    graph_fixed_ms: Annotated[Any, SettingKey("cost.graph_fixed_ms")] = None
    eager_fixed_ms: Annotated[Any, SettingKey("cost.eager_fixed_ms")] = None
    token_ms: Annotated[Any, SettingKey("cost.token_ms")] = None
    manifest: Annotated[Optional[Path], Flag(("--manifest",), "Capture manifest (`cpbcg capture -o`): its measured replay and eager timings set the cost model, scaled to the model's layer count.", show_default=False)] = None

    @property
    def given(self) -> bool:
        """Whether a cost-model option was given (the cost model is then labelled `command line`)."""
        return any(value is not None for value in self.overrides().values())


@dataclass(frozen=True)
class GateOptions(_SettingGroup):
    """CI gates of `cpbcg replay-check` (the config's `gates:` section)."""

    min_coverage: Annotated[Any, SettingKey("gates.min_coverage")] = None
    min_token_coverage: Annotated[Any, SettingKey("gates.min_token_coverage")] = None
    max_padding: Annotated[Any, SettingKey("gates.max_padding")] = None
    min_observed_coverage: Annotated[Any, SettingKey("gates.min_observed_coverage")] = None
    min_decode_coverage: Annotated[Any, SettingKey("gates.min_decode_coverage")] = None
    max_eager_decode_steps: Annotated[Any, SettingKey("gates.max_eager_decode_steps")] = None
    min_observed_decode_coverage: Annotated[Any, SettingKey("gates.min_observed_decode_coverage")] = None


def _typer_type(hint: Any) -> Any:
    """A field's type as typer reads it: a `SettingKey` field becomes its `option`, a `Flag`
    field (a command's own option, `cpbcg.settings.Flag`) its typer option, an `Argument` field
    (`cpbcg.settings.Argument`) its typer argument."""
    marks = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, SettingKey)]
    if marks:
        return option(marks[0].key, help=marks[0].help, default_text=marks[0].default_text)
    flags = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Flag)]
    if flags:
        flag, kind = flags[0], hint.__origin__
        if flag.parser is None and float in (kind, *typing.get_args(kind)):  # NaN/inf refused as such (finite_option)
            info = finite_option(*flag.flags, min=flag.ge, max=flag.le, help=flag.help, metavar=flag.metavar, show_default=flag.show_default)
        else:
            info = typer.Option(*flag.flags, help=flag.help, min=flag.ge, max=flag.le, metavar=flag.metavar, parser=flag.parser,
                                show_default=flag.show_default)
        return Annotated[kind, info]
    arguments = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Argument)]
    if arguments:
        arg = arguments[0]
        return Annotated[hint.__origin__, typer.Argument(help=arg.help, min=arg.ge, max=arg.le, metavar=arg.metavar, show_default=False)]
    return hint


def with_options(**groups: type) -> Callable[[F], F]:
    """Spread the fields of each option dataclass in `groups` (parameter name -> class) into the
    decorated command's signature, and pass each group back as one dataclass by keyword."""

    def decorate(command: F) -> F:
        own = inspect.signature(command)
        own_hints = typing.get_type_hints(command, include_extras=True)
        params = [p.replace(annotation=own_hints.get(p.name, p.annotation)) for p in own.parameters.values() if p.name not in groups]
        fields_of = {name: dataclasses.fields(cls) for name, cls in groups.items()}
        for name, cls in groups.items():
            hints = _hints(cls)
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=_typer_type(hints[f.name]),
                                         default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
                       for f in fields_of[name]]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for name, cls in groups.items():
                kwargs[name] = cls(**{f.name: kwargs.pop(f.name) for f in fields_of[name]})
            return command(*args, **kwargs)

        del wrapper.__wrapped__  # typer must read the spread signature, not the command's
        wrapper.option_groups = dict(groups)  # type: ignore[attr-defined]  # where each option is declared (tests/test_cli_options.py)
        wrapper.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


def request_only_flags(trace: TraceOptions, scheduler: SchedulerOptions) -> list[str]:
    """The request-trace options given on the command line, in CLI order."""
    return [flag for flag, value in trace.request_only().items() if value is not None] + scheduler.given_flags()
