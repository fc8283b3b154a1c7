"""The `cpbcg` command line: parse, call one library function, render, map errors to exit codes.

Exit codes: 0 ok, 1 a gate failed, 2 bad input or usage (one-line error, no traceback).
"""

from __future__ import annotations

from cpbcg.cli.app import app
from cpbcg.cli import batches_cmd, layout_cmd, plan_cmd, presets_cmd  # noqa: F401  (registers commands)
from cpbcg.cli import replay_check_cmd  # noqa: F401  (registers replay-check)
from cpbcg.cli import capture_cmd  # noqa: F401  (registers capture; torch is imported lazily)


def main() -> None:
    """Console-script entry point."""
    app()
