"""The documentation is executable: every command in the shell blocks of README.md, config/README.md
and docs/*.md (`documents()`, in that order) runs, as written, in a fresh copy of the workflow, in
order (later commands see what earlier ones built). The documents that need nothing built before
them (SEPARATE) run each in a copy of their own, from a module of their own, so that pytest-xdist (a
module per worker) runs them beside the README's; every other document runs after the README, in
the README's copy.

Snakemake commands get the tiny test config through a Snakemake profile named by SNAKEMAKE_PROFILE
(the commands themselves are not changed). A block may be marked in a document, on the line before
it, with `<!-- readme-test: dry-run: REASON -->` (it needs a cluster, a GPU or minutes of work)
or `<!-- readme-test: tfdata: REASON -->` (the same, and without the 'tfdata' extra it must fail naming it):
its commands are then only checked to plan (`snakemake --dry-run`, `make -n`), to resolve
(`pip install --dry-run`, against the package registry) or to parse (the `repro` argument parser,
`bash -n`). The commands only checked are printed with their reasons.
"""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from pathlib import Path

import pytest
from support import BIN, REPO, TINY, copy_workflow, path_env, run_stopped_as_by_ctrl_c, stop_clusters

from repro.config import load_config
from repro.pecan.calibrate import calibrate
from repro.pecan.costs import cost_row
from repro.pecan.logs import parse_log
from repro.pecan.run import run_mode

BLOCK = re.compile(r"(?:<!-- readme-test: (?P<mode>[\w-]+): (?P<reason>[^>]*) -->\n)?```(?:sh|bash)\n(?P<body>.*?)```",
                   re.S)
# tfdata: a dry-run where TensorFlow is installed (the 'tfdata' extra); without it the command
# must fail at the config check, naming the extra
MODES = ("dry-run", "tfdata")
TFDATA_MISSING = importlib.util.find_spec("tensorflow") is None


# Documents whose commands build what they need themselves: each runs in a fresh copy of its own,
# from the test module named here
SEPARATE = {"config/README.md": "test_readme_config.py", "docs/FIGURES.md": "test_readme_figures.py"}


