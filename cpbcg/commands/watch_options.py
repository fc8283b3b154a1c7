"""`cpbcg watch`'s own options, each declared once on `WatchCommandOptions` (its `Flag` or
`Argument`: flags, help, bounds; the field's default); the command line is derived from it
(`cpbcg.cli.options.with_options`) and the use case (`cpbcg.commands.watch`) reads it. Light on
purpose: `cpbcg watch --help` reads it. The window, stop and scrape-gate options are declared once,
on the library's `WatchOptions` (`cpbcg.watching.options`), which the command spreads beside these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

from cpbcg.outputs.console import OutputFormat
from cpbcg.settings import FORMAT_FLAG, Argument, Flag
from cpbcg.watching.options import WatchOptions

__all__ = ["WatchCommandOptions", "WatchOptions"]
"""`WatchOptions` is re-exported for the command line (which reaches the library through `cpbcg.commands`)."""


@dataclass(frozen=True)
class WatchCommandOptions:
    """Everything `watch` takes besides the shared deployment, scheduler and gate groups."""

    logs: Annotated[list[str], Argument("SGLang server logs to follow like `tail -F` (rotation and truncation survive); `-` reads standard input (`kubectl logs -f POD | cpbcg watch -`). One server each.", metavar="LOG...")]
    metrics_url: Annotated[Optional[list[str]], Flag(("--metrics-url",), "The server's SGLang metrics endpoint (`--enable-metrics`; http://HOST:PORT/metrics), scraped every --interval: prefill passes by mode, graph memory and capture time beside the log. Repeatable: one per LOG, in order.", metavar="URL", show_default=False)] = None
    serve_metrics: Annotated[Optional[str], Flag(("--serve-metrics",), "Serve cpbcg_* Prometheus metrics over HTTP on HOST:PORT (port 0: any free port, printed on stderr); docs/watch.md lists them.", metavar="HOST:PORT", show_default=False)] = None
    baseline_trace: Annotated[Optional[Path], Flag(("--baseline-trace",), "The trace the list was planned on (any format plan reads): the windows report the drift of their size distribution from it.", metavar="TRACE", show_default=False)] = None
    instance: Annotated[Optional[list[str]], Flag(("--instance",), "The replica this watch reports for: the `instance` label on every cpbcg_* metric and in the JSON, so the rules and the dashboard tell replicas apart. Default: $POD_NAME, else $HOSTNAME, else the host's name. Repeatable: one per LOG, in order (the last given for the rest).", metavar="NAME", show_default=False)] = None
    from_end: Annotated[bool, Flag(("--from-end",), "Judge only the lines written after watch starts (a restarted sidecar): the log's start-up output is still read for the server's settings and restarts; its earlier forwards are not judged.")] = False
    since: Annotated[Optional[str], Flag(("--since",), "Judge only the forwards from the first line stamped at or after TIME (YYYY-MM-DD HH:MM[:SS], the log's own clock); the start-up output before it is still read.", metavar="TIME", show_default=False)] = None
    max_eager: Annotated[Optional[list[str]], Flag(("--max-eager",), "Gate: at most N eager forwards for REASON (as replay-check), over the run and over every window. Repeatable.", metavar="REASON=N", show_default=False)] = None
    output_format: Annotated[OutputFormat, FORMAT_FLAG] = OutputFormat.table
