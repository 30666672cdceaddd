"""Fault injection at the inputs: files that never end or never open (devices, FIFOs, files without
line breaks), YAML that expands or nests without bound or repeats a key, finite but absurd numbers,
settings that lack what a command reads, calibrations that divide by zero.

Each row of `INPUT_FAULTS` runs `repro` and requires exit code 1 (2 for argparse's usage errors),
exactly one line on stderr matching `error` (naming the file, key or flag), no new, changed or
deleted file under the test's directory and no process left running. A row that could fill the
memory or never end on a regression (`bounded`) runs in a child process with the growth of its
address space limited and a deadline, so that a regression fails the test instead of the machine.
The child is forked from the test's process, which has imported `repro` already: each row pays no
interpreter start (the command line's own process behaviour is tested in test_faults.py).
"""

import json
import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import psutil
import pytest
import yaml
from support import REPO, configfiles, copy_workflow, run_forked, run_repro, snakemake, snapshot

from repro.cli import main

pytestmark = pytest.mark.fault

CONFIG = REPO / "config" / "config.yaml"
LOGS = REPO / "tests" / "fixtures" / "pecan-logs"
MEMORY_LIMIT = 2 << 30  # address space of a bounded run: far below what the unbounded reads reached (8-9.6 GB)
FILE_LIMIT = 256 << 20  # the largest file a bounded run may write: an endless copy ends there, not at a full disk
DEADLINE_S = 60  # a bounded run's wall clock; the anchor bomb spun past it


@dataclass(frozen=True)
class Fault:
    id: str
    prepare: Callable  # (ctx) -> the `repro` arguments; ctx.dir is the test's directory (the cwd)
    error: str  # regular expression the single stderr line must match from its start
    bounded: bool = False  # run in a child process with MEMORY_LIMIT and DEADLINE_S
    code: int = 1


def _write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


def _fifo(ctx, name="fifo"):
    path = ctx.dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return str(path)


def _sparse(ctx, name, size):
    """A regular file of `size` bytes, all zeros and no line break, that takes no disk space."""
    path = ctx.dir / name
    with open(path, "wb") as fh:
        fh.truncate(size)
    return str(path)


def _check(text, name="my.yaml"):
    """`repro config check` of the file `name` holding `text` over the workflow's config."""
    return lambda ctx: ["config", "check", "--base", str(CONFIG), _write(ctx.dir / name, text)]


def _check_override(override):
    return _check(yaml.safe_dump(override))


def _anchor_bomb(levels=9):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _ssh(run):
    return {"backend": "ssh", "ssh": {"known_hosts": "known_hosts", "run": run,
                                      "hosts": {"accelerator": {"address": "a", "user": "u", "key_file": "k"}}}}


def _calibration(pipeline, cost=0.01, size=10, saving=0.1, drawn=True, **extra):
    orders = {order: {"cpu_s_per_element": c, "bytes_out_per_element": size,
                      **({"element_cpu_s": [c, c]} if drawn else {})}
              for order, c in (("declared", cost), ("autoorder", cost * (1 - saving) if cost == cost else cost))}
    return json.dumps({"pipeline": pipeline, "autoorder_saving": saving, **orders, **extra}, allow_nan=True)


def _pecan_run(resnet, retinanet=None, mode="pecan", earlier=False):
    """`repro pecan run` with the calibrations given (JSON text, or a callable giving a path)."""
    def prepare(ctx):
        paths = []
        for name, content in (("resnet", resnet), ("retinanet", retinanet or _calibration("retinanet"))):
            paths.append(content(ctx) if callable(content) else _write(ctx.dir / f"{name}.json", content))
        if earlier:
            _write(ctx.dir / "run" / "run.log", "I0101 00:00:00.000000 140000000000000 keras_utils.py:145] repro local "
                                                "model: experiment=ResNet50_v2-8 mode=pecan\n")  # an earlier run's
        return ["pecan", "run", "--config", str(CONFIG), "--experiment", "ResNet50_v2-8", "--mode", mode,
                "--calibration", *paths, "--out", str(ctx.dir / "run")]

    return prepare


def _costs(log):
    return lambda ctx: ["pecan", "costs", log(ctx), "--config", str(CONFIG), "--experiment", "ResNet50_v2-8",
                        "-o", str(ctx.dir / "costs.csv")]


def _tiny_throughput_log(zeros):
    def prepare(ctx):
        lines = [f"I0101 00:00:{i:02d}.000000 1 keras_utils.py:145] TimeHistory: 1.00 seconds, 0.{'0' * zeros}1 "
                 f"examples/second between steps {i * 100} and {(i + 1) * 100}" for i in range(3)]
        return _write(ctx.dir / "tiny.log", "\n".join(lines) + "\n")

    return prepare


def _results(calibration=None, table=None, itself=False):
    """Two results/ directories for compare-results (`itself`: one, given twice): the calibrations and
    tables its figures read."""
    def prepare(ctx):
        given = [_results_directory(ctx.dir / name, calibration, table)
                 for name in ("results", "other")[:1 + (not itself)]]
        return ["pecan", "compare-results", str(given[0]), str(given[-1]), "--config", str(CONFIG),
                *(f"--figure={figure}" for figure in ("Getting_started", "fig8_ResNet50_v2-8", "RetinaNet"))]

    return prepare


def _results_directory(results, calibration, table):
    """One results/ directory of _results."""
    for pipeline in ("resnet", "retinanet"):
        path = results / "calibration" / f"{pipeline}.json"
        if pipeline == "resnet" and calibration is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            calibration(path)
        else:
            _write(path, _calibration(pipeline))
    for experiment in ("Getting_started", "ResNet50_v2-8", "RetinaNet"):
        path = results / "tables" / f"{experiment}.csv"
        if table is not None and experiment == "Getting_started":
            path.parent.mkdir(parents=True, exist_ok=True)
            table(path)
        else:
            _write(path, "mode,tpu_cost_mean\nshort,1.0\n")
    return results


