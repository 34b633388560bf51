"""The paged pool's prefix-cache keys: which cached block holds which content.

vLLM hashes each full block of a request's tokens, chained (a block's hash covers every
token before it), so equal hashes mean equal prefixes. fragsim has no token ids; a
trace gives each prompt chained ``prefix_hashes``, one per ``hash_block_tokens``.
Pool block ``j`` of a prompt is keyed ``(h_k, j)``, ``h_k`` the hash covering its last
token (a cached partly filled last prompt block: ``(h_k, j, fill_tokens)``).

Blocks of generated tokens (vLLM caches them too). Their content is the request's own
output, so only the same request finds them again -- when it is recomputed after a
preemption. Such a block ``j`` (past the prompt's hashed blocks) is keyed
``(owner, j, -1, -1)``, ``owner`` the request's id: a key of four fields never equals a
prompt key.
"""

from __future__ import annotations

from collections.abc import Sequence

BlockKey = tuple[int, ...]
"""``(hash, block_index)`` for a full prompt block, ``(hash, block_index, fill_tokens)``
for a cached partial last prompt block, ``(owner, block_index, -1, -1)`` for a block of
generated tokens."""


def prompt_block_keys(
    tokens: int,
    hashes: Sequence[int],
    block_tokens: int,
    hash_block_tokens: int,
    cache_partial: bool,
) -> list[BlockKey]:
    """Keys of a prompt's cacheable blocks among its first ``tokens``, leading and
    contiguous from block 0."""
    bt, hbt = block_tokens, hash_block_tokens
    n_full = tokens // bt
    if bt == hbt:
        keys: list[BlockKey] = [(h, j) for j, h in enumerate(hashes[:n_full])]
    else:
        keys = []
        for j in range(n_full):
            k = ((j + 1) * bt - 1) // hbt
            if k >= len(hashes):
                break
            keys.append((hashes[k], j))
    fill = tokens - n_full * bt
    if cache_partial and fill and len(keys) == n_full:
        k = (tokens - 1) // hbt
        if k < len(hashes):
            keys.append((hashes[k], n_full, fill))
    return keys


def generated_block_keys(owner: int, first_block: int, end_block: int) -> list[BlockKey]:
    """Keys of request ``owner``'s blocks ``first_block .. end_block - 1`` past its
    prompt's hashed blocks."""
    return [(owner, j, -1, -1) for j in range(first_block, end_block)]


def key_fill_tokens(key: BlockKey, block_tokens: int) -> int:
    """Tokens the cached block of ``key`` holds."""
    return key[2] if len(key) == 3 else block_tokens


def leading_hits(
    keys: list[BlockKey], cache: dict[BlockKey, int], block_tokens: int, max_hit_tokens: int
) -> list[tuple[BlockKey, int]]:
    """(key, cached block) of the leading ``keys`` found in ``cache``, up to the first
    miss and, when ``max_hit_tokens`` >= 0, at most that many tokens."""
    out: list[tuple[BlockKey, int]] = []
    hit_tokens = 0
    for key in keys:
        hit_tokens += key_fill_tokens(key, block_tokens)
        if 0 <= max_hit_tokens < hit_tokens:
            break
        b = cache.get(key)
        if b is None:
            break
        out.append((key, b))
    return out
