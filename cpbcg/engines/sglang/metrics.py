"""SGLang's own Prometheus endpoint (`--enable-metrics`), read beside the log.

Names and labels as SGLang 0.5.23 exports them (`observability/metrics_collector.py`):

* `sglang:cuda_graph_passes_total{mode}`: forward passes by graph use; `mode` `prefill_cuda_graph`
  or `prefill_none` for prefill forwards (`increment_prefill_cuda_graph_pass`, counted where the
  `Prefill batch` line is printed), `decode_cuda_graph` or `decode_none` for every decode step
  (`increment_decode_cuda_graph_pass`, `batch_result_processor.py`: exact, where the log's
  `Decode batch` lines are a 1-in-`decode_log_interval` sample);
* `sglang:graph_memory_usage_gb{phase}`: graph memory per phase (`prefill`, `decode`, ...);
* `sglang:startup_cuda_graph_time_seconds{phase}`: capture time per phase.

Every series also carries the scheduler's labels (`model_name`, `engine_type`, `tp_rank`,
`pp_rank`, `moe_ep_rank`, and `dp_rank` with attention DP). Copies of one count (several TP or PP
ranks exporting the same forwards) are not added: per DP rank the largest is kept.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

PASSES = "sglang:cuda_graph_passes_total"
MEMORY = "sglang:graph_memory_usage_gb"
CAPTURE_TIME = "sglang:startup_cuda_graph_time_seconds"
PREFILL_MODES = ("prefill_cuda_graph", "prefill_none")
DECODE_MODES = ("decode_cuda_graph", "decode_none")
MAX_BYTES = 16 << 20
"""Largest metrics page read (bytes)."""


@dataclass(frozen=True)
class SglangMetrics:
    """One scrape of an SGLang metrics endpoint (module doc)."""

    url: str
    prefill_passes: dict[str, dict[str, float]] = field(default_factory=dict)
    """`dp_rank` ('' without attention DP) -> `mode` (`prefill_cuda_graph`, `prefill_none`) -> passes."""
    graph_memory_gb: dict[str, float] = field(default_factory=dict)
    """`phase` -> graph memory (GB, as SGLang names it)."""
    capture_s: dict[str, float] = field(default_factory=dict)
    """`phase` -> capture time at start-up (s)."""
    decode_passes: dict[str, dict[str, float]] = field(default_factory=dict)
    """`dp_rank` -> `mode` (`decode_cuda_graph`, `decode_none`) -> decode steps (every one)."""

    @property
    def prefill_graph_passes(self) -> float:
        return sum(modes.get("prefill_cuda_graph", 0.0) for modes in self.prefill_passes.values())

    @property
    def prefill_eager_passes(self) -> float:
        return sum(modes.get("prefill_none", 0.0) for modes in self.prefill_passes.values())

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "prefill_passes": self.prefill_passes, "prefill_graph_passes": self.prefill_graph_passes,
                "prefill_eager_passes": self.prefill_eager_passes, "graph_memory_gb": self.graph_memory_gb, "capture_s": self.capture_s,
                "decode_passes": self.decode_passes}


def parse_metrics(text: str, url: str = "") -> SglangMetrics:
    """The module doc's series out of a Prometheus text page. Raises `ValueError` on a malformed page."""
    from prometheus_client.parser import text_string_to_metric_families

    passes: dict[str, dict[str, float]] = {}
    decode: dict[str, dict[str, float]] = {}
    memory: dict[str, float] = {}
    capture: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == PASSES and labels.get("mode") in PREFILL_MODES:
                modes = passes.setdefault(labels.get("dp_rank", ""), {})
                modes[labels["mode"]] = max(modes.get(labels["mode"], 0.0), sample.value)
            elif sample.name == PASSES and labels.get("mode") in DECODE_MODES:
                modes = decode.setdefault(labels.get("dp_rank", ""), {})
                modes[labels["mode"]] = max(modes.get(labels["mode"], 0.0), sample.value)
            elif sample.name == MEMORY and "phase" in labels:
                memory[labels["phase"]] = max(memory.get(labels["phase"], 0.0), sample.value)
            elif sample.name == CAPTURE_TIME and "phase" in labels:
                capture[labels["phase"]] = max(capture.get(labels["phase"], 0.0), sample.value)
    return SglangMetrics(url, passes, memory, capture, decode)


def scrape(url: str, timeout_s: float = 2.0) -> SglangMetrics | str:
    """One scrape of `url` (http or https), or why it failed (one line; never raises)."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        return f"{url}: not an http(s) URL"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (checked above)
            body = response.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{url}: {getattr(exc, 'reason', None) or exc}"
    if len(body) > MAX_BYTES:
        return f"{url}: the page is larger than {MAX_BYTES >> 20} MiB"
    try:
        return parse_metrics(body.decode("utf-8", "replace"), url)
    except ValueError as exc:
        return f"{url}: not a Prometheus text page ({exc})"


class Scraper:
    """`url` scraped every `interval_s` on a daemon thread of its own, so a slow or hung endpoint
    never holds up the log's reader: `latest()` hands over the last result without waiting.
    `errors` counts failed scrapes; `ok_unix` is the wall time of the last good one (None before)."""

    def __init__(self, url: str, interval_s: float, timeout_s: float = 2.0):
        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        self.metrics: SglangMetrics | None = None
        self.error: str | None = None
        self.errors = 0
        self.ok_unix: float | None = None
        self.started_unix = time.time()
        self._done = threading.Event()
        """Set after each scrape (the first result is waited for at the end of a short run)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"cpbcg-scrape {url[:60]}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            got = scrape(self.url, self.timeout_s)
            with self._lock:
                if isinstance(got, str):
                    self.error, self.errors = got, self.errors + 1
                else:
                    self.metrics, self.error, self.ok_unix = got, None, time.time()
            self._done.set()
            self._stop.wait(self.interval_s)

    def latest(self, wait_s: float = 0.0) -> tuple[SglangMetrics | None, str | None, int, float | None]:
        """`(metrics, error, errors, ok_unix)` as last scraped; with `wait_s`, waits that long at most
        for a first result when none came yet (the end of a run shorter than one scrape)."""
        if wait_s > 0:
            self._done.wait(wait_s)
        with self._lock:
            return self.metrics, self.error, self.errors, self.ok_unix

    def close(self) -> None:
        self._stop.set()
