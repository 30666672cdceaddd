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


def test_a_linked_service_log_does_not_empty_the_file_it_names(tmp_path, monkeypatch, capsys):
    """`repro pecan tfdata start --state-dir DIR` where DIR/dispatcher.log is a symbolic link: the log was
    opened for writing through it, emptying the file it named (anywhere), and the dispatcher started."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "dispatcher.log").symlink_to("../notes.txt")
    try:
        code, out, err = run_repro(["pecan", "tfdata", "start", "--state-dir", "state"], capsys)
    finally:
        if (tmp_path / "state" / "state.json").exists():  # started before: stop it
            run_repro(["pecan", "tfdata", "stop", "--state-dir", "state"], capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: state/dispatcher.log: is a symbolic link; expected a regular file or a new path "
                   "to write the output to\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / "state" / "state.json").exists()


def test_a_linked_service_lock_does_not_empty_the_file_it_names(tmp_path):
    """The lock a tf.data service's user holds (a run on it, the workflow's status check), where
    DIR/use.lock is a symbolic link: it was opened for writing, emptying the file the link named."""
    from repro.pecan.tfdata.service import exclusive

    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "use.lock").symlink_to("../notes.txt")
    with exclusive(tmp_path / "state"):
        pass
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
