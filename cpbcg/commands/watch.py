"""`cpbcg watch`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations


from cpbcg.watching.session import WatchOptions


def watch_options(**fields: object) -> WatchOptions:
    """`WatchOptions` from the command's values (None values keep the defaults)."""
    return WatchOptions(**{k: v for k, v in fields.items() if v is not None})  # type: ignore[arg-type]


