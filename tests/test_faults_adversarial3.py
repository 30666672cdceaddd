"""Fault injection, a third adversarial pass: files in the way of what the commands write (a directory
where a file goes, a symbolic link where a log or lock goes), and what the commands name when that fails.

A file in the way ends as test_faults_input's rows do: exit code 1, one line on stderr naming the file
the user can see and what was expected, no traceback, and no file outside the command's own written to.
"""

import importlib.util
import time

import pytest
from support import REPO, run_forked, run_repro, snapshot


pytestmark = pytest.mark.fault


def test_a_directory_where_a_model_file_goes_is_named(tmp_path, monkeypatch, capsys):
    """`repro trims models` where <model>/model.params is a directory: the error named the hidden staging
    copy (.squeezenet_1.1.<random>.tmp/model.params), removed by then, not the directory in the way
    (the model's directory, which holds it and no manifest)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "squeezenet_1.1" / "model.params").mkdir(parents=True)
    code, out, err = run_repro(["trims", "models", "squeezenet_1.1", "--base-path", "models"], capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: models/squeezenet_1.1: holds files but no model manifest (manifest.json); expected "
                   "a model's directory (or nothing) there: move the files away, or name another base path\n")
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


@pytest.mark.parametrize("built", [True, False], ids=["up-to-date", "new"])
def test_a_malformed_publish_url_is_refused_before_the_models_are_built(built, tmp_path, monkeypatch, capsys):
    """`repro trims models NAME --publish gs://` (no bucket): where the model was up to date it ended with
    exit 0 and published nothing; where it was not, it was built first and the URL refused after."""
    monkeypatch.chdir(tmp_path)
    argv = ["trims", "models", "squeezenet_1.1", "--base-path", "models"]
    if built:
        assert run_repro(argv, capsys)[0] == 0
    before = snapshot(tmp_path)
    code, out, err = run_repro([*argv, "--publish", "gs://"], capsys)
    assert (code, out, err) == (1, "", "repro: error: asset store (--publish) 'gs://': expected gs://bucket[/prefix], the "
                                       "bucket's name 3 to 222 lowercase letters, digits, dots, dashes and underscores\n")
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
def test_an_up_to_date_model_is_published(emulator, tmp_path, monkeypatch, capsys):
    """`repro trims models NAME --publish gs://bucket/prefix` where NAME was built before (the README's way
    to fill a GCS asset store): the model was found up to date and skipped, publish included; exit 0,
    nothing uploaded."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "repro-test")
    from repro.tracestore import _gcs_client

    bucket = f"b{time.monotonic_ns()}"
    _gcs_client().create_bucket(bucket)
    monkeypatch.chdir(tmp_path)
    argv = ["trims", "models", "squeezenet_1.1", "--base-path", "models"]
    assert run_repro(argv, capsys)[0] == 0
    code, out, err = run_repro([*argv, "--publish", f"gs://{bucket}/assets"], capsys)
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == f"  published to gs://{bucket}/assets/squeezenet_1.1/"
    names = {blob.name for blob in _gcs_client().list_blobs(bucket)}
    assert names == {f"assets/squeezenet_1.1/{name}" for name in ("model.onnx", "model.params", "manifest.json")}


