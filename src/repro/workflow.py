"""What the Snakemake rules need from the configuration: exactly the settings each output depends on.

Rules pass these as `params`, so Snakemake reruns a job when, and only when, a setting it
uses changes.
"""

import copy


def run_settings(config, experiment, mode):
    """The config subset one Pecan run reads (prices excluded: they only affect cost tables)."""
    pecan = config["pecan"]
    exp = pecan["experiments"][experiment]
    return {
        "seed": config["seed"],
        "repeats": config["repeats"],
        "calibration": {"preset": config["calibration"]["preset"]},
        "pecan": {
            "experiments": {experiment: copy.deepcopy(exp)},
            "models": {exp["model"]: pecan["models"][exp["model"]]},
            "accelerators": {exp["accelerator"]: pecan["accelerators"][exp["accelerator"]]},
            "modes": {mode: pecan["modes"][mode]},
            "cluster": pecan["cluster"],
        },
    }


def cost_settings(config, experiment):
    pecan = config["pecan"]
    exp = pecan["experiments"][experiment]
    accel = pecan["accelerators"][exp["accelerator"]]
    return {
        "model_name": exp["model"],
        "model": pecan["models"][exp["model"]],
        "tpu_price": pecan["prices"]["tpu"][accel["tpu_type"]],
        "worker_price": pecan["prices"]["worker"],
    }


def figure_settings(config, figure):
    spec = config["plots"]["figures"][figure]
    return {
        "experiment": spec["experiment"],
        "reference": spec.get("reference"),
        "style": config["plots"]["style"],
        "backend": config["backend"],
        "preset": config["calibration"]["preset"],
    }


def caption(backend, preset, calibrations):
    """Say what produced the bars: the backend, the calibration preset and where it was measured."""
    machine = next(iter(calibrations.values()))["machine"] if calibrations else {}
    where = f"{machine.get('cpu_model', 'unknown CPU')}, {machine.get('logical_cpus', '?')} CPUs"
    if backend == "local":
        return f"local model (backend=local, calibration={preset}; pipelines measured on {where}); triangles: the artifact's reference values"
    return f"backend={backend}, calibration={preset}"


def trims_models(config):
    """The models of the selected TrIMS model set."""
    trims = config["trims"]
    return trims["models"][trims["model_set"]]


def trims_client_settings(config, experiment):
    """What a TrIMS client run reads: client flags, seed and the experiment's request counts."""
    trims = config["trims"]
    settings = {**trims["client"], "seed": trims["seed"], "server": trims["server"]}
    settings["iterations"] = trims[experiment]["iterations"]
    return settings
