"""The engine on the real public traces: Azure 2023 (conversation and code) and
Mooncake FAST'25 (prefix hashes over 512-token blocks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.fast_exact import assert_modes_agree
from support.scenarios import scenario_data

import traces
from sim.runner import run
from sim.scenario.schema import parse_scenario


def scenario(trace: Path, allocator: dict[str, Any], **hardware: Any) -> Any:
    return parse_scenario(
        {
            "name": "real",
            "workload": {"trace": str(trace), "max_requests": 1500},
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", **hardware},
            "allocator": allocator,
            "metrics": {"sample_interval_s": 30},
        }
    )


# A deliberate sample, one kind of each family, on the real traces (slow); every
# registered kind runs on synthetic workloads in the registry-driven tests.
@pytest.mark.parametrize(
    "allocator",
    [
        {"kind": "paged"},
        {"kind": "best_fit"},
        {"kind": "static", "mode": "max"},
        {"kind": "caching"},
    ],
    ids=lambda a: a["kind"],
)
@pytest.mark.parametrize(
    "name", ["AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"]
)
def test_azure_traces_run_under_every_allocator_family(
    shared_traces: Path, name: str, allocator: dict[str, Any]
) -> None:
    path = shared_traces / "azure_llm_2023" / name
    sc = scenario(path, allocator)
    result = run(sc, traces.load(path).iloc[:1500])
    req = result.requests
    assert len(req) == 1500
    # Prompts at or past Llama-2's 4,096-token limit are refused; the rest complete.
    too_long = req["prompt_tokens"] >= 4096
    assert (req.loc[too_long, "status"] == "rejected-too-long").all()
    assert (req.loc[~too_long, "status"] == "ok").mean() > 0.95
    ts = result.timeseries
    total = ts["used_tokens"] + ts["reserved_unused_tokens"] + ts["free_tokens"]
    assert (total == ts["capacity_tokens"]).all()


def test_mooncake_prefix_hashes_are_served_from_the_prefix_cache(shared_traces: Path) -> None:
    """With a pool large enough never to evict, the live cache hits what describe()
    counts with an unlimited cache; a smaller pool evicts and hits less."""
    path = shared_traces / "mooncake_fast25" / "conversation_trace.jsonl"
    df = traces.load(path).iloc[:600]
    reuse = traces.describe(df)["prefix_reuse_token_ratio"]
    shares = {}
    for capacity in (50_000_000, 2_000_000):
        sc = scenario(
            path,
            {"kind": "paged", "block_size_tokens": 16, "hash_block_tokens": 512},
            max_seq_tokens=131072,
            kv_capacity_tokens=capacity,
        )
        req = run(sc, df).requests
        assert (req["status"] == "ok").all()
        shares[capacity] = req["cached_tokens"].sum() / req["prompt_tokens"].sum()
    assert shares[50_000_000] == pytest.approx(reuse, abs=1e-3)
    assert shares[2_000_000] < shares[50_000_000]


@pytest.mark.parametrize(
    ("relative", "allocator", "capacity_tokens"),
    [
        ("mooncake_fast25/conversation_trace.jsonl", {"kind": "paged"}, 40_000),
        ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", {"kind": "best_fit"}, 30_000),
        ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", {"kind": "vm_paged"}, 60_000),
    ],
    ids=["mooncake-paged", "azure-code-best-fit", "azure-conv-vm-paged"],
)
def test_fast_and_exact_modes_agree_on_real_traces(
    shared_traces: Path, relative: str, allocator: dict[str, Any], capacity_tokens: int
) -> None:
    """Every request, sample, event and the summary, on tight pools (preemptions,
    failures, prefix-cache hits) over the first 1,500 requests of each trace."""
    df = traces.load(shared_traces / relative).iloc[:1500].reset_index(drop=True)
    data = scenario_data(
        allocator,
        capacity_tokens,
        name="real",
        sample_interval_s=7.0,
        scheduler={"max_num_seqs": 64},
    )
    assert_modes_agree(data, df, in_hypothesis=False)
