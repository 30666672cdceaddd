"""Fault injection, a second adversarial pass: hostile arguments to the `repro pecan` and `repro trims`
commands, hostile configuration values that reach the rules' command lines, and failures inside the file tools.

Each bad input ends as test_faults_input's rows do: exit code 1, one line on stderr naming the flag, key
or file and what was expected, no traceback and nothing written.
"""

import signal
from pathlib import Path

import pytest
from support import configfiles, copy_workflow, ctrl_c_heard, run_forked, run_repro, snakemake, snapshot


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


@pytest.mark.parametrize("experiment", [[], ["-e", "autoplacement"]], ids=["final", "comparison"])
def test_plot_with_a_basename_that_names_a_fifo_is_refused(experiment, tmp_path, monkeypatch, capsys):
    """`repro pecan plot -o /dev/full` (here a FIFO): the basename names a node the user meant to write to;
    the figure went to a new '/dev/full.pdf' and '.png' beside it instead."""
    import os

    monkeypatch.chdir(tmp_path)
    os.mkfifo("out")
    code, out, err = run_repro(["pecan", "plot", *experiment, "-t", "1", "2", "3", "-o", "out"], capsys)
    assert (code, out, err) == (1, "", "repro: error: -o/--out_file 'out': is a FIFO; expected a basename for the "
                                         "figure's .pdf and .png, or a file name ending in .pdf or .png\n")
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_model_directories_beginning_with_a_dash_reach_the_trims_commands(tmp_path):
    """trims.base_path and trims.asset_store '-models', '-assets' (directory names the config check
    accepts): the rules pass them as --flag=VALUE, since `--base-path -assets` made every model job end
    in argparse's "expected one argument"."""
    import shlex

    from repro.commands import build_parser

    work = copy_workflow(tmp_path / "work")
    config = configfiles(tmp_path, {"trims": {"base_path": "-models", "asset_store": "-assets"}})
    proc = snakemake(work, "results/summary/trims.json", "--dry-run", "--printshellcmds", *config)
    out = proc.stdout + proc.stderr
    lines = [line.removeprefix("Shell command: ") for line in out.splitlines()
             if line.startswith(("Shell command: repro trims models", "Shell command: repro trims fetch"))]
    assert len(lines) == 4, out[-3000:]  # two models, each generated and fetched
    for line in lines:
        words = shlex.split(line.split(" > ")[0])
        args = build_parser().parse_args(words[1:])
        assert args.base_path == ("-assets" if words[2] == "models" else "-models"), line
        assert words[2] == "models" or args.asset_store == "-assets", line


EMPTY_NAMES = {  # a command line with an empty file name (`"$UNSET"`), and the flag or argument named
    "trace summarize": (["trace", "summarize", "", "-o", "s.json"], "inputs"),
    "trace combine": (["trace", "combine", "t.json", "", "-o", "c.json"], "inputs"),
    "trace validate": (["trace", "validate", ""], "inputs"),
    "config check": (["config", "check", ""], "files"),
    "config check --base": (["config", "check", "--base", ""], "--base"),
    "pecan plot --table": (["pecan", "plot", "-e", "autoplacement", "--table", "", "-o", "p"], "--table"),
    "pecan costs": (["pecan", "costs", ""], "logs"),
    "trims summary": (["trims", "summary", "--compare", "", "--distributions", "d.json", "-o", "s.json"], "--compare"),
    "trace download": (["trace", "download", "", "-o", "d"], "receipt"),
    "trims experiment --store": (["trims", "experiment", "compare", "squeezenet_1.1", "--store", "", "--settings", "{}",
                                  "--out", "e"], "--store"),
}


