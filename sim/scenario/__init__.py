"""Scenarios: ``schema`` (the pydantic model, ``load_scenario``), ``workload`` (the
request table a scenario's workload describes), ``builtin`` (scenarios shipped in
``data/``, runnable by name)."""
