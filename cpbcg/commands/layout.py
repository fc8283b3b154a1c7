"""`cpbcg layout`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from cpbcg.api import explain, load_config_and_deployment
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.explain import BatchExplanation


@dataclass(frozen=True)
class Layout:
    """`cpbcg layout`: one batch explained under a deployment."""

    deployment: Deployment
    explanation: BatchExplanation


def layout(extend_seq_lens: list[int], config: str | None = None, overrides: Mapping[str, object] | None = None) -> Layout:
    """`explain` under the deployment of `config` and dotted `overrides` (`cpbcg layout`).
    Raises `ConfigError`, `ModelError`."""
    _, deployment = load_config_and_deployment(config, overrides)
    return Layout(deployment, explain(extend_seq_lens, deployment))


