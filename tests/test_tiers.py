"""The test tiers (Makefile: test-fast, test, test-all): each prints its wall time, and the fast
tier leaves out the tests that start the tf.data service."""

import os
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


def test_the_fast_tier_leaves_out_the_tfdata_service_tests():
    modules = ("tests/test_tfdata.py", "tests/test_tfdata_service.py")
    service = _pytest("-q", "--collect-only", "-m", "service", *modules).stdout
    fast = _pytest("-q", "--collect-only", "-m", "not workflow and not registry and not service", *modules).stdout
    assert "test_service_starts_answers_a_probe_job_and_stops_every_process" in service
    assert "test_service_starts_answers_a_probe_job_and_stops_every_process" not in fast
    assert "test_validation_predicts_each_deployment_from_both_sets_of_inputs" in fast  # a unit test stays