def documents():
    """The documents whose commands run: the README, the configuration's, then docs/ by name."""
    return [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def documented_commands(names=None):
    """(document, command, mode, reason) for every command of every document (or of the documents
    `names`, as paths relative to the repository), in order."""
    return [(path.relative_to(REPO), *command) for path in documents()
            if names is None or str(path.relative_to(REPO)) in names for command in readme_commands(path.read_text())]


def chains():
    """The documents in the groups that each run in order in a fresh copy: the README with every
    document not in SEPARATE, then each of SEPARATE alone."""
    names = [str(path.relative_to(REPO)) for path in documents()]
    assert set(SEPARATE) <= set(names), f"SEPARATE names a document that is not read: {SEPARATE}"
    return [tuple(name for name in names if name not in SEPARATE), *((name,) for name in SEPARATE)]


def readme_commands(text):
    """(command, mode, reason) for every command of every shell block, in order."""
    commands = []
    for block in BLOCK.finditer(text):
        mode = block.group("mode") or "run"
        assert mode in ("run", *MODES), f"unknown readme-test mode {mode!r}"
        assert mode == "run" or block.group("reason").strip(), f"readme-test: {mode}: without a reason"
        body = re.sub(r"\s*\\\n\s*", " ", block.group("body"))
        for line in body.splitlines():
            command = line.split(" # ")[0].strip() if not line.lstrip().startswith("#") else ""
            if command:
                commands.append((command, mode, block.group("reason")))
    return commands


def test_the_readme_parser_finds_marked_and_plain_blocks():
    text = ("x\n```sh\nmake fig8    # a comment\nsnakemake a \\\n  --cores 1\n```\n"
            "<!-- readme-test: dry-run: needs SLURM -->\n```sh\n# a comment line\nsnakemake --profile p\n```\n")
    assert readme_commands(text) == [("make fig8", "run", None), ("snakemake a --cores 1", "run", None),
                                     ("snakemake --profile p", "dry-run", "needs SLURM")]


def test_every_document_is_read_and_its_marked_blocks_give_a_reason():
    read = {str(path.relative_to(REPO)) for path in documents()}
    assert {"README.md", "config/README.md", "docs/TESTING.md"} <= read
    commands = documented_commands()
    assert {str(document) for document, *_ in commands} >= {"README.md", "config/README.md", "docs/TRACES.md"}
    with pytest.raises(AssertionError, match="without a reason"):
        readme_commands("<!-- readme-test: dry-run:  -->\n```sh\nmake fig8\n```\n")


def _checked(command):
    """The check a dry-run-only command gets instead of running."""
    words = shlex.split(command)
    while "=" in words[0]:  # NAME=value before the program
        words = words[1:]
    if words[0] == "snakemake":
        return command + " --dry-run"
    if words[0] == "make":
        return "make -n " + " ".join(shlex.quote(w) for w in words[1:])
    if words[:2] == ["pip", "install"]:  # resolved, nothing installed
        return "pip install --dry-run " + " ".join(shlex.quote(w) for w in words[2:])
    if words[0] in _PARSERS:
        return f"{shlex.quote(sys.executable)} -c {shlex.quote(_PARSERS[words[0]])} " + " ".join(
            shlex.quote(w) for w in words[1:])
    return f"bash -n -c {shlex.quote(command)}"


_PARSERS = {
    "repro": "import sys; from repro.cli import build_parser; build_parser().parse_args(sys.argv[1:])",
    "trims-tools": "import sys; from repro.trims.originals import parse_command_line; parse_command_line(sys.argv[1:])",
}


def test_a_documented_pip_install_is_resolved_instead():
    assert _checked("pip install -e '.[googlebatch]'") == "pip install --dry-run -e '.[googlebatch]'"


@pytest.mark.registry
def test_the_documented_installs_resolve_as_written():
    """Each `pip install` line of the documents, as pip resolves it in this environment (with
    --dry-run: nothing changes here), and with every extra it names. The rest of
    test_every_documented_command_runs_as_written does the same, among every other command, in its copy."""
    installs = {}  # each command once, with the first document that gives it
    for document, command, _mode, _reason in documented_commands():
        if command.startswith("pip install"):
            installs.setdefault(command, document)
    assert any("[googlebatch]" in command for command in installs)
    for command, document in installs.items():
        proc = subprocess.run(["bash", "-c", _checked(command)], capture_output=True, text=True, cwd=REPO, timeout=600,
                              env=path_env())
        output = proc.stdout + proc.stderr
        if proc.returncode != 0 and "ResolutionImpossible" not in output and os.environ.get("REPRO_REQUIRE_REGISTRY") != "1":
            pytest.skip(f"the package registry is not reachable: {output.strip().splitlines()[-1:]}")
        why = [line for line in output.splitlines() if "ERROR" in line or "does not provide the extra" in line]
        assert proc.returncode == 0 and "does not provide the extra" not in output, (
            f"{document}: {command} does not install:\n" + "\n".join(why or output[-3000:].splitlines()))


@pytest.fixture
def fresh_copy(tmp_path):
    """The repository as a user clones it (without results), sharing this environment's virtualenv."""
    work = copy_workflow(tmp_path / "repo")
    for item in ("Makefile", "pyproject.toml", "README.md", "docs", "src", "benchmarks"):
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, work / item)
    stamp = BIN / "repro"
    if stamp.stat().st_mtime < (REPO / "pyproject.toml").stat().st_mtime:  # make would reinstall into this venv
        pytest.fail(f"{stamp} is older than pyproject.toml: run `make setup` (or `make test`) first")
    (work / ".venv").symlink_to(BIN.parent)
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(f"configfile: [{TINY}]\n")
    shutil.copy(TINY, work / "my.yaml")  # the README's example of "a config of your own"
    yield work, profile
    stop_clusters(work)


@pytest.mark.workflow
def test_every_documented_command_runs_as_written(fresh_copy):
    run_documents(fresh_copy, chains()[0])


