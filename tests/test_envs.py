"""Software environments that can be built: the conda environment file resolves the package from
where Snakemake creates it, and a plain (non-editable) install of the package runs the workflow."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml
from support import REPO, configfiles, copy_workflow, run_stopped_as_by_ctrl_c, stop_clusters

# Snakemake writes each environment's file to <workdir>/.snakemake/conda/<hash>_.yaml (its
# persistence module's conda_env_path; deployment/conda.py) and conda runs pip from that directory.
SNAKEMAKE_CONDA_DIR = Path(".snakemake") / "conda"


def test_the_conda_environment_installs_this_package_from_where_snakemake_creates_it():
    env = yaml.safe_load((REPO / "envs" / "repro.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    local = [entry for entry in pip if "==" not in entry]
    assert local, "envs/repro.yaml does not install the package itself"
    for entry in local:
        assert not entry.startswith("-e"), "an editable install would point into .snakemake/conda"
        resolved = (REPO / SNAKEMAKE_CONDA_DIR / entry).resolve()
        assert resolved == REPO
        assert tomllib.loads((resolved / "pyproject.toml").read_text())["project"]["name"] == "repro"


@pytest.mark.workflow
def test_a_non_editable_install_runs_the_workflow(tmp_path):
    """`pip install .` (a copy of the package, schema included) in a fresh virtualenv; the dependencies
    come from this environment's site-packages so that the test needs no download."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = tmp_path / "source"  # a clean copy: building in place would leave build/ in the repository
    source.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / item, source / item)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", str(source)],
                   check=True, cwd=tmp_path)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import repro; print(repro.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(site)), where  # the installed copy, not the source tree
    work = copy_workflow(tmp_path / "work")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # the environment not activated: its repro found all the same
    try:
        proc = run_stopped_as_by_ctrl_c([str(venv / "bin" / "python"), "-m", "snakemake", "plots/Getting_started.pdf",
                                         "--cores", "1", *configfiles(work)], 600, cwd=work, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (work / "plots" / "Getting_started.pdf").stat().st_size > 1000
    finally:
        stop_clusters(work)


def test_the_rules_find_repro_in_the_environment_snakemake_runs_from(tmp_path):
    from repro.commandpath import own_bin_first, put_own_bin_first

    venv_bin, other = tmp_path / "venv" / "bin", tmp_path / "other"
    venv_bin.mkdir(parents=True)
    python = venv_bin / "python"
    assert own_bin_first("/usr/bin:/bin", python) == "/usr/bin:/bin"  # no repro there: PATH as it was
    (venv_bin / "repro").touch()
    assert own_bin_first("/usr/bin:/bin", python) == f"{venv_bin}:/usr/bin:/bin"
    assert own_bin_first(f"{other}:{venv_bin}:/bin", python) == f"{venv_bin}:{other}:/bin"  # first, once
    assert own_bin_first("", python) == str(venv_bin)
    environ = {"PATH": "/bin"}
    put_own_bin_first(environ)  # what the workflow does at start, with its own interpreter
    assert environ["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_numpy_starts_no_blas_threads_in_the_packages_processes_unless_the_user_sets_them():
    """Importing repro before numpy (as every command does) leaves numpy's OpenBLAS one thread: no
    thread pool started at import, none spinning beside a calibration. (Snakemake's own process
    imports numpy first; it sets the count for each job itself.) A count the user set, under any of
    the three names OpenBLAS reads, is kept, and gives the pool its threads: what the thread count
    here would show without the setting."""
    import numpy

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: OpenBLAS starts no second thread either way")
    blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    if "openblas" not in blas.lower():
        pytest.skip(f"numpy's BLAS is {blas}, not OpenBLAS")
    script = "import repro, numpy, os; print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))"
    names = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    env = {name: value for name, value in os.environ.items() if name not in names}

    def run(**extra):
        return subprocess.run([sys.executable, "-c", script], env={**env, **extra}, capture_output=True, text=True,
                              check=True).stdout.split()

    assert run() == ["1", "1"]
    assert run(OPENBLAS_NUM_THREADS="2") == ["2", "2"]
    assert run(OMP_NUM_THREADS="2") == ["None", "2"]
    assert run(GOTO_NUM_THREADS="2") == ["None", "2"]
