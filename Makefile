# Everything a fresh machine needs beyond python3 and make is installed here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean dashboards

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/slaguard demo

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check slaguard tests bench dashboards migrations
	$(BIN)/ruff format --check slaguard tests bench

typecheck: $(STAMP)
	$(BIN)/mypy slaguard

# Two workers, a test file each; the `serial` tests (one restarts PostgreSQL) run after, alone.
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m 'not serial' --durations=15
	$(BIN)/pytest -q -m serial

bench: $(STAMP)
	$(BIN)/python bench/route.py

dashboards: $(STAMP)
	$(BIN)/slaguard dashboards build --out dashboards/

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
