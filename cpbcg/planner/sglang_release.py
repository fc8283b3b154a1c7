"""The SGLang release cpbcg models, and whether a deployment's flags start it with CP graphs.

`SGLANG_VERSION` is the one place the release is named (help, report headers, JSON
`sglang_version`, docs). `check_server_flags` restates 0.5.23's start-up checks for prefill
CP (`arg_groups/parallel_hook.py`, `attention_hook.py`) and `supports_prefill_cp_bcg`
(`layers/cp/bcg/__init__.py`) as a pure function over the flag values; the commands render
its `ServerCheck`. `tests/test_sglang_deploy_conformance.py` evaluates 0.5.23's own code on
the flags `--emit sglang` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cpbcg.planner.deployment import Deployment

SGLANG_VERSION = "0.5.23"
"""The SGLang release whose scheduler, replay selection and flags cpbcg models (PyPI 2026-10-30)."""

CP_GRAPH_BACKENDS = {"zigzag": "trtllm_mha", "interleave": "dsa"}
"""0.5.23 `PREFILL_CP_BCG_SUPPORTED_COMBINATIONS`: the prefill attention backend each CP
strategy needs for breakable CUDA graphs."""
INTERLEAVE_CP_GRAPH_ARCHITECTURE = "Glm5NextForConditionalGeneration"
"""0.5.23 `InterleaveCPBCGInput.supports`: the only model architecture with interleave CP graphs."""
HARDWARE_NOTE = {
    "zigzag": "trtllm_mha prefill with CP needs Blackwell (SM100): on Hopper (H100/H200) 0.5.23 refuses "
              "--prefill-attention-backend trtllm_mha with --attn-cp-size > 1, and without it picks another "
              "backend and captures no CP graph",
    "interleave": "dsa prefill CP graphs exist only for GLM-5 Next (Glm5NextForConditionalGeneration) "
                  "with --dp-size 1 and --ep-size 1",
}
"""The hardware or model each strategy's CP graphs need, stated beside emitted flags."""


@dataclass(frozen=True)
class ServerCheck:
    """What 0.5.23 does with a set of server flags (empty lists: starts, CP graphs on)."""

    refuses_start: list[str]
    """Start-up checks that fail: the server exits with these messages."""
    no_cp_graph: list[str]
    """Why `supports_prefill_cp_bcg` is false: the server starts but captures no CP graph."""

    @property
    def ok(self) -> bool:
        return not self.refuses_start and not self.no_cp_graph

    def findings(self) -> list[tuple[str, str]]:
        """`(what 0.5.23 would do, why)` per failed check, start-up refusals first:
        `("refuse to start", msg)`, `("capture no CP graph", msg)`."""
        return [("refuse to start", m) for m in self.refuses_start] + [("capture no CP graph", m) for m in self.no_cp_graph]


