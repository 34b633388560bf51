"""The ``fragsim`` command line. Subcommands live beside their subject
(``sim/cli/trace.py`` for traces); this module wires them together.

Commands load on demand (:data:`COMMANDS`): ``fragsim run ...`` imports ``sim.cli.run``
and nothing of the other commands; ``fragsim --help`` lists every command from the
summaries here without importing any. Each command is a light front (``sim/cli/run.py``:
its options, help and early checks; standard library, typer, rich, pydantic at most)
and a body (``sim/cli/bodies/run.py``: the work, with pandas, the engine, ``traces``
imported at file level) that the front loads by name when the command runs
(:mod:`sim.cli.lazy`, the one lazy import), so that ``--help``, usage errors and light
commands (``scenarios``, ``hardware``) start in well under a second.

Errors a user can cause (bad files, bad fields, bad options, a missing command) exit
with status 2 and one ``error: ...`` line per problem; nothing is half-written. Ctrl-C
prints ``interrupted; nothing written`` (or, once a run was written, ``interrupted;
results written to OUT``) and exits with status 130, also while the command's modules
are still being imported (``sim.cli.interrupt``).
"""

from __future__ import annotations

from sim.cli import interrupt

interrupt.guard_startup()  # before the imports below

import sys  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Iterator, MutableMapping, Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from typing import Any, NamedTuple, TextIO  # noqa: E402

import typer  # noqa: E402
from typer.core import TyperCommand, TyperGroup  # noqa: E402

from sim.build import engine_build  # noqa: E402
from sim.cli import lazy  # noqa: E402
from sim.cli.help_format import Command, Context, HelpContext, HelpFormatter, plain_help  # noqa: E402
from sim.errors import clip, os_error_line  # noqa: E402
from sim.results.folder_errors import RunFolderNote  # noqa: E402


class Lazy(NamedTuple):
    """A command loaded on demand: ``module:attribute`` (a command function or a
    ``typer.Typer`` group) and the one-line summary ``fragsim --help`` lists."""

    target: str
    summary: str


COMMANDS: dict[str, Lazy] = {
    "run": Lazy("sim.cli.run:run_command", "Simulate SCENARIO and write its results to OUT/."),
    "scenarios": Lazy(
        "sim.cli.run:scenarios_command", "List the built-in scenarios (run any of them by name)."
    ),
    "demo": Lazy(
        "sim.cli.demo:demo_command",
        "The main job on built-in defaults: the fleet seed's worked example, its paged "
        "counterfactual and a daily-restart mitigation, compared.",
    ),
    "compare": Lazy(
        "sim.cli.compare:compare_command",
        "Compare runs against a baseline: what each saves or costs ($, replica-hours, "
        "failures, p99 latency), ranked by $ saved, ties by fewer allocation failures.",
    ),
    "postmortem": Lazy(
        "sim.cli.postmortem:postmortem_command",
        "Replay LOG_DIR's traffic and node events, match its failures, run counterfactuals.",
    ),
    "report": Lazy(
        "sim.cli.report:report_command",
        "Build one self-contained HTML report over RUN_DIR... or one postmortem folder.",
    ),
    "hardware": Lazy(
        "sim.cli.info:hardware_command",
        "List model and GPU presets, or show one replica's KV budget term by term.",
    ),
    "allocators": Lazy(
        "sim.cli.info:allocators_command",
        "List the allocator policies a scenario can name, with their parameters.",
    ),
    "sweep": Lazy(
        "sim.cli.sweep:sweep_command",
        "Run a sweep: a base scenario x a grid or list of overrides x replications.",
    ),
    "plan": Lazy(
        "sim.cli.plan:plan_command",
        "Find the fewest replicas meeting every SLO, per variant, and what each costs.",
    ),
    "calibrate": Lazy(
        "sim.cli.calibrate:calibrate_command",
        "Write a fragsim-latency/1 file: steps measured on the device, or a fit to vLLM's "
        "spans (--from-spans) or Prometheus histograms (--from-prometheus).",
    ),
    "validate": Lazy(
        "sim.cli.gpu:validate_command",
        "Replay TRACE on the device and compare it with the calibrated simulator.",
    ),
    "gpu-bench": Lazy(
        "sim.cli.gpu:gpu_bench_command",
        "Paged-decode bandwidth against a device copy, the torch reference and SDPA (JSON).",
    ),
    "trace": Lazy(
        "sim.cli.trace:trace_app", "Read, check, describe, convert and synthesise traces."
    ),
    "alerts": Lazy(
        "sim.cli.alerts:alerts_app",
        "The seed's alerts: export Prometheus rules, evaluate them over a run.",
    ),
    "export": Lazy(
        "sim.cli.export:export_app",
        "Export a run's series in formats other tools read (OpenMetrics for Prometheus, a "
        "Grafana dashboard over them).",
    ),
}
"""Every command but ``version``, in the order ``fragsim --help`` lists them; each
summary is the first sentence of the command's own help (a test holds them equal)."""


