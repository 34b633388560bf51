"""Built-in scenarios shipped in ``sim/scenario/data/``: runnable by name anywhere a
scenario path is accepted (``fragsim run seed-bimodal-best-fit -o out/``)."""

from __future__ import annotations

from pathlib import Path

import yaml

SCENARIO_DIR = Path(__file__).parent / "data"

#: What ``make demo`` / ``fragsim demo`` runs: the fleet seed's worked example, its
#: paged counterfactual, and the scheduled-restart mitigation.
DEMO = ("seed-bimodal-best-fit", "seed-bimodal-paged", "seed-bimodal-best-fit-daily-restart")


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def describe_builtin(name: str) -> str:
    """The leading comment of a built-in scenario file, as one line."""
    lines = (SCENARIO_DIR / f"{name}.yaml").read_text().splitlines()
    words = []
    for line in lines:
        if not line.startswith("#"):
            break
        words.append(line.lstrip("# ").strip())
    return " ".join(words)


def resolve_scenario(arg: str | Path) -> Path:
    """A path as given, or the built-in scenario of that name when no such file exists."""
    path = Path(arg)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    candidate = SCENARIO_DIR / f"{arg}.yaml"
    return candidate if candidate.exists() else path


def builtin_data(name: str) -> dict[str, object]:
    data = yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return data
