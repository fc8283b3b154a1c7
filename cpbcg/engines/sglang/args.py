"""The deployment settings that are SGLang 0.5.23 server arguments, read from their one declaration.

Each such setting names its 0.5.23 `ServerArgs` field where it is declared (`cpbcg.settings.SETTINGS`:
`sglang_field`, with its type, bounds, unit, default and command-line option); `SERVER_ARGS` is
that column, in declaration order: the launch flag is the field's (`--` and dashes: 0.5.23
`ServerArgs.add_cli_args`), and whether the deploy flags write it (and the log reader reads it
back) is the declaration's `deployed`. Read by the config (`cpbcg.config.SERVER_KEYS`: which
config keys go to the start-up resolution), the deploy flags (`cpbcg.engines.sglang.export`: the
scheduler flags, the flags an export is read back by, the scheduler settings that shape any plan),
the log reader (`cpbcg.engines.sglang.logs.settings`: the scheduler arguments a log states) and the
assumed options. Light (no numpy): `cpbcg --help` reads the declarations.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.settings import SETTINGS


@dataclass(frozen=True)
class ServerArg:
    """One deployment setting that is an SGLang 0.5.23 server argument."""

    key: str
    """cpbcg config key (`scheduler.chunked_prefill_size`)."""
    field: str
    """The 0.5.23 `ServerArgs` field (`chunked_prefill_size`)."""
    written: bool = True
    """The deploy flags (`--emit sglang`) write it from the setting's value, and the log reader
    reads it back (`Setting.deployed`)."""
    switch: bool = False
    """A flag without a value (`--enable-mixed-chunk`, a bool setting): written when on, never read back as a value."""

    @property
    def flag(self) -> str:
        """The launch flag (`--chunked-prefill-size`): 0.5.23's parser names every flag after its field."""
        return "--" + self.field.replace("_", "-")


SERVER_ARGS: tuple[ServerArg, ...] = tuple(ServerArg(s.key, s.sglang_field, s.deployed, s.kind is bool)
                                           for s in SETTINGS if s.sglang_field is not None)
"""Every setting that is a server argument, in declaration order (the scheduler's are the order the deploy flags write them)."""
BY_KEY = {arg.key: arg for arg in SERVER_ARGS}
"""`SERVER_ARGS` by config key."""
BY_FIELD = {arg.field: arg for arg in SERVER_ARGS}
"""`SERVER_ARGS` by 0.5.23 `ServerArgs` field."""
