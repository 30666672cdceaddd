"""Which model each client request asks for: popularity drawn from a distribution, or every model in turn.

With a distribution, one draw per model (scipy.stats, seeded) gives its popularity weight; the
weights are normalised to probabilities and each request picks a model from them. With
--model-iterations N (N >= 0), a model that has been picked N times drops out and the others'
probabilities are renormalised; the plan ends early when every model has reached its cap.
Without a distribution every model runs --iterations times, in sequence (capped the same way).
"""

import math
from typing import Callable, NamedTuple

from repro.errors import ReproError


class Distribution(NamedTuple):
    """A request distribution: its parameters (names, defaults) and the scipy.stats law they give."""

    params: tuple
    defaults: tuple
    frozen: Callable  # (scipy.stats, *params) -> frozen distribution
    ordered: bool = False  # a (low, high) range; otherwise every parameter must be > 0


# The registry: names and parameter counts come from here without importing scipy (a second
# of start-up for every Snakemake invocation, whose config check only needs the names).
DISTRIBUTIONS = {
    "pareto": Distribution(("xm", "alpha"), (1.0, 1.5), lambda stats, xm, alpha: stats.pareto(b=alpha, scale=xm)),
    "uniform": Distribution(("min", "max"), (0.0, 1.0),
                            lambda stats, low, high: stats.uniform(loc=low, scale=high - low), ordered=True),
    "exponential": Distribution(("rate",), (0.5,), lambda stats, rate: stats.expon(scale=1.0 / rate)),
    "weibull": Distribution(("k", "lambda"), (1.5, 1.0), lambda stats, k, lam: stats.weibull_min(c=k, scale=lam)),
    "poisson": Distribution(("lambda",), (1.0,), lambda stats, lam: stats.poisson(mu=lam)),
}


def check_params(name, params=None):
    """The parameter values of --distribution NAME --distribution-params P... (defaults if none);
    raise ReproError naming the flag and what is out of range."""
    if name not in DISTRIBUTIONS:
        raise ReproError(f"--distribution: unknown distribution {name!r}; expected one of {sorted(DISTRIBUTIONS)}")
    spec = DISTRIBUTIONS[name]
    values = list(spec.defaults if params is None or len(params) == 0 else params)
    if len(values) != len(spec.params):
        raise ReproError(f"--distribution-params: {name} takes {len(spec.params)} parameter(s) "
                         f"({', '.join(spec.params)}), got {len(values)}")
    bad = [f"{n}={v}" for n, v in zip(spec.params, values) if not math.isfinite(v)]
    if spec.ordered and values[1] <= values[0]:
        bad.append(f"{spec.params[1]}={values[1]} must exceed {spec.params[0]}={values[0]}")
    elif spec.ordered and values[0] < 0:  # its draws are the popularity weights: none below 0
        bad.append(f"{spec.params[0]}={values[0]} must be >= 0")
    elif not spec.ordered:
        bad += [f"{n}={v} must be > 0" for n, v in zip(spec.params, values) if v <= 0]
    if bad:
        raise ReproError(f"--distribution-params: out of range for {name}: {', '.join(bad)}")
    return values


def distribution(name, params=None):
    """The frozen scipy distribution for --distribution NAME --distribution-params P..."""
    values = check_params(name, params)
    from scipy import stats

    return DISTRIBUTIONS[name].frozen(stats, *values)


def popularity(models, name, params, rng):
    """Normalised popularity weights, one draw per model."""
    import numpy as np

    values = check_params(name, params)
    law = distribution(name, values)
    with np.errstate(all="ignore"):
        try:
            draws = np.asarray(law.rvs(size=len(models), random_state=rng), dtype=float)
        except ValueError as exc:  # numpy's own bounds, e.g. Poisson's 'lam value too large'
            raise ReproError(f"--distribution-params: out of range for {name}: {exc}") from None
        if not np.isfinite(draws).all():  # finite parameters whose draws overflow (or are 0 / 0)
            raise ReproError(f"--distribution-params: out of range for {name}: {values} gives draws "
                             "that are not finite numbers")
        if draws.max() <= 0:
            return np.full(len(models), 1 / len(models))  # e.g. every Poisson draw was 0: no model is preferred
        draws = draws / draws.max()  # scaled first: a sum of draws near the largest float overflows
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
    import numpy as np  # here, not at the top: the workflow's config check imports this module

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
