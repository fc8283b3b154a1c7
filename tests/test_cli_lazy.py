"""The command line loads a command's module only when that command runs or its help is shown
(`cpbcg.cli.app.COMMANDS`), and `cpbcg --help` lists the commands exactly as the loaded ones do."""

import os
import subprocess
import sys

import pytest
import typer.main
import typer._click as click
from typer._click.utils import make_default_short_help

from cpbcg.cli import app
from cpbcg.cli.app import COMMANDS


def _loaded_root() -> click.Command:
    root = typer.main.get_command(app)
    for name in COMMANDS:
        root.get_command(click.Context(root), name)  # load every command
    return root


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_sentence_is_the_commands_own(name):
    # the listing of `cpbcg --help` comes from COMMANDS without loading the command: at every
    # width it must be what click makes of the command's docstring
    command = _loaded_root().get_command(click.Context(typer.main.get_command(app)), name)
    assert command is not None and command.name == name
    for limit in range(10, 400):
        assert make_default_short_help(COMMANDS[name][1], limit) == command.get_short_help_str(limit), (name, limit)


def test_every_registered_command_is_listed_in_order():
    _loaded_root()
    registered = [info.name or typer.main.get_command_name(info.callback.__name__) for info in app.registered_commands]
    assert sorted(registered) == sorted(COMMANDS)
    root = typer.main.get_command(app)
    assert root.list_commands(click.Context(root)) == ["batches", "layout", "plan", "presets", "replay-check",
                                                       "capture", "watch", "check-server"]


LOADED = """
import sys
from cpbcg.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith("cpbcg.cli.") and m.endswith("_cmd")), "pydantic" in sys.modules)
"""


@pytest.mark.parametrize(("argv", "loaded"), [
    (["--help"], []),
    (["plan", "--help"], ["cpbcg.cli.plan_cmd"]),
    (["layout", "--help"], ["cpbcg.cli.layout_cmd"]),
    (["pln"], []),
])
def test_help_loads_only_the_command_asked_for_and_no_pydantic(argv, loaded):
    out = subprocess.run([sys.executable, "-c", LOADED.format(argv=argv)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == f"{loaded} False"


def test_a_mistyped_command_still_gets_a_suggestion():
    out = subprocess.run([sys.executable, "-m", "cpbcg", "pln"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr == "cpbcg: error: No such command 'pln'. Did you mean 'plan'? (see `cpbcg --help`)\n"


LOAD_ALL_THEN_HELP = """
import importlib
from cpbcg.cli import main
from cpbcg.cli.app import COMMANDS
for module, _ in COMMANDS.values():
    importlib.import_module(module)
main(["--help"])
"""


@pytest.mark.parametrize("columns", ["50", "90", "300"])
def test_the_root_help_is_the_same_before_and_after_the_commands_load(columns):
    env = {**os.environ, "COLUMNS": columns}
    fresh = subprocess.run([sys.executable, "-m", "cpbcg", "--help"], capture_output=True, text=True, check=True, env=env)
    loaded = subprocess.run([sys.executable, "-c", LOAD_ALL_THEN_HELP], capture_output=True, text=True, check=True, env=env)
    assert "check-server  Say what SGLang" in fresh.stdout
    assert fresh.stdout == loaded.stdout
