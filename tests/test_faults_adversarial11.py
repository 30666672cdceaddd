"""Fault injection, an adversarial pass over runs cut short: a TrIMS client run or experiment stopped
(Ctrl-C, SIGTERM, a failure) leaves none of its traces where a reader would take them for a whole
run's, and never an earlier run's report beside them.
"""

import json

import pytest

from repro.cli import main
from repro.trims import client
from test_faults_input import _calibration

pytestmark = pytest.mark.fault


def _cut_after(monkeypatch, requests):
    """Client.request raises KeyboardInterrupt (Ctrl-C) once `requests` requests have written their traces."""
    request, done = client.Client.request, []

    def cut(self, model, iteration):
        if len(done) == requests:
            raise KeyboardInterrupt
        done.append(model)
        return request(self, model, iteration)

    monkeypatch.setattr(client.Client, "request", cut)
    return done


def _run(work, *words):
    return main(["trims", "client", "run", "--original", "--config", str(work.config), "--iterations", "3", *words])


def _hours(work):
    return [p for p in (work.dir / "profiles").glob("*/*") if p.is_dir()]


@pytest.mark.parametrize("words", [[], ["--profile-output", "named"]])
def test_a_cut_client_run_leaves_no_trace_directory(work, monkeypatch, capsys, words):
    """The run's directory held the traces written before Ctrl-C, read afterwards as the run's."""
    assert len(_cut_after(monkeypatch, 2)) == 0
    assert _run(work, *words) == 130
    assert capsys.readouterr().err == "repro: interrupted\n"
    assert _hours(work) == []


def test_a_cut_client_run_into_the_hours_shared_directory_removes_its_own_traces_only(work, monkeypatch, capsys):
    """With the original's trace names the hour's runs share one directory: the cut run's traces go,
    an earlier run's stay."""
    assert _run(work, "--trace-names", "original") == 0
    (hour,) = _hours(work)
    earlier = sorted(p.name for p in hour.iterdir())
    assert len([name for name in earlier if client.TRACE_FILES.fullmatch(name)]) == 6
    _cut_after(monkeypatch, 3)
    assert _run(work, "--trace-names", "original") == 130
    assert sorted(p.name for p in hour.iterdir()) == earlier


def test_a_client_run_with_failed_requests_keeps_its_traces(work, monkeypatch, capsys):
    """A request that fails is part of the run's result (its report says so), not a cut run."""
    request = client.Client.request

    def fails_once(self, model, iteration):
        if iteration == 1:
            raise OSError(5, "Input/output error")
        return request(self, model, iteration)

    monkeypatch.setattr(client.Client, "request", fails_once)
    assert _run(work, "--profile-output", "kept", "--results", "r.json") == 1
    assert "2 request(s) failed" in capsys.readouterr().err
    results = json.loads((work.dir / "r.json").read_text())["original"]["results"]
    assert sorted(p.name for p in (_hours(work)[0] / "original").rglob("*.json")) == sorted(
        f"original-{r['iteration']:05d}.json" for r in results if r["ok"])


def _settings(config):
    from repro.rulesettings import trims_client_settings

    return trims_client_settings(config, "compare")


def _earlier_compare(server, models, config, out):
    from repro.trims.experiments import run_compare

    sock, _ = server
    run_compare("squeezenet_1.1", {**_settings(config), "iterations": 2}, models, sock, out)
    assert (out / "report.json").is_file()


@pytest.mark.parametrize("cut_after", [1, 3], ids=["in-original-mode", "in-shared-mode"])
def test_a_cut_compare_leaves_neither_traces_nor_the_earlier_report(server, models, config, tmp_path, monkeypatch,
                                                                    cut_after):
    """Cut in its shared mode, the compare experiment left the original mode's new traces beside the
    earlier run's report.json, which named traces of another run; cut in its original mode, the
    earlier run's shared traces stayed."""
    from repro.trims.experiments import run_compare

    out = tmp_path / "out"
    _earlier_compare(server, models, config, out)
    _cut_after(monkeypatch, cut_after)  # of the two original requests, then the shared ones
    with pytest.raises(KeyboardInterrupt):
        run_compare("squeezenet_1.1", {**_settings(config), "iterations": 2}, models, server[0], out)
    assert sorted(p.name for p in out.iterdir()) == ["traces"]
    assert list((out / "traces").iterdir()) == []


