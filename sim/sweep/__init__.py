"""Sweeps (issue 12, not built yet): a base scenario plus a grid or list of overrides by
dotted field path, replications over seeds, executors (a local process pool; a Dask
cluster), results written per scenario as each finishes so an interrupted sweep resumes."""
