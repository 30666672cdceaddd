"""Which device the model store and its clients use: `cpu`, `gpu`, or `auto` (the GPU where one can
be used). Apart from the runtimes (onnxruntime and onnx: most of a second to import), which only a
GPU's check needs: the store's start and status, and every run on the CPU, go without them."""

from repro.errors import ReproError


def resolve_device(requested):
    """'cpu', 'gpu', or for 'auto' the GPU when an NVIDIA device and PyTorch with CUDA are both present."""
    from repro.trims.modelstore import DEVICE_CHOICES

    if requested not in DEVICE_CHOICES:
        raise ReproError(f"--device must be one of {', '.join(DEVICE_CHOICES)}; got {requested!r}")
    if requested == "cpu":
        return "cpu"
    from repro.trims.cuda import driver
    from repro.trims.runtimes import GpuRuntime

    try:
        driver()
        GpuRuntime()
    except ReproError as exc:
        if requested == "auto":
            return "cpu"
        raise ReproError(f"--device gpu: {exc}") from None
    return "gpu"
