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


def test_hardware_reads_a_config_json_and_says_what_the_engine_does_with_it(tmp_path) -> None:
    from sim.models.presets import CONFIG_DIR

    config = tmp_path / "gpt-oss-20b" / "config.json"
    config.parent.mkdir()
    config.write_text((CONFIG_DIR / "gpt-oss-20b.json").read_text())
    args = ["hardware", "--config", str(config), "--gpu", "h100-80gb", "--kv-cache-dtype", "fp8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "layers sliding_attention     12 layers" in out and "window 128 tokens" in out
    assert "mxfp4" in out and "/ kv_bytes_per_token         24,576" in out  # 2x24x8x64x1
    assert "keep every token of the sliding-window" in out and "hybrid_kv" in out
    listing = runner.invoke(app, ["hardware"])
    assert "deepseek-v3" in listing.stdout and "nemotron-h-8b" in listing.stdout


def test_hardware_refuses_a_config_missing_a_field_in_one_line(tmp_path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 8}')
    result = runner.invoke(app, ["hardware", "--config", str(bad)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.endswith(f"--config: {bad}: field 'vocab_size' missing (needed for llama)")
    both = runner.invoke(app, ["hardware", "--config", str(bad), "--model", "llama-3-8b"])
    assert both.exit_code == 2 and "not both" in both.stderr
