# Two entry points for a fresh machine: `make fig8` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= 1

.PHONY: setup fig8 figures test test-fast test-all mutation lint clean

# The default install: what `make fig8` needs. Executor and storage plugins are extras (README,
# profiles), since Snakemake imports every installed plugin at each start. --no-compile: a module is
# byte-compiled as it is first imported (RUN keeps the cache on), not every module of every package
# at install, TensorFlow's thousands included: that took longer than the first imports do.
PIP    := $(BIN)/pip install --quiet --no-compile
$(BIN)/repro: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP) -e .
	touch $@

# The tests also drive the SLURM profile, GCS storage, the ssh backend and the tf.data engine
# (TensorFlow: a large download, once). The Google Batch extra is left out (`make test-all` and
# .ci/run add it): the Batch plugin slows every Snakemake start.
$(VENV)/.test-extras: $(BIN)/repro
	$(PIP) -e '.[test,slurm,gcs,ssh,tfdata]'
	touch $@

$(VENV)/.all-extras: $(VENV)/.test-extras
	$(PIP) -e '.[test,slurm,gcs,ssh,tfdata,googlebatch]'
	touch $@

setup: $(BIN)/repro

# rules call the `repro` command, so the virtualenv's bin/ goes first on PATH. Python caches compiled
# modules (a workflow or a test run starts `repro` hundreds of times; each would otherwise compile
# the package again), even where the environment sets PYTHONDONTWRITEBYTECODE.
RUN    := PATH=$(abspath $(BIN)):$$PATH PYTHONDONTWRITEBYTECODE=

# the figure and its provenance record (inputs, settings, commit, machine)
fig8: setup
	$(RUN) snakemake plots/fig8_ResNet50_v2-8.pdf results/provenance/fig8_ResNet50_v2-8.json --cores $(CORES)

figures: setup
	$(RUN) snakemake --cores $(CORES)

# Each tier ends with its wall and CPU time (tests/conftest.py); -rs lists why each skipped test was skipped
# (the package that would enable it). benchmarks/tests_time.py times the tiers.
PYTEST := $(RUN) pytest -q -rs
# The tests run under pytest-xdist, two workers per CPU (at most 8): the workflow and service tests
# mostly wait on the programs they start, and some unit tests wait on the processes they signal, so
# a worker per CPU leaves CPUs idle. A module per worker (a module's tests share its fixtures: the
# tiny build, SLURM, sshd), in the order tests/conftest.py collects them: the longest modules first
# (xdist's reorder by count of tests would start them last); the unit tests of `make test-fast`,
# whose fixtures are cheap, go test by test to whichever worker is free (worksteal: no worker is
# left with a long module at the end). WORKERS=0 or TEST_WORKERS=0 runs a tier in one process.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n * 2 < 8 ? n * 2 : 8 )))
WORKERS ?= $(TEST_WORKERS)
DIST   := --dist loadfile --no-loadscope-reorder

# everything this machine can run (tests needing sshd, SLURM or a GPU skip where those are missing)
test: $(VENV)/.test-extras
	REPRO_TEST_TIER=$${REPRO_TEST_TIER:-test} $(PYTEST) -n $(TEST_WORKERS) $(DIST) --durations=15

# unit tests only: no Snakemake runs, no ssh, SLURM or GPU, no package registry, no tf.data service
# or other long-running programs (the `service` marker), no inputs of tens of megabytes built to hold
# a memory bound (the `large` marker)
test-fast: $(VENV)/.test-extras
	REPRO_TEST_TIER=$${REPRO_TEST_TIER:-test-fast} $(PYTEST) -n $(WORKERS) --dist worksteal -m "not workflow and not registry and not service and not large" --durations=10

# everything, the Google Batch extra's tests included: what CI runs (.ci/run, which also installs
# sshd and SLURM and requires their tests)
test-all: $(VENV)/.all-extras
	REPRO_TEST_TIER=$${REPRO_TEST_TIER:-test-all} $(PYTEST) -n $(TEST_WORKERS) $(DIST) --durations=15

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

# stop whatever this directory's workflow left running first, on every backend it used (a model
# store after a killed run, a tf.data service, the ssh hosts' servers), each backend's directory with
# its state.json or not: a tf.data service is also stopped from its own record, and the model store from
# its runtime record, results/cluster/ there or not. results/ or plots/ that is a
# symbolic link is refused before anything is stopped or deleted: `rm -rf results/*` emptied the
# directory it names, outside this clone, whatever else it held.
clean:
	@for dir in results plots; do if [ -L "$$dir" ]; then echo "make clean: $$dir is a symbolic link (to $$(readlink "$$dir")); expected this clone's own $$dir/ directory: empty the directory it names yourself, or put a directory in its place" >&2; exit 1; fi; done
	-for dir in results/cluster/*/; do if [ -d "$$dir" ]; then $(RUN) repro cluster stop --state "$${dir}state.json"; fi; done
	-if $(RUN) command -v repro > /dev/null; then $(RUN) repro trims store stop; fi
	rm -rf results/* plots/* .snakemake
	touch results/.gitkeep plots/.gitkeep
