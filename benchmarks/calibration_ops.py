"""The local preset's RetinaNet figure under `calibration.ops: pillow` and `calibration.ops: tf`:
both pipelines calibrated each way (Pillow functions, or the TF ops the tf.data engine runs), the
cluster model's RetinaNet collocated and Cachew runs under each, and their cost per epoch against
the artifact's sample plot (collocated $0.83, Cachew $0.83 + $0.14).

    python benchmarks/calibration_ops.py [--config config/config.yaml] [--elements N] [--repeats N]
"""

import argparse
import copy
import tempfile
import time
from pathlib import Path

from repro.config import load_config
from repro.pecan.calibrate import calibrate_together
from repro.pecan.costtable import mode_row
from repro.pecan.presets import REFERENCE_PLOTS
from repro.pecan.run import run_mode
from repro.rulesettings import cost_settings
from benchcli import count, run_main

EXPERIMENT, MODES = "RetinaNet", ("collocated", "cachew")


def figure(config, calibrations, tmp):
    """{mode: total cost per epoch ($)} of the local preset's RetinaNet runs."""
    config = copy.deepcopy(config)
    config["calibration"]["preset"] = "local"
    costs = {}
    for mode in MODES:
        run_mode(config, EXPERIMENT, mode, calibrations, Path(tmp) / mode)
        row = mode_row(Path(tmp) / mode / "run.log", Path(tmp) / mode / "metrics.json", mode,
                       cost_settings(config, EXPERIMENT))
        costs[mode] = row["tpu_cost"] + row["worker_cost"]
    return costs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--elements", type=count(), help="default: calibration.elements")
    parser.add_argument("--repeats", type=count(), help="default: calibration.repeats")
    args = parser.parse_args()
    config = load_config(args.config)
    elements = args.elements or config["calibration"]["elements"]
    repeats = args.repeats or config["calibration"]["repeats"]
    reference = REFERENCE_PLOTS[EXPERIMENT]
    artifact = {mode: sum(v) if isinstance(v, list) else v for mode, v in reference.items() if mode in MODES}
    print("artifact's RetinaNet plot: " + ", ".join(f"{m} ${v:.2f}" for m, v in artifact.items()))
    for ops in ("pillow", "tf"):
        start = time.perf_counter()
        if ops == "tf":
            from repro.pecan.tfdata.calibrate import calibrate_tf

            calibrations = calibrate_tf(["resnet", "retinanet"], elements=elements, repeats=repeats)
        else:
            calibrations = calibrate_together(["resnet", "retinanet"], elements=elements, repeats=repeats)
        seconds = time.perf_counter() - start
        ratio = (calibrations["retinanet"]["declared"]["per_reference_kernel"]
                 / calibrations["resnet"]["declared"]["per_reference_kernel"])
        with tempfile.TemporaryDirectory() as tmp:
            costs = figure(config, calibrations, tmp)
        print(f"calibration.ops: {ops:<6} ({seconds:.0f} s) declared ResNet "
              f"{calibrations['resnet']['declared']['cpu_s_per_element'] * 1e3:.2f} ms, RetinaNet "
              f"{calibrations['retinanet']['declared']['cpu_s_per_element'] * 1e3:.2f} ms per element: RetinaNet "
              f"{ratio:.2f}x ResNet; local RetinaNet figure: "
              + ", ".join(f"{m} ${costs[m]:.2f} ({costs[m] / artifact[m] - 1:+.0%} from the artifact)" for m in MODES))


if __name__ == "__main__":
    run_main(main)
