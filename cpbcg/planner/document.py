"""A typed result as JSON: the one function that turns a result's dataclass fields into a document.

`document(result)` is `{field: value}` in declaration order, nested dataclasses, lists, tuples and
dicts made the same way (what `dataclasses.asdict` gives, without copying arrays: `orjson`
writes numpy values as they are); a type says only where its document differs from its fields:
`values` (a field written otherwise: `bucket_hits` with string keys), `omit` (fields left out),
`extra` (keys after the fields: derived figures, units). Every `to_dict` and every section of
`cpbcg.outputs.documents` that writes a result's fields goes through it (`tests/test_document.py`
holds that no `dataclasses.asdict` or `vars` builds JSON elsewhere).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping


def document(result: Any, *, values: Mapping[str, Any] | None = None, omit: Iterable[str] = (),
             extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of the dataclass instance `result`: each field (declaration order) but
    those in `omit`, as `json_value` makes it, or as `values` gives it; then `extra`'s keys.
    Raises `TypeError` when `result` is not a dataclass instance."""
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        raise TypeError(f"document() takes a dataclass instance, not {type(result).__name__}")
    skipped = set(omit)
    given = values or {}
    out = {f.name: given[f.name] if f.name in given else json_value(getattr(result, f.name))
           for f in dataclasses.fields(result) if f.name not in skipped}
    if extra:
        out.update(extra)
    return out


def json_value(value: Any) -> Any:
    """`value` ready for JSON as `dataclasses.asdict` makes a field: a dataclass instance as its
    `document`, lists and tuples as lists, dicts as dicts, each item the same way; anything else
    (numbers, strings, None, enums, numpy values) as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return document(value)
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value
