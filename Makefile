# Two commands for a newcomer: `make run` and `make test`. Both create .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= ./data

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/jetraft server -a 127.0.0.1 -p 4222 -sd $(DATA) -n jetraft-1 -m 8222

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -m "not slow"

bench: $(STAMP)
	$(BIN)/python -m bench.runner

clean:
	rm -rf $(VENV) build *.egg-info
