"""`cpbcg check-server`'s verdict rendered: the verdict and each resolved value with its source
(rich), or its JSON document; every `--format` has its arm (`assert_never`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from cpbcg.outputs.console import OutputFormat, assert_never, print_json, stdout_console

if TYPE_CHECKING:
    from rich.console import Group

    from cpbcg.engines.sglang.decode_plan import DecodeServer
    from cpbcg.engines.sglang.server import ResolvedServer


class VerdictView(Protocol):
    """What this output reads of a verdict (`cpbcg.commands.check_server.ServerVerdict`)."""

    @property
    def server(self) -> ResolvedServer: ...
    @property
    def captured(self) -> tuple[int, ...]: ...
    @property
    def capture_note(self) -> str | None: ...
    @property
    def decode(self) -> "DecodeServer | None": ...
    @property
    def decode_notes(self) -> tuple[str, ...]: ...
    def to_dict(self) -> dict[str, object]: ...


def write(verdict: VerdictView, output_format: OutputFormat) -> None:
    """The verdict on stdout in `output_format`."""
    if output_format is OutputFormat.json:
        from cpbcg.outputs.documents import dumps

        print_json(dumps(verdict.to_dict()))
    elif output_format is OutputFormat.table:
        stdout_console().print(render_verdict(verdict))
    else:
        assert_never(output_format)


def render_verdict(verdict: VerdictView) -> "Group":
    """The verdict first, then each resolved value with its source."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from cpbcg.engines.sglang.release import SGLANG_VERSION

    r = verdict.server
    lines = [Text(f"SGLang {SGLANG_VERSION} on {r.gpu.name} ({r.gpu_source}); model {r.model.architecture} "
                  f"({r.model_source}){', MLA' if r.use_mla else ''}")]
    if r.refusals:
        first = r.refusals[0]
        lines.append(Text(f"refuses to start: {first.check}: {first.message}", style="bold red"))
    elif r.no_prefill_graph() is not None:  # nothing to capture: that is the answer
        lines.append(Text(f"starts, but {r.no_prefill_graph()}", style="bold red"))
        lines += [Text(f"what would help: {one}") for one in r.what_would_help()]
    else:
        lines.append(Text("starts", style="bold green"))
    if r.cp_graphs:
        lines.append(Text(f"CP prefill graphs: yes ({r.cp_strategy}, prefill backend {r.prefill_attention_backend.value}, "
                          f"supports_prefill_cp_bcg)", style="bold green"))
    else:
        why = "; ".join(why for what, why in r.findings() if what == "capture no CP graph") or \
            ("the server does not start" if r.refusals else f"no attention CP: attn_cp_size {r.attn_cp_size}")
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
    d = verdict.decode
    if d is not None:
        table.add_row("decode graph list", f"{len(d.configured)} sizes {d.configured[0]}..{d.configured[-1]}", d.max_bs_rule)
        dropped = f"; {list(d.dropped)} dropped (alignment {d.alignment}, request pool {d.request_pool})" if d.dropped else ""
        table.add_row("decode captured", f"{len(d.captured)} sizes {d.captured[0]}..{d.captured[-1]}" if d.captured else "none",
                      ("0.5.23 get_batch_sizes_to_capture" + dropped) if d.enabled else "decode graphs disabled")
    parts: list = [*lines, table]
    parts += [Text(f"note: {n}") for n in verdict.decode_notes]
    parts += [Text(f"note: {n}") for n in (*r.input_notes, *r.notes)]
    if r.not_modelled:
        parts.append(Text(f"not modelled (ignored): {', '.join(r.not_modelled)}"))
    return Group(*parts)
