"""Faults at the workflow's edges: hostile config values, names that are not plain, non-finite
numbers, stale process records, results deleted under a running service. Each case asserts what a
user needs: a clear error naming the key, nothing executed, no foreign process signalled, nothing
left running."""

import json
import os
import subprocess

import pytest
import yaml
from support import BIN, REPO, configfiles, sleeper, snakemake

from repro import invocation, processes
from repro.config import check_settings, validate_config
from repro.errors import ReproError
from repro.trims import service

pytestmark = pytest.mark.fault

HOSTILE = "x $(touch {s}) `touch {s}` ; touch {s} 'q\" y"


def default_config():
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.mark.workflow
def test_hostile_strings_in_path_keys_are_never_executed(workdir, tmp_path):
    """Every free-form string key a rule uses, set to a value with command substitutions, backticks,
    a `;`, quotes and spaces: the runs that use them work, and no shell ever runs what they contain."""
    sentinel = tmp_path / "executed"
    hostile = HOSTILE.format(s=sentinel)
    override = {"trace_store": f"results/store {hostile}",
                "trims": {"base_path": f"results/models {hostile}", "asset_store": f"results/assets {hostile}",
                          "models": {"small": ["squeezenet_1.1"]}}}
    snakemake(workdir, "results/tables/Getting_started.csv", "results/trims/runs/compare/squeezenet_1.1/report.json",
              *configfiles(workdir, override), cores=1)
    assert not sentinel.exists()
    assert (workdir / "results" / "tables" / "Getting_started.csv").exists()
    assert (workdir / f"results/models {hostile}" / "squeezenet_1.1" / "manifest.json").exists()


@pytest.mark.parametrize("section, name", [
    ("experiments", ".."), ("experiments", "."), ("experiments", "a;b"), ("experiments", "../up"),
    ("figures", ".."), ("figures", ".hidden"),
])
def test_names_that_are_not_plain_are_refused(section, name):
    config = default_config()
    if section == "experiments":
        config["pecan"]["experiments"][name] = config["pecan"]["experiments"]["RetinaNet"]
        key = "pecan.experiments"
    else:
        config["plots"]["figures"][name] = {"experiment": "RetinaNet"}
        key = "plots.figures"
    with pytest.raises(ReproError, match=rf"config: {key}: '{name}' does not match"):
        validate_config(config)


@pytest.mark.parametrize("keys, value", [
    (("pecan", "cluster", "network_gbps"), float("nan")),
    (("pecan", "cluster", "policy_prices", "worker_cost"), float("nan")),
    (("pecan", "cluster", "noise_cv"), float("nan")),
    (("pecan", "prices", "worker"), float("inf")),
    (("pecan", "cluster", "network_gbps"), float("-inf")),
])
def test_non_finite_numbers_are_refused_naming_the_key(keys, value):
    config = default_config()
    node = config
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    with pytest.raises(ReproError, match=rf"config: {'.'.join(keys)}: {value} is not a finite number"):
        validate_config(config)


@pytest.mark.workflow
def test_a_nested_config_value_that_arrives_as_a_string_says_to_use_a_config_file(workdir):
    """Snakemake passes the values nested in `--config KEY='{...}'` as strings: the error names
    the key, and says how to set a number there."""
    proc = snakemake(workdir, "--dry-run", "--config", "calibration={elements: 5}", check=False)
    assert proc.returncode != 0
    assert ("calibration.elements: '5' is not of type 'integer' (a value nested in `--config KEY='{...}'` "
            "reaches the workflow as a string: set it in a file passed with --configfile)") in proc.stdout + proc.stderr


@pytest.mark.workflow
def test_a_config_error_is_one_line_naming_the_key(workdir):
    """`snakemake --config repeats=0`: one line naming the key and what was expected, exit 1, as the
    repro commands give it; Snakemake reported the exception with its stack (four `File ...` lines)."""
    proc = snakemake(workdir, "--dry-run", "--config", "repeats=0", check=False)
    assert proc.returncode == 1
    assert (proc.stdout + proc.stderr).splitlines()[-1] == (
        "repro: error: config/config.yaml + --config: repeats: 0 is less than the minimum of 1")
    assert 'File "' not in proc.stdout + proc.stderr
    # a typo in a --configfile: the line names that file
    (workdir / "mine.yaml").write_text("seeed: 3\n")
    proc = snakemake(workdir, "--dry-run", "--configfile", "mine.yaml", check=False)
    assert proc.returncode == 1
    assert (proc.stdout + proc.stderr).splitlines()[-1] == (
        f"repro: error: config/config.yaml + {workdir / 'mine.yaml'}: (top level): Additional properties are not "
        "allowed ('seeed' was unexpected)")