def test_client_results_over_the_tool_config_are_refused(tmp_path, monkeypatch, capsys):
    """`repro trims client run --config tools.yml --results tools.yml`: the requests ran and their results
    replaced the tool config the command had read (exit 0); `client compare` alike."""
    monkeypatch.chdir(tmp_path)
    assert run_repro(["trims", "models", "squeezenet_1.1", "--base-path", "models"], capsys)[0] == 0
    (tmp_path / "tools.yml").write_text("micro18:\n  profile_output_directory: profiles\n")
    before = snapshot(tmp_path)
    code, out, err = run_repro(["trims", "client", "run", "--original", "--config", "tools.yml", "--base-path", "models",
                                "--iterations", "1", "--results", "tools.yml"], capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: --results tools.yml: is one of the inputs; writing it would overwrite that input: "
                   "name another output file\n")
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(importlib.util.find_spec("google.cloud.storage") is None, reason="needs google-cloud-storage")
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_credentials_that_are_no_file_are_named(kind, tmp_path):
    """`repro doctor --profile P` (P using gcs) with GOOGLE_APPLICATION_CREDENTIALS naming a FIFO: Google's
    library read it and waited forever (/dev/zero: memory filled); a directory ended in 'repro: error:
    DIR: Is a directory', the variable unnamed. A trace store on GCS (`repro trace download`) alike."""
    import os

    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text("default-storage-provider: gcs\n")
    (tmp_path / "upload.json").write_text('{"store": "gs://bucket/x", "objects": [{"key": "a/t.json", "sha256": "0"}]}')
    credentials = tmp_path / "key.json"
    os.mkfifo(credentials) if kind == "fifo" else credentials.mkdir()
    what = {"fifo": "a FIFO", "directory": "a directory"}[kind]
    named = (f"GOOGLE_APPLICATION_CREDENTIALS {credentials}: is {what}; expected a regular file (a service account "
             "or user credentials JSON file)")
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(credentials), "STORAGE_EMULATOR_HOST": ""}
    code, out, err = run_forked(["doctor", "--profile", "profile"], tmp_path, timeout=60, env=env)
    assert (code, out, err) == (1, "", f"repro: error: profile/config.yaml: {named}\n")
    code, out, err = run_forked(["trace", "download", "upload.json", "-o", "traces"], tmp_path, timeout=60, env=env)
    assert (code, out, err) == (1, "", f"repro: error: {named}\n")


@pytest.mark.parametrize("kind, spec", [
    ("figures", "{experiment: Getting_started}"),
    ("comparisons", "{option: autoplacement, workloads: [ResNet50_v2-8, SimCLR]}"),
], ids=["figure", "comparison"])
def test_a_figure_named_as_a_trims_figure_is_refused(kind, spec, tmp_path, capsys):
    """plots.figures (or plots.comparisons) naming a figure trims_model_load, a TrIMS figure's name: the
    config check passed it, and the workflow ended in Snakemake's AmbiguousRuleException for
    plots/trims_model_load.pdf, which two rules draw."""
    config = tmp_path / "my.yaml"
    config.write_text(f"plots:\n  {kind}:\n    trims_model_load: {spec}\n")
    code, out, err = run_repro(["config", "check", config], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: config/config.yaml + {config}: plots.{kind}.trims_model_load: the name of a TrIMS "
                   "figure (plots.trims), both drawn to plots/trims_model_load.pdf; expected a name of its own\n")


@pytest.mark.parametrize("override, message", [
    ("plots:\n  figures:\n    validation_Getting_started: {experiment: Getting_started}\n",
     "plots.figures.validation_Getting_started: the name of experiment Getting_started's validation figure, both "
     "drawn to plots/validation_Getting_started.pdf; expected a name of its own"),
    ("pecan:\n  experiments:\n    trims: {model: resnet, accelerator: v2-8, modes: [short]}\n",
     "pecan.experiments.trims: its trace summary would be results/summary/trims.json, the TrIMS experiments' "
     "summary; expected a name of its own"),
], ids=["validation-figure", "trims-experiment"])
def test_names_whose_files_another_rule_writes_are_refused(override, message, tmp_path, capsys):
    """A figure named validation_<experiment> (the experiment's validation figure's name): the workflow
    ended in Snakemake's AmbiguousRuleException. An experiment named trims: its cost table was planned
    from results/summary/trims.json, the TrIMS summary, instead of its own trace summary."""
    config = tmp_path / "my.yaml"
    config.write_text(override)
    code, out, err = run_repro(["config", "check", config], capsys)
    assert (code, out, err) == (1, "", f"repro: error: config/config.yaml + {config}: {message}\n")


