"""The ``fragsim`` command line. Subcommands live beside their subject
(``sim/cli_trace.py`` for traces); this module wires them together.

Errors a user can cause (bad files, bad fields) exit with status 2 and one clear
message; nothing is half-written.
"""

from __future__ import annotations

import typer

from sim.cli.info import allocators_command, hardware_command
from sim.cli.run import demo_command, run_command, scenarios_command
from sim.cli.trace import trace_app

app = typer.Typer(
    name="fragsim",
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
