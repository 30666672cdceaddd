"""Fault injection, a second adversarial pass: hostile arguments to the `repro pecan` and `repro trims`
commands, and hostile configuration values that reach the rules' command lines.

Each bad input ends as test_faults_input's rows do: exit code 1, one line on stderr naming the flag, key
or file and what was expected, no traceback and nothing written.
"""

import pytest
from support import run_repro, snapshot


pytestmark = pytest.mark.fault


@pytest.mark.parametrize("experiment", [[], ["-e", "autoplacement"]], ids=["final", "comparison"])
def test_plot_with_an_empty_out_file_is_refused(experiment, tmp_path, monkeypatch, capsys):
    """`repro pecan plot -o ''`: refused as every other -o refuses an empty name; `or` took it for no -o
    and drew the default figure over plots/ResNet50_v2-8.pdf and .png."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["pecan", "plot", *experiment, "-t", "1", "2", "3", "-o", ""], capsys)
    assert (code, out, err) == (1, "", "repro: error: -o/--out_file '': expected a file name or a basename, "
                                         "not an empty one\n")
    assert snapshot(tmp_path) == {}
