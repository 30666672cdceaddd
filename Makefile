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

fig8: setup
	$(BIN)/snakemake plots/fig8_ResNet50_v2-8.pdf --cores $(CORES)

figures: setup
	$(BIN)/snakemake --cores $(CORES)

test: setup
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest -q

lint: setup
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile rules/

clean:
	rm -rf results/* plots/* .snakemake
	touch results/.gitkeep plots/.gitkeep
