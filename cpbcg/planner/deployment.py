"""What a deployment fixes, as plain frozen data the planner reads.

`cpbcg.config` validates YAML and command-line settings with pydantic and converts them into a
`Deployment` (`DeploymentConfig.to_deployment()`); the planner never sees pydantic. A notebook
builds one directly: `Deployment(cp=CPLayout(4), buckets=tuple(range(256, 8193, 256)))`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from cpbcg.planner.hardware import GPU, ModelSpec
from cpbcg.planner.model.bucket_lists import CaptureLists
from cpbcg.planner.model.capacity import CaptureSpec
from cpbcg.planner.costs.cost import DEFAULT_COST, CostModel
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.scheduler import SchedulerSettings
from cpbcg.planner.model.selector import BucketTable


class SourcedValue(Protocol):
    """A resolved setting as the core reads it: the value, where it came from, the rule that decided it."""

    @property
    def value(self) -> Any: ...
    @property
    def source(self) -> str: ...
    @property
    def rule(self) -> str: ...


class ResolvedLaunch(Protocol):
    """What the core reads of the server an engine resolved for a deployment (SGLang 0.5.23's
    `cpbcg.engines.sglang.server.ResolvedServer`): the seam's "resolve a launch" result."""

    @property
    def tp_size(self) -> int: ...
    @property
    def gpu_assumed(self) -> bool: ...
    @property
    def chunked_prefill_size(self) -> SourcedValue: ...
    @property
    def max_prefill_tokens(self) -> SourcedValue: ...
    @property
    def prefill_graph_backend(self) -> SourcedValue: ...


@dataclass(frozen=True)
class Deployment:
    """CP settings, capture layout, padding factor, configured bucket list, scheduler, cost."""

    cp: CPLayout = CPLayout(4)
    """CP size, strategy and row alignment (SGLang `--attn-cp-size`, `--cp-strategy`)."""
    capture: CaptureSpec = CaptureSpec()
    """How each bucket's dummy batch is captured (decides `C(B)`)."""
    max_padding_factor: float = 2.0
    """Largest bucket / tokens ratio the replay selector accepts (SGLang `max_padding_factor`)."""
    buckets: tuple[int, ...] = ()
    """The configured bucket list (tokens, ascending), as the spec resolved."""
    bucket_spec: str = ""
    """The spec the list came from (`sglang-default:8192`, a file, ...), for reports."""
    scheduler: SchedulerSettings = SchedulerSettings()
    """How request traces become forwards (`cpbcg.planner.scheduler`)."""
    cost: CostModel = DEFAULT_COST
    """Modelled prefill time (see `cpbcg.planner.costs.cost`)."""
    max_seq_len_tokens: int | None = None
    """Longest sequence (prefix + extend) a prefill graph replays: SGLang 0.5.23's
    `--cuda-graph-config '{"prefill": {"max_seq_len": N}}'`; longer forwards run eagerly
    (`context_limit`). None: no limit (0.5.23's trtllm_mha and dsa backends set none, and the
    runner ignores `max_context_size` for CP graphs)."""
    model: ModelSpec | None = None
    """The served model (its `config.json`) the server resolution used (`server.model`, given by
    `--model-config`, `server.model_config`): scales the capture and graph-memory estimates and
    the default cost model; None = the assumed model (`hardware.ASSUMED_MODEL`, said wherever used)."""
    gpu: GPU | None = None
    """The GPU the server resolution used (`--gpu`, `server.gpu`): scales the default cost model's
    per-token time; None = the assumed GPU (`hardware.ASSUMED_GPU`, said wherever used)."""
    server: ResolvedLaunch | None = None
    """The server the engine starts for this deployment (SGLang 0.5.23: `cpbcg.engines.sglang.startup.resolve_server`),
    whose page size, chunk and prefill graph list the scheduler and bucket list use; None for
    a deployment built by hand (no resolution said)."""

    @property
    def tp_size(self) -> int:
        """The tensor-parallel size the cost models divide by: the resolved server's `tp_size`
        (1 without CP unless given; with CP 0.5.23 requires `tp_size == attn_cp_size`), else `cp_size`
        for a deployment built by hand."""
        return self.server.tp_size if self.server is not None else self.cp.cp_size

    def table(self) -> BucketTable:
        """The configured buckets with capacities from the capture model (docs/model.md "Local capacity").
        Raises `ModelError` when no bucket is capturable or the capture layout is impossible."""
        return BucketTable.build(list(self.buckets), self.cp, self.capture)

    def largest_forward_source(self) -> str:
        """Where `scheduler.largest_forward_tokens` came from: the resolved server's chunk (or
        `max_prefill_tokens` with chunking off) with its rule or source, the GPU said when assumed
        (`server.gpu_assumed`) and a rule decided it; without a resolved server, the setting."""
        chunked = self.scheduler.chunked_prefill_size > 0
        key = "chunked_prefill_size" if chunked else "max_prefill_tokens (chunking off)"
        if self.server is None:
            return f"scheduler.{key.split()[0]}"
        value = self.server.chunked_prefill_size if chunked else self.server.max_prefill_tokens
        gpu = "; the GPU is assumed (give --gpu)" if self.server.gpu_assumed and value.rule else ""  # a rule decided it from the GPU
        return f"the chunk, {key}: {value.rule or value.source}{gpu}"


@dataclass(frozen=True)
class EngineRules:
    """What the optimiser needs of the engine a plan is for (the seam, docs/architecture.md):
    the release its notes name, the flags that deploy a list and its capture lists. SGLang 0.5.23's is
    `cpbcg.engines.sglang.export.RULES`."""

    release: str
    """The engine and release, as notes say it (`SGLang 0.5.23`)."""
    deploy_flags: Callable[[list[int], Deployment, int | None], str]
    """`(buckets, deployment, chunk_tokens) -> flags`: the server flags capturing exactly `buckets`
    under the deployment's settings, `chunk_tokens` replacing the chunk when not None."""
    lists: CaptureLists
    """The engine's default prefill list per chunk (what a plan is measured against) and its
    named lists (`plan --compare`'s baselines among them)."""
