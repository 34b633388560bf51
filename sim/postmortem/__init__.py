"""The postmortem (``fragsim postmortem``): a production log's readers (CSV/Parquet:
:mod:`~sim.postmortem.log` and :mod:`~sim.postmortem.nodes`; OpenTelemetry spans:
:mod:`~sim.postmortem.otlp_log`, :mod:`~sim.postmortem.otlp_nodes`,
:mod:`~sim.postmortem.otlp_files`), its replay on the simulated fleet and the
counterfactual runs (:mod:`~sim.postmortem.replay`, :mod:`~sim.postmortem.names`,
:mod:`~sim.postmortem.baseline`), and the matching of recorded to simulated failures
(:mod:`~sim.postmortem.matching`). Reads the fleet, the scenario and the results; the
fleet never reads it."""
