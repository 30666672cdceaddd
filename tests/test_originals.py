"""`trims-tools`: the original TRIMS tools' command lines and config file, run as a user would.

Each test runs the real `trims-tools` command in a fresh HOME holding the original's default
`~/.carml_config.yml` (its README's `micro18` section, with `$HOME` and `$GOPATH` in values), against a
real model store server started with `trims-tools server run -d`.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import BIN, run_repro
from test_trims import fake_models

from repro.trims.models import generate
from repro.trims import originals
from repro.trims.originals import COMMANDS, parse_flags, translate
from repro.trims.modelstore import ModelStore

TRIMS_TOOLS = str(BIN / "trims-tools")

# The `micro18` section of the original's README (rai-project/trims-tools, README.md): 13 keys.
ORIGINAL_CONFIG = """\
micro18:
  build_timeout: 0
  polling_interval: 0
  src_path: $GOPATH/src/github.com/rai-project/mxnet-mirror
  base_path: $HOME/carml/data/mxnet
  server_relative_path: bin
  server_build_cmd: make
  server_run_cmd: bin/uprd
  client_relative_path: example/image-classification/predict-cpp
  client_build_cmd: make
  client_run_cmd: ./image-classification-predict
  base_bucket_url: http://s3.amazonaws.com/micro18profiles
  upload_bucket_name: traces
  profile_output_directory: $HOME//micro18_profiles
"""
MODELS = ("squeezenet_1.1", "resnet18_v1")


def _env(home):
    env = {k: v for k, v in os.environ.items() if k not in ("CARML_CONFIG_FILE", "UPR_BASE_DIR", "GOPATH")}
    runtime = home / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), PATH=f"{BIN}:{env['PATH']}")
    return env


def in_process(monkeypatch, capsys, home, *words, main=originals.main):
    """`main(words)` (trims-tools' entry point, or repro's) in this process, in the environment and
    directory trims_tools gives the program: (exit code, stdout, stderr)."""
    env = _env(home)
    for key in ("CARML_CONFIG_FILE", "UPR_BASE_DIR", "GOPATH", "CUDA_VISIBLE_DEVICES"):  # main may set the last
        monkeypatch.delenv(key, raising=False)
    for key in ("HOME", "XDG_RUNTIME_DIR", "PATH"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.chdir(home)
    return run_repro(words, capsys, main=main)


def trims_tools(home, *words, ok=True, cwd=None):
    proc = subprocess.run([TRIMS_TOOLS, *words], cwd=cwd or home, env=_env(home), capture_output=True, text=True,
                          timeout=300)
    if ok:
        assert proc.returncode == 0, f"trims-tools {' '.join(words)}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A HOME with the original's default config, two models in its base_path and a store server running."""
    home = tmp_path_factory.mktemp("home")
    (home / ".carml_config.yml").write_text(ORIGINAL_CONFIG)
    for name in MODELS:
        generate(name, home / "carml" / "data" / "mxnet" / name, seed=1)
    log = open(home / "server.log", "w")  # the server's output for as long as it runs
    server = subprocess.Popen([TRIMS_TOOLS, "server", "run", "-d", "--eviction=lcu", "--memory_percentage=0.5"],
                              cwd=home, env=_env(home), stdout=log, stderr=subprocess.STDOUT)
    sock = home / "run" / "repro" / "trims.sock"
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert server.poll() is None and time.monotonic() < deadline, (home / "server.log").read_text()
        time.sleep(0.1)
    yield home
    server.terminate()
    server.wait(timeout=30)
    log.close()


def _profiles(home, name):
    return home / "micro18_profiles" / socket.gethostname() / name


PER_REQUEST = re.compile(r"(?P<upr>upr_)?(?P<model>.+)_[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.json")


def _traces(run, mode="upr"):
    """The per-request traces of a run directory, named as the original's: (upr_)<model>_<uuid>.json."""
    found = [(PER_REQUEST.fullmatch(p.name), p) for p in sorted(run.iterdir())]
    return [(m["model"], p) for m, p in found
            if m and not p.name.startswith(("combined-", "compared-")) and bool(m["upr"]) == (mode == "upr")]


