"""Write the synthetic example log of ``fragsim postmortem`` (requests.csv, nodes.csv).

Not production data: a deterministic stand-in drawn with numpy (seed :data:`SEED`), see
README.md beside this script. Run ``python examples/postmortem/make_example.py [OUT_DIR]``
(default: this folder); the same seed gives the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 20240611
REQUESTS = 2000
SPAN_S = 7200.0
REPLICAS = ("node-a", "node-b", "node-c")
UPTIME_S = (5 * 86400.0, 86400.0, 2 * 3600.0)  # node-a: up 5 days at the log start
RESTART_S = 3600.0  # node-a restarts midway
OOM_P = 0.12  # a long request on node-a before its restart fails with this probability
RETRY_OOM_P = 0.6  # ... and its one retry, on the same node, again


def make_rows(rng: np.random.Generator) -> list[tuple[int, int, float, int, int, str, str, int]]:
    """(request_id, attempt, arrival_s, prompt_tokens, output_tokens, replica, status,
    session_id) per attempt, in arrival order."""
    arrival = np.sort(rng.uniform(0.0, SPAN_S, REQUESTS))
    long = rng.random(REQUESTS) < 0.30
    prompt = np.where(long, rng.integers(15_000, 30_001, REQUESTS), rng.integers(20, 500, REQUESTS))
    output = np.where(long, rng.integers(200, 1_500, REQUESTS), rng.integers(10, 400, REQUESTS))
    replica = rng.integers(0, len(REPLICAS), REQUESTS)
    session = rng.integers(0, 400, REQUESTS)
    oom = rng.random(REQUESTS) < OOM_P
    retry_oom = rng.random(REQUESTS) < RETRY_OOM_P
    backoff_s = rng.uniform(1.0, 5.0, REQUESTS)
    rows = []
    for i in range(REQUESTS):
        fails = bool(long[i] and replica[i] == 0 and arrival[i] < RESTART_S and oom[i])
        base = (int(prompt[i]), int(output[i]), REPLICAS[replica[i]])
        rows.append((i, 0, float(arrival[i]), *base, "oom" if fails else "ok", int(session[i])))
        if fails:
            status = "oom" if retry_oom[i] else "ok"
            rows.append((i, 1, float(arrival[i] + backoff_s[i]), *base, status, int(session[i])))
    rows.sort(key=lambda r: (r[2], r[0], r[1]))
    return rows


def write_example(out_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["request_id,attempt,arrival_s,prompt_tokens,output_tokens,replica,status,session_id"]
    for rid, attempt, t, p, o, r, s, sess in make_rows(rng):
        lines.append(f"{rid},{attempt},{t:.3f},{p},{o},{r},{s},{sess}")
    (out_dir / "requests.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    nodes = ["time_s,replica,event,pool,detail"]
    for name, up in zip(REPLICAS, UPTIME_S, strict=True):
        nodes.append(f"{-up:.0f},{name},start,main,")
    nodes.append(f"{RESTART_S:.0f},node-a,restart,main,routine restart")
    (out_dir / "nodes.csv").write_text("\n".join(nodes) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_example(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
