"""Every deployment setting declared once: config key, command-line flag, bounds, default, help.

`cpbcg.config` builds its validated config fields from these (`Setting.field_kwargs`; the
scheduler's config model whole, `SchedulerConfig`), and `cpbcg.cli.options` derives the
command-line options from them (`cpbcg.cli.options.option`; the scheduler's option group whole,
`SchedulerOptions`), so a bound, a default or a help text is written in one place, the help's
`[default: ...]` comes from the default itself, and `docs/cli.md` is generated from the result
(`python -m cpbcg.cli.docgen`). A setting that is an SGLang 0.5.23 server argument names its
`ServerArgs` field here too (`sglang_field`): the launch flag, the deploy flags, their read-back
and the log reader's read-back follow (`cpbcg.engines.sglang.args.SERVER_ARGS` is derived from
it). So a new scheduler setting is its declaration here and its field in the planner's
`SchedulerSettings` (`tests/test_settings_declared_once.py` adds one in a fixture). The way
torchtitan derives its CLI from its config dataclasses (`config/manager.py`).

Light on purpose (no numpy, pydantic or typer): `cpbcg --help` reads it. The planner's own
defaults (`SchedulerSettings`, `DEFAULT_COST`, `Deployment`) must equal these; a test checks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from cpbcg.planner.choices import TRACE_FORMAT_NAMES, CaptureLayout, CPStrategy, EmitFormat, Fold, Objective, emit_choices, emit_help, trace_format_name

__all__ = [
    "CAPTURE_DEFAULT_BUCKETS", "CPStrategy", "CaptureLayout", "EmitFormat", "Fold", "MAX_BUCKET_TOKENS", "MAX_INT32",
    "MAX_INT64", "Objective", "SETTINGS", "Setting", "TRACE_FORMAT_NAMES", "UNITS", "emit_choices", "emit_help",
    "parse_load_factors", "setting", "trace_format_name",
]

MAX_INT32 = 2**31 - 1
"""Upper bound of token and request counts (SGLang holds them in int32)."""
MAX_INT64 = 2**63 - 1
"""Upper bound of seeds and counters."""
MAX_BUCKET_TOKENS = 1 << 22
"""Largest bucket, alignment or request-slot count accepted (`cpbcg.planner.model.bucket_lists`)."""
CAPTURE_DEFAULT_BUCKETS = "256,512,1024,2048,2304"
"""Buckets `cpbcg capture` captures when neither `--buckets` nor the config names any (CPU-friendly)."""
UNITS = ("tokens", "requests", "ranks", "rows", "steps", "milliseconds", "milliseconds/token", "tokens/s", "requests/s", "ratio",
         "fraction", "switch", "choice", "spec", "text", "path", "name", "id")
"""What a setting's value counts (`Setting.unit`): a quantity's unit, or what kind of word it is
(`switch` on/off, `choice` of a list, `spec` a bucket spec, `text`, `path`, `name`, `id` a seed)."""


@dataclass(frozen=True)
class Setting:
    """One setting: where it lives in the config, how the command line spells it, what it accepts."""

    key: str
    """Dotted config key (`scheduler.rate`)."""
    kind: type
    """Python type of a value on the command line (int, float, bool, str or an Enum)."""
    default: Any
    """The config's default (None: unset, see `default_text`)."""
    help: str
    """What it means, with its unit; never its default (appended from `default`)."""
    flag: str | None = None
    """Command-line flag (`--rate`); None: config only."""
    short: str | None = None
    """Short flag (`-b`)."""
    off_flag: str | None = None
    """The flag that sets a bool False (`--no-decode`)."""
    ge: float | None = None
    """Least value accepted (inclusive; the command line checks it too)."""
    gt: float | None = None
    """Values must be above this (the config checks it)."""
    le: float | None = None
    """Largest value accepted (inclusive; the command line checks it too)."""
    default_text: str | None = None
    """How the help states a default that is a rule, not a value (`2*cp_size for zigzag, ...`)."""
    default_note: str | None = None
    """Said after the default in the help (`fitted to public measurements`)."""
    flag_kind: type | None = None
    """Type the command line reads when it differs from `kind` (`--time-scale` takes a text list
    of load factors; its config key is one number). Bounds are then checked by the reader."""
    unit: str = ""
    """What the value counts, one of `UNITS` (`tokens`, `requests`, `milliseconds`, `ratio` ...):
    every declaration states it (`_s` requires it; a test checks)."""
    sglang_field: str | None = None
    """The SGLang 0.5.23 `ServerArgs` field this setting is (`attn_cp_size` for `cp_size`); None:
    not a server argument. `cpbcg.engines.sglang.args.SERVER_ARGS` is read from it."""
    nullable: bool = False
    """A config may set it to null although its default is a value (`scheduler.max_total_tokens`: null =
    unbounded); a setting whose default is None is always nullable."""
    deployed: bool = True
    """A server argument the deploy flags (`--emit sglang`) write from the setting's value and the
    log reader reads back (`tp_size` is not: the CP mode's flags write `--tp-size` equal to
    `cp_size`; `max_total_tokens` is not: the server sizes its KV pool itself)."""

    @property
    def sglang_flag(self) -> str | None:
        """The SGLang 0.5.23 launch flag this setting is (`--attn-cp-size` for `cp_size`): 0.5.23's
        parser names every flag after its field (`ServerArgs.add_cli_args`); None: not one."""
        return None if self.sglang_field is None else "--" + self.sglang_field.replace("_", "-")

    def field_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the config's `pydantic.Field` (default, bounds, description)."""
        bounds = {name: value for name, value in (("ge", self.ge), ("gt", self.gt), ("le", self.le)) if value is not None}
        return {"default": self.default, "description": self.help, **bounds}

    def help_text(self) -> str:
        """The option's help: `help` and `[default: ...]` made from the default (none when unset)."""
        shown = self.default_text
        if shown is None and self.default is not None:
            value = self.default
            if isinstance(value, Enum):
                shown = value.value
            elif isinstance(value, bool):
                shown = "on" if value else "off"
            else:
                shown = f"{value:g}" if isinstance(value, float) else str(value)
        if shown is None:
            return self.help
        note = f", {self.default_note}" if self.default_note else ""
        return f"{self.help} [default: {shown}{note}]"


