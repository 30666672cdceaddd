# Two entry points for a fresh machine: `make fig8` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= 1

.PHONY: setup fig8 figures test test-fast mutation lint clean

# The default install: what `make fig8` needs. Executor and storage plugins are extras (README,
# profiles), since Snakemake imports every installed plugin at each start.
$(BIN)/repro: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

# The tests also drive the SLURM profile, GCS storage and the ssh backend. The tf.data and Google
# Batch extras are left out (.ci/run adds them): the Batch plugin slows every Snakemake start.
$(VENV)/.test-extras: $(BIN)/repro
	$(BIN)/pip install --quiet -e '.[test,slurm,gcs,ssh]'
	touch $@

setup: $(BIN)/repro

# rules call the `repro` command, so the virtualenv's bin/ goes first on PATH
RUN    := PATH=$(abspath $(BIN)):$$PATH

# the figure and its provenance record (inputs, settings, commit, machine)
fig8: setup
	$(RUN) snakemake plots/fig8_ResNet50_v2-8.pdf results/provenance/fig8_ResNet50_v2-8.json --cores $(CORES)

figures: setup
	$(RUN) snakemake --cores $(CORES)

test: $(VENV)/.test-extras
	$(RUN) pytest -q --durations=15

# unit tests only: no Snakemake runs, no ssh, SLURM or GPU, no package registry
test-fast: $(VENV)/.test-extras
	$(RUN) pytest -q -m "not workflow and not registry" --durations=10

# the mutation score of the core modules with the unit tests (tens of minutes; not part of `make test`):
# a fresh run of mutmut ([tool.mutmut] in pyproject.toml), then the score per module
mutation: $(VENV)/.test-extras
	rm -rf mutants
	$(RUN) nice -n 5 mutmut run
	$(RUN) python tools/mutation_report.py

lint: $(VENV)/.test-extras
	$(RUN) ruff check .
	$(RUN) snakemake --lint
	$(RUN) snakefmt --check Snakefile rules/

# stop whatever this directory's workflow left running (a model store after a killed run) first
clean:
	-$(RUN) repro cluster stop --state results/cluster/local/state.json
	rm -rf results/* plots/* .snakemake
	touch results/.gitkeep plots/.gitkeep
