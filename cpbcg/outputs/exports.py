"""`--emit`: a bucket list as SGLang's server flags (`sglang`, `sglang-json`) or as cpbcg's own
bucket file (`yaml`, `json`, read back by `cpbcg.bucket_files.read_bucket_file`). Every
`EmitFormat` has its arm (`assert_never`): a new export is its enum line plus its arm here."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from cpbcg.errors import ConfigError
from cpbcg.outputs.console import assert_never
from cpbcg.planner.choices import EmitFormat
from cpbcg.engines.sglang.export import config_flags, deploy_flags

if TYPE_CHECKING:
    from cpbcg.planner.deployment import Deployment


def export_buckets(buckets: list[int], fmt: EmitFormat | str, deployment: "Deployment", metadata: dict[str, object] | None = None,
                   decode_bs: list[int] | None = None) -> str:
    """The text of `buckets` (ascending tokens) in `fmt`, ending with a newline.

    `sglang` and `sglang-json` are SGLang's server flags with the CP and scheduler settings of
    `deployment` too (`cpbcg.engines.sglang.export`: the list deploys under the conditions it was
    planned for); `yaml` / `json` are cpbcg's own bucket file `{capture_num_tokens: [...],
    ...metadata}` (`metadata` JSON-ready), which `--buckets FILE` reads back. `decode_bs` (the
    recommended decode list, requests): the server flags carry it too (`--cuda-graph-bs-decode ...
    --cuda-graph-max-bs-decode MAX`, or the config's `decode` phase); the bucket files its
    `decode_bs`. Raises
    `ConfigError` for an empty list."""
    if not buckets:
        raise ConfigError("nothing to export: the bucket list is empty")
    buckets = sorted(int(b) for b in buckets)
    fmt = EmitFormat(fmt)
    if fmt is EmitFormat.sglang:
        return deploy_flags(buckets, deployment, decode_bs=decode_bs) + "\n"
    if fmt is EmitFormat.sglang_json:
        return config_flags(buckets, deployment, decode_bs) + "\n"
    document = {"capture_num_tokens": buckets, **({"decode_bs": sorted(decode_bs)} if decode_bs else {}), **(metadata or {})}
    if fmt is EmitFormat.json:
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt is EmitFormat.yaml:
        import yaml  # only this export needs it

        text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)
        return text
    assert_never(fmt)
