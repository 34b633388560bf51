"""GPU-backend tests: run the Triton kernels under the interpreter where there is no
CUDA device.

``TRITON_INTERPRET=1`` must be set before triton is first imported (``triton.jit``
reads it when a kernel is defined), so this conftest sets it when torch sees no CUDA
and the variable is unset; it is loaded only when ``tests/gpu`` is collected, and no
other test directory imports triton. Without torch it does nothing and the modules
skip themselves (``pytest.importorskip``).
"""

from __future__ import annotations

import os

import pytest

try:
    import torch
except ImportError:  # the modules skip themselves
    torch = None  # type: ignore[assignment]

if torch is not None and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def device() -> str:
    """Where the kernels run: ``cuda`` on a GPU machine, else ``cpu`` (interpreter)."""
    return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
