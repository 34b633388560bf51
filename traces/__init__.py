"""Request traces: the canonical schema, loaders for public formats, synthetic
generators and transforms. Imports nothing from the rest of fragsim.

Public API: :func:`load` (DataFrame) and :func:`load_table` (Arrow), :func:`iter_chunks`
(DataFrames) and :func:`iter_tables` (Arrow), :func:`load_lengths`, :func:`describe`,
:func:`convert`, :func:`write`, :class:`TraceError`, :class:`TraceWarning`,
:data:`FORMATS`, and the modules :mod:`traces.synth` (specs, presets, ``generate``),
:mod:`traces.arrivals` (arrival processes), :mod:`traces.transform` and
:mod:`traces.bounds` (the limits on a workload's size and span, checked before work).
"""

from traces import bounds, synth, transform
from traces.convert import convert
from traces.describe import describe
from traces.errors import TraceError, TraceWarning
from traces.formats import FORMATS, detect_format
from traces.loaders import iter_chunks, iter_tables, load, load_lengths, load_table, sample_path
from traces.table import from_frame, to_frame
from traces.writers import write, write_tables

__all__ = [
    "FORMATS",
    "TraceError",
    "TraceWarning",
    "bounds",
    "convert",
    "describe",
    "detect_format",
    "from_frame",
    "iter_chunks",
    "iter_tables",
    "load",
    "load_lengths",
    "load_table",
    "sample_path",
    "synth",
    "to_frame",
    "transform",
    "write",
    "write_tables",
]
