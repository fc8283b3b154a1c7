"""The `cpbcg watch` loop: follow the sources, tally, judge rolling windows, gate, publish.

Per server (one log): every forward read is tallied since the start of the run (`RunTally`: the
numbers `plan` prints for the finished log) and kept in a bounded ring (`ForwardRing`); every
`interval_s` the windows are judged (`window_stats`) over the last `window_forwards` forwards and
over the last `window_seconds` seconds, for the server and for each attention-DP rank, and a
`WatchSnapshot` goes to the subscribers (live view, JSON lines, the exporter). Every
`recommend_every_s` (and at the end) the optimiser fits a list to the forwards window
(`window_gain`).

Restarts. A server restarted into the same log begins a new launch (`sglang_settings`): from its
first forward on, its forwards are judged under that launch's own settings (its list, CP size,
chunk: `resolve` is called again with them), the run and the windows keep going across the
restart (a window spanning it judges each launch's forwards under their own settings), and every
snapshot says the launch and what each launch assumed (settings its log does not state). A launch
whose start-up output says its prefill graphs are off is refused like a first one; what is refused
is the launch: its forwards are not judged (counted in a note with its line), the log is still
read, and a later launch that runs graphs is the server as it runs now (judged, the refusal left
as a note). The verdict is the last launch's.

Gates (`cpbcg.gates.gates.check_gates`, replay-check's) are checked over the whole run at the end
and over every full forwards window, one every `gate_step` forwards (the window ending at forward
`W`, `W + step`, ...: the same windows whatever the reading speed); the worst window per gate is
reported. A server whose start-up output says its prefill graphs are off (resolved disabled, no
prefill capture line, a capture line with 0 buckets) is refused: one line, the run fails, and the
server is no longer followed once its log is read to the end (a restart already in the log is
judged as the server running now).

Stops. SIGTERM and SIGINT (in the main thread; the previous handlers are restored after) set a
flag the loop reads at its next turn, so every stop ends the same way: the final snapshot, the
gates on what was read, `stopped_by` (`terminated`, `interrupted`). Freshness: per server, the
lines and bytes read, when the last line came, how long the reader has been behind the end of its
log (`Freshness`). Each `--metrics-url` is scraped on a thread of its own (`scrape.Scraper`): an
update takes its last result and never waits on an endpoint.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

from cpbcg.planner.document import document
from cpbcg.errors import ConfigError
from cpbcg.gates.gates import GateResult, Gates, check_gates
from cpbcg.planner.arrays import FloatArray
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.model.selector import BucketTable
from cpbcg.engines.sglang.observed import AssumedSetting, ObservedComparison
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.assembly.window import (ForwardRing, LaunchSetup, RunTally, Window, WindowGain, WindowStats, rank_window, take, window_gain,
                                  window_stats)
from cpbcg.watching.options import WatchOptions
from cpbcg.engines.sglang.logs.lines import LogLines
from cpbcg.engines.sglang.metrics import Scraper, SglangMetrics


FINAL_SCRAPE_WAIT_S = 2.5
"""Most seconds the end of a run waits for a metrics endpoint's first answer (the scrape's own timeout is 2 s)."""


class Follower(Protocol):
    name: str
    rotations: int
    truncations: int
    lines_read: int
    bytes_read: int
    at_end: bool
    """The last poll reached the end of what there was to read."""
    notes: list[str]
    """Events of the source (rotations, truncations), one line each, drained by the session."""
    eof: bool

    @property
    def unread_bytes(self) -> int: ...

    def poll(self) -> list[tuple[int, bytes]]: ...

    def finish(self) -> list[tuple[int, bytes]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Resolved:
    """What a server runs: the deployment from the config, its log's settings and the command line."""

    deployment: Deployment
    gates: Gates
    table: BucketTable
    notes: tuple[str, ...] = ()
    assumed: tuple[AssumedSetting, ...] = ()
    """Settings the log (this launch) does not state, at the value they are planned at (`cpbcg.engines.sglang.observed.assumed_settings`)."""


