"""Planning never pays for torch: importing the CLI and running `plan` leaves torch unimported (and
the embedded default, packed by the Python event loop, leaves numba unimported too; nor does it
load `numpy.ma`, about 10 ms, which numpy 2.x imports on the first plain `np.unique`)."""

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
print("torch" in sys.modules, "numba" in sys.modules, "numpy.ma" in sys.modules)
"""


def test_plan_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"


IMPORT_ALL = """
import importlib, pkgutil, sys
import cpbcg.api, cpbcg.cli, cpbcg.planner, cpbcg.engines, cpbcg.assembly
for package in (cpbcg.planner, cpbcg.engines, cpbcg.assembly):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
print(sorted(name for name in sys.modules if name.split(".")[0] == "torch"))
"""


def test_no_planner_module_imports_torch():
    """Every module of `cpbcg.planner`, the engines and the assembly (and the API and CLI) imports without torch: torch lives
    in `cpbcg.graph_capture` alone (CI also runs the suite where torch is not installed)."""
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
