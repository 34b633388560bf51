"""Shared fixtures: where the real public traces live; the Hypothesis profile; which
tests are build-independent.

Property tests draw the same examples on every run (``derandomize``), so a run of the
suite is reproducible and CI cannot fail on an example nobody has seen locally. Set
``FRAGSIM_HYPOTHESIS=explore`` to draw fresh random examples (and a failure prints the
example to pin as a regular test).

``make test`` runs the suite on both builds of the engine (pure Python and compiled,
``sim/build.py``). The files in :data:`BUILD_INDEPENDENT` check what does not depend on
the build: the CLI's plumbing and errors, reports, docs, Prometheus, OTLP, the trace
tools, scenario validation, policies over hand-made views. They are marked
``build_independent`` and run once, on the compiled build (the stricter runtime: slotted
classes, annotations checked at run time; and a real, not editable, install of the
package and its data). Everything else -- engine, allocators, schedulers, latency,
fleet, golden digests, fast = exact -- runs on both. ``make test-pure`` still runs every
test on the pure build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# No deadline: a test's wall time is not what it checks (the two passes of make test
# share the cores; speed is measured by make bench).
settings.register_profile("repeatable", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("FRAGSIM_HYPOTHESIS", "repeatable"))

#: The real public traces: ``$FRAGSIM_TRACES_DIR``, else ``../shared/traces_external``
#: beside the checkout.
SHARED_TRACES = Path(
    os.environ.get("FRAGSIM_TRACES_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "traces_external"
)


TESTS = Path(__file__).resolve().parent

#: Test files (relative to ``tests/``) whose contracts hold whichever build of the engine
#: runs: they read no engine behaviour that the golden digests and the engine, allocator
#: and fleet tests do not already hold both builds to. A new file joins only when that is
#: true of every test in it; when in doubt, leave it out (it then runs on both builds).
BUILD_INDEPENDENT: frozenset[str] = frozenset(
    {
        "e2e/test_cli_alerts.py",
        "e2e/test_cli_disagg.py",
        "unit/test_pd_router.py",
        "unit/test_summary_model.py",
        "unit/test_summary_docs.py",
        "e2e/test_cli_compare.py",
        "e2e/test_cli_errors.py",
        "e2e/test_cli_fleet.py",
        "e2e/test_cli_offload.py",
        "e2e/test_cli_info.py",
        "e2e/test_cli_output.py",
        "e2e/test_cli_terminal.py",
        "e2e/test_cli_postmortem.py",
        "e2e/test_cli_sweep.py",
        "e2e/test_cli_trace.py",
        "e2e/test_cli_trace_yaml.py",
        "e2e/test_demo.py",
        "e2e/test_docs.py",
        "e2e/test_grafana_dashboard.py",
        "e2e/test_hostile_otlp.py",
        "e2e/test_hostile_round2.py",
        "e2e/test_hostile_round3_runfolder.py",
        "e2e/test_hostile_round3_writers.py",
        "e2e/test_postmortem_otlp.py",
        "e2e/test_prometheus.py",
        "e2e/test_prometheus_tiers.py",
        "e2e/test_readme_recipes.py",
        "e2e/test_report_browser.py",
        "e2e/test_run_faults.py",
        "golden/test_traces_samples.py",
        "property/test_fleet_policy_props.py",
        "property/test_hostile_runfolder.py",
        "property/test_traces_cli_hostile.py",
        "property/test_traces_fuzz.py",
        "property/test_traces_ids.py",
        "property/test_traces_located.py",
        "property/test_traces_roundtrip.py",
        "property/test_traces_transform_props.py",
        "unit/test_alert_states.py",
        "unit/test_alerts.py",
        "unit/test_scenario_key_typos.py",
        "unit/test_autoscalers.py",
        "unit/test_calibration_file.py",
        "unit/test_cli_tables.py",
        "unit/test_compare.py",
        "unit/test_compare_report.py",
        "unit/test_dashboard.py",
        "unit/test_import_direction.py",
        "unit/test_cli_lazy.py",
        "unit/test_latency_prom_dump.py",
        "unit/test_latency_from_prometheus.py",
        "unit/test_layering.py",
        "unit/test_matching.py",
        "unit/test_openmetrics.py",
        "unit/test_openmetrics_series.py",
        "unit/test_otlp_log.py",
        "unit/test_otlp_nodes.py",
        "unit/test_postmortem_log.py",
        "unit/test_postmortem_report.py",
        "unit/test_report_aggregate.py",
        "unit/test_report_bounds.py",
        "unit/test_report_kv_manager.py",
        "unit/test_report_panels.py",
        "unit/test_reports.py",
        "unit/test_restart_policies.py",
        "unit/test_scenario_errors.py",
        "unit/test_summary.py",
        "unit/test_support.py",
        "unit/test_sweep.py",
        "unit/test_traces_bounds.py",
        "unit/test_traces_describe.py",
        "unit/test_traces_errors.py",
        "unit/test_traces_header_names.py",
        "unit/test_traces_input_rules.py",
        "unit/test_traces_loaders.py",
        "unit/test_traces_locate.py",
        "unit/test_traces_synth.py",
        "unit/test_traces_synth_bounds.py",
        "unit/test_traces_transform.py",
        "unit/test_traces_validation.py",
        "unit/test_traces_writers.py",
        "unit/test_yaml_1_2.py",
    }
)


def pytest_configure(config: pytest.Config) -> None:
    """Registers the ``build_independent`` marker; every listed file exists (a renamed
    file would otherwise silently run twice)."""
    config.addinivalue_line(
        "markers",
        "build_independent: holds whichever engine build runs; make test runs it on the "
        "compiled build only (set by file: BUILD_INDEPENDENT in tests/conftest.py)",
    )
    missing = sorted(name for name in BUILD_INDEPENDENT if not (TESTS / name).is_file())
    if missing:
        raise pytest.UsageError(
            f"tests/conftest.py: BUILD_INDEPENDENT names missing files: {', '.join(missing)}"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`BUILD_INDEPENDENT`'s files ``build_independent``."""
    for item in items:
        path = item.path
        if path.is_relative_to(TESTS) and path.relative_to(TESTS).as_posix() in BUILD_INDEPENDENT:
            item.add_marker(pytest.mark.build_independent)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of real public traces (``../shared/traces_external``); tests that
    need it skip where it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(
            f"real traces not found at {SHARED_TRACES} (../shared is absent; "
            f"set FRAGSIM_TRACES_DIR to use another copy)"
        )
    return SHARED_TRACES
