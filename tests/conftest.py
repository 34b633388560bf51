"""Shared fixtures: where the real public traces live; the Hypothesis profile.

Property tests draw the same examples on every run (``derandomize``), so a run of the
suite is reproducible and CI cannot fail on an example nobody has seen locally. Set
``FRAGSIM_HYPOTHESIS=explore`` to draw fresh random examples (and a failure prints the
example to pin as a regular test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("FRAGSIM_HYPOTHESIS", "repeatable"))

#: The real public traces: ``$FRAGSIM_TRACES_DIR``, else ``../shared/traces_external``
#: beside the checkout.
SHARED_TRACES = Path(
    os.environ.get("FRAGSIM_TRACES_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "traces_external"
)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of real public traces (``../shared/traces_external``); tests that
    need it skip where it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(
            f"real traces not found at {SHARED_TRACES} (../shared is absent; "
            f"set FRAGSIM_TRACES_DIR to use another copy)"
        )
    return SHARED_TRACES
