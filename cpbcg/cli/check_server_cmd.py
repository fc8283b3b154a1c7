"""`cpbcg check-server`: what SGLang 0.5.23 does with a launch command, before deploying it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import ConfigOpt, FormatOpt, OutputFormat, print_json, stdout_console
from cpbcg.cli.options import ServerOptions, with_options

if TYPE_CHECKING:
    from rich.console import Group

    from cpbcg.commands.check_server import ServerVerdict


@app.command("check-server")
@error_boundary
@with_options(server=ServerOptions)
def check_server(
    config: ConfigOpt = None,
    output_format: FormatOpt = OutputFormat.table,
    *,
    server: ServerOptions,
) -> None:
    """Say what SGLang 0.5.23 would do with a launch command on a model and a GPU: start or
    refuse (which check, its message), capture CP prefill graphs or not and why, and the
    resolved page size, chunk and prefill graph list (as captured, rounded). Exit 0 when it
    starts with CP prefill graphs, 1 when it would refuse to start or run without them, 2 for
    bad input.

    Example: `cpbcg check-server --server-args "python -m sglang.launch_server --model-path m --tp-size 4
    --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag" --gpu B200 --model-config config.json`
    """
    from cpbcg.commands import check_server as check_server_use_case
    from cpbcg.documents import dumps

    verdict = check_server_use_case.check_server(config, server.overrides())
    if output_format is OutputFormat.json:
        print_json(dumps(verdict.to_dict()))
    else:
        stdout_console().print(render_verdict(verdict))
    raise typer.Exit(verdict.exit_code)


def render_verdict(verdict: "ServerVerdict") -> "Group":
    """The verdict first, then each resolved value with its source."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from cpbcg.settings import SGLANG_VERSION

    r = verdict.server
    lines = [Text(f"SGLang {SGLANG_VERSION} on {r.gpu.name} ({r.gpu_source}); model {r.model.architecture} "
                  f"({r.model_source}){', MLA' if r.use_mla else ''}")]
    if r.refusals:
        first = r.refusals[0]
        lines.append(Text(f"refuses to start: {first.check}: {first.message}", style="bold red"))
    else:
        lines.append(Text("starts", style="bold green"))
    if r.cp_graphs:
        lines.append(Text(f"CP prefill graphs: yes ({r.cp_strategy}, prefill backend {r.prefill_attention_backend.value}, "
                          f"supports_prefill_cp_bcg)", style="bold green"))
    else:
        why = "; ".join(why for what, why in r.findings() if what != "refuse to start") or "the server does not start"
        lines.append(Text(f"CP prefill graphs: no ({why})", style="bold red"))
    table = Table(title="Resolved server arguments (value: where it came from)", title_justify="left")
    table.add_column("argument")
    table.add_column("value")
    table.add_column("source")
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size", "chunked_prefill_size",
                 "max_prefill_tokens", "max_running_requests", "max_total_tokens", "prefill_graph_backend", "prefill_graph_max_bs"):
        value = getattr(r, name)
        table.add_row(name, "none" if value.value is None else str(value.value), value.rule or value.source)
    bs = r.prefill_graph_bs.value
    listed = f"{len(bs)} buckets {bs[0]}..{bs[-1]}" if bs else "empty"
    table.add_row("prefill graph list", listed, r.prefill_graph_bs.rule or r.prefill_graph_bs.source)
    cap = verdict.captured
    table.add_row("captured (CP, rounded)", f"{len(cap)} buckets {cap[0]}..{cap[-1]}" if cap else "none",
                  verdict.capture_note or ("as listed" if cap else "no CP graphs"))
    parts: list = [*lines, table]
    parts += [Text(f"note: {n}") for n in r.notes]
    if r.not_modelled:
        parts.append(Text(f"not modelled (ignored): {', '.join(r.not_modelled)}"))
    return Group(*parts)
