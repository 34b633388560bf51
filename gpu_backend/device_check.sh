#!/usr/bin/env bash
# The GPU backend's device check: kernel benchmark, calibration of a full-size
# Llama-3-8B layer, a validation replay and the contiguous baseline's fragmentation,
# printed as one table (and written to $OUT or ./device_check_out). Under 8 minutes on
# an H200. `--cpu --quick` runs the same steps at tiny shapes on CPU in under a minute.
#
# Needs a Python (3.12) with torch and triton. Missing fragsim dependencies are installed
# offline from gpu_backend/wheels/ (ignored by git); fill it on a machine with network:
#   pip download --python-version 3.12 --only-binary=:all: -d gpu_backend/wheels \
#       'simpy>=4.1,<5' numpy scipy pandas pyarrow pydantic typer rich pyyaml \
#       sortedcontainers mypy_extensions
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
missing=$("$PY" - <<'PYEOF'
import importlib.util
need = {"simpy": "simpy", "numpy": "numpy", "scipy": "scipy", "pandas": "pandas",
        "pyarrow": "pyarrow", "pydantic": "pydantic", "typer": "typer", "rich": "rich",
        "yaml": "pyyaml", "sortedcontainers": "sortedcontainers",
        "mypy_extensions": "mypy_extensions", "torch": "torch", "triton": "triton"}
print(" ".join(pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None))
PYEOF
)
if [ -n "$missing" ]; then
    echo "installing from gpu_backend/wheels: $missing" >&2
    "$PY" -m pip install --quiet --no-index --find-links gpu_backend/wheels $missing
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
for arg in "$@"; do
    if [ "$arg" = "--cpu" ]; then export TRITON_INTERPRET=1; fi
done
exec timeout 470 "$PY" -m gpu_backend.device_check "$@"
