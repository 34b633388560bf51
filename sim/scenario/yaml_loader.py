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
* **YAML 1.2 scalars** (its core schema, where PyYAML follows YAML 1.1): ``true`` /
  ``false`` (also ``True``, ``TRUE``, ``False``, ``FALSE``) are the only booleans --
  ``yes``, ``no``, ``on``, ``off``, ``y``, ``n`` stay strings, so a flag field refuses
  them by name; an integer is decimal digits with an optional sign (``010`` is ten) --
  ``0x10``, ``0o17``, ``0b11``, ``1_000`` and ``1:30`` stay strings (YAML 1.2 core would
  also read ``0x``/``0o``: fragsim does not, one way to write a number is enough); a
  float is ``1.5``, ``.5``, ``1e9``, ``2.5E-3``, ``.inf`` or ``.nan`` (numbers, as in
  JSON; YAML 1.1 makes strings of ``1e9``); dates stay strings. Nulls are ``~``,
  ``null`` and nothing, as in both;
* **numbers as written** (``load_yaml(text, written=True)``): integers and floats are
  :class:`WrittenInt` / :class:`WrittenFloat`, equal to the number and remembering the
  text the file wrote, which their ``repr`` gives -- so a message quotes ``got 1e9``
  where the value was written ``1e9``, not ``got 1000000000.0``;
* **keys located** (``load_yaml(text, located=True)``): mappings are
  :class:`LocatedDict`, a ``dict`` that also holds the line each key was written on, so
  a message about a field names its line (``sim.errors.validation_lines``).

Every refusal is a ``yaml.YAMLError`` with the line and column of the offending node,
worded by the caller like any other YAML error.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Generator
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

from sim.errors import short
from sim.fields import JsonValue

MAX_EXPANDED_VALUES = 100_000
"""Values a document may stand for with every alias expanded (a scenario has ~50)."""

MAX_DEPTH = 64
"""Nesting levels of mappings and sequences (a scenario has ~5)."""

_BOOL_1_2 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_DECIMAL = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_1_2 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"


class WrittenInt(int):
    """An integer that remembers how the file wrote it (its ``repr``)."""

    written: str

    def __repr__(self) -> str:
        return self.written


class WrittenFloat(float):
    """A float that remembers how the file wrote it (its ``repr``)."""

    written: str

    def __repr__(self) -> str:
        return self.written


class LocatedDict(dict[Any, Any]):
    """A mapping that remembers the line (1-based) each of its keys was written on."""

    key_lines: dict[Any, int]

    def __init__(self) -> None:
        super().__init__()
        self.key_lines = {}


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds of this module (one instance per document)."""

    def __init__(self, stream: str, written: bool = False, located: bool = False) -> None:
        super().__init__(stream)
        self._written = written
        self._located = located
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

    def construct_yaml_map(self, node: MappingNode) -> Generator[dict[Any, Any], None, None]:
        data: dict[Any, Any] = LocatedDict() if self._located else {}
        yield data
        data.update(self.construct_mapping(node))
        if isinstance(data, LocatedDict):
            for key_node, _ in node.value:  # merges flattened: keys where they were written
                key = self.construct_object(key_node)
                with contextlib.suppress(TypeError):  # unhashable: construct_mapping refused it
                    data.key_lines[key] = key_node.start_mark.line + 1

    def construct_yaml_bool(self, node: ScalarNode) -> bool:
        value = self.construct_scalar(node)
        if not isinstance(value, str) or not _BOOL_1_2.match(value):
            raise ConstructorError(
                None, None, f"expected true or false, got {short(value)}", node.start_mark
            )
        return value.lower() == "true"

    def construct_yaml_int(self, node: ScalarNode) -> int:
        value = self.construct_scalar(node)
        try:
            if not isinstance(value, str) or not _INT_DECIMAL.match(value):
                raise ValueError
            number = int(value, 10)  # ValueError past 4,300 digits
        except ValueError:
            raise ConstructorError(
                None,
                None,
                f"expected a decimal integer of at most 4,300 digits, got {short(value)}",
                node.start_mark,
            ) from None
        if not self._written:
            return number
        kept = WrittenInt(number)
        kept.written = value
        return kept

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = self.construct_scalar(node)
        if not isinstance(value, str) or not _FLOAT_1_2.match(value):
            raise ConstructorError(
                None, None, f"expected a number, got {short(value)}", node.start_mark
            )
        number = super().construct_yaml_float(node)
        if not self._written:
            return number
        kept = WrittenFloat(number)
        kept.written = value
        return kept


# YAML 1.2's core schema in place of PyYAML's YAML 1.1 resolvers: nulls and merge keys
# as before; booleans, decimal integers and floats as above; no timestamps or values.
BoundedLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag
        not in (
            _BOOL_TAG,
            _INT_TAG,
            _FLOAT_TAG,
            "tag:yaml.org,2002:timestamp",
            "tag:yaml.org,2002:value",
        )
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
BoundedLoader.add_implicit_resolver(_BOOL_TAG, _BOOL_1_2, list("tTfF"))
BoundedLoader.add_implicit_resolver(_INT_TAG, _INT_DECIMAL, list("-+0123456789"))
BoundedLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_1_2, list("-+0123456789."))
BoundedLoader.add_constructor("tag:yaml.org,2002:map", BoundedLoader.construct_yaml_map)
BoundedLoader.add_constructor(_BOOL_TAG, BoundedLoader.construct_yaml_bool)
BoundedLoader.add_constructor(_INT_TAG, BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor(_FLOAT_TAG, BoundedLoader.construct_yaml_float)


def yaml_error_line(error: yaml.YAMLError, text: str) -> str:
    """``error`` (from :func:`load_yaml` on ``text``) as one line: ``not valid YAML:
    PROBLEM (line L, column C)`` -- a bound of this module (an alias bomb, nesting), a
    character YAML forbids (named by its code), or YAML's own syntax error; PyYAML's
    multi-line message (with the offending line quoted) is never printed."""
    mark = getattr(error, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    problem = str(getattr(error, "problem", None) or str(error).splitlines()[0])
    if isinstance(error, yaml.reader.ReaderError):  # a character YAML forbids (NUL, ...)
        pos = min(max(int(error.position), 0), len(text))
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        char = error.character
        code = f"#x{char:04x}" if isinstance(char, int) else f"#x{ord(char):04x}"
        problem = f"unacceptable character {code}: {error.reason}"
        where = f" (line {line}, column {column})"
    problem = " ".join(problem.split())
    return f"not valid YAML: {problem[:200]}{where}"


def load_yaml(text: str, *, written: bool = False, located: bool = False) -> JsonValue:
    """The one document in ``text``; ``yaml.YAMLError`` (with a mark) when it breaks a
    bound of this module or is not YAML. With ``written``, numbers are
    :class:`WrittenInt` / :class:`WrittenFloat` (their ``repr`` is the file's text); with
    ``located``, mappings are :class:`LocatedDict` (each key's line)."""
    loader = BoundedLoader(text, written=written, located=located)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
