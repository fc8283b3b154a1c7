"""Atomic file output: write to a temporary file beside the target, then rename over it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write `data` to `path` so that readers see either the old file or the whole new one.

    Raises `OSError` if the directory is not writable; no partial file is ever left behind.
    A target that exists and is not a regular file (a device or pipe) is written in place.
    """
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    if target.exists() and not target.is_file():  # /dev/null, a FIFO, /dev/stdout: never rename over it
        with open(target, "wb") as handle:
            handle.write(payload)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
