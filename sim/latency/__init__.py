"""Step-time models: ``models`` (the interface, constant and roofline), ``calibrated``
(fits loaded from ``fragsim-latency/1`` JSON), ``decode_runs`` (closed-form runs of
decode steps), ``config`` (the pydantic configs that build them)."""
