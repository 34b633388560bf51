"""The suite runs twice (``make test``): on the pure build and on the compiled one. This
checks each run tests the build it says it does, so a compiled run cannot silently
import the source tree, nor a pure run a stale extension module."""

from __future__ import annotations

import os

import pytest

from sim.build import COMPILED_MODULES, compiled_modules, engine_build


def test_the_suite_runs_on_the_build_it_expects() -> None:
    expected = os.environ.get("FRAGSIM_EXPECT_BUILD")
    if expected is None:
        pytest.skip("FRAGSIM_EXPECT_BUILD is not set (make test sets it: pure, compiled)")
    assert engine_build() == expected, compiled_modules()


def test_every_listed_module_imports_and_reports_its_build() -> None:
    flags = compiled_modules()
    assert list(flags) == list(COMPILED_MODULES)
    assert engine_build() in ("pure", "compiled", "mixed")
