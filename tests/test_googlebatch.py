"""Google Batch (profiles/googlebatch, the 'googlebatch' extra) and `repro doctor`, which checks what
a profile needs before Snakemake starts with it.

Real Batch jobs cannot run here: they need a Google Cloud project with the Batch API and
credentials, and they run on Google's machines, which cannot reach a bucket emulator on loopback.
The profile is therefore tested as far as it goes without them: with the executor plugin
installed, a dry-run against gcp-storage-emulator (standing in for the bucket, through
STORAGE_EMULATOR_HOST) plans the whole fig8 chain, every file under the bucket prefix.

The profile's tests need the plugin; without it they are skipped, unless
REPRO_REQUIRE_GOOGLEBATCH=1 (as in CI), where that is a failure.
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml
from support import BIN, REPO, copy_workflow, experiment_modes, jobs_in_plan, path_env, planned_jobs, snakemake

PLUGIN = "snakemake_executor_plugin_googlebatch"
BUCKET = "repro-batch"
PROFILE_ENV = {"GOOGLE_CLOUD_PROJECT": "repro-test", "GOOGLE_BATCH_REGION": "us-central1", "REPRO_BUCKET": BUCKET}


@pytest.fixture(scope="module")
def plugin():
    if importlib.util.find_spec(PLUGIN) is None:
        hint = "pip install -e '.[googlebatch]'"
        if os.environ.get("REPRO_REQUIRE_GOOGLEBATCH") == "1":
            raise RuntimeError(f"REPRO_REQUIRE_GOOGLEBATCH=1 but {PLUGIN} is not installed ({hint})")
        pytest.skip(f"{PLUGIN} is not installed ({hint})")


def no_credentials(home, **extra):
    """An environment where google-auth finds no credentials: no key file, an empty home (no gcloud
    application default credentials) and no probe of the Compute Engine metadata server."""
    env = path_env(HOME=str(home), CLOUDSDK_CONFIG=str(home / "gcloud"), NO_GCE_CHECK="true")
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"):
        env.pop(name, None)
    return {**env, **extra}


def doctor(profile, env, cwd=REPO):
    return subprocess.run([str(BIN / "repro"), "doctor", "--profile", str(profile)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.mark.workflow
def test_the_profile_plans_the_fig8_chain_in_the_bucket(plugin, emulator, tmp_path, monkeypatch):
    """The executor plugin and the GCS storage plugin, both installed, plan the same jobs as a local
    dry-run; every input, output and log is an object under gs://$REPRO_BUCKET/repro/."""
    from repro.tracestore import _gcs_client

    work = copy_workflow(tmp_path / "repo")
    env = {**PROFILE_ENV, "STORAGE_EMULATOR_HOST": emulator}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _gcs_client().create_bucket(BUCKET)
    target = "plots/fig8_ResNet50_v2-8.pdf"
    checked = doctor("profiles/googlebatch", path_env(**env), cwd=work)
    assert checked.returncode == 0 and "ok (executor googlebatch, storage gcs)" in checked.stdout, checked.stderr

    plan = snakemake(work, target, "--profile", "profiles/googlebatch", "--dry-run", env=env).stdout
    jobs = jobs_in_plan(plan)
    assert jobs == planned_jobs(work, target)  # the local plan of the same target
    rules = [job.split("[")[0] for job in jobs]
    runs = len(experiment_modes())
    assert {rule: rules.count(rule) for rule in set(rules)} == {
        "calibrate": 1, "cluster_start": 1, "cluster_status": runs, "run": runs, "download_traces": runs, "combine": 1,
        "summarize": 1, "costs": 1, "plot": 1}
    files = [entry for line in re.findall(r"^ +(?:input|output|log): (.*)$", plan, re.M) for entry in line.split(", ")]
    assert f"gs://{BUCKET}/repro/{target} (send to storage)" in files
    outside = [entry for entry in files if not entry.startswith(f"gs://{BUCKET}/repro/")]
    assert len(files) > 30 and not outside, f"files outside the bucket prefix: {outside}"
    assert not (work / "results" / "runs").exists()  # a dry-run: nothing written, locally or in the bucket
    assert not list(_gcs_client().list_blobs(BUCKET))


