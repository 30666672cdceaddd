"""Uncertainty of repeated measurements: the intervals the tables, figures and checks report."""

import math

import numpy as np

from repro.errors import ReproError

CONFIDENCE = 0.95
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_BATCH_VALUES = 1 << 22  # resampled values held at once (64 MiB of indices and values)


def mean_interval(values, confidence=CONFIDENCE):
    """Mean and Student-t confidence interval of the mean of independent repeats: (mean, low, high).

    One value gives a zero-width interval (nothing is known about the spread; captions say N).
    """
    values = np.asarray(values, float)
    if values.size == 0:
        raise ReproError("no values to summarise")
    mean = float(values.mean())
    if values.size == 1 or np.all(values == values[0]):
        return mean, mean, mean
    half = t_quantile(0.5 + confidence / 2, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size)
    return mean, float(mean - half), float(mean + half)


def t_quantile(q, df):
    """Student's t quantile: scipy.stats.t.ppf(q, df), the same function it calls. scipy.special is
    imported in a third of the time scipy.stats takes, which each table and summary command paid."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def bootstrap_interval(samples, statistic=np.median, confidence=CONFIDENCE, draws=BOOTSTRAP_DRAWS, seed=0):
    """Percentile bootstrap interval of `statistic` over `samples`: (value, low, high), seeded."""
    samples = np.asarray(samples, float)
    if samples.size == 0:
        raise ReproError("no samples to bootstrap")
    rng = np.random.default_rng(seed)
    # the draws a batch at a time: all at once took draws x samples indices and values (32 GB for a
    # million requests); one generator drawn in batches gives the same indices as drawn at once
    batch = max(1, BOOTSTRAP_BATCH_VALUES // samples.size)
    resampled = np.concatenate([statistic(samples[rng.integers(0, samples.size, (min(batch, draws - done), samples.size))],
                                          axis=1) for done in range(0, draws, batch)])
    low, high = np.percentile(resampled, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(statistic(samples)), float(low), float(high)


def verdict(reference, low, high, rounding=0.0):
    """Is `reference`, give or take `rounding` (what rounding it for print may have moved it), inside
    [low, high]? Returns (inside, distance): how far outside beyond the rounding, 0 when inside."""
    if low - rounding <= reference <= high + rounding:
        return True, 0.0
    return False, float(reference - rounding - high if reference > high else reference + rounding - low)
