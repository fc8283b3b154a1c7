"""Hand a bucket list over as SGLang's server flags (`cpbcg plan --emit sglang|sglang-json`).

* `sglang`: the server flags (docs/model.md "SGLang's default list"): `--cuda-graph-bs-prefill B1 B2 ...
  --cuda-graph-max-bs-prefill MAX`, plus `--enable-prefill-cp --attn-cp-size N --tp-size N
  --cp-strategy S --prefill-attention-backend A` with CP (`mode_flags`: what SGLang 0.5.23 needs
  to start and to capture CP graphs, `cpbcg.engines.sglang.startup.check_server_flags`), and the scheduler
  flags the plan assumed.
* `sglang-json`: the same flags with the list as `--cuda-graph-config '{"prefill":{"bs":[...],"max_bs":MAX}}'`:
  the JSON single-quoted, as a shell reads a word (`shlex.quote`). A JSON list holds `[`, a glob
  bracket, so no unquoted form survives `$(cat flags.txt)` (pathname expansion: `bash -O
  failglob` refuses it, a file named like a bucket replaces it); pass this file with something
  that splits it as a shell would and does no globbing: `xargs ... < flags.txt` (README). The
  numbers-only `sglang` form holds no glob character and survives `$(cat flags.txt)`.

The bucket files (`--emit yaml` / `json`) are written at the input edge with the files that read
them back (`cpbcg.outputs.exports.export_buckets`): the planner imports no YAML.
"""

from __future__ import annotations

import shlex

import orjson

from cpbcg.planner.model.bucket_spec import flag_words
from cpbcg.planner.model.layout import CPLayout
from cpbcg.engines.sglang.args import BY_KEY as ARG
from cpbcg.engines.sglang.args import SERVER_ARGS
from cpbcg.engines.sglang.release import CP_GRAPH_BACKENDS, RELEASE
from cpbcg.engines.sglang.server import resolved_server
from cpbcg.planner.deployment import Deployment, EngineRules
from cpbcg.engines.sglang.capture_lists import LISTS


def deploy_flags(buckets: list[int], deployment: Deployment, chunk_tokens: int | None = None, *, decode_bs: list[int] | None = None) -> str:
    """SGLang server flags capturing exactly `buckets` under the deployment's CP and scheduler
    settings (docs/model.md "SGLang's default list"): `--cuda-graph-bs-prefill B1 B2 ... --cuda-graph-max-bs-prefill MAX`,
    the CP flags, and the scheduler flags that shaped the planned forwards. SGLang takes an
    explicit list as given, so a bucket above `--chunked-prefill-size` deploys. `chunk_tokens`
    (the chunk the plan assumed, when it differs from the scheduler's) replaces
    `--chunked-prefill-size`. `decode_bs` (requests): the decode list too, `--cuda-graph-bs-decode
    B1 ... --cuda-graph-max-bs-decode MAX`."""
    buckets = sorted(int(b) for b in buckets)
    parts = ["--cuda-graph-bs-prefill", *map(str, buckets), "--cuda-graph-max-bs-prefill", str(buckets[-1])]
    if decode_bs:
        decode = sorted(int(b) for b in decode_bs)
        parts += ["--cuda-graph-bs-decode", *map(str, decode), "--cuda-graph-max-bs-decode", str(decode[-1])]
    return " ".join(parts + cp_flags(deployment.cp, _architecture(deployment)) + scheduler_flags(deployment, chunk_tokens))


def config_flags(buckets: list[int], deployment: Deployment, decode_bs: list[int] | None = None) -> str:
    """The `--emit sglang-json` line: `deploy_flags` with the list as `--cuda-graph-config
    '{"prefill":{"bs":[...],"max_bs":MAX}}'` (compact JSON, single-quoted: module doc), with a
    `decode` phase `{"bs": [...], "max_bs": MAX}` when `decode_bs` is given."""
    buckets = sorted(int(b) for b in buckets)
    phases: dict[str, object] = {"prefill": {"bs": buckets, "max_bs": buckets[-1]}}
    if decode_bs:
        decode = sorted(int(b) for b in decode_bs)
        phases["decode"] = {"bs": decode, "max_bs": decode[-1]}
    graph = orjson.dumps(phases).decode()
    return " ".join(["--cuda-graph-config", shlex.quote(graph)] + cp_flags(deployment.cp, _architecture(deployment)) + scheduler_flags(deployment))


