"""Request-trace options that a request trace, once read, gives nothing to act on are named in a
warning, never dropped without a word (`notes.unused_request_option_notes`)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cpbcg.cli import app

ASSETS = Path(__file__).parent / "assets" / "requests"
runner = CliRunner()


def warnings(args: list[str]) -> list[str]:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return [line for line in result.stderr.splitlines() if line.startswith("cpbcg: warning:")]


@pytest.mark.parametrize("command", [["plan", "--no-recommend"], ["replay-check", "--report-only"]])
def test_rate_on_a_trace_with_arrival_times_is_named(command):
    timed = str(ASSETS / "azure.csv")
    (line,) = warnings([*command, "-t", timed, "--rate", "100"])
    assert line == (f"cpbcg: warning: --rate applies to requests without arrival times; {timed} has them, so they are used "
                    "(--time-scale changes the load)")
    assert warnings([*command, "-t", str(ASSETS / "vidur.csv"), "--rate", "100"]) == []  # no times: --rate is the arrival rate


def test_burstgpt_filters_on_another_format_are_named():
    azure = str(ASSETS / "azure.csv")
    (line,) = warnings(["plan", "--no-recommend", "-t", azure, "--model", "GPT-4", "--log-type", "Conversation log"])
    assert line == f"cpbcg: warning: --model, --log-type filter BurstGPT rows only; {azure} is azure, so every row was read"
    assert warnings(["plan", "--no-recommend", "-t", str(ASSETS / "burstgpt.csv"), "--model", "ChatGPT"]) == []


def test_max_eager_help_names_every_eager_reason():
    import typing

    from cpbcg.commands.replay_check_options import ReplayCheckOptions
    from cpbcg.planner.model.selector import EAGER_REASONS

    help_text = typing.get_type_hints(ReplayCheckOptions, include_extras=True)["max_eager"].__metadata__[0].help
    listed = help_text[help_text.index("(") + 1:help_text.index(")")].split(", ")
    assert listed == [r.value for r in EAGER_REASONS]
