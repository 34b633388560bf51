"""Trace I/O throughput and peak memory on a synthetic 10,000,000-row trace.

Generates the trace (the ``chat`` preset's lengths, Poisson arrivals, all canonical
columns, no prefix hashes) into a temporary folder as Parquet and CSV, then times, each
in a fresh child process pinned to one core's worth of Arrow threads
(``pyarrow.set_cpu_count(1)``, ``set_io_thread_count(1)``):

- ``load``: ``traces.load`` of the whole file into a DataFrame;
- ``describe``: ``traces.describe`` over ``traces.iter_tables`` (streamed, 1M-row chunks);
- ``convert``: ``traces.convert`` CSV -> Parquet and Parquet -> CSV (streamed).

Peak memory is the child's ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (peak resident
set, so it includes the interpreter and imports, about 120 MiB). Each measurement is
repeated (``--repeats``, default 3); ``rows_per_s`` is from the median time,
``rows_per_s_best`` from the fastest (the shared machine is noisy). Targets (issue 2): Parquet
load >= 2,000,000 rows/s, CSV load >= 500,000 rows/s, describe of the 10M-row file under
2 GiB peak. ``--rows N`` shrinks the trace.

Usage: ``python -m benchmarks bench_traces`` or ``python -m benchmarks.bench_traces --rows 1000000``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

GENERATE_CHUNK_ROWS = 1_000_000
TARGETS_ROWS_PER_S = {("load", "parquet"): 2_000_000, ("load", "csv"): 500_000}
DESCRIBE_PEAK_TARGET_MIB = 2048


def _synthetic_tables(rows: int) -> Iterator[pa.Table]:
    """The trace in 1M-row pieces: each from its own seed, ids and arrivals continued."""
    from traces.synth import PRESETS, generate
    from traces.table import from_frame

    t_offset, done = 0.0, 0
    for k in range(-(-rows // GENERATE_CHUNK_ROWS)):
        n = min(GENERATE_CHUNK_ROWS, rows - done)
        spec = PRESETS["chat"].model_copy(update={"duration_s": None, "num_requests": n})
        df = generate(spec, seed=k)
        df["request_id"] += done
        df["arrival_s"] += t_offset
        t_offset = float(df["arrival_s"].iloc[-1])
        done += n
        yield from_frame(df)


def _child(op: str, src: str, dst: str | None) -> None:
    """Run one measurement in this (fresh) process and print one JSON line."""
    import resource

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    import traces

    start = time.perf_counter()
    if op == "load":
        rows = len(traces.load(src))
    elif op == "describe":
        rows = int(traces.describe(traces.iter_tables(src))["rows"])  # type: ignore[call-overload]
    else:
        assert dst is not None
        rows = traces.convert(src, dst)
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": rows, "seconds": seconds, "peak_rss_mib": peak_mib}))


def _measure(op: str, src: Path, dst: Path | None, repeats: int) -> dict[str, object]:
    runs = []
    for _ in range(repeats):
        cmd = [sys.executable, "-m", "benchmarks.bench_traces", "--child", op, str(src)]
        if dst is not None:
            cmd.append(str(dst))
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    seconds = [float(r["seconds"]) for r in runs]
    rows = int(runs[0]["rows"])
    return {
        "rows": rows,
        "seconds": [round(s, 3) for s in seconds],
        "rows_per_s": round(rows / statistics.median(seconds)),
        "rows_per_s_best": round(rows / min(seconds)),
        "peak_rss_mib": round(statistics.median(float(r["peak_rss_mib"]) for r in runs), 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows in the synthetic trace")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per measurement (median reported)"
    )
    parser.add_argument("--quick", action="store_true", help="1,000,000 rows, one repeat")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = min(args.rows, 1_000_000), 1
    if args.child:
        _child(args.child[0], args.child[1], args.child[2] if len(args.child) > 2 else None)
        return
    from traces.writers import write_tables

    with tempfile.TemporaryDirectory(prefix="fragsim-bench-") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        paths = {"parquet": folder / "trace.parquet", "csv": folder / "trace.csv"}
        for path in paths.values():
            write_tables(_synthetic_tables(args.rows), path)
        sizes = {k: p.stat().st_size for k, p in paths.items()}
        print(
            json.dumps(
                {
                    "bench": "traces.generate",
                    "rows": args.rows,
                    "seconds": round(time.perf_counter() - start, 2),
                    "bytes": sizes,
                }
            ),
            flush=True,
        )
        common = {"threads": 1, "memory": "child ru_maxrss, median", "repeats": args.repeats}
        for op in ("load", "describe"):
            for kind, path in paths.items():
                result = _measure(op, path, None, args.repeats)
                line: dict[str, object] = {
                    "bench": f"traces.{op}",
                    "format": kind,
                    **result,
                    **common,
                }
                target = TARGETS_ROWS_PER_S.get((op, kind))
                if target:
                    line.update(
                        target_rows_per_s=target, meets_target=bool(result["rows_per_s"] >= target)
                    )  # type: ignore[operator]
                if op == "describe":
                    line.update(
                        target_peak_rss_mib=DESCRIBE_PEAK_TARGET_MIB,
                        meets_target=bool(result["peak_rss_mib"] < DESCRIBE_PEAK_TARGET_MIB),
                    )  # type: ignore[operator]
                print(json.dumps(line), flush=True)
        for src, dst in (("csv", "parquet"), ("parquet", "csv")):
            out = folder / f"converted.{dst}"
            result = _measure("convert", paths[src], out, args.repeats)
            print(
                json.dumps(
                    {"bench": "traces.convert", "format": f"{src}->{dst}", **result, **common}
                ),
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