@dataclass(frozen=True)
class RankView:
    """One attention-DP rank since the start of the run."""

    dp_rank: int
    forwards: int
    """Distinct prefill forwards read."""
    tokens: int
    verdict_forwards: int
    """Of them, with a printed verdict (`cuda graph: True|False`)."""
    graph_forwards: int
    """The server ran them in graphs (`cuda graph: True`)."""
    graph_tokens: int
    model_graph_forwards: int
    """The model replays them in graphs (at their worst case)."""
    padded_tokens: int
    """Padding the model's replays add (tokens)."""
    eager: dict[str, int]
    """The model's eager forwards by reason."""

    def to_dict(self) -> dict[str, object]:
        return document(self)


@dataclass(frozen=True)
class LaunchView:
    """One launch of a server's log (a restart begins the next) since the start of the run."""

    launch: int
    """1-based launch of the log."""
    first_line: int
    """Line the launch begins on."""
    forwards: int
    buckets: tuple[int, ...]
    """The list its forwards are modelled with (tokens)."""
    evaluation: Evaluation
    """Its forwards under its own settings (modelled)."""
    settings: LogSettings
    """Its settings as read from the log (each with its source line)."""
    assumed: tuple[AssumedSetting, ...]
    """Settings the log does not state, with the value assumed and the option that sets each."""

    def to_dict(self) -> dict[str, object]:
        return {"launch": self.launch, "first_line": self.first_line, "forwards": self.forwards, "buckets": list(self.buckets),
                "totals": self.evaluation.to_dict(), **self.settings.to_dict(),
                "assumed": [document(a) for a in self.assumed]}


@dataclass(frozen=True)
class Freshness:
    """How current a server's numbers are (the exporter's `cpbcg_log_*` and scrape-age gauges)."""

    lines_read: int
    bytes_read: int
    last_line_unix: float
    """Wall time (Unix s) the last line was read; the run's start before the first."""
    reader_lag_s: float
    """Seconds since the reader was last at the end of its log (0 while it keeps up)."""
    unread_bytes: int
    """Bytes of the file beyond the read offset (0 for standard input)."""
    scrape_unix: float | None = None
    """Wall time (Unix s) of the last good scrape of --metrics-url; the run's start before the first; None without a URL."""

    def to_dict(self, now_unix: float) -> dict[str, object]:
        return {"lines_read": self.lines_read, "bytes_read": self.bytes_read,
                "last_line_age_s": round(max(0.0, now_unix - self.last_line_unix), 3), "reader_lag_s": round(self.reader_lag_s, 3),
                "unread_bytes": self.unread_bytes,
                "scrape_age_s": None if self.scrape_unix is None else round(max(0.0, now_unix - self.scrape_unix), 3)}


