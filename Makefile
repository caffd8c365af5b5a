# `make run`: the gateway with config/gateway.toml (embedded backend, every listener on loopback);
#   `make run CONFIG=other.toml` another config, `make run PORT_OFFSET=10000` every port moved by N.
# `make bench`: the benchmark report (bench/results/REPORT.md).
# `make test`: install test dependencies and the servers/clients the tests drive, run the suite.
# `make lint`: ruff (lint and format check) and mypy on gateway/ ([tool.mypy] in pyproject.toml).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test deps lint format bench clean fuzz soak

$(STAMP_RUN): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(STAMP_RUN)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP) $(STAMP_RUN)

CONFIG ?= config/gateway.toml
PORT_OFFSET ?=

run: $(STAMP_RUN)
	GATEWAY_PORT_OFFSET=$(PORT_OFFSET) $(BIN)/gateway serve --config $(CONFIG)

deps:
	@set -e; for f in .ci/deps/*.sh; do [ -e "$$f" ] || continue; echo "== $$f"; bash "$$f"; done

test: $(STAMP) deps
	@$(BIN)/python -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

# `make bench`: every bench/ driver with fixed workloads, one after the other (bench/run.py);
# writes bench/results/latest.json and bench/results/REPORT.md with PNG charts.
bench: $(STAMP) deps
	$(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python bench/run.py

# Longer reliability runs than `make test`: more fuzz examples and frames, more SIGKILLs, a
# minutes-long soak. The atheris targets in fuzz/ run outside make (see fuzz/atheris_codecs.py).
fuzz: $(STAMP) deps
	GATEWAY_FUZZ_EXAMPLES=20000 GATEWAY_LIVE_FUZZ_FRAMES=50000 \
	  $(BIN)/python -m pytest -q tests/reliability/test_codec_fuzz.py tests/reliability/test_live_fuzz.py

soak: $(STAMP) deps
	GATEWAY_SOAK_SECONDS=300 GATEWAY_CRASH_ROUNDS=200 \
	  $(BIN)/python -m pytest -q tests/reliability/test_soak.py tests/reliability/test_crash_safety.py

clean:
	rm -rf $(VENV) .test-venvs data .pytest_cache .mypy_cache