SGLANG_FLAG = "<the SGLang flag>"
"""A setting's `flag` that is the SGLang server argument's own (`--chunked-prefill-size`): derived
from its `sglang_field`, not spelled again."""


def _s(key: str, kind: type, default: Any, help: str, flag: str | None = None, *, unit: str, **kw: Any) -> Setting:
    """One declaration; `unit` (one of `UNITS`) is required, `flag=SGLANG_FLAG` takes the server argument's flag."""
    if unit not in UNITS:
        raise ValueError(f"{key}: unit {unit!r} is not one of {UNITS}")
    spec = Setting(key, kind, default, help, flag, unit=unit, **kw)
    return spec if flag != SGLANG_FLAG else dataclasses.replace(spec, flag=spec.sglang_flag)


_COST_NOTE = "fitted to public measurements for Llama-3.1-70B on B200 at TP 4; --model-config, --gpu and cp_size (TP) rescale it (docs/costs.md)"

SETTINGS: tuple[Setting, ...] = (
    # deployment (SGLang's server arguments)
    _s("cp_size", int, 4, "CP ranks (SGLang --attn-cp-size).", "--cp-size", ge=1, le=1024, unit="ranks", sglang_field="attn_cp_size"),
    _s("tp_size", int, None, "SGLang --tp-size; must equal cp_size.", ge=1, le=1024, default_text="cp_size", unit="ranks", sglang_field="tp_size", deployed=False),
    _s("cp_strategy", CPStrategy, CPStrategy.zigzag, "CP split strategy (SGLang --cp-strategy).", SGLANG_FLAG, unit="choice", sglang_field="cp_strategy"),
    _s("align_size", int, None, "Row alignment.", "--align-size", ge=1, le=MAX_BUCKET_TOKENS,
       default_text="2*cp_size for zigzag, cp_size for interleave", unit="rows"),
    _s("max_padding_factor", float, 2.0, "Largest bucket/tokens ratio the selector accepts.", "--max-padding-factor", ge=1, le=100, unit="ratio"),
    _s("buckets", str, "sglang-default:8192", "Bucket spec: sglang-default:MAX, sglang-legacy:MAX, a list like 2048,2304, or a "
       "YAML/JSON file (also SGLang --cuda-graph-config JSON).", "--buckets", short="-b", default_text="sglang-default:CHUNK",
       default_note="SGLang's default for the --chunked-prefill-size in force", unit="spec"),
    _s("capture_layout", CaptureLayout, CaptureLayout.single_request, "Dummy batch each bucket is captured from.", "--capture-layout", unit="choice"),
    _s("max_context_size_tokens", int, None, "Longest dummy request for context_bounded capture (tokens).", "--max-context-size",
       ge=1, le=MAX_INT32, unit="tokens"),
    _s("max_capture_requests", int, None, "Request slots of the capture dummy batch.", "--max-capture-requests",
       ge=1, le=MAX_BUCKET_TOKENS, unit="requests"),
    _s("max_seq_len_tokens", int, None, "Longest sequence a prefill graph replays (SGLang cuda-graph-config prefill.max_seq_len).",
       ge=1, le=MAX_INT32, unit="tokens"),
    # the server 0.5.23 starts (its start-up resolution: cpbcg.engines.sglang.startup)
    _s("server.args", str, None, "The server's launch command: the words of `python -m sglang.launch_server ...` as one "
       "argument, or @FILE (a file of them, shell syntax, \\-continued lines and # comments allowed). SGLang 0.5.23's "
       "start-up resolution turns it, the model and the GPU into the page size, chunk and prefill graph list planned.",
       "--server-args", default_text="the CP flags of the deployment", unit="text"),
    _s("server.model_config", str, None, "The model's Hugging Face config.json (architecture, MLA or not, layers, heads, "
       "context length), or a model preset's name (llama-3.1-70b, qwen3-32b, gpt-oss-120b, deepseek-v3: "
       "cpbcg/configs/models/NAME.config.json). Decides the start-up resolution and scales the cost models "
       "(docs/costs.md).", "--model-config", default_text="a Llama-3.1-70B-shaped dense GQA model (assumed)", unit="path"),
    _s("server.gpu", str, None, "The GPU the server runs on: B200, GB200, B300, GB300, H100, H200, H20, A100, L40S, "
       "RTX-PRO-6000, MI300X, ... (decides the default chunk and attention backend, and whether zigzag CP graphs exist).",
       "--gpu", default_text="B200 (assumed: SM100, where 0.5.23 runs zigzag CP graphs)", unit="name"),
    # the scheduler simulation (docs/scheduler.md)
    _s("scheduler.chunked_prefill_size", int, 8192, "Chunk budget per prefill forward in tokens; -1 disables chunking "
       "(SGLang --chunked-prefill-size); at most the largest bucket, as the default list follows it.", SGLANG_FLAG,
       ge=-1, le=MAX_BUCKET_TOKENS, default_text="SGLang 0.5.23's for the GPU: 16384 on B200/GB200/B300/GB300, 8192 on H100/H200", unit="tokens", sglang_field="chunked_prefill_size"),
    _s("scheduler.max_prefill_tokens", int, 16384, "Token budget of one prefill forward (SGLang --max-prefill-tokens).",
       SGLANG_FLAG, ge=1, le=MAX_BUCKET_TOKENS, unit="tokens", sglang_field="max_prefill_tokens"),
    _s("scheduler.prefill_max_requests", int, None, "Most requests in one prefill forward (SGLang --prefill-max-requests).",
       SGLANG_FLAG, ge=1, le=MAX_INT32, default_text="unlimited", unit="requests", sglang_field="prefill_max_requests"),
    _s("scheduler.max_running_requests", int, None, "Request slots: requests decoding plus those of the forward being formed "
       "(with --no-decode it caps the requests of one forward).", SGLANG_FLAG, ge=1, le=MAX_INT32,
       default_text="min(max_total_tokens // 2, 4096) with decode, unlimited without", unit="requests", sglang_field="max_running_requests"),
    _s("scheduler.prefix_cache", str, "off", "Prefix cache over hash_ids (512-token blocks): off, unlimited, or a size in tokens (LRU).",
       "--prefix-cache", unit="tokens"),
    _s("scheduler.prefill_fixed_ms", float, 5.0, "Fixed time of one prefill forward (ms).", "--prefill-fixed-ms", ge=0, le=1e6, unit="milliseconds"),
    _s("scheduler.prefill_tokens_per_s", float, 40000.0, "Prefill throughput (tokens/s); a forward of n tokens takes "
       "prefill_fixed_ms + n / this.", "--prefill-tokens-per-s", ge=1, le=1e12, unit="tokens/s"),
    _s("scheduler.rate", float, 4.0, "Poisson arrival rate for request traces without timestamps (requests/s).", "--rate", ge=1e-9, le=1e9, unit="requests/s"),
    _s("scheduler.time_scale", float, 1.0, "Divide inter-arrival gaps by this to emulate higher load; plan takes a list of load "
       "factors, e.g. 0.5,1,2,4: every factor is simulated and the list is fitted to all of them together.", "--time-scale",
       ge=1e-6, le=1e6, flag_kind=str, unit="ratio"),
    _s("scheduler.seed", int, 0, "Seed of the synthetic Poisson arrivals.", "--seed", ge=0, le=MAX_INT64, unit="id"),
    _s("scheduler.decode", bool, True, "Simulate decode (request slots, KV pool, decode steps between prefills); --no-decode "
       "keeps the prefill-only model.", "--decode", off_flag="--no-decode", unit="switch"),
    _s("scheduler.page_size", int, 1, "KV page size in tokens; charges are page-rounded and chunks cut to a page boundary "
       "(SGLang --page-size; SGLang 0.5.23 raises it to what the attention backend takes).", SGLANG_FLAG, ge=1, le=1 << 20,
       default_text="SGLang 0.5.23's for the backend: 64 with trtllm_mha, else 1", unit="tokens", sglang_field="page_size"),
    _s("scheduler.max_total_tokens", int, 1 << 20, "KV pool in tokens, with decode (SGLang --max-total-tokens); null in a "
       "config = unbounded.", SGLANG_FLAG, ge=1, le=2**62, unit="tokens", sglang_field="max_total_tokens", deployed=False, nullable=True),
    _s("scheduler.enable_mixed_chunk", bool, False, "Run the decode tokens of running requests inside prefill forwards "
       "(SGLang --enable-mixed-chunk).", SGLANG_FLAG, off_flag="--no-mixed-chunk", unit="switch", sglang_field="enable_mixed_chunk"),
    _s("scheduler.default_output_tokens", int, 256, "Output length for requests whose trace has none (tokens).",
       "--default-output-tokens", ge=1, le=1 << 31, unit="tokens"),
    _s("scheduler.decode_fixed_ms", float, None, "Fixed time of one decode step (ms).", "--decode-fixed-ms", ge=0, le=1e6,
       default_text="--prefill-fixed-ms", unit="milliseconds"),
    _s("scheduler.decode_ms_per_request", float, None, "Decode time per running request per step (ms).", "--decode-ms-per-request",
       ge=0, le=1e6, default_text="1000 / --prefill-tokens-per-s", unit="milliseconds"),
    _s("scheduler.init_new_token_ratio", float, 0.7, "SGLANG_INIT_NEW_TOKEN_RATIO.", gt=0, le=1, unit="ratio"),
    _s("scheduler.min_new_token_ratio_factor", float, 0.14, "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR.", ge=0, le=1, unit="ratio"),
    _s("scheduler.new_token_ratio_decay_steps", int, 600, "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS.", ge=1, le=MAX_INT32, unit="steps"),
    _s("scheduler.clip_max_new_tokens", int, 4096, "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (tokens).", ge=1, le=MAX_INT32, unit="tokens"),
    _s("scheduler.decode_graph_max_bs", int, None, "Largest running batch a simulated decode step runs in a CUDA graph; a step "
       "above it runs eagerly and takes eager_decode_factor x the step time (the decode fall-off feedback); null = every "
       "step at the graph step time.", ge=1, le=MAX_INT32, unit="requests"),
    _s("scheduler.eager_decode_factor", float, 1.0, "Eager / graph decode step time above decode_graph_max_bs (assumed; "
       "sglang #40346 measured 2.06).", ge=1, le=1e3, unit="ratio"),
    # the cost model (docs/optimiser.md)
    _s("cost.graph_fixed_ms", float, 70.67, "Cost model: fixed time of a graph replay (ms); a replay of bucket B costs "
       "graph_fixed_ms + B*token_ms.", "--graph-fixed-ms", ge=0, le=1e6, default_note=_COST_NOTE, unit="milliseconds"),
    _s("cost.eager_fixed_ms", float, 122.7, "Cost model: fixed time of an eager forward (ms); n tokens eagerly cost "
       "eager_fixed_ms + n*token_ms.", "--eager-fixed-ms", ge=0, le=1e6, default_note=_COST_NOTE, unit="milliseconds"),
    _s("cost.token_ms", float, 0.02591, "Cost model: time per token (ms).", "--token-ms", ge=0, le=1e3, default_note=_COST_NOTE, unit="milliseconds/token"),
    # CI gates (`cpbcg replay-check`)
    _s("gates.min_coverage", float, None, "Gate: least fraction of batches replayed in graphs (0..1).", "--min-coverage", ge=0, le=1, unit="fraction"),
    _s("gates.min_token_coverage", float, None, "Gate: least fraction of tokens replayed in graphs (0..1).", "--min-token-coverage",
       ge=0, le=1, unit="fraction"),
    _s("gates.max_padding", float, None, "Gate: most padding overhead, padded / real graph tokens (0.05 = 5%).", "--max-padding", ge=0, unit="ratio"),
    _s("gates.min_observed_coverage", float, None, "Gate (an SGLang server log that prints the graph verdict): least fraction "
       "of forwards the server itself ran in graphs (0..1).", "--min-observed-coverage", ge=0, le=1, unit="fraction"),
    _s("gates.min_decode_coverage", float, None, "Gate: least fraction of decode steps run in decode CUDA graphs (SGLang 0.5.23's "
       "decode list as captured, on the simulated or logged running batch; 0..1).", "--min-decode-coverage", ge=0, le=1, unit="fraction"),
    _s("gates.max_eager_decode_steps", int, None, "Gate: most decode steps run eagerly (running batch above the largest captured "
       "decode size; a log's Decode batch lines count decode_log_interval steps each).", "--max-eager-decode-steps", ge=0, le=MAX_INT64, unit="steps"),
    _s("gates.min_observed_decode_coverage", float, None, "Gate (an SGLang server log whose Decode batch lines print the graph "
       "verdict): least fraction of those lines the server ran in decode graphs (0..1).", "--min-observed-decode-coverage", ge=0, le=1, unit="fraction"),
)
"""Every setting, in config order."""