BOTH_BACKENDS_CHECKED = ("GptOssForCausalLM",)
"""Architectures whose prefill AND decode attention backends 0.5.23 checks against an allow-list
(`model_hook.py::handle_model_specific_adjustments`) while its default backend is chosen only when no
backend is given (`_gpt_oss_overrides`): `--prefill-attention-backend` alone leaves decode unset and
the server refuses to start, so the CP flags name the decode backend too."""


def mode_flags(cp: CPLayout) -> list[str]:
    """The SGLang 0.5.23 server flags that run `cp`'s mode with CP graphs: `--enable-prefill-cp
    --attn-cp-size N --tp-size N --cp-strategy S --prefill-attention-backend A` (0.5.23 refuses
    to start unless TP is a multiple of the CP size, and captures CP graphs only with
    `attn_cp_size == tp_size` and the strategy's backend, `CP_GRAPH_BACKENDS`); none without CP."""
    if cp.cp_size == 1:
        return []
    size = str(cp.cp_size)
    return ["--enable-prefill-cp", ARG["cp_size"].flag, size, ARG["tp_size"].flag, size, ARG["cp_strategy"].flag, cp.strategy.value,
            "--prefill-attention-backend", CP_GRAPH_BACKENDS[cp.strategy.value]]


def cp_flags(cp: CPLayout, architecture: str | None = None) -> list[str]:
    """The CP server flags of `cp`'s mode (`mode_flags`: none without CP), with
    `--decode-attention-backend` the same as the prefill one for `BOTH_BACKENDS_CHECKED` models."""
    flags = mode_flags(cp)
    if architecture in BOTH_BACKENDS_CHECKED and "--prefill-attention-backend" in flags:
        flags = [*flags, "--decode-attention-backend", flags[flags.index("--prefill-attention-backend") + 1]]
    return flags


def _architecture(deployment: Deployment) -> str | None:
    server = resolved_server(deployment)
    return None if server is None else server.model.architecture


def scheduler_flags(deployment: Deployment, chunk_tokens: int | None = None) -> list[str]:
    """The written scheduler server arguments (`args.SERVER_ARGS`, in its order):
    `--chunked-prefill-size`, `--max-prefill-tokens`, `--page-size` (the resolved one: the server
    must run the page size the plan cut chunks at) and, when set, `--prefill-max-requests`,
    `--max-running-requests` and `--enable-mixed-chunk` (with decode only: without decode no
    decode tokens ride in a prefill): the settings the scheduler simulation formed forwards with."""
    sched = deployment.scheduler
    out: list[str] = []
    for arg in SERVER_ARGS:
        if not arg.written or not arg.key.startswith("scheduler."):
            continue
        name = arg.key.partition(".")[2]
        value = chunk_tokens if name == "chunked_prefill_size" and chunk_tokens is not None else getattr(sched, name)
        if arg.switch:
            out += [arg.flag] if value and sched.decode else []
        elif value is not None:
            out += [arg.flag, str(value)]
    return out


FLAG_KEYS = {arg.flag: arg.key for arg in SERVER_ARGS if arg.written and not arg.switch}
"""SGLang flags of an export that state a deployment setting, and the config key each sets."""
SERVER_SCHEDULER_KEYS = frozenset(arg.key for arg in SERVER_ARGS if arg.key.startswith("scheduler."))
"""Scheduler settings that are SGLang server flags (`scheduler_flags` emits them; `--max-total-tokens`
caps the default prefill graph list in 0.5.23's start-up resolution, `cpbcg.engines.sglang.startup`): they
shape the plan of any trace (the default list follows the chunk, the headroom, the flags), not only
the simulation of a request trace."""


def sglang_flag_settings(text: str) -> dict[str, str]:
    """`{config key: value as written}` for the `FLAG_KEYS` flags in a flags line (last wins).
    Raises `ConfigError` for a line no shell can split."""
    words = flag_words(text)
    return {FLAG_KEYS[w]: words[i + 1] for i, w in enumerate(words[:-1]) if w in FLAG_KEYS}


RULES = EngineRules(RELEASE, deploy_flags, LISTS)
"""SGLang 0.5.23's part in a recommendation (`cpbcg.planner.optimise.recommend.recommend`): the
release its notes name, the deploy flags and the capture lists (`capture_lists.LISTS`)."""
