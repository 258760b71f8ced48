# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast test-gpu mutate lint docs demo bench lock clean

DEMO_STORAGE ?= results

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.14.1 / torchvision==0.29.1 are pinned in pyproject.toml; pip takes them from local disk here.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: lint
	$(BIN)/python -m pytest -q -m "not e2e" -n 2
	$(BIN)/python -m pytest -q -m e2e

# Unit, CLI and config tests only (no Ray): about a minute.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not e2e"

# The `gpu` tests (AMP training, CERTIFY on CUDA, NCCL data-parallel on 2 GPUs): run this on a
# CUDA machine; without CUDA every one of them is reported as skipped.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu -rs

# Mutation testing (mutmut, config in pyproject.toml) of the smoothing math, the attacks, the
# envelope and the storage/resume code with the fast tests; incremental (only changed code
# is re-tested, and so are survivors not listed as equivalent and mutants of functions added
# since); FRESH=1 starts over. Prints the score; docs/development.md "Mutation testing" lists it.
mutate: $(STAMP)
	$(if $(FRESH),rm -rf mutants,$(BIN)/python tests/mutation_score.py --prepare)
	$(BIN)/mutmut run --max-children 2 || true
	$(BIN)/python tests/mutation_score.py

# A real sweep on the embedded digits data (34 trials, 2 CPU cores), then its envelope.
demo: $(STAMP)
	$(BIN)/sweeper run grid digits --storage $(DEMO_STORAGE)
	$(BIN)/sweeper envelope --storage $(DEMO_STORAGE) --experiment digits --radii 0:1.5:0.25
	$(BIN)/sweeper envelope --storage $(DEMO_STORAGE) --experiment digits --radii 0:1.5:0.25 --by sigma \
		--plot $(DEMO_STORAGE)/digits/reports/demo_envelope_by_sigma.png
	@echo "training curves: $(BIN)/pip install -q -e '.[tensorboard]' && $(BIN)/tensorboard --logdir $(DEMO_STORAGE)/digits/tune"

# ruff (lint and format: `ruff format` decides every line's layout, no `fmt: skip`), then mypy on
# sweeper/ and trainables/ ([tool.mypy] in pyproject.toml: which modules are strict and why the
# others are not), then the documentation site with `mkdocs build --strict` (a broken page,
# link or anchor fails; built into a temporary directory); all must report nothing.
lint: $(STAMP)
	$(BIN)/ruff check sweeper trainables search_spaces tests benchmarks docs/*.py
	$(BIN)/ruff format --check sweeper trainables tests benchmarks docs/*.py
	$(BIN)/mypy
	site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --site-dir $$site; \
		status=$$?; rm -rf $$site; exit $$status

# The documentation site (mkdocs.yml, docs/) into site/; `$(BIN)/mkdocs serve` to browse it
# while editing. Transcripts: `$(BIN)/python docs/make_transcripts.py`.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# `sweeper bench` stores this machine's throughput for dry runs' cost estimates. The speed
# benchmarks (certify vs the reference loop, the SmoothAdv step vs train_pgd.py, the data
# pipeline, the GPU script) take over an hour on a 2-core CPU at full size;
# `make bench SMOKE=1` runs every benchmark at its small size.
SMOKE_FLAG = $(if $(SMOKE),--smoke,)
bench: $(STAMP)
	$(BIN)/sweeper bench $(SMOKE_FLAG)
	$(BIN)/python benchmarks/certify_throughput.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/method_cost.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/envelope_speed.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/launcher_overhead.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/sweep_scale.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/certify_speed.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/train_speed.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/data_pipeline.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/gpu.py $(SMOKE_FLAG)
	$(BIN)/python benchmarks/s3_requests.py $(SMOKE_FLAG)

# requirements/cluster.txt: every dependency of pyproject.toml (and the `cluster` extra) pinned
# with its hashes, for the cluster image's Python 3.11 on x86_64 Linux; cluster.yaml installs it
# with --require-hashes on every node. Re-run after changing pyproject.toml's dependencies.
lock: $(STAMP)
	$(BIN)/pip install -q uv
	$(BIN)/uv pip compile pyproject.toml --extra cluster --generate-hashes \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		--index-url https://pypi.org/simple --custom-compile-command "make lock" \
		-o requirements/cluster.txt

clean:
	rm -rf $(VENV) .pytest_cache mutants
