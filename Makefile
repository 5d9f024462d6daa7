# Two commands set everything up on a machine that has only Python: `make test` and `make reproduce`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: test reproduce

# (Re)install when the venv is missing or pyproject.toml changed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -m "not llm"

reproduce: $(STAMP)
	@echo "no paper experiments are wired up yet"