def test_a_trace_store_linked_to_results_is_refused(tmp_path, monkeypatch, capsys):
    """trace_store: store, where store is a symbolic link to results/: the config check passed it, and
    the store's traces, store/traces/<experiment>/<mode>/, were the files Snakemake deletes before each
    download into results/traces/<experiment>/<mode>/: every download found its upload gone."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "store").symlink_to("results")
    (tmp_path / "my.yaml").write_text("trace_store: store\n")
    code, out, err = run_repro(["config", "check", "--base", REPO / "config" / "config.yaml", "my.yaml"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: {REPO / 'config' / 'config.yaml'} + my.yaml: trace_store: 'store' keeps the store's "
                   "traces in results/traces, where the workflow downloads them (and deletes them before each "
                   "download); expected a directory of its own, such as results/store\n")


def test_a_manifest_naming_another_model_is_not_fetched(tmp_path, monkeypatch, capsys):
    """`repro trims fetch squeezenet_1.1` from an asset store whose squeezenet_1.1/manifest.json names
    another model (copied from its directory): fetched, exit 0, reported as that model; `trims memory`
    then listed it under the other name, and found none of its bytes in the store."""
    import json

    monkeypatch.chdir(tmp_path)
    assert run_repro(["trims", "models", "squeezenet_1.1", "--base-path", "assets"], capsys)[0] == 0
    manifest = tmp_path / "assets" / "squeezenet_1.1" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "model": "resnet18_v1"}))
    before = snapshot(tmp_path)
    code, out, err = run_repro(["trims", "fetch", "squeezenet_1.1", "--asset-store", "assets", "--base-path", "models"],
                               capsys)
    assert (code, out, err) == (1, "", "repro: error: assets/squeezenet_1.1/manifest.json: model: expected "
                                       "'squeezenet_1.1', the model fetched; got 'resnet18_v1'\n")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("argv, output, message", [
    (["trace", "combine", "t.json"], "combined.json",
     "-o/--output combined.json: holds a file that is not a combined trace; name the output with -o"),
    (["trace", "summarize", "--deep", "t.json"], "summary.json",
     "--output summary.json: holds a file that is not a trace summary; name the output with --output"),
    (["trace", "summarize", "--deep", "traces"], "traces/summary.json",
     "--output traces/summary.json: holds a file that is not a trace summary; name the output with --output"),
], ids=["combine", "deep-summary", "deep-summary-in-directory"])
def test_trims_tools_default_outputs_keep_the_users_file(argv, output, message, tmp_path, monkeypatch, capsys):
    """`trims-tools trace combine T` and `trace summarize --deep T|DIR`, no --output, where combined.json
    (summary.json, DIR/summary.json) is a file of the user's: it was replaced by the output, exit 0;
    `repro trace combine|summarize` refuse that file where their output is not named."""
    from repro.trims.originals import main

    monkeypatch.chdir(tmp_path)
    trace = '{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}'
    (tmp_path / "traces").mkdir()
    for path in ("t.json", "traces/t.json"):
        (tmp_path / path).write_text(trace)
    (tmp_path / output).write_text("mine\n")
    before = snapshot(tmp_path)
    code, out, err = run_repro(argv, capsys, main=main)
    assert (code, out, err) == (1, "", f"trims-tools: error: {message}\n")
    assert snapshot(tmp_path) == before


def test_settings_too_large_for_a_float_are_named_as_the_flag(tmp_path, monkeypatch, capsys):
    """`repro provenance --settings '{"scale": 1e999}' -o p.json F`: 1e999 was read as infinity and the
    error blamed the output, 'p.json: settings.scale is not a finite number', not --settings."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figure.pdf").write_text("figure\n")
    code, out, err = run_repro(["provenance", "--settings", '{"scale": 1e999}', "-o", "p.json", "figure.pdf"], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == ("repro provenance: error: argument --settings: not JSON (1e999 is not a finite "
                                    "number)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.pdf"]


def test_a_reference_for_none_of_the_figures_modes_is_refused(tmp_path, capsys):
    """plots.figures.Getting_started.reference: ResNet50_v2-8_run1 (its workload), whose values are for
    collocated, cachew and pecan while the figure draws mode short only: the check passed it, and the
    figure was drawn without a reference, '0 of 0 reference values inside the measured 95% interval', exit 0."""
    config = tmp_path / "my.yaml"
    config.write_text("plots:\n  figures:\n    Getting_started: {experiment: Getting_started, "
                      "reference: ResNet50_v2-8_run1}\n")
    code, out, err = run_repro(["config", "check", config], capsys)
    assert (code, out) == (1, "")
    assert err == (f"repro: error: config/config.yaml + {config}: plots.figures.Getting_started.reference: "
                   "'ResNet50_v2-8_run1' holds values for modes collocated, cachew, pecan, none of them drawn (short); "
                   "expected a reference of the figure's modes, or none\n")


@pytest.mark.parametrize("override, largest", [
    ("trims: {server: {memory_mb: 100}}", "bvlc_alexnet (234 MiB of weights), of trims.models.small"),
    ("trims: {model_set: full}", "large_vgg16_448 (1704 MiB of weights), of trims.models.full"),
], ids=["small-set", "full-set"])
def test_a_store_budget_below_the_largest_model_is_refused(override, largest, tmp_path, capsys):
    """trims.server.memory_mb smaller than the largest model of the set (model_set: full with the default
    300 MiB): the check passed it, and after the models were built and the original runs done every
    shared request for that model failed, 'needs N MiB, more than the store's budget'."""
    config = tmp_path / "my.yaml"
    config.write_text(override + "\n")
    code, out, err = run_repro(["config", "check", config], capsys)
    budget = 100 if "100" in override else 300
    assert (code, out) == (1, "")
    assert err == (f"repro: error: config/config.yaml + {config}: trims.server.memory_mb: {budget} MiB cannot hold "
                   f"{largest}; expected a budget at least that large\n")


@pytest.mark.parametrize("flag, message", [
    ("--socket", "--socket store.sock: exists and is not a socket; refusing to replace it (choose another path)"),
    ("--info-file", "--info-file store.sock: exists and is not a model store's server info; refusing to overwrite it"),
], ids=["socket", "info-file"])
def test_a_refused_foreground_server_does_not_announce_itself(flag, message, tmp_path, monkeypatch, capsys):
    """`repro trims server run --socket F` (or --info-file F) in the foreground, F a file of the user's:
    'model store server on F (...)' was printed before F was refused, the server never listening."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "store.sock").write_text("mine\n")
    argv = ["trims", "server", "run", "--base-path", "models", "--memory-mb", "50", flag, "store.sock"]
    if flag != "--socket":
        argv += ["--socket", tmp_path / "s.sock"]
    code, out, err = run_repro(argv, capsys)
    assert (code, out, err) == (1, "", f"repro: error: {message}\n")
    assert (tmp_path / "store.sock").read_text() == "mine\n"


def test_a_config_in_a_scratch_chain_directory_is_refused(tmp_path, monkeypatch, capsys):
    """`repro pecan check-reproducibility --config s/run-1/my.yaml --scratch s`, s/run-1 made by an earlier
    check: the config was read, then removed with the directory the check empties first (exit 0)."""
    import yaml

    from repro.config import merge_over
    from repro.fsutil import OWN_DIRECTORY_MARK

    monkeypatch.chdir(tmp_path)
    config = merge_over(yaml.safe_load((REPO / "config" / "config.yaml").read_text()),
                        yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text()))
    config["reproducibility"]["figures"] = ["Getting_started"]
    (tmp_path / "s" / "run-1").mkdir(parents=True)
    (tmp_path / "s" / "run-1" / OWN_DIRECTORY_MARK).touch()
    (tmp_path / "s" / "run-1" / "my.yaml").write_text(yaml.safe_dump(config))
    before = snapshot(tmp_path)
    code, out, err = run_repro(["pecan", "check-reproducibility", "--config", "s/run-1/my.yaml", "--scratch", "s",
                                "-o", "check.csv"], capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: --config s/run-1/my.yaml: inside --scratch s/run-1, a chain's directory, emptied at "
                   "each check; expected a file elsewhere\n")
    assert snapshot(tmp_path) == before


def test_trims_tools_summary_of_a_file_without_deep_names_its_own_flags(tmp_path, monkeypatch, capsys):
    """`trims-tools trace summarize T.json` (no --deep: one summary.json per directory): the error named
    repro's flag, '--each-directory: T.json is not a directory', a flag trims-tools does not have."""
    from repro.trims.originals import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}')
    code, out, err = run_repro(["trace", "summarize", "--output=o.json", "t.json"], capsys, main=main)
    assert (code, out) == (1, "")
    assert err == ("trims-tools: error: trace summarize: t.json is not a directory; expected a directory of traces "
                   "(each gets its summary.json), or --deep to summarize trace files into one\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_a_store_state_among_its_models_is_refused_by_its_own_flags(tmp_path, monkeypatch, capsys):
    """`repro trims store start --settings '{"base_path": "models", ...}' --state models/state.json`: the
    error named flags the command does not have, '--log-file models/trims-server.log: inside --base-path
    models', and came after a store running with other settings had been stopped."""
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    settings = {"base_path": "models", "server": {"eviction": "lru", "memory_mb": 50, "device": "cpu"}}
    code, out, err = run_repro(["trims", "store", "start", "--settings", json.dumps(settings),
                                "--state", "models/state.json"], capsys)
    assert (code, out) == (1, "")
    assert err == ("repro: error: --state models/state.json: inside --settings base_path models, the models the store "
                   "reads; expected a file elsewhere\n")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == []
