# Two entry points for a fresh machine: `make fig8` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= 1

.PHONY: setup fig8 figures test lint clean

$(BIN)/repro: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(BIN)/repro

# rules call the `repro` command, so the virtualenv's bin/ goes first on PATH
RUN    := PATH=$(abspath $(BIN)):$$PATH

fig8: setup
	$(RUN) snakemake plots/fig8_ResNet50_v2-8.pdf --cores $(CORES)

figures: setup
	$(RUN) snakemake --cores $(CORES)

test: setup
	$(RUN) pytest -q

lint: setup
	$(RUN) snakemake --lint
	$(RUN) snakefmt --check Snakefile rules/

clean:
	rm -rf results/* plots/* .snakemake
	touch results/.gitkeep plots/.gitkeep
