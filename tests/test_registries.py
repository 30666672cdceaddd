"""One place per fact: a new pipeline (with its TF form and its workload in the config), request
distribution, engine or backend is registered in one module, and the config check, the CLI, the
workflow's wildcards, `repro list` and the documentation take it from there (repro.registries). The
additions here live in the test, registered from outside the package, as a new module would be."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
import yaml
from support import BIN, REPO, TINY, copy_workflow, path_env

from repro.backends import Backend, backend_names, get_backend
from repro.config import load_config, merge_over, schema
from repro.errors import ReproError
from repro.registries import REGISTRIES, names

# A module adding a preprocessing pipeline (with its TF form, for the tf.data engine), a request
# distribution and an engine: everything such additions write.
EXTENSION = '''
from repro.pecan.engines import ENGINES, Engine
from repro.pecan.pipelines import PIPELINES, Op, Pipeline, decode, normalize, to_float
from repro.trims.workload import DISTRIBUTIONS, Distribution


def crop_32(element, rng):
    return {**element, "image": element["image"][:32, :32]}


def tf_crop_32(element):  # the op in TensorFlow: the tf.data engine maps it over tensors
    return {**element, "image": element["image"][:32, :32]}


PIPELINES["thumbnails"] = Pipeline(
    ops=(Op("decode", decode, keep_position=True), Op("to_float", to_float, shape_preserving=True),
         Op("crop_32", crop_32, tf=tf_crop_32), Op("normalize", normalize, shape_preserving=True, requires=("to_float",))),
    image_size=(96, 64),
)
DISTRIBUTIONS["halfnormal"] = Distribution(("scale",), (1.0,), lambda stats, scale: stats.halfnorm(scale=scale))


def run_replay(settings, experiment, mode, calibrations, out_dir, backend, service_dir):
    """The cluster model's run, with the engine's own setting recorded beside it."""
    from repro.pecan.run import run_mode

    metrics = run_mode(settings, experiment, mode, calibrations, out_dir, backend)
    (out_dir / "replay.txt").write_text(settings["pecan"]["replay"]["label"])
    return metrics


ENGINES["replay"] = Engine("the cluster model, labelled", run_replay, section="replay", schema={
    "type": "object", "additionalProperties": False, "default": {},
    "properties": {"label": {"type": "string", "default": "replayed"}}})
'''

# ... and the workload in the configuration: a model on that pipeline, its accelerator bound, an experiment.
WORKLOAD = {
    "repeats": 1,
    "pecan": {
        "models": {"thumbnet": {"pipeline": "thumbnails", "batch_size": 64, "steps_per_epoch": 20}},
        "accelerators": {"v2-8": {"max_batches_per_s": {"thumbnet": 40.0}}},
        "experiments": {"Thumbnails": {"model": "thumbnet", "accelerator": "v2-8", "modes": ["short"]}},
    },
    "trims": {"distributions": {"runs": {"halfnormal": [2.0]}}},
}


@pytest.fixture
def extension(tmp_path):
    """The extension module on disk, and a runner for a Python entry point with it imported first."""
    (tmp_path / "thumbnails_extension.py").write_text(EXTENSION)

    def run(entry_point, *args, cwd=tmp_path, code=None):
        """`entry_point`'s main with `args`, or the Python `code`, with the extension imported first."""
        code = code or f"from {entry_point} import main; sys.exit(main(sys.argv[1:]))"
        code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import thumbnails_extension\n{code}"
        return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=path_env(), capture_output=True,
                              text=True, timeout=600)

    return run


