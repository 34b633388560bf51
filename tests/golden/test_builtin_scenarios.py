"""Golden seeded summaries of the built-in scenarios, shortened to run in seconds.

Regenerate after an intended change of behaviour with
``FRAGSIM_UPDATE_GOLDEN=1 pytest tests/golden/test_builtin_scenarios.py`` and review the
diff of ``tests/golden/data/builtin_summaries.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sim.results.summary_model import Summary
from sim.runner import run
from sim.scenario.builtin import builtin_data, builtin_names
from sim.scenario.schema import parse_scenario
from sim.scenario.workload import load_workload

GOLDEN = Path(__file__).parent / "data" / "builtin_summaries.json"
SHORT_S = {
    "seed-postmortem": 21_600.0,
    "seed-postmortem-runbook": 21_600.0,
    "seed-bimodal-best-fit": 43_200.0,
    "seed-bimodal-paged": 43_200.0,
    "seed-bimodal-best-fit-daily-restart": 43_200.0,
}


def shortened(name: str) -> Any:
    data = builtin_data(name)
    workload = dict(data["workload"])  # type: ignore[call-overload]
    synth = dict(workload.get("synth") or {})
    synth["duration_s"] = SHORT_S.get(name, 900.0)
    workload["synth"] = synth
    data["workload"] = workload
    if "restart" in data:
        data["restart"] = {**data["restart"], "every_s": 10_800.0}  # type: ignore[dict-item]
    return parse_scenario(data, source=name)


def headline(summary: Summary) -> dict[str, Any]:
    """The numbers a behaviour change would move."""
    failures = summary.failures.to_json_dict()
    return (
        {
            "requests": summary.requests.to_json_dict(),
            "failures": {
                k: failures[k]
                for k in (
                    "allocation_failures",
                    "by_cause",
                    "at_high_free_memory",
                    "preemptions",
                    "restarts",
                )
            },
            "ratio_min": summary.memory.largest_contiguous_free_block_ratio.min,
            "waste_breakdown": summary.memory.waste_breakdown,
            "ttft_p50_s": summary.latency_s.ttft.p50,
            "e2e_p99_s": summary.latency_s.e2e.p99,
            "alerts": sorted(a.alert for a in summary.alerts),
            "end_s": summary.engine.end_s,
        }
        | _fleet_headline(summary)
        | _offload_headline(summary)
    )


def _fleet_headline(summary: Summary) -> dict[str, Any]:
    if summary.fleet is None:
        return {}
    fleet = summary.fleet.to_json_dict()
    keys = ("replicas", "replica_hours", "avoidable_replica_hours", "restarts", "scale_ups")
    out = {k: fleet[k] for k in keys}
    if "disagg" in fleet:  # a disaggregated fleet: its transfers and refusals
        out["disagg"] = {k: fleet["disagg"][k] for k in ("transfers", "refusals", "fates")}
    return {"fleet": out}


def _offload_headline(summary: Summary) -> dict[str, Any]:
    if summary.offload is None:
        return {}
    keys = ("hits", "misses", "hit_tokens", "evictions", "bytes_down", "load_s")
    return {"offload": [{k: t.to_json_dict()[k] for k in keys} for t in summary.offload.tiers]}


def rounded(value: Any) -> Any:
    """Floats to 9 significant digits, so the comparison survives float re-association."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def compute() -> dict[str, Any]:
    out = {}
    for name in builtin_names():
        scenario = shortened(name)
        out[name] = rounded(headline(run(scenario, load_workload(scenario)).summary))
    return out


@pytest.mark.slow
def test_builtin_scenarios_match_golden_summaries() -> None:
    got = compute()
    if os.environ.get("FRAGSIM_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert set(got) == set(want)
    for name in want:
        assert got[name] == want[name], name
