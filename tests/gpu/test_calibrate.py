"""The calibration grid and its held-out error."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")

from gpu_backend.calibrate import FULL_GRID, QUICK_GRID, Measurement, kfold_mape  # noqa: E402


def test_grid_has_no_empty_step_and_spans_prefill() -> None:
    for grid in (FULL_GRID, QUICK_GRID):
        points = grid.points()
        assert (0, grid.context_tokens[0], 0) not in points and len(set(points)) == len(points)
        prefills = {p for _, _, p in points if p}
        assert max(prefills) / min(prefills) >= 8  # the quadratic term is identified


def test_kfold_recovers_an_exact_model() -> None:
    d, c, p = (np.array(x) for x in zip(*FULL_GRID.points(), strict=True))
    k = d * c + p
    y = 2e-3 + 1e-5 * p + 3e-5 * d + 2e-8 * k + 1e-9 * p * p
    m = Measurement(d, c, p, k, y)
    assert kfold_mape(m, 5) < 1e-6
    noisy = Measurement(d, c, p, k, y * np.random.default_rng(0).uniform(0.9, 1.1, y.size))
    assert 0.01 < kfold_mape(noisy, 5) < 0.2
