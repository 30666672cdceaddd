"""Per-element preprocessing costs for the cluster model: the `artifact` fit and the `local` preset.

Costs are vCPU-seconds per element on the modelled cloud machines.

`artifact`: fitted to the original cloud runs (the converged results of the artifact's sample
logs, and its reference plot for RetinaNet), with these steps:
1. ResNet declared-order cost: the Cachew run is not accelerator-bound (2827 < 3234 examples/s),
   so its remote workers are the bottleneck: cost = workers x vCPUs per worker / throughput.
2. ResNet AutoOrder cost: Pecan converged with L local + R remote workers at the accelerator
   bound. R+L workers must reach the bound (an upper limit on the cost), and removing one more
   remote worker must not have paid off under the policy's own cost test (a lower limit); the fit
   takes the middle of that interval.
3. Collocated host capacity: the collocated run's throughput x the declared-order cost gives
   the vCPUs the host effectively spends on preprocessing (about 21 of the TPU VM's 96: the
   input pipeline shares the host with the training loop).
4. RetinaNet (reference plot only): accelerator-bound in every mode; Cachew's worker cost of
   0.14 $ means 2 workers, so 2 workers reach the bound and 1 does not: cost = 1.5 workers' vCPUs
   / bound. Its AutoOrder saving is not visible in the plot and is taken from the local measurement.

`local`: this machine's measured costs per order, times one factor that maps a core here onto
the modelled cloud vCPU running TF's pipeline: the ratio of the fitted ResNet declared cost to the
ResNet declared cost measured here. The AutoOrder saving, and RetinaNet's cost relative to
ResNet's, are therefore what this machine measured.
"""

from repro.errors import ReproError

# Converged results of the artifact's runs (pecan-artifact.yaml sample_log_results and
# reference_plots; reproduced from the fixture logs by repro.pecan.logs in the tests).
ARTIFACT_RUNS = {
    "resnet": {
        "collocated": {"epoch_s": 3212.50},
        "cachew": {"epoch_s": 453.14, "remote_workers": 19},
        "pecan": {"epoch_s": 396.12, "remote_workers": 4, "local_workers": 10},
    },
    "retinanet": {"cachew": {"remote_workers": 2}},
}
PRESETS = ("local", "artifact")


def examples_per_second(model, epoch_s):
    return model["steps_per_epoch"] * model["batch_size"] / epoch_s


def fit_artifact(models, accelerator, cluster, calibrations):
    """Return {pipeline: {declared, autoorder, collocated_vcpus}} fitted to the artifact runs."""
    worker_vcpus, local_vcpus = cluster["remote_worker_vcpus"], cluster["local_worker_vcpus"]
    prices = cluster["policy_prices"]
    resnet, runs = models["resnet"], ARTIFACT_RUNS["resnet"]
    bound = accelerator["max_batches_per_s"]["resnet"] * resnet["batch_size"]
    declared = runs["cachew"]["remote_workers"] * worker_vcpus / examples_per_second(resnet, runs["cachew"]["epoch_s"])
    pecan = runs["pecan"]
    vcpus = pecan["remote_workers"] * worker_vcpus + pecan["local_workers"] * local_vcpus
    upper = vcpus / bound
    cost_ratio = (prices["client_cost"] + (pecan["remote_workers"] - 1) * prices["worker_cost"]) / (
        prices["client_cost"] + pecan["remote_workers"] * prices["worker_cost"]
    )
    lower = (vcpus - worker_vcpus) / (bound * cost_ratio)
    collocated_vcpus = examples_per_second(resnet, runs["collocated"]["epoch_s"]) * declared
    fitted = {"resnet": {"declared": declared, "autoorder": (lower + upper) / 2, "collocated_vcpus": collocated_vcpus}}
    retina_bound = accelerator["max_batches_per_s"]["retinanet"] * models["retinanet"]["batch_size"]
    retina_workers = ARTIFACT_RUNS["retinanet"]["cachew"]["remote_workers"]
    retina_declared = (retina_workers - 0.5) * worker_vcpus / retina_bound
    saving = calibrations["retinanet"]["autoorder_saving"]
    fitted["retinanet"] = {
        "declared": retina_declared,
        "autoorder": retina_declared * (1 - saving),
        "collocated_vcpus": collocated_vcpus,
    }
    return fitted


def pipeline_costs(preset, models, accelerator, cluster, calibrations):
    """{pipeline: {declared, autoorder, collocated_vcpus, bytes_per_element}} for the chosen preset."""
    if preset not in PRESETS:
        raise ReproError(f"calibration preset {preset!r} is unknown; expected one of {list(PRESETS)}")
    missing = [p for p in ("resnet", "retinanet") if p not in calibrations]
    if missing:
        raise ReproError(f"calibration results missing for pipelines {missing}")
    fitted = fit_artifact(models, accelerator, cluster, calibrations)
    if preset == "artifact":
        costs = fitted
    else:
        scale = fitted["resnet"]["declared"] / calibrations["resnet"]["declared"]["cpu_s_per_element"]
        costs = {
            pipeline: {
                "declared": calibrations[pipeline]["declared"]["cpu_s_per_element"] * scale,
                "autoorder": calibrations[pipeline]["autoorder"]["cpu_s_per_element"] * scale,
                "collocated_vcpus": fitted["resnet"]["collocated_vcpus"],
                "core_scale": scale,
            }
            for pipeline in calibrations
        }
    for pipeline, entry in costs.items():
        entry["bytes_per_element"] = calibrations[pipeline]["autoorder"]["bytes_out_per_element"]
        entry["preset"] = preset
    return costs
