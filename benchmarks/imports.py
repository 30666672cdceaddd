"""Import cost of the libraries that every TrIMS model load and every tf.data engine process pays,
with this environment's ml_dtypes against another release of it, measured side by side in one run.

onnx and TensorFlow import ml_dtypes (NumPy's bfloat16, float8 and int4 types) at their own
import; its release decides most of what importing onnx costs. The other release is installed once
with `pip install --target` under benchmarks/out and put first on PYTHONPATH, so the two differ in
ml_dtypes alone. Each import runs in a fresh interpreter, once per round, the order rotated each
round (benchmarks/sidebyside.py); the ratio is this environment's CPU seconds over the other's, in
the same round: its median, a 95% interval of the median and the extremes. Goal: pyproject.toml's
pin costs at most 10% more than the other release (ratio <= 1.1: two releases that cost the same
differ by a few percent of noise).

    python benchmarks/imports.py                          # against ml_dtypes 0.7.0
    python benchmarks/imports.py --against 0.5.4 --rounds 9
"""

import argparse
import importlib.metadata
import importlib.util
import os
import statistics
import subprocess
import sys
from pathlib import Path

from sidebyside import fmt_ratio, load, ratios, rounds, timed, verdict
from benchcli import count, run_main

REPO = Path(__file__).resolve().parents[1]
GOAL = 1.1
OUT = REPO / "benchmarks" / "out"
# what each process imports: the TrIMS tools' onnx, the engine's TensorFlow (as the engine imports
# it: repro.pecan.tfdata.tensorflow, Keras left out)
IMPORTS = {
    "ml_dtypes": "import ml_dtypes",
    "onnx": "import onnx",
    "tensorflow": "from repro.pecan.tfdata import tensorflow; tensorflow()",
}


def other_release(version):
    """A directory holding ml_dtypes `version` alone (installed once), to put first on PYTHONPATH;
    None where pip cannot install that release."""
    target = OUT / f"ml_dtypes-{version}"
    if not (target / "ml_dtypes").is_dir():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                               f"ml_dtypes=={version}"], capture_output=True, text=True)
        if done.returncode:
            return None
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="0.7.0", help="the other ml_dtypes release (default 0.7.0)")
    parser.add_argument("--rounds", type=count(), default=7)
    args = parser.parse_args(argv)
    other = other_release(args.against)
    if other is None:
        parser.error(f"--against {args.against}: pip could not install ml_dtypes=={args.against}; expected a release "
                     "the package registry has (pip index versions ml_dtypes)")
    installed = importlib.metadata.version("ml_dtypes")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    other_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(other), env.get("PYTHONPATH")]))}
    names = [name for name in IMPORTS if name != "tensorflow" or importlib.util.find_spec("tensorflow")]
    measurements = {}
    for name in names:
        command = [sys.executable, "-c", IMPORTS[name]]
        measurements[(name, installed)] = lambda c=command: timed(c, REPO, env)[0]
        measurements[(name, args.against)] = lambda c=command: timed(c, REPO, other_env)[0]
    print(f"ml_dtypes {installed} (this environment) against {args.against}; {args.rounds} rounds; {load()}")
    samples = rounds(measurements, args.rounds)
    for name in names:
        ours, theirs = samples[(name, installed)], samples[(name, args.against)]
        cpu = ratios(ours, theirs, 1)
        print(f"import {name:10s} CPU s: {statistics.median(c for _, c in ours):5.2f} with {installed}, "
              f"{statistics.median(c for _, c in theirs):5.2f} with {args.against}; ratio {fmt_ratio(cpu)} "
              f"goal <= {GOAL}: {verdict(cpu, GOAL)}")
    print(load())


if __name__ == "__main__":
    run_main(main)