@pytest.mark.parametrize("value, hinted", [("5", True), ("five", False), ("true", False), ("0.5", False)])
def test_the_nested_config_hint_comes_only_where_the_string_reads_as_the_wanted_type(value, hinted):
    config = default_config()
    config["calibration"]["elements"] = value  # an integer
    with pytest.raises(ReproError, match="calibration.elements: ") as raised:
        validate_config(config)
    assert ("--configfile" in str(raised.value)) == hinted


def test_paths_expand_home_and_variables_and_an_unset_variable_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("REPRO_DATA", str(tmp_path / "data"))
    config = default_config()
    config["trace_store"] = "~/store"
    config["trims"]["base_path"] = "${REPRO_DATA}/models"
    validate_config(config)
    assert config["trace_store"] == str(tmp_path / "store")
    assert config["trims"]["base_path"] == str(tmp_path / "data" / "models")
    config = default_config()
    config["trims"]["asset_store"] = "$NO_SUCH_VARIABLE_HERE/assets"
    with pytest.raises(ReproError, match=r"trims.asset_store: environment variable \$NO_SUCH_VARIABLE_HERE is not set"):
        validate_config(config)


@pytest.mark.workflow
def test_a_name_with_a_dot_matches_only_itself(workdir):
    extra = {"pecan": {"experiments": {"Res.Net": {"model": "resnet", "accelerator": "v2-8", "modes": ["short"]}}}}
    proc = snakemake(workdir, "results/tables/ResXNet.csv", "--dry-run", *configfiles(workdir, extra), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "MissingRuleException" in out and "KeyError" not in out


def test_a_stale_store_record_never_signals_a_foreign_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    foreign = sleeper()
    try:
        record = processes.describe(foreign.pid, "model store")
        for stale in ({**record, "start_ticks": record["start_ticks"] + 1}, {"pid": foreign.pid}):
            processes.write_record(processes.runtime_dir(tmp_path) / service.RECORD,
                                   {"process": stale, "socket": str(tmp_path / "none.sock")})
            state = tmp_path / "results" / "cluster" / "local" / "state.json"
            proc = subprocess.run([str(BIN / "repro"), "cluster", "stop", "--state", str(state)], capture_output=True,
                                  text=True, cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
            assert foreign.poll() is None  # still running: its identity did not match the record
            assert processes.read_record(processes.runtime_dir(tmp_path, create=False) / service.RECORD) is None
    finally:
        foreign.kill()
        foreign.wait()


def test_malformed_cluster_states_are_one_line_errors(tmp_path):
    for text in ("{}", "[1]", "not json"):
        state = tmp_path / "state.json"
        state.write_text(text)
        proc = subprocess.run([str(BIN / "repro"), "cluster", "status", "--state", str(state)], capture_output=True,
                              text=True)
        assert proc.returncode == 1
        assert proc.stderr.startswith(f"repro: error: {state}: ") and "Traceback" not in proc.stderr


@pytest.mark.service
def test_deleting_results_under_a_running_store_does_not_orphan_it(tmp_path, monkeypatch):
    """`rm -rf results` while the model store runs: the next start finds it through the private runtime
    directory of this workflow directory; a start with other settings stops it first."""
    monkeypatch.chdir(tmp_path)
    settings = {"base_path": str(tmp_path / "results" / "models"),
                "server": {"eviction": "lru", "memory_mb": 20, "device": "cpu"}}
    state = tmp_path / "results" / "cluster" / "local" / "trims-store.json"
    first = service.start(settings, state)
    try:
        subprocess.run(["rm", "-rf", str(tmp_path / "results")], check=True)
        again = service.start(settings, state)
        assert again["process"] == first["process"] and again["reused"]  # found, not started twice
        other = service.start({**settings, "server": {**settings["server"], "memory_mb": 30}}, state)
        assert not processes.matches(first["process"])  # the previous incarnation was stopped
        assert processes.matches(other["process"])
        assert json.loads(state.read_text())["process"] == other["process"]
    finally:
        service.stop(tmp_path)
    assert not processes.matches(other["process"])


def _invocation(process):
    return f"{process.pid}:{processes.describe(process.pid, 'x')['start_ticks']}"


@pytest.mark.service
def test_the_store_stops_when_its_last_user_ends_and_an_orphan_is_adopted(tmp_path, monkeypatch, capsys):
    """The store's users are the invocations ($REPRO_INVOCATION) that started or reused it: one that
    never used it leaves it running at its end, as does one whose co-user still runs; the last user
    stops it. A store no live invocation uses is adopted by the next one. Another user still running
    refuses a start with other settings."""
    monkeypatch.chdir(tmp_path)
    settings = {"base_path": str(tmp_path / "models"), "server": {"eviction": "lru", "memory_mb": 20, "device": "cpu"}}
    state = tmp_path / "trims-store.json"
    sleepers = [sleeper() for _ in range(3)]  # live processes stand for Snakemake invocations
    first, second, bystander = (_invocation(p) for p in sleepers)
    try:
        monkeypatch.setenv(invocation.INVOCATION_VARIABLE, first)
        record = service.start(settings, state)
        assert not service.leave(bystander) and service.running(record)  # it never used the store
        monkeypatch.setenv(invocation.INVOCATION_VARIABLE, second)
        assert service.ensure(state, check_settings)["reused"]  # a co-user, not an adoption
        assert "left running" not in capsys.readouterr().err
        with pytest.raises(ReproError, match=rf"runs with other settings for another Snakemake invocation of this "
                                             rf"workflow \(pid {sleepers[0].pid}\), which still runs"):
            service.start({**settings, "server": {**settings["server"], "memory_mb": 30}}, state)
        assert not service.leave(first) and service.running(record)  # the second still uses it
        assert service.leave(second) and not processes.matches(record["process"])  # the last user stops it
        monkeypatch.setenv(invocation.INVOCATION_VARIABLE, first)
        record = service.ensure(state, check_settings)  # the state stays: the next run starts the store from it
        assert service.running(record) and not record.get("reused")
        # its watchdog gone too (else it stops the store: test_faults_ownership), its only user is
        # killed: its end never comes
        assert processes.terminate(record["watchdog"], owner=processes.runtime_dir(tmp_path))
        sleepers[0].kill()
        sleepers[0].wait()
        monkeypatch.setenv(invocation.INVOCATION_VARIABLE, second)
        assert service.ensure(state, check_settings)["process"] == record["process"]  # found and adopted, not restarted
        assert "was left running by an invocation that has ended" in capsys.readouterr().err
        assert service.leave(second)
        assert not processes.matches(record["process"])
    finally:
        service.stop(tmp_path)
        for process in sleepers:
            process.kill()
            process.wait()


@pytest.mark.service
def test_a_store_a_command_run_by_hand_starts_stops_when_the_command_ends(tmp_path, monkeypatch):
    """`repro trims store status` (as `trims experiment`) run by hand, outside a Snakemake invocation,
    starts the stopped store again: the store is that command's, and stops when it ends, where it ran
    on until `snakemake cluster_stop`. A store already running (`trims store start`) is left running."""
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(invocation.INVOCATION_VARIABLE, raising=False)
    settings = {"base_path": str(tmp_path / "models"), "server": {"eviction": "lru", "memory_mb": 20, "device": "cpu"}}
    state = tmp_path / "trims-store.json"
    status = [str(BIN / "repro"), "trims", "store", "status", "--state", str(state), "--expect",
              service.settings_digest(settings), "-o", "status.json"]
    env = {key: value for key, value in os.environ.items() if key != invocation.INVOCATION_VARIABLE}
    kept = service.start(settings, state)  # as `repro trims store start` by hand: runs until stopped
    try:
        subprocess.run(status, env=env, check=True, capture_output=True, text=True)
        time.sleep(3 * service.WATCH_INTERVAL_S)
        assert service.running(kept)  # not the command's to stop
        service.stop(tmp_path)
        proc = subprocess.run(status, env=env, check=True, capture_output=True, text=True)
        assert "started for this command; it stops when the command ends" in proc.stderr
        record = json.loads(state.read_text())
        assert record["process"] != kept["process"]
        deadline = time.monotonic() + 30
        started = (record["process"], record["watchdog"])
        while any(map(processes.matches, started)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(processes.matches, started))
    finally:
        service.stop(tmp_path)


@pytest.mark.service
def test_parallel_status_checks_start_one_store(tmp_path, monkeypatch):
    """Parallel TrIMS jobs each make sure the stopped store runs again: one store starts, all use it."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.chdir(tmp_path)
    settings = {"base_path": str(tmp_path / "models"), "server": {"eviction": "lru", "memory_mb": 20, "device": "cpu"}}
    state = tmp_path / "trims-store.json"
    first = service.start(settings, state)
    service.stop(tmp_path)
    try:
        with ThreadPoolExecutor(4) as pool:
            records = list(pool.map(lambda _: service.ensure(state, check_settings), range(4)))
        assert len({json.dumps(r["process"], sort_keys=True) for r in records}) == 1
        assert records[0]["process"] != first["process"] and service.running(records[0])
        assert sum(not r.get("reused") for r in records) == 1
    finally:
        service.stop(tmp_path)
    assert not processes.matches(records[0]["process"])


def test_the_main_snakemake_process_is_an_invocation_of_its_own(monkeypatch):
    monkeypatch.setenv(invocation.INVOCATION_VARIABLE, "1:1")  # inherited from an outer invocation's job
    assert invocation.this_invocation(main_process=False) == "1:1"  # a job's process belongs to the outer one
    mine = invocation.this_invocation(main_process=True)  # a snakemake started inside a job: its own
    assert mine != "1:1" and invocation.owner(mine)["pid"] == os.getpid()
    assert processes.matches(invocation.owner(mine))
