"""The server SGLang 0.5.23 starts: a launch's resolved settings (`ResolvedServer`: page size,
chunk, prefill token budget, attention backends, the prefill CUDA-graph backend and list,
start-up refusals, CP graphs), each value with its source and rule, and the verdict on it
(`ServerCheck`). The start-up resolution that produces them is `cpbcg.engines.sglang.startup`
(`resolve_server`); the core reads a `ResolvedServer` through `cpbcg.planner.deployment.ResolvedLaunch`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from cpbcg.planner.deployment import Deployment
from cpbcg.planner.document import document
from cpbcg.planner.hardware import ASSUMED_GPU, ASSUMED_MODEL, GPU, ModelSpec
from cpbcg.engines.sglang.release import INTERLEAVE_CP_GRAPH_ARCHITECTURE, SGLANG_VERSION

__all__ = ["ASSUMED_GPU", "ASSUMED_MODEL", "Given", "Refusal", "ResolvedServer", "ServerCheck", "Value", "deployment_header", "resolved_server"]

SGLANG = SGLANG_VERSION


@dataclass(frozen=True)
class Given:
    """A server argument as the user (or a log) gave it, and where it came from."""

    value: Any
    source: str
    """`launch command`, `option`, `config`, `log`, ... (said in reports)."""


@dataclass(frozen=True)
class Value:
    """A resolved setting: its value, where it came from and the rule that decided it."""

    value: Any
    source: str
    """`option`, `config`, `launch command`, `model`, `GPU default`, `log`, `0.5.23 default`, `0.5.23 override`, `assumed`."""
    rule: str = ""
    """Why (the 0.5.23 function), empty when taken as given."""

    def describe(self) -> str:
        """`64: trtllm_mha (0.5.23 overrides)`-style text."""
        shown = "none" if self.value is None else ",".join(map(str, self.value)) if isinstance(self.value, tuple) else str(self.value)
        return f"{shown}: {self.rule or self.source}"

    def to_dict(self) -> dict[str, Any]:
        """`{"value", "source", "rule"}` (a tuple value as a list)."""
        return document(self)


@dataclass(frozen=True)
class Refusal:
    """A start-up check that fails: 0.5.23 exits with `message`."""

    check: str
    """The 0.5.23 function that raises (`handle_context_parallelism`)."""
    message: str


@dataclass(frozen=True)
class ResolvedServer:
    """What SGLang 0.5.23 runs for the inputs `resolve_server` took (values in tokens)."""

    gpu: GPU
    gpu_source: str
    model: ModelSpec
    model_source: str
    use_mla: bool
    attention_backend: Value
    prefill_attention_backend: Value
    """As the runner uses it: `--prefill-attention-backend`, else `attention_backend`."""
    decode_attention_backend: Value
    page_size: Value
    chunked_prefill_size: Value
    """-1: chunking off."""
    max_prefill_tokens: Value
    max_running_requests: Value
    """None: decided at start from the KV pool (not decidable here)."""
    max_total_tokens: Value
    """None: the KV pool the server sizes from free memory (not decidable here)."""
    enable_mixed_chunk: Value
    tp_size: int
    attn_cp_size: int
    pp_size: int
    dp_size: int
    ep_size: int
    enable_prefill_cp: bool
    cp_strategy: str | None
    prefill_graph_backend: Value
    """`breakable`, `full` or `disabled` (0.5.23 `cuda_graph_config.prefill.backend`)."""
    prefill_graph_max_bs: Value
    prefill_graph_bs: Value
    """The prefill graph list as configured (tokens, ascending as given); the CP runner rounds it
    (`cpbcg.planner.model.capacity.capture_buckets`)."""
    refusals: tuple[Refusal, ...]
    """Start-up checks that fail, in the order 0.5.23 runs them (the first is what it prints)."""
    no_cp_graph: tuple[str, ...]
    """Why `supports_prefill_cp_bcg` is false (empty when CP graphs are captured)."""
    not_modelled: tuple[str, ...] = ()
    """Given server arguments the resolution does not read."""
    given: Mapping[str, Given] = field(default_factory=dict)
    """The server arguments resolved, as given (0.5.23 field names)."""
    notes: tuple[str, ...] = ()
    """Values 0.5.23 changed from what was given (`page_size 1 -> 64: ...`)."""
    overrides: tuple[str, ...] = ()
    """Launch-command values a cpbcg option replaced (`--page-size 16 overrides the launch command's --page-size 32`)."""
    input_notes: tuple[str, ...] = ()
    """What the launch command leaves unsaid and the plan assumed (no `--model-path`, no `--attn-cp-size`: cp 1)."""
    model_assumed: bool = False
    """No model was given: `model` is `hardware.ASSUMED_MODEL` (the cost models say so)."""
    gpu_assumed: bool = False
    """No GPU was given: `gpu` is `hardware.ASSUMED_GPU` (the cost models say so)."""
    graph_off: str = ""
    """Why 0.5.23 captures no prefill graph, in short (`CP without CP graphs on H200`); empty when it captures one."""
    attn_dp_size: int = 1
    """Attention DP size as resolved (`--attn-dp-size`, or `--dp-size` under `--enable-dp-attention`:
    0.5.23 `handle_data_parallelism`): attention runs per DP rank, the MLP and MoE on every DP rank's rows."""
    launch_origin: str = ""
    """Where the launch command was given, as an error names it (`c.yaml:2: server.args`, `--server-args`); empty when none was."""

    @property
    def starts(self) -> bool:
        return not self.refusals

    def decided(self) -> dict[str, Any]:
        """`{0.5.23 ServerArgs field: value}` this resolution decides for the config (`cpbcg.config`
        pairs each field with its config key through `args.SERVER_ARGS`): the page size, chunk and
        prefill token budget always; `max_running_requests` and `max_total_tokens` when set;
        `prefill_max_requests` when given; `enable_mixed_chunk` unless 0.5.23's default; the CP size
        and strategy when a launch command, flags file or log states a server argument."""
        out: dict[str, Any] = {"page_size": self.page_size.value, "chunked_prefill_size": self.chunked_prefill_size.value,
                               "max_prefill_tokens": self.max_prefill_tokens.value}
        for name, value in (("max_running_requests", self.max_running_requests.value), ("max_total_tokens", self.max_total_tokens.value)):
            if value is not None:
                out[name] = value
        if "prefill_max_requests" in self.given:
            out["prefill_max_requests"] = self.given["prefill_max_requests"].value
        if self.enable_mixed_chunk.source != f"{SGLANG_VERSION} default":
            out["enable_mixed_chunk"] = self.enable_mixed_chunk.value
        if any(g.source == "launch command" or g.source.startswith(("flags file", "log")) for g in self.given.values()):
            out["attn_cp_size"] = self.attn_cp_size
            if self.cp_strategy is not None:
                out["cp_strategy"] = self.cp_strategy
        return out

    @property
    def supports_prefill_cp_bcg(self) -> bool:
        """0.5.23's `supports_prefill_cp_bcg` on the resolved arguments."""
        return not self.no_cp_graph

    @property
    def cp_graphs(self) -> bool:
        """Starts and captures CP prefill graphs."""
        return self.starts and self.supports_prefill_cp_bcg and self.prefill_graph_backend.value == "breakable"

    def no_prefill_graph(self) -> str | None:
        """The answer when 0.5.23 starts this launch but captures no prefill CUDA graph (`0.5.23 captures no
        prefill graph for this launch: CP without CP graphs on H200`); None when it captures one or refuses to
        start (the refusal is the answer then)."""
        if not self.starts or self.prefill_graph_backend.value != "disabled":
            return None
        return f"{SGLANG} captures no prefill graph for this launch: {self.graph_off or self.prefill_graph_backend.describe()}"

    @property
    def verdict_hinges_on_the_assumed_model(self) -> bool:
        """No model was given and the missing CP graph is the model's (interleave CP graphs exist for GLM-5 Next
        only): the planner plans the graphs the launch would have with such a model, and says so."""
        return self.model_assumed and any(INTERLEAVE_CP_GRAPH_ARCHITECTURE in why for why in self.no_cp_graph)

    @property
    def cp_without_cp_graphs(self) -> bool:
        """The prefill graph is off because the launch runs CP without CP graphs (`disable_breakable_cudagraph_if_incompatible`):
        the same traffic at cp 1 keeps breakable graphs."""
        return self.no_prefill_graph() is not None and self.graph_off.startswith("CP without CP graphs")

    def what_would_help(self) -> list[str]:
        """What gives this launch's traffic a prefill graph when `no_prefill_graph` (empty otherwise)."""
        if self.no_prefill_graph() is None:
            return []
        if not self.cp_without_cp_graphs:
            return [f"a launch without what turns it off ({self.prefill_graph_backend.describe()})"]
        out = ["--attn-cp-size 1 (no attention CP: 0.5.23 keeps breakable prefill graphs)"]  # short: an error line holds them all
        if self.gpu.is_sm100 and self.no_cp_graph:
            out.append(f"CP graphs on this {self.gpu.name}: {self.no_cp_graph[0]}")
        elif not self.use_mla:
            out.append("an SM100 GPU (B200, GB200, B300, GB300) with --cp-strategy zigzag --prefill-attention-backend trtllm_mha, "
                       "--attn-cp-size = --tp-size (0.5.23's zigzag CP graphs)")
        if INTERLEAVE_CP_GRAPH_ARCHITECTURE in (self.model.architectures or (self.model.architecture,)):
            out.append("--cp-strategy interleave --attention-backend dsa with --dp-size 1 --ep-size 1: 0.5.23's interleave CP graphs")
        return out

    def findings(self) -> list[tuple[str, str]]:
        """`(what 0.5.23 would do, why)`: refusals first, then why no CP graph is captured."""
        out = [("refuse to start", r.message) for r in self.refusals]
        out += [("capture no CP graph", m) for m in self.no_cp_graph if self.attn_cp_size > 1]  # without CP, no CP graph to miss
        if self.no_prefill_graph() is not None:
            out.append(("capture no prefill graph", self.graph_off))
        if self.starts and self.supports_prefill_cp_bcg and self.prefill_graph_backend.value != "breakable":
            out.append(("capture no CP graph", f"the prefill CUDA graph backend is {self.prefill_graph_backend.describe()}"))
        return out

    def summary(self) -> dict[str, Any]:
        """JSON form: every resolved value with source and rule, the verdict and what was not modelled."""
        values = {name: getattr(self, name).to_dict() for name in (
            "attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size", "chunked_prefill_size",
            "max_prefill_tokens", "max_running_requests", "max_total_tokens", "prefill_graph_backend", "prefill_graph_max_bs",
            "prefill_graph_bs")}
        return {
            "sglang_version": SGLANG, "gpu": self.gpu.name, "gpu_source": self.gpu_source, "architecture": self.model.architecture,
            "model_source": self.model_source, "use_mla": self.use_mla, **values,
            "tp_size": self.tp_size, "attn_cp_size": self.attn_cp_size, "pp_size": self.pp_size, "cp_strategy": self.cp_strategy,
            "enable_prefill_cp": self.enable_prefill_cp, "starts": self.starts,
            "refusals": [{"check": r.check, "message": r.message} for r in self.refusals],
            "supports_prefill_cp_bcg": self.supports_prefill_cp_bcg, "cp_graphs": self.cp_graphs,
            "no_cp_graph": list(self.no_cp_graph), "no_prefill_graph": self.no_prefill_graph(),
            "what_would_help": self.what_would_help(), "not_modelled": list(self.not_modelled), "notes": list(self.notes),
            "input_notes": list(self.input_notes), "said": self.header_lines(),
        }

    def header_lines(self) -> list[str]:
        """One line per resolved value a plan depends on (`page_size 64: trtllm_mha (0.5.23 overrides)`)."""
        return [
            f"server: SGLang {SGLANG} on {self.gpu.name} ({self.gpu_source}), {self.model.architecture} ({self.model_source})"
            f"{', MLA' if self.use_mla else ''}",
            f"attention {self.prefill_attention_backend.describe()}",
            f"page_size {self.page_size.describe()}",
            f"chunked_prefill_size {self.chunked_prefill_size.describe()}",
            f"max_prefill_tokens {self.max_prefill_tokens.describe()}",
            f"prefill graphs {self.prefill_graph_backend.value}, max_bs {self.prefill_graph_max_bs.describe()}",
            "starts with CP prefill graphs" if self.cp_graphs else
            "; ".join(f"would {what}: {why}" for what, why in self.findings()) or f"starts without CP (--attn-cp-size {self.attn_cp_size})",
        ]


