"""TensorRT-LLM's per-window pools (``{kind: window_pools}``): one block pool per
attention window (variable sliding window attention, VSWA), split at start-up.

After TensorRT-LLM's KV cache manager (``batch_manager/kvCacheManager.cpp``: one
``WindowBlockManager`` per window size, and its memory split across them):

* layers are grouped by (window, KV bytes per token per layer); full attention's
  window is the maximum sequence length;
* the KV memory is split between the pools in proportion to ``window x bytes per
  token`` of each (each pool sized so that sequences at the maximum length fill every
  pool at once), and never moves;
* blocks are ``tokens_per_block`` tokens (TensorRT-LLM's default 32); a window's
  blocks are reused cyclically, so a windowed sequence holds at most
  ``ceil(W / B) + 1`` blocks;
* admission reserves, by default, every block the request will need to its final
  length (the GUARANTEED_NO_EVICT capacity scheduler; ``reserve_final_length: false``
  is MAX_UTILIZATION: blocks as tokens come);
* with Mamba layers, a state pool of ``max_state_slots`` request states is carved out
  first (TensorRT-LLM's RNN state manager sizes it for ``max_batch_size``).

The pools fill at their own pace: a long-context mix exhausts the full-attention pool
while the windowed ones sit partly empty (stranded). ``largest_contiguous_free_block_ratio``
is the bottleneck pool's, as for ``split_pools`` (``policies.allocators.kv_groups``).
"""

from __future__ import annotations

from policies.allocators.base import PoolSpec
from policies.allocators.kv_groups import (
    KvGroup,
    KvGroupManager,
    KvLayout,
    KvPool,
    layer_kinds_of,
)


def window_layout(
    spec: PoolSpec, tokens_per_block: int, reserve_final_length: bool, max_state_slots: int
) -> KvLayout:
    """The pools and groups (see the module docstring)."""
    kinds = layer_kinds_of(spec)
    windows: dict[tuple[int, int], int] = {}  # (window, bytes/token/layer) -> layers
    for k in kinds:
        if k.kind != "mamba":
            key = (k.window_tokens, k.kv_bytes_per_token_per_layer)
            windows[key] = windows.get(key, 0) + k.layers
    if not windows:
        raise ValueError("window_pools needs at least one attention layer")
    total = spec.capacity_tokens * spec.kv_bytes_per_token
    pools: list[KvPool] = []
    groups: list[KvGroup] = []
    notes: list[str] = []
    state = sum(k.layers * k.state_bytes_per_layer for k in kinds if k.kind == "mamba")
    if state:
        slots = min(max_state_slots, total // (2 * state))
        if slots < 1:
            raise ValueError(f"window_pools: {total:,} bytes hold no request state of {state:,}")
        pools.append(KvPool("state", state, slots))
        groups.append(KvGroup("state", 0, state_blocks=1, state_bytes=state))
        notes.append(f"state pool: {slots:,} request states")
        total -= slots * state
    bt = tokens_per_block
    weights = {
        key: (key[0] or spec.max_seq_tokens) * layers * key[1] for key, layers in windows.items()
    }
    weight_sum = sum(weights.values())
    for (w, per_layer), layers in sorted(windows.items()):
        token_bytes = layers * per_layer
        block = bt * token_bytes
        share = total * weights[(w, per_layer)] // weight_sum
        name = f"window {w}" if w else "full"
        pools.append(KvPool(name, block, share // block))
        groups.append(
            KvGroup(
                name,
                len(pools) - 1,
                bt,
                w,
                token_bytes,
                reserve_ahead=reserve_final_length,
            )
        )
        notes.append(f"{name} pool: {share // block * bt:,} tokens of {layers} layers")
    return KvLayout(tuple(pools), tuple(groups), tuple(notes))


class WindowPoolsManager(KvGroupManager):
    """TensorRT-LLM's per-window pools over :func:`window_layout`."""

    def __init__(
        self,
        spec: PoolSpec,
        *,
        tokens_per_block: int = 32,
        reserve_final_length: bool = True,
        max_state_slots: int = 256,
    ) -> None:
        layout = window_layout(spec, tokens_per_block, reserve_final_length, max_state_slots)
        super().__init__(spec, layout)
