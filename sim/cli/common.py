"""What every ``fragsim`` command shares: its user-error line (:func:`fail`), the check
made before anything heavy is imported (a scenario file that exists) and the line
saying where results went (an output folder's checks are the bodies':
``sim.cli.bodies.run_folder``). Imports only the
standard library, typer, rich and the leaves of ``sim``, so that a command's usage
errors stay light."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from sim.errors import clip
from sim.scenario.builtin import builtin_names

err = Console(stderr=True, soft_wrap=True)


MAX_LINE = 2000
"""The longest error line printed (a last bound on what a message may quote)."""


def fail(message: str, source: str | Path | None = None) -> typer.Exit:
    """Print a user error -- one ``error:`` line per line of ``message``, each naming
    ``source`` (the scenario file) unless it already starts with it -- and return the
    exit-2 exception to raise."""
    name = None if source is None else clip(str(source))
    for line in message.splitlines() or [""]:
        if name is not None and not line.startswith(name):
            line = f"{name}: {line}"
        line = clip(line, MAX_LINE)
        err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, markup=True)
    return typer.Exit(2)


def say_written(out: Path, files: list[str] | tuple[str, ...], html: Path | None) -> None:
    """Where the results went, on stderr: ``wrote OUT/ (FILES)`` and ``report: PATH``."""
    typer.echo(f"wrote {out}/ ({', '.join(files)})", err=True)
    if html is not None:
        typer.echo(f"report: {html}", err=True)


def check_scenario_exists(source: Path) -> None:
    """Refuse a scenario file that does not exist before the scenario schema (and the
    engine behind it) is imported, with the line ``load_scenario`` gives."""
    try:
        source.stat()
    except FileNotFoundError:
        name = clip(str(source))
        if source.suffix in (".yaml", ".yml"):
            raise fail(f"{name}: cannot read: no such file") from None
        raise fail(
            f"{name}: no such scenario file or built-in scenario; built-in: "
            f"{', '.join(builtin_names())} (fragsim scenarios describes them)"
        ) from None
    except (OSError, ValueError):  # load_scenario words the rest
        pass