@pytest.mark.service
def test_the_originals_default_config_loads_and_reports_unused_keys_once(home):
    proc = trims_tools(home, "info", "config")
    config = yaml.safe_load(proc.stdout)  # the original's key list: literal 'micro18.<key>' names
    assert list(config)[0] == "micro18.visible_devices" and list(config)[-1] == "serverinfopath"
    assert config["micro18.base_path"] == f"{home}/carml/data/mxnet"  # $HOME expanded
    assert config["micro18.profile_output_directory"] == f"{home}//micro18_profiles"
    assert config["micro18.upload_bucket_name"] == "traces"
    assert proc.stderr.count("no meaning here") == 1 and "src_path" in proc.stderr


@pytest.mark.service
def test_client_run_with_a_distribution_as_the_readme_writes_it(home):
    trims_tools(home, "client", "run", "--model_iterations=2", "--iterations=8", "--concurrent=2",
                "--distribution=pareto", "--profile_output=pareto")
    traces = _traces(_profiles(home, "pareto"))
    per_model = {m: sum(model == m for model, _ in traces) for m in MODELS}
    assert per_model == {m: 2 for m in MODELS}  # each model selected up to 2 times, so every model is
    pids = {json.loads(t.read_text())["traceEvents"][0]["pid"] for _, t in traces}
    assert len(pids) == len(traces)  # one process per request, as the original
    (combined,) = _profiles(home, "pareto").glob("combined-*.json")  # the original's post-processing
    assert len({e["pid"] for e in json.loads(combined.read_text())["traceEvents"]}) == len(traces)


@pytest.mark.service
def test_client_run_with_go_booleans_comma_params_and_a_description(home):
    trims_tools(home, "client", "run", "--distribution=weibull", "--distribution_params=1.5,1", "--eager_async=true",
                "--eager=false", "-n", "3", "--models", "squeeze", "--profile_output=weibull",
                "--experiment_description=two words")
    traces = _traces(_profiles(home, "weibull"))
    assert len(traces) == 3
    other = json.loads(traces[0][1].read_text())["otherData"]
    assert other["experiment_description"] == "two words" and other["model_name"] == "squeezenet_1.1"
    assert other["eager_mode"] is False and other["eager_mode_async"] is True
    assert other["distribution"] == "weibull" and other["distribution_params"] == [1.5, 1.0]


@pytest.mark.service
def test_an_earlier_run_is_kept_unless_overwrite(home):
    trims_tools(home, "client", "run", "--models=squeeze", "--profile_output=kept")
    proc = trims_tools(home, "client", "run", "--models=squeeze", "--profile_output=kept", ok=False)
    assert proc.returncode == 1 and "--profile_output_overwrite" in proc.stderr
    trims_tools(home, "client", "run", "--models=squeeze", "--profile_output=kept", "--profile_output_overwrite")


@pytest.mark.service
def test_monitor_memory_prints_the_originals_peak_and_average_table(home):
    proc = trims_tools(home, "client", "run", "--models=squeeze", "-n", "2", "--monitor_memory",
                       "--profile_output=monitored")
    header, *rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("device_idx", "host", "0"))]
    assert header[:2] == ["device_idx", "time_stamp"] and "client_rss" in header and "store_rss" in header
    assert [row[1] for row in rows[:2]] == ["peak", "average"]
    assert (_profiles(home, "monitored") / "shared-memory.csv").exists()


@pytest.mark.service
def test_memory_usage_and_memoryinfo_report_weights_activations_and_the_store(home):
    trims_tools(home, "client", "run", "-n", "1", "--profile_output=for-memory")  # both models resident now
    proc = trims_tools(home, "client", "memory_usage", "-f", "csv")
    header, *rows = [line.split(",") for line in proc.stdout.splitlines()]
    assert header == ["model_name", "measured_rss_bytes", "measured_pss_bytes", "param_bytes", "activation_bytes",
                      "store_bytes"]
    for name, rss, pss, params, activations, resident in rows:
        assert int(rss) > 0 and int(pss) > 0  # measured in a process of its own
        manifest = json.loads((home / "carml" / "data" / "mxnet" / name / "manifest.json").read_text())
        assert int(params) == manifest["params_bytes"] == int(resident) and int(activations) > 0
    assert [r[0] for r in rows] == sorted(MODELS)
    _, trace = _traces(_profiles(home, "for-memory"))[0]
    proc = trims_tools(home, "trace", "memoryinfo", str(trace))
    assert proc.stdout.splitlines()[1].split()[0] == json.loads(trace.read_text())["otherData"]["model_name"]
    cpp = trims_tools(home, "client", "memory", "--models=squeeze", "--format=cpp").stdout
    assert cpp.startswith("static const std::map<std::string, size_t> model_internal_memory_usage{")


