"""Decoder layers: preset shapes and a forward pass over the paged pool."""

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="the GPU backend needs torch (the gpu extra)")

from gpu_backend.device import select_kernels  # noqa: E402
from gpu_backend.kv_pool import PagedKVPool  # noqa: E402
from gpu_backend.model import TINY, DecoderStack, ModelShape  # noqa: E402
from gpu_backend.replay import build_batch  # noqa: E402


def test_preset_shapes() -> None:
    s = ModelShape.preset("llama-3-8b")
    assert (s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim) == (4096, 32, 8, 128)
    assert (s.intermediate_size, s.num_layers) == (14336, 32)
    with pytest.raises(ValueError, match="unknown model preset"):
        ModelShape.preset("gpt-5")


@pytest.mark.parametrize("kernels", ["reference", "auto"])
def test_forward_writes_kv_and_keeps_shapes(kernels: str) -> None:
    dev = torch.device("cpu")
    stack = DecoderStack(
        TINY, 2, dtype=torch.float32, device=dev, kernels=select_kernels(dev, kernels)
    )
    pool = PagedKVPool(2, 8, 16, TINY.num_kv_heads, TINY.head_dim, dtype=torch.float32, device=dev)
    batch = build_batch([([3, 5], 0, 20)], [([1, 0], 18), ([7], 2)], 16, dev)
    slots = batch.slot_mapping.tolist()
    assert slots[:16] == list(range(48, 64)) and slots[16:] == [80, 81, 82, 83, 1, 113]
    x = stack.inputs(batch.num_tokens)
    y = stack.forward(x, batch, pool.k, pool.v)
    assert y.shape == (22, TINY.hidden_size) and torch.isfinite(y).all()
    assert pool.k[1][3].abs().sum() > 0 and pool.k[1][2].abs().sum() == 0
    assert stack.depth_scale == TINY.num_layers / 2
    with pytest.raises(ValueError, match="layers_run"):
        DecoderStack(
            TINY, 9, dtype=torch.float32, device=dev, kernels=select_kernels(dev, "reference")
        )
