"""Torch stays inside the capture run: the package, its records, the manifest writer and every
`--help` load without it."""

import subprocess
import sys

CODE = """
import sys
from typer.testing import CliRunner
import cpbcg.graph_capture, cpbcg.graph_capture.records, cpbcg.graph_capture.estimate, cpbcg.manifest, cpbcg.planner.sampling
from cpbcg.graph_capture import CaptureSettings, CaptureResult, run_capture
import cpbcg.cli
for args in (["--help"], ["capture", "--help"], ["replay-check", "--help"]):
    result = CliRunner().invoke(cpbcg.cli.app, args)
    assert result.exit_code == 0, result.output
print("torch" in sys.modules)
"""


def test_capture_package_and_help_do_not_import_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_capture_library_errors_name_no_flags():
    """Every message a capture module raises names config keys, never a command-line flag."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "cpbcg" / "graph_capture"
    raised = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                texts = [n.value for n in ast.walk(node.exc) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                raised += [(path.name, t) for t in texts]
    assert len(raised) > 10  # the walk sees the messages
    assert [(name, t) for name, t in raised if "--" in t] == []


def test_cpbcg_capture_is_the_api_function_whatever_was_imported_first():
    """The capture harness package is `cpbcg.graph_capture`: importing it (or the CLI's capture
    command) never replaces the public `cpbcg.capture` function with a module."""
    code = (
        "import cpbcg, cpbcg.api\n"
        "first = cpbcg.capture\n"
        "import cpbcg.graph_capture, cpbcg.graph_capture.records, cpbcg.cli.capture_cmd\n"
        "print(first is cpbcg.api.capture, cpbcg.capture is cpbcg.api.capture, callable(cpbcg.capture))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
