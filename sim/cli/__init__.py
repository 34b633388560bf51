"""The ``fragsim`` command line. Subcommands live beside their subject
(``sim/cli/trace.py`` for traces); this module wires them together.

Errors a user can cause (bad files, bad fields, bad options) exit with status 2 and one
``error: ...`` line per problem; nothing is half-written. Ctrl-C prints
``interrupted; nothing written`` and exits with status 130.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer._click.exceptions import NoArgsIsHelpError
from typer.core import TyperGroup

from sim.cli.info import allocators_command, hardware_command
from sim.cli.run import demo_command, run_command, scenarios_command
from sim.cli.trace import trace_app
from sim.errors import clip, os_error_line

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it."""


class OneLineErrors(TyperGroup):
    """typer's group with the ``fragsim`` error contract: a usage error (a missing or
    unknown option, a value of the wrong type) is one ``error:`` line, not a boxed panel;
    an error from the file system that no command caught (a name too long, a folder that
    may not be searched) is one ``error: FILE: REASON`` line; both exit with status 2."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        extra["windows_expand_args"] = windows_expand_args
        code = self._run(args, prog_name, complete_var, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        **extra: Any,
    ) -> int:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as e:  # bare `fragsim`: the help, as before
            e.show()
            return e.exit_code
        except typer.TyperException as e:  # click's UsageError, BadParameter, ...
            ctx = getattr(e, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else ""
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            message = " ".join(e.format_message().split())
            _error(f"{where}{clip(message[:1].lower() + message[1:])}{hint}")
            return 2
        except typer.Abort:  # end of input at a prompt
            _error("aborted")
            return 1
        except OSError as e:
            _error(os_error_line(e))
            return 2
        except KeyboardInterrupt:  # raised outside typer's own handling
            result = INTERRUPTED
        code = result if isinstance(result, int) else 0
        if code == INTERRUPTED:  # typer turns KeyboardInterrupt into Exit(130)
            typer.echo("interrupted; nothing written", err=True)
        return code


def _error(line: str) -> None:
    typer.echo(f"error: {line}", err=True)


app = typer.Typer(
    name="fragsim",
    cls=OneLineErrors,
    help="Simulate what KV-cache memory fragmentation costs an LLM-serving fleet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(trace_app, name="trace")
app.command("run")(run_command)
app.command("scenarios")(scenarios_command)
app.command("demo")(demo_command)
app.command("hardware")(hardware_command)
app.command("allocators")(allocators_command)


@app.command("version")
def version_command() -> None:
    """Print fragsim's version and which engine build runs (pure Python or compiled)."""
    from importlib.metadata import PackageNotFoundError, version

    from sim.build import engine_build

    try:
        number = version("fragsim")
    except PackageNotFoundError:  # a source tree that was never installed
        number = "unknown"
    typer.echo(f"fragsim {number} (engine: {engine_build()})")


def main() -> None:
    app()