@dataclass(frozen=True)
class ServerView:
    """One server (log) in a snapshot."""

    name: str
    forwards: int
    evaluation: Evaluation | None
    """The run so far, as `plan` tallies it (None before the settings resolved)."""
    observed: ObservedComparison | None
    ranks: tuple[RankView, ...]
    windows: dict[str, dict[str, WindowStats]]
    """`forwards` / `time` -> `all` or the DP rank -> the window judged."""
    gain: WindowGain | str | None
    """The last fit on the forwards window, why none was made, or None before the first."""
    metrics: SglangMetrics | None
    metrics_error: str | None
    metrics_errors: int
    rotations: int
    truncations: int
    records: int
    folded_copies: int
    unreadable: int
    nonprefill: int
    refusal: str | None
    buckets: tuple[int, ...] = ()
    """The current launch's list (tokens)."""
    launch: int = 0
    """The launch being judged now (1-based; 0 before the first is resolved)."""
    launches: tuple[LaunchView, ...] = ()
    """Every launch with forwards in the run, in order (the current one last)."""
    instance: str = ""
    """The replica (`--instance`): the `instance` label of every metric."""
    freshness: Freshness = Freshness(0, 0, 0.0, 0.0, 0)
    snapshot_unix: float = 0.0
    """Wall time (Unix s) of the snapshot."""
    decode_lines: tuple[int, int, int] = (0, 0, 0)
    """The log's `Decode batch` lines so far that printed `graph: True`, `graph: False`, no verdict
    (each one decode step in `decode_log_interval`: the decode fall-off signal)."""

    @property
    def current(self) -> LaunchView | None:
        return next((v for v in self.launches if v.launch == self.launch), None)

    def to_dict(self) -> dict[str, object]:
        current = self.current
        return {
            "server": self.name, "instance": self.instance, "forwards": self.forwards, "buckets": list(self.buckets), "launch": self.launch,
            "assumed": [] if current is None else [document(a) for a in current.assumed],
            "launches": [v.to_dict() for v in self.launches],
            "totals": None if self.evaluation is None else self.evaluation.to_dict(),
            "observed": None if self.observed is None else self.observed.to_dict(),
            "ranks": [r.to_dict() for r in self.ranks],
            "windows": {kind: {key: w.to_dict() for key, w in per.items()} for kind, per in self.windows.items()},
            "recommended": self.gain.to_dict() if isinstance(self.gain, WindowGain) else None,
            "recommended_note": self.gain if isinstance(self.gain, str) else None,
            "sglang_metrics": None if self.metrics is None else self.metrics.to_dict(), "sglang_metrics_error": self.metrics_error,
            "sglang_metrics_errors": self.metrics_errors,
            "log": {"rotations": self.rotations, "truncations": self.truncations, "records": self.records,
                    "folded_copies": self.folded_copies, "unreadable": self.unreadable, "nonprefill": self.nonprefill},
            "freshness": self.freshness.to_dict(self.snapshot_unix),
            "refusal": self.refusal,
            "decode_lines": dict(zip(("graph", "eager", "no_verdict"), self.decode_lines)),
        }


@dataclass(frozen=True)
class WatchSnapshot:
    """Every server at one moment."""

    elapsed_s: float
    forwards: int
    """Forwards read, all servers."""
    servers: tuple[ServerView, ...]
    final: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"type": "final" if self.final else "snapshot", "elapsed_s": round(self.elapsed_s, 3), "forwards": self.forwards,
                "servers": [s.to_dict() for s in self.servers]}


@dataclass(frozen=True)
class WatchReport:
    """What a `cpbcg watch` run found: the last snapshot, the gates and the refusals."""

    snapshot: WatchSnapshot
    gates: tuple[GateResult, ...]
    refusals: tuple[str, ...]
    """One line per refused server: prefill graphs off, or no forward read where gates were set."""
    stopped_by: str
    """`duration`, `max-forwards`, `end of input`, `interrupted` (SIGINT, Ctrl-C), `terminated` (SIGTERM) or `refused`."""
    unchecked: tuple[str, ...] = ()
    """Window gates not checked (no full window), one line each."""
    notes: tuple[str, ...] = ()
    """What the reader skipped, per log (one line each)."""

    @property
    def passed(self) -> bool:
        return not self.refusals and all(g.passed for g in self.gates)

    def to_dict(self) -> dict[str, object]:
        return {**self.snapshot.to_dict(), "type": "result", "stopped_by": self.stopped_by, "passed": self.passed,
                "refusals": list(self.refusals), "gates": [g.to_dict() for g in self.gates], "unchecked": list(self.unchecked),
                "notes": list(self.notes)}