@pytest.mark.fault
def test_the_profile_without_credentials_is_named_in_one_line(plugin, tmp_path):
    """Snakemake itself would end in google-auth's DefaultCredentialsError traceback before reading
    the Snakefile; the doctor names what is missing instead."""
    proc = doctor("profiles/googlebatch", no_credentials(tmp_path, **PROFILE_ENV))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "repro: error: profiles/googlebatch/config.yaml: no Google credentials: application default credentials not "
        "found (run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file; on "
        "Google Cloud they come from the metadata server); for tests against gcp-storage-emulator set STORAGE_EMULATOR_HOST"]


@pytest.mark.fault
def test_gcs_storage_without_credentials_is_named_in_one_line(tmp_path):
    """Any profile with Snakemake's GCS default storage (the 'gcs' extra): no credentials, or a key
    file that is not there."""
    (tmp_path / "config.yaml").write_text("default-storage-provider: gcs\ndefault-storage-prefix: gs://bucket/repro\n")
    proc = doctor(tmp_path, no_credentials(tmp_path))
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert "no Google credentials: application default credentials not found" in proc.stderr
    assert "set STORAGE_EMULATOR_HOST" in proc.stderr and "Traceback" not in proc.stderr
    key = tmp_path / "no-such-key.json"
    proc = doctor(tmp_path, no_credentials(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(key)))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"repro: error: {tmp_path}/config.yaml: GOOGLE_APPLICATION_CREDENTIALS: "
                                        f"File {key} was not found."]
    proc = doctor(tmp_path, no_credentials(tmp_path, STORAGE_EMULATOR_HOST="http://127.0.0.1:9"))
    assert proc.returncode == 0 and "credentials not checked" in proc.stdout, proc.stderr


# the doctor in a child interpreter that cannot import the executor plugin, as on an install without the extra
WITHOUT_PLUGIN = f"""
import sys
from importlib.abc import MetaPathFinder
from repro.cli import main

class Missing(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("{PLUGIN}"):
            raise ModuleNotFoundError(name)

sys.meta_path.insert(0, Missing())
sys.exit(main(["doctor", "--profile", "profiles/googlebatch"]))
"""


@pytest.mark.fault
def test_the_doctor_names_a_missing_extra_and_unset_variables(tmp_path):
    env = no_credentials(tmp_path, STORAGE_EMULATOR_HOST="http://127.0.0.1:9")
    for name in PROFILE_ENV:
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", WITHOUT_PLUGIN], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    where = "repro: error: profiles/googlebatch/config.yaml"
    assert proc.stderr.splitlines() == [
        f"{where}: executor: googlebatch needs the 'googlebatch' extra (pip install -e '.[googlebatch]')",
        f"{where}: environment variable $GOOGLE_CLOUD_PROJECT is not set (used by googlebatch-project, storage-gcs-project)",
        f"{where}: environment variable $GOOGLE_BATCH_REGION is not set (used by googlebatch-region)",
        f"{where}: environment variable $REPRO_BUCKET is not set (used by default-storage-prefix)",
    ]


@pytest.mark.fault
def test_the_doctor_names_each_profile_key_snakemake_would_refuse(tmp_path):
    """`corez: 2` in a profile: Snakemake stops with "unrecognized arguments: --corez=2", naming
    neither the file nor the key; `latency_wait` is refused too (its options take dashes), and a
    short option's letter, and a flag's abbreviation. The doctor names each, not what Snakemake takes
    (a key without a value, a unique beginning of a value option's name), and none of the shipped
    profiles' keys."""
    from repro.doctor import check_profile

    (tmp_path / "config.yaml").write_text(
        "cores: 2\ncorez: 2\nlatency_wait: 5\nj: 4\nrerun-incomplete: true\nprintshell: true\nkeep-goin:\n"
        "latency: 5\n")
    proc = doctor(tmp_path, path_env())
    where = f"repro: error: {tmp_path / 'config.yaml'}"
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"{where}: corez: not an option of Snakemake or of its installed plugins; did you mean cores?",
        f"{where}: latency_wait: not an option of Snakemake or of its installed plugins; did you mean latency-wait?",
        f"{where}: j: not an option of Snakemake or of its installed plugins; did you mean jobs?",
        f"{where}: printshell: not an option of Snakemake or of its installed plugins; did you mean printshellcmds?"]
    for profile in sorted((REPO / "profiles").iterdir()):
        problems, _ = check_profile(profile)
        assert not [p for p in problems if "not an option" in p], profile