def test_a_cut_distribution_run_leaves_neither_traces_nor_the_earlier_report(server, models, config, tmp_path,
                                                                             monkeypatch):
    from repro.trims.experiments import run_distribution

    out = tmp_path / "out"
    settings = {**_settings(config), "iterations": 4, "seed": 1}
    run_distribution("uniform", [], 1, settings, ["squeezenet_1.1"], models, server[0], out)
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "traces"]
    _cut_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        run_distribution("uniform", [], 1, settings, ["squeezenet_1.1"], models, server[0], out)
    assert list(out.iterdir()) == []


def test_tool_config_settings_at_the_top_level_are_refused(work, capsys):
    """`profile_output_directory:` outside `micro18:` was ignored: the traces went to the default directory."""
    work.config.write_text(f"micro18:\n  base_path: {work.models}\nprofile_output_directory: {work.dir / 'p'}\n")
    assert _run(work) == 1
    assert capsys.readouterr().err == (f"repro: error: {work.config}: ['profile_output_directory'] at the top level; "
                                       "expected them under 'micro18:', where the tools read their settings\n")
    assert not (work.dir / "results").exists()


@pytest.mark.parametrize("words, named", [(["--bogus"], "repro"), (["pecan", "--bogus=3"], "repro pecan"),
                                          (["trims", "server", "-x", "--why"], "repro trims server")])
def test_an_unknown_flag_where_a_subcommand_is_missing_is_named(capsys, words, named):
    """argparse named the missing subcommand ("the following arguments are required"), not the mistyped flag."""
    with pytest.raises(SystemExit) as exc:
        main(words)
    flags = " ".join(w for w in words if w.startswith("-"))
    assert (exc.value.code, capsys.readouterr().err.splitlines()[-1]) == (
        2, f"{named}: error: unrecognized arguments: {flags}")


def test_a_missing_subcommand_alone_is_named(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["trims", "server"])
    assert (exc.value.code, capsys.readouterr().err.splitlines()[-1]) == (
        2, "repro trims server: error: the following arguments are required: {run,stop,status}")


