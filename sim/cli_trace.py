"""``fragsim trace ...``: describe, convert and synthesise request traces."""

from __future__ import annotations

import typer

trace_app = typer.Typer(help="Read, check, describe, convert and synthesise traces.",
                        no_args_is_help=True)


def demo_trace() -> None:
    """Placeholder until the traces package lands."""
    typer.echo("fragsim: traces package not built yet")
