"""One way a typed result becomes JSON: `cpbcg.planner.document.document` (its dataclass fields, with
per-type `values`, `omit` and `extra`)."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import orjson
import pytest

from cpbcg.planner.document import document, json_value


@dataclasses.dataclass(frozen=True)
class _Inner:
    tokens: int
    lens: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str
    inner: _Inner
    hits: dict[int, int]
    rows: np.ndarray
    note: str | None = None


def _sample() -> _Outer:
    return _Outer("a", _Inner(8, (1, 2)), {64: 3}, np.arange(3), None)


def test_a_document_is_the_fields_in_order_nested_and_listed():
    doc = document(_sample())
    assert list(doc) == ["name", "inner", "hits", "rows", "note"]
    assert doc["inner"] == {"tokens": 8, "lens": [1, 2]} and doc["hits"] == {64: 3} and doc["note"] is None
    assert doc["rows"] is _sample().rows or doc["rows"].tolist() == [0, 1, 2]  # arrays go to orjson as they are, never copied


def test_a_document_writes_the_same_bytes_as_asdict():
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    assert orjson.dumps(document(_sample()), option=option) == orjson.dumps(dataclasses.asdict(_sample()), option=option)


def test_a_type_says_only_where_its_document_differs():
    doc = document(_sample(), values={"hits": {"64": 3}}, omit=("note",), extra={"total": 3})
    assert list(doc) == ["name", "inner", "hits", "rows", "total"] and doc["hits"] == {"64": 3} and doc["total"] == 3


def test_only_dataclass_instances_have_a_document():
    with pytest.raises(TypeError, match="dataclass instance"):
        document({"a": 1})
    with pytest.raises(TypeError):
        document(_Outer)
    assert json_value(({"a": (1, 2)}, 3)) == [{"a": [1, 2]}, 3]


def test_the_evaluation_and_cost_model_documents_are_unchanged():
    from cpbcg.planner.costs.cost import DEFAULT_COST
    from cpbcg.planner.evaluate import Evaluation

    ev = Evaluation([256, 512], [64, 128], 3, 700, 2, 600, 168, 0, 1, {"too_large": 1}, {"too_large": 100}, {256: 1, 512: 1})
    assert list(ev.to_dict().items()) == list({
        "buckets": [256, 512], "capacity_rows": [64, 128], "batches": 3, "tokens": 700, "graph_batches": 2, "graph_tokens": 600,
        "padded_tokens": 168, "rescued": 0, "natural_overflow": 1, "eager": {"too_large": 1}, "eager_tokens": {"too_large": 100},
        "bucket_hits": {"256": 1, "512": 1}, "eager_examples": {}, "overflow_examples": [],
        "coverage": 2 / 3, "token_coverage": 600 / 700, "padding_overhead": 168 / 600}.items())  # in this order
    assert list(DEFAULT_COST.to_dict()) == ["graph_fixed_ms", "eager_fixed_ms", "token_ms", "source"]


def test_no_json_is_built_from_fields_another_way():
    # `dataclasses.asdict`, `vars(...)` and `self.__dict__` once built a third of the documents:
    # a result's fields reach JSON through `document` only
    root = Path(__file__).resolve().parents[1] / "cpbcg"
    found = []
    for path in root.rglob("*.py"):
        if path == root / "planner" / "document.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).rpartition(".")[2] in ("asdict", "vars"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:60]}")
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:60]}")
    assert found == []
