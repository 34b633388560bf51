"""Reading YAML a user wrote, with bounds: PyYAML's safe loader, plus

* **aliases expand to at most** :data:`MAX_EXPANDED_VALUES` values. PyYAML builds an
  alias as a second reference to the anchored object, so a "billion laughs" document
  (ten aliases of ten aliases of ...) loads in microseconds -- and then costs 10^9
  steps to whoever walks it (validation, ``repr``). The composer counts each node as the
  number of values it stands for once every alias in it is expanded, and refuses the
  document at the alias that passes the bound (an alias of its own enclosing node, an
  infinite expansion, is refused at once);
* **nesting at most** :data:`MAX_DEPTH` **levels** (the composer recurses per level);
* **no duplicate keys** in a mapping (YAML forbids them; PyYAML keeps the last one
  silently). Keys a merge (``<<: *base``) brings in may be overridden, as YAML says;
* **YAML 1.2 floats**: ``1e9`` and ``2.5E-3`` are numbers, as in JSON, not the strings
  YAML 1.1 makes of them (a number field refuses strings).

Every refusal is a ``yaml.YAMLError`` with the line and column of the offending node,
worded by the caller like any other YAML error.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

from sim.errors import short

MAX_EXPANDED_VALUES = 100_000
"""Values a document may stand for with every alias expanded (a scenario has ~50)."""

MAX_DEPTH = 64
"""Nesting levels of mappings and sequences (a scenario has ~5)."""

_FLOAT_1_2 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds of this module (one instance per document)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._expanded = 0  # values composed so far, aliases expanded
        self._sizes: dict[int, int] = {}  # id(node) -> values it stands for
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            assert node is not None  # an alias always names a node
            size = self._sizes.get(id(node))
            if size is None:
                raise ComposerError(
                    None, None, "an alias of its own enclosing node expands without end", mark
                )
            self._count(size, mark)
            return node
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
        before = self._expanded
        node = super().compose_node(parent, index)
        assert node is not None  # called only where a node follows
        self._depth -= 1
        self._count(1, mark)
        self._sizes[id(node)] = self._expanded - before
        return node

    def _count(self, values: int, mark: yaml.Mark) -> None:
        self._expanded += values
        if self._expanded > MAX_EXPANDED_VALUES:
            raise ComposerError(
                None,
                None,
                f"aliases expand the document to more than {MAX_EXPANDED_VALUES:,} values",
                mark,
            )

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class words that error
                break
            if duplicate:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {short(key)}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """The one document in ``text``; ``yaml.YAMLError`` (with a mark) when it breaks a
    bound of this module or is not YAML."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