def load_command(name: str) -> Command:
    """The click command of :data:`COMMANDS` ``name``, built from its module."""
    obj = lazy.resolve(COMMANDS[name].target)
    holder = typer.Typer(
        add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None
    )
    if isinstance(obj, typer.Typer):
        # `fragsim trace` alone is a usage error ("missing command"), not the help
        holder.add_typer(obj, name=name, no_args_is_help=False)
    else:
        holder.command(name)(obj)
    return plain_help(typer.main.get_group(holder).commands[name])


class LazyCommands(MutableMapping[str, Command]):
    """A group's commands: the eager ones typer built, and :data:`COMMANDS`, imported on
    first access (or, while the group formats its help, a stand-in that carries only
    the summary)."""

    def __init__(self, eager: MutableMapping[str, Command]) -> None:
        self._loaded: dict[str, Command] = {n: plain_help(c) for n, c in eager.items()}
        self.listing = False

    def __getitem__(self, name: str) -> Command:
        if name in self._loaded:
            return self._loaded[name]
        if name not in COMMANDS:
            raise KeyError(name)
        if self.listing:
            summary = COMMANDS[name].summary  # listed whole (click cuts help at 45)
            return TyperCommand(name=name, help=summary, short_help=summary)
        self._loaded[name] = load_command(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (n for n in self._loaded if n not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(1 for n in self._loaded if n not in COMMANDS)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._loaded


INTERRUPTED = interrupt.INTERRUPTED


class OneLineErrors(TyperGroup):
    """typer's group with the ``fragsim`` error contract: a usage error (a missing or
    unknown option, a value of the wrong type, a missing command: ``fragsim`` or
    ``fragsim trace`` alone) is one ``error:`` line, not a boxed panel or the help; an
    error from the file system that no command caught (a name too long, a folder that
    may not be searched) is one ``error: FILE: REASON`` line; both exit with status 2.
    Ctrl-C is one line and status 130 (:mod:`sim.cli.interrupt`). Commands load on
    demand (:class:`LazyCommands`); help is plain text wrapped at whole words
    (:mod:`sim.cli.help_format`)."""

    context_class = HelpContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(self.commands)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The help, listing the commands by their summaries (nothing imported)."""
        commands = self.commands
        assert isinstance(commands, LazyCommands)
        commands.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            commands.listing = False

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> int:
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
            with _notes_as_lines():
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
        group: Command = self
        for word in words:
            sub = group.commands.get(word) if isinstance(group, TyperGroup) else None
            if sub is None:
                break
            path.append(word)
            group = sub
        return " ".join(path)


@contextmanager
def _notes_as_lines() -> Iterator[None]:
    """A run folder's note (``sim.results.folder_errors.RunFolderNote``, e.g. a folder
    written before fragsim recorded digests) is one ``note: ...`` line on stderr, every
    time; other warnings are shown as before."""
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, RunFolderNote):
            typer.echo(f"note: {message}", err=True)
        else:
            previous(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", RunFolderNote)
        warnings.showwarning = show
        yield


def _error(line: str) -> None:
    typer.echo(f"error: {line}", err=True)


app = typer.Typer(
    name="fragsim",
    cls=OneLineErrors,
    help="Simulate what KV-cache memory fragmentation costs an LLM-serving fleet.",
    no_args_is_help=False,  # `fragsim` alone is a usage error: "missing command"
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help, whole words (sim.cli.help_format)
)


@app.callback()
def _group() -> None:
    """Makes ``app`` a group although only ``version`` is registered with typer (the
    others are :data:`COMMANDS`)."""


@app.command("version")
def version_command() -> None:
    """Print fragsim's version and which engine build runs (pure Python or compiled)."""
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
