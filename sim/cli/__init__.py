"""The ``fragsim`` command line. Subcommands live beside their subject
(``sim/cli/trace.py`` for traces); this module wires them together.

Errors a user can cause (bad files, bad fields, bad options, a missing command) exit
with status 2 and one ``error: ...`` line per problem; nothing is half-written. Ctrl-C
prints ``interrupted; nothing written`` (or, once a run was written, ``interrupted;
results written to OUT``) and exits with status 130, also while the command's modules
are still being imported (``sim.cli.interrupt``).
"""

from __future__ import annotations

from sim.cli import interrupt

interrupt.guard_startup()  # before the imports below: they take over a second

import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import typer  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from sim.cli.alerts import alerts_app  # noqa: E402
from sim.cli.compare import compare_command  # noqa: E402
from sim.cli.gpu import calibrate_command, gpu_bench_command, validate_command  # noqa: E402
from sim.cli.info import allocators_command, hardware_command  # noqa: E402
from sim.cli.plan import plan_command  # noqa: E402
from sim.cli.postmortem import postmortem_command  # noqa: E402
from sim.cli.report import report_command  # noqa: E402
from sim.cli.run import demo_command, run_command, scenarios_command  # noqa: E402
from sim.cli.sweep import sweep_command  # noqa: E402
from sim.cli.trace import trace_app  # noqa: E402
from sim.errors import clip, os_error_line  # noqa: E402

INTERRUPTED = interrupt.INTERRUPTED


class OneLineErrors(TyperGroup):
    """typer's group with the ``fragsim`` error contract: a usage error (a missing or
    unknown option, a value of the wrong type, a missing command: ``fragsim`` or
    ``fragsim trace`` alone) is one ``error:`` line, not a boxed panel or the help; an
    error from the file system that no command caught (a name too long, a folder that
    may not be searched) is one ``error: FILE: REASON`` line; both exit with status 2.
    Ctrl-C is one line and status 130 (:mod:`sim.cli.interrupt`)."""

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
            interrupt.forget_written()
            interrupt.end_startup()  # from here, Ctrl-C raises KeyboardInterrupt
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as e:  # click's UsageError, BadParameter, ...
            ctx = getattr(e, "ctx", None)
            path = ctx.command_path if ctx is not None else self._command_path(args)
            where = f"{path}: " if path else ""
            hint = f" (see {path} --help)" if path else ""
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
            typer.echo(interrupt.message(), err=True)
        return code

    def _command_path(self, args: Sequence[str] | None) -> str:
        """``fragsim run`` for ``run x.yaml -o``: the command the words name, for an
        error the parser raised without a context (an option missing its value)."""
        words = list(sys.argv[1:] if args is None else args)
        path: list[str] = [self.name or "fragsim"]
        group: Any = self
        for word in words:
            sub = group.commands.get(word) if isinstance(group, TyperGroup) else None
            if sub is None:
                break
            path.append(word)
            group = sub
        return " ".join(path)


def _error(line: str) -> None:
    typer.echo(f"error: {line}", err=True)


app = typer.Typer(
    name="fragsim",
    cls=OneLineErrors,
    help="Simulate what KV-cache memory fragmentation costs an LLM-serving fleet.",
    no_args_is_help=False,  # `fragsim` alone is a usage error: "missing command"
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(trace_app, name="trace", no_args_is_help=False)
app.add_typer(alerts_app, name="alerts", no_args_is_help=False)
app.command("run")(run_command)
app.command("scenarios")(scenarios_command)
app.command("demo")(demo_command)
app.command("compare")(compare_command)
app.command("postmortem")(postmortem_command)
app.command("report")(report_command)
app.command("hardware")(hardware_command)
app.command("allocators")(allocators_command)
app.command("sweep")(sweep_command)
app.command("plan")(plan_command)
app.command("calibrate")(calibrate_command)
app.command("validate")(validate_command)
app.command("gpu-bench")(gpu_bench_command)


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


if not interrupt.is_entry_point():
    # Imported by a program (tests, a notebook), not run as `fragsim`: its Ctrl-C is
    # its own again once the imports are done.
    interrupt.end_startup()


def main() -> None:
    """The ``fragsim`` command."""
    try:
        app()
    finally:
        interrupt.ignore_from_now()  # the command has ended
