"""Memory monitor: NVML samples of every visible GPU, and host memory (the machine's, this client's
with its child processes', and the model store's), with or without a GPU.

Samples every 50 ms in a background thread. NVML's PCIe throughput queries block for about
20 ms each (measured on an H200), so they are read on their own thread at a slower pace and
the latest value is attached to each sample, keeping the 50 ms interval.
"""

import csv
import threading
import time

import psutil

from repro.fsutil import atomic_path, write_json

# The original TRIMS tools' peak/average table (rai-project/trims-tools, pkg/gpuinfo): its column, our field.
TABLE_COLUMNS = [("power", "power_mw"), ("temperature", "temperature_c"), ("gpu_utilization", "gpu_util_percent"),
                 ("memory_utilization", "memory_util_percent"), ("memory_used", "memory_used_bytes"),
                 ("memory_free", "memory_free_bytes"), ("clock_core", "sm_clock_mhz"),
                 ("clock_memory", "memory_clock_mhz"), ("pci_throughput_rx", "pcie_rx_kbps"),
                 ("pci_throughput_tx", "pcie_tx_kbps"), ("num_processes", "processes"),
                 ("host_used", "host_used_bytes"), ("client_rss", "client_rss_bytes"), ("store_rss", "store_rss_bytes")]
FIELDS = ["time_s", "device", "memory_used_bytes", "memory_free_bytes", "gpu_util_percent", "memory_util_percent",
          "power_mw", "temperature_c", "sm_clock_mhz", "memory_clock_mhz", "pcie_rx_kbps", "pcie_tx_kbps",
          "processes", "host_used_bytes", "client_rss_bytes", "store_rss_bytes"]


class MemoryMonitor:
    def __init__(self, interval_s=0.05, store_pid=None, log=print):
        self.interval_s, self.store_pid, self.log = interval_s, store_pid, log
        self.samples, self.devices, self.nvml = [], [], None
        self._stop = threading.Event()
        self._pcie = {}
        self._threads = []

    def _open_nvml(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.devices = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # any NVML failure means: no GPU to watch
            self.log(f"memory monitor: no NVIDIA driver or GPU available ({exc}); recording host memory only")
            self.nvml, self.devices = None, []

    def _store_rss(self):
        if self.store_pid is None:
            return None
        try:
            return psutil.Process(self.store_pid).memory_info().rss
        except psutil.Error:
            return None

    def _host_sample(self):
        """The machine's used memory and this client's resident memory, its child processes included."""
        client = psutil.Process()
        rss = client.memory_info().rss
        for child in client.children(recursive=True):
            try:
                rss += child.memory_info().rss
            except psutil.Error:  # a child that just exited
                pass
        return {"host_used_bytes": psutil.virtual_memory().used, "client_rss_bytes": rss,
                "store_rss_bytes": self._store_rss()}

    def _read(self, query, *args):
        """One NVML query; None where the device or driver does not support it (virtualised GPUs often don't)."""
        try:
            return query(*args)
        except self.nvml.NVMLError:
            return None

    def _device_sample(self, index, handle):
        nv, read = self.nvml, self._read
        memory = read(nv.nvmlDeviceGetMemoryInfo, handle)
        util = read(nv.nvmlDeviceGetUtilizationRates, handle)
        processes = read(nv.nvmlDeviceGetComputeRunningProcesses, handle)
        rx, tx = self._pcie.get(index, (None, None))
        return {
            "device": index, "memory_used_bytes": memory and memory.used, "memory_free_bytes": memory and memory.free,
            "gpu_util_percent": util and util.gpu, "memory_util_percent": util and util.memory,
            "power_mw": read(nv.nvmlDeviceGetPowerUsage, handle),
            "temperature_c": read(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
            "memory_clock_mhz": read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
            "pcie_rx_kbps": rx, "pcie_tx_kbps": tx,
            "processes": None if processes is None else len(processes),
        }

    def _sample_loop(self):
        start = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic() - start
            host = self._host_sample()
            if self.devices:
                for index, handle in enumerate(self.devices):
                    self.samples.append({"time_s": now, **self._device_sample(index, handle), **host})
            else:
                self.samples.append({"time_s": now, "device": None, **host})
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - start - now)))

    def _pcie_loop(self):
        nv = self.nvml
        while not self._stop.is_set():
            for index, handle in enumerate(self.devices):
                self._pcie[index] = (self._read(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_RX_BYTES),
                                     self._read(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_TX_BYTES))
            self._stop.wait(0.2)

    def __enter__(self):
        self._open_nvml()
        targets = [self._sample_loop] + ([self._pcie_loop] if self.devices else [])
        self._threads = [threading.Thread(target=t, daemon=True) for t in targets]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self.nvml is not None:
            self.nvml.nvmlShutdown()

    def summary(self):
        """Peak and average per device (and of the store's RSS)."""
        result = {"samples": len(self.samples), "interval_s": self.interval_s, "devices": {}}
        by_device = {}
        for sample in self.samples:
            by_device.setdefault(sample["device"], []).append(sample)
        for device, samples in by_device.items():
            stats = {}
            for key in FIELDS[2:]:
                values = [s[key] for s in samples if s.get(key) is not None]
                if values:
                    stats[key] = {"peak": max(values), "average": sum(values) / len(values)}
            result["devices"]["host" if device is None else str(device)] = stats
        return result

    def table(self):
        """The original's table: per device a peak and an average row, '---' between devices; columns
        no sample has are left out (the GPU's on a machine without one)."""
        devices = self.summary()["devices"]
        columns = [(name, key) for name, key in TABLE_COLUMNS if any(key in stats for stats in devices.values())]
        header = ["device_idx", "time_stamp", *(name for name, _ in columns)]
        rows = []
        for device, stats in devices.items():
            if rows:
                rows.append(["---"] * len(header))
            for kind in ("peak", "average"):
                rows.append([device, kind, *(_human(key, stats[key][kind]) if key in stats else "" for _, key in columns)])
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows])

    def write(self, csv_path, summary_path):
        with atomic_path(csv_path) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.samples)
        write_json(summary_path, self.summary())


def _human(key, value):
    if key.endswith("_bytes"):
        return f"{value / (1 << 20):.1f} MiB"
    return f"{value:.1f}" if isinstance(value, float) else str(value)
