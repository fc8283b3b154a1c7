"""One exception tree for cpbcg; the CLI maps every `CpbcgError` to exit code 2.

Exit codes (also in the README): 0 ok, 1 a gate failed, 2 bad input or usage.
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 300
"""Longest error line the CLI prints, `cpbcg: error: ` included."""
MAX_LIBRARY_MESSAGE_CHARS = MAX_MESSAGE_CHARS - len("cpbcg: error: ")
"""Longest `CpbcgError` message, so that the CLI's line fits `MAX_MESSAGE_CHARS`."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` as one plain line of at most `limit` characters: terminal escape codes removed,
    newlines and tabs turned into spaces, other control characters escaped (`\\x00`), runs of
    spaces collapsed. When too long, a word over `LONG_WORD_CHARS` (a very long path) is cut in its
    middle first, so the line number and the reason after it stay; then the tail is cut with `...`
    (the file, line and key come first, so they stay)."""
    plain = _CONTROL.sub(_escape, _ANSI.sub("", str(text)))
    plain = " ".join(plain.split())
    if len(plain) > limit:
        words = plain.split(" ")
        i = max(range(len(words)), key=lambda j: len(words[j]))
        if len(words[i]) > LONG_WORD_CHARS:  # only as much as needed, never below LONG_WORD_CHARS
            keep = max(len(words[i]) - (len(plain) - limit) - 3, LONG_WORD_CHARS)
            words[i] = words[i][: keep * 2 // 5] + "..." + words[i][len(words[i]) - (keep - keep * 2 // 5):]
            plain = " ".join(words)
    return plain if len(plain) <= limit else plain[: limit - 3].rstrip() + "..."


LONG_WORD_CHARS = 200
"""Words longer than this (paths, mostly) are cut in the middle when a message is too long
(a checkout path stays whole; a 400-character one is shortened)."""


def _escape(match: re.Match) -> str:
    char = match.group()
    return " " if char in "\t\n\r\v\f" else f"\\x{ord(char):02x}"


class CpbcgError(Exception):
    """Base of every error cpbcg raises on purpose; its message is one line for the user,
    at most `MAX_LIBRARY_MESSAGE_CHARS` characters (made so here, whatever the raiser passed)."""

    exit_code = 2

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(one_line(message, MAX_LIBRARY_MESSAGE_CHARS), *args)


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
