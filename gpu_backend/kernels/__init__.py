"""Triton paged-attention kernels, each beside a plain-torch reference.

Modules (import the one you need; only ``reference`` and ``problems`` work without
triton):

- ``reference``: ``ref_write_kv``, ``ref_paged_decode``, ``ref_paged_prefill`` —
  gather by block table, then attention, in fp32. Slow and obvious on purpose.
- ``kv_write``: ``write_kv`` — scatter new tokens' K/V into their slots.
- ``decode``: ``paged_decode`` — one query token per sequence, split-K over the
  context with a log-sum-exp merge.
- ``prefill``: ``paged_prefill`` — packed new tokens per sequence, causal over the
  cached prefix and themselves.
- ``checks``: the launchers' input validation (every error is a ``ValueError``
  naming the argument).
- ``problems``: random paged problems (shuffled block tables, poisoned unused slots)
  for the tests and the benchmark.
- ``bench``: ``bench_decode`` and ``copy_bandwidth``.

Layout shared by all: a per-layer cache is ``[num_blocks, block_size, kv_heads,
head_dim]``; a sequence's token ``t`` lives at ``block_tables[s, t // block_size]``,
row ``t % block_size``; a slot is ``block_id * block_size + row``. Query head ``h``
reads KV head ``h // group`` with ``group = q_heads // kv_heads``.

On a machine without CUDA, set ``TRITON_INTERPRET=1`` before triton is imported; the
launchers then take CPU tensors (and refuse bf16 attention, see ``checks``).
"""
