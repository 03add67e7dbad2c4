# make train: set up .venv and run `python train.py` (the CPU demo on the embedded corpus)
# make test:  set up .venv and run the test suite, less the end-to-end runs marked slow (minutes; the inner loop)
# make test-all: the whole suite, slow end-to-end runs included (what CI runs)
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= 2.13.0
STAMP   := $(VENV)/.installed
ARGS    ?=
JOBS    ?= 2

.PHONY: setup train test test-all lint deps-check sample mutate gpu-check clean

setup: $(STAMP)

# torch first, pinned: an open range would fetch a multi-GB CUDA build; the package's own
# requirement is a range that this version satisfies, so pip installs nothing more for it.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "torch==$(TORCH)"
	$(BIN)/python -m pip install -e ".[test]"
	touch $(STAMP)

train: setup
	$(BIN)/python train.py $(ARGS)

test: setup
	WANDB_MODE=offline $(BIN)/python -m pytest -q -m "not slow" $(ARGS)

test-all: setup
	WANDB_MODE=offline $(BIN)/python -m pytest -q $(ARGS)

# ruff's rules in pyproject.toml ([tool.ruff]); make test runs the same check (tests/test_layout.py)
lint: setup
	$(BIN)/python -m ruff check src tests scripts templates train.py

# mutation testing of attention, model, generate, diagnostics and data against the fast tests (not in CI;
# it resumes where it stopped). One thread per job: mutmut forks workers, and a forked OpenMP pool deadlocks
# (each such mutant would hang until its timeout and count as a false "timeout"). Scores: docs/testing.md.
mutate: setup
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HYPOTHESIS_PROFILE=mutation WANDB_MODE=offline \
		$(BIN)/mutmut run --max-children $(JOBS) || true
	$(BIN)/python scripts/mutation_scores.py

# the fast suite on the oldest and on the newest versions pyproject.toml's ranges allow, each in a fresh venv under
# $TMPDIR/tinygpt-deps-check (~6 GB each: torch from PyPI brings its CUDA wheels); ARGS=oldest or newest runs one.
# Not in CI (5-10 minutes here); docs/testing.md has the last result.
deps-check:
	$(PY) .ci/deps_check.py $(ARGS)

sample: setup
	$(BIN)/python scripts/sample.py $(ARGS)

# on a GPU machine, at most 8 minutes: the GPU runs, compile, FSDP (DDP with 2+ GPUs), the KV cache, MFU
# (docs/scaling-out.md, "Checking a GPU machine"); without a GPU it says so in one line. ARGS="--dry-run": the plan.
gpu-check: setup
	$(BIN)/python scripts/gpu_check.py $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun wandb data/cache .pytest_cache
