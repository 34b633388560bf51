"""The launchers refuse what the kernels would read out of bounds or compute wrongly:
one case per error path, each a ``ValueError`` whose message starts with the
argument's name. Also a smoke run of the benchmark helpers (no timing asserted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")
pytest.importorskip("triton", reason="the GPU backend needs triton (the gpu extra)")

from gpu_backend.kernels.bench import bench_decode, copy_bandwidth  # noqa: E402
from gpu_backend.kernels.decode import paged_decode  # noqa: E402
from gpu_backend.kernels.kv_write import write_kv  # noqa: E402
from gpu_backend.kernels.prefill import paged_prefill  # noqa: E402

pytestmark = pytest.mark.gpu

Args = dict[str, Any]


def decode_args(device: str) -> Args:
    """Two sequences (17 and 32 tokens) over a 6-block cache, group 2."""
    return {
        "q": torch.zeros((2, 4, 16), device=device),
        "k_cache": torch.zeros((6, 16, 2, 16), device=device),
        "v_cache": torch.zeros((6, 16, 2, 16), device=device),
        "block_tables": torch.tensor([[0, 1, -1], [2, 3, 99]], dtype=torch.int32, device=device),
        "context_lens": torch.tensor([17, 32], dtype=torch.int32, device=device),
        "scale": 0.25,
    }


def prefill_args(device: str) -> Args:
    args = decode_args(device)
    args["q"] = torch.zeros((5, 4, 16), device=device)
    args["query_start_loc"] = torch.tensor([0, 2, 5], device=device)
    return args


def write_args(device: str) -> Args:
    return {
        "k": torch.zeros((3, 2, 16), device=device),
        "v": torch.zeros((3, 2, 16), device=device),
        "k_cache": torch.zeros((6, 16, 2, 16), device=device),
        "v_cache": torch.zeros((6, 16, 2, 16), device=device),
        "slot_mapping": torch.tensor([0, 17, 95], device=device),
    }


def put(name: str, make: Callable[[Args], Any]) -> Callable[[Args], None]:
    def edit(args: Args) -> None:
        args[name] = make(args)

    return edit


def caches(make: Callable[[Any], Any]) -> Callable[[Args], None]:
    def edit(args: Args) -> None:
        args["k_cache"], args["v_cache"] = make(args["k_cache"]), make(args["v_cache"])

    return edit


SHARED_CASES = [
    ("cache-dims", put("k_cache", lambda a: a["k_cache"][0]), "k_cache: expected 4 dims"),
    (
        "cache-dtype",
        put("k_cache", lambda a: a["k_cache"].to(torch.int8)),
        "k_cache: expected dtype",
    ),
    (
        "cache-stride",
        put("v_cache", lambda a: a["v_cache"].transpose(2, 3)),
        "v_cache: expected head_dim contiguous",
    ),
    (
        "v-shape",
        put("v_cache", lambda a: a["v_cache"][:5]),
        "v_cache: expected the shape of k_cache",
    ),
    (
        "v-dtype",
        put("v_cache", lambda a: a["v_cache"].half()),
        "v_cache: expected the dtype of k_cache",
    ),
    ("block-size-8", caches(lambda c: c[:, :8]), "k_cache: block_size .* power of two >= 16"),
    (
        "block-size-48",
        caches(lambda c: c.repeat(1, 3, 1, 1)),
        "k_cache: block_size .* power of two >= 16",
    ),
    ("head-dim-8", caches(lambda c: c[..., :8]), "k_cache: head_dim .* power of two >= 16"),
]

ATTENTION_CASES = [
    *SHARED_CASES,
    ("q-dims", put("q", lambda a: a["q"][0]), "q: expected 3 dims"),
    ("q-dtype", put("q", lambda a: a["q"].double()), "q: expected the cache's dtype"),
    ("q-head-dim", put("q", lambda a: a["q"].repeat(1, 1, 2)), "q: expected head_dim 16"),
    (
        "q-stride",
        put("q", lambda a: a["q"].transpose(1, 2)),
        "q: expected head_dim contiguous|q: expected head_dim 16",
    ),
    ("q-heads", put("q", lambda a: a["q"][:, :3]), "q: q_heads must be a positive multiple"),
    ("scale-nan", put("scale", lambda a: float("nan")), "scale: expected a finite float"),
    ("scale-str", put("scale", lambda a: "0.5"), "scale: expected a finite float"),
    (
        "device",
        put("block_tables", lambda a: a["block_tables"].to("meta")),
        "block_tables: expected device",
    ),
    (
        "tables-dims",
        put("block_tables", lambda a: a["block_tables"][0]),
        "block_tables: expected 2 dims",
    ),
    (
        "tables-dtype",
        put("block_tables", lambda a: a["block_tables"].float()),
        "block_tables: expected dtype",
    ),
    (
        "tables-rows",
        put("block_tables", lambda a: a["block_tables"][:1]),
        "block_tables: expected 2 rows",
    ),
    (
        "lens-count",
        put("context_lens", lambda a: a["context_lens"][:1]),
        "context_lens: expected 2 entries",
    ),
    (
        "lens-zero",
        put("context_lens", lambda a: a["context_lens"] * 0),
        "context_lens: expected every length >= 1",
    ),
    (
        "lens-long",
        put("context_lens", lambda a: a["context_lens"] + 17),
        "context_lens: expected every length <= max_blocks",
    ),
    (
        "live-id-negative",
        put("block_tables", lambda a: a["block_tables"].flip(1)),
        r"block_tables: expected live block ids in \[0, 6\)",
    ),
    (
        "live-id-large",
        put(
            "context_lens",
            lambda a: torch.tensor([17, 33], dtype=torch.int32, device=a["q"].device),
        ),
        r"block_tables: expected live block ids in \[0, 6\), got 99",
    ),
]


@pytest.mark.parametrize(
    ("edit", "message"), [c[1:] for c in ATTENTION_CASES], ids=[c[0] for c in ATTENTION_CASES]
)
def test_decode_refuses(device: str, edit: Callable[[Args], None], message: str) -> None:
    args = decode_args(device)
    paged_decode(**args)  # valid as built
    edit(args)
    with pytest.raises(ValueError, match=f"^({message})"):
        paged_decode(**args)


@pytest.mark.parametrize("num_splits", [0, 1.5, True])
def test_decode_refuses_num_splits(device: str, num_splits: Any) -> None:
    with pytest.raises(ValueError, match=r"^num_splits: expected an int >= 1"):
        paged_decode(**decode_args(device), num_splits=num_splits)


PREFILL_CASES = [
    *ATTENTION_CASES,
    (
        "starts-dims",
        put("query_start_loc", lambda a: a["query_start_loc"][None]),
        "query_start_loc: expected 1 dims",
    ),
    (
        "starts-dtype",
        put("query_start_loc", lambda a: a["query_start_loc"].float()),
        "query_start_loc: expected dtype",
    ),
    (
        "starts-empty",
        put("query_start_loc", lambda a: a["query_start_loc"][:0]),
        "query_start_loc: expected \\[batch \\+ 1\\]",
    ),
    (
        "starts-first",
        put("query_start_loc", lambda a: a["query_start_loc"] + 1),
        "query_start_loc: expected offsets from 0 to 5",
    ),
    (
        "starts-last",
        put("query_start_loc", lambda a: a["query_start_loc"][:2]),
        "block_tables: expected 1 rows|query_start_loc: expected offsets",
    ),
    (
        "starts-decreasing",
        put("query_start_loc", lambda a: torch.tensor([0, 6, 5], device=a["q"].device)),
        "query_start_loc: expected non-decreasing",
    ),
    (
        "too-many-new",
        put(
            "context_lens", lambda a: torch.tensor([1, 32], dtype=torch.int32, device=a["q"].device)
        ),
        "query_start_loc: expected at most context_lens",
    ),
]


@pytest.mark.parametrize(
    ("edit", "message"), [c[1:] for c in PREFILL_CASES], ids=[c[0] for c in PREFILL_CASES]
)
def test_prefill_refuses(device: str, edit: Callable[[Args], None], message: str) -> None:
    args = prefill_args(device)
    paged_prefill(**args)  # valid as built
    edit(args)
    with pytest.raises(ValueError, match=f"^({message})"):
        paged_prefill(**args)


WRITE_CASES = [
    *SHARED_CASES,
    ("k-shape", put("k", lambda a: a["k"][:, :1]), r"k: expected shape \[T, 2, 16\]"),
    ("k-dtype", put("k", lambda a: a["k"].half()), "k: expected the cache's dtype"),
    (
        "k-stride",
        put("k", lambda a: torch.zeros((3, 16, 2), device=a["k"].device).transpose(1, 2)),
        "k: expected head_dim contiguous",
    ),
    ("v-tokens", put("v", lambda a: a["v"][:2]), "v: expected the shape of k"),
    (
        "cache-strides",
        put("v_cache", lambda a: torch.zeros((6, 2, 16, 16), device=a["k"].device).transpose(1, 2)),
        "v_cache: expected the strides of k_cache",
    ),
    (
        "slots-dtype",
        put("slot_mapping", lambda a: a["slot_mapping"].int()),
        "slot_mapping: expected dtype torch.int64",
    ),
    (
        "slots-count",
        put("slot_mapping", lambda a: a["slot_mapping"][:2]),
        "slot_mapping: expected 3 slots",
    ),
    (
        "slots-negative",
        put("slot_mapping", lambda a: a["slot_mapping"] - 1),
        r"slot_mapping: expected slots in \[0, 96\)",
    ),
    (
        "slots-past",
        put("slot_mapping", lambda a: a["slot_mapping"] + 1),
        r"slot_mapping: expected slots in \[0, 96\)",
    ),
    (
        "slots-repeated",
        put("slot_mapping", lambda a: a["slot_mapping"] * 0 + 4),
        "slot_mapping: expected distinct slots",
    ),
    (
        "device",
        put("slot_mapping", lambda a: a["slot_mapping"].to("meta")),
        "slot_mapping: expected device",
    ),
]


@pytest.mark.parametrize(
    ("edit", "message"), [c[1:] for c in WRITE_CASES], ids=[c[0] for c in WRITE_CASES]
)
def test_write_kv_refuses(device: str, edit: Callable[[Args], None], message: str) -> None:
    args = write_args(device)
    write_kv(**args)  # valid as built
    edit(args)
    with pytest.raises(ValueError, match=f"^({message})"):
        write_kv(**args)


def test_tensors_on_the_wrong_device_for_the_mode_are_refused(device: str) -> None:
    """Under the interpreter the kernels take CPU tensors; compiled, CUDA tensors."""
    other = "meta" if device == "cpu" else "cpu"
    args = {
        k: v.to(other) if isinstance(v, torch.Tensor) else v for k, v in decode_args(device).items()
    }
    with pytest.raises(
        ValueError, match=r"^q: (TRITON_INTERPRET=1 runs kernels on CPU|Triton compiles for a GPU)"
    ):
        paged_decode(**args)


def test_bench_helpers_report_times_and_bandwidths(device: str) -> None:
    result = bench_decode(2, 40, 4, 2, 16, 16, torch.float32, device, iters=1, warmup=0)
    assert result["kv_bytes"] == 2 * 2 * 40 * 2 * 16 * 4
    for key in ("kernel_s", "reference_s", "sdpa_s", "kernel_bytes_per_s", "sdpa_bytes_per_s"):
        assert result[key] > 0
    copy = copy_bandwidth(device, size_bytes=2**20, iters=1)
    assert copy["size_bytes"] == 2**20 and copy["bytes_per_s"] > 0
