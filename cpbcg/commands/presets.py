"""`cpbcg presets`: its use case (`presets`), returning one typed `PresetRow` per shipped
deployment preset, which `cpbcg.outputs.presets` renders (a table, or JSON)."""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.planner.document import document
from cpbcg.config import load_config, preset_names


@dataclass(frozen=True)
class PresetRow:
    """One shipped deployment preset (`cpbcg/configs/NAME.yaml`)."""

    name: str
    cp_size: int
    cp_strategy: str
    chunked_prefill_size: int
    """The scheduler's chunk (tokens)."""
    buckets: str
    """The bucket spec as the preset writes it (a name, a list, a file)."""
    gpu: str
    """The GPU its server resolution runs on ("?" without one)."""
    cp_graphs: bool
    """SGLang 0.5.23 starts it with CP prefill graphs."""
    why_not: tuple[str, ...]
    """Why it does not (the resolution's findings); empty when it does."""

    @property
    def graphs_text(self) -> str:
        """`yes`, or `no: ` and why not."""
        return "yes" if self.cp_graphs else "no: " + "; ".join(self.why_not)

    def to_dict(self) -> dict[str, object]:
        """The JSON object of `cpbcg presets --format json` (every field, `why_not` a list)."""
        return document(self)


def presets() -> list[PresetRow]:
    """The shipped deployment presets, by name. Raises `ConfigError` for a broken preset."""
    rows = []
    for name in preset_names():
        cfg = load_config(name)
        server = cfg.server_resolution
        cp_graphs = server is None or server.cp_graphs
        why_not = () if cp_graphs or server is None else tuple(why for _, why in server.findings())
        rows.append(PresetRow(name, cfg.cp_size, cfg.cp_strategy.value, cfg.scheduler.chunked_prefill_size, str(cfg.buckets),
                              server.gpu.name if server else "?", cp_graphs, why_not))
    return rows