_BY_KEY = {s.key: s for s in SETTINGS}


def setting(key: str) -> Setting:
    """The declaration of the config key `key` (`KeyError` for an unknown key)."""
    return _BY_KEY[key]


def parse_load_factors(text: str) -> list[float]:
    """Load factors from `--time-scale` text `0.5,1,2,4` (one or more, distinct, each within the
    bounds `scheduler.time_scale` declares), in the order given: what `plan` simulates every
    request trace at. Raises `ConfigError` naming `--time-scale`."""
    from cpbcg.errors import ConfigError

    spec = setting("scheduler.time_scale")
    low, high = float(spec.ge or 0.0), float(spec.le or 0.0)
    factors: list[float] = []
    for word in text.split(","):
        try:
            value = float(word.strip())
        except ValueError:
            raise ConfigError(f"--time-scale: {word.strip()[:40]!r} is not a number (give e.g. 2, or 0.5,1,2,4)") from None
        if not low <= value <= high:  # also refuses nan and inf
            raise ConfigError(f"--time-scale: {word.strip()[:40]} is outside [{low:g}, {high:g}]")
        if value in factors:
            raise ConfigError(f"--time-scale: {word.strip()[:40]} is given twice")
        factors.append(value)
    return factors


CONFIG_HELP = "Deployment config: a YAML file or a preset name (see `cpbcg presets`). Options override it."
"""`--config`'s help (every command's `-c`)."""


