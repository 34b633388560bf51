"""``fragsim trace ...``: describe, convert and synthesise request traces.

Every user error (a bad file, field, spec or option) prints one ``error: ...`` line on
stderr and exits with status 2; outputs are written atomically, so a failed command
leaves no partial file. Repairs (sorting, dropped failed rows) print ``warning: ...``.

``--rate`` and ``--seed`` of ``describe`` / ``convert`` draw the arrivals of a
length-only file; they are checked (rate > 0 and <= 1e6 req/s, seed >= 0) only there.
A file with its own arrival times ignores them, with one warning when they are given.

This module is the front (the sub-commands' options and help); their work is
:mod:`sim.cli.bodies.trace` (:mod:`sim.cli.lazy`), which other bodies reuse too
(``show_trace_warnings``: TraceWarnings as ``warning:`` lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli import lazy
from sim.cli.output import Format, FormatOption, format_option

trace_app = typer.Typer(
    help="Read, check, describe, convert and synthesise traces.", no_args_is_help=True
)

FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help=(
            "Input format: canonical, azure, vidur, mooncake, burstgpt, lengths (default: from the header)."
        ),
    ),
]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Unsorted arrivals are an error, not sorted.")
]
RateOpt = Annotated[
    float | None,
    typer.Option(
        "--rate",
        help=(
            "Length-only files: Poisson arrival rate, requests/s (default 1; > 0, <= 1e6). "
            "Ignored, with a warning, for files with their own arrival times."
        ),
    ),
]
ArrivalSeedOpt = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="Length-only files: seed of the arrival draws (default 0; >= 0). Ignored, "
        "with a warning, for files with their own arrival times.",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the random stream (>= 0).")]
KeepFailedOpt = Annotated[
    bool,
    typer.Option(
        "--keep-failed",
        help=("BurstGPT: keep failed rows (0 response tokens) instead of dropping them."),
    ),
]


@trace_app.command()
def describe(
    file: Annotated[Path, typer.Argument(help="Trace file (CSV, JSONL or Parquet).")],
    format: FormatOpt = None,
    strict: StrictOpt = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole summary as one JSON object.")
    ] = False,
    rate: RateOpt = None,
    seed: ArrivalSeedOpt = None,
    keep_failed: KeepFailedOpt = False,
    out_format: Annotated[
        Format,
        format_option(
            "--output-format",
            help="Tables as table (fits the terminal), csv, json or markdown "
            "(-f/--format names the input's format).",
        ),
    ] = "table",
) -> None:
    """Rows, span, rate, length percentiles and prefix reuse (streamed: bounded memory)."""
    lazy.call(
        "sim.cli.bodies.trace:describe",
        file=file,
        format=format,
        strict=strict,
        as_json=as_json,
        rate=rate,
        seed=seed,
        keep_failed=keep_failed,
        out_format=out_format,
    )


@trace_app.command()
def convert(
    src: Annotated[Path, typer.Argument(help="Input trace, any readable format.")],
    dst: Annotated[Path, typer.Argument(help="Output: .csv, .jsonl or .parquet (canonical).")],
    format: FormatOpt = None,
    strict: StrictOpt = False,
    rate: RateOpt = None,
    seed: ArrivalSeedOpt = None,
    keep_failed: KeepFailedOpt = False,
) -> None:
    """Convert a trace to canonical CSV / JSONL / Parquet (streamed, atomic)."""
    lazy.call(
        "sim.cli.bodies.trace:convert",
        src=src,
        dst=dst,
        format=format,
        strict=strict,
        rate=rate,
        seed=seed,
        keep_failed=keep_failed,
    )


@trace_app.command()
def synth(
    preset: Annotated[
        str,
        typer.Argument(
            help="A preset name (see `fragsim trace presets`) or a SynthSpec YAML/JSON file."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output: .csv, .jsonl or .parquet.")],
    seed: SeedOpt = 0,
    rate: Annotated[
        float | None, typer.Option("--rate", help="Override the Poisson/Gamma rate, req/s.")
    ] = None,
    duration_s: Annotated[
        float | None, typer.Option("--duration-s", help="Override: generate this many seconds.")
    ] = None,
    num_requests: Annotated[
        int | None, typer.Option("--num-requests", help="Override: generate this many requests.")
    ] = None,
) -> None:
    """Synthesise a trace from a preset or a spec file (same seed => same bytes)."""
    lazy.call(
        "sim.cli.bodies.trace:synth",
        preset=preset,
        out=out,
        seed=seed,
        rate=rate,
        duration_s=duration_s,
        num_requests=num_requests,
    )


@trace_app.command()
def presets(
    as_json: Annotated[bool, typer.Option("--json", help="Print the specs as JSON.")] = False,
    fmt: FormatOption = "table",
) -> None:
    """List the synthetic workload presets."""
    lazy.call("sim.cli.bodies.trace:presets", as_json=as_json, fmt=fmt)
