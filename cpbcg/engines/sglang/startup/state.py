"""What the start-up steps read and write: one launch being resolved (`Resolution`), as 0.5.23's
`ServerArgs` is while `run_resolution_pipeline` runs, with each value's source and rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cpbcg.planner.hardware import GPU, ModelSpec, uses_mla
from cpbcg.engines.sglang.server import Given, Refusal, Value
from cpbcg.engines.sglang.release import SGLANG_VERSION

DEFAULT = f"{SGLANG_VERSION} default"
"""The source of a value 0.5.23 takes when none is given."""


def platform(gpu: GPU) -> dict[str, bool]:
    """0.5.23's platform flags for `gpu` (`utils/common.py`: `is_sm90_supported` = capability
    major 9, `is_sm100_supported` 10, `is_sm120_supported` 12, `is_blackwell_supported` 10..12;
    CUDA >= 12.8 assumed)."""
    major = gpu.compute_capability[0] if gpu.vendor == "nvidia" else -1
    return {"sm90": major == 9, "sm100": major == 10, "sm120": major == 12, "blackwell": major in (10, 11, 12),
            "hip": gpu.vendor == "amd", "cuda": gpu.vendor == "nvidia"}


@dataclass
class Resolution:
    """One launch while the steps resolve it: the given arguments (0.5.23 field names), the model
    and GPU, and the values decided so far (tokens; `Value`s carry source and rule)."""

    given: Mapping[str, Given]
    model: ModelSpec
    gpu: GPU
    refusals: list[Refusal] = field(default_factory=list)
    """Start-up checks that failed, in 0.5.23's order (the first is what it prints)."""
    notes: list[str] = field(default_factory=list)
    """Values 0.5.23 changed from what was given."""
    # the prefill CUDA graph (cuda_graph steps, memory)
    graph_backend: Value = field(default_factory=lambda: Value(None, DEFAULT))
    locked_backend: bool = False
    """The prefill graph backend was given (0.5.23 `_cuda_graph_config_locked`): automatic choices leave it."""
    max_bs_given: int | None = None
    max_bs_source: str = DEFAULT
    bs_given: tuple[int, ...] | None = None
    bs_source: str = DEFAULT
    max_bs: Value = field(default_factory=lambda: Value(None, DEFAULT))
    bs: Value = field(default_factory=lambda: Value((), DEFAULT))
    graph_off: str = ""
    """Why the prefill graph is off, in short."""
    no_cp_graph: list[str] = field(default_factory=list)
    """Why `supports_prefill_cp_bcg` is false."""
    # memory
    chunk: Value = field(default_factory=lambda: Value(None, DEFAULT))
    # attention
    backend: Value = field(default_factory=lambda: Value(None, DEFAULT))
    prefill_backend: str | None = None
    """`--prefill-attention-backend` as resolved (None: the base backend)."""
    decode_backend: str | None = None
    page: Value = field(default_factory=lambda: Value(None, DEFAULT))

    def __post_init__(self) -> None:
        self.declared: dict[str, Any] = {}
        """Values a step declared for arguments no other field holds (0.5.23 `declare_resolution`)."""
        self.p = platform(self.gpu)
        self.mla = uses_mla(self.model)
        names = self.model.architectures or (self.model.architecture,)
        self.archs = set(names)
        self.arch0 = names[0]
        self.tp: int = self.raw("tp_size", 1)
        self.cp: int = self.raw("attn_cp_size", 1)
        self.pp: int = self.raw("pp_size", 1)
        self.dp: int = self.raw("dp_size", 1)
        self.ep: int = self.raw("ep_size", 1)
        self.attn_dp: int = self.raw("attn_dp_size", 1)
        self.enable_cp = bool(self.raw("enable_prefill_cp", False))
        self.strategy: str | None = self.raw("cp_strategy")
        self.backend = Value(self.raw("attention_backend"), self.source("attention_backend"))
        self.prefill_backend = self.raw("prefill_attention_backend")
        self.decode_backend = self.raw("decode_attention_backend")
        self.page = Value(self.raw("page_size"), self.source("page_size"))

    def raw(self, name: str, default: Any = None) -> Any:
        """The value of `name` (a 0.5.23 field name) a step declared (`declared`), else the given one, else `default`."""
        if name in self.declared:
            return self.declared[name]
        g = self.given.get(name)
        return default if g is None else g.value

    def source(self, name: str) -> str:
        """Where the given value of `name` came from (`0.5.23 default` when not given)."""
        g = self.given.get(name)
        return g.source if g is not None else DEFAULT

    @property
    def prefill_run(self) -> str:
        """The prefill attention backend the runner uses (`attention_backends_of`)."""
        return self.prefill_backend or self.backend.value

    @property
    def decode_run(self) -> str:
        return self.decode_backend or self.backend.value

    def refuse(self, check: str, message: str) -> None:
        self.refusals.append(Refusal(check, message))
