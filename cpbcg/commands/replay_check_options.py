"""`cpbcg replay-check`'s own options, each declared once on `ReplayCheckOptions` (its `Flag`:
flags, help, bounds; the field's default); the command line is derived from it
(`cpbcg.cli.options.with_options`) and the use case (`cpbcg.commands.replay_check.run`) reads it.
Light on purpose: `cpbcg replay-check --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

from cpbcg.atomic import output_path
from cpbcg.outputs.console import OutputFormat
from cpbcg.settings import FORMAT_FLAG, Flag


@dataclass(frozen=True)
class ReplayCheckOptions:
    """Everything `replay-check` takes besides the shared deployment, trace, scheduler and gate groups."""

    manifest: Annotated[Optional[Path], Flag(("--manifest", "-m"), "Capture manifest (`cpbcg capture -o`): buckets, capacities and CP settings come from it.", show_default=False)] = None
    max_eager: Annotated[Optional[list[str]], Flag(("--max-eager",), "Gate: at most N eager batches for REASON (not_cp_active, above_largest_bucket, padding_limit, local_capacity, context_limit, multimodal_input). Repeatable.", metavar="REASON=N", show_default=False)] = None
    junit: Annotated[Optional[Path], Flag(("--junit",), "Write a JUnit XML report (one test case per gate); `-` writes it to stdout.", parser=output_path, show_default=False)] = None
    json_path: Annotated[Optional[Path], Flag(("--json",), "Write the JSON report (the plan JSON plus gates) to this file; `-` writes it to stdout.", parser=output_path, show_default=False)] = None
    replay: Annotated[int, Flag(("--replay",), "Replay N sampled graph batches through freshly captured graphs and compare with eager (needs torch; CUDA if present, else a dry run). Adds the replay_verified gate.", ge=0, le=4096)] = 0
    output_format: Annotated[OutputFormat, FORMAT_FLAG] = OutputFormat.table
    report_only: Annotated[bool, Flag(("--report-only",), "Run without any gate: report coverage and exit 0. Without it, a run with no gate (config gates:, --min-coverage, --max-eager, ..., --replay) is refused with exit 2, so a CI job that forgot its gates is not green. With it, a gate option is refused (exit 2) and a config's gates: are skipped (a note says so); it also reports an SGLang log that ran with prefill graphs off, which is otherwise refused (exit 2).")] = False
    embedded_sample: Annotated[bool, Flag(("--embedded-sample",), "Gate the embedded synthetic workload on purpose (no --trace): a smoke test of the gates, not of your traffic. Without it, gating with no --trace is refused (exit 2), so a CI job that forgot its trace is not green.")] = False