def test_a_comparison_figure_refuses_a_table_of_another_preset(tmp_path, capsys):
    """A comparison table names its runs' calibration preset; a figure whose caption names another is
    refused (the artifact preset's bars had been captioned "local")."""
    from repro.pecan.comparisons import COLUMNS

    rows = [",".join(["W", "artifact", mode, "3", *["1.0"] * (len(COLUMNS) - 4)]) for mode in ("cachew", "autoorder")]
    (tmp_path / "t.csv").write_text("\n".join([",".join(COLUMNS), *rows]) + "\n")
    (tmp_path / "r.json").write_text(_calibration("resnet"))
    settings = {"backend": "local", "preset": "local", "engine_caption": None, "option": "autoorder", "workloads": ["W"],
                "style": {"font_size": 9, "width_in": 5, "height_in": 3.6, "dpi": 50, "show_reference": False}}
    assert main(["pecan", "comparison", "AutoOrder_Cost", "--table", str(tmp_path / "t.csv"), "--calibration",
                 str(tmp_path / "r.json"), "--settings", json.dumps(settings), "--output", str(tmp_path / "f.pdf"), str(tmp_path / "f.png"),
                 "--verdicts", str(tmp_path / "v.csv")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {tmp_path / 't.csv'}: runs of calibration preset 'artifact', not "
                                       "of 'local'; expected the table of the preset the caption names\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.csv"]


def test_an_experiment_report_records_its_clients_settings(server, models, config, tmp_path):
    from repro.trims.experiments import run_compare

    settings = {**_settings(config), "iterations": 2, "cold_cache": True}
    report = run_compare("squeezenet_1.1", settings, models, server[0], tmp_path / "out")
    assert report["client"] == {"eager": settings["eager"], "eager_async": settings["eager_async"], "cold_cache": True,
                                "iterations": 2, "seed": settings["seed"]}
    assert json.loads((tmp_path / "out" / "report.json").read_text())["client"] == report["client"]


def test_trims_summary_refuses_compare_reports_of_two_client_settings(server, models, config, tmp_path, capsys):
    """A cold-cache run of one model and a warm one of another were drawn side by side under one caption."""
    from repro.trims.experiments import run_compare, run_distribution

    reports = []
    for model, cold in (("squeezenet_1.1", True), ("resnet18_v1", False)):
        run_compare(model, {**_settings(config), "iterations": 2, "cold_cache": cold}, models, server[0],
                    tmp_path / model)
        reports.append(tmp_path / model / "report.json")
    run_distribution("uniform", [], 1, {**_settings(config), "iterations": 2}, ["squeezenet_1.1"], models, server[0],
                     tmp_path / "d")
    assert main(["trims", "summary", "--compare", *map(str, reports), "--distributions", str(tmp_path / "d" / "report.json"),
                 "-o", str(tmp_path / "s.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"repro: error: --compare {reports[1]}: client settings {{") and "'cold_cache': False" in err
    assert err.endswith("expected the runs of one series (one store, one client's settings, one set of parameters per "
                        "distribution)\n")
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("limited", [False, True])
def test_a_command_out_of_memory_ends_in_one_line(capsys, monkeypatch, limited):
    """Under `ulimit -v`, numpy's _ArrayMemoryError (a MemoryError) came out as a traceback."""
    import resource
    from types import SimpleNamespace

    from repro import commands

    def exhausted(args):
        raise MemoryError("Unable to allocate 16.0 MiB for an array")

    limit = (300 << 20) if limited else resource.RLIM_INFINITY
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    assert commands.run(SimpleNamespace(func=exhausted)) == 1
    said = " (this process may use 300 MiB: ulimit -v)" if limited else ""
    assert capsys.readouterr().err == (f"repro: error: out of memory{said}; expected the command to have more memory "
                                       "to use\n")


@pytest.mark.parametrize("fields, missing", [(2, "workload"), (9, "workload"), (10, "preset")])
def test_a_cost_table_row_shorter_than_its_header_is_named(tmp_path, capsys, fields, missing):
    """A row cut before its workload field: csv gives None, and the message naming another workload's
    runs ended in a TypeError traceback."""
    from repro.pecan.costtable import TABLE_COLUMNS

    row = ["1"] * len(TABLE_COLUMNS)
    row[TABLE_COLUMNS.index("workload")], row[TABLE_COLUMNS.index("preset")] = "W", "local"
    table = tmp_path / "W.csv"
    table.write_text(",".join(TABLE_COLUMNS) + "\n" + ",".join(row[:fields]) + "\n")
    assert main(["pecan", "comparison-table", "--option", "autoorder", "--workload", "W", "--table", str(table),
                 "-o", str(tmp_path / "c.csv")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {table}: row 1 has no {missing!r} field (shorter than the "
                                       "header); expected a cost table's rows\n")
    assert not (tmp_path / "c.csv").exists()


def _cluster_run_in(config, directory, *changed):
    """`repro cluster run` of Getting_started's short mode on a local backend in `directory`; `changed`
    replaces flags (flag, value)."""
    from repro.rulesettings import run_settings

    (directory / "store").mkdir(exist_ok=True)
    (directory / "state.json").write_text(json.dumps({"backend": "local", "trace_store": str(directory / "store")}))
    (directory / "cal.json").write_text(_calibration("resnet"))
    flags = {"--state": str(directory / "state.json"), "--settings": json.dumps(run_settings(config, "Getting_started",
                                                                                              "short")),
             "--experiment": "Getting_started", "--mode": "short", "--calibration": str(directory / "cal.json"),
             "--run-dir": str(directory / "run"), "--receipt": str(directory / "run" / "upload.json"), **dict(changed)}
    return main(["cluster", "run", *(word for pair in flags.items() for word in pair)])


@pytest.mark.parametrize("changed, error", [
    (("--calibration", "missing.json"), "--calibration missing.json: cannot read (No such file or directory)"),
    (("--mode", "long"), "unknown mode 'long'"),
    (("--receipt", "notes.txt"), "--receipt notes.txt: holds a file that is not an upload receipt; name another file")])
def test_a_refused_cluster_run_leaves_the_earlier_run_and_the_receipt_named(config, tmp_path, monkeypatch, capsys,
                                                                           changed, error):
    """`repro cluster run` removed the earlier run's metrics.json, repeats/ and receipt, and a user's
    file named as --receipt, before it read its calibration."""
    monkeypatch.chdir(tmp_path)
    assert _cluster_run_in(config, tmp_path) == 0
    (tmp_path / "notes.txt").write_text("my notes")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert (tmp_path / "run" / "metrics.json") in before and any("repeats" in p.parts for p in before)
    capsys.readouterr()
    assert _cluster_run_in(config, tmp_path, changed) == 1
    assert error in capsys.readouterr().err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("name", [".backup.tmp/thesis.txt", ".notes.tmp", ".shared-00001.json.abcdefgh.tmp/data.txt",
                                  ".run.1-2.abcdefgh.tmp/thesis.txt", ".thesis.txt.abcdefgh.tmp"])
def test_a_hidden_tmp_name_in_a_directory_a_command_made_is_not_taken_for_its_own(tmp_path, name):
    """Any path under a `.*.tmp` name was taken for a command's temporary file and deleted with the
    directory (`--profile-output-overwrite`, `--scratch`, `--out`), whatever it held."""
    from repro.errors import ReproError
    from repro.fsutil import fresh_directory

    made = fresh_directory(tmp_path / "out", "--out", client.RUN_FILES)
    (made / name).parent.mkdir(parents=True, exist_ok=True)
    (made / name).write_text("the user's")
    with pytest.raises(ReproError, match="which this command does not write; it may be yours"):
        fresh_directory(made, "--out", client.RUN_FILES)
    assert (made / name).read_text() == "the user's"


@pytest.mark.parametrize("name", ["original/squeezenet_1.1/.original-00001.json.abcd_123.tmp",
                                  "original/squeezenet_1.1/.run.12-34.abcdefgh.tmp/original-00001.json"])
def test_a_commands_own_temporary_files_are_its_own(tmp_path, name):
    """What atomic_path or a run's staging directory leave after a crash is still removed with the directory."""
    from repro.fsutil import fresh_directory

    made = fresh_directory(tmp_path / "out", "--out", client.RUN_FILES)
    (made / name).parent.mkdir(parents=True)
    (made / name).write_text("{}")
    assert list(fresh_directory(made, "--out", client.RUN_FILES).iterdir()) == [made / ".repro-made"]


def test_a_scratch_directory_holds_the_configs_tables_only(config, tmp_path):
    """`check-reproducibility --scratch`: a `tables/my_notes.csv` of the user's was deleted as a table."""
    from repro.errors import ReproError
    from repro.fsutil import fresh_directory
    from repro.pecan.reproducibility import scratch_files

    made = fresh_directory(tmp_path / "run-1", "--scratch", scratch_files(config))
    for own in ("tables/ResNet50_v2-8.csv", "calibration/resnet.json", "runs/RetinaNet/fastflow/repeats/run-1.log"):
        (made / own).parent.mkdir(parents=True, exist_ok=True)
        (made / own).write_text("")
    made = fresh_directory(made, "--scratch", scratch_files(config))
    for user in ("tables/my_notes.csv", "runs/Getting_started/cachew/run.log", "calibration/notes.json"):
        (made / user).parent.mkdir(parents=True, exist_ok=True)
        (made / user).write_text("the user's")
        with pytest.raises(ReproError, match=f"holds {user}, which this command does not write"):
            fresh_directory(made, "--scratch", scratch_files(config))
        (made / user).unlink()


@pytest.mark.parametrize("override, error", [
    ("pecan:\n  modes:\n    short: {placement: fixed, autoorder: true, epochs: 2, steps_per_loop: 500, remote_workers: 0,\n"
     "      local_workers: 0}\n",
     "pecan.modes.short: a fixed deployment of no workers preprocesses nothing; expected remote_workers or "
     "local_workers of at least 1 (collocated is the placement without workers)"),
    ("pecan:\n  cluster: {max_remote_workers: 5}\n",
     "pecan.modes.short.remote_workers: 20, more than the cluster's pecan.cluster.max_remote_workers 5; expected a "
     "deployment the cluster can run"),
    ("pecan:\n  cluster: {max_local_workers: 2}\n",
     "pecan.modes.short.local_workers: 10, more than the cluster's pecan.cluster.max_local_workers 2; expected a "
     "deployment the cluster can run"),
    ("pecan:\n  modes:\n    fastflow: {remote_workers: 50}\n",
     "pecan.modes.fastflow.remote_workers: 50, more than the cluster's pecan.cluster.max_remote_workers 20; expected a "
     "deployment the cluster can run"),
    ("pecan:\n  modes:\n    collocated: {local_workers: 11}\n",
     "pecan.modes.collocated.local_workers: placement 'collocated' does not read it (it decides its workers, or runs "
     "none); expected it only with placement fixed"),
    ("pecan:\n  modes:\n    cachew: {remote_workers: 7}\n",
     "pecan.modes.cachew.remote_workers: placement 'cachew' does not read it (it decides its workers, or runs none); "
     "expected it only with placement fixed or fastflow")])
def test_a_fixed_deployment_the_cluster_cannot_run_is_refused(tmp_path, capsys, override, error):
    """A fixed mode of no workers passed the check, then every run ended in a ZeroDivisionError; one of
    20 remote workers on a cluster of 5 (or FastFlow's 50 on one of 20) was run and billed; worker counts
    given to a placement that decides its own were ignored, the run reporting others."""
    (tmp_path / "o.yaml").write_text(override)
    assert main(["config", "check", str(tmp_path / "o.yaml")]) == 1
    assert capsys.readouterr().err.endswith(f"{tmp_path / 'o.yaml'}: {error}\n")


@pytest.mark.parametrize("signum, said", [(2, "trims-tools: interrupted"), (15, "trims-tools: terminated (SIGTERM)")])
def test_trims_tools_stopped_while_it_reads_its_command_line_ends_in_one_line(monkeypatch, capsys, signum, said):
    """Ctrl-C in trims-tools' first second (its command line translated, onnx imported) printed a
    KeyboardInterrupt traceback; SIGTERM there ended it without a word."""
    import os
    import signal
    import time

    from repro.trims import originals

    translate = originals.translate

    def stopped(words):
        os.kill(os.getpid(), signum)
        time.sleep(0.5)  # where the signal is not taken as a command's, its handler raises here
        return translate(words)

    monkeypatch.setattr(originals, "translate", stopped)
    # Ctrl-C as a shell delivers it: pytest-xdist's workers ignore SIGINT, which a command leaves ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert originals.main(["trace", "combine", "a.json", "--output=b.json"]) == 128 + signum
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == f"{said}\n"


@pytest.mark.parametrize("words, usage", [(["run", "--help"], "usage: trims-tools run [flags]"),
                                          (["client", "run", "-h"], "usage: trims-tools client run [flags]"),
                                          (["trace", "combine", "x.json", "--help"], "usage: trims-tools trace combine")])
def test_trims_tools_command_help(capsys, words, usage):
    """`trims-tools run --help` was refused as an unknown flag."""
    from repro.trims.originals import main

    assert main(words) == 0
    out = capsys.readouterr().out
    assert out.startswith(usage) and "\nflags: " in out and "--config" in out


@pytest.mark.workflow
def test_snakemake_refuses_a_config_file_with_a_key_written_twice(tmp_path):
    """`repro config check` refused `seed: 1 / seed: 2`; the workflow ran with Snakemake's last one."""
    from support import copy_workflow, snakemake

    work = copy_workflow(tmp_path / "work")
    (work / "dup.yaml").write_text("seed: 1\nseed: 2\n")
    proc = snakemake(work, "-n", "--configfile", str(work / "dup.yaml"), check=False, timeout=300)
    assert proc.returncode != 0
    assert f"repro: error: {work / 'dup.yaml'}: key 'seed' appears twice, at line 1 and line 2" in proc.stderr, (
        proc.stderr[-3000:])


def test_a_profile_output_of_the_users_files_says_so_without_overwrite(work, capsys):
    """A directory holding only the user's notes was said to hold "an earlier run's traces", and to be
    replaced with --profile-output-overwrite, which then refused it as the user's."""
    host = work.dir / "profiles" / __import__("socket").gethostname() / "mine"
    host.mkdir(parents=True)
    (host / "notes.txt").write_text("mine")
    assert _run(work, "--profile-output", "mine") == 1
    assert capsys.readouterr().err == (f"repro: error: --profile-output 'mine': {host} holds files no run of this "
                                       "client made; --profile-output-overwrite replaces only a directory a run made: "
                                       "remove it or choose another --profile-output\n")
    assert (host / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("name", ["/elsewhere", "../../x"])
def test_simulate_refuses_a_profile_output_the_run_refuses(work, capsys, name):
    """`--simulate` ("check everything") accepted a --profile-output that the real run refuses."""
    assert _run(work, "--simulate", "--profile-output", name) == 1
    assert capsys.readouterr().err.startswith(f"repro: error: --profile-output {name!r}: expected a relative name")


def test_a_daemon_store_that_fails_names_why(models, tmp_path, monkeypatch, capsys):
    """`trims server run -d` said only "exited with code 1; see trims-server.log" (a relative name)."""
    monkeypatch.chdir(tmp_path)
    assert main(["trims", "server", "run", "-d", "--socket", str(tmp_path / "no" / "s.sock"), "--base-path",
                 str(models), "--memory-mb", "10"]) == 1
    assert capsys.readouterr().err == (f"repro: error: model store server exited with code 1: --socket "
                                       f"{tmp_path / 'no' / 's.sock'}: cannot listen there (No such file or directory); "
                                       f"see {tmp_path / 'trims-server.log'}\n")


def test_cluster_stop_of_no_state_says_so(tmp_path, capsys):
    """`repro cluster stop --state /typo/state.json` ended with exit 0 and not a word."""
    assert main(["cluster", "stop", "--state", str(tmp_path / "typo" / "state.json")]) == 0
    assert capsys.readouterr().out.startswith(f"no cluster state at {tmp_path / 'typo' / 'state.json'}: no backend to "
                                              "stop\n")


def test_a_figure_of_zero_costs_is_drawn_without_a_warning(tmp_path, monkeypatch, capsys):
    """`repro pecan plot -t 0 0 0 -c 0 0 0` printed matplotlib's identical-ylims warning (two lines)."""
    import warnings

    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["pecan", "plot", "-t", "0", "0", "0", "-c", "0", "0", "0", "-o", "z"]) == 0
    assert capsys.readouterr().err == ""


def test_publishing_without_credentials_names_the_asset_store(work, monkeypatch, capsys):
    """`trims models --publish gs://bkt/p` without credentials spoke of a "trace store"."""
    from google.auth.exceptions import DefaultCredentialsError

    from repro import tracestore

    def no_credentials():
        raise DefaultCredentialsError("none")

    monkeypatch.setattr(tracestore, "_gcs_client", no_credentials)
    assert main(["trims", "models", "squeezenet_1.1", "--base-path", "m", "--publish", "gs://bkt/p"]) == 1
    assert capsys.readouterr().err.startswith("repro: error: asset store (--publish) gs://bkt/p: no Google credentials "
                                              "found; ")


@pytest.mark.parametrize("name", ["original/squeezenet_1.1/original-00009.json", "upload.json",
                                  "original-memory.csv", "compared-all.json"])
def test_overwrite_keeps_a_users_file_under_a_name_a_run_writes(work, capsys, name):
    """`--profile-output-overwrite` removed a user's {"mine": 1} saved as shared-00009.json or
    upload.json in the run's directory: a file was the run's by its name alone."""
    assert _run(work, "--profile-output", "r", "--iterations", "1") == 0
    (run_dir,) = _hours(work)
    (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / name).write_text('{"mine": 1}')
    capsys.readouterr()
    assert _run(work, "--profile-output", "r", "--profile-output-overwrite") == 1
    assert capsys.readouterr().err == (f"repro: error: --profile-output {run_dir}: holds {name}, whose content is not "
                                       "what this command writes there; it may be yours: move it, or name another "
                                       "directory\n")
    assert (run_dir / name).read_text() == '{"mine": 1}'


def test_overwrite_replaces_a_run_with_its_memory_samples_and_receipt(work, capsys, tmp_path):
    """What a run writes (traces, memory samples, a receipt) is still its own to replace."""
    (tmp_path / "store").mkdir()
    work.config.write_text(work.config.read_text() + f"  base_bucket_url: {tmp_path / 'store'}\n")
    assert _run(work, "--profile-output", "r", "--monitor-memory", "--trace-upload") == 0
    (run_dir,) = _hours(work)
    assert {"upload.json", "original"} <= {p.name for p in run_dir.iterdir()}
    assert _run(work, "--profile-output", "r", "--profile-output-overwrite") == 0


def test_a_table_whose_header_names_a_column_twice_is_refused(tmp_path, capsys):
    """A cost table with `workload` in its header twice: the row's second value was read, and the
    message said the row "holds runs of 'local'"."""
    (tmp_path / "t.csv").write_text("workload,mode,workload\nA,cachew,B\n")
    assert main(["pecan", "comparison-table", "--option", "autoorder", "--workload", "A", "--table",
                 str(tmp_path / "t.csv"), "-o", str(tmp_path / "c.csv")]) == 1
    assert capsys.readouterr().err == (f"repro: error: {tmp_path / 't.csv'}: its header names column 'workload' twice; "
                                       "expected a cost table with each column once\n")


def test_an_engine_runs_table_names_no_preset_and_is_drawn_under_any(config, tmp_path):
    """The tf.data engine's rows name no calibration preset (its scale is derived): a figure or a
    comparison of the config's preset takes them."""
    from repro.pecan.costtable import check_table_runs

    check_table_runs([{"workload": "W", "preset": ""}], "t.csv", "W", "local")


def test_a_cut_client_run_runs_none_of_the_requests_not_begun(work, monkeypatch, capsys):
    """Ctrl-C during a run of several clients: the requests still queued ran to the end of the plan
    before the command ended."""
    import threading

    request, attempts, lock = client.Client.request, [], threading.Lock()

    def counted(self, model, iteration):
        with lock:
            attempts.append(iteration)
            if len(attempts) == 4:
                raise KeyboardInterrupt
        return request(self, model, iteration)

    monkeypatch.setattr(client.Client, "request", counted)
    assert _run(work, "--iterations", "100", "--concurrent", "2") == 130
    assert len(attempts) <= 6, len(attempts)  # the cut one, and at most one more begun on the other client
    assert _hours(work) == []


def test_tool_config_sections_other_than_micro18_are_named_as_ignored(tmp_path, capsys):
    """`iterations:` at the top level (a flag's name, or a typo) loaded without a word, as another tool's section."""
    from repro.trims.cli import load_tool_config

    path = tmp_path / "carml.yml"
    path.write_text(f"micro18:\n  base_path: {tmp_path}\niterations: 99\nfoo: 1\n")
    assert load_tool_config(path)["base_path"] == str(tmp_path)
    load_tool_config(path)  # once per file
    assert capsys.readouterr().err == (f"note: {path}: top-level sections other than micro18 are not read here (other "
                                       "tools' settings), ignored: foo, iterations\n")
    (tmp_path / "plain.yml").write_text(f"micro18:\n  base_path: {tmp_path}\n")
    load_tool_config(tmp_path / "plain.yml")
    assert capsys.readouterr().err == ""
    # named on one line, as YAML spells them: a newline or an escape in a key is escaped, a long list cut
    (tmp_path / "odd.yml").write_text(f'micro18:\n  base_path: {tmp_path}\n"a\\nb": 1\nnull: 2\n7: 3\n'
                                      + "".join(f"z{i:03}: 0\n" for i in range(60)))
    load_tool_config(tmp_path / "odd.yml")
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and note.startswith(f"note: {tmp_path / 'odd.yml'}: top-level sections")
    assert "'a\\nb', 7, null, z000" in note and note.endswith("...\n")
