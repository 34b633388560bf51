"""Run every ``benchmarks/bench_*.py`` in its own process (so peak-memory readings are
per benchmark) and pass its JSON lines through.

``python -m benchmarks [NAME ...] [--quick]``: names pick modules (default: all);
options (``--...``) are passed to every module. ``--quick`` shrinks every benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    options = [a for a in argv if a.startswith("--")]
    names = [a for a in argv if not a.startswith("--")]
    names = names or sorted(p.stem for p in here.glob("bench_*.py"))
    failed = 0
    for name in names:
        proc = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *options], check=False)
        if proc.returncode != 0:
            print(json.dumps({"bench": name, "error": f"exit {proc.returncode}"}), flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
