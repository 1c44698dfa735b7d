PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# What is installed: the runtime (make run), or the runtime and the dev extras (make test,
# make bench, make venv).  The dev install also counts as a runtime one.
STAMP_RUN := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-dev

.PHONY: venv run test system-packages lint typecheck pytest bench clean agents-venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP) $(STAMP_RUN)

# Only what running needs (a venv of ~400 MB, not the ~650 MB with the test tools); a venv
# that already has the dev extras is used as it is.
$(STAMP_RUN): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(STAMP_RUN)

# Ctrl-C is how the demo ends: its 130 is no error (make still says "Interrupt").
run: $(STAMP_RUN)
	$(BIN)/python -m appliance.clients.demo || [ $$? -eq 130 ]

test: system-packages venv agents-venv lint typecheck pytest

# The voice-agent clients the tests run against the daemon (pipecat-ai), in a venv of their
# own so that their pins never move ttsd's: made once, remade when tests/agents_venv.py's
# requirements change (.venv-agents/.installed names them).
agents-venv: venv
	$(BIN)/python -m tests.agents_venv

# The Debian packages the tests need (PulseAudio, PortAudio, shellcheck, systemd-analyze, ...):
# installed when missing, as root or with sudo -n; a no-op when all are there.
system-packages:
	@.ci/system-packages

lint: venv
	$(BIN)/ruff check appliance tuning tests bench
	$(BIN)/ruff format --check appliance tuning tests bench

typecheck: venv
	$(BIN)/mypy

# Test processes (pytest-xdist, a file each at a time): most of the suite waits on real
# time (audio played at 1x, timeouts, daemons starting), so on 2 cores two at once took
# pytest from 24-27 to ~14 minutes, and three to ~12 (1.9 cores busy: a fourth would only
# queue); a file's module fixtures (a voice cut, a daemon) stay one.  Tests marked ``solo``
# assert that real-time streams do not stall: the other test processes would be CPU hogs
# beside them, so they run after the rest, alone (exit 5: the arguments selected none).
TEST_WORKERS ?= 3

pytest: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not solo" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -m solo $(PYTEST_ARGS) || [ $$? -eq 5 ]

bench: venv
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-agents build *.egg-info .mypy_cache .ruff_cache .pytest_cache
