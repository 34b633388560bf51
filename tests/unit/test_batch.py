"""The engine's hot dataclasses write their ``__init__`` out (a dataclass-generated one
stays interpreted in the compiled build): it must set every field, to its declared
default where none is given."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from policies.allocators.base import Allocation, AllocStats, Failure
from sim.engine.batch import Group, SchedEvent, Step


def _declared_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f.name
    return f.default_factory()


def _same(a: Any, b: Any) -> bool:
    return (isinstance(a, float) and math.isnan(a) and math.isnan(b)) or a == b


def test_group_init_sets_every_field_to_its_default() -> None:
    g = Group(7, 1.5, 100, 20)
    given = {"request_id": 7, "arrival_s": 1.5, "prompt_tokens": 100, "output_tokens": 20}
    given["target_tokens"] = 20  # the output as given, until the scheduler bounds it
    for f in dataclasses.fields(Group):
        want = given[f.name] if f.name in given else _declared_default(f)
        assert _same(getattr(g, f.name), want), f.name
    h = Group(1, 0.0, 5, 6, 3, (11, 12))
    assert (h.num_seqs, tuple(h.prefix_hashes)) == (3, (11, 12))
    assert g.seq_ids is not Group(8, 0.0, 1, 1).seq_ids  # a fresh list each


def test_step_init_sets_every_field_to_its_default() -> None:
    s = Step()
    for f in dataclasses.fields(Step):
        assert getattr(s, f.name) == _declared_default(f), f.name
    assert s.stepped is not Step().stepped


@pytest.mark.parametrize("cls", [Allocation, Failure, AllocStats, SchedEvent])
def test_snapshot_inits_take_every_field_in_order_with_its_default(cls: type) -> None:
    fields = dataclasses.fields(cls)
    values = {
        f.name: f"v{i}" if f.name in ("kind", "cause", "detail") else i + 1
        for i, f in enumerate(fields)
    }
    by_position = cls(*values.values())
    by_name = cls(**values)
    for f in fields:
        assert getattr(by_position, f.name) == values[f.name] == getattr(by_name, f.name)
    required = [values[f.name] for f in fields if f.default is dataclasses.MISSING]
    minimal = cls(*required)
    for f in fields:
        if f.default is not dataclasses.MISSING:
            assert getattr(minimal, f.name) == f.default, f.name
