"""Each Snakemake internal the workflow uses (repro.snakemake_adapter) checked against the installed
Snakemake: a release that changes one fails here, naming it. And no other file uses one."""

import gc
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repro import snakemake_adapter

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(workdir, *args):
    return subprocess.run([*SNAKEMAKE, "--cores", "1", *args], cwd=workdir, capture_output=True, text=True, timeout=120)


def test_per_job_records_the_signature_where_snakemake_reads_it():
    from snakemake import common

    assert snakemake_adapter.overwrite_function_params is common.overwrite_function_params, (
        "snakemake.common.overwrite_function_params is gone: per_job falls back to inspecting at every call")
    assert list(inspect.signature(common.overwrite_function_params).parameters) == ["func", "params"]

    def params_function(wildcards, output):
        return None

    recorded = snakemake_adapter.per_job(params_function).__dict__[common.FUNC_OVERWRITE_PARAMS_ATTR]
    # Snakemake takes the recorded parameters rather than inspecting the function again
    assert common.get_function_params(params_function) is recorded
    assert list(recorded) == ["wildcards", "output"]


@pytest.mark.workflow
def test_untracked_is_a_derived_param_that_does_not_trigger_a_rerun(tmp_path):
    from snakemake.rules import Rule

    assert Rule._is_deriving_function(snakemake_adapter.untracked({"k": 1})), (
        "Snakemake no longer counts a params function of `output` as derived")
    (tmp_path / "Snakefile").write_text(
        "from repro.snakemake_adapter import untracked\n\n"
        "rule a:\n"
        "    output: 'a.txt'\n"
        "    params: tracked=config['shown'], hidden=untracked(config['hidden'])\n"
        "    shell: 'echo {params.tracked} {params.hidden} > {output}'\n")
    first = snakemake(tmp_path, "--config", "shown=1", "hidden=1")
    assert first.returncode == 0, first.stderr
    hidden_changed = snakemake(tmp_path, "-n", "--config", "shown=1", "hidden=2")
    assert hidden_changed.returncode == 0, hidden_changed.stderr
    assert "Nothing to be done" in hidden_changed.stdout + hidden_changed.stderr, (
        "changing an untracked param now reruns the job:\n" + hidden_changed.stdout + hidden_changed.stderr)
    tracked_changed = snakemake(tmp_path, "-n", "--config", "shown=2", "hidden=1")  # the control: a tracked param does
    assert re.search(r"^a\s+1$", tracked_changed.stdout, re.MULTILINE), tracked_changed.stdout + tracked_changed.stderr


@pytest.mark.workflow
@pytest.mark.parametrize("mode, expected", [("default", "True"), ("subprocess", "False")])
def test_is_main_process_tells_the_invocation_from_its_jobs(tmp_path, mode, expected):
    (tmp_path / "Snakefile").write_text(
        "from repro.snakemake_adapter import is_main_process\n\n"
        "print('MAIN', is_main_process(workflow))\n\n"
        "rule a:\n"
        "    output: 'a.txt'\n"
        "    shell: 'touch {output}'\n")
    proc = snakemake(tmp_path, "-n", "--mode", mode)
    assert proc.returncode == 0, proc.stderr
    assert f"MAIN {expected}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.workflow
def test_forget_incomplete_drops_the_mark_an_interrupted_job_leaves(tmp_path):
    """A Snakemake killed while its job wrote state.json leaves the file marked incomplete, and
    refuses to go on without --rerun-incomplete; with the mark forgotten, the file is taken as it is."""
    (tmp_path / "Snakefile").write_text(
        "from repro.snakemake_adapter import forget_incomplete\n\n"
        "if config.get('forget'):\n"
        "    forget_incomplete(workflow, ['state.json'])\n\n"
        "rule a:\n"
        "    output: 'state.json'\n"
        # its Snakemake killed mid-job, once it has marked the job's output (it may do so after the
        # job has started; up to 20 s)
        "    shell: 'echo {{}} > {output}; for i in $(seq 400); do ls .snakemake/incomplete 2>/dev/null | "
        "grep -qv migration && break; sleep 0.05; done; kill -KILL $PPID'\n")
    killed = snakemake(tmp_path)
    assert killed.returncode == -9 and (tmp_path / "state.json").exists(), killed.stderr
    marked = snakemake(tmp_path, "-n")
    said = marked.stdout + marked.stderr
    assert marked.returncode != 0 and "Incomplete files:\nstate.json" in said, (
        "Snakemake no longer marks an interrupted job's output incomplete:\n" + said)
    forgotten = snakemake(tmp_path, "-n", "--config", "forget=1")
    assert forgotten.returncode == 0, (
        "forget_incomplete no longer finds the mark where Snakemake keeps it:\n" + forgotten.stderr)
    assert "Nothing to be done" in forgotten.stdout + forgotten.stderr
    assert not (tmp_path / ".snakemake" / "incomplete").exists() or not any((tmp_path / ".snakemake" / "incomplete").iterdir())


def test_freeze_startup_objects_moves_them_out_of_the_collectors_walk():
    before = gc.get_freeze_count()
    kept = [[] for _ in range(1000)]
    try:
        snakemake_adapter.freeze_startup_objects()
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()


# what using a Snakemake internal looks like, outside the adapter
INTERNALS = re.compile(r"snakemake\.(common|rules|jobs|dag|persistence|workflow)\b|overwrite_function_params|"
                       r"get_function_params|\.is_main_process|gc\.freeze|_is_deriving_function|non_derived_params")


def test_only_the_adapter_uses_snakemake_internals():
    files = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk")), *sorted((REPO / "src" / "repro").rglob("*.py"))]
    found = []
    for path in files:
        if path.name == "snakemake_adapter.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if INTERNALS.search(code) and "snakemake_adapter" not in code:
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "Snakemake internals used outside repro.snakemake_adapter:\n" + "\n".join(found)
