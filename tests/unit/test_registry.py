"""The one registry helper (``policies.registry.Registry``) every policy family uses."""

from typing import Literal

import pytest

from policies.allocators.config import AllocatorConfig
from policies.allocators.registry import ALLOCATORS
from policies.autoscale.registry import AUTOSCALERS
from policies.registry import Registry
from policies.restart.registry import RESTART_POLICIES
from policies.routing.registry import ROUTERS


class _A(AllocatorConfig):
    kind: Literal["a"] = "a"


class _A2(AllocatorConfig):
    kind: Literal["a"] = "a"


class _B(AllocatorConfig):
    kind: Literal["b"] = "b"


def test_registering_a_kind_twice_is_an_error_naming_both_classes() -> None:
    with pytest.raises(ValueError, match=r"allocator kind .a. registered twice \(_A and _A2\)"):
        Registry("allocator", [_A, _A2])


def test_registry_maps_kind_to_class_in_the_order_listed() -> None:
    registry = Registry("allocator", [_B, _A])
    assert registry == {"b": _B, "a": _A}
    assert list(registry) == ["b", "a"] and len(registry) == 2 and "a" in registry
    assert registry.get("c") is None


def test_parse_validates_against_the_kind_and_names_the_family() -> None:
    registry = Registry("widget", [_A])
    assert isinstance(registry.parse({"kind": "a"}), _A)
    with pytest.raises(ValueError, match="unknown widget kind 'b'; allowed: a"):
        registry.parse({"kind": "b"})
    with pytest.raises(ValueError, match="needs a kind, one of a; unknown field kidn"):
        registry.parse({"kidn": "a"})


@pytest.mark.parametrize(
    ("registry", "family"),
    [
        (ALLOCATORS, "allocator"),
        (ROUTERS, "router"),
        (RESTART_POLICIES, "restart policy"),
        (AUTOSCALERS, "autoscaler"),
    ],
)
def test_every_family_uses_the_one_helper(registry: object, family: str) -> None:
    assert isinstance(registry, Registry) and registry.family == family
    assert len(registry) > 0