def check_server_flags(
    *,
    attn_cp_size: int,
    cp_strategy: str | None,
    enable_prefill_cp: bool,
    tp_size: int = 1,
    pp_size: int = 1,
    dp_size: int = 1,
    ep_size: int = 1,
    prefill_attention_backend: str | None = None,
    architecture: str | None = None,
) -> ServerCheck:
    """0.5.23's start-up checks for prefill CP and `supports_prefill_cp_bcg`, on flag values
    as the server takes them (`--attn-cp-size`, `--tp-size`, ...; None = not given).

    Rules and sources: `--cp-strategy` is required with `--enable-prefill-cp`, and `tp_size`
    must be divisible by `attn_cp_size` and by `dp_size x attn_cp_size`
    (`handle_context_parallelism`); CP graphs need `enable_prefill_cp`, `pp_size == 1`,
    `attn_cp_size == tp_size`, (zigzag, trtllm_mha) or (interleave, dsa), and interleave also
    `dp_size == 1`, `ep_size == 1`, `attn_cp_size > 1` and GLM-5 Next (`supports_prefill_cp_bcg`,
    `InterleaveCPBCGInput.supports`). `architecture` None is not checked (unknown model).
    Never raises."""
    refuses: list[str] = []
    if enable_prefill_cp and cp_strategy is None:
        refuses.append("--cp-strategy must be set when --enable-prefill-cp is enabled")
    if attn_cp_size > 1:
        if tp_size % attn_cp_size:
            refuses.append(f"tp_size must be divisible by attn_cp_size (--tp-size {tp_size}, --attn-cp-size {attn_cp_size})")
        elif tp_size % (dp_size * attn_cp_size):
            refuses.append(f"tp_size must be divisible by attn_dp_size * attn_cp_size (--tp-size {tp_size}, --dp-size {dp_size})")
    missing: list[str] = []
    if not enable_prefill_cp:
        missing.append("--enable-prefill-cp is not set")
    if pp_size != 1:
        missing.append(f"--pp-size is {pp_size}, CP graphs need 1")
    if attn_cp_size != tp_size:
        missing.append(f"--attn-cp-size {attn_cp_size} differs from --tp-size {tp_size}")
    wanted = CP_GRAPH_BACKENDS.get(cp_strategy or "")
    if wanted is None:
        missing.append(f"--cp-strategy {cp_strategy} has no CP graphs (zigzag or interleave)")
    elif prefill_attention_backend != wanted:
        missing.append(f"{cp_strategy} CP graphs need --prefill-attention-backend {wanted} (got {prefill_attention_backend or 'none'})")
    if cp_strategy == "interleave":
        if dp_size != 1 or ep_size != 1:
            missing.append(f"interleave CP graphs need --dp-size 1 and --ep-size 1 (got {dp_size}, {ep_size})")
        if attn_cp_size <= 1:
            missing.append("interleave CP graphs need --attn-cp-size > 1")
        if architecture is not None and architecture != INTERLEAVE_CP_GRAPH_ARCHITECTURE:
            missing.append(f"interleave CP graphs need {INTERLEAVE_CP_GRAPH_ARCHITECTURE}, not {architecture}")
    return ServerCheck(refuses, missing)


def check_flag_words(words: list[str]) -> ServerCheck:
    """`check_server_flags` on a server command line's words (SGLang's flag names; the last
    value of a repeated flag wins; flags not given take 0.5.23's defaults)."""
    values: dict[str, str | bool] = {}
    for i, word in enumerate(words):
        if word == "--enable-prefill-cp":
            values[word] = True
        elif word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            values[word] = words[i + 1]

    def number(flag: str, default: int) -> int:
        raw = values.get(flag)
        return int(raw) if isinstance(raw, str) and raw.isdigit() else default

    def text(flag: str) -> str | None:
        raw = values.get(flag)
        return raw if isinstance(raw, str) and raw else None

    return check_server_flags(
        attn_cp_size=number("--attn-cp-size", 1), cp_strategy=text("--cp-strategy"),
        enable_prefill_cp=bool(values.get("--enable-prefill-cp")), tp_size=number("--tp-size", 1),
        pp_size=number("--pp-size", 1), dp_size=number("--dp-size", 1), ep_size=number("--ep-size", 1),
        prefill_attention_backend=text("--prefill-attention-backend"),
    )


def deployment_server_check(deployment: "Deployment", flag_words: list[str] | None = None) -> ServerCheck:
    """0.5.23's verdict on the server flags a deployment runs with: the flags file given as its
    bucket list (`--buckets FLAGS`, a file starting with `--`), else the CP flags
    `plan --emit sglang` writes for it (`--tp-size` = CP size and the strategy's backend, which
    pass). Without CP (`cp_size` 1) there is nothing to check. Raises `CpbcgError` only when the
    flags file cannot be read (the bucket list read it already)."""
    cp = deployment.cp
    if cp.cp_size == 1:
        return ServerCheck([], [])
    words = flag_words  # the flags file's words, read at the input edge (`cpbcg.bucket_files.flags_file_words`)
    return check_flag_words(cp.model.server_flags() if words is None else words)
