"""Golden digests of every output value of a few short runs: requests, timeseries and
events (each column's dtype and exact values) and the summary JSON. Both builds run this
test (``make test``), so it holds the pure and the compiled engine to the same bits, and
any change of behaviour anywhere shows up here.

Regenerate after an intended change with
``FRAGSIM_UPDATE_GOLDEN=1 pytest tests/golden/test_output_digests.py`` (on the pure
build) and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.results.io import RunResult
from sim.runner import run
from sim.scenario.builtin import builtin_data
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

GOLDEN = Path(__file__).parent / "data" / "output_digests.json"
SHORT_S = {"seed-bimodal-best-fit-daily-restart": 21_600.0, "system-prompt-paged": 900.0}


def frame_digest(df: pd.DataFrame) -> str:
    """Column names, dtypes and exact values (float bits, not their printing)."""
    h = hashlib.sha256()
    for name in df.columns:
        column = df[name]
        h.update(f"{name}:{column.dtype}\n".encode())
        values = column.to_numpy()
        if values.dtype.kind in "biuf":
            h.update(np.ascontiguousarray(values).tobytes())
        else:
            h.update("\x00".join(map(repr, values.tolist())).encode())
    return h.hexdigest()


def digests(result: RunResult) -> dict[str, str]:
    summary = json.dumps(result.summary.to_json_dict(), sort_keys=True, default=repr).encode()
    return {
        "requests": frame_digest(result.requests),
        "timeseries": frame_digest(result.timeseries),
        "events": frame_digest(result.events),
        "summary": hashlib.sha256(summary).hexdigest(),
    }


def compute() -> dict[str, dict[str, str]]:
    out = {}
    for name, duration_s in SHORT_S.items():
        data = builtin_data(name)
        workload = dict(data["workload"])  # type: ignore[call-overload]
        workload["synth"] = {**dict(workload.get("synth") or {}), "duration_s": duration_s}
        data["workload"] = workload
        if "restart" in data:
            data["restart"] = {**data["restart"], "every_s": 7_200.0}  # type: ignore[dict-item]
        scenario = parse_scenario(data, source=name)
        out[name] = digests(run(scenario, load_workload(scenario)))
    return out


@pytest.mark.slow
def test_every_output_value_matches_its_golden_digest() -> None:
    got = compute()
    if os.environ.get("FRAGSIM_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got == want
