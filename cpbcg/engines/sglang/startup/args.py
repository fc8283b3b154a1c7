"""SGLang 0.5.23's launch parser, restated: the server arguments the start-up resolution reads
(0.5.23 field names, their types and choices), a launch command's words as argparse takes them, and
what a server log states or printed, as resolution inputs (`Given`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from cpbcg.errors import did_you_mean
from cpbcg.engines.sglang.server import Given
from cpbcg.engines.sglang.launch import SGLANG_FLAGS
from cpbcg.engines.sglang.args import BY_KEY as SERVER_ARG
from cpbcg.engines.sglang.release import SGLANG_VERSION

SGLANG = SGLANG_VERSION

ATTENTION_BACKENDS = frozenset({
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4", "flashinfer",
    "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops",
    "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
})
"""0.5.23 `arg_groups/choices.py::ATTENTION_BACKEND_CHOICES`."""
CP_STRATEGIES = frozenset({"zigzag", "interleave"})
PREFILL_GRAPH_BACKENDS = frozenset({"breakable", "full", "disabled"})
"""0.5.23 `model_executor/cuda_graph_config.py::Backend.ALL` (the choices of `--cuda-graph-backend-prefill`)."""
RETIRED_GRAPH_BACKEND = "tc_piecewise was removed; select breakable, full, or disabled"
"""0.5.23's refusal of the retired backend (`parse_cuda_graph_backend_arg` for the flag, `CudaGraphConfig.from_dict`
for `--cuda-graph-config`): the launch exits before any capture."""

_INT_FLAGS = {
    "page_size": 1, "chunked_prefill_size": -1, "max_prefill_tokens": 1, "max_running_requests": 1, "max_total_tokens": 1,
    "tp_size": 1, "pp_size": 1, "dp_size": 1, "ep_size": 1, "attn_cp_size": 1, "attn_dp_size": 1, "moe_dp_size": 1, "dcp_size": 1,
    "cuda_graph_max_bs_prefill": 1, "prefill_max_requests": 1,
}
"""Integer server arguments the resolution reads, with the least value accepted."""
_BOOL_FLAGS = frozenset({"enable_prefill_cp", "disable_cuda_graph", "disable_prefill_cuda_graph", "enable_mixed_chunk",
                         "disable_radix_cache", "enable_multimodal", "language_model_only", "enable_two_batch_overlap",
                         "enable_dp_attention"})
_TEXT_FLAGS = {
    "attention_backend": ATTENTION_BACKENDS, "prefill_attention_backend": ATTENTION_BACKENDS,
    "decode_attention_backend": ATTENTION_BACKENDS, "cp_strategy": CP_STRATEGIES,
    "cuda_graph_backend_prefill": PREFILL_GRAPH_BACKENDS, "model_path": None, "speculative_algorithm": None,
    "disaggregation_mode": frozenset({"null", "prefill", "decode"}),
    "disaggregation_transfer_backend": frozenset({"mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"}),
    "moe_a2a_backend": frozenset({"none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe", "deepep_v2",
                                  "ascend_tp", "pplx", "flashinfer_megamoe"}),
}
_LIST_FLAGS = frozenset({"cuda_graph_bs_prefill"})
_JSON_FLAGS = frozenset({"cuda_graph_config"})
MODELLED_FLAGS = frozenset(_INT_FLAGS) | _BOOL_FLAGS | frozenset(_TEXT_FLAGS) | _LIST_FLAGS | _JSON_FLAGS
"""Server arguments (0.5.23 field names) the resolution reads; others are listed as not modelled."""
AFFECTS_UNMODELLED = frozenset({"speculative_algorithm"})


def _flag_name(word: str) -> str:
    return word[2:].replace("-", "_")


OPTION_DEST = {
    "--tensor-parallel-size": "tp_size", "--pipeline-parallel-size": "pp_size", "--data-parallel-size": "dp_size",
    "--attention-data-parallel-size": "attn_dp_size", "--attention-context-parallel-size": "attn_cp_size",
    "--expert-parallel-size": "ep_size", "--ep": "ep_size", "--decode-context-parallel-size": "dcp_size",
    "--moe-data-parallel-size": "moe_dp_size", "--model": "model_path",
}
"""Option strings of 0.5.23's parser whose `dest` is not the option's own name (`Arg(aliases=...)` in
`arg_groups/fields/`), for the server arguments the resolution reads; every other `--a-b` is `a_b`."""


def resolve_option(word: str) -> str | None:
    """The option string of 0.5.23's launch parser that `word` (`--flag` or `--flag=value`) names, as
    argparse (`allow_abbrev`, Python 3.11 `_parse_optional`) finds it: the option itself, else the one
    option it is a prefix of (`--tp` is `--tp-size`); None when it names none. Raises `ValueError` with
    argparse's message when it is a prefix of several (`ambiguous option: --page could match --page-size,
    --paged-experts-num-resident`: 0.5.23 exits 2; the candidates listed sorted, argparse lists them in the
    parser's registration order)."""
    flag = word.partition("=")[0]
    if flag in _KNOWN_FLAGS:
        return flag
    matches = [f for f in SGLANG_FLAGS if f.startswith(flag)]
    if len(matches) > 1:
        raise ValueError(f"SGLang {SGLANG} would exit 2: ambiguous option: {word[:60]} could match {', '.join(matches)}")
    return matches[0] if matches else None


def option_dest(option: str) -> str:
    """The 0.5.23 field an option string sets (`--tp-size` -> `tp_size`, `--tensor-parallel-size` -> `tp_size`)."""
    return OPTION_DEST.get(option, _flag_name(option))


def unrecognized_flag(flag: str) -> str | None:
    """None when 0.5.23's launch parser takes `--flag` (`cpbcg.engines.sglang.launch.SGLANG_FLAGS`, or a prefix
    of one: argparse's `allow_abbrev`), else the flag and the closest known one (difflib):
    `--attn-cp-sise (did you mean --attn-cp-size?)`."""
    if flag in _KNOWN_FLAGS or any(f.startswith(flag) for f in SGLANG_FLAGS):
        return None
    close = did_you_mean(flag, SGLANG_FLAGS)
    return f"{flag} (did you mean {close}?)" if close else flag


_KNOWN_FLAGS = frozenset(SGLANG_FLAGS)


def parse_launch_words(words: Sequence[str], source: str = "launch command",
                       unrecognized: list[str] | None = None) -> dict[str, Given]:
    """Server arguments from the words of `python -m sglang.launch_server ...` (or `sglang serve`,
    or the flags alone): `--name value`, `--name=value`, `--flag` (true), `--name v1 v2 ...`
    (lists). Leading words before the first `--flag` (the program) are skipped, and must name
    SGLang's launcher (`sglang.launch_server`, `launch_server.py`, `sglang serve`: a `vllm serve` command raises); the last of a
    repeated flag wins, as argparse does; an unambiguous prefix names its option and an alias its
    field (`--tp 4` is `--tp-size 4`: `resolve_option`, `option_dest`), an ambiguous one raises. Values of the arguments the resolution reads are
    checked; others are kept as text. Raises `ValueError` ("--page-size: expected ...") for a
    bad value or a stray word, and for a flag 0.5.23 does not know (`unrecognized_flag`) or an
    ambiguous prefix unless `unrecognized` is given: then each is appended there and left out (an
    ambiguous one as `ambiguous option: --page could match ...`)."""
    out: dict[str, Given] = {}
    i = 0
    while i < len(words) and not words[i].startswith("--"):
        i += 1
    program = [w for w in words[:i] if "=" not in w]  # leading VAR=value environment words aside
    if program and not any("sglang" in w or "launch_server" in w for w in program):
        raise ValueError(f"{' '.join(program)[:60]!r}: not an SGLang {SGLANG} launch command (python -m sglang.launch_server ..., "
                         f"sglang serve ..., or the flags alone)")
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or word == "--":
            raise ValueError(f"{word[:40]!r}: expected a --flag (a value without its flag?)")
        name, eq, inline = word.partition("=")
        values: list[str] = [inline] if eq else []
        i += 1
        if not eq:
            while i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
        try:
            option = resolve_option(word)
        except ValueError as exc:  # argparse's other refusal of the launch: one kind with the unrecognized ones
            if unrecognized is None:
                raise
            unrecognized.append("ambiguous option: " + str(exc).partition("ambiguous option: ")[2])
            continue
        if option is None:  # 0.5.23's argparse exits: "unrecognized arguments"
            unknown = unrecognized_flag(name) or name
            if unrecognized is None:
                raise ValueError(f"unrecognized SGLang {SGLANG} server argument {unknown}")
            unrecognized.append(unknown)
            continue
        key = option_dest(option)
        out[key] = Given(_typed(key, name, values), source)
    return out


def launch_notes(given: Mapping[str, Given], origin: str) -> tuple[str, ...]:
    """What a launch command (`origin`: where it was given) leaves to be said, with the server arguments it
    came to (`given`, options merged): no `--model-path` (0.5.23's parser requires it: `ModelArgs.model_path`
    has no default, so argparse exits 2), no `--attn-cp-size` (0.5.23 runs attention CP size 1: no prefill CP,
    planned so)."""
    notes = []
    if "model_path" not in given:
        notes.append(f"{origin}: no --model-path: SGLang {SGLANG} exits 2 (the following arguments are required: "
                     "--model-path/--model); planned as if it were given")
    if "attn_cp_size" not in given:
        notes.append(f"{origin}: no --attn-cp-size: SGLang {SGLANG} runs attn_cp_size 1 (no prefill context parallelism), "
                     "planned at cp 1 (add --attn-cp-size N --enable-prefill-cp, or give --cp-size)")
    return tuple(notes)


def log_given(flags: Mapping[str, tuple[Any, int]]) -> tuple[dict[str, Given], tuple[str, ...]]:
    """The server arguments one launch of a log states (`LogSettings.sglang_flags()`: 0.5.23
    field name -> (value, line), from the settings dump or the launch command), as resolution
    inputs with source `log line N`: the arguments the resolution reads (`MODELLED_FLAGS`),
    checked as a launch command's are; unset values (None) are left out. Returns them and, for
    each value 0.5.23 would not take, a note that it was not read (never raises)."""
    out: dict[str, Given] = {}
    skipped: list[str] = []
    for key, (value, line) in flags.items():
        if key not in MODELLED_FLAGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        words = (["true" if value else "false"] if isinstance(value, bool) else
                 [str(v) for v in value] if isinstance(value, (list, tuple)) else
                 [json.dumps(value)] if isinstance(value, dict) else [str(value)])
        try:
            out[key] = Given(_typed(key, flag, words), f"log line {line}")
        except ValueError as exc:
            skipped.append(f"log line {line}: {exc}: not read (0.5.23's default planned)")
    return out, tuple(skipped)


LOG_PRINTED = {"max_total_num_tokens": "max_total_tokens", "chunked_prefill_size": "chunked_prefill_size",
               "max_prefill_tokens": "max_prefill_tokens", "max_running_requests": "max_running_requests"}
"""Values a server prints it resolved (`Scheduler.__init__`'s line, every release) -> the 0.5.23 field each is."""


def log_printed(resolved: Mapping[str, tuple[Any, int]]) -> dict[str, Given]:
    """What a launch's server printed it resolved (`LogSettings.resolved`: name -> (value, line),
    start-up overrides included: `chunked_prefill_size` -1) as `resolve_server`'s `printed`,
    source `log line N`: token counts of at least 1, or -1 for the chunk (chunking off)."""
    out: dict[str, Given] = {}
    for name, key in LOG_PRINTED.items():
        if name in resolved:
            value, line = resolved[name]
            if isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or (key == "chunked_prefill_size" and value == -1)):
                out[key] = Given(value, f"log line {line}")
    return out


def _typed(key: str, flag: str, values: list[str]) -> Any:
    if key in _BOOL_FLAGS:
        if not values:
            return True
        if len(values) == 1 and values[0].lower() in ("true", "false"):
            return values[0].lower() == "true"
        raise ValueError(f"{flag}: takes no value, got {' '.join(values)[:40]!r}")
    if not values:
        if key in MODELLED_FLAGS:
            raise ValueError(f"{flag}: expected a value")
        return True
    if key in _LIST_FLAGS:
        return tuple(_int(flag, v, 1) for v in values)
    if len(values) > 1:
        if key in MODELLED_FLAGS:
            raise ValueError(f"{flag}: expected one value, got {len(values)}: {' '.join(values)[:40]!r}")
        return tuple(values)
    raw = values[0]
    if key in _INT_FLAGS:
        return _int(flag, raw, _INT_FLAGS[key])
    if key in _TEXT_FLAGS:
        choices = _TEXT_FLAGS[key]
        if key == "cuda_graph_backend_prefill" and raw == "tc_piecewise":
            raise ValueError(f"{flag}: {RETIRED_GRAPH_BACKEND}")
        if choices is not None and raw not in choices:
            raise ValueError(f"{flag}: {raw[:40]!r} is not a choice of SGLang {SGLANG} ({', '.join(sorted(choices))})")
        return raw
    if key in _JSON_FLAGS:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{flag}: not JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"{flag}: expected a JSON object of phases")
        if any(isinstance(phase, dict) and phase.get("backend") == "tc_piecewise" for phase in parsed.values()):
            raise ValueError(f"{flag}: {RETIRED_GRAPH_BACKEND}")
        return parsed
    return raw


def _int(flag: str, raw: str, least: int) -> int:
    text = raw.strip().replace("_", "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{flag}: expected an integer, got {raw[:40]!r}") from None
    if value < least or (flag == SERVER_ARG["scheduler.chunked_prefill_size"].flag and value == 0) or value > 2**62:
        raise ValueError(f"{flag}: {value} is out of range (least {least})")
    return value


def server_words(text: str) -> list[str]:
    """The words of a launch command as a shell splits them (line continuations and comments
    allowed). Raises `ValueError` when the text does not split (an open quote)."""
    try:
        return shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ValueError(f"cannot split the launch command: {exc}") from None


