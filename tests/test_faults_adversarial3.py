"""Fault injection, a third adversarial pass: files in the way of what the commands write (a directory
where a file goes, a symbolic link where a log or lock goes), and what the commands name when that fails.

A file in the way ends as test_faults_input's rows do: exit code 1, one line on stderr naming the file
the user can see and what was expected, no traceback, and no file outside the command's own written to.
"""

import pytest
from support import run_repro


pytestmark = pytest.mark.fault


def test_a_directory_where_a_model_file_goes_is_named(tmp_path, monkeypatch, capsys):
    """`repro trims models` where <model>/model.params is a directory: the error named the hidden staging
    copy (.squeezenet_1.1.<random>.tmp/model.params), removed by then, not the directory in the way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "squeezenet_1.1" / "model.params").mkdir(parents=True)
    code, out, err = run_repro(["trims", "models", "squeezenet_1.1", "--base-path", "models"], capsys)
    assert (code, out, err) == (1, "", "repro: error: models/squeezenet_1.1/model.params: Is a directory\n")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["squeezenet_1.1"]  # no staging copy left
