"""Fault injection, an adversarial pass over the tf.data engine's settings: numbers whose arithmetic
overflowed once the run had started (a wait's deadline, a window's steps).

The command rows run as test_faults_input's rows do (`check_fault`): exit code 1, one line on stderr
naming the flag or key and what was expected, nothing written, no process left running.
"""

import pytest
from test_faults_adversarial import _tfdata
from test_faults_input import Fault, _check_override, check_fault

pytestmark = pytest.mark.fault

SCALES = r"expected a time scale from \S+ to \S+ \(a step time from 0.0001 to 60 s\)$"

COMMAND_FAULTS = [
    # OverflowError tracebacks once the run had written its data: the batch wait's deadline past
    # time_t, a window of infinitely many steps at a step time of 0
    Fault("tfdata-run-batch-timeout-1e308", _tfdata("run", "--batch-timeout", "1e308"),
          r"repro: error: --batch-timeout 1e\+308: expected a positive, finite number of seconds, at most 86400$",
          bounded=True),
    Fault("tfdata-run-subnormal-time-scale", _tfdata("run", "--time-scale", "1e-320"),
          rf"repro: error: --time-scale 9.99989e-321: a step time of \S+ s for ResNet50_v2-8 \(16 examples at \S+ "
          rf"examples/s, times the scale\); {SCALES}", bounded=True),
    # a step of 80 minutes: the run's windows lasted days
    Fault("tfdata-run-time-scale-of-hour-long-steps", _tfdata("run", "--time-scale", "1e6", "--batch-size", "1"),
          rf"repro: error: --time-scale 1e\+06: a step time of 309 s for ResNet50_v2-8 .*; {SCALES}", bounded=True),
    # `repro config check` passed it; the workflow's runs then failed as the flag did
    Fault("config-tfdata-subnormal-time-scale",
          _check_override({"pecan": {"engine": "tfdata", "tfdata": {"time_scale": 1e-300}}}),
          rf"repro: error: .*my.yaml: pecan.tfdata.time_scale 1e-300: a step time of \S+ s for \S+ .*; {SCALES}"),
]


@pytest.mark.parametrize("fault", COMMAND_FAULTS, ids=[f.id for f in COMMAND_FAULTS])
def test_command_faults(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)