def workload_config(tmp_path, *overrides, name="workload.yaml"):
    """config/config.yaml with the tiny test settings, the new workload and `overrides` merged in."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for override in (yaml.safe_load(TINY.read_text()), WORKLOAD, *overrides):
        config = merge_over(config, override)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.service
def test_a_new_pipeline_runs_through_the_cli(extension, tmp_path):
    config = workload_config(tmp_path)
    calibrations = []
    for pipeline in ("resnet", "retinanet", "thumbnails"):  # the local preset scales by the fitted pipelines
        out = tmp_path / f"{pipeline}.json"
        proc = extension("repro.cli", "pecan", "calibrate", "--pipeline", pipeline, "--elements", "2", "--repeats", "1",
                         "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        calibrations.append(str(out))
    assert json.loads((tmp_path / "thumbnails.json").read_text())["pipeline"] == "thumbnails"
    proc = extension("repro.cli", "pecan", "run", "--config", str(config), "--experiment", "Thumbnails", "--mode", "short",
                     "--calibration", *calibrations, "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["spec"]["batch_size"] == 64 and metrics["throughput"] > 0


@pytest.fixture(scope="module")
def builtin_calibrations(tmp_path_factory):
    """Calibrations of the built-in resnet and retinanet pipelines (no extension needed to make them),
    made once, in this process; the tests only read them."""
    from repro.cli import main

    directory = tmp_path_factory.mktemp("calibrations")
    for pipeline in ("resnet", "retinanet"):
        assert main(["pecan", "calibrate", "--pipeline", pipeline, "--elements", "2", "--repeats", "1",
                     "-o", str(directory / f"{pipeline}.json")]) == 0
    return directory


def test_a_new_pipeline_needs_its_calibration_and_the_local_preset(extension, builtin_calibrations, tmp_path):
    config = workload_config(tmp_path)
    args = ["pecan", "run", "--experiment", "Thumbnails", "--mode", "short", "--out", str(tmp_path / "run"),
            "--calibration", str(builtin_calibrations / "resnet.json"), str(builtin_calibrations / "retinanet.json")]
    proc = extension("repro.cli", *args, "--config", str(config))
    assert proc.returncode == 1
    assert "no costs for pipeline 'thumbnails'" in proc.stderr and "repro pecan calibrate" in proc.stderr


@pytest.mark.service
def test_a_new_distribution_runs_through_the_cli(extension, models, server, tmp_path):
    socket_path, _ = server
    (tmp_path / "tool.yml").write_text(yaml.safe_dump({"micro18": {"profile_output_directory": str(tmp_path / "p")}}))
    proc = extension("repro.cli", "trims", "client", "run", "--socket", str(socket_path), "--base-path", str(models),
                     "--distribution", "halfnormal", "--distribution-params", "2", "--iterations", "3",
                     "--device", "cpu", "--profile-output", "halfnormal", "--results", str(tmp_path / "results.json"),
                     "--config", str(tmp_path / "tool.yml"))
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads((tmp_path / "results.json").read_text())["shared"]["results"]) == 3


@pytest.mark.workflow
def test_the_new_workload_and_distribution_in_a_workflow_dry_run(extension, tmp_path):
    work = copy_workflow(tmp_path / "work")
    proc = extension("snakemake.cli", "results/runs/Thumbnails/short/metrics.json",
                     "results/trims/runs/distribution/halfnormal-c1/report.json", "--dry-run", "--cores", "1",
                     "--configfile", str(workload_config(tmp_path)), cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "results/calibration/thumbnails.json" in out and "experiment=Thumbnails" in out and "distribution=halfnormal" in out


def test_without_the_extension_the_names_are_refused(tmp_path):
    proc = subprocess.run([str(BIN / "repro"), "pecan", "calibrate", "--pipeline", "thumbnails", "-o", "x.json"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'thumbnails'" in proc.stderr
    with pytest.raises(ReproError, match="pecan.models.thumbnet.pipeline: 'thumbnails' is not one of"):
        load_config(workload_config(tmp_path))


def test_the_schema_names_come_from_the_registries():
    """Every registry's names are where its schema paths point, and each registry fills at least one."""
    tree = schema()
    for name, registry in REGISTRIES.items():
        assert registry.schema, name
        for path in registry.schema:
            node = tree
            for key in path:
                node = node[key]
            assert node == names(name), (name, path)
    assert names("backends") == backend_names() == ["local", "ssh"]


