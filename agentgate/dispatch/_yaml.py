"""Safe YAML loading that remembers where each value came from.

PyYAML's ``SafeLoader`` builds plain Python data; pydantic reports errors by location path
(``("backends", 2, "url")``). This module composes the YAML node tree once, builds the data and a
map from location path to source line, so that an error can name ``file:line``. Only the safe
constructors run: no tags beyond the YAML core schema, no Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from agentgate.errors import InventoryError

LineMap = dict[tuple[str | int, ...], int]
_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def load_yaml_with_lines(text: str, *, source: str) -> tuple[Any, LineMap]:
    """Parse ``text`` safely and return ``(data, lines)``.

    ``lines`` maps each location path (mapping keys and sequence indexes) to its 1-based line.
    Raises ``InventoryError`` naming ``source`` and the line on malformed YAML, duplicate keys,
    non-string keys or tags outside the core schema.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InventoryError(_where(source, line) + f": malformed YAML: {problem}") from exc
    lines: LineMap = {}
    if node is None:
        return None, lines
    data = _build(node, (), lines, source)
    return data, lines


def _build(node: yaml.Node, path: tuple[str | int, ...], lines: LineMap, source: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode) and node.tag not in _COLLECTION_TAGS:
        raise InventoryError(
            _where(source, node.start_mark.line + 1) + f": bad value: unsupported tag {node.tag}"
        )
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                raise InventoryError(
                    _where(source, key_node.start_mark.line + 1) + ": mapping keys must be plain strings"
                )
            key = str(key_node.value)
            if key in out:
                raise InventoryError(
                    _where(source, key_node.start_mark.line + 1) + f": duplicate key {key!r}"
                )
            out[key] = _build(value_node, (*path, key), lines, source)
            lines[(*path, key)] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), lines, source) for i, item in enumerate(node.value)]
    try:
        return _scalar(node)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InventoryError(_where(source, node.start_mark.line + 1) + f": bad value: {problem}") from exc


def _scalar(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def line_of(lines: LineMap, loc: Sequence[str | int]) -> int | None:
    """The line of the longest prefix of ``loc`` that has one, or ``None``."""
    path = tuple(loc)
    while True:
        if path in lines:
            return lines[path]
        if not path:
            return None
        path = path[:-1]


def _where(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line is not None else source


def read_text(path: Path) -> str:
    """Read a UTF-8 file; raises ``InventoryError`` if it cannot be read or decoded."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"{path}: cannot read: {exc}") from exc
