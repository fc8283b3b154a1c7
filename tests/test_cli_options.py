"""Options declared once (cpbcg/settings.py): every command's setting options reach the config,
the planner's defaults agree with the declarations, and docs/cli.md is the commands' own help."""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path

import importlib

import pytest
from typer.testing import CliRunner

from cpbcg import api
from cpbcg.cli import app
from cpbcg.cli.docgen import reference
from cpbcg.settings import MAX_BUCKET_TOKENS, SETTINGS, Setting

ROOT = Path(__file__).resolve().parents[1]
BY_FLAG = {s.flag: s for s in SETTINGS if s.flag}
COMMANDS = {  # command -> its one use-case call (module, function), which receives the settings as dotted overrides (argument index)
    "layout": ("cpbcg.commands.layout", "layout", 2),
    "batches": ("cpbcg.commands.batches", "batches", 2),
    "plan": ("cpbcg.commands.plan", "plan_command", 1),
    "replay-check": ("cpbcg.commands.replay_check", "check_trace", 1),
    "capture": ("cpbcg.api", "capture", 1),
}


class Reached(Exception):
    def __init__(self, overrides):
        super().__init__("reached")
        self.overrides = dict(overrides)


def sample_value(spec: Setting):
    """A valid value different from the default, and its command-line words."""
    if spec.kind is bool:
        value = not spec.default
        return value, [spec.flag if value else spec.off_flag]
    if isinstance(spec.default, Enum) or (isinstance(spec.kind, type) and issubclass(spec.kind, Enum)):
        value = list(spec.kind)[-1] if spec.default != list(spec.kind)[-1] else list(spec.kind)[0]
        return value, [spec.flag, value.value]
    if spec.kind is str:
        value = {"buckets": "64,128", "scheduler.prefix_cache": "unlimited", "server.args": "--page-size 32",
                 "server.model_config": "config.json", "server.gpu": "H200"}[spec.key]
        return value, [spec.flag, value]
    if spec.kind is int:
        value = 3 if (spec.le is None or spec.le >= 3) else int(spec.le)
        return value, [spec.flag, str(value)]
    value = 1.5 if (spec.ge or 0) >= 1 else 0.5
    return value, [spec.flag, str(value)]


def setting_options(command: str) -> list[Setting]:
    """The options of `command` declared as settings (marked `SettingKey` by `option(key)`)."""
    import inspect

    import typer._click as click
    import typer.main

    from cpbcg.cli.options import SettingKey
    from cpbcg.settings import setting

    root = typer.main.get_command(app)
    cmd = root.get_command(click.Context(root), command)
    params = inspect.signature(cmd.callback).parameters.values()
    keys = [m.key for p in params for m in getattr(p.annotation, "__metadata__", ()) if isinstance(m, SettingKey)]
    assert len(keys) == len({p.name for p in cmd.params} & {p.name for p in params
                                                         if any(isinstance(m, SettingKey) for m in getattr(p.annotation, "__metadata__", ()))})
    return [setting(key) for key in keys]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_setting_option_of_a_command_reaches_the_config(command, monkeypatch, tmp_path):
    # a hand-written option->key map once dropped `capture --align-size`: every option counts here
    specs = setting_options(command)
    assert specs, command
    module, function, index = COMMANDS[command]

    def reached(*args, **kwargs):
        raise Reached(args[index] if len(args) > index else kwargs["overrides"])

    monkeypatch.setattr(importlib.import_module(module), function, reached)
    argv, expected = [command], {}
    for spec in specs:
        value, words = sample_value(spec)
        argv += words
        expected[spec.key] = value
    trace = tmp_path / "lens.jsonl"
    trace.write_text("[64]\n")
    argv += {"layout": ["64"], "batches": ["-t", str(trace), "-o", str(tmp_path / "out.jsonl")]}.get(command, [])
    result = CliRunner().invoke(app, argv, catch_exceptions=True)
    assert isinstance(result.exception, Reached), (argv, result.output)
    got = {k: v for k, v in result.exception.overrides.items() if v is not None}
    assert got == expected, f"{command}: options lost on the way to the config"


