"""Planning never pays for torch: importing the CLI and running `plan` leaves torch unimported."""

import subprocess
import sys

CODE = """
import sys
from typer.testing import CliRunner
import cpbcg.planner, cpbcg.cli
result = CliRunner().invoke(cpbcg.cli.app, ["plan", "--format", "json"])
assert result.exit_code == 0, result.output
result = CliRunner().invoke(cpbcg.cli.app, ["layout", "1534", "161", "353"])
assert result.exit_code == 0, result.output
print("torch" in sys.modules)
"""


def test_plan_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
