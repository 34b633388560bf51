"""Run every ``benchmarks/bench_*.py`` in its own process (so peak-memory readings are
per benchmark) and pass its JSON lines through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = argv or sorted(p.stem for p in here.glob("bench_*.py"))
    failed = 0
    for name in names:
        proc = subprocess.run([sys.executable, "-m", f"benchmarks.{name}"], check=False)
        if proc.returncode != 0:
            print(f'{{"bench": "{name}", "error": "exit {proc.returncode}"}}', flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
