"""GPU memory for the model store through the CUDA driver API (libcuda, which every NVIDIA driver installs).

Only what the store needs: device memory, host-to-device copies and inter-process handles, the
mechanism the original TrIMS store used to hand GPU-resident weights to clients without a copy
(cudaIpcGetMemHandle / cudaIpcOpenMemHandle). ctypes keeps this free of a CUDA toolkit dependency.
All calls run in the device's primary context, the one CUDA runtimes (PyTorch, onnxruntime) use,
so pointers from here are valid for them too.
"""

import ctypes
import threading

from repro.errors import ReproError

IPC_HANDLE_BYTES = 64
_IPC_LAZY_ENABLE_PEER_ACCESS = 1


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


class Driver:
    """One CUDA device's primary context; every method may be called from any thread."""

    def __init__(self, device=0):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise ReproError(f"no NVIDIA driver: cannot load libcuda.so.1 ({exc})") from None
        self._check(self.lib.cuInit(0), "cuInit")
        count = ctypes.c_int()
        self._check(self.lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        if not 0 <= device < count.value:
            raise ReproError(f"CUDA device {device} does not exist ({count.value} visible)")
        self.device = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(self.device), device), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device), "cuDevicePrimaryCtxRetain")
        self._current = threading.local()
        self._open_ipc = getattr(self.lib, "cuIpcOpenMemHandle_v2", None) or self.lib.cuIpcOpenMemHandle

    def _check(self, code, call):
        if code != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(code, ctypes.byref(text))
            raise ReproError(f"CUDA {call} failed: {(text.value or b'error %d' % code).decode()}")

    def _enter(self):
        # the current context is per thread; the store serves each client on its own thread
        if not getattr(self._current, "set", False):
            self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            self._current.set = True

    def memory(self):
        """(free, total) bytes of device memory."""
        self._enter()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value, total.value

    def allocate(self, size):
        self._enter()
        pointer = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), f"cuMemAlloc({size} bytes)")
        return pointer.value

    def free(self, pointer):
        self._enter()
        self._check(self.lib.cuMemFree_v2(ctypes.c_uint64(pointer)), "cuMemFree")

    def copy_to_device(self, pointer, host_buffer, size):
        """Copy `size` bytes from a writable host buffer (bytearray, memoryview, numpy) to device memory."""
        self._enter()
        host = (ctypes.c_char * size).from_buffer(host_buffer)
        self._check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(pointer), host, ctypes.c_size_t(size)), "cuMemcpyHtoD")

    def copy_to_host(self, host_buffer, pointer, size):
        """Copy `size` bytes of device memory into a writable host buffer."""
        self._enter()
        host = (ctypes.c_char * size).from_buffer(host_buffer)
        self._check(self.lib.cuMemcpyDtoH_v2(host, ctypes.c_uint64(pointer), ctypes.c_size_t(size)), "cuMemcpyDtoH")

    def export(self, pointer):
        """An inter-process handle for an allocation, as hex text."""
        self._enter()
        handle = _IpcHandle()
        self._check(self.lib.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(pointer)), "cuIpcGetMemHandle")
        return bytes(handle).hex()

    def open(self, handle_hex):
        """Map another process's allocation into this one; returns the device pointer."""
        self._enter()
        handle = _IpcHandle.from_buffer_copy(bytes.fromhex(handle_hex))
        pointer = ctypes.c_uint64()
        self._check(self._open_ipc(ctypes.byref(pointer), handle, _IPC_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        return pointer.value

    def close(self, pointer):
        self._enter()
        self._check(self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(pointer)), "cuIpcCloseMemHandle")


_driver = None
_driver_lock = threading.Lock()


def driver():
    """The process's Driver for device 0 (created on first use)."""
    global _driver
    with _driver_lock:
        if _driver is None:
            _driver = Driver()
        return _driver


class Mappings:
    """A process's open inter-process handles, counted: CUDA maps a handle once per process, so
    concurrent requests for the same model share one mapping, closed when the last one ends."""

    def __init__(self):
        self._lock = threading.Lock()
        self._open = {}  # handle -> [pointer, users]

    def open(self, handle):
        with self._lock:
            if handle not in self._open:
                self._open[handle] = [driver().open(handle), 0]
            self._open[handle][1] += 1
            return self._open[handle][0]

    def close(self, handle):
        with self._lock:
            entry = self._open[handle]
            entry[1] -= 1
            if entry[1] == 0:
                del self._open[handle]
                driver().close(entry[0])
