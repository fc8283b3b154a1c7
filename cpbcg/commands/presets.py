"""`cpbcg presets`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations


from cpbcg.config import load_config, preset_names


def preset_table() -> list[tuple[str, int, str, int, str, str, str]]:
    """The shipped deployment presets: name, cp_size, strategy, chunked_prefill_size, buckets,
    GPU, and whether SGLang 0.5.23 starts it with CP prefill graphs (`yes`, or why not)."""
    rows = []
    for name in preset_names():
        cfg = load_config(name)
        server = cfg.server_resolution
        gpu = server.gpu.name if server else "?"
        graphs = "yes" if server is None or server.cp_graphs else "no: " + "; ".join(why for _, why in server.findings())
        rows.append((name, cfg.cp_size, cfg.cp_strategy.value, cfg.scheduler.chunked_prefill_size, str(cfg.buckets), gpu, graphs))
    return rows