@dataclass(frozen=True)
class Flag:
    """A command's own option (not a config key), declared once on the field of the command's
    options type (`cpbcg.commands.plan_options.PlanOptions`):
    `max_buckets: Annotated[int | None, Flag(("--max-buckets", "-k"), "Buckets in ...", ge=1, le=512)] = None`.
    `cpbcg.cli.options.with_options` turns it into the typer option (flags, help, bounds, parser;
    the default is the field's), so the option, its type and its default are written once."""

    flags: tuple[str, ...]
    """Flag spellings (`--max-buckets`, `-k`; a bool's off flag as `--on/--off`)."""
    help: str
    """What it means, with its unit (and, with `show_default=False`, how its default is chosen)."""
    ge: float | None = None
    """Least value accepted (inclusive)."""
    le: float | None = None
    """Largest value accepted (inclusive)."""
    metavar: str | None = None
    parser: Any = None
    """A `str -> value` function (`ValueError` with the reason for a bad text)."""
    show_default: bool = True
    """False: the help says the default itself (or there is none to show)."""
    refused_under: tuple[str, ...] | None = None
    """The command's modes that refuse the option when it is given (`cpbcg plan`: `--no-recommend`,
    `--guarantee`); () = every mode takes it. A command with modes leaves no option at None (a test
    checks), so a new option is classified where it is declared (`cpbcg.commands.plan_options.refused`)."""


@dataclass(frozen=True)
class Argument:
    """A command's positional argument, declared once on the field of its options type, as `Flag`
    declares an option: `extend_seq_lens: Annotated[list[int], Argument("Extend lengths ...", ge=1)]`.
    `cpbcg.cli.options.with_options` turns it into the typer argument (help, bounds, metavar; the
    field's default, none = required)."""

    help: str
    ge: float | None = None
    """Least value accepted (inclusive)."""
    le: float | None = None
    """Largest value accepted (inclusive)."""
    metavar: str | None = None


CONFIG_FLAG = Flag(("--config", "-c"), CONFIG_HELP, show_default=False)
"""`--config`, the one declaration every command that reads a deployment config puts on its field."""
FORMAT_FLAG = Flag(("--format", "-f"), "table for people, json for machines.", refused_under=())
"""`--format` (`cpbcg.outputs.console.OutputFormat`), the one declaration every command with a `--format` puts on its field."""