@dataclass
class _Server:
    follower: Follower
    metrics_url: str | None
    instance: str = ""
    scraper: Scraper | None = None
    last_line_unix: float = field(default_factory=time.time)
    caught_up_at: float | None = None
    """Clock time the reader was last at the end of its log (None: not yet)."""
    lines: LogLines = field(init=False)
    resolved: Resolved | None = None
    """The current launch's."""
    launch: int = 0
    """The launch resolved last (0: none yet)."""
    launches: dict[int, tuple[Resolved, LaunchSetup]] = field(default_factory=dict)
    run: RunTally | None = None
    ring: ForwardRing | None = None
    refusal: str | None = None
    next_gate: int = 0
    worst: dict[str, GateResult] = field(default_factory=dict)
    windows_gated: int = 0
    gain: WindowGain | str | None = None
    metrics: SglangMetrics | None = None
    metrics_error: str | None = None
    metrics_errors: int = 0
    refused: dict[int, str] = field(default_factory=dict)
    """Launch -> why it was refused (its prefill graphs off)."""
    refused_forwards: dict[int, int] = field(default_factory=dict)
    """Launch -> its forwards, read and not judged (refused)."""
    caught_up: bool = False
    """The last read found nothing new (a refused server stops here)."""

    def __post_init__(self) -> None:
        self.lines = LogLines(self.follower.name)

    def setup(self, launch: int) -> LaunchSetup:
        """What launch `launch`'s forwards are judged with (resolved before its first forward is added)."""
        return self.launches[launch][1]

    @property
    def done(self) -> bool:
        return self.follower.eof or (self.refusal is not None and self.caught_up)

    def refused_notes(self) -> list[str]:
        """One line per refused launch that a later, judged launch replaced."""
        return [f"{self.follower.name}: launch {launch} was refused ({why}); its "
                f"{self.refused_forwards.get(launch, 0):,} forwards were not judged; launch {self.launch} is the server as it runs "
                "now" for launch, why in sorted(self.refused.items()) if launch < self.launch]


def refusal_of(settings: LogSettings, forwards_began: bool = True) -> str | None:
    """Why a launch's prefill graphs are off by its start-up output, or None: resolved disabled,
    a capture line with 0 buckets, or a settings dump with no prefill capture line before the first
    `Prefill batch` (a log without start-up output is not judged; nor a missing capture line while
    `forwards_began` is False: a server still starting). A launch whose `Prefill batch` lines say
    they ran in a graph (`LogSettings.graph_forward`) ran prefill graphs, whatever its start-up
    output implies: never refused (`LogSettings.prefill_graphs`, the verdicts win)."""
    if settings.graph_forward is not None:
        return None
    where = f"{settings.path}:{settings.args_line}" if settings.args_line else settings.path
    if settings.prefill_graphs is False:
        keys = ("disable_cuda_graph", "disable_prefill_cuda_graph", "disable_piecewise_cuda_graph", "enable_piecewise_cuda_graph",
                "cuda_graph_backend_prefill", "cuda_graph_config")
        said = ", ".join(f"{k}={settings.server_args[k]!r}" for k in keys if k in settings.server_args)[:300]
        return f"{where}: prefill graphs resolved disabled ({said or 'the start-up settings'}): every prefill forward runs eagerly"
    if settings.capture_line and not settings.captured:
        return f"{settings.path}:{settings.capture_line}: the prefill capture line lists 0 buckets: every prefill forward runs eagerly"
    if forwards_began and settings.args_line and not settings.captured and settings.capture is None:
        return (f"{where}: no prefill capture line before the first Prefill batch: the server captured no prefill graph "
                "(every prefill forward runs eagerly)")
    return None


