"""The test tiers (Makefile: test-fast, test, test-all): each prints its wall time, and the fast
tier leaves out the tests that start the tf.data service or build inputs of tens of megabytes."""

import os
import re
import subprocess
import sys

import pytest
from support import REPO

pytestmark = pytest.mark.service  # each runs pytest itself


def _pytest(*args, tier=None):
    env = {**os.environ, "REPRO_TEST_TIER": tier} if tier else os.environ
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_tier_ends_with_its_wall_time():
    proc = _pytest("-q", "tests/test_wildcards.py", tier="a-tier")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert any(line.startswith("tier a-tier: ") and line.endswith(" s wall") for line in proc.stdout.splitlines()), proc.stdout[-500:]


def _fast_tier_selection():
    """The -m expression of the Makefile's test-fast."""
    recipe = (REPO / "Makefile").read_text().split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    return re.search(r'-m "([^"]+)"', recipe).group(1)


def test_the_fast_tier_leaves_out_the_tfdata_service_tests_and_the_large_inputs():
    modules = ("tests/test_tfdata.py", "tests/test_tfdata_service.py", "tests/test_faults_adversarial7.py")
    everything = _pytest("-q", "--collect-only", *modules).stdout
    fast = _pytest("-q", "--collect-only", "-m", _fast_tier_selection(), *modules).stdout
    for left_out in ("test_service_starts_answers_a_probe_job_and_stops_every_process",  # starts the service
                     "test_a_bootstrap_over_many_requests_holds_a_bounded_memory"):  # 100,000 requests
        assert left_out in everything and left_out not in fast
    assert "test_validation_predicts_each_deployment_from_both_sets_of_inputs" in fast  # a unit test stays
    assert "test_a_bootstrap_drawn_in_batches_draws_what_it_drew_at_once" in fast


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_tier_names_the_tests_that_used_most_cpu_their_programs_included(workers, tmp_path):
    """The CPU line counts a test's own CPU and that of the programs it waited for, under pytest-xdist
    too: a test whose child process burns a second of CPU heads the list; one that sleeps does not."""
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys, time\n\n"
        "def test_burns():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nend = time.process_time() + 1\\n"
        "while time.process_time() < end: pass'], check=True)\n\n"
        "def test_sleeps():\n"
        "    time.sleep(1)\n")
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", workers,
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("CPU: "))
    most = line.split("most: ")[1].split(", ")
    assert most[0].startswith("test_burn.py::test_burns ") and float(most[0].split()[-2]) >= 1, line
    assert most[1].startswith("test_burn.py::test_sleeps ") and float(most[1].split()[-2]) < 0.5, line


def test_make_test_starts_the_longest_modules_first():
    """pytest-xdist hands modules out in the order collected (the Makefile keeps it: without
    --no-loadscope-reorder, xdist orders them by count of tests, the few long tests last): the
    collection begins with conftest's LONGEST_MODULES, each a module here, then the other modules
    with tests that run programs, before the unit tests."""
    from conftest import LONGEST_MODULES

    recipe = (REPO / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(DIST)" in recipe and re.search(r"^DIST\s*:=.*--dist loadfile --no-loadscope-reorder", (REPO / "Makefile").read_text(), re.M)
    collected = _pytest("-q", "--collect-only", "tests").stdout.splitlines()
    order = list(dict.fromkeys(line.split("::")[0] for line in collected if "::" in line))
    assert order[:len(LONGEST_MODULES)] == [f"tests/{name}" for name in LONGEST_MODULES]
    assert order.index("tests/test_faults_workflow.py") < order.index("tests/test_traces.py")  # snakemake runs before unit tests


@pytest.mark.parametrize("cpus, workers", [(1, 2), (2, 4), (4, 8), (8, 8)])
def test_the_tiers_run_two_workers_per_cpu(cpus, workers):
    """Every tier: two workers per CPU, at most 8. nproc, which the Makefile reads, counts
    OMP_NUM_THREADS."""
    env = {**os.environ, "OMP_NUM_THREADS": str(cpus)}
    for tier in ("test", "test-all", "test-fast"):
        planned = subprocess.run(["make", "-n", tier], cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
        runs = [line for line in planned.splitlines() if " pytest " in line]
        assert len(runs) == 1 and f" -n {workers} " in runs[0], (tier, runs)
