"""Benchmarks, run by ``make bench`` (``python -m benchmarks``), never by pytest.

Each ``bench_*.py`` module has a ``main()`` that prints one JSON object per line:
``{"bench": name, ...measurements...}``. Pass a module stem to run only that one:
``python -m benchmarks bench_traces``.
"""