def _settings_command(*argv):
    return lambda ctx: [a.format(dir=ctx.dir) for a in argv]


def _metrics(content):
    def prepare(ctx):
        return ["pecan", "validation", "E", "--metrics", content(ctx) if callable(content) else _write(ctx.dir / "m.json", content),
                "--calibration", _write(ctx.dir / "resnet.json", _calibration("resnet")),
                "--network-gbps", "32", "--style", "{}", "--output", str(ctx.dir / "v.pdf"), str(ctx.dir / "v.png"),
                "--table", str(ctx.dir / "v.csv")]

    return prepare


def _cost_table(metrics=None, summary=None):
    def prepare(ctx):
        settings = json.dumps({"model_name": "resnet", "model": {"batch_size": 1024, "steps_per_epoch": 1251},
                               "tpu_price": 4.96, "worker_price": 0.42})
        metrics_path = metrics(ctx) if callable(metrics) else _write(ctx.dir / "metrics.json", metrics or '{"repeats": []}')
        summary_path = summary(ctx) if callable(summary) else _write(
            ctx.dir / "summary.json", summary or '{"traces": [{"mode": "collocated"}]}')
        return ["pecan", "cost-table", "--settings", settings, "--mode", "collocated", "--log",
                str(LOGS / "resnet_colloc.log"), "--metrics", metrics_path, "--summary", summary_path,
                "-o", str(ctx.dir / "table.csv")]

    return prepare



def _node(ctx, kind, name="out"):
    """An output path that exists and is no regular file: a character device (a copy of /dev/null made
    here, never a real /dev entry), a FIFO, or a symlink to a file of this directory."""
    path = ctx.dir / name
    if kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        _write(ctx.dir / "linked.json", "{}")
        path.symlink_to(ctx.dir / "linked.json")
    return str(path)


NODE_KINDS = {"device": "a character device", "fifo": "a FIFO", "symlink": "a symbolic link"}


def _output_node_faults():
    """Each command that writes a file, its output path a device, FIFO or symlink: refused by name
    before it runs, the node left as it was (a rename over it replaced it, /dev/full included)."""
    commands = {
        "provenance-o": lambda out: ["provenance", "--settings", "{}", "-o", out, str(CONFIG)],
        "cluster-start-state": lambda out: ["cluster", "start", "--settings", "{}", "--state", out],
        "trims-store-start-state": lambda out: ["trims", "store", "start", "--settings", "{}", "--state", out],
        "trims-client-results": lambda out: ["trims", "client", "run", "--socket", "/nonexistent/s.sock",
                                             "--model", "m", "--iterations", "1", "--results", out],
        "pecan-calibrate-o": lambda out: ["pecan", "calibrate", "--pipeline", "resnet", "--elements", "1",
                                          "--repeats", "1", "-o", out],
        "trace-combine-o": lambda out: ["trace", "combine", str(CONFIG), "-o", out],
    }
    flags = {"provenance-o": "-o/--output", "cluster-start-state": "--state", "trims-store-start-state": "--state",
             "trims-client-results": "--results", "pecan-calibrate-o": "-o/--output", "trace-combine-o": "-o/--output"}
    return [Fault(f"{name}-{kind}", lambda ctx, command=command, kind=kind: command(_node(ctx, kind)),
                  rf"repro: error: {re.escape(flags[name])} .*/out: is {NODE_KINDS[kind]}; expected a regular file",
                  bounded=True)
            for name, command in commands.items() for kind in NODE_KINDS]



def _state_faults():
    """JSON state and summary files given as FIFOs, /dev/zero, or nested 100,000 deep: refused by
    name, never read whole or waited on."""
    deep = lambda ctx: _write(ctx.dir / "deep.json", "[" * 100_000)  # noqa: E731
    readers = {
        "cluster-status-state": lambda state: ["cluster", "status", "--state", state],
        "cluster-stop-state": lambda state: ["cluster", "stop", "--state", state],
        "trims-store-status-state": lambda state: ["trims", "store", "status", "--state", state, "--expect", "x",
                                                   "-o", "status.json"],
        "trims-experiment-compare-store": lambda state: ["trims", "experiment", "compare", "m", "--store", state,
                                                         "--settings", "{}", "--out", "exp"],
        "trims-plot-summary": lambda state: ["trims", "plot", "trims_model_load", "--summary", state, "--style", "{}",
                                             "--output", "p.pdf", "p.png"],
    }
    files = {"fifo": (_fifo, r"is a FIFO; expected a regular file"),
             "dev-zero": (lambda ctx: "/dev/zero", r"is a character device; expected a regular file"),
             "deep": (deep, r"nested too deeply")}
    return [Fault(f"{name}-{kind}", lambda ctx, argv=argv, make=make: argv(make(ctx)), rf"repro: error: \S+: {error}",
                  bounded=True)
            for name, argv in readers.items() for kind, (make, error) in files.items()]


def _trims_summary(content, figure="trims_model_load"):
    return lambda ctx: ["trims", "plot", figure, "--summary", _write(ctx.dir / "summary.json", content), "--style", "{}",
                        "--output", "p.pdf", "p.png"]


SUMMARY = "the TrIMS summary JSON that trims summary writes"



HUGE_INT = "seed: " + "9" * 5000 + "\n"  # past int()'s 4300-digit conversion limit
RECURSIVE = "a: &a [*a]\n"  # a list that holds itself


