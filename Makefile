# kvsim's one entry point: `make help` lists the targets. The README's two commands are `make run` and
# `make test`; .ci/run calls `make test` on a clean clone.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PYO3_PYTHON := $(abspath $(PY))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.DEFAULT_GOAL := help
.PHONY: help venv dev run test lint fmt rust-test py-test gpu-test bench sweep clean lab

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "maturin>=1.9.4,<2"
	touch $@

venv: $(VENV)/.installed ## Create the virtualenv with maturin

dev: $(VENV)/.installed ## Build the Rust extension (release, profile-guided: scripts/pgo_build.sh; PGO=0 without) and install kvsim (+ test deps) into the venv
	VENV=$(VENV) scripts/pgo_build.sh test

run: dev ## The main job: the claims suite (results/claims.md, results/plots/*.png)
	$(PY) -m bench.sweep

test: dev lint rust-test py-test gpu-test ## Every check CI runs: lint, cargo test, pytest, the GPU validation on CPU

lint: dev ## cargo fmt --check, clippy -D warnings, ruff check, ruff format --check, mypy, stubtest of _core.pyi
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest kvsim._core

rust-test: ## The core's own tests (no Python needed)
	cargo test

py-test: dev ## pytest + hypothesis on both backends (KVSIM_HYPOTHESIS_PROFILE=fast|ci|thorough), on every core (pytest-xdist)
	$(PY) -m pytest -n auto --dist worksteal

gpu-test: dev ## GPU validation's tests on CPU: installs the gpu extra (torch, ~5.4 GB from PyPI), runs them
	VENV=$(VENV) scripts/pgo_build.sh test,gpu
	KVSIM_REQUIRE_TORCH=1 $(PY) -m pytest tests/test_gpu_validate.py -q

fmt: dev ## Format Rust and Python
	cargo fmt --all
	$(VENV)/bin/ruff format python tests bench
	$(VENV)/bin/ruff check --fix python tests bench

sweep: dev ## An example sweep (examples/sweep.toml -> results/example.parquet and a table)
	$(PY) -m bench.sweep --file examples/sweep.toml

lab: dev ## The interactive lab page: a local web server, prints its URL (Ctrl-C stops it)
	$(VENV)/bin/kvsim lab

bench: dev ## Benchmarks (release build); writes the ratios into results/README.md
	$(PY) -m pytest bench --benchmark-enable -q

clean: ## Remove build outputs and the venv
	cargo clean
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache .benchmarks
