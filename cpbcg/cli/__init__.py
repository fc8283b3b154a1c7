"""The `cpbcg` command line: parse, call one library function, render, map errors to exit codes.

Exit codes: `cpbcg.errors.ExitCode` (one-line error, no traceback, for bad input).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from typing import NoReturn

import typer
from typer._click.exceptions import NoArgsIsHelpError  # typer vendors click; no public alias

from cpbcg.cli.app import app, report_error, sanitize_environment
from cpbcg.cli.process import tune_process
from cpbcg.errors import ExitCode
from cpbcg.outputs.console import held_stderr, release_stderr

# The commands' modules (cpbcg/cli/<name>_cmd.py) are imported only when a command runs or its
# help is shown: `cpbcg.cli.app.COMMANDS` names them.


def _exit_broken_pipe() -> NoReturn:
    """The reader of stdout went away (`cpbcg plan | head -1`): exit quietly with 128 + SIGPIPE,
    as Unix tools killed by the signal do; stdout goes to /dev/null so the final flush is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.exit(128 + signal.SIGPIPE)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. Usage errors (unknown option, value out of range) are one
    line plus a hint, exit 2, instead of a boxed panel; everything else is the app's own. What
    goes to stderr is held until the input is known good (`held_stderr`: the environment's
    warnings too), so that a refusal's error line is the first line."""
    tune_process()  # before any command imports numpy
    with held_stderr():
        _main(argv)


def _main(argv: list[str] | None) -> None:
    sanitize_environment()
    # pydantic scans every installed package's entry points for plugins when the first config
    # model is built, a cost paid on every run; the CLI uses none. An explicit setting is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        code = app(args=argv, prog_name="cpbcg", standalone_mode=False)
    except SystemExit as exc:  # typer turns a broken stdout pipe into exit 1; Unix tools exit 141
        if isinstance(exc.__context__, BrokenPipeError):
            _exit_broken_pipe()
        raise
    except BrokenPipeError:
        _exit_broken_pipe()
    except typer.Abort:
        print("cpbcg: aborted", file=sys.stderr)
        sys.exit(ExitCode.ABORTED)
    except NoArgsIsHelpError as exc:  # bare `cpbcg`: the help, readable, as click prints it (stderr, exit 2)
        release_stderr()
        print(exc.format_message(), file=sys.stderr)
        report_error("no command given: name one (e.g. `cpbcg plan`); the commands are listed above")
        sys.exit(ExitCode.BAD_INPUT)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        ctx = getattr(exc, "ctx", None)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if ctx is not None and not message.strip():  # bare `cpbcg`: show the help
            print(ctx.get_help())
            sys.exit(ExitCode.OK)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        name = getattr(exc, "option_name", None)
        if isinstance(name, str) and re.fullmatch(r"-\d+(\.\d*)?", name):  # `layout 4 -5 10`: a negative value, read as an option
            args = [p.name for p in getattr(getattr(ctx, "command", None), "params", ()) if getattr(p, "param_type_name", "") == "argument"]
            key = f"{args[0]}: " if len(args) == 1 else ""
            given = next((a for a in (argv if argv is not None else sys.argv[1:]) if a.startswith(name)), name)
            message = f"{key}{given} is negative: a length or count is a positive number"
        report_error(f"{message}{hint}")
        sys.exit(getattr(exc, "exit_code", ExitCode.BAD_INPUT))
    sys.exit(code if isinstance(code, int) else ExitCode.OK)
