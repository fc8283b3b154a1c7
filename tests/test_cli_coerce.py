"""Option values coerced without pydantic (`cpbcg.cli.coerce`) come out exactly as typer's own
adapter gives them: the same value and type, or the same error, for every option of every command."""

import subprocess
import sys

import pytest
import typer.main
import typer._click as click

from cpbcg.cli import app
from cpbcg.cli.app import COMMANDS
from cpbcg.cli.coerce import QuickCoercion
from cpbcg.cli.options import finite_number

TEXTS = ["1", "0", "8", "007", "+8", " 8", "8_0", "1e3", "-1", "0.5", "0.30", "1.", "nan", "inf", "99999999999999999999",
         "", " ", "auto", "json", "table", "coverage", "csv", "x", "a.jsonl", "1,2", "2048,2304"]


def _outcome(coerce, value, param, ctx):
    try:
        out = coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # the error must be typer's, word for word
        return ("raised", type(exc), str(exc))
    return ("value", type(out), [type(item) for item in out] if isinstance(out, (list, tuple)) else None, out)


def _root():
    return typer.main.get_command(app)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_quick_coercion_equals_typers_adapter(name):
    root = _root()
    command = root.get_command(click.Context(root), name)
    ctx = click.Context(command)
    params = [*command.params, command.get_help_option(ctx)]
    quick = [p for p in params if isinstance(getattr(p, "_runtime_param", None), QuickCoercion)]
    assert len(quick) == len(params)  # every option and argument, --help included
    checked = 0
    for param in quick:
        runtime = param._runtime_param
        values = [None, param.default, *TEXTS]
        if param.multiple or param.nargs == -1:
            values += [tuple(TEXTS[:3]), ("a.jsonl",), ()]
        for value in values:
            assert _outcome(runtime.coerce, value, param, ctx) == _outcome(runtime.full().coerce, value, param, ctx), (param.name, value)
            checked += 1
    assert checked > 10 * len(quick)


def test_a_float_option_parses_as_pydantic_would():
    parse = finite_number(0.0, 0.9)
    assert parse("0.5") == 0.5 and parse(0.3) == 0.3 and type(parse(0)) is float
    assert parse("1e-1") == 0.1 and parse(" 0.5") == 0.5  # pydantic reads these; the plain path does not
    for text in ["0.95", "-0.1", "nan", "inf", "x"]:
        with pytest.raises(Exception) as plain:
            parse(text)
        assert type(plain.value).__name__ == "BadParameter"
    with pytest.raises(Exception, match="less than or equal to 0.9"):
        parse("0.95")


def test_plan_builds_no_pydantic_adapter():
    # typer would build one TypeAdapter per option (and import typer._adapters for it)
    code = ("import sys; from cpbcg.cli import main; sys.argv = ['cpbcg', 'plan', '-f', 'json', '--no-recommend']\n"
            "try: main()\nexcept SystemExit: pass\nprint('typer._adapters' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "False", out.stderr
