"""The typer application object and the error boundary every command goes through."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import zlib
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Callable, TypeVar

import typer
import typer._click as click  # typer vendors click: its Command, Context and help formatter
import typer.core
import typer.main
from typer._click.utils import make_default_short_help

from cpbcg import __version__
from cpbcg.cli.coerce import quick_coercion
from cpbcg.outputs.console import MAX_WIDTH, drop_stderr, held_stderr
from cpbcg.errors import MAX_MESSAGE_CHARS, CpbcgError, ExitCode, exit_code_line, one_line
from cpbcg.engines.sglang.release import SGLANG_VERSION

COMMANDS: dict[str, tuple[str, str]] = {
    "batches": ("cpbcg.cli.batches_cmd", "Turn a request trace into the prefill forwards the server would run (the scheduler "
                "simulation, docs/scheduler.md) and write them as a batch trace: `{\"extend_seq_lens\": [...], \"count\": k}` "
                "per line, identical batches folded into `count`."),
    "layout": ("cpbcg.cli.layout_cmd", "Explain one batch: the zigzag blocks each rank holds, logical tokens and physical rows "
               "per rank, and which captured bucket the runtime would replay it in, and why."),
    "plan": ("cpbcg.cli.plan_cmd", "Replay a trace through the runtime's bucket selector, report how the configured list "
             "serves it (coverage, padding, eager forwards by reason, rescued forwards, hits per bucket), and recommend "
             "the list to capture: validated out of sample, with the flags to deploy it."),
    "presets": ("cpbcg.cli.presets_cmd", "List the shipped deployment presets (use one with `--config NAME`)."),
    "replay-check": ("cpbcg.cli.replay_check_cmd", "Check in CI that a trace's batches replay in the captured graphs, and "
                     "fail the build when they do not."),
    "capture": ("cpbcg.cli.capture_cmd", "Capture breakable CUDA graphs per bucket like the server, replay them with the "
                "worst live layouts each bucket admits, check that each replay equals the same pieces run eagerly bit for "
                "bit and matches an unsharded float32 forward, and measure them."),
    "watch": ("cpbcg.cli.watch_cmd", "Follow running SGLang servers' logs and judge their prefill graphs live: observed and "
              "modelled coverage, eager forwards by reason, padding, forwards above the largest bucket, drift and what a "
              "refitted list would gain, over the run and rolling windows, per server and DP rank."),
    "check-server": ("cpbcg.cli.check_server_cmd", "Say what SGLang 0.5.23 would do with a launch command on a model and a "
                     "GPU: start or refuse (which check, its message), capture CP prefill graphs or not and why, and the "
                     "resolved page size, chunk and prefill graph list (as captured, rounded)."),
}
"""Every command, in the order `cpbcg --help` lists them: its module (imported only when the
command runs or its help is shown, so `cpbcg --help` loads none of them; click's lazy-group
pattern) and the first sentence of its help, which `cpbcg --help` shortens as click does
(`make_default_short_help`). tests/test_cli_lazy.py checks each sentence against the command's
docstring (the text's one owner) and that the listing equals the loaded commands' listing."""


class _LazyCommands(MutableMapping[str, click.Command]):
    """A group's `commands`: `COMMANDS`' names, each built into its click command on first access
    (importing its module registers it on `app`; typer then builds that one command)."""

    def __init__(self, built: MutableMapping[str, click.Command]) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = _build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS.keys() | self._built.keys())

    def is_built(self, name: str) -> bool:
        return name in self._built


def _build(name: str) -> click.Command:
    """Import the command's module (its `@app.command()` registers it) and build its click command."""
    importlib.import_module(COMMANDS[name][0])
    for info in app.registered_commands:
        if info.callback is not None and (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return quick_coercion(typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                                   rich_markup_mode=app.rich_markup_mode))
    raise LookupError(f"{COMMANDS[name][0]} registers no command {name!r}")  # a programming error, not input


class LazyGroup(typer.core.TyperGroup):
    """The root group: commands load on first use (`COMMANDS`); `--help` lists them unloaded."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commands = _LazyCommands({name: quick_coercion(command) for name, command in self.commands.items()})  # built by typer: loaded before

    def get_help_option(self, ctx: click.Context) -> typer.core.TyperOption | None:
        """click's `--help`, defaulting to False: typer coerces a None through a pydantic adapter,
        and importing pydantic would double the time of `cpbcg COMMAND --help`."""
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The names in `COMMANDS`' order, none loaded (typer's own reads every command)."""
        return list(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing (`TyperGroup.format_commands`), from `COMMANDS` for commands not loaded."""
        commands = self.commands
        assert isinstance(commands, _LazyCommands)
        names = [name for name in self.list_commands(ctx) if not (commands.is_built(name) and commands[name].hidden)]
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))
        rows = [(name, commands[name].get_short_help_str(limit) if commands.is_built(name) or name not in COMMANDS
                 else make_default_short_help(COMMANDS[name][1], limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="cpbcg",
    cls=LazyGroup,
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
        with held_stderr():  # one refusal path: notes wait until the input is known good
            return _refusing(command, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _refusing(command: Callable, *args: object, **kwargs: object) -> object:
    """Run `command`; a refusal is its one error line, printed first (held notes dropped)."""
    try:
        return command(*args, **kwargs)
    except CpbcgError as exc:
        report_error(exc)
        raise typer.Exit(exc.exit_code) from None
    except BrokenPipeError:  # the reader of stdout went away: `cpbcg.cli.main` exits 141, silently
        raise
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        report_error(f"{where}{exc.strerror or exc}")
        raise typer.Exit(ExitCode.BAD_INPUT) from None
    except (EOFError, zlib.error) as exc:  # a truncated or corrupt compressed input
        report_error(f"truncated or corrupt compressed input: {exc}")
        raise typer.Exit(ExitCode.BAD_INPUT) from None

def report_error(message: object) -> None:
    """Print `cpbcg: error: MESSAGE` to stderr: the one place every error line is made. Always
    plain text (no colour, whatever FORCE_COLOR says), one line, at most `MAX_MESSAGE_CHARS`;
    the first line on stderr (notes held by `error_boundary` are dropped)."""
    drop_stderr()
    sys.stderr.write(one_line(f"cpbcg: error: {message}", MAX_MESSAGE_CHARS) + "\n")
    sys.stderr.flush()
