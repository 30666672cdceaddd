# Two entry points for a fresh machine: `make fig8` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= 1

.PHONY: setup fig8 figures test lint clean

# The default install: what `make fig8` needs. Executor and storage plugins are extras (README,
# profiles), since Snakemake imports every installed plugin at each start.
$(BIN)/repro: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

# The tests also drive the SLURM profile, GCS storage and the ssh backend.
$(VENV)/.test-extras: $(BIN)/repro
	$(BIN)/pip install --quiet -e '.[test,slurm,gcs,ssh]'
	touch $@

setup: $(BIN)/repro

# rules call the `repro` command, so the virtualenv's bin/ goes first on PATH
RUN    := PATH=$(abspath $(BIN)):$$PATH

fig8: setup
	$(RUN) snakemake plots/fig8_ResNet50_v2-8.pdf --cores $(CORES)

figures: setup
	$(RUN) snakemake --cores $(CORES)

test: $(VENV)/.test-extras
	$(RUN) pytest -q

lint: $(VENV)/.test-extras
	$(RUN) snakemake --lint
	$(RUN) snakefmt --check Snakefile rules/

clean:
	rm -rf results/* plots/* .snakemake
	touch results/.gitkeep plots/.gitkeep