@pytest.mark.service
def test_compare_combine_and_the_trace_tools(home):
    trims_tools(home, "client", "compare", "--models=squeezenet_1.1,resnet18", "--exp", ok=False)  # unknown flag
    trims_tools(home, "client", "compare", "--models=squeezenet_1.1,resnet18", "-n", "2", "--combine",
                "--profile_output=cmp")
    run = _profiles(home, "cmp")
    compared = sorted(p.name for p in run.glob("compared-*.json"))
    assert [re.sub(r"-[0-9a-f-]{36}\.json$", "", n) for n in compared] == [f"compared-{m}" for m in sorted(MODELS)]
    traces = [str(p) for mode in ("original", "upr") for _, p in _traces(run, mode)]
    assert len(traces) == 8  # two models, two iterations, original and shared

    trims_tools(home, "trace", "combine", *traces, "-o", "out/combined.json", "--skip_first")
    combined = json.loads((home / "out" / "combined.json").read_text())
    assert len({e["pid"] for e in combined["traceEvents"]}) == 7

    trims_tools(home, "trace", "summarize", str(run), "--detailed")  # one summary.json per directory
    records = json.loads((run / "summary.json").read_text())
    assert isinstance(records, list) and len(records) == 8  # the compared-* files are left out
    assert sorted(r["upr_enabled"] for r in records) == [False] * 4 + [True] * 4
    for record in records:
        assert isinstance(record["end_to_end_time"], int) and record["end_to_end_time"] > 1000  # nanoseconds
        assert {"read_params", "load_model", "forward_predict"} <= set(record["events"])
        assert record["events"]["read_params"]["start_time_t"].endswith("Z")
    other = run.parent / "cmp-copy"  # a second run directory of this test's own: --deep reads both
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("summary.json"))
    trims_tools(home, "trace", "summarize", str(run), str(other), "--deep", "--detailed=false", "-o", "out/deep.json")
    records = json.loads((home / "out" / "deep.json").read_text())
    assert len(records) == 16 and "events" not in records[0]


@pytest.mark.service
def test_top_level_run_uploads_to_the_configured_bucket(tmp_path):
    home = tmp_path
    (home / ".carml_config.yml").write_text(ORIGINAL_CONFIG.replace("http://s3.amazonaws.com/micro18profiles",
                                                                    "$HOME/bucket"))
    generate("squeezenet_1.1", home / "carml" / "data" / "mxnet" / "squeezenet_1.1", seed=1)
    trims_tools(home, "run", "--models=squeezenet", "-n", "2", "--eviction=flush", "--profile_output=r1",
                "--trace_upload")
    uploaded = sorted(p.name for p in (home / "bucket" / "traces" / "r1").glob("*.json"))
    assert len(uploaded) == 3 and uploaded[0].startswith("combined-") and uploaded[1].startswith("upr_squeezenet_1.1_")
    deadline = time.monotonic() + 20
    while (home / "run" / "repro" / "trims.sock").exists():  # the store stops once the client is done
        assert time.monotonic() < deadline, "trims-tools run left its model store running"
        time.sleep(0.1)