@pytest.mark.parametrize("case", EMPTY_NAMES, ids=list(EMPTY_NAMES))
def test_an_empty_input_name_is_refused(case, tmp_path, monkeypatch, capsys):
    """An input named '' was read as the working directory, unsaid: `trace summarize ''` summarised every
    trace under it, `pecan plot --table ''` drew the default table, `config check ''` named '.'."""
    argv, name = EMPTY_NAMES[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text('[{"name":"a","ph":"X","ts":1,"dur":2,"pid":1,"tid":1}]')
    before = snapshot(tmp_path)
    code, out, err = run_repro(argv, capsys)
    assert (code, out, err) == (1, "", f"repro: error: {name} '': expected a file name, not an empty one\n")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("key", ["trace_store", "trims.base_path"])
def test_a_path_under_an_unknown_users_home_is_refused(key, tmp_path, capsys):
    """`~nosuchuser/x` in a path key: refused as an unset `$VAR` is, naming the key; expanduser left it as
    written and the workflow made a directory named '~nosuchuser' in the working directory."""
    section, _, name = key.rpartition(".")
    value = "~repro-no-such-user/x"
    config = tmp_path / "c.yaml"
    config.write_text(f"{section}: {{{name}: '{value}'}}\n" if section else f"{name}: '{value}'\n")
    base = Path(__file__).parents[1] / "config" / "config.yaml"
    code, out, err = run_repro(["config", "check", "--base", base, config], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: {base} + {config}: {key}: ~repro-no-such-user names no user's home directory "
                   f"here (in '{value}')\n")


@pytest.mark.parametrize("store", ["results", "./results/", "{tmp}/work/results"])
def test_a_trace_store_where_the_workflow_downloads_traces_is_refused(store, tmp_path, monkeypatch, capsys):
    """trace_store: results put the store's keys (traces/<experiment>/<mode>/) where download_traces writes:
    Snakemake deleted that output before the job, so the upload was gone and every download failed with
    "no object ... run it again to upload anew", which could not help."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    store = store.format(tmp=tmp_path)
    (tmp_path / "c.yaml").write_text(f"trace_store: {store}\n")
    base = Path(__file__).parents[1] / "config" / "config.yaml"
    code, out, err = run_repro(["config", "check", "--base", base, tmp_path / "c.yaml"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: {base} + {tmp_path / 'c.yaml'}: trace_store: {store!r} keeps the store's traces in "
                   "results/traces, where the workflow downloads them (and deletes them before each download); "
                   "expected a directory of its own, such as results/store\n")
    for fine in ("results/store", "results/traces/store", "store", "."):  # the default, and other directories
        (tmp_path / "c.yaml").write_text(f"trace_store: {fine}\n")
        code, out, err = run_repro(["config", "check", "--base", base, tmp_path / "c.yaml"], capsys)
        assert (code, err) == (0, ""), fine


@pytest.mark.parametrize("argv", [["doctor", "--profile", ""], ["trims", "server", "run", "--profile", ""]],
                         ids=["doctor", "trims-server"])
def test_an_empty_profile_directory_is_refused(argv, tmp_path, monkeypatch, capsys):
    """`--profile ''` named the working directory, unsaid: doctor reported '.: not a Snakemake profile'."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(argv, capsys)
    assert (code, out, err) == (1, "", "repro: error: --profile '': expected a directory name, not an empty one\n")
    assert snapshot(tmp_path) == {}


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError(28, "No space left on device")], ids=["ctrl-c", "disk-full"])
def test_a_plot_stopped_while_its_png_renders_leaves_neither_file(stop, tmp_path, monkeypatch, capsys):
    """`repro pecan plot -o fig` stopped (SIGTERM, Ctrl-C, a full disk) while the PNG rendered, after the PDF:
    the new fig.pdf was left beside no fig.png (or last run's), seen in 2 of 55 random SIGTERMs."""
    from matplotlib.figure import Figure

    savefig = Figure.savefig

    def png_stops(self, fname, *args, format=None, **kwargs):
        if format == "png":
            raise stop
        return savefig(self, fname, *args, format=format, **kwargs)

    monkeypatch.setattr(Figure, "savefig", png_stops)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["pecan", "plot", "-t", "1", "2", "3", "-o", "fig"], capsys)
    assert code == (130 if stop is KeyboardInterrupt else 1), err
    assert snapshot(tmp_path) == {}