@pytest.mark.fault
def test_the_doctor_names_an_installed_plugin_that_fails_to_load(tmp_path):
    """An installed executor plugin that cannot be imported (here: SLURM's, made unimportable in the
    child) stops every Snakemake start, whatever the profile: the doctor says so in one line."""
    script = WITHOUT_PLUGIN.replace("snakemake_executor_plugin_googlebatch", "snakemake_executor_plugin_slurm").replace(
        "profiles/googlebatch", "profiles/default")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=path_env(), cwd=REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "repro: error: profiles/default/config.yaml: Snakemake cannot list its options (ModuleNotFoundError: "
        "snakemake_executor_plugin_slurm); it would not start with this installation"]


@pytest.mark.fault
@pytest.mark.parametrize("content, message", [
    (None, "not a Snakemake profile (expected a directory with config.yaml)"),
    ("executor: [unclosed\n", "config.yaml"),
    ("- a list\n", "expected a mapping of Snakemake options"),
    ("executor: no-such-executor\n",
     "executor: no-such-executor needs snakemake-executor-plugin-no-such-executor (pip install "
     "snakemake-executor-plugin-no-such-executor)"),
])
def test_the_doctor_refuses_what_is_not_a_usable_profile(tmp_path, content, message):
    if content is not None:
        (tmp_path / "config.yaml").write_text(content)
    proc = doctor(tmp_path, path_env())
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert message in proc.stderr


def test_the_other_profiles_pass_where_their_extras_and_variables_are_there(tmp_path):
    proc = doctor("profiles/default", path_env())
    assert proc.returncode == 0 and "ok (local execution)" in proc.stdout
    proc = doctor("profiles/slurm", {k: v for k, v in path_env().items() if k != "SLURM_PARTITION"})
    assert proc.returncode == 1 and "$SLURM_PARTITION is not set (used by default-resources.slurm_partition)" in proc.stderr
    proc = doctor("profiles/slurm", {**path_env(SLURM_PARTITION="debug"), "PATH": slurm_commands(tmp_path)})
    assert proc.returncode == 0 and "ok (executor slurm)" in proc.stdout, proc.stderr
    proc = doctor("profiles/cluster-generic", {**path_env(), "PATH": slurm_commands(tmp_path)})
    assert proc.returncode == 0 and "ok (executor cluster-generic)" in proc.stdout, proc.stderr


def slurm_commands(tmp_path):
    """A PATH of this interpreter's bin/ and a directory with SLURM's client commands (stand-ins that
    only exist: the doctor looks them up, it does not run them)."""
    commands = tmp_path / "slurm-bin"
    commands.mkdir(exist_ok=True)
    for name in ("sbatch", "squeue", "sacct", "scancel"):
        (commands / name).write_text("#!/bin/sh\nexit 0\n")
        (commands / name).chmod(0o755)
    return f"{BIN}{os.pathsep}{commands}"