@pytest.mark.fault
@pytest.mark.parametrize("words, status, message", [
    (["client", "run", "--bogus"], 2, "unknown flag: --bogus"),
    (["client", "run", "--eager=maybe"], 2, "--eager: invalid boolean 'maybe'"),
    (["client", "run", "-n", "x"], 2, "--iterations: invalid int 'x'"),
    (["client", "run", "--distribution_params"], 2, "flag needs an argument: --distribution_params"),
    (["client", "run", "--distribution=pareto", "--distribution_params=1,a"], 1, "--distribution_params: 'a'"),
    (["client", "run", "--distribution=pareto", "--distribution_params=1"], 1, "--distribution_params: pareto takes 2"),
    (["client", "run", "--distribution=zipf"], 1, "zipf is not implemented"),
    (["client", "run", "--models=nosuchmodel"], 1, "--models: 'nosuchmodel' matches none"),
    (["client", "run", "--models=["], 1, "--models: '[' is not a name or a regular expression"),
    (["server", "run", "--eviction=random"], 1, "--eviction: unknown policy 'random'"),
    (["server", "run", "--memory_percentage=1.5"], 1, "--memory_percentage: expected a fraction"),
    (["trace", "combine"], 2, "expected at least one trace"),
    (["trace", "publish", "x.json"], 1, "not available here"),
    (["client", "memory_usage", "-f", "xml"], 1, "--format: unknown format 'xml'"),
    (["frobnicate"], 2, "unknown command 'frobnicate'"),
])
def test_bad_command_lines_name_the_flag(tmp_path, monkeypatch, capsys, words, status, message):
    """Run by trims-tools' main in this process; an unknown command goes through the program itself."""
    (tmp_path / ".carml_config.yml").write_text(ORIGINAL_CONFIG)
    generate("squeezenet_1.1", tmp_path / "carml" / "data" / "mxnet" / "squeezenet_1.1", seed=1)
    if words == ["frobnicate"]:
        proc = trims_tools(tmp_path, *words, ok=False)
        code, err = proc.returncode, proc.stderr
    else:
        code, _, err = in_process(monkeypatch, capsys, tmp_path, *words)
    assert code == status and message in err, err


@pytest.mark.fault
@pytest.mark.parametrize("models, message", [
    ("(.*.*.*)*!", "--models: '(.*.*.*)*!' matches none of"),
    ("(?<=squeeze)net", "--models: '(?<=squeeze)net' is not a name or a regular expression (invalid perl operator: (?<=)"),
])
def test_models_patterns_are_read_as_gos_regexp_reads_them(tmp_path, models, message):
    """`trims-tools client run --simulate_run --models='(.*.*.*)*!'`: Python's backtracking re ran for
    minutes on a model name, where the original's Go regexp is linear in it; a lookbehind, which Go's
    syntax has not, is refused in one line, as the original refuses it."""
    (tmp_path / ".carml_config.yml").write_text(ORIGINAL_CONFIG)
    generate("squeezenet_1.1", tmp_path / "carml" / "data" / "mxnet" / "squeezenet_1.1", seed=1)
    proc = subprocess.run([TRIMS_TOOLS, "client", "run", "--simulate_run", f"--models={models}"], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (1, "")
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("note: ")]  # the config's keys
    assert len(errors) == 1 and message in errors[0], proc.stderr


@pytest.mark.fault
@pytest.mark.parametrize("config, message", [
    ("micro18:\n  base_pathh: /x\n", "unknown micro18 keys ['base_pathh']"),
    ("micro18:\n  base_path: $NO_SUCH_VARIABLE_HERE/models\n", "micro18.base_path: environment variable $NO_SUCH"),
    ("micro18:\n  profile_output_directory: [1, 2]\n", "micro18.profile_output_directory: expected a path"),
    ("micro18: [\n", "invalid YAML"),
])
def test_bad_config_files_name_the_key(tmp_path, config, message):
    (tmp_path / ".carml_config.yml").write_text(config)
    proc = trims_tools(tmp_path, "info", "config", ok=False)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr


