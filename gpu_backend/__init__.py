"""GPU backend (torch + triton, the optional ``gpu`` extra): paged KV pool, Triton
paged-attention kernel beside its torch reference, trace replay and calibration.

Not built yet: the engine's calibrated latency model reads the JSON this package will
write (see ``sim.latency.CalibratedLatency``)."""
