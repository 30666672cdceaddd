"""The settings each Snakemake rule passes as `params`: exactly those its output depends on, so
Snakemake reruns a job when, and only when, a setting it uses changes. A rule hands them to the
`repro` command as JSON text (`--settings {params.settings:q}`, read back by `settings_argument`).
"""

import copy

# the rules import these from here with the settings functions
from repro.settings import Settings, settings_argument, settings_digest, settings_keys  # noqa: F401


def calibrated_pipelines(config):
    """The pipelines measured: those of the configured models, and the local preset's anchor."""
    from repro.pecan.presets import ANCHOR

    return sorted({model["pipeline"] for model in config["pecan"]["models"].values()} | {ANCHOR})


def experiment_pipelines(config, experiments):
    """The pipelines whose calibrations the runs of `experiments` read (repro.pecan.presets.needed_calibrations)."""
    from repro.pecan.costs import experiment_pipeline
    from repro.pecan.presets import needed_calibrations

    pecan, preset = config["pecan"], config["calibration"]["preset"]
    return sorted({p for e in experiments for p in needed_calibrations(preset, experiment_pipeline(pecan, e))})


def cluster_settings(config):
    """What `cluster_start` reads: the backend, the trace store, the backend's own section and the engine
    when it has a service to start."""
    from repro.pecan.engines import ENGINES

    settings = Settings(backend=config["backend"], trace_store=config["trace_store"])
    if ENGINES[config["pecan"]["engine"]].start_service:  # the cluster runs the engine's service
        settings["engine"] = config["pecan"]["engine"]
    if config["backend"] in config:
        settings[config["backend"]] = config[config["backend"]]
    return settings


def trims_store_settings(config):
    """What the TrIMS model store is started with."""
    return Settings(base_path=config["trims"]["base_path"], server=config["trims"]["server"])


def run_settings(config, experiment, mode):
    """The config subset one Pecan run reads (prices excluded: they only affect cost tables). The engine
    is here and in no other rule's settings: switching it reruns the runs and what reads them."""
    from repro.pecan.costs import experiment_mode
    from repro.pecan.engines import ENGINES

    pecan = config["pecan"]
    exp, _ = experiment_mode(pecan, experiment, mode)  # a mode the experiment does not list: no run
    engine = {"engine": pecan["engine"]}
    section = ENGINES[pecan["engine"]].section
    if section:  # an engine's own settings matter to its runs only
        # (but the tf.data engine's `sweep`, which the sweep rule reads, not a run)
        engine[section] = {key: value for key, value in pecan[section].items() if key != "sweep"}
    return _experiment_settings(config, experiment, mode, engine)


def sweep_settings(config, experiment):
    """What `repro pecan tfdata sweep` reads for one experiment: what its runs read, in SWEEP_MODE's
    pipeline order, and the tf.data engine's settings with the counts."""
    return _experiment_settings(config, experiment, SWEEP_MODE,
                                {"engine": "tfdata", "tfdata": config["pecan"].get("tfdata", {})})


SWEEP_MODE = "cachew"  # the sweep's runs hold workers fixed: only this mode's pipeline order matters


def _experiment_settings(config, experiment, mode, engine):
    pecan = config["pecan"]
    exp = pecan["experiments"][experiment]
    return Settings({
        "seed": config["seed"],
        "repeats": config["repeats"],
        "calibration": {"preset": config["calibration"]["preset"]},
        "pecan": {
            "experiments": {experiment: copy.deepcopy(exp)},
            "models": {exp["model"]: pecan["models"][exp["model"]]},
            # the accelerator's bound for this model only: another model's entry is no concern of this run
            # (keys in a fixed order: a config merged from several files may list them in another)
            "accelerators": {exp["accelerator"]: {
                "tpu_type": pecan["accelerators"][exp["accelerator"]]["tpu_type"],
                "max_batches_per_s": {exp["model"]: pecan["accelerators"][exp["accelerator"]]["max_batches_per_s"][exp["model"]]},
            }},
            "modes": {mode: pecan["modes"][mode]},
            "cluster": pecan["cluster"],
            **engine,
        },
    })


def cost_settings(config, experiment):
    pecan = config["pecan"]
    exp = pecan["experiments"][experiment]
    accel = pecan["accelerators"][exp["accelerator"]]
    return Settings({
        "experiment": experiment,
        "model_name": exp["model"],
        "model": pecan["models"][exp["model"]],
        "tpu_price": pecan["prices"]["tpu"][accel["tpu_type"]],
        "worker_price": pecan["prices"]["worker"],
    })