def test_the_doctor_names_the_cluster_commands_this_machine_lacks(tmp_path):
    """Without SLURM's client commands, `executor: slurm` would start and fail at its first submission:
    the doctor names each command and what the executor runs it for. The plugin's status command is
    sacct or squeue, whichever is there."""
    proc = doctor("profiles/slurm", {**path_env(SLURM_PARTITION="debug"), "PATH": str(BIN)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [f"repro: error: profiles/slurm/config.yaml: executor: {line}" for line in (
        "'sbatch' not found on PATH; slurm runs it to submit each job",
        "'scancel' not found on PATH; slurm runs it to cancel jobs",
        "'sacct' not found on PATH and 'squeue' not found on PATH; slurm runs one of them for each job's state")]
    commands = slurm_commands(tmp_path)
    (tmp_path / "slurm-bin" / "squeue").unlink()  # the profile's squeue missing: the plugin falls back to sacct
    assert doctor("profiles/slurm", {**path_env(SLURM_PARTITION="debug"), "PATH": commands}).returncode == 0
    (tmp_path / "config.yaml").write_text("executor: slurm\nslurm-status-command: squeue --long\n")
    proc = doctor(tmp_path, {**path_env(), "PATH": commands})
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"repro: error: {tmp_path / 'config.yaml'}: slurm-status-command: expected sacct or squeue, got 'squeue --long'"]


def generic_profile(directory, **commands):
    directory.mkdir(exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({"executor": "cluster-generic", **{
        f"cluster-generic-{name}-cmd": command for name, command in commands.items()}}))
    return directory


def test_the_doctor_resolves_a_generic_clusters_commands_as_snakemake_and_its_plugin_run_them(tmp_path):
    """Snakemake expands variables and ~ in a profile's values and reads a value naming a file in the
    profile's directory as that file; the plugin runs the submit and status commands through the shell
    (a program after NAME=value words; a compound command is the shell's to judge) and the cancel and
    sidecar commands as one program each. A missing or unusable command is named with what it is for."""
    env = {**path_env(SUBMITTERS=str(tmp_path / "bin")), "PATH": slurm_commands(tmp_path)}
    (tmp_path / "bin").mkdir()
    for script in (tmp_path / "bin" / "submit.sh", tmp_path / "P" / "submit.sh"):
        script.parent.mkdir(exist_ok=True)
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
    for given in ({"submit": "submit.sh"}, {"submit": "$SUBMITTERS/submit.sh --parsable"},
                  {"submit": "SBATCH_WAIT=1 sbatch --parsable"}, {"submit": "mkdir -p logs && nosuch"}, {"submit": "exec sbatch"},
                  {"submit": "sbatch", "status": "", "cancel": "scancel"}):
        proc = doctor(generic_profile(tmp_path / "P", **given), env, cwd=tmp_path)
        assert proc.returncode == 0, (given, proc.stderr)
    profile = tmp_path / "P" / "config.yaml"
    (tmp_path / "notexec").write_text("")
    for given, said in [
            ({}, "cluster-generic-submit-cmd: not set; the cluster-generic executor needs the command that submits "
                 "a job"),
            ({"submit": "nosuch --parsable"}, "cluster-generic-submit-cmd: 'nosuch' not found on PATH; cluster-generic "
                                              "runs it to submit each job"),
            ({"submit": "sbatch", "status": "./notexec"}, "cluster-generic-status-cmd: './notexec': not executable; "
                                                          "cluster-generic runs it for each job's state"),
            ({"submit": "sbatch", "cancel": "scancel --quiet"},
             "cluster-generic-cancel-cmd: 'scancel --quiet' not found on PATH; cluster-generic runs it to cancel jobs "
             "(the whole value, as one program: no arguments)"),
            ({"submit": "sbatch", "sidecar": "/nonexistent/sidecar"},
             "cluster-generic-sidecar-cmd: '/nonexistent/sidecar': no such file; cluster-generic runs it beside the "
             "workflow")]:
        proc = doctor(generic_profile(tmp_path / "P", **given), env, cwd=tmp_path)
        assert proc.returncode == 1 and proc.stderr.splitlines() == [f"repro: error: {profile}: {said}"], given
    profile = REPO / "profiles" / "cluster-generic"
    proc = doctor(profile, env, cwd=tmp_path)  # the status script's path is relative to where Snakemake runs
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"repro: error: {profile / 'config.yaml'}: cluster-generic-status-cmd: 'profiles/cluster-generic/status.py': "
        f"no such file ({tmp_path / 'profiles' / 'cluster-generic' / 'status.py'}); cluster-generic runs it for each "
        "job's state"]


@pytest.mark.parametrize("command, said", [("'sbatch --parsable", "No closing quotation in \"'sbatch --parsable\""),
                                           ("", "expected a command line, got ''"),
                                           ("FOO=1", "expected a command line, got 'FOO=1'"),
                                           (["sbatch"], "expected a command line, got \"['sbatch']\"")])
def test_the_doctor_refuses_a_generic_command_that_is_no_command_line(tmp_path, command, said):
    proc = doctor(generic_profile(tmp_path, submit=command), path_env())
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert f"cluster-generic-submit-cmd: {said}" in proc.stderr
