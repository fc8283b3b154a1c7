"""What several commands share: the consoles and the progress bar (`cpbcg.outputs.console`)."""

from __future__ import annotations

from cpbcg.outputs.console import OutputFormat, print_json, progress_bar, stderr_console, stdout_console  # noqa: F401  (the commands' consoles)
