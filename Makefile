# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The compiled build (setup.py, sim/build.py): rebuilt whenever a source file changes.
NATIVE := .venv-native
NBIN := $(NATIVE)/bin
NSTAMP := $(NATIVE)/.installed
NDEPS := $(NATIVE)/.deps
# Everything the package installs (copies, not links): any change rebuilds it.
SOURCES := setup.py pyproject.toml $(shell find sim policies traces reports gpu_backend -type f -not -path '*/__pycache__/*' -not -name '*.pyc')

.PHONY: demo test test-pure bench native lint clean chromium prometheus docs vllm-goldens

# Headless Chromium for the report's browser test (tests/e2e/test_report_browser.py):
# installed from the distribution's packages when missing; the test skips, saying why,
# where it cannot be installed.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch's CPU build, pinned, before the gpu extra: an unpinned torch would pull a CUDA
# build of several GB. The GPU backend's tests run on this (pure) build, on CPU.
TORCH_CPU := torch==2.13.0

$(STAMP): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install -q '$(TORCH_CPU)'
	FRAGSIM_COMPILE=0 $(BIN)/pip install -q -e '.[dev,gpu]'
	touch $(STAMP)

$(NBIN)/python:
	$(PY) -m venv $(NATIVE)
	$(NBIN)/pip install -q --upgrade pip

# Dependencies once (a pure install), then the compiled package over it whenever a
# source changes.
$(NDEPS): pyproject.toml | $(NBIN)/python
	FRAGSIM_COMPILE=0 $(NBIN)/pip install -q '.[dev]' 'setuptools>=68' wheel
	touch $(NDEPS)

$(NSTAMP): $(SOURCES) $(NDEPS)
	rm -rf build
	FRAGSIM_COMPILE=1 $(NBIN)/pip install -q --no-build-isolation --no-deps --force-reinstall .
	touch $(NSTAMP)

# vLLM's real scheduler, recorded (tools/vllm_recorder/): its own venv (CPU torch, then
# vllm without its dependencies -- with them pip pulls a CUDA build of ~9.5 GB -- then
# the pure-Python packages its imports ask for). Not part of `make test`.
VLLM_VENV ?= .venv-vllm
VLLM_PIN := vllm==0.33.0
$(VLLM_VENV)/.installed: tools/vllm_recorder/requirements.txt
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q '$(TORCH_CPU)' --index-url https://download.pytorch.org/whl/cpu
	$(VLLM_VENV)/bin/pip install -q --no-deps '$(VLLM_PIN)'
	$(VLLM_VENV)/bin/pip install -q --no-deps -r tools/vllm_recorder/requirements.txt
	touch $@

vllm-goldens: $(VLLM_VENV)/.installed
	VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/python tools/vllm_recorder/record.py

demo: $(STAMP)
	$(BIN)/fragsim demo

# Lint, then the two passes at once, one a core: the compiled build runs the whole suite;
# the pure build (editable) every test but those marked build_independent (by file,
# tests/conftest.py: CLI plumbing, reports, docs, Prometheus, trace tools...), which hold
# whichever build runs and so run once, on the compiled one. Engine, allocator, fleet,
# golden and fast = exact tests run on both. The pure pass's output follows the compiled
# pass's; make test fails if either pass does. Each pass has its own temporary folder.
PURE_PASS := FRAGSIM_EXPECT_BUILD=pure $(BIN)/pytest -q -p no:cacheprovider -m "not build_independent"
COMPILED_PASS := FRAGSIM_EXPECT_BUILD=compiled $(NBIN)/pytest -q
test: $(STAMP) $(NSTAMP) chromium prometheus
	$(BIN)/ruff check .
	$(BIN)/mypy
	@log=$$(mktemp); tmp=$$(mktemp -d); \
	echo '$(PURE_PASS) (in the background)'; \
	$(PURE_PASS) --basetemp="$$tmp/pure" >"$$log" 2>&1 & pure=$$!; \
	trap 'kill $$pure 2>/dev/null; rm -rf "$$log" "$$tmp"; exit 130' INT TERM; \
	echo '$(COMPILED_PASS)'; \
	$(COMPILED_PASS) --basetemp="$$tmp/compiled"; compiled=$$?; \
	wait $$pure; pure_status=$$?; \
	echo "== pure build, every test not marked build_independent:"; cat "$$log"; rm -rf "$$log" "$$tmp"; \
	echo "== exit status: compiled pass $$compiled, pure pass $$pure_status"; \
	test $$compiled = 0 && test $$pure_status = 0

chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends chromium) \
	  >/dev/null 2>&1 || echo "chromium not installed: the report's browser test will skip"

# promtool and the Prometheus server for tests/e2e/test_prometheus.py (the Debian
# package prometheus), installed like Chromium; those tests skip, saying why, without it.
prometheus:
	@command -v promtool >/dev/null 2>&1 || \
	  ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends prometheus) \
	  >/dev/null 2>&1 || echo "prometheus not installed: the Prometheus tests will skip"

# Where no C compiler is at hand: lint and the whole suite on the pure build only.
test-pure: $(STAMP) chromium prometheus
	$(BIN)/ruff check .
	$(BIN)/mypy
	FRAGSIM_EXPECT_BUILD=pure $(BIN)/pytest -q

native: $(NSTAMP)

# make bench BENCH_ARGS=--quick for a short run; measures the compiled build.
bench: $(NSTAMP)
	FRAGSIM_BENCH_INSTALLED=1 $(NBIN)/python -m benchmarks $(BENCH_ARGS)

# The reference site (docs/, mkdocs.yml) into site/: strict, so a broken link or anchor
# fails the build. MkDocs and its theme come with the dev extra.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(NATIVE) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
