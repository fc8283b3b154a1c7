"""The deployment settings that are SGLang 0.5.23 server arguments, each declared once.

One row per setting: its cpbcg config key (`cpbcg.settings.SETTINGS` declares its type, bounds,
unit, default and command-line option), the 0.5.23 `ServerArgs` field it is (the launch flag is
the field's, `--` and dashes: 0.5.23 `ServerArgs.add_cli_args`), and whether the deploy flags
write it. Read by the config (`cpbcg.config.SERVER_KEYS`: which config keys go to the start-up
resolution), the deploy flags (`cpbcg.engines.sglang.export`: the scheduler flags, the flags an export
is read back by, the scheduler settings that shape any plan) and the declarations
(`cpbcg.settings.Setting.sglang_flag`). Light (no numpy): `cpbcg --help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerArg:
    """One deployment setting that is an SGLang 0.5.23 server argument."""

    key: str
    """cpbcg config key (`scheduler.chunked_prefill_size`)."""
    field: str
    """The 0.5.23 `ServerArgs` field (`chunked_prefill_size`)."""
    written: bool = True
    """The deploy flags (`--emit sglang`) write it from the setting's value (`tp_size` is not: the
    CP mode's flags write `--tp-size` equal to `cp_size`; `max_total_tokens` is not: the server
    sizes its KV pool itself)."""
    switch: bool = False
    """A flag without a value (`--enable-mixed-chunk`): written when on, never read back as a value."""

    @property
    def flag(self) -> str:
        """The launch flag (`--chunked-prefill-size`): 0.5.23's parser names every flag after its field."""
        return "--" + self.field.replace("_", "-")


SERVER_ARGS: tuple[ServerArg, ...] = (
    ServerArg("cp_size", "attn_cp_size"),
    ServerArg("tp_size", "tp_size", written=False),
    ServerArg("cp_strategy", "cp_strategy"),
    ServerArg("scheduler.chunked_prefill_size", "chunked_prefill_size"),
    ServerArg("scheduler.max_prefill_tokens", "max_prefill_tokens"),
    ServerArg("scheduler.prefill_max_requests", "prefill_max_requests"),
    ServerArg("scheduler.max_running_requests", "max_running_requests"),
    ServerArg("scheduler.page_size", "page_size"),
    ServerArg("scheduler.max_total_tokens", "max_total_tokens", written=False),
    ServerArg("scheduler.enable_mixed_chunk", "enable_mixed_chunk", switch=True),
)
"""Every setting that is a server argument; the scheduler's in the order the deploy flags write them."""
BY_KEY = {arg.key: arg for arg in SERVER_ARGS}
"""`SERVER_ARGS` by config key."""