class WatchSession:
    """Follow `followers` (one server each; `metrics_urls` aligned, None for none) until a stop
    condition (`WatchOptions`), the end of every input, or `KeyboardInterrupt`.

    `resolve(settings)` gives the deployment, gates and table of a server once its start-up
    settings are read (raises `ConfigError` for bad settings); `subscribers` receive every
    snapshot; `baseline(resolved)` (`size_histogram` of the planned trace over the server's list,
    read once per server) turns on drift; `clock` is `time.monotonic` (tests may pass another)."""

    def __init__(self, followers: Sequence[Follower], resolve: Callable[[LogSettings], Resolved], options: WatchOptions = WatchOptions(),
                 *, metrics_urls: Sequence[str | None] = (), subscribers: Sequence[Callable[[WatchSnapshot], None]] = (),
                 baseline: Callable[[Resolved], FloatArray | None] | None = None, note: Callable[[str], None] = lambda text: None,
                 clock: Callable[[], float] = time.monotonic, instances: Sequence[str] = ()):
        urls = list(metrics_urls) + [None] * (len(followers) - len(metrics_urls))
        names = list(instances) + [instances[-1] if instances else ""] * (len(followers) - len(instances))
        self.servers = [_Server(f, u, i) for f, u, i in zip(followers, urls, names)]
        self.resolve, self.options, self.subscribers = resolve, options, list(subscribers)
        self.baseline_of, self.note, self.clock = baseline, note, clock
        self._baselines: dict[int, FloatArray | None] = {}
        self.forwards = 0
        self.start = clock()
        self._stop: str | None = None
        """Set by a SIGTERM or SIGINT handler: the loop ends at its next turn, with the report."""

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop = "terminated" if signum == signal.SIGTERM else "interrupted"

    def _handle_signals(self) -> dict[int, object]:
        """SIGTERM and SIGINT end the run with its report (a pod's shutdown, a job's timeout, Ctrl-C):
        the handlers set a flag the loop reads, so no forward is half-tallied. Main thread only."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    # -- reading -------------------------------------------------------------------------------
    def run(self) -> WatchReport:
        o = self.options
        stopped_by = "end of input"
        next_tick = self.start + o.interval_s
        next_fit = self.start + o.recommend_every_s if o.recommend_every_s > 0 else float("inf")
        previous = self._handle_signals()
        for server in self.servers:
            if server.metrics_url is not None:
                server.scraper = Scraper(server.metrics_url, o.interval_s)
        try:
            while True:
                now = self.clock()
                if self._stop is not None:
                    stopped_by = self._stop
                    break
                if o.duration_s is not None and now - self.start >= o.duration_s:
                    stopped_by = "duration"
                    break
                busy = False
                for server in self.servers:
                    if not server.done:
                        polled = server.follower.poll()
                        server.caught_up = not polled
                        self._drain_notes(server)
                        if polled:
                            server.last_line_unix = time.time()
                        if server.follower.at_end:
                            server.caught_up_at = now
                        for first, blob in polled:
                            busy = True
                            self._feed(server, first, blob, now)
                            if self._limit_reached():
                                break
                    if self._limit_reached():
                        break
                if self._limit_reached():
                    stopped_by = "max-forwards"
                    break
                if all(s.done for s in self.servers):
                    stopped_by = "refused" if all(s.refusal for s in self.servers) else "end of input"
                    break
                now = self.clock()
                if now >= next_tick:
                    if now >= next_fit:
                        self._fit_all()
                        next_fit = now + o.recommend_every_s
                    self._tick(now, final=False)
                    next_tick = now + o.interval_s
                if not busy:
                    time.sleep(o.poll_s)
        except KeyboardInterrupt:
            stopped_by = "interrupted"
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)  # type: ignore[arg-type]
        for server in self.servers:
            if not server.done:
                for first, blob in server.follower.finish():
                    self._feed(server, first, blob, self.clock())
            server.follower.close()
        try:
            return self._report(stopped_by)
        finally:
            for server in self.servers:
                if server.scraper is not None:
                    server.scraper.close()

    def _drain_notes(self, server: _Server) -> None:
        notes = server.follower.notes
        while notes:
            self.note(notes.pop(0))

    def _limit_reached(self) -> bool:
        return self.options.max_forwards is not None and self.forwards >= self.options.max_forwards

    def _feed(self, server: _Server, first: int, blob: bytes, now: float) -> None:
        for chunk in server.lines.feed(first, blob):
            if chunk.launch != server.launch and chunk.launch not in server.refused:
                self._resolve(server, chunk.launch)
            if chunk.launch in server.refused:  # a refused launch: its forwards are counted, not judged
                server.refused_forwards[chunk.launch] = server.refused_forwards.get(chunk.launch, 0) + chunk.num_forwards
                continue
            limit = self.options.max_forwards
            if limit is not None and self.forwards + chunk.num_forwards > limit:
                chunk = take(chunk, slice(0, max(0, limit - self.forwards)))
            if chunk.num_forwards:
                self._add(server, chunk, now)

    def _resolve(self, server: _Server, launch: int, forwards_began: bool = True) -> None:
        """Resolve launch `launch` of `server` (its settings are complete: its first forward was read)."""
        settings = server.lines.settings(launch)
        server.refusal = refusal_of(settings, forwards_began)
        if server.refusal is not None:  # judged before the settings are: a refused server's may not even load
            server.refused[launch] = server.refusal
            return
        resolved = self.resolve(settings)
        for earlier in sorted(k for k in server.refused if k < launch):
            self.note(f"cpbcg: note: {server.follower.name}: launch {launch} (a restart at line {settings.first_line}) replaces "
                      f"refused launch {earlier}: the server as it runs now, judged under its own settings")
        if server.launch:
            self.note(f"cpbcg: note: {server.follower.name}: launch {launch} (a restart at line {settings.first_line}): its forwards "
                      "are judged under its own settings from here")
        for line in resolved.notes:
            self.note(line)
        server.resolved, server.launch = resolved, launch
        server.launches[launch] = (resolved, LaunchSetup(resolved.deployment, resolved.table, settings, resolved.assumed))
        if server.run is None:
            server.run = RunTally(server.setup, launch)
            server.ring = ForwardRing(max(self.options.ring_forwards, self.options.window_forwards))
            server.next_gate = self.options.window_forwards

    def _add(self, server: _Server, chunk: ObservedForwards, now: float) -> None:
        """Tally `chunk`, cut at the gated windows' ends so every gated window is the same whatever the reads."""
        assert server.run is not None and server.ring is not None
        done = 0
        while done < chunk.num_forwards:
            upto = min(chunk.num_forwards, done + server.next_gate - server.ring.total)
            piece = chunk if done == 0 and upto == chunk.num_forwards else take(chunk, slice(done, upto))
            server.run.add(piece)
            server.ring.add(piece, now)
            self.forwards += piece.num_forwards
            done = upto
            if server.ring.total == server.next_gate:
                self._gate_window(server)
                server.next_gate += self.options.step

    # -- judging -------------------------------------------------------------------------------
    def _baseline(self, resolved: Resolved) -> FloatArray | None:
        if self.baseline_of is None:
            return None
        if id(resolved) not in self._baselines:
            self._baselines[id(resolved)] = self.baseline_of(resolved)
        return self._baselines[id(resolved)]

    def _window(self, server: _Server, window: Window) -> WindowStats:
        """`window` judged, each launch under its own settings; drift against the baseline over its latest launch's list."""
        latest = server.launches[window[-1].launch][0] if window else server.resolved
        assert latest is not None
        return window_stats(window, server.setup, self._baseline(latest), server.launch)

    def _decode(self, server: _Server) -> Any:
        """The run's decode judgement from the log's `Decode batch` lines (None without any; the
        decode gates then refuse: `check_gates`)."""
        from cpbcg.engines.sglang.decode_plan import watched_decode_plan

        assert server.resolved is not None
        try:
            return watched_decode_plan(server.resolved.deployment, server.lines.summary.decode, server.lines.settings())
        except ValueError as exc:
            raise ConfigError(f"{server.follower.name}: decode graphs: {exc}") from None

    def _gate_window(self, server: _Server) -> None:
        assert server.resolved is not None and server.ring is not None
        stats = self._window(server, server.ring.last(self.options.window_forwards))
        gates = replace(server.resolved.gates, min_decode_coverage=None, max_eager_decode_steps=None,  # decode: the whole run's (final)
                        min_observed_decode_coverage=None)
        if stats.observed is None:
            gates = replace(gates, min_observed_coverage=None)
        server.windows_gated += 1
        for g in check_gates(stats.evaluation, gates, stats.observed):
            g = replace(g, name=f"window.{g.name}", detail=f"{self.options.window_forwards:,}-forward window, lines "
                        f"{stats.first_line}-{stats.last_line} of {server.follower.name}")
            old = server.worst.get(g.name)
            if old is None or (g.measured < old.measured if g.comparison == ">=" else g.measured > old.measured):
                server.worst[g.name] = g

    def _fit_all(self) -> None:
        for server in self.servers:
            if server.resolved is not None and server.ring is not None and server.refusal is None and len(server.ring):
                r = server.resolved
                server.gain = window_gain(server.ring.last(self.options.window_forwards), r.deployment, r.table)

    def _scrape_all(self, final: bool) -> None:
        """The scrapers' last results (their threads scrape; nothing here waits on an endpoint, but at
        the end of a run shorter than one scrape: `FINAL_SCRAPE_WAIT_S` at most for a first result)."""
        for server in self.servers:
            if server.scraper is not None:
                wait = FINAL_SCRAPE_WAIT_S if final and server.scraper.ok_unix is None and not server.scraper.errors else 0.0
                server.metrics, server.metrics_error, server.metrics_errors, _ = server.scraper.latest(wait)

    def _tick(self, now: float, final: bool) -> WatchSnapshot:
        self._scrape_all(final)
        snap = WatchSnapshot(now - self.start, self.forwards, tuple(self._view(s, now) for s in self.servers), final)
        for subscriber in self.subscribers:
            subscriber(snap)
        return snap

    def _view(self, server: _Server, now: float) -> ServerView:
        s = server.lines.summary
        windows: dict[str, dict[str, WindowStats]] = {}
        ranks: tuple[RankView, ...] = ()
        evaluation = observed = None
        if server.run is not None and server.ring is not None and server.resolved is not None:
            evaluation = server.run.evaluation()
            observed = server.run.observed(s.graph_label)
            by_dp = {r.dp_rank: r for r in observed.ranks} if observed is not None else {}
            ranks = tuple(RankView(dp, ev.batches, ev.tokens, by_dp[dp].forwards if dp in by_dp else 0,
                                   by_dp[dp].graph_forwards if dp in by_dp else 0, by_dp[dp].graph_tokens if dp in by_dp else 0,
                                   ev.graph_batches, ev.padded_tokens, {k: v for k, v in ev.eager.items() if v})
                          for dp, ev in server.run.rank_evaluations().items())
            for kind, window in (("forwards", server.ring.last(self.options.window_forwards)),
                                 ("time", server.ring.since(now - self.options.window_seconds))):
                per = {"all": self._window(server, window)}
                if len(ranks) > 1:
                    for rank in ranks:
                        per[str(rank.dp_rank)] = self._window(server, rank_window(window, rank.dp_rank))
                windows[kind] = per
        return ServerView(server.follower.name, 0 if server.run is None else server.run.forwards, evaluation, observed, ranks, windows,
                          server.gain, server.metrics, server.metrics_error, server.metrics_errors, server.follower.rotations,
                          server.follower.truncations, s.records, s.folded_copies, s.unreadable, s.nonprefill, server.refusal,
                          () if server.resolved is None else tuple(server.resolved.table.capture_num_tokens.tolist()), server.launch,
                          self._launch_views(server), server.instance, self._freshness(server, now), time.time(), s.decode.verdicts())

    def _freshness(self, server: _Server, now: float) -> Freshness:
        f = server.follower
        scrape_unix = None
        if server.scraper is not None:
            scrape_unix = server.scraper.ok_unix if server.scraper.ok_unix is not None else server.scraper.started_unix
        behind = not server.done and (f.unread_bytes > 0 or not f.at_end)  # taken now: what a stalled loop left unread shows
        lag = self.clock() - (server.caught_up_at if server.caught_up_at is not None else self.start) if behind else 0.0
        return Freshness(f.lines_read, f.bytes_read, server.last_line_unix, max(0.0, lag), f.unread_bytes, scrape_unix)

    def _launch_views(self, server: _Server) -> tuple[LaunchView, ...]:
        if server.run is None:
            return ()
        views = []
        for launch, evaluation in server.run.launch_evaluations().items():
            setup = server.setup(launch)
            settings = setup.settings or LogSettings(launch=launch)
            views.append(LaunchView(launch, settings.first_line, server.run.launch_forwards.get(launch, 0),
                                    tuple(setup.table.capture_num_tokens.tolist()), evaluation, settings, setup.assumed))
        return tuple(views)

    def _nothing_read(self, server: _Server) -> None:
        """A server that printed no readable `Prefill batch` line: refused when it has gates to check
        (a canary must not pass on a server that served nothing, or logs below INFO)."""
        if server.resolved is None:
            self._resolve(server, server.lines.launch, forwards_began=server.lines.summary.records > 0)
        if server.resolved is not None and server.resolved.gates != Gates():
            server.refusal = (f"{server.follower.name}: no readable Prefill batch line in {self.clock() - self.start:.0f} s "
                              "(a server that served no prefill, or logs below INFO): the gates had nothing to check")
        elif getattr(server.follower, "appeared", True):  # a file that never appeared is an error of its own (run.py)
            self.note(f"cpbcg: warning: {server.follower.name}: no readable Prefill batch line in {self.clock() - self.start:.0f} s "
                      "(a server that served no prefill, or logs below INFO): nothing was judged")

    def _report(self, stopped_by: str) -> WatchReport:
        self._fit_all()
        for server in self.servers:  # resolved before the final snapshot: its header shows the assumed list
            if server.refused and server.lines.launch > max(server.refused):  # a restart after the refused launch, no forward yet
                self._resolve(server, server.lines.launch, forwards_began=False)
                if stopped_by == "refused" and server.refusal is None:  # read to its end: the server is starting again
                    stopped_by = "end of input"
            if server.refusal is None and (server.run is None or not server.run.forwards):
                self._nothing_read(server)
        for server in self.servers:  # no start-up output needed: the forwards' verdicts win (before the final snapshot shows it)
            o = server.run.observed(server.lines.summary.graph_label) if server.run is not None and server.refusal is None else None
            if o is not None and o.graphs_appear_off:
                server.refusal = (f"{server.follower.name}: {o.coverage:.2%} of {o.forwards:,} forwards ran in graphs "
                                  f"({o.label}: False on every Prefill batch line; the model of its list replays "
                                  f"{o.model_coverage:.2%}): prefill graphs appear off (check --disable-cuda-graph, "
                                  "--cuda-graph-backend-prefill, --cuda-graph-config and the prefill capture line)")
        snap = self._tick(self.clock(), final=True)
        gates: list[GateResult] = []
        unchecked: list[str] = []
        many = len(self.servers) > 1
        for server, view in zip(self.servers, snap.servers):
            if server.resolved is None or view.evaluation is None or server.refusal is not None or not view.forwards:
                continue
            for g in check_gates(view.evaluation, server.resolved.gates, view.observed, self._decode(server)):
                gates.append(replace(g, metric=f"{g.metric} of {server.follower.name}") if many else g)
            gates += list(server.worst.values())
            if self.options.max_scrape_errors is not None and server.metrics_url is not None:
                gates.append(GateResult("max_scrape_errors", f"failed scrapes of {server.metrics_url}", float(view.metrics_errors),
                                        float(self.options.max_scrape_errors), "<=", "batches",
                                        view.metrics_errors <= self.options.max_scrape_errors,
                                        view.metrics_error or ""))
            if not server.windows_gated and server.resolved.gates != Gates():
                unchecked.append(f"{server.follower.name}: {server.run.forwards if server.run else 0:,} forwards, fewer than one "
                                 f"{self.options.window_forwards:,}-forward window: the window gates were not checked")
        refusals = tuple(s.refusal for s in self.servers if s.refusal is not None)
        notes = tuple(line for s in self.servers for line in (s.lines.summary.launches_note(s.follower.name),
                                                              s.lines.summary.skipped_note(s.follower.name), *s.refused_notes())
                      if line is not None)
        return WatchReport(snap, tuple(gates), refusals, stopped_by, tuple(unchecked), notes)
