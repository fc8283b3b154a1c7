"""`cpbcg watch`: its use case (`run`), reading `WatchCommandOptions` (declared once in
`cpbcg.commands.watch_options`) and the library's `WatchOptions` (its window, stop and gate
options, declared once there) and returning the typed `WatchReport` that `cpbcg.outputs.watch`
renders (the live view or JSON lines as it runs, then the tables and the verdict)."""

from __future__ import annotations

from typing import Callable, Mapping

from cpbcg import api
from cpbcg.commands.watch_options import WatchCommandOptions
from cpbcg.outputs.notes import launch_notes
from cpbcg.watching.options import WatchOptions
from cpbcg.watching.session import WatchReport, WatchSnapshot


def watch_options(**fields: object) -> WatchOptions:
    """`WatchOptions` from the command's values (None values keep the defaults)."""
    return WatchOptions(**{k: v for k, v in fields.items() if v is not None})  # type: ignore[arg-type]


def run(options: WatchCommandOptions, run_options: WatchOptions, config: str | None, overrides: Mapping[str, object], *,
        on_snapshot: Callable[[WatchSnapshot], None] | None = None, note: Callable[[str], None] = lambda text: None) -> WatchReport:
    """Follow `options.logs` under the deployment of `config` and dotted `overrides` until a stop
    condition of `run_options` (`cpbcg.api.watch`); `on_snapshot` receives each update, `note` each note. Raises
    `ConfigError`, `TraceError`."""
    return api.watch(options.logs, config, overrides, run_options, max_eager=options.max_eager,
                     metrics_urls=options.metrics_url or [], serve_metrics=options.serve_metrics,
                     baseline_trace=options.baseline_trace, on_snapshot=on_snapshot, note=note,
                     launch_notes=launch_notes, instances=options.instance or (), from_end=options.from_end, since=options.since)
