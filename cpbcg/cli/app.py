"""The typer application object and the error boundary every command goes through."""

from __future__ import annotations

import functools
import os
import sys
import zlib
from typing import Annotated, Callable, TypeVar

import typer

from cpbcg import __version__
from cpbcg.outputs.console import MAX_WIDTH
from cpbcg.errors import MAX_MESSAGE_CHARS, CpbcgError, ExitCode, exit_code_line, one_line
from cpbcg.settings import SGLANG_VERSION

app = typer.Typer(
    name="cpbcg",
    help=(
        "Plan, capture and check CUDA-graph buckets for context-parallel (CP) prefill "
        f"with breakable CUDA graphs. Models SGLang {SGLANG_VERSION}.\n\n"
        "Start with `cpbcg plan` (embedded default workload), then `cpbcg plan --trace lens.jsonl`.\n\n"
        + exit_code_line()
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: 0.17 s for `plan --help` where rich panels take 0.29 s
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cpbcg {__version__}")
        raise typer.Exit(ExitCode.OK)


ENV_INTS = {
    "CPBCG_WIDTH": (0, MAX_WIDTH), "COLUMNS": (1, 10_000), "LINES": (1, 10_000),
    "WORLD_SIZE": (1, 1024), "LOCAL_RANK": (0, 1023), "CPBCG_JOBS": (1, 1024),
}
"""Integer environment variables cpbcg (or rich, or torchrun) reads, with their accepted range."""
ENV_FILES = ("GITHUB_STEP_SUMMARY",)
"""Environment variables naming a file cpbcg appends to: never a FIFO or device."""


def sanitize_environment() -> None:
    """Drop bad environment values with a one-line warning each instead of failing later:
    integers (`ENV_INTS`) that are not ASCII digits in range (`CPBCG_WIDTH=abc`, `COLUMNS=²`),
    and `ENV_FILES` that name a FIFO, socket or device (reading a FIFO to append would block; a
    directory is left to the writer, which warns that it cannot append)."""
    for name, (low, high) in ENV_INTS.items():
        raw = os.environ.get(name)
        if raw is None or raw.strip() == "":
            continue
        text = raw.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 6 and low <= int(text) <= high):
            _drop(name, raw, f"not a whole number from {low} to {high}")
    for name in ENV_FILES:
        raw = os.environ.get(name)
        if raw:
            try:
                bad = os.path.exists(raw) and not os.path.isfile(raw) and not os.path.isdir(raw)
            except (OSError, ValueError):
                bad = True
            if bad:
                _drop(name, raw, "not a regular file")


def _drop(name: str, raw: str, why: str) -> None:
    sys.stderr.write(one_line(f"cpbcg: warning: ignoring {name}={raw!r}: {why}", MAX_MESSAGE_CHARS) + "\n")
    del os.environ[name]


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Plan, capture and check CUDA-graph buckets for context-parallel (CP) prefill."""
    sanitize_environment()


def error_boundary(command: F) -> F:
    """Turn `CpbcgError` (and unwritable outputs) into a one-line message and `ExitCode.BAD_INPUT`."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except CpbcgError as exc:
            report_error(exc)
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            report_error(f"{where}{exc.strerror or exc}")
            raise typer.Exit(ExitCode.BAD_INPUT) from None
        except (EOFError, zlib.error) as exc:  # a truncated or corrupt compressed input
            report_error(f"truncated or corrupt compressed input: {exc}")
            raise typer.Exit(ExitCode.BAD_INPUT) from None

    return wrapper  # type: ignore[return-value]


def report_error(message: object) -> None:
    """Print `cpbcg: error: MESSAGE` to stderr: the one place every error line is made. Always
    plain text (no colour, whatever FORCE_COLOR says), one line, at most `MAX_MESSAGE_CHARS`."""
    sys.stderr.write(one_line(f"cpbcg: error: {message}", MAX_MESSAGE_CHARS) + "\n")
    sys.stderr.flush()