def figure_settings(config, figure):
    from repro.pecan.engines import ENGINES

    spec = config["plots"]["figures"][figure]
    engine = ENGINES[config["pecan"]["engine"]]
    workload = config["pecan"]["experiments"][spec["experiment"]]
    return Settings({
        "experiment": spec["experiment"],
        "model": workload["model"],  # what the reference's workload must be
        "accelerator": workload["accelerator"],
        "engine_caption": engine.caption(config["pecan"], spec["experiment"]) if engine.caption else None,
        # what the engine-fed model moves each element over (the caption's machine limits)
        "network_gbps": config["pecan"]["cluster"]["network_gbps"] if engine.caption else None,
        "reference": spec.get("reference"),
        "modes": spec.get("modes"),
        "style": config["plots"]["style"],
        "backend": config["backend"],
        "preset": config["calibration"]["preset"],
    })


def comparison_settings(config, name):
    """What a figure over several workloads (plots.comparisons) reads besides its table."""
    from repro.pecan.engines import ENGINES

    spec = config["plots"]["comparisons"][name]
    engine = ENGINES[config["pecan"]["engine"]]
    return Settings({
        "option": spec["option"],
        "workloads": spec["workloads"],
        "engine_caption": engine.caption(config["pecan"], spec["workloads"]) if engine.caption else None,
        "style": config["plots"]["style"],
        "backend": config["backend"],
        "preset": config["calibration"]["preset"],
    })


def estimate_settings(config):
    """What the cluster model's cost estimate reads: the pecan section, the seed and the preset."""
    return Settings(pecan=config["pecan"], seed=config["seed"], calibration={"preset": config["calibration"]["preset"]})


def provenance_settings(config, figure):
    """Every setting a figure depends on, for its provenance record (and so its rerun trigger)."""
    if figure in config["plots"]["comparisons"]:
        workloads = config["plots"]["comparisons"][figure]["workloads"]
        return Settings({
            "figure": comparison_settings(config, figure),
            "calibration": config["calibration"],
            "costs": {workload: cost_settings(config, workload) for workload in workloads},
            "runs": {workload: {mode: run_settings(config, workload, mode)
                                for mode in config["pecan"]["experiments"][workload]["modes"]} for workload in workloads},
        })
    if figure not in config["plots"]["figures"]:
        return Settings(trims=config["trims"], backend=config["backend"], style=config["plots"]["style"])
    experiment = config["plots"]["figures"][figure]["experiment"]
    return Settings({
        "figure": figure_settings(config, figure),
        "calibration": config["calibration"],
        "costs": cost_settings(config, experiment),
        "runs": {mode: run_settings(config, experiment, mode)
                 for mode in config["pecan"]["experiments"][experiment]["modes"]},
    })


def caption(backend, preset, calibrations, engine_caption=None):
    """Say what produced the bars: the engine when it is not the cluster model, else the backend, the
    calibration preset and where the pipelines were measured."""
    from repro.backends import get_backend

    if engine_caption:
        return f"{engine_caption}; backend={backend}"
    machine = next(iter(calibrations.values())).get("machine") if calibrations else {}
    machine = machine if isinstance(machine, dict) else {}  # a calibration that does not say: unknown
    where = f"{machine.get('cpu_model', 'unknown CPU')}, {machine.get('logical_cpus', '?')} CPUs"
    # the artifact preset fits the costs to the artifact's runs; only RetinaNet's AutoOrder saving
    # is taken from the calibration (repro.pecan.presets.fit_artifact)
    measured = (f"costs fitted to the artifact's runs, RetinaNet's AutoOrder saving measured on {where}"
                if preset == "artifact" else f"pipelines measured on {where}")
    return get_backend(backend).caption(preset, measured)


def trims_distribution(config, name):
    """The parameters of the TrIMS request distribution `name`."""
    return config["trims"]["distributions"]["runs"][name]


def trims_models(config):
    """The models of the selected TrIMS model set."""
    trims = config["trims"]
    return trims["models"][trims["model_set"]]


def trims_client_settings(config, experiment):
    """What a TrIMS client run reads: client flags, seed and the experiment's request counts."""
    trims = config["trims"]
    settings = Settings({**trims["client"], "seed": trims["seed"], "server": trims["server"]})
    settings["iterations"] = trims[experiment]["iterations"]
    return settings
