# The two commands of the README (`make run`, `make test`) and `make bench`.
# Each creates .venv and node_modules when missing and reinstalls only when the
# dependency files changed, so the second run starts at once.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
PYTEST_ARGS ?=
# Three pytest-xdist workers, each with its own Azurite, on two cores: with two, the cores sat
# idle 18 % of the run while tests waited on real role processes and storage (1,438 tests:
# 545 s with two, 462 s with three at 6 % idle, 462 s with four; one machine, runs one after the
# other). `make test TEST_WORKERS=auto` on a bigger box.
# Whole files per worker, in collection order: tests/conftest.py puts the files with slow tests
# first, where xdist's own order (most tests first) left them for last, to one busy worker.
TEST_WORKERS ?= 3

# Every Python dependency comes from a lock with hashes (requirements/*.lock, pip's own hashed
# requirements format): dev.lock for make (the test, demo and node extras, plus the build
# backend), runtime.lock for the Docker image. `make lock` refreshes them after a change to
# pyproject.toml; `make lock-upgrade` moves every pin to the newest release the floors allow.
DEV_LOCK := requirements/dev.lock
RUNTIME_LOCK := requirements/runtime.lock
PIP := $(BIN)/python -m pip --disable-pip-version-check
UV_VERSION ?= 0.13.9
# --compile-bytecode: uv leaves the .py files uncompiled (pip compiles them), so every Python
# process compiled numpy, the Azure SDK, Pillow and Flask anew where nothing may write .pyc
# (PYTHONDONTWRITEBYTECODE, read-only images): a role's imports took 1.7 s of CPU, 0.7 s compiled;
# in a clean clone `make run` had its six processes up after 19.3 s, 13.9 s compiled.
UV_INSTALL := $(BIN)/uv pip install --python $(BIN)/python --compile-bytecode
LOCK_ARGS := --universal --python-version 3.11 --generate-hashes --quiet --custom-compile-command 'make lock'

.PHONY: install run run-paired demo-failover test lint format bench clean lock lock-upgrade

install: $(PY_STAMP) $(NODE_STAMP)

# uv installs (pip bootstraps it): it keeps every wheel it fetched in its cache and links them
# into the next venv, where pip fetches and unpacks all ~100 again (no cache of them here):
# measured in a clean clone, 4-15 min with pip, 20 s with uv's cache warm (29 s since it also
# compiles, above), 2 min 16 s cold.
$(PY_STAMP): pyproject.toml $(DEV_LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(PIP) install --quiet uv==$(UV_VERSION)
	$(UV_INSTALL) --quiet --require-hashes --no-deps -r $(DEV_LOCK)
	$(UV_INSTALL) --quiet --no-deps --no-build-isolation -e .
	@touch $@

# uv resolves (pip cannot write hashed, cross-platform locks) and installs (above).
lock lock-upgrade:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(PIP) install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip compile pyproject.toml requirements/build.in --extra test --extra node $(LOCK_ARGS) \
		$(if $(filter lock-upgrade,$@),--upgrade) -o $(DEV_LOCK)
	$(BIN)/uv pip compile pyproject.toml requirements/build.in --extra demo -c $(DEV_LOCK) $(LOCK_ARGS) -o $(RUNTIME_LOCK)

# Azurite (the storage emulator) comes from npm, pinned by package-lock.json. npm runs on the
# system's Node.js when it is new enough for that Azurite, else on Node.js from PyPI installed
# into .venv (photomosaics/local/node_runtime.py): Python is the only prerequisite.
# --prefer-offline: a package npm's cache already holds (checked against the lock's integrity
# hash) is not fetched again; without it every tarball was downloaded anew (minutes here).
$(NODE_STAMP): package.json package-lock.json $(PY_STAMP)
	$(BIN)/python -m photomosaics.local.node_runtime npm ci --prefer-offline --no-audit --no-fund --loglevel=error
	@touch $@

run: install
	$(BIN)/photomosaics run

# The same, with a second embedded Azurite as the paired secondary account (README, "Failover").
run-paired: install
	$(BIN)/photomosaics run --secondary-azurite

# Scripted outage of the primary (two Azurites, a fault proxy): POSTs answer 202, jobs finish after recovery.
demo-failover: install
	$(BIN)/python -m benchmarks.availability failover

# One formatter and one linter (ruff), then the type checker (mypy over the five packages), all
# configured in pyproject.toml; CI runs `make lint`. Last, the count of `type: ignore` comments,
# failing on one that does not name its error code and say why (tests/test_type_ignores.py).
lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python tests/test_type_ignores.py

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# PYTHONDONTWRITEBYTECODE (set in many images) is cleared for the run: pytest then keeps its
# rewritten test modules, and Python the project's bytecode, in the ignored __pycache__ folders,
# instead of each of the three workers and every role process compiling them all again
# (collection took 10.2 s of CPU per worker, 2.5 s with the cache).
test: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) node_modules .pytest_cache .hypothesis .mypy_cache artifacts bench-results
