PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint typecheck pytest bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: venv
	$(BIN)/python -m appliance.demo

test: venv lint typecheck pytest

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
