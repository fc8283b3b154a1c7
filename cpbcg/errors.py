"""One exception tree for cpbcg, the one `FILE:LINE: KEY: message` formatter (`located`), and
the exit codes as one `IntEnum` (`ExitCode`): the README's table and the `--help` line are made
from it (`exit_code_table`, `exit_code_line`; a test checks the README).
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Sequence


class ExitCode(IntEnum):
    """Exit codes of the `cpbcg` command (`ExitCode.meaning` and `.summary` say what each means)."""

    OK = 0
    GATE_FAILED = 1
    BAD_INPUT = 2
    CAPTURE_INCOMPLETE = 3
    ABORTED = 130
    TERMINATED = 143

    @property
    def summary(self) -> str:
        """A few words, for the `--help` line."""
        return _EXIT_SUMMARY[self]

    @property
    def meaning(self) -> str:
        """The README table's sentence."""
        return _EXIT_MEANING[self]


_EXIT_SUMMARY = {
    ExitCode.OK: "ok",
    ExitCode.GATE_FAILED: "a gate (or a capture's verification) failed",
    ExitCode.BAD_INPUT: "bad input or usage",
    ExitCode.CAPTURE_INCOMPLETE: "capture incomplete",
    ExitCode.ABORTED: "interrupted (Ctrl-C)",
    ExitCode.TERMINATED: "terminated (SIGTERM)",
}
_EXIT_MEANING = {
    ExitCode.OK: "ok (all gates passed)",
    ExitCode.GATE_FAILED: "a gate failed (`replay-check`, `watch`), a server's prefill graphs are off (`watch`: by its start-up "
                          "output, or every forward's `cuda graph: False`), a guarantee failed (`plan --check-guarantee`), a captured "
                          "bucket failed verification (`capture`), or the launch command would not start or run without CP prefill "
                          "graphs (`check-server`; SGLang's argparse refusing an unrecognized flag or an ambiguous prefix such as "
                          "`--page` is such a refusal there, and bad input, exit 2, for the commands that plan)",
    ExitCode.BAD_INPUT: "bad input or usage: one plain line `cpbcg: error: FILE:LINE: KEY: ...` of at most 400 characters, "
                        "printed before any note (notes wait until the input is known good), no traceback, nothing half-written",
    ExitCode.CAPTURE_INCOMPLETE: "capture incomplete (`capture`): a bucket was skipped (memory estimate above free memory, out of "
                                 "memory, capture error, or another torchrun rank lost it); the manifest lists it under "
                                 "`skipped_buckets` and holds the rest; a verification failure (1) wins over 3",
    ExitCode.ABORTED: "interrupted (Ctrl-C; `watch` instead ends its run there, prints its final result line and the gates' "
                      "verdict on what it read, and exits by its gates: 0 or 1)",
    ExitCode.TERMINATED: "terminated by SIGTERM (`kill`, a container stop): the process ends by the signal, which the shell "
                         "reports as 128 + 15; nothing half-written (files are replaced atomically). `watch` instead ends its "
                         "run there like Ctrl-C (`stopped_by: terminated`) and exits by its gates: 0 or 1",
}


def exit_code_line() -> str:
    """`Exit codes: 0 ok, 1 ..., 2 ..., 3 ..., 130 ..., 143 ...` for `cpbcg --help`: every `ExitCode`."""
    return "Exit codes: " + ", ".join(f"{code.value} {code.summary}" for code in ExitCode) + "."


def exit_code_table() -> str:
    """The README's exit-code table (markdown)."""
    rows = [f"| {code.value} | {code.meaning} |" for code in ExitCode]
    return "\n".join(["| code | meaning |", "|---|---|", *rows]) + "\n"

MAX_MESSAGE_CHARS = 400
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

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(one_line(message, MAX_LIBRARY_MESSAGE_CHARS), *args)


class TraceError(CpbcgError):
    """A trace file is missing, malformed or empty. Message starts with `FILE:LINE:`."""


class ConfigError(CpbcgError):
    """A deployment config, preset, bucket list or option value is invalid."""


class ModelError(CpbcgError):
    """The CP layout or capture model cannot be built for these settings (docs/model.md "Local capacity")."""


class CaptureError(CpbcgError):
    """CUDA-graph capture or replay failed, or a live layout does not fit a bucket."""


class ManifestError(CpbcgError):
    """A capture manifest is unreadable, of the wrong schema, or contradicts the model."""


SUGGEST_CUTOFF = 0.75
"""The least `difflib` similarity of a suggested name: a typo (`--attn-cp-sise`, 0.93; `cp_sise`) gets one, an
unrelated word (`--bogus` against `--host`, 0.62) none."""


def did_you_mean(word: str, known: Sequence[str]) -> str | None:
    """The name of `known` closest to a misspelt `word` (difflib, `SUGGEST_CUTOFF`), None when none is close:
    the one rule of every "did you mean" (SGLang flags, config keys)."""
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=SUGGEST_CUTOFF)
    return close[0] if close else None


def located(path: object, line: int | None, message: str, key: str | None = None) -> str:
    """The one error-location formatter: `FILE:LINE: KEY: message`, leaving out the line or the
    key when unknown (`FILE: message`)."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return f"{where}: {key}: {message}" if key else f"{where}: {message}"


def short_repr(value: object, limit: int = 40) -> str:
    """`repr(value)`, cut to `limit` characters (keys and values in messages)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
