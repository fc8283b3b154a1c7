"""cpbcg's own Prometheus metrics for `cpbcg watch --serve-metrics HOST:PORT` (prometheus_client).

The names are stable (dashboards and alert rules depend on them: `deploy/grafana/`,
`deploy/prometheus/`); docs/watch.md documents each. Every family carries `instance` (the
replica: `--instance`, by default the pod or host, `cpbcg.watching.options.default_instance`) and
`server` (the log as given on the command line); some add `dp_rank` (the attention-DP rank; `all`
for a server's windows), `reason` (the selector's eager reason), `window` (`forwards` or `time`),
`mode` and `phase` (SGLang's own). Counters count from the start of the run; the window gauges are
the last snapshot's; the ages (`*_age_seconds`) are taken when Prometheus scrapes.

Each family is declared once in `FAMILIES` (name, help, its labels beyond `instance` and `server`);
`COUNTERS` and `GAUGES` are derived from it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator, Literal

from cpbcg.watching.session import ServerView, WatchSnapshot

PREFIX = "cpbcg_"
BASE_LABELS = ("instance", "server")
"""The labels of every family: the replica, then the log."""
GIB = 1 << 30
"""SGLang 0.5.23's "GB" is GiB: `get_available_gpu_memory` (`utils/common.py`) divides by `1 << 30`, and the
graph memory is the drop of that number across the capture (`cuda_graph_setup.py`)."""

Kind = Literal["counter", "gauge"]
FAMILIES: dict[str, tuple[Kind, str, tuple[str, ...]]] = {
    "prefill_forwards": ("counter", "Distinct prefill forwards read from the server's log.", ("dp_rank",)),
    "prefill_verdict_forwards": ("counter", "Prefill forwards whose log line printed the graph verdict (cuda graph: True|False).", ("dp_rank",)),
    "prefill_graph_forwards": ("counter", "Prefill forwards the server ran in CUDA graphs (cuda graph: True).", ("dp_rank",)),
    "prefill_model_graph_forwards": ("counter", "Prefill forwards cpbcg's model of SGLang 0.5.23's selector replays in graphs (worst case).", ("dp_rank",)),
    "prefill_tokens": ("counter", "Extend tokens of the prefill forwards read.", ("dp_rank",)),
    "prefill_graph_tokens": ("counter", "Extend tokens of the forwards the server ran in graphs.", ("dp_rank",)),
    "prefill_padded_tokens": ("counter", "Padding tokens the model's graph replays add.", ("dp_rank",)),
    "prefill_eager_forwards": ("counter", "Prefill forwards the model runs eagerly, by the selector's reason.", ("dp_rank", "reason")),
    "log_rotations": ("counter", "Times the followed log file was replaced (rotation).", ()),
    "log_truncations": ("counter", "Times the followed log file was truncated in place (copytruncate, > log; regrown or not).", ()),
    "log_lines": ("counter", "Lines read from the log.", ()),
    "log_read_bytes": ("counter", "Bytes read from the log (the copy of a copytruncate included).", ()),
    "sglang_scrape_errors": ("counter", "Failed scrapes of the server's SGLang metrics endpoint.", ()),
    "sglang_prefill_passes": ("counter", "SGLang's sglang:cuda_graph_passes_total for prefill, as last scraped, by mode.", ("dp_rank", "mode")),
    "sglang_decode_passes": ("counter", "SGLang's sglang:cuda_graph_passes_total for decode (every decode step), as last scraped, by "
                             "mode: decode_none counts the steps that fell off the decode graphs.", ("dp_rank", "mode")),
    "decode_batch_lines": ("counter", "The log's Decode batch lines (one per decode_log_interval decode steps) by verdict: graph, eager "
                           "(cuda graph: False: the running batch fell off the decode graphs), none; the eager decode share is "
                           "rate(verdict=eager) / rate(verdict!=none).", ("verdict",)),
    "log_last_line_age_seconds": ("gauge", "Seconds since the last line was read from the log (since the start before the first).", ()),
    "log_reader_lag_seconds": ("gauge", "Seconds the reader has been behind the end of its log (0 while it keeps up), at the last update.", ()),
    "log_unread_bytes": ("gauge", "Bytes of the log file not read yet, at the last update.", ()),
    "sglang_scrape_age_seconds": ("gauge", "Seconds since the last successful scrape of --metrics-url (since the start before the first).", ()),
    "window_forwards": ("gauge", "Forwards in the rolling window.", ("dp_rank", "window")),
    "window_observed_coverage_ratio": ("gauge", "Fraction of the window's forwards (with a verdict) the server ran in graphs.", ("dp_rank", "window")),
    "window_model_coverage_ratio": ("gauge", "Fraction of the window's forwards the model replays in graphs.", ("dp_rank", "window")),
    "window_padding_ratio": ("gauge", "Padding overhead of the window's modelled replays (padded / real graph tokens).", ("dp_rank", "window")),
    "window_above_largest_bucket_forwards": ("gauge", "Forwards of the window above the largest captured bucket.", ("dp_rank", "window")),
    "window_unexplained_eager_forwards": ("gauge", "Forwards of the window the model replays but the server ran eagerly.", ("dp_rank", "window")),
    "window_size_drift_ratio": ("gauge", "Total variation distance of the window's size distribution from the planned trace's (0..1).", ("window",)),
    "window_recommended_coverage_gain_ratio": ("gauge", "Modelled coverage the list recommended for the forwards window would add.", ()),
    "prefill_graphs_refused": ("gauge", "1 when the server's start-up output says its prefill graphs are off (resolved disabled, no capture line, 0 buckets).", ()),
    "sglang_graph_memory_bytes": ("gauge", "SGLang's sglang:graph_memory_usage_gb, as last scraped, by phase, in bytes (its GB is GiB).", ("phase",)),
    "sglang_graph_memory_gb": ("gauge", "DEPRECATED (removed in the next release): cpbcg_sglang_graph_memory_bytes in SGLang's GB (GiB).", ("phase",)),
    "sglang_startup_graph_seconds": ("gauge", "SGLang's sglang:startup_cuda_graph_time_seconds, as last scraped, by phase.", ("phase",)),
}
"""Family name (without `cpbcg_`, and without `_total` for counters) -> kind, help, labels after `instance`, `server`."""
DEPRECATED = {"sglang_graph_memory_gb": "sglang_graph_memory_bytes"}
"""Families kept one release under their old name -> the name that replaces them."""
COUNTERS = {name: text for name, (kind, text, _) in FAMILIES.items() if kind == "counter"}
"""Counter names (without `cpbcg_` and `_total`) -> help."""
GAUGES = {name: text for name, (kind, text, _) in FAMILIES.items() if kind == "gauge"}
"""Gauge names (without `cpbcg_`) -> help."""


def exported_names() -> set[str]:
    """Every series name the exporter writes (counters with `_total`)."""
    return {f"{PREFIX}{n}_total" for n in COUNTERS} | {PREFIX + n for n in GAUGES}


def _server_samples(server: ServerView, now_unix: float) -> Iterator[tuple[str, tuple[str, ...], float]]:
    """`(family, labels after instance and server, value)` for one server of a snapshot."""
    for r in server.ranks:
        dp = str(r.dp_rank)
        for name, value in (("prefill_forwards", r.forwards), ("prefill_verdict_forwards", r.verdict_forwards),
                            ("prefill_graph_forwards", r.graph_forwards), ("prefill_model_graph_forwards", r.model_graph_forwards),
                            ("prefill_tokens", r.tokens), ("prefill_graph_tokens", r.graph_tokens),
                            ("prefill_padded_tokens", r.padded_tokens)):
            yield name, (dp,), value
        for reason, count in r.eager.items():
            yield "prefill_eager_forwards", (dp, reason), count
    f = server.freshness
    yield "log_rotations", (), server.rotations
    yield "log_truncations", (), server.truncations
    yield "log_lines", (), f.lines_read
    yield "log_read_bytes", (), f.bytes_read
    yield "log_last_line_age_seconds", (), max(0.0, now_unix - f.last_line_unix)
    yield "log_reader_lag_seconds", (), f.reader_lag_s
    yield "log_unread_bytes", (), f.unread_bytes
    yield "sglang_scrape_errors", (), server.metrics_errors
    if f.scrape_unix is not None:
        yield "sglang_scrape_age_seconds", (), max(0.0, now_unix - f.scrape_unix)
    yield "prefill_graphs_refused", (), 1.0 if server.refusal else 0.0
    for verdict, lines in zip(("graph", "eager", "none"), server.decode_lines):
        yield "decode_batch_lines", (verdict,), lines
    for kind, per in server.windows.items():
        for key, w in per.items():
            yield "window_forwards", (key, kind), w.forwards
            if not w.forwards:
                continue
            if w.observed is not None:
                yield "window_observed_coverage_ratio", (key, kind), w.observed.coverage
                yield "window_unexplained_eager_forwards", (key, kind), w.observed.unexplained_eager
            yield "window_model_coverage_ratio", (key, kind), w.evaluation.coverage
            yield "window_padding_ratio", (key, kind), w.evaluation.padding_overhead
            yield "window_above_largest_bucket_forwards", (key, kind), w.above_largest
            if key == "all" and w.drift is not None:
                yield "window_size_drift_ratio", (kind,), w.drift
    if server.gain is not None and not isinstance(server.gain, str):
        yield "window_recommended_coverage_gain_ratio", (), server.gain.gain
    if server.metrics is not None:
        for dp, modes in server.metrics.prefill_passes.items():
            for mode, passes in modes.items():
                yield "sglang_prefill_passes", (dp or "0", mode), passes
        for dp, modes in server.metrics.decode_passes.items():
            for mode, passes in modes.items():
                yield "sglang_decode_passes", (dp or "0", mode), passes
        for phase, gb in server.metrics.graph_memory_gb.items():
            yield "sglang_graph_memory_bytes", (phase,), gb * GIB
            yield "sglang_graph_memory_gb", (phase,), gb
        for phase, sec in server.metrics.capture_s.items():
            yield "sglang_startup_graph_seconds", (phase,), sec


class _Collector:
    """Builds every family from the last snapshot at scrape time (no per-forward bookkeeping)."""

    def __init__(self) -> None:
        self.snapshot: WatchSnapshot | None = None
        self.lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.lock:
            snap = self.snapshot
        fam: dict[str, Any] = {}
        for name, (kind, text, labels) in FAMILIES.items():
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fam[name] = cls(PREFIX + name, text, labels=[*BASE_LABELS, *labels])
        now_unix = time.time()
        for server in snap.servers if snap is not None else ():
            for name, labels, value in _server_samples(server, now_unix):
                fam[name].add_metric([server.instance, server.name, *labels], value)
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
