"""Deployment config: what a deployment fixes, as validated data.

A YAML file (or a preset shipped under `cpbcg/configs/`, named without `.yaml`) holds the CP
settings, capture layout, padding factor, bucket list, scheduler, cost model and CI gates.
Command-line options override it. Unknown keys and bad values are refused at load time,
naming the key (`ConfigError`, exit 2).
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictFloat, StrictInt, ValidationError, ValidationInfo, field_validator, model_validator

from cpbcg.settings import MAX_INT32, MAX_INT64, SETTINGS, setting
from cpbcg.errors import ConfigError, CpbcgError, did_you_mean
from cpbcg.bucket_files import flags_file_words, is_bucket_file, resolve_bucket_spec
from cpbcg.inputs import decode_text, load_yaml, path_exists, read_input_bytes, yaml_key_lines
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS
from cpbcg.planner.choices import CaptureLayout, CPStrategy
from cpbcg.planner.model.capacity import CaptureSpec, capture_buckets
from cpbcg.planner.costs.cost import CostModel, forward_cost
from cpbcg.planner.deployment import Deployment
from cpbcg.engines.sglang.export import FLAG_KEYS, sglang_flag_settings
from cpbcg.engines.sglang.export import cp_flags as deployment_cp_flags
from cpbcg.engines.sglang.startup import check_server_flags, launch_notes, log_given, log_printed, parse_launch_words, resolve_server
from cpbcg.planner.hardware import gpu_from_device_name, gpus_holding
from cpbcg.engines.sglang.server import ASSUMED_MODEL, Given, Refusal, ResolvedServer
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.engines.sglang.args import BY_FIELD, SERVER_ARGS
from cpbcg.engines.sglang.release import CP_GRAPH_BACKENDS, RELEASE, SGLANG_VERSION
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.scheduler.settings import SchedulerSettings, largest_forward_tokens

if TYPE_CHECKING:
    from cpbcg.gates.gates import Gates

PRESET_PACKAGE = "cpbcg.configs"


def _field(key: str, **extra: Any) -> Any:
    """The config field of the setting `key`: default, bounds and description from its one
    declaration in `cpbcg.settings`."""
    return Field(**setting(key).field_kwargs(), **extra)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class _SchedulerConfigRules(_Strict):
    """The rules of the scheduler's config beyond each field's own bounds; `SchedulerConfig` is this
    with one field per `scheduler.*` setting (`_scheduler_config`)."""

    if TYPE_CHECKING:  # the fields are made from the declarations at import: read them as Any
        def __getattr__(self, name: str) -> Any: ...

    @field_validator("chunked_prefill_size", mode="before", check_fields=False)
    @classmethod
    def _chunk(cls, value: object) -> object:
        if type(value) is int and (value == 0 or value < -1):
            raise ValueError("must be a positive token count or -1 (no chunking)")
        return value

    @field_validator("prefix_cache", mode="before", check_fields=False)
    @classmethod
    def _cache(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().isascii() and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 20:
            value = int(value)
        if not (value in ("off", "unlimited") or (type(value) is int and 1 <= value <= MAX_INT32)):
            raise ValueError("must be off, unlimited, or a positive size in tokens")
        return value

    @field_validator("page_size", check_fields=False)
    @classmethod
    def _page_fits_the_chunk(cls, value: int, info: ValidationInfo) -> int:
        chunk = info.data.get("chunked_prefill_size", -1)
        if chunk != -1 and value > chunk:
            raise ValueError(f"must not exceed chunked_prefill_size {chunk} (no chunk could be cut)")
        return value

    def to_settings(self) -> SchedulerSettings:
        """The plain frozen `SchedulerSettings` the planner takes (same field names)."""
        return SchedulerSettings(**self.model_dump())


_CONFIG_TYPES: dict[type, Any] = {int: StrictInt, float: StrictFloat, bool: bool, str: str}
"""A setting's `kind` -> its config field's type (strict: YAML's `1` is no float, `"1"` no int)."""
_SPECIAL_TYPES: dict[str, Any] = {"scheduler.prefix_cache": Union[Literal["off", "unlimited"], int]}
"""Config fields whose type is not their `kind`'s (`prefix_cache`: off, unlimited or a size)."""


def _scheduler_config() -> type[_SchedulerConfigRules]:
    """`SchedulerConfig`: one field per `scheduler.*` setting of `cpbcg.settings.SETTINGS`, in
    declaration order (type from its kind, Optional when its default is None or it is `nullable`; default, bounds and
    description from the declaration; bools strict), with `_SchedulerConfigRules`' rules."""
    from pydantic import create_model

    fields: dict[str, Any] = {}
    for spec in SETTINGS:
        if spec.key.startswith("scheduler."):
            kind = _SPECIAL_TYPES.get(spec.key, _CONFIG_TYPES[spec.kind])
            fields[spec.key.partition(".")[2]] = (Optional[kind] if spec.default is None or spec.nullable else kind,
                                                  _field(spec.key, **({"strict": True} if spec.kind is bool else {})))
    model: type[_SchedulerConfigRules] = create_model("SchedulerConfig", __base__=_SchedulerConfigRules, __module__=__name__, **fields)
    model.__doc__ = "How the server forms prefill batches from requests (docs/scheduler.md; `cpbcg batches`)."
    return model


if TYPE_CHECKING:
    SchedulerConfig = _SchedulerConfigRules
else:
    SchedulerConfig = _scheduler_config()
"""How the server forms prefill batches from requests (docs/scheduler.md; `cpbcg batches`): the
`scheduler:` section, made from the declarations (`_scheduler_config`)."""


class CostConfig(_Strict):
    """Modelled prefill time: graph replay `graph_fixed_ms + B*token_ms`, eager `eager_fixed_ms + n*token_ms`.

    Defaults are fitted to public measurements (docs/optimiser.md): the saving of CP + breakable
    graphs falls from 36-39% at <= 256 tokens to 11% at 2048 and ~0 at >= 4096 (sglang-das #407),
    and an eager 2048-token prefill of a large MoE takes about 123 ms (tokenspeed #597)."""

    graph_fixed_ms: StrictFloat = _field("cost.graph_fixed_ms")
    eager_fixed_ms: StrictFloat = _field("cost.eager_fixed_ms")
    token_ms: StrictFloat = _field("cost.token_ms")

    def to_cost(self, source: str) -> CostModel:
        return CostModel(self.graph_fixed_ms, self.eager_fixed_ms, self.token_ms, source)


class GateConfig(_Strict):
    """CI gates for `cpbcg replay-check`."""

    def to_gates(self) -> Gates:
        from cpbcg.gates.gates import Gates  # imported here: only `replay-check` and `watch` gate

        return Gates(self.min_coverage, self.min_token_coverage, self.max_padding, {str(k): v for k, v in self.max_eager.items()},
                     self.min_observed_coverage, self.min_decode_coverage, self.max_eager_decode_steps,
                     self.min_observed_decode_coverage)

    min_coverage: StrictFloat | None = _field("gates.min_coverage")
    min_token_coverage: StrictFloat | None = _field("gates.min_token_coverage")
    max_padding: StrictFloat | None = _field("gates.max_padding")
    max_eager: dict[
        Literal["not_cp_active", "above_largest_bucket", "padding_limit", "local_capacity", "context_limit", "multimodal_input"], Annotated[StrictInt, Field(ge=0, le=MAX_INT64)]
    ] = Field(default_factory=dict, description="Most eager batches per reason.")
    min_observed_coverage: StrictFloat | None = _field("gates.min_observed_coverage")
    min_decode_coverage: StrictFloat | None = _field("gates.min_decode_coverage")
    max_eager_decode_steps: StrictInt | None = _field("gates.max_eager_decode_steps")
    min_observed_decode_coverage: StrictFloat | None = _field("gates.min_observed_decode_coverage")


class ServerConfig(_Strict):
    """The server 0.5.23 starts: its launch command, the model and the GPU (the inputs of the
    start-up resolution, `cpbcg.engines.sglang.startup`)."""

    args: Union[str, list[str], None] = _field("server.args")
    model_config_file: str | None = Field(setting("server.model_config").default, alias="model_config",
                                          description=setting("server.model_config").help)
    gpu: str | None = _field("server.gpu")


class DeploymentConfig(_Strict):
    """Everything a deployment fixes. Field names follow SGLang's server arguments."""

    cp_size: StrictInt = _field("cp_size")
    cp_strategy: CPStrategy = _field("cp_strategy")
    tp_size: StrictInt | None = _field("tp_size")
    align_size: StrictInt | None = _field("align_size")
    max_padding_factor: StrictFloat = _field("max_padding_factor")
    capture_layout: CaptureLayout = _field("capture_layout")
    max_context_size_tokens: StrictInt | None = _field("max_context_size_tokens")
    max_capture_requests: StrictInt | None = _field("max_capture_requests")
    max_seq_len_tokens: StrictInt | None = _field("max_seq_len_tokens")
    buckets: Union[list[Annotated[StrictInt, Field(ge=1, le=MAX_BUCKET_TOKENS)]], str] = Field(
        setting("buckets").default, description=setting("buckets").help)
    server: ServerConfig = Field(default_factory=lambda: ServerConfig.model_validate({}))
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    gates: GateConfig = Field(default_factory=GateConfig)
    _resolved: tuple[object, tuple[int, ...]] | None = PrivateAttr(None)
    _server: ResolvedServer | None = PrivateAttr(None)

    def resolved_buckets(self) -> tuple[int, ...]:
        """The bucket spec as a list of tokens: parsed (files read) once, by `load_config`, and
        kept with the spec it came from (a copy with other buckets parses its own)."""
        if self._resolved is None or self._resolved[0] != self.buckets:
            self._resolved = (self.buckets, tuple(resolve_bucket_spec(self.buckets)))
        return self._resolved[1]

    @model_validator(mode="before")
    @classmethod
    def _default_buckets(cls, data: Any) -> Any:
        """No `buckets` given: SGLang's default list for the chunk in force, as SGLang derives
        `max_bs` from `chunked_prefill_size` (domain §5)."""
        if isinstance(data, dict) and "buckets" in data and data["buckets"] is None:
            return {**data, "buckets": default_bucket_spec(data.get("scheduler"))}
        return data

    @model_validator(mode="after")
    def _derived_buckets(self) -> "DeploymentConfig":
        """`buckets` not given at all: the same default, set without marking the field as given
        (`model_fields_set`), so `capture` still knows the config named no buckets."""
        if "buckets" not in self.model_fields_set:
            s = self.scheduler
            spec = default_bucket_spec({"chunked_prefill_size": s.chunked_prefill_size, "max_prefill_tokens": s.max_prefill_tokens})
            object.__setattr__(self, "buckets", spec)
        return self

    def to_deployment(self, cost_source: str | None = None) -> Deployment:
        """The plain frozen `Deployment` the planner reads (bucket spec resolved).
        `cost_source` labels the cost model (default: `defaults` or `config`)."""
        server = self._server
        model = server.model if server is not None and not server.model_assumed else None
        gpu = server.gpu if server is not None and not server.gpu_assumed else None
        derived = forward_cost(model, gpu, server.tp_size if server is not None else (self.tp_size or self.cp_size))
        given = self.cost.model_fields_set
        if cost_source is None:
            cost_source = derived.source if not given else "config"
        if given and set(COST_KEYS) - given:  # some terms given: say which, and where the rest came from
            cost_source = f"{cost_source} for {', '.join(k for k in COST_KEYS if k in given)}; the rest {derived.source}"
        terms = {k: float(getattr(self.cost if k in given else derived, k)) for k in COST_KEYS}
        cost = derived if not given else CostModel(terms["graph_fixed_ms"], terms["eager_fixed_ms"], terms["token_ms"], cost_source)
        spec = self.buckets if isinstance(self.buckets, str) else ",".join(map(str, self.buckets))
        return Deployment(
            cp=self.cp_layout, capture=self.capture_spec, max_padding_factor=self.max_padding_factor,
            buckets=self.resolved_buckets(), bucket_spec=spec, max_seq_len_tokens=self.max_seq_len_tokens,
            scheduler=self.scheduler.to_settings(), cost=cost, model=model, gpu=gpu, server=self._server,
        )

    @property
    def server_resolution(self) -> ResolvedServer | None:
        """The server 0.5.23 starts for this config (`load_config` resolves it)."""
        return self._server

    @property
    def cp_layout(self) -> CPLayout:
        return CPLayout(self.cp_size, self.cp_strategy, self.align_size)

    @property
    def capture_spec(self) -> CaptureSpec:
        return CaptureSpec(self.capture_layout, self.max_context_size_tokens, self.max_capture_requests, RELEASE)


COST_KEYS = ("graph_fixed_ms", "eager_fixed_ms", "token_ms")


def default_bucket_spec(scheduler: Any) -> str:
    """`sglang-default:MAX_BS` with SGLang's default `max_bs` for the scheduler settings given (a
    dict of `scheduler.*` keys, or None): the largest forward (`largest_forward_tokens`: the
    chunk, or `max_prefill_tokens` when chunking is off), kept within the generator's range
    [4, MAX_BUCKET_TOKENS]. Values of the wrong type fall back to the defaults (their own
    validation reports them)."""
    scheduler = scheduler if isinstance(scheduler, dict) else {}
    fields = SchedulerConfig.model_fields
    chunk, budget = (scheduler.get(k, fields[k].default) for k in ("chunked_prefill_size", "max_prefill_tokens"))
    if isinstance(chunk, bool) or not isinstance(chunk, int):
        chunk = fields["chunked_prefill_size"].default
    if isinstance(budget, bool) or not isinstance(budget, int):
        budget = fields["max_prefill_tokens"].default
    return f"sglang-default:{min(max(largest_forward_tokens(chunk, budget), 4), MAX_BUCKET_TOKENS)}"


def preset_names() -> list[str]:
    """Names of the presets shipped in `cpbcg/configs/` (deployment configs only)."""
    files = resources.files(PRESET_PACKAGE).iterdir()
    return sorted(p.name[:-5] for p in files if p.name.endswith(".yaml") and not p.name.startswith("model-"))


def _read_source(source: str) -> tuple[str, str]:
    path = Path(source)
    if path_exists(path):
        label = str(path)
        try:
            raw = read_input_bytes(path)
        except ConfigError as exc:  # not a readable file (a directory, a FIFO): say which option named it
            raise ConfigError(f"command line: config: {exc}") from None
        return label, decode_text(raw, label)
    preset = resources.files(PRESET_PACKAGE) / f"{source}.yaml"
    if not _is_preset_name(source) or not preset.is_file():
        raise ConfigError(f"{_show(source)[1:-1]}: no such config file or preset (presets: {', '.join(preset_names())})")
    return f"preset {source}", preset.read_text()


def load_config(
    source: str | None,
    overrides: dict[str, Any] | None = None,
    *,
    layers: Sequence[tuple[str, dict[str, Any]]] = (),
    log: LogSettings | None = None,
) -> DeploymentConfig:
    """Load a config file or preset (or the defaults when `source` is None) and apply overrides.

    `layers` are `(label, dotted keys → values)` applied in order over the file (e.g.
    `("m.json", {...})` for a capture manifest's settings); `overrides` (the command line) come
    last. `None` values are ignored. The whole config is validated here, the bucket spec
    included (parsed, files read), whatever the command later uses. Raises `ConfigError`
    naming where the bad value came from and its key (`cfg.yaml: buckets: ...`,
    `command line: cp_size: ...`, `m.json: max_padding_factor: ...`).

    With `log` (one launch of an SGLang log, `LogSettings`) the server arguments the launch
    states (its settings dump or launch command, `sglang_flags`) and the values its server
    printed it resolved (`resolved`) enter the start-up resolution as a launch command does,
    each with its source `log line N` (`_resolve_server`): they win over the config file, the
    `layers` (a manifest) and the command line win over them.
    """
    label, text = ("defaults", "") if source is None else _read_source(source)
    data = load_yaml(text, label) if text else None
    if data is None:
        if source is not None:  # an empty file, blank lines or only comments: no config, as an empty option is none
            raise ConfigError(f"{label}:1: empty config (no settings: blank, or only comments); give settings, or leave --config out")
        data = {}
    if not isinstance(data, dict):
        hint = (" (a bucket list: pass it with --buckets)" if isinstance(data, list)
                else " (SGLang server flags: pass the file with --buckets)" if isinstance(data, str) and data.lstrip().startswith("--") else "")
        raise ConfigError(f"{label}:1: expected a mapping of settings, got {type(data).__name__}{hint}")
    stack = [(label, {}), *((name, _given(values)) for name, values in layers), ("command line", _given(overrides))]
    merged = data
    for _, values in stack[1:]:
        merged = _nested_update(merged, values)
    cfg = _validated(merged, stack, label, text)
    _check_chunk(cfg, _located(_origin(("scheduler", "chunked_prefill_size"), stack), label, text, ("scheduler", "chunked_prefill_size")))
    server = _resolve_server(cfg, merged, stack, label, text, log)
    if server is not None:
        page, chunk = server.page_size, server.chunked_prefill_size
        if chunk.value != -1 and page.value > chunk.value:
            where = _chunk_origin(cfg, server, stack, label, text, log.path if log is not None else "")
            raise ConfigError(f"{where}: scheduler.chunked_prefill_size: {chunk.value} is below page_size {page.describe()}: "
                              "no chunk could be cut at a page boundary")
        resolved = ("SGLang 0.5.23 start-up resolution", _resolved_values(server))
        cfg = _validated(_nested_update(merged, resolved[1]), [*stack, resolved], label, text)
        cfg._server = server
        if "buckets" not in cfg.model_fields_set:
            spec = _server_bucket_spec(server)
            if spec is not None:
                object.__setattr__(cfg, "buckets", spec)
    _check_buckets(cfg, _located(_origin(("buckets",), stack), label, text, ("buckets",)))
    _check_flags_file(cfg)
    _check_tp(cfg, _located(_origin(("tp_size",), stack), label, text, ("tp_size",)))
    return cfg


def _chunk_origin(cfg: DeploymentConfig, server: ResolvedServer, stack: list[tuple[str, dict[str, Any]]], label: str, text: str,
                  log_path: str = "") -> str:
    """Where the resolved chunk came from, for an error: the launch command that states it
    (`--server-args`, `server.args` in a config file, a flags file given as the bucket list), a
    log line, else the setting `scheduler.chunked_prefill_size` (config, option or default)."""
    given = server.given.get("chunked_prefill_size")
    if given is not None and given.source == "launch command":
        if cfg.server.args is not None:
            origin = _origin(("server", "args"), stack)
            return str(setting("server.args").flag) if origin == "command line" else _located(origin, label, text, ("server", "args"))
    if given is not None and given.source.startswith("log line ") and log_path:
        return f"{log_path}:{given.source.removeprefix('log line ')}"
    if given is not None and given.source.startswith(("log", "flags file")):
        return given.source
    return _located(_origin(("scheduler", "chunked_prefill_size"), stack), label, text, ("scheduler", "chunked_prefill_size"))


def _validated(merged: dict, stack: list[tuple[str, dict[str, Any]]], label: str, text: str) -> DeploymentConfig:
    """`DeploymentConfig` of the merged settings. Raises `ConfigError` naming where the bad
    value came from and its key."""
    try:
        return DeploymentConfig.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(p for p in first["loc"] if not _is_type_tag(p))
        key = ".".join(str(p) for p in loc) or "(top level)"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
        origin = _located(_origin(loc, stack), label, text, loc)
        hint = (" (this is a bucket file, as plan --emit yaml|json writes it: pass it with --buckets)"
                if first["type"] == "extra_forbidden" and loc[:1] in (("capture_num_tokens",), ("prefill",))
                else f" (the {loc[0]} is server.{'model_config' if loc[0] == 'model' else 'gpu'}: --{'model-config' if loc[0] == 'model' else 'gpu'})"
                if first["type"] == "extra_forbidden" and loc in (("model",), ("gpu",))
                else _did_you_mean(loc) if first["type"] == "extra_forbidden" else "")
        raise ConfigError(f"{origin}: {key}: {message} (got {_show(first.get('input'))}){hint}") from None


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """` (did you mean KEY?)` for an unknown config key close to a key of the section it is in
    (`cpbcg.errors.did_you_mean`, the rule a misspelt SGLang flag gets too), else empty."""
    import typing

    model: Any = DeploymentConfig
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        candidates = [a for a in (field.annotation, *typing.get_args(field.annotation)) if hasattr(a, "model_fields")]
        if not candidates:
            return ""
        model = candidates[0]
    fields = getattr(model, "model_fields", {})
    close = did_you_mean(str(loc[-1]), [*fields, *(f.alias for f in fields.values() if f.alias)])
    return f" (did you mean {'.'.join(map(str, (*loc[:-1], close)))}?)" if close else ""


def _check_tp(cfg: DeploymentConfig, origin: str) -> None:
    """A configured `tp_size` other than `cp_size` is refused: SGLang 0.5.23 then refuses to start
    or captures no CP graph (`cpbcg.engines.sglang.startup.check_server_flags` states the rule)."""
    if cfg.tp_size is None or cfg.tp_size == cfg.cp_size or cfg.cp_size == 1:
        return
    check = check_server_flags(attn_cp_size=cfg.cp_size, tp_size=cfg.tp_size, cp_strategy=cfg.cp_strategy.value,
                               enable_prefill_cp=True, prefill_attention_backend=CP_GRAPH_BACKENDS[cfg.cp_strategy.value])
    what, reason = check.findings()[0]
    why = f"SGLang {SGLANG_VERSION} would {what}: {reason}"
    raise ConfigError(f"{origin}: tp_size: {cfg.tp_size} differs from cp_size {cfg.cp_size}: {why} (set tp_size: {cfg.cp_size})")


def _check_flags_file(cfg: DeploymentConfig) -> None:
    """A bucket spec that is an SGLang flags file (`plan --emit sglang`) also states the CP and
    scheduler settings it was planned under; checking under other settings would test another
    deployment, so a disagreement is refused, naming both."""
    spec = cfg.buckets
    if not isinstance(spec, str) or "," in spec or not is_bucket_file(spec) or not path_exists(spec):
        return
    try:
        raw = read_input_bytes(Path(spec))
    except CpbcgError:
        return  # the bucket check reports it
    if not raw.lstrip().startswith(b"--"):
        return
    actual = {"cp_size": cfg.cp_size, "cp_strategy": cfg.cp_strategy.value, **{f"scheduler.{k}": v for k, v in cfg.scheduler.model_dump().items()}}
    try:
        settings = sglang_flag_settings(raw.decode("utf-8", "replace"))
    except ConfigError as exc:
        raise ConfigError(f"{spec}:1: {exc}") from None  # a shell split fails on the file as a whole
    server = cfg.server_resolution
    taken = {k for k, name in SERVER_KEYS.items() if server is not None and server.given.get(name, Given(None, "")).source.startswith("flags file")}
    for key, written in settings.items():
        if key in taken:
            continue  # the start-up resolution took the file's value (and says what 0.5.23 made of it)
        if str(actual.get(key)) != written:
            flag = next(f for f, k in FLAG_KEYS.items() if k == key)
            raise ConfigError(f"{spec}: {flag} {written[:20]} but {key} is {actual.get(key)}: the flags were planned under other "
                              f"settings; set {key}: {written[:20]} (or re-plan) so the check tests the deployment the flags describe")


def _check_chunk(cfg: DeploymentConfig, origin: str) -> None:
    """A chunk below the smallest CP-active forward (`2*cp_size` under zigzag) makes every
    prefill forward eager and a long request millions of forwards: refused."""
    chunk, smallest = cfg.scheduler.chunked_prefill_size, cfg.cp_layout.min_active_tokens
    if chunk != -1 and chunk < smallest:
        raise ConfigError(f"{origin}: scheduler.chunked_prefill_size: {chunk} is below {smallest}, the smallest CP-active "
                          f"forward at cp_size {cfg.cp_size} ({cfg.cp_strategy.value}): no forward could replay in a graph")


def _located(origin: str, label: str, text: str, loc: tuple) -> str:
    """`origin`, with `:LINE` of the key when the value came from the YAML file itself."""
    if origin != label or not text:
        return origin
    lines = yaml_key_lines(text)
    path = tuple(str(p) for p in loc)
    while path and path not in lines:
        path = path[:-1]
    return f"{label}:{lines[path]}" if path else label


def _check_buckets(cfg: DeploymentConfig, origin: str) -> None:
    """Parse the bucket spec now (files included) so every command refuses a bad one. An error
    in a bucket file names the file (`b.yaml: bucket 2: ...`), not where its name was given."""
    try:
        capture_buckets(list(cfg.resolved_buckets()), cfg.cp_layout)  # 0.5.23's order: rounded up to cp multiples, then the CP filter
    except CpbcgError as exc:
        spec = cfg.buckets
        if isinstance(spec, str) and "," not in spec and path_exists(Path(spec)) and Path(spec).is_file():
            text = str(exc)
            raise ConfigError(text if text.startswith(f"{spec}:") else f"{spec}:1: {text}") from None  # the list as a whole
        raise ConfigError(f"{origin}: buckets: {exc}") from None


def _given(values: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (values or {}).items() if v is not None}


def _origin(loc: tuple, stack: list[tuple[str, dict[str, Any]]]) -> str:
    """The label of the last layer that set the key at `loc` (or a section above it)."""
    path = [str(p) for p in loc]
    for name, values in reversed(stack[1:]):
        for dotted in values:
            parts = dotted.split(".")
            if path[: len(parts)] == parts or parts[: len(path)] == path:
                return name
    return stack[0][0]


def _is_type_tag(part: object) -> bool:
    """Pydantic puts union members and validators in error locations (`str`, `list[int]`,
    `function-after[...]`, `[key]`); the user only needs the key path."""
    text = str(part)
    return "[" in text or text in {"str", "int", "float", "bool", "constrained-int", "constrained-float"}


def _nested_update(data: dict, dotted: dict[str, Any]) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key, value in dotted.items():
        head, _, rest = key.partition(".")
        if rest:
            section = out.get(head)
            out[head] = _nested_update(section if isinstance(section, dict) else {}, {rest: value})
        else:
            out[head] = value
    return out


def _is_preset_name(source: str) -> bool:
    return bool(source) and len(source) <= 100 and "/" not in source and "\\" not in source and "\0" not in source


def _show(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


SERVER_KEYS = {arg.key: arg.field for arg in SERVER_ARGS}
"""Config keys that are SGLang server arguments, and the 0.5.23 field each is."""


def _lookup(data: dict, dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _resolve_server(cfg: DeploymentConfig, merged: dict, stack: list[tuple[str, dict[str, Any]]], label: str,
                    text: str, log: LogSettings | None = None) -> ResolvedServer | None:
    """0.5.23's start-up resolution of the config being loaded: the server arguments it states
    (config file < log < layers < command line; a config's launch command under the command
    line only), over the CP flags `plan --emit sglang` writes when no launch command is given
    (a log's launch that states `attn_cp_size` is one; a release before attention CP, or a launch
    that does not say, takes the deployment's CP flags under what it states), with its model and GPU. A log's launch (`log`) gives its arguments
    (`server.log_given`) and the values its server printed (`server.log_printed`, which win),
    each sourced `log line N`. None when the values are not of the right types (validation then
    reports them)."""
    from cpbcg.engines.sglang import server_inputs
    from cpbcg.planner.model.layout import CPLayout

    section = cfg.server
    def where(key: str) -> str:
        origin = _origin(("server", key), stack)
        if origin == "command line":
            return str(setting(f"server.{key}").flag)
        return f"{_located(origin, label, text, ('server', key))}: server.{key}"
    args, model_path, gpu_name = section.args, section.model_config_file, section.gpu
    given: dict[str, Given] = {}
    flags_file = flags_file_words(cfg.buckets) if isinstance(cfg.buckets, str) and args is None else None
    from_log, skipped = log_given(log.sglang_flags()) if log is not None else ({}, ())
    log_states_cp = "attn_cp_size" in from_log
    if log is not None and log.attention_backend is not None and not any(k.endswith("attention_backend") for k in from_log):
        backend, at = log.attention_backend  # the backend the server printed it ran: a fact over 0.5.23's default for the GPU
        from_log["attention_backend"] = Given(backend, f"log line {at}: the server printed it chose {backend}")
    shown_chunk = log.setting("scheduler.chunked_prefill_size") if log is not None else None
    if shown_chunk is not None and shown_chunk.inferred and "chunked_prefill_size" not in from_log:  # the chunk its forwards show
        from_log["chunked_prefill_size"] = Given(shown_chunk.value, f"log line {shown_chunk.line}: {shown_chunk.origin}")
    if log is not None:
        from_log.update(_log_layout(log, from_log))
    model = server_inputs.model_spec(model_path, where("model_config")) if model_path is not None else None
    if model is None and log is not None and log.architecture is not None:  # the class the server loaded: a fact over the assumption
        arch, at = log.architecture
        model = replace(ASSUMED_MODEL, architecture=arch, architectures=(arch,), model_type=None,
                        source=f"{arch} as the server printed it (log line {at}); its shape {ASSUMED_MODEL.source}")
    unrecognized: list[str] = []  # launch words the user gave that 0.5.23's parser rejects (a log's dump is what ran: not checked)
    if args is not None:
        given.update(server_inputs.launch_flags(args, where("args"), unrecognized))
    elif flags_file is not None:  # a flags file as the bucket list states the server's flags: its launch command
        try:
            given.update(parse_launch_words(flags_file, f"flags file {cfg.buckets}", unrecognized))
        except ValueError as exc:
            raise ConfigError(f"{cfg.buckets}: {exc}") from None
    elif not log_states_cp:  # a log's launch that states its CP size is the launch command
        shown = from_log.get("attn_cp_size")  # a size the log shows without stating it: its flags, unless an option overrides it
        overridden = _lookup(merged, "cp_size") is not None and _origin(("cp_size",), stack) != label
        layout = CPLayout(int(shown.value) if shown is not None and not overridden else cfg.cp_size, cfg.cp_strategy)
        cp_flags = parse_launch_words(deployment_cp_flags(layout, None if model is None else model.architecture),
                                     "the deployment's CP flags (plan --emit sglang)")
        backend_stated = any(k.endswith("attention_backend") for k in from_log)  # the log's backend, not the emitted one
        planned_gpu = server_inputs.gpu(gpu_name, where("gpu")) if gpu_name is not None else \
            gpu_from_device_name(log.device_name[0]) if log is not None and log.device_name is not None else None
        if planned_gpu is not None and not planned_gpu.is_sm100 and \
                cp_flags.get("prefill_attention_backend", Given(None, "")).value == "trtllm_mha":
            backend_stated = True  # 0.5.23 refuses trtllm_mha prefill with CP before SM100: the deployment's flags leave it to 0.5.23
        given.update({k: g for k, g in cp_flags.items() if not (backend_stated and k.endswith("attention_backend"))})
    stated = set(given) if args is not None or flags_file is not None else set()
    overrides: list[str] = []
    given.update(from_log)
    for key, name in SERVER_KEYS.items():
        if _lookup(merged, key) is None:
            continue  # not given: 0.5.23's default
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part)
        value = getattr(node, "value", node)
        origin = _origin(tuple(key.split(".")), stack)
        if origin != "command line" and name in stated:
            continue  # the launch command states what the server runs; a config value under it does not
        if origin == label and name in from_log:
            continue  # the log states what the server ran; the config file under it does not
        source = "option" if origin == "command line" else _located(origin, label, text, tuple(key.split(".")))
        names = [name] + (["tp_size"] if name == "attn_cp_size" and _lookup(merged, "tp_size") is None else [])
        for one in names:  # cpbcg's cp_size is --attn-cp-size N with --tp-size N (the emitted flags)
            old = given.get(one) if one in stated and origin == "command line" else None
            if old is not None and str(old.value) != str(value):  # a launch-command value replaced: said
                overrides.append(f"{setting(key).flag} {value} overrides the launch command's --{one.replace('_', '-')} {old.value}")
                given[one] = Given(value, f"option (overrides launch command {old.value})")
            else:
                given[one] = Given(value, source)
    unsaid = launch_notes(given, where("args") if args is not None else f"flags file {cfg.buckets}") \
        if args is not None or flags_file is not None else ()  # what the launch command lacks, said
    gpu = server_inputs.gpu(gpu_name, where("gpu")) if gpu_name is not None else None
    gpu_source = "" if gpu is None else f"given ({where('gpu')})"
    if gpu is None and log is not None and log.device_name is not None:  # the GPU the server printed: a fact over the assumption
        device, at = log.device_name
        gpu = gpu_from_device_name(device)
        gpu_source = f"{device} as the server printed it (log line {at})" if gpu is not None else ""
        if gpu is None:
            skipped += (f"log line {at}: the server ran on {device}, not in cpbcg's GPU catalogue: the assumed GPU planned (give --gpu)",)
    elif gpu is None and log is not None and log.memory_seen is not None:  # the memory it printed: a floor on the GPU's
        gib, at = log.memory_seen
        holding = gpus_holding(gib)
        if holding:
            gpu = holding[0]
            also = f"; {', '.join(g.name for g in holding[1:])} hold as much: give --gpu" if len(holding) > 1 else ""
            gpu_source = (f"inferred from {log.path}:{at} (the server shows {gib:g} GiB of GPU memory: the smallest catalogue GPU "
                          f"that holds it{also})")
    server = resolve_server(given, model, gpu, printed=log_printed(log.resolved) if log is not None else None,
                            model_source="" if model is None else model.source,
                            gpu_source=gpu_source)
    if unrecognized:
        unknown = [u for u in unrecognized if not u.startswith("ambiguous option: ")]
        said = ([f"unrecognized arguments: {', '.join(unknown)}"] if unknown else []) + [u for u in unrecognized if u not in unknown]
        refused = Refusal("parse_args", "; ".join(said))
        server = replace(server, refusals=(refused, *server.refusals))
        raise UnrecognizedServerArguments(f"{where('args') if args is not None else cfg.buckets}: SGLang {SGLANG_VERSION} "
                                          f"{refused.message}", server)
    if args is not None:
        server = replace(server, launch_origin=where("args"))
    return replace(server, notes=server.notes + skipped, overrides=tuple(overrides), input_notes=unsaid) if skipped or overrides or unsaid \
        else server


class UnrecognizedServerArguments(ConfigError):
    """A launch command with flags SGLang 0.5.23's parser rejects (argparse: "unrecognized
    arguments"): bad input, exit 2, for commands that plan; `check-server` reports `server` (its
    first refusal is the parser's) as a server that refuses to start."""

    def __init__(self, message: str, server: ResolvedServer) -> None:
        super().__init__(message)
        self.server = server


def _log_layout(log: LogSettings, stated: dict[str, Given]) -> dict[str, Given]:
    """The layout a launch shows without stating it, sourced to the evidence: the TP, PP and DP sizes its
    rank prefixes show (0.5.23 `run_scheduler_process` prints `TPn` when `tp_size > 1`, `PPn` when
    `pp_size > 1`, `DPn` for a data-parallel scheduler: `DP0..3` is `--dp-size 4`; `TP0..7` is `--tp-size 8` -- not read beside PP tags --, `PP0..3` `--pp-size 4`), and the CP size (rank
    prefixes, a release before attention CP: `LogSetting.inferred`) as `--attn-cp-size N` (with
    `--tp-size N` when the prefixes show no TP size)."""
    out: dict[str, Given] = {}
    for tag, key in (("TP", "tp_size"), ("PP", "pp_size"), ("DP", "dp_size")):  # the rank prefixes' TP0..N-1 / PP0..N-1 / DP0..N-1:
        # a fact over the default 1 (0.5.23 prints `DPn` for each data-parallel scheduler)
        seen = log.ranks.get(tag)
        if tag == "TP" and "PP" in log.ranks:
            continue  # a launcher may show TP ranks across pipeline stages (display_tp_rank): not read
        if seen is not None and seen[0] >= 2 and key not in stated:
            out[key] = Given(seen[0], f"log: rank prefixes {tag}0..{seen[0] - 1}, line {seen[1]}")
    shown = log.setting("cp_size")
    if shown is None or not shown.inferred or "attn_cp_size" in stated:
        return out
    source = f"log: {shown.origin}"
    out["attn_cp_size"] = Given(shown.value, source)
    if "tp_size" not in stated and "tp_size" not in out:
        out["tp_size"] = Given(shown.value, source)
    return out


def _resolved_values(server: ResolvedServer) -> dict[str, Any]:
    """The config keys the resolution decides (`ResolvedServer.decided`: page size, chunk, prefill
    token budget, and the CP settings and scheduler limits a launch command states), each field
    under the key it is declared with (`args.SERVER_ARGS`; `KeyError` for an undeclared field)."""
    return {BY_FIELD[name].key: value for name, value in server.decided().items()}


def _server_bucket_spec(server: ResolvedServer) -> str | list[int] | None:
    """The bucket list the resolved server is configured with when the config names none: a
    launch command's `--cuda-graph-bs-prefill`, else `sglang-default:MAX_BS` (0.5.23's
    `generate_prefill_cuda_graph_batch_sizes`); None when that list is empty (chunking off)."""
    bs = server.prefill_graph_bs
    if not bs.value:
        return None
    if bs.source.startswith(f"{SGLANG_VERSION} default"):
        return f"sglang-default:{min(server.prefill_graph_max_bs.value, MAX_BUCKET_TOKENS)}"  # the cut is said in the notes
    return list(bs.value)
