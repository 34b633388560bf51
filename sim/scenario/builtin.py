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
    """A path as given, or the built-in scenario of that name when no such file exists.
    A path the file system cannot check (a name too long, a folder that may not be
    searched) is taken as given: reading it then says why it cannot be read."""
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or _exists(path, unknown=True):
        return path
    candidate = SCENARIO_DIR / f"{arg}.yaml"
    return candidate if _exists(candidate, unknown=False) else path


def _exists(path: Path, *, unknown: bool) -> bool:
    """``path.exists()``, or ``unknown`` when the file system cannot tell."""
    try:
        return path.exists()
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return unknown


def builtin_data(name: str) -> dict[str, object]:
    data = yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return data
