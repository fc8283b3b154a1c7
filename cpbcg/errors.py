"""One exception tree for cpbcg; the CLI maps every `CpbcgError` to exit code 2.

Exit codes (also in the README): 0 ok, 1 a gate failed, 2 bad input or usage.
"""

from __future__ import annotations


class CpbcgError(Exception):
    """Base of every error cpbcg raises on purpose; its message is one line for the user."""

    exit_code = 2


class TraceError(CpbcgError):
    """A trace file is missing, malformed or empty. Message starts with `FILE:LINE:`."""


class ConfigError(CpbcgError):
    """A deployment config, preset, bucket list or option value is invalid."""


class ModelError(CpbcgError):
    """The CP layout or capture model cannot be built for these settings (domain §3)."""


class CaptureError(CpbcgError):
    """CUDA-graph capture or replay failed, or a live layout does not fit a bucket."""


class ManifestError(CpbcgError):
    """A capture manifest is unreadable, of the wrong schema, or contradicts the model."""


def located(path: object, line: int | None, message: str) -> str:
    """Format `FILE:LINE: message` (or `FILE: message` when the line is unknown)."""
    return f"{path}:{line}: {message}" if line is not None else f"{path}: {message}"
