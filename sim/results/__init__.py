"""What a run produces: ``frames`` (result tables built from the engine's records),
``summary`` (the summary dict, alerts), ``io`` (``RunResult``, written and read as
Parquet + JSON, atomically)."""
