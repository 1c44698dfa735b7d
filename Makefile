PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test system-packages lint typecheck pytest bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: venv
	$(BIN)/python -m appliance.demo

test: system-packages venv lint typecheck pytest

# The Debian packages the tests need (PulseAudio, PortAudio, shellcheck, systemd-analyze, ...):
# installed when missing, as root or with sudo -n; a no-op when all are there.
system-packages:
	@.ci/system-packages

lint: venv
	$(BIN)/ruff check appliance tuning tests bench
	$(BIN)/ruff format --check appliance tuning tests bench

typecheck: venv
	$(BIN)/mypy

pytest: venv
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: venv
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