def test_an_engine_and_its_settings_come_from_its_registry_entry(extension, builtin_calibrations, tmp_path):
    """The engine's name and its settings section (with defaults) come from its Engine entry alone; a
    run with it writes what every engine writes."""
    out = tmp_path / "thumbnails.json"
    proc = extension("repro.cli", "pecan", "calibrate", "--pipeline", "thumbnails", "--elements", "2", "--repeats", "1",
                     "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    calibrations = [str(builtin_calibrations / "resnet.json"), str(out)]
    config = workload_config(tmp_path, {"pecan": {"engine": "replay"}})
    proc = extension("repro.cli", "pecan", "run", "--config", str(config), "--experiment", "Thumbnails", "--mode", "short",
                     "--calibration", *calibrations, "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "replay.txt").read_text() == "replayed"  # the schema's default, filled in at load
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["throughput"] > 0
    bad = workload_config(tmp_path, {"pecan": {"engine": "replay", "replay": {"colour": "red"}}}, name="bad.yaml")
    proc = extension("repro.cli", "config", "check", "--base", str(bad))
    assert proc.returncode == 1 and "pecan.replay: Additional properties are not allowed ('colour'" in proc.stderr
    proc = subprocess.run([str(BIN / "repro"), "config", "check", "--base", str(config)], capture_output=True, text=True)
    assert proc.returncode == 1 and "pecan.engine: 'replay' is not one of ['model', 'tfdata']" in proc.stderr


@pytest.mark.service  # runs TensorFlow
def test_a_new_pipelines_tf_form_runs_on_the_tfdata_engines_ops(extension, tmp_path):
    """The pipeline's record carries its TF form: the tf.data engine's dataset runs it, no other file named."""
    pytest.importorskip("tensorflow")
    code = textwrap.dedent(f"""
        from repro.pecan.tfdata import ops
        manifest = ops.write_data("thumbnails", 4, {str(tmp_path / "data")!r})
        for order in ops.ORDERS:
            dataset, names = ops.dataset(manifest, order, 2, threads=1)
            print(order, names, tuple(next(iter(dataset))["image"].shape))
    """)
    proc = extension(None, code=code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "declared ['decode', 'to_float', 'crop_32', 'normalize'] (2, 32, 32, 3)", proc.stdout
    assert lines[1].startswith("autoorder ") and lines[1].endswith(" (2, 32, 32, 3)"), proc.stdout


def listed(text):
    """{registry: names} from `repro list`'s lines."""
    return {name: values.split(", ") for name, values in (line.split(": ", 1) for line in text.splitlines())}


def test_repro_list_prints_every_registry():
    proc = subprocess.run([str(BIN / "repro"), "list"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert listed(proc.stdout) == {name: names(name) for name in REGISTRIES}
    proc = subprocess.run([str(BIN / "repro"), "list", "pipelines"], capture_output=True, text=True)
    assert proc.stdout.split() == names("pipelines")


def test_repro_list_prints_the_additions(extension):
    proc = extension("repro.cli", "list")
    assert proc.returncode == 0, proc.stderr
    got = listed(proc.stdout)
    assert got["pipelines"] == [*names("pipelines"), "thumbnails"]
    assert got["distributions"] == [*names("distributions"), "halfnormal"]
    assert got["engines"] == [*names("engines"), "replay"]


DOCUMENTS = [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_documentation_points_to_the_registries_instead_of_copying_them():
    """Each registry is in docs/ARCHITECTURE.md's table and the keys taking its names in config/README.md
    say `repro list <registry>`; no document copies a registry's names (a copy goes stale when one is added)."""
    architecture = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    config_readme = (REPO / "config" / "README.md").read_text()
    for name, registry in REGISTRIES.items():
        assert f"| {name} |" in architecture, name
        assert f"`repro list {name}`" in config_readme, name
    for path in DOCUMENTS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            words = set(re.findall(r"[\w-]+", line))
            for name in REGISTRIES:
                copied = names(name)
                assert len(copied) < 3 or not words >= set(copied), f"{path.name}:{number} lists the {name}: {line}"


def test_a_backend_is_its_module_and_implements_the_interface():
    for name in backend_names():
        backend = get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name
    with pytest.raises(ReproError, match=r"unknown backend 'k8s'; expected one of \['local', 'ssh'\]"):
        get_backend("k8s")
    with pytest.raises(TypeError, match="abstract"):
        type("Incomplete", (Backend,), {"start": lambda self, settings, state_path: {}})("incomplete")


def test_a_backend_module_dropped_into_the_package_is_registered(tmp_path, monkeypatch):
    """A third backend: its module alone, with its settings' schema, makes `backend: <name>` and its
    section valid, started like the others."""
    import repro.backends

    package = tmp_path / "backends"
    package.mkdir()
    (package / "recording.py").write_text(textwrap.dedent('''
        from repro.backends import Backend

        class RecordingBackend(Backend):
            needs_section = True
            schema = {"type": "object", "additionalProperties": False, "required": ["tape"],
                      "properties": {"tape": {"type": "string"}}}

            def start(self, settings, state_path):
                return {"trace_store": settings["trace_store"]}
            def describe(self, state):
                return "recording"
            def checks(self, state):
                return [{"name": "always", "ok": True, "detail": ""}]
            def run(self, request, state):
                return {}
            def stop(self, state):
                return {"stopped": []}

        BACKEND = RecordingBackend
    '''))
    monkeypatch.setattr(repro.backends, "__path__", [*repro.backends.__path__, str(package)])
    assert "recording" in backend_names()
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(backend="recording", trace_store=str(tmp_path / "store"), plots={"trims": []},
                  reproducibility={})  # no figures: none to check twice
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ReproError, match="recording: required when backend is recording"):
        load_config(path)
    path.write_text(yaml.safe_dump({**config, "recording": {"tape": "a"}}))
    assert load_config(path)["backend"] == "recording"
    path.write_text(yaml.safe_dump({**config, "recording": {"tape": 1}}))
    with pytest.raises(ReproError, match="recording.tape: 1 is not of type 'string'"):
        load_config(path)
    backend = get_backend("recording")
    assert backend.status({}, [str(path)]) == [{"name": "always", "ok": True, "detail": ""},
                                               {"name": f"calibration {path} present", "ok": True, "detail": ""}]
    assert backend.caption("local", "here") == "backend=recording, calibration=local"


SETTINGS_OF_E_M = {"pecan": {"experiments": {"E": {"modes": ["m"]}}, "modes": {"m": {}}}}  # a run's, as far as execute reads


def test_a_backends_run_never_leaves_an_earlier_runs_repeats_beside_its_own(tmp_path):
    """Backend.execute, whatever backend or engine runs: a run that writes no repeats/ (one repeat,
    the tf.data engine) leaves none from an earlier run in its directory."""
    from repro.backends import RunRequest
    from repro.traces import write_trace

    class OneRepeat(Backend):
        def start(self, settings, state_path):
            return {}

        def describe(self, state):
            return "one repeat"

        def checks(self, state):
            return []

        def run(self, request, state):
            (request.run_dir / "run.log").write_text("log\n")
            write_trace(request.run_dir / "traces" / "t.json", [], {})
            return {"repeats": [{"repeat": 0, "log": "run.log"}]}

        def stop(self, state):
            return {}

    run_dir = tmp_path / "run"
    (run_dir / "repeats").mkdir(parents=True)
    (run_dir / "repeats" / "run-3.log").write_text(  # an earlier run's, as its first line says
        "I0101 00:00:00.000000 140000000000000 keras_utils.py:145] repro local model: experiment=E mode=m seed=1\n")
    request = RunRequest(SETTINGS_OF_E_M, "E", "m", (), run_dir, tmp_path / "upload.json")
    OneRepeat("one-repeat").execute(request, {"trace_store": str(tmp_path / "store")})
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.log", "traces"]
    assert re.fullmatch(r"traces/E/m/[0-9a-f]{16}/t\.json", json.loads((tmp_path / "upload.json").read_text())["objects"][0]["key"])


@pytest.mark.fault
def test_a_backends_run_that_fails_leaves_no_earlier_runs_marks_of_completion(tmp_path):
    """A run stopped (Ctrl-C) or failed in a directory holding a complete earlier run: the earlier
    run's repeats/ went, its metrics.json and upload.json stayed, and the directory looked complete."""
    from repro.backends import RunRequest

    class Stopped(Backend):
        start = describe = checks = stop = lambda self, *args: {}

        def run(self, request, state):
            raise KeyboardInterrupt

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text('{"experiment": "E", "mode": "m", "throughput": 1, "repeats": []}\n')
    (tmp_path / "upload.json").write_text('{"store": "s", "objects": [{"key": "traces/E/m/t.json", "sha256": "0"}]}\n')
    request = RunRequest(SETTINGS_OF_E_M, "E", "m", (), run_dir, tmp_path / "upload.json")
    with pytest.raises(KeyboardInterrupt):
        Stopped("stopped").execute(request, {"trace_store": str(tmp_path / "store")})
    assert not (run_dir / "metrics.json").exists() and not (tmp_path / "upload.json").exists()


def test_a_registered_sections_defaults_are_each_configs_own(monkeypatch):
    """An engine's settings schema goes into every config schema as a copy: a config whose
    defaulted list was changed leaves the registry's schema, and the next config, as they were."""
    from repro.pecan.engines import ENGINES, Engine

    section = {"type": "object", "default": {}, "properties": {"labels": {"type": "array", "default": []}}}
    monkeypatch.setitem(ENGINES, "listing", Engine("the cluster model", ENGINES["model"].run, section="listing",
                                                   schema=section))
    first = load_config(REPO / "config" / "config.yaml")
    first["pecan"]["listing"]["labels"].append("changed")
    assert load_config(REPO / "config" / "config.yaml")["pecan"]["listing"] == {"labels": []}
    assert section["properties"]["labels"]["default"] == [] and schema()["properties"]["pecan"]["properties"]["listing"] == section
