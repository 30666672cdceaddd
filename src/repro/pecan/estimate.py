"""What running the experiments on the real cluster would cost, from the cluster model, before launching."""

from repro.pecan.costs import check_price
from repro.pecan.presets import pipeline_costs
from repro.pecan.run import job_spec
from repro.pecan.cluster import simulate


def estimate(config, calibrations):
    """One row per experiment x mode: modelled hours, worker-hours and dollars for the whole run."""
    pecan = config["pecan"]
    costs = pipeline_costs(config["calibration"]["preset"], pecan["cluster"], calibrations)
    rows = []
    for experiment, exp in pecan["experiments"].items():
        tpu_price = check_price(pecan["prices"]["tpu"][pecan["accelerators"][exp["accelerator"]]["tpu_type"]], "tpu")
        worker_price = check_price(pecan["prices"]["worker"], "worker")
        for mode in exp["modes"]:
            sim = simulate(job_spec(pecan, experiment, mode, costs, config["seed"]))
            hours = sim.seconds / 3600
            worker_hours = sum(w.remote * w.seconds for w in sim.windows) / 3600
            rows.append({"experiment": experiment, "mode": mode, "hours": hours, "worker_hours": worker_hours,
                         "dollars": hours * tpu_price + worker_hours * worker_price})
    return rows


def format_estimate(rows):
    lines = [f"{'experiment':<18}{'mode':<12}{'hours':>8}{'worker-hours':>14}{'dollars':>10}"]
    for r in rows:
        lines.append(f"{r['experiment']:<18}{r['mode']:<12}{r['hours']:>8.2f}{r['worker_hours']:>14.2f}{r['dollars']:>10.2f}")
    lines.append(f"{'total':<30}{sum(r['hours'] for r in rows):>8.2f}{sum(r['worker_hours'] for r in rows):>14.2f}"
                 f"{sum(r['dollars'] for r in rows):>10.2f}")
    return "\n".join(lines)
