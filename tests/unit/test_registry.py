from typing import Literal

import pytest

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import build_registry


class _A(AllocatorConfig):
    kind: Literal["a"] = "a"


class _A2(AllocatorConfig):
    kind: Literal["a"] = "a"


def test_registering_a_kind_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        build_registry([_A, _A2])


def test_registry_maps_kind_to_class() -> None:
    assert build_registry([_A]) == {"a": _A}