def test_an_output_under_a_file_is_refused_before_the_work(tmp_path, monkeypatch, capsys):
    """`repro pecan calibrate ... -o in.json/x.json`: refused before the measurement, naming the flag; the
    parent that is a file was found only when the output was written, after the work."""
    import repro.pecan.cli

    monkeypatch.setattr(repro.pecan.cli, "_calibration_records", lambda args: pytest.fail("measured"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.json").write_text("{}")
    code, out, err = run_repro(["pecan", "calibrate", "--pipeline", "resnet", "-o", "in.json/x.json"], capsys)
    assert (code, out, err) == (1, "", "repro: error: -o/--output in.json/x.json: cannot write: in.json is not a "
                                         "directory\n")


def test_calibrations_are_written_all_or_none(tmp_path, monkeypatch, capsys):
    """`repro pecan calibrate --pipeline resnet retinanet -o a.json /proc/none/b.json`: the second cannot be
    written, so neither is; a.json was left, with exit status 1."""
    import repro.pecan.cli

    monkeypatch.setattr(repro.pecan.cli, "_calibration_records", lambda args: {"resnet": {"a": 1}, "retinanet": {"b": 2}})
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["pecan", "calibrate", "--pipeline", "resnet", "retinanet", "-o", "a.json",
                                "/proc/repro-none/b.json"], capsys)
    assert (code, out) == (1, "") and err.startswith("repro: error: /proc/repro-none/b.json: cannot write ("), err
    assert snapshot(tmp_path) == {}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_while_the_parser_is_built_ends_as_a_commands(signum, tmp_path, monkeypatch):
    """A stop signal while `repro pecan ...` built its parser (pecan's commands import numpy: a third of a
    second at start-up, before the command's handlers): the signal's default killed the process (exit -15),
    and Ctrl-C there printed a KeyboardInterrupt traceback (3 of 165 random Ctrl-Cs)."""
    import repro.cli

    build_parser = repro.cli.build_parser

    def signalled(group=None):
        signal.raise_signal(signum)  # as it comes while the command groups import
        return build_parser(group)

    monkeypatch.setattr(repro.cli, "build_parser", signalled)
    code, out, err = run_forked(["pecan", "plot", "-t", "1", "2", "3", "-o", "fig"], tmp_path, timeout=120)
    assert (code, out, err) == (128 + signum, "", f"repro: terminated ({signal.Signals(signum).name})\n")
    assert snapshot(tmp_path) == {}


def test_ctrl_c_while_the_parser_is_built_ends_as_a_commands(tmp_path, monkeypatch, capsys):
    import repro.cli

    def interrupted(group=None):
        raise KeyboardInterrupt  # Python's Ctrl-C, as it comes while the command groups import

    monkeypatch.setattr(repro.cli, "build_parser", interrupted)
    monkeypatch.chdir(tmp_path)
    try:
        result = run_repro(["pecan", "plot", "-t", "1", "2", "3"], capsys)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped repro's main: the program printed its traceback")
    assert result == (130, "", "repro: interrupted\n")
    assert snapshot(tmp_path) == {}


def test_download_from_an_empty_store_name_is_refused(tmp_path, monkeypatch, capsys):
    """`repro trace download upload.json --store ''` read the empty name as no --store and downloaded from
    the store the receipt names, unsaid."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_repro(["trace", "download", "upload.json", "--store", "", "-o", "d"], capsys)
    assert (code, out, err) == (1, "", "repro: error: --store '': expected a directory or gs://bucket/prefix, not an "
                                         "empty one (leave --store out for the store the receipt names)\n")
    assert snapshot(tmp_path) == {}


IMPORT_HOOK = """
import signal, sys

class SignalOnImport:  # the stop signal comes as `repro` imports its command tree
    def find_spec(self, name, path=None, target=None):
        if name == "repro.commands":
            signal.raise_signal(signal.{signal})
        return None

sys.meta_path.insert(0, SignalOnImport())
from repro.cli import main
sys.exit(main(["list", "backends"]))
"""


@pytest.mark.parametrize("signum, said", [(signal.SIGINT, "repro: interrupted"), (signal.SIGTERM, "repro: terminated (SIGTERM)"),
                                          (signal.SIGHUP, "repro: terminated (SIGHUP)")], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_while_the_command_tree_imports_ends_as_a_commands(signum, said, tmp_path):
    """Ctrl-C in the first tens of milliseconds, while `repro` imported its command tree (argparse, the file
    tools) at module level, printed a KeyboardInterrupt traceback (4 of about 300 random Ctrl-Cs at 0.02 to
    0.04 s); SIGTERM and SIGHUP killed it (-15, -1)."""
    import subprocess
    import sys

    code = IMPORT_HOOK.replace("{signal}", signal.Signals(signum).name)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            preexec_fn=ctrl_c_heard)
    assert (result.returncode, result.stdout, result.stderr) == (128 + signum, "", said + "\n")


@pytest.mark.parametrize("failure", [LookupError, KeyboardInterrupt], ids=["open-fails", "stop-signal-inside-open"])
def test_an_open_that_fails_keeps_its_own_error(tmp_path, failure):
    """open() closes the descriptor it was given where it fails; open_regular closed it again, and the
    EBADF replaced the failure: a SIGTERM during `repro trims summary` ended as "cannot read: Bad
    file descriptor", exit 1 (here the codec lookup fails, or is where the signal's exception comes)."""
    import codecs
    import os

    from repro.fsutil import open_regular

    path = tmp_path / "report.json"
    path.write_text("{}")

    def search(name):
        if name.replace("-", "_") == "x_failing_lookup":  # as the lookup normalises it
            raise failure("raised inside open()")

    codecs.register(search)
    try:
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(failure, match="raised inside open"):
            open_regular(path, str(path), "a report", mode="r", encoding="x-failing-lookup")
        assert set(os.listdir("/proc/self/fd")) <= before, "a descriptor was left open"
    finally:
        codecs.unregister(search)