# --- the verdict, as the commands render it --------------------------------------------------

@dataclass(frozen=True)
class ServerCheck:
    """What 0.5.23 does with a set of server flags (empty lists: starts, CP graphs on): the
    verdict of the start-up resolution (`cpbcg.engines.sglang.server.ResolvedServer.findings`)."""

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

    @classmethod
    def of(cls, server: ResolvedServer) -> "ServerCheck":
        """The verdict of a resolved server."""
        found = server.findings()
        return cls([m for w, m in found if w == "refuse to start"], [m for w, m in found if w != "refuse to start"])


def resolved_server(deployment: Deployment) -> ResolvedServer | None:
    """The deployment's server as 0.5.23 resolves it (`cpbcg.config` gives every deployment it
    builds the `ResolvedServer` of `startup.resolve_server`; the core types it as `ResolvedLaunch`);
    None for a deployment built by hand."""
    return cast("ResolvedServer | None", deployment.server)


def deployment_header(deployment: Deployment, source: str) -> dict[str, Any]:
    """Settings that qualify every report (the JSON header's first keys): the CP layout, the
    padding factor, the capture layout, the release and the resolved server."""
    server = resolved_server(deployment)
    return {
        "source": source,
        "cp_size": deployment.cp.cp_size,
        "cp_strategy": deployment.cp.strategy.value,
        "align_size": deployment.cp.align_rows,
        "max_padding_factor": deployment.max_padding_factor,
        "capture_layout": deployment.capture.layout.value,
        "sglang_version": SGLANG_VERSION,
        **({"server": server.summary()} if server is not None else {}),
    }
