"""What the trace option groups build: the reader's options (`ReadOptions`) and the `--time-scale`
load factors, parsed by the planner's one rule (`cpbcg.planner.traffic.parse_load_factors`)."""

from __future__ import annotations

from cpbcg.planner.traces import ReadOptions
from cpbcg.planner.traffic import parse_load_factors

__all__ = ["ReadOptions", "parse_load_factors"]
