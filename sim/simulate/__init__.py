"""What a run is built from and driven by, the same for a single replica and a fleet:
each pool's parts (:mod:`~sim.simulate.parts`: hardware budget, scheduler, latency
model, allocator), a trace's requests as columns (:mod:`~sim.simulate.columns`) and the
one loop that simulates (:mod:`~sim.simulate.driver`). Below the fleet (which reads
it) and above the engine; ``sim.runner`` composes a run from it."""
