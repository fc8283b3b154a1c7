"""Rendering of `ServerCheck`: what SGLang would do with the deployment's server flags."""

from __future__ import annotations

import typer

from cpbcg.planner.sglang_release import SGLANG_VERSION, ServerCheck


def echo_server_check(check: ServerCheck) -> None:
    """One `cpbcg: warning:` line on stderr per finding: the server would refuse to start, or
    start without CP graphs, and why."""
    for message in check.refuses_start:
        typer.echo(f"cpbcg: warning: SGLang {SGLANG_VERSION} would refuse to start with these flags: {message}", err=True)
    for message in check.no_cp_graph:
        typer.echo(f"cpbcg: warning: SGLang {SGLANG_VERSION} would capture no CP graph with these flags: {message}", err=True)
