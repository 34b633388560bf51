"""Cost of one ``LatencyModel.steps_within_s`` call (the engine makes about two per
request).

Case ``latency.steps_within``: roofline Llama-2-7B on one A100-80GB, a decode run of 34
sequences starting at 46,000 KV tokens, a 0.2 s budget, at most 4,096 steps. Times the
closed-form inversion (``steps_within_s``) and the binary search it replaced
(``bisect_steps_within_s``, O(log max_steps) evaluations), each as the median over
``repeats`` windows of ``calls`` calls, in microseconds per call, and their ratio. Both
must return the same integer (checked before timing).

Run: ``python -m benchmarks bench_latency`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from sim.build import engine_build
from sim.latency.base import bisect_steps_within_s
from sim.latency.models import RooflineLatency
from sim.models.hardware import GPUS, MODELS

DECODE_SEQS = 34
KV_TOKENS_START = 46_000
BUDGET_S = 0.2
MAX_STEPS = 4096


def _median_us_per_call(call: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over ``repeats`` windows of the wall time of one call, in microseconds."""
    windows = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        windows.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(windows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_latency", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="Fewer calls (smoke run).")
    parser.add_argument("--repeats", type=int, default=7, help="Timed windows per function.")
    args = parser.parse_args(argv)
    calls = 2_000 if args.quick else 50_000
    model = RooflineLatency(MODELS["llama-2-7b"], GPUS["a100-80gb"])
    case = (DECODE_SEQS, KV_TOKENS_START, BUDGET_S, MAX_STEPS)
    steps = model.steps_within_s(*case)
    if steps != bisect_steps_within_s(model, *case):
        raise SystemExit("steps_within_s disagrees with the binary search")
    new_us = _median_us_per_call(lambda: model.steps_within_s(*case), calls, args.repeats)
    old_us = _median_us_per_call(lambda: bisect_steps_within_s(model, *case), calls, args.repeats)
    line = {
        "bench": "latency.steps_within",
        "model": "roofline llama-2-7b a100-80gb tp1",
        "decode_seqs": DECODE_SEQS,
        "kv_tokens_start": KV_TOKENS_START,
        "budget_s": BUDGET_S,
        "max_steps": MAX_STEPS,
        "steps": steps,
        "us_per_call": round(new_us, 3),
        "bisect_us_per_call": round(old_us, 3),
        "speedup": round(old_us / new_us, 2),
        "calls": calls,
        "repeats": args.repeats,
    }
    print(json.dumps({**line, "engine_build": engine_build()}), flush=True)


if __name__ == "__main__":
    main()
