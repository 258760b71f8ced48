# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test lint demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.14.1 / torchvision==0.29.1 are pinned in pyproject.toml; pip takes them from local disk here.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check sweeper trainables search_spaces tests benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check sweeper trainables search_spaces tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/certify_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache
