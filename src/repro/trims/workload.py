"""Which model each client request asks for: popularity drawn from a distribution, or every model in turn.

With a distribution, one draw per model (scipy.stats, seeded) gives its popularity weight; the
weights are normalised to probabilities and each request picks a model from them. With
--model-iterations N (N >= 0), a model that has been picked N times drops out and the others'
probabilities are renormalised; the plan ends early when every model has reached its cap.
Without a distribution every model runs --iterations times, in sequence (capped the same way).
"""

import numpy as np
from scipy import stats

from repro.errors import ReproError

# name: (parameter names, defaults, frozen scipy distribution)
DISTRIBUTIONS = {
    "pareto": (("xm", "alpha"), (1.0, 1.5), lambda xm, alpha: stats.pareto(b=alpha, scale=xm)),
    "uniform": (("min", "max"), (0.0, 1.0), lambda low, high: stats.uniform(loc=low, scale=high - low)),
    "exponential": (("rate",), (0.5,), lambda rate: stats.expon(scale=1.0 / rate)),
    "weibull": (("k", "lambda"), (1.5, 1.0), lambda k, lam: stats.weibull_min(c=k, scale=lam)),
    "poisson": (("lambda",), (1.0,), lambda lam: stats.poisson(mu=lam)),
}


def distribution(name, params=None):
    """The frozen scipy distribution for --distribution NAME --distribution-params P..."""
    if name not in DISTRIBUTIONS:
        raise ReproError(f"--distribution: unknown distribution {name!r}; expected one of {sorted(DISTRIBUTIONS)}")
    names, defaults, make = DISTRIBUTIONS[name]
    values = list(defaults if params is None or len(params) == 0 else params)
    if len(values) != len(names):
        raise ReproError(f"--distribution-params: {name} takes {len(names)} parameter(s) ({', '.join(names)}), "
                         f"got {len(values)}")
    bad = [f"{n}={v}" for n, v in zip(names, values) if not np.isfinite(v)]
    if name == "uniform" and values[1] <= values[0]:
        bad.append(f"max={values[1]} must exceed min={values[0]}")
    elif name != "uniform":
        bad += [f"{n}={v} must be > 0" for n, v in zip(names, values) if v <= 0]
    if bad:
        raise ReproError(f"--distribution-params: out of range for {name}: {', '.join(bad)}")
    return make(*values)


def popularity(models, name, params, rng):
    """Normalised popularity weights, one draw per model."""
    draws = np.asarray(distribution(name, params).rvs(size=len(models), random_state=rng), dtype=float)
    if draws.sum() <= 0:
        draws = np.ones(len(models))  # e.g. every Poisson draw was 0: no model is preferred
    return draws / draws.sum()


def plan_requests(models, iterations, name=None, params=None, model_iterations=-1, seed=0):
    """The list of (model, iteration) requests a client makes."""
    if not models:
        raise ReproError("no models to run")
    if iterations < 1:
        raise ReproError(f"--iterations must be at least 1, got {iterations}")
    cap = None if model_iterations is None or model_iterations < 0 else model_iterations
    if name is None:
        per_model = iterations if cap is None else min(iterations, cap)
        return [(model, i) for model in models for i in range(per_model)]
    rng = np.random.default_rng(seed)
    weights = popularity(models, name, params, rng)
    counts = dict.fromkeys(models, 0)
    plan = []
    for i in range(iterations):
        if cap is not None:
            open_models = np.array([counts[m] < cap for m in models])
            if not open_models.any():
                break
            p = np.where(open_models, weights, 0.0)
            p = p / p.sum() if p.sum() > 0 else open_models / open_models.sum()
        else:
            p = weights
        model = models[rng.choice(len(models), p=p)]
        counts[model] += 1
        plan.append((model, i))
    return plan
