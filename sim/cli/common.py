"""What every ``fragsim`` command shares: its user-error line (:func:`fail`), the checks
made before anything heavy is imported (an output folder that can be written, a
scenario file that exists) and the line saying where results went. Imports only the
standard library, typer, rich and the leaves of ``sim``, so that a command's usage
errors stay light."""

from __future__ import annotations

import tempfile
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


def check_output_dir(out: Path) -> None:
    """Fail early (before simulating) when OUT cannot become a results directory: it
    holds other files, a parent is a file, the nearest existing folder refuses a new
    folder (tried: a read-only file system refuses even root), or the file system
    refuses the name (too long, a folder that may not be searched)."""
    from sim.results.io import check_replaceable  # pandas, pyarrow

    try:
        check_replaceable(out)
        for parent in out.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise fail(f"{out}: output path: {parent} exists and is not a directory")
                tempfile.TemporaryDirectory(prefix=".fragsim-probe-", dir=parent).cleanup()
                return
    except FileExistsError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"{clip(str(out))}: output directory: {e.strerror or e}") from None


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
