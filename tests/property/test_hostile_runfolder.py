"""Property: whatever value of whatever checked column of whatever table of a run folder
is changed after the run -- NaN, an infinity, a huge or negative number, or a value a
run could write -- every reading command refuses the folder with one ``error:`` line
naming that table, exit status 2, and writes nothing (out of range: the column and row;
in range: the digest the summary records)."""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.hostile import refused
from typer.testing import CliRunner

from sim.cli import app
from sim.results.table_schema import COLUMNS

SCENARIO: dict[str, Any] = {
    "name": "prop",
    "seed": 2,
    "workload": {"preset": "chat", "synth": {"num_requests": 20}},
    "hardware": {"kv_capacity_tokens": 3000},
    "allocator": {"kind": "paged"},
    "metrics": {"sample_interval_s": 5.0},
    "fleet": {
        "pools": [{"name": "a", "count": 2}],
        "lifecycle": {"provision": {"mean_s": 1.0}, "load": {"mean_s": 1.0}, "warmup_s": 1.0},
    },
}
VALUES = st.sampled_from(
    [float("nan"), float("inf"), -float("inf"), -1.0, -1e300, 1e300, 2.0**62, 0.5, 0.0, 7.0]
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("prop")
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = folder / "run"
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "-q", "--no-report"])
    assert result.exit_code == 0, result.output
    return out


def _numeric(run: Path) -> list[tuple[str, str]]:
    found = []
    for table, columns in COLUMNS.items():
        t = pq.read_table(run / f"{table}.parquet")
        for column, kind in columns.items():
            if t.num_rows and kind not in ("text", "flag") and column in t.column_names:
                found.append((table, column))
    return found


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), value=VALUES)
def test_any_value_changed_after_the_run_is_refused_naming_its_table(
    run: Path, data: st.DataObject, value: float
) -> None:
    table, column = data.draw(st.sampled_from(_numeric(run)))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy)
        path = copy / f"{table}.parquet"
        frame = pq.read_table(path).to_pandas()
        row = data.draw(st.integers(0, len(frame) - 1))
        before = float(frame[column].astype(float).iloc[row])
        assume(not (before == value or (math.isnan(before) and math.isnan(value))))
        frame[column] = frame[column].astype(float)
        frame.loc[row, column] = value
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
        out = Path(tmp) / "x.om"
        for args in (["export", "openmetrics", copy, "-o", out], ["alerts", "show", copy]):
            line = refused(CliRunner().invoke(app, [str(a) for a in args]), "")
            assert str(path) in line, line
            assert not out.exists()
