"""The typer application object and the error boundary every command goes through."""

from __future__ import annotations

import functools
import zlib
from typing import Annotated, Callable, TypeVar

import typer

from cpbcg import __version__
from cpbcg.errors import CpbcgError

app = typer.Typer(
    name="cpbcg",
    help=(
        "Plan, capture and check CUDA-graph buckets for context-parallel (CP) prefill "
        "with breakable CUDA graphs.\n\n"
        "Start with `cpbcg plan` (embedded default workload), then `cpbcg plan --trace lens.jsonl`.\n\n"
        "Exit codes: 0 ok, 1 a gate failed, 2 bad input or usage."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cpbcg {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Plan, capture and check CUDA-graph buckets for context-parallel (CP) prefill."""


def error_boundary(command: F) -> F:
    """Turn `CpbcgError` (and unwritable outputs) into a one-line message and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except CpbcgError as exc:
            typer.echo(f"cpbcg: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            typer.echo(f"cpbcg: error: {where}{exc.strerror or exc}", err=True)
            raise typer.Exit(2) from None
        except (EOFError, zlib.error) as exc:  # a truncated or corrupt compressed input
            typer.echo(f"cpbcg: error: truncated or corrupt compressed input: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
