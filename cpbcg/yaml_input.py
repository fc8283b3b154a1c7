"""PyYAML behind `cpbcg.inputs.load_yaml` and `yaml_key_lines`: a safe loader with budgets on
alias expansion (`MAX_YAML_NODES`), depth (`MAX_DEPTH`) and integer length (`MAX_INT_DIGITS`), and
no duplicate keys. Imported only when a YAML input is read (PyYAML costs ~10 ms to import)."""

from __future__ import annotations

from typing import Any

import yaml

from cpbcg.errors import CpbcgError, short_repr
from cpbcg.input_limits import MAX_DEPTH, MAX_INT_DIGITS, MAX_YAML_NODES


MAX_KEY_CHARS = 60
"""Longest key path shown in a message (deep nesting is cut)."""


class _StrictLoader(yaml.SafeLoader):
    """Safe loader with budgets on alias expansion, depth and integer length, and no duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._weights: dict[int, int] = {}
        self._depth = 0
        self._path: list[str] = []
        self._keys: dict[int, str] = {}  # id(node) -> key path (`scheduler.rate`, `buckets[3]`), for messages

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self._path.append(_step(parent, index))
        try:
            return self._compose(parent, index)
        finally:
            self._path.pop()

    def _compose(self, parent, index):  # noqa: ANN001
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._weights:
                raise _budget(event.start_mark, f"alias *{event.anchor} refers to its own enclosing node", self._key())
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _budget(self.peek_event().start_mark, f"nested more than {MAX_DEPTH} levels deep", self._key().split("[")[0])
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        weight = 1 + sum(self._weights.get(id(child), 1) for child in _children(node))
        if weight > MAX_YAML_NODES:
            raise _budget(node.start_mark, f"expands to more than {MAX_YAML_NODES:,} values (aliases); write it out", self._key())
        self._weights[id(node)] = weight
        self._keys.setdefault(id(node), self._key())
        return node

    def _key(self) -> str:
        """The key path being composed (`scheduler.rate`, `buckets[3]`; "" at the top)."""
        key = "".join(self._path).lstrip(".")
        return key if len(key) <= MAX_KEY_CHARS else key[: MAX_KEY_CHARS - 3] + "..."

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        where = ".".join(filter(None, (self._keys.get(id(node), ""), _step(node, key_node).lstrip("."))))
                        raise _budget(key_node.start_mark, f"duplicate key (first on line {seen[key]})", where)
                    seen[key] = line
                except TypeError:  # an unhashable key: PyYAML refuses it below
                    continue
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # noqa: ANN001
        text = str(node.value).replace("_", "").lstrip("+-")
        if len(text) > MAX_INT_DIGITS:
            raise _budget(node.start_mark, f"integer of {len(text)} digits; at most {MAX_INT_DIGITS} are accepted", self._keys.get(id(node), ""))
        return super().construct_yaml_int(node)


    def construct_undefined(self, node):  # noqa: ANN001
        tag = short_repr(str(node.tag).replace("tag:yaml.org,2002:", "!!"))[1:-1]
        raise _budget(node.start_mark, f"the tag {tag} is not accepted (plain YAML values only: no Python objects)", self._keys.get(id(node), ""))


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor(None, _StrictLoader.construct_undefined)  # any tag the safe loader does not know


class _Budget(yaml.YAMLError):
    def __init__(self, mark, problem: str) -> None:  # noqa: ANN001
        super().__init__(problem)
        self.problem_mark, self.problem = mark, problem


def _budget(mark, problem: str, key: str = "") -> _Budget:  # noqa: ANN001
    """A refused document, at `mark`, naming the key path (`KEY: problem`) when there is one."""
    return _Budget(mark, f"{key}: {problem}" if key else problem)


def _step(parent, index) -> str:  # noqa: ANN001
    """The key path step of a node composed under `parent` (PyYAML passes a mapping value's key
    node, or a sequence item's index, as `index`)."""
    if isinstance(parent, yaml.SequenceNode):
        return f"[{index}]"
    if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.ScalarNode):
        return "." + short_repr(index.value)[1:-1] if isinstance(index.value, str) else f".{index.value}"
    return ""


def _children(node) -> list:  # noqa: ANN001
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def parse_yaml(text: str, label: str, error: type[CpbcgError]) -> Any:
    """`cpbcg.inputs.load_yaml` of decoded text."""
    loader = None
    try:
        loader = _StrictLoader(text)  # PyYAML's reader refuses unprintable characters here already
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{label}:{mark.line + 1}" if mark is not None else label
        if isinstance(exc, yaml.reader.ReaderError):  # an unprintable character: its line from its position
            where = f"{label}:{text.count(chr(10), 0, exc.position) + 1}"
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc).splitlines()[0]
        if isinstance(exc, _Budget):
            raise error(f"{where}: {problem}") from None
        raise error(f"{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise error(f"{label}: nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """`cpbcg.inputs.yaml_key_lines`."""
    try:
        loader = _StrictLoader(text)
    except yaml.YAMLError:
        return {}
    try:
        root = loader.get_single_node()
    except (yaml.YAMLError, RecursionError):
        return {}
    finally:
        loader.dispose()
    lines: dict[tuple[str, ...], int] = {}
    stack: list[tuple[tuple[str, ...], Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                child = (*path, str(key_node.value))
                lines.setdefault(child, key_node.start_mark.line + 1)
                stack.append((child, value_node))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                child = (*path, str(index))
                lines.setdefault(child, item.start_mark.line + 1)
                stack.append((child, item))
    return lines
