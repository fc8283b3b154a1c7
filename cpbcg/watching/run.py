"""`cpbcg watch` end to end: sources opened, the exporter started, the session run, all closed.

`cpbcg.api.watch` is the door; it supplies how a server's settings become a deployment (the
config, the log's settings, the command line: the same layers `plan` and `replay-check` use).
"""

from __future__ import annotations

import ipaddress
import time
from typing import Callable, Sequence
from urllib.parse import urlsplit

from cpbcg.errors import ConfigError, TraceError
from cpbcg.planner.arrays import FloatArray
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.planner.traces.text import gzip_magic, is_stdin
from cpbcg.watching.follow import FileFollower, StartAt, StreamFollower, parse_since
from cpbcg.watching.options import WatchOptions, default_instance
from cpbcg.watching.session import Follower, Resolved, WatchReport, WatchSession, WatchSnapshot


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9400` for IPv6; port 0 = any free port) -> `(host, port)`. Raises `ConfigError`."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--serve-metrics {text[:80]!r}: expected HOST:PORT, e.g. 127.0.0.1:9400 (port 0: any free port)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"--serve-metrics {text[:80]!r}: HOST must be an IP address or localhost") from None
    return host, int(port)


def followers_of(logs: Sequence[str], from_end: bool = False, since: str | None = None) -> list[Follower]:
    """One follower per log (`-`: standard input, at most once), each starting where `from_end` or
    `since` (`YYYY-MM-DD HH:MM[:SS]`, the log's clock) says (`follow.StartAt`). Raises `ConfigError`."""
    if not logs:
        raise ConfigError("watch: give one or more server logs (or - for standard input)")
    if sum(1 for p in logs if is_stdin(p)) > 1 or len(set(logs)) != len(logs):
        raise ConfigError("watch: each log (and - for standard input) can be followed once")
    for p in logs:
        if not is_stdin(p) and gzip_magic(p):
            raise ConfigError(f"{p}: gzip-compressed: watch follows plain-text server logs only (as the server writes them); "
                              "give a compressed log to `cpbcg plan --trace` or `cpbcg replay-check`")
    if from_end and since is not None:
        raise ConfigError("--from-end and --since: give one (where judging starts)")
    if from_end and any(is_stdin(p) for p in logs):
        raise ConfigError("--from-end: standard input has no end to start from (give --since TIME, or pipe only new lines)")
    try:
        stamp = parse_since(since) if since is not None else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return [StreamFollower(start=StartAt(since=stamp)) if is_stdin(p) else FileFollower(str(p), StartAt(since=stamp), from_end)
            for p in logs]


def watch_logs(logs: Sequence[str], resolve: Callable[[LogSettings], Resolved], options: WatchOptions, *,
               metrics_urls: Sequence[str] = (), serve_metrics: str | None = None,
               baseline: Callable[[Resolved], FloatArray | None] | None = None,
               on_snapshot: Callable[[WatchSnapshot], None] | None = None, baseline_trace_is_stdin: bool = False,
               note: Callable[[str], None] = lambda text: None, instances: Sequence[str] = (), from_end: bool = False,
               since: str | None = None) -> WatchReport:
    """Follow `logs` (module doc). `metrics_urls` and `instances` (the replica of each log, the
    `instance` label; the last given, or `default_instance()`, for the rest) pair with `logs` in order;
    `from_end` / `since` say where judging starts (`followers_of`). Raises `ConfigError`
    for bad options (an address in use for `serve_metrics`, a gzip-compressed log), `TraceError` for an unreadable log."""
    if len(metrics_urls) > len(logs):
        raise ConfigError(f"--metrics-url: {len(metrics_urls)} given for {len(logs)} logs (one per log, in order)")
    for url in metrics_urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--metrics-url {url[:80]!r}: expected http://HOST:PORT/metrics")
        try:
            parts = urlsplit(url)
            host, _ = parts.hostname, parts.port  # .port raises ValueError for a port out of range or not a number
        except ValueError as exc:
            raise ConfigError(f"--metrics-url {url[:80]!r}: {exc}: expected http://HOST:PORT/metrics") from None
        if not host:  # `http://`, `http://:30000/metrics`: every scrape would fail
            raise ConfigError(f"--metrics-url {url[:80]!r}: no host: expected http://HOST:PORT/metrics")
    if baseline_trace_is_stdin:
        raise ConfigError("--baseline-trace -: standard input is for a followed log; give the planned trace as a file")
    if len(instances) > len(logs):
        raise ConfigError(f"--instance: {len(instances)} given for {len(logs)} logs (one per log, in order)")
    if any(not name.strip() or len(name) > 200 or not name.isprintable() for name in instances):
        raise ConfigError("--instance: a name of 1 to 200 printable characters")
    address = parse_address(serve_metrics) if serve_metrics is not None else None
    followers = followers_of(logs, from_end, since)
    exporter = None
    subscribers: list[Callable[[WatchSnapshot], None]] = []
    try:
        if address is not None:
            from cpbcg.watching.exporter import Exporter

            try:
                exporter = Exporter(*address)
            except OSError as exc:  # the address is the option's value: name both (bad input, exit 2)
                raise ConfigError(f"--serve-metrics {serve_metrics}: {(exc.strerror or str(exc)).lower()}") from None
            subscribers.append(exporter.publish)
            note(f"cpbcg: note: serving metrics at {exporter.url}")
        if on_snapshot is not None:
            subscribers.append(on_snapshot)
        session = WatchSession(followers, resolve, options, metrics_urls=metrics_urls, subscribers=subscribers,
                               baseline=baseline, note=note, instances=list(instances) or [default_instance()])
        started = time.monotonic()
        report = session.run()
        if options.duration_s is not None or options.max_forwards is not None:  # bounded: waited for it (tail -F) all run long
            for f in followers:
                if isinstance(f, FileFollower) and not f.appeared:
                    raise TraceError(f"{f.path}: no such file (waited {time.monotonic() - started:.0f} s)")
        return report
    finally:
        for f in followers:
            f.close()
        if exporter is not None:
            exporter.close()