def test_capture_takes_every_deployment_setting_but_the_strategy():
    flags = {spec.flag for spec in setting_options("capture")}
    assert flags == {"--cp-size", "--align-size", "--max-padding-factor", "--buckets", "--capture-layout",
                     "--max-context-size", "--max-capture-requests"}


def test_every_declared_flag_is_an_option_of_some_command():
    used = {spec.flag for command in COMMANDS for spec in setting_options(command)}
    assert used == set(BY_FLAG)


def test_help_states_defaults_from_the_declaration_only():
    # the help's [default: ...] comes from the default itself: change a default, the help follows
    spec = dataclasses.replace(BY_FLAG["--rate"], default=8.0)
    assert spec.help_text().endswith("[default: 8]") and "[default" not in spec.help


def test_the_planner_defaults_are_the_declared_ones():
    from cpbcg.planner.deployment import Deployment
    from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS as PLANNER_MAX
    from cpbcg.planner.costs.cost import DEFAULT_COST
    from cpbcg.planner.scheduler import SchedulerSettings

    declared = {s.key: s.default for s in SETTINGS}
    scheduler = SchedulerSettings()
    for field in dataclasses.fields(scheduler):
        assert getattr(scheduler, field.name) == declared[f"scheduler.{field.name}"], field.name
    assert (DEFAULT_COST.graph_fixed_ms, DEFAULT_COST.eager_fixed_ms, DEFAULT_COST.token_ms) == (
        declared["cost.graph_fixed_ms"], declared["cost.eager_fixed_ms"], declared["cost.token_ms"])
    dep = Deployment()
    assert (dep.cp.cp_size, dep.cp.strategy, dep.max_padding_factor, dep.capture.layout) == (
        declared["cp_size"], declared["cp_strategy"], declared["max_padding_factor"], declared["capture_layout"])
    assert PLANNER_MAX == MAX_BUCKET_TOKENS


def test_the_config_fields_come_from_the_declarations():
    from cpbcg.config import CostConfig, DeploymentConfig, GateConfig, SchedulerConfig

    from cpbcg.config import ServerConfig

    models = {"": DeploymentConfig, "scheduler": SchedulerConfig, "cost": CostConfig, "gates": GateConfig, "server": ServerConfig}
    for spec in SETTINGS:
        section, _, name = spec.key.rpartition(".")
        fields = models[section].model_fields
        field = fields[name] if name in fields else next(f for f in fields.values() if f.alias == name)  # model_config: an alias
        assert field.default == spec.default and field.description == spec.help, spec.key


def test_docs_cli_md_is_the_generated_reference():
    # regenerate with: python -m cpbcg.cli.docgen > docs/cli.md
    assert (ROOT / "docs" / "cli.md").read_text() == reference()


