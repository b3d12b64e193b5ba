# The two commands of the README (`make run`, `make test`) and `make bench`.
# Each creates .venv and node_modules when missing and reinstalls only when the
# dependency files changed, so the second run starts at once.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
PYTEST_ARGS ?=
# Two pytest-xdist workers, each with its own Azurite: the suite mostly waits on real role
# processes and storage, so two fit two cores (`make test TEST_WORKERS=auto` on a bigger box).
TEST_WORKERS ?= 2

.PHONY: install run run-paired demo-failover test bench clean

install: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

# Azurite (the storage emulator) comes from npm, pinned by package-lock.json. npm runs on the
# system's Node.js when it is new enough for that Azurite, else on Node.js from PyPI installed
# into .venv (photomosaics/local/node_runtime.py): Python is the only prerequisite.
$(NODE_STAMP): package.json package-lock.json $(PY_STAMP)
	$(BIN)/python -m photomosaics.local.node_runtime npm ci --no-audit --no-fund --loglevel=error
	@touch $@

run: install
	$(BIN)/photomosaics run

# The same, with a second embedded Azurite as the paired secondary account (README, "Failover").
run-paired: install
	$(BIN)/photomosaics run --secondary-azurite

# Scripted outage of the primary (two Azurites, a fault proxy): POSTs answer 202, jobs finish after recovery.
demo-failover: install
	$(BIN)/python -m benchmarks.availability failover

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) node_modules .pytest_cache .hypothesis artifacts bench-results
