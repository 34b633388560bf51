"""Sweeps and capacity planning (issue 12): a base scenario plus a grid or list of
overrides by dotted field path (:mod:`sim.sweep.overrides`, :mod:`sim.sweep.spec`),
replications over seeds, executors (in process, a local process pool, a Dask cluster)
with results written per scenario as each finishes so an interrupted sweep resumes
(:mod:`sim.sweep.execute`), the summary tables with 95 % intervals
(:mod:`sim.sweep.summary`), and the fewest replicas meeting a set of SLOs per policy
variant (:mod:`sim.sweep.plan`, :mod:`sim.sweep.slo`)."""

from sim.sweep.execute import Executor, Outcome
from sim.sweep.plan import PlanResult, plan
from sim.sweep.run import SweepResult, run_sweep
from sim.sweep.slo import Slo, parse_slo
from sim.sweep.spec import Sweep, Task, load_sweep

__all__ = [
    "Executor",
    "Outcome",
    "PlanResult",
    "Slo",
    "Sweep",
    "SweepResult",
    "Task",
    "load_sweep",
    "parse_slo",
    "plan",
    "run_sweep",
]
