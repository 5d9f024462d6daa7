# Two commands set everything up on a machine that has only Python: `make test` and `make reproduce`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUN    := $(BIN)/python -m runners.run -m hydra/launcher=joblib
# MemoryAgentBench data: a folder with memoryagentbench/ and mquake/ (see README); empty = download.
export TEPA_DATA_DIR ?=

.PHONY: test reproduce figures calibrate

# (Re)install when the venv is missing or pyproject.toml changed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -m "not llm"

# Every paper experiment on the offline simulated backend (10 seeds), then tables, figures, results/README.md.
reproduce: $(STAMP)
	$(RUN) experiment=paper_controlled
	$(RUN) experiment=paper_executable
	$(RUN) experiment=paper_preference
	@if $(BIN)/python -m envs.mab_data; then $(RUN) experiment=paper_memoryagentbench; \
	else echo "skipping MemoryAgentBench: no data (see above)"; fi
	$(MAKE) figures

# Tables, figures and results/README.md from the logs already in results/runs (no experiment is rerun).
figures: $(STAMP)
	$(BIN)/python -m analysis --runs results/runs --out results

# Calibrate the simulated reader on No Memory and Oracle Reset, and the sensitivity of the results to it.
calibrate: $(STAMP)
	$(BIN)/python -m runners.calibrate --out results
