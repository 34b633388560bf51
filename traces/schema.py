"""The canonical request record every loader produces and every consumer reads.

A trace is a pandas DataFrame (or an Arrow table with the same columns) sorted by
``arrival_s``. Required columns are always present; optional columns may be absent,
and consumers use :data:`OPTIONAL_DEFAULTS` when they are.

Columns
-------
request_id : int64
    Unique within the trace. Loaders that read formats without ids (or canonical files
    without this column) number data rows 0..n-1 in file order.
arrival_s : float64
    Seconds from the start of the trace (the first request need not be at 0).
prompt_tokens : int64
    Prompt (input / context / prefill) length, >= 0.
output_tokens : int64
    Tokens to generate (decode length), >= 0.
prefix_hashes : list<int64>, optional
    Chained prefix-block hashes: ``prefix_hashes[i]`` identifies the prompt's first
    ``(i + 1) * prefix_block_tokens`` tokens, so equal values mean equal prefixes up to
    that block (Mooncake's ``hash_ids``).
prefix_block_tokens : int64, optional
    The block size, in tokens, the hashes were made with (512 for Mooncake). 0 when a
    row has no hashes.
num_samples : int64, optional
    Parallel sampling n (default 1): n sequences share the prompt and decode apart.
beam_width : int64, optional
    Beam search width (default 1).
session_id : int64, optional
    Conversation/session identifier, where the source has one; <NA> otherwise.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

REQUIRED_COLUMNS: Final = ("request_id", "arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS: Final = (
    "prefix_hashes",
    "prefix_block_tokens",
    "num_samples",
    "beam_width",
    "session_id",
)
OPTIONAL_DEFAULTS: Final = {
    "prefix_hashes": (),
    "prefix_block_tokens": 0,
    "num_samples": 1,
    "beam_width": 1,
    "session_id": None,
}

ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("arrival_s", pa.float64(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
        pa.field("prefix_hashes", pa.list_(pa.int64())),
        pa.field("prefix_block_tokens", pa.int64()),
        pa.field("num_samples", pa.int64()),
        pa.field("beam_width", pa.int64()),
        pa.field("session_id", pa.int64()),
    ]
)
