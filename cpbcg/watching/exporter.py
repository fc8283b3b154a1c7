"""cpbcg's own Prometheus metrics for `cpbcg watch --serve-metrics HOST:PORT` (prometheus_client).

The names are stable (dashboards and alert rules depend on them: `deploy/grafana/`,
`deploy/prometheus/`); docs/watch.md documents each. Labels: `server` (the log as given on the
command line), `dp_rank` (the attention-DP rank; `all` for a server's windows), `reason` (the
selector's eager reason), `window` (`forwards` or `time`), `mode` and `phase` (SGLang's own).
Counters count from the start of the run; the window gauges are the last snapshot's.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from cpbcg.watching.session import WatchSnapshot

PREFIX = "cpbcg_"

COUNTERS = {
    "prefill_forwards": "Distinct prefill forwards read from the server's log.",
    "prefill_verdict_forwards": "Prefill forwards whose log line printed the graph verdict (cuda graph: True|False).",
    "prefill_graph_forwards": "Prefill forwards the server ran in CUDA graphs (cuda graph: True).",
    "prefill_model_graph_forwards": "Prefill forwards cpbcg's model of SGLang 0.5.23's selector replays in graphs (worst case).",
    "prefill_tokens": "Extend tokens of the prefill forwards read.",
    "prefill_graph_tokens": "Extend tokens of the forwards the server ran in graphs.",
    "prefill_padded_tokens": "Padding tokens the model's graph replays add.",
    "prefill_eager_forwards": "Prefill forwards the model runs eagerly, by the selector's reason.",
    "log_rotations": "Times the followed log file was replaced (rotation).",
    "log_truncations": "Times the followed log file was truncated in place.",
    "sglang_scrape_errors": "Failed scrapes of the server's SGLang metrics endpoint.",
    "sglang_prefill_passes": "SGLang's sglang:cuda_graph_passes_total for prefill, as last scraped, by mode.",
    "decode_batch_lines": "The log's Decode batch lines (one per decode_log_interval decode steps) by verdict: graph, eager "
                          "(cuda graph: False: the running batch fell off the decode graphs), none; the eager decode share is "
                          "rate(verdict=eager) / rate(verdict!=none).",
}
"""Counter names (without `cpbcg_` and `_total`) -> help."""
GAUGES = {
    "window_forwards": "Forwards in the rolling window.",
    "window_observed_coverage_ratio": "Fraction of the window's forwards (with a verdict) the server ran in graphs.",
    "window_model_coverage_ratio": "Fraction of the window's forwards the model replays in graphs.",
    "window_padding_ratio": "Padding overhead of the window's modelled replays (padded / real graph tokens).",
    "window_above_largest_bucket_forwards": "Forwards of the window above the largest captured bucket.",
    "window_unexplained_eager_forwards": "Forwards of the window the model replays but the server ran eagerly.",
    "window_size_drift_ratio": "Total variation distance of the window's size distribution from the planned trace's (0..1).",
    "window_recommended_coverage_gain_ratio": "Modelled coverage the list recommended for the forwards window would add.",
    "prefill_graphs_refused": "1 when the server's start-up output says its prefill graphs are off (resolved disabled, no capture line, 0 buckets).",
    "sglang_graph_memory_gb": "SGLang's sglang:graph_memory_usage_gb, as last scraped, by phase.",
    "sglang_startup_graph_seconds": "SGLang's sglang:startup_cuda_graph_time_seconds, as last scraped, by phase.",
}
"""Gauge names (without `cpbcg_`) -> help."""


class _Collector:
    """Builds every family from the last snapshot at scrape time (no per-forward bookkeeping)."""

    def __init__(self) -> None:
        self.snapshot: WatchSnapshot | None = None
        self.lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.lock:
            snap = self.snapshot
        labels = {
            "prefill_eager_forwards": ["server", "dp_rank", "reason"], "log_rotations": ["server"], "log_truncations": ["server"],
            "sglang_scrape_errors": ["server"], "prefill_graphs_refused": ["server"], "window_size_drift_ratio": ["server", "window"],
            "window_recommended_coverage_gain_ratio": ["server"], "sglang_prefill_passes": ["server", "dp_rank", "mode"],
            "sglang_graph_memory_gb": ["server", "phase"], "sglang_startup_graph_seconds": ["server", "phase"],
            "decode_batch_lines": ["server", "verdict"],
        }
        fam: dict[str, Any] = {}
        for name, text in COUNTERS.items():
            fam[name] = CounterMetricFamily(PREFIX + name, text, labels=labels.get(name, ["server", "dp_rank"]))
        for name, text in GAUGES.items():
            fam[name] = GaugeMetricFamily(PREFIX + name, text, labels=labels.get(name, ["server", "dp_rank", "window"]))
        for server in snap.servers if snap is not None else ():
            s = server.name
            for r in server.ranks:
                dp = str(r.dp_rank)
                for name, value in (("prefill_forwards", r.forwards), ("prefill_verdict_forwards", r.verdict_forwards),
                                    ("prefill_graph_forwards", r.graph_forwards), ("prefill_model_graph_forwards", r.model_graph_forwards),
                                    ("prefill_tokens", r.tokens), ("prefill_graph_tokens", r.graph_tokens),
                                    ("prefill_padded_tokens", r.padded_tokens)):
                    fam[name].add_metric([s, dp], value)
                for reason, count in r.eager.items():
                    fam["prefill_eager_forwards"].add_metric([s, dp, reason], count)
            fam["log_rotations"].add_metric([s], server.rotations)
            fam["log_truncations"].add_metric([s], server.truncations)
            fam["sglang_scrape_errors"].add_metric([s], server.metrics_errors)
            fam["prefill_graphs_refused"].add_metric([s], 1.0 if server.refusal else 0.0)
            for verdict, lines in zip(("graph", "eager", "none"), server.decode_lines):
                fam["decode_batch_lines"].add_metric([s, verdict], lines)
            for kind, per in server.windows.items():
                for key, w in per.items():
                    fam["window_forwards"].add_metric([s, key, kind], w.forwards)
                    if not w.forwards:
                        continue
                    if w.observed is not None:
                        fam["window_observed_coverage_ratio"].add_metric([s, key, kind], w.observed.coverage)
                        fam["window_unexplained_eager_forwards"].add_metric([s, key, kind], w.observed.unexplained_eager)
                    fam["window_model_coverage_ratio"].add_metric([s, key, kind], w.evaluation.coverage)
                    fam["window_padding_ratio"].add_metric([s, key, kind], w.evaluation.padding_overhead)
                    fam["window_above_largest_bucket_forwards"].add_metric([s, key, kind], w.above_largest)
                    if key == "all" and w.drift is not None:
                        fam["window_size_drift_ratio"].add_metric([s, kind], w.drift)
            if server.gain is not None and not isinstance(server.gain, str):
                fam["window_recommended_coverage_gain_ratio"].add_metric([s], server.gain.gain)
            if server.metrics is not None:
                for dp, modes in server.metrics.prefill_passes.items():
                    for mode, passes in modes.items():
                        fam["sglang_prefill_passes"].add_metric([s, dp or "0", mode], passes)
                for phase, gb in server.metrics.graph_memory_gb.items():
                    fam["sglang_graph_memory_gb"].add_metric([s, phase], gb)
                for phase, sec in server.metrics.capture_s.items():
                    fam["sglang_startup_graph_seconds"].add_metric([s, phase], sec)
        yield from fam.values()


class Exporter:
    """An HTTP endpoint serving the last snapshot's metrics (`/metrics`) on `host:port` (port 0:
    any free port; `.port` says which). `publish` is a `WatchSession` subscriber. Raises `OSError`
    when the address cannot be bound."""

    def __init__(self, host: str, port: int):
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _Collector()
        self.registry.register(self._collector)
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.host, self.port = host, int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def publish(self, snapshot: WatchSnapshot) -> None:
        with self._collector.lock:
            self._collector.snapshot = snapshot

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