def _yaml_readers():
    """Every YAML reader of the command line, given an integer of 5000 digits or a recursive alias:
    one line naming the file and line (the config check, the tool config, a Snakemake profile)."""
    def profile(text):
        def prepare(ctx):
            _write(ctx.dir / "profile" / "config.yaml", text)
            return ["doctor", "--profile", str(ctx.dir / "profile")]
        return prepare

    readers = {
        "config-check": lambda text: _check(text),
        "trims-config": lambda text: lambda ctx: ["trims", "config", "--config", _write(ctx.dir / "t.yaml", text)],
        "trims-client-run-config": lambda text: lambda ctx: ["trims", "client", "run", "--model", "m", "--iterations", "1",
                                                             "--config", _write(ctx.dir / "t.yaml", text)],
        "doctor-profile": profile,
    }
    texts = {"int-5000-digits": (HUGE_INT, r"line 1: an integer of 5000 characters; expected a number of at most \d+"),
             "int-hex-5000-digits": ("seed: 0x" + "f" * 5000 + "\n", r"line 1: an integer of 5002 characters"),
             "recursive-alias": (RECURSIVE, r"line 1: alias \*a refers to a collection that holds it"),
             "recursive-mapping": ("a: &a {b: *a}\n", r"line 1: alias \*a refers to a collection that holds it")}
    return [Fault(f"{name}-{kind}", make(text), rf"repro: error: \S+\.yaml: {error}", bounded=True)
            for name, make in readers.items() for kind, (text, error) in texts.items()]


LONG_NAME = "E" * 600
RUN = {"model": "resnet", "accelerator": "v2-8", "modes": ["collocated"]}

