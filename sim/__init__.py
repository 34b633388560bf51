"""The SimPy engine: scenarios, hardware presets, latency models, the scheduler, the
replica, metrics and results. Imports no torch and no plotly."""