def test_config_search_order_and_env_override(tmp_path):
    """--config (when it exists), then $CARML_CONFIG_FILE, then ./.carml_config.yml, then ~/.carml_config.yml."""
    (tmp_path / ".carml_config.yml").write_text("micro18:\n  upload_bucket_name: from-home\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".carml_config.yml").write_text("micro18:\n  upload_bucket_name: from-cwd\n")
    (tmp_path / "named.yml").write_text("micro18:\n  upload_bucket_name: from-flag\n")
    assert "from-cwd" in trims_tools(tmp_path, "info", "config", cwd=work).stdout
    assert "from-flag" in trims_tools(tmp_path, "info", "config", "--config=~/named.yml", cwd=work).stdout
    assert "from-home" in trims_tools(tmp_path, "info", "config").stdout


# -- the translation, flag by flag ------------------------------------------------------------


def test_go_style_flags_parse_as_the_original():
    flags = COMMANDS[("client", "run")]
    values, given, positionals = parse_flags(["--eager=false", "--eager_async", "-n5", "--concurrent", "3",
                                              "--distribution=Exp", "--trace_upload=1"], flags)
    assert values["eager"] is False and values["eager_async"] is True and values["iterations"] == 5
    assert values["concurrent"] == 3 and values["trace_upload"] is True and not positionals
    defaults, _, _ = parse_flags([], flags)
    assert defaults["eager"] is True and defaults["model_iterations"] == -1 and defaults["visible_devices"] == "0"


def test_conflicting_meanings_follow_the_original(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (commands, _, _) = translate(["server", "run", "-d"])
    assert "-d" not in commands[0] and "--daemon" not in commands[0]  # -d is --debug in the original
    generate("squeezenet_1.1", tmp_path / "carml" / "data" / "mxnet" / "squeezenet_1.1", seed=1)
    (commands, _, _) = translate(["client", "run", "--distribution=exp", "--distribution_params=1.5"])
    assert "--eager" in commands[0]  # on by default in the original
    assert commands[0][commands[0].index("--distribution") + 1] == "exponential"


def test_download_assets_generates_every_model_into_base_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    from repro.trims.models import ARCHITECTURES

    (commands, _, _) = translate(["download", "models"])
    assert commands == [["trims", "models", *ARCHITECTURES]]


# -- the original's eviction policies ----------------------------------------------------------


def test_lcu_is_least_commonly_used(tmp_path):
    assert ModelStore(fake_models(tmp_path, {"a": 1}), 1000, "lcu").policy == "lfu"
    assert shutil.which("trims-tools", path=str(BIN))


# -- the Pecan artifact's scripts: extract_costs.py and fig8.py options -----------------------

PECAN_LOGS = Path(__file__).parent / "fixtures" / "pecan-logs"
REPRO = str(BIN / "repro")
CONFIG = str(Path(__file__).resolve().parents[1] / "config" / "config.yaml")


def _repro(tmp_path, *words):
    return subprocess.run([REPRO, *words], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(tmp_path)})


@pytest.mark.service
def test_pecan_costs_accepts_extract_costs_options(tmp_path):
    """extract_costs.py --path LOG --model=resnet --accelerator=v2 --header=True, on the artifact's sample log."""
    proc = _repro(tmp_path, "pecan", "costs", "--config", CONFIG, f"--path={PECAN_LOGS / 'resnet_pecan.log'}",
                  "--model=resnet", "--accelerator=v2", "--header=True", "--worker_matches", "3", "--tpu_count=1")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()
    values = dict(zip(header.split(","), row.split(",")))
    assert float(values["tpu_cost"]) == pytest.approx(0.5458, abs=1e-4)
    assert float(values["worker_cost"]) == pytest.approx(0.1849, abs=1e-4)
    assert (values["remote_workers"], values["local_workers"]) == ("4", "10")

    proc = _repro(tmp_path, "pecan", "costs", "--config", CONFIG, str(PECAN_LOGS / "resnet_pecan.log"), "--model",
                  "resnet", "--accelerator", "v3", "--tpu_count=2", "--noinfer_workers", "--header=false",
                  "--experiment_type=pecan_v3")
    assert proc.returncode == 0, proc.stderr
    (row,) = proc.stdout.splitlines()
    experiment, _, tpu, worker, remote, local = row.split(",")[:6]
    assert experiment == "pecan_v3" and (worker, remote, local) == ("0.0", "0", "0")
    assert float(tpu) == pytest.approx(0.5458 * 2 * 8.8 / 4.96, abs=1e-3)


@pytest.mark.fault
@pytest.mark.parametrize("words, message", [
    (["--model=resnet", "--header=maybe"], "--header"),
    (["--model=resnet", "--accelerator=v4"], "--accelerator"),
    (["--model=resnet", "--tpu_count=0"], "--tpu-count"),
    (["--model=resnet", "--tpu_count=4097"], "--tpu-count (1 to 4096)"),
    ([], "--experiment NAME"),
])
def test_pecan_costs_bad_options_are_named(tmp_path, monkeypatch, capsys, words, message):
    """Run by repro's main in this process; without --experiment, through the `repro` program itself."""
    argv = ["pecan", "costs", "--config", CONFIG, str(PECAN_LOGS / "resnet_pecan.log"), *words]
    if not words:
        proc = _repro(tmp_path, *argv)
        code, err = proc.returncode, proc.stderr
    else:
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.chdir(tmp_path)
        code, _, err = run_repro(argv, capsys)
    assert code in (1, 2) and message in err, err


@pytest.mark.service
def test_pecan_plot_redraws_a_figure_from_fig8_py_inputs(tmp_path):
    proc = _repro(tmp_path, "pecan", "plot", "-e", "final", "-m", "ResNet50", "-t", "4.43", "0.62", "0.55",
                  "-c", "0", "1.0", "0.18", "-o", "plots/ResNet50_v2-8")
    assert proc.returncode == 0, proc.stderr
    for suffix in (".pdf", ".png"):
        assert (tmp_path / "plots" / f"ResNet50_v2-8{suffix}").stat().st_size > 10_000
    proc = _repro(tmp_path, "pecan", "plot", "-t", "1", "-1", "2", "-o", "bad")
    assert proc.returncode == 1 and "-t/-c" in proc.stderr and not (tmp_path / "bad.pdf").exists()


# -- the store's tiers (TrIMS's persist_cpu) ----------------------------------------------------


@pytest.mark.service
def test_server_host_tier_through_the_command_line(tmp_path):
    base = tmp_path / "models"
    for name in MODELS:
        generate(name, base / name, seed=1)
    sock = tmp_path / "s.sock"
    env = {**os.environ, "HOME": str(tmp_path)}
    budget = (base / "resnet18_v1" / "model.params").stat().st_size >> 20
    proc = subprocess.run([REPRO, "trims", "server", "run", "-d", "--socket", str(sock), "--base-path", str(base),
                           "--memory-mb", str(budget + 1), "--persist-cpu-mb", "200", "--device", "cpu"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "host tier 200 MiB" in proc.stdout, proc.stderr
    try:
        for model in ("resnet18_v1", "squeezenet_1.1", "resnet18_v1"):
            client = subprocess.run([REPRO, "trims", "client", "run", "--model", model, "--socket", str(sock),
                                     "--base-path", str(base), "--device", "cpu", "--profile-output", "t",
                                     "--profile-output-overwrite"],
                                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
            assert client.returncode == 0, client.stderr
        status = json.loads(subprocess.run([REPRO, "trims", "server", "status", "--socket", str(sock)], cwd=tmp_path,
                                           env=env, capture_output=True, text=True, timeout=60).stdout)
        assert status["tiers"]["host"]["promotions"] == 1 and status["tiers"]["file"]["loads"] == 2
    finally:
        subprocess.run([REPRO, "trims", "server", "stop", "--socket", str(sock)], env=env, timeout=60)


@pytest.mark.service
def test_server_stop_ends_once_the_server_has(tmp_path):
    """`trims server stop` (and `trims-tools run`, which ends with it) returned once the server had the
    request, with the server still running a while."""
    from repro.processes import alive

    generate("squeezenet_1.1", tmp_path / "models" / "squeezenet_1.1", seed=1)
    sock = tmp_path / "s.sock"
    env = {**os.environ, "HOME": str(tmp_path)}
    started = subprocess.run([REPRO, "trims", "server", "run", "-d", "--socket", str(sock), "--base-path",
                              str(tmp_path / "models"), "--memory-mb", "64", "--device", "cpu"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    pid = json.loads(subprocess.run([REPRO, "trims", "server", "status", "--socket", str(sock)], env=env,
                                    capture_output=True, text=True, timeout=60).stdout)["pid"]
    stopped = subprocess.run([REPRO, "trims", "server", "stop", "--socket", str(sock)], env=env, capture_output=True,
                             text=True, timeout=60)
    assert (stopped.returncode, stopped.stdout) == (0, "model store server stopped\n"), stopped.stderr
    assert not alive(pid)