@pytest.mark.parametrize("args", [["plan", "--max-padding-factor", "nan"], ["plan", "--validate-fraction", "inf"], ["watch", "x.log", "--duration", "nan"], ["replay-check", "--min-coverage", "-inf"]])
def test_non_finite_option_values_are_named_as_such(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert f"expected a finite number, got {args[-1]}" in result.output, result.output
    bounded = CliRunner().invoke(app, [*args[:-1], "1e12"])  # the bounds still hold, typer's wording
    assert bounded.exit_code == 2 and "Input should be less than or equal to" in bounded.output, bounded.output


def _command_declarations() -> dict[str, dict[str, tuple[object, type, list[str]]]]:
    """Per command: click parameter name -> (its declaration: the `Flag`, `Argument` or the
    `Setting` of a `SettingKey`; the option type that declares it; its command-line spellings)."""
    import typing

    import typer._click as click
    import typer.main

    from cpbcg.cli.options import SettingKey
    from cpbcg.settings import Argument, Flag, setting

    root = typer.main.get_command(app)
    out: dict[str, dict[str, tuple[object, type, list[str]]]] = {}
    for name in root.list_commands(click.Context(root)):
        cmd = root.get_command(click.Context(root), name)
        groups = getattr(cmd.callback, "option_groups", None)
        assert groups, f"{name}: its options are not fields of option types (`with_options`)"
        declared: dict[str, tuple[object, type]] = {}
        for cls in groups.values():
            hints = typing.get_type_hints(cls, include_extras=True)
            for field in dataclasses.fields(cls):
                marks = [m for m in getattr(hints[field.name], "__metadata__", ()) if isinstance(m, (Flag, Argument, SettingKey))]
                assert len(marks) == 1, f"{name}: {cls.__name__}.{field.name} is not declared by one Flag, Argument or setting"
                mark = marks[0]
                declared[field.name] = (setting(mark.key) if isinstance(mark, SettingKey) else mark, cls)
        params = {p.name: p for p in cmd.params}
        assert sorted(set(params) - set(declared)) == [], f"{name}: parameters declared outside its option types"
        assert sorted(set(declared) - set(params)) == [], f"{name}: declared options that are not on the command line"
        out[name] = {p: (*declared[p], [*params[p].opts, *params[p].secondary_opts]) for p in params}
    return out


def test_every_option_of_every_command_comes_from_one_declaration():
    # every parameter of every command is a field of one of its option types (the command's own,
    # e.g. `PlanOptions`, or a shared group of cli/options.py) marked by its one declaration:
    # a `Flag` / `Argument` (cpbcg.settings) or a setting (`SettingKey` -> settings.SETTINGS);
    # a raw `typer.Option` on a command or a field fails here
    from cpbcg.settings import FORMAT_FLAG, Argument, Flag

    by_command = _command_declarations()
    assert {"plan", "replay-check", "batches", "capture", "watch", "layout", "check-server", "presets"} <= set(by_command)
    formats = []
    for command, params in by_command.items():
        spellings = [s for _, _, opts in params.values() for s in opts]
        assert len(spellings) == len(set(spellings)), f"{command}: a flag spelled twice"
        formats += [command for declaration, _, _ in params.values() if isinstance(declaration, (Flag, Argument)) and declaration == FORMAT_FLAG]
    assert sorted(formats) == ["check-server", "layout", "plan", "presets", "replay-check", "watch"]


def test_no_declaration_is_written_twice():
    # an option several commands share is one object (`FORMAT_FLAG`, `CONFIG_FLAG`, a shared
    # group's field), never a second `Flag(...)` with the same flags and text in the source
    import ast

    written: dict[str, list[str]] = {}
    for path in sorted((ROOT / "cpbcg").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Flag", "Argument"):
                written.setdefault(ast.unparse(node), []).append(path.name)
    assert len(written) > 50  # the walk sees the declarations
    assert {call: files for call, files in written.items() if len(files) > 1} == {}


def test_each_command_declares_its_own_options_on_its_options_type():
    # the options a command alone takes live on its options type in cpbcg/commands/ (the
    # shared groups of cpbcg/cli/options.py hold the deployment, trace, scheduler, cost and gate options)
    own = {command: {cls.__module__ for _, cls, _ in params.values() if cls.__module__.startswith("cpbcg.commands.")}
           for command, params in _command_declarations().items()}
    assert own == {"plan": {"cpbcg.commands.plan_options"}, "replay-check": {"cpbcg.commands.replay_check_options"},
                   "batches": {"cpbcg.commands.batches_options"}, "capture": {"cpbcg.commands.capture_options"},
                   "watch": {"cpbcg.commands.watch_options"}, "layout": {"cpbcg.commands.layout_options"},
                   "check-server": {"cpbcg.commands.check_server_options"}, "presets": {"cpbcg.commands.presets_options"}}