INPUT_FAULTS = [
    # -- inputs that never end or never open: refused by name, not read -------------------------
    Fault("combine-dev-zero", lambda ctx: ["trace", "combine", "/dev/zero", "-o", str(ctx.dir / "c.json")],
          r"repro: error: /dev/zero: is a character device; expected a regular file \(a Chrome trace\)", bounded=True),
    Fault("combine-fifo", lambda ctx: ["trace", "combine", _fifo(ctx), "-o", str(ctx.dir / "c.json")],
          r"repro: error: .*/fifo: is a FIFO; expected a regular file", bounded=True),
    Fault("summarize-dev-zero", lambda ctx: ["trace", "summarize", "/dev/zero", "-o", str(ctx.dir / "s.json")],
          r"repro: error: /dev/zero: is a character device", bounded=True),
    Fault("summarize-fifo", lambda ctx: ["trace", "summarize", _fifo(ctx), "-o", str(ctx.dir / "s.json")],
          r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("summarize-original-fifo",
          lambda ctx: ["trace", "summarize", "--format", "original", _fifo(ctx), "-o", str(ctx.dir / "s.json")],
          r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("validate-fifo", lambda ctx: ["trace", "validate", _fifo(ctx)], r"INVALID .*/fifo: is a FIFO", bounded=True),
    Fault("costs-dev-zero", _costs(lambda ctx: "--path=/dev/zero"),
          r"repro: error: /dev/zero: is a character device; expected a regular file \(a training log\)", bounded=True),
    Fault("costs-fifo", _costs(_fifo), r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("costs-log-without-line-breaks", _costs(lambda ctx: _sparse(ctx, "flat.log", 3 << 30)),
          r"repro: error: .*/flat.log:1: line longer than \d+ characters", bounded=True),
    Fault("run-calibration-fifo", _pecan_run(_fifo), r"repro: error: --calibration .*/fifo: is a FIFO", bounded=True),
    Fault("run-calibration-dev-zero", _pecan_run(lambda ctx: "/dev/zero"),
          r"repro: error: --calibration /dev/zero: is a character device", bounded=True),
    Fault("summarize-trace-beyond-the-address-space", lambda ctx: ["trace", "summarize", _sparse(ctx, "huge.json", 3 << 30)],
          r"repro: error: .*/huge.json: cannot map it into memory \(Cannot allocate memory\)$", bounded=True),
    Fault("run-calibration-huge", _pecan_run(lambda ctx: _sparse(ctx, "huge.json", 3 << 30)),
          r"repro: error: --calibration .*/huge.json: larger than \d+ MiB", bounded=True),
    Fault("run-settings-fifo",
          lambda ctx: ["pecan", "run", "--settings", _fifo(ctx), "--experiment", "E", "--mode", "m", "--calibration",
                       str(ctx.dir / "c.json"), "--out", str(ctx.dir / "run")],
          r"repro: error: --settings .*/fifo: is a FIFO", bounded=True),
    Fault("download-receipt-fifo", lambda ctx: ["trace", "download", _fifo(ctx), "-o", str(ctx.dir / "dl")],
          r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("provenance-input-fifo", lambda ctx: ["provenance", _fifo(ctx), "--settings", "{}", "-o", str(ctx.dir / "p.json")],
          r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("cost-table-metrics-fifo", _cost_table(metrics=_fifo), r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("validation-metrics-dev-zero", _metrics(lambda ctx: "/dev/zero"),
          r"repro: error: --metrics /dev/zero: is a character device", bounded=True),
    # "15 of 15 numbers within tolerance": a directory against itself
    Fault("compare-results-a-directory-with-itself", _results(itself=True),
          r"repro: error: .*/results: the same directory as .*/results; expected two results/ directories$"),
    Fault("compare-results-calibration-fifo", _results(calibration=lambda path: os.mkfifo(path)),
          r"repro: error: .*/resnet.json: is a FIFO", bounded=True),
    Fault("compare-results-table-fifo", _results(table=lambda path: os.mkfifo(path)),
          r"repro: error: .*/Getting_started.csv: is a FIFO", bounded=True),
    Fault("figure-table-fifo",
          lambda ctx: ["pecan", "figure", "F", "--table", _fifo(ctx), "--calibration",
                       _write(ctx.dir / "r.json", _calibration("resnet")), "--settings",
                       json.dumps({"reference": None, "backend": "local", "preset": "local", "engine_caption": None,
                                   "experiment": "E", "style": {"font_size": 9, "width_in": 5, "height_in": 3.6,
                                                                "dpi": 100, "show_reference": False}}),
                       "--output", str(ctx.dir / "f.pdf"), str(ctx.dir / "f.png"), "--verdicts", str(ctx.dir / "v.csv")],
          r"repro: error: .*/fifo: is a FIFO", bounded=True),
    Fault("calibrate-a-billion-elements",
          lambda ctx: ["pecan", "calibrate", "--pipeline", "resnet", "--elements", "1000000000", "-o", str(ctx.dir / "c.json")],
          r"repro: error: --elements: expected 1 to \d+, got 1000000000", bounded=True),
    # -- config files: YAML that expands or nests without bound, a key written twice --------------
    Fault("config-anchor-bomb", _check(_anchor_bomb()),
          r"repro: error: .*/my.yaml: line \d+: more than \d+ values with its aliases expanded", bounded=True),
    Fault("config-check-fifo", lambda ctx: ["config", "check", "--base", str(CONFIG), _fifo(ctx)],
          r"repro: error: .*/fifo: is a FIFO; expected a regular file \(a YAML config\)", bounded=True),
    Fault("config-base-fifo", lambda ctx: ["config", "check", "--base", _fifo(ctx)], r"repro: error: .*/fifo: is a FIFO",
          bounded=True),
    Fault("config-check-dev-zero", lambda ctx: ["config", "check", "--base", str(CONFIG), "/dev/zero"],
          r"repro: error: /dev/zero: is a character device", bounded=True),
    Fault("config-larger-than-its-bound", _check("# padding\n" * 600_000),
          r"repro: error: .*/my.yaml: larger than 4 MiB; expected a YAML config"),
    Fault("config-nested-5000-lists", _check("seed: " + "[" * 5000 + "]" * 5000 + "\n"),
          r"repro: error: .*/my.yaml: line 1: nested more than 64 levels deep"),
    Fault("config-nested-5000-mappings", _check("seed: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"),
          r"repro: error: .*/my.yaml: line 1: nested more than 64 levels deep"),
    Fault("config-duplicate-key", _check("seed: 1\nrepeats: 2\nseed: 3\n"),
          r"repro: error: .*/my.yaml: key 'seed' appears twice, at line 1 and line 3"),
    Fault("config-duplicate-nested-key", _check("pecan:\n  prices:\n    worker: 0.4\n    tpu: {v2: 1}\n    worker: 9\n"),
          r"repro: error: .*/my.yaml: key 'worker' appears twice, at line 3 and line 5"),
    Fault("config-duplicate-key-in-flow-mapping",
          _check("pecan:\n  models:\n    resnet: {pipeline: resnet, batch_size: 1, steps_per_epoch: 1, batch_size: 2}\n"),
          r"repro: error: .*/my.yaml: key 'batch_size' appears twice, at line 3 and line 3"),
    Fault("config-base-duplicate-key", lambda ctx: ["config", "check", "--base", _write(
        ctx.dir / "base.yaml", CONFIG.read_text() + "\nseed: 7\n")],
          r"repro: error: .*/base.yaml: key 'seed' appears twice, at line \d+ and line \d+"),
    # -- whole numbers written as floats: jsonschema's `integer` took them, range() and << did not ----
    *[Fault(f"config-{key.replace('.', '-')}-a-float", _check(text),
            rf"repro: error: .*/my.yaml: {re.escape(key)}: {value} is not of type 'integer'$")
      for key, value, text in [
          ("repeats", "20.0", "repeats: 20.0\n"), ("seed", "1.0", "seed: 1.0\n"),
          ("trims.server.memory_mb", "512.0", "trims:\n  server:\n    memory_mb: 512.0\n"),
          ("trims.compare.iterations", "5.0", "trims:\n  compare:\n    iterations: 5.0\n"),
          ("pecan.models.resnet.steps_per_epoch", "1251.0",
           "pecan:\n  models:\n    resnet: {pipeline: resnet, batch_size: 1024, steps_per_epoch: 1251.0}\n")]],
    # -- finite but absurd numbers, strings and names: refused at the check ------------------------
    Fault("worker-price-1e308", _check("pecan:\n  prices:\n    worker: 1.0e+308\n"),
          r"repro: error: .*: pecan.prices.worker: 1e\+308 is greater than the maximum of"),
    Fault("tpu-price-1e308", _check("pecan:\n  prices:\n    tpu: {v2: 1.0e+308, v3: 1}\n"),
          r"repro: error: .*: pecan.prices.tpu.v2: 1e\+308 is greater than the maximum of"),
    Fault("dpi-1e9", _check_override({"plots": {"style": {"dpi": 10**9}}}),
          r"repro: error: .*: plots.style.dpi: 1000000000 is greater than the maximum of 1200"),
    Fault("width-1e300", _check_override({"plots": {"style": {"width_in": 1e300}}}),
          r"repro: error: .*: plots.style.width_in: 1e\+300 is greater than the maximum of 100"),
    Fault("height-1e300", _check_override({"plots": {"style": {"height_in": 1e300}}}),
          r"repro: error: .*: plots.style.height_in: 1e\+300 is greater than the maximum of 100"),
    Fault("font-size-1e300", _check_override({"plots": {"style": {"font_size": 1e300}}}),
          r"repro: error: .*: plots.style.font_size: 1e\+300 is greater than the maximum of 100"),
    Fault("figure-of-324-million-pixels", _check_override({"plots": {"style": {"width_in": 90, "dpi": 1000}}}),
          r"repro: error: .*: plots.style: 90 x 3.6 in at 1000 dpi is 324000000 pixels; expected at most"),
    Fault("concurrency-1e30", _check_override({"trims": {"distributions": {"concurrency": [10**30]}}}),
          r"repro: error: .*: trims.distributions.concurrency.0: 10{30} is greater than the maximum of"),
    Fault("pareto-1e308", _check_override({"trims": {"distributions": {"runs": {"pareto": [1e308, 1e308]}}}}),
          r"repro: error: .*: trims.distributions.runs.pareto.0: 1e\+308 is greater than the maximum of"),
    Fault("pareto-empty", _check_override({"trims": {"distributions": {"runs": {"pareto": []}}}}),
          r"repro: error: .*: trims.distributions.runs.pareto: \[\] should be non-empty"),
    Fault("uniform-three-parameters", _check_override({"trims": {"distributions": {"runs": {"uniform": [0, 1, 2]}}}}),
          r"repro: error: .*: trims.distributions.runs.uniform: \[0, 1, 2\] is too long"),
    Fault("base-path-wildcard", _check_override({"trims": {"base_path": "results/{x}"}}),
          r"repro: error: .*: trims.base_path: 'results/\{x\}' holds a brace"),
    Fault("asset-store-wildcard", _check_override({"trims": {"asset_store": "results/{x}"}}),
          r"repro: error: .*: trims.asset_store: 'results/\{x\}' holds a brace"),
    Fault("trace-store-wildcard", _check_override({"trace_store": "results/{x}/store"}),
          r"repro: error: .*: trace_store: 'results/\{x\}/store' holds a brace"),
    Fault("experiment-name-600-characters", _check_override({"pecan": {"experiments": {LONG_NAME: RUN}}}),
          r"repro: error: .*: pecan.experiments: 'EEEE.*\(\d+ characters left out\).*EEEE' is too long$"),
    Fault("reproducibility-figure-unknown", _check_override({"reproducibility": {"figures": ["fig8_ResNet50_v2-8", "nosuch"]}}),
          r"repro: error: .*: reproducibility.figures: unknown figure\(s\) \['nosuch'\]; expected some of \['AutoOrder_Cost'"),
    Fault("figure-name-600-characters", _check_override({"plots": {"figures": {LONG_NAME: {"experiment": "RetinaNet"}}}}),
          r"repro: error: .*: plots.figures: 'EEEE.*is too long"),
    Fault("mode-name-600-characters", _check_override({"pecan": {"modes": {LONG_NAME: {
        "placement": "collocated", "autoorder": False, "epochs": 1, "steps_per_loop": 1}}}}),
          r"repro: error: .*: pecan.modes: 'EEEE.*is too long"),
    Fault("a-billion-epochs", _check_override({"pecan": {"modes": {"pecan": {
        "placement": "autoplacement", "autoorder": True, "epochs": 10**9, "steps_per_loop": 500}}}}),
          r"repro: error: .*: pecan.experiments.ResNet50_v2-8.modes: mode 'pecan' runs \d+ steps, \d+ policy windows"),
    Fault("one-step-per-log-line", _check_override({"pecan": {"models": {"resnet": {
        "pipeline": "resnet", "batch_size": 1, "steps_per_epoch": 10**8}}}}),
          r"repro: error: .*: pecan.experiments.\w+.modes: mode '\w+' runs \d+ steps"),
    Fault("a-trillion-remote-workers", _check_override({"pecan": {"cluster": {"max_remote_workers": 10**12}}}),
          r"repro: error: .*: pecan.cluster.max_remote_workers: 1000000000000 is greater than the maximum of 4096"),
    Fault("accelerator-1e308-batches", _check_override({"pecan": {"accelerators": {"v2-8": {
        "tpu_type": "v2", "max_batches_per_s": {"resnet": 1e308, "retinanet": 1}}}}}),
          r"repro: error: .*: pecan.accelerators.v2-8.max_batches_per_s.resnet: 1e\+308 is greater than the maximum"),
    Fault("a-billion-repeats", _check_override({"repeats": 10**9}),
          r"repro: error: .*: repeats: 1000000000 is greater than the maximum of 10000"),
    Fault("a-billion-calibration-elements", _check_override({"calibration": {"elements": 10**9}}),
          r"repro: error: .*: calibration.elements: 1000000000 is greater than the maximum of 10000"),
    Fault("ssh-command-unknown-placeholder", _check_override(_ssh({"command": "{python} {nope}"})),
          r"repro: error: .*: ssh.run.command: unknown placeholder \{nope\} in '\{python\} \{nope\}'; expected some of"),
    Fault("ssh-command-attribute-placeholder", _check_override(_ssh({"command": "{python.__class__}"})),
          r"repro: error: .*: ssh.run.command: unknown placeholder \{python.__class__\}"),
    Fault("ssh-env-unbalanced-brace", _check_override(_ssh({"env": {"X": "{mode"}})),
          r"repro: error: .*: ssh.run.env.X: expected '\}' before end of string in '\{mode'"),
    # ResNet-50's bars judged against RetinaNet's values: "outside by -431%"
    Fault("figure-reference-of-another-workload",
          _check_override({"plots": {"figures": {"X": {"experiment": "ResNet50_v2-8", "reference": "RetinaNet"}}}}),
          r"repro: error: .*: plots.figures.X.reference: 'RetinaNet' holds the values of retinanet on v2-8; experiment "
          r"'ResNet50_v2-8' runs resnet on v2-8; expected a reference of its workload, or none$"),
    # passed the check; `check-reproducibility` then failed naming "unknown pipeline(s) []"
    Fault("reproducibility-of-no-figure", _check_override({"reproducibility": {"figures": []}}),
          r"repro: error: .*: reproducibility.figures: \[\] should be non-empty"),
    # passed the check; the backend refused it only as the first run started
    Fault("ssh-env-name-no-variable", _check_override(_ssh({"env": {"A;B": "x"}})),
          r"repro: error: .*: ssh.run.env: 'A;B' does not match"),
    # -- numbers that divide by zero or overflow later: refused before anything is written ----------
    Fault("calibration-zero-cost", _pecan_run(_calibration("resnet", cost=0.0)),
          r"repro: error: --calibration .*/resnet.json: declared.cpu_s_per_element is 0.0; expected a positive number"),
    Fault("calibration-cost-past-float", _pecan_run(_calibration("resnet").replace(": 0.01,", ": 1" + "0" * 400 + ",", 1)),
          r"repro: error: --calibration .*/resnet.json: declared.cpu_s_per_element is 10{400}; expected a positive number"),
    Fault("calibration-saving-past-float", _pecan_run(_calibration("resnet").replace(": 0.1,", ": -1" + "0" * 400 + ",", 1)),
          r"repro: error: --calibration .*/resnet.json: autoorder_saving is -10{400}; expected a finite fraction below 1"),
    Fault("calibration-tf-cost-of-1e300-s", _pecan_run(_calibration("resnet", tf_ops={"declared": {"cpu_s_per_element": 1e300}})),
          r"repro: error: --calibration .*/resnet.json: tf_ops.declared.cpu_s_per_element: expected a positive number "
          r"of CPU seconds, 1e-09 to 3600$"),
    Fault("calibration-cost-of-1e-320-s", _pecan_run(_calibration("resnet", cost=1e-320)),
          r"repro: error: --calibration .*/resnet.json: declared.cpu_s_per_element is 1e-320; expected a positive number "
          r"of CPU seconds, 1e-09 to 3600$"),
    Fault("calibration-nan-cost", _pecan_run(_calibration("resnet", cost=float("nan"))),
          r"repro: error: --calibration .*/resnet.json: not JSON \(NaN is not a number JSON holds"),
    Fault("calibration-zero-bytes", _pecan_run(_calibration("resnet", size=0)),
          r"repro: error: --calibration .*/resnet.json: declared.bytes_out_per_element is 0; expected a positive number"),
    Fault("calibration-duplicate-key", _pecan_run(_calibration("resnet")[:-1] + ', "autoorder_saving": 0.99}'),
          r"repro: error: --calibration .*/resnet.json: not JSON \(key 'autoorder_saving' appears twice in one object"),
    Fault("settings-duplicate-key", _settings_command("provenance", "x", "--settings", '{{"a": 1, "a": 2}}', "-o", "{dir}/p.json"),
          r"repro provenance: error: argument --settings: not JSON \(key 'a' appears twice in one object\)", code=2),
    Fault("calibration-nested-20000-deep", _pecan_run('{"a": ' + "[" * 20000 + "]" * 20000 + "}"),
          r"repro: error: --calibration .*/resnet.json: nested too deeply"),
    Fault("failed-run-keeps-the-earlier-log", _pecan_run(_calibration("resnet", drawn=False), earlier=True),
          r"repro: error: calibration of 'resnet' has no per-element costs"),
    Fault("costs-overflow-to-infinity", lambda ctx: [*_costs(_tiny_throughput_log(300))(ctx), "--tpu-count", "4096"],
          r"repro: error: .*/tiny.log: 1e-301 examples/second prices an epoch at \$inf; expected at most \$1e\+09"),
    Fault("costs-throughput-rounds-to-nothing", _costs(_tiny_throughput_log(320)),
          r"repro: error: .*/tiny.log: \S+ examples/second is 0 batches/second of 1024; expected a throughput"),
    Fault("plot-costs-1e308", lambda ctx: ["pecan", "plot", "-t", "1e308", "1e308", "1e308", "-o", str(ctx.dir / "p")],
          r"repro: error: -t/-c: costs must be non-negative numbers of dollars, at most"),
    # -- settings given by hand --------------------------------------------------------------------
    Fault("estimate-settings-empty", lambda ctx: ["pecan", "estimate", "--settings", "{}", "--calibration", *(
        _write(ctx.dir / f"{p}.json", _calibration(p)) for p in ("resnet", "retinanet"))],
          r"repro: error: --settings: lacks key 'pecan'"),
    Fault("check-reproducibility-settings-empty",
          _settings_command("pecan", "check-reproducibility", "--settings", "{{}}", "--scratch", "{dir}/s", "-o", "{dir}/o.csv"),
          r"repro: error: --settings: lacks key 'reproducibility'"),
    Fault("cluster-start-settings-empty", _settings_command("cluster", "start", "--settings", "{{}}", "--state", "{dir}/st.json"),
          r"repro: error: --settings: lacks key 'backend'"),
    Fault("settings-nested-50000-deep",
          _settings_command("provenance", "x", "--settings", "[" * 50000, "-o", "{dir}/p.json"),
          r"repro provenance: error: argument --settings: nested too deeply", code=2),
    Fault("validation-metrics-without-spec", _metrics('{"engine": "tfdata"}'),
          r"repro: error: .*/m.json: spec: expected an object: the run's settings, as the engine writes them$"),
    Fault("cost-table-summary-traces-a-number", _cost_table(summary='{"traces": 5}'),
          r"repro: error: .*/summary.json: not a trace summary"),
    Fault("cost-table-repeats-of-numbers", _cost_table(metrics='{"repeats": [1, 2]}'),
          r"repro: error: .*/metrics.json: no 'repeats' list of parsed logs"),
    *_output_node_faults(),
    *_state_faults(),
    *_yaml_readers(),
    *(Fault(f"tfdata-start-port-{name}", lambda ctx, port=port: ["pecan", "tfdata", "start", "--state-dir", "sd", f"--port={port}"],
            rf"repro pecan tfdata start: error: argument --port: expected a port number from 0 \(any free port\) to 65535, got '{port}'",
            code=2, bounded=True)
      for name, port in (("negative", -1), ("70000", 70000), ("overflow", "9" * 23))),
    Fault("trace-summarize-model-name-a-list",
          lambda ctx: ["trace", "summarize", _write(ctx.dir / "t.json", json.dumps({
              "traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
              "otherData": {"model_name": ["a"]}})), "-o", "s.json"],
          r"repro: error: .*/t.json: otherData.model_name: expected a string, number or true/false, got list"),
    Fault("trims-plot-summary-brace", _trims_summary("{"), rf"repro: error: .*/summary.json: not JSON \(expected {SUMMARY}\)"),
    Fault("trims-plot-summary-empty", _trims_summary(""), rf"repro: error: .*/summary.json: not JSON \(expected {SUMMARY}\)"),
    Fault("trims-plot-summary-text", _trims_summary("hello"), r"repro: error: .*/summary.json: not JSON"),
    Fault("trims-plot-summary-binary", _trims_summary(bytes(range(256))), r"repro: error: .*/summary.json: not JSON"),
    Fault("trims-plot-summary-list", _trims_summary("[]"),
          rf"repro: error: .*/summary.json: expected a JSON object \({SUMMARY}\), got list"),
    Fault("trims-plot-summary-no-compare", _trims_summary("{}"),
          r"repro: error: .*/summary.json: compare: expected a non-empty list of table rows"),
    Fault("trims-plot-summary-no-distributions", _trims_summary('{"compare": []}', "trims_distributions"),
          r"repro: error: .*/summary.json: distributions: expected a non-empty list of table rows"),
    Fault("trims-plot-summary-row-lacks-a-field", _trims_summary('{"compare": [{"model": "m"}]}'),
          r"repro: error: .*/summary.json: compare\[0\]\.speedup: expected a number from 0 to 1e\+09, got None"),
]


def _run_bounded(argv, work):
    """(exit code, stdout, stderr) of `repro ARGV` in a child forked from the test's process (cwd
    `work`): its address space can grow by MEMORY_LIMIT at most, its files by FILE_LIMIT, and it must
    end within DEADLINE_S, or the test fails."""
    try:
        return run_forked(argv, work, DEADLINE_S, growth=MEMORY_LIMIT, file_size=FILE_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"repro {' '.join(argv)[:200]} did not end within {DEADLINE_S} s")


@pytest.mark.parametrize("fault", INPUT_FAULTS, ids=[f.id for f in INPUT_FAULTS])
def test_input_fault(fault, tmp_path, monkeypatch, capsys):
    check_fault(fault, tmp_path, monkeypatch, capsys)


def check_fault(fault, tmp_path, monkeypatch, capsys):
    """Run `fault` as the module docstring says and require what it says (the other fault files' rows too)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [str(a) for a in fault.prepare(SimpleNamespace(dir=work))]
    before = snapshot(work)
    children = {p.pid for p in psutil.Process().children(recursive=True)}

    code, _, err = _run_bounded(argv, work) if fault.bounded else run_repro(argv, capsys)

    lines = err.strip().splitlines()
    if code == 2 and lines and lines[0].startswith("usage:"):  # argparse's usage errors: its usage (wrapped) first
        lines = lines[1:]
        while lines and lines[0].startswith(" "):
            lines = lines[1:]
    assert code == fault.code, f"exit code {code}; stderr: {err[-3000:]}"
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err[-3000:]}"
    assert re.match(fault.error, lines[0]), lines[0][:1000]
    assert snapshot(work) == before, "files were written, changed or deleted"
    left = {p.pid for p in psutil.Process().children(recursive=True)} - children
    assert not left, f"processes left running: {left}"


# -- the same files through Snakemake ------------------------------------------------------------


@pytest.mark.workflow
@pytest.mark.parametrize("override, error", [
    ({"trims": {"base_path": "results/{x}"}}, r"trims.base_path: 'results/\{x\}' holds a brace"),
    ({"pecan": {"experiments": {LONG_NAME: RUN}}}, r"pecan.experiments: 'EEEE.*\(\d+ characters left out\)"),
], ids=["base-path-wildcard", "experiment-name-600-characters"])
def test_snakemake_refuses_the_config_by_key(tmp_path, override, error):
    work = copy_workflow(tmp_path / "work")
    proc = snakemake(work, "-n", *configfiles(work, override), check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(error, out), out[-3000:]
    assert "WildcardError" not in out and "RecursionError" not in out


@pytest.mark.workflow
def test_snakemake_refuses_an_anchor_bomb_in_bounded_time(tmp_path):
    work = copy_workflow(tmp_path / "work")
    (work / "bomb.yaml").write_text(_anchor_bomb())
    proc = snakemake(work, "-n", "--configfile", str(work / "bomb.yaml"), check=False, timeout=DEADLINE_S * 3)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and re.search(r"bomb.yaml: line \d+: more than \d+ values with its aliases expanded",
                                              out), out[-3000:]


# -- the loader harden-trims and others reuse ---------------------------------------------------


@pytest.mark.fault
@pytest.mark.parametrize("text, error", [
    # libyaml takes a tab after a value; PyYAML, which reads --configfile for Snakemake, refuses it
    ("backend: local\t\n", "line 1, column 15: found character '\\t' that cannot start any token"),
    ("seed: 2001-02-30\n", "line 1: not a !!timestamp value: '2001-02-30'; expected a value its tag can hold"),
    ("seed: 3\nplots:\n  style: {dpi: !!int abc}\n", "line 3: not a !!int value: 'abc'"),
    ("seed: !!bool maybe\n", "line 1: not a !!bool value: 'maybe'"),
    ("seed: !!int ''\n", "line 1: not a !!int value: ''"),
    ("seed: !!set [1]\n", "a collection its tag cannot hold (cannot unpack non-iterable ScalarNode object); expected a "
                          "mapping or list as written, without a tag"),
])
def test_a_config_its_parser_refuses_or_whose_tag_cannot_make_its_value_is_one_line(tmp_path, capsys, text, error):
    """`repro config check` refuses what Snakemake's own reading of --configfile refuses, and a value
    its tag cannot make (Python's ValueError and the like, in PyYAML's constructors) is named with
    its line, not a traceback."""
    path = _write(tmp_path / "mine.yaml", text)
    code, out, err = run_repro(["config", "check", path], capsys)
    assert (code, out) == (1, "") and err.startswith(f"repro: error: {path}: ") and error in err, err
    assert err.count("\n") == 1


def test_merge_keys_and_anchors_within_bounds_still_load(tmp_path):
    from repro.yamlfile import read_yaml_file

    path = Path(_write(tmp_path / "ok.yaml", "base: &b {x: 1, y: [1, 2]}\nuse:\n  <<: *b\n  z: 3\nagain: *b\n"))
    assert read_yaml_file(path) == {"base": {"x": 1, "y": [1, 2]}, "use": {"x": 1, "y": [1, 2], "z": 3},
                                    "again": {"x": 1, "y": [1, 2]}}


@pytest.mark.parametrize("kind", sorted(NODE_KINDS))
def test_atomic_write_refuses_a_node_it_would_replace(tmp_path, kind):
    """The shared writer itself, for the callers no flag declaration covers."""
    from repro.errors import ReproError
    from repro.fsutil import write_json

    path = _node(SimpleNamespace(dir=tmp_path), kind)
    mode = os.lstat(path).st_mode
    with pytest.raises(ReproError, match=f"out: is {NODE_KINDS[kind]}; expected a regular file"):
        write_json(path, {"a": 1})
    assert os.lstat(path).st_mode == mode
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_fresh_directory_empties_only_what_it_made(tmp_path):
    """Made and marked; made again, its earlier content goes (its temporary files too); an empty
    directory of the user's is taken, one holding the user's files is refused and kept, and so is
    one it made where the user has put a file since (deleted with it before)."""
    import re

    from repro.errors import ReproError
    from repro.fsutil import fresh_directory

    written = re.compile(r"(?:m/)?[^/]+\.json")
    made = fresh_directory(tmp_path / "a" / "b", "--out", written)
    _write(made / "old.json", "{}")
    _write(made / "m" / "old.json", "{}")
    _write(made / "m" / ".old.json.abcd_123.tmp", "{")
    assert not (fresh_directory(made, "--out", written) / "old.json").exists()
    (tmp_path / "empty").mkdir()
    fresh_directory(tmp_path / "empty", "--out", written)
    _write(tmp_path / "users" / "keep.txt", "the user's")
    with pytest.raises(ReproError, match=r"--out .*users: holds files this command did not write"):
        fresh_directory(tmp_path / "users", "--out", written)
    assert (tmp_path / "users" / "keep.txt").read_text() == "the user's"
    for put in ("added.txt", "m/deep/added.json"):
        _write(made / put, "the user's")
        with pytest.raises(ReproError, match=rf"--out .*b: holds {put}, which this command does not write; it may be "
                                             "yours: move it, or name another directory$"):
            fresh_directory(made, "--out", written)
        assert (made / put).read_text() == "the user's"
        (made / put).unlink()
    (made / "link").symlink_to(tmp_path / "users")
    with pytest.raises(ReproError, match=r"holds link, which"):
        fresh_directory(made, "--out", written)


@pytest.mark.fault
@pytest.mark.parametrize("key", [5, None, ["a"]])
def test_a_receipt_whose_key_is_not_a_name_is_refused(tmp_path, capsys, key):

    receipt = tmp_path / "upload.json"
    receipt.write_text(json.dumps({"store": str(tmp_path / "store"), "objects": [{"key": key, "sha256": "0" * 64}]}))
    code = main(["trace", "download", "-o", str(tmp_path / "out"), str(receipt)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "not an upload receipt" in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.fault
@pytest.mark.parametrize("key", ["../secret.json", "traces/../../secret.json", "/tmp/secret.json", "traces//t.json",
                                 "./t.json", "a\\..\\secret.json", ""])
def test_a_receipt_key_that_leaves_the_store_is_refused(tmp_path, capsys, key):
    """A key naming a file beside the store, with a matching checksum beside it, is not read."""
    from repro.fsutil import sha256_file

    secret = tmp_path / "secret.json"
    secret.write_text('{"traceEvents": []}')
    (tmp_path / "secret.json.sha256").write_text(sha256_file(secret) + "\n")
    (tmp_path / "store" / "traces").mkdir(parents=True)
    receipt = tmp_path / "upload.json"
    receipt.write_text(json.dumps({"store": str(tmp_path / "store"),
                                   "objects": [{"key": key, "sha256": sha256_file(secret)}]}))
    code = main(["trace", "download", "-o", str(tmp_path / "out"), str(receipt)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "expected a relative path of plain names" in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.fault
def test_a_store_object_that_is_a_symlink_out_of_the_store_is_refused(tmp_path, capsys):
    from repro.fsutil import sha256_file

    secret = tmp_path / "secret.json"
    secret.write_text('{"traceEvents": []}')
    (tmp_path / "store" / "traces").mkdir(parents=True)
    (tmp_path / "store" / "traces" / "t.json").symlink_to(secret)
    (tmp_path / "store" / "traces" / "t.json.sha256").write_text(sha256_file(secret) + "\n")
    receipt = tmp_path / "upload.json"
    receipt.write_text(json.dumps({"store": str(tmp_path / "store"),
                                   "objects": [{"key": "traces/t.json", "sha256": sha256_file(secret)}]}))
    code = main(["trace", "download", "-o", str(tmp_path / "out"), str(receipt)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "leads outside the store" in err[0], err
    assert not (tmp_path / "out").exists()