def run_documents(fresh_copy, chain):
    """Every command of the documents `chain` (paths relative to the repository), in order, in the
    fresh copy: run as written, or checked where a document marks its block."""
    work, profile = fresh_copy
    commands = documented_commands(chain)
    env = path_env(SNAKEMAKE_PROFILE=str(profile), HOME=str(work.parent / "home"))
    (work.parent / "home").mkdir()
    ran, checked, took = [], [], []
    for document, command, mode, reason in commands:
        started = time.monotonic()
        if command.startswith("make test"):
            mode, reason = "dry-run", "the tests themselves (this test runs inside them)"
        script = command if mode == "run" else _checked(command)
        proc = run_stopped_as_by_ctrl_c(
            ["bash", "-c", f"export PATH={shlex.quote(str(work / '.venv' / 'bin'))}:$PATH; {script}"], 900, cwd=work,
            env=env)
        if mode == "tfdata" and TFDATA_MISSING:  # the documented refusal, naming the extra
            assert proc.returncode != 0 and "needs the 'tfdata' extra" in proc.stdout + proc.stderr, f"{document}: {command}"
        else:
            assert proc.returncode == 0, (f"{document}: command failed ({mode}): {command}\n"
                                          f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
            assert "does not provide the extra" not in proc.stderr, f"{document}: {command}: {proc.stderr[-2000:]}"
        took.append((time.monotonic() - started, f"{document}: {command}"))
        if mode == "run":
            ran.append(command)
        else:
            checked.append(f"  {document}: {command}  [{mode}: {reason}]")
    print(f"documents: {len(ran)} commands run, {len(checked)} checked by dry-run/parse only, as not runnable here:",
          *checked, "slowest:", *(f"  {t:6.1f} s  {c}" for t, c in sorted(took, reverse=True)[:5]), sep="\n")
    assert ran, f"{chain}: no command ran"
    if "README.md" in chain:
        assert len(ran) >= 10 and (work / "plots" / "fig8_ResNet50_v2-8.pdf").exists()
        assert (work / "report.html").stat().st_size > 100_000


def test_the_documents_run_in_chains_that_cover_each_once():
    covered = [name for chain in chains() for name in chain]
    assert sorted(covered) == sorted(str(path.relative_to(REPO)) for path in documents())
    assert chains()[0][0] == "README.md" and ("docs/FIGURES.md",) in chains()
    for document, module in SEPARATE.items():  # each separate document is run by its module
        assert f'run_documents(fresh_copy, ("{document}",))' in (Path(__file__).parent / module).read_text(), module


def test_the_readmes_artifact_preset_numbers_are_what_the_code_computes(tmp_path):
    config = load_config(REPO / "config" / "config.yaml")
    config["calibration"]["preset"] = "artifact"
    calibrations = {p: calibrate(p, elements=2, repeats=1) for p in ("resnet", "retinanet")}
    rows = {}
    for mode in ("collocated", "cachew", "pecan"):
        run_mode(config, "ResNet50_v2-8", mode, calibrations, tmp_path / mode)
        rows[mode] = cost_row(parse_log(tmp_path / mode / "run.log"), mode, "resnet", config["pecan"]["models"]["resnet"],
                              4.96, 0.42)
    readme = " ".join((REPO / "README.md").read_text().split())
    colloc, pecan, cachew = rows["collocated"], rows["pecan"], rows["cachew"]
    for claim in (f"collocated {colloc['epoch_time']:.0f} s/epoch, ${colloc['tpu_cost']:.2f}",
                  f"Pecan {pecan['local_workers']} local + {pecan['remote_workers']} remote, {pecan['epoch_time']:.0f} s, "
                  f"${pecan['tpu_cost']:.2f} + ${pecan['worker_cost']:.2f}",
                  f"{cachew['remote_workers']} remote workers, {cachew['epoch_time']:.0f} s, "
                  f"${cachew['tpu_cost']:.2f} + ${cachew['worker_cost']:.2f}"):
        assert claim in readme, f"README does not say what the code computes: {claim!r}"
