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
5. SimCLR and ASR (the paper's Fig 6/7 literals only): FastFlow's epoch with its 2 workers, below the
   bound, where the host's pipeline (the collocated vCPUs of step 3) and the workers both run at full
   rate: cost = (collocated vCPUs + 2 workers' vCPUs) / throughput. The AutoOrder saving is measured.

`local`: this machine's measured costs per order, times one factor that maps a core here onto
the modelled cloud vCPU running TF's pipeline: the ratio of the fitted ResNet declared cost to the
ResNet declared cost measured here. The AutoOrder saving, and RetinaNet's cost relative to
ResNet's, are therefore what this machine measured.
"""

from importlib.resources import files

import yaml

from repro.errors import ReproError


def _artifact_facts():
    """src/repro/pecan/artifact.yaml: the artifact's runs per pipeline and its reference plots."""
    text = files("repro.pecan").joinpath("artifact.yaml").read_text()
    facts = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: read at every Snakefile start
    for run in facts["runs"].values():
        source = run.pop("accelerator_bound_from", None)
        if source:  # accelerator-bound in every mode: the collocated epoch time gives the bound
            run["accelerator_bound"] = run["steps_per_epoch"] * run["batch_size"] / (
                source["collocated_cost"] / source["tpu_price"] * 3600)
    return facts


_FACTS = _artifact_facts()
ARTIFACT_RUNS = _FACTS["runs"]
REFERENCE_PLOTS = _FACTS["reference_plots"]
REFERENCE_WORKLOADS = _FACTS["reference_workloads"]  # {reference: {model, accelerator}}
PAPER_COSTS = _FACTS["paper_costs"]  # {mode: {workload: [tpu, worker]}}: the paper's Fig 6 and 7
ANCHOR = next(iter(ARTIFACT_RUNS))  # its declared cost maps a core here onto a cloud vCPU (`local`)
PRESETS = ("local", "artifact")


def reference_of_another_workload(reference, experiment, model, accelerator):
    """Why the sample plot `reference` is no reference for a figure of `experiment`, `model` on
    `accelerator` (it measured another workload: the bars were judged against the other's values,
    "outside by -431%"), or None."""
    measured = REFERENCE_WORKLOADS[reference]
    if (measured["model"], measured["accelerator"]) == (model, accelerator):
        return None
    return (f"{reference!r} holds the values of {measured['model']} on {measured['accelerator']}; experiment "
            f"{experiment!r} runs {model} on {accelerator}; expected a reference of its workload, or none")


def examples_per_second(run, epoch_s):
    return run["steps_per_epoch"] * run["batch_size"] / epoch_s


def fit_artifact(cluster, calibrations):
    """Return {pipeline: {declared, autoorder, collocated_vcpus}} fitted to the artifact's runs, for the
    pipelines the fit knows: ResNet's needs no calibration, the others their own (their AutoOrder saving)."""
    worker_vcpus, local_vcpus = cluster["remote_worker_vcpus"], cluster["local_worker_vcpus"]
    prices = cluster["policy_prices"]
    runs = ARTIFACT_RUNS["resnet"]
    bound = runs["accelerator_bound"]
    declared = runs["cachew"]["remote_workers"] * worker_vcpus / examples_per_second(runs, runs["cachew"]["epoch_s"])
    pecan = runs["pecan"]
    vcpus = pecan["remote_workers"] * worker_vcpus + pecan["local_workers"] * local_vcpus
    upper = vcpus / bound
    cost_ratio = (prices["client_cost"] + (pecan["remote_workers"] - 1) * prices["worker_cost"]) / (
        prices["client_cost"] + pecan["remote_workers"] * prices["worker_cost"]
    )
    lower = (vcpus - worker_vcpus) / (bound * cost_ratio)
    collocated_vcpus = examples_per_second(runs, runs["collocated"]["epoch_s"]) * declared
    fitted = {"resnet": {"declared": declared, "autoorder": (lower + upper) / 2, "collocated_vcpus": collocated_vcpus}}
    if "retinanet" in calibrations:
        retina = ARTIFACT_RUNS["retinanet"]
        retina_declared = (retina["cachew"]["remote_workers"] - 0.5) * worker_vcpus / retina["accelerator_bound"]
        fitted["retinanet"] = {
            "declared": retina_declared,
            "autoorder": retina_declared * (1 - calibrations["retinanet"]["autoorder_saving"]),
            "collocated_vcpus": collocated_vcpus,
        }
    for pipeline, run in ARTIFACT_RUNS.items():
        if "fastflow" in run and pipeline in calibrations:
            # FastFlow's run below the bound: the host's pipeline and its workers both at full rate
            # (repro.pecan.policies.fastflow_ratio_local splits in proportion to capacity there)
            vcpus = collocated_vcpus + run["fastflow"]["remote_workers"] * worker_vcpus
            declared_cost = vcpus / examples_per_second(run, run["fastflow"]["epoch_s"])
            fitted[pipeline] = {
                "declared": declared_cost,
                "autoorder": declared_cost * (1 - calibrations[pipeline]["autoorder_saving"]),
                "collocated_vcpus": collocated_vcpus,
            }
    return fitted


def needed_calibrations(preset, pipeline):
    """The pipelines whose calibrations a run of `pipeline` reads: its own, and under `local` the anchor's,
    whose fitted cost maps this machine's reference kernel onto a cloud vCPU."""
    return sorted({pipeline, ANCHOR}) if preset == "local" else [pipeline]


def pipeline_costs(preset, cluster, calibrations):
    """{pipeline: {declared, autoorder, collocated_vcpus, bytes_per_element}} for the chosen preset, for
    the pipelines calibrated (`local`: and the anchor calibrated too).

    `local`: each order's cost per reference kernel (repro.pecan.calibrate: fixed JPEG decodes timed
    beside every element) times one factor, the anchor's fitted declared cost over its own cost per
    kernel. Pipelines calibrated in separate jobs, minutes apart, keep their ratio through the kernel.
    """
    if preset not in PRESETS:
        raise ReproError(f"calibration preset {preset!r} is unknown; expected one of {list(PRESETS)}")
    fitted = fit_artifact(cluster, calibrations)
    if preset == "artifact":
        costs = {pipeline: entry for pipeline, entry in fitted.items() if pipeline in calibrations or pipeline == ANCHOR}
    else:
        if ANCHOR not in calibrations:
            raise ReproError(f"calibration results missing for pipeline {ANCHOR!r}, whose fitted cost scales the local preset")
        scale = fitted[ANCHOR]["declared"] / _per_kernel(calibrations[ANCHOR], "declared")
        costs = {
            pipeline: {
                "declared": _per_kernel(calibrations[pipeline], "declared") * scale,
                "autoorder": _per_kernel(calibrations[pipeline], "autoorder") * scale,
                "collocated_vcpus": fitted[ANCHOR]["collocated_vcpus"],
                "core_scale": scale,
            }
            for pipeline in calibrations
        }
    for pipeline, entry in costs.items():
        if pipeline in calibrations:
            entry["bytes_per_element"] = calibrations[pipeline]["autoorder"]["bytes_out_per_element"]
        entry["preset"] = preset
    return costs


def _per_kernel(calibration, order):
    """The order's cost per reference kernel; a calibration without a kernel (an older file): per element."""
    return calibration[order].get("per_reference_kernel", calibration[order]["cpu_s_per_element"])
