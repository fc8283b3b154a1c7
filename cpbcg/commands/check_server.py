"""`cpbcg check-server`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from cpbcg.api import decode_graphs, load_config_and_deployment
from cpbcg.errors import ModelError
from cpbcg.planner.model.capacity import capture_buckets
from cpbcg.engines.sglang.server import ResolvedServer

if TYPE_CHECKING:
    from cpbcg.engines.sglang.decode_plan import DecodeServer


@dataclass(frozen=True)
class ServerVerdict:
    """`cpbcg check-server`: what SGLang 0.5.23 does with a launch command, a model and a GPU."""

    server: ResolvedServer
    """The start-up resolution (values with sources, refusals, CP graphs)."""
    captured: tuple[int, ...]
    """The prefill graph list as the CP runner captures it (rounded up to multiples of the CP
    size, below the smallest CP-active forward dropped; tokens). Empty without CP graphs."""
    capture_note: str | None
    """What the rounding changed (None: nothing)."""
    decode: "DecodeServer | None" = None
    """The decode graphs as 0.5.23 captures them (list, max_bs, capture filter), None when not resolved."""
    decode_notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0: starts with CP prefill graphs; 1: refuses to start or runs without them."""
        return 0 if self.server.cp_graphs else 1

    def to_dict(self) -> dict[str, object]:
        d = self.decode
        decode = None if d is None else {"configured": list(d.configured), "captured": list(d.captured), "max_bs": d.max_bs,
                                         "max_bs_rule": d.max_bs_rule, "alignment": d.alignment, "dropped": list(d.dropped),
                                         "request_pool": d.request_pool, "enabled": d.enabled}
        return {**self.server.summary(), "captured": list(self.captured), "capture_note": self.capture_note,
                "decode": decode, "decode_notes": list(self.decode_notes)}


def check_server(config: str | None = None, overrides: Mapping[str, object] | None = None) -> ServerVerdict:
    """0.5.23's start-up resolution of the config's server (`--server-args`, `--model-config`,
    `--gpu` in `overrides`), and the prefill list its CP runner captures. Raises `ConfigError`
    for bad input."""
    from cpbcg.config import UnrecognizedServerArguments

    try:
        cfg, deployment = load_config_and_deployment(config, overrides)
    except UnrecognizedServerArguments as exc:  # 0.5.23's parser exits: a server that refuses to start
        return ServerVerdict(exc.server, (), None)
    server = cfg.server_resolution
    assert server is not None  # load_config resolves every config
    captured: tuple[int, ...] = ()
    note = None
    if server.cp_graphs and server.prefill_graph_bs.value:
        try:
            prepared = capture_buckets(list(server.prefill_graph_bs.value), deployment.cp, engine=deployment.capture.engine)
        except ModelError as exc:
            note = str(exc)
        else:
            captured, note = prepared.capture_num_tokens, prepared.note
    decode, decode_notes = decode_graphs(deployment)
    return ServerVerdict(server, captured, note, decode, decode_notes)


