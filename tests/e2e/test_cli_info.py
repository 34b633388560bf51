"""``fragsim hardware`` and ``fragsim allocators``."""

from __future__ import annotations

from typer.testing import CliRunner

from policies.allocators.registry import ALLOCATORS
from sim.cli import app

runner = CliRunner()


def test_hardware_lists_presets_and_shows_a_budget_term_by_term() -> None:
    listing = runner.invoke(app, ["hardware"])
    assert listing.exit_code == 0
    assert "llama-2-7b" in listing.stdout and "h100-80gb" in listing.stdout
    budget = runner.invoke(app, ["hardware", "--model", "llama-2-7b", "--gpu", "a100-80gb"])
    assert budget.exit_code == 0
    assert "= kv_capacity_tokens" in budget.stdout and "117,654" in budget.stdout


def test_hardware_refuses_an_unknown_preset_with_exit_2() -> None:
    result = runner.invoke(app, ["hardware", "--model", "nope"])
    assert result.exit_code == 2
    assert "allowed" in result.stderr


def test_allocators_lists_every_registered_kind() -> None:
    result = runner.invoke(app, ["allocators"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for kind in ALLOCATORS:
        assert kind in result.stdout
