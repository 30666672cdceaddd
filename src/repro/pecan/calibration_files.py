"""Calibrations as `repro pecan calibrate` writes them, read and checked: what a run, a figure's
caption and a status check read (light: no numpy, for a check that runs before every run)."""

import sys

from repro.errors import ReproError
from repro.fsutil import first_named_twice, read_json


def load_calibrations(paths):
    """{pipeline: calibration} from `repro pecan calibrate` outputs; ReproError naming a file that is not one."""
    twice = first_named_twice(paths)
    if twice is not None:  # the same pipeline's file twice, where another pipeline's may be missing
        raise ReproError(f"--calibration {twice}: named twice; expected each pipeline's calibration once")
    result = {}
    for path in paths:
        data = read_json(path, "the output of `repro pecan calibrate`", f"--calibration {path}")
        missing = _not_a_calibration(data)
        if missing:
            raise ReproError(f"--calibration {path}: not a calibration: {missing} (expected the output of "
                             "`repro pecan calibrate`)")
        _check_numbers(data, f"--calibration {path}")
        earlier = result.get(data["pipeline"])
        if earlier is not None and earlier[1] != data:  # which of two calibrations a run used would be the last named
            raise ReproError(f"--calibration {path}: a second calibration of pipeline {data['pipeline']!r}, other than "
                             f"{earlier[0]}'s; expected one per pipeline")
        result[data["pipeline"]] = (path, data)
    return {pipeline: data for pipeline, (_, data) in result.items()}


def _not_a_calibration(data):
    """The first part of a calibration's layout that `data` lacks, named; None where it has them all."""
    if not isinstance(data, dict):
        return "expected an object"
    if not isinstance(data.get("pipeline"), str):
        return "pipeline: expected the pipeline's name"
    if not isinstance(data.get("autoorder_saving"), (int, float)):
        return "autoorder_saving: expected a number"
    for order in ("declared", "autoorder"):
        if not isinstance(data.get(order), dict):
            return f"{order}: expected an object (the {order} order's costs)"
        for key in ("cpu_s_per_element", "bytes_out_per_element"):
            if key not in data[order]:
                return f"{order}.{key}: missing"
    return None


def _finite(value):
    """A number within float's range: compared, not math.isfinite, since an integer JSON holds may lie
    past it (10**400), where math.isfinite raised OverflowError."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -sys.float_info.max <= value <= sys.float_info.max


def _positive(value):
    return _finite(value) and value > 0


# CPU seconds per element as a calibration measures them: no pipeline here takes under a nanosecond or
# an hour an element, and the tf.data engine's scale divides by the cost squared (derive_scale),
# which past these is 0 or infinite
MIN_CPU_S, MAX_CPU_S = 1e-9, 3600.0
CPU_S_EXPECTED = f"a positive number of CPU seconds, {MIN_CPU_S:g} to {MAX_CPU_S:g}"


def _cpu_seconds(value):
    return _positive(value) and MIN_CPU_S <= value <= MAX_CPU_S


# a cost per reference kernel: a CPU cost in the range above over a kernel's, itself in that range
MIN_KERNELS, MAX_KERNELS = MIN_CPU_S / MAX_CPU_S, MAX_CPU_S / MIN_CPU_S


def _kernels(value):
    return _positive(value) and MIN_KERNELS <= value <= MAX_KERNELS


# bytes an element leaves its pipeline with: a run divides them by the network's bandwidth, so past a
# terabyte (RetinaNet's float32 image is 4.9 MB) an element's transfer outlasts any run it is part of
MAX_BYTES = 1e12
BYTES_EXPECTED = f"a positive number of bytes, at most {MAX_BYTES:g}"


def _bytes(value):
    return _positive(value) and value <= MAX_BYTES


def _check_numbers(data, label):
    """A calibration's costs divide the work a run simulates: each must be a positive finite number
    (a zero cost would make the preprocessing infinitely fast, a zero size the network), a CPU cost
    one a scale can be derived from."""
    for order in ("declared", "autoorder"):
        for key, fits, expected in (("cpu_s_per_element", _cpu_seconds, CPU_S_EXPECTED),
                                    ("bytes_out_per_element", _bytes, BYTES_EXPECTED)):
            if not fits(data[order][key]):
                raise ReproError(f"{label}: {order}.{key} is {data[order][key]!r}; expected {expected}")
        ratio = data[order].get("per_reference_kernel")  # the local preset's cost: this ratio times one scale
        if "per_reference_kernel" in data[order] and not _kernels(ratio):
            raise ReproError(f"{label}: {order}.per_reference_kernel is {ratio!r:.40}; expected a positive number of "
                             f"reference kernels, {MIN_KERNELS:.3g} to {MAX_KERNELS:.3g}")
        drawn = data[order].get("element_cpu_s")
        if "element_cpu_s" in data[order] and not (isinstance(drawn, list) and drawn and all(map(_cpu_seconds, drawn))):
            raise ReproError(f"{label}: {order}.element_cpu_s: expected a non-empty list, each element's cost "
                             f"{CPU_S_EXPECTED}")
    # a bootstrap draw picks the same elements from both orders' lists (calibrate.resample)
    lengths = [len(data[order].get("element_cpu_s", ())) for order in ("declared", "autoorder")]
    if lengths[0] != lengths[1]:
        raise ReproError(f"{label}: declared.element_cpu_s has {lengths[0]} element(s), autoorder.element_cpu_s "
                         f"{lengths[1]}; expected both orders measured on the same elements")
    kernel = data.get("reference_kernel")  # the local preset's unit (per_reference_kernel's divisor)
    if "reference_kernel" in data and not (isinstance(kernel, dict) and _cpu_seconds(kernel.get("cpu_s"))):
        raise ReproError(f"{label}: reference_kernel.cpu_s: expected {CPU_S_EXPECTED}")
    tf_ops = data.get("tf_ops")  # the tf.data engine derives its scale from it
    if tf_ops is not None and not (isinstance(tf_ops, dict) and isinstance(tf_ops.get("declared"), dict)
                                   and _cpu_seconds(tf_ops["declared"].get("cpu_s_per_element"))):
        raise ReproError(f"{label}: tf_ops.declared.cpu_s_per_element: expected {CPU_S_EXPECTED}")
    saving = data["autoorder_saving"]
    if not _finite(saving) or saving >= 1:
        raise ReproError(f"{label}: autoorder_saving is {saving!r}; expected a finite fraction below 1")
